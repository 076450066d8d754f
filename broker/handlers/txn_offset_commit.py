"""TxnOffsetCommit (api key 28), versions 0-4 (Kafka 3.9's): a transaction's consumer offsets.

Behaviour (Kafka's handleTxnOffsetCommitRequest and the group coordinator's
handleTxnCommitOffsets): sent to the group's coordinator by a transactional producer after
AddOffsetsToTxn (`send_offsets_to_transaction`). The offsets are written to `__consumer_offsets`
as a transactional batch of the producer and stay invisible until the transaction's COMMIT
marker reaches that partition (an ABORT drops them); OffsetFetch with require_stable answers
UNSTABLE_OFFSET_COMMIT for them meanwhile (coordinator/offsets.py). The group is created when
missing (a consumer using assign() has none). From v3 the request carries the consumer's member
id, group instance id and generation (KIP-447): when any is set they must match the group
(UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION), so a zombie consumer cannot commit.
Partitions this cluster does not have answer UNKNOWN_TOPIC_OR_PARTITION and are not stored;
OFFSET_METADATA_TOO_LARGE is per partition.

As Kafka 3.9 (KIP-890 part 1), the group's `__consumer_offsets` partition is first verified
with the transaction coordinator, like a produce's first write in a transaction
(broker/txn_verification.py): every offset then answers INVALID_TXN_STATE when the partition
was not added to the transaction (AddOffsetsToTxn; TRANSACTION_ABORTABLE from v4). Other
answers of the transaction coordinator reach the client as Kafka's GroupCoordinator passes them
(maybeConvertOffsetCommitError): CONCURRENT_TRANSACTIONS, COORDINATOR_NOT_AVAILABLE and
NOT_COORDINATOR as they are, a coordinator that could not be reached as
COORDINATOR_LOAD_IN_PROGRESS (all retried). The append carries
the verification's guard, so a marker ending the transaction meanwhile refuses it
(INVALID_TXN_STATE) instead of leaving offsets in a transaction the coordinator forgot.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.txn_offset_commit import TxnOffsetCommitResponse
from storage.producer_state import NO_SEQUENCE, NOT_VERIFYING

from coordinator.handler_support import check_group, offsets_to_commit
from coordinator.offsets import map_append_error
from coordinator.partitioning import OFFSETS_TOPIC

from broker.txn_verification import enabled, start_verification, verify

API_KEY = ApiKey.TXN_OFFSET_COMMIT
MIN_VERSION = 0
MAX_VERSION = 4

Topic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
Partition = TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition


async def handle(broker, ctx, request):
    version = ctx.api_version
    coordinator, error = check_group(broker, request.group_id)
    if error == ErrorCode.NONE and (request.producer_id < 0 or request.producer_epoch < 0):
        error = ErrorCode.INVALID_PRODUCER_ID_MAPPING
    errors, offsets = offsets_to_commit(broker, request.topics, error, version >= 2)
    if offsets:
        guard, error = await _verify(broker, coordinator, request, version)
        if error != ErrorCode.NONE:
            errors.update({(t, p): error for t, p, *_ in offsets})
            return _response(request, errors, version)
        answer = await coordinator.execute(
            "txn_commit_offsets", request.group_id, request.producer_id,
            request.producer_epoch,
            request.member_id if version >= 3 else "",
            request.group_instance_id if version >= 3 else None,
            request.generation_id if version >= 3 else -1, offsets, verification=guard)
        errors.update(answer)
    return _response(request, errors, version)


async def _verify(broker, coordinator, request, version) -> tuple:
    """(the guard for the offsets' append or None, the error every offset answers)."""
    if not enabled(broker):
        return None, ErrorCode.NONE
    tp = (OFFSETS_TOPIC, coordinator.partition_for(request.group_id))
    guard = start_verification(broker.replica_manager.get_partition(*tp), request.producer_id,
                               NO_SEQUENCE, request.producer_epoch)
    if guard is None or guard is NOT_VERIFYING:
        return guard, ErrorCode.NONE
    failed = await verify(broker, request.transactional_id, request.producer_id,
                          request.producer_epoch, [tp], version >= 4)
    if tp in failed:
        return None, verification_error(failed[tp])
    return guard, ErrorCode.NONE


def verification_error(code: int) -> int:
    """A failed verification as every offset answers it (Kafka's maybeConvertOffsetCommitError
    of AddPartitionsToTxnManager's answer): an unreachable coordinator is
    COORDINATOR_LOAD_IN_PROGRESS, the rest as an append error of the offsets."""
    if code == ErrorCode.NETWORK_EXCEPTION:
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    return map_append_error(code, for_offsets=True)


def _response(request, errors, version) -> TxnOffsetCommitResponse:
    def code(key):
        error = errors.get(key, ErrorCode.NONE)
        # Kafka's handleTxnOffsetCommitRequest: clients before v2 (Java 0.11-2.2, aiokafka)
        # do not know COORDINATOR_LOAD_IN_PROGRESS here (KAFKA-7296).
        if version < 2 and error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return error
    return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[
        Topic(name=topic.name, partitions=[
            Partition(partition_index=p.partition_index,
                      error_code=code((topic.name, p.partition_index)))
            for p in topic.partitions])
        for topic in request.topics])
