"""Transactions with real clients against a broker subprocess (issue 18).

- commit and abort across partitions with confluent-kafka, kafka-python and aiokafka:
  read_committed consumers (those clients, and kcat) see exactly the committed records,
  read_uncommitted ones see everything;
- exactly-once consume-transform-produce (tests/integration/txn_worker.py) while the worker is
  killed with SIGKILL and restarted several times: every input is in the output exactly once;
- a transaction abandoned by its producer is aborted by the coordinator after its timeout;
- kill -9 of the broker with a transaction open, and after EndTxn was answered: after the
  restart a read_committed consumer sees all of a transaction or none of it;
- bad input: Kafka's error codes for wrong epochs, unknown producer ids, a timeout above
  transaction.max.timeout.ms, unknown partitions.
"""
import asyncio
import json
import pathlib
import subprocess
import sys
import time

import pytest

from tests.integration.test_clients import KCAT, create_topic

pytestmark = pytest.mark.integration

WORKER = pathlib.Path(__file__).with_name("txn_worker.py")
ROOT = pathlib.Path(__file__).resolve().parents[2]
FAST_ABORT = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 500}


def consume_all(bootstrap, topic, isolation, expect=None, timeout=20.0) -> list:
    """Values (str) read from the start of every partition with confluent-kafka, until
    `expect` values arrived or nothing new came for 3 s."""
    from confluent_kafka import Consumer
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.time_ns()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": isolation})
    consumer.subscribe([topic])
    got, deadline, last = [], time.monotonic() + timeout, time.monotonic()
    try:
        while time.monotonic() < deadline:
            if expect is not None and len(got) >= expect:
                break
            if expect is None and got and time.monotonic() - last > 3:
                break
            message = consumer.poll(0.3)
            if message is None or message.error():
                continue
            got.append(message.value().decode())
            last = time.monotonic()
    finally:
        consumer.close()
    return got


def confluent_transactions(bootstrap, topic, tid):
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    producer.init_transactions(30)
    for round_, commit in enumerate((True, False, True)):
        producer.begin_transaction()
        for i in range(20):
            producer.produce(topic, key=str(i).encode(),
                             value=f"{'c' if commit else 'a'}-ck-{round_}-{i}".encode())
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


def kafka_python_transactions(bootstrap, topic, tid):
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid)
    producer.init_transactions()
    for round_, commit in enumerate((True, False)):
        producer.begin_transaction()
        for i in range(20):
            producer.send(topic, key=str(i).encode(),
                          value=f"{'c' if commit else 'a'}-kp-{round_}-{i}".encode())
        producer.flush()
        if commit:
            producer.commit_transaction()
        else:
            producer.abort_transaction()
    producer.close()


def aiokafka_transactions(bootstrap, topic, tid):
    async def run():
        from aiokafka import AIOKafkaProducer
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid)
        await producer.start()
        try:
            for round_, commit in enumerate((True, False)):
                try:
                    async with producer.transaction():
                        for i in range(20):
                            await producer.send(
                                topic, key=str(i).encode(),
                                value=f"{'c' if commit else 'a'}-ai-{round_}-{i}".encode())
                        if not commit:
                            raise RuntimeError("abort this one")
                except RuntimeError:
                    pass
        finally:
            await producer.stop()
    asyncio.run(run())


def test_commit_and_abort_with_every_client(kafka_broker):
    bootstrap = kafka_broker.bootstrap
    create_topic(bootstrap, "txn", partitions=3)
    confluent_transactions(bootstrap, "txn", "tx-confluent")
    kafka_python_transactions(bootstrap, "txn", "tx-kafka-python")
    aiokafka_transactions(bootstrap, "txn", "tx-aiokafka")
    committed = consume_all(bootstrap, "txn", "read_committed", expect=80)
    assert sorted(committed) == sorted(
        [f"c-ck-{r}-{i}" for r in (0, 2) for i in range(20)]
        + [f"c-kp-0-{i}" for i in range(20)] + [f"c-ai-0-{i}" for i in range(20)])
    everything = consume_all(bootstrap, "txn", "read_uncommitted", expect=140)
    assert len(everything) == 140 and sum(v.startswith("a-") for v in everything) == 60

    # Other readers of read_committed data: kafka-python and kcat.
    from kafka import KafkaConsumer
    consumer = KafkaConsumer("txn", bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             isolation_level="read_committed", consumer_timeout_ms=4000)
    assert sorted(m.value.decode() for m in consumer) == sorted(committed)
    consumer.close()
    values = []
    for p in range(3):
        out = subprocess.run([KCAT, "-b", bootstrap, "-C", "-t", "txn", "-p", str(p), "-o",
                              "beginning", "-e", "-q", "-X", "isolation.level=read_committed",
                              "-f", "%s\\n"], check=True, timeout=30, capture_output=True)
        values += out.stdout.decode().split()
    assert sorted(values) == sorted(committed)


def test_offsets_in_a_transaction_are_visible_only_once_it_commits(kafka_broker):
    from confluent_kafka import Consumer, Producer, TopicPartition
    bootstrap = kafka_broker.bootstrap
    create_topic(bootstrap, "src")
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "offsets-tx"})
    producer.init_transactions(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-group",
                         "enable.auto.commit": False})
    metadata = consumer.consumer_group_metadata()

    def committed():
        return consumer.committed([TopicPartition("src", 0)], 10)[0].offset
    producer.begin_transaction()
    producer.send_offsets_to_transaction([TopicPartition("src", 0, 7)], metadata, 30)
    producer.abort_transaction(30)
    assert committed() < 0
    producer.begin_transaction()
    producer.send_offsets_to_transaction([TopicPartition("src", 0, 9)], metadata, 30)
    producer.commit_transaction(30)
    assert committed() == 9
    consumer.close()


def _worker(bootstrap):
    return subprocess.Popen([sys.executable, str(WORKER), bootstrap, "eos-worker", "eos",
                             "eos-in", "eos-out"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)


def _wait_committed(proc, count, timeout=60.0) -> None:
    """Reads the worker's lines until it reported `count` committed transactions."""
    deadline = time.monotonic() + timeout
    seen = 0
    while seen < count and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"worker exited with {proc.poll()}")
        if "committed" in json.loads(line):
            seen += 1
    assert seen >= count, "the worker made no progress"


def test_consume_transform_produce_is_exactly_once_across_kill_9(kafka_broker):
    """The worker is SIGKILLed three times mid-stream; each restart fences the dead instance
    (aborting its open transaction) and resumes from the offsets committed with the last
    committed transaction: every input appears in the output exactly once."""
    from confluent_kafka import Producer
    bootstrap = kafka_broker.bootstrap
    create_topic(bootstrap, "eos-in", partitions=3)
    create_topic(bootstrap, "eos-out", partitions=3)
    total = 3000
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(total):
        producer.produce("eos-in", key=str(i).encode(), value=f"v{i}".encode())
    producer.flush(30)
    for _ in range(3):
        proc = _worker(bootstrap)
        try:
            _wait_committed(proc, 3)
        finally:
            proc.kill()
            proc.wait(10)
    proc = _worker(bootstrap)
    try:
        out = consume_all(bootstrap, "eos-out", "read_committed", expect=total, timeout=90)
    finally:
        proc.terminate()
        proc.wait(20)
    assert len(out) == total, f"{len(out)} of {total} copied"
    assert sorted(out) == sorted(f"V{i}" for i in range(total))


def test_an_abandoned_transaction_is_aborted_after_its_timeout(broker_process):
    from confluent_kafka import Producer
    broker = broker_process(**FAST_ABORT)
    create_topic(broker.bootstrap, "stuck")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "stuck-tx",
                         "transaction.timeout.ms": 2000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("stuck", value=b"never")
    producer.flush(10)
    # The producer goes quiet; the coordinator aborts after 2 s (checked every 0.5 s), so a
    # read_committed consumer is no longer held at the transaction's first offset.
    after = Producer({"bootstrap.servers": broker.bootstrap})
    after.produce("stuck", value=b"after")
    after.flush(10)
    assert consume_all(broker.bootstrap, "stuck", "read_committed", expect=1,
                       timeout=20) == ["after"]
    with pytest.raises(Exception):
        producer.commit_transaction(10)            # fenced: its epoch was bumped by the abort


def test_kill_9_of_the_broker_mid_transaction_keeps_transactions_whole(broker_process):
    """Transaction A is open when the broker dies: after the restart it is aborted once its
    timeout passes. Transaction B's EndTxn(commit) was answered: its markers are written after
    the restart if they were not before. read_committed sees B whole and nothing of A."""
    from confluent_kafka import Producer
    broker = broker_process(**FAST_ABORT)
    create_topic(broker.bootstrap, "crash", partitions=2)
    a = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "crash-a",
                  "transaction.timeout.ms": 3000})
    b = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "crash-b"})
    a.init_transactions(30)
    b.init_transactions(30)
    a.begin_transaction()
    b.begin_transaction()
    for i in range(50):
        a.produce("crash", key=str(i).encode(), value=f"a{i}".encode())
        b.produce("crash", key=str(i).encode(), value=f"b{i}".encode())
    a.flush(10)
    b.commit_transaction(30)
    broker.kill()
    broker.start()
    got = consume_all(broker.bootstrap, "crash", "read_committed", expect=50, timeout=30)
    assert sorted(got) == sorted(f"b{i}" for i in range(50))
    time.sleep(1)
    assert sorted(consume_all(broker.bootstrap, "crash", "read_committed")) == sorted(got)


def test_bad_transaction_requests_get_kafkas_errors(kafka_broker):
    from protocol.errors import ErrorCode as E
    from protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
    from protocol.messages.end_txn import EndTxnRequest
    from protocol.messages.find_coordinator import FindCoordinatorRequest
    from protocol.messages.init_producer_id import InitProducerIdRequest
    from broker.client.connection import BrokerConnection
    bootstrap = kafka_broker.bootstrap
    create_topic(bootstrap, "bad-txn")

    async def scenario():
        host, port = bootstrap.split(":")
        conn = await BrokerConnection(host, int(port)).connect()
        try:
            found = await conn.send(FindCoordinatorRequest(key="bad", key_type=1), 3)
            assert found.error_code == 0
            too_long = await conn.send(InitProducerIdRequest(
                transactional_id="bad", transaction_timeout_ms=10**9), 4)
            assert too_long.error_code == E.INVALID_TRANSACTION_TIMEOUT
            for tid, pid_, epoch_ in (("", -1, -1), (None, 1000, -1), ("bad", -1, 3)):
                # An empty id; an id and epoch that do not go together (KafkaApis checks that
                # before anything, with or without a transactional id).
                odd = await conn.send(InitProducerIdRequest(
                    transactional_id=tid, transaction_timeout_ms=60000, producer_id=pid_,
                    producer_epoch=epoch_), 4)
                assert odd.error_code == E.INVALID_REQUEST, (tid, pid_, epoch_)
            init = await conn.send(InitProducerIdRequest(transactional_id="bad",
                                                         transaction_timeout_ms=60000), 4)
            assert init.error_code == 0
            pid, epoch = init.producer_id, init.producer_epoch

            def add(topic, partition, producer_id=pid, producer_epoch=epoch):
                return conn.send(AddPartitionsToTxnRequest(
                    v3_and_below_transactional_id="bad", v3_and_below_producer_id=producer_id,
                    v3_and_below_producer_epoch=producer_epoch,
                    v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
                        name=topic, partitions=[partition])]), 3)

            def codes(response):
                return {(t.name, p.partition_index): p.partition_error_code
                        for t in response.results_by_topic_v3_and_below
                        for p in t.results_by_partition}
            assert codes(await add("nope", 0)) == {("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
            # Kafka leaves internal topics out of a client's write authorization.
            assert codes(await add("__consumer_offsets", 0)) == {
                ("__consumer_offsets", 0): E.TOPIC_AUTHORIZATION_FAILED}
            assert codes(await add("bad-txn", 0, producer_id=pid + 77)) == {
                ("bad-txn", 0): E.INVALID_PRODUCER_ID_MAPPING}
            assert codes(await add("bad-txn", 0, producer_epoch=epoch - 1 if epoch else 5)) in (
                {("bad-txn", 0): E.PRODUCER_FENCED}, {("bad-txn", 0): E.INVALID_PRODUCER_EPOCH})
            assert codes(await add("bad-txn", 0)) == {("bad-txn", 0): E.NONE}
            # No group id check in AddOffsetsToTxn (Kafka's has none; TxnOffsetCommit has).
            from protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest
            offsets = await conn.send(AddOffsetsToTxnRequest(
                transactional_id="bad", producer_id=pid, producer_epoch=epoch, group_id=""), 3)
            assert offsets.error_code == E.NONE
            wrong = await conn.send(EndTxnRequest(transactional_id="bad", producer_id=pid,
                                                  producer_epoch=epoch + 1, committed=True), 3)
            assert wrong.error_code == E.PRODUCER_FENCED
            ok = await conn.send(EndTxnRequest(transactional_id="bad", producer_id=pid,
                                               producer_epoch=epoch, committed=False), 3)
            assert ok.error_code == 0
            again = await conn.send(EndTxnRequest(transactional_id="bad", producer_id=pid,
                                                  producer_epoch=epoch, committed=True), 3)
            assert again.error_code in (E.INVALID_TXN_STATE, E.CONCURRENT_TRANSACTIONS)
        finally:
            await conn.close()
    asyncio.run(scenario())


def on_connection(bootstrap, scenario) -> None:
    """Runs `await scenario(conn)` on a raw protocol connection to the broker."""
    from broker.client.connection import BrokerConnection

    async def main():
        host, port = bootstrap.split(":")
        conn = await BrokerConnection(host, int(port)).connect()
        try:
            await scenario(conn)
        finally:
            await conn.close()
    asyncio.run(main())


async def init_transactional(conn, tid) -> tuple:
    """FindCoordinator and InitProducerId for `tid`, as a producer starts: (id, epoch)."""
    from protocol.messages.find_coordinator import FindCoordinatorRequest
    from protocol.messages.init_producer_id import InitProducerIdRequest
    assert (await conn.send(FindCoordinatorRequest(key=tid, key_type=1), 3)).error_code == 0
    init = await conn.send(InitProducerIdRequest(transactional_id=tid,
                                                 transaction_timeout_ms=60000), 4)
    assert init.error_code == 0
    return init.producer_id, init.producer_epoch


def test_a_write_outside_the_transaction_is_refused_not_left_hanging(kafka_broker):
    """KIP-890 verification: a transactional batch for a partition that was not added to the
    producer's transaction (a late write after an abort, say) is refused with
    INVALID_TXN_STATE and not appended, so no hanging transaction holds read_committed back."""
    from protocol.errors import ErrorCode as E
    from protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
    from protocol.messages.produce import ProduceRequest
    from storage.record_batch import RecordBatchBuilder
    bootstrap = kafka_broker.bootstrap
    create_topic(bootstrap, "late")

    async def scenario(conn):
        pid, epoch = await init_transactional(conn, "late-tx")

        def produce(seq):
            batch = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch,
                                       base_sequence=seq, is_transactional=True)
            batch.append(0, None, b"late")
            return conn.send(ProduceRequest(transactional_id="late-tx", acks=-1,
                                            timeout_ms=10000, topic_data=[
                ProduceRequest.TopicProduceData(name="late", partition_data=[
                    ProduceRequest.PartitionProduceData(index=0,
                                                        records=batch.build())])]), 9)

        def code(response):
            return response.responses[0].partition_responses[0].error_code
        refused = await produce(0)
        assert code(refused) == E.INVALID_TXN_STATE
        assert refused.responses[0].partition_responses[0].error_message == \
            "Partition was not added to the transaction"
        added = await conn.send(AddPartitionsToTxnRequest(
            v3_and_below_transactional_id="late-tx", v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
                name="late", partitions=[0])]), 3)
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0] \
            .partition_error_code == 0
        accepted = await produce(0)
        assert code(accepted) == 0 and \
            accepted.responses[0].partition_responses[0].base_offset == 0
    on_connection(bootstrap, scenario)


def test_offsets_outside_the_transaction_are_refused(kafka_broker):
    """KIP-890 verification of TxnOffsetCommit (Kafka 3.9): offsets sent before
    AddOffsetsToTxn put the group's partition in the transaction are refused
    (INVALID_TXN_STATE; TRANSACTION_ABORTABLE from v4, which knows it) and not stored; after
    it they are accepted."""
    from protocol.errors import ErrorCode as E
    from protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest
    from protocol.messages.find_coordinator import FindCoordinatorRequest
    from protocol.messages.txn_offset_commit import TxnOffsetCommitRequest
    bootstrap = kafka_broker.bootstrap
    create_topic(bootstrap, "source")

    async def scenario(conn):
        assert (await conn.send(FindCoordinatorRequest(key="offsets-group", key_type=0),
                                3)).error_code == 0
        pid, epoch = await init_transactional(conn, "offsets-tx")

        async def commit(version):
            Topic = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
            Partition = TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition
            answer = await conn.send(TxnOffsetCommitRequest(
                transactional_id="offsets-tx", group_id="offsets-group", producer_id=pid,
                producer_epoch=epoch, generation_id=-1, member_id="",
                topics=[Topic(name="source", partitions=[Partition(
                    partition_index=0, committed_offset=42, committed_leader_epoch=-1,
                    committed_metadata="")])]), version)
            return answer.topics[0].partitions[0].error_code
        assert await commit(3) == E.INVALID_TXN_STATE
        assert await commit(4) == E.TRANSACTION_ABORTABLE
        added = await conn.send(AddOffsetsToTxnRequest(
            transactional_id="offsets-tx", producer_id=pid, producer_epoch=epoch,
            group_id="offsets-group"), 3)
        assert added.error_code == 0
        assert await commit(3) == 0
    on_connection(bootstrap, scenario)


JS_DIR = pathlib.Path(__file__).resolve().parents[1] / "js"


def test_kafkajs_transactions_commit_abort_and_send_offsets(kafka_broker):
    """kafkajs (Node.js), as its documentation uses transactions: committed transactions are
    read by read_committed consumers, aborted ones only by read_uncommitted ones, and the
    offsets sent in a transaction are the group's once it commits."""
    bootstrap = kafka_broker.bootstrap
    create_topic(bootstrap, "js-txn", partitions=3)
    run_kafkajs_transactions(bootstrap, "js-txn")
    committed = consume_all(bootstrap, "js-txn", "read_committed")     # until quiet
    everything = consume_all(bootstrap, "js-txn", "read_uncommitted", expect=25)
    assert sorted(committed) == KAFKAJS_COMMITTED
    assert sorted(v for v in everything if v.startswith("aborted")) == sorted(
        f"aborted-{t}-{i}" for t in (1, 3) for i in range(6))
    assert kafkajs_group_offset(bootstrap, "js-txn") == 5


# What tests/js/transactions.js commits (sorted), and the offset it sends for its group.
KAFKAJS_COMMITTED = sorted([f"committed-{t}-{i}" for t in (0, 2) for i in range(6)]
                           + ["with-offsets"])


def run_kafkajs_transactions(bootstrap, topic) -> None:
    if not (JS_DIR / "node_modules" / "kafkajs").is_dir():
        pytest.fail("kafkajs is not installed: run `make test` (or `make js-deps`)")
    done = subprocess.run(["node", str(JS_DIR / "transactions.js"), bootstrap, topic,
                           f"{topic}-tx", f"{topic}-group"], cwd=JS_DIR, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "done" in done.stdout, done.stderr[-2000:]


def kafkajs_group_offset(bootstrap, topic) -> int:
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-group"})
    try:
        [offset] = consumer.committed([TopicPartition(topic, 0)], 10)
        return offset.offset
    finally:
        consumer.close()


def test_describe_producers_checks_the_topic_first_as_kafka(kafka_broker):
    """KafkaApis.handleDescribeProducersRequest: an illegal name is INVALID_TOPIC_EXCEPTION and
    a topic the metadata lacks UNKNOWN_TOPIC_OR_PARTITION, each with its message, for every
    partition asked; a partition missing here has the code alone."""
    from protocol.errors import ErrorCode as E
    from protocol.messages.describe_producers import DescribeProducersRequest
    create_topic(kafka_broker.bootstrap, "dp-known")

    async def scenario(conn):
        response = await conn.send(DescribeProducersRequest(topics=[
            DescribeProducersRequest.TopicRequest(name=name, partition_indexes=[0, 7])
            for name in ("bad name!", "dp-nowhere", "dp-known")]), 0)
        got = {(t.name, p.partition_index): (p.error_code, p.error_message)
               for t in response.topics for p in t.partitions}
        assert got[("bad name!", 0)][0] == got[("bad name!", 7)][0] == E.INVALID_TOPIC_EXCEPTION
        assert got[("bad name!", 7)][1] == ("Topic name is invalid: 'bad name!' contains one or "
                                            "more characters other than ASCII alphanumerics, "
                                            "'.', '_' and '-'")
        assert got[("dp-nowhere", 7)] == (E.UNKNOWN_TOPIC_OR_PARTITION,
                                          "This server does not host this topic-partition.")
        assert got[("dp-known", 0)] == (E.NONE, None)
        assert got[("dp-known", 7)] == (E.UNKNOWN_TOPIC_OR_PARTITION, None)
    on_connection(kafka_broker.bootstrap, scenario)
