"""kafka-leader-election.sh against a three-broker ZooKeeper cluster, as an operator uses it
after a restart: leaders moved away from a broker that was down come back to their preferred
replicas only when asked (auto.leader.rebalance.enable=false here), with Kafka's output lines
and exit status; and its bad flags and files get Kafka's one-line messages."""
import json
import pathlib
import subprocess

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BIN = pathlib.Path(__file__).resolve().parents[2] / "bin"


def tool(*args):
    result = subprocess.run([str(BIN / "kafka-leader-election.sh"), *args], capture_output=True,
                            text=True, timeout=90)
    return result.returncode, result.stdout, result.stderr


def preferred_of(cluster, topic, partitions):
    data = json.loads(cluster._read(f"/brokers/topics/{topic}"))["partitions"]
    return {p: data[str(p)][0] for p in range(partitions)}


@pytest.mark.kafka_cluster_config({"auto.leader.rebalance.enable": "false"})
def test_preferred_election_brings_leaders_back_after_a_restart(kafka_cluster, tmp_path):
    cluster = kafka_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap(0)})
    admin.create_topics([NewTopic("elect", 3, 3)])["elect"].result(60)
    preferred = preferred_of(cluster, "elect", 3)
    victim = 1 if cluster.controller() != 1 else 2
    moved = sorted(p for p, b in preferred.items() if b == victim)
    assert moved
    cluster.stop(victim)
    cluster.wait_until(lambda: all(cluster.leader("elect", p) != victim for p in range(3)),
                       30, "leaders did not move")
    cluster.start(victim)
    for p in range(3):
        cluster.wait_for_isr("elect", p, [0, 1, 2], timeout=60)
    assert all(cluster.leader("elect", p) != victim for p in moved)     # no automatic move

    bootstrap = cluster.bootstrap_servers
    code, out, err = tool("--bootstrap-server", bootstrap, "--election-type", "preferred",
                          "--topic", "elect", "--partition", str(moved[0]))
    assert (code, err) == (0, "")
    assert out == f"Successfully completed leader election (PREFERRED) for partitions " \
                  f"elect-{moved[0]}\n"
    assert cluster.leader("elect", moved[0]) == victim
    code, out, err = tool("--bootstrap-server", bootstrap, "--election-type", "PREFERRED",
                          "--all-topic-partitions")
    assert code == 0, err
    rest = [f"elect-{p}" for p in moved[1:]]
    assert out == (f"Successfully completed leader election (PREFERRED) for partitions "
                   f"{', '.join(rest)}\n" if rest else "")
    assert all(cluster.leader("elect", p) == preferred[p] for p in range(3))

    election = tmp_path / "election.json"
    election.write_text(json.dumps({"partitions": [{"topic": "elect", "partition": 0},
                                                   {"topic": "nope", "partition": 0}]}))
    code, out, err = tool("--bootstrap-server", bootstrap, "--election-type", "preferred",
                          "--path-to-json-file", str(election))
    assert code == 1 and err == "1 replica(s) could not be elected\n"
    assert "Valid replica already elected for partitions elect-0\n" in out
    assert "Error completing leader election (PREFERRED) for partition: nope-0: org.apache." \
           "kafka.common.errors.UnknownTopicOrPartitionException: The partition does not " \
           "exist.\n" in out
    code, out, err = tool("--bootstrap-server", bootstrap, "--election-type", "unclean",
                          "--topic", "elect", "--partition", "0")
    assert (code, out) == (0, "Valid replica already elected for partitions elect-0\n")


@pytest.mark.parametrize("args,message", [
    (["--all-topic-partitions"], "Missing required option(s): election-type"),
    (["--election-type", "preferred"], "One and only one of the following options is "
                                       "required: topic, all-topic-partitions, "
                                       "path-to-json-file"),
    (["--election-type", "preferred", "--topic", "t"], "Missing required option(s): partition"),
    (["--election-type", "preferred", "--all-topic-partitions", "--partition", "1"],
     "Option partition is only allowed if topic is used"),
    # joptsimple's OptionArgumentConversionException (jopt-simple 5.0.4's message), raised
    # when the command reads the type: after the checks above
    (["--election-type", "sideways", "--all-topic-partitions"],
     "Cannot parse argument 'sideways' of option election-type"),
    (["--election-type", "sideways"], "One and only one of the following options is "
                                      "required: topic, all-topic-partitions, path-to-json-file"),
    (["--election-type", "unclean", "--topic", "t", "--partition", "x"],
     "Cannot parse argument 'x' of option partition"),
])
def test_bad_flags_get_kafkas_message(args, message):
    code, out, err = tool("--bootstrap-server", "127.0.0.1:1", *args)
    assert (code, out, err) == (1, "", message + "\n")


def test_both_required_options_missing_are_named():
    code, out, err = tool("--all-topic-partitions")
    assert (code, out, err) == (1, "", "Missing required option(s): bootstrap-server, "
                                       "election-type\n")


JACKSON = "com.fasterxml.jackson.databind.JsonMappingException"


def test_a_bad_election_file_is_named(tmp_path):
    path = tmp_path / "e.json"
    for text, message in (("", "Replica election data is empty"),
                          ("{not json", "Replica election data is empty"),    # Json.parseFull
                          ('{"x": 1}', "Replica election data is missing \"partitions\" field"),
                          ('{"partitions": [{"topic": "a", "partition": 0}, '
                           '{"topic": "a", "partition": 0}]}',
                           "Replica election data contains duplicate partitions: [a-0]"),
                          # JSON integers only: 1.9, true and "1" were taken as partition 1
                          ('{"partitions": [{"topic": "a", "partition": 1.9}]}',
                           f"{JACKSON}: Expected `Integer` value, received 1.9"),
                          ('{"partitions": [{"topic": "a", "partition": true}]}',
                           f"{JACKSON}: Expected `Integer` value, received true"),
                          ('{"partitions": [{"topic": "a", "partition": "1"}]}',
                           f'{JACKSON}: Expected `Integer` value, received "1"'),
                          ('{"partitions": [{"partition": 1}]}',
                           f"{JACKSON}: No such field exists: `topic`"),
                          ('{"partitions": {}}', f"{JACKSON}: Expected JSON array, received {{}}"),
                          ('[]', f"{JACKSON}: Expected JSON object, received []")):
        path.write_text(text)
        code, out, err = tool("--bootstrap-server", "127.0.0.1:1", "--election-type",
                              "preferred", "--path-to-json-file", str(path))
        assert (code, err) == (1, message + "\n")
    missing = tmp_path / "missing.json"         # Kafka names the file (Python's errno text did not)
    code, out, err = tool("--bootstrap-server", "127.0.0.1:1", "--election-type", "preferred",
                          "--path-to-json-file", str(missing))
    assert (code, err) == (1, f"java.nio.file.NoSuchFileException: {missing}\n")
    # a partition beyond Java's int is joptsimple's parse error, not a struct error
    code, out, err = tool("--bootstrap-server", "127.0.0.1:1", "--election-type", "preferred",
                          "--topic", "t", "--partition", "99999999999")
    assert (code, err) == (1, "Cannot parse argument '99999999999' of option partition\n")


def test_turning_unclean_election_on_elects_a_leader_at_once(kafka_cluster):
    """The usual runbook steps for a partition whose whole ISR is gone: setting the topic's
    unclean.leader.election.enable makes the controller elect an out-of-sync replica at once
    (Kafka's TopicConfigHandler), not at the next broker change; or, for one partition,
    kafka-leader-election.sh --election-type unclean."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
    cluster = kafka_cluster
    controller = cluster.controller()
    a, b = [x for x in sorted(cluster.brokers) if x != controller]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap(controller)})
    futures = admin.create_topics([NewTopic(t, 1, replica_assignment=[[a, b]])
                                   for t in ("unclean", "by-tool")])
    for future in futures.values():
        future.result(60)
    for topic in ("unclean", "by-tool"):
        cluster.wait_for_isr(topic, 0, [a, b])
    cluster.kill(b)
    for topic in ("unclean", "by-tool"):
        cluster.wait_until(lambda: cluster.isr(topic, 0) == [a], 30, f"{b} still in the ISR")
    cluster.kill(a)
    for topic in ("unclean", "by-tool"):
        cluster.wait_until(lambda: cluster.leader(topic, 0) == -1, 30, "a leader is left")
    # No replica alive: neither election can elect one; the tool names why and exits 1.
    bootstrap = cluster.bootstrap(controller)
    for election, strategy, exception in (
            ("preferred", "PreferredReplicaPartitionLeaderElectionStrategy",
             "PreferredLeaderNotAvailableException"),
            ("unclean", "OfflinePartitionLeaderElectionStrategy(true)",
             "EligibleLeadersNotAvailableException")):
        code, out, err = tool("--bootstrap-server", bootstrap, "--election-type", election,
                              "--topic", "unclean", "--partition", "0")
        assert (code, err) == (1, "1 replica(s) could not be elected\n"), (out, err)
        assert out == (f"Error completing leader election ({election.upper()}) for partition: "
                       f"unclean-0: org.apache.kafka.common.errors.{exception}: Failed to elect "
                       f"leader for partition unclean-0 under strategy {strategy}\n")
    assert cluster.leader("unclean", 0) == -1
    cluster.start(b)
    cluster.wait_for_brokers({controller, b})
    assert cluster.leader("unclean", 0) == -1          # out of sync, unclean election is off
    resource = ConfigResource("topic", "unclean", incremental_configs=[ConfigEntry(
        "unclean.leader.election.enable", "true",
        incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(60)
    cluster.wait_until(lambda: cluster.leader("unclean", 0) == b, 30,
                       "no leader after unclean election was enabled")
    assert cluster.leader("by-tool", 0) == -1
    code, out, err = tool("--bootstrap-server", bootstrap, "--election-type", "unclean",
                          "--topic", "by-tool", "--partition", "0")
    assert (code, out, err) == (0, "Successfully completed leader election (UNCLEAN) for "
                                   "partitions by-tool-0\n", "")
    assert cluster.leader("by-tool", 0) == b
