"""kafka-configs.sh for users, clients and ips: client quotas through Describe/AlterClientQuotas.

Follows Kafka 3.x's ConfigCommand with --bootstrap-server:
- Entities: ``--entity-type users|clients|ips`` with ``--entity-name``/``--entity-default`` (users and
  clients may be given together: a user's quota for one client id), or ``--user``, ``--client``,
  ``--ip`` and ``--user-defaults``, ``--client-defaults``, ``--ip-defaults``. Names pair with types in
  command-line order; the flags come after, in Kafka's flag order (client before user).
- ``--describe`` sends a strict filter: a named type matches exactly, a default type its default
  entity, a type with no name any entity of that type. One line per entity:
      Quota configs for user-principal 'alice', client-id 'c1' are producer_byte_rate=1024.0
  ("the default user-principal" for a default part), values printed as Java doubles in the order
  of the Java HashMap the admin client builds (so scripts see exactly Kafka's lines).
  Describing users (no clients, no default) then lists their SCRAM credentials, as Kafka's tool does.
- ``--alter`` checks the keys (quota keys only; SCRAM credentials are not served by this broker),
  refuses deleting a key the entity does not have ("Invalid config(s): k"), parses values as doubles,
  then sends one AlterClientQuotas entry; it prints "Completed updating config for user alice." or
  "Completed updating default config for users in the cluster." (after the first entity type given).
"""
from __future__ import annotations

import socket

from protocol.errors import ErrorCode, KafkaError
from protocol.messages import AlterClientQuotasRequest, DescribeClientQuotasRequest, DescribeUserScramCredentialsRequest

from broker.client.errors import UnsupportedVersionError
from broker.quotas import is_ip_literal, java_double  # noqa: F401 (java_double: tests)
from broker.tools.common import TerseError, ToolError
from broker.tools.javautil import java_hash_order, java_string_hash

QUOTA_TYPES = ("users", "clients", "ips")
ENTITY = {"users": "user", "clients": "client-id", "ips": "ip"}
LABEL = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
USER_CLIENT_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
IP_KEYS = ("connection_creation_rate",)
SCRAM_KEYS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
# Kafka's option order for the shortcut flags (ConfigCommandOptions.entityFlags / entityDefaultsFlags)
NAME_FLAGS = (("topic", "topics"), ("client", "clients"), ("user", "users"), ("broker", "brokers"),
              ("broker_logger", "broker-loggers"), ("ip", "ips"))
DEFAULT_FLAGS = (("client_defaults", "clients"), ("user_defaults", "users"), ("broker_defaults", "brokers"),
                 ("ip_defaults", "ips"))


# -- Java's formatting --------------------------------------------------------------------------

def _int32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x & 0x80000000 else x


def entity_hash(parts: list) -> int:
    """ClientQuotaEntity.hashCode: its Map's hash, the sum of hash(type) ^ hash(name)."""
    return _int32(sum(java_string_hash(t) ^ java_string_hash(n) for t, n in parts))


def quota_line(parts: list, values: list) -> str:
    """parts [(entity type, name or None)], values [(key, float)] in the response's order."""
    by_type = dict(parts)
    entity = ", ".join(f"{LABEL[t]} '{by_type[t]}'" if by_type[t] is not None else f"the default {LABEL[t]}"
                       for t in ("user", "client-id", "ip") if t in by_type)
    keys = java_hash_order([k for k, _ in values], java_string_hash, len(values))
    value_of = dict(values)
    return f"Quota configs for {entity} are " + ", ".join(f"{k}={java_double(value_of[k])}" for k in keys)


# -- the command line ---------------------------------------------------------------------------

def quota_entities(opts):
    """(entity types, names) in Kafka's order when users, clients or ips are involved, else None
    (a name "" is the default entity). kafka-configs.sh's own checks (configs.check_args) have
    run first."""
    types, names = entities(opts)
    if not any(t in QUOTA_TYPES for t in types):
        return None
    if not opts.alter and len(names) > len(types):
        raise TerseError("More entity names specified than entity types")
    return types, names


def entities(opts) -> tuple[list, list]:
    """Kafka's ConfigCommandOptions.entityTypes / entityNames: --entity-type values then the
    shortcut flags' types; --entity-name/--entity-default in command-line order ("" for a
    default) then the flags' names."""
    types = list(opts.entity_type or [])
    names = list(getattr(opts, "entity_names", None) or [])
    for attr, etype in NAME_FLAGS:
        if getattr(opts, attr) is not None:
            types.append(etype)
            names.append(getattr(opts, attr))
    for attr, etype in DEFAULT_FLAGS:
        if getattr(opts, attr):
            types.append(etype)
            names.append("")
    return types, names


def valid_ip_entity(name: str) -> bool:
    if is_ip_literal(name):
        return True
    try:
        socket.getaddrinfo(name, None)
        return True
    except (OSError, UnicodeError):
        return False


async def _send(cluster, request):
    try:
        return await cluster.send(None, request)
    except UnsupportedVersionError:
        raise ToolError("The broker does not support client quotas (DescribeClientQuotas/AlterClientQuotas), "
                        "so --entity-type users, clients and ips are not available on it") from None


async def describe_entities(cluster, types: list, names: list) -> list:
    """[(parts, values)] of the entities matching Kafka's strict filter for these types/names."""
    R = DescribeClientQuotasRequest
    components = []
    for i, etype in enumerate(types):
        name = names[i] if i < len(names) else None
        match_type, match = (2, None) if name is None else (1, None) if name == "" else (0, name)
        components.append(R.ComponentData(entity_type=ENTITY[etype], match_type=match_type, match=match))
    response = await _send(cluster, R(strict=True, components=components))
    if response.error_code:
        raise KafkaError(response.error_code, response.error_message or ErrorCode(response.error_code).name)
    return [([(e.entity_type, e.entity_name) for e in entry.entity], [(v.key, v.value) for v in entry.values])
            for entry in response.entries or []]


async def describe(cluster, types: list, names: list) -> None:
    entries = await describe_entities(cluster, types, names)
    # the admin client's HashMap<ClientQuotaEntity, ...>, sized for the entries, decides the order
    order = java_hash_order(range(len(entries)), lambda i: entity_hash(entries[i][0]), len(entries))
    for i in order:
        print(quota_line(*entries[i]))
    if "clients" not in types and "" not in names:
        await describe_scram(cluster, names)


SCRAM_MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}


async def describe_scram(cluster, users: list) -> None:
    """Kafka's tool also lists the SCRAM credentials of the users described (all users when none is
    named); users without one are skipped, so this broker (no SCRAM) prints nothing here."""
    R = DescribeUserScramCredentialsRequest
    try:
        response = await cluster.send(None, R(users=[R.UserName(name=u) for u in users]))
    except UnsupportedVersionError:
        return
    if response.error_code:
        raise KafkaError(response.error_code, response.error_message or ErrorCode(response.error_code).name)
    for result in response.results:
        if result.error_code == ErrorCode.RESOURCE_NOT_FOUND:
            continue
        if result.error_code:
            name = "".join(w.capitalize() for w in ErrorCode(result.error_code).name.split("_")) + "Exception"
            print(f"Error retrieving SCRAM credential configs for user-principal '{result.user}': {name}: "
                  f"{result.error_message}")
            continue
        infos = ", ".join(f"{SCRAM_MECHANISMS.get(i.mechanism, 'UNKNOWN')}=iterations={i.iterations}"
                          for i in result.credential_infos)
        print(f"SCRAM credential configs for user-principal '{result.user}' are {infos}")


def _scala_set(keys) -> str:
    return f"Set({', '.join(keys)})"


def _check_keys(types: list, names: list, adds: dict, deletes: list) -> None:
    if types[0] == "ips":
        unknown = [k for k in list(adds) + deletes if k not in IP_KEYS]
        if unknown:
            raise TerseError("Only connection quota configs can be added for 'ips' using --bootstrap-server. "
                            f"Unexpected config names: {','.join(unknown)}")
        return
    add_unknown = [k for k in adds if k not in USER_CLIENT_KEYS and k not in SCRAM_KEYS]
    add_scram = [k for k in adds if k in SCRAM_KEYS]
    del_unknown = [k for k in deletes if k not in USER_CLIENT_KEYS and k not in SCRAM_KEYS]
    del_scram = [k for k in deletes if k in SCRAM_KEYS]
    if types[0] == "clients" or len(types) == 2:
        if add_unknown or add_scram:
            raise TerseError("Only quota configs can be added for 'clients' using --bootstrap-server. "
                            f"Unexpected config names: {_scala_set(add_unknown + add_scram)}")
        if del_unknown or del_scram:
            raise TerseError("Only quota configs can be deleted for 'clients' using --bootstrap-server. "
                            f"Unexpected config names: Buffer({', '.join(del_unknown + del_scram)})")
        return
    if add_unknown:
        raise TerseError("Only quota and SCRAM credential configs can be added for 'users' using "
                        f"--bootstrap-server. Unexpected config names: {_scala_set(add_unknown)}")
    if del_unknown:
        raise TerseError("Only quota and SCRAM credential configs can be deleted for 'users' using "
                        f"--bootstrap-server. Unexpected config names: Buffer({', '.join(del_unknown)})")
    if add_scram or del_scram:
        if "" in names:
            raise TerseError("The use of --entity-default or --user-defaults is not allowed with User SCRAM "
                            "Credentials using --bootstrap-server.")
        if len(add_scram) < len(adds) or len(del_scram) < len(deletes):
            raise TerseError("Cannot alter both quota and SCRAM credential configs simultaneously for 'users' "
                            "using --bootstrap-server.")
        raise ToolError("The broker does not support SCRAM credentials (AlterUserScramCredentials)")


async def alter(cluster, types: list, names: list, adds: dict, deletes: list) -> None:
    _check_keys(types, names, adds, deletes)
    current = await describe_entities(cluster, types, names)
    present = {k for k, _ in current[0][1]} if current else set()
    invalid = [k for k in deletes if k not in present]
    if invalid:
        raise TerseError(f"Invalid config(s): {','.join(invalid)}")
    R = AlterClientQuotasRequest
    ops = []
    for key, text in adds.items():
        try:
            value = float(text.strip())
        except ValueError:
            raise TerseError(f"Cannot parse quota configuration value for {key}: {text}") from None
        ops.append(R.OpData(key=key, value=value, remove=False))
    ops += [R.OpData(key=k, value=0.0, remove=True) for k in deletes]
    entity = [R.EntityData(entity_type=ENTITY[t], entity_name=n or None) for t, n in zip(types, names)]
    response = await _send(cluster, R(validate_only=False, entries=[R.EntryData(entity=entity, ops=ops)]))
    for entry in response.entries:
        if entry.error_code:
            raise KafkaError(entry.error_code, entry.error_message or ErrorCode(entry.error_code).name)
    head_type, head_name = types[0], names[0]
    print(f"Completed updating config for {head_type[:-1]} {head_name}." if head_name
          else f"Completed updating default config for {head_type} in the cluster.")
