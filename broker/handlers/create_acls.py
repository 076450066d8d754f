"""CreateAcls (api key 30), versions 0-3.

No authorizer here (Kafka's default): every creation is answered SECURITY_DISABLED "No Authorizer
is configured.", as Kafka's AclApis answers without one; nothing is stored. A creation with an
UNKNOWN (0) element closes the connection, as Kafka's request validation does.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.create_acls import CreateAclsResponse

from broker.context import CloseConnection
from broker.handlers.describe_acls import has_unknown

API_KEY = ApiKey.CREATE_ACLS
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(broker, ctx, request):
    creations = request.creations or []
    if any(has_unknown(c.resource_type, c.resource_pattern_type, c.operation, c.permission_type)
           for c in creations):
        raise CloseConnection("CreatableAcls contain unknown elements")
    return CreateAclsResponse(results=[
        CreateAclsResponse.AclCreationResult(error_code=ErrorCode.SECURITY_DISABLED,
                                             error_message="No Authorizer is configured.")
        for _ in creations])
