"""ApiVersions (api key 18), versions 0-4.

Behaviour:
- Lists every API in the handler registry with the versions its module serves (so it cannot
  drift), plus no features (no supported/finalized features: this broker has no KRaft feature
  levels; feature fields are tagged and only written when non-default, which keeps old librdkafka
  working - see TOOLCHAIN.md).
- A request at a version this broker does not serve is answered at v0 with UNSUPPORTED_VERSION and
  the full list (Kafka does this so a newer client can pick a version): see `unsupported_version`,
  called by the connection before decoding the body.
- v3+ requests carry client_software_name/version; Kafka validates them (INVALID_REQUEST when
  they are not [a-zA-Z0-9](?:[a-zA-Z0-9\\-.]*[a-zA-Z0-9])?); we do the same.
"""
import re

from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.api_versions import ApiVersionsResponse

API_KEY = ApiKey.API_VERSIONS
MIN_VERSION = 0
MAX_VERSION = 4

_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")
_cached_keys = None


def api_keys() -> list:
    global _cached_keys
    if _cached_keys is None:
        from broker.handlers import HANDLERS
        _cached_keys = [ApiVersionsResponse.ApiVersion(api_key=key, min_version=m.MIN_VERSION,
                                                       max_version=m.MAX_VERSION)
                        for key, m in HANDLERS.items()]
    return _cached_keys


def unsupported_version() -> ApiVersionsResponse:
    """The v0 answer to an ApiVersions request at a version we do not serve."""
    return ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=api_keys())


async def handle(broker, ctx, request):
    if ctx.api_version >= 3 and not (_SOFTWARE.fullmatch(request.client_software_name or "")
                                     and _SOFTWARE.fullmatch(request.client_software_version or "")):
        return ApiVersionsResponse(error_code=ErrorCode.INVALID_REQUEST, api_keys=api_keys())
    return ApiVersionsResponse(api_keys=api_keys())
