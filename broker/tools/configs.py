"""kafka-configs.sh: describe and alter dynamic configs of topics and brokers (and client quotas).

Output follows Kafka 3.x's ConfigCommand:
    Dynamic configs for topic t are:
      retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000, ...}
``--all`` lists every config ("All configs for topic t are:"); brokers print "Dynamic configs for broker
1 are:" or, with ``--entity-default``, "Default configs for brokers in the cluster are:". Alterations
use IncrementalAlterConfigs: ``--add-config k1=v1,k2=[a,b]`` (brackets protect commas) and
``--delete-config k1,k2``; success prints "Completed updating config for topic t.".
``--entity-type users|clients|ips`` (client quotas) is broker/tools/client_quotas.py.
"""
from __future__ import annotations

import argparse
import re

from broker.client.admin import OP_DELETE, OP_SET, RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_TOPIC, Admin
from broker.client.cluster import ClusterClient
from broker.config import java_int
from broker.tools import client_quotas
from broker.tools.common import (TerseError, ToolError, ToolParser, add_bootstrap, client_kwargs, main_entry,
                                 read_properties)
from broker.tools.javautil import java_split

SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
           4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
           7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}


class _OrderedName(argparse.Action):
    """--entity-name / --entity-default: also kept in command-line order in `entity_names` ("" for a
    default), which is how Kafka pairs them with the --entity-type values."""

    def __call__(self, parser, namespace, values, option_string=None):
        default = option_string == "--entity-default"
        ordered = list(getattr(namespace, "entity_names", None) or [])
        ordered.append("" if default else values)
        namespace.entity_names = ordered
        if default:
            namespace.entity_default = True
        else:
            namespace.entity_name = list(namespace.entity_name or []) + [values]


def build_parser() -> ToolParser:
    p = ToolParser("kafka-configs.sh", "This tool helps to manipulate and describe entity config for a topic, "
                   "client, user, broker or broker-logger")
    # Kafka 3.9's kafka-configs.sh still takes a deprecated --zookeeper for users (SCRAM) and
    # brokers; this one talks to a broker only
    p.zookeeper_refusal = ("--zookeeper is not supported by this kafka-configs.sh, which talks to "
                           "a broker: use --bootstrap-server HOST:PORT")
    add_bootstrap(p, required=True)
    actions = p.add_mutually_exclusive_group(required=True)
    actions.add_argument("--describe", action="store_true", help="List configs for the given entity.")
    actions.add_argument("--alter", action="store_true", help="Alter the configuration for the entity.")
    p.add_argument("--entity-type", action="append", metavar="<String>",
                   help="Type of entity (topics/clients/users/brokers/broker-loggers/ips)")
    p.add_argument("--entity-name", action=_OrderedName, metavar="<String>",
                   help="Name of entity (topic name/client id/user principal name/broker id/ip)")
    p.add_argument("--entity-default", action=_OrderedName, nargs=0, default=False,
                   help="Default entity name for clients/users/brokers/ips (applies to corresponding entity type "
                        "in command line)")
    p.add_argument("--topic", action="append", metavar="<String: topic>", help="The topic's name (same as --entity-type topics "
                                                              "--entity-name <topic>).")
    p.add_argument("--broker", action="append", metavar="<String: broker-id>", help="The broker's ID.")
    p.add_argument("--broker-defaults", action="store_true", help="The config defaults for all brokers.")
    p.add_argument("--broker-logger", action="append", metavar="<String: broker-id>", help="The broker's ID for its logger config.")
    p.add_argument("--user", action="append", metavar="<String: user-principal>", help="The user's principal name.")
    p.add_argument("--user-defaults", action="store_true", help="The config defaults for all users.")
    p.add_argument("--client", action="append", metavar="<String: client-id>", help="The client's ID.")
    p.add_argument("--client-defaults", action="store_true", help="The config defaults for all clients.")
    p.add_argument("--ip", action="append", metavar="<String: ip>", help="The IP address.")
    p.add_argument("--ip-defaults", action="store_true", help="The config defaults for all IPs.")
    p.add_argument("--force", action="store_true", help="Suppress console prompts (accepted; these tools never "
                                                          "prompt).")
    p.add_argument("--add-config", metavar="<String>", action="append",
                   help="Key Value pairs of configs to add. Square brackets can be used to group values which "
                        "contain commas: 'k1=v1,k2=[v1,v2,v2],k3=v3'.")
    p.add_argument("--add-config-file", metavar="<String>", help="Path to a properties file with configs to add.")
    p.add_argument("--delete-config", metavar="<String>", action="append",
                   help="config keys to remove 'k1,k2'")
    p.add_argument("--all", action="store_true", help="List all configs for the given topic, broker, or "
                                                      "broker-logger entity (includes static configuration when the "
                                                      "entity type is brokers)")
    return p


# Kafka's parseConfigsToBeAdded: split at commas, then at '=', outside square brackets
_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"
_PAIRS = re.compile("," + _OUTSIDE_BRACKETS)
_KEY_VALUE = re.compile(r"\s*=\s*" + _OUTSIDE_BRACKETS)
_BRACKETS = re.compile(r"\[?\]?")
_CONFIG_KEY = re.compile(r"[a-zA-Z0-9._-]*")


def parse_add_config(text: str) -> dict:
    """'k1=v1,k2=[a,b],k3=v3' -> {'k1': 'v1', 'k2': 'a,b', 'k3': 'v3'}, exactly as Kafka's
    parseConfigsToBeAdded: a pair must split into one key and one value ('a=1=2' and an
    unbalanced bracket are refused), every bracket is removed from the value."""
    out = {}
    for item in java_split(_PAIRS, text):
        pair = java_split(_KEY_VALUE, item, keep_trailing=True)
        if len(pair) != 2:
            raise TerseError('requirement failed: Invalid entity config: all configs to be added '
                             'must be in the format "key=val".')        # Scala's require()
        out[pair[0].strip()] = _BRACKETS.sub("", pair[1]).strip()
    return out


def check_config_keys(adds: dict) -> None:
    """Kafka's validatePropsKey, and its warning for message.format.version."""
    for key in adds:
        if not _CONFIG_KEY.fullmatch(key):
            raise TerseError(f"Invalid character found for config key: {key}")
    if "message.format.version" in adds:
        print(f"WARNING: The configuration message.format.version="
              f"{adds['message.format.version']} is specified. This configuration will be ignored "
              f"if the version is newer than the inter.broker.protocol.version specified in the "
              f"broker or if the inter.broker.protocol.version is 3.0 or newer. This configuration "
              f"is deprecated and it will be removed in Apache Kafka 4.0.")


# kafka-configs.sh's entity types with --bootstrap-server (ConfigCommand's
# BrokerSupportedConfigTypes; client-metrics is refused after the checks: not served here)
ALLOWED_TYPES = ("topics", "clients", "users", "brokers", "ips", "broker-loggers", "client-metrics")
SHORTCUTS = ("topic", "client", "user", "broker", "broker_logger", "ip", "client_defaults",
             "user_defaults", "broker_defaults", "ip_defaults")


def check_args(opts) -> tuple[list, list]:
    """Kafka's ConfigCommandOptions.checkArgs, in its order: (entity types, entity names), a
    name "" being the default entity. Usage errors are Kafka's messages, bare."""
    if opts.describe:
        for flag in ("alter", "add_config", "delete_config"):
            if getattr(opts, flag):
                raise TerseError(f'Option "[describe]" can\'t be used with option '
                                 f'"[{flag.replace("_", "-")}]"')
    for flag in ("topic", "broker", "broker_logger", "user", "client", "ip"):
        values = getattr(opts, flag)
        if values is not None and len(values) > 1:        # jopt-simple's valueOf
            raise TerseError(f"Found multiple arguments for option {flag.replace('_', '-')}, "
                             f"but you asked for only one")
        setattr(opts, flag, values[0] if values else None)
    types, names = client_quotas.entities(opts)
    duplicates = [t for i, t in enumerate(types) if t in types[:i]]      # Scala's diff(distinct)
    if duplicates:
        raise TerseError(f"Duplicate entity type(s) specified: {','.join(duplicates)}")
    for etype in types:
        if etype not in ALLOWED_TYPES:
            raise TerseError(f"Invalid entity type {etype}, the entity type must be one of "
                             f"{', '.join(ALLOWED_TYPES)} with a --bootstrap-server or "
                             f"--bootstrap-controller argument")
    if not types:
        raise TerseError("At least one entity type must be specified")
    if len(types) > 1 and set(types) != {"users", "clients"}:
        raise TerseError("Only 'users' and 'clients' entity types may be specified together")
    if (opts.entity_type or opts.entity_name or opts.entity_default) and \
            any(getattr(opts, flag) for flag in SHORTCUTS):
        raise TerseError("--entity-{type,name,default} should not be used in conjunction with "
                         "specific entity flags")
    has_name = any(names)
    has_default = "" in names
    if has_name and set(types) & {"brokers", "broker-loggers", "ips"} and \
            len(opts.entity_name or []) > 1:                  # jopt-simple's valueOf
        raise TerseError("Found multiple arguments for option entity-name, but you asked for only one")
    if has_name and ("brokers" in types or "broker-loggers" in types):
        for value in [*(opts.entity_name or []), opts.broker, opts.broker_logger]:
            if value is not None and java_int(value) is None:
                raise TerseError(f"The entity name for {types[0]} must be a valid integer broker "
                                 f"id, but it is: {value}")
    if has_name and "ips" in types:
        for value in [*(opts.entity_name or []), opts.ip]:
            if value is not None and not client_quotas.valid_ip_entity(value):
                raise TerseError(f"The entity name for {types[0]} must be a valid IP or resolvable "
                                 f"host, but it is: {value}")
    if opts.describe and "broker-loggers" in types and not has_name:
        raise TerseError(f"an entity name must be specified with --describe of {','.join(types)}")
    if opts.alter:
        if set(types) & {"users", "clients", "brokers", "ips"}:
            if not has_name and not has_default:
                raise TerseError("an entity-name or default entity must be specified with --alter "
                                 "of users, clients, brokers or ips")
        elif not has_name:
            raise TerseError(f"an entity name must be specified with --alter of {','.join(types)}")
        if opts.add_config and opts.add_config_file:
            raise TerseError("Only one of --add-config or --add-config-file must be specified")
        if not (opts.add_config or opts.add_config_file or opts.delete_config):
            raise TerseError("At least one of --add-config, --add-config-file, or --delete-config "
                             "must be specified with --alter")
        if len(types) != len(names):                      # ConfigCommand.processCommand
            raise TerseError("An entity name must be specified for every entity type")
    if "client-metrics" in types:
        raise ToolError("client-metrics configs are not served by this broker (KIP-714 client "
                        "metrics are not implemented)")
    return types, names


def _entity(types: list, names: list) -> tuple[str, str | None]:
    """The entity of topics, brokers and broker-loggers: (type, name), name None for every
    entity of the type (a describe without a name), "" for the brokers' default."""
    return types[0], (names[0] if names else None)


def line(c) -> str:
    value = "null" if c.is_sensitive or c.value is None else c.value
    synonyms = ", ".join(f"{SOURCES.get(s.source, 'UNKNOWN')}:{s.name}="
                         f"{'null' if c.is_sensitive or s.value is None else s.value}"
                         for s in c.synonyms)
    return f"  {c.name}={value} sensitive={str(bool(c.is_sensitive)).lower()} synonyms={{{synonyms}}}"


async def describe(admin: Admin, cluster, etype: str, name: str | None, opts) -> None:
    if etype == "topics":
        # "" (--entity-default): Kafka describes the topic named "" (and fails), not them all
        names = [name] if name is not None else sorted(n for n in await admin.list_topics())
        rtype, label = RESOURCE_TOPIC, "topic"
    elif etype == "broker-loggers":
        names, rtype, label = [name], RESOURCE_BROKER_LOGGER, "broker-logger"
    else:
        # no name: every broker, then the cluster default (Kafka's order); "" the default
        names = [name] if name is not None else [str(b) for b in sorted(cluster.brokers)] + [""]
        rtype, label = RESOURCE_BROKER, "broker"
    for n in names:
        if etype == "topics" and n == "":
            print("Default configs for topics in the cluster are:")      # as Kafka's, then:
            raise ToolError("Topic name is invalid: the empty string is not allowed")
        if etype == "topics":
            await cluster.topic_metadata(n)   # UNKNOWN_TOPIC_OR_PARTITION with a clear message
        result = await admin.describe_configs(rtype, n, include_synonyms=True)
        configs = sorted(result.configs, key=lambda c: c.name)
        if rtype == RESOURCE_BROKER and n == "":
            header = "Default configs for brokers in the cluster are:"
            wanted = 3      # DYNAMIC_DEFAULT_BROKER_CONFIG
        else:
            header = f"{'All' if opts.all else 'Dynamic'} configs for {label} {n} are:"
            wanted = {RESOURCE_TOPIC: 1, RESOURCE_BROKER: 2, RESOURCE_BROKER_LOGGER: 6}[rtype]
        if not opts.all:
            configs = [c for c in configs if c.config_source == wanted]
        print(header)
        for c in configs:
            print(line(c))


def config_changes(opts) -> tuple[dict, list]:
    """(configs to add, config names to delete) of an --alter."""
    if opts.add_config and len(opts.add_config) > 1:        # jopt-simple's valueOf
        raise TerseError("Found multiple arguments for option add-config, but you asked for only one")
    adds = read_properties(opts.add_config_file) if opts.add_config_file else {}
    if opts.add_config:
        adds.update(parse_add_config(opts.add_config[0]))
    check_config_keys(adds)
    # Repeatable, each comma-separated (Kafka's withValuesSeparatedBy(',') read with valuesOf).
    deletes = [k.strip() for value in opts.delete_config or () for k in value.split(",")
               if k.strip()]
    if not adds and not deletes:
        raise TerseError("At least one of --add-config, --add-config-file, or --delete-config "
                         "must be specified with --alter")
    overlap = set(adds) & set(deletes)
    if overlap:
        raise TerseError(f"Invalid entity config: the same config can't be added and deleted: {', '.join(overlap)}")
    return adds, deletes


async def alter(admin: Admin, cluster, etype: str, name: str | None, opts) -> None:
    adds, deletes = config_changes(opts)
    ops = [(k, OP_SET, v) for k, v in adds.items()] + [(k, OP_DELETE, None) for k in deletes]
    if etype == "topics":
        await cluster.topic_metadata(name)
    if deletes and etype in ("topics", "brokers"):
        # Kafka's check: only a config that is currently set on the entity can be deleted
        rtype, wanted = (RESOURCE_TOPIC, 1) if etype == "topics" else (RESOURCE_BROKER, 2 if name else 3)
        current = await admin.describe_configs(rtype, name or "")
        present = {c.name for c in current.configs if c.config_source == wanted}
        invalid = [k for k in deletes if k not in present]
        if invalid:
            raise TerseError(f"Invalid config(s): {','.join(invalid)}")
    if etype == "topics":
        await admin.incremental_alter_configs(RESOURCE_TOPIC, name, ops)
        print(f"Completed updating config for topic {name}.")
    elif etype == "broker-loggers":
        await admin.incremental_alter_configs(RESOURCE_BROKER_LOGGER, name, ops)
        print(f"Completed updating config for broker-logger {name}.")
    else:
        await admin.incremental_alter_configs(RESOURCE_BROKER, name, ops)
        print(f"Completed updating config for broker {name}." if name
              else "Completed updating default config for brokers in the cluster.")


async def run(opts) -> int:
    types, names = check_args(opts)
    quota = client_quotas.quota_entities(opts)      # users, clients, ips: (types, names)
    if quota is None:
        etype, name = _entity(types, names)
    changes = config_changes(opts) if opts.alter and quota is not None else None
    props = read_properties(opts.command_config) if opts.command_config else {}
    async with ClusterClient(opts.bootstrap_server, **client_kwargs(props)) as cluster:
        admin = Admin(cluster)
        if quota is not None:
            if opts.describe:
                await client_quotas.describe(cluster, *quota)
            else:
                await client_quotas.alter(cluster, *quota, *changes)
        elif opts.describe:
            await describe(admin, cluster, etype, name, opts)
        else:
            await alter(admin, cluster, etype, name, opts)
    return 0


def main(argv=None):
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main_entry(main)
