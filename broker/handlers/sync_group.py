"""SyncGroup (api key 14), versions 0-5.

Behaviour: the leader's assignment is written to `__consumer_offsets` (GroupMetadataValue) and
handed to every member; followers' requests are parked until then. In a Stable group the stored
assignment is returned again. Errors as Kafka: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID, INCONSISTENT_GROUP_PROTOCOL; while the group's
partition is still loading, REBALANCE_IN_PROGRESS (as Kafka).
Version quirks: v3+ group.instance.id; v5+ protocol_type/protocol_name in request (checked
against the group's when given) and response.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.sync_group import SyncGroupResponse

from coordinator.handler_support import check_group

API_KEY = ApiKey.SYNC_GROUP
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(broker, ctx, request):
    version = ctx.api_version
    if version >= 5 and (request.protocol_type is None or request.protocol_name is None):
        # mandatory from v5 (Kafka's areMandatoryProtocolTypeAndNamePresent)
        return SyncGroupResponse(error_code=ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    coordinator, error = check_group(broker, request.group_id)
    if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
        # As Kafka: the rebalance's state was lost with the load; older clients do not expect
        # the loading error here, and REBALANCE_IN_PROGRESS sends them back to JoinGroup.
        error = ErrorCode.REBALANCE_IN_PROGRESS
    if error != ErrorCode.NONE:
        return SyncGroupResponse(error_code=error)
    assignments = {a.member_id: bytes(a.assignment) for a in request.assignments}
    answer = await coordinator.execute(
        "sync_group", request.group_id, request.generation_id, request.member_id,
        request.group_instance_id if version >= 3 else None,
        request.protocol_type if version >= 5 else None,
        request.protocol_name if version >= 5 else None, assignments, parked=True)
    return SyncGroupResponse(error_code=answer.error, protocol_type=answer.protocol_type,
                             protocol_name=answer.protocol_name, assignment=answer.assignment)
