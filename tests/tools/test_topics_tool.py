"""kafka-topics against a live broker: Kafka's describe format, create/alter/delete, errors."""
import asyncio
import re

import pytest

from broker.client.cluster import ClusterClient
from broker.client.consumer import Consumer
from broker.client.types import TopicPartition

TOPIC_LINE = re.compile(r"^Topic: (\S+)\tTopicId: ([A-Za-z0-9_-]{22})\tPartitionCount: (\d+)\tReplicationFactor: (\d+)"
                        r"\tConfigs: (.*)$")
PARTITION_LINE = re.compile(r"^\tTopic: (\S+)\tPartition: (\d+)\tLeader: (\d+|none)\tReplicas: ([\d,]*)\tIsr: ([\d,]*)"
                            r"\tElr: N/A\tLastKnownElr: N/A$")       # Kafka 3.9 against a ZooKeeper-mode cluster


def test_create_describe_alter_delete(tools_broker, tool):
    b = tools_broker.bootstrap
    r = tool("topics", "--bootstrap-server", b, "--create", "--topic", "orders", "--partitions", 3,
             "--replication-factor", 1, "--config", "retention.ms=3600000", "--config", "cleanup.policy=delete")
    assert (r.code, r.out) == (0, "Created topic orders.\n")
    r = tool("topics", "--bootstrap-server", b, "--list")
    assert "orders" in r.lines
    r = tool("topics", "--bootstrap-server", b, "--describe", "--topic", "orders")
    assert r.code == 0, r
    head = TOPIC_LINE.match(r.lines[0])
    assert head and head.group(1) == "orders" and head.group(3) == "3" and head.group(4) == "1"
    assert "retention.ms=3600000" in head.group(5).split(",")
    parts = [PARTITION_LINE.match(l) for l in r.lines[1:]]
    assert [p.group(2) for p in parts] == ["0", "1", "2"]
    broker_id = parts[0].group(3)
    assert broker_id.isdigit()
    assert all(p.group(3) == p.group(4) == p.group(5) == broker_id for p in parts)

    r = tool("topics", "--bootstrap-server", b, "--alter", "--topic", "orders", "--partitions", 5)
    assert r.code == 0, r
    r = tool("topics", "--bootstrap-server", b, "--describe", "--topic", "orders")
    assert "PartitionCount: 5" in r.lines[0] and len(r.lines) == 6

    r = tool("topics", "--bootstrap-server", b, "--create", "--topic", "orders", "--partitions", 1)
    assert r.code == 1 and len(r.err.splitlines()) == 1
    assert r.err.startswith("Error while executing topic command : ") and "orders" in r.err
    r = tool("topics", "--bootstrap-server", b, "--create", "--topic", "orders", "--if-not-exists")
    assert (r.code, r.out) == (0, "")

    r = tool("topics", "--bootstrap-server", b, "--delete", "--topic", "orders")
    assert r.code == 0, r
    r = tool("topics", "--bootstrap-server", b, "--describe", "--topic", "orders")
    # (sic) Kafka 3.9 formats the Optional holding the name
    assert r.code == 1 and r.err == ("Error while executing topic command : Topic 'Optional[orders]' "
                                     "does not exist as expected\n")
    r = tool("topics", "--bootstrap-server", b, "--delete", "--topic", "orders", "--if-exists")
    assert r.code == 0 and r.out == ""


def test_topic_id_is_for_describe_only(tools_broker, tool):
    """Kafka's TopicService: --describe by --topic-id uses the id alone; --delete and --alter go
    by --topic, which they require (a --delete --topic-id X deleted the topic here)."""
    b = tools_broker.bootstrap
    assert tool("topics", "--bootstrap-server", b, "--create", "--topic", "by-id").code == 0
    topic_id = TOPIC_LINE.match(tool("topics", "--bootstrap-server", b, "--describe", "--topic",
                                     "by-id").lines[0]).group(2)
    r = tool("topics", "--bootstrap-server", b, "--delete", "--topic-id", topic_id)
    assert (r.code, r.err) == (1, "Error while executing topic command : Missing required argument "
                                  "\"[topic]\"\n"), r
    r = tool("topics", "--bootstrap-server", b, "--describe", "--topic-id", topic_id, "--topic", "other")
    assert [TOPIC_LINE.match(l).group(1) for l in r.lines if l.startswith("Topic:")] == ["by-id"]
    r = tool("topics", "--bootstrap-server", b, "--describe", "--if-exists")
    assert r.code == 1 and r.err.endswith("--topic or --topic-id is required to describe a topic\n"), r
    assert tool("topics", "--bootstrap-server", b, "--list", "--topic", "by-id").lines == ["by-id"]
    r = tool("topics", "--bootstrap-server", b, "--list", "--topic", "nothing-matches")
    assert (r.code, r.out) == (0, "\n")                 # Kafka prints one empty line


def test_list_filters_and_regex(tools_broker, tool):
    b = tools_broker.bootstrap
    for name in ("alpha-1", "alpha-2", "beta"):
        assert tool("topics", "--bootstrap-server", b, "--create", "--topic", name).code == 0
    r = tool("topics", "--bootstrap-server", b, "--list", "--topic", "alpha.*")
    assert r.lines == ["alpha-1", "alpha-2"]
    r = tool("topics", "--bootstrap-server", b, "--describe", "--topic", "alpha-1,beta")
    assert [TOPIC_LINE.match(l).group(1) for l in r.lines if l.startswith("Topic:")] == ["alpha-1", "beta"]
    r = tool("topics", "--bootstrap-server", b, "--describe", "--topic", " 'alpha-1, beta' ")
    assert [TOPIC_LINE.match(l).group(1) for l in r.lines if l.startswith("Topic:")] == ["alpha-1", "beta"]
    # an empty --topic (a script's unset variable) matches no topic, as Kafka's IncludeList(""):
    # it deleted and altered every topic
    for action in (["--delete"], ["--alter", "--partitions", "3"], ["--describe"]):
        r = tool("topics", "--bootstrap-server", b, *action, "--topic", "")
        assert (r.code, r.out) == (0, ""), r
    r = tool("topics", "--bootstrap-server", b, "--list")
    assert {"alpha-1", "alpha-2", "beta"} <= set(r.lines)
    r = tool("topics", "--bootstrap-server", b, "--describe", "--topic", "alpha-2")
    assert TOPIC_LINE.match(r.lines[0]).group(3) == "1"           # still one partition
    r = tool("topics", "--bootstrap-server", b, "--describe", "--topic", "beta", "--under-replicated-partitions")
    assert r.out == ""     # one replica, in sync: nothing under-replicated, and no topic header line
    r = tool("topics", "--bootstrap-server", b, "--describe", "--topic", "beta", "--under-min-isr-partitions")
    assert r.out == ""
    r = tool("topics", "--bootstrap-server", b, "--describe", "--topic", "beta", "--at-min-isr-partitions")
    assert [PARTITION_LINE.match(l).group(1, 2) for l in r.lines] == [("beta", "0")]    # isr 1 == min.insync 1
    # server.properties sets log.segment.bytes and log.retention.hours. As Kafka: segment.bytes comes from its
    # primary synonym (STATIC_BROKER_CONFIG) and is listed; retention.ms only from the secondary
    # log.retention.hours, which Kafka's DescribeConfigs drops (source DEFAULT_CONFIG): not listed
    r = tool("topics", "--bootstrap-server", b, "--describe", "--topic", "beta")
    listed = TOPIC_LINE.match(r.lines[0]).group(5).split(",")
    assert "segment.bytes=1073741824" in listed and not [c for c in listed if c.startswith("retention.ms=")]
    # --topics-with-overrides prints headers only
    r = tool("topics", "--bootstrap-server", b, "--describe", "--topic", "beta", "--topics-with-overrides")
    assert all(l.startswith("Topic: beta\t") for l in r.lines)


def test_replica_assignment_and_bad_values(tools_broker, tool, script):
    b = tools_broker.bootstrap
    r = tool("topics", "--bootstrap-server", b, "--create", "--topic", "assigned", "--replica-assignment", "0,0")
    assert r.code == 0, r
    r = tool("topics", "--bootstrap-server", b, "--describe", "--topic", "assigned")
    assert "PartitionCount: 2" in r.lines[0]
    # --alter with entries for the existing partitions only: none for the new ones, which Kafka's
    # broker refuses (the empty list was sent as "no assignment" and placed automatically)
    prefix = "Error while executing topic command : "
    r = tool("topics", "--bootstrap-server", b, "--alter", "--topic", "assigned", "--partitions", 4,
             "--replica-assignment", "0,0")
    assert (r.code, r.err) == (1, prefix + "Increasing the number of partitions by 2 but 0 assignments "
                                           "provided.\n"), r
    r = tool("topics", "--bootstrap-server", b, "--alter", "--topic", "assigned", "--partitions", 3,
             "--replica-assignment", "0,0,0,")           # Java's split drops the trailing empty entry
    assert r.code == 0, r
    # numbers as Java reads them: 32 bits, no empty broker id
    r = script("kafka-topics.sh", "--bootstrap-server", b, "--create", "--topic", "big-numbers",
               "--partitions", "99999999999")
    assert (r.code, r.err) == (1, "kafka-topics.sh: error: argument --partitions: Cannot parse argument "
                                  "'99999999999' of option partitions\n")
    for argv, message in (
            (["--replica-assignment", "99999999999"], prefix + 'For input string: "99999999999"'),
            (["--replica-assignment", "0::1"], prefix + 'For input string: ""')):
        r = tool("topics", "--bootstrap-server", b, "--create", "--topic", "big-numbers", *argv)
        assert (r.code, r.err) == (1, message + "\n"), (argv, r)
    r = tool("topics", "--bootstrap-server", b, "--create", "--topic", "bad", "--partitions", 0)
    assert r.code == 1 and r.err == "Error while executing topic command : The partitions must be greater than 0\n"
    r = tool("topics", "--bootstrap-server", b, "--create", "--topic", "bad", "--replication-factor", 3)
    assert r.code == 1 and len(r.err.splitlines()) == 1


def test_create_argument_checks_match_kafka(tools_broker, tool):
    b = tools_broker.bootstrap
    prefix = "Error while executing topic command : "
    r = tool("topics", "--bootstrap-server", b, "--create", "--topic", "chk", "--replica-assignment", "0:1,0")
    assert (r.code, r.err) == (1, prefix + "Partition 1 has different replication factor: [0]\n")
    r = tool("topics", "--bootstrap-server", b, "--create", "--topic", "chk", "--replica-assignment", "0:0")
    assert (r.code, r.err) == (1, prefix + "Partition replica lists may not contain duplicate entries: 0\n")
    r = tool("topics", "--bootstrap-server", b, "--create", "--topic", "chk", "--replica-assignment", "0",
             "--partitions", 2)
    assert (r.code, r.err) == (1, prefix + "Option \"[replica-assignment]\" can't be used with option "
                                           "\"[partitions]\"\n")
    r = tool("topics", "--bootstrap-server", b, "--create", "--topic", "chk", "--config", "a=b=c")
    assert (r.code, r.err) == (1, prefix + "requirement failed: Invalid topic config: all configs to be added must "
                                           "be in the format \"key=val\".\n")
    r = tool("topics", "--bootstrap-server", b, "--delete")     # never "delete every topic"
    assert (r.code, r.err) == (1, prefix + "Missing required argument \"[topic]\"\n")
    for argv in ([], ["--list", "--describe"]):
        r = tool("topics", "--bootstrap-server", b, *argv)
        assert (r.code, r.err) == (1, prefix + "Command must include exactly one action: --list, --describe, "
                                               "--create, --alter or --delete\n")
    r = tool("topics", "--bootstrap-server", b, "--create", "--topic", "chk", "--config", "retention.ms = 5000")
    assert r.code == 0, r
    r = tool("topics", "--bootstrap-server", b, "--describe", "--topic", "chk")
    assert "retention.ms=5000" in TOPIC_LINE.match(r.lines[0]).group(5).split(",")
    r = tool("topics", "--bootstrap-server", b, "--describe", "--topic", "chk", "--exclude-internal",
             "--unavailable-partitions")
    assert (r.code, r.out) == (0, "")      # the only partition has a live leader
    r = tool("topics", "--bootstrap-server", b, "--list", "--exclude-internal")
    assert "chk" in r.lines and not any(l.startswith("__") for l in r.lines)


def test_internal_topics_are_not_deleted(tools_broker, tool):
    b = tools_broker.bootstrap

    tool("topics", "--bootstrap-server", b, "--create", "--if-not-exists", "--topic", "chk")

    async def commit():     # makes sure __consumer_offsets exists
        async with ClusterClient(b) as cluster:
            await Consumer(cluster, group_id="g-internal").commit({TopicPartition("chk", 0): 0})
    asyncio.run(commit())
    r = tool("topics", "--bootstrap-server", b, "--delete", "--topic", "__consumer_offsets")
    assert (r.code, r.err) == (1, "Error while executing topic command : Topic __consumer_offsets is a kafka internal "
                                  "topic and is not allowed to be marked for deletion.\n")
    r = tool("topics", "--bootstrap-server", b, "--delete", "--topic", "__.*", "--exclude-internal", "--if-exists")
    assert (r.code, r.err) == (1, "Error while executing topic command : Option \"[exclude-internal]\" can't be "
                                  "used with option \"[delete]\"\n")          # Kafka's checkInvalidArgs
    assert "__consumer_offsets" in tool("topics", "--bootstrap-server", b, "--list").lines


@pytest.mark.parametrize("argv,message", [
    (["--alter", "--partitions", "6", "--replication-factor", "3"],
     'Option "[replication-factor]" can\'t be used with option "[alter]"'),
    (["--alter", "--partitions", "6", "--config", "retention.ms=1"],
     'Option combination "[[bootstrap-server], [config]]" can\'t be used with option "[alter]" (the '
     'kafka-configs CLI supports altering topic configs with a --bootstrap-server option)'),
    (["--describe", "--partitions", "3"], 'Option "[partitions]" can\'t be used with option "[describe]"'),
    (["--describe", "--partitions", "0"], 'Option "[partitions]" can\'t be used with option "[describe]"'),
    (["--create", "--if-exists", "--partitions", "1"],
     'Option "[if-exists]" can\'t be used with option "[create]"'),
    (["--describe", "--under-replicated-partitions", "--topics-with-overrides"],
     'Option "[under-replicated-partitions]" can\'t be used with option "[topics-with-overrides]"'),
    (["--delete", "--exclude-internal"], 'Option "[exclude-internal]" can\'t be used with option "[delete]"'),
])
def test_option_combinations_kafka_refuses(tool, argv, message):
    r = tool("topics", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", *argv)
    assert (r.code, r.err) == (1, "Error while executing topic command : " + message + "\n")
