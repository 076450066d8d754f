"""The API registry: which request/response classes serve each api key, and their versions.

Built from the generated table `protocol.messages.API_MESSAGES`, so it cannot drift from the
specs.  It lists every API the specs define; what the *broker* advertises in ApiVersions is the
subset it has handlers for (the broker's registry decides that, not this module).
"""
from dataclasses import dataclass

from .api_keys import ApiKey
from .messages import API_MESSAGES

__all__ = ["ApiKey", "ApiSpec", "API_SPECS", "request_class", "response_class", "is_flexible"]


@dataclass(frozen=True)
class ApiSpec:
    name: str               # "Produce"
    api_key: int
    request: type          # ProduceRequest
    response: type         # ProduceResponse
    min_version: int
    max_version: int
    flexible_min: int | None   # first flexible version, None when never flexible
    listeners: tuple        # ("zkBroker", "broker", ...): who serves it in Kafka

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def is_flexible(self, version: int) -> bool:
        return self.flexible_min is not None and version >= self.flexible_min


API_SPECS: dict[int, ApiSpec] = {
    row[0]: ApiSpec(name=row[1], api_key=row[0], request=row[2], response=row[3],
                    min_version=row[4], max_version=row[5], flexible_min=row[6], listeners=row[7])
    for row in API_MESSAGES
}


def request_class(api_key: int) -> type:
    """The request class of an api key (KeyError for a key the specs do not define)."""
    return API_SPECS[api_key].request


def response_class(api_key: int) -> type:
    """The response class of an api key (KeyError for a key the specs do not define)."""
    return API_SPECS[api_key].response


def is_flexible(api_key: int, api_version: int) -> bool:
    spec = API_SPECS.get(api_key)
    return spec is not None and spec.is_flexible(api_version)
