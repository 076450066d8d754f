"""Storage engine: Apache Kafka's on-disk log format (segments, indexes, checkpoints)."""
