"""Moving a replica to another log dir of its broker (AlterReplicaLogDirs) while a producer
writes to it, as an operator rebalances disks: kafka-log-dirs.sh shows the future replica, the
move completes with every acknowledged record in the new dir, the old folder goes, and bad
targets get Kafka's errors."""
import asyncio
import json
import os
import re
import subprocess
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition as CTP

from broker.client.admin import Admin
from broker.client.cluster import ClusterClient
from broker.client.types import TopicPartition
from protocol.errors import ErrorCode

pytestmark = [pytest.mark.integration]

BIN = os.path.join(os.path.dirname(__file__), "..", "..", "bin")


def alter(bootstrap, moves):
    async def run():
        async with ClusterClient(bootstrap) as cluster:
            return await Admin(cluster).alter_replica_log_dirs(0, moves)
    return asyncio.run(run())


def describe(bootstrap):
    out = subprocess.run([os.path.join(BIN, "kafka-log-dirs.sh"), "--bootstrap-server",
                          bootstrap, "--describe"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout.splitlines()[-1])
    return {(d["logDir"], p["partition"], p["isFuture"])
            for b in doc["brokers"] for d in b["logDirs"] for p in d["partitions"]}


def fill(producer, value, acked, count=12000) -> None:
    """`count` records of `value` to disk-0, their offsets into `acked`."""
    for i in range(count):
        producer.produce("disk", value, key=b"%d" % i,
                         on_delivery=lambda err, msg: acked.append(msg.offset())
                         if err is None else None)
        producer.poll(0)
    assert producer.flush(60) == 0


def read_offsets(bootstrap, count, value=None) -> list:
    """The offsets of disk-0 from its start (up to `count`), each record's value checked."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check",
                         "enable.auto.commit": False})
    consumer.assign([CTP("disk", 0, 0)])
    offsets = []
    deadline = time.monotonic() + 60
    while len(offsets) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            assert value is None or msg.value() == value
            offsets.append(msg.offset())
    consumer.close()
    return offsets


def wait_moved(bootstrap, there) -> None:
    deadline = time.monotonic() + 60
    while (there, "disk-0", False) not in describe(bootstrap):
        assert time.monotonic() < deadline, "the move did not complete"
        time.sleep(0.5)


def two_dirs_filled(tmp_path, broker_process, move_rate):
    """A broker with log dirs a and b, its "disk-0" filled with 12 MB by an idempotent
    acks=all producer, moves copied at `move_rate` bytes/s. (broker, producer, acknowledged
    offsets, the value written, the partition's dir, the other dir)."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    broker = broker_process(log_dirs=f"{a},{b}", num_partitions=1,
                            log_segment_bytes=1048576, log_segment_delete_delay_ms=500,
                            replica_alter_log_dirs_io_max_bytes_per_second=move_rate)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
    acked = []
    value = os.urandom(1000)
    fill(producer, value, acked)
    here = a if os.path.isdir(os.path.join(a, "disk-0")) else b
    return broker, producer, acked, value, here, (b if here == a else a)


def test_a_replica_moves_to_another_log_dir_under_load(tmp_path, broker_process):
    broker, producer, acked, value, here, there = two_dirs_filled(tmp_path, broker_process,
                                                                  4000000)
    stop = threading.Event()

    def keep_writing():
        i = 12000
        while not stop.is_set():
            producer.produce("disk", value, key=b"%d" % i, on_delivery=lambda err, msg:
                             acked.append(msg.offset()) if err is None else None)
            producer.poll(0.001)
            i += 1
    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        got = alter(broker.bootstrap, {TopicPartition("disk", 0): there})
        assert got == {TopicPartition("disk", 0): ErrorCode.NONE}
        seen = describe(broker.bootstrap)
        assert (there, "disk-0", True) in seen and (here, "disk-0", False) in seen
        wait_moved(broker.bootstrap, there)
    finally:
        stop.set()
        writer.join()
    assert producer.flush(60) == 0
    assert (here, "disk-0", False) not in describe(broker.bootstrap)
    offsets = read_offsets(broker.bootstrap, len(acked))
    assert offsets == sorted(acked) == list(range(len(acked)))
    assert "disk-0" not in os.listdir(here)            # renamed -delete, removed later:
    deadline = time.monotonic() + 10                   # log.segment.delete.delay.ms (500) on
    while [n for n in os.listdir(here) if n.startswith("disk-0.") and n.endswith("-delete")]:
        assert time.monotonic() < deadline, os.listdir(here)
        time.sleep(0.1)
    # Bad targets.
    got = alter(broker.bootstrap, {TopicPartition("disk", 0): str(tmp_path / "nowhere"),
                                   TopicPartition("nope", 0): here})
    assert got == {TopicPartition("disk", 0): ErrorCode.LOG_DIR_NOT_FOUND,
                   TopicPartition("nope", 0): ErrorCode.REPLICA_NOT_AVAILABLE}


def future_dirs(log_dir):
    return [n for n in os.listdir(log_dir) if n.startswith("disk-0.") and n.endswith("-future")]


@pytest.mark.parametrize("stop", ["sigterm", "kill -9"])
def test_a_move_interrupted_by_a_restart_resumes_and_completes(tmp_path, broker_process, stop):
    """As Kafka: the future replica stays over a restart (a clean stop or kill -9) and the
    broker goes on copying into it from where it got to, then swaps; nothing is lost."""
    broker, producer, acked, value, here, there = two_dirs_filled(
        tmp_path, broker_process, 2000000)        # 12 MB: 6 s at 2 MB/s
    assert alter(broker.bootstrap, {TopicPartition("disk", 0): there}) == \
        {TopicPartition("disk", 0): ErrorCode.NONE}
    time.sleep(1.5)                               # some of it copied, most of it not
    [name] = future_dirs(there)
    copied = sum(os.path.getsize(os.path.join(there, name, f))
                 for f in os.listdir(os.path.join(there, name)) if f.endswith(".log"))
    assert 0 < copied < 10_000_000
    if stop == "sigterm":
        assert broker.stop() == 0
    else:
        broker.kill()
    broker.start()
    assert future_dirs(there) == [name], "the move was dropped at the restart"
    assert (there, "disk-0", True) in describe(broker.bootstrap)
    wait_moved(broker.bootstrap, there)
    assert "disk-0" not in os.listdir(here) and not future_dirs(there)
    # It went on from where it was, not from the start.
    resumed = re.search(r"Resuming the move of disk-0 to log dir \S+ from offset (\d+)",
                        broker.output())
    assert resumed and int(resumed.group(1)) > 0, broker.output()[-3000:]
    assert read_offsets(broker.bootstrap, len(acked), value) == sorted(acked) == \
        list(range(12000))


def test_a_single_broker_starts_without_a_lost_second_dir_and_says_so(tmp_path, broker_process):
    # Kafka starts on the dirs it can use; the partitions of the lost one answer
    # KAFKA_STORAGE_ERROR (they are not re-created empty in the other dir: consumers would
    # jump back to offset 0). (The first dir holds a single broker's metadata: it must stay.)
    a, b = tmp_path / "a", tmp_path / "b"
    broker = broker_process(log_dirs=f"{a},{b}", num_partitions=2)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for i in range(10):
        producer.produce("two", b"v%d" % i, partition=i % 2)
    assert producer.flush(60) == 0
    broker.stop()
    lost, kept = (0, 1) if (b / "two-0").is_dir() else (1, 0)
    os.rename(b, tmp_path / "unmounted")
    b.write_text("the mount is gone")
    broker.start()
    assert not (a / f"two-{lost}").exists()
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g",
                         "enable.auto.commit": False})
    consumer.assign([CTP("two", kept, 0)])
    got, deadline = [], time.monotonic() + 30
    while len(got) < 5 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg.value())
    consumer.close()
    assert got == [b"v%d" % i for i in range(kept, 10, 2)]

    async def lost_partition():
        async with ClusterClient(broker.bootstrap) as cluster:
            return await Admin(cluster).list_offsets({TopicPartition("two", lost): -1})
    # As Kafka's controller makes it: the only replica is offline, so no leader.
    with pytest.raises(Exception, match="LEADER_NOT_AVAILABLE"):
        asyncio.run(lost_partition())
