"""kafka-reassign-partitions.sh (broker/tools/reassign_partitions.py), as Kafka 3.9's
ReassignPartitionsCommand: its JSON formats and messages, --generate's placement over a fixed broker
list (with and without racks), the option checks (from Kafka's ReassignPartitionsCommandArgsTest),
then against a real three-broker ZooKeeper cluster: generate a plan, execute it with a throttle
(the throttle configs are set as Kafka sets them), verify until done (the throttles are cleared),
the data is intact; and an in-flight reassignment held by a paused broker is listed, refused
without --additional, and cancelled. Log-directory moves: Kafka's move states and texts, the
retries of --execute and its timeout, --verify and --cancel over a fake admin, then against one
broker with two log dirs: a throttled move in progress, cancelled, then run to completion."""
import asyncio
import json
import os
import pathlib
import subprocess
import time

import pytest

from broker.client.admin import RESOURCE_BROKER, RESOURCE_TOPIC, Admin
from broker.client.cluster import ClusterClient
from broker.client.types import TopicPartition as TP
from broker.controller.placement import BrokerMetadata
from broker.tools import javautil, reassign_partitions as rp

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
    assert javautil.java_hash_order(["foo", "baz", "bar"], javautil.java_string_hash) == ["bar", "foo", "baz"]
    assert javautil.java_hash_order([17, 1, 3, 17], javautil.java_int_hash) == [17, 1, 3]   # same bucket 1
    # 13 elements grow the table to 32 buckets: 32..40 land in buckets 0..8, before 28..31
    assert javautil.java_hash_order(list(range(40, 27, -1)), javautil.java_int_hash) == (
        list(range(32, 41)) + list(range(28, 32)))
    assert javautil.java_hash_order([101, 102, 103], javautil.java_int_hash) == [101, 102, 103]


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


# --- log-directory moves -------------------------------------------------------------------------

def test_replica_move_states_text_is_kafkas():
    # Kafka's ReassignPartitionsUnitTest.testReplicaMoveStatesToString
    states = {(TP("bar", 0), 0): rp.CompletedMoveState("/tmp/kafka-logs0"),
              (TP("foo", 0), 0): rp.ActiveMoveState("/tmp/kafka-logs0", "/tmp/kafka-logs1",
                                                    "/tmp/kafka-logs1"),
              (TP("foo", 1), 0): rp.CancelledMoveState("/tmp/kafka-logs0", "/tmp/kafka-logs1"),
              (TP("quux", 0), 0): rp.MissingReplicaMoveState("/tmp/kafka-logs1"),
              (TP("quux", 1), 1): rp.ActiveMoveState("/tmp/kafka-logs0", "/tmp/kafka-logs1",
                                                     "/tmp/kafka-logs2"),
              (TP("quux", 2), 1): rp.MissingLogDirMoveState("/tmp/kafka-logs1")}
    assert rp.replica_move_states_text(states) == "\n".join([
        "Reassignment of replica bar-0-0 completed successfully.",
        "Reassignment of replica foo-0-0 is still in progress.",
        "Partition foo-1 on broker 0 is not being moved from log dir /tmp/kafka-logs0 to "
        "/tmp/kafka-logs1.",
        "Partition quux-0 cannot be found in any live log directory on broker 0.",
        "Partition quux-1 on broker 1 is being moved to log dir /tmp/kafka-logs2 instead of "
        "/tmp/kafka-logs1.",
        "Partition quux-2 is not found in any live log dir on broker 1. There is likely an "
        "offline log directory on the broker."])
    assert rp.replica_move_states_text({}) == ""
    # sorted by broker first, then topic and partition
    assert rp.replica_move_states_text({(TP("a", 0), 2): rp.CompletedMoveState("/d"),
                                        (TP("b", 0), 1): rp.CompletedMoveState("/d")}) == (
        "Reassignment of replica b-0-1 completed successfully.\n"
        "Reassignment of replica a-0-2 completed successfully.")


def test_log_dir_move_states_as_kafkas():
    targets = {(TP("bar", 0), 0): "/l0", (TP("foo", 0), 0): "/l1", (TP("foo", 1), 0): "/l1",
               (TP("quux", 1), 0): "/l1", (TP("quuz", 0), 0): "/l0", (TP("x", 0), 3): "/l1"}
    infos = {(TP("bar", 0), 0): ("/l0", None), (TP("foo", 0), 0): ("/l0", "/l1"),
             (TP("foo", 1), 0): ("/l0", None), (TP("quux", 1), 0): (None, None),
             (TP("x", 0), 3): ("/l0", "/l2")}
    states = rp.log_dir_move_states(targets, infos)
    assert states == {(TP("bar", 0), 0): rp.CompletedMoveState("/l0"),
                      (TP("foo", 0), 0): rp.ActiveMoveState("/l0", "/l1", "/l1"),
                      (TP("foo", 1), 0): rp.CancelledMoveState("/l0", "/l1"),
                      (TP("quux", 1), 0): rp.MissingLogDirMoveState("/l1"),
                      (TP("quuz", 0), 0): rp.MissingReplicaMoveState("/l0"),
                      (TP("x", 0), 3): rp.ActiveMoveState("/l0", "/l1", "/l2")}
    assert {r for r, st in states.items() if st.done} == {(TP("bar", 0), 0), (TP("foo", 1), 0)}
    assert rp.CompletedMoveState("/l0") != rp.MissingLogDirMoveState("/l0")
    assert rp.moving_brokers(targets) == [0, 3]


def test_replica_log_dirs_read_describe_log_dirs_as_kafkas_client():
    from protocol.errors import ErrorCode
    from protocol.messages.describe_log_dirs import DescribeLogDirsResponse as R

    def result(log_dir, parts, error=0):
        return R.DescribeLogDirsResult(error_code=error, log_dir=log_dir, topics=[
            R.DescribeLogDirsTopic(name=t, partitions=[
                R.DescribeLogDirsPartition(partition_index=p, is_future_key=future)])
            for t, p, future in parts])
    asked = [TP("t", 0), TP("t", 1), TP("t", 2), TP("u", 0)]
    results = [result("/a", [("t", 0, False), ("t", 1, False), ("t", 9, False)]),
               result("/b", [("t", 0, True), ("u", 0, False)]),
               result("/c", [("t", 2, False)], error=ErrorCode.KAFKA_STORAGE_ERROR)]
    assert rp.replica_log_dirs(1, asked, results) == {
        TP("t", 0): ("/a", "/b"), TP("t", 1): ("/a", None), TP("t", 2): (None, None),
        TP("u", 0): ("/b", None)}
    with pytest.raises(rp.Failure) as e:
        rp.replica_log_dirs(1, asked, [result("/x", [], error=ErrorCode.UNKNOWN_SERVER_ERROR)])
    assert str(e.value) == ("java.lang.IllegalStateException: The error org.apache.kafka.common."
                            "errors.UnknownServerException for log directory /x in the response "
                            "from broker 1 is illegal")


def test_started_moves_skip_unavailable_replicas_and_fail_on_other_errors():
    from protocol.errors import ErrorCode
    a, b, c = (TP("foo", 0), 0), (TP("quux", 1), 0), (TP("bar", 2), 1)
    assert rp.started_moves({a: ErrorCode.NONE, b: ErrorCode.REPLICA_NOT_AVAILABLE}) == [a]
    for failed in (ErrorCode.LOG_DIR_NOT_FOUND, ErrorCode.KAFKA_STORAGE_ERROR, None):
        with pytest.raises(rp.Failure) as e:
            rp.started_moves({a: ErrorCode.NONE, c: failed})
        assert str(e.value) == "Failed to alter dir for bar-2-1"
    # several failures: the first in the order of Kafka's result map (a Java HashMap) is named
    assert rp.java_replica_hash(a) == (31 * (31 * (31 + javautil.java_string_hash("foo"))) + 0)
    order = javautil.java_hash_order([a, b, c], rp.java_replica_hash, javautil.map_copy_capacity(3))
    with pytest.raises(rp.Failure) as e:
        rp.started_moves({a: None, b: None, c: None})
    assert str(e.value) == f"Failed to alter dir for {rp.replica_name(order[0])}"
    assert [javautil.map_copy_capacity(n) for n in (1, 2, 3, 6, 12, 13)] == [2, 4, 8, 16, 32, 32]


class MoveTool:
    """The admin side of the log-directory moves: AlterReplicaLogDirs answers scripted per call
    (a replica missing from a script answers NONE), DescribeLogDirs answers fixed, config
    changes recorded, plus what --execute and --cancel ask of the partitions."""

    def __init__(self, alter_scripts=(), infos=None, listed=None):
        self.alter_scripts, self.infos = list(alter_scripts), infos or {}
        self.listed = listed or {}
        self.altered, self.configs, self.cleared, self.reassigned = [], [], 0, None

    async def alter_replica_log_dirs(self, moves):
        self.altered.append(dict(moves))
        script = self.alter_scripts.pop(0) if self.alter_scripts else {}
        from protocol.errors import ErrorCode
        return {r: script.get(r, ErrorCode.NONE) for r in moves}

    async def describe_replica_log_dirs(self, replicas):
        return {r: self.infos.get(r, (None, None)) for r in replicas}

    async def list_reassignments(self, partitions=None):
        return {tp: r for tp, r in self.listed.items() if partitions is None or tp in partitions}

    async def nodes(self):
        return [(0, None), (1, None), (2, None)]

    async def assignment_for_partitions(self, partitions):
        return {tp: [0, 1] for tp in partitions}

    async def alter_configs(self, resource_type, name, ops):
        self.configs.append((resource_type, name, ops))

    async def alter_reassignments(self, targets):
        self.reassigned = targets
        return {}

    async def clear_all_throttles(self, targets):
        self.cleared += 1
        print("Clearing ...")


def test_execute_sets_the_log_dir_throttle_and_starts_the_moves_after_the_reassignment(capsys):
    from protocol.errors import ErrorCode
    unavailable = (TP("t", 0), 2)
    moves = {(TP("t", 0), 1): "/d1", unavailable: "/d2", (TP("t", 1), 0): "/d1"}
    fake = MoveTool(alter_scripts=[{unavailable: ErrorCode.REPLICA_NOT_AVAILABLE}] * 2)
    asyncio.run(rp.execute(fake, {TP("t", 0): [1, 2], TP("t", 1): [0, 1]}, False, -1, 2000,
                           moves, 10000))
    # only the brokers with a log-directory move get the throttle
    assert fake.configs == [(rp.RESOURCE_BROKER, str(b), [(rp.LOG_DIRS_RATE, rp.OP_SET, "2000")])
                            for b in (0, 1, 2)]
    assert fake.reassigned == {TP("t", 0): [1, 2], TP("t", 1): [0, 1]}
    # t-0 on broker 2 is not there yet: retried until it is
    assert fake.altered == [moves, {unavailable: "/d2"}, {unavailable: "/d2"}]
    out = capsys.readouterr().out.split("\n")
    assert out[5:] == [
        rp.YOU_MUST_RUN_VERIFY_PERIODICALLY_MESSAGE,
        "The replica-alter-dir throttle limit was set to 2000 B/s",
        "Successfully started partition reassignments for t-0,t-1",
        "Successfully started moving log directory to /d1 for replica t-1 with broker 0 ",
        "Successfully started moving log directory to /d1 for replica t-0 with broker 1 ",
        "Successfully started moving log directory to /d2 for replica t-0 with broker 2 ", ""]
    # the throttle option with no log-directory move: only the message, as Kafka
    fake = MoveTool()
    asyncio.run(rp.execute(fake, {TP("t", 0): [1, 2]}, False, -1, 2000, {}, 10000))
    assert fake.configs == [] and fake.altered == []
    assert "The replica-alter-dir throttle limit was set to 2000 B/s" in capsys.readouterr().out


def test_execute_moves_time_out_as_kafkas(capsys):
    from protocol.errors import ErrorCode
    a, b, c = (TP("t", 0), 1), (TP("t", 0), 2), (TP("s", 3), 2)
    unavailable = {a: ErrorCode.REPLICA_NOT_AVAILABLE, b: ErrorCode.REPLICA_NOT_AVAILABLE}
    fake = MoveTool(alter_scripts=[unavailable] * 100)
    sleeps = [0]

    async def sleep(seconds):
        assert seconds == 0.1                       # Kafka's 100 ms between attempts
        sleeps[0] += 1
    with pytest.raises(rp.Terse) as e:
        asyncio.run(rp.execute_moves(fake, {a: "/d", b: "/d", c: "/d"}, 1000,
                                     clock=lambda: sleeps[0] / 10, sleep=sleep))
    assert str(e.value) == ("Timed out before log directory moves could be started for: "
                            "t-0-1,t-0-2")
    # tried at 0, 100, ..., 1000 ms: the started one is not asked again
    assert len(fake.altered) == 11 and fake.altered[1:] == [{a: "/d", b: "/d"}] * 10
    assert capsys.readouterr().out == ("Successfully started moving log directory to /d for "
                                       "replica s-3 with broker 2 \n")
    fake = MoveTool(alter_scripts=[{a: ErrorCode.REPLICA_NOT_AVAILABLE}])
    with pytest.raises(rp.Terse) as e:          # a timeout of 0: one attempt
        asyncio.run(rp.execute_moves(fake, {a: "/d"}, 0, clock=lambda: 0.0, sleep=sleep))
    assert str(e.value) == "Timed out before log directory move could be started for: t-0-1"
    fake = MoveTool(alter_scripts=[{b: ErrorCode.LOG_DIR_NOT_FOUND}])
    with pytest.raises(rp.Failure) as e:
        asyncio.run(rp.execute_moves(fake, {a: "/d", b: "/x"}, 1000))
    assert str(e.value) == "Failed to alter dir for t-0-2"


def test_verify_reports_moves_and_clears_throttles_once_they_are_done(capsys):
    target = (TP("t", 0), 1)
    targets = [(TP("t", 0), [1])]
    fake = MoveTool(infos={target: ("/d0", "/d1")})

    async def find_states(tool, parts):
        return {TP("t", 0): ([1], [1], True)}, False
    original, rp.find_states = rp.find_states, find_states
    try:
        asyncio.run(rp.verify(fake, targets, False, {target: "/d1"}))
        assert capsys.readouterr().out == (
            "Status of partition reassignment:\nReassignment of partition t-0 is completed.\n"
            "Reassignment of replica t-0-1 is still in progress.\n")
        assert fake.cleared == 0                     # a move is in progress: throttles stay
        fake.infos = {target: ("/d1", None)}
        asyncio.run(rp.verify(fake, targets, False, {target: "/d1"}))
        assert capsys.readouterr().out.endswith(
            "Reassignment of replica t-0-1 completed successfully.\nClearing ...\n")
        assert fake.cleared == 1
        fake.infos = {target: ("/d0", None)}        # cancelled counts as done
        asyncio.run(rp.verify(fake, targets, True, {target: "/d1"}))
        assert capsys.readouterr().out.endswith(
            "Partition t-0 on broker 1 is not being moved from log dir /d0 to /d1.\n")
        assert fake.cleared == 1                     # --preserve-throttles
    finally:
        rp.find_states = original


def test_cancel_moves_active_replicas_back_to_their_current_dir(capsys):
    moving, done, missing = (TP("t", 0), 1), (TP("t", 1), 1), (TP("t", 2), 2)
    fake = MoveTool(infos={moving: ("/d0", "/d1"), done: ("/d1", None)})
    targets = [(TP("t", 0), [1]), (TP("t", 1), [1]), (TP("t", 2), [2])]
    asyncio.run(rp.cancel(fake, targets, False, {moving: "/d1", done: "/d1", missing: "/d1"},
                          10000))
    assert fake.altered == [{moving: "/d0"}]
    assert capsys.readouterr().out == (
        "None of the specified partition reassignments are active.\n"
        "Successfully started moving log directory to /d0 for replica t-0 with broker 1 \n"
        "Clearing ...\n")
    fake = MoveTool(infos={done: ("/d1", None)})
    asyncio.run(rp.cancel(fake, targets, True, {done: "/d1"}, 10000))
    assert fake.altered == []
    assert capsys.readouterr().out == ("None of the specified partition reassignments are "
                                       "active.\nNone of the specified partition moves are "
                                       "active.")


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
    (["--bootstrap-server", DEAD, "--execute", "--reassignment-json-file", "f",
      "--replica-alter-log-dirs-throttle", "abc"],
     "Cannot parse argument 'abc' of option replica-alter-log-dirs-throttle"),
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
        ([{"topic": "moving", "partition": 0, "replicas": [1, 2]},
          {"topic": "nope", "partition": 0, "replicas": [1, 2]}],
         "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: Topic nope not "
         "found."),
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
        # --additional: the same reassignment submitted again is taken (Kafka's way to change
        # the throttle of one under way; no throttle here: the paused broker could not answer
        # the change of its rate)
        r = run("--execute", "--reassignment-json-file", plan, "--additional")
        assert (r.code, r.err) == (0, ""), r
        assert r.out.startswith("Current partition replica assignment\n\n")
        assert r.out.endswith("Successfully started partition reassignment for held-0\n")
        assert replicas_of(cluster, "held", 0) == [target, kept, source]
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


def active_moves(bootstrap) -> dict:
    """{(tp, broker 0): the dir of its future replica} from DescribeLogDirs on broker 0."""
    results = admin_call(bootstrap, "describe_log_dirs", [0])[0]
    return {(TP(t.name, p.partition_index), 0): r.log_dir for r in results for t in r.topics
            for p in t.partitions if p.is_future_key}


# --- against one broker with two log dirs ---------------------------------------------------------

@pytest.mark.integration
def test_a_plan_with_log_dirs_moves_the_replica_and_can_be_cancelled(broker_process, tool,
                                                                     tmp_path):
    from confluent_kafka import Producer
    dir_a, dir_b = str(tmp_path / "dirA"), str(tmp_path / "dirB")
    broker = broker_process(log_dirs=f"{dir_a},{dir_b}", num_partitions=1,
                            log_segment_bytes=262144, log_segment_delete_delay_ms=500)
    bootstrap = broker.bootstrap
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "batch.size": 65536})      # batches must fit in a segment
    failed = []
    for i in range(2500):                           # 2.5 MB in ten 256 kB segments
        producer.produce("disk", b"%05d" % i * 200, partition=0,
                         on_delivery=lambda err, _msg: failed.append(err) if err else None)
        producer.poll(0)
    assert producer.flush(60) == 0 and failed == []
    here = dir_a if (tmp_path / "dirA" / "disk-0").is_dir() else dir_b
    there = dir_b if here == dir_a else dir_a

    def plan(log_dir):
        return write(tmp_path, "plan.json", json.dumps({"version": 1, "partitions": [
            {"topic": "disk", "partition": 0, "replicas": [0], "log_dirs": [log_dir]}]}))

    def run(*args):
        return tool("reassign_partitions", "--bootstrap-server", bootstrap, *args)

    def broker_configs():
        return dynamic_configs(bootstrap, RESOURCE_BROKER, "0")

    rollback = ("Current partition replica assignment\n\n"
                '{"version":1,"partitions":[{"topic":"disk","partition":0,"replicas":[0],'
                '"log_dirs":["any"]}]}\n\n'
                "Save this to use as the --reassignment-json-file option during rollback\n")
    started = "Successfully started partition reassignment for disk-0\n"

    # A dir that is not one of the broker's log.dirs: Kafka's "Failed to alter dir".
    r = run("--execute", "--reassignment-json-file", plan(str(tmp_path / "nowhere")))
    assert (r.code, r.out, r.err) == (1, rollback + started,
                                      "Error: Failed to alter dir for disk-0-0\n")

    # A move held back by the throttle: in progress, then cancelled (back to its current dir).
    target = plan(there)
    r = run("--execute", "--reassignment-json-file", target,
            "--replica-alter-log-dirs-throttle", "100000")
    assert (r.code, r.err) == (0, ""), r
    assert r.out == (rollback + rp.YOU_MUST_RUN_VERIFY_PERIODICALLY_MESSAGE + "\n"
                     "The replica-alter-dir throttle limit was set to 100000 B/s\n" + started +
                     f"Successfully started moving log directory to {there} for replica disk-0 "
                     "with broker 0 \n")
    assert broker_configs() == {rp.LOG_DIRS_RATE: "100000"}
    # The broker answers AlterReplicaLogDirs before it has created the future log (unlike
    # Kafka): a --verify at once could see no move ("not being moved") and clear the throttle.
    deadline = time.monotonic() + 10
    while (TP("disk", 0), 0) not in active_moves(bootstrap):
        assert time.monotonic() < deadline, "no future replica"
        time.sleep(0.05)
    r = run("--verify", "--reassignment-json-file", target)
    assert (r.code, r.out) == (0, "Status of partition reassignment:\nReassignment of partition "
                                  "disk-0 is completed.\nReassignment of replica disk-0-0 is "
                                  "still in progress.\n"), r
    assert broker_configs() == {rp.LOG_DIRS_RATE: "100000"}       # kept while it moves
    r = run("--cancel", "--reassignment-json-file", target)
    assert (r.code, r.err) == (0, ""), r
    assert r.out == ("None of the specified partition reassignments are active.\n"
                     f"Successfully started moving log directory to {here} for replica disk-0 "
                     "with broker 0 \n"
                     "Clearing broker-level throttles on broker 0\n"
                     "Clearing topic-level throttles on topic disk\n")
    assert broker_configs() == {}
    r = run("--verify", "--reassignment-json-file", target, "--preserve-throttles")
    assert r.out == ("Status of partition reassignment:\nReassignment of partition disk-0 is "
                     f"completed.\nPartition disk-0 on broker 0 is not being moved from log dir "
                     f"{here} to {there}.\n")
    assert not [n for n in os.listdir(there) if n.startswith("disk-0")]      # no future log left

    # Unthrottled: --verify until it completed, then the throttles are cleared.
    r = run("--execute", "--reassignment-json-file", target)
    assert (r.code, r.err) == (0, ""), r
    deadline = time.monotonic() + 30
    while True:
        r = run("--verify", "--reassignment-json-file", target)
        assert (r.code, r.err) == (0, ""), r
        if "completed successfully" in r.out:
            break
        assert "still in progress" not in r.out or "Clearing" not in r.out, r
        assert time.monotonic() < deadline, r
        time.sleep(0.2)
    assert r.out == ("Status of partition reassignment:\n"
                     "Reassignment of partition disk-0 is completed.\n"
                     "Reassignment of replica disk-0-0 completed successfully.\n"
                     "Clearing broker-level throttles on broker 0\n"
                     "Clearing topic-level throttles on topic disk\n")
    assert os.path.isdir(os.path.join(there, "disk-0"))
    assert not os.path.isdir(os.path.join(here, "disk-0"))
    values = consume(bootstrap, "disk", 0, 2500)
    assert values == [b"%05d" % i * 200 for i in range(2500)]
