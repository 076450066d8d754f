"""Kafka's default partitioner: murmur2 values from Kafka's own unit tests, and kafka-python agrees."""
import random

from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from broker.client.partitioner import StickyPartitionCache, murmur2, partition_for_key

# Values Apache Kafka's UtilsTest asserts for Utils.murmur2.
KAFKA_CASES = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_murmur2_matches_kafka():
    for data, expected in KAFKA_CASES.items():
        assert murmur2(data) == expected


def test_murmur2_matches_kafka_python_on_random_keys():
    rng = random.Random(1)
    for _ in range(300):
        key = rng.randbytes(rng.randint(0, 40))
        assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key) & 0xFFFFFFFF
        assert partition_for_key(key, 7) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % 7


def test_sticky_partition_moves_on_after_batch_size_bytes():
    """Java's BuiltInPartitioner (KIP-794): the same partition until batch.size bytes went to
    it, then another, one with a leader when the metadata says which."""
    cache = StickyPartitionCache(random.Random(3))
    first = cache.partition("t", 5)
    for _ in range(9):
        cache.record("t", 5, first, 100, 1000)
        assert cache.partition("t", 5) == first
    cache.record("t", 5, first, 100, 1000)                 # the 1000th byte
    second = cache.partition("t", 5)
    assert second != first
    for _ in range(20):
        cache.record("t", 5, cache.partition("t", 5, {1, 3}), 1000, 1000, {1, 3})
        assert cache.partition("t", 5, {1, 3}) in (1, 3)
    assert cache.partition("u", 1) == 0
