"""The runbook of Kafka's operations guide ("Expanding your cluster", "Increasing replication
factor", "Decommissioning brokers", rolling restarts with "Balancing leadership", "Limiting
bandwidth usage during data migration") done with the bin/ tools against a four-broker
ZooKeeper cluster, while real clients keep producing and consuming.

Every scenario runs a steady stream (`Stream`): a confluent-kafka producer thread with acks=all
and enable.idempotence=true records each acknowledged (partition, offset, value), and a consumer
thread tails every partition from offset 0 the whole time. At the end the stream must be whole:
no delivery error, the tailing consumer and a fresh consumer from the beginning both see exactly
the acknowledged records, each at its offset, nothing lost, duplicated, moved or reordered.

The five scenarios share one cluster (module scope: four brokers, auto.leader.rebalance.enable=
false) and run in file order, as an operator would do them one after the other: expand onto
broker 3, raise a replication factor, decommission broker 3 (it stays stopped), a rolling restart
of the rest followed by a preferred leader election, then a throttled move. Each scenario creates
its own topics and only assumes what it checks first (which brokers are live), so any one of them
can also run alone (`-k`).

Two broker bugs these runbooks ran into are reproduced deterministically at the end of the file:
a stop that hung 27.5 s and exited 1 (about one SIGTERM in two under replication traffic, as in
the rolling restart: Python 3.11's asyncio.wait_for swallowed the replica fetchers' cancel), and
a follower whose diverging epoch an incremental fetch session never reported (seen once in the
decommission: acks=all writes to a partition stalled for 30 s)."""
import asyncio
import json
import os
import re
import subprocess
import threading
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from broker.client.connection import BrokerConnection
from broker.testing.cluster import KafkaCluster
from protocol.messages.fetch import FetchRequest
from protocol.messages.metadata import MetadataRequest

from tests.integration.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BIN = ROOT / "bin"
TOOL_TIMEOUT_S = 90


# --- the cluster --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with KafkaCluster(4, tmp_path_factory.mktemp("cluster-ops"),
                      config={"auto.leader.rebalance.enable": "false"}) as c:
        yield c


@pytest.fixture(scope="module")
def zk(cluster):
    """One ZooKeeper session for reading many znodes (the cluster's helpers open one per read)."""
    client = KazooClient(hosts=cluster.zookeeper.connect_string)
    client.start(timeout=30)
    yield client
    client.stop()
    client.close()


def live_bootstrap(cluster) -> str:
    return ",".join(cluster.bootstrap(b) for b in sorted(cluster.live_brokers()))


def ensure_running(cluster, brokers) -> None:
    """Start any of `brokers` a failed scenario before this one left stopped."""
    for broker in brokers:
        if not cluster.brokers[broker].running():
            cluster.start(broker)


def create(bootstrap, topic, assignment, config=None):
    client = AdminClient({"bootstrap.servers": bootstrap})     # alive until the result is in
    client.create_topics([NewTopic(topic, len(assignment), replica_assignment=assignment,
                                   config=config or {})])[topic].result(60)


def assignment(zk, topic) -> dict:
    """{partition: replicas} from the topic znode."""
    data, _ = zk.get(f"/brokers/topics/{topic}")
    return {int(p): r for p, r in json.loads(data)["partitions"].items()}


def state(zk, topic, partition) -> dict:
    data, _ = zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
    return json.loads(data)


def all_partitions(zk) -> dict:
    """{(topic, partition): (replicas, leader, isr)} of every topic, internal ones included."""
    out = {}
    for topic in zk.get_children("/brokers/topics"):
        for p, replicas in assignment(zk, topic).items():
            s = state(zk, topic, p)
            out[(topic, p)] = (replicas, s["leader"], s["isr"])
    return out


def wait_fully_replicated(cluster, zk, timeout=60.0):
    """Every partition's ISR is all of its replicas (and it has a leader)."""
    def lagging():
        return {tp: (replicas, leader, isr) for tp, (replicas, leader, isr)
                in all_partitions(zk).items() if leader < 0 or sorted(isr) != sorted(replicas)}
    try:
        cluster.wait_until(lambda: not lagging(), timeout)
    except TimeoutError:
        raise AssertionError(f"under-replicated after {timeout} s, (replicas, leader, isr): "
                             f"{lagging()}") from None


def partition_dirs(cluster, broker) -> list:
    base = cluster.brokers[broker].log_dir
    return sorted(n for n in os.listdir(base) if (base / n).is_dir()
                  and re.fullmatch(r".+-\d+", n) and not n.endswith("-delete"))


def log_bytes(cluster, broker, topic, partition) -> bytes:
    """The partition's record batches on one broker: its .log segments, in order."""
    path = cluster.brokers[broker].log_dir / f"{topic}-{partition}"
    return b"".join((path / name).read_bytes()
                    for name in sorted(os.listdir(path)) if name.endswith(".log"))


def log_size(cluster, broker, topic, partition) -> int:
    path = cluster.brokers[broker].log_dir / f"{topic}-{partition}"
    return sum((path / n).stat().st_size for n in os.listdir(path) if n.endswith(".log"))


def wait_identical_replicas(cluster, zk, topic, timeout=30.0):
    """Followers append the leader's batches byte for byte at the same offsets: once the
    writes stop, every replica's log is the same bytes (this is what "broker N holds the
    replica" means, data included)."""
    for p, replicas in assignment(zk, topic).items():
        def same():
            logs = [log_bytes(cluster, b, topic, p) for b in replicas]
            return all(log == logs[0] for log in logs) and len(logs[0]) > 0
        try:
            cluster.wait_until(same, timeout)
        except TimeoutError:
            raise AssertionError(f"replicas {replicas} of {topic}-{p} still differ after "
                                 f"{timeout} s: sizes "
                                 f"{[len(log_bytes(cluster, b, topic, p)) for b in replicas]}"
                                 ) from None


# --- the tools ----------------------------------------------------------------------------------

def run_tool(script, *args, timeout=TOOL_TIMEOUT_S):
    return subprocess.run([str(BIN / script), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def tool_ok(script, *args, timeout=TOOL_TIMEOUT_S) -> str:
    result = run_tool(script, *args, timeout=timeout)
    assert result.returncode == 0, (script, args, result.stdout, result.stderr)
    assert result.stderr == "", result.stderr
    return result.stdout


def generate(bootstrap, tmp_path, topics, broker_list) -> tuple:
    """--generate: (current, proposed), each the reassignment JSON the tool printed."""
    move = tmp_path / "topics-to-move.json"
    move.write_text(json.dumps({"topics": [{"topic": t} for t in topics], "version": 1}))
    out = tool_ok("kafka-reassign-partitions.sh", "--bootstrap-server", bootstrap,
                  "--generate", "--topics-to-move-json-file", move, "--broker-list", broker_list)
    lines = out.splitlines()
    current = json.loads(lines[lines.index("Current partition replica assignment") + 1])
    proposed = json.loads(lines[lines.index("Proposed partition reassignment configuration") + 1])
    return current, proposed


def execute(bootstrap, plan_path, *extra) -> str:
    out = tool_ok("kafka-reassign-partitions.sh", "--bootstrap-server", bootstrap, "--execute",
                  "--reassignment-json-file", plan_path, *extra)
    assert "Successfully started partition reassignment" in out, out
    return out


def verify_until_complete(bootstrap, plan_path, timeout=90.0, pause=0.5) -> tuple:
    """--verify until it says "is completed" for every partition of the plan; returns its
    output and when (time.monotonic()) the run that said so started."""
    plan = json.loads(plan_path.read_text())["partitions"]
    want = {f"Reassignment of partition {e['topic']}-{e['partition']} is completed."
            for e in plan}
    deadline = time.monotonic() + timeout
    while True:
        started = time.monotonic()
        out = tool_ok("kafka-reassign-partitions.sh", "--bootstrap-server", bootstrap,
                      "--verify", "--reassignment-json-file", plan_path)
        if want <= set(out.splitlines()):
            assert "still in progress" not in out, out
            return out, started
        assert time.monotonic() < deadline, f"reassignment not completed after {timeout} s:\n{out}"
        time.sleep(pause)


def describe(bootstrap, *args) -> str:
    return tool_ok("kafka-topics.sh", "--bootstrap-server", bootstrap, "--describe", *args)


def describe_partitions(bootstrap, topic) -> tuple:
    """(the header's ReplicationFactor, {partition: (leader, replicas, isr)}), as
    kafka-topics.sh --describe prints them."""
    out = describe(bootstrap, "--topic", topic)
    rf = int(re.search(r"ReplicationFactor: (\d+)", out).group(1))
    parts = {}
    for m in re.finditer(r"Partition: (\d+)\tLeader: (\d+|none)\tReplicas: ([\d,]+)\tIsr: ([\d,]*)",
                         out):
        parts[int(m[1])] = (int(m[2]) if m[2] != "none" else -1,
                            [int(b) for b in m[3].split(",")],
                            [int(b) for b in m[4].split(",") if b])
    return rf, parts


# --- the clients --------------------------------------------------------------------------------

class Stream:
    """A steady stream into every partition of `topic` while an operation runs.

    A producer thread (acks=all, enable.idempotence=true) sends a numbered value every
    `interval` seconds, round robin over the partitions, and records what is acknowledged as
    (partition, offset, value); a consumer thread tails every partition from offset 0 the whole
    time and records (partition, offset) -> value. `stop()` ends the writes, waits (bounded) for
    the consumer to have everything acknowledged, and `check()` holds them to the log."""

    def __init__(self, cluster, topic, interval=0.004):
        self.cluster = cluster
        self.topic = topic
        self.interval = interval
        md = AdminClient({"bootstrap.servers": live_bootstrap(cluster)}).list_topics(
            topic, timeout=30)
        self.partitions = len(md.topics[topic].partitions)
        assert self.partitions > 0
        self.acked = []
        self.errors = []
        self.unflushed = None
        self.sent = None
        self.seen = {}
        self.conflicts = []
        self.consumer_errors = []
        self.consumer_notes = []               # non-fatal errors the consumer met (reported)
        self._stop_producing = threading.Event()
        self._stop_consuming = threading.Event()
        self._threads = []

    def __enter__(self) -> "Stream":
        for target in (self._produce, self._consume):
            thread = threading.Thread(target=target, name=f"{target.__name__}-{self.topic}",
                                      daemon=True)
            thread.start()
            self._threads.append(thread)
        # The stream is flowing before the operation starts.
        self.cluster.wait_until(lambda: len(self.acked) >= 50 or self.errors, 60,
                                f"the producer to {self.topic} got no acknowledgement")
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _produce(self) -> None:
        producer = Producer({"bootstrap.servers": live_bootstrap(self.cluster), "acks": "all",
                             "enable.idempotence": True, "linger.ms": 5,
                             "message.timeout.ms": 120000})

        def on_delivery(err, msg):
            if err is None:
                self.acked.append((msg.partition(), msg.offset(), msg.value()))
            else:
                self.errors.append(err)
        seq = 0
        while not self._stop_producing.is_set():
            producer.produce(self.topic, f"{self.topic}:{seq:09d}".encode(),
                             partition=seq % self.partitions, on_delivery=on_delivery)
            seq += 1
            producer.poll(self.interval)
        self.unflushed = producer.flush(150)
        self.sent = seq

    def _consume(self) -> None:
        consumer = Consumer({"bootstrap.servers": live_bootstrap(self.cluster),
                             "group.id": f"tail-{self.topic}", "enable.auto.commit": False,
                             "auto.offset.reset": "earliest"})
        consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING)
                         for p in range(self.partitions)])
        try:
            while not self._stop_consuming.is_set():
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    self.consumer_notes.append((time.monotonic(), msg.partition(), msg.error()))
                    if msg.error().fatal():
                        self.consumer_errors.append(msg.error())
                    continue
                key = (msg.partition(), msg.offset())
                if self.seen.setdefault(key, msg.value()) != msg.value():
                    self.conflicts.append((key, self.seen[key], msg.value()))
        finally:
            consumer.close()

    def stop(self) -> None:
        if self._stop_consuming.is_set():
            return
        self._stop_producing.set()
        self._threads[0].join(170)
        assert not self._threads[0].is_alive(), "the producer did not finish flushing"
        want = {(p, o) for p, o, _ in self.acked}
        deadline = time.monotonic() + 60
        while not want <= self.seen.keys() and time.monotonic() < deadline:
            time.sleep(0.1)
        self._stop_consuming.set()
        self._threads[1].join(30)

    def check(self, min_acked=200) -> dict:
        """The whole stream, checked against the log as a fresh consumer reads it; returns
        the log ({(partition, offset): value})."""
        self.stop()
        assert self.errors == [], self.errors[:5]
        assert self.unflushed == 0
        assert len(self.acked) == self.sent >= min_acked, (len(self.acked), self.sent)
        assert self.conflicts == [] and self.consumer_errors == []
        acked = {(p, o): v for p, o, v in self.acked}
        assert len(acked) == len(self.acked), "two acknowledgements for one offset"
        log = read_log(live_bootstrap(self.cluster), self.topic, self.partitions)
        # Every acknowledged record at its offset, and nothing else: no loss, no duplicate.
        missing = {k: v for k, v in acked.items() if log.get(k) != v}
        assert not missing, f"{len(missing)} acknowledged records lost or moved, e.g. " \
                            f"{summary(missing, log)}"
        assert log == acked, f"the log has {len(log) - len(acked)} records never acknowledged"
        unseen = {k: v for k, v in acked.items() if self.seen.get(k) != v}
        assert not unseen, f"the tailing consumer lacks {len(unseen)} acknowledged records " \
                           f"(in the log) after 60 s: {summary(unseen, self.seen)}; its " \
                           f"errors: {self.consumer_notes[-10:]}"
        assert self.seen == log, "the tailing consumer saw something else than the log"
        # Per partition, offsets without gaps and the producer's order kept.
        for p in range(self.partitions):
            offsets = sorted(o for q, o in log if q == p)
            assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
            values = [log[(p, o)] for o in offsets]
            assert values == sorted(values), f"{self.topic}-{p} reordered"
        print(f"stream {self.topic}: {len(log)} records acknowledged and read back")
        return log


def summary(wanted: dict, got: dict) -> str:
    """Per partition: how many wanted records are not in `got` as wanted, their offset range,
    and what `got` holds there."""
    out = []
    for p in sorted({p for p, _ in wanted}):
        offsets = sorted(o for q, o in wanted if q == p)
        have = sorted(o for q, o in got if q == p)
        out.append(f"partition {p}: {len(offsets)} from offset {offsets[0]} to {offsets[-1]} "
                   f"(have {len(have)}" + (f", {have[0]}..{have[-1]})" if have else ")"))
    return "; ".join(out)


def read_log(bootstrap, topic, partitions, timeout=60.0) -> dict:
    """{(partition, offset): value} of everything below each partition's high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[1]
                for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out, position = {}, {p: 0 for p in range(partitions)}
        deadline = time.monotonic() + timeout
        while any(position[p] < ends[p] for p in ends):
            assert time.monotonic() < deadline, (f"could not read {topic} to its end", position,
                                                 ends)
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            out[(msg.partition(), msg.offset())] = msg.value()
            position[msg.partition()] = msg.offset() + 1
        return out
    finally:
        consumer.close()


# --- 1. expanding the cluster -------------------------------------------------------------------

def test_expanding_the_cluster_onto_a_new_broker(cluster, zk, tmp_path):
    """Kafka's "Expanding your cluster": a topic on brokers 0-2 is spread over 0-3 with
    --generate / --execute / --verify while it is written and read."""
    assert cluster.live_brokers() == {0, 1, 2, 3}
    bootstrap = cluster.bootstrap_servers
    create(bootstrap, "expand", [[0, 1], [1, 2], [2, 0], [0, 2]])
    with Stream(cluster, "expand") as stream:
        current, proposed = generate(bootstrap, tmp_path, ["expand"], "0,1,2,3")
        assert {(e["topic"], e["partition"]): e["replicas"] for e in current["partitions"]} == \
            {("expand", p): r for p, r in assignment(zk, "expand").items()}
        placed = {e["partition"]: e["replicas"] for e in proposed["partitions"]}
        assert sorted(placed) == [0, 1, 2, 3]
        assert all(len(r) == 2 and set(r) <= {0, 1, 2, 3} for r in placed.values())
        # Kafka's placement: each of the four brokers leads one partition.
        assert sorted(r[0] for r in placed.values()) == [0, 1, 2, 3]
        plan = tmp_path / "expand-reassignment.json"
        plan.write_text(json.dumps(proposed))
        execute(bootstrap, plan)
        verify_until_complete(bootstrap, plan, timeout=60)
        time.sleep(1)                             # writes go on after the move too
    stream.check()
    assert assignment(zk, "expand") == placed
    on_3 = sorted(p for p, r in placed.items() if 3 in r)
    assert on_3 and [f"expand-{p}" for p in on_3] == \
        [d for d in partition_dirs(cluster, 3) if d.startswith("expand-")]
    for p, replicas in placed.items():
        assert sorted(state(zk, "expand", p)["isr"]) == sorted(replicas)
    # The removed replicas' data goes, and every remaining replica is the leader's log.
    for b in (0, 1, 2):
        want = sorted(f"expand-{p}" for p, r in placed.items() if b in r)
        cluster.wait_until(lambda: [d for d in partition_dirs(cluster, b)
                                    if d.startswith("expand-")] == want, 30,
                           f"broker {b} kept removed replicas of expand")
    wait_identical_replicas(cluster, zk, "expand")


# --- 2. increasing the replication factor -------------------------------------------------------

def test_increasing_the_replication_factor(cluster, zk, tmp_path):
    """Kafka's "Increasing replication factor": a hand-written reassignment JSON (the docs'
    {"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[5,6,7]}]} with this
    cluster's ids) takes a replication factor 1 topic to 3."""
    live = sorted(cluster.live_brokers())
    assert len(live) >= 3
    first, others = live[-1], live[:2]
    bootstrap = live_bootstrap(cluster)
    create(bootstrap, "foo", [[first]])
    target = [first, *others]
    with Stream(cluster, "foo") as stream:
        plan = tmp_path / "increase-replication-factor.json"
        plan.write_text(json.dumps(
            {"version": 1, "partitions": [{"topic": "foo", "partition": 0, "replicas": target}]}))
        out = execute(bootstrap, plan)
        assert f'{{"topic":"foo","partition":0,"replicas":[{first}],"log_dirs":["any"]}}' in out
        verify_out, _ = verify_until_complete(bootstrap, plan, timeout=60)
        assert "Reassignment of partition foo-0 is completed." in verify_out
        time.sleep(1)
    stream.check()
    cluster.wait_for_isr("foo", 0, target, timeout=30)
    rf, parts = describe_partitions(bootstrap, "foo")
    assert rf == 3
    leader, replicas, isr = parts[0]
    assert replicas == target and sorted(isr) == sorted(target) and leader == first
    wait_identical_replicas(cluster, zk, "foo")


# --- 3. decommissioning a broker ----------------------------------------------------------------

def test_decommissioning_a_broker(cluster, zk, tmp_path):
    """Kafka's "Decommissioning brokers": every replica moves off broker 3 (--generate over
    the other brokers for every topic, the internal ones too where they have a replica on 3),
    then broker 3 stops and nothing is under-replicated; clients go on."""
    assert 3 in cluster.live_brokers()
    bootstrap = cluster.bootstrap_servers
    create(bootstrap, "decom", [[3, 0, 1], [0, 1, 3], [1, 3, 2], [2, 3, 0]],
           {"min.insync.replicas": "2"})
    with Stream(cluster, "decom") as stream:
        topics = sorted(zk.get_children("/brokers/topics"))
        on_3 = {t for t in topics if any(3 in r for r in assignment(zk, t).values())}
        moving = sorted(t for t in topics if not t.startswith("__") or t in on_3)
        assert "decom" in moving
        _, proposed = generate(bootstrap, tmp_path, moving, "0,1,2")
        assert {e["topic"] for e in proposed["partitions"]} == set(moving)
        assert all(3 not in e["replicas"] for e in proposed["partitions"])
        plan = tmp_path / "decommission-reassignment.json"
        plan.write_text(json.dumps(proposed))
        execute(bootstrap, plan)
        verify_until_complete(bootstrap, plan, timeout=120)
        assert not [tp for tp, (r, _, _) in all_partitions(zk).items() if 3 in r]
        cluster.wait_until(lambda: partition_dirs(cluster, 3) == [], 30,
                           f"broker 3 still holds {partition_dirs(cluster, 3)}")
        assert cluster.stop(3) == 0
        assert cluster.live_brokers() == {0, 1, 2}
        survivors = live_bootstrap(cluster)
        assert describe(survivors, "--under-replicated-partitions") == ""
        assert describe(survivors, "--unavailable-partitions") == ""
        time.sleep(2)                             # the stream goes on without broker 3
    log = stream.check()
    # A consumer group (its offsets in __consumer_offsets, moved too) works without broker 3.
    consumer = Consumer({"bootstrap.servers": survivors, "group.id": "after-decommission",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["decom"])
    got = {}
    deadline = time.monotonic() + 60
    try:
        while len(got) < len(log) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got[(msg.partition(), msg.offset())] = msg.value()
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition("decom", p) for p in range(4)], timeout=20)
    finally:
        consumer.close()
    assert got == log
    assert {tp.partition: tp.offset for tp in committed} == \
        {p: 1 + max(o for q, o in log if q == p) for p in range(4)}


# --- 4. rolling restart, then preferred leader election ----------------------------------------

def test_rolling_restart_then_preferred_leader_election(cluster, zk):
    """A rolling restart (each broker stopped, started, and back in every ISR before the
    next) leaves leaderships off their preferred replicas, as auto.leader.rebalance.enable is
    false; kafka-leader-election.sh --election-type preferred --all-topic-partitions puts
    every partition's leadership back on its first replica."""
    ensure_running(cluster, [0, 1, 2])
    live = sorted(cluster.live_brokers())
    bootstrap = live_bootstrap(cluster)
    create(bootstrap, "rolling", [[live[p % 3], live[(p + 1) % 3], live[(p + 2) % 3]]
                                  for p in range(6)], {"min.insync.replicas": "2"})
    wait_fully_replicated(cluster, zk)
    stops = {}
    with Stream(cluster, "rolling") as stream:
        for broker in live:
            started = time.monotonic()
            stops[broker] = (cluster.stop(broker), round(time.monotonic() - started, 1))
            assert all(leader != broker for _, leader, _ in all_partitions(zk).values())
            cluster.start(broker)
            wait_fully_replicated(cluster, zk)
            time.sleep(0.5)
        parts = all_partitions(zk)
        not_preferred = sorted(tp for tp, (r, leader, _) in parts.items() if leader != r[0])
        assert not_preferred, "every leader is preferred after the rolling restart"
        # The last broker restarted leads nothing until asked.
        assert all(leader != live[-1] for _, leader, _ in parts.values())
        result = run_tool("kafka-leader-election.sh", "--bootstrap-server", bootstrap,
                          "--election-type", "preferred", "--all-topic-partitions")
        assert (result.returncode, result.stderr) == (0, ""), result
        elected = re.fullmatch(r"Successfully completed leader election \(PREFERRED\) for "
                               r"partitions (.*)\n", result.stdout)
        assert elected, result.stdout
        assert sorted(elected[1].split(", ")) == sorted(f"{t}-{p}" for t, p in not_preferred)
        time.sleep(1)
    stream.check()
    assert {tp: leader for tp, (r, leader, _) in all_partitions(zk).items()} == \
        {tp: r[0] for tp, (r, _, _) in all_partitions(zk).items()}
    _, described = describe_partitions(bootstrap, "rolling")
    assert all(leader == replicas[0] for leader, replicas, _ in described.values())
    # Each stop is a clean controlled shutdown: exit 0, in seconds (the hard exit is minutes).
    assert all(status == 0 and seconds < 15 for status, seconds in stops.values()), stops


# --- 5. a throttled move ------------------------------------------------------------------------

RATE = 5_000_000                      # bytes/s: --throttle
SIZE = 140_000_000                    # bytes of the partition that moves


def kafka_throttled_copy_seconds(size, rate, *, capacity=150e6, chunk=1 << 20, windows=11,
                                 window_s=1.0, check_s=0.1) -> float:
    """How long Kafka's replication quota lets `size` bytes through at `rate`.

    Kafka's ReplicationQuotaManager measures the throttled bytes with a SimpleRate over a
    SampledStat of replication.quota.window.num = 11 samples of
    replication.quota.window.size.seconds = 1 s: a sample starts when a record lands past the
    current one's window, a sample whose last record is 11 windows old is dropped, and the
    rate divides by the time since the oldest sample began, at least one window. A new throttle lets about one
    second's worth through at once, then the copy runs at about the rate. This steps through
    that model with the copy fetching `chunk` bytes (replica.fetch.max.bytes) at `capacity`
    bytes/s while the quota allows and looking again every `check_s` while it does not."""
    samples = []                                  # [start, last record, bytes]
    now, copied = 0.0, 0

    def measured():
        samples[:] = [s for s in samples if now - s[1] < windows * window_s]
        if not samples:
            return 0.0
        elapsed = max(now - samples[0][0], window_s)
        return sum(s[2] for s in samples) / elapsed

    while copied < size:
        if measured() > rate:
            now += check_s
            continue
        n = min(chunk, size - copied)
        if not samples or now >= samples[-1][0] + window_s:
            samples.append([now, now, 0])
        samples[-1][1] = now
        samples[-1][2] += n
        copied += n
        now += n / capacity
    return now


def fill(bootstrap, topic, size):
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 20,
                         "batch.size": 1_000_000})
    value = os.urandom(10_000)
    for i in range(size // len(value) + 1):
        producer.produce(topic, value[i % 100:] + value[:i % 100])
        producer.poll(0)
    assert producer.flush(120) == 0


def test_a_throttled_reassignment_moves_at_the_throttle_rate(cluster, zk, tmp_path):
    """Kafka's "Limiting bandwidth usage during data migration": a partition of about 140 MB
    moves from one broker to another with --throttle 5000000 while other topics are written
    freely; the copy takes what Kafka's quota allows (within 20 %), and --verify removes the
    throttles once it is done.

    The duration expected is that of kafka_throttled_copy_seconds (Kafka's quota, its
    one-window burst included): about 28 s for 140 MB at 5 MB/s; with no throttle the copy
    takes about a second. (The leader's half of the throttle answers a fetch it withholds
    after replica.fetch.wait.max.ms, as Kafka's DelayedFetch: a little slower than the model,
    which has only the follower's half.)
    The duration runs from the start of --execute (which sets the throttles, then starts the
    reassignment) to the start of the --verify run that reports completion (runs follow each
    other with no pause, each about half a second)."""
    ensure_running(cluster, [0, 1, 2])
    live = sorted(cluster.live_brokers())
    source, destination = live[0], live[1]
    bootstrap = live_bootstrap(cluster)
    create(bootstrap, "throttled", [[source]])
    fill(bootstrap, "throttled", SIZE)
    size = log_size(cluster, source, "throttled", 0)
    assert SIZE <= size < SIZE * 1.1, size
    expected = kafka_throttled_copy_seconds(size, RATE)
    assert 25 < expected < 32, expected
    create(bootstrap, "free", [[live[1], live[2]], [live[2], live[0]]])
    plan = tmp_path / "throttled-reassignment.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "throttled", "partition": 0, "replicas": [destination]}]}))
    with Stream(cluster, "free") as stream:
        started = time.monotonic()
        out = execute(bootstrap, plan, "--throttle", RATE)
        assert f"The inter-broker throttle limit was set to {RATE} B/s" in out
        topic_config = json.loads(zk.get("/config/topics/throttled")[0])["config"]
        assert topic_config["leader.replication.throttled.replicas"] == f"0:{source}"
        assert topic_config["follower.replication.throttled.replicas"] == f"0:{destination}"
        # Mid-copy, kafka-topics.sh shows the move as Kafka 3.9's does: the replication factor
        # without the replica being added, and the partition not under-replicated.
        moving = describe(bootstrap, "--topic", "throttled")
        assert "ReplicationFactor: 1\t" in moving, moving
        assert (f"\tReplicas: {destination},{source}\tIsr: {source}\tAdding Replicas: {destination}"
                f"\tRemoving Replicas: {source}\tElr: N/A\tLastKnownElr: N/A") in moving, moving
        assert describe(bootstrap, "--topic", "throttled", "--under-replicated-partitions") == ""
        out, completed = verify_until_complete(bootstrap, plan, timeout=45, pause=0)
        took = completed - started
    stream.check()
    print(f"throttled move: {size} bytes at {RATE} B/s took {took:.1f} s, Kafka's quota "
          f"{expected:.1f} s, a smooth rate {size / RATE:.1f} s")
    assert "Clearing broker-level throttles on brokers" in out
    assert expected * 0.8 <= took <= expected * 1.2, \
        f"{size} bytes at --throttle {RATE} took {took:.1f} s, Kafka's quota {expected:.1f} s"
    # The copy is whole, and the throttles are gone from the topic and the brokers.
    assert assignment(zk, "throttled") == {0: [destination]}
    assert state(zk, "throttled", 0)["leader"] == destination
    assert log_size(cluster, destination, "throttled", 0) == size
    topic_config = json.loads(zk.get("/config/topics/throttled")[0])["config"]
    assert not {k for k in topic_config if "throttled" in k}, topic_config
    for broker in live:
        path = f"/config/brokers/{broker}"
        if zk.exists(path):
            assert not {k for k in json.loads(zk.get(path)[0])["config"]
                        if "throttled" in k}, (broker, zk.get(path)[0])


# --- two broker bugs these runbooks ran into, reproduced deterministically ---------------------

def test_a_request_loop_stops_when_cancelled_as_its_answer_arrives(cluster):
    """The replica fetchers' loop (send a request, await the answer, repeat), cancelled as
    ReplicaFetcher.stop() and Broker.shutdown cancel it, must end. The cancel is issued at the
    moment that makes the race deterministic: right after an answer was read off the socket,
    before the awaiting task resumed (the rolling restart above meets it by chance: under
    replication traffic about one SIGTERM in three to two in three hangs 27.5 s and exits 1;
    measured 11 of 18 and 7 of 12 stops in a three-broker cluster)."""
    ensure_running(cluster, [0])

    async def scenario():
        conn = BrokerConnection("127.0.0.1", cluster.brokers[0].port, node_id=0)
        answers = []
        task = None
        reader = conn._on_frame

        def on_frame(frame):                       # the connection reads an answer...
            reader(frame)
            if task is not None and len(answers) == 3 and not task.cancelling():
                task.cancel()                      # ...and the fetcher is stopped right then
        conn._on_frame = on_frame
        await conn.connect()

        async def fetcher():                       # ReplicaFetcher._run, reduced
            while True:
                answers.append(await conn.send(MetadataRequest(topics=[]), 1))
        task = asyncio.get_running_loop().create_task(fetcher())
        try:
            await asyncio.wait({task}, timeout=3)
            return task.done(), len(answers)
        finally:
            task.cancel()                          # a swallowed cancel may be swallowed again:
            await asyncio.wait({task}, timeout=3)  # bounded either way
            await conn.close()
    stopped, answered = asyncio.run(scenario())
    assert stopped, f"the cancelled loop went on: {answered} answers, still running after 3 s"


def test_a_follower_is_told_its_diverging_epoch_in_an_incremental_fetch_session(cluster, zk):
    """What a follower whose log went past the new leader's sees in its fetch session.

    In the decommission above, a replica being added (broker 2) fetched decom-0 from the old
    leader (3) beyond what the new leader (1) had. From the logs and the code: its first
    fetch from the new leader was answered while a second LeaderAndIsr restarted that
    partition's fetch state, so the fetcher dropped the answer (broker/replica_fetcher.py:
    377-378), and every later answer left the diverging epoch out, as the high watermark could
    not move (the replica is in the ISR, its position unknown) and nothing else was news.
    Writes with acks=all to decom-0 stalled for replica.lag.time.max.ms (30 s), until the ISR
    shrank, the HW moved and the next answer carried the diverging epoch at last (the replica
    truncated 11 ms after the shrink). That race is rare; this is the same exchange made by
    hand, as broker 1 following the leader on broker 0."""
    ensure_running(cluster, [0, 1, 2])
    bootstrap = live_bootstrap(cluster)
    create(bootstrap, "diverging", [[0, 1]])
    cluster.wait_for_isr("diverging", 0, [0, 1], timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(10):
        producer.produce("diverging", b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    epoch = state(zk, "diverging", 0)["leader_epoch"]

    def partition(fetch_offset):
        return FetchRequest.FetchTopic(topic="diverging", partitions=[FetchRequest.FetchPartition(
            partition=0, current_leader_epoch=epoch, fetch_offset=fetch_offset,
            last_fetched_epoch=epoch, log_start_offset=0, partition_max_bytes=1 << 20)])

    async def exchange():
        conn = await BrokerConnection("127.0.0.1", cluster.brokers[0].port, node_id=0,
                                      client_id="broker-1-fetcher-0").connect()
        try:
            # A full fetch opens the session: the follower is at the leader's end (10).
            full = await conn.send(FetchRequest(
                replica_id=1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                session_id=0, session_epoch=0, topics=[partition(10)],
                forgotten_topics_data=[], rack_id=""), 12)
            # Then its log has records of that epoch up to 15 the leader does not have.
            incremental = await conn.send(FetchRequest(
                replica_id=1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                session_id=full.session_id, session_epoch=1, topics=[partition(15)],
                forgotten_topics_data=[], rack_id=""), 12)
            return full, incremental
        finally:
            await conn.close()
    full, incremental = asyncio.run(exchange())
    assert full.error_code == 0 and full.session_id != 0
    [answer] = [p for t in full.responses for p in t.partitions]
    assert (answer.error_code, answer.high_watermark) == (0, 10)
    assert incremental.error_code == 0
    answers = [(p.partition_index, p.diverging_epoch.epoch, p.diverging_epoch.end_offset)
               for t in incremental.responses for p in t.partitions]
    # Kafka: "Partitions with diverging epoch are always included in response."
    assert answers == [(0, epoch, 10)], answers


def test_client_quotas_are_written_as_kafka_writes_them_and_keep_scram_credentials(cluster, zk):
    # A Kafka broker on the same ZooKeeper reads producer_byte_rate with toLong ("1048576.0"
    # would fail it), and a user's znode also holds their SCRAM credentials, which a quota
    # change must not drop (Kafka's ZkAdminManager.alterClientQuotas).
    credential = "salt=c2FsdA==,stored_key=a2V5,server_key=c2VydmVy,iterations=4096"
    zk.create("/config/users/alice", json.dumps(
        {"version": 1, "config": {"SCRAM-SHA-256": credential}}).encode(), makepath=True)
    bootstrap = live_bootstrap(cluster)
    tool_ok("kafka-configs.sh", "--bootstrap-server", bootstrap, "--alter", "--entity-type",
            "users", "--entity-name", "alice", "--add-config",
            "producer_byte_rate=1048576,request_percentage=12.5,controller_mutation_rate=2E7")
    stored = json.loads(zk.get("/config/users/alice")[0])["config"]
    assert stored == {"SCRAM-SHA-256": credential, "producer_byte_rate": "1048576",
                      "request_percentage": "12.5", "controller_mutation_rate": "2.0E7"}
    out = tool_ok("kafka-configs.sh", "--bootstrap-server", bootstrap, "--describe",
                  "--entity-type", "users", "--entity-name", "alice")
    assert "producer_byte_rate=1048576.0" in out and "request_percentage=12.5" in out
    tool_ok("kafka-configs.sh", "--bootstrap-server", bootstrap, "--alter", "--entity-type",
            "users", "--entity-name", "alice", "--delete-config",
            "producer_byte_rate,request_percentage,controller_mutation_rate")
    assert json.loads(zk.get("/config/users/alice")[0])["config"] == {
        "SCRAM-SHA-256": credential}


def test_every_broker_describes_a_topics_configs_as_zookeeper_holds_them(cluster, zk):
    """DescribeConfigs of a topic answers from /config/topics/<topic>, as Kafka's
    ZkConfigRepository, on every broker: one holding no replica of a topic created after it
    started had no copy of its overrides and answered the defaults (kafka-topics.sh --describe,
    --under-min-isr-partitions from min.insync.replicas=1), and one that had a copy kept it
    after the topic was deleted and made again without them."""
    from protocol.messages.describe_configs import DescribeConfigsRequest
    live = sorted(cluster.live_brokers())
    bootstrap = live_bootstrap(cluster)

    async def overrides(broker_id: int, topic: str) -> dict:
        conn = await BrokerConnection("127.0.0.1", cluster.brokers[broker_id].port,
                                      node_id=broker_id).connect()
        try:
            response = await conn.send(DescribeConfigsRequest(resources=[
                DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=2, resource_name=topic, configuration_keys=None)],
                include_synonyms=False, include_documentation=False), 4)
        finally:
            await conn.close()
        (result,) = response.results
        assert result.error_code == 0, result
        return {c.name: c.value for c in result.configs if c.config_source == 1}   # TOPIC_CONFIG

    def all_overrides(topic: str) -> dict:
        async def go():
            return {b: await overrides(b, topic) for b in live}
        return asyncio.run(go())

    def wait_gone(topic: str) -> None:
        deadline = time.monotonic() + 60
        while zk.exists(f"/brokers/topics/{topic}") or zk.exists(f"/admin/delete_topics/{topic}"):
            assert time.monotonic() < deadline, f"{topic} still being deleted"
            time.sleep(0.2)

    tool_ok("kafka-topics.sh", "--bootstrap-server", bootstrap, "--create", "--topic", "cfg-where",
            "--replica-assignment", str(live[-1]), "--config", "min.insync.replicas=1",
            "--config", "retention.ms=12345")
    cluster.wait_for_leader("cfg-where", 0)
    want = {"min.insync.replicas": "1", "retention.ms": "12345"}
    assert all_overrides("cfg-where") == {b: want for b in live}
    tool_ok("kafka-topics.sh", "--bootstrap-server", bootstrap, "--delete", "--topic", "cfg-where")
    wait_gone("cfg-where")
    tool_ok("kafka-topics.sh", "--bootstrap-server", bootstrap, "--create", "--topic", "cfg-where",
            "--replica-assignment", str(live[0]))
    cluster.wait_for_leader("cfg-where", 0)
    assert all_overrides("cfg-where") == {b: {} for b in live}
