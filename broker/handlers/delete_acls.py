"""DeleteAcls (api key 31), versions 0-3.

No authorizer here (Kafka's default): every filter is answered SECURITY_DISABLED "No Authorizer is
configured." with no matching ACLs, as Kafka's AclApis answers without one. A filter with an
UNKNOWN (0) element closes the connection, as Kafka's request validation does.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.delete_acls import DeleteAclsResponse

from broker.context import CloseConnection
from broker.handlers.describe_acls import has_unknown

API_KEY = ApiKey.DELETE_ACLS
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(broker, ctx, request):
    filters = request.filters or []
    if any(has_unknown(f.resource_type_filter, f.pattern_type_filter, f.operation,
                       f.permission_type) for f in filters):
        raise CloseConnection("Filters contain UNKNOWN elements")
    return DeleteAclsResponse(filter_results=[
        DeleteAclsResponse.DeleteAclsFilterResult(error_code=ErrorCode.SECURITY_DISABLED,
                                                  error_message="No Authorizer is configured.",
                                                  matching_acls=[])
        for _ in filters])
