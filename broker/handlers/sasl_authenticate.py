"""SaslAuthenticate (api key 36), versions 0-2.

As Kafka's KafkaApis: with no SASL exchange in progress (every listener here is PLAINTEXT),
ILLEGAL_SASL_STATE and "SaslAuthenticate request received after successful authentication".
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.sasl_authenticate import SaslAuthenticateResponse

API_KEY = ApiKey.SASL_AUTHENTICATE
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(broker, ctx, request):
    return SaslAuthenticateResponse(
        error_code=ErrorCode.ILLEGAL_SASL_STATE,
        error_message="SaslAuthenticate request received after successful authentication")
