"""The project's own asyncio Kafka client (used by the bin/ tools, test helpers and replication).

- ``ClusterClient`` (cluster.py): bootstrap, metadata, one pipelined connection per broker
  (connection.py), leader routing, retries on retriable errors.
- ``Admin`` (admin.py): topics, configs, offsets, records, log dirs, groups.
- ``Producer`` (producer.py): Kafka's default partitioner, batching per partition, compression.
- ``Consumer`` (consumer.py): assign or subscribe with group membership, fetch, commit.
- Assignors (assignors.py) and the default partitioner (partitioner.py) are pure functions.
"""
