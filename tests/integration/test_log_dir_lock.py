"""A second broker on a live log dir: refused at once, the running broker untouched.

Kafka locks every log dir (``.lock``) before it reads or writes anything in it, and a second
broker on the same dir stops with "Failed to acquire lock on file .lock in DIR. A Kafka instance
in another process or thread is using this directory." Before kbroker did the same, a second
`make run` failed on the port and, on its way out, trimmed the running broker's preallocated
segment and memory-mapped indexes and wrote the clean-shutdown marker into its dir: the running
broker died of SIGBUS at its next append. These tests start a broker, then a second one on the
same dir (same port, then another port) and check that the second exits 1 with one line, that
no file of the first changed, and that the first keeps acknowledging and keeps every record.
"""
import os
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.conftest import ROOT, BrokerProcess, free_port

pytestmark = pytest.mark.integration

TOPIC = "locked"
LOCK_LINE = ("kbroker: Failed to acquire lock on file .lock in {dir}. A Kafka instance in "
             "another process or thread is using this directory.")


def produce(bootstrap, values) -> int:
    """Produce with acks=all; the number of records the broker acknowledged."""
    acked = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for value in values:
        producer.produce(TOPIC, value, on_delivery=lambda err, msg: acked.append(err is None))
    assert producer.flush(30) == 0
    return sum(acked)


def consume_all(bootstrap) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lock-check",
                         "enable.auto.commit": False})
    end = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)[1]
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    out = []
    deadline = time.monotonic() + 30
    while len(out) < end and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 1.0):
            assert msg.error() is None, msg.error()
            out.append(msg.value())
    consumer.close()
    return out


def dir_state(log_dir) -> dict:
    """Every file of the dir with its size and modification time (the clean-shutdown marker,
    a trimmed segment or a truncated index shows up here)."""
    state = {}
    for root, _, names in os.walk(log_dir):
        for name in names:
            path = os.path.join(root, name)
            st = os.stat(path)
            state[os.path.relpath(path, log_dir)] = (st.st_size, st.st_mtime_ns)
    return state


def run_second(first: BrokerProcess, port: int) -> subprocess.CompletedProcess:
    """`python -m broker` with the first broker's log dir, on `port`; waits for its exit."""
    second = BrokerProcess(first.base_dir, {"listeners": f"PLAINTEXT://127.0.0.1:{port}",
                                            "log.dirs": first.log_dir}, index=9)
    return subprocess.run(second.command(), cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("port", ["same", "other"])
def test_second_broker_on_a_live_log_dir_is_refused(broker_process, port):
    first = broker_process(num_partitions=1)
    assert produce(first.bootstrap, [b"before-%d" % i for i in range(200)]) == 200
    time.sleep(0.5)                    # let periodic checkpoints settle before the snapshot
    before = dir_state(first.log_dir)
    assert ".lock" in before

    second = run_second(first, first.port if port == "same" else free_port())

    assert second.returncode == 1, second.stderr
    assert second.stderr.splitlines() == [LOCK_LINE.format(dir=first.log_dir)], second.stderr
    after = dir_state(first.log_dir)
    segment_files = {k: v for k, v in before.items() if k.startswith(TOPIC)}
    assert {k: after.get(k) for k in segment_files} == segment_files
    assert ".kafka_cleanshutdown" not in after
    assert first.proc.poll() is None, "the running broker died"

    assert produce(first.bootstrap, [b"after-%d" % i for i in range(200)]) == 200
    first.restart()
    values = consume_all(first.bootstrap)
    assert values == [b"before-%d" % i for i in range(200)] + [b"after-%d" % i for i in range(200)]


def test_a_killed_broker_leaves_no_lock_behind(broker_process):
    """The lock dies with the process: after kill -9 the next start takes it at once."""
    broker = broker_process(num_partitions=1)
    assert produce(broker.bootstrap, [b"x"] * 10) == 10
    broker.kill()
    broker.start()
    assert len(consume_all(broker.bootstrap)) == 10
