"""bench/fetch_load.py, the benchmark's batch-counting consumer: it must count exactly what a
real consumer reads, or the consume figure it produces means nothing.

The batches are built by kafka-python's record encoder (not this project's); the group run is
two `python -m bench.fetch_load` processes against a broker subprocess, checked against what
confluent-kafka produced.
"""
import struct
import subprocess
import sys
import json
import pathlib

import pytest

from bench.fetch_load import walk_batches

ROOT = pathlib.Path(__file__).resolve().parents[2]


def batch(base_offset: int, count: int, *, control: bool = False, codec: int = 0) -> bytes:
    from kafka.record.memory_records import MemoryRecordsBuilder
    builder = MemoryRecordsBuilder(magic=2, compression_type=codec, batch_size=1 << 20)
    for i in range(count):
        builder.append(1_700_000_000_000 + i, None, b"v%d" % i, [])
    builder.close()
    data = bytearray(builder.buffer())
    struct.pack_into(">q", data, 0, base_offset)
    if control:                                    # attributes: bit 5 (CRC left stale: unread)
        attributes = struct.unpack_from(">h", data, 21)[0]
        struct.pack_into(">h", data, 21, attributes | 0x20)
    return bytes(data)


def test_whole_batches_are_counted_and_a_partial_last_one_is_left_for_the_next_fetch():
    a, b, c = batch(0, 5), batch(5, 3, codec=3), batch(8, 4)
    data = a + b + c[:len(c) - 7]                   # Kafka slices the last batch at the limit
    assert walk_batches(memoryview(data), 0) == (8, 8)
    assert walk_batches(c, 8) == (4, 12)
    assert walk_batches(b"", 3) == (0, 3)
    assert walk_batches(a[:40], 0) == (0, 0)        # not even a whole header


def test_a_fetch_starting_inside_a_batch_counts_only_the_records_from_its_offset_on():
    # A fetch at offset 7 gets the whole batch 5..7 back (Kafka returns batches whole).
    assert walk_batches(batch(5, 3) + batch(8, 2), 7) == (3, 10)
    assert walk_batches(batch(5, 3), 9) == (0, 9)   # wholly before the offset: skipped


def test_control_batches_move_the_offset_but_count_no_records():
    assert walk_batches(batch(0, 2) + batch(2, 1, control=True) + batch(3, 2), 0) == (4, 5)


def test_a_batch_that_is_not_v2_or_has_an_impossible_length_is_refused():
    data = bytearray(batch(0, 1))
    data[16] = 1
    with pytest.raises(ValueError, match="magic 1"):
        walk_batches(data, 0)
    data = bytearray(batch(0, 1))
    struct.pack_into(">i", data, 8, -12)            # would never move on
    with pytest.raises(ValueError, match="length -12"):
        walk_batches(data, 0)


@pytest.mark.integration
def test_two_members_split_the_topic_and_count_every_record(broker_process, tmp_path):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = broker_process()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("loads", 6, 1)])["loads"].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(30_000):
        producer.produce("loads", value=b"%04d" % (i % 10_000) * 256, partition=i % 6)
        if i % 5_000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0

    barrier = tmp_path / "barrier"
    barrier.mkdir()
    members = [subprocess.Popen(
        [sys.executable, "-m", "bench.fetch_load", "-b", broker.bootstrap, "-t", "loads",
         "-g", "counting", "-n", "3", "-s", "1024", "-B", str(barrier), "-m", "2", "-T", "60"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    summaries = []
    for member in members:
        out, err = member.communicate(timeout=90)
        assert member.returncode == 0, err[-2000:] + out[-500:]
        summaries.append(json.loads(out.strip().splitlines()[-1]))
    assert [s["partitions"] for s in summaries] == [3, 3]
    assert [s["at_end"] for s in summaries] == [3, 3]
    assert sum(s["messages"] for s in summaries) == 30_000
    assert all(0 < s["t0"] <= s["t1"] for s in summaries)
    assert len(list(barrier.iterdir())) == 2
