"""DescribeClientQuotas (api key 48), versions 0-1 (KIP-546).

Behaviour (Kafka's ClientQuotasImage.describe):
- Components filter the stored entities, at most one per entity type: match_type 0 (exact) the
  entity has that type with that name, 1 (default) the entity has the default of that type
  (null name), 2 (any) the entity has that type, with any name or the default.
- strict: only entities with exactly the components' types (alice's user quota, not alice's
  user+client-id quotas). Without components and not strict: every entity; strict with no
  components: none.
- Request errors are top-level: INVALID_REQUEST for an empty entity type, a type twice, an exact
  match without a name, a default or any match with a name, an unknown match type, an ip
  component with a user or client-id one; UNSUPPORTED_VERSION for another entity type.
- Each entry lists the entity's parts (user, client-id, ip order) and its values.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.describe_client_quotas import DescribeClientQuotasResponse

from broker.quotas import CLIENT_ID, ENTITY_TYPES, IP, USER, invalid

API_KEY = ApiKey.DESCRIBE_CLIENT_QUOTAS
MIN_VERSION = 0
MAX_VERSION = 1

MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2

R = DescribeClientQuotasResponse
_ORDER = {USER: 0, CLIENT_ID: 1, IP: 2}


def parse_filter(components) -> tuple:
    """-> ({type: name or None} exact/default matches, {types} any matches); KafkaError."""
    exact, any_types = {}, set()
    for c in components:
        if not c.entity_type:
            raise invalid("Invalid empty entity type.")
        if c.entity_type in exact or c.entity_type in any_types:
            raise invalid(f"Entity type {c.entity_type} cannot appear more than once in the "
                          f"filter.")
        if c.entity_type not in ENTITY_TYPES:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                             f"Unsupported entity type {c.entity_type}")
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise invalid("Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[c.entity_type] = c.match
        elif c.match_type == MATCH_DEFAULT:
            if c.match is not None:
                raise invalid("Request specified MATCH_TYPE_DEFAULT, but also specified a match "
                              "string.")
            exact[c.entity_type] = None
        elif c.match_type == MATCH_ANY:
            if c.match is not None:
                raise invalid("Request specified MATCH_TYPE_SPECIFIED, but also specified a "
                              "match string.")
            any_types.add(c.entity_type)
        else:
            raise invalid(f"Unknown match type {c.match_type}")
    types = set(exact) | any_types
    if IP in types and (USER in types or CLIENT_ID in types):
        raise invalid("Invalid entity filter component combination. IP filter component should "
                      "not be used with user or clientId filter component.")
    return exact, any_types


def matches(entity: tuple, exact: dict, any_types: set, strict: bool) -> bool:
    parts = dict(entity)
    if not exact and not any_types:
        return not strict
    for entity_type, name in exact.items():
        if entity_type not in parts or parts[entity_type] != name:
            return False
    for entity_type in any_types:
        if entity_type not in parts:
            return False
    return not strict or len(parts) == len(exact) + len(any_types)


async def handle(broker, ctx, request):
    try:
        exact, any_types = parse_filter(request.components)
    except KafkaError as exc:
        return R(throttle_time_ms=0, error_code=int(exc.error_code), error_message=exc.message,
                 entries=None)
    entries = []
    for entity, values in broker.metadata.client_quotas().items():
        if not matches(entity, exact, any_types, request.strict):
            continue
        parts = sorted(entity, key=lambda p: _ORDER[p[0]])
        entries.append(R.EntryData(
            entity=[R.EntityData(entity_type=t, entity_name=n) for t, n in parts],
            values=[R.ValueData(key=k, value=v) for k, v in sorted(values.items())]))
    return R(throttle_time_ms=0, error_code=0, error_message=None, entries=entries)
