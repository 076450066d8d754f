"""SaslHandshake (api key 17), versions 0-1.

Every listener here is PLAINTEXT: no SASL exchange happens, so a handshake that reaches the
request handlers is answered ILLEGAL_SASL_STATE with no mechanisms, as Kafka's KafkaApis
answers one (on a PLAINTEXT listener, or after authentication).
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.sasl_handshake import SaslHandshakeResponse

API_KEY = ApiKey.SASL_HANDSHAKE
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(broker, ctx, request):
    return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
