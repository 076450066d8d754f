"""Log compaction with real clients against a broker subprocess (storage/cleaner.py,
storage/log_cleaner.py).

- keyed records with overwrites and tombstones (confluent-kafka, lz4): after a clean a consumer
  from offset 0 (confluent-kafka and kcat) sees exactly the latest record of every key at the
  offset its producer's delivery report gave, and kafka-log-dirs.sh reports a smaller log;
- tombstones outlive the first clean and go with a later one, once delete.retention.ms passed;
- a record without a key is refused with INVALID_RECORD (confluent-kafka and kafka-python) and
  nothing is written;
- committed and aborted transactions: read_committed readers (confluent-kafka, kcat) see the
  same state before and after the clean, and read_uncommitted no longer sees aborted records;
- __consumer_offsets with small segments stays small under thousands of commits of the same
  partitions, and the group's offsets survive a restart (reloaded from the compacted log).

Only non-active segments are cleaned, so a test rolls the segment it wants cleaned: the topic
has a short segment.ms, and a record produced after it passed ("roll-N", a key of its own)
starts a new segment (__consumer_offsets rolls by its small segment.bytes). A clean is seen in
the broker's output ("cleaned log <topic>-<p> (dirty section = [first, end])"); the tests wait
for one whose end reaches the roll record.
"""
import json
import pathlib
import random
import re
import subprocess
import time

import pytest

from tests.integration.test_clients import KCAT

pytestmark = pytest.mark.integration

ROOT = pathlib.Path(__file__).resolve().parents[2]
FAST_CLEANER = {"log.cleaner.backoff.ms": 200}
SEGMENT_MS = 1000
COMPACTED = {"cleanup.policy": "compact", "segment.ms": str(SEGMENT_MS),
             "min.cleanable.dirty.ratio": "0.01"}


# -- helpers --------------------------------------------------------------------------------

def wait_for(predicate, timeout: float, what: str, interval: float = 0.1):
    """Poll `predicate` until it returns something truthy; fail naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def create_topic(bootstrap, name, configs, partitions=1):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=configs)])
    for future in futures.values():
        future.result(timeout=15)


def cleans(broker, topic, partition=0) -> list:
    """(first dirty, end) of every clean of `topic`-`partition` the broker logged so far."""
    pattern = re.compile(rf"cleaned log {re.escape(topic)}-{partition} "
                         rf"\(dirty section = \[(\d+), (\d+)\]\)")
    return [(int(a), int(b)) for a, b in pattern.findall(broker.output())]


def wait_for_clean(broker, topic, past_offset, partition=0, timeout=20.0) -> tuple:
    """Wait for a clean whose dirty section ends after `past_offset` (the roll record's offset:
    everything before it was in the cleaned segments). Returns that clean's section."""
    def done():
        return [c for c in cleans(broker, topic, partition) if c[1] >= past_offset]
    return wait_for(done, timeout, f"a clean of {topic}-{partition} up to {past_offset}")[0]


class Delivered:
    """Delivery reports of a confluent-kafka producer: (offset, key, value), or the error."""

    def __init__(self):
        self.records, self.errors = [], []

    def __call__(self, err, msg):
        if err is not None:
            self.errors.append((err, msg.key(), msg.value()))
        else:
            self.records.append((msg.offset(), msg.key(), msg.value()))


def roll(bootstrap, topic, name, partition=0) -> int:
    """Produce one record with a key of its own after segment.ms passed since the last append,
    so the active segment rolls and everything before it is cleanable. Returns its offset."""
    from confluent_kafka import Producer
    time.sleep(SEGMENT_MS / 1000 + 0.2)
    delivered = Delivered()
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, key=name.encode(), value=b"roll", partition=partition,
                     on_delivery=delivered)
    assert producer.flush(15) == 0 and not delivered.errors, delivered.errors
    return delivered.records[0][0]


def read_partition(bootstrap, topic, partition=0, isolation="read_uncommitted",
                   timeout=20.0) -> list:
    """(offset, key, value) of every record from offset 0 to the end (the high watermark, or
    the last stable offset for read_committed), read with confluent-kafka."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.time_ns()}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    got, deadline = [], time.monotonic() + timeout
    try:
        while True:
            assert time.monotonic() < deadline, f"no end of {topic}-{partition} after {got[-3:]}"
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    return got
                raise AssertionError(message.error())
            got.append((message.offset(), message.key(), message.value()))
    finally:
        consumer.close()


def kcat_read(bootstrap, topic, partition=0, isolation="read_uncommitted") -> list:
    """(offset, key, value) read by Debian's kcat from offset 0 to the end."""
    result = subprocess.run(
        [KCAT, "-b", bootstrap, "-C", "-t", topic, "-p", str(partition), "-o", "beginning", "-e",
         "-q", "-X", f"isolation.level={isolation}", "-f", "%o\\t%k\\t%S\\t%s\\n"],
        check=True, timeout=30, capture_output=True)
    records = []
    for line in result.stdout.decode().splitlines():
        offset, key, size, value = line.split("\t")
        records.append((int(offset), key.encode(), None if size == "-1" else value.encode()))
    return records


def partition_size(bootstrap, topic, partition=0) -> int:
    """The partition's size as bin/kafka-log-dirs.sh (DescribeLogDirs) reports it."""
    result = subprocess.run([str(ROOT / "bin" / "kafka-log-dirs.sh"), "--bootstrap-server",
                             bootstrap, "--describe", "--topic-list", topic],
                            check=True, timeout=30, capture_output=True, text=True)
    doc = json.loads(result.stdout.splitlines()[-1])
    sizes = [p["size"] for b in doc["brokers"] for d in b["logDirs"] for p in d["partitions"]
             if p["partition"] == f"{topic}-{partition}"]
    assert len(sizes) == 1, result.stdout
    return sizes[0]


def latest_per_key(records) -> list:
    """The last record of every key, in offset order (what compaction keeps)."""
    latest = {}
    for offset, key, value in records:
        latest[key] = (offset, key, value)
    return sorted(latest.values())


# -- 1. overwrites and tombstones --------------------------------------------------------------

def test_compacted_topic_keeps_the_latest_record_of_every_key_at_its_offset(broker_process):
    broker = broker_process(**FAST_CLEANER)
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "profiles", COMPACTED)

    from confluent_kafka import Producer
    rng = random.Random(7)
    delivered = Delivered()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "compression.type": "lz4"})
    for i in range(3000):
        key = b"user-%03d" % rng.randrange(150)
        value = None if rng.random() < 0.1 else b"%d:" % i + rng.randbytes(40).hex().encode()
        producer.produce("profiles", key=key, value=value, on_delivery=delivered)
    assert producer.flush(30) == 0 and not delivered.errors, delivered.errors[:3]
    produced = sorted(delivered.records)
    assert [r[0] for r in produced] == list(range(3000))
    size_before = partition_size(bootstrap, "profiles")

    roll_offset = roll(bootstrap, "profiles", "roll-1")
    wait_for_clean(broker, "profiles", roll_offset)

    expected = latest_per_key(produced) + [(roll_offset, b"roll-1", b"roll")]
    got = read_partition(bootstrap, "profiles")
    assert got == expected
    offsets = [r[0] for r in got]
    assert offsets == sorted(set(offsets))
    assert any(value is None for _, _, value in got)          # tombstones kept, for now
    assert kcat_read(bootstrap, "profiles") == expected
    size_after = partition_size(bootstrap, "profiles")
    assert size_after < size_before * 0.2, (size_before, size_after)


# -- 2. tombstones go after delete.retention.ms --------------------------------------------------

def test_tombstones_are_removed_by_a_clean_after_their_delete_horizon(broker_process):
    broker = broker_process(**FAST_CLEANER)
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "accounts", dict(COMPACTED, **{"delete.retention.ms": "1000"}))

    from confluent_kafka import Producer
    delivered = Delivered()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    keys = [b"acct-%02d" % i for i in range(30)]
    for key in keys:
        producer.produce("accounts", key=key, value=b"v1-" + key, on_delivery=delivered)
    for key in keys[:10]:                                       # deleted accounts
        producer.produce("accounts", key=key, value=None, on_delivery=delivered)
    assert producer.flush(15) == 0 and not delivered.errors, delivered.errors

    roll_1 = roll(bootstrap, "accounts", "roll-1")
    wait_for_clean(broker, "accounts", roll_1)
    first = read_partition(bootstrap, "accounts")
    assert first == latest_per_key(sorted(delivered.records)) + [(roll_1, b"roll-1", b"roll")]
    assert [key for _, key, value in first if value is None] == keys[:10]

    # The first clean stamped the tombstones' batch with now + delete.retention.ms; a clean
    # after that drops them. Make the log dirty again so that another clean is picked.
    time.sleep(1.5)
    for key in keys[20:]:
        producer.produce("accounts", key=key, value=b"v2-" + key, on_delivery=delivered)
    assert producer.flush(15) == 0 and not delivered.errors, delivered.errors
    roll_2 = roll(bootstrap, "accounts", "roll-2")
    wait_for_clean(broker, "accounts", roll_2)

    got = read_partition(bootstrap, "accounts")
    live = [r for r in latest_per_key(sorted(delivered.records)) if r[2] is not None]
    expected = sorted(live + [(roll_1, b"roll-1", b"roll"), (roll_2, b"roll-2", b"roll")])
    assert got == expected
    assert not {key for _, key, _ in got} & set(keys[:10])
    assert [value for _, key, value in got if key in keys[10:20]] == \
        [b"v1-" + key for key in keys[10:20]]
    assert [value for _, key, value in got if key in keys[20:]] == \
        [b"v2-" + key for key in keys[20:]]
    assert kcat_read(bootstrap, "accounts") == expected


# -- 3. records without a key ----------------------------------------------------------------

def kafka_python_send_error(bootstrap, topic, value):
    """The error kafka-python's send(...).get() raises for a record without a key (None if it
    was written). Caught here, so that its traceback holds no frame of the test."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        producer.send(topic, value=value).get(timeout=15)
    except KafkaError as exc:
        return exc
    finally:
        producer.close()
    return None


def test_record_without_key_is_refused_with_invalid_record(broker_process):
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
    broker = broker_process(**FAST_CLEANER)
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "keyed", COMPACTED)

    delivered = Delivered()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    producer.produce("keyed", key=b"k", value=b"kept", on_delivery=delivered)
    assert producer.flush(15) == 0 and not delivered.errors, delivered.errors

    producer.produce("keyed", value=b"no key", on_delivery=delivered)
    producer.flush(15)
    assert [(e.code(), v) for e, _, v in delivered.errors] == \
        [(KafkaError.INVALID_RECORD, b"no key")]

    # In one batch with a keyed record: Kafka refuses the whole batch.
    delivered.errors.clear()
    producer.produce("keyed", key=b"k2", value=b"with a key", on_delivery=delivered)
    producer.produce("keyed", value=b"no key either", on_delivery=delivered)
    producer.flush(15)
    assert sorted(e.code() for e, _, _ in delivered.errors) == [KafkaError.INVALID_RECORD] * 2
    assert len(delivered.records) == 1

    from kafka.errors import InvalidRecordError
    assert isinstance(kafka_python_send_error(bootstrap, "keyed", b"kafka-python, no key"),
                      InvalidRecordError)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "keyless-check"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition("keyed", 0), timeout=10) == (0, 1)
    finally:
        consumer.close()
    assert read_partition(bootstrap, "keyed") == [(0, b"k", b"kept")]


# -- 4. transactions ---------------------------------------------------------------------------

def test_transactions_on_a_compacted_topic(broker_process):
    from confluent_kafka import Producer
    broker = broker_process(**FAST_CLEANER)
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "ledger", COMPACTED)

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ledger-tx",
                         "linger.ms": 5})
    producer.init_transactions(30)
    keys = [b"k%02d" % i for i in range(20)]

    def transaction(commit, writes):
        producer.begin_transaction()
        for key, value in writes:
            producer.produce("ledger", key=key, value=value)
        producer.flush(15)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)

    transaction(True, [(k, b"c1-" + k) for k in keys])
    transaction(False, [(k, b"a2-" + k) for k in keys[:10]])        # aborted overwrites
    transaction(True, [(k, b"c3-" + k) for k in keys[10:15]] + [(keys[15], None)])
    transaction(False, [(k, b"a4-" + k) for k in keys[16:]] + [(keys[0], None)])
    expected_state = {k: b"c1-" + k for k in keys}
    expected_state.update({k: b"c3-" + k for k in keys[10:15]})
    expected_state[keys[15]] = None

    def state(records):
        return {key: value for _, key, value in records}

    committed_before = read_partition(bootstrap, "ledger", isolation="read_committed")
    assert state(committed_before) == expected_state
    uncommitted_before = read_partition(bootstrap, "ledger")
    assert sum(v is not None and v.startswith(b"a") for _, _, v in uncommitted_before) == 14

    roll_offset = roll(bootstrap, "ledger", "roll-1")
    wait_for_clean(broker, "ledger", roll_offset)

    expected = latest_per_key(committed_before) + [(roll_offset, b"roll-1", b"roll")]
    committed_after = read_partition(bootstrap, "ledger", isolation="read_committed")
    assert committed_after == expected
    assert state(committed_after[:-1]) == expected_state
    # The aborted batches are gone from the log itself: read_uncommitted sees the same.
    assert read_partition(bootstrap, "ledger") == expected
    assert kcat_read(bootstrap, "ledger", isolation="read_committed") == expected


# -- 5. __consumer_offsets ---------------------------------------------------------------------

OFFSETS_PARTITIONS = 50                           # offsets.topic.num.partitions' default

def java_string_hash(s: str) -> int:
    h = 0
    for ch in s:                                  # ASCII group ids: one UTF-16 unit per char
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition_of(group: str, partitions: int) -> int:
    """Kafka's GroupCoordinator.partitionFor: Utils.abs(groupId.hashCode) % partitions."""
    h = java_string_hash(group)
    return (0 if h == -2**31 else abs(h)) % partitions       # Utils.abs, not the partitioner's mask


def log_bytes(partition_dir: pathlib.Path) -> int:
    """Bytes of the partition's segment files on disk (not the .deleted ones waiting for
    file.delete.delay.ms)."""
    return sum(f.stat().st_size for f in partition_dir.iterdir() if f.name.endswith(".log"))


def test_consumer_offsets_stay_bounded_and_survive_a_restart(broker_process):
    from confluent_kafka import Consumer, TopicPartition
    broker = broker_process(offsets_topic_segment_bytes=16384,
                            offsets_topic_num_partitions=OFFSETS_PARTITIONS, **FAST_CLEANER)
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "orders", {}, partitions=4)
    group = "billing-service"
    offsets_partition = offsets_partition_of(group, OFFSETS_PARTITIONS)
    offsets_dir = pathlib.Path(broker.log_dir) / f"__consumer_offsets-{offsets_partition}"

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})

    def commit(n):
        consumer.commit(offsets=[TopicPartition("orders", p, n) for p in range(4)],
                        asynchronous=False)

    commit(1)
    # One commit's bytes in the log (one batch, four records: each commit writes the same
    # number of bytes), to size everything the loop writes.
    per_commit = partition_size(bootstrap, "__consumer_offsets", offsets_partition)
    assert per_commit > 0, f"group {group} is not in __consumer_offsets-{offsets_partition}"
    commits = 3000
    for n in range(2, commits + 1):
        commit(n)
    written = per_commit * commits

    wait_for(lambda: cleans(broker, "__consumer_offsets", offsets_partition),
             20, "a clean of the group's __consumer_offsets partition")
    wait_for(lambda: log_bytes(offsets_dir) * 10 < written, 20,
             f"{offsets_dir} to shrink below a tenth of {written} bytes")
    consumer.close()

    broker.restart()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        committed = consumer.committed([TopicPartition("orders", p) for p in range(4)],
                                       timeout=20)
    finally:
        consumer.close()
    assert [(tp.partition, tp.offset) for tp in committed] == [(p, commits) for p in range(4)]
    assert log_bytes(offsets_dir) * 10 < written
