"""Clients of the old message formats (Fetch v0-3) read what new clients wrote.

kafka-python told `api_version=(0, 10, 1)` (still common in older code) or older fetches with
Fetch v3 down to v0, so the broker down-converts its v2 batches to magic 1 or 0 messages, as
Kafka 3.9's maybeConvertFetchedData does: offsets kept, records below the fetch offset left
out, control batches dropped, UNSUPPORTED_VERSION where message.downconversion.enable=false
and UNSUPPORTED_COMPRESSION_TYPE for zstd data."""
import asyncio
import time

import pytest

pytestmark = pytest.mark.integration

COUNT = 40
BASE_TS = 1_700_000_000_000


@pytest.fixture
def broker(broker_process):
    return broker_process()


def create_topics(bootstrap, configs: dict):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, 1, 1, config=config)
                                   for name, config in configs.items()])
    for future in futures.values():
        future.result(timeout=15)


def produce(bootstrap, topic, compression="none", count=COUNT):
    """Batches of several records (linger), then a committed transaction: a control batch."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50,
                         "compression.type": compression})
    for i in range(count - 2):
        producer.produce(topic, b"v%d" % i, key=b"k%d" % i, partition=0,
                         timestamp=BASE_TS + i)
    assert producer.flush(30) == 0
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"t-{topic}",
                    "compression.type": compression})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(count - 2, count):
        txn.produce(topic, b"v%d" % i, key=b"k%d" % i, partition=0, timestamp=BASE_TS + i)
    txn.commit_transaction(30)


def read_old(bootstrap, topic, api_version, start):
    from kafka import KafkaConsumer, TopicPartition
    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, api_version=api_version,
                             group_id=None, enable_auto_commit=False,
                             request_timeout_ms=40000, max_partition_fetch_bytes=300)
    try:
        consumer.assign([tp])
        consumer.seek(tp, start)
        got = []
        deadline = time.monotonic() + 30
        while len(got) < COUNT - start and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(records)
        return got
    finally:
        consumer.close()


@pytest.mark.parametrize("compression", ["none", "gzip"])
@pytest.mark.parametrize("api_version", [(0, 10, 1), (0, 10, 0), (0, 9), (0, 8, 2)])
def test_old_fetch_versions_read_what_new_clients_wrote(broker, api_version, compression):
    topic = f"old-{compression}"
    create_topics(broker.bootstrap, {topic: {}})
    produce(broker.bootstrap, topic, compression)
    # From an offset inside a batch: a whole uncompressed batch is read from disk, but the
    # records before the fetch offset are not delivered again (Kafka's RecordsUtil.downConvert).
    start = 7
    got = read_old(broker.bootstrap, topic, api_version, start)
    assert [(r.offset, r.key, r.value) for r in got] == [
        (i, b"k%d" % i, b"v%d" % i) for i in range(start, COUNT)]
    if api_version >= (0, 10):      # magic 1: the producer's timestamps
        assert [r.timestamp for r in got] == [BASE_TS + i for i in range(start, COUNT)]
    else:                           # magic 0: none
        assert {r.timestamp for r in got} == {None}


def test_an_old_consumer_group_reads_and_commits(broker):
    from kafka import KafkaConsumer, TopicPartition
    create_topics(broker.bootstrap, {"old-group": {}})
    produce(broker.bootstrap, "old-group")
    consumer = KafkaConsumer("old-group", bootstrap_servers=broker.bootstrap,
                             api_version=(0, 10, 1), group_id="old",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=10000)
    try:
        values = [m.value for m in consumer]
        consumer.commit()
        assert values == [b"v%d" % i for i in range(COUNT)]
        # Offset COUNT holds the transaction's commit marker, which an old client never sees
        # (as against Kafka): its position stays there.
        assert consumer.committed(TopicPartition("old-group", 0)) == COUNT
    finally:
        consumer.close()


def fetch_v3(bootstrap, topic):
    """A raw Fetch v3 from offset 0 of partition 0 through the project's client."""
    from broker.client.connection import BrokerConnection
    from protocol.messages.fetch import FetchRequest

    async def go():
        host, port = bootstrap.split(":")
        conn = BrokerConnection(host, int(port))
        await conn.connect()
        try:
            request = FetchRequest(
                replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20,
                topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                    FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                                partition_max_bytes=1 << 20)])])
            response = await conn.send(request, 3)
            return response.responses[0].partitions[0]
        finally:
            await conn.close()
    return asyncio.run(go())


def test_refused_down_conversions_have_kafkas_error_codes(broker):
    from confluent_kafka import Producer
    create_topics(broker.bootstrap, {"no-down": {"message.downconversion.enable": "false"},
                                     "zstd-data": {}})
    for topic, compression in (("no-down", "none"), ("zstd-data", "zstd")):
        producer = Producer({"bootstrap.servers": broker.bootstrap,
                             "compression.type": compression})
        producer.produce(topic, b"x" * 100, partition=0)
        assert producer.flush(30) == 0
    assert fetch_v3(broker.bootstrap, "no-down").error_code == 35     # UNSUPPORTED_VERSION
    assert fetch_v3(broker.bootstrap, "zstd-data").error_code == 76   # UNSUPPORTED_COMPRESSION_TYPE
    # A client of today still reads both.
    from confluent_kafka import Consumer
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "new",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["no-down", "zstd-data"])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 2 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.topic())
    consumer.close()
    assert sorted(got) == ["no-down", "zstd-data"]


@pytest.mark.parametrize("api_version", [(0, 10, 0), (0, 9)])
def test_old_clients_seek_to_the_ends_with_list_offsets_v0(broker, api_version):
    from kafka import KafkaConsumer, TopicPartition
    create_topics(broker.bootstrap, {"old-ends": {}})
    produce(broker.bootstrap, "old-ends")
    tp = TopicPartition("old-ends", 0)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=api_version,
                             group_id=None, enable_auto_commit=False, request_timeout_ms=40000)
    try:
        consumer.assign([tp])
        consumer.seek_to_end(tp)
        assert consumer.position(tp) == COUNT + 1       # past the commit marker
        consumer.seek_to_beginning(tp)
        assert consumer.position(tp) == 0
    finally:
        consumer.close()
