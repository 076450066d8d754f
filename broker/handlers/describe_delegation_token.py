"""DescribeDelegationToken (api key 41), versions 0-3.

As Kafka on a PLAINTEXT listener (every listener here): DELEGATION_TOKEN_REQUEST_NOT_ALLOWED and
no tokens (see create_delegation_token).
"""
from protocol.api import ApiKey
from protocol.messages.describe_delegation_token import DescribeDelegationTokenResponse

from broker.handlers.create_delegation_token import NOT_ALLOWED

API_KEY = ApiKey.DESCRIBE_DELEGATION_TOKEN
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(broker, ctx, request):
    return DescribeDelegationTokenResponse(error_code=NOT_ALLOWED, tokens=[])
