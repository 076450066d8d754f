"""SaslHandshake (api key 17), versions 0-1.

Every listener here is PLAINTEXT, so no SASL mechanism is enabled: any mechanism is answered
UNSUPPORTED_SASL_MECHANISM with an empty list of enabled mechanisms, as Kafka answers on a
listener without SASL.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.sasl_handshake import SaslHandshakeResponse

API_KEY = ApiKey.SASL_HANDSHAKE
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(broker, ctx, request):
    return SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=[])
