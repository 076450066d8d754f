"""Replication under faults, in the spirit of Jepsen and of Kafka's replication system test
(tests/kafkatest/tests/core/replication_test.py): three brokers and ZooKeeper, a topic with
replication factor 3 and min.insync.replicas=2, idempotent acks=all producers from real clients,
and a schedule of the faults users meet:

- kill -9 of a partition leader (then it restarts and catches up),
- SIGSTOP of a leader for longer than the ZooKeeper session, then SIGCONT (a stalled leader
  that must not acknowledge as leader any more),
- SIGTERM of a broker (a controlled shutdown) and a restart,
- kill -9 of ZooKeeper and its restart, then kill -9 of a leader again.

Then a consumer reads everything back, and the test checks what Kafka promises: no acknowledged
record is lost, none is duplicated, each sits at the offset its acknowledgement gave, and each
producer's records are in order within a partition. The longest time without any
acknowledgement is printed (`-s` shows it). `KBROKER_FAULT_ROUNDS` (default 1) repeats the
schedule; `make soak` runs it longer."""
import os
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "jepsen"
PARTITIONS = 3
SESSION_MS = 6000


class Writer(threading.Thread):
    """An idempotent acks=all producer writing "<name>-<seq>" values, remembering every ack."""

    def __init__(self, name, bootstrap, rate_per_s=200):
        super().__init__(daemon=True)
        self.name = name
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 5, "message.timeout.ms": 120000, "request.timeout.ms": 10000,
            "client.id": name})
        self.interval = 1.0 / rate_per_s
        self.acked = []                      # (partition, offset, value, time)
        self.failed = []
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    def _on_delivery(self, err, msg):
        now = time.monotonic()
        with self.lock:
            if err is None:
                self.acked.append((msg.partition(), msg.offset(), msg.value(), now))
            else:
                self.failed.append((msg.value(), str(err)))

    def run(self):
        seq = 0
        while not self.stopping.is_set():
            value = f"{self.name}-{seq:08d}".encode()
            try:
                self.producer.produce(TOPIC, value, key=str(seq % 16).encode(),
                                      on_delivery=self._on_delivery)
                seq += 1
            except BufferError:
                pass
            self.producer.poll(0)
            time.sleep(self.interval)
        self.producer.flush(150)


def leader_of(cluster, partition):
    return cluster.wait_for_leader(TOPIC, partition, timeout=60)


def wait_session_gone(cluster, broker_id, timeout=40):
    cluster.wait_until(lambda: broker_id not in cluster.live_brokers(), timeout,
                       f"broker {broker_id} still registered")


def run_faults(cluster, log):
    # 1. kill -9 of the leader of partition 0, then restart it.
    victim = leader_of(cluster, 0)
    log(f"kill -9 broker {victim} (leader of {TOPIC}-0)")
    cluster.kill(victim)
    cluster.wait_for_leader(TOPIC, 0, not_in={victim})
    time.sleep(2)
    cluster.start(victim)
    cluster.wait_for_isr(TOPIC, 0, [0, 1, 2], timeout=90)
    # 2. SIGSTOP of the leader of partition 1 for longer than the session, then SIGCONT.
    victim = leader_of(cluster, 1)
    log(f"SIGSTOP broker {victim} (leader of {TOPIC}-1) for {SESSION_MS * 2 / 1000:.0f} s")
    cluster.pause(victim)
    cluster.wait_for_leader(TOPIC, 1, not_in={victim}, timeout=60)
    time.sleep(SESSION_MS * 2 / 1000 - SESSION_MS / 1000)
    cluster.resume(victim)
    log(f"SIGCONT broker {victim}")
    cluster.wait_until(lambda: victim in cluster.live_brokers(), 60, "did not re-register")
    for p in range(PARTITIONS):
        cluster.wait_for_isr(TOPIC, p, [0, 1, 2], timeout=90)
    # 3. SIGTERM (controlled shutdown) of the leader of partition 2, then restart.
    victim = leader_of(cluster, 2)
    log(f"SIGTERM broker {victim} (leader of {TOPIC}-2)")
    cluster.stop(victim)
    time.sleep(2)
    cluster.start(victim)
    for p in range(PARTITIONS):
        cluster.wait_for_isr(TOPIC, p, [0, 1, 2], timeout=90)
    # 4. kill -9 of ZooKeeper, back within the session timeout: the brokers go on serving
    # (no ISR can change meanwhile) and keep their sessions; then the controller must still
    # act on a leader's death.
    log("kill -9 ZooKeeper for 4 s")
    cluster.zookeeper.kill()
    time.sleep(4)
    cluster.zookeeper.start()
    log("ZooKeeper restarted")
    cluster.wait_until(lambda: cluster.live_brokers() == {0, 1, 2}, 60,
                       "brokers did not come back to ZooKeeper")
    victim = leader_of(cluster, 1)
    log(f"kill -9 broker {victim} (leader of {TOPIC}-1)")
    cluster.kill(victim)
    cluster.wait_for_leader(TOPIC, 1, not_in={victim})
    cluster.start(victim)
    for p in range(PARTITIONS):
        cluster.wait_for_isr(TOPIC, p, [0, 1, 2], timeout=90)


def read_back(bootstrap, ends):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "jepsen-checker",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    got = {}
    positions = {p: 0 for p in range(PARTITIONS)}
    deadline = time.monotonic() + 120
    while any(positions[p] < ends[p] for p in ends) and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 1.0):
            if msg.error():
                continue
            got[(msg.partition(), msg.offset())] = msg.value()
            positions[msg.partition()] = msg.offset() + 1
    consumer.close()
    return got


@pytest.mark.kafka_cluster_config(min_insync_replicas=2, replica_lag_time_max_ms=10000,
                                  zookeeper_session_timeout_ms=SESSION_MS,
                                  leader_imbalance_check_interval_seconds=10)
def test_no_acknowledged_record_is_lost_under_faults(kafka_cluster):
    cluster = kafka_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(60)
    for p in range(PARTITIONS):
        cluster.wait_for_isr(TOPIC, p, [0, 1, 2], timeout=30)
    events = []

    def log(text):
        events.append((time.monotonic(), text))
        print(f"[faults] {text}", flush=True)

    writers = [Writer(f"w{i}", cluster.bootstrap_servers) for i in range(2)]
    for w in writers:
        w.start()
    time.sleep(3)
    rounds = int(os.environ.get("KBROKER_FAULT_ROUNDS", "1"))
    try:
        for r in range(rounds):
            log(f"round {r + 1} of {rounds}")
            run_faults(cluster, log)
        time.sleep(3)
    finally:
        for w in writers:
            w.stopping.set()
        for w in writers:
            w.join(180)

    acked = [a for w in writers for a in w.acked]
    assert len(acked) > 1000, f"only {len(acked)} acknowledgements"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "ends"})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1]
            for p in range(PARTITIONS)}
    consumer.close()
    stored = read_back(cluster.bootstrap_servers, ends)

    # Nothing acknowledged is lost, and each record is where its acknowledgement said.
    missing = [(p, o, v) for p, o, v, _ in acked if stored.get((p, o)) != v]
    assert not missing, f"{len(missing)} acknowledged records lost or moved, e.g. {missing[:5]}"
    # No duplicates: every value is stored once.
    values = list(stored.values())
    assert len(values) == len(set(values)), "duplicated records"
    # Each producer's records are in order within a partition.
    for p in range(PARTITIONS):
        last = {}
        for offset in sorted(o for (q, o) in stored if q == p):
            name, seq = stored[(p, offset)].decode().rsplit("-", 1)
            assert int(seq) > last.get(name, -1), f"{name} out of order at {p}/{offset}"
            last[name] = int(seq)
    times = sorted(t for _, _, _, t in acked)
    gaps = [b - a for a, b in zip(times, times[1:])]
    longest = max(gaps) if gaps else 0.0
    failed = sum(len(w.failed) for w in writers)
    print(f"[faults] {len(acked)} acknowledged, {failed} failed deliveries, longest time "
          f"without an acknowledgement {longest:.2f} s", flush=True)
