"""kafka-topics.sh: create, list, describe, alter (partitions) and delete topics.

Output follows Kafka 3.x's TopicCommand:
    Topic: t	TopicId: <base64 uuid>	PartitionCount: 3	ReplicationFactor: 1	Configs: k=v,...
    	Topic: t	Partition: 0	Leader: 1	Replicas: 1	Isr: 1
(tab separated; Configs lists the non-default configs; "Leader: none" without a leader). ``--topic``
is a regular expression (Kafka's IncludeList, "," meaning "|") except with --create. Errors print
``Error while executing topic command : <message>`` and exit 1, like Kafka.
"""
from __future__ import annotations

import base64
import re
import uuid

from protocol.errors import ErrorCode, KafkaError

from coordinator.internal_topics import INTERNAL_TOPICS

from broker.client.admin import RESOURCE_TOPIC, Admin, NewTopic
from broker.client.cluster import ClusterClient
from broker.client.errors import UnsupportedVersionError
from broker.client.types import TopicPartition
from broker.tools.common import (ToolError, ToolParser, add_bootstrap, client_kwargs, include_list,
                                 integer_option, main_entry, parse_java_int, read_properties)
from broker.tools.javautil import java_hash_order, java_split, java_string_hash

ERROR_PREFIX = "Error while executing topic command : "
DEFAULT_CONFIG_SOURCE = 5


def build_parser() -> ToolParser:
    p = ToolParser("kafka-topics.sh", "Create, delete, describe, or change a topic.")
    add_bootstrap(p, required=True)
    actions = p.add_argument_group("actions (exactly one)")
    actions.add_argument("--create", action="store_true", help="Create a new topic.")
    actions.add_argument("--list", action="store_true", help="List all available topics.")
    actions.add_argument("--describe", action="store_true", help="List details for the given topics.")
    actions.add_argument("--alter", action="store_true", help="Alter the number of partitions and replica assignment.")
    actions.add_argument("--delete", action="store_true", help="Delete a topic.")
    p.add_argument("--topic", metavar="<String: topic>",
                   help="The topic to create, alter, describe or delete. It also accepts a regular expression, "
                        "except for --create option.")
    p.add_argument("--topic-id", metavar="<String: topic-id>", help="The topic-id to describe.")
    p.add_argument("--partitions", type=integer_option("partitions"), metavar="<Integer: # of partitions>",
                   help="The number of partitions for the topic being created or altered.")
    p.add_argument("--replication-factor", type=integer_option("replication-factor"), metavar="<Integer: replication factor>",
                   help="The replication factor for each partition in the topic being created.")
    p.add_argument("--replica-assignment", metavar="<String: broker_id_for_part1_replica1 : ...>",
                   help="A list of manual partition-to-broker assignments for the topic being created or altered.")
    p.add_argument("--config", action="append", metavar="<String: name=value>",
                   help="A topic configuration override for the topic being created.")
    p.add_argument("--if-exists", action="store_true",
                   help="If set when altering or deleting or describing topics, the action will only execute if "
                        "the topic exists.")
    p.add_argument("--if-not-exists", action="store_true",
                   help="If set when creating topics, the create request will not fail if the topic already exists.")
    p.add_argument("--exclude-internal", action="store_true",
                   help="Exclude internal topics when listing or describing topics.")
    p.add_argument("--under-replicated-partitions", action="store_true",
                   help="If set when describing topics, only show under-replicated partitions.")
    p.add_argument("--unavailable-partitions", action="store_true",
                   help="If set when describing topics, only show partitions whose leader is not available.")
    p.add_argument("--under-min-isr-partitions", action="store_true",
                   help="If set when describing topics, only show partitions whose isr count is less than the "
                        "configured minimum.")
    p.add_argument("--at-min-isr-partitions", action="store_true",
                   help="If set when describing topics, only show partitions whose isr count is equal to the "
                        "configured minimum.")
    p.add_argument("--topics-with-overrides", action="store_true",
                   help="If set when describing topics, only show topics that have overridden configs.")
    return p


_COMMA, _COLON = re.compile(","), re.compile(":")


def parse_replica_assignment(text: str) -> dict:
    """'1:2,2:3' -> {0: [1, 2], 1: [2, 3]}."""
    out = {}
    for i, part in enumerate(java_split(_COMMA, text)):   # as Kafka's parseReplicaAssignment
        try:
            brokers = [parse_java_int(b.strip()) for b in java_split(_COLON, part)]
        except ValueError as e:
            raise ToolError(str(e)) from None
        if len(set(brokers)) != len(brokers):
            duplicates = sorted({b for b in brokers if brokers.count(b) > 1})
            raise ToolError("Partition replica lists may not contain duplicate entries: "
                            + ",".join(map(str, duplicates)))
        out[i] = brokers
        if len(brokers) != len(out[0]):
            raise ToolError(f"Partition {i} has different replication factor: [{', '.join(map(str, brokers))}]")
    return out


def parse_topic_configs(items) -> dict:
    """--config k=v (repeatable): Kafka splits on '=' with optional spaces and wants exactly two parts."""
    out = {}
    for item in items or ():
        parts = re.split(r"\s*=\s*", item)
        if len(parts) != 2:
            raise ToolError('requirement failed: Invalid topic config: all configs to be added must be in the '
                            'format "key=val".')
        out[parts[0].strip()] = parts[1].strip()
    return out


def topic_filter(pattern: str | None, exclude_internal: bool):
    """Kafka's IncludeList of --topic; an empty --topic matches no topic (not every topic:
    `--delete --topic "$T"` with T unset must not delete the cluster's topics)."""
    regex = include_list(pattern) if pattern is not None else None

    def allowed(name: str, is_internal: bool) -> bool:
        if exclude_internal and (is_internal or name in INTERNAL_TOPICS):
            return False
        return regex is None or regex.fullmatch(name) is not None
    return allowed


ZERO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"      # Uuid.ZERO_UUID as Kafka prints it


def format_topic_id(topic_id) -> str:
    """Kafka prints Uuid as URL-safe base64 without padding."""
    if not isinstance(topic_id, uuid.UUID) or topic_id.int == 0:
        return ""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


async def run(opts) -> int:
    props = read_properties(opts.command_config) if opts.command_config else {}
    async with ClusterClient(opts.bootstrap_server, **client_kwargs(props)) as cluster:
        admin = Admin(cluster)
        if opts.create:
            return await create(admin, opts)
        topics = await admin.list_topics()
        # --describe with a topic id uses it alone, whatever --topic says; --alter and
        # --delete go by --topic (Kafka's TopicService)
        by_id = opts.describe and opts.topic_id and opts.topic_id != ZERO_TOPIC_ID
        allowed = topic_filter(None if by_id else opts.topic, opts.exclude_internal)
        names = sorted(n for n, m in topics.items() if allowed(n, m.is_internal))
        if opts.list:
            print("\n".join(names))               # Kafka prints an empty line for none
            return 0
        if by_id:
            names = [n for n in names if format_topic_id(topics[n].topic_id) == opts.topic_id]
            if not names and not opts.if_exists:
                raise ToolError(f"TopicId '{opts.topic_id}' does not exist as expected")
        elif opts.topic and not names and not opts.if_exists:      # "" is never missing (Kafka)
            # Kafka 3.9 formats the Optional holding the name: its text, as it prints it
            raise ToolError(f"Topic 'Optional[{opts.topic}]' does not exist as expected")
        if opts.describe:
            await describe(admin, cluster, topics, names, opts)
        elif opts.alter:
            await alter(admin, topics, names, opts)
        elif opts.delete:
            internal = [n for n in names if topics[n].is_internal or n in INTERNAL_TOPICS]
            if internal:    # the guard of Kafka's ZooKeeper-era TopicCommand, kept: the broker may not refuse
                raise ToolError(f"Topic {internal[0]} is a kafka internal topic and is not allowed to be marked "
                                "for deletion.")
            results = await admin.delete_topics(names)
            for name in names:
                code, message = results.get(name, (0, None))
                if code:
                    raise KafkaError(code, message or f"{ErrorCode(code).name}")
    return 0


async def create(admin: Admin, opts) -> int:
    if not opts.topic:
        raise ToolError("Missing required argument \"[topic]\"")
    if opts.replication_factor is not None and not 1 <= opts.replication_factor <= 32767:
        raise ToolError("The replication factor must be between 1 and 32767 inclusive")
    if opts.partitions is not None and opts.partitions < 1:
        raise ToolError("The partitions must be greater than 0")
    if "." in opts.topic or "_" in opts.topic:
        print("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') could "
              "collide. To avoid issues it is best to use either, but not both.")
    configs = parse_topic_configs(opts.config)
    if opts.replica_assignment:
        topic = NewTopic(opts.topic, assignments=parse_replica_assignment(opts.replica_assignment), configs=configs)
    else:
        topic = NewTopic(opts.topic, opts.partitions if opts.partitions is not None else -1,
                         opts.replication_factor if opts.replication_factor is not None else -1, configs=configs)
    code, message = (await admin.create_topics([topic]))[opts.topic]
    if code == ErrorCode.TOPIC_ALREADY_EXISTS and opts.if_not_exists:
        return 0
    if code:
        raise KafkaError(code, message or ErrorCode(code).name)
    print(f"Created topic {opts.topic}.")
    return 0


def _in_progress(replicas, reassignment) -> bool:
    """Kafka's isReassignmentInProgress: some replica is still being added or removed."""
    return reassignment is not None and bool(set(replicas) & (set(reassignment[1]) | set(reassignment[2])))


def _replication_factor(replicas, reassignment) -> int:
    """Kafka's getReplicationFactor: during a reassignment, the replicas not being added."""
    if _in_progress(replicas, reassignment):
        return len(reassignment[0]) - len(reassignment[1])
    return len(replicas)


async def _reassignments(admin: Admin, partitions: list) -> dict:
    """{TopicPartition: (replicas, adding, removing)} being reassigned (Kafka's
    listAllReassignments; a broker that cannot tell gives none)."""
    if not partitions:
        return {}
    try:
        return await admin.list_partition_reassignments(partitions)
    except UnsupportedVersionError:
        return {}


async def describe(admin: Admin, cluster, topics: dict, names: list, opts) -> None:
    report_filters = (opts.under_replicated_partitions or opts.unavailable_partitions
                      or opts.under_min_isr_partitions or opts.at_min_isr_partitions)
    live = set(cluster.brokers)
    moving = await _reassignments(admin, [TopicPartition(name, p) for name in names
                                          for p in topics[name].partitions])
    # Kafka's order: its DescribeTopicsResult.all() is a HashMap sized for the topics, and a
    # topic's Config entries a HashMap too
    for name in java_hash_order(names, java_string_hash, len(names)):
        meta = topics[name]
        config = await admin.describe_configs(RESOURCE_TOPIC, name)
        by_name = {c.name: c for c in config.configs}
        ordered = [by_name[n] for n in java_hash_order(list(by_name), java_string_hash)]
        non_default = [(c.name, c.value) for c in ordered
                       if (c.config_source != DEFAULT_CONFIG_SOURCE if c.config_source != -1 else not c.is_default)]
        min_isr = next((int(c.value) for c in config.configs if c.name == "min.insync.replicas" and c.value), 1)
        partitions = [meta.partitions[p] for p in sorted(meta.partitions)]
        if not report_filters and (not opts.topics_with_overrides or non_default):
            line = f"Topic: {name}"
            topic_id = format_topic_id(meta.topic_id)
            if topic_id:
                line += f"\tTopicId: {topic_id}"
            rf = _replication_factor(partitions[0].replicas, moving.get(
                TopicPartition(name, partitions[0].partition))) if partitions else 0
            line += f"\tPartitionCount: {len(partitions)}\tReplicationFactor: {rf}\tConfigs: "
            line += ",".join(f"{k}={v}" for k, v in non_default)
            print(line)
        if opts.topics_with_overrides:
            continue
        for p in partitions:
            has_leader = p.leader >= 0
            reassignment = moving.get(TopicPartition(name, p.partition))
            show = not report_filters or (
                (opts.under_replicated_partitions
                 and _replication_factor(p.replicas, reassignment) - len(p.isr) > 0)
                or (opts.unavailable_partitions and (not has_leader or p.leader not in live))
                or (opts.under_min_isr_partitions and (not has_leader or len(p.isr) < min_isr))
                or (opts.at_min_isr_partitions and len(p.isr) == min_isr))
            if show:
                line = (f"\tTopic: {name}\tPartition: {p.partition}\tLeader: {p.leader if has_leader else 'none'}"
                        f"\tReplicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}")
                if reassignment is not None:
                    line += (f"\tAdding Replicas: {','.join(map(str, reassignment[1]))}"
                             f"\tRemoving Replicas: {','.join(map(str, reassignment[2]))}")
                # Kafka 3.9's Admin reads partitions from Metadata against a ZooKeeper-mode
                # cluster (DescribeTopicPartitions is KRaft's): no ELR, printed as N/A.
                print(line + "\tElr: N/A\tLastKnownElr: N/A")


async def alter(admin: Admin, topics: dict, names: list, opts) -> None:
    assignments = {}
    if opts.replica_assignment:
        parsed = parse_replica_assignment(opts.replica_assignment)
        for name in names:
            start = len(topics[name].partitions)
            assignments[name] = [parsed[i] for i in sorted(parsed) if i >= start]
    results = await admin.create_partitions({name: opts.partitions for name in names}, assignments=assignments)
    for name in names:
        code, message = results.get(name, (0, None))
        if code:
            raise KafkaError(code, message or ErrorCode(code).name)


def main(argv=None):
    opts = build_parser().parse_args(argv)
    if sum((opts.create, opts.list, opts.describe, opts.alter, opts.delete)) != 1:
        raise ToolError("Command must include exactly one action: --list, --describe, --create, --alter or --delete")
    if opts.describe and opts.if_exists:
        if opts.topic is None and not opts.topic_id:
            raise ToolError("--topic or --topic-id is required to describe a topic")
        if opts.topic is not None and opts.topic_id:
            print("Only topic id will be used when both --topic and --topic-id are specified and "
                  "topicId is not Uuid.ZERO_UUID")
    if not (opts.list or opts.describe) and opts.topic is None:
        raise ToolError("Missing required argument \"[topic]\"")      # never "delete every topic"
    if opts.alter and opts.partitions is None and not opts.config:
        raise ToolError("Missing required argument \"[partitions]\"")  # before connecting
    check_invalid_args(opts)
    return run(opts)


_REPORTS = ("under-replicated-partitions", "under-min-isr-partitions", "at-min-isr-partitions",
            "unavailable-partitions")
# Kafka's TopicCommandOptions.checkInvalidArgs: option -> the actions it goes with, and the other
# options it cannot be combined with.
_ALLOWED_WITH = {
    "config": ({"alter", "create"}, ()),
    "partitions": ({"alter", "create"}, ()),
    "replication-factor": ({"create"}, ()),
    "replica-assignment": ({"alter", "create"}, ()),
    **{report: ({"describe"}, ("topics-with-overrides",)) for report in _REPORTS},
    "topics-with-overrides": ({"describe"}, _REPORTS),
    "if-exists": ({"alter", "delete", "describe"}, ()),
    "if-not-exists": ({"create"}, ()),
    "exclude-internal": ({"list", "describe"}, ()),
}


def check_invalid_args(opts) -> None:
    """Options given with an action they do not go with are refused, as Kafka's
    checkRequiredArgs/checkInvalidArgs do (rather than ignored)."""
    def given(name):
        value = getattr(opts, name.replace("-", "_"))
        return value is not None and value is not False and value != []     # 0 is given
    action = next(a for a in ("alter", "create", "describe", "list", "delete") if given(a))
    if action == "alter" and given("config"):
        raise ToolError('Option combination "[[bootstrap-server], [config]]" can\'t be used with '
                        'option "[alter]" (the kafka-configs CLI supports altering topic configs '
                        'with a --bootstrap-server option)')
    for option, (actions, others) in _ALLOWED_WITH.items():
        if not given(option):
            continue
        if action not in actions:
            raise ToolError(f'Option "[{option}]" can\'t be used with option "[{action}]"')
        for other in others:
            if given(other):
                raise ToolError(f'Option "[{option}]" can\'t be used with option "[{other}]"')
    if action == "create" and given("replica-assignment"):
        for other in ("partitions", "replication-factor"):
            if given(other):
                raise ToolError(f'Option "[replica-assignment]" can\'t be used with option '
                                f'"[{other}]"')



if __name__ == "__main__":
    main_entry(main, error_prefix=ERROR_PREFIX)
