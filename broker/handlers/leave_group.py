"""LeaveGroup (api key 13), versions 0-5.

Behaviour: removes members and starts a rebalance for the rest. v0-v2 name one member
(`member_id`); the member's error is the response's error. v3+ batch members with
group.instance.id (KIP-345): an empty member id with an instance id removes that static member
(admin removal); per-member errors, top-level NONE. v5 adds a reason (not stored).
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.leave_group import LeaveGroupResponse

from coordinator.handler_support import check_group

API_KEY = ApiKey.LEAVE_GROUP
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(broker, ctx, request):
    version = ctx.api_version
    coordinator, error = check_group(broker, request.group_id)
    if error != ErrorCode.NONE:
        return LeaveGroupResponse(error_code=error)
    if version >= 3:
        leaving = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        leaving = [(request.member_id, None)]
    answer = await coordinator.execute("leave_group", request.group_id, leaving)
    if version >= 3:
        return LeaveGroupResponse(error_code=answer.error, members=[
            LeaveGroupResponse.MemberResponse(member_id=mid, group_instance_id=iid,
                                              error_code=code)
            for mid, iid, code in answer.members])
    if answer.error != ErrorCode.NONE or not answer.members:
        return LeaveGroupResponse(error_code=answer.error)
    return LeaveGroupResponse(error_code=answer.members[0][2])
