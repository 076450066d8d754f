"""Real clients against a broker subprocess: ListOffsets by timestamp, explicit offsets, long
polls, DeleteRecords and DescribeLogDirs through the admin clients (transactions:
test_transactions.py).

ListOffsets by timestamp and consuming from an explicit offset run with all four clients:
confluent-kafka, kafka-python, aiokafka and Debian's kcat (`-o <offset>`, `-o s@<timestamp>`).
"""
import asyncio
import subprocess
import time

import pytest

pytestmark = pytest.mark.integration

BASE_TS = 1_700_000_000_000
COUNT = 1000
STEP_MS = 10
KCAT = "/usr/bin/kcat"


def kcat_read(bootstrap, topic, offset_spec, count=None) -> list:
    """(offset, value, timestamp) read by kcat from partition 0 starting at `offset_spec`."""
    cmd = [KCAT, "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", offset_spec, "-e", "-q",
           "-f", "%o %s %T\\n"]
    if count is not None:
        cmd += ["-c", str(count)]
    result = subprocess.run(cmd, check=True, timeout=30, capture_output=True)
    return [tuple(int(x) for x in line.split()) for line in result.stdout.splitlines()]


def create_topic(bootstrap, name, partitions=1):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(timeout=15)


def produce_timed(bootstrap, topic, count=COUNT):
    """Message i has value b"i" and timestamp BASE_TS + i * STEP_MS, all in partition 0."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, b"%d" % i, partition=0, timestamp=BASE_TS + i * STEP_MS)
    assert producer.flush(30) == 0


@pytest.fixture
def broker(broker_process):
    return broker_process()


@pytest.fixture
def timed_topic(broker):
    create_topic(broker.bootstrap, "timed")
    produce_timed(broker.bootstrap, "timed")
    return "timed"


def test_offsets_for_times(broker, timed_topic):
    """ListOffsets by timestamp, earliest and latest, from all three client libraries."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x"})
    try:
        def lookup(timestamp):
            [found] = consumer.offsets_for_times([TopicPartition(timed_topic, 0, timestamp)],
                                                 timeout=10)
            return found.offset
        assert lookup(BASE_TS + 500 * STEP_MS) == 500
        assert lookup(BASE_TS + 500 * STEP_MS + 1) == 501
        assert lookup(BASE_TS - 10**6) == 0
        assert lookup(BASE_TS + COUNT * STEP_MS) == -1     # OFFSET_END: nothing that late
        low, high = consumer.get_watermark_offsets(TopicPartition(timed_topic, 0), timeout=10)
        assert (low, high) == (0, COUNT)
    finally:
        consumer.close()

    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    tp = KTP(timed_topic, 0)
    kconsumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
    try:
        found = kconsumer.offsets_for_times({tp: BASE_TS + 250 * STEP_MS - 3})[tp]
        assert (found.offset, found.timestamp) == (250, BASE_TS + 250 * STEP_MS)
        assert kconsumer.offsets_for_times({tp: BASE_TS + 10**9})[tp] is None
        assert kconsumer.beginning_offsets([tp]) == {tp: 0}
        assert kconsumer.end_offsets([tp]) == {tp: COUNT}
    finally:
        kconsumer.close()

    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    async def with_aiokafka():
        atp = ATP(timed_topic, 0)
        aconsumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap)
        await aconsumer.start()
        try:
            found = (await aconsumer.offsets_for_times({atp: BASE_TS + 900 * STEP_MS}))[atp]
            assert (found.offset, found.timestamp) == (900, BASE_TS + 900 * STEP_MS)
            assert await aconsumer.end_offsets([atp]) == {atp: COUNT}
        finally:
            await aconsumer.stop()

    asyncio.run(with_aiokafka())

    # The admin API (ListOffsets v7+): earliest, latest, by timestamp and max timestamp.
    from confluent_kafka.admin import AdminClient, OffsetSpec
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    tp = TopicPartition(timed_topic, 0)
    for spec, offset, timestamp in [
            (OffsetSpec.earliest(), 0, None), (OffsetSpec.latest(), COUNT, None),
            (OffsetSpec.for_timestamp(BASE_TS + 42 * STEP_MS - 5), 42, BASE_TS + 42 * STEP_MS),
            (OffsetSpec.max_timestamp(), COUNT - 1, BASE_TS + (COUNT - 1) * STEP_MS)]:
        info = admin.list_offsets({tp: spec})[tp].result(timeout=10)
        assert info.offset == offset, spec
        if timestamp is not None:
            assert info.timestamp == timestamp, spec

    # kcat: start at the first message at or after a timestamp.
    assert kcat_read(broker.bootstrap, timed_topic, f"s@{BASE_TS + 123 * STEP_MS - 1}", 2) == [
        (123, 123, BASE_TS + 123 * STEP_MS), (124, 124, BASE_TS + 124 * STEP_MS)]


def test_consume_from_explicit_offset(broker, timed_topic):
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTP
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x",
                         "enable.auto.commit": False})
    consumer.assign([CTP(timed_topic, 0, 700)])
    values = []
    deadline = time.monotonic() + 20
    while len(values) < COUNT - 700 and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 1.0):
            assert msg.error() is None
            values.append((msg.offset(), int(msg.value()), msg.timestamp()[1]))
    consumer.close()
    assert values == [(i, i, BASE_TS + i * STEP_MS) for i in range(700, COUNT)]

    from kafka import KafkaConsumer, TopicPartition
    tp = TopicPartition(timed_topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                             enable_auto_commit=False)
    consumer.assign([tp])
    consumer.seek(tp, 990)
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 10 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got.extend((r.offset, int(r.value)) for r in records)
    consumer.close()
    assert got == [(i, i) for i in range(990, COUNT)]

    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    async def with_aiokafka():
        atp = ATP(timed_topic, 0)
        aconsumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap,
                                     enable_auto_commit=False)
        await aconsumer.start()
        try:
            aconsumer.assign([atp])
            aconsumer.seek(atp, 950)
            out = []
            deadline = time.monotonic() + 20
            while len(out) < COUNT - 950 and time.monotonic() < deadline:
                for records in (await aconsumer.getmany(timeout_ms=500)).values():
                    out.extend((r.offset, int(r.value)) for r in records)
            return out
        finally:
            await aconsumer.stop()

    assert asyncio.run(with_aiokafka()) == [(i, i) for i in range(950, COUNT)]

    assert kcat_read(broker.bootstrap, timed_topic, "980") == [
        (i, i, BASE_TS + i * STEP_MS) for i in range(980, COUNT)]


def test_long_poll_delivers_new_messages_quickly(broker):
    """A consumer waiting at the end gets a new message without waiting out fetch.wait.max.ms."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    create_topic(broker.bootstrap, "live")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x",
                         "fetch.wait.max.ms": 5000, "enable.auto.commit": False})
    consumer.assign([TopicPartition("live", 0, 0)])
    assert consumer.consume(10, 1.0) == []            # parked in the purgatory now
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    latencies = []
    for i in range(5):
        sent = time.monotonic()
        producer.produce("live", b"%d" % i)
        producer.flush(10)
        msgs = []
        while not msgs and time.monotonic() - sent < 10:
            msgs = consumer.consume(1, 0.1)
        latencies.append(time.monotonic() - sent)
        assert msgs and int(msgs[0].value()) == i
    consumer.close()
    assert max(latencies) < 1.5, latencies           # well under fetch.wait.max.ms


def test_delete_records_and_describe_log_dirs(broker, timed_topic):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.delete_records([TopicPartition(timed_topic, 0, 400)])
    result = futures[TopicPartition(timed_topic, 0)].result(timeout=10)
    assert result.low_watermark == 400

    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
    assert consumer.beginning_offsets([KTP(timed_topic, 0)]) == {KTP(timed_topic, 0): 400}
    consumer.close()

    from kafka.admin import KafkaAdminClient
    kadmin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        response = kadmin.describe_log_dirs()
    finally:
        kadmin.close()
    text = repr(response)
    assert timed_topic in text and broker.log_dir in text


def test_idempotent_producer_gets_distinct_ids_across_restart(broker):
    """InitProducerId ids never repeat, even after the broker restarts."""
    from kafka import KafkaProducer
    create_topic(broker.bootstrap, "pids")

    def produce_one():
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True,
                                 acks="all")
        producer.send("pids", b"x").get(timeout=10)
        producer_id = producer._transaction_manager.producer_id_and_epoch.producer_id
        producer.close()
        return producer_id

    first = produce_one()
    second = produce_one()
    broker.restart()
    third = produce_one()
    assert len({first, second, third}) == 3
    assert third > second > first >= 0


def test_incremental_fetch_session_follows_assignment_changes(broker):
    """kafka-python keeps a KIP-227 session: changing the assignment sends added and forgotten
    partitions in incremental fetches; the data must keep flowing for exactly what is assigned."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    create_topic(broker.bootstrap, "s1", partitions=2)
    create_topic(broker.bootstrap, "s2", partitions=1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=1)

    def send(topic, partition, values):
        for v in values:
            producer.send(topic, b"%d" % v, partition=partition)
        producer.flush(10)

    def drain(consumer, want):
        got = {}
        deadline = time.monotonic() + 20
        while sum(map(len, got.values())) < want and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=300).items():
                got.setdefault((tp.topic, tp.partition), []).extend(int(r.value)
                                                                     for r in records)
        return got

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             fetch_max_wait_ms=200)
    try:
        send("s1", 0, range(0, 5))
        send("s1", 1, range(100, 105))
        consumer.assign([TopicPartition("s1", 0), TopicPartition("s1", 1)])
        assert drain(consumer, 10) == {("s1", 0): list(range(5)),
                                       ("s1", 1): list(range(100, 105))}
        consumer.assign([TopicPartition("s1", 0), TopicPartition("s2", 0)])  # forget s1-1
        send("s1", 0, range(5, 8))
        send("s1", 1, range(105, 108))
        send("s2", 0, range(200, 203))
        got = drain(consumer, 6)
        assert got.get(("s1", 0)) == [5, 6, 7]
        assert got.get(("s2", 0)) == [200, 201, 202]
        assert ("s1", 1) not in got
    finally:
        consumer.close()
        producer.close()


def test_oversized_message_gets_message_too_large(broker_process):
    """Clients allowed to send more than the broker's message.max.bytes get MESSAGE_TOO_LARGE
    back for that message; what was stored before stays, and the next small message goes in."""
    from confluent_kafka import Producer
    from kafka import KafkaProducer
    from kafka.errors import MessageSizeTooLargeError
    broker = broker_process(message_max_bytes=100_000)
    create_topic(broker.bootstrap, "limits")
    big = b"x" * 200_000

    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.max.bytes": 1_000_000,
                         "compression.type": "none", "linger.ms": 0})
    errors = []
    for value in (b"before", big, b"after"):
        producer.produce("limits", value, partition=0,
                         on_delivery=lambda err, msg: errors.append(err and err.name()))
        producer.flush(15)
    assert errors == [None, "MSG_SIZE_TOO_LARGE", None]

    # kafka-python treats the error as fatal for that producer (its own choice): a fresh one
    # sends the next message.
    for value in (big, b"after2"):
        kproducer = KafkaProducer(bootstrap_servers=broker.bootstrap,
                                  max_request_size=1_000_000, batch_size=1_000_000, linger_ms=0)
        try:
            future = kproducer.send("limits", value, partition=0)
            if value is big:
                with pytest.raises(MessageSizeTooLargeError):
                    future.get(timeout=15)
            else:
                future.get(timeout=15)
        finally:
            kproducer.close()

    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                             auto_offset_reset="earliest")
    consumer.assign([TopicPartition("limits", 0)])
    values = []
    deadline = time.monotonic() + 20
    while len(values) < 3 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            values.extend(r.value for r in records)
    consumer.close()
    assert values == [b"before", b"after", b"after2"]
