"""CreateDelegationToken (api key 38), versions 0-3.

Every listener here is PLAINTEXT, where Kafka refuses delegation token requests before anything
else (KafkaApis.allowTokenRequests): DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, with the owner (the
request's, else the connection's principal, User:ANONYMOUS) and the requester as Kafka's
prepareResponse fills them, timestamps -1 and no token. kafka-delegation-tokens.sh then prints
Kafka's "Delegation Token requests are not allowed on PLAINTEXT/1-way SSL channels ..." instead
of an unsupported API. Renew, expire and describe answer the same error.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.create_delegation_token import CreateDelegationTokenResponse

API_KEY = ApiKey.CREATE_DELEGATION_TOKEN
MIN_VERSION = 0
MAX_VERSION = 3

NOT_ALLOWED = ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
ERROR_TIMESTAMP = -1                    # Kafka's DelegationTokenManager.ErrorTimestamp


def principal_parts(principal: str) -> tuple:
    """"User:alice" -> ("User", "alice"), as KafkaPrincipal's type and name."""
    kind, _, name = principal.partition(":")
    return kind, name


async def handle(broker, ctx, request):
    requester = principal_parts(ctx.principal)
    owner = ((request.owner_principal_type or "", request.owner_principal_name)
             if request.owner_principal_name else requester)
    return CreateDelegationTokenResponse(
        error_code=NOT_ALLOWED, principal_type=owner[0], principal_name=owner[1],
        token_requester_principal_type=requester[0], token_requester_principal_name=requester[1],
        issue_timestamp_ms=ERROR_TIMESTAMP, expiry_timestamp_ms=ERROR_TIMESTAMP,
        max_timestamp_ms=ERROR_TIMESTAMP, token_id="", hmac=b"")
