"""kafka-reassign-partitions.sh (broker/tools/reassign_partitions.py), as Kafka 3.9's
ReassignPartitionsCommand: its JSON formats and messages, --generate's placement over a fixed broker
list (with and without racks), the option checks (from Kafka's ReassignPartitionsCommandArgsTest),
then against a real three-broker ZooKeeper cluster: generate a plan, execute it with a throttle
(the throttle configs are set as Kafka sets them), verify until done (the throttles are cleared),
the data is intact; and an in-flight reassignment held by a paused broker is listed, refused
without --additional, and cancelled."""
import asyncio
import json
import pathlib
import subprocess
import time

import pytest

from broker.client.admin import RESOURCE_BROKER, RESOURCE_TOPIC, Admin
from broker.client.cluster import ClusterClient
from broker.client.types import TopicPartition as TP
from broker.controller.placement import BrokerMetadata
from broker.tools import reassign_partitions as rp

BIN = pathlib.Path(__file__).resolve().parents[2] / "bin"
DEAD = "127.0.0.1:1"            # nothing listens: input errors must come before any connection


class ZeroRandom:
    """An rng whose draws are all 0: start index 0 and shift 0, so placement is deterministic."""

    @staticmethod
    def randrange(n):
        return 0


# --- JSON formats and texts ----------------------------------------------------------------------

def test_current_assignment_text_is_kafkas():
    proposed = {TP("foo", 1): [1, 2, 3], TP("bar", 0): [7, 8, 9]}
    current = {TP("foo", 0): [1, 2, 3], TP("foo", 1): [4, 5, 6], TP("bar", 0): [7, 8],
               TP("baz", 0): [10, 11, 12]}
    assert rp.current_assignment_text(proposed, current) == "\n".join([
        "Current partition replica assignment",
        "",
        '{"version":1,"partitions":'
        '[{"topic":"bar","partition":0,"replicas":[7,8],"log_dirs":["any","any"]},'
        '{"topic":"foo","partition":1,"replicas":[4,5,6],"log_dirs":["any","any","any"]}]}',
        "",
        "Save this to use as the --reassignment-json-file option during rollback"])


def test_generate_text_and_round_trip():
    current = {TP("t", 1): [2, 0], TP("t", 0): [0, 1], TP("a", 0): [1]}
    proposed = {TP("t", 0): [1, 2], TP("t", 1): [2, 1], TP("a", 0): [2]}
    text = rp.generate_text(current, proposed)
    lines = text.split("\n")
    assert lines[0] == "Current partition replica assignment"
    assert lines[1] == ('{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[1],'
                        '"log_dirs":["any"]},{"topic":"t","partition":0,"replicas":[0,1],'
                        '"log_dirs":["any","any"]},{"topic":"t","partition":1,"replicas":[2,0],'
                        '"log_dirs":["any","any"]}]}')
    assert lines[2:4] == ["", "Proposed partition reassignment configuration"]
    assert lines[5:] == [""]
    parsed = rp.parse_execute_data(lines[4])
    assert parsed == (proposed, {})


def test_states_text_is_kafkas():
    states = {TP("foo", 0): ([1, 2, 3], [1, 2, 3], True),
              TP("foo", 1): ([1, 2, 3], [1, 2, 4], False),
              TP("bar", 0): ([1, 2, 3], [1, 2, 4], False),
              TP("baz", 2): ([3, 1], [1, 3], True),
              TP("baz", 9): ([], [1, 3], True)}
    assert rp.states_text(states) == "\n".join([
        "Status of partition reassignment:",
        "Reassignment of partition bar-0 is still in progress.",
        "There is no active reassignment of partition baz-2, but replica set is 3,1 rather "
        "than 1,3.",
        "There is no active reassignment of partition baz-9, but replica set is  rather than 1,3.",
        "Reassignment of partition foo-0 is completed.",
        "Reassignment of partition foo-1 is still in progress."])


def test_list_text_is_kafkas():
    assert rp.reassignments_text({}) == "No partition reassignments found."
    assert rp.reassignments_text({TP("foo", 1): ([1, 2, 3], [4, 5], [1, 2]),
                                  TP("foo", 0): ([0, 1, 2], [4], []),
                                  TP("bar", 0): ([2, 3, 0], [], [0])}) == "\n".join([
        "Current partition reassignments:",
        "bar-0: replicas: 2,3,0. removing: 0.",
        "foo-0: replicas: 0,1,2. adding: 4.",
        "foo-1: replicas: 1,2,3. adding: 4,5. removing: 1,2."])


def test_java_hash_order():
    # String.hashCode: "bar" 97299, "foo" 101574, "baz" 97307 -> buckets 2, 7, 10 of 16
    assert rp.java_hash_order(["foo", "baz", "bar"], rp.java_string_hash) == ["bar", "foo", "baz"]
    assert rp.java_hash_order([17, 1, 3, 17], rp.java_int_hash) == [17, 1, 3]   # same bucket 1
    # 13 elements grow the table to 32 buckets: 32..40 land in buckets 0..8, before 28..31
    assert rp.java_hash_order(list(range(40, 27, -1)), rp.java_int_hash) == (
        list(range(32, 41)) + list(range(28, 32)))
    assert rp.java_hash_order([101, 102, 103], rp.java_int_hash) == [101, 102, 103]


# --- parsing and its errors ----------------------------------------------------------------------

def test_parse_execute_data():
    doc = ('{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[1,2,3]},'
           '{"topic":"bar","partition":1,"replicas":[3,4],"log_dirs":["any","/tmp/x"]}]}')
    assert rp.parse_execute_data(doc) == ({TP("foo", 0): [1, 2, 3], TP("bar", 1): [3, 4]},
                                          {(TP("bar", 1), 4): "/tmp/x"})
    # Jackson's readTree ignores what follows the first value; "version" is optional
    assert rp.parse_reassignment_data('{"partitions":[]} trailing') == ([], {})


@pytest.mark.parametrize("doc,message", [
    ('{"version":1,"partitions":[]}', "Partition reassignment list cannot be empty"),
    ('{"partitions":[{"topic":"foo","partition":0,"replicas":[]}]}',
     "Partition replica list cannot be empty"),
    ('{"partitions":[{"topic":"foo","partition":0,"replicas":[1]},'
     '{"topic":"bar","partition":0,"replicas":[1]},{"topic":"foo","partition":0,"replicas":[2]},'
     '{"topic":"bar","partition":0,"replicas":[3]}]}',
     "Partition reassignment contains duplicate topic partitions: bar-0,foo-0"),   # Java's order
    ('{"partitions":[{"topic":"foo","partition":0,"replicas":[1,2,1]},'
     '{"topic":"bar","partition":0,"replicas":[3,17,1,17,3]}]}',
     "Partition replica lists may not contain duplicate entries: foo-0 contains multiple "
     "entries for 1. bar-0 contains multiple entries for 17,3"),
    ('{"partitions":[{"topic":"foo","partition":0,"replicas":[1,2],"log_dirs":["any"]}]}',
     "Size of replicas list [1, 2] is different from size of log dirs list [any] for "
     "partition foo-0"),
    ('{"version":2,"partitions":[]}', "Not supported version field value 2"),
    ('{"version":"1"}', 'Expected `Integer` value, received "1"'),
    ('[1]', "Expected JSON object, received [1]"),
    ('   \n', "Expected JSON object, received "),
    ('', "The input string shouldn't be empty"),
    ('{"partitions":{"topic":"foo"}}', 'Expected JSON array, received {"topic":"foo"}'),
    ('{"partitions":[{"partition":0,"replicas":[1]}]}', "No such field exists: `topic`"),
    ('{"partitions":[{"topic":5,"partition":0,"replicas":[1]}]}',
     "Expected `String` value, received 5"),
    ('{"partitions":[{"topic":"t","partition":1.0,"replicas":[1]}]}',
     "Expected `Integer` value, received 1.0"),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":[1,"2"]}]}',
     'Expected `Integer` value, received "2"'),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":1}]}',
     "Expected `JSON array` value, received 1"),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":null}]}',
     "Expected `JSON array` value, received null"),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":[3000000000]}]}',
     "Expected `Integer` value, received 3000000000"),
    ('{invalid_json', "Unexpected character ('i' (code 105)): was expecting double-quote to "
                      "start field name"),
    ('{"partitions": [1 2]}', "Unexpected character ('2' (code 50)): was expecting comma to "
                              "separate Array entries"),
    ('{"partitions": nope}', "Unrecognized token 'nope': was expecting (JSON String, Number, "
                             "Array, Object or token 'null', 'true' or 'false')"),
    ('{"partitions": [', "Unexpected end-of-input: expected close marker for Array"),
    ('{"a":1,}', "Unexpected character ('}' (code 125)): was expecting double-quote to start "
                 "field name"),
    ('{"a" 1}', "Unexpected character ('1' (code 49)): was expecting a colon to separate field "
                "name and value"),
    ('{"partitions":[1,]}', "Unexpected character (']' (code 93)): expected a valid value (JSON "
                            "String, Number, Array, Object or token 'null', 'true' or 'false')"),
    ('{"a":"x\ny"}', "Illegal unquoted character ((CTRL-CHAR, code 10)): has to be escaped using "
                     "backslash to be included in string value"),
    ('{"a":"abc', "Unexpected end-of-input: was expecting closing quote for a string value"),
    ('NaN', "Non-standard token 'NaN': enable `JsonReadFeature.ALLOW_NON_NUMERIC_NUMBERS` to "
            "allow"),
])
def test_reassignment_json_errors(doc, message):
    with pytest.raises(rp.Failure) as e:
        rp.parse_execute_data(doc)
    assert str(e.value) == message


def test_generate_args():
    assert rp.parse_generate_args('{"topics": [{"topic": "foo"}], "version":1}', "5,2,3,4") == (
        [5, 2, 3, 4], ["foo"])
    assert rp.parse_generate_args('{"topics": [{"topic": "foo"},{"topic": "bar"}]}', "5,+3,4,") \
        == ([5, 3, 4], ["foo", "bar"])
    assert rp.parse_generate_args("{}", "1") == ([1], [])
    assert rp.parse_generate_args("{}", ",,,") == ([], [])     # Java's split: no element left
    for brokers, topics, message in [
        ("5,2,3,4,5,2", '{"topics":[]}', "Broker list contains duplicate entries: [2, 5]"),
        ("1", '{"topics": [{"topic": "foo"},{"topic": "foo"}]}',
         "List of topics to reassign contains duplicate entries: [foo]"),
        ("1, 2", '{"topics":[]}', 'For input string: " 2"'),
        ("", '{"topics":[]}', 'For input string: ""'),
        ("1,x", '{"topics":[]}', 'For input string: "x"'),
        ("1", "{topics", "The input string is not a valid JSON"),
        ("1", "", "The input string is not a valid JSON"),
        ("1", '{"topics":[{"name":"foo"}]}', "No such field exists: `topic`"),
        ("1", '{"version":3}', "Not supported version field value 3"),
    ]:
        with pytest.raises(rp.Failure) as e:
            rp.parse_generate_args(topics, brokers)
        assert str(e.value) == message, (brokers, topics)


# --- --generate's proposal ------------------------------------------------------------------------

def test_proposal_without_racks_over_a_fixed_broker_list():
    current = {TP("foo", 0): [0, 1], TP("foo", 1): [1, 0], TP("foo", 2): [0, 1],
               TP("bar", 0): [0]}
    nodes = [(1, None), (2, None), (3, None), (0, None)]
    brokers = rp.broker_metadata(nodes, [1, 2, 3, 9], rack_aware=True)      # 9: not live
    assert brokers == [BrokerMetadata(1), BrokerMetadata(2), BrokerMetadata(3)]
    proposed = rp.calculate_assignment(current, brokers, ZeroRandom())
    # Kafka's round robin from start index 0, followers one place on (shift 0)
    assert proposed == {TP("foo", 0): [1, 2], TP("foo", 1): [2, 3], TP("foo", 2): [3, 1],
                        TP("bar", 0): [1]}
    for _ in range(20):                 # with random start: only the listed brokers, same RF
        proposed = rp.calculate_assignment(current, brokers)
        assert {tp: len(r) for tp, r in proposed.items()} == {tp: len(r) for tp, r in
                                                              current.items()}
        assert all(set(r) <= {1, 2, 3} and len(set(r)) == len(r) for r in proposed.values())


def test_proposal_with_racks_spreads_each_partition_over_the_racks():
    nodes = [(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c")]
    current = {TP("foo", p): [1, 2] for p in range(4)}
    brokers = rp.broker_metadata(nodes, [1, 2, 3, 4], rack_aware=True)
    # rack-alternated list 1(a),3(b),2(a),4(b); followers skip a rack that already has one
    assert rp.calculate_assignment(current, brokers, ZeroRandom()) == {
        TP("foo", 0): [1, 3], TP("foo", 1): [3, 2], TP("foo", 2): [2, 4], TP("foo", 3): [4, 1]}
    racks = dict(nodes)
    for _ in range(20):
        proposed = rp.calculate_assignment(current, brokers)
        assert all({racks[b] for b in r} == {"a", "b"} for r in proposed.values())
    # --disable-rack-aware: plain round robin in the cluster's broker order
    brokers = rp.broker_metadata(nodes, [1, 2, 3, 4], rack_aware=False)
    assert rp.calculate_assignment(current, brokers, ZeroRandom()) == {
        TP("foo", 0): [1, 2], TP("foo", 1): [2, 3], TP("foo", 2): [3, 4], TP("foo", 3): [4, 1]}


def test_proposal_errors_are_kafkas():
    nodes = [(0, "rack0"), (1, "rack0"), (2, None), (3, "rack1")]
    with pytest.raises(rp.Failure) as e:
        rp.broker_metadata(nodes, [0, 1, 2, 3], rack_aware=True)
    assert str(e.value) == ("Not all brokers have rack information. Add --disable-rack-aware in "
                            "command line to make replica assignment without rack information.")
    assert rp.broker_metadata(nodes, [0, 1, 3], rack_aware=True)[0] == BrokerMetadata(0, "rack0")
    brokers = rp.broker_metadata(nodes, [0, 1, 7], rack_aware=False)
    with pytest.raises(rp.Failure) as e:
        rp.calculate_assignment({TP("foo", 0): [0, 1, 2]}, brokers)
    assert str(e.value) == "Replication factor: 3 larger than available brokers: 2."


# --- throttles ------------------------------------------------------------------------------------

def test_move_map_and_throttles_as_kafkas_test():
    reassigning = {TP("foo", 0): ([1, 2, 3, 4], [4], [3]),
                   TP("foo", 1): ([4, 5, 6, 7, 8], [7, 8], [4, 5]),
                   TP("foo", 2): ([1, 2, 3, 4], [3, 4], [1, 2]),
                   TP("foo", 3): ([1, 2, 3, 4], [3, 4], [1, 2]),
                   TP("foo", 4): ([1, 2, 3, 4], [3, 4], [1, 2]),
                   TP("foo", 5): ([1, 2, 3, 4], [3, 4], [1, 2])}
    proposed = {TP("foo", 0): [1, 2, 5], TP("foo", 2): [3, 4], TP("foo", 3): [5, 6],
                TP("foo", 4): [3], TP("foo", 5): [3, 4, 5, 6], TP("bar", 0): [1, 2, 3]}
    current = {TP("foo", 0): [1, 2, 3, 4], TP("foo", 1): [4, 5, 6, 7, 8],
               TP("foo", 2): [1, 2, 3, 4], TP("foo", 3): [1, 2, 3, 4], TP("foo", 4): [1, 2, 3, 4],
               TP("foo", 5): [1, 2, 3, 4], TP("bar", 0): [2, 3, 4], TP("baz", 0): [1, 2, 3]}
    moves = rp.proposed_move_map(reassigning, proposed, current)
    assert moves == {"foo": {0: ({1, 2, 3}, {5}), 1: ({4, 5, 6}, {7, 8}), 2: ({1, 2}, {3, 4}),
                             3: ({1, 2}, {5, 6}), 4: ({1, 2}, {3}), 5: ({1, 2}, {3, 4, 5, 6})},
                     "bar": {0: ({2, 3, 4}, {1})}}
    assert rp.leader_throttles(moves) == {
        "foo": "0:1,0:2,0:3,1:4,1:5,1:6,2:1,2:2,3:1,3:2,4:1,4:2,5:1,5:2", "bar": "0:2,0:3,0:4"}
    assert rp.follower_throttles(moves) == {
        "foo": "0:5,1:7,1:8,2:3,2:4,3:5,3:6,4:3,5:3,5:4,5:5,5:6", "bar": "0:1"}
    assert rp.reassigning_brokers(moves) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_throttle_lists_sort_as_strings():
    moves = rp.proposed_move_map({}, {TP("t", 10): [1, 3], TP("t", 2): [1, 3]},
                                 {TP("t", 10): [1, 2], TP("t", 2): [2, 1]})
    assert rp.leader_throttles(moves) == {"t": "10:1,10:2,2:1,2:2"}
    assert rp.follower_throttles(moves) == {"t": "10:3,2:3"}


class FakeTool:
    """The admin side of --cancel: listed reassignments in, cancelled partitions recorded."""

    def __init__(self, listed):
        self.listed, self.cancelled = listed, None

    async def list_reassignments(self, partitions=None):
        return {tp: r for tp, r in self.listed.items() if partitions is None or tp in partitions}

    async def alter_reassignments(self, targets):
        self.cancelled = targets
        return {}


def test_cancel_skips_pure_additions_as_kafka_39_does(capsys):
    fake = FakeTool({TP("t", 0): ([1, 2], [2], []),            # adding only: left alone
                     TP("t", 1): ([3, 1, 2], [3], [2]),        # moving
                     TP("u", 0): ([1, 2], [], [2])})           # removing only
    targets = [(TP("t", 0), [1, 2]), (TP("t", 1), [3, 1]), (TP("u", 0), [1])]
    asyncio.run(rp.cancel(fake, targets, preserve_throttles=True))
    assert fake.cancelled == {TP("t", 1): None, TP("u", 0): None}
    assert capsys.readouterr().out == ("Successfully cancelled partition reassignments for: "
                                       "t-1,u-0\nNone of the specified partition moves are active.")


# --- options and input errors (no broker needed) --------------------------------------------------

def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("args,message", [
    ([" "], "Command must include exactly one action: --generate, --execute, --verify, "
            "--cancel, --list"),
    (["--bootstrap-server", DEAD, "--execute", "--verify", "--reassignment-json-file", "f"],
     "Command must include exactly one action: --generate, --execute, --verify, --cancel, "
     "--list"),
    (["--execute"], "Please specify --bootstrap-server"),
    (["--cancel"], "Please specify --bootstrap-server"),
    (["--bootstrap-server", DEAD, "--execute"],
     'Missing required argument "[reassignment-json-file]"'),
    (["--bootstrap-server", DEAD, "--generate"],
     'Missing required argument "[topics-to-move-json-file]"'),
    (["--bootstrap-server", DEAD, "--topics-to-move-json-file", "f", "--generate"],
     'Missing required argument "[broker-list]"'),
    (["--bootstrap-server", DEAD, "--verify"],
     'Missing required argument "[reassignment-json-file]"'),
    (["--cancel", "--bootstrap-server", DEAD, "--preserve-throttles"],
     'Missing required argument "[reassignment-json-file]"'),
    (["--bootstrap-server", DEAD, "--execute", "--reassignment-json-file", "f",
      "--topics-to-move-json-file", "f"],
     'Option "[topics-to-move-json-file]" can\'t be used with action "[execute]"'),
    (["--bootstrap-server", DEAD, "--execute", "--reassignment-json-file", "f",
      "--broker-list", "101,102"], 'Option "[broker-list]" can\'t be used with action "[execute]"'),
    (["--bootstrap-server", DEAD, "--generate", "--broker-list", "101,102", "--throttle", "100",
      "--topics-to-move-json-file", "f"],
     'Option "[throttle]" can\'t be used with action "[generate]"'),
    (["--bootstrap-server", DEAD, "--generate", "--broker-list", "101,102",
      "--topics-to-move-json-file", "f", "--reassignment-json-file", "f"],
     'Option "[reassignment-json-file]" can\'t be used with action "[generate]"'),
    (["--bootstrap-server", DEAD, "--verify", "--broker-list", "100,101",
      "--reassignment-json-file", "f"],
     'Option "[broker-list]" can\'t be used with action "[verify]"'),
    (["--bootstrap-server", DEAD, "--verify", "--throttle=100", "--reassignment-json-file", "f"],
     'Option "[throttle]" can\'t be used with action "[verify]"'),
    (["--list", "--bootstrap-server", DEAD, "--additional", "--timeout", "5"],
     'Option "[additional]" can\'t be used with action "[list]"'),
    (["--bootstrap-server", DEAD, "--execute", "--reassignment-json-file", "f", "--throttle",
      "10MB"], "Cannot parse argument '10MB' of option throttle"),
    (["--bootstrap-server", DEAD, "--cancel", "--reassignment-json-file", "f", "--timeout",
      "1.5"], "Cannot parse argument '1.5' of option timeout"),
])
def test_bad_options_get_kafkas_message(tool, args, message):
    r = tool("reassign_partitions", *args)
    assert (r.code, r.out, r.err) == (1, "", message + "\n")


def test_no_arguments_print_the_help_and_fail(tool):
    r = tool("reassign_partitions")
    assert r.code == 1 and r.out == ""
    assert rp.HELP_TEXT in r.err and "--reassignment-json-file" in r.err


def test_input_errors_come_before_connecting(tool, tmp_path):
    plan = write(tmp_path, "plan.json", '{"partitions":[{"topic":"t","partition":0,'
                                        '"replicas":[1,1]}]}')
    r = tool("reassign_partitions", "--bootstrap-server", DEAD, "--execute",
             "--reassignment-json-file", plan)
    assert (r.code, r.out, r.err) == (1, "", "Error: Partition replica lists may not contain "
                                             "duplicate entries: t-0 contains multiple entries "
                                             "for 1\n")
    bad = write(tmp_path, "bad.json", "{invalid_json")
    r = tool("reassign_partitions", "--bootstrap-server", DEAD, "--verify",
             "--reassignment-json-file", bad)
    assert r.code == 1 and r.err.startswith("Error: Unexpected character")
    assert r.err.count("\n") == 1
    topics = write(tmp_path, "topics.json", '{"topics":[{"topic":"t"}]}')
    r = tool("reassign_partitions", "--bootstrap-server", DEAD, "--generate",
             "--topics-to-move-json-file", topics, "--broker-list", "1,1")
    assert (r.code, r.err) == (1, "Error: Broker list contains duplicate entries: [1]\n")
    r = tool("reassign_partitions", "--bootstrap-server", DEAD, "--cancel",
             "--reassignment-json-file", str(tmp_path / "missing.json"))
    assert (r.code, r.out) == (1, "")
    assert r.err == f"Error: {tmp_path / 'missing.json'}: No such file or directory\n"
    r = tool("reassign_partitions", "--bootstrap-server", DEAD, "--list")
    assert r.code == 1 and r.err.startswith("Error: Could not connect") and r.err.count("\n") == 1


def test_log_dirs_other_than_any_are_refused(tool, tmp_path):
    plan = write(tmp_path, "plan.json", json.dumps({"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "/data/d2"]}]}))
    expected = ('Error: log_dirs other than "any" are not supported (partition t-0 on broker 2: '
                "/data/d2): moving a replica to a log directory needs AlterReplicaLogDirs, which "
                "this broker does not serve\n")
    for action in ("--execute", "--verify", "--cancel"):
        r = tool("reassign_partitions", "--bootstrap-server", DEAD, action,
                 "--reassignment-json-file", plan)
        assert (r.code, r.out, r.err) == (1, "", expected), action


# --- against a three-broker ZooKeeper cluster -----------------------------------------------------

def script(*args):
    r = subprocess.run([str(BIN / "kafka-reassign-partitions.sh"), *map(str, args)],
                       capture_output=True, text=True, timeout=90)
    return r.returncode, r.stdout, r.stderr


def admin_call(bootstrap, method, *args, **kwargs):
    async def call():
        async with ClusterClient(bootstrap) as cluster:
            return await getattr(Admin(cluster), method)(*args, **kwargs)
    return asyncio.run(call())


def dynamic_configs(bootstrap, resource_type, name):
    result = admin_call(bootstrap, "describe_configs", resource_type, name)
    return {c.name: c.value for c in result.configs if c.config_source in (1, 2)}


def replicas_of(cluster, topic, partition):
    return json.loads(cluster._read(f"/brokers/topics/{topic}"))["partitions"][str(partition)]


def produce(bootstrap, topic, partitions, n):
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for p in range(partitions):
        for i in range(n):
            producer.produce(topic, f"{p}-{i}".encode() * 10, partition=p)
    assert producer.flush(60) == 0


def consume(bootstrap, topic, partition, n, timeout=30):
    from confluent_kafka import Consumer, TopicPartition as CTP
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g{time.monotonic()}",
                         "enable.auto.commit": False})
    consumer.assign([CTP(topic, partition, 0)])
    values, deadline = [], time.monotonic() + timeout
    try:
        while len(values) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                values.append(msg.value())
    finally:
        consumer.close()
    return values


def create(bootstrap, topic, assignment):
    from confluent_kafka.admin import AdminClient, NewTopic
    client = AdminClient({"bootstrap.servers": bootstrap})     # alive until the result is in
    client.create_topics([NewTopic(topic, len(assignment), replica_assignment=assignment)]
                         )[topic].result(60)


@pytest.mark.integration
@pytest.mark.slow
def test_generate_execute_with_throttle_verify_and_the_data_is_intact(kafka_cluster, tool,
                                                                      tmp_path):
    cluster = kafka_cluster
    bootstrap = cluster.bootstrap_servers
    create(bootstrap, "moving", [[0, 1], [1, 0]])
    cluster.wait_for_isr("moving", 1, [1, 0])
    produce(bootstrap, "moving", 2, 1000)

    topics = write(tmp_path, "topics.json", '{"topics": [{"topic": "moving"}], "version": 1}')
    code, out, err = script("--bootstrap-server", bootstrap, "--generate",
                            "--topics-to-move-json-file", topics, "--broker-list", "1,2")
    assert (code, err) == (0, ""), err
    lines = out.split("\n")
    current_json = ('{"version":1,"partitions":[{"topic":"moving","partition":0,"replicas":[0,1],'
                    '"log_dirs":["any","any"]},{"topic":"moving","partition":1,"replicas":[1,0],'
                    '"log_dirs":["any","any"]}]}')
    assert lines[:4] == ["Current partition replica assignment", current_json, "",
                         "Proposed partition reassignment configuration"]
    assert lines[5:] == [""]
    plan_doc = json.loads(lines[4])
    proposal = {p["partition"]: p["replicas"] for p in plan_doc["partitions"]}
    assert sorted(proposal) == [0, 1] and all(sorted(r) == [1, 2] for r in proposal.values())
    plan = write(tmp_path, "plan.json", lines[4])

    # --generate: unknown brokers are left out (Kafka's behaviour); too few left, its error
    r = tool("reassign_partitions", "--bootstrap-server", bootstrap, "--generate",
             "--topics-to-move-json-file", topics, "--broker-list", "2,9", "--disable-rack-aware")
    assert (r.code, r.err) == (1, "Error: Replication factor: 2 larger than available brokers: "
                                  "1.\n")
    r = tool("reassign_partitions", "--bootstrap-server", bootstrap, "--generate",
             "--topics-to-move-json-file", write(tmp_path, "nope.json",
                                                 '{"topics":[{"topic":"nope"}]}'),
             "--broker-list", "0,1")
    assert (r.code, r.err) == (1, "Error: org.apache.kafka.common.errors."
                                  "UnknownTopicOrPartitionException: Topic nope not found.\n")
    # --execute: unknown brokers and partitions are refused before anything changes
    for doc, message in [
        ([{"topic": "moving", "partition": 0, "replicas": [1, 9]}], "Unknown broker id 9"),
        ([{"topic": "moving", "partition": 7, "replicas": [1, 2]}],
         "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: Unable to find "
         "partition: moving-7"),
    ]:
        bad = write(tmp_path, "bad.json", json.dumps({"version": 1, "partitions": doc}))
        r = tool("reassign_partitions", "--bootstrap-server", bootstrap, "--execute",
                 "--reassignment-json-file", bad, "--throttle", "1000")
        assert (r.code, r.out, r.err) == (1, "", f"Error: {message}\n")
    assert dynamic_configs(bootstrap, RESOURCE_TOPIC, "moving") == {}

    code, out, err = script("--bootstrap-server", bootstrap, "--execute",
                            "--reassignment-json-file", plan, "--throttle", "50000000")
    assert (code, err) == (0, ""), err
    assert out == "\n".join([
        "Current partition replica assignment", "", current_json, "",
        "Save this to use as the --reassignment-json-file option during rollback",
        "Warning: You must run --verify periodically, until the reassignment completes, to "
        "ensure the throttle is removed.",
        "The inter-broker throttle limit was set to 50000000 B/s",
        "Successfully started partition reassignments for moving-0,moving-1", ""])
    # Kafka's throttles: leader = the current replicas, follower = the new one, rates on all
    assert dynamic_configs(bootstrap, RESOURCE_TOPIC, "moving") == {
        "leader.replication.throttled.replicas": "0:0,0:1,1:0,1:1",
        "follower.replication.throttled.replicas": "0:2,1:2"}
    for broker in (0, 1, 2):
        assert dynamic_configs(bootstrap, RESOURCE_BROKER, str(broker)) == {
            "leader.replication.throttled.rate": "50000000",
            "follower.replication.throttled.rate": "50000000"}

    deadline = time.monotonic() + 60
    while True:
        r = tool("reassign_partitions", "--bootstrap-server", bootstrap, "--verify",
                 "--reassignment-json-file", plan)
        assert (r.code, r.err) == (0, ""), r
        if "still in progress" not in r.out:
            break
        assert r.out.endswith("\n\n") and "Clearing" not in r.out       # throttles stay
        assert time.monotonic() < deadline, r
        time.sleep(0.5)
    assert r.out == "\n".join([
        "Status of partition reassignment:",
        "Reassignment of partition moving-0 is completed.",
        "Reassignment of partition moving-1 is completed.",
        "",
        "Clearing broker-level throttles on brokers 0,1,2",
        "Clearing topic-level throttles on topic moving", ""])
    assert dynamic_configs(bootstrap, RESOURCE_TOPIC, "moving") == {}
    for broker in (0, 1, 2):
        assert dynamic_configs(bootstrap, RESOURCE_BROKER, str(broker)) == {}
    for p in (0, 1):
        assert replicas_of(cluster, "moving", p) == proposal[p]
        cluster.wait_for_isr("moving", p, proposal[p])
        expected = [f"{p}-{i}".encode() * 10 for i in range(1000)]
        assert consume(cluster.bootstrap(2), "moving", p, 1000) == expected
    r = tool("reassign_partitions", "--bootstrap-server", bootstrap, "--list")
    assert (r.code, r.out, r.err) == (0, "No partition reassignments found.\n", "")


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.kafka_cluster_config({"zookeeper.session.timeout.ms": 20000})
def test_an_inflight_reassignment_is_listed_refused_and_cancelled(kafka_cluster, tool, tmp_path):
    cluster = kafka_cluster
    controller = cluster.controller()
    target = max({0, 1, 2} - {controller})          # paused: never the controller, never 0
    source, kept = sorted({0, 1, 2} - {target})
    bootstrap = cluster.bootstrap(0)
    create(bootstrap, "held", [[source, kept]])
    cluster.wait_for_isr("held", 0, [source, kept])
    produce(bootstrap, "held", 1, 500)
    plan = write(tmp_path, "plan.json", json.dumps(
        {"version": 1, "partitions": [{"topic": "held", "partition": 0,
                                       "replicas": [target, kept]}]}))

    def run(*args):
        return tool("reassign_partitions", "--bootstrap-server", bootstrap, *args)

    cluster.pause(target)                           # the new replica cannot catch up
    try:
        r = run("--execute", "--reassignment-json-file", plan)
        assert (r.code, r.err) == (0, ""), r
        assert r.out.endswith("Successfully started partition reassignment for held-0\n")
        r = run("--list")
        assert r.out == (f"Current partition reassignments:\nheld-0: replicas: "
                         f"{target},{kept},{source}. adding: {target}. removing: {source}.\n")
        r = run("--execute", "--reassignment-json-file", plan)
        assert (r.code, r.out) == (1, "")
        assert r.err == rp.CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE + "\n"
        r = run("--verify", "--reassignment-json-file", plan)
        assert (r.code, r.out) == (0, "Status of partition reassignment:\nReassignment of "
                                      "partition held-0 is still in progress.\n\n")
        r = run("--cancel", "--reassignment-json-file", plan, "--preserve-throttles")
        assert (r.code, r.err) == (0, "")
        assert r.out == ("Successfully cancelled partition reassignment for: held-0\n"
                         "None of the specified partition moves are active.")   # Kafka 3.9's
    finally:
        cluster.resume(target)
    # Back to the original replicas, in the order Kafka's controller gives them: its "origin"
    # is the reassigning set (target first) minus the adding replicas.
    assert replicas_of(cluster, "held", 0) == [kept, source]
    r = run("--list")
    assert r.out == "No partition reassignments found.\n"
    r = run("--verify", "--reassignment-json-file", plan)
    assert r.out == "\n".join([
        "Status of partition reassignment:",
        f"There is no active reassignment of partition held-0, but replica set is {kept},{source} "
        f"rather than {target},{kept}.",
        "",
        "Clearing broker-level throttles on brokers 0,1,2",
        "Clearing topic-level throttles on topic held", ""])
    r = run("--cancel", "--reassignment-json-file", plan)
    assert (r.code, r.err) == (0, "")
    assert r.out == ("None of the specified partition reassignments are active.\n"
                     "None of the specified partition moves are active.Clearing broker-level "
                     "throttles on brokers 0,1,2\nClearing topic-level throttles on topic held\n")
    assert len(consume(bootstrap, "held", 0, 500)) == 500
