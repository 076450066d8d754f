"""OffsetFetch (api key 9), versions 0-9.

Behaviour: committed offsets of a group (-1, leader epoch -1 and "" metadata where none); a null
topic list (v2+) means every partition the group has offsets for. `require_stable` (v7+,
KIP-447): a partition whose commit is still being written answers UNSTABLE_OFFSET_COMMIT, so the
client retries instead of reading an offset about to change.
Version quirks: v0-v1 have no top-level error, so a coordinator error goes to every partition;
v2-v7 report it at the top level; v8+ batch groups, each with its own error (member id and
epoch of v9 are KIP-848 fields and not checked for classic groups).
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.offset_fetch import OffsetFetchResponse

from coordinator.handler_support import check_group

API_KEY = ApiKey.OFFSET_FETCH
MIN_VERSION = 0
MAX_VERSION = 9

R = OffsetFetchResponse


def _fetch(broker, group_id, topics, require_stable):
    """(error, [PartitionOffset]) for one group; topics None = all."""
    coordinator, error = check_group(broker, group_id, allow_empty=True)
    if error != ErrorCode.NONE:
        return error, None
    partitions = None
    if topics is not None:
        partitions = [(t.name, p) for t in topics for p in t.partition_indexes]
    return ErrorCode.NONE, coordinator.manager.fetch_offsets(group_id, partitions,
                                                             require_stable).partitions


def _grouped(answers, partition_class, topic_class):
    topics: dict[str, list] = {}
    for a in answers:
        topics.setdefault(a.topic, []).append(partition_class(
            partition_index=a.partition, committed_offset=a.offset,
            committed_leader_epoch=a.leader_epoch, metadata=a.metadata, error_code=a.error))
    return [topic_class(name=name, partitions=parts) for name, parts in topics.items()]


async def handle(broker, ctx, request):
    version = ctx.api_version
    require_stable = request.require_stable if version >= 7 else False
    if version >= 8:
        groups = []
        for g in request.groups:
            error, answers = _fetch(broker, g.group_id, g.topics, require_stable)
            groups.append(R.OffsetFetchResponseGroup(
                group_id=g.group_id, error_code=error,
                topics=_grouped(answers or [], R.OffsetFetchResponsePartitions,
                                R.OffsetFetchResponseTopics)))
        return R(groups=groups)
    topics = request.topics if (version >= 2 or request.topics) else []
    error, answers = _fetch(broker, request.group_id, topics, require_stable)
    if error != ErrorCode.NONE:
        if version >= 2:
            return R(error_code=error)
        return R(topics=[R.OffsetFetchResponseTopic(name=t.name, partitions=[
            R.OffsetFetchResponsePartition(partition_index=p, committed_offset=-1,
                                           metadata="", error_code=error)
            for p in t.partition_indexes]) for t in request.topics])
    return R(topics=_grouped(answers, R.OffsetFetchResponsePartition, R.OffsetFetchResponseTopic))
