"""OffsetDelete (api key 47), version 0 (KIP-496).

Behaviour: deletes a group's committed offsets (tombstones in `__consumer_offsets`). An Empty
group loses any requested partition; an active consumer group keeps the topics its members
subscribe to (GROUP_SUBSCRIBED_TO_TOPIC per partition); an active group of another protocol type
answers NON_EMPTY_GROUP; an unknown group GROUP_ID_NOT_FOUND. Partitions the cluster does not
have answer UNKNOWN_TOPIC_OR_PARTITION.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.offset_delete import OffsetDeleteResponse

from coordinator.handler_support import check_group, partition_exists

API_KEY = ApiKey.OFFSET_DELETE
MIN_VERSION = 0
MAX_VERSION = 0

R = OffsetDeleteResponse


async def handle(broker, ctx, request):
    coordinator, error = check_group(broker, request.group_id)
    if error != ErrorCode.NONE:
        return R(error_code=error)
    errors: dict[tuple[str, int], int] = {}
    wanted = []
    for topic in request.topics:
        for p in topic.partitions:
            key = (topic.name, p.partition_index)
            if partition_exists(broker, *key):
                wanted.append(key)
            else:
                errors[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    group_error, deleted = await coordinator.execute("delete_offsets", request.group_id, wanted)
    if group_error != ErrorCode.NONE:
        return R(error_code=group_error)
    errors.update(deleted)
    return R(topics=[R.OffsetDeleteResponseTopic(name=topic.name, partitions=[
        R.OffsetDeleteResponsePartition(partition_index=p.partition_index,
                                        error_code=errors.get((topic.name, p.partition_index),
                                                              ErrorCode.NONE))
        for p in topic.partitions]) for topic in request.topics])
