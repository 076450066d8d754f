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
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.txn_offset_commit import TxnOffsetCommitResponse

from coordinator.handler_support import check_group, offsets_to_commit

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
        answer = await coordinator.execute(
            "txn_commit_offsets", request.group_id, request.producer_id,
            request.producer_epoch,
            request.member_id if version >= 3 else "",
            request.group_instance_id if version >= 3 else None,
            request.generation_id if version >= 3 else -1, offsets)
        errors.update(answer)
    return _response(request, errors)


def _response(request, errors) -> TxnOffsetCommitResponse:
    return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[
        Topic(name=topic.name, partitions=[
            Partition(partition_index=p.partition_index,
                      error_code=errors.get((topic.name, p.partition_index), ErrorCode.NONE))
            for p in topic.partitions])
        for topic in request.topics])
