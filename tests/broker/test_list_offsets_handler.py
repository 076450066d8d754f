"""ListOffsets, OffsetForLeaderEpoch, DeleteRecords and DescribeLogDirs handlers over real Logs."""
import os
import time
import types
import uuid

import pytest

from protocol.errors import ErrorCode
from protocol.messages.delete_records import DeleteRecordsRequest, DeleteRecordsResponse
from protocol.messages.describe_log_dirs import DescribeLogDirsRequest, DescribeLogDirsResponse
from protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from protocol.messages.offset_for_leader_epoch import (OffsetForLeaderEpochRequest,
                                                       OffsetForLeaderEpochResponse)
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.record_batch import RecordBatchBuilder

from broker.context import RequestContext
from broker.handlers import delete_records, describe_log_dirs, list_offsets, offset_for_leader_epoch
from broker.replica_manager import ReplicaManager

TOPIC_ID = uuid.uuid4()


@pytest.fixture
def broker(tmp_path):
    log_manager = LogManager([str(tmp_path / "logs")], LogConfig())
    log_manager.startup("cluster", 0)
    rm = ReplicaManager(log_manager, broker_id=0)
    rm.become_leader("t", 0, TOPIC_ID, 0, [0], LogConfig())
    rm.become_leader("c", 0, uuid.uuid4(), 0, [0], LogConfig(cleanup_policy="compact"))
    clock = types.SimpleNamespace(ms=lambda: int(time.time() * 1000))
    yield types.SimpleNamespace(replica_manager=rm, log_manager=log_manager, broker_id=0,
                                time=clock)
    rm.shutdown()
    log_manager.shutdown()


def append(broker, timestamps, topic="t"):
    builder = RecordBatchBuilder()
    for ts in timestamps:
        builder.append(ts, b"k", b"v")
    result = broker.replica_manager.append_records({(topic, 0): builder.build()}, 1)
    assert result[(topic, 0)].error_code == 0


async def call(module, broker, request, version, request_cls, response_cls):
    ctx = RequestContext(module.API_KEY, version, 1, "test")
    decoded = request_cls.decode(memoryview(request.encode(version)), version)
    response = await module.handle(broker, ctx, decoded)
    return response_cls.decode(memoryview(response.encode(version)), version)


def list_request(timestamps, isolation_level=0, topic="t", epoch=-1, replica_id=-1):
    parts = [ListOffsetsRequest.ListOffsetsPartition(partition_index=p, timestamp=ts,
                                                     current_leader_epoch=epoch,
                                                     max_num_offsets=1)
             for p, ts in timestamps]
    return ListOffsetsRequest(replica_id=replica_id, isolation_level=isolation_level,
                              topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic,
                                                                          partitions=parts)])


async def list_one(broker, timestamp, version, **kw):
    response = await call(list_offsets, broker, list_request([(0, timestamp)], **kw), version,
                          ListOffsetsRequest, ListOffsetsResponse)
    return response.topics[0].partitions[0]


@pytest.mark.parametrize("version", [1, 2, 4, 6, 7, 9])
async def test_list_offsets_by_timestamp_and_specials(broker, version):
    append(broker, [1000, 1001, 1002])
    append(broker, [5000, 5001])
    assert (await list_one(broker, -2, version)).offset == 0
    latest = await list_one(broker, -1, version)
    assert latest.offset == 5 and latest.error_code == 0
    found = await list_one(broker, 1001, version)
    assert (found.offset, found.timestamp) == (1, 1001)
    found = await list_one(broker, 3000, version)
    assert (found.offset, found.timestamp) == (3, 5000)
    missing = await list_one(broker, 9000, version)
    assert (missing.offset, missing.timestamp, missing.error_code) == (-1, -1, 0)
    if version >= 4:
        assert found.leader_epoch == 0
    if version >= 7:
        newest = await list_one(broker, -3, version)
        assert (newest.offset, newest.timestamp) == (4, 5001)


async def test_list_offsets_v0_old_style(broker):
    append(broker, [1, 2, 3])
    answer = await list_one(broker, -1, 0)
    assert answer.old_style_offsets == [3]


async def test_list_offsets_v0_is_kafkas_lookup_by_segment_modification_time(broker):
    """Kafka's legacyFetchOffsetsBefore: (segment start, file mtime) per segment plus (log end,
    now); up to max_num_offsets of those at or before the timestamp, newest first. It answered
    as v1 (the first record at or after the timestamp, never more than one offset)."""
    rm = broker.replica_manager
    rm.become_leader("seg", 0, uuid.uuid4(), 0, [0], LogConfig(segment_bytes=100))
    for batch in range(3):
        append(broker, [1000 + batch] * 3, topic="seg")         # a segment each: 0, 3, 6
    segments = rm.get_partition("seg", 0).log.segments
    assert [s.base_offset for s in segments] == [0, 3, 6]
    for segment, seconds in zip(segments, (1000, 2000, 3000)):
        os.utime(segment.path, (seconds, seconds))

    async def v0(timestamp, max_num):
        request = list_request([(0, timestamp)], topic="seg")
        request.topics[0].partitions[0].max_num_offsets = max_num
        response = await call(list_offsets, broker, request, 0, ListOffsetsRequest,
                              ListOffsetsResponse)
        answer = response.topics[0].partitions[0]
        return answer.old_style_offsets if answer.error_code == 0 else answer.error_code
    assert await v0(-1, 10) == [9, 6, 3, 0]
    assert await v0(-1, 2) == [9, 6]
    assert await v0(-1, 0) == []
    assert await v0(-2, 10) == [0]
    assert await v0(2_500_000, 10) == [3, 0]        # segments last written by 2,500 s
    assert await v0(500_000, 10) == []
    assert await v0(-3, 1) == ErrorCode.UNSUPPORTED_VERSION
    # a partition named twice is answered twice (only v1+ refuse it), as Kafka's V0 path
    response = await call(list_offsets, broker, list_request([(0, -1), (0, -2)], topic="seg"),
                          0, ListOffsetsRequest, ListOffsetsResponse)
    assert [(p.error_code, p.old_style_offsets) for p in response.topics[0].partitions] == \
        [(0, [9]), (0, [0])]


async def test_list_offsets_errors(broker):
    answer = await list_one(broker, -1, 5, topic="missing")
    assert answer.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    answer = await list_one(broker, -1, 5, epoch=3)
    assert answer.error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    response = await call(list_offsets, broker, list_request([(0, -1), (0, -2)]), 5,
                          ListOffsetsRequest, ListOffsetsResponse)
    assert [p.error_code for p in response.topics[0].partitions] == \
        [ErrorCode.INVALID_REQUEST] * 2


@pytest.mark.parametrize("version", [0, 1, 5, 9])
async def test_a_follower_answers_only_the_debugging_replica_id(broker, version):
    """Kafka's fetchOnlyFromLeader = replicaId != DEBUGGING_REPLICA_ID: any replica answers -2
    from its own log end (no isolation level); a consumer or a broker id needs the leader."""
    append(broker, [1000, 1001, 1002])
    part = broker.replica_manager.get_partition("t", 0)
    part.make_follower(1, 1, [0, 1], partition_epoch=1)
    debug = await list_one(broker, -1, version, replica_id=-2)
    assert debug.error_code == 0
    assert (debug.old_style_offsets if version == 0 else [debug.offset]) == [3]
    for replica_id in (-1, 1):
        refused = await list_one(broker, -1, version, replica_id=replica_id)
        assert refused.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    if version >= 4:                 # the leader epoch is still checked first
        fenced = await list_one(broker, -1, version, replica_id=-2, epoch=0)
        assert fenced.error_code == ErrorCode.FENCED_LEADER_EPOCH

@pytest.mark.parametrize("timestamp,first_version", [(-3, 7), (-4, 8), (-5, 9), (-7, None)])
async def test_a_special_timestamp_before_its_version_is_unsupported_version(
        broker, timestamp, first_version):
    """Kafka's timestampMinSupportedVersion: a special timestamp the request's version does not
    know, or a negative one that is none of them, is UNSUPPORTED_VERSION, not a time search."""
    append(broker, [1000, 1001])
    for version in (1, 5, 6, 7, 8, 9):
        answer = await list_one(broker, timestamp, version)
        if first_version is not None and version >= first_version:
            assert answer.error_code == 0, version
        else:
            assert answer.error_code == ErrorCode.UNSUPPORTED_VERSION, version


async def test_offset_for_leader_epoch(broker):
    append(broker, [1, 2])
    broker.replica_manager.become_leader("t", 0, TOPIC_ID, 2, [0], None)
    append(broker, [3])
    OFE = OffsetForLeaderEpochRequest
    request = OFE(replica_id=-1, topics=[OFE.OffsetForLeaderTopic(topic="t", partitions=[
        OFE.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0),
        OFE.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=1),
        OFE.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=2),
        OFE.OffsetForLeaderPartition(partition=0, current_leader_epoch=1, leader_epoch=2),
    ])])
    response = await call(offset_for_leader_epoch, broker, request, 4, OFE,
                          OffsetForLeaderEpochResponse)
    got = [(p.error_code, p.leader_epoch, p.end_offset) for p in response.topics[0].partitions]
    assert got == [(0, 0, 2), (0, 0, 2), (0, 2, 3), (ErrorCode.FENCED_LEADER_EPOCH, -1, -1)]


async def test_delete_records(broker):
    append(broker, [1, 2, 3, 4])
    DR = DeleteRecordsRequest
    request = DR(timeout_ms=1000, topics=[
        DR.DeleteRecordsTopic(name="t", partitions=[
            DR.DeleteRecordsPartition(partition_index=0, offset=2)]),
        DR.DeleteRecordsTopic(name="c", partitions=[
            DR.DeleteRecordsPartition(partition_index=0, offset=0)]),
        DR.DeleteRecordsTopic(name="missing", partitions=[
            DR.DeleteRecordsPartition(partition_index=0, offset=0)])])
    response = await call(delete_records, broker, request, 2, DR, DeleteRecordsResponse)
    got = {t.name: (t.partitions[0].error_code, t.partitions[0].low_watermark)
           for t in response.topics}
    assert got == {"t": (0, 2), "c": (ErrorCode.POLICY_VIOLATION, -1),
                   "missing": (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)}
    assert broker.replica_manager.get_partition("t", 0).log_start_offset == 2
    request = DR(timeout_ms=1000, topics=[DR.DeleteRecordsTopic(name="t", partitions=[
        DR.DeleteRecordsPartition(partition_index=0, offset=99)])])
    response = await call(delete_records, broker, request, 1, DR, DeleteRecordsResponse)
    assert response.topics[0].partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    # ListOffsets earliest follows the new log start
    assert (await list_one(broker, -2, 5)).offset == 2
    # Kafka's deleteRecordsOnLocalLog: internal topics first (INVALID_TOPIC_EXCEPTION), then the
    # leadership, then the cleanup policy
    broker.replica_manager.become_leader("__consumer_offsets", 0, uuid.uuid4(), 0, [0],
                                         LogConfig(cleanup_policy="compact"))
    broker.replica_manager.get_partition("c", 0).make_follower(1, 1, [0, 1], partition_epoch=1)
    request = DR(timeout_ms=1000, topics=[
        DR.DeleteRecordsTopic(name="__consumer_offsets", partitions=[
            DR.DeleteRecordsPartition(partition_index=0, offset=0)]),
        DR.DeleteRecordsTopic(name="c", partitions=[
            DR.DeleteRecordsPartition(partition_index=0, offset=0)])])
    response = await call(delete_records, broker, request, 2, DR, DeleteRecordsResponse)
    assert [(t.name, t.partitions[0].error_code) for t in response.topics] == [
        ("__consumer_offsets", ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("c", ErrorCode.NOT_LEADER_OR_FOLLOWER)]


@pytest.mark.parametrize("version", [0, 2, 4])
async def test_describe_log_dirs(broker, version, tmp_path):
    append(broker, [1, 2, 3])
    request = DescribeLogDirsRequest(topics=None)
    response = await call(describe_log_dirs, broker, request, version, DescribeLogDirsRequest,
                          DescribeLogDirsResponse)
    [result] = response.results
    assert result.error_code == 0 and result.log_dir == str(tmp_path / "logs")
    sizes = {(t.name, p.partition_index): p.partition_size
             for t in result.topics for p in t.partitions}
    assert set(sizes) == {("t", 0), ("c", 0)}
    assert sizes[("t", 0)] > 0 and sizes[("c", 0)] == 0
    if version >= 4:
        assert result.total_bytes > 0 and result.usable_bytes > 0
    only = DescribeLogDirsRequest(topics=[DescribeLogDirsRequest.DescribableLogDirTopic(
        topic="t", partitions=[0])])
    response = await call(describe_log_dirs, broker, only, version, DescribeLogDirsRequest,
                          DescribeLogDirsResponse)
    assert [t.name for t in response.results[0].topics] == ["t"]


@pytest.mark.parametrize("version, code", [(1, ErrorCode.LEADER_NOT_AVAILABLE),
                                           (4, ErrorCode.LEADER_NOT_AVAILABLE),
                                           (5, ErrorCode.OFFSET_NOT_AVAILABLE),
                                           (9, ErrorCode.OFFSET_NOT_AVAILABLE)])
async def test_offset_not_available_is_leader_not_available_before_v5(broker, version, code,
                                                                       monkeypatch):
    # A new leader whose high watermark lags its epoch's start: Kafka answers clients older than
    # v5, which do not know OFFSET_NOT_AVAILABLE, with the retriable LEADER_NOT_AVAILABLE.
    from protocol.errors import KafkaError

    def lagging(*args, **kwargs):
        raise KafkaError(ErrorCode.OFFSET_NOT_AVAILABLE, "the high watermark lags")
    monkeypatch.setattr(broker.replica_manager.get_partition("t", 0), "fetch_offset_for_timestamp",
                        lagging)
    response = await call(list_offsets, broker, list_request([(0, -1)]), version,
                          ListOffsetsRequest, ListOffsetsResponse)
    assert response.topics[0].partitions[0].error_code == code


async def test_an_unknown_isolation_level_fails_the_request_as_kafkas_does(broker):
    """Kafka's IsolationLevel.forId throws for a level other than 0 or 1, and the request is
    answered UNKNOWN_SERVER_ERROR for every partition (it was read as read_uncommitted)."""
    from broker.dispatch import run_handler
    from broker.handlers import fetch
    from protocol.messages.fetch import FetchRequest
    append(broker, [1000])
    for level in (5, -1):
        ctx = RequestContext(list_offsets.API_KEY, 7, 1, "test")
        response = await run_handler(broker, ctx, list_offsets,
                                     list_request([(0, -1)], isolation_level=level))
        assert [p.error_code for t in response.topics for p in t.partitions] == [
            ErrorCode.UNKNOWN_SERVER_ERROR]
        request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                               isolation_level=level, session_id=0, session_epoch=-1,
                               topics=[FetchRequest.FetchTopic(topic="t", partitions=[
                                   FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                                               partition_max_bytes=1 << 20)])],
                               forgotten_topics_data=[])
        ctx = RequestContext(fetch.API_KEY, 12, 1, "test")
        response = await run_handler(broker, ctx, fetch, request)
        assert response.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
