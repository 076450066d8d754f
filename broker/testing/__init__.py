"""Real Kafka infrastructure for tests (yours and ours): a ZooKeeper server (zookeeper.py) and a
cluster of broker processes with fault injection (cluster.py). The `kafka_cluster` fixture of
the pytest plugin (kbroker_pytest.py) is built on them."""
