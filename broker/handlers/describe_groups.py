"""DescribeGroups (api key 15), versions 0-5.

Behaviour: state, protocol type, and (for a Stable group) the selected protocol with every
member's metadata and assignment; in other states members are listed without them, as Kafka
does. An unknown group is described as "Dead" with no error (Kafka before v6). Authorized
operations (v3+, when asked for): with no authorizer every operation of a group is allowed, as
Kafka's AuthHelper answers (READ, DELETE, DESCRIBE); otherwise the "not requested" value.
v4+ add group.instance.id per member.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.describe_groups import DescribeGroupsResponse

from coordinator.handler_support import check_group

API_KEY = ApiKey.DESCRIBE_GROUPS
MIN_VERSION = 0
MAX_VERSION = 5

R = DescribeGroupsResponse
# AclOperation codes READ 3, DELETE 6, DESCRIBE 8: every operation a group supports
GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
NOT_REQUESTED = -2147483648


async def handle(broker, ctx, request):
    operations = GROUP_OPERATIONS if ctx.api_version >= 3 and \
        request.include_authorized_operations else NOT_REQUESTED
    groups = []
    for group_id in request.groups:
        coordinator, error = check_group(broker, group_id, allow_empty=True)
        if error != ErrorCode.NONE:
            groups.append(R.DescribedGroup(error_code=error, group_id=group_id))
            continue
        [d] = coordinator.manager.describe_groups([group_id])
        groups.append(R.DescribedGroup(
            error_code=d.error, group_id=d.group_id, group_state=d.state,
            protocol_type=d.protocol_type, protocol_data=d.protocol_data,
            members=[R.DescribedGroupMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id,
                client_id=m.client_id, client_host=m.client_host, member_metadata=m.metadata,
                member_assignment=m.assignment) for m in d.members],
            authorized_operations=operations if d.error == ErrorCode.NONE else NOT_REQUESTED))
    return R(groups=groups)
