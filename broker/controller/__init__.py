"""The controller of a ZooKeeper-mode cluster (Kafka 3.9's KafkaController), and its pure parts:
replica placement, the controller context and the partition/replica state machines."""
