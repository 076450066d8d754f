"""Transaction verification on the produce path (KIP-890 part 1, Kafka 3.8+'s
`transaction.partition.verification.enable`, default true).

A transactional producer's first write to a partition in a transaction must come after its
AddPartitionsToTxn; if a late write of an aborted transaction arrived afterwards, the partition
would open a transaction that no marker will ever close (a "hanging" transaction, holding the
last stable offset back for every read_committed consumer). So before appending a
transactional batch to a partition where that producer has no open transaction at that epoch,
the leader asks the transaction coordinator whether the partition is in the producer's ongoing
transaction: AddPartitionsToTxn with `verify_only` (v4, between brokers; a direct call when the
coordinator is this broker). Kafka's AddPartitionsToTxnManager hands the coordinator's answer
on with two changes (`coordinator_answer`): PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH, and
TRANSACTION_ABORTABLE becomes INVALID_TXN_STATE for clients that do not know it (Produce
before v11, TxnOffsetCommit before v4); a coordinator it cannot reach is NETWORK_EXCEPTION.
Each request then answers in its own words. Produce, as Kafka's ReplicaManager
(`produce_error`):

- partition not in the transaction: INVALID_TXN_STATE "Partition was not added to the
  transaction";
- CONCURRENT_TRANSACTIONS, NETWORK_EXCEPTION, COORDINATOR_LOAD_IN_PROGRESS,
  COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: NOT_ENOUGH_REPLICAS "Unable to verify the
  partition has been added to the transaction. Underlying error: ..." (retried by every client).

TxnOffsetCommit as Kafka's group coordinator (broker/handlers/txn_offset_commit.py).

The check and the append are tied by Kafka's verification guard (storage/producer_state.py,
Verification): `start_verification` opens the producer's verification entry in the
partition's producer state before the coordinator is asked, and the append carries it. A marker
written meanwhile (the transaction aborted while the answer was on its way) drops the entry, and
the write is then refused with INVALID_TXN_STATE rather than opening a hanging transaction.
"""
import logging

from protocol.errors import ErrorCode
from protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest

from coordinator.internal_topics import TRANSACTION_STATE_TOPIC
from coordinator.partitioning import partition_for

log = logging.getLogger(__name__)

VERIFY_VERSION = 4
_RETRIABLE = frozenset({ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NETWORK_EXCEPTION,
                        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                        ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})
# RecordBatch v2: producer id int64 at byte 43, producer epoch int16 at 51, base sequence
# int32 at 53.
_PID_POS, _EPOCH_POS, _SEQUENCE_POS = 43, 51, 53


def producer_of(records) -> tuple[int, int]:
    view = memoryview(records)
    return (int.from_bytes(view[_PID_POS:_PID_POS + 8], "big", signed=True),
            int.from_bytes(view[_EPOCH_POS:_EPOCH_POS + 2], "big", signed=True))


def enabled(broker) -> bool:
    """transaction.partition.verification.enable, on a broker that coordinates
    transactions."""
    config = getattr(broker, "config", None)
    return config is not None and bool(config.get("transaction.partition.verification.enable")) \
        and getattr(broker, "txn_coordinator", None) is not None


def sequence_of(records) -> int:
    view = memoryview(records)
    return int.from_bytes(view[_SEQUENCE_POS:_SEQUENCE_POS + 4], "big", signed=True)


def start_verification(part, producer_id: int, sequence: int, epoch: int):
    """The guard the append of a producer's transactional write must carry (Log.
    start_transaction_verification): NOT_VERIFYING when its transaction is open here already,
    else an entry to verify with the coordinator. None when this broker does not lead the
    partition (the append answers that)."""
    log_ = part.log if part is not None and part.is_leader else None
    if log_ is None or log_.producer_state is None:
        return None
    return log_.start_transaction_verification(producer_id, sequence, epoch)


def coordinator_answer(code: int, abortable: bool) -> int:
    """The coordinator's answer for a partition as AddPartitionsToTxnManager hands it on;
    `abortable`: the request's version knows TRANSACTION_ABORTABLE."""
    if code == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if code == ErrorCode.TRANSACTION_ABORTABLE and not abortable:
        return ErrorCode.INVALID_TXN_STATE
    return code


def produce_error(code: int) -> tuple[int, str | None]:
    """A failed verification as a Produce partition answers it (module docstring)."""
    if code == ErrorCode.INVALID_TXN_STATE:
        return code, "Partition was not added to the transaction"
    if code in _RETRIABLE:
        return ErrorCode.NOT_ENOUGH_REPLICAS, (
            "Unable to verify the partition has been added to the transaction. Underlying "
            f"error: {ErrorCode(code).name}")
    return code, None


async def verify(broker, transactional_id: str, producer_id: int, producer_epoch: int,
                 partitions: list, abortable: bool) -> dict:
    """{(topic, partition): error code} for the partitions that failed (coordinator_answer);
    the others may be appended."""
    codes = await _ask_coordinator(broker, transactional_id, producer_id, producer_epoch,
                                   partitions)
    failed = {}
    for tp in partitions:
        code = codes.get(tp, ErrorCode.NETWORK_EXCEPTION)
        if code != ErrorCode.NONE:
            failed[tp] = coordinator_answer(code, abortable)
    return failed


async def _ask_coordinator(broker, transactional_id, producer_id, producer_epoch,
                           partitions) -> dict:
    coordinator_id = _coordinator_of(broker, transactional_id)
    if coordinator_id is None:
        return {tp: ErrorCode.COORDINATOR_NOT_AVAILABLE for tp in partitions}
    if coordinator_id == broker.broker_id:
        coordinator = broker.txn_coordinator
        error = coordinator.coordinator_error(transactional_id)
        if error != ErrorCode.NONE:
            return {tp: error for tp in partitions}
        return await coordinator.execute("add_partitions", transactional_id, producer_id,
                                         producer_epoch, list(partitions), True)
    topics: dict[str, list] = {}
    for topic, p in partitions:
        topics.setdefault(topic, []).append(p)
    request = AddPartitionsToTxnRequest(transactions=[
        AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id,
            producer_epoch=producer_epoch, verify_only=True,
            topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps)
                    for t, ps in topics.items()])])
    try:
        conn = await broker.txn_marker_sender.connection(coordinator_id, "verification")
        response = await conn.send(request, VERIFY_VERSION)
    except Exception as exc:                        # noqa: BLE001 - the producer retries
        log.info("Verifying %s with broker %d failed: %s", transactional_id, coordinator_id,
                 exc)
        return {tp: ErrorCode.NETWORK_EXCEPTION for tp in partitions}
    if response.error_code != ErrorCode.NONE:
        # As AddPartitionsToTxnManager: a broker not allowed to ask makes the write invalid.
        code = (ErrorCode.INVALID_TXN_STATE
                if response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                else response.error_code)
        return {tp: code for tp in partitions}
    return {(t.name, p.partition_index): p.partition_error_code
            for r in response.results_by_transaction for t in r.topic_results
            for p in t.results_by_partition}


def _coordinator_of(broker, transactional_id: str):
    """The broker coordinating the id (the leader of its __transaction_state partition), or
    None when unknown."""
    if broker.cluster is None:
        return broker.broker_id if broker.txn_coordinator is not None else None
    topic = broker.metadata.get_topic(TRANSACTION_STATE_TOPIC)
    if topic is None:
        return None
    state = topic.partitions.get(partition_for(transactional_id, len(topic.partitions)))
    if state is None or state.leader is None or state.leader < 0:
        return None
    return state.leader
