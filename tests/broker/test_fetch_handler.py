"""Fetch handler: limits, long polls, sessions, topic ids, errors, over a real Log."""
import asyncio
import os
import types
import uuid

import pytest

from protocol.errors import ErrorCode
from protocol.messages.fetch import FetchRequest, FetchResponse
from protocol.records import FileRegion
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.record_batch import RecordBatchBuilder, iter_batches

from broker.context import RequestContext
from broker.handlers import fetch
from broker.replica_manager import ReplicaManager

TOPIC_ID = uuid.uuid4()


@pytest.fixture
def broker(tmp_path):
    log_manager = LogManager([str(tmp_path / "logs")], LogConfig())
    log_manager.startup("cluster", 0)
    rm = ReplicaManager(log_manager, broker_id=0)
    for p in range(3):
        rm.become_leader("t", p, TOPIC_ID, 0, [0], LogConfig())
    yield types.SimpleNamespace(replica_manager=rm, log_manager=log_manager, broker_id=0)
    rm.shutdown()
    log_manager.shutdown()


def append(broker, partition, count=2, value=b"v"):
    builder = RecordBatchBuilder()
    for i in range(count):
        builder.append(1_700_000_000_000 + i, b"k", value)
    result = broker.replica_manager.append_records({("t", partition): builder.build()}, 1)
    assert result[("t", partition)].error_code == 0


def fetch_request(partitions, version, *, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                  session_id=0, session_epoch=-1, forgotten=(), isolation_level=0,
                  topic="t", topic_id=TOPIC_ID):
    parts = [FetchRequest.FetchPartition(partition=p, fetch_offset=o,
                                         partition_max_bytes=pmb)
             for p, o, pmb in partitions]
    topics = [FetchRequest.FetchTopic(topic=topic, topic_id=topic_id, partitions=parts)] \
        if parts else []
    forgotten_topics = [FetchRequest.ForgottenTopic(topic=topic, topic_id=topic_id,
                                                    partitions=list(forgotten))] \
        if forgotten else []
    return FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
                        max_bytes=max_bytes, isolation_level=isolation_level,
                        session_id=session_id, session_epoch=session_epoch, topics=topics,
                        forgotten_topics_data=forgotten_topics)


def materialize(pieces) -> bytes:
    """Join encode_pieces output the way the connection would send it."""
    out = bytearray()
    for piece in pieces:
        if isinstance(piece, FileRegion):
            out += os.pread(piece.file.fileno(), piece.length, piece.position)
        else:
            out += piece
    return bytes(out)


async def call(broker, request, version):
    ctx = RequestContext(fetch.API_KEY, version, 1, "test")
    decoded = FetchRequest.decode(memoryview(request.encode(version)), version)
    response = await fetch.handle(broker, ctx, decoded)
    return FetchResponse.decode(memoryview(materialize(response.encode_pieces(version))),
                                version)


def partitions_of(response):
    return {p.partition_index: p for t in response.responses for p in t.partitions}


def offsets_in(records):
    return [(v.base_offset, v.last_offset) for v in iter_batches(bytes(records or b""))]


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 15, 16])
async def test_fetch_returns_batches_hw_and_log_start(broker, version):
    append(broker, 0, 3)
    append(broker, 0, 2)
    response = await call(broker, fetch_request([(0, 0, 1 << 20), (1, 0, 1 << 20)], version),
                          version)
    got = partitions_of(response)
    assert got[0].error_code == 0 and got[0].high_watermark == 5
    assert got[0].last_stable_offset == 5
    if version >= 5:
        assert got[0].log_start_offset == 0
    assert offsets_in(got[0].records) == [(0, 2), (3, 4)]
    assert got[1].high_watermark == 0 and offsets_in(got[1].records) == []
    if version >= 13:
        assert response.responses[0].topic_id == TOPIC_ID
    else:
        assert response.responses[0].topic == "t"


async def test_unknown_topic_id_and_out_of_range(broker):
    append(broker, 0, 2)
    response = await call(broker, fetch_request([(0, 0, 1000)], 13, topic_id=uuid.uuid4()), 13)
    assert partitions_of(response)[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    response = await call(broker, fetch_request([(0, 9, 1000)], 12), 12)
    assert partitions_of(response)[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    response = await call(broker, fetch_request([(7, 0, 1000)], 12), 12)
    assert partitions_of(response)[7].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_first_partition_gets_a_whole_batch_beyond_max_bytes(broker):
    append(broker, 0, 5, value=b"x" * 300)
    append(broker, 1, 5, value=b"x" * 300)
    response = await call(broker, fetch_request([(0, 0, 100), (1, 0, 100)], 12,
                                                max_bytes=100), 12)
    got = partitions_of(response)
    assert offsets_in(got[0].records) == [(0, 4)]
    assert offsets_in(got[1].records) == []


@pytest.mark.parametrize("version", [12, 13])
async def test_a_later_partition_never_gets_a_piece_of_its_first_batch(broker, version):
    """Kafka's readFromLog: a first batch larger than what is left of the partition's or the
    response's bytes is no records at all (a Java consumer given bytes with no whole batch in
    them fails every poll()); what fits is answered, ending inside a batch as Kafka's does."""
    append(broker, 0, 5, value=b"x" * 100)                   # ~0.6 KB
    append(broker, 1, 50, value=b"x" * 100)                  # one ~5.6 KB batch
    append(broker, 2, 2, value=b"x" * 100)
    append(broker, 2, 50, value=b"x" * 100)
    got = partitions_of(await call(broker, fetch_request(
        [(0, 0, 4096), (1, 0, 4096), (2, 0, 4096)], version), version))
    assert offsets_in(got[0].records) == [(0, 4)]
    assert not bytes(got[1].records or b"")
    data = bytes(got[2].records)
    assert offsets_in(got[2].records) == [(0, 1)] and 300 < len(data) <= 4096
    got = partitions_of(await call(broker, fetch_request(
        [(0, 0, 4096), (1, 0, 8192)], version, max_bytes=2048), version))
    assert offsets_in(got[0].records) == [(0, 4)]
    assert not bytes(got[1].records or b"")


async def test_a_session_follows_topic_ids_not_the_names_they_had(broker):
    """Kafka's CachedPartition is (topic id, partition) from v13, its name resolved on every
    request: a topic deleted and created again under its name is not read for the old id,
    forgetting the old id removes it, and an id unknown when the session began is read once
    the broker knows it."""
    rm = broker.replica_manager
    append(broker, 2)
    first = await call(broker, fetch_request([(2, 0, 1 << 20)], 13, session_epoch=0), 13)
    session_id = first.session_id
    assert session_id
    for p in range(3):
        rm.stop_replica("t", p, delete=True)
    new_id = uuid.uuid4()
    rm.become_leader("t", 2, new_id, 1, [0], LogConfig())
    append(broker, 2, 3)
    request = fetch_request([(2, 0, 1 << 20)], 13, topic_id=new_id, session_id=session_id,
                            session_epoch=1)
    response = await call(broker, request, 13)
    answered = {(t.topic_id, p.partition_index): p for t in response.responses
                for p in t.partitions}
    assert answered[(TOPIC_ID, 2)].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    assert not bytes(answered[(TOPIC_ID, 2)].records or b"")
    assert offsets_in(answered[(new_id, 2)].records) == [(0, 2)]
    request = fetch_request([], 13, session_id=session_id, session_epoch=2, forgotten=[2])
    await call(broker, request, 13)
    assert list(rm.fetch_sessions.get(session_id).partitions) == [(new_id, 2)]
    # An id the broker learns after the session began.
    later = uuid.uuid4()
    first = await call(broker, fetch_request([(0, 0, 1 << 20)], 13, topic="z", topic_id=later,
                                             session_epoch=0), 13)
    assert partitions_of(first)[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    rm.become_leader("z", 0, later, 0, [0], LogConfig())
    builder = RecordBatchBuilder()
    builder.append(1_700_000_000_000, b"k", b"v")
    rm.append_records({("z", 0): builder.build()}, 1)
    response = await call(broker, fetch_request([], 13, session_id=first.session_id,
                                                session_epoch=1), 13)
    assert partitions_of(response)[0].error_code == ErrorCode.NONE
    assert offsets_in(partitions_of(response)[0].records) == [(0, 0)]


async def test_old_consumers_get_kafkas_errors_for_zstd_topics_and_storage_errors(
        broker, monkeypatch):
    """Before Fetch v10 a consumer cannot read zstd: a topic with compression.type=zstd is
    UNSUPPORTED_COMPRESSION_TYPE; up to v5 KAFKA_STORAGE_ERROR is NOT_LEADER_OR_FOLLOWER."""
    rm = broker.replica_manager
    rm.become_leader("z", 0, uuid.uuid4(), 0, [0], LogConfig(compression_type="zstd"))
    request = fetch_request([(0, 0, 1 << 20)], 9, topic="z")
    assert partitions_of(await call(broker, request, 9))[0].error_code == \
        ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    request = fetch_request([(0, 0, 1 << 20)], 10, topic="z")
    assert partitions_of(await call(broker, request, 10))[0].error_code == ErrorCode.NONE
    append(broker, 0)

    def broken(*args, **kwargs):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(rm.get_partition("t", 0), "read", broken)
    monkeypatch.setattr(rm, "_storage_failure", lambda *args: None)
    for version, code in ((5, ErrorCode.NOT_LEADER_OR_FOLLOWER),
                          (6, ErrorCode.KAFKA_STORAGE_ERROR)):
        response = await call(broker, fetch_request([(0, 0, 1 << 20)], version), version)
        assert partitions_of(response)[0].error_code == code


async def test_long_poll_answers_when_data_arrives(broker):
    task = asyncio.ensure_future(call(broker, fetch_request([(0, 0, 1 << 20)], 12,
                                                            max_wait_ms=5000), 12))
    await asyncio.sleep(0.05)
    assert not task.done()
    append(broker, 0, 2)
    response = await asyncio.wait_for(task, 2)
    assert offsets_in(partitions_of(response)[0].records) == [(0, 1)]


async def test_long_poll_times_out_with_empty_answer(broker):
    loop = asyncio.get_running_loop()
    start = loop.time()
    response = await call(broker, fetch_request([(0, 0, 1 << 20)], 12, max_wait_ms=150), 12)
    assert loop.time() - start >= 0.14
    assert partitions_of(response)[0].error_code == 0
    assert offsets_in(partitions_of(response)[0].records) == []


async def test_min_bytes_waits_for_enough_data(broker):
    append(broker, 0, 1)
    task = asyncio.ensure_future(call(broker, fetch_request([(0, 0, 1 << 20)], 12,
                                                            max_wait_ms=5000,
                                                            min_bytes=2000), 12))
    await asyncio.sleep(0.05)
    assert not task.done()
    append(broker, 0, 5, value=b"y" * 500)
    response = await asyncio.wait_for(task, 2)
    assert offsets_in(partitions_of(response)[0].records) == [(0, 0), (1, 5)]


async def test_min_bytes_above_max_bytes_does_not_wait_for_more_than_fits(broker):
    """Kafka's fetchMinBytes = min(min_bytes, max_bytes): a response that is already as full as
    it may be is answered at once."""
    append(broker, 0, 5, value=b"y" * 500)
    response = await asyncio.wait_for(call(broker, fetch_request(
        [(0, 0, 1 << 20)], 12, max_wait_ms=5000, min_bytes=1 << 20, max_bytes=1000), 12), 1)
    assert offsets_in(partitions_of(response)[0].records) == [(0, 4)]


async def test_a_diverging_epoch_or_a_new_leader_epoch_is_answered_at_once(broker):
    """Kafka's fetchMessages answers a diverging epoch without the wait (the fetcher must
    truncate first), and a parked fetch completes when the leader epoch it named changes."""
    rm = broker.replica_manager
    append(broker, 0)                                        # epoch 0: offsets 0-1
    rm.become_leader("t", 0, TOPIC_ID, 1, [0], LogConfig())
    append(broker, 0)                                        # epoch 1: offsets 2-3
    request = fetch_request([(0, 4, 1 << 20)], 12, max_wait_ms=5000)
    request.topics[0].partitions[0].last_fetched_epoch = 0
    request.topics[0].partitions[0].current_leader_epoch = 1
    response = await asyncio.wait_for(call(broker, request, 12), 1)
    assert partitions_of(response)[0].diverging_epoch.end_offset == 2
    request = fetch_request([(0, 4, 1 << 20)], 12, max_wait_ms=5000)
    request.topics[0].partitions[0].current_leader_epoch = 1
    task = asyncio.ensure_future(call(broker, request, 12))
    await asyncio.sleep(0.05)
    assert not task.done()
    rm.become_leader("t", 0, TOPIC_ID, 2, [0], LogConfig())
    rm.fetch_purgatory.notify("t", 0)
    response = await asyncio.wait_for(task, 1)
    assert partitions_of(response)[0].error_code == ErrorCode.FENCED_LEADER_EPOCH


async def test_incremental_session(broker):
    append(broker, 0, 2)
    full = await call(broker, fetch_request([(0, 0, 1 << 20), (1, 0, 1 << 20)], 12,
                                            session_epoch=0), 12)
    session_id = full.session_id
    assert session_id != 0 and set(partitions_of(full)) == {0, 1}
    # the consumer moves partition 0 past what it got; nothing new: no partitions answered
    empty = await call(broker, fetch_request([(0, 2, 1 << 20)], 12, session_id=session_id,
                                             session_epoch=1), 12)
    assert empty.error_code == 0 and empty.session_id == session_id
    assert partitions_of(empty) == {}
    # new data on partition 1 only
    append(broker, 1, 3)
    inc = await call(broker, fetch_request([], 12, session_id=session_id,
                                           session_epoch=2), 12)
    got = partitions_of(inc)
    assert set(got) == {1} and offsets_in(got[1].records) == [(0, 2)]
    # a wrong epoch and an unknown session are top-level errors
    bad = await call(broker, fetch_request([], 12, session_id=session_id, session_epoch=7), 12)
    assert bad.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH and bad.responses == []
    bad = await call(broker, fetch_request([], 12, session_id=session_id + 1,
                                           session_epoch=1), 12)
    assert bad.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    # forget partition 1; add partition 2 with data
    append(broker, 2, 1)
    inc = await call(broker, fetch_request([(2, 0, 1 << 20)], 12, session_id=session_id,
                                           session_epoch=3, forgotten=[1]), 12)
    assert set(partitions_of(inc)) == {2}
    session = broker.replica_manager.fetch_sessions.get(session_id)
    assert sorted(k[1] for k in session.partitions) == [0, 2]


async def test_incremental_long_poll_wakes_on_session_partition(broker):
    full = await call(broker, fetch_request([(0, 0, 1 << 20)], 13, session_epoch=0), 13)
    task = asyncio.ensure_future(call(broker, fetch_request(
        [], 13, session_id=full.session_id, session_epoch=1, max_wait_ms=5000), 13))
    await asyncio.sleep(0.05)
    assert not task.done()
    append(broker, 0, 1)
    response = await asyncio.wait_for(task, 2)
    assert offsets_in(partitions_of(response)[0].records) == [(0, 0)]


async def test_read_committed_stops_at_last_stable_offset(broker):
    append(broker, 0, 2)
    response = await call(broker, fetch_request([(0, 0, 1 << 20)], 12, isolation_level=1), 12)
    got = partitions_of(response)[0]
    assert got.last_stable_offset == 2 and got.aborted_transactions == []
    assert offsets_in(got.records) == [(0, 1)]
