"""DeleteGroups (api key 42), versions 0-2.

Behaviour: deletes Empty groups: their offsets and metadata become tombstones in
`__consumer_offsets` and the groups vanish. A group with members answers NON_EMPTY_GROUP, an
unknown one GROUP_ID_NOT_FOUND; results are per group, in request order.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.delete_groups import DeleteGroupsResponse

from coordinator.handler_support import check_group

API_KEY = ApiKey.DELETE_GROUPS
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(broker, ctx, request):
    results: dict[str, int] = {}
    deletable = []
    coordinator = broker.group_coordinator
    names = list(dict.fromkeys(request.groups_names))      # each once, as Kafka's .distinct
    for group_id in names:
        coordinator, error = check_group(broker, group_id, allow_empty=True)
        if error != ErrorCode.NONE:
            results[group_id] = error
        else:
            deletable.append(group_id)
    if deletable:
        results.update(await coordinator.execute("delete_groups", deletable))
    return DeleteGroupsResponse(results=[
        DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=results[g])
        for g in names])
