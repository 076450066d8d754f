"""A log dir that fails (here: a small tmpfs that fills up) in a three-broker cluster, as Kafka
handles it: the broker stops serving that dir's partitions, tells the controller through
/log_dir_event_notification, leadership moves to another in-sync replica, acknowledged records
stay readable, and the broker's other log dir serves on. Needs root to mount the tmpfs."""
import json
import os
import pathlib
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.testing.cluster import KafkaCluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BIN = pathlib.Path(__file__).resolve().parents[2] / "bin"


@pytest.fixture
def small_disk(small_tmpfs):
    return small_tmpfs("3m")


def create(bootstrap, topic, assignment, config=None):
    client = AdminClient({"bootstrap.servers": bootstrap})
    client.create_topics([NewTopic(topic, len(assignment), replica_assignment=assignment,
                                   config=config or {})])[topic].result(60)


def read_all(bootstrap, topic, count, timeout=60):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                out.append(msg.value())
    finally:
        consumer.close()
    return out


def test_a_full_disk_takes_its_log_dir_offline_and_leadership_moves(tmp_path, small_disk):
    big = tmp_path / "big"
    with KafkaCluster(3, tmp_path / "cluster", broker_configs={
            0: {"log.dirs": f"{small_disk},{big}"}}) as cluster:
        bootstrap = cluster.bootstrap_servers
        # Broker 0 holds no partition yet: the first goes to its first dir (the small one),
        # the next to the other. Rare index entries: only the log's own writes fill the disk.
        create(bootstrap, "fill", [[0, 1]], {"index.interval.bytes": "100000000"})
        cluster.wait_until(lambda: os.path.isdir(small_disk / "fill-0"), 30, "no fill-0")
        create(bootstrap, "safe", [[0, 2]])
        cluster.wait_until(lambda: os.path.isdir(big / "safe-0"), 30, "no safe-0")
        cluster.wait_for_isr("fill", 0, [0, 1])
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 5,
                             "message.timeout.ms": 60000})
        acked = []
        value = os.urandom(1000)
        for i in range(6000):                            # 6 MB into a 3 MB disk
            producer.produce("fill", value + b"%d" % i, on_delivery=lambda err, msg:
                             acked.append(msg.value()) if err is None else None)
            producer.poll(0)
        assert producer.flush(90) == 0
        assert len(acked) == 6000                        # every record lands, via broker 1
        cluster.wait_until(lambda: cluster.leader("fill", 0) == 1, 30, "leadership stayed")
        assert 0 not in cluster.isr("fill", 0)
        assert "Stopping serving replicas in dir" in cluster.output(0)
        assert sorted(read_all(bootstrap, "fill", 6000)) == sorted(acked)
        # The broker's other dir serves on.
        producer.produce("safe", b"still here")
        assert producer.flush(30) == 0
        assert cluster.leader("safe", 0) == 0
        assert read_all(bootstrap, "safe", 1) == [b"still here"]


def test_a_log_dir_unusable_at_start_up_leaves_the_broker_serving_its_other_dir(tmp_path):
    # Kafka's log_dir_failure_test with bounce_broker: a broker whose dir cannot be used when
    # it starts (here: the mount is gone, a file in its place) starts on its other dir; the
    # replicas that lived on the lost dir are offline (not re-created empty elsewhere), and
    # their partitions are led by the other replicas.
    first, second = tmp_path / "first", tmp_path / "second"
    with KafkaCluster(3, tmp_path / "cluster", broker_configs={
            0: {"log.dirs": f"{first},{second}"}}) as cluster:
        bootstrap = cluster.bootstrap_servers
        create(bootstrap, "lost", [[0, 1]])
        cluster.wait_until(lambda: os.path.isdir(first / "lost-0"), 30, "no lost-0")
        create(bootstrap, "kept", [[0, 2]])
        cluster.wait_until(lambda: os.path.isdir(second / "kept-0"), 30, "no kept-0")
        cluster.wait_for_isr("lost", 0, [0, 1])
        cluster.wait_for_isr("kept", 0, [0, 2])
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for topic in ("lost", "kept"):
            for i in range(10):
                producer.produce(topic, f"{topic}-{i}".encode())
        assert producer.flush(60) == 0
        cluster.stop(0)
        os.rename(first, tmp_path / "unmounted")
        first.write_text("not a directory")
        cluster.start(0)
        cluster.wait_until(lambda: cluster.leader("lost", 0) == 1, 60, "lost led by 1")
        cluster.wait_until(lambda: cluster.isr("lost", 0) == [1], 60, "0 out of lost's ISR")
        cluster.wait_for_isr("kept", 0, [0, 2])
        assert not (second / "lost-0").exists()
        assert "Disk error while locking directory" in cluster.output(0)
        # kafka-log-dirs.sh over the cluster: the lost dir with Kafka's error and no replica,
        # the other dirs with theirs
        tool = subprocess.run([str(BIN / "kafka-log-dirs.sh"), "--bootstrap-server", bootstrap,
                               "--describe"], capture_output=True, text=True, timeout=90)
        assert tool.returncode == 0, tool.stderr
        lines = tool.stdout.splitlines()
        assert lines[:2] == ["Querying brokers for log directories information",
                             "Received log directory information from brokers 0,1,2"], lines
        described = {b["broker"]: {d["logDir"]: d for d in b["logDirs"]}
                     for b in json.loads(lines[2])["brokers"]}
        assert described[0][str(first)]["error"] == \
            "org.apache.kafka.common.errors.KafkaStorageException"
        assert described[0][str(first)]["partitions"] == []
        assert described[0][str(second)]["error"] is None
        assert [p["partition"] for p in described[0][str(second)]["partitions"]] == ["kept-0"]
        for broker, topic in ((1, "lost-0"), (2, "kept-0")):
            (only,) = described[broker].values()
            assert only["error"] is None and topic in [p["partition"] for p in only["partitions"]]
        assert read_all(bootstrap, "lost", 10) == [f"lost-{i}".encode() for i in range(10)]
        cluster.stop(2)
        cluster.wait_until(lambda: cluster.leader("kept", 0) == 0, 60, "kept led by 0")
        assert read_all(bootstrap, "kept", 10) == [f"kept-{i}".encode() for i in range(10)]
