"""ListGroups (api key 16), versions 0-5.

Behaviour: every group this broker coordinates (Dead ones excluded), with its protocol type.
v4+ filter by state (case-insensitive, empty = all) and report group_state; v5+ filter by type
and report group_type: every group here is a "classic" group.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.list_groups import ListGroupsResponse

API_KEY = ApiKey.LIST_GROUPS
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(broker, ctx, request):
    coordinator = broker.group_coordinator
    if coordinator is None:
        return ListGroupsResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    version = ctx.api_version
    listing = coordinator.manager.list_groups(
        request.states_filter if version >= 4 else None,
        request.types_filter if version >= 5 else None)
    return ListGroupsResponse(groups=[
        ListGroupsResponse.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type,
                                       group_state=g.state, group_type="classic")
        for g in listing])
