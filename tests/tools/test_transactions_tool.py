"""kafka-transactions.sh against a live broker, with real confluent-kafka transactional producers:
list, describe and describe-producers tables as Kafka 3.9 prints them; abort by --start-offset lets a
read_committed consumer past an open transaction; find-hanging finds transactions whose marker will
never come (batches appended without AddPartitionsToTxn, possible here because the broker runs with
transaction.partition.verification.enable=false, as in Kafka) and abort ends them; bad input gives
Kafka's one-line errors. The rows' order is Java's HashMap order, checked against goldens Java printed.
"""
import asyncio
import gc
import subprocess
import time

import pytest

from protocol.errors import RETRIABLE
from protocol.messages import InitProducerIdRequest, ProduceRequest
from storage.record_batch import RecordBatchBuilder

from broker.client.connection import BrokerConnection
from broker.client.types import TopicPartition
from broker.tools import transactions
from broker.tools.javautil import java_hash_order, java_int_hash, java_long_hash, java_string_hash, java_tp_hash
from broker.tools.transactions import describe_producers_order

from tests.tools.conftest import BrokerProcess

pytestmark = pytest.mark.integration

BROKER_ID = "0"                 # config/server.properties
LIST = ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
DESCRIBE = ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
            "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"]
PRODUCERS = ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
             "CurrentTransactionStartOffset"]
HANGING = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset", "LastTimestamp",
           "Duration(min)"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("txn-tool-broker"),
                           {"num.partitions": 1, "offsets.topic.num.partitions": 3,
                            "transaction.state.log.num.partitions": 3, "group.initial.rebalance.delay.ms": 0,
                            "transaction.partition.verification.enable": "false"})
    broker.start()
    yield broker
    # Release the confluent-kafka clients the tests' frames still hold (a failed tool call leaves its
    # caller's frames in asyncio's task/exception reference cycles) before the broker goes, so that
    # librdkafka does not log reconnection attempts.
    gc.collect()
    try:
        broker.stop()
    except subprocess.TimeoutExpired:
        pass


# --- helpers ------------------------------------------------------------------------------------

def kafka_table(headers, rows) -> list:
    """Kafka's ToolsUtils.prettyPrintTable: each cell left-justified to its column's width, then a TAB."""
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows)]
    return ["".join(f"{cell:<{w}}\t" for cell, w in zip(row, widths)) for row in [headers, *rows]]


def cells(line: str) -> list:
    return [c.rstrip(" ") for c in line.split("\t")[:-1]]


def rows_of(result) -> list:
    """The table's rows (header checked and dropped), after checking its layout is Kafka's."""
    rows = [cells(line) for line in result.lines[1:]]
    assert result.lines == kafka_table(cells(result.lines[0]), rows), result
    return rows


def now_ms() -> int:
    return int(time.time() * 1000)


def create_topic(tool, bootstrap, name, partitions):
    r = tool("topics", "--bootstrap-server", bootstrap, "--create", "--topic", name, "--partitions", partitions)
    assert r.code == 0, r


def transactional_producer(bootstrap, transactional_id):
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 900000, "linger.ms": 0})
    producer.init_transactions(30)
    return producer


def produce(producer, topic, partition, values):
    for value in values:
        producer.produce(topic, value=value.encode(), partition=partition)
    assert producer.flush(30) == 0


def plain_produce(bootstrap, topic, partition, values):
    from confluent_kafka import Producer
    produce(Producer({"bootstrap.servers": bootstrap}), topic, partition, values)


def read_committed(bootstrap, topic, partition, timeout=8.0) -> list:
    """Values a read_committed consumer gets from the start of a partition up to its last stable offset."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError
    from confluent_kafka import TopicPartition as Assigned
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rc-{time.time_ns()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True})
    consumer.assign([Assigned(topic, partition, OFFSET_BEGINNING)])
    values, deadline = [], time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.3)
            if message is None:
                continue
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    break
                continue
            values.append(message.value().decode())
    finally:
        consumer.close()
    return values


def hanging_batch(bootstrap, topic, partition, transactional_id, timestamp, *, init=True, bumps=1):
    """A transactional batch appended without AddPartitionsToTxn, so no coordinator will write its
    marker: InitProducerId (with ``transactional_id`` when ``init``, ``bumps`` times: each bumps the
    epoch), then a Produce naming ``transactional_id``. -> (producer_id, producer_epoch, base_offset)."""
    async def go():
        host, port = bootstrap.rsplit(":", 1)
        conn = await BrokerConnection(host, int(port)).connect()
        try:
            for _ in range(bumps):
                for _attempt in range(100):
                    init_id = InitProducerIdRequest(transactional_id=transactional_id if init else None,
                                                    transaction_timeout_ms=60000)
                    response = await conn.send(init_id)
                    if response.error_code not in RETRIABLE:
                        break
                    await asyncio.sleep(0.1)
                assert response.error_code == 0, response
            pid, epoch = response.producer_id, response.producer_epoch
            builder = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=0, is_transactional=True)
            builder.append(timestamp, None, b"hanging-1")
            builder.append(timestamp, None, b"hanging-2")
            P = ProduceRequest
            response = await conn.send(P(transactional_id=transactional_id, acks=-1, timeout_ms=10000, topic_data=[
                P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(index=partition,
                                                                                      records=builder.build())])]))
            answer = response.responses[0].partition_responses[0]
            assert answer.error_code == 0, response
            return pid, epoch, answer.base_offset
        finally:
            await conn.close()
    return asyncio.run(go())


# --- list, describe, describe-producers ---------------------------------------------------------

def test_list_describe_and_describe_producers(broker, tool, script):
    b = broker.bootstrap
    create_topic(tool, b, "tt-main", 2)
    started = now_ms()
    committed = transactional_producer(b, "tt-committed")
    committed.begin_transaction()
    produce(committed, "tt-main", 0, ["c1", "c2", "c3"])
    committed.commit_transaction(30)
    open_ = transactional_producer(b, "tt-open")
    open_.begin_transaction()
    produce(open_, "tt-main", 0, ["o1"])
    produce(open_, "tt-main", 1, ["o2", "o3"])
    try:
        r = script("kafka-transactions.sh", "--bootstrap-server", b, "list")
        assert (r.code, r.err) == (0, ""), r
        assert r.lines[0].startswith("TransactionalId\tCoordinator\tProducerId\tTransactionState")
        listed = {row[0]: row[1:] for row in rows_of(r)}
        assert listed["tt-committed"][::2] == [BROKER_ID, "CompleteCommit"]
        assert listed["tt-open"][::2] == [BROKER_ID, "Ongoing"]
        committed_pid, open_pid = listed["tt-committed"][1], listed["tt-open"][1]
        assert committed_pid != open_pid

        r = tool("transactions", "--bootstrap-server", b, "list", "--duration-filter", 3_600_000)
        assert (r.code, r.out) == (0, "TransactionalId\tCoordinator\tProducerId\tTransactionState\t\n")
        r = tool("transactions", "--bootstrap-server", b, "list", "--duration-filter", -1)
        assert {row[0] for row in rows_of(r)} >= {"tt-committed", "tt-open"}

        r = tool("transactions", "--bootstrap-server", b, "describe", "--transactional-id", "tt-open")
        assert r.code == 0 and cells(r.lines[0]) == DESCRIBE, r
        [row] = rows_of(r)
        assert row[:6] == [BROKER_ID, "tt-open", open_pid, "0", "Ongoing", "900000"]
        start, duration = int(row[6]), int(row[7])
        assert started <= start <= now_ms() and 0 <= duration <= now_ms() - start
        both = [TopicPartition("tt-main", 0), TopicPartition("tt-main", 1)]
        assert row[8] == ",".join(map(str, java_hash_order(both, java_tp_hash)))
        r = tool("transactions", "--bootstrap-server", b, "describe", "--transactional-id", "tt-committed")
        [row] = rows_of(r)
        assert row[:5] == [BROKER_ID, "tt-committed", committed_pid, "0", "CompleteCommit"] and row[8] == ""

        r = script("kafka-transactions.sh", "--bootstrap-server", b, "describe-producers", "--topic", "tt-main",
                   "--partition", "0")
        assert r.code == 0 and cells(r.lines[0]) == PRODUCERS, r
        producers = {row[0]: row[1:] for row in rows_of(r)}
        assert set(producers) == {committed_pid, open_pid}
        epoch, coordinator_epoch, last_sequence, last_timestamp, start_offset = producers[committed_pid]
        assert (epoch, last_sequence, start_offset) == ("0", "2", "None") and int(coordinator_epoch) >= 0
        assert started <= int(last_timestamp) <= now_ms()
        assert producers[open_pid][::2] == ["0", "0", "4"]       # c1-c3, the commit marker, then o1
        assert producers[open_pid][1] == "-1"                   # no marker written for it yet
        r = tool("transactions", "--bootstrap-server", b, "describe-producers", "--topic", "tt-main",
                 "--partition", 1, "--broker-id", BROKER_ID)
        assert [row[:4] + row[5:] for row in rows_of(r)] == [[open_pid, "0", "-1", "1", "0"]]
    finally:
        open_.abort_transaction(30)

    r = tool("transactions", "--bootstrap-server", b, "describe", "--transactional-id", "tt-nobody")
    assert (r.code, r.out) == (1, "")
    assert r.err == ("Failed to describe transaction state of transactional-id `tt-nobody`: DescribeTransactions "
                     "request for transactionalId `tt-nobody` failed because the ID could not be found. Enable "
                     "debug logging for additional detail.\n")
    r = tool("transactions", "--bootstrap-server", b, "describe-producers", "--topic", "tt-nowhere", "--partition", 0)
    assert (r.code, r.out) == (1, "")
    assert r.err == ("Failed to describe producers for partition tt-nowhere-0 on leader: This server does not host "
                     "this topic-partition.. Enable debug logging for additional detail.\n")


# --- abort --------------------------------------------------------------------------------------

def test_abort_by_start_offset_lets_read_committed_consumers_past(broker, tool, script):
    b = broker.bootstrap
    create_topic(tool, b, "tt-abort", 1)
    stuck = transactional_producer(b, "tt-stuck")
    stuck.begin_transaction()
    produce(stuck, "tt-abort", 0, ["open-1", "open-2"])
    plain_produce(b, "tt-abort", 0, ["after-the-open-one"])
    try:
        assert read_committed(b, "tt-abort", 0, timeout=4) == []       # held back by the open transaction
        r = tool("transactions", "--bootstrap-server", b, "describe-producers", "--topic", "tt-abort",
                 "--partition", 0)
        [(pid, *_rest, start_offset)] = [row for row in rows_of(r) if row[5] != "None"]
        assert start_offset == "0"

        r = script("kafka-transactions.sh", "--bootstrap-server", b, "abort", "--topic", "tt-abort",
                   "--partition", "0", "--start-offset", "0")
        assert (r.code, r.out, r.err) == (0, "", ""), r
        assert read_committed(b, "tt-abort", 0) == ["after-the-open-one"]
        r = tool("transactions", "--bootstrap-server", b, "describe-producers", "--topic", "tt-abort",
                 "--partition", 0)
        assert [row[5] for row in rows_of(r) if row[0] == pid] == ["None"]

        r = script("kafka-transactions.sh", "--bootstrap-server", b, "abort", "--topic", "tt-abort",
                   "--partition", "0", "--start-offset", "0")
        assert (r.code, r.out) == (1, "")
        assert r.err == "Could not find any open transactions starting at offset 0 on partition tt-abort-0\n"
    finally:
        stuck.abort_transaction(30)


# --- find-hanging -------------------------------------------------------------------------------

def test_find_hanging_finds_transactions_without_a_marker_and_abort_ends_them(broker, tool, script):
    b = broker.bootstrap
    create_topic(tool, b, "tt-hang", 2)
    live = transactional_producer(b, "tt-live")       # open, but its coordinator will end it: not hanging
    live.begin_transaction()
    produce(live, "tt-hang", 0, ["live"])
    old = now_ms() - 20 * 60_000 - 30_000                # last written 20.5 minutes ago
    # tt-ghost: known to the coordinator (Empty) but tt-hang-0 is in none of its transactions;
    # its epoch was bumped once, so the marker needs epoch 1
    ghost_pid, ghost_epoch, ghost_offset = hanging_batch(b, "tt-hang", 0, "tt-ghost", old, bumps=2)
    # a producer id no coordinator knows
    anon_pid, anon_epoch, anon_offset = hanging_batch(b, "tt-hang", 1, "tt-never-initialised", old, init=False)
    plain_produce(b, "tt-hang", 1, ["plain"])
    assert (ghost_epoch, anon_epoch, anon_offset) == (1, 0, 0)
    try:
        hanging = {ghost_pid: ["tt-hang", "0", str(ghost_pid), "1", "-1", str(ghost_offset), str(old), "20"],
                   anon_pid: ["tt-hang", "1", str(anon_pid), "0", "-1", "0", str(old), "20"]}
        expected = kafka_table(HANGING, [hanging[pid] for pid in java_hash_order([ghost_pid, anon_pid],
                                                                                 java_long_hash)])
        for scope in (["--broker-id", BROKER_ID], ["--broker-id", BROKER_ID, "--max-transaction-timeout", 0],
                      ["--topic", "tt-hang"]):
            r = tool("transactions", "--bootstrap-server", b, "find-hanging", *scope)
            assert (r.code, r.err, r.lines) == (0, "", expected), (scope, r)
        r = script("kafka-transactions.sh", "--bootstrap-server", b, "find-hanging", "--topic", "tt-hang",
                   "--partition", "1")
        assert (r.code, r.lines) == (0, kafka_table(HANGING, [hanging[anon_pid]])), r
        r = tool("transactions", "--bootstrap-server", b, "find-hanging", "--broker-id", BROKER_ID,
                 "--max-transaction-timeout", 30)
        assert (r.code, r.lines) == (0, kafka_table(HANGING, [])), r
        r = tool("transactions", "--bootstrap-server", b, "find-hanging", "--topic", "tt-nowhere")
        assert (r.code, r.out) == (1, "")
        assert r.err == ("Failed to describe 1 topics: This server does not host this topic-partition.. Enable "
                         "debug logging for additional detail.\n")
        assert read_committed(b, "tt-hang", 1, timeout=4) == []

        # the older form: producer id, epoch and coordinator epoch; a stale epoch is refused
        r = tool("transactions", "--bootstrap-server", b, "abort", "--topic", "tt-hang", "--partition", 0,
                 "--producer-id", ghost_pid, "--producer-epoch", 0, "--coordinator-epoch", -1)
        spec = (f"AbortTransactionSpec(topicPartition=tt-hang-0, producerId={ghost_pid}, producerEpoch=0, "
                f"coordinatorEpoch=0)")
        assert (r.code, r.out) == (1, "")
        assert r.err == (f"Failed to abort transaction {spec}: WriteTxnMarkers request with {spec} failed due an "
                         f"invalid producer epoch. Enable debug logging for additional detail.\n")
        r = tool("transactions", "--bootstrap-server", b, "abort", "--topic", "tt-hang", "--partition", 0,
                 "--producer-id", ghost_pid, "--producer-epoch", 1, "--coordinator-epoch", -1)
        assert (r.code, r.out, r.err) == (0, "", ""), r
        r = script("kafka-transactions.sh", "--bootstrap-server", b, "abort", "--topic", "tt-hang",
                   "--partition", "1", "--start-offset", "0")
        assert (r.code, r.out, r.err) == (0, "", ""), r

        r = tool("transactions", "--bootstrap-server", b, "find-hanging", "--broker-id", BROKER_ID,
                 "--max-transaction-timeout", 0)
        assert (r.code, r.lines) == (0, kafka_table(HANGING, [])), r
        assert read_committed(b, "tt-hang", 1) == ["plain"]
    finally:
        live.abort_transaction(30)


# --- the command line ---------------------------------------------------------------------------

DEAD = "127.0.0.1:1"


@pytest.mark.parametrize("argv, message", [
    ([], "kafka-transactions.sh: error: too few arguments"),
    (["--bootstrap-server", DEAD], "kafka-transactions.sh: error: too few arguments"),
    (["list"], "kafka-transactions.sh: error: argument --bootstrap-server is required"),
    (["abort", "--topic", "t"], "kafka-transactions.sh: error: argument --bootstrap-server is required"),
    (["--bootstrap-server"], "kafka-transactions.sh: error: argument --bootstrap-server: expected one argument"),
    (["--bootstrap-server", DEAD, "lst"], "kafka-transactions.sh: error: invalid choice: 'lst' (choose from "
                                          "'list', 'describe', 'describe-producers', 'abort', 'find-hanging')"),
    (["--nope", "list"], "kafka-transactions.sh: error: unrecognized arguments: '--nope'"),
    (["--bootstrap-server", DEAD, "list", "--bootstrap-server", DEAD],
     "kafka-transactions.sh: error: unrecognized arguments: '--bootstrap-server'"),
    (["--bootstrap-server", DEAD, "describe"], "kafka-transactions.sh: error: argument --transactional-id is required"),
    (["--bootstrap-server", DEAD, "describe-producers", "--partition", "0"],
     "kafka-transactions.sh: error: argument --topic is required"),
    (["--bootstrap-server", DEAD, "abort"], "kafka-transactions.sh: error: argument --partition is required"),
    (["--bootstrap-server", DEAD, "abort", "--topic", "t", "--partition", "x"],
     "kafka-transactions.sh: error: argument --partition: could not convert 'x' to Integer (For input string: \"x\")"),
    (["--bootstrap-server", DEAD, "abort", "--topic", "t", "--partition", "0", "--producer-epoch", "40000"],
     "kafka-transactions.sh: error: argument --producer-epoch: could not convert '40000' to Short (Value out of "
     "range. Value:\"40000\" Radix:10)"),
    (["--bootstrap-server", DEAD, "list", "--duration-filter", "1h"],
     "kafka-transactions.sh: error: argument --duration-filter: could not convert '1h' to Long (For input "
     "string: \"1h\")"),
    (["--bootstrap-server", DEAD, "abort", "--topic", "t", "--partition", "0"],
     "The transaction to abort must be identified either with --start-offset (for brokers on 3.0 or above) or with "
     "--producer-id, --producer-epoch, and --coordinator-epoch (for older brokers)"),
    (["--bootstrap-server", DEAD, "abort", "--topic", "t", "--partition", "0", "--producer-id", "7"],
     "Missing required argument --producer-epoch"),
    (["--bootstrap-server", DEAD, "abort", "--topic", "t", "--partition", "0", "--producer-id", "7",
      "--producer-epoch", "0"], "Missing required argument --coordinator-epoch"),
    (["--bootstrap-server", DEAD, "find-hanging"],
     "The `find-hanging` command requires either --topic or --broker-id to limit the scope of the search"),
    (["--bootstrap-server", DEAD, "find-hanging", "--broker-id", "0", "--partition", "0"],
     "The --partition argument requires --topic to be provided"),
    (["--bootstrap-server", DEAD, "--command-config", "/no/such/file", "list"],
     "Failed to load admin client properties: /no/such/file (No such file or directory). Enable debug logging for "
     "additional detail."),
])
def test_bad_input_is_kafkas_one_line(capsys, argv, message):
    """In-process (argparse's errors end in SystemExit, which the ``tool`` fixture does not catch)."""
    from broker.tools.common import run
    capsys.readouterr()
    try:
        code = run(transactions.main, argv, transactions.ERROR_PREFIX)
    except SystemExit as e:
        code = e.code
    assert (code, *capsys.readouterr()) == (1, "", message + "\n")


def test_unreachable_broker_is_the_calls_failure(script):
    r = script("kafka-transactions.sh", "--bootstrap-server", DEAD, "list")
    assert r.code == 1 and r.out == "" and len(r.err.splitlines()) == 1, r
    assert r.err.startswith("Failed to list transactions: Could not connect to any bootstrap server 127.0.0.1:1 ")
    assert r.err.endswith(". Enable debug logging for additional detail.\n")


def test_help_and_version(script):
    r = script("kafka-transactions.sh", "--help")
    assert r.code == 0 and r.out.startswith("usage: kafka-transactions.sh [-h] [-v] [--command-config FILE]")
    for word in ("-v, --version", "--command-config FILE", "--bootstrap-server host:port", "commands:",
                 *transactions.COMMANDS):
        assert word in r.out, word
    parser = transactions.build_parser()
    commands = parser._subparsers._group_actions[0].choices
    for name, command in commands.items():
        r = script("kafka-transactions.sh", "--bootstrap-server", DEAD, name, "--help")
        assert r.code == 0 and r.out.startswith(f"usage: kafka-transactions.sh --bootstrap-server host:port {name}")
        for flag in (s for action in command._actions for s in action.option_strings):
            assert flag in r.out, (name, flag)
    r = script("kafka-transactions.sh", "-v")
    assert r.code == 0 and r.out.strip() and r.err == ""


def test_java_iteration_order_matches_java():
    """Goldens printed by Java 17's HashSet/HashMap for the same keys inserted in the same order."""
    topics = ["orders", "payments", "txn-tool", "hang", "__consumer_offsets", "zeta", "émoji"]
    tps = [TopicPartition(t, p) for t in topics for p in range(7)]
    as_text = lambda keys: ", ".join(map(str, keys))     # noqa: E731
    assert as_text(java_hash_order(tps, java_tp_hash)) == (
        "payments-4, txn-tool-4, zeta-1, émoji-4, hang-0, payments-0, txn-tool-0, zeta-5, émoji-0, orders-1, "
        "__consumer_offsets-5, orders-5, __consumer_offsets-1, hang-4, hang-3, zeta-0, émoji-5, payments-3, "
        "txn-tool-1, zeta-4, émoji-1, txn-tool-5, __consumer_offsets-0, orders-2, __consumer_offsets-4, orders-6, "
        "hang-2, payments-6, txn-tool-2, émoji-6, payments-2, txn-tool-6, zeta-3, émoji-2, orders-3, "
        "__consumer_offsets-3, hang-6, txn-tool-3, hang-1, payments-5, payments-1, zeta-6, zeta-2, émoji-3, "
        "orders-0, __consumer_offsets-6, orders-4, hang-5, __consumer_offsets-2")
    # DescribeProducersResult.all(): new HashSet<>(batch) -> Collectors.toMap -> new HashMap<>(n)
    assert as_text(describe_producers_order(tps[:13])) == (
        "payments-4, payments-3, payments-5, payments-0, payments-2, payments-1, orders-0, orders-1, orders-2, "
        "orders-3, orders-4, orders-5, orders-6")
    assert as_text(describe_producers_order(tps[:30])) == (
        "payments-4, txn-tool-4, hang-2, payments-6, txn-tool-2, hang-0, payments-0, txn-tool-0, payments-2, "
        "txn-tool-6, orders-1, orders-3, hang-6, orders-5, __consumer_offsets-1, hang-4, txn-tool-3, hang-3, "
        "payments-3, txn-tool-1, hang-1, payments-5, payments-1, txn-tool-5, __consumer_offsets-0, orders-0, "
        "orders-2, orders-4, hang-5, orders-6")
    assert java_hash_order([17, 3, 1000, 42, 5000000000, 1, 16, 33], java_long_hash) == \
        [16, 17, 1, 33, 3, 5000000000, 1000, 42]
    assert java_hash_order([2, 0, 1, 17], java_int_hash) == [0, 1, 17, 2]
    assert java_hash_order(topics, java_string_hash, 3) == \
        ["zeta", "txn-tool", "hang", "payments", "orders", "émoji", "__consumer_offsets"]
