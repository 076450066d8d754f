"""Bad input, one case at a time: each gets Kafka's error code or a closed connection, and none
of them touches another connection or the data already stored.

Every case runs against the same broker (auto-create off, small request and batch limits). A
bystander connection produced to topic "keep" before the attacks; after each attack it must still
be answered on its open connection, and "keep" must hold exactly the bytes it held before.
"""
import struct

import pytest

from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.api_versions import ApiVersionsRequest
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.metadata import MetadataRequest
from protocol.messages.produce import ProduceRequest
from storage.record_batch import RecordBatchBuilder

from tests.broker.conftest import RawClient

REQUEST_MAX = 64 * 1024
MESSAGE_MAX = 16 * 1024


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def batch(count=3, value=b"value", **kw) -> bytes:
    builder = RecordBatchBuilder(**kw)
    for i in range(count):
        builder.append(1_700_000_000_000 + i, b"key-%d" % i, value)
    return builder.build()


def produce(topic: str, records, partition=0) -> ProduceRequest:
    return ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=records)])])


def produce_error(response) -> int:
    [topic] = response.responses
    [partition] = topic.partition_responses
    return partition.error_code


def corrupt_crc() -> bytes:
    data = bytearray(batch())
    data[-1] ^= 0xFF                                # a record byte: the CRC no longer matches
    return bytes(data)


def bad_length() -> bytes:
    data = bytearray(batch())
    struct.pack_into(">i", data, 8, len(data))      # batch_length claims 12 more bytes
    return bytes(data)


def bad_magic() -> bytes:
    data = bytearray(batch())
    data[16] = 7
    return bytes(data)


def stored(broker) -> list:
    log = broker.replica_manager.get_partition("keep", 0).log
    return [bytes(view.raw()) for view in log.read_batches()]


@pytest.fixture
async def setup(start_broker):
    broker = await start_broker(auto_create_topics_enable="false",
                                socket_request_max_bytes=REQUEST_MAX,
                                message_max_bytes=MESSAGE_MAX)
    bystander = await RawClient.connect(broker.port)
    response = await bystander.request(CreateTopicsRequest(topics=[
        CreateTopicsRequest.CreatableTopic(name="keep", num_partitions=1, replication_factor=1)],
        timeout_ms=5000), 5)
    assert response.topics[0].error_code == 0
    for _ in range(3):
        assert produce_error(await bystander.request(produce("keep", batch()), 9)) == 0
    before = stored(broker)
    assert len(before) == 3
    yield broker, bystander, before
    assert (await bystander.request(ApiVersionsRequest(), 2)).error_code == 0
    assert stored(broker) == before
    assert produce_error(await bystander.request(produce("keep", batch()), 9)) == 0
    await bystander.close()


# -- answered with Kafka's error code; the connection stays open ------------------------------

@pytest.mark.parametrize("records,code", [
    (corrupt_crc(), ErrorCode.CORRUPT_MESSAGE),
    (bad_magic(), ErrorCode.CORRUPT_MESSAGE),
    (b"\x00" * 8 + b"\x00\x00\x00\x05" + b"\x00" * 60, ErrorCode.CORRUPT_MESSAGE),  # tiny length
    (batch(count=2, value=b"x" * MESSAGE_MAX), ErrorCode.MESSAGE_TOO_LARGE),
    # No complete batch: Kafka's request validation answers INVALID_RECORD from v3.
    (bad_length(), ErrorCode.INVALID_RECORD),
    (batch()[:40], ErrorCode.INVALID_RECORD),
    (b"", ErrorCode.INVALID_RECORD),
    (batch() + batch(), ErrorCode.INVALID_RECORD),                  # one batch per partition
], ids=["crc", "magic", "tiny-length", "too-large", "length", "torn", "empty", "two-batches"])
async def test_bad_batch_gets_its_error_code(setup, records, code):
    broker, _, before = setup
    client = await RawClient.connect(broker.port)
    assert produce_error(await client.request(produce("keep", records), 9)) == code
    assert stored(broker) == before
    # Same connection, next request: still served.
    assert produce_error(await client.request(produce("keep", corrupt_crc()), 3)) == \
        ErrorCode.CORRUPT_MESSAGE
    await client.close()


async def test_one_bad_partition_does_not_sink_the_others(setup):
    broker, client, before = setup
    request = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name="keep", partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=corrupt_crc()),
            ProduceRequest.PartitionProduceData(index=7, records=batch())]),
        ProduceRequest.TopicProduceData(name="missing", partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch())])])
    response = await client.request(request, 9)
    codes = {(t.name, p.index): p.error_code
             for t in response.responses for p in t.partition_responses}
    assert codes == {("keep", 0): ErrorCode.CORRUPT_MESSAGE,
                     ("keep", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                     ("missing", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


@pytest.mark.parametrize("name", ["bad/name", "..", "", "x" * 250, "caf\u00e9"])
async def test_invalid_topic_names(setup, name):
    _, client, _ = setup
    created = await client.request(CreateTopicsRequest(topics=[
        CreateTopicsRequest.CreatableTopic(name=name, num_partitions=1, replication_factor=1)],
        timeout_ms=5000), 5)
    assert created.topics[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    if name:
        # Metadata answers the name's error (librdkafka asks for topics by name like this).
        response = await client.request(MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=name)],
            allow_auto_topic_creation=True), 9)
        assert response.topics[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    # Produce never creates topics: a name with no partition is UNKNOWN_TOPIC_OR_PARTITION, as
    # Kafka (its metadata-cache check comes before any name check).
    assert produce_error(await client.request(produce(name, batch()), 9)) == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_missing_topic_with_auto_create_off(setup):
    broker, client, _ = setup
    response = await client.request(MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name="ghost")],
        allow_auto_topic_creation=True), 9)
    assert response.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert produce_error(await client.request(produce("ghost", batch()), 9)) == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert broker.metadata.get_topic("ghost") is None


# -- the connection is closed -----------------------------------------------------------------

@pytest.mark.parametrize("topic,records", [("keep", corrupt_crc()), ("ghost", batch()),
                                           ("keep", b"")], ids=["corrupt", "missing", "empty"])
async def test_failed_acks_zero_produce_closes_the_connection(setup, topic, records):
    """acks=0 has no answer to carry the error: Kafka closes the connection instead."""
    broker, _, before = setup
    client = await RawClient.connect(broker.port)
    request = produce(topic, records)
    request.acks = 0
    client.send(request, 9)
    assert await client.is_closed()
    assert stored(broker) == before
    await client.close()


async def test_acks_zero_produce_keeps_the_connection(setup):
    broker, _, _ = setup
    client = await RawClient.connect(broker.port)
    created = await client.request(CreateTopicsRequest(topics=[
        CreateTopicsRequest.CreatableTopic(name="zero", num_partitions=1, replication_factor=1)],
        timeout_ms=5000), 5)
    assert created.topics[0].error_code == 0
    request = produce("zero", batch())
    request.acks = 0
    client.send(request, 9)                       # no answer: the next one comes first
    assert (await client.request(ApiVersionsRequest(), 2)).error_code == 0
    assert broker.replica_manager.get_partition("zero", 0).log_end_offset == 3
    await client.close()


def _header(api_key, version, correlation_id=1) -> bytes:
    return struct.pack(">hhih", api_key, version, correlation_id, 4) + b"evil"


@pytest.mark.parametrize("data", [
    frame(b"\x00"),                                               # no room for a header
    frame(_header(ApiKey.PRODUCE, 9)[:7]),                        # header cut short
    frame(_header(ApiKey.PRODUCE, 9) + b"\x00\x01"),              # body cut short
    frame(_header(ApiKey.PRODUCE, 9) + b"\xff\xff\x00\x00\x13\x88\x7f\xff\xff\xff"),
    b"\x80\x00\x00\x00",                                          # negative frame size
    struct.pack(">i", REQUEST_MAX + 1) + b"\x00" * 64,            # over socket.request.max.bytes
    frame(_header(9999, 0)),                                      # unknown api key
    frame(_header(ApiKey.PRODUCE, 99)),                           # unknown version
    frame(_header(ApiKey.VOTE, 0) + b"\x00" * 12),  # KRaft's Vote: never served here
], ids=["tiny", "short-header", "short-body", "huge-array", "negative-size", "oversized",
        "unknown-key", "unknown-version", "not-served"])
async def test_malformed_requests_close_only_their_connection(setup, data):
    broker, bystander, _ = setup
    bad = await RawClient.connect(broker.port)
    bad.send_raw(data)
    assert await bad.is_closed()
    await bad.close()
    assert (await bystander.request(ApiVersionsRequest(), 2)).error_code == 0


async def test_bad_request_in_a_pipeline_closes_after_the_good_ones(setup):
    """Requests before the bad frame are answered, in order; then the connection closes."""
    broker, _, _ = setup
    client = await RawClient.connect(broker.port)
    first = client.send(ApiVersionsRequest(), 0)
    second = client.send(produce("keep", corrupt_crc()), 9)
    client.send_raw(frame(_header(9999, 0, correlation_id=99)))
    assert (await client.receive(ApiKey.API_VERSIONS, 0))[0] == first
    cid, response = await client.receive(ApiKey.PRODUCE, 9)
    assert cid == second and produce_error(response) == ErrorCode.CORRUPT_MESSAGE
    assert await client.is_closed()
    await client.close()


@pytest.mark.parametrize("prefix", [struct.pack(">i", REQUEST_MAX + 1), b"\x80\x00\x00\x00"],
                         ids=["oversized", "negative"])
async def test_a_bad_size_prefix_closes_after_the_requests_before_it(setup, prefix):
    """Kafka reads a connection's next request only after answering the previous one, so the
    requests pipelined before a bad size prefix (produce requests already appended, say) are
    answered before it closes the connection."""
    broker, _, _ = setup
    client = await RawClient.connect(broker.port)
    first = client.send(ApiVersionsRequest(), 0)
    second = client.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="keep")]), 9)
    client.send_raw(prefix + b"\x00" * 64)
    assert (await client.receive(ApiKey.API_VERSIONS, 0))[0] == first
    cid, response = await client.receive(ApiKey.METADATA, 9)
    assert cid == second and response.topics[0].error_code == 0
    assert await client.is_closed()
    await client.close()


async def test_absurd_partition_counts_are_refused(setup):
    """A typo'd count must not make the broker create millions of partition dirs: more than
    10,000 new partitions in one request -> POLICY_VIOLATION (Kafka's controller limit)."""
    from protocol.messages.create_partitions import CreatePartitionsRequest as CP
    broker, client, _ = setup
    CT = CreateTopicsRequest
    response = await client.request(CT(topics=[
        CT.CreatableTopic(name="huge", num_partitions=2**31 - 1, replication_factor=1),
        CT.CreatableTopic(name="small", num_partitions=1, replication_factor=1)],
        timeout_ms=5000), 5)
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("huge", ErrorCode.POLICY_VIOLATION), ("small", ErrorCode.POLICY_VIOLATION)]
    response = await client.request(CP(topics=[
        CP.CreatePartitionsTopic(name="keep", count=2**31 - 1, assignments=None)],
        timeout_ms=5000), 3)
    assert response.results[0].error_code == ErrorCode.POLICY_VIOLATION
    assert broker.metadata.get_topic("huge") is None
    assert len(broker.metadata.get_topic("keep").partitions) == 1


GROUP_APIS = ("join_group", "sync_group", "heartbeat", "leave_group", "offset_commit",
              "offset_fetch", "describe_groups", "list_groups", "find_coordinator")


async def test_mutated_client_requests_never_reach_a_handler_bug(setup, caplog):
    """Requests captured from real clients (tests/protocol/golden), each mutated a few times
    (bytes changed, cut out, inserted; seeded): every one is answered or closes its connection,
    and none makes a handler fail (which would log an error and answer UNKNOWN_SERVER_ERROR).
    Group APIs are left out: a JoinGroup legitimately parks for a rebalance."""
    import asyncio
    import os
    import random
    broker, bystander, _ = setup
    golden = os.path.join(os.path.dirname(__file__), "..", "protocol", "golden")
    rnd = random.Random(4)
    sent = 0
    for name in sorted(os.listdir(golden)):
        if not name.endswith(".bin") or name.startswith(GROUP_APIS):
            continue
        body = open(os.path.join(golden, name), "rb").read()
        for _ in range(6):
            data = bytearray(body)
            for _ in range(rnd.randint(1, 3)):
                pos = rnd.randrange(8, len(data)) if len(data) > 8 else 0
                kind = rnd.random()
                if kind < 0.6:
                    data[pos] = rnd.randrange(256)
                elif kind < 0.8:
                    del data[pos:pos + rnd.randint(1, 6)]
                else:
                    data[pos:pos] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 6)))
            client = await RawClient.connect(broker.port)
            client.send_raw(frame(bytes(data)))
            try:
                await asyncio.wait_for(client.reader.read(4), 5)
            except ConnectionError:
                pass
            await client.close()
            sent += 1
    assert sent > 200
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert not errors, errors[:3]
