"""DescribeAcls (api key 29), versions 0-3.

This broker has no authorizer (`authorizer.class.name` is empty, Kafka's default), so, as Kafka's
AclApis answers without one: SECURITY_DISABLED "No Authorizer is configured on the broker" and no
resources. Admin tools and UIs that list ACLs (kafka-acls.sh --list, AKHQ, Kafka UI) then report
ACLs as disabled, as they do against a default Kafka broker, instead of an unsupported API.

A filter with an UNKNOWN (0) resource type, pattern type, operation or permission type is a
request Kafka cannot parse (DescribeAclsRequest's validation): the connection closes.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.describe_acls import DescribeAclsResponse

from broker.context import CloseConnection

API_KEY = ApiKey.DESCRIBE_ACLS
MIN_VERSION = 0
MAX_VERSION = 3

UNKNOWN = 0          # ResourceType, PatternType, AclOperation and AclPermissionType's UNKNOWN


def has_unknown(resource_type, pattern_type, operation, permission_type) -> bool:
    """Kafka's ACL requests refuse UNKNOWN in any of these (codes outside the enums pass)."""
    return UNKNOWN in (resource_type, pattern_type, operation, permission_type)


async def handle(broker, ctx, request):
    if has_unknown(request.resource_type_filter, request.pattern_type_filter, request.operation,
                   request.permission_type):
        raise CloseConnection("DescribeAclsRequest contains UNKNOWN elements")
    return DescribeAclsResponse(error_code=ErrorCode.SECURITY_DISABLED,
                                error_message="No Authorizer is configured on the broker",
                                resources=[])
