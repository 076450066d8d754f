"""Log compaction under faults, with real processes and real clients (no mocks).

1. ``kill -9`` of a broker in the middle of cleaning a compacted topic, at random points
   (offset map, segment rewrite, swap, checkpoint): the cleaner is throttled
   (log.cleaner.io.max.bytes.per.second) so one clean takes a second or two. After every
   restart a consumer from offset 0 must see every key's latest value at the offset its
   delivery report gave, offsets strictly increasing, and nothing that was not produced for
   that key at that offset; in the end a complete clean leaves no ``.cleaned`` / ``.swap``
   file and each key at most once below the cleaner checkpoint.
2. A replicated (RF=3) compacted topic in a ZooKeeper-mode cluster: every replica cleans its
   own copy; after ``kill -9`` of the leader a consumer sees the same latest-per-key state from
   the new leader, and the three copies on disk hold the same (offset, key, value) records in
   the cleaned range, exactly the latest per key.

`KBROKER_COMPACTION_SEED` fixes the random kill points (the seed is printed; ``-s`` shows it).
"""
import os
import pathlib
import random
import re
import shutil
import time
import types
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEYS = 300
VALUE_SIZE = 1000


# ---- helpers -----------------------------------------------------------------------------------

def wait_for(predicate, timeout, message):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError(f"{message} (after {timeout} s)")


def create_topic(bootstrap, topic, replication_factor, config):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, replication_factor, config=config)])[topic].result(60)
    wait_for(lambda: topic in admin.list_topics(timeout=10).topics
             and admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader >= 0,
             30, f"{topic} has no leader")


class Ledger:
    """What was produced: offset -> (key, value) from the delivery reports."""

    def __init__(self):
        self.at = {}

    def produce(self, bootstrap, topic, records, **config):
        """Produce `records` [(key, value)] with acks=all; every one must be delivered."""
        failed = []

        def on_delivery(err, msg):
            if err is not None:
                failed.append(str(err))
            else:
                self.at[msg.offset()] = (msg.key(), msg.value())

        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                             "message.timeout.ms": 60000, **config})
        for key, value in records:
            while True:
                try:
                    producer.produce(topic, value, key=key, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
        remaining = producer.flush(90)
        assert remaining == 0 and not failed, f"{remaining} undelivered, failures: {failed[:3]}"

    def latest(self, below=None):
        """key -> (offset, value) of each key's last record (below offset `below`)."""
        out = {}
        for offset in sorted(self.at):
            if below is None or offset < below:
                key, value = self.at[offset]
                out[key] = (offset, value)
        return out


def consume_all(bootstrap, topic, timeout=60):
    """Every record of partition 0 from offset 0 to the end: [(offset, key, value)]."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4()}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "auto.offset.reset": "earliest", "fetch.max.bytes": 8 << 20,
                         "max.partition.fetch.bytes": 8 << 20})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        records = []
        deadline = time.monotonic() + timeout
        while True:
            assert time.monotonic() < deadline, f"no end of {topic}-0 within {timeout} s " \
                                                f"({len(records)} records read)"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return records
                continue                          # transient (leader moving): retried
            records.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()


def check_consistent(records, ledger: Ledger, where: str):
    """Offsets strictly increase, every record is one produced for that key at that offset,
    and every key's latest value is there at its offset."""
    offsets = [o for o, _, _ in records]
    bad_order = [(a, b) for a, b in zip(offsets, offsets[1:]) if b <= a]
    assert not bad_order, f"{where}: offsets not strictly increasing: {bad_order[:5]}"
    foreign = [(o, k, (v or b"")[:40]) for o, k, v in records if ledger.at.get(o) != (k, v)]
    assert not foreign, f"{where}: {len(foreign)} records that were not produced at their " \
                        f"offset, e.g. {foreign[:5]}"
    seen = {o for o, _, _ in records}
    missing = [(k, o) for k, (o, _) in ledger.latest().items() if o not in seen]
    assert not missing, f"{where}: {len(missing)} keys lost their latest value, " \
                        f"e.g. (key, offset) {sorted(missing)[:5]}"


def overwrites(rng, round_, count):
    """`count` keyed records over KEYS keys, ~VALUE_SIZE bytes each, all distinct values."""
    out = []
    for seq in range(count):
        key = f"key-{rng.randrange(KEYS):04d}".encode()
        head = f"{key.decode()}|round-{round_}|{seq}|".encode()
        out.append((key, head + b"v" * (VALUE_SIZE - len(head))))
    return out


def children(pid):
    """Pids of the live processes whose parent is ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def segment_files(directory, extra):
    return sorted(n for n in os.listdir(directory) if n.endswith(extra))


# ---- 1. kill -9 during cleaning ----------------------------------------------------------------

TOPIC = "compacted"
CLEAN_BEGIN = f"Beginning cleaning of log {TOPIC}-0"
SWAP = re.compile(rf"Swapping in cleaned segment \S+ for segment\(s\) \S+ in log {TOPIC}-0")
# Batches well under segment.bytes (else RECORD_LIST_TOO_LARGE, as from Kafka).
SMALL_BATCHES = {"batch.size": 16384}
CLEANED = re.compile(rf"cleaned log {TOPIC}-0 \(dirty section = \[(\d+), (\d+)\]\)")


def test_kill_minus_9_during_cleaning_loses_and_invents_nothing(broker_process):
    seed = int(os.environ.get("KBROKER_COMPACTION_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"[compaction-faults] seed {seed}", flush=True)
    broker = broker_process(log_cleaner_enable="false", log_cleaner_backoff_ms=100,
                            log_cleaner_io_max_bytes_per_second=2_500_000,
                            auto_create_topics_enable="false")
    create_topic(broker.bootstrap, TOPIC, 1, {
        "cleanup.policy": "compact", "segment.bytes": str(64 * 1024),
        "min.cleanable.dirty.ratio": "0.01"})
    ledger = Ledger()
    ledger.produce(broker.bootstrap, TOPIC, overwrites(rng, 0, 3000), **SMALL_BATCHES)
    check_consistent(consume_all(broker.bootstrap, TOPIC), ledger, "before any clean")
    partition_dir = pathlib.Path(broker.log_dir) / f"{TOPIC}-0"

    iterations = 4
    for i in range(iterations):
        if i > 0:                                    # new dirty data for the next clean
            ledger.produce(broker.bootstrap, TOPIC, overwrites(rng, i, 800), **SMALL_BATCHES)
        broker.kill()
        broker.overrides["log.cleaner.enable"] = "true"
        mark = len(broker.output())
        broker.restart()
        wait_for(lambda: CLEAN_BEGIN in broker.output()[mark:], 30,
                 f"iteration {i}: the cleaner did not begin cleaning {TOPIC}-0")
        if i == 0:
            # As soon as the worker process exists: it may not have started its watchdog yet.
            wait_for(lambda: children(broker.proc.pid), 10,
                     "the cleaner started no worker process")
            delay = 0.0
        else:
            delay = rng.uniform(0, 1.5)
            time.sleep(delay)
        workers = children(broker.proc.pid)
        assert workers, f"iteration {i}: the cleaner runs with no worker process"
        broker.kill()
        # The worker processes end with the broker, not later as orphans.
        wait_for(lambda: not any(alive(pid) for pid in workers), 10,
                 f"iteration {i}: cleaner worker processes {workers} outlived kill -9 of the broker")
        after = broker.output()[mark:]
        after = after[after.index(CLEAN_BEGIN):]
        print(f"[compaction-faults] iteration {i}: kill -9 {delay:.2f} s after 'Beginning "
              f"cleaning': {len(SWAP.findall(after))} segment swaps done, clean "
              f"{'completed' if CLEANED.search(after) else 'interrupted'}; "
              f".cleaned {len(segment_files(partition_dir, '.cleaned'))}, "
              f".swap {len(segment_files(partition_dir, '.swap'))}, "
              f".deleted {len(segment_files(partition_dir, '.deleted'))} files left",
              flush=True)
        # Restart without cleaning, so what the consumer sees is what recovery made of it.
        broker.overrides["log.cleaner.enable"] = "false"
        broker.restart()
        # Recovery (LogLoader) drops .cleaned and .deleted files and completes or drops swaps.
        left = [n for n in os.listdir(partition_dir)
                if n.endswith((".cleaned", ".swap", ".deleted"))]
        assert not left, f"iteration {i}: left after recovery in {partition_dir}: {left}"
        records = consume_all(broker.bootstrap, TOPIC)
        check_consistent(records, ledger, f"after kill -9 in iteration {i}")
        print(f"[compaction-faults] iteration {i}: {len(records)} records of "
              f"{len(ledger.at)} produced after recovery", flush=True)

    # Finally a clean runs to its end, with a consumer reading the log while it swaps.
    ledger.produce(broker.bootstrap, TOPIC, overwrites(rng, iterations, 800), **SMALL_BATCHES)
    broker.kill()
    broker.overrides["log.cleaner.enable"] = "true"
    mark = len(broker.output())
    broker.restart()
    wait_for(lambda: CLEAN_BEGIN in broker.output()[mark:], 30,
             f"the cleaner did not begin the last clean of {TOPIC}-0")
    check_consistent(consume_all(broker.bootstrap, TOPIC), ledger, "during the last clean")
    concurrent = not CLEANED.search(broker.output()[mark:])
    wait_for(lambda: CLEANED.search(broker.output()[mark:]), 60,
             f"no complete clean of {TOPIC}-0")
    print(f"[compaction-faults] read the log {'while' if concurrent else 'after'} the last "
          f"clean ran", flush=True)
    records = consume_all(broker.bootstrap, TOPIC)
    check_consistent(records, ledger, "after a complete clean")
    assert broker.stop() == 0
    checkpoint = read_cleaner_checkpoint(broker.log_dir)[(TOPIC, 0)]
    below = [k for o, k, _ in records if o < checkpoint]
    duplicated = sorted({k for k in below if below.count(k) > 1})
    assert not duplicated, f"keys still more than once below the cleaner checkpoint " \
                           f"{checkpoint}: {duplicated[:5]}"
    active_base = max(int(n[:20]) for n in os.listdir(partition_dir) if n.endswith(".log"))
    assert checkpoint == active_base, f"the last clean ended at {checkpoint}, not at the " \
                                      f"active segment's base offset {active_base}"
    leftovers = segment_files(partition_dir, ".cleaned") + segment_files(partition_dir, ".swap")
    assert not leftovers, f"left in {partition_dir}: {leftovers}"
    print(f"[compaction-faults] complete clean: {len(records)} records of {len(ledger.at)} "
          f"produced, cleaner checkpoint {checkpoint}", flush=True)


def read_cleaner_checkpoint(log_dir):
    from storage import checkpoints, files
    return checkpoints.read_offsets(os.path.join(log_dir, files.CLEANER_CHECKPOINT))


# ---- 2. a replicated compacted topic ----------------------------------------------------------

RTOPIC = "compacted-rf3"
SEGMENT_MS = 1500
RCLEANED = re.compile(rf"cleaned log {RTOPIC}-0 \(dirty section = \[(\d+), (\d+)\]\)")


def disk_records(partition_dir, scratch, end):
    """(offset, key, value) of the data records below `end` in a copy of `partition_dir`
    opened with storage.log.Log (the copy takes whatever recovery does at open)."""
    from storage.log import Log
    from storage.log_config import LogConfig
    copy = pathlib.Path(scratch) / pathlib.Path(partition_dir).name
    shutil.copytree(partition_dir, copy)
    log = Log(str(copy), LogConfig(cleanup_policy="compact"))
    try:
        out = []
        for batch in log.read_batches(0, end):
            if batch.is_control:
                continue
            out.extend((r.offset, r.key, r.value) for r in batch.records() if r.offset < end)
        return out
    finally:
        log.close()


def test_replicated_compacted_topic_replicas_clean_alike(zookeeper, tmp_path):
    from broker.testing.cluster import KafkaCluster
    chroot = types.SimpleNamespace(
        connect_string=f"{zookeeper.connect_string}/compaction-faults-{uuid.uuid4().hex[:8]}")
    rng = random.Random(7)
    from kazoo.client import KazooClient
    zk = KazooClient(hosts=zookeeper.connect_string)
    zk.start(timeout=10)
    try:
        zk.ensure_path(chroot.connect_string[len(zookeeper.connect_string):])
    finally:
        zk.stop()
        zk.close()
    with KafkaCluster(3, tmp_path / "cluster", zookeeper=chroot,
                      config={"log.cleaner.backoff.ms": 100,
                              "min.insync.replicas": 2}) as cluster:
        create_topic(cluster.bootstrap_servers, RTOPIC, 3, {
            "cleanup.policy": "compact", "segment.ms": str(SEGMENT_MS),
            "min.cleanable.dirty.ratio": "0.01"})
        cluster.wait_for_isr(RTOPIC, 0, [0, 1, 2], timeout=30)
        ledger = Ledger()
        # Overwrites in bursts more than segment.ms apart (several segments rolled by time),
        # some of them tombstones (kept: delete.retention.ms is a day).
        for burst in range(3):
            records = []
            for seq in range(400):
                key = f"key-{rng.randrange(60):03d}".encode()
                value = None if rng.random() < 0.1 else f"{key.decode()}|{burst}|{seq}".encode()
                records.append((key, value))
            ledger.produce(cluster.bootstrap_servers, RTOPIC, records,
                           **{"compression.type": ["none", "lz4", "gzip"][burst]})
            time.sleep(SEGMENT_MS / 1000 + 0.3)
        # acks=all with the ISR at three: every replica has it all, so the next record
        # reaches each follower in a fetch of its own and rolls its active segment there too.
        cluster.wait_for_isr(RTOPIC, 0, [0, 1, 2], timeout=30)
        ledger.produce(cluster.bootstrap_servers, RTOPIC, [(b"roll", b"roll")])
        end = max(ledger.at)                     # the roll record's offset: the cleaned range end
        expected = sorted((o, k, v) for k, (o, v) in ledger.latest(below=end).items())

        def cleaned_to_end(broker_id):
            return any(int(m.group(2)) == end
                       for m in RCLEANED.finditer(cluster.output(broker_id)))
        for broker_id in cluster.brokers:
            wait_for(lambda: cleaned_to_end(broker_id), 60,
                     f"broker {broker_id} did not clean {RTOPIC}-0 up to {end}:\n"
                     + "\n".join(cluster.output(broker_id).splitlines()[-30:]))

        # kill -9 of the leader: the new leader serves the same latest-per-key state.
        leader = cluster.leader(RTOPIC, 0)
        cluster.kill(leader)
        new_leader = cluster.wait_for_leader(RTOPIC, 0, not_in={leader}, timeout=60)
        live = ",".join(cluster.bootstrap(b) for b in cluster.brokers if b != leader)
        records = consume_all(live, RTOPIC, timeout=90)
        check_consistent(records, ledger, f"from the new leader {new_leader}")
        below = sorted(r for r in records if r[0] < end)
        assert below == expected, f"the new leader {new_leader} serves, below {end}, " \
                                  f"{len(below)} records, not the {len(expected)} latest per key"
    # All stopped (the old leader by kill -9): the three copies on disk.
    scratch = tmp_path / "copies"
    copies = {}
    for broker_id in (0, 1, 2):
        log_dir = tmp_path / "cluster" / f"kafka-logs-{broker_id}"
        assert read_cleaner_checkpoint(log_dir).get((RTOPIC, 0)) == end, broker_id
        copies[broker_id] = disk_records(log_dir / f"{RTOPIC}-0", scratch / str(broker_id), end)
    for broker_id, got in copies.items():
        diff = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b),
                    min(len(got), len(expected)))
        assert got == expected, (
            f"broker {broker_id}'s copy below {end} holds {len(got)} records, the latest per "
            f"key are {len(expected)}; first difference at index {diff}: "
            f"{got[diff:diff + 1]} vs {expected[diff:diff + 1]}")
    assert copies[0] == copies[1] == copies[2]
