"""kafka-reassign-partitions.sh: move partition replicas between brokers, as Kafka 3.9's
ReassignPartitionsCommand does over the Admin API (AlterPartitionReassignments /
ListPartitionReassignments at the controller, IncrementalAlterConfigs for the throttles).

    kafka-reassign-partitions.sh --bootstrap-server HOST:PORT [--command-config FILE]
        --generate --topics-to-move-json-file FILE --broker-list 1,2,3 [--disable-rack-aware]
      | --execute --reassignment-json-file FILE [--additional] [--throttle B/s]
                  [--replica-alter-log-dirs-throttle B/s] [--timeout MS]
      | --verify --reassignment-json-file FILE [--preserve-throttles]
      | --cancel --reassignment-json-file FILE [--preserve-throttles] [--timeout MS]
      | --list

Inputs: ``{"topics": [{"topic": "foo"}], "version": 1}`` (--generate) and
``{"version": 1, "partitions": [{"topic": "foo", "partition": 0, "replicas": [1, 2],
"log_dirs": ["any", "any"]}]}`` (the others; ``log_dirs`` optional). --generate prints the current
assignment and the proposal in that format, compact and sorted by topic and partition as Kafka's
Jackson output; placement is Kafka's (broker/controller/placement.py), rack aware unless
--disable-rack-aware, over the live brokers of --broker-list (unknown ids are left out, as Kafka
does; too few left is Kafka's replication factor error).

Throttles (--throttle): the topic config ``leader.replication.throttled.replicas`` lists
``partition:broker`` for every current replica (the sources), ``follower.replication.throttled.
replicas`` every new one, including reassignments already in progress; the rates
``leader/follower.replication.throttled.rate`` go on every broker involved. --verify (once nothing
is in progress anywhere) and --cancel clear every such throttle, on every live broker and every
broker of the plan, unless --preserve-throttles.

Log directories (``log_dirs`` other than "any"): --execute issues the moves with
AlterReplicaLogDirs to each replica's broker after the partition reassignment, retrying replicas
the broker does not host yet (REPLICA_NOT_AVAILABLE) every 100 ms until --timeout ms ("Timed out
before log directory move(s) could be started for: ..."); any other error is "Failed to alter dir
for <topic>-<partition>-<broker>". --replica-alter-log-dirs-throttle sets
``replica.alter.log.dirs.io.max.bytes.per.second`` on the brokers with a move (and with none,
only prints the message, as Kafka). --verify describes the replicas (DescribeLogDirs, as
Admin.describeReplicaLogDirs) and prints Kafka's line per replica (completed, still in progress,
moved elsewhere, not being moved, not found); throttles are cleared once no partition
reassignment and no log-directory move is in progress. --cancel moves every replica still being
moved back to its current log directory (which drops the future replica), as Kafka does.

Messages and exit status are Kafka's: its plain messages (usage errors, and TerseException: an
existing reassignment without --additional, the per-partition failures, one per line) print as they
are, every other error as "Error: <message>" on one line; on stderr (Kafka's tool uses stdout and
adds a stack trace), exit status 1. Two quirks of Kafka 3.9's Java tool are
kept on purpose: --cancel prints "None of the specified partition moves are active." without a
line break (so a following "Clearing ..." line joins it), and it only cancels reassignments that
remove a replica or add none (a pure addition, e.g. a replication factor increase, is reported as
not active); Kafka 3.4's Scala tool did neither. Sets and maps Kafka prints unsorted come out in
Java's HashSet order.
"""
from __future__ import annotations

import asyncio
import random
import re
import sys
import time
from dataclasses import dataclass

from protocol.errors import ErrorCode, KafkaError

from broker.client.admin import OP_DELETE, OP_SET, RESOURCE_BROKER, RESOURCE_TOPIC, Admin
from broker.client.cluster import ClusterClient
from broker.client.errors import ClientError
from broker.client.types import TopicPartition
from broker.config import java_int
from broker.controller.placement import (BrokerMetadata, ENFORCED_MIXED_RACKS_MESSAGE,
                                         assign_replicas_to_brokers)
from broker.tools.common import (ToolParser, client_kwargs, error_text, exception_class,
                                 main_entry, read_properties)
from broker.tools.javautil import (copy_capacity, java_hash_order, java_int_hash, java_string_hash,
                                   java_tp_hash, map_copy_capacity)
from broker.tools.kafka_json import (Failure, as_array, as_object, encode, field, parse_json,
                                     to_int, to_list, to_str)

HELP_TEXT = "This tool helps to move topic partitions between replicas."
ANY_LOG_DIR = "any"
ACTIONS = ("generate", "execute", "verify", "cancel", "list")
CLIENT_ID = "reassign-partitions-tool"

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LOG_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
BROKER_LEVEL_THROTTLES = (LEADER_RATE, FOLLOWER_RATE, LOG_DIRS_RATE)
TOPIC_LEVEL_THROTTLES = (LEADER_REPLICAS, FOLLOWER_REPLICAS)

CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to "
    "override this and create a new partition assignment in addition to the existing one. The "
    "--additional flag can also be used to change the throttle by resubmitting the current "
    "reassignment.")
YOU_MUST_RUN_VERIFY_PERIODICALLY_MESSAGE = (
    "Warning: You must run --verify periodically, until the reassignment completes, to ensure "
    "the throttle is removed.")

# The Java exceptions (and their default messages) of errors this tool can meet per partition.
EXCEPTIONS = {
    ErrorCode.UNKNOWN_SERVER_ERROR: ("UnknownServerException", "The server experienced an "
                                     "unexpected error when processing the request."),
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ("UnknownTopicOrPartitionException",
                                           "This server does not host this topic-partition."),
    ErrorCode.REQUEST_TIMED_OUT: ("TimeoutException", "The request timed out."),
    ErrorCode.BROKER_NOT_AVAILABLE: ("BrokerNotAvailableException", "The broker is not available."),
    ErrorCode.INVALID_TOPIC_EXCEPTION: ("InvalidTopicException", "The request attempted to "
                                        "perform an operation on an invalid topic."),
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: ("TopicAuthorizationException",
                                           "Topic authorization failed."),
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: ("ClusterAuthorizationException",
                                             "Cluster authorization failed."),
    ErrorCode.INVALID_REPLICA_ASSIGNMENT: ("InvalidReplicaAssignmentException",
                                           "Replica assignment is invalid."),
    ErrorCode.INVALID_CONFIG: ("InvalidConfigurationException", "Configuration is invalid."),
    ErrorCode.NOT_CONTROLLER: ("NotControllerException",
                               "This is not the correct controller for this cluster."),
    ErrorCode.INVALID_REQUEST: ("InvalidRequestException", "This most likely occurs because of a "
                                "request being malformed by the client library or the message "
                                "was sent to an incompatible broker. See the broker logs for "
                                "more details."),
    ErrorCode.REASSIGNMENT_IN_PROGRESS: ("ReassignmentInProgressException",
                                         "A partition reassignment is in progress."),
    ErrorCode.NO_REASSIGNMENT_IN_PROGRESS: ("NoReassignmentInProgressException",
                                            "No partition reassignment is in progress."),
}


class Terse(Exception):
    """Kafka's TerseException (and its usage errors): the message is printed as it is."""


def kafka_message(code, message) -> str:
    """What getMessage() of the exception for `code` says (the response's text, else the
    error's default)."""
    if message is not None:
        return message
    return EXCEPTIONS[code][1] if code in EXCEPTIONS else error_text(code)


def kafka_exception(code, message) -> str:
    """``<exception class>: <message>``: how a failed admin future's ExecutionException reads."""
    name = ("org.apache.kafka.common.errors." + EXCEPTIONS[code][0]) if code in EXCEPTIONS \
        else exception_class(code)
    return f"{name}: {kafka_message(code, message)}"


# --- Java's orders (broker/tools/javautil.py) -----------------------------------------------------

def duplicates(items) -> list:
    """ToolsUtils.duplicates: each element seen more than once, in insertion order of the set."""
    seen, dups = set(), []
    for item in items:
        if item in seen:
            dups.append(item)
        seen.add(item)
    return list(dict.fromkeys(dups))


def java_list(items) -> str:
    """java.util.List/Set toString: ``[1, 2]``."""
    return "[" + ", ".join(map(str, items)) + "]"


def sorted_tps(tps) -> list:
    return sorted(tps, key=lambda tp: (tp.topic, tp.partition))


def parse_topics_data(text: str) -> list:
    """The topics of a --topics-to-move-json-file document."""
    try:
        doc = parse_json(text)
    except Failure:
        raise Failure("The input string is not a valid JSON") from None
    obj = as_object(doc)
    version = to_int(obj["version"]) if "version" in obj else 1
    if version != 1:
        raise Failure(f"Not supported version field value {version}")
    topics = []
    if "topics" in obj:
        for entry in as_array(obj["topics"]):
            topics.append(to_str(field(as_object(entry), "topic")))
    return topics


def parse_reassignment_data(text: str):
    """A reassignment document -> ([(TopicPartition, replicas)] in file order, duplicates kept;
    {(TopicPartition, broker): log dir} for log dirs other than "any")."""
    obj = as_object(parse_json(text))
    version = to_int(obj["version"]) if "version" in obj else 1
    if version != 1:
        raise Failure(f"Not supported version field value {version}")
    parts, log_dirs = [], {}
    if "partitions" in obj:
        for entry in as_array(obj["partitions"]):
            fields = as_object(entry)
            topic = to_str(field(fields, "topic"))
            partition = to_int(field(fields, "partition"))
            replicas = to_list(field(fields, "replicas"), to_int)
            dirs = to_list(fields["log_dirs"], to_str) if "log_dirs" in fields \
                else [ANY_LOG_DIR] * len(replicas)
            tp = TopicPartition(topic, partition)
            if len(replicas) != len(dirs):
                raise Failure(f"Size of replicas list {java_list(replicas)} is different from "
                              f"size of log dirs list {java_list(dirs)} for partition {tp}")
            parts.append((tp, replicas))
            for replica, log_dir in zip(replicas, dirs):
                if log_dir != ANY_LOG_DIR:
                    log_dirs[(tp, replica)] = log_dir
    return parts, log_dirs


def parse_execute_data(text: str):
    """parseExecuteAssignmentArgs: the partitions to move ({tp: replicas}) and the log dirs."""
    parts, log_dirs = parse_reassignment_data(text)
    if not parts:
        raise Failure("Partition reassignment list cannot be empty")
    if any(not replicas for _, replicas in parts):
        raise Failure("Partition replica list cannot be empty")
    dup_parts = duplicates(tp for tp, _ in parts)
    if dup_parts:
        raise Failure("Partition reassignment contains duplicate topic partitions: "
                      + ",".join(map(str, java_hash_order(dup_parts, java_tp_hash))))
    dup_replicas = [(tp, duplicates(replicas)) for tp, replicas in parts if duplicates(replicas)]
    if dup_replicas:
        text = ". ".join(f"{tp} contains multiple entries for "
                         + ",".join(map(str, java_hash_order(d, java_int_hash)))
                         for tp, d in dup_replicas)
        raise Failure(f"Partition replica lists may not contain duplicate entries: {text}")
    return dict(parts), log_dirs


def parse_broker_list(text: str) -> list:
    """--broker-list as Java's split(",") and Integer.parseInt read it."""
    items = text.split(",")
    if len(items) > 1:                  # Java's String.split drops trailing empty strings
        while items and items[-1] == "":
            items.pop()
    out = []
    for item in items:
        broker_id = java_int(item)
        if broker_id is None:
            raise Failure(f"For input string: \"{item}\"")
        out.append(broker_id)
    return out


def parse_generate_args(topics_json: str, broker_list: str):
    brokers = parse_broker_list(broker_list)
    dup = duplicates(brokers)
    if dup:
        raise Failure("Broker list contains duplicate entries: "
                      + java_list(java_hash_order(dup, java_int_hash)))
    topics = parse_topics_data(topics_json)
    dup = duplicates(topics)
    if dup:
        raise Failure("List of topics to reassign contains duplicate entries: "
                      + java_list(java_hash_order(dup, java_string_hash)))
    return brokers, topics


def format_reassignment_json(assignment: dict, log_dirs: dict | None = None) -> str:
    """formatAsReassignmentJson: {"version":1,"partitions":[...]} sorted by topic, partition."""
    log_dirs = log_dirs or {}
    partitions = [{"topic": tp.topic, "partition": tp.partition, "replicas": list(replicas),
                   "log_dirs": [log_dirs.get((tp, r), ANY_LOG_DIR) for r in replicas]}
                  for tp, replicas in ((tp, assignment[tp]) for tp in sorted_tps(assignment))]
    return encode({"version": 1, "partitions": partitions})


def current_assignment_text(proposed: dict, current: dict) -> str:
    shown = {tp: r for tp, r in current.items() if tp in proposed}
    return ("Current partition replica assignment\n\n"
            f"{format_reassignment_json(shown)}\n\n"
            "Save this to use as the --reassignment-json-file option during rollback")


# --- --generate ----------------------------------------------------------------------------------

def broker_metadata(nodes: list, brokers: list, rack_aware: bool) -> list:
    """getBrokerMetadata: the live brokers (in cluster order) that --broker-list names."""
    wanted = set(brokers)
    result = [BrokerMetadata(node_id, rack if rack_aware else None)
              for node_id, rack in nodes if node_id in wanted]
    rackless = sum(1 for b in result if b.rack is None)
    if rack_aware and rackless and rackless != len(result):
        raise Failure(ENFORCED_MIXED_RACKS_MESSAGE)
    return result


def calculate_assignment(current: dict, brokers: list, rng=random) -> dict:
    """calculateAssignment: each topic placed afresh over `brokers` with Kafka's placement, its
    partition count and the replication factor of its first partition in Java's map order."""
    grouped: dict = {}
    for tp in java_hash_order(current, java_tp_hash):
        grouped.setdefault(tp.topic, []).append(tp)
    proposed = {}
    for topic in java_hash_order(grouped, java_string_hash):
        tps = grouped[topic]
        try:
            placed = assign_replicas_to_brokers(brokers, len(tps), len(current[tps[0]]), rng=rng)
        except KafkaError as e:
            raise Failure(e.message) from None
        for partition, replicas in placed.items():
            proposed[TopicPartition(topic, partition)] = replicas
    return proposed


def generate_text(current: dict, proposed: dict) -> str:
    return (f"Current partition replica assignment\n{format_reassignment_json(current)}\n\n"
            f"Proposed partition reassignment configuration\n"
            f"{format_reassignment_json(proposed)}\n")


# --- throttles -----------------------------------------------------------------------------------

def current_move_map(reassignments: dict) -> dict:
    """{topic: {partition: (sources, destinations)}} of the reassignments in progress."""
    moves: dict = {}
    for tp, (replicas, adding, _removing) in reassignments.items():
        moves.setdefault(tp.topic, {})[tp.partition] = (set(replicas) - set(adding), set(adding))
    return moves


def proposed_move_map(reassignments: dict, proposed: dict, current: dict) -> dict:
    """calculateProposedMoveMap: the moves in progress plus the proposed ones, whose sources are
    those of the move in progress if any, else the current replicas."""
    moves = current_move_map(reassignments)
    for tp, replicas in proposed.items():
        part_moves = moves.setdefault(tp.topic, {})
        if tp.partition in part_moves:
            sources = set(part_moves[tp.partition][0])
        elif tp in current:
            sources = set(current[tp])
        else:
            raise Failure(f"Trying to reassign a topic partition {tp} with 0 replicas")
        part_moves[tp.partition] = (sources, set(replicas) - sources)
    return moves


def leader_throttles(moves: dict) -> dict:
    """{topic: "partition:source,..."} (a TreeSet of strings: lexical order)."""
    return {topic: ",".join(sorted({f"{p}:{s}" for p, (sources, _) in parts.items()
                                    for s in sources}))
            for topic, parts in moves.items()}


def follower_throttles(moves: dict) -> dict:
    return {topic: ",".join(sorted({f"{p}:{d}" for p, (sources, dests) in parts.items()
                                    for d in dests if d not in sources}))
            for topic, parts in moves.items()}


def reassigning_brokers(moves: dict) -> list:
    return sorted({b for parts in moves.values() for sources, dests in parts.values()
                   for b in sources | dests})


# --- log-directory moves ------------------------------------------------------------------------
# A replica is (TopicPartition, broker id), Kafka's TopicPartitionReplica.

@dataclass(frozen=True)
class ActiveMoveState:
    """A future replica exists (in future_log_dir) next to the current one."""
    current_log_dir: str
    target_log_dir: str
    future_log_dir: str
    done = False


@dataclass(frozen=True)
class CompletedMoveState:
    target_log_dir: str
    done = True


@dataclass(frozen=True)
class CancelledMoveState:
    """No move in progress, and the replica is not in the target dir."""
    current_log_dir: str
    target_log_dir: str
    done = True


@dataclass(frozen=True)
class MissingLogDirMoveState:
    """The broker reported no log dir holding the replica."""
    target_log_dir: str
    done = False


@dataclass(frozen=True)
class MissingReplicaMoveState:
    """No answer for the replica at all (Kafka's admin client always gives one)."""
    target_log_dir: str
    done = False


def replica_name(replica) -> str:
    """TopicPartitionReplica.toString: ``topic-partition-broker``."""
    tp, broker = replica
    return f"{tp.topic}-{tp.partition}-{broker}"


def replica_order(replica):
    """compareTopicPartitionReplicas: broker, then topic, then partition."""
    tp, broker = replica
    return broker, tp.topic, tp.partition


def java_replica_hash(replica) -> int:
    """TopicPartitionReplica.hashCode."""
    tp, broker = replica
    return (31 * (31 * (31 + java_string_hash(tp.topic)) + tp.partition) + broker) & 0xFFFFFFFF


def moving_brokers(log_dirs: dict) -> list:
    """calculateMovingBrokers: the brokers with a replica to move."""
    return sorted({broker for _tp, broker in log_dirs})


def exception_name(code) -> str:
    """The Java class name of the exception for `code`."""
    return kafka_exception(code, "").rsplit(":", 1)[0]


def replica_log_dirs(broker: int, partitions, results) -> dict:
    """Admin.describeReplicaLogDirs on one broker: {tp: (current dir, future dir)} (None for
    none) of the `partitions` asked for, from its DescribeLogDirs results. An offline dir
    (KAFKA_STORAGE_ERROR) is skipped; another error fails the call, as Kafka's client does."""
    infos = {tp: (None, None) for tp in partitions}
    for result in results:
        if result.error_code == ErrorCode.KAFKA_STORAGE_ERROR:
            continue
        if result.error_code:
            raise Failure(f"java.lang.IllegalStateException: The error "
                          f"{exception_name(result.error_code)} for log directory "
                          f"{result.log_dir} in the response from broker {broker} is illegal")
        for topic in result.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition_index)
                if tp not in infos:
                    continue
                current, future = infos[tp]
                infos[tp] = (current, result.log_dir) if p.is_future_key \
                    else (result.log_dir, future)
    return infos


def log_dir_move_states(targets: dict, infos: dict) -> dict:
    """findLogDirMoveStates: {replica: target dir} and {replica: (current, future)} ->
    {replica: state}."""
    states = {}
    for replica, target in targets.items():
        if replica not in infos:
            states[replica] = MissingReplicaMoveState(target)
            continue
        current, future = infos[replica]
        if current is None:
            states[replica] = MissingLogDirMoveState(target)
        elif future is None:
            states[replica] = CompletedMoveState(target) if current == target \
                else CancelledMoveState(current, target)
        else:
            states[replica] = ActiveMoveState(current, target, future)
    return states


def replica_move_states_text(states: dict) -> str:
    """replicaMoveStatesToString (empty without log-directory moves)."""
    lines = []
    for replica in sorted(states, key=replica_order):
        state = states[replica]
        tp, broker = replica
        if isinstance(state, MissingLogDirMoveState):
            lines.append(f"Partition {tp} is not found in any live log dir on broker {broker}. "
                         "There is likely an offline log directory on the broker.")
        elif isinstance(state, MissingReplicaMoveState):
            lines.append(f"Partition {tp} cannot be found in any live log directory on broker "
                         f"{broker}.")
        elif isinstance(state, ActiveMoveState):
            if state.target_log_dir == state.future_log_dir:
                lines.append(f"Reassignment of replica {replica_name(replica)} is still in "
                             "progress.")
            else:
                lines.append(f"Partition {tp} on broker {broker} is being moved to log dir "
                             f"{state.future_log_dir} instead of {state.target_log_dir}.")
        elif isinstance(state, CancelledMoveState):
            lines.append(f"Partition {tp} on broker {broker} is not being moved from log dir "
                         f"{state.current_log_dir} to {state.target_log_dir}.")
        elif isinstance(state, CompletedMoveState):
            lines.append(f"Reassignment of replica {replica_name(replica)} completed "
                         "successfully.")
    return "\n".join(lines)


def started_moves(results: dict) -> list:
    """alterReplicaLogDirs: the replicas whose move started (error NONE), in Kafka's order of
    the results (a Java HashMap); REPLICA_NOT_AVAILABLE is left for a retry; any other error
    (None: the broker's call failed) ends it all with "Failed to alter dir for ..."."""
    started = []
    for replica in java_hash_order(sorted(results, key=replica_order), java_replica_hash,
                                   map_copy_capacity(len(results))):
        code = results[replica]
        if code == ErrorCode.NONE:
            started.append(replica)
        elif code != ErrorCode.REPLICA_NOT_AVAILABLE:
            raise Failure(f"Failed to alter dir for {replica_name(replica)}")
    return started


def started_moves_text(started, moves: dict) -> str:
    """executeMoves' lines for the moves just started (with Kafka's space before the newline)."""
    return "".join(f"Successfully started moving log directory to {moves[replica]} for replica "
                   f"{replica[0]} with broker {replica[1]} \n"
                   for replica in sorted(started, key=replica_order))


def moves_timed_out_text(pending) -> str:
    return (f"Timed out before log directory move{'' if len(pending) == 1 else 's'} could be "
            f"started for: {','.join(replica_name(r) for r in sorted(pending, key=replica_order))}")


# --- the admin calls -----------------------------------------------------------------------------

class Tool:
    def __init__(self, cluster: ClusterClient):
        self.cluster = cluster
        self.admin = Admin(cluster)

    async def _call(self, coro):
        """An admin call; a Kafka error reads as Kafka's ExecutionException does."""
        try:
            return await coro
        except KafkaError as e:
            message = None if e.message in (None, "", e.error_code.name) else e.message
            raise Failure(kafka_exception(e.error_code, message)) from None

    async def nodes(self) -> list:
        """describeCluster().nodes(): [(id, rack)] of the live brokers, in the cluster's order."""
        await self.cluster.retry(lambda: self.cluster.refresh_metadata([]))
        return [(b.node_id, b.rack) for b in self.cluster.brokers.values()]

    async def describe_topics(self, topics) -> tuple[dict, list]:
        """{topic: [replicas per partition, by partition id]} of the topics that exist, and the
        unknown ones."""
        topics = list(dict.fromkeys(topics))
        if not topics:
            return {}, []

        async def op():
            response = await self.cluster.refresh_metadata(topics)
            found, unknown = {}, []
            for t in response.topics:
                if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    unknown.append(t.name)
                elif t.error_code:
                    raise KafkaError(ErrorCode(t.error_code), None)
                else:
                    found[t.name] = [list(p.replica_nodes)
                                     for p in sorted(t.partitions, key=lambda p: p.partition_index)]
            return found, unknown
        return await self._call(self.cluster.retry(op))

    async def assignment_for_topics(self, topics: list) -> dict:
        """getReplicaAssignmentForTopics; an unknown topic fails the whole call."""
        found, unknown = await self.describe_topics(topics)
        if unknown:
            first = java_hash_order(topics, java_string_hash)
            missing = next(t for t in first if t in unknown)
            raise Failure("org.apache.kafka.common.errors.UnknownTopicOrPartitionException: "
                          f"Topic {missing} not found.")
        return {TopicPartition(t, p): replicas for t, parts in found.items()
                for p, replicas in enumerate(parts)}

    async def assignment_for_partitions(self, partitions) -> dict:
        """getReplicaAssignmentForPartitions; unknown topics or partitions fail the call."""
        partitions = list(partitions)
        current = await self.assignment_for_topics([tp.topic for tp in partitions])
        result = {tp: current[tp] for tp in partitions if tp in current}
        missing = [tp for tp in java_hash_order(partitions, java_tp_hash,
                                                copy_capacity(len(partitions)))
                   if tp not in result]
        if missing:
            raise Failure("org.apache.kafka.common.errors.UnknownTopicOrPartitionException: "
                          "Unable to find partition: " + ", ".join(map(str, missing)))
        return result

    async def list_reassignments(self, partitions=None) -> dict:
        return await self._call(self.admin.list_partition_reassignments(partitions))

    async def alter_reassignments(self, targets: dict) -> dict:
        results = await self._call(self.admin.alter_partition_reassignments(targets))
        return {tp: kafka_message(code, message) for tp, (code, message) in results.items()
                if code != ErrorCode.NONE}

    async def alter_configs(self, resource_type: int, name: str, ops: list) -> None:
        await self._call(self.admin.incremental_alter_configs(resource_type, name, ops))

    async def describe_replica_log_dirs(self, replicas) -> dict:
        """Admin.describeReplicaLogDirs: {replica: (current dir, future dir)} of every replica
        asked for, with DescribeLogDirs to each replica's broker."""
        by_broker: dict = {}
        for tp, broker in replicas:
            by_broker.setdefault(broker, {}).setdefault(tp.topic, [])
            if tp.partition not in by_broker[broker][tp.topic]:
                by_broker[broker][tp.topic].append(tp.partition)

        async def one(broker, topics):
            try:
                found = await self.admin.describe_log_dirs([broker], topics)
                results = found[broker]
            except KafkaError:              # a response-level error: no log dir in it (Kafka)
                results = []
            tps = [TopicPartition(t, p) for t, ps in topics.items() for p in ps]
            return {(tp, broker): info
                    for tp, info in replica_log_dirs(broker, tps, results).items()}
        infos: dict = {}
        for part in await asyncio.gather(*(one(b, t) for b, t in by_broker.items())):
            infos.update(part)
        return infos

    async def alter_replica_log_dirs(self, moves: dict) -> dict:
        """Admin.alterReplicaLogDirs: {replica: dir} -> {replica: error code}, with None for the
        replicas of a broker whose call failed or that its response left out."""
        by_broker: dict = {}
        for (tp, broker), log_dir in moves.items():
            by_broker.setdefault(broker, {})[tp] = log_dir

        async def one(broker, tps):
            try:
                codes = await self.admin.alter_replica_log_dirs(broker, tps)
            except (KafkaError, ClientError):
                codes = {}
            return {(tp, broker): codes.get(tp) for tp in tps}
        results: dict = {}
        for part in await asyncio.gather(*(one(b, t) for b, t in by_broker.items())):
            results.update(part)
        return results

    async def clear_all_throttles(self, target_parts: list) -> None:
        """clearAllThrottles: every broker-level throttle on every live broker and every broker
        of the plan, every topic-level one on the plan's topics."""
        node_ids = [node_id for node_id, _ in await self.nodes()]
        brokers = java_hash_order(node_ids + [b for _, replicas in target_parts for b in replicas],
                                  java_int_hash)
        print(f"Clearing broker-level throttles on broker{'' if len(brokers) == 1 else 's'} "
              f"{','.join(map(str, brokers))}")
        for broker in brokers:
            await self.alter_configs(RESOURCE_BROKER, str(broker),
                                     [(name, OP_DELETE, None) for name in BROKER_LEVEL_THROTTLES])
        topics = java_hash_order([tp.topic for tp, _ in target_parts], java_string_hash)
        print(f"Clearing topic-level throttles on topic{'' if len(topics) == 1 else 's'} "
              f"{','.join(topics)}")
        for topic in topics:
            await self.alter_configs(RESOURCE_TOPIC, topic,
                                     [(name, OP_DELETE, None) for name in TOPIC_LEVEL_THROTTLES])


# --- the actions ---------------------------------------------------------------------------------

async def generate(tool: Tool, brokers: list, topics: list, rack_aware: bool) -> None:
    current = await tool.assignment_for_topics(topics)
    metadata = broker_metadata(await tool.nodes(), brokers, rack_aware)
    proposed = calculate_assignment(current, metadata)
    sys.stdout.write(generate_text(current, proposed))


async def execute(tool: Tool, proposed: dict, additional: bool, throttle: int,
                  log_dir_throttle: int, log_dirs: dict | None = None,
                  timeout_ms: int = 10000) -> None:
    log_dirs = log_dirs or {}
    reassignments = await tool.list_reassignments()
    if not additional and reassignments:
        raise Terse(CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE)
    live = {node_id for node_id, _ in await tool.nodes()}
    by_map_order = java_hash_order(proposed, java_tp_hash)
    brokers = java_hash_order([b for tp in by_map_order for b in proposed[tp]], java_int_hash)
    unknown = next((b for b in brokers if b not in live), None)
    if unknown is not None:
        raise Failure(f"Unknown broker id {unknown}")
    current = await tool.assignment_for_partitions(proposed)
    print(current_assignment_text(proposed, current))
    if throttle >= 0 or log_dir_throttle >= 0:
        print(YOU_MUST_RUN_VERIFY_PERIODICALLY_MESSAGE)
        if throttle >= 0:
            moves = proposed_move_map(reassignments, proposed, current)
            leaders, followers = leader_throttles(moves), follower_throttles(moves)
            for topic in moves:
                await tool.alter_configs(RESOURCE_TOPIC, topic, [
                    (LEADER_REPLICAS, OP_SET, leaders[topic]),
                    (FOLLOWER_REPLICAS, OP_SET, followers[topic])])
            for broker in reassigning_brokers(moves):
                await tool.alter_configs(RESOURCE_BROKER, str(broker), [
                    (LEADER_RATE, OP_SET, str(throttle)), (FOLLOWER_RATE, OP_SET, str(throttle))])
            print(f"The inter-broker throttle limit was set to {throttle} B/s")
        if log_dir_throttle >= 0:
            for broker in moving_brokers(log_dirs):
                await tool.alter_configs(RESOURCE_BROKER, str(broker), [
                    (LOG_DIRS_RATE, OP_SET, str(log_dir_throttle))])
            print(f"The replica-alter-dir throttle limit was set to {log_dir_throttle} B/s")
    errors = await tool.alter_reassignments(proposed)
    if errors:
        raise Terse("Error reassigning partition(s):\n" + "\n".join(
            f"{tp}: {errors[tp]}" for tp in sorted_tps(errors)))
    print(f"Successfully started partition reassignment{'' if len(proposed) == 1 else 's'} for "
          + ",".join(map(str, sorted_tps(proposed))))
    if log_dirs:
        await execute_moves(tool, log_dirs, timeout_ms)


async def execute_moves(tool: Tool, moves: dict, timeout_ms: int, *, clock=time.monotonic,
                        sleep=asyncio.sleep) -> None:
    """executeMoves: AlterReplicaLogDirs for the pending replicas until every move started,
    retrying every 100 ms until `timeout_ms` (a replica not on its new broker yet cannot start
    moving)."""
    start = clock()
    pending = dict(moves)
    while True:
        started = started_moves(await tool.alter_replica_log_dirs(pending))
        sys.stdout.write(started_moves_text(started, pending))
        for replica in started:
            del pending[replica]
        if not pending:
            return
        if (clock() - start) * 1000 >= timeout_ms:
            raise Terse(moves_timed_out_text(pending))
        await sleep(0.1)


async def find_move_states(tool: Tool, targets: dict) -> dict:
    """findLogDirMoveStates: {replica: target dir} -> {replica: state}."""
    if not targets:
        return {}
    return log_dir_move_states(targets, await tool.describe_replica_log_dirs(targets))


def states_text(states: dict) -> str:
    """partitionReassignmentStatesToString; states: {tp: (current, target, done)}."""
    lines = ["Status of partition reassignment:"]
    for tp in sorted_tps(states):
        current, target, done = states[tp]
        if not done:
            lines.append(f"Reassignment of partition {tp} is still in progress.")
        elif list(current) == list(target):
            lines.append(f"Reassignment of partition {tp} is completed.")
        else:
            lines.append(f"There is no active reassignment of partition {tp}, but replica set is "
                         f"{','.join(map(str, current))} rather than "
                         f"{','.join(map(str, target))}.")
    return "\n".join(lines)


async def find_states(tool: Tool, targets: list) -> tuple[dict, bool]:
    """findPartitionReassignmentStates -> ({tp: (current, target, done)}, any in progress)."""
    reassignments = await tool.list_reassignments()
    states = {}
    not_found = [(tp, r) for tp, r in targets if tp not in reassignments]
    for tp, target in targets:
        if tp in reassignments:
            states[tp] = (reassignments[tp][0], target, False)
    found, _unknown = await tool.describe_topics([tp.topic for tp, _ in not_found])
    for tp, target in not_found:
        parts = found.get(tp.topic)
        if parts is None or len(parts) < tp.partition:
            states[tp] = ([], target, True)
        elif not 0 <= tp.partition < len(parts):
            # Kafka's List.get(partition) fails there ("size < partition" lets size through).
            raise Failure(f"Index {tp.partition} out of bounds for length {len(parts)}")
        else:
            states[tp] = (parts[tp.partition], target, True)
    return states, bool(reassignments)


async def verify(tool: Tool, targets: list, preserve_throttles: bool,
                 log_dirs: dict | None = None) -> None:
    states, ongoing = await find_states(tool, targets)
    print(states_text(states))
    move_states = await find_move_states(tool, log_dirs or {})
    print(replica_move_states_text(move_states))
    moves_ongoing = not all(state.done for state in move_states.values())
    if not ongoing and not moves_ongoing and not preserve_throttles:
        await tool.clear_all_throttles(targets)


async def cancel(tool: Tool, targets: list, preserve_throttles: bool,
                 log_dirs: dict | None = None, timeout_ms: int = 10000) -> None:
    listed = await tool.list_reassignments(list(dict.fromkeys(tp for tp, _ in targets)))
    # Kafka 3.9's condition, as it is (3.4's Scala tool tested "adding non-empty").
    active = [tp for tp, (_replicas, adding, removing) in listed.items()
              if not adding or removing]
    if active:
        errors = await tool.alter_reassignments({tp: None for tp in active})
        if errors:
            raise Terse(f"Error cancelling partition reassignment{'' if len(errors) == 1 else 's'}"
                        " for:\n" + "\n".join(f"{tp}: {errors[tp]}" for tp in sorted_tps(errors)))
        print(f"Successfully cancelled partition reassignment{'' if len(active) == 1 else 's'} "
              f"for: {','.join(map(str, sorted_tps(active)))}")
    else:
        print("None of the specified partition reassignments are active.")
    # Kafka stops a move by moving the replica to the dir it is in: the future replica goes.
    moving = {replica: state.current_log_dir
              for replica, state in (await find_move_states(tool, log_dirs or {})).items()
              if isinstance(state, ActiveMoveState)}
    if moving:
        await execute_moves(tool, moving, timeout_ms)
    else:
        sys.stdout.write("None of the specified partition moves are active.")  # no newline: Kafka's
    if not preserve_throttles:
        await tool.clear_all_throttles(targets)


def reassignments_text(reassignments: dict) -> str:
    """curReassignmentsToString."""
    lines = []
    for tp in sorted_tps(reassignments):
        replicas, adding, removing = reassignments[tp]
        line = f"{tp}: replicas: {','.join(map(str, replicas))}."
        if adding:
            line += f" adding: {','.join(map(str, adding))}."
        if removing:
            line += f" removing: {','.join(map(str, removing))}."
        lines.append(line)
    if not lines:
        return "No partition reassignments found."
    return "Current partition reassignments:\n" + "\n".join(lines)


# --- options -------------------------------------------------------------------------------------

# option -> takes a value
OPTIONS = {
    "generate": False, "execute": False, "verify": False, "cancel": False, "list": False,
    "bootstrap-server": True, "command-config": True, "reassignment-json-file": True,
    "topics-to-move-json-file": True, "broker-list": True, "disable-rack-aware": False,
    "throttle": True, "replica-alter-log-dirs-throttle": True, "timeout": True,
    "additional": False, "preserve-throttles": False,
}
REQUIRED = {
    "verify": ["reassignment-json-file"],
    "generate": ["topics-to-move-json-file", "broker-list"],
    "execute": ["reassignment-json-file"],
    "cancel": ["reassignment-json-file"],
    "list": [],
}
PERMITTED = {
    "verify": ["bootstrap-server", "command-config", "preserve-throttles"],
    "generate": ["bootstrap-server", "broker-list", "command-config", "disable-rack-aware"],
    "execute": ["additional", "bootstrap-server", "command-config", "throttle",
                "replica-alter-log-dirs-throttle", "timeout"],
    "cancel": ["bootstrap-server", "command-config", "preserve-throttles", "timeout"],
    "list": ["bootstrap-server", "command-config"],
}
LONG_DEFAULTS = {"throttle": -1, "replica-alter-log-dirs-throttle": -1, "timeout": 10000}


def build_parser() -> ToolParser:
    p = ToolParser("kafka-reassign-partitions.sh", HELP_TEXT)
    p.add_argument("--verify", action="store_true",
                   help="Verify if the reassignment completed as specified by the "
                        "--reassignment-json-file option. If there is a throttle engaged for the "
                        "replicas specified, and the rebalance has completed, the throttle will "
                        "be removed")
    p.add_argument("--generate", action="store_true",
                   help="Generate a candidate partition reassignment configuration. Note that "
                        "this only generates a candidate assignment, it does not execute it.")
    p.add_argument("--execute", action="store_true",
                   help="Kick off the reassignment as specified by the --reassignment-json-file "
                        "option.")
    p.add_argument("--cancel", action="store_true", help="Cancel an active reassignment.")
    p.add_argument("--list", action="store_true", help="List all active partition reassignments.")
    p.add_argument("--bootstrap-server", metavar="<String: Server(s) to use for bootstrapping>",
                   help="REQUIRED: the server(s) to use for bootstrapping.")
    p.add_argument("--command-config", metavar="<String: Admin client property file>",
                   help="Property file containing configs to be passed to Admin Client.")
    p.add_argument("--reassignment-json-file", metavar="<String: manual assignment json file path>",
                   help="The JSON file with the partition reassignment configurationThe format to "
                        "use is - \n{\"partitions\":\n\t[{\"topic\": \"foo\",\n\t  \"partition\": "
                        "1,\n\t  \"replicas\": [1,2,3],\n\t  \"log_dirs\": [\"dir1\",\"dir2\","
                        "\"dir3\"] }],\n\"version\":1\n}\nNote that \"log_dirs\" is optional. When "
                        "it is specified, its length must equal the length of the replicas list. "
                        "The value in this list can be either \"any\" or the absolution path of "
                        "the log directory on the broker. If absolute log directory path is "
                        "specified, the replica will be moved to the specified log directory on "
                        "the broker.")
    p.add_argument("--topics-to-move-json-file",
                   metavar="<String: topics to reassign json file path>",
                   help="Generate a reassignment configuration to move the partitions of the "
                        "specified topics to the list of brokers specified by the --broker-list "
                        "option. The format to use is - \n{\"topics\":\n\t[{\"topic\": \"foo\"},"
                        "{\"topic\": \"foo1\"}],\n\"version\":1\n}")
    p.add_argument("--broker-list", metavar="<String: brokerlist>",
                   help="The list of brokers to which the partitions need to be reassigned in the "
                        "form \"0,1,2\". This is required if --topics-to-move-json-file is used to "
                        "generate reassignment configuration")
    p.add_argument("--disable-rack-aware", action="store_true",
                   help="Disable rack aware replica assignment")
    p.add_argument("--throttle", metavar="<Long: throttle>",
                   help="The movement of partitions between brokers will be throttled to this "
                        "value (bytes/sec). This option can be included with --execute when a "
                        "reassignment is started, and it can be altered by resubmitting the "
                        "current reassignment along with the --additional flag. The throttle rate "
                        "should be at least 1 KB/s. (default: -1)")
    p.add_argument("--replica-alter-log-dirs-throttle",
                   metavar="<Long: replicaAlterLogDirsThrottle>",
                   help="The movement of replicas between log directories on the same broker will "
                        "be throttled to this value (bytes/sec). This option can be included with "
                        "--execute when a reassignment is started, and it can be altered by "
                        "resubmitting the current reassignment along with the --additional flag. "
                        "The throttle rate should be at least 1 KB/s. (default: -1)")
    p.add_argument("--timeout", metavar="<Long: timeout>",
                   help="The maximum time in ms to wait for log directory replica assignment to "
                        "begin. (default: 10000)")
    p.add_argument("--additional", action="store_true",
                   help="Execute this reassignment in addition to any other ongoing ones. This "
                        "option can also be used to change the throttle of an ongoing "
                        "reassignment.")
    p.add_argument("--preserve-throttles", action="store_true",
                   help="Do not modify broker or topic throttles.")
    return p


def detected_options(argv: list) -> list:
    """The options on the command line, in order (joptsimple's OptionSet.specs())."""
    found, i = [], 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            break
        if arg.startswith("--"):
            name, has_value = arg[2:].partition("=")[0], "=" in arg
            if name in OPTIONS:
                if name not in found:
                    found.append(name)
                if OPTIONS[name] and not has_value:
                    i += 1
        i += 1
    return found


def parse_long(opts, name: str) -> int:
    value = getattr(opts, name.replace("-", "_"))
    if value is None:
        return LONG_DEFAULTS[name]
    if not re.fullmatch(r"[+-]?[0-9]+", value) or not -2**63 <= int(value) < 2**63:
        raise Terse(f"Cannot parse argument '{value}' of option {name}")
    return int(value)


def parse_options(argv: list):
    """validateAndParseArgs: the options and the action, or Kafka's usage message (Terse)."""
    parser = build_parser()
    opts, rest = parser.parse_known_args(argv)
    unknown = [a for a in rest if a.startswith("-") and a != "-"]
    if unknown:                         # other leftovers are non-option arguments: ignored
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    for name in LONG_DEFAULTS:
        setattr(opts, name.replace("-", "_") + "_value", parse_long(opts, name))
    actions = [a for a in ACTIONS if getattr(opts, a)]
    if len(actions) != 1:
        raise Terse("Command must include exactly one action: --generate, --execute, --verify, "
                    "--cancel, --list")
    action = actions[0]
    if opts.bootstrap_server is None:
        raise Terse("Please specify --bootstrap-server")
    for name in REQUIRED[action]:
        if getattr(opts, name.replace("-", "_")) is None:
            raise Terse(f"Missing required argument \"[{name}]\"")
    for name in detected_options(argv):
        if name != action and name not in REQUIRED[action] and name not in PERMITTED[action]:
            raise Terse(f"Option \"[{name}]\" can't be used with action \"[{action}]\"")
    return opts, action


def read_file(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


async def run(opts, action: str) -> int:
    props = read_properties(opts.command_config) if opts.command_config else {}
    kwargs = {"client_id": CLIENT_ID, **client_kwargs(props)}
    # Inputs are read and checked before anything is sent, as Kafka does.
    if action == "generate":
        brokers, topics = parse_generate_args(read_file(opts.topics_to_move_json_file),
                                              opts.broker_list)
    elif action == "execute":
        proposed, log_dirs = parse_execute_data(read_file(opts.reassignment_json_file))
    elif action in ("verify", "cancel"):
        targets, log_dirs = parse_reassignment_data(read_file(opts.reassignment_json_file))
    async with ClusterClient(opts.bootstrap_server, **kwargs) as cluster:
        tool = Tool(cluster)
        if action == "generate":
            await generate(tool, brokers, topics, not opts.disable_rack_aware)
        elif action == "execute":
            await execute(tool, proposed, opts.additional, opts.throttle_value,
                          opts.replica_alter_log_dirs_throttle_value, log_dirs,
                          opts.timeout_value)
        elif action == "verify":
            await verify(tool, targets, opts.preserve_throttles, log_dirs)
        elif action == "cancel":
            await cancel(tool, targets, opts.preserve_throttles, log_dirs, opts.timeout_value)
        else:
            print(reassignments_text(await tool.list_reassignments()))
    return 0


async def _terse(coro) -> int:
    try:
        return await coro
    except Terse as e:
        sys.stdout.flush()
        sys.stderr.write(f"{e}\n")
        return 1


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:                        # Kafka: the help text and usage, exit status 1
        sys.stderr.write(build_parser().format_help())
        return 1
    try:
        opts, action = parse_options(argv)
    except Terse as e:
        sys.stderr.write(f"{e}\n")
        return 1
    return _terse(run(opts, action))


if __name__ == "__main__":
    main_entry(main)
