"""Produce and Fetch through the real server: bytes sent with sendfile, long polls that do not
stall other connections, acks=0 silence, sessions across requests."""
import asyncio

from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.fetch import FetchRequest
from protocol.messages.produce import ProduceRequest
from storage.record_batch import RecordBatchBuilder, iter_batches


async def create_topic(client, name, partitions=2):
    topic = CreateTopicsRequest.CreatableTopic(name=name, num_partitions=partitions,
                                               replication_factor=1)
    response = await client.request(CreateTopicsRequest(topics=[topic], timeout_ms=5000), 5)
    assert response.topics[0].error_code == 0


def records(values):
    builder = RecordBatchBuilder()
    for i, value in enumerate(values):
        builder.append(1_700_000_000_000 + i, b"key", value)
    return builder.build()


def produce(values, partition=0, acks=1, topic="t"):
    return ProduceRequest(acks=acks, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=records(values))])])


def fetch(offset=0, partition=0, max_wait_ms=0, topic="t", session_id=0, session_epoch=-1):
    return FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20,
                        session_id=session_id, session_epoch=session_epoch,
                        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                            FetchRequest.FetchPartition(partition=partition, fetch_offset=offset,
                                                        partition_max_bytes=1 << 20)])])


def values_in(response):
    data = bytes(response.responses[0].partitions[0].records or b"")
    return [r.value for batch in iter_batches(data) for r in batch.records()]


async def test_produce_then_fetch_over_the_socket(broker, client):
    await create_topic(client, "t")
    response = await client.request(produce([b"a", b"b", b"c"]), 9)
    assert response.responses[0].partition_responses[0].base_offset == 0
    response = await client.request(fetch(), 12)
    assert values_in(response) == [b"a", b"b", b"c"]
    assert response.responses[0].partitions[0].high_watermark == 3


async def test_acks_zero_gets_no_answer_and_order_is_kept(broker, client):
    await create_topic(client, "t")
    client.send(produce([b"x"], acks=0), 9)            # no response for this one
    response = await client.request(fetch(), 12)       # the next answer is the fetch's
    assert values_in(response) == [b"x"]


async def test_long_poll_does_not_stall_other_connections(broker, client):
    await create_topic(client, "t")
    waiting = asyncio.ensure_future(client.request(fetch(max_wait_ms=5000), 12, timeout=10))
    other = await type(client).connect(broker.port)     # conftest's RawClient, a second one
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        response = await other.request(produce([b"wake"]), 9)
        assert response.responses[0].partition_responses[0].error_code == 0
        assert loop.time() - started < 1.0
        polled = await asyncio.wait_for(waiting, 5)
        assert values_in(polled) == [b"wake"]
        assert loop.time() - started < 2.0              # woken by the append, not the timeout
    finally:
        await other.close()


async def test_incremental_session_over_the_socket(broker, client):
    await create_topic(client, "t")
    await client.request(produce([b"1", b"2"]), 9)
    full = await client.request(fetch(session_epoch=0), 12)
    assert full.session_id != 0 and values_in(full) == [b"1", b"2"]
    quiet = await client.request(fetch(offset=2, session_id=full.session_id, session_epoch=1),
                                 12)
    assert quiet.responses == []
    await client.request(produce([b"3"]), 9)
    news = await client.request(FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1,
                                             max_bytes=1 << 20, session_id=full.session_id,
                                             session_epoch=2, topics=[]), 12)
    assert values_in(news) == [b"3"]


async def test_large_fetch_goes_out_whole_while_other_connections_are_served(broker, client):
    """A fetch response several sendfile chunks long (192 KiB each, with a turn of the event
    loop between them) arrives byte for byte, and requests on another connection are answered
    while it is being sent."""
    import os
    await create_topic(client, "big")
    await create_topic(client, "small")
    sent = []
    for i in range(4):                                  # 4 batches of 800 KB: under max.message.bytes
        values = [os.urandom(100_000) for _ in range(8)]
        response = await client.request(produce(values, topic="big"), 9)
        assert response.responses[0].partition_responses[0].error_code == 0
        sent.extend(values)
    big = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=16 << 20,
                       session_id=0, session_epoch=-1,
                       topics=[FetchRequest.FetchTopic(topic="big", partitions=[
                           FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                                       partition_max_bytes=16 << 20)])])
    other = await type(client).connect(broker.port)
    try:
        reading = asyncio.ensure_future(client.request(big, 12, timeout=30))
        answers = [await other.request(produce([b"n%d" % i], topic="small"), 9)
                   for i in range(5)]
        assert [a.responses[0].partition_responses[0].base_offset for a in answers] == \
            list(range(5))
        response = await reading
    finally:
        await other.close()
    assert values_in(response) == sent
