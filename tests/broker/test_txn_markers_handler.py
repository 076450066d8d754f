"""WriteTxnMarkers over a real ReplicaManager and Log, and what a read_committed Fetch then sees:
the last stable offset and the aborted transactions a client needs to drop aborted records."""
import types
import uuid

import pytest

from protocol.errors import ErrorCode
from protocol.messages.write_txn_markers import WriteTxnMarkersRequest
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.record_batch import RecordBatchBuilder, iter_batches

from broker.context import RequestContext
from broker.handlers import write_txn_markers

from tests.broker.test_fetch_handler import call, fetch_request, partitions_of

TOPIC_ID = uuid.uuid4()
NOW = 1_700_000_000_000


class Clock:
    def ms(self):
        return NOW


@pytest.fixture
def broker(tmp_path):
    from broker.replica_manager import ReplicaManager
    log_manager = LogManager([str(tmp_path / "logs")], LogConfig())
    log_manager.startup("cluster", 0)
    rm = ReplicaManager(log_manager, broker_id=0)
    for p in range(2):
        rm.become_leader("t", p, TOPIC_ID, 0, [0], LogConfig())
    completed = []
    yield types.SimpleNamespace(
        replica_manager=rm, log_manager=log_manager, broker_id=0, time=Clock(),
        config=types.SimpleNamespace(get=lambda name: 30000),
        group_coordinator=types.SimpleNamespace(
            on_transaction_completed=lambda *args: completed.append(args)),
        completed=completed)
    rm.shutdown()
    log_manager.shutdown()


def send(broker, partition, pid, epoch, seq, count=2):
    builder = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                 is_transactional=True)
    for i in range(count):
        builder.append(NOW, b"k", b"v%d" % i)
    result = broker.replica_manager.append_records({("t", partition): builder.build()}, 1)
    assert result[("t", partition)].error_code == 0
    return result[("t", partition)].base_offset


async def markers(broker, *items, version=1):
    request = WriteTxnMarkersRequest(markers=[
        WriteTxnMarkersRequest.WritableTxnMarker(
            producer_id=pid, producer_epoch=epoch, transaction_result=commit,
            coordinator_epoch=coordinator_epoch,
            topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=topic,
                                                                  partition_indexes=parts)])
        for pid, epoch, commit, coordinator_epoch, topic, parts in items])
    decoded = WriteTxnMarkersRequest.decode(memoryview(request.encode(version)), version)
    ctx = RequestContext(write_txn_markers.API_KEY, version, 1, "coordinator")
    response = await write_txn_markers.handle(broker, ctx, decoded)
    return {(m.producer_id, t.name, p.partition_index): p.error_code
            for m in response.markers for t in m.topics for p in t.partitions}


@pytest.mark.asyncio
async def test_abort_and_commit_markers_and_what_read_committed_sees(broker):
    send(broker, 0, pid=5, epoch=0, seq=0)                     # 0-1, aborted below
    send(broker, 0, pid=6, epoch=0, seq=0)                     # 2-3, committed below
    fetch = await call(broker, fetch_request([(0, 0, 1 << 20)], 12, isolation_level=1), 12)
    p = partitions_of(fetch)[0]
    assert (p.high_watermark, p.last_stable_offset) == (4, 0)
    assert p.aborted_transactions == [] and len(p.records) == 0

    got = await markers(broker, (5, 0, False, 0, "t", [0]), (6, 0, True, 0, "t", [0]))
    assert got == {(5, "t", 0): 0, (6, "t", 0): 0}
    fetch = await call(broker, fetch_request([(0, 0, 1 << 20)], 12, isolation_level=1), 12)
    p = partitions_of(fetch)[0]
    assert (p.high_watermark, p.last_stable_offset) == (6, 6)
    assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(5, 0)]
    control = [b for b in iter_batches(bytes(p.records)) if b.is_control]
    assert [(b.producer_id, b.base_offset) for b in control] == [(5, 4), (6, 5)]
    # read_uncommitted: null aborted list, as Kafka writes it.
    fetch = await call(broker, fetch_request([(0, 0, 1 << 20)], 12), 12)
    assert partitions_of(fetch)[0].aborted_transactions is None


@pytest.mark.asyncio
async def test_stale_producer_or_coordinator_epoch_is_refused_and_writes_nothing(broker):
    send(broker, 0, pid=5, epoch=3, seq=0)
    assert await markers(broker, (5, 3, True, 7, "t", [0])) == {(5, "t", 0): 0}
    log_ = broker.replica_manager.get_partition("t", 0).log
    end = log_.log_end_offset
    assert await markers(broker, (5, 2, False, 7, "t", [0])) == \
        {(5, "t", 0): ErrorCode.INVALID_PRODUCER_EPOCH}
    assert await markers(broker, (5, 3, False, 6, "t", [0])) == \
        {(5, "t", 0): ErrorCode.TRANSACTION_COORDINATOR_FENCED}
    assert log_.log_end_offset == end


@pytest.mark.asyncio
async def test_unknown_partitions_fail_alone(broker):
    send(broker, 1, pid=8, epoch=0, seq=0)
    got = await markers(broker, (8, 0, False, 0, "t", [1, 9]), (8, 0, False, 0, "nope", [0]))
    assert got[(8, "t", 1)] == 0
    assert got[(8, "t", 9)] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert got[(8, "nope", 0)] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert broker.replica_manager.get_partition("t", 1).last_stable_offset == 3


def test_verification_answers_as_kafkas_replica_manager_maps_them():
    from broker.txn_verification import coordinator_answer, produce_error
    assert coordinator_answer(ErrorCode.TRANSACTION_ABORTABLE, False) == \
        ErrorCode.INVALID_TXN_STATE
    assert coordinator_answer(ErrorCode.TRANSACTION_ABORTABLE, True) == \
        ErrorCode.TRANSACTION_ABORTABLE
    assert coordinator_answer(ErrorCode.PRODUCER_FENCED, True) == \
        ErrorCode.INVALID_PRODUCER_EPOCH
    assert produce_error(ErrorCode.INVALID_TXN_STATE) == (
        ErrorCode.INVALID_TXN_STATE, "Partition was not added to the transaction")
    for retriable in (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NOT_COORDINATOR,
                      ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NETWORK_EXCEPTION):
        code, message = produce_error(retriable)
        assert code == ErrorCode.NOT_ENOUGH_REPLICAS and retriable.name in message


def test_only_a_first_write_in_a_transaction_needs_verification(broker):
    from broker.txn_verification import start_verification
    from storage.producer_state import NOT_VERIFYING, VerificationEntry
    part = broker.replica_manager.get_partition("t", 0)

    def first(epoch, seq=0):
        return start_verification(part, 5, seq, epoch)
    assert isinstance(first(0), VerificationEntry)
    send(broker, 0, pid=5, epoch=0, seq=0)
    assert first(0, seq=2) is NOT_VERIFYING
    # Any epoch while the transaction is open here (Kafka's hasOngoingTransaction): a new
    # epoch writes only after the coordinator's abort marker closed it; an older one is fenced.
    assert first(1) is NOT_VERIFYING


def test_txn_offset_commit_answers_a_failed_verification_as_kafkas_group_coordinator():
    """maybeConvertOffsetCommitError: the transaction coordinator's retriable answers reach a
    TxnOffsetCommit as they are (kafkajs retries NOT_COORDINATOR by looking the coordinator up
    again), an unreachable one as COORDINATOR_LOAD_IN_PROGRESS; never Produce's
    NOT_ENOUGH_REPLICAS, which a TxnOffsetCommit client does not know."""
    from broker.handlers.txn_offset_commit import verification_error
    for code in (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NOT_COORDINATOR,
                 ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                 ErrorCode.INVALID_TXN_STATE, ErrorCode.TRANSACTION_ABORTABLE,
                 ErrorCode.INVALID_PRODUCER_EPOCH):
        assert verification_error(code) == code
    assert verification_error(ErrorCode.NETWORK_EXCEPTION) == \
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


@pytest.mark.parametrize("version,expected", [
    (0, ErrorCode.COORDINATOR_NOT_AVAILABLE), (1, ErrorCode.COORDINATOR_NOT_AVAILABLE),
    (2, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), (4, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)])
def test_txn_offset_commit_before_v2_gets_no_load_in_progress(version, expected):
    """Kafka's handleTxnOffsetCommitRequest (KAFKA-7296): COORDINATOR_LOAD_IN_PROGRESS is
    COORDINATOR_NOT_AVAILABLE for v0-1 (Java 0.11-2.2 producers, aiokafka's v0)."""
    from broker.handlers.txn_offset_commit import _response
    from protocol.messages.txn_offset_commit import TxnOffsetCommitRequest
    request = TxnOffsetCommitRequest(
        transactional_id="tx", group_id="g", producer_id=1, producer_epoch=0, topics=[
            TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name="t", partitions=[
                TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=5)])])
    response = _response(request, {("t", 0): ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}, version)
    assert response.topics[0].partitions[0].error_code == expected
