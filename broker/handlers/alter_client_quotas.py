"""AlterClientQuotas (api key 49), versions 0-1 (KIP-546).

Behaviour:
- Each entry names an entity (user, client-id, user+client-id, or ip; a null name is the default
  entity of its type) and operations: set `key` to `value`, or `remove` it. The result is stored
  in the metadata store (persisted before the answer) and the produce/fetch quota managers see it
  at once. An entity left with no values is removed.
- Errors are per entry, with a message, as Kafka (KRaft's ClientQuotaControlManager):
  INVALID_REQUEST for an empty entity, a type twice, an unknown type, an empty name, an ip with a
  user or client id, an ip name that is not an address or a resolvable host, a key twice in one
  entry, a key not valid for the entity kind (`producer_byte_rate`, `consumer_byte_rate`,
  `request_percentage`, `controller_mutation_rate` for users and clients;
  `connection_creation_rate` for ips), a value <= 0, a fractional value of an integral key.
  Removing a key that is not set is not an error. Entries are independent: the valid ones apply.
- validate_only checks everything and changes nothing.
- Only byte rates are enforced (broker/quotas.py); the other keys are stored and described.
"""
import asyncio
import socket

from protocol.api import ApiKey
from protocol.errors import KafkaError
from protocol.messages.alter_client_quotas import AlterClientQuotasResponse

from broker.quotas import IP, apply_ops, check_entity, check_value, invalid, is_ip_literal

API_KEY = ApiKey.ALTER_CLIENT_QUOTAS
MIN_VERSION = 0
MAX_VERSION = 1

R = AlterClientQuotasResponse


async def _check_host(name: str) -> None:
    """Kafka accepts an ip entity that is an address or a host name that resolves."""
    if name is None or is_ip_literal(name):
        return
    try:
        await asyncio.wait_for(asyncio.get_running_loop().getaddrinfo(name, None), 5.0)
    except (OSError, UnicodeError, asyncio.TimeoutError):
        raise invalid(f"Unknown host: {name}") from None


def _ops(entity, entry) -> list:
    ops, seen = [], set()
    for op in entry.ops:
        if op.key in seen:
            raise invalid(f"Duplicate quota key {op.key} not updating quota for this entity")
        seen.add(op.key)
        if op.remove:
            ops.append((op.key, None))
        else:
            check_value(entity, op.key, op.value)
            ops.append((op.key, op.value))
    return ops


async def handle(broker, ctx, request):
    current = broker.metadata.client_quotas()
    changes = {}
    results = []
    for entry in request.entries:
        pairs = [(e.entity_type, e.entity_name) for e in entry.entity]
        result = R.EntryData(entity=[R.EntityData(entity_type=t, entity_name=n)
                                     for t, n in pairs])
        results.append(result)
        try:
            entity = check_entity(pairs)
            if entity[0][0] == IP:
                await _check_host(entity[0][1])
            ops = _ops(entity, entry)
            base = changes.get(entity, current.get(entity, {}))
            changes[entity] = apply_ops(base, ops)
        except KafkaError as exc:
            result.error_code = int(exc.error_code)
            result.error_message = exc.message
    if changes and not request.validate_only:
        await broker.metadata.write_client_quotas(changes)
        broker.quotas.update(broker.metadata.client_quotas())
    return R(throttle_time_ms=0, entries=results)
