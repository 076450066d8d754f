"""Broker and topic configuration, declared once as data.

Theory of operation:

- `BROKER_CONFIGS` is the table of every broker property this broker understands, with Kafka's
  names, types, defaults, validators, importance, whether it can be changed at run time
  (`dynamic`, Kafka's "read-only / per-broker / cluster-wide" distinction collapsed into a flag)
  and a short doc of our own.  Defaults are Apache Kafka 3.x's (`KafkaConfig`); a property we
  accept for compatibility but do not act on says so in its doc.
- `TOPIC_CONFIGS` is the table of topic-level properties.  Each names its broker *synonyms*, in
  priority order (``retention.ms`` <- ``log.retention.ms``, ``log.retention.minutes``,
  ``log.retention.hours``), with the unit factor that turns the synonym's value into the topic's.
- `BrokerConfig` holds values in layers, highest priority first, exactly the "sources" Kafka's
  DescribeConfigs reports: dynamic per-broker config, dynamic cluster-wide default, static
  (server.properties + ``--override``), then the table's default.  `get(name)` resolves through
  the layers; hot values are also attributes (``config.socket_request_max_bytes``), refreshed
  whenever a dynamic layer changes.
- `topic_config(overrides)` builds the `storage.log_config.LogConfig` for a topic: the topic's
  own overrides first, then each broker synonym, then the default.

Errors: an invalid value raises `ConfigError` with a one-line message naming the property; an
unknown property is logged as a warning and kept (Kafka does the same: "... was supplied but isn't
a known config").
"""
from __future__ import annotations

import dataclasses
import ipaddress
import logging
import re
import socket

from broker import metadata_version
from broker.quotas import java_double

log = logging.getLogger(__name__)

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
_JAVA_INTEGRAL = re.compile(r"[+-]?\d+")          # \d: Unicode decimal digits, as Java's


def java_int(text: str, bits: int = 32) -> int | None:
    """Java's Integer.parseInt (Short/Long.parseLong with `bits` 16/64): an optional sign and
    decimal digits (Unicode ones too: Character.digit) within range, else None. Python's int()
    also takes surrounding spaces and underscores ("1_000"), which Java refuses."""
    if not _JAVA_INTEGRAL.fullmatch(text):
        return None
    value = int(text)
    return value if -(2 ** (bits - 1)) <= value < 2 ** (bits - 1) else None

# Kafka's ConfigResource / DescribeConfigs enums (DescribeConfigsResponse ConfigType, ConfigSource).
TYPE_IDS = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7,
            "class": 8, "password": 9}
SOURCE_TOPIC = 1
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
SOURCE_DYNAMIC_BROKER_LOGGER = 6


class ConfigError(ValueError):
    """An invalid configuration value; the message names the property, in Kafka's words
    (ConfigException: "Invalid value 5 for configuration x: reason"), or is `message`."""

    def __init__(self, name: str, value, reason: str, message: str | None = None):
        self.name = name
        self.value = value
        self.reason = reason
        shown = "null" if value is None else value
        super().__init__(message or f"Invalid value {shown} for configuration {name}: {reason}")


# -- validators: callables value -> None, raising ValueError(reason) ----------------------------

def at_least(low):
    def check(value):
        if value < low:
            raise ValueError(f"Value must be at least {low}")
    check.describe = f"[{low},...]"
    return check


def between(low, high):
    def check(value):
        if not low <= value <= high:
            raise ValueError(f"Value must be in [{low},{high}]")
    check.describe = f"[{low},...,{high}]"
    return check


def one_of(*choices):
    def check(value):
        values = value if isinstance(value, list) else [value]
        for v in values:
            if v not in choices:
                raise ValueError(f"String must be one of: {', '.join(choices)}")
    check.describe = "[" + ", ".join(choices) + "]"
    return check


def non_empty_list(value):
    if not value:
        raise ValueError("Empty list")


def some_log_dir(value):
    """log.dirs set to an empty list is an error (unset, it falls back to log.dir), as Kafka."""
    if not value:
        raise ValueError("At least one log directory must be defined via log.dirs or log.dir")


# Kafka's SocketServerConfigs.URI_PARSE_REGEXP: any name, a host of [0-9a-zA-Z-%._:] (brackets
# optional around an IPv6 address, whose last ":" is the port's), a port.
_LISTENER = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")


def listener_list(value):
    for item in value:
        match = _LISTENER.match(item)
        if not match:
            raise ValueError(f"Unable to parse {item} to a broker endpoint")
        if not 0 <= int(match.group(3)) <= 65535:       # the OS would bind port % 65536
            raise ValueError(f"Port {match.group(3)} of {item} is out of range 0-65535")


def non_empty_listener_list(value):
    listener_list(value)
    if not value:
        raise ValueError("There must be at least one broker advertised listener")


_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def security_protocol_map(value):
    """Kafka's listener.security.protocol.map: NAME:PROTOCOL pairs, comma separated (trailing
    empty items dropped, as Java's split does)."""
    for pair in re.sub(r"(\s*,)+\s*$", "", value).split(","):
        name, sep, protocol = pair.partition(":")
        if not sep or not name.strip() or not protocol.strip():
            raise ValueError(f"Error parsing configuration property "
                             f"'listener.security.protocol.map': {value}")
        if protocol.strip().upper() not in _SECURITY_PROTOCOLS:
            raise ValueError(f"Invalid security protocol `{protocol.strip()}` defined in "
                             f"listener.security.protocol.map")


_VALID_HOST = re.compile(r"^[0-9a-zA-Z\-%._:]*$")      # Kafka's Utils.validHostPattern


def connection_overrides(value):
    """max.connections.per.ip.overrides: host:count pairs (Kafka's getMap, then toInt and
    validHostPattern); the count may not be negative."""
    for host, count in parse_connection_overrides(value):
        if not _VALID_HOST.match(host):
            raise ValueError(f"max.connections.per.ip.overrides contains invalid addresses : {host}")
        if count < 0:
            raise ValueError(f"the limit for {host} must not be negative")


def parse_connection_overrides(value) -> list:
    """'host:count,...' -> [(host, count)]; ValueError for an item that is not one."""
    out = []
    for item in (value or "").split(","):
        if not item.strip():
            continue
        host, sep, count = item.strip().rpartition(":")
        if not sep or not count.strip().lstrip("-").isdigit():
            raise ValueError(f"Invalid max.connections.per.ip.overrides entry '{item.strip()}': "
                             f"expected host:count")
        out.append((host.strip(), int(count)))
    return out


def zookeeper_connect(value):
    """What ZooKeeper's client accepts (ConnectStringParser, PathUtils.validatePath):
    host[:port] entries, comma separated, then an optional chroot path."""
    hosts, slash, chroot = value.partition("/")
    if slash and chroot:
        path = "/" + chroot
        if path.endswith("/"):
            raise ValueError(f"Invalid path string \"{path}\" caused by path must not end "
                             f"with / character")
        for node in path[1:].split("/"):
            if not node:
                raise ValueError(f"Invalid path string \"{path}\" caused by empty node name "
                                 f"specified")
            if node in (".", ".."):
                raise ValueError(f"Invalid path string \"{path}\" caused by relative paths "
                                 f"not allowed")
    entries = [entry.strip() for entry in hosts.split(",") if entry.strip()]
    if not entries:
        raise ValueError("A HostProvider may not be empty!")
    for entry in entries:
        if entry.startswith("["):                       # [IPv6]:port
            host, _, rest = entry[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else ""
        else:
            host, _, port = entry.rpartition(":") if ":" in entry else (entry, "", "")
        if not host:
            raise ValueError(f"no host in {entry!r}")
        if port:
            if not port.isdigit():
                raise ValueError(f"For input string: \"{port}\" (the port of {entry!r})")
            if int(port) > 65535:
                raise ValueError(f"port out of range:{port}")


@dataclasses.dataclass(frozen=True)
class ConfigDef:
    name: str
    type: str                  # boolean, string, int, short, long, double, list, class, password
    default: object            # typed default, None = no default (null)
    validator: object = None
    importance: str = "medium"
    dynamic: bool = False
    doc: str = ""


def _c(name, type_, default, validator=None, importance="medium", dynamic=False, doc=""):
    return ConfigDef(name, type_, default, validator, importance, dynamic, doc)


_COMPRESSION = one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_CLEANUP = one_of("compact", "delete")
_TIMESTAMP_TYPE = one_of("CreateTime", "LogAppendTime")
_UNUSED = " Accepted for compatibility; this broker does not act on it yet."


_THROTTLED_REPLICA = re.compile(r"[0-9]+:[0-9]+", re.ASCII)


def throttled_replicas(value):
    """Kafka's format: "*" or partition:broker pairs ("0:101,1:102")."""
    if value == ["*"]:
        return
    for item in value:
        if not _THROTTLED_REPLICA.fullmatch(item.strip()):
            raise ValueError("Must be '*' or a comma-separated list of partitionId:brokerId "
                             f"pairs, not {item!r}")


RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def replica_selector(value):
    if value not in (None, RACK_AWARE_REPLICA_SELECTOR):
        raise ValueError(f"only {RACK_AWARE_REPLICA_SELECTOR} is available")


def gzip_level(value):
    if value != -1 and not 1 <= value <= 9:
        raise ValueError("Value must be -1 (the codec's default) or in [1,9]")


def not_in_zookeeper_mode(value):
    """Kafka's LogConfig.validateNoInvalidRemoteStorageConfigsInZK (an
    InvalidConfigurationException: its sentence alone, no "Invalid value" prefix)."""
    if value:
        message = ("It is invalid to set `remote.log.delete.on.disable` or "
                   "`remote.log.copy.disable` under Zookeeper's mode.")
        raise ConfigError("remote.log.*.disable", value, message, message)


def no_tiered_storage(value):
    if value:
        raise ValueError("Tiered Storage functionality is disabled in the broker")

BROKER_CONFIGS = [
    # --- server basics
    _c("broker.id", "int", -1, None, "high", doc="The broker's id; must be unique in a cluster."),
    _c("broker.rack", "string", None, None, "medium",
       doc="The rack of the broker: in its registration, Metadata, and rack-aware placement."),
    _c("cluster.id", "string", None, None, "low",
       doc="Cluster id for a new log dir; generated when absent."),
    _c("broker.id.generation.enable", "boolean", True, None, "medium",
       doc="In a cluster, generate a broker id (from /brokers/seqid) when broker.id is unset."),
    _c("reserved.broker.max.id", "int", 1000, at_least(0), "medium",
       doc="Largest broker id that is never generated (generated ids start above it)."),
    _c("inter.broker.protocol.version", "string", metadata_version.LATEST_PRODUCTION,
       metadata_version.validate, "medium",
       doc="Protocol version brokers speak to each other." + _UNUSED),
    # --- sockets and connections
    _c("listeners", "list", ["PLAINTEXT://:9092"], non_empty_listener_list, "high",
       doc="Comma-separated URIs the broker listens on, NAME://host:port (empty host: all)."),
    _c("advertised.listeners", "list", None, non_empty_listener_list, "high",
       doc="Listeners published to clients in Metadata, if different from `listeners`."),
    _c("listener.security.protocol.map", "string",
       "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
       security_protocol_map, "low",
       doc="Listener name to security protocol. Only PLAINTEXT is served."),
    _c("inter.broker.listener.name", "string", None, None, "medium",
       doc="The listener brokers use to talk to each other."),
    _c("num.network.threads", "int", 3, at_least(1), "high", True,
       doc="Network threads." + _UNUSED + " (one asyncio event loop serves every socket)"),
    _c("num.io.threads", "int", 8, at_least(1), "high", True, doc="Request threads." + _UNUSED),
    _c("background.threads", "int", 10, at_least(1), "high", True,
       doc="Background task threads." + _UNUSED),
    _c("queued.max.requests", "int", 500, at_least(1), "high", doc="Request queue size." + _UNUSED),
    _c("socket.send.buffer.bytes", "int", 102400, None, "high",
       doc="SO_SNDBUF of accepted sockets; -1 uses the OS default."),
    _c("socket.receive.buffer.bytes", "int", 102400, None, "high",
       doc="SO_RCVBUF of accepted sockets; -1 uses the OS default."),
    _c("socket.request.max.bytes", "int", 104857600, at_least(1), "high",
       doc="Largest request frame accepted; a bigger one closes the connection."),
    _c("max.connections", "int", INT_MAX, at_least(0), "medium", True,
       doc="Most connections the broker serves; further ones wait, unread, for a free slot."),
    _c("max.connections.per.ip", "int", INT_MAX, at_least(0), "medium", True,
       doc="Most connections from one client address; further ones are closed."),
    _c("max.connections.per.ip.overrides", "string", "", connection_overrides, "medium", True,
       doc="Per-address limits, 'host:count,host:count', overriding max.connections.per.ip."),
    _c("connections.max.idle.ms", "long", 600000, None, "medium",
       doc="Idle connections are closed after this many milliseconds."),
    # --- client quotas (broker/quotas.py; the quotas themselves are set with AlterClientQuotas)
    _c("quota.window.num", "int", 11, at_least(1), "low",
       doc="Samples kept to measure a client's byte rate against its quota."),
    _c("quota.window.size.seconds", "int", 1, at_least(1), "low",
       doc="Time span of each quota sample."),
    _c("replication.quota.window.num", "int", 11, at_least(1), "low",
       doc="Samples kept to measure replication throttles (leader/follower.replication."
           "throttled.rate)."),
    _c("replication.quota.window.size.seconds", "int", 1, at_least(1), "low",
       doc="Time span of each replication throttle sample."),
    # --- logs
    _c("log.dirs", "list", None, some_log_dir, "high",
       doc="Directories holding the log data; when unset, log.dir is used."),
    _c("log.dir", "string", "/tmp/kafka-logs", None, "high",
       doc="The log directory, used when log.dirs is not set."),
    _c("num.recovery.threads.per.data.dir", "int", 1, at_least(1), "high", True,
       doc="Threads per log dir recovering logs at start-up and flushing at shutdown."),
    _c("log.segment.bytes", "int", 1073741824, at_least(14), "high", True,
       doc="Largest size of one segment file."),
    _c("log.roll.ms", "long", None, None, "high", True,
       doc="Roll a new segment after this long (overrides log.roll.hours)."),
    _c("log.roll.hours", "int", 168, at_least(1), "high",
       doc="Roll a new segment after this many hours."),
    _c("log.roll.jitter.ms", "long", None, None, "high", True,
       doc="Random jitter subtracted from the roll time (overrides log.roll.jitter.hours)."),
    _c("log.roll.jitter.hours", "int", 0, at_least(0), "high",
       doc="Random jitter subtracted from the roll time, in hours."),
    _c("log.retention.ms", "long", None, None, "high", True,
       doc="Delete segments older than this; -1 keeps them forever. Overrides minutes/hours."),
    _c("log.retention.minutes", "int", None, None, "high",
       doc="Retention in minutes, used when log.retention.ms is unset."),
    _c("log.retention.hours", "int", 168, None, "high",
       doc="Retention in hours, used when log.retention.ms and .minutes are unset."),
    _c("log.retention.bytes", "long", -1, None, "high", True,
       doc="Delete old segments while a partition is larger than this; -1: no size limit."),
    _c("log.retention.check.interval.ms", "long", 300000, at_least(1), "medium",
       doc="How often retention runs."),
    _c("log.index.size.max.bytes", "int", 10485760, at_least(4), "medium", True,
       doc="Preallocated size of an offset or time index file."),
    _c("log.index.interval.bytes", "int", 4096, at_least(0), "medium", True,
       doc="Bytes of log between two offset index entries."),
    _c("log.flush.interval.messages", "long", LONG_MAX, at_least(1), "high", True,
       doc="Fsync a partition after this many messages (default: leave it to the OS)."),
    _c("log.flush.interval.ms", "long", None, None, "high", True,
       doc="Fsync a partition after this long; unset: log.flush.scheduler.interval.ms."),
    _c("log.flush.scheduler.interval.ms", "long", LONG_MAX, None, "high",
       doc="How often the flusher checks whether a log needs an fsync."),
    _c("log.flush.offset.checkpoint.interval.ms", "int", 60000, at_least(0), "high",
       doc="How often recovery points are checkpointed."),
    _c("log.flush.start.offset.checkpoint.interval.ms", "int", 60000, at_least(0), "high",
       doc="How often log start offsets are checkpointed."),
    _c("replica.high.watermark.checkpoint.interval.ms", "long", 5000, None, "high",
       doc="How often high watermarks are checkpointed."),
    _c("log.cleanup.policy", "list", ["delete"], _CLEANUP, "medium", True,
       doc="Default cleanup policy for segments past retention: delete or compact."),
    _c("log.cleaner.enable", "boolean", True, None, "medium",
       doc="Run the log cleaner: compacted topics are cleaned, and only by it (retention too)."),
    _c("log.cleaner.threads", "int", 1, at_least(0), "medium", True,
       doc="Log cleaner threads (each cleans one log at a time)."),
    _c("log.cleaner.dedupe.buffer.size", "long", 134217728, None, "medium", True,
       doc="Memory for the cleaners' key maps, split between the threads."),
    _c("log.cleaner.io.buffer.size", "int", 524288, at_least(0), "medium", True,
       doc="Read and write buffer memory of the cleaners, split between the threads."),
    _c("log.cleaner.io.buffer.load.factor", "double", 0.9, None, "medium", True,
       doc="How full a cleaner's key map may get before a clean stops mapping."),
    _c("log.cleaner.io.max.bytes.per.second", "double", 1.7976931348623157e308, None, "medium",
       True, doc="Cap on the cleaners' read plus write rate."),
    _c("log.cleaner.backoff.ms", "long", 15000, at_least(0), "medium", True,
       doc="How long a cleaner thread sleeps when no log needs cleaning."),
    _c("log.cleaner.delete.retention.ms", "long", 86400000, at_least(0), "medium", True,
       doc="How long delete tombstones are kept in compacted topics."),
    _c("log.cleaner.min.compaction.lag.ms", "long", 0, at_least(0), "medium", True,
       doc="Minimum time a message stays uncompacted."),
    _c("log.cleaner.max.compaction.lag.ms", "long", LONG_MAX, at_least(1), "medium", True,
       doc="Maximum time a message stays ineligible for compaction."),
    _c("log.cleaner.min.cleanable.ratio", "double", 0.5, between(0.0, 1.0), "medium", True,
       doc="Minimum dirty ratio before a log is compacted."),
    _c("log.segment.delete.delay.ms", "long", 60000, at_least(0), "high", True,
       doc="Delay before a deleted segment's files are removed from disk."),
    _c("log.preallocate", "boolean", False, None, "medium", True,
       doc="Preallocate segment files."),
    _c("log.message.timestamp.type", "string", "CreateTime", _TIMESTAMP_TYPE, "medium", True,
       doc="Whether record timestamps are the producer's (CreateTime) or the broker's."),
    _c("log.message.timestamp.difference.max.ms", "long", LONG_MAX, at_least(0), "medium", True,
       doc="[DEPRECATED since Kafka 3.6] Largest allowed difference between a CreateTime "
           "timestamp and the broker's clock; the before/after limits win when set."),
    _c("log.message.timestamp.before.max.ms", "long", LONG_MAX, at_least(0), "medium", True,
       doc="How far a CreateTime timestamp may lie in the past."),
    _c("log.message.timestamp.after.max.ms", "long", LONG_MAX, at_least(0), "medium", True,
       doc="How far a CreateTime timestamp may lie in the future."),
    _c("log.message.downconversion.enable", "boolean", True, None, "low", True,
       doc="Down-convert records for old fetch versions."),
    _c("log.message.format.version", "string", "3.0-IV1", metadata_version.validate, "medium",
       doc="[DEPRECATED since Kafka 3.0] Ignored: batches are always stored as v2."),
    _c("message.max.bytes", "int", 1048588, at_least(0), "high", True,
       doc="Largest record batch the broker accepts (topic: max.message.bytes)."),
    _c("compression.type", "string", "producer", _COMPRESSION, "high", True,
       doc="Final compression of stored batches; 'producer' keeps the producer's codec."),
    _c("min.insync.replicas", "int", 1, at_least(1), "high", True,
       doc="Fewest in-sync replicas an acks=all produce needs."),
    _c("unclean.leader.election.enable", "boolean", False, None, "high", True,
       doc="Allow out-of-sync replicas to become leader."),
    # --- topics
    _c("num.partitions", "int", 1, at_least(1), "medium",
       doc="Default partition count of new topics."),
    _c("default.replication.factor", "int", 1, at_least(1), "medium",
       doc="Default replication factor of new topics."),
    _c("auto.create.topics.enable", "boolean", True, None, "high",
       doc="Create a topic when a client asks Metadata for one that does not exist."),
    _c("delete.topic.enable", "boolean", True, None, "high",
       doc="Allow DeleteTopics; when false it answers TOPIC_DELETION_DISABLED."),
    _c("create.topic.policy.class.name", "class", None, None, "low",
       doc="A topic creation policy." + _UNUSED),
    # --- replication (a cluster: followers fetch from their leaders)
    _c("replica.lag.time.max.ms", "long", 30000, None, "high",
       doc="A follower that has not caught up for this long leaves the ISR."),
    _c("replica.fetch.max.bytes", "int", 1048576, at_least(0), "medium",
       doc="Bytes a follower fetches per partition."),
    _c("replica.fetch.min.bytes", "int", 1, at_least(1), "medium",
       doc="Bytes a follower's fetch waits for (up to replica.fetch.wait.max.ms)."),
    _c("replica.fetch.wait.max.ms", "int", 500, at_least(0), "medium",
       doc="Longest a follower's fetch waits at the leader for data."),
    _c("replica.fetch.response.max.bytes", "int", 10485760, at_least(0), "medium",
       doc="Most bytes one follower fetch response carries."),
    _c("replica.fetch.backoff.ms", "int", 1000, at_least(0), "medium",
       doc="How long a follower waits after a fetch error before fetching that partition again."),
    _c("replica.socket.receive.buffer.bytes", "int", 65536, None, "high",
       doc="SO_RCVBUF of a follower's connection to its leader; -1 uses the OS default."),
    _c("replica.socket.timeout.ms", "int", 30000, None, "high",
       doc="How long a follower waits for a fetch response before reconnecting."),
    _c("replica.selector.class", "class", None, replica_selector, "medium",
       doc="Set to org.apache.kafka.common.replica.RackAwareReplicaSelector to let consumers "
           "with client.rack read from an in-sync replica in their rack (KIP-392)."),
    _c("leader.replication.throttled.rate", "long", LONG_MAX, at_least(0), "medium", True,
       doc="Bytes per second a leader sends to the replicas named in a topic's "
           "leader.replication.throttled.replicas while they are out of the ISR."),
    _c("follower.replication.throttled.rate", "long", LONG_MAX, at_least(0), "medium", True,
       doc="Bytes per second a follower fetches for the replicas named in a topic's "
           "follower.replication.throttled.replicas while they are out of the ISR."),
    _c("replica.alter.log.dirs.io.max.bytes.per.second", "long", LONG_MAX, at_least(0),
       "medium", True, doc="Bytes per second of moves between log dirs (AlterReplicaLogDirs)."),
    _c("num.replica.fetchers", "int", 1, at_least(1), "high", True,
       doc="Fetcher connections per source broker (partitions are spread over them)."),
    _c("fetch.max.bytes", "int", 57671680, at_least(1024), "medium",
       doc="Most bytes one Fetch response carries."),
    _c("max.incremental.fetch.session.cache.slots", "int", 1000, at_least(0), "medium",
       doc="Most incremental fetch sessions (KIP-227) the broker keeps."),
    _c("fetch.purgatory.purge.interval.requests", "int", 1000, None, "medium", doc=_UNUSED.strip()),
    _c("producer.purgatory.purge.interval.requests", "int", 1000, None, "medium",
       doc=_UNUSED.strip()),
    _c("controlled.shutdown.enable", "boolean", True, None, "medium",
       doc="In a cluster, ask the controller to move leadership away before shutting down."),
    _c("controlled.shutdown.max.retries", "int", 3, None, "medium",
       doc="Attempts of a controlled shutdown before shutting down anyway."),
    _c("controlled.shutdown.retry.backoff.ms", "long", 5000, None, "medium",
       doc="Wait between controlled shutdown attempts."),
    _c("controller.socket.timeout.ms", "int", 30000, None, "medium",
       doc="Connect timeout of the controller's connections to the brokers."),
    _c("request.timeout.ms", "int", 30000, at_least(0), "medium",
       doc="How long the controller waits for a broker's answer before resending."),
    _c("auto.leader.rebalance.enable", "boolean", True, None, "high",
       doc="In a cluster, the controller moves leadership back to preferred replicas."),
    _c("leader.imbalance.per.broker.percentage", "int", 10, None, "high",
       doc="Share of a broker's preferred partitions led elsewhere that triggers a rebalance."),
    _c("leader.imbalance.check.interval.seconds", "long", 300, at_least(1), "high",
       doc="How often the controller checks the leader imbalance."),
    # --- ZooKeeper (cluster mode)
    _c("zookeeper.connect", "string", None, zookeeper_connect, "high",
       doc="ZooKeeper connection string; unset: metadata lives in the first log dir."),
    _c("zookeeper.session.timeout.ms", "int", 18000, None, "high",
       doc="ZooKeeper session timeout."),
    _c("zookeeper.connection.timeout.ms", "int", None, None, "high",
       doc="How long to wait for a ZooKeeper connection; unset: the session timeout."),
    _c("zookeeper.max.in.flight.requests", "int", 10, at_least(1), "high",
       doc="ZooKeeper requests a broker (and its controller) keeps outstanding at once."),
    # --- group coordinator and offsets
    _c("offsets.topic.num.partitions", "int", 50, at_least(1), "high",
       doc="Partitions of __consumer_offsets (do not change once it exists)."),
    _c("offsets.topic.replication.factor", "short", 3, at_least(1), "high",
       doc="Replication factor of __consumer_offsets."),
    _c("offsets.topic.segment.bytes", "int", 104857600, at_least(1), "high",
       doc="Segment size of __consumer_offsets."),
    _c("offsets.retention.minutes", "int", 10080, at_least(1), "high",
       doc="Committed offsets of an empty group are kept this long."),
    _c("offsets.retention.check.interval.ms", "long", 600000, at_least(1), "high",
       doc="How often expired offsets are removed."),
    _c("offsets.commit.timeout.ms", "int", 5000, at_least(1), "high",
       doc="How long an offset commit waits for its append."),
    _c("offsets.commit.required.acks", "short", -1, None, "high",
       doc="[DEPRECATED since Kafka 3.8] Acks an offset commit's append waits for." + _UNUSED),
    _c("offsets.load.buffer.size", "int", 5242880, at_least(1), "high",
       doc="Read size when loading __consumer_offsets."),
    _c("group.initial.rebalance.delay.ms", "int", 3000, None, "medium",
       doc="How long the first rebalance of a new group waits for more members."),
    _c("group.min.session.timeout.ms", "int", 6000, None, "medium",
       doc="Smallest session timeout a member may ask for."),
    _c("group.max.session.timeout.ms", "int", 1800000, None, "medium",
       doc="Largest session timeout a member may ask for."),
    _c("group.max.size", "int", INT_MAX, at_least(1), "medium", doc="Most members in one group."),
    _c("offset.metadata.max.bytes", "int", 4096, at_least(0), "high",
       doc="Largest metadata string one committed offset may carry."),
    # --- transactions and idempotence
    _c("transaction.state.log.replication.factor", "short", 3, at_least(1), "high",
       doc="Replication factor of __transaction_state."),
    _c("transaction.state.log.min.isr", "int", 2, at_least(1), "high",
       doc="min.insync.replicas of __transaction_state."),
    _c("transaction.state.log.num.partitions", "int", 50, at_least(1), "high",
       doc="Partitions of __transaction_state."),
    _c("transaction.state.log.segment.bytes", "int", 104857600, at_least(1), "high",
       doc="Segment size of __transaction_state."),
    _c("transaction.max.timeout.ms", "int", 900000, at_least(1), "high",
       doc="Largest transaction timeout a producer may ask for."),
    _c("transactional.id.expiration.ms", "int", 604800000, at_least(1), "high",
       doc="How long an unused transactional id is remembered."),
    _c("transaction.partition.verification.enable", "boolean", True, None, "low", True,
       doc="Before a producer's first transactional write to a partition, check with the "
           "transaction coordinator that the partition is in its transaction (KIP-890)."),
    _c("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000,
       at_least(1), "low",
       doc="How often transactions past their timeout are looked for and aborted."),
    _c("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000,
       at_least(1), "low",
       doc="How often transactional ids past transactional.id.expiration.ms are removed."),
    _c("producer.id.expiration.ms", "int", 86400000, at_least(1), "low", True,
       doc="How long a producer id's state is kept after its last write (an open "
           "transaction keeps it)."),
    _c("producer.id.expiration.check.interval.ms", "int", 600000, at_least(1), "low",
       doc="How often expired producer ids are removed (Kafka's internal setting)."),
    _c("log.initial.task.delay.ms", "long", 30000, at_least(0), "low",
       doc="How long after start the first log retention pass and checkpoints run (Kafka's "
           "internal setting; never later than their own interval here)."),
    # --- security
    _c("sasl.enabled.mechanisms", "list", ["GSSAPI"], None, "medium",
       doc="SASL mechanisms of SASL listeners; plaintext listeners enable none."),
    _c("security.inter.broker.protocol", "string", "PLAINTEXT", one_of(*_SECURITY_PROTOCOLS),
       "medium",
       doc="Security protocol between brokers."),
    _c("delegation.token.secret.key", "password", None, None, "medium",
       doc="Secret that signs delegation tokens." + _UNUSED),
    _c("delegation.token.master.key", "password", None, None, "medium",
       doc="[DEPRECATED] Alias of delegation.token.secret.key." + _UNUSED),
    # --- metrics
    _c("auto.include.jmx.reporter", "boolean", True, None, "low",
       doc="[DEPRECATED since Kafka 3.4] Whether JmxReporter is included; there is no JMX "
           "here."),
]

BROKER_CONFIG = {c.name: c for c in BROKER_CONFIGS}

# Apache Kafka 3.9's deprecated broker and topic properties: accepted (honoured where this broker
# acts on them, as message.timestamp.difference.max.ms is) and, when set, logged with a warning:
# Kafka's own text where Kafka logs one, else the deprecation its documentation states. A text
# follows the property's name; a callable gets (value, inter.broker.protocol.version, topic or
# None) -> the whole warning or None.
DEPRECATED = {
    "message.format.version": lambda value, ibp, topic: metadata_version.topic_format_warning(
        topic, value, ibp),
    "log.message.format.version": lambda value, ibp, topic:
        metadata_version.broker_format_warning(value, ibp),
    "message.timestamp.difference.max.ms": "is deprecated since Kafka 3.6 and will be removed "
        "in Apache Kafka 4.0; use message.timestamp.before.max.ms and "
        "message.timestamp.after.max.ms",
    "log.message.timestamp.difference.max.ms": "is deprecated since Kafka 3.6 and will be "
        "removed in Apache Kafka 4.0; use log.message.timestamp.before.max.ms and "
        "log.message.timestamp.after.max.ms",
    "offsets.commit.required.acks": "is deprecated and it will be removed in Apache Kafka 4.0.",
    "delegation.token.master.key": "is deprecated; use delegation.token.secret.key",
    "auto.include.jmx.reporter": "is deprecated and will be removed in Apache Kafka 4.0",
}


def deprecation_warnings(values: dict, inter_broker_protocol: str,
                         topic: str | None = None) -> list[str]:
    """The warnings Kafka logs for the deprecated properties among `values` (name -> value)."""
    out = []
    for name, value in values.items():
        note = DEPRECATED.get(name)
        if note is None or value is None:
            continue
        if callable(note):
            try:
                text = note(str(value), inter_broker_protocol, topic)
            except ValueError:               # an invalid value is refused elsewhere
                text = None
        else:
            text = f"{name} {note}" + (f" (topic {topic})" if topic else "")
        if text:
            out.append(text)
    return out


@dataclasses.dataclass(frozen=True)
class TopicConfigDef:
    name: str
    type: str
    default: object                  # used when no synonym has a value
    synonyms: tuple = ()             # ((broker property, factor), ...), highest priority first
    validator: object = None
    doc: str = ""


_MIN = 60 * 1000
_HOUR = 60 * _MIN

TOPIC_CONFIGS = [
    TopicConfigDef("cleanup.policy", "list", ["delete"], (("log.cleanup.policy", 1),), _CLEANUP,
                   "delete: drop old segments; compact: keep the last record per key."),
    TopicConfigDef("compression.type", "string", "producer", (("compression.type", 1),),
                   _COMPRESSION, "Final compression of stored batches."),
    TopicConfigDef("compression.gzip.level", "int", -1, (), gzip_level,
                   "gzip level when the broker compresses (Kafka 3.8+)." + _UNUSED),
    TopicConfigDef("compression.lz4.level", "int", 9, (), between(1, 17),
                   "lz4 level when the broker compresses (Kafka 3.8+)." + _UNUSED),
    TopicConfigDef("compression.zstd.level", "int", 3, (), between(-131072, 22),
                   "zstd level when the broker compresses (Kafka 3.8+)." + _UNUSED),
    TopicConfigDef("delete.retention.ms", "long", 86400000,
                   (("log.cleaner.delete.retention.ms", 1),), at_least(0),
                   "How long tombstones stay in a compacted topic."),
    TopicConfigDef("file.delete.delay.ms", "long", 60000, (("log.segment.delete.delay.ms", 1),),
                   at_least(0), "Delay before a deleted segment's files are removed."),
    TopicConfigDef("flush.messages", "long", LONG_MAX, (("log.flush.interval.messages", 1),),
                   at_least(1), "Fsync after this many messages."),
    TopicConfigDef("flush.ms", "long", LONG_MAX, (("log.flush.interval.ms", 1),
                                                 ("log.flush.scheduler.interval.ms", 1)),
                   at_least(0), "Fsync after this long."),
    TopicConfigDef("follower.replication.throttled.replicas", "list", [], (),
                   throttled_replicas, "Replicas (partition:broker, or *) whose fetching from "
                   "their leader follower.replication.throttled.rate limits."),
    TopicConfigDef("index.interval.bytes", "int", 4096, (("log.index.interval.bytes", 1),),
                   at_least(0), "Bytes of log between offset index entries."),
    TopicConfigDef("leader.replication.throttled.replicas", "list", [], (),
                   throttled_replicas, "Replicas (partition:broker, or *) whose leader "
                   "limits what it sends them to leader.replication.throttled.rate."),
    TopicConfigDef("local.retention.bytes", "long", -2, (), at_least(-2),
                   "Tiered storage: local size limit; -2: retention.bytes." + _UNUSED),
    TopicConfigDef("local.retention.ms", "long", -2, (), at_least(-2),
                   "Tiered storage: local age limit; -2: retention.ms." + _UNUSED),
    TopicConfigDef("max.compaction.lag.ms", "long", LONG_MAX,
                   (("log.cleaner.max.compaction.lag.ms", 1),), at_least(1),
                   "Longest time a record stays ineligible for compaction."),
    TopicConfigDef("max.message.bytes", "int", 1048588, (("message.max.bytes", 1),), at_least(0),
                   "Largest record batch accepted."),
    TopicConfigDef("message.downconversion.enable", "boolean", True,
                   (("log.message.downconversion.enable", 1),), None,
                   "Down-convert records for old fetch versions."),
    TopicConfigDef("message.format.version", "string", "3.0-IV1",
                   (("log.message.format.version", 1),), metadata_version.validate,
                   "[DEPRECATED since Kafka 3.0] Ignored: batches are always stored as v2."),
    TopicConfigDef("message.timestamp.difference.max.ms", "long", LONG_MAX,
                   (("log.message.timestamp.difference.max.ms", 1),), at_least(0),
                   "[DEPRECATED since Kafka 3.6] Largest difference between a CreateTime "
                   "timestamp and the broker clock; the before/after limits win when set."),
    TopicConfigDef("message.timestamp.before.max.ms", "long", LONG_MAX,
                   (("log.message.timestamp.before.max.ms", 1),), at_least(0),
                   "How far a CreateTime timestamp may lie in the past."),
    TopicConfigDef("message.timestamp.after.max.ms", "long", LONG_MAX,
                   (("log.message.timestamp.after.max.ms", 1),), at_least(0),
                   "How far a CreateTime timestamp may lie in the future."),
    TopicConfigDef("message.timestamp.type", "string", "CreateTime",
                   (("log.message.timestamp.type", 1),), _TIMESTAMP_TYPE,
                   "CreateTime (the producer's) or LogAppendTime (the broker's)."),
    TopicConfigDef("min.cleanable.dirty.ratio", "double", 0.5,
                   (("log.cleaner.min.cleanable.ratio", 1),), between(0.0, 1.0),
                   "Minimum dirty ratio before compaction."),
    TopicConfigDef("min.compaction.lag.ms", "long", 0, (("log.cleaner.min.compaction.lag.ms", 1),),
                   at_least(0), "Minimum time a record stays uncompacted."),
    TopicConfigDef("min.insync.replicas", "int", 1, (("min.insync.replicas", 1),), at_least(1),
                   "Fewest in-sync replicas an acks=all produce needs."),
    TopicConfigDef("preallocate", "boolean", False, (("log.preallocate", 1),), None,
                   "Preallocate segment files."),
    TopicConfigDef("remote.log.copy.disable", "boolean", False, (), not_in_zookeeper_mode,
                   "Tiered storage's read-only switch; true is refused in ZooKeeper mode, as "
                   "Kafka refuses it."),
    TopicConfigDef("remote.log.delete.on.disable", "boolean", False, (), not_in_zookeeper_mode,
                   "Tiered storage's delete-on-disable switch; true is refused in ZooKeeper "
                   "mode, as Kafka refuses it."),
    TopicConfigDef("remote.storage.enable", "boolean", False, (), no_tiered_storage,
                   "Tiered storage; not available in this broker (true is refused, as Kafka "
                   "does when the broker has tiered storage disabled)."),
    TopicConfigDef("retention.bytes", "long", -1, (("log.retention.bytes", 1),), None,
                   "Largest partition size before old segments are deleted; -1: unlimited."),
    TopicConfigDef("retention.ms", "long", 604800000,
                   (("log.retention.ms", 1), ("log.retention.minutes", _MIN),
                    ("log.retention.hours", _HOUR)), at_least(-1),
                   "Age after which segments are deleted; -1: forever."),
    TopicConfigDef("segment.bytes", "int", 1073741824, (("log.segment.bytes", 1),), at_least(14),
                   "Largest segment file."),
    TopicConfigDef("segment.index.bytes", "int", 10485760, (("log.index.size.max.bytes", 1),),
                   at_least(4), "Preallocated size of index files."),
    TopicConfigDef("segment.jitter.ms", "long", 0, (("log.roll.jitter.ms", 1),
                                                    ("log.roll.jitter.hours", _HOUR)),
                   at_least(0), "Random jitter subtracted from segment.ms."),
    TopicConfigDef("segment.ms", "long", 604800000, (("log.roll.ms", 1), ("log.roll.hours", _HOUR)),
                   at_least(1), "Roll a segment after this long."),
    TopicConfigDef("unclean.leader.election.enable", "boolean", False,
                   (("unclean.leader.election.enable", 1),), None,
                   "Allow out-of-sync replicas to become leader."),
]

TOPIC_CONFIG = {c.name: c for c in TOPIC_CONFIGS}


# -- parsing ----------------------------------------------------------------------------------

def parse_value(definition, raw):
    """A raw string (or typed value) -> the typed value, validated. Raises ConfigError."""
    name = definition.name
    if raw is None:
        value = None
    elif not isinstance(raw, str):
        value = raw
    else:
        text = raw.strip()
        try:
            value = _parse_text(definition.type, text)
        except ValueError as exc:
            raise ConfigError(name, raw, str(exc)) from None
    if value is not None and definition.validator is not None:
        try:
            definition.validator(value)
        except ConfigError:
            raise               # a validator with Kafka's own message for it
        except ValueError as exc:
            raise ConfigError(name, raw, str(exc)) from None
    return value


def _parse_text(kind, text):
    if kind == "boolean":
        if text.lower() not in ("true", "false"):
            raise ValueError("Expected value to be either true or false")
        return text.lower() == "true"
    if kind in ("int", "short", "long"):
        value = java_int(text.strip(), {"short": 16, "int": 32, "long": 64}[kind])  # ConfigDef trims
        if value is None:
            raise ValueError(f"Not a number of type {kind.upper()}")
        return value
    if kind == "double":
        try:
            return float(text)
        except ValueError:
            raise ValueError("Not a number of type DOUBLE") from None
    if kind == "list":
        return [item.strip() for item in text.split(",") if item.strip()] if text else []
    return text


# Broker configs that stand in for one another, highest priority first (Kafka's
# DynamicBrokerConfig.brokerConfigSynonyms): each one's synonyms in DescribeConfigs.
_RETENTION = ("log.retention.ms", "log.retention.minutes", "log.retention.hours")
_ROLL = ("log.roll.ms", "log.roll.hours")
_JITTER = ("log.roll.jitter.ms", "log.roll.jitter.hours")
BROKER_SYNONYM_CHAINS = {
    **dict.fromkeys(_RETENTION, _RETENTION), **dict.fromkeys(_ROLL, _ROLL),
    **dict.fromkeys(_JITTER, _JITTER),
    "log.flush.interval.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
}


def format_value(value) -> str | None:
    """Typed value -> the string DescribeConfigs shows (Kafka's ConfigDef.convertToString; a
    double as Java's Double.toString, "1.7976931348623157E308")."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, float):
        return java_double(value)
    return str(value)


def read_properties(text: str) -> dict:
    """Java .properties: `k=v`, `k: v` or `k v`; `#`/`!` comments; `\\` continues a line."""
    props = {}
    logical, pending = [], ""
    for line in text.splitlines():
        stripped = line.lstrip()
        if not pending and (not stripped or stripped[0] in "#!"):
            continue
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            pending += stripped[:-1]
            continue
        logical.append(pending + stripped)
        pending = ""
    if pending:
        logical.append(pending)
    for entry in logical:
        match = re.match(r"((?:[^=:\s\\]|\\.)+)\s*[=:\s]\s*(.*)$", entry)
        if match is None:
            props[_unescape(entry)] = ""
            continue
        props[_unescape(match.group(1))] = _unescape(match.group(2).rstrip())
    return props


def _unescape(text: str) -> str:
    escapes = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
    return re.sub(r"\\(.)", lambda m: escapes.get(m.group(1), m.group(1)), text)


class Listener:
    __slots__ = ("name", "host", "port")

    def __init__(self, name, host, port):
        self.name, self.host, self.port = name, host, port

    @classmethod
    def parse(cls, text: str) -> "Listener":
        match = _LISTENER.match(text.strip())
        if match is None:
            raise ValueError(f"Unable to parse {text} to a broker endpoint")
        host = match.group(2).strip("[]")
        return cls(match.group(1).upper(), host, int(match.group(3)))

    def __repr__(self):
        return f"{self.name}://{self.host}:{self.port}"


# -- the live configuration -------------------------------------------------------------------

_HOT = {name.replace(".", "_"): name for name in BROKER_CONFIG}


def _normal_address(host: str) -> str:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def _resolve_overrides(raw: str) -> dict:
    """{normalised address: limit} of max.connections.per.ip.overrides; a host name is resolved
    once here (Kafka's InetAddress.getByName), and one that does not resolve is left out."""
    out = {}
    for host, count in parse_connection_overrides(raw):
        try:
            out[str(ipaddress.ip_address(host))] = count
            continue
        except ValueError:
            pass
        try:
            infos = socket.getaddrinfo(host, None)
        except (OSError, UnicodeError):
            log.warning("max.connections.per.ip.overrides: %s does not resolve; ignored", host)
            continue
        for info in infos:
            out[_normal_address(info[4][0])] = count
    return out


def _ip_version(host: str) -> int | None:
    """4 or 6 for an IP address literal, None for a name or an empty host."""
    try:
        return ipaddress.ip_address(host.strip("[]")).version
    except ValueError:
        return None


# The thread counts Kafka lets change dynamically only within half and double the current one.
_THREAD_COUNTS = ("num.io.threads", "num.network.threads", "num.replica.fetchers",
                  "num.recovery.threads.per.data.dir", "background.threads",
                  "log.cleaner.threads")


def _first_set(values: dict, *synonyms) -> int:
    """The milliseconds of the first set synonym ((name, factor) in priority order)."""
    for name, factor in synonyms:
        if values[name] is not None:
            return values[name] * factor
    return -1


# Comma-separated lists here, STRING configs in Kafka (printed as they were written)
_STRING_IN_KAFKA = frozenset(("listeners", "advertised.listeners", "log.dirs"))


class BrokerConfig:
    """Layered broker configuration: dynamic per-broker > dynamic default > static > default."""

    def __init__(self, static: dict | None = None):
        self.static: dict = {}           # name -> typed value, from the file and overrides
        self.unknown: dict = {}          # names not in the table, kept as raw strings
        self.dynamic_broker: dict = {}   # set with AlterConfigs on this broker's id
        self.dynamic_default: dict = {}  # set with AlterConfigs on the cluster default ("")
        self._values: dict = {}
        for name, raw in (static or {}).items():
            definition = BROKER_CONFIG.get(name)
            if definition is None:
                log.warning("The configuration '%s' was supplied but isn't a known config.", name)
                self.unknown[name] = raw
                continue
            self.static[name] = parse_value(definition, raw)
        self._check_listeners()
        self._refresh()
        self._check_values(self._values)
        for warning in deprecation_warnings(self.static, self.get("inter.broker.protocol.version")):
            log.warning(warning)

    @classmethod
    def from_file(cls, path, overrides=None) -> "BrokerConfig":
        """Read server.properties, then apply `overrides` ("k=v" strings or a dict)."""
        with open(path, "rb") as f:
            raw = f.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:        # Java's Properties.load reads ISO-8859-1
            text = raw.decode("latin-1")
        props = read_properties(text)
        props.update(parse_overrides(overrides))
        return cls(props)

    def _check_values(self, values: dict) -> None:
        """Kafka's KafkaConfig.validateValues checks between properties, on the effective
        values (static and dynamic layers merged); ConfigError names the first one broken."""
        def require(ok, name, reason):
            if not ok:
                raise ConfigError(name, format_value(values[name]), reason)

        broker_id = values["broker.id"]
        if values["zookeeper.connect"] and not values["broker.id.generation.enable"]:
            require(broker_id >= 0, "broker.id", "broker.id must be greater than or equal to 0")
        else:
            require(-1 <= broker_id <= values["reserved.broker.max.id"], "broker.id",
                    "broker.id must be greater than or equal to -1 and not greater than "
                    "reserved.broker.max.id")
        roll_ms = _first_set(values, ("log.roll.ms", 1), ("log.roll.hours", _HOUR))
        require(roll_ms >= 1, "log.roll.ms" if values["log.roll.ms"] is not None
                else "log.roll.hours", "log.roll.ms must be greater than or equal to 1")
        jitter_ms = _first_set(values, ("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", _HOUR))
        require(jitter_ms >= 0, "log.roll.jitter.ms" if values["log.roll.jitter.ms"] is not None
                else "log.roll.jitter.hours",
                "log.roll.jitter.ms must be greater than or equal to 0")
        retention = (("log.retention.ms", 1), ("log.retention.minutes", _MIN),
                     ("log.retention.hours", _HOUR))
        retention_ms = max(_first_set(values, *retention), -1)    # negative: unlimited
        require(retention_ms >= 1 or retention_ms == -1,
                next(name for name, _ in retention if values[name] is not None),
                "log.retention.ms must be unlimited (-1) or, greater than or equal to 1")
        threads = values["log.cleaner.threads"]
        size = values["log.cleaner.dedupe.buffer.size"]
        # Kafka divides by the thread count whether or not the cleaner is enabled (0 threads
        # stops its start with a division by zero: compaction would never run).
        require(threads >= 1, "log.cleaner.threads",
                "Log cleaner threads should be at least 1")
        require(size // threads > 1024 * 1024, "log.cleaner.dedupe.buffer.size",
                "log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner thread.")
        wait_ms = values["replica.fetch.wait.max.ms"]
        require(wait_ms <= values["replica.socket.timeout.ms"], "replica.socket.timeout.ms",
                "replica.socket.timeout.ms should always be at least replica.fetch.wait.max.ms "
                "to prevent unnecessary socket timeouts")
        require(wait_ms <= values["replica.lag.time.max.ms"], "replica.fetch.wait.max.ms",
                "replica.fetch.wait.max.ms should always be less than or equal to "
                "replica.lag.time.max.ms to prevent frequent changes in ISR")
        require(values["max.connections.per.ip"] != 0
                or values["max.connections.per.ip.overrides"], "max.connections.per.ip",
                "max.connections.per.ip can be set to zero only if "
                "max.connections.per.ip.overrides property is set.")
        problem = metadata_version.format_problem(values["log.message.format.version"],
                                                  values["inter.broker.protocol.version"])
        require(problem is None, "log.message.format.version", problem)

    def _check_listeners(self):
        for name in ("listeners", "advertised.listeners"):
            names = [Listener.parse(item).name for item in self.static.get(name) or []]
            if len(set(names)) != len(names):
                raise ConfigError(name, ",".join(self.static[name]),
                                  "Each listener must have a different name")
        advertised = self.static.get("advertised.listeners") or self.static.get("listeners") or []
        for item in advertised:
            if Listener.parse(item).host == "0.0.0.0":
                # Kafka refuses it too: clients elsewhere cannot connect to a wildcard address.
                raise ConfigError("advertised.listeners", ",".join(advertised),
                                  "advertised.listeners cannot use the nonroutable meta-address "
                                  f"in {item}; set advertised.listeners to a routable address "
                                  "(or leave the host empty to advertise this host's name)")
        listeners = [Listener.parse(item)
                     for item in self.static.get("listeners") or BROKER_CONFIG["listeners"].default]
        for listener in listeners:
            protocol = self.security_protocol_of(listener.name)
            if protocol is None:
                raise ConfigError("listener.security.protocol.map", self.static.get(
                    "listener.security.protocol.map", ""),
                    f"No security protocol defined for listener {listener.name}")
            if protocol != "PLAINTEXT":        # also a listener named PLAINTEXT mapped to SSL
                raise ConfigError("listeners", f"{listener.name}://{listener.host}:"
                                  f"{listener.port}",
                                  "only PLAINTEXT listeners are supported by this broker")
        by_port: dict = {}
        for listener in listeners:
            if listener.port != 0:
                by_port.setdefault(listener.port, []).append(_ip_version(listener.host))
        for versions in by_port.values():
            if len(versions) > 1 and (len(versions) != 2 or set(versions) != {4, 6}):
                raise ConfigError("listeners", ",".join(self.static.get("listeners") or []),
                                  "Each listener must have a different port unless exactly one "
                                  "listener has an IPv4 address and the other IPv6 address.")
        names = [listener.name for listener in listeners]
        advertised_names = [Listener.parse(item).name for item in advertised] or names
        if not set(advertised_names) <= set(names):
            raise ConfigError("advertised.listeners", ",".join(advertised),
                              "advertised.listeners listener names must be equal to or a subset "
                              "of the ones defined in listeners. Found "
                              f"{','.join(advertised_names)}. The valid options based on the "
                              f"current configuration are {','.join(names)}")
        if self.static.get("zookeeper.connect"):
            self._check_inter_broker_listener(advertised_names)

    def _check_inter_broker_listener(self, advertised_names: list) -> None:
        """Kafka's getInterBrokerListenerNameAndSecurityProtocol and its check that brokers
        can reach each other on an advertised listener (a cluster only)."""
        name = self.static.get("inter.broker.listener.name")
        if name is not None:
            if "security.inter.broker.protocol" in self.static:
                raise ConfigError("inter.broker.listener.name", name,
                                  "Only one of inter.broker.listener.name and "
                                  "security.inter.broker.protocol should be set.")
            name = name.upper()
            if self.security_protocol_of(name) is None:
                raise ConfigError("inter.broker.listener.name", name,
                                  f"Listener with name {name} defined in "
                                  "inter.broker.listener.name not found in "
                                  "listener.security.protocol.map.")
        else:
            name = self.static.get("security.inter.broker.protocol", "PLAINTEXT")
        if name not in advertised_names:
            raise ConfigError("inter.broker.listener.name", name,
                              "inter.broker.listener.name must be a listener name defined in "
                              "advertised.listeners. The valid options based on currently "
                              f"configured listeners are {','.join(advertised_names)}")

    def security_protocol_of(self, listener_name: str) -> str | None:
        """The protocol listener.security.protocol.map gives a listener name, or None."""
        mapping = self.static.get("listener.security.protocol.map",
                                  BROKER_CONFIG["listener.security.protocol.map"].default)
        for pair in mapping.split(","):
            key, _, protocol = pair.partition(":")
            if key.strip().upper() == listener_name:
                return protocol.strip().upper()
        return None

    def _refresh(self):
        self._values = self._merged(self.dynamic_default, cluster_default=True)

    # -- reading
    def get(self, name: str):
        """The effective typed value of a broker property (KeyError if unknown)."""
        try:
            return self._values[name]
        except KeyError:
            if name in self.unknown:
                return self.unknown[name]
            raise KeyError(f"unknown broker configuration {name!r}") from None

    def __getattr__(self, attr):
        name = _HOT.get(attr)
        if name is None:
            raise AttributeError(attr)
        return self._values[name]

    def values_text(self) -> str:
        """Kafka's AbstractConfig.logAll: "KafkaConfig values:" then every known config and
        its effective value, sorted, as Java prints them (lists in brackets, passwords
        hidden, null)."""
        lines = ["KafkaConfig values: "]
        for name in sorted(BROKER_CONFIG):
            value = self._values.get(name)
            if BROKER_CONFIG[name].type == "password" and value is not None:
                text = "[hidden]"
            elif value is None:
                text = "null"
            elif isinstance(value, list) and name in _STRING_IN_KAFKA:
                text = format_value(value)
            elif isinstance(value, list):
                text = "[" + ", ".join(format_value(v) for v in value) + "]"
            else:
                text = format_value(value)
            lines.append(f"\t{name} = {text}")
        return "\n".join(lines)

    def source_of(self, name: str) -> int:
        if name in self.dynamic_broker:
            return SOURCE_DYNAMIC_BROKER
        if name in self.dynamic_default:
            return SOURCE_DYNAMIC_DEFAULT_BROKER
        if name in self.static:
            return SOURCE_STATIC_BROKER
        return SOURCE_DEFAULT

    def synonyms_of(self, name: str, *, defaults: bool = True) -> list:
        """[(name, string value, source)] as DescribeConfigs reports them (Kafka's
        ConfigHelper.configSynonyms): the names of the config's synonym chain (log.retention.ms,
        .minutes, .hours; Kafka's DynamicBrokerConfig.brokerConfigSynonyms) set in each layer,
        by layer (dynamic broker, dynamic default, static, default), then from the first entry
        with the config's own name on."""
        names = BROKER_SYNONYM_CHAINS.get(name, (name,))
        out = []
        for layer, source in ((self.dynamic_broker, SOURCE_DYNAMIC_BROKER),
                              (self.dynamic_default, SOURCE_DYNAMIC_DEFAULT_BROKER),
                              (self.static, SOURCE_STATIC_BROKER)):
            out += [(n, format_value(layer[n]), source) for n in names if n in layer]
        if defaults:
            for n in names:
                definition = BROKER_CONFIG.get(n)
                if definition is not None and definition.default is not None:
                    out.append((n, format_value(definition.default), SOURCE_DEFAULT))
        while out and out[0][0] != name:
            out.pop(0)
        return out

    @property
    def broker_id(self) -> int:
        return self._values["broker.id"]

    @property
    def log_dirs(self) -> list:
        return list(self._values["log.dirs"] or [self._values["log.dir"]])

    @property
    def listeners(self) -> list:
        return [Listener.parse(item) for item in self._values["listeners"]]

    @property
    def advertised_listeners(self) -> list:
        items = self._values["advertised.listeners"]
        return [Listener.parse(item) for item in items] if items else self.listeners

    def max_connections_for(self, host: str) -> int:
        """A client address's limit: its entry in max.connections.per.ip.overrides (names and
        every spelling of an address match, as Kafka resolves each key), else the default."""
        raw = self._values["max.connections.per.ip.overrides"] or ""
        if raw != getattr(self, "_overrides_raw", None):
            self._overrides_by_ip = _resolve_overrides(raw)
            self._overrides_raw = raw
        found = self._overrides_by_ip.get(_normal_address(host))
        return self._values["max.connections.per.ip"] if found is None else found

    # -- dynamic changes
    @staticmethod
    def validate_dynamic(changes: dict) -> dict:
        """{name: raw str or None} -> {name: typed value or None}; ConfigError if not allowed."""
        typed = {}
        for name, raw in changes.items():
            definition = BROKER_CONFIG.get(name)
            if definition is None:
                raise ConfigError(name, raw, "Unknown broker configuration")
            if not definition.dynamic:
                raise ConfigError(name, raw, "Cannot update this configuration dynamically")
            typed[name] = None if raw is None else parse_value(definition, raw)
        return typed

    def check_dynamic(self, values: dict, cluster_default: bool = False) -> None:
        """Would replacing one dynamic layer with {name: raw string} be accepted? As Kafka's
        processReconfiguration: the checks between properties on the merged result, and the
        reconfigurable thread counts changed by at most half or double their current value
        (DynamicThreadPool, LogCleaner.validateReconfiguration). ConfigError if not."""
        merged = self._merged(self._typed_layer(values), cluster_default)
        self._check_values(merged)
        for name in _THREAD_COUNTS:
            old, new = self._values[name], merged[name]
            if new == old:
                continue
            if name == "log.cleaner.threads":
                if new < 1:
                    reason = "Log cleaner threads should be at least 1"
                elif new < old // 2:                     # integer halving, as Kafka
                    reason = ("Log cleaner threads cannot be reduced to less than half the "
                              f"current value {old}")
                elif new > old * 2:
                    reason = ("Log cleaner threads cannot be increased to more than double the "
                              f"current value {old}")
                else:
                    continue
            else:
                failed = f"Dynamic thread count update validation failed for {name}={new}"
                if new <= 0:
                    reason = f"{failed}, value should be at least 1"
                elif new < old // 2:
                    reason = f"{failed}, value should be at least half the current value {old}"
                elif new > old * 2:
                    reason = (f"{failed}, value should not be greater than double the current "
                              f"value {old}")
                else:
                    continue
            raise ConfigError(name, str(new), reason)

    def set_dynamic(self, values: dict, cluster_default: bool = False) -> None:
        """Replace one dynamic layer with {name: raw string} (already persisted by the caller).
        ConfigError, and nothing changed, when the merged result breaks a check between
        properties."""
        typed = self._typed_layer(values)
        self._check_values(self._merged(typed, cluster_default))
        if cluster_default:
            self.dynamic_default = typed
        else:
            self.dynamic_broker = typed
        self._refresh()

    def _typed_layer(self, values: dict) -> dict:
        return {k: v for k, v in self.validate_dynamic(values).items() if v is not None}

    def _merged(self, layer: dict, cluster_default: bool) -> dict:
        merged = {d.name: d.default for d in BROKER_CONFIGS}
        merged.update(self.static)
        merged.update(layer if cluster_default else self.dynamic_default)
        merged.update(self.dynamic_broker if cluster_default else layer)
        return merged

    # -- topics
    def topic_value(self, name: str, overrides: dict | None = None):
        """(typed value, source, synonyms) of a topic config given the topic's overrides."""
        definition = TOPIC_CONFIG[name]
        synonyms = []
        value = source = None
        if overrides and name in overrides:
            value = parse_value(definition, overrides[name])
            source = SOURCE_TOPIC
            synonyms.append((name, format_value(value), SOURCE_TOPIC))
        synonyms += self._topic_synonyms(definition)
        for broker_name, factor in definition.synonyms:
            broker_value = self._values.get(broker_name)
            if value is None and broker_value is not None:
                value = _scale(broker_value, factor)
                if name == "retention.ms" and value < 0:
                    value = -1                   # any negative broker retention: unlimited
        if value is None:
            value = definition.default
        if source is None:
            # Kafka reports the head of the synonym chain, or DEFAULT_CONFIG when it is empty
            # (even though the value came from a secondary synonym such as log.retention.hours)
            source = synonyms[0][2] if synonyms else SOURCE_DEFAULT
        return value, source, synonyms

    def _topic_synonyms(self, definition) -> list:
        """The broker synonyms of a topic config as Kafka's DescribeConfigs lists them: by
        source (dynamic broker, dynamic default, static, default), then by synonym priority,
        and starting at the first entry named like the primary synonym. So with only
        log.retention.hours in server.properties, retention.ms has no synonyms and source
        DEFAULT_CONFIG, and kafka-topics.sh --describe does not list it (Kafka's ConfigHelper
        trims the chain this way to drop listener-prefixed names)."""
        if not definition.synonyms:
            return []
        names = [broker_name for broker_name, _ in definition.synonyms]
        chain = []
        for layer, source in ((self.dynamic_broker, SOURCE_DYNAMIC_BROKER),
                              (self.dynamic_default, SOURCE_DYNAMIC_DEFAULT_BROKER),
                              (self.static, SOURCE_STATIC_BROKER)):
            chain += [(n, format_value(layer[n]), source) for n in names if n in layer]
        for n in names:
            known = BROKER_CONFIG.get(n)
            if known is not None and known.default is not None:
                chain.append((n, format_value(known.default), SOURCE_DEFAULT))
        primary = names[0]
        while chain and chain[0][0] != primary:
            chain.pop(0)
        return chain

    def topic_config(self, overrides: dict | None = None):
        """The storage LogConfig of a topic with these overrides ({topic property: raw str})."""
        from storage.log_config import LogConfig
        props = {}
        for definition in TOPIC_CONFIGS:
            value = self.topic_value(definition.name, overrides)[0]
            props[definition.name] = format_value(value)
        return LogConfig.from_properties(props)


def _scale(value, factor):
    if factor == 1 or not isinstance(value, int) or value < 0:
        return value
    return value * factor


def validate_topic_configs(configs: dict) -> dict:
    """{name: raw str} of a CreateTopics/AlterConfigs request -> typed; ConfigError if invalid."""
    typed = {}
    for name, raw in configs.items():
        definition = TOPIC_CONFIG.get(name)
        if definition is None:       # Kafka's LogConfig.validateNames
            raise ConfigError(name, raw, "Unknown topic config name",
                              f"Unknown topic config name: {name}")
        if raw is None:
            raise ConfigError(name, raw, "Null value not supported for topic configs",
                              f"Null value not supported for topic configs: {name}")
        typed[name] = parse_value(definition, raw)
    low, high = typed.get("min.compaction.lag.ms", 0), typed.get("max.compaction.lag.ms", LONG_MAX)
    if low > high:
        raise ConfigError("min.compaction.lag.ms", str(low),
                          f"conflict topic config setting min.compaction.lag.ms ({low}) > "
                          f"max.compaction.lag.ms ({high})")
    return typed


def parse_overrides(overrides) -> dict:
    if overrides is None:
        return {}
    if isinstance(overrides, dict):
        return dict(overrides)
    out = {}
    for item in overrides:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(item, item, "an override must look like name=value")
        out[name.strip()] = value.strip()
    return out


def markdown_table() -> str:
    """The README's configuration reference, generated from the tables above."""
    rows = ["| Property | Type | Default | Dynamic | Description |", "|---|---|---|---|---|"]
    for d in BROKER_CONFIGS:
        default = format_value(d.default)
        default = '""' if default == "" else default
        rows.append(f"| `{d.name}` | {d.type} | {'null' if default is None else f'`{default}`'} | "
                    f"{'yes' if d.dynamic else 'no'} | {d.doc} |")
    rows += ["", "| Topic property | Broker synonyms | Default | Description |",
             "|---|---|---|---|"]
    for d in TOPIC_CONFIGS:
        synonyms = ", ".join(f"`{name}`" for name, _ in d.synonyms)
        rows.append(f"| `{d.name}` | {synonyms} | `{format_value(d.default)}` | {d.doc} |")
    return "\n".join(rows)


if __name__ == "__main__":          # python -m broker.config > docs: the README's table
    print(markdown_table())
