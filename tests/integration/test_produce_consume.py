"""Every client x every codec: produce 100,000 messages, consume them all back.

Each run writes N messages with keys, headers and timestamps to a 3-partition topic with one real
client (confluent-kafka/librdkafka, kafka-python, aiokafka, Debian's kcat) and one compression
codec, then consumes the topic from the beginning with the same client and checks, for every
message: it came back exactly once, in order within its partition, with its key, headers and
timestamp, in the partition Java's default partitioner picks for its key (murmur2, checked with
kafka-python's independent implementation).
"""
import asyncio
import functools
import subprocess
import time

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

N = 100_000
PARTITIONS = 3
BASE_TS = 1_700_000_000_000
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
KCAT = "/usr/bin/kcat"
DEADLINE_S = 60
# kafka-python is pure Python on both sides (~10x slower than the others per message): 100,000
# messages x 5 codecs would take about a minute, so it moves 100,000 with lz4 and 20,000 with
# each other codec.
COUNTS = {("kafka-python", codec): 20_000 for codec in CODECS if codec != "lz4"}


def key_of(i: int) -> bytes:
    return b"key-%d" % (i % 1009)


def value_of(i: int) -> bytes:
    return b"%d:payload-%d" % (i, i * 7)


def headers_of(i: int) -> list:
    return [("seq", b"%d" % i), ("origin", b"test")]


@functools.lru_cache(maxsize=None)
def java_partition(key: bytes) -> int:
    from kafka.partitioner.default import murmur2
    return (murmur2(key) & 0x7FFFFFFF) % PARTITIONS


def seq_of(value: bytes) -> int:
    return int(value.split(b":", 1)[0])


def check(messages, count, *, timestamps=True, header_check=True):
    """messages: (partition, offset, key, value, headers list[(str, bytes)], timestamp)."""
    assert len(messages) == count, f"got {len(messages)} messages, expected {count}"
    seen = set()
    last = {}
    for partition, offset, key, value, headers, timestamp in messages:
        i = seq_of(value)
        assert i not in seen, f"message {i} twice"
        seen.add(i)
        assert value == value_of(i)
        assert key == key_of(i)
        assert partition == java_partition(key), f"message {i} in partition {partition}"
        prev = last.get(partition)
        if prev is not None:
            assert offset > prev[0] and i > prev[1], f"out of order in partition {partition}"
        last[partition] = (offset, i)
        if header_check:
            assert headers == headers_of(i), f"headers of {i}: {headers}"
        if timestamps:
            assert timestamp == BASE_TS + i
    assert seen == set(range(count))


@pytest.fixture
def broker(broker_process):
    return broker_process()


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(timeout=15)


# -- confluent-kafka (librdkafka) -------------------------------------------------------------

def confluent_produce(bootstrap, topic, codec, count=N):
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                         "linger.ms": 20, "partitioner": "murmur2_random",
                         "batch.num.messages": 10000})
    # No per-message delivery callback (it costs as much as the produce call): a failed
    # delivery shows up as a missing message in the check.
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value_of(i), key_of(i), headers=headers_of(i),
                                 timestamp=BASE_TS + i)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 5000 == 0:
            producer.poll(0)
    assert producer.flush(DEADLINE_S) == 0


def confluent_consume(bootstrap, topic, count=N, start=0, partitions=PARTITIONS):
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "auto.offset.reset": "error"})
    consumer.assign([TopicPartition(topic, p, start) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(out) < count and time.monotonic() < deadline:
            for msg in consumer.consume(10000, 1.0):
                assert msg.error() is None, msg.error()
                out.append((msg.partition(), msg.offset(), msg.key(), msg.value(),
                            list(msg.headers() or []), msg.timestamp()[1]))
    finally:
        consumer.close()
    return out


# -- kafka-python -----------------------------------------------------------------------------

def kafka_python_produce(bootstrap, topic, codec, count=N):
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=bootstrap,
                             compression_type=None if codec == "none" else codec,
                             linger_ms=20, batch_size=256 * 1024, acks=1)
    futures = [producer.send(topic, key=key_of(i), value=value_of(i), headers=headers_of(i),
                             timestamp_ms=BASE_TS + i) for i in range(count)]
    producer.flush(DEADLINE_S)
    for future in futures[::997] + futures[-1:]:
        future.get(timeout=1)
    producer.close()


def kafka_python_consume(bootstrap, topic, count=N):
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             group_id=None, auto_offset_reset="earliest",
                             max_partition_fetch_bytes=4 * 1024 * 1024)
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    out = []
    deadline = time.monotonic() + DEADLINE_S
    while len(out) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=1000, max_records=20000).values():
            out.extend((r.partition, r.offset, r.key, r.value, list(r.headers), r.timestamp)
                       for r in records)
    consumer.close()
    return out


# -- aiokafka ---------------------------------------------------------------------------------

async def _aiokafka_produce(bootstrap, topic, codec, count):
    from aiokafka import AIOKafkaProducer
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap,
                                compression_type=None if codec == "none" else codec,
                                linger_ms=20, max_batch_size=256 * 1024, acks=1)
    await producer.start()
    try:
        futures = []
        for i in range(count):
            futures.append(await producer.send(topic, key=key_of(i), value=value_of(i),
                                               headers=headers_of(i),
                                               timestamp_ms=BASE_TS + i))
        await asyncio.wait_for(asyncio.gather(*futures), DEADLINE_S)
    finally:
        await producer.stop()


async def _aiokafka_consume(bootstrap, topic, count):
    from aiokafka import AIOKafkaConsumer, TopicPartition
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest",
                                max_partition_fetch_bytes=4 * 1024 * 1024)
    await consumer.start()
    out = []
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        await consumer.seek_to_beginning()
        deadline = time.monotonic() + DEADLINE_S
        while len(out) < count and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=1000, max_records=20000)
            for records in batches.values():
                out.extend((r.partition, r.offset, r.key, r.value, list(r.headers),
                            r.timestamp) for r in records)
    finally:
        await consumer.stop()
    return out


def aiokafka_produce(bootstrap, topic, codec, count=N):
    asyncio.run(_aiokafka_produce(bootstrap, topic, codec, count))


def aiokafka_consume(bootstrap, topic, count=N):
    return asyncio.run(_aiokafka_consume(bootstrap, topic, count))


# -- kcat (Debian's, librdkafka 2.0.2) --------------------------------------------------------

def kcat_produce(bootstrap, topic, codec, count=N):
    # kcat cannot set per-message headers or timestamps: one header for all, CreateTime = now.
    lines = b"".join(key_of(i) + b"\t" + value_of(i) + b"\n" for i in range(count))
    subprocess.run([KCAT, "-b", bootstrap, "-P", "-t", topic, "-K", "\t", "-z", codec,
                    "-H", "origin=kcat", "-X", "topic.partitioner=murmur2_random",
                    "-X", "linger.ms=20"],
                   input=lines, check=True, timeout=DEADLINE_S, capture_output=True)


def kcat_consume(bootstrap, topic, count=N):
    result = subprocess.run([KCAT, "-b", bootstrap, "-C", "-t", topic, "-o", "beginning",
                             "-e", "-q", "-f", "%p\t%o\t%k\t%s\t%T\t%h\n"],
                            check=True, timeout=DEADLINE_S, capture_output=True)
    out = []
    for line in result.stdout.splitlines():
        partition, offset, key, value, timestamp, headers = line.split(b"\t")
        pairs = [h.split(b"=", 1) for h in headers.split(b",") if h]
        out.append((int(partition), int(offset), key, value,
                    [(name.decode(), val) for name, val in pairs], int(timestamp)))
    return out


CLIENTS = {
    "confluent": (confluent_produce, confluent_consume),
    "kafka-python": (kafka_python_produce, kafka_python_consume),
    "aiokafka": (aiokafka_produce, aiokafka_consume),
    "kcat": (kcat_produce, kcat_consume),
}


@pytest.mark.parametrize("client", list(CLIENTS))
def test_roundtrip_every_codec(broker, client):
    """One broker per client (start-up costs ~1 s); each codec gets its own topic."""
    produce, consume = CLIENTS[client]
    for codec in CODECS:
        count = COUNTS.get((client, codec), N)
        topic = f"rt-{client}-{codec}"
        create_topic(broker.bootstrap, topic)
        started = int(time.time() * 1000)
        produce(broker.bootstrap, topic, codec, count)
        messages = consume(broker.bootstrap, topic, count)
        try:
            if client == "kcat":
                check(messages, count, timestamps=False, header_check=False)
                assert all(m[4] == [("origin", b"kcat")] for m in messages)
                assert all(started - 1000 <= m[5] <= time.time() * 1000 + 1000
                           for m in messages)
            else:
                check(messages, count)
        except AssertionError as exc:
            raise AssertionError(f"{client} with {codec}: {exc}") from exc
