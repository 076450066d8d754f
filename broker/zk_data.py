"""The znodes of a Kafka 3.9 ZooKeeper-mode cluster: paths and the JSON each one holds.

Pure functions, no I/O (broker/zookeeper.py does the ZooKeeper calls). Every encoder writes what
Kafka 3.9 writes (Kafka's ZkData.scala; ../shared/kafka-zk-mode.md section 1); every decoder
accepts what Kafka writes and raises `ZNodeDataError` naming the path for anything else (a
hand-edited znode), which callers log and skip.

Quirks kept on purpose, because Kafka's own readers and operators' scripts expect them:
- `/cluster/id` has `"version":"1"` as a string;
- `/controller` and `/brokers/ids/N` carry `"timestamp"` as a string of milliseconds;
- `/controller_epoch` is plain decimal text, not JSON;
- partition state JSON has `leader_recovery_state` only when it is RECOVERING (1).
"""
from __future__ import annotations

import dataclasses
import json

# -- paths -------------------------------------------------------------------------------------

CLUSTER_ID = "/cluster/id"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
BROKER_SEQID = "/brokers/seqid"
BROKER_TOPICS = "/brokers/topics"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"
FEATURE = "/feature"

# Created (empty, persistent) by every broker at start-up, as Kafka's createTopLevelPaths.
PERSISTENT_PATHS = (
    "/consumers", BROKER_IDS, BROKER_TOPICS, CONFIG_CHANGES, DELETE_TOPICS, BROKER_SEQID,
    ISR_CHANGE_NOTIFICATION, LATEST_PRODUCER_ID_BLOCK, LOG_DIR_EVENT_NOTIFICATION,
    "/config/topics", "/config/clients", "/config/users", "/config/brokers", "/config/ips",
)

DEFAULT_ENTITY = "<default>"


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def config_path(entity_type: str, name: str) -> str:
    """`entity_type`: topics, brokers, users, clients, ips (users/U/clients/C as the name)."""
    return f"/config/{entity_type}/{name}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


class ZNodeDataError(ValueError):
    """A znode holds something Kafka would not have written there."""

    def __init__(self, path: str, why: str):
        super().__init__(f"{path}: {why}")
        self.path = path


def _dumps(value) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _loads(path: str, data: bytes | None) -> dict:
    if data is None:
        raise ZNodeDataError(path, "no data")
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ZNodeDataError(path, f"not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ZNodeDataError(path, "not a JSON object")
    return value


def _int(path: str, value, what: str, bits: int = 32) -> int:
    """A JSON integer (or its text) that fits Kafka's type: an Int unless `bits` says Long, as
    Kafka's decoders take them (a bigger one would break the RPCs it is copied into)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ZNodeDataError(path, f"{what} is not an integer: {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise ZNodeDataError(path, f"{what} is not an integer: {value!r}") from None
    if not -(1 << (bits - 1)) <= number < 1 << (bits - 1):
        raise ZNodeDataError(path, f"{what} {number} does not fit a {bits}-bit integer")
    return number


def _int_list(path: str, value, what: str) -> list:
    if not isinstance(value, list):
        raise ZNodeDataError(path, f"{what} is not a list: {value!r}")
    return [_int(path, v, what) for v in value]


# -- /cluster/id -------------------------------------------------------------------------------

def encode_cluster_id(cluster_id: str) -> bytes:
    return _dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    value = _loads(CLUSTER_ID, data)
    cluster_id = value.get("id")
    if not isinstance(cluster_id, str) or not cluster_id:
        raise ZNodeDataError(CLUSTER_ID, f"no cluster id in {value!r}")
    return cluster_id


# -- /controller, /controller_epoch ------------------------------------------------------------

def encode_controller(broker_id: int, timestamp_ms: int) -> bytes:
    return _dumps({"version": 2, "brokerid": broker_id, "timestamp": str(timestamp_ms),
                   "kraftControllerEpoch": -1})


def decode_controller(data: bytes) -> int:
    value = _loads(CONTROLLER, data)
    return _int(CONTROLLER, value.get("brokerid"), "brokerid")


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes) -> int:
    try:
        epoch = int((data or b"").decode().strip())
    except (UnicodeDecodeError, ValueError):
        raise ZNodeDataError(CONTROLLER_EPOCH, f"not a number: {data!r}") from None
    if not 0 <= epoch < (1 << 31) - 1:          # the next controller must still fit an Int
        raise ZNodeDataError(CONTROLLER_EPOCH, f"epoch {epoch} out of range")
    return epoch


# -- /brokers/ids/N ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class EndPoint:
    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def uri(self) -> str:
        return f"{self.listener}://{self.host}:{self.port}"


@dataclasses.dataclass(frozen=True)
class BrokerInfo:
    id: int
    endpoints: tuple          # EndPoint, in the order the broker lists them
    rack: str | None = None

    def endpoint(self, listener: str) -> EndPoint | None:
        for ep in self.endpoints:
            if ep.listener == listener:
                return ep
        return None


# Kafka 3.9's supported feature ranges, as its brokers register them (BrokerFeatures).
SUPPORTED_FEATURES = {"metadata.version": {"min_version": 1, "max_version": 21},
                      "kraft.version": {"min_version": 0, "max_version": 1}}

_SECURITY_PROTOCOLS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


def security_protocol_id(name: str) -> int:
    return _SECURITY_PROTOCOLS.get(name, 0)


def encode_broker_info(info: BrokerInfo, timestamp_ms: int) -> bytes:
    """Version 5 (IBP >= 2.7-IV0): host/port are the first PLAINTEXT endpoint's, or null/-1."""
    plaintext = next((ep for ep in info.endpoints if ep.security_protocol == "PLAINTEXT"), None)
    value = {
        "features": SUPPORTED_FEATURES,
        "listener_security_protocol_map": {ep.listener: ep.security_protocol
                                           for ep in info.endpoints},
        "endpoints": [ep.uri for ep in info.endpoints],
        "jmx_port": -1,
        "port": plaintext.port if plaintext else -1,
        "host": plaintext.host if plaintext else None,
        "version": 5,
        "timestamp": str(timestamp_ms),
    }
    if info.rack is not None:
        value["rack"] = info.rack
    return _dumps(value)


def decode_broker_info(broker_id: int, data: bytes) -> BrokerInfo:
    path = broker_path(broker_id)
    value = _loads(path, data)
    endpoints = value.get("endpoints")
    protocols = value.get("listener_security_protocol_map") or {}
    if not isinstance(endpoints, list) or not isinstance(protocols, dict):
        raise ZNodeDataError(path, "no endpoints")
    out = []
    for uri in endpoints:
        if not isinstance(uri, str) or "://" not in uri:
            raise ZNodeDataError(path, f"bad endpoint {uri!r}")
        listener, _, address = uri.partition("://")
        host, sep, port = address.rpartition(":")
        if not sep:
            raise ZNodeDataError(path, f"bad endpoint {uri!r}")
        host = host.strip("[]")
        port = _int(path, port, "port")
        if not 0 <= port <= 65535:
            raise ZNodeDataError(path, f"bad port in {uri!r}")
        out.append(EndPoint(listener, host, port,
                            str(protocols.get(listener, listener))))
    rack = value.get("rack")
    return BrokerInfo(broker_id, tuple(out), rack if isinstance(rack, str) else None)


# -- /brokers/topics/T -------------------------------------------------------------------------

@dataclasses.dataclass
class TopicAssignment:
    partitions: dict                    # partition -> [broker ids], preferred leader first
    topic_id: str | None = None         # Kafka's base64 Uuid text
    adding: dict = dataclasses.field(default_factory=dict)
    removing: dict = dataclasses.field(default_factory=dict)
    # Partitions whose replica list Kafka would not have written (empty, duplicates, negative
    # ids): {partition: (the JSON value as found, why)}. They are left out of `partitions` so
    # the topic's other partitions are still managed, and written back as found.
    unreadable: dict = dataclasses.field(default_factory=dict)

    @property
    def partition_count(self) -> int:
        return len(self.partitions) + len(self.unreadable)


def encode_topic(assignment: TopicAssignment) -> bytes:
    partitions = {p: list(r) for p, r in assignment.partitions.items()}
    partitions.update((p, raw) for p, (raw, _) in assignment.unreadable.items())
    value = {"partitions": {str(p): r for p, r in sorted(partitions.items())}}
    if assignment.topic_id is not None:
        value["topic_id"] = assignment.topic_id
    value["adding_replicas"] = {str(p): list(r) for p, r in sorted(assignment.adding.items())}
    value["removing_replicas"] = {str(p): list(r)
                                  for p, r in sorted(assignment.removing.items())}
    value["version"] = 3
    return _dumps(value)


def decode_topic(topic: str, data: bytes) -> TopicAssignment:
    path = topic_path(topic)
    value = _loads(path, data)

    def by_partition(name):
        raw = value.get(name) or {}
        if not isinstance(raw, dict):
            raise ZNodeDataError(path, f"{name} is not an object")
        out = {}
        for p, replicas in raw.items():
            out[_int(path, p, "partition")] = _int_list(path, replicas, f"{name}[{p}]")
        return dict(sorted(out.items()))

    partitions = by_partition("partitions")
    if not partitions:
        raise ZNodeDataError(path, "no partitions")
    unreadable = {}
    for p, replicas in list(partitions.items()):
        if not replicas or len(set(replicas)) != len(replicas) or min(replicas) < 0:
            unreadable[p] = (replicas, f"bad replica list for partition {p}: {replicas}")
            del partitions[p]
    if not partitions:
        raise ZNodeDataError(path, "no partition with a valid replica list: "
                             + "; ".join(why for _, why in unreadable.values()))
    topic_id = value.get("topic_id")
    if topic_id is not None and not isinstance(topic_id, str):
        raise ZNodeDataError(path, f"topic_id is not a string: {topic_id!r}")
    return TopicAssignment(partitions, topic_id, by_partition("adding_replicas"),
                           by_partition("removing_replicas"), unreadable)


# -- /admin/reassign_partitions (the reassignment before KIP-455, still honoured) --------------

def encode_reassignment(partitions: dict) -> bytes:
    """{(topic, partition): [replicas]} -> Kafka's ReassignPartitionsZNode JSON."""
    return _dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r)}
        for (t, p), r in sorted(partitions.items())]})


def decode_reassignment(data: bytes) -> dict:
    path = REASSIGN_PARTITIONS
    value = _loads(path, data)
    entries = value.get("partitions")
    if not isinstance(entries, list):
        raise ZNodeDataError(path, "partitions is not a list")
    out = {}
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str):
            raise ZNodeDataError(path, f"bad entry {entry!r}")
        tp = (entry["topic"], _int(path, entry.get("partition"), "partition"))
        out[tp] = _int_list(path, entry.get("replicas"), f"replicas of {tp[0]}-{tp[1]}")
    return out


# -- /admin/preferred_replica_election (kafka-preferred-replica-election before 3.0) ------------

def encode_preferred_replica_election(partitions) -> bytes:
    return _dumps({"version": 1, "partitions": [{"topic": t, "partition": p}
                                                for t, p in sorted(partitions)]})


def decode_preferred_replica_election(data: bytes) -> set:
    return decode_partition_set(PREFERRED_REPLICA_ELECTION, data)


def decode_partition_set(path: str, data: bytes) -> set:
    """{"version":1,"partitions":[{"topic":T,"partition":P}, ...]} (the preferred election
    and ISR change notifications) -> {(T, P)}."""
    entries = _loads(path, data).get("partitions")
    if not isinstance(entries, list):
        raise ZNodeDataError(path, "partitions is not a list")
    out = set()
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("topic"), str):
            raise ZNodeDataError(path, f"bad entry {entry!r}")
        out.add((entry["topic"], _int(path, entry.get("partition"), "partition")))
    return out


# -- /log_dir_event_notification/log_dir_event_N ------------------------------------------------

LOG_DIR_EVENT_PREFIX = "log_dir_event_"
LOG_DIR_FAILURE_EVENT = 1


def encode_log_dir_event(broker_id: int) -> bytes:
    return _dumps({"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE_EVENT})


def decode_log_dir_event(path: str, data: bytes) -> int:
    """The broker id of a log dir event notification."""
    value = _loads(path, data)
    return _int(path, value.get("broker"), "broker")


# -- /brokers/topics/T/partitions/P/state ------------------------------------------------------

@dataclasses.dataclass
class LeaderAndIsr:
    leader: int
    leader_epoch: int
    isr: list
    controller_epoch: int
    recovering: bool = False
    partition_epoch: int = 0            # the state znode's zkVersion (not in the JSON)

    def new_leader(self, leader: int, isr: list, controller_epoch: int,
                   recovering: bool = False) -> "LeaderAndIsr":
        """A leadership decision: the leader epoch moves up by one."""
        return LeaderAndIsr(leader, next_leader_epoch(self.leader_epoch), list(isr),
                            controller_epoch, recovering, self.partition_epoch)


def next_leader_epoch(epoch: int) -> int:
    """epoch + 1 as a Java int: past 2147483647 (only a hand-edited state gets there) it wraps
    to -2147483648, as Kafka's LeaderAndIsr does, so the state still encodes (the brokers
    hosting the partition then ignore it as stale) instead of every controller request that
    names it failing to encode."""
    return (epoch + 1 + 2 ** 31) % 2 ** 32 - 2 ** 31


def encode_partition_state(state: LeaderAndIsr) -> bytes:
    value = {"controller_epoch": state.controller_epoch, "leader": state.leader, "version": 1,
             "leader_epoch": state.leader_epoch, "isr": list(state.isr)}
    if state.recovering:
        value["leader_recovery_state"] = 1
    return _dumps(value)


def decode_partition_state(topic: str, partition: int, data: bytes,
                           zk_version: int = 0) -> LeaderAndIsr:
    path = partition_state_path(topic, partition)
    value = _loads(path, data)
    return LeaderAndIsr(
        _int(path, value.get("leader"), "leader"),
        _int(path, value.get("leader_epoch"), "leader_epoch"),
        _int_list(path, value.get("isr"), "isr"),
        _int(path, value.get("controller_epoch"), "controller_epoch"),
        value.get("leader_recovery_state", 0) == 1,
        zk_version)


# -- /latest_producer_id_block ----------------------------------------------------------------

def encode_producer_id_block(broker_id: int, start: int, end: int) -> bytes:
    return _dumps({"version": 1, "broker": broker_id, "block_start": str(start),
                   "block_end": str(end)})


def decode_producer_id_block(data: bytes) -> tuple:
    """(first id, last id) of the newest block."""
    value = _loads(LATEST_PRODUCER_ID_BLOCK, data)
    return (_int(LATEST_PRODUCER_ID_BLOCK, value.get("block_start"), "block_start", 64),
            _int(LATEST_PRODUCER_ID_BLOCK, value.get("block_end"), "block_end", 64))


# -- /config/<type>/<name> and /config/changes -------------------------------------------------

def encode_config(configs: dict) -> bytes:
    return _dumps({"version": 1, "config": {str(k): str(v) for k, v in configs.items()}})


def decode_config(path: str, data: bytes | None) -> dict:
    if not data:
        return {}
    value = _loads(path, data)
    config = value.get("config", {})
    if not isinstance(config, dict):
        raise ZNodeDataError(path, "config is not an object")
    return {str(k): str(v) for k, v in config.items()}


def encode_config_change(entity_path: str) -> bytes:
    return _dumps({"version": 2, "entity_path": entity_path})


def decode_config_change(path: str, data: bytes) -> str:
    """The changed entity's path below /config (`topics/T`, `brokers/1`, `brokers/<default>`,
    `users/alice/clients/app`, ...). Version 1 notifications (entity_type/entity_name) too."""
    value = _loads(path, data)
    if value.get("version") == 1:
        entity_type, name = value.get("entity_type"), value.get("entity_name")
        if not isinstance(entity_type, str) or not isinstance(name, str):
            raise ZNodeDataError(path, f"bad version 1 notification {value!r}")
        return f"{entity_type}/{name}"
    entity_path = value.get("entity_path")
    if not isinstance(entity_path, str) or "/" not in entity_path:
        raise ZNodeDataError(path, f"bad notification {value!r}")
    return entity_path


def sequence_number(name: str) -> int:
    """The counter ZooKeeper appended to a sequential znode's name (-1 if none)."""
    digits = name[-10:]
    return int(digits) if len(name) >= 10 and digits.isdigit() else -1


# -- what a ZooKeeper client hands back (broker/zookeeper.py over kazoo; a fake in tests) ------

@dataclasses.dataclass(frozen=True)
class Stat:
    version: int                # data version (the partition epoch of a state znode)
    czxid: int                  # creation zxid (the broker epoch of /brokers/ids/N)
    ephemeral_owner: int = 0    # session id of an ephemeral znode's owner, else 0
    ctime: int = 0              # creation time, ms since the epoch


@dataclasses.dataclass(frozen=True)
class WatchEvent:
    type: str                   # CREATED, DELETED, CHANGED, CHILD
    path: str


class ZkError(Exception):
    """A ZooKeeper operation failed (the subclasses are the outcomes callers handle)."""


class NoNodeError(ZkError):
    pass


class NodeExistsError(ZkError):
    pass


class BadVersionError(ZkError):
    pass


class NotEmptyError(ZkError):
    pass


class SessionExpiredError(ZkError):
    pass


class ZkTimeoutError(ZkError):
    pass


# Operations of a multi (ZooKeeper's transaction: all or nothing).
@dataclasses.dataclass(frozen=True)
class CreateOp:
    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequence: bool = False


@dataclasses.dataclass(frozen=True)
class SetDataOp:
    path: str
    data: bytes
    version: int = -1


@dataclasses.dataclass(frozen=True)
class DeleteOp:
    path: str
    version: int = -1


@dataclasses.dataclass(frozen=True)
class CheckOp:
    path: str
    version: int
