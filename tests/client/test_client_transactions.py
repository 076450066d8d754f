"""The built-in producer's idempotence and transactions against a live broker, checked with what
confluent-kafka (librdkafka) consumers and the log on disk show."""
import asyncio
import pathlib
import time

import confluent_kafka
import pytest

from broker.client.admin import Admin, NewTopic
from broker.client.cluster import ClusterClient
from broker.client.producer import Producer
from broker.client.transaction_manager import TransactionError
from protocol.errors import ErrorCode, KafkaError
from storage.record_batch import iter_batches


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 90))


async def create(cluster, name, partitions, configs=None):
    result = await Admin(cluster).create_topics([NewTopic(name, partitions, 1, configs=configs or {})])
    assert result[name][0] in (0, ErrorCode.TOPIC_ALREADY_EXISTS)


async def transactional(cluster, topic, partitions, configs=None, **settings):
    """`topic` created and a producer of transactional.id `topic`, initialised."""
    await create(cluster, topic, partitions, configs)
    producer = Producer(cluster, transactional_id=topic, **{"linger_ms": 0, **settings})
    await producer.init_transactions()
    return producer


def read_all(bootstrap, topic, isolation, expect=None):
    """Values a confluent-kafka consumer with `isolation` gets from the start, in order per
    partition (until `expect` of them, or 3 s without news)."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"tx-{topic}-{isolation}-{time.monotonic()}",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "isolation.level": isolation})
    consumer.subscribe([topic])
    values = []
    quiet = time.monotonic()
    try:
        while time.monotonic() - quiet < 3 and (expect is None or len(values) < expect):
            for message in consumer.consume(1000, 0.3):
                if message.error() is None:
                    values.append(message.value())
                    quiet = time.monotonic()
    finally:
        consumer.close()
    return values


def batches_on_disk(broker, topic, partition=0):
    log = pathlib.Path(broker.log_dir) / f"{topic}-{partition}" / "00000000000000000000.log"
    return [b for b in iter_batches(log.read_bytes()) if not b.is_control]


def test_commit_and_abort_across_partitions(client_broker):
    async def go():
        async with ClusterClient(client_broker.bootstrap) as cluster:
            producer = await transactional(cluster, "tx-ca", 3, linger_ms=5)
            producer.begin_transaction()
            for i in range(30):
                await producer.send("tx-ca", b"c%d" % i, partition=i % 3)
            await producer.commit_transaction()
            producer.begin_transaction()
            for i in range(9):
                await producer.send("tx-ca", b"a%d" % i, partition=i % 3)
            await producer.flush()                  # in the log, then aborted
            await producer.abort_transaction()
            producer.begin_transaction()
            queued = await producer.send("tx-ca", b"dropped", partition=0)
            await producer.abort_transaction()      # never sent: its record fails
            assert queued.done() and queued.exception() is not None
            producer.begin_transaction()
            await producer.send("tx-ca", b"last", partition=1)
            await producer.commit_transaction()
            await producer.close()
    run(go())
    committed = read_all(client_broker.bootstrap, "tx-ca", "read_committed", 31)
    assert sorted(committed) == sorted([b"c%d" % i for i in range(30)] + [b"last"])
    everything = read_all(client_broker.bootstrap, "tx-ca", "read_uncommitted", 40)
    assert len(everything) == 40 and b"dropped" not in everything
    batches = batches_on_disk(client_broker, "tx-ca", 1)
    assert all(b.is_transactional and b.producer_id >= 0 for b in batches)
    sequences = [(b.base_sequence, b.records_count) for b in batches]
    assert sequences[0][0] == 0
    assert all(a + n == b for (a, n), (b, _) in zip(sequences, sequences[1:])), sequences


def test_a_newer_instance_fences_the_older_one(client_broker):
    """As Java's: the old producer's commit fails (fenced) and nothing more can be done with it;
    what it left open is aborted; the new one commits."""
    async def go():
        async with ClusterClient(client_broker.bootstrap) as cluster:
            await create(cluster, "tx-fence", 2)
            old = Producer(cluster, transactional_id="tx-fence", linger_ms=0)
            await old.init_transactions()
            old.begin_transaction()
            await (await old.send("tx-fence", b"zombie", partition=0))
            new = Producer(cluster, transactional_id="tx-fence", linger_ms=0)
            await new.init_transactions()           # aborts the zombie's transaction
            with pytest.raises((KafkaError, TransactionError)) as raised:
                await old.commit_transaction()
            if isinstance(raised.value, KafkaError):
                assert raised.value.error_code in (ErrorCode.PRODUCER_FENCED,
                                                   ErrorCode.INVALID_PRODUCER_EPOCH)
            with pytest.raises(TransactionError):
                old.begin_transaction()
            new.begin_transaction()
            await new.send("tx-fence", b"alive", partition=0)
            await new.commit_transaction()
            await new.close()
            await old.close()
    run(go())
    assert read_all(client_broker.bootstrap, "tx-fence", "read_committed", 1) == [b"alive"]


def test_a_fenced_producer_closing_says_its_abort_failed(client_broker, caplog):
    """close() aborts an open transaction; when the coordinator refuses (fenced by a newer
    instance) the close still ends, and the log says why (the coordinator aborts it)."""
    async def go():
        async with ClusterClient(client_broker.bootstrap) as cluster:
            old = await transactional(cluster, "tx-fenced-close", 1)
            old.begin_transaction()
            await (await old.send("tx-fenced-close", b"zombie", partition=0))
            new = Producer(cluster, transactional_id="tx-fenced-close", linger_ms=0)
            await new.init_transactions()
            await old.close()
            await new.close()
    with caplog.at_level("INFO", logger="broker.client.producer"):
        run(go())
    messages = [r.getMessage() for r in caplog.records if r.name == "broker.client.producer"]
    assert messages[0] == "Aborting incomplete transaction due to shutdown", messages
    assert messages[1].startswith("Aborting the incomplete transaction failed: "), messages


def test_a_failed_record_means_abort_then_a_new_epoch(client_broker):
    """A record the broker refuses (too large for the topic) makes the commit fail; after the
    abort the producer goes on with a bumped epoch (KIP-360), its sequences from 0, and the
    next transaction commits."""
    async def go():
        async with ClusterClient(client_broker.bootstrap) as cluster:
            producer = await transactional(cluster, "tx-big", 1, {"max.message.bytes": "2000"})
            producer.begin_transaction()
            await (await producer.send("tx-big", b"ok-1", partition=0))
            big = await producer.send("tx-big", b"x" * 5000, partition=0)
            with pytest.raises(KafkaError) as raised:
                await big
            assert raised.value.error_code == ErrorCode.MESSAGE_TOO_LARGE
            with pytest.raises(TransactionError, match="abort"):
                await producer.commit_transaction()
            with pytest.raises(TransactionError):
                await producer.send("tx-big", b"refused", partition=0)
            await producer.abort_transaction()
            producer.begin_transaction()
            for i in range(3):
                await producer.send("tx-big", b"next-%d" % i, partition=0)
            await producer.commit_transaction()
            await producer.close()
    run(go())
    assert read_all(client_broker.bootstrap, "tx-big", "read_committed", 3) == [
        b"next-0", b"next-1", b"next-2"]
    batches = batches_on_disk(client_broker, "tx-big")
    assert batches[-1].producer_epoch == batches[0].producer_epoch + 1
    assert batches[-1].base_sequence == 0


def test_idempotent_producer_numbers_its_batches(client_broker):
    async def go():
        async with ClusterClient(client_broker.bootstrap) as cluster:
            await create(cluster, "idem", 1)
            producer = Producer(cluster, enable_idempotence=True, linger_ms=0, batch_size=200)
            futures = [await producer.send("idem", b"v%03d" % i, partition=0) for i in range(200)]
            await producer.flush()
            offsets = [f.result().offset for f in futures]
            await producer.close()
            return offsets
    assert run(go()) == list(range(200))
    batches = batches_on_disk(client_broker, "idem")
    assert len(batches) > 1 and len({b.producer_id for b in batches}) == 1
    assert batches[0].producer_id >= 0 and not batches[0].is_transactional
    assert [b.base_sequence for b in batches] == [b.base_offset for b in batches]


def test_calls_in_the_wrong_state_are_refused(client_broker):
    async def go():
        async with ClusterClient(client_broker.bootstrap) as cluster:
            await create(cluster, "tx-state", 1)
            producer = Producer(cluster, transactional_id="tx-state", linger_ms=0)
            with pytest.raises(TransactionError, match="initTransactions"):
                await producer.send("tx-state", b"early")
            await producer.init_transactions()
            with pytest.raises(TransactionError, match="in state READY"):
                await producer.send("tx-state", b"outside")
            with pytest.raises(TransactionError):
                await producer.commit_transaction()
            producer.begin_transaction()
            with pytest.raises(TransactionError):
                producer.begin_transaction()
            await producer.commit_transaction()     # nothing sent: ends locally
            await producer.close()
            plain = Producer(cluster)
            with pytest.raises(TransactionError):
                plain.begin_transaction()
            with pytest.raises(ValueError, match="acks to all"):
                Producer(cluster, enable_idempotence=True, acks=1)
    run(go())


def test_idempotence_is_settled_as_javas_producer_settles_it():
    from broker.client.producer import _idempotence
    assert _idempotence(None, None, -1, 5) is True           # Java 3.x's default
    assert _idempotence(None, None, 1, 5) is False           # acks=1 not set together with it
    assert _idempotence(None, None, -1, 6) is False
    assert _idempotence(False, None, -1, 5) is False
    assert _idempotence(None, "tx", -1, 5) is True
    with pytest.raises(ValueError, match="acks to all"):
        _idempotence(True, None, 0, 5)
    with pytest.raises(ValueError, match="at most 5"):
        _idempotence(True, None, -1, 6)
    with pytest.raises(ValueError, match="without also enabling idempotence"):
        _idempotence(None, "tx", 1, 5)                   # idempotence off first, then this
    with pytest.raises(ValueError, match="without also enabling idempotence"):
        _idempotence(False, "tx", -1, 5)
    assert _idempotence(None, None, -1, 5, retries=0) is False
    with pytest.raises(ValueError, match="retries to non-zero"):
        _idempotence(True, None, -1, 5, retries=0)


def test_the_default_producer_is_idempotent_and_acks_1_is_not(client_broker):
    async def go():
        async with ClusterClient(client_broker.bootstrap) as cluster:
            for topic, settings in (("idem-default", {}), ("idem-acks1", {"acks": 1})):
                await create(cluster, topic, 1)
                producer = Producer(cluster, linger_ms=0, **settings)
                await (await producer.send(topic, b"v", partition=0))
                await producer.close()
    run(go())
    assert batches_on_disk(client_broker, "idem-default")[0].producer_id >= 0
    assert batches_on_disk(client_broker, "idem-acks1")[0].producer_id == -1


def test_no_send_during_a_commit_and_close_aborts_an_open_transaction(client_broker):
    """Java's COMMITTING_TRANSACTION state refuses sends (one slipping in was committed, or
    failed after the commit returned); a close aborts a transaction left open, as Java's
    Sender does, so read_committed consumers do not wait for its timeout."""
    async def go():
        async with ClusterClient(client_broker.bootstrap) as cluster:
            producer = await transactional(cluster, "tx-close", 1)
            producer.begin_transaction()
            await producer.send("tx-close", b"committed", partition=0)
            commit = asyncio.ensure_future(producer.commit_transaction())
            await asyncio.sleep(0)
            with pytest.raises(TransactionError, match="COMMITTING_TRANSACTION"):
                await producer.send("tx-close", b"during the commit", partition=0)
            await commit
            with pytest.raises(TransactionError, match="INITIALIZING"):
                await producer.init_transactions()
            producer.begin_transaction()
            await (await producer.send("tx-close", b"left open", partition=0))
            await producer.close()
        return ()
    run(go())
    assert read_all(client_broker.bootstrap, "tx-close", "read_committed", 1) == [b"committed"]
    consumer = confluent_kafka.Consumer({"bootstrap.servers": client_broker.bootstrap,
                                         "group.id": "tx-close-lso", "isolation.level": "read_committed"})
    try:
        low, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition("tx-close", 0),
                                                   timeout=10)
    finally:
        consumer.close()
    assert high == 4          # committed, its marker, left open, its abort marker: no open txn


def test_after_a_failed_record_the_queued_ones_fail_as_aborted(client_broker):
    """Java's abortUndrainedBatches: once the transaction can only abort, batches not sent yet
    fail with that error instead of going out with a sequence gap the broker refuses
    (OUT_OF_ORDER_SEQUENCE_NUMBER)."""
    async def go():
        async with ClusterClient(client_broker.bootstrap) as cluster:
            producer = await transactional(cluster, "tx-undrained", 1, {"max.message.bytes": "2000"},
                                           batch_size=100)
            producer.begin_transaction()
            big = await producer.send("tx-undrained", b"x" * 5000, partition=0)
            small = [await producer.send("tx-undrained", b"s%d" % i, partition=0)
                     for i in range(3)]
            await asyncio.wait([big, *small])
            errors = [f.exception() for f in small]
            await producer.abort_transaction()
            producer.begin_transaction()
            await producer.send("tx-undrained", b"after", partition=0)
            await producer.commit_transaction()
            await producer.close()
            return big.exception(), errors
    big_error, errors = run(go())
    assert big_error.error_code == ErrorCode.MESSAGE_TOO_LARGE
    for error in errors:
        assert isinstance(error, TransactionError) and "aborted" in str(error), errors
    assert read_all(client_broker.bootstrap, "tx-undrained", "read_committed", 1) == [b"after"]
