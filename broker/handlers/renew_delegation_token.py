"""RenewDelegationToken (api key 39), versions 0-2.

As Kafka on a PLAINTEXT listener (every listener here): DELEGATION_TOKEN_REQUEST_NOT_ALLOWED with
the error expiry timestamp -1 (see create_delegation_token).
"""
from protocol.api import ApiKey
from protocol.messages.renew_delegation_token import RenewDelegationTokenResponse

from broker.handlers.create_delegation_token import ERROR_TIMESTAMP, NOT_ALLOWED

API_KEY = ApiKey.RENEW_DELEGATION_TOKEN
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(broker, ctx, request):
    return RenewDelegationTokenResponse(error_code=NOT_ALLOWED, expiry_timestamp_ms=ERROR_TIMESTAMP)
