"""Heartbeat (api key 12), versions 0-4.

Behaviour: resets the member's session timeout; answers REBALANCE_IN_PROGRESS while the group
prepares a rebalance (the member must rejoin), ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID /
FENCED_INSTANCE_ID for stale members; NONE while the group's partition is still loading (as
Kafka: the member is not yet known, so it cannot be expired either). v3+ carry group.instance.id.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.heartbeat import HeartbeatResponse

from coordinator.handler_support import check_group

API_KEY = ApiKey.HEARTBEAT
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(broker, ctx, request):
    coordinator, error = check_group(broker, request.group_id)
    if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
        return HeartbeatResponse(error_code=ErrorCode.NONE)   # as Kafka: answered blindly
    if error != ErrorCode.NONE:
        return HeartbeatResponse(error_code=error)
    error = await coordinator.execute(
        "heartbeat", request.group_id, request.member_id,
        request.group_instance_id if ctx.api_version >= 3 else None, request.generation_id)
    return HeartbeatResponse(error_code=error)
