"""OffsetCommit (api key 8), versions 0-9.

Behaviour: offsets are validated (member, generation, metadata size) by the coordinator and
written to `__consumer_offsets` as OffsetCommit records before the answer, so an answered commit
is never lost. Simple consumers and admin tools commit with generation -1 (and any member id) to
a group that is not using group management. Partitions this cluster does not have answer
UNKNOWN_TOPIC_OR_PARTITION and are not stored. A group-level failure gives every partition the
same error. OFFSET_METADATA_TOO_LARGE is per partition (offset.metadata.max.bytes).
Version quirks: v0 has no generation or member (stored as a simple commit); v1 has a per-partition
commit_timestamp, stored as the offset's commit time unless -1 (then the broker's clock), as
Kafka's GroupCoordinatorAdapter; v2-v4 carry
retention_time_ms (-1 = broker default; otherwise an explicit expire timestamp, written as
OffsetCommitValue v1); v6+ committed_leader_epoch; v7+ group.instance.id; v9 names the field
generation_id_or_member_epoch (KIP-848) and is served with classic-group semantics.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.offset_commit import OffsetCommitResponse

from coordinator.handler_support import check_group, offsets_to_commit

API_KEY = ApiKey.OFFSET_COMMIT
MIN_VERSION = 0
MAX_VERSION = 9

Topic = OffsetCommitResponse.OffsetCommitResponseTopic
Partition = OffsetCommitResponse.OffsetCommitResponsePartition


async def handle(broker, ctx, request):
    version = ctx.api_version
    coordinator, error = check_group(broker, request.group_id, allow_empty=True)
    errors, offsets = offsets_to_commit(broker, request.topics, error, version >= 6)
    if offsets:
        generation = request.generation_id_or_member_epoch if version >= 1 else -1
        retention = request.retention_time_ms if 2 <= version <= 4 else -1
        stamps = {(t.name, p.partition_index): p.commit_timestamp
                  for t in request.topics for p in t.partitions} if version == 1 else None
        answer = await coordinator.execute(
            "commit_offsets", request.group_id, request.member_id if version >= 1 else "",
            request.group_instance_id if version >= 7 else None, generation, offsets,
            retention_time_ms=retention, commit_timestamps=stamps)
        errors.update(answer)
    return _response(request, errors)


def _response(request, errors) -> OffsetCommitResponse:
    return OffsetCommitResponse(topics=[
        Topic(name=topic.name, partitions=[
            Partition(partition_index=p.partition_index,
                      error_code=errors.get((topic.name, p.partition_index), ErrorCode.NONE))
            for p in topic.partitions])
        for topic in request.topics])
