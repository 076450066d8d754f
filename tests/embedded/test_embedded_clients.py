"""Real Kafka clients against the `kafka_broker` fixture of the pytest plugin (kbroker_pytest.py)."""
import time

import pytest

TIMEOUT_S = 20.0


def test_confluent_kafka_round_trip(kafka_broker):
    from confluent_kafka import Consumer, Producer
    kafka_broker.create_topic("orders", partitions=2)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    for i in range(10):
        producer.produce("orders", key=f"k{i % 3}", value=f"v{i}")
    assert producer.flush(TIMEOUT_S) == 0

    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap_servers, "group.id": "g1",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["orders"])
    seen = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(seen) < 10 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.append(message.value())
            consumer.commit(message, asynchronous=False)
    consumer.close()
    assert sorted(seen) == sorted(f"v{i}".encode() for i in range(10))
    # what the helpers see agrees with the client
    records = kafka_broker.read_all("orders")
    assert sorted(r.value for r in records) == sorted(seen)
    for partition in (0, 1):
        count = sum(1 for r in records if r.partition == partition)
        if count:
            assert kafka_broker.wait_for_committed("g1", "orders", count, partition=partition) == count


def test_kafka_python_round_trip(kafka_broker):
    from kafka import KafkaConsumer, KafkaProducer
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers)
    for i in range(5):
        producer.send("events", key=b"k", value=f"e{i}".encode())    # auto-created
    producer.flush(TIMEOUT_S)
    producer.close()

    consumer = KafkaConsumer("events", bootstrap_servers=kafka_broker.bootstrap_servers,
                             group_id="g2", auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=int(TIMEOUT_S * 1000))
    values = []
    for message in consumer:
        values.append(message.value)
        if len(values) == 5:
            break
    consumer.commit()
    consumer.close()
    assert values == [f"e{i}".encode() for i in range(5)]
    assert kafka_broker.wait_for_committed("g2", "events", 5) == 5


async def test_aiokafka_round_trip(kafka_broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    await kafka_broker.aio.create_topic("clicks", partitions=1)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers)
    await producer.start()
    try:
        for i in range(5):
            await producer.send_and_wait("clicks", f"c{i}".encode(), key=b"user")
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer("clicks", bootstrap_servers=kafka_broker.bootstrap_servers,
                                group_id="g3", auto_offset_reset="earliest",
                                enable_auto_commit=False)
    await consumer.start()
    try:
        values = []
        while len(values) < 5:
            batch = await consumer.getmany(timeout_ms=int(TIMEOUT_S * 1000))
            assert batch, "no records within the timeout"
            for messages in batch.values():
                values.extend(m.value for m in messages)
        await consumer.commit()
        # the awaitable helper leaves this loop free while it waits
        assert await kafka_broker.aio.wait_for_committed("g3", "clicks", 5) == 5
    finally:
        await consumer.stop()
    assert values == [f"c{i}".encode() for i in range(5)]
    assert [r.value for r in await kafka_broker.aio.read_all("clicks")] == values


def test_helpers_produce_and_read_back(kafka_broker):
    metadata = kafka_broker.produce("plain", [b"a", "b", (b"k", b"v"), ("k", "v", [("h", "x")])])
    assert [m.offset for m in metadata] == [0, 1, 2, 3]
    records = kafka_broker.read_all("plain")
    assert [(r.key, r.value, r.headers) for r in records] == [
        (None, b"a", []), (None, b"b", []), (b"k", b"v", []), (b"k", b"v", [("h", b"x")])]
    assert kafka_broker.read_all("plain") == records      # reading does not consume


def test_read_all_returns_every_record_past_a_poll(kafka_broker):
    """More records than one poll returns (max.poll.records, 500) in each partition: all come
    back, in order (only the first ~500 of a partition's fetch did)."""
    kafka_broker.create_topic("many", partitions=2)
    kafka_broker.produce("many", [b"%d" % i for i in range(3000)], partition=0)
    kafka_broker.produce("many", [b"%d" % i for i in range(1200)], partition=1)
    records = kafka_broker.read_all("many")
    assert [(r.partition, r.value) for r in records] == (
        [(0, b"%d" % i) for i in range(3000)] + [(1, b"%d" % i) for i in range(1200)])


def test_produce_refuses_what_is_not_records_at_once(kafka_broker):
    """A string, bytes or a dict as `records` would be a record per character, byte or key; a
    value of another type than str or bytes waited for ever (its batch failed to encode in
    the sender, and no record of it was ever answered)."""
    for records in ("hello", b"hello", {"k": "v"}):
        with pytest.raises(TypeError, match="records must be a list"):
            kafka_broker.produce("typed", records)
    with pytest.raises(TypeError, match="a record's value must be bytes or None, not list"):
        kafka_broker.produce("typed", [["k", "v"]])
    with pytest.raises(TypeError, match="a record's value must be bytes or None, not int"):
        kafka_broker.produce("typed", [1])
    kafka_broker.produce("typed", [b"fine"])
    assert [r.value for r in kafka_broker.read_all("typed")] == [b"fine"]
    with pytest.raises(TypeError):              # checked before any of the list is sent
        kafka_broker.produce("typed", [b"written?", 2])
    assert [r.value for r in kafka_broker.read_all("typed")] == [b"fine"]


def test_wait_for_committed_times_out_with_the_last_offset(kafka_broker):
    kafka_broker.create_topic("quiet")
    with pytest.raises(TimeoutError, match="committed None"):
        kafka_broker.wait_for_committed("nobody", "quiet", 1, timeout=0.2)
