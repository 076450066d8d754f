"""Consumer groups with real clients against a broker subprocess.

Each consumer runs in its own process (tests/integration/group_worker.py) so it can be SIGKILLed.
Every message a worker reports was committed first, so "exactly once, counting committed
offsets" is checked directly: the killed member's messages plus the survivors' messages are
every message produced, with no overlap and no duplicate.
"""
import json
import pathlib
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WORKER = pathlib.Path(__file__).with_name("group_worker.py")
ROOT = pathlib.Path(__file__).resolve().parents[2]
# Short timeouts keep these tests quick; the broker must accept them.
BROKER = dict(group_min_session_timeout_ms=1000, group_initial_rebalance_delay_ms=0)
SESSION_MS = 4000


class Worker:
    def __init__(self, client, bootstrap, group, topic, **options):
        cmd = [sys.executable, str(WORKER), client, bootstrap, group, topic,
               "--session-ms", str(options.pop("session_ms", SESSION_MS))]
        for key, value in options.items():
            cmd += [f"--{key.replace('_', '-')}", str(value)]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        self.events = []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                self.events.append(event)

    def snapshot(self):
        with self.lock:
            return list(self.events)

    @property
    def assigned(self):
        """The partitions held now (last assignment, minus later revocations)."""
        owned = set()
        for e in self.snapshot():
            if e["event"] == "assigned":
                owned |= set(e["partitions"])
            elif e["event"] == "revoked":
                owned -= set(e["partitions"])
        return owned

    def messages(self):
        return [(e["partition"], e["offset"], e["value"]) for e in self.snapshot()
                if e["event"] == "msg"]

    def kill(self):
        self.proc.kill()
        self.proc.wait(10)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


def _states(workers):
    """Each worker's partitions, exit status and last events, for a timed-out wait."""
    return [(sorted(w.assigned), w.proc.poll(), w.snapshot()[-4:]) for w in workers]


def wait_for(predicate, timeout, what, state=None):
    """Polls `predicate`; on timeout the error says `what`, plus `state()` when given."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    detail = f": {state()}" if state is not None else ""
    raise AssertionError(f"timed out waiting for {what}{detail}")


def create_topic(bootstrap, name, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(15)


def produce(bootstrap, topic, values, partitions):
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, value in enumerate(values):
        producer.produce(topic, value.encode(), partition=i % partitions)
    assert producer.flush(15) == 0


@pytest.fixture
def workers():
    started = []
    yield started
    for w in started:
        w.stop()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("client,assignor", [
    ("confluent", "range"), ("kafka-python", "roundrobin"), ("aiokafka", "sticky")])
def test_three_consumers_share_six_partitions_and_survive_sigkill(
        broker_process, workers, client, assignor):
    broker = broker_process(**BROKER)
    topic, group = "orders", f"group-{client}"
    create_topic(broker.bootstrap, topic, 6)
    for _ in range(3):
        workers.append(Worker(client, broker.bootstrap, group, topic, assignor=assignor))
    wait_for(lambda: [len(w.assigned) for w in workers] == [2, 2, 2]
             and set().union(*(w.assigned for w in workers)) == set(range(6)),
             60, "an even assignment of six partitions", state=lambda: _states(workers))

    first = [f"first-{i}" for i in range(60)]
    produce(broker.bootstrap, topic, first, 6)
    wait_for(lambda: sum(len(w.messages()) for w in workers) == 60, 60, "the first 60 messages")
    victim, survivors = workers[0], workers[1:]
    victim_partitions = victim.assigned
    victim.kill()                          # SIGKILL: no LeaveGroup, the session must expire
    killed_at = time.monotonic()
    wait_for(lambda: [len(w.assigned) for w in survivors] == [3, 3]
             and set().union(*(w.assigned for w in survivors)) == set(range(6)),
             60, "the survivors to take over the victim's partitions")
    assert time.monotonic() - killed_at >= SESSION_MS / 1000 * 0.5

    second = [f"second-{i}" for i in range(60)]
    produce(broker.bootstrap, topic, second, 6)
    wait_for(lambda: sum(1 for w in survivors for m in w.messages() if m[2].startswith("second"))
             == 60, 60, "the second 60 messages")
    time.sleep(1)                          # nothing more may arrive: no duplicates
    consumed = victim.messages() + [m for w in survivors for m in w.messages()]
    values = [m[2] for m in consumed]
    assert sorted(values) == sorted(first + second)            # every message, exactly once
    positions = [(m[0], m[1]) for m in consumed]
    assert len(set(positions)) == len(positions) == 120
    assert victim_partitions <= set().union(*(w.assigned for w in survivors))


# The assignors the SIGKILL test above does not cover, so each client runs each of its own:
# librdkafka has range, roundrobin and cooperative-sticky (the last is tested below); kafka-python
# and aiokafka have range, roundrobin and sticky (no cooperative protocol).
MORE_ASSIGNORS = [("confluent", "roundrobin"), ("kafka-python", "range"),
                  ("kafka-python", "sticky"), ("aiokafka", "range"), ("aiokafka", "roundrobin")]


@pytest.mark.timeout(150)
def test_every_client_assignor_shares_partitions_and_consumes_once(broker_process, workers):
    """One group per (client, assignor), all on one broker at once: two members split four
    partitions 2/2 and consume 20 messages exactly once between them."""
    broker = broker_process(**BROKER)
    create_topic(broker.bootstrap, "mix", 4)
    pairs = {}
    for client, assignor in MORE_ASSIGNORS:
        group = f"g-{client}-{assignor}"
        pairs[group] = [Worker(client, broker.bootstrap, group, "mix", assignor=assignor)
                        for _ in range(2)]
        workers.extend(pairs[group])

    def split_evenly(pair):
        return sorted(len(w.assigned) for w in pair) == [2, 2] and \
            set().union(*(w.assigned for w in pair)) == set(range(4))
    wait_for(lambda: all(split_evenly(pair) for pair in pairs.values()), 90,
             "a 2/2 split in every group",
             lambda: {g: [(sorted(w.assigned), w.proc.poll()) for w in pair]
                      for g, pair in pairs.items() if not split_evenly(pair)})
    values = [f"m-{i}" for i in range(20)]
    produce(broker.bootstrap, "mix", values, 4)
    wait_for(lambda: all(sum(len(w.messages()) for w in pair) == 20 for pair in pairs.values()),
             60, "20 messages in every group")
    time.sleep(1)
    for group, pair in pairs.items():
        consumed = sorted(m[2] for w in pair for m in w.messages())
        assert consumed == sorted(values), group


@pytest.mark.timeout(120)
def test_consumer_restart_resumes_from_committed_offset(broker_process, workers):
    broker = broker_process(**BROKER)
    create_topic(broker.bootstrap, "resume", 2)
    produce(broker.bootstrap, "resume", [f"a-{i}" for i in range(20)], 2)
    first = Worker("kafka-python", broker.bootstrap, "g-resume", "resume")
    workers.append(first)
    wait_for(lambda: len(first.messages()) == 20, 60, "20 messages")
    first.stop()
    produce(broker.bootstrap, "resume", [f"b-{i}" for i in range(10)], 2)
    broker.restart()                        # the committed offsets must come back from the log
    second = Worker("confluent", broker.bootstrap, "g-resume", "resume")
    workers.append(second)
    wait_for(lambda: len(second.messages()) == 10, 60, "the 10 new messages")
    time.sleep(1)
    assert sorted(m[2] for m in second.messages()) == sorted(f"b-{i}" for i in range(10))


@pytest.mark.timeout(120)
def test_acknowledged_commits_survive_a_broker_sigkill(broker_process):
    """Commits run back to back while the broker is SIGKILLed: after the restart (log recovery,
    then the same replay that loads __consumer_offsets) the committed offset is at least the
    last one the broker acknowledged."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    broker = broker_process(**BROKER)
    create_topic(broker.bootstrap, "crash", 1)

    def consumer():
        return Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-crash",
                         "enable.auto.commit": False, "socket.timeout.ms": 3000,
                         "session.timeout.ms": 6000})
    committer = consumer()
    acked = []
    stop = threading.Event()

    def commit_loop():
        for offset in range(1, 1_000_000):
            if stop.is_set():
                return
            try:
                committer.commit(offsets=[TopicPartition("crash", 0, offset)],
                                 asynchronous=False)
            except KafkaException:
                return
            acked.append(offset)
    thread = threading.Thread(target=commit_loop, daemon=True)
    thread.start()
    wait_for(lambda: len(acked) >= 50, 30, "50 acknowledged commits")
    broker.kill()                          # SIGKILL, mid-commit
    stop.set()
    last_acked = acked[-1]                 # every acknowledged append happened before this
    broker.start()                         # (the committer's in-flight commit may now land)
    thread.join(30)
    committer.close()
    reader = consumer()
    try:
        [committed] = reader.committed([TopicPartition("crash", 0)], timeout=20)
    finally:
        reader.close()
    assert committed.offset >= last_acked


@pytest.mark.timeout(120)
@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_static_member_restart_gets_its_partitions_back_without_rebalance(broker_process,
                                                                         workers, client):
    broker = broker_process(**BROKER)
    create_topic(broker.bootstrap, "static", 4)
    a = Worker(client, broker.bootstrap, "g-static", "static", instance_id="member-a",
               session_ms=20000)
    b = Worker(client, broker.bootstrap, "g-static", "static", instance_id="member-b",
               session_ms=20000)
    workers += [a, b]
    wait_for(lambda: len(a.assigned) == 2 and len(b.assigned) == 2, 60, "two static members")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    before = admin.describe_consumer_groups(["g-static"])["g-static"].result(10)
    a_partitions = a.assigned
    b_events = len(b.snapshot())
    a.kill()                                # a static member does not leave: its slot waits
    a2 = Worker(client, broker.bootstrap, "g-static", "static", instance_id="member-a",
                session_ms=20000)
    workers.append(a2)
    wait_for(lambda: a2.assigned == a_partitions, 30, "the restarted member's partitions")
    time.sleep(2)
    assert len(b.snapshot()) == b_events      # b saw no revocation or new assignment
    after = admin.describe_consumer_groups(["g-static"])["g-static"].result(10)
    assert str(after.state).endswith("STABLE")
    instance_ids = sorted(m.group_instance_id for m in after.members)
    assert instance_ids == ["member-a", "member-b"]
    assert {m.member_id for m in after.members} != {m.member_id for m in before.members}


@pytest.mark.timeout(120)
def test_cooperative_sticky_revokes_only_moved_partitions(broker_process, workers):
    broker = broker_process(**BROKER)
    create_topic(broker.bootstrap, "coop", 6)
    a = Worker("confluent", broker.bootstrap, "g-coop", "coop", assignor="cooperative-sticky")
    workers.append(a)
    wait_for(lambda: len(a.assigned) == 6, 60, "the first member to own all six")
    b = Worker("confluent", broker.bootstrap, "g-coop", "coop", assignor="cooperative-sticky")
    workers.append(b)
    wait_for(lambda: len(a.assigned) == 3 and len(b.assigned) == 3, 60, "a 3/3 split")
    revoked = [p for e in a.snapshot() if e["event"] == "revoked" for p in e["partitions"]]
    assert sorted(revoked) == sorted(b.assigned)     # only the partitions that moved


@pytest.mark.timeout(90)
def test_kcat_balanced_consumer_commits_and_resumes(broker_process):
    """kcat links Debian's librdkafka 2.0.2 (older protocol versions, KIP-482 quirks)."""
    broker = broker_process(**BROKER)
    create_topic(broker.bootstrap, "kc", 1)
    produce(broker.bootstrap, "kc", ["a", "b", "c"], 1)

    def consume():
        command = ["kcat", "-b", broker.bootstrap, "-G", "kc-group", "kc", "-e", "-q",
                   "-X", "auto.offset.reset=earliest"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=40)
        return done.stdout.split()
    assert consume() == ["a", "b", "c"]
    produce(broker.bootstrap, "kc", ["d"], 1)
    assert consume() == ["d"]                      # resumed from the committed offset
