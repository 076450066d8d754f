"""DescribeGroups (api key 15), versions 0-5.

Behaviour: state, protocol type, and (for a Stable group) the selected protocol with every
member's metadata and assignment; in other states members are listed without them, as Kafka
does. An unknown group is described as "Dead" with no error (Kafka before v6). Authorized
operations (v3+) are not computed (no ACLs): the field keeps its "not requested" value.
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


async def handle(broker, ctx, request):
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
                member_assignment=m.assignment) for m in d.members]))
    return R(groups=groups)
