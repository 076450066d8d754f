"""Client quotas: entities and their configs (KIP-546), and byte-rate enforcement (KIP-13, KIP-55).

Theory of operation
-------------------
A quota *entity* is a user, a client id, a user with a client id, or an IP. Each part has a name,
or None for the *default* entity of its type ("the default user"). Entities are kept as canonical
tuples of (type, name) pairs sorted by type, e.g. (("client-id", None), ("user", "alice")) is
"alice's clients that have no quota of their own". `check_entity` and `check_value` hold the
validation AlterClientQuotas applies (Kafka's ClientQuotaControlManager rules): INVALID_REQUEST
with a message for an unknown entity type, an IP combined with a user or client id, an unknown
key for the entity kind, a value <= 0 or a fractional value of an integral key.

Enforcement (Kafka's ClientQuotaManager with its DefaultQuotaCallback): for a request from
(user, client id), the quota that applies is the first entity that sets the quota's key, in this
order:
    1 user+client-id   2 user+<default client-id>   3 user   4 <default user>+client-id
    5 <default user>+<default client-id>   6 <default user>   7 client-id   8 <default client-id>
The rate is measured on a *sensor* whose key depends on which level matched: a user-level quota
(3, 6) is shared by every client of the user (sensor (user, "")), a client-id-level quota (7, 8)
by every user of the client id (sensor ("", client id)), the rest per (user, client id). No
entity sets the key: no quota, nothing is recorded. As in Kafka's DefaultQuotaCallback the sensor
is chosen first (with only one kind of entity ever configured, straight from that kind) and its
quota looked up after; a client that sends no client id counts by its user only.

A sensor is Kafka's `Rate` over a `SampledStat`: samples of `quota.window.size.seconds` each, in
a ring of `quota.window.num` + 1 (one overlapping the window's start). A record adds to the
current sample, starting a new one (and recycling the oldest) once the current is a window old;
a sample whose last record is num * size old is reset.
The rate is the samples' sum divided by the elapsed time they cover, counted as at least
(num - 1) whole windows (so a first burst is spread over ~10 s, not divided by a few ms). A
request that takes the rate above the bound is throttled for
    (rate - bound) / bound * window   milliseconds (rounded),
the time after which the rate is back at the bound if nothing else arrives: the response carries
it as throttle_time_ms and the connection reads nothing more until it has passed (Kafka >= 2.0).
Everything here is pure: the clock is a `now_ms` argument, tests drive it directly.

Sensors idle for an hour are dropped (Kafka's quota sensors expire after an hour too).
"""
from __future__ import annotations

import ipaddress
from decimal import Decimal

from protocol.errors import ErrorCode, KafkaError

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

# key -> Kafka's ConfigDef type (QuotaConfigs): integral types refuse fractional values.
USER_CLIENT_KEYS = {PRODUCER_BYTE_RATE: "long", CONSUMER_BYTE_RATE: "long",
                    REQUEST_PERCENTAGE: "double", CONTROLLER_MUTATION_RATE: "double"}
IP_KEYS = {CONNECTION_CREATION_RATE: "int"}
_INTEGRAL_MAX = {"int": 2**31 - 1, "long": 2**63 - 1}
_INTEGRAL_TEXT = {"int": "an INT", "long": "a LONG"}

ANONYMOUS = "ANONYMOUS"          # the principal of an unauthenticated (PLAINTEXT) connection
SENSOR_EXPIRY_MS = 3600 * 1000   # Kafka: quota sensors expire after one hour of inactivity
THROTTLE_MAX_MS = 2**31 - 1      # throttle_time_ms is an int32 (Kafka casts .toInt)


def java_double(value: float) -> str:
    """Java's Double.toString: plain between 1e-3 and 1e7 ("1024.0"), else "1.048576E7"."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    sign = "-" if str(value).startswith("-") else ""
    a = abs(value)
    if a == 0:
        return sign + "0.0"
    t = Decimal(repr(a)).normalize().as_tuple()          # shortest round-trip digits, as JDK 19+
    digits, exp = "".join(map(str, t.digits)), t.exponent
    if 1e-3 <= a < 1e7:
        if exp >= 0:
            return f"{sign}{digits}{'0' * exp}.0"
        point = len(digits) + exp
        if point > 0:
            return f"{sign}{digits[:point]}.{digits[point:]}"
        return f"{sign}0.{'0' * -point}{digits}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{len(digits) - 1 + exp}"


def zk_quota_text(entity: tuple, key: str, value: float) -> str:
    """A quota value as Kafka's ZkAdminManager writes it to /config: an INT or LONG key as an
    integer ("1048576", read back with toLong), a DOUBLE one as Java's Double.toString."""
    if keys_for(entity).get(key) in _INTEGRAL_MAX:
        return str(int(round(value)))
    return java_double(float(value))


def invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_REQUEST, message)


# -- entities and values ------------------------------------------------------------------------

def entity_key(pairs) -> tuple:
    """[(type, name), ...] -> the canonical entity tuple (sorted by type)."""
    return tuple(sorted(pairs, key=lambda p: p[0]))


def is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def check_entity(pairs) -> tuple:
    """Validate an AlterClientQuotas entity ([(type, name)]) -> its canonical tuple.

    Host names of ip entities are resolved by the caller (it may not block); an IP literal or
    None (the default ip) passes here."""
    if not pairs:
        raise invalid("Invalid empty client quota entity")
    seen = {}
    for entity_type, name in pairs:
        if entity_type in seen:
            raise invalid(f"Invalid empty client quota entity, duplicate entity entry {entity_type}")
        if entity_type not in ENTITY_TYPES:
            raise invalid(f"Unhandled client quota entity type: {entity_type}")
        if name is not None and name == "":
            raise invalid(f"Empty {entity_type} not supported")
        seen[entity_type] = name
    if IP in seen and len(seen) > 1:
        raise invalid("Invalid quota entity combination, IP entity should not be combined with "
                      "User or ClientId entity.")
    return entity_key(seen.items())


def keys_for(entity: tuple) -> dict:
    return IP_KEYS if entity and entity[0][0] == IP else USER_CLIENT_KEYS


def check_value(entity: tuple, key: str, value: float) -> None:
    """An AlterClientQuotas set-operation: key valid for the entity kind, value > 0, integral
    when the key's type is."""
    kind = keys_for(entity).get(key)
    if kind is None:
        raise invalid(f"Invalid configuration key {key}")
    if not value > 0.0:          # also refuses NaN
        raise invalid(f"Quota {key} must be greater than 0")
    if kind in _INTEGRAL_MAX:
        if value > _INTEGRAL_MAX[kind]:
            raise invalid(f"Proposed value for {key} is too large for {_INTEGRAL_TEXT[kind]}.")
        if abs(value % 1.0) > 1e-6:
            raise invalid(f"{key} cannot be a fractional value.")


def apply_ops(current: dict, ops) -> dict:
    """The entity's values after [(key, value or None to remove)] (validated before)."""
    values = dict(current)
    for key, value in ops:
        if value is None:
            values.pop(key, None)
        else:
            values[key] = float(value)
    return values


def principal_name(principal: str) -> str:
    """'User:alice' -> 'alice' (quota user entities name the principal without its type)."""
    _, sep, name = (principal or "").partition(":")
    return name if sep else (principal or ANONYMOUS)


# -- the rate ------------------------------------------------------------------------------------

class Rate:
    """Kafka's Rate over a SampledStat (see the module docstring). Samples are
    [start_ms, sum, last_record_ms]."""

    __slots__ = ("samples", "current", "last_record_ms")

    def __init__(self):
        self.samples = []
        self.current = 0
        self.last_record_ms = 0

    def record(self, value: float, now_ms: int, num: int, window_ms: int) -> None:
        if not self.samples:
            self.samples.append([now_ms, 0.0, now_ms])
        sample = self.samples[self.current]
        if now_ms - sample[0] >= window_ms:
            self.current = (self.current + 1) % (num + 1)
            if self.current >= len(self.samples):
                sample = [now_ms, 0.0, now_ms]
                self.samples.append(sample)
            else:
                sample = self.samples[self.current]
                sample[0], sample[1] = now_ms, 0.0
        sample[1] += value
        sample[2] = now_ms
        self.last_record_ms = now_ms

    def _purge(self, now_ms: int, num: int, window_ms: int) -> None:
        """Kafka's purgeObsoleteSamples: a sample overlapping the window is kept."""
        expire = num * window_ms
        for sample in self.samples:
            if now_ms - sample[2] >= expire:
                sample[0], sample[1], sample[2] = now_ms, 0.0, now_ms

    def window_size_ms(self, now_ms: int, num: int, window_ms: int) -> int:
        """The elapsed time the samples cover, at least (num - 1) whole windows."""
        self._purge(now_ms, num, window_ms)
        oldest = min(s[0] for s in self.samples) if self.samples else now_ms
        elapsed = now_ms - oldest
        full = elapsed // window_ms
        if full < num - 1:
            elapsed += (num - 1 - full) * window_ms
        return max(elapsed, 1)

    def measure(self, now_ms: int, num: int, window_ms: int) -> float:
        """Bytes per second."""
        return self.measure_with_window(now_ms, num, window_ms)[0]

    def measure_with_window(self, now_ms: int, num: int, window_ms: int) -> tuple:
        """(bytes per second, the window size in ms it was measured over)."""
        size = self.window_size_ms(now_ms, num, window_ms)   # purges first
        return sum(s[1] for s in self.samples) / (size / 1000.0), size


# Kafka's QuotaTypes bits: which kinds of entity have been configured.
_CLIENT_ID_QUOTAS, _USER_QUOTAS, _USER_CLIENT_ID_QUOTAS = 1, 2, 4


# -- one quota type -----------------------------------------------------------------------------

class ClientQuotaManager:
    """Byte-rate quota of one kind (`producer_byte_rate` for Produce, `consumer_byte_rate` for
    Fetch): which quota applies to a (user, client id), and the throttle time of a request."""

    def __init__(self, key: str, window_num: int = 11, window_size_s: int = 1):
        self.key = key
        self.window_num = max(1, int(window_num))
        self.window_ms = max(1, int(window_size_s)) * 1000
        self.overrides: dict = {}      # entity tuple -> bound, only entities that set `key`
        self.types_enabled = 0         # Kafka's QuotaTypes bits of the entities ever configured
        self.sensors: dict = {}        # (user tag, client tag) -> Rate
        self._next_expiry_check = 0

    def update(self, quotas: dict) -> None:
        """Take the current {entity: {key: value}} (after every change). The kinds of entity
        ever configured stay enabled, as Kafka's quotaTypesEnabled (only ever OR-ed)."""
        self.overrides = {e: v[self.key] for e, v in quotas.items() if self.key in v}
        for entity in quotas:
            kinds = {t for t, _ in entity}
            if USER in kinds:
                self.types_enabled |= _USER_CLIENT_ID_QUOTAS if CLIENT_ID in kinds \
                    else _USER_QUOTAS
            elif CLIENT_ID in kinds:
                self.types_enabled |= _CLIENT_ID_QUOTAS

    def metric_tags(self, user: str, client_id: str) -> tuple:
        """(user tag, client tag) of the sensor a request counts in (Kafka's
        DefaultQuotaCallback.quotaMetricTags): the most specific configured entity decides,
        an empty tag meaning that part does not count."""
        enabled = self.types_enabled
        if enabled in (0, _CLIENT_ID_QUOTAS):
            return "", client_id
        if enabled == _USER_QUOTAS:
            return user, ""
        if enabled == _USER_CLIENT_ID_QUOTAS:
            return user, client_id
        o = self.overrides
        chain = ((((CLIENT_ID, client_id), (USER, user)), (user, client_id)),
                 (((CLIENT_ID, None), (USER, user)), (user, client_id)),
                 (((USER, user),), (user, "")),
                 (((CLIENT_ID, client_id), (USER, None)), (user, client_id)),
                 (((CLIENT_ID, None), (USER, None)), (user, client_id)),
                 (((USER, None),), (user, "")))
        for entity, tags in chain:
            if entity in o:
                return tags
        return "", client_id

    def quota_limit(self, tags: tuple):
        """The bound for a sensor's tags, or None (Kafka's DefaultQuotaCallback.quotaLimit):
        a client id only counts when not empty."""
        user, client_id = tags
        o = self.overrides
        if user and client_id:
            chain = (((CLIENT_ID, client_id), (USER, user)), ((CLIENT_ID, None), (USER, user)),
                     ((CLIENT_ID, client_id), (USER, None)), ((CLIENT_ID, None), (USER, None)))
        elif user:
            chain = (((USER, user),), ((USER, None),))
        elif client_id:
            chain = (((CLIENT_ID, client_id),), ((CLIENT_ID, None),))
        else:
            return None
        for entity in chain:
            bound = o.get(entity)
            if bound is not None:
                return bound
        return None

    def resolve(self, user: str, client_id: str):
        """((user tag, client tag), bound) of the quota that applies, or (None, None)."""
        tags = self.metric_tags(user, client_id or "")
        bound = self.quota_limit(tags)
        return (tags, bound) if bound is not None else (None, None)

    def record(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record `value` bytes for the request; the throttle time in ms (0: within quota)."""
        if not self.overrides:
            return 0
        tags, bound = self.resolve(user, client_id)
        if tags is None:
            return 0
        self._expire(now_ms)
        rate = self.sensors.get(tags)
        if rate is None:
            rate = self.sensors[tags] = Rate()
        num, window_ms = self.window_num, self.window_ms
        rate.record(value, now_ms, num, window_ms)
        measured, size = rate.measure_with_window(now_ms, num, window_ms)
        if measured <= bound or bound <= 0:
            # A bound of 0 or below only comes from a hand-edited znode (the tools refuse it).
            # Kafka's formula then gives Infinity, or a negative time, which its toInt turns
            # into no throttle at all; it raised here, after the Produce was appended.
            return 0
        return min(int(round((measured - bound) / bound * size)), THROTTLE_MAX_MS)

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a recorded value (a throttled Fetch answers empty: its bytes do not count)."""
        tags, _ = self.resolve(user, client_id)
        rate = self.sensors.get(tags) if tags is not None else None
        if rate is not None:
            rate.record(-value, now_ms, self.window_num, self.window_ms)

    def max_value_in_window(self, user: str, client_id: str):
        """The most bytes one request may take within the quota (Kafka limits a throttled
        consumer's fetch size to this), or None without a quota."""
        if not self.overrides:
            return None
        _, bound = self.resolve(user, client_id)
        if bound is None:
            return None
        return bound * (self.window_num - 1) * (self.window_ms / 1000.0)

    def _expire(self, now_ms: int) -> None:
        if now_ms < self._next_expiry_check:
            return
        self._next_expiry_check = now_ms + 60_000
        for tags in [t for t, r in self.sensors.items()
                     if now_ms - r.last_record_ms > SENSOR_EXPIRY_MS]:
            del self.sensors[tags]


class QuotaManagers:
    """The produce and fetch managers, fed with the stored quotas."""

    def __init__(self, window_num: int = 11, window_size_s: int = 1):
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, window_num, window_size_s)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, window_num, window_size_s)

    def update(self, quotas: dict) -> None:
        self.produce.update(quotas)
        self.fetch.update(quotas)

    # What the Produce and Fetch handlers call, with their RequestContext.

    def produce_throttle(self, ctx, now_ms: int) -> int:
        """Record a produce request's size (the whole request, as Kafka); its throttle ms."""
        if not self.produce.overrides:
            return 0
        return self.produce.record(principal_name(ctx.principal), ctx.client_id or "",
                                   ctx.request_size, now_ms)

    def fetch_max_bytes(self, ctx, max_bytes: int) -> int:
        """A consumer's fetch size capped at what its quota allows in one window."""
        limit = self.fetch.max_value_in_window(principal_name(ctx.principal), ctx.client_id or "")
        return max_bytes if limit is None else max(0, min(max_bytes, int(limit)))

    def fetch_throttle(self, ctx, size: int, now_ms: int) -> int:
        """Record a fetch response's size; its throttle ms. A throttled fetch is answered
        empty, so its bytes are taken back (Kafka's KIP-219 behaviour)."""
        if not self.fetch.overrides:
            return 0
        user, client_id = principal_name(ctx.principal), ctx.client_id or ""
        throttle = self.fetch.record(user, client_id, size, now_ms)
        if throttle > 0:
            self.fetch.unrecord(user, client_id, size, now_ms)
        return throttle
