"""JoinGroup (api key 11), versions 0-9.

Behaviour: Kafka's classic group protocol through the coordinator's state machine
(coordinator/group/manager.py): the request is parked until the join phase of the rebalance
completes (or answered at once: errors, MEMBER_ID_REQUIRED, a follower rejoining a stable group).
Version quirks: v0 has no rebalance timeout (the session timeout is used); v4+ require a known
member id (KIP-394: the first join answers MEMBER_ID_REQUIRED with an id to rejoin with); v5+
carry group.instance.id (static membership, KIP-345); v7+ answer protocol_type and a nullable
protocol_name; v8+ send a reason (logged nowhere); v9+ answer skip_assignment: a static leader
restarting into a Stable group is told it leads but must not run its assignor (KIP-814).
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.join_group import JoinGroupResponse

from coordinator.handler_support import check_group, client_host

API_KEY = ApiKey.JOIN_GROUP
MIN_VERSION = 0
MAX_VERSION = 9


async def handle(broker, ctx, request):
    version = ctx.api_version
    coordinator, error = check_group(broker, request.group_id)
    if error != ErrorCode.NONE:
        return JoinGroupResponse(error_code=error, member_id=request.member_id,
                                 protocol_name=None if version >= 7 else "")
    rebalance_timeout = request.rebalance_timeout_ms if version >= 1 else \
        request.session_timeout_ms
    instance_id = request.group_instance_id if version >= 5 else None
    protocols = [(p.name, bytes(p.metadata)) for p in request.protocols]
    answer = await coordinator.execute(
        "join_group", request.group_id, request.member_id, instance_id, ctx.client_id or "",
        client_host(ctx), request.session_timeout_ms, rebalance_timeout, request.protocol_type,
        protocols, version >= 4, parked=True, supports_skip_assignment=version >= 9)
    protocol_name = answer.protocol_name
    if version < 7 and protocol_name is None:
        protocol_name = ""
    return JoinGroupResponse(
        error_code=answer.error, generation_id=answer.generation_id,
        protocol_type=answer.protocol_type, protocol_name=protocol_name,
        leader=answer.leader, skip_assignment=answer.skip_assignment, member_id=answer.member_id,
        members=[JoinGroupResponse.JoinGroupResponseMember(
            member_id=mid, group_instance_id=iid, metadata=metadata)
            for mid, iid, metadata in answer.members])
