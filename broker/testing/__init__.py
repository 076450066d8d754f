"""Real Kafka infrastructure for tests (yours and ours): a ZooKeeper server (zookeeper.py) and a
cluster of broker processes with fault injection (cluster.py), both ended by a reaper process
(reaper.py) if the test's process dies without stopping them. The `kafka_cluster` fixture of
the pytest plugin (kbroker_pytest.py) is built on them."""
