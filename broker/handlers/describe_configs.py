"""DescribeConfigs (api key 32), versions 0-4.

Behaviour:
- TOPIC resources (type 2): every topic config with its effective value and source: the topic's
  own override (TOPIC_CONFIG), else the first broker synonym that is set (DYNAMIC_BROKER_CONFIG,
  DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG), else the default (DEFAULT_CONFIG). In a
  cluster the overrides are read from ZooKeeper's /config/topics/<topic> on each request, as
  Kafka's ZkConfigRepository does: a broker that holds no replica of a topic created after it
  started has no copy of them (a new topic sends no config change notification). A znode whose
  config Kafka would refuse (hand-edited), or ZooKeeper out of reach: this broker's copy, with
  a log line.
  Unknown topic -> UNKNOWN_TOPIC_OR_PARTITION; illegal name -> INVALID_TOPIC_EXCEPTION.
- BROKER resources (type 4): name = this broker's id -> every broker config with its layered
  source; name "" -> the cluster-wide dynamic defaults only (as Kafka). Another id ->
  INVALID_REQUEST (a name that is not a number: Kafka's "Broker id must be an integer"). Non-dynamic
  broker configs are read_only. PASSWORD values are never shown, in synonyms neither.
- configuration_keys (null or empty = all) filters the names; include_synonyms (v1+) adds the synonym
  chain in priority order; include_documentation (v3+) adds the doc text; config_type from v3.
- v0 has is_default instead of config_source.
- BROKER_LOGGER (type 8): name = this broker's id -> every logger with its effective level in
  Kafka's words (root first, as "root"; TRACE/DEBUG/INFO/WARN/ERROR/FATAL/OFF), source
  DYNAMIC_BROKER_LOGGER_CONFIG, not read-only, no synonyms. An empty name or another id ->
  INVALID_REQUEST, as Kafka. Levels change through IncrementalAlterConfigs.

`topic_entries` is shared with CreateTopics (v5+ returns the new topic's configs).
"""

import logging

from protocol.api import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.describe_configs import DescribeConfigsResponse

from broker import zk_data as zd
from broker.config import (BROKER_CONFIGS, SOURCE_DEFAULT, SOURCE_DYNAMIC_BROKER_LOGGER,
                           SOURCE_DYNAMIC_DEFAULT_BROKER, SOURCE_STATIC_BROKER, TOPIC_CONFIGS,
                           TYPE_IDS, ConfigError, format_value, java_int, validate_topic_configs)
from broker.log import logger_levels
from broker.topics import validate_topic_name

log = logging.getLogger(__name__)

API_KEY = ApiKey.DESCRIBE_CONFIGS
MIN_VERSION = 0
MAX_VERSION = 4

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8

R = DescribeConfigsResponse


class ConfigEntry:
    """One described config, independent of the response type it goes into."""

    __slots__ = ("name", "value", "source", "read_only", "sensitive", "synonyms", "type", "doc")

    def __init__(self, name, value, source, read_only, sensitive, synonyms, type_, doc):
        self.name, self.value, self.source = name, value, source
        self.read_only, self.sensitive, self.synonyms = read_only, sensitive, synonyms
        self.type, self.doc = type_, doc


def topic_entries(broker, name: str, keys=None, overrides=None) -> list:
    """The entries of topic `name`, from `overrides` (default: this broker's copy of them)."""
    if overrides is None:
        overrides = broker.metadata.topic_config(name)
    out = []
    for definition in TOPIC_CONFIGS:
        if keys is not None and definition.name not in keys:
            continue
        value, source, synonyms = broker.config.topic_value(definition.name, overrides)
        out.append(ConfigEntry(definition.name, format_value(value), source, False, False,
                               synonyms, definition.type, definition.doc))
    return out


# The replication and log-dir move rates are DynamicConfig.Broker's quota configs in Kafka, not
# KafkaConfig's: it lists them only once they are set, without a default synonym, and as
# read-only (they are not in DynamicBrokerConfig.AllDynamicConfigs, though kafka-configs.sh and
# kafka-reassign-partitions.sh set them).
QUOTA_RATES = frozenset({"leader.replication.throttled.rate", "follower.replication.throttled.rate",
                         "replica.alter.log.dirs.io.max.bytes.per.second"})
# Settings of this broker that Kafka's config has not (cluster.id) or keeps internal: listed only
# when set, as Kafka lists any property of server.properties.
UNLISTED = frozenset({"cluster.id", "producer.id.expiration.check.interval.ms",
                      "log.initial.task.delay.ms"})
# The type Kafka declares where this broker parses a list ("listeners" is a STRING in Kafka's
# SocketServerConfigs, log.dirs in its log configs, replica.selector.class a STRING too).
KAFKA_TYPES = {"listeners": "string", "advertised.listeners": "string", "log.dirs": "string",
               "replica.selector.class": "string"}


def _set_anywhere(config, name: str) -> bool:
    return name in config.static or name in config.dynamic_default or name in config.dynamic_broker


def broker_entries(broker, keys=None) -> list:
    """Every config of this broker, as Kafka's ConfigHelper.createBrokerConfigEntry: a password
    is null in the value and in every synonym; a property of server.properties that no config
    knows is listed too, as Kafka lists it (null, sensitive: its type is unknown)."""
    config = broker.config
    out = []
    for definition in BROKER_CONFIGS:
        name = definition.name
        if keys is not None and name not in keys:
            continue
        if (name in QUOTA_RATES or name in UNLISTED) and not _set_anywhere(config, name):
            continue
        sensitive = definition.type == "password"
        value = None if sensitive else format_value(config.get(name))
        synonyms = config.synonyms_of(name, defaults=name not in QUOTA_RATES)
        if sensitive:
            synonyms = [(n, None, source) for n, _, source in synonyms]
        read_only = not definition.dynamic or name in QUOTA_RATES
        out.append(ConfigEntry(name, value, config.source_of(name), read_only, sensitive,
                               synonyms, KAFKA_TYPES.get(name, definition.type), definition.doc))
    for name in sorted(config.unknown):
        if keys is None or name in keys:
            out.append(ConfigEntry(name, None, SOURCE_STATIC_BROKER, True, True,
                                   [(name, None, SOURCE_STATIC_BROKER)], None, None))
    return out


def default_broker_entries(broker, keys=None) -> list:
    config = broker.config
    by_name = {d.name: d for d in BROKER_CONFIGS}
    out = []
    for name, value in sorted(config.dynamic_default.items()):
        if keys is not None and name not in keys:
            continue
        definition = by_name[name]
        sensitive = definition.type == "password"
        shown = None if sensitive else format_value(value)
        out.append(ConfigEntry(name, shown, SOURCE_DYNAMIC_DEFAULT_BROKER,
                               not definition.dynamic or name in QUOTA_RATES, sensitive,
                               [(name, shown, SOURCE_DYNAMIC_DEFAULT_BROKER)],
                               KAFKA_TYPES.get(name, definition.type), definition.doc))
    return out


def logger_entries(keys=None) -> list:
    return [ConfigEntry(name, level, SOURCE_DYNAMIC_BROKER_LOGGER, False, False, [], None, None)
            for name, level in logger_levels().items() if keys is None or name in keys]




def broker_id_of(resource_name: str) -> int:
    """Kafka's ConfigHelper.resourceNameToBrokerId: the name as a Java int ("01" is 1)."""
    broker_id = java_int(resource_name)
    if broker_id is None:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"Broker id must be an integer, but it is: {resource_name}")
    return broker_id


def check_logger_resource(broker, resource_name: str) -> None:
    """The broker-logger resource is named by this broker's id (INVALID_REQUEST otherwise)."""
    if not resource_name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Broker id must not be empty")
    if broker_id_of(resource_name) != broker.broker_id:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"Unexpected broker id, expected {broker.broker_id} but received "
                         f"{resource_name}")


def _result_configs(entries, version, include_synonyms, include_docs) -> list:
    out = []
    for e in entries:
        out.append(R.DescribeConfigsResourceResult(
            name=e.name, value=e.value, read_only=e.read_only,
            is_default=e.source == SOURCE_DEFAULT, config_source=e.source,
            is_sensitive=e.sensitive,
            synonyms=[R.DescribeConfigsSynonym(name=n, value=v, source=s)
                      for n, v, s in e.synonyms] if include_synonyms else [],
            config_type=TYPE_IDS.get(e.type, 0),
            documentation=e.doc if include_docs else None))
    return out


def describe_resource(broker, resource_type: int, resource_name: str, keys,
                      topic_overrides=None) -> list:
    """ConfigEntry list for one resource; raises KafkaError for a bad resource."""
    if resource_type == TOPIC:
        validate_topic_name(resource_name)
        if broker.metadata.get_topic(resource_name) is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"Topic {resource_name} does not exist")
        return topic_entries(broker, resource_name, keys, topic_overrides)
    if resource_type == BROKER:
        if resource_name == "":
            return default_broker_entries(broker, keys)
        if broker_id_of(resource_name) != broker.broker_id:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Unexpected broker id, expected {broker.broker_id} or empty "
                             f"string, but received {resource_name}")
        return broker_entries(broker, keys)
    if resource_type == BROKER_LOGGER:
        check_logger_resource(broker, resource_name)
        return logger_entries(keys)
    raise KafkaError(ErrorCode.INVALID_REQUEST,
                     f"Unsupported resource type {resource_type}")


async def _zookeeper_overrides(broker, name: str):
    """In a cluster, topic `name`'s overrides as ZooKeeper holds them now; None elsewhere, for a
    topic that is not there, or when they cannot be used (then this broker's copy is)."""
    kzk = getattr(getattr(broker, "cluster", None), "kzk", None)
    if kzk is None:
        return None
    validate_topic_name(name)
    if broker.metadata.get_topic(name) is None:
        return None
    try:
        configs = await kzk.get_entity_config("topics", name)
        validate_topic_configs(configs)
    except (zd.ZNodeDataError, zd.ZkError, ConfigError) as exc:
        log.error("Describing the config of topic %s as this broker has it: %s", name, exc)
        return None
    return configs


async def handle(broker, ctx, request):
    version = ctx.api_version
    include_synonyms = version >= 1 and request.include_synonyms
    include_docs = version >= 3 and request.include_documentation
    results = []
    for resource in request.resources:
        # null or empty: every config (Kafka's ConfigHelper.createResponseConfig)
        keys = set(resource.configuration_keys) if resource.configuration_keys else None
        try:
            overrides = await _zookeeper_overrides(broker, resource.resource_name) \
                if resource.resource_type == TOPIC else None
            entries = describe_resource(broker, resource.resource_type, resource.resource_name,
                                        keys, overrides)
        except KafkaError as exc:
            results.append(R.DescribeConfigsResult(
                error_code=exc.error_code, error_message=exc.message,
                resource_type=resource.resource_type, resource_name=resource.resource_name))
            continue
        results.append(R.DescribeConfigsResult(
            error_code=ErrorCode.NONE, resource_type=resource.resource_type,
            resource_name=resource.resource_name,
            configs=_result_configs(entries, version, include_synonyms, include_docs)))
    return DescribeConfigsResponse(results=results)
