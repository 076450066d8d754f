"""Checkpoint files, partition.metadata, meta.properties and the leader epoch cache."""
import os
import uuid

from storage import checkpoints
from storage.leader_epoch import LeaderEpochCache


def test_offset_checkpoint_round_trip_and_format(tmp_path):
    path = str(tmp_path / "recovery-point-offset-checkpoint")
    checkpoints.write_offsets(path, {("b", 1): 7, ("a", 0): 100})
    with open(path) as fh:
        assert fh.read() == "0\n2\na 0 100\nb 1 7\n"
    assert checkpoints.read_offsets(path) == {("a", 0): 100, ("b", 1): 7}
    assert not os.path.exists(path + ".tmp")


def test_reads_kafka_written_checkpoints(kafka_fixtures):
    base = kafka_fixtures / "kafka-3.1.0"
    hw = checkpoints.read_offsets(str(base / "replication-offset-checkpoint"))
    assert len(hw) == 51 and hw[("cities", 0)] == 11 and hw[("__consumer_offsets", 0)] == 2
    assert checkpoints.read_offsets(str(base / "cleaner-offset-checkpoint")) == {}
    assert checkpoints.read_offsets(str(base / "log-start-offset-checkpoint")) == {}
    props = checkpoints.read_properties(str(base / "meta.properties"))
    assert props == {"broker.id": "0", "version": "0", "cluster.id": "P4mWrUMKRvm3AylnZYNBaQ"}


def test_partition_metadata_round_trips_kafka_text(kafka_fixtures, tmp_path):
    fixture = kafka_fixtures / "kafka-3.1.0" / "cities-0"
    topic_id = checkpoints.read_partition_metadata(str(fixture))
    assert checkpoints.topic_id_to_str(topic_id) == "Yjwa-XTYSF28JSz9pdcuyw"
    checkpoints.write_partition_metadata(str(tmp_path), topic_id)
    written = (tmp_path / "partition.metadata").read_bytes()
    assert written == (fixture / "partition.metadata").read_bytes()


def test_leader_epoch_cache_answers_offset_for_leader_epoch(tmp_path):
    end = [100]
    cache = LeaderEpochCache(str(tmp_path), lambda: end[0])
    assert cache.end_offset_for(0) == (-1, -1)
    cache.assign(1, 0)
    cache.assign(1, 5)                              # same epoch: unchanged
    cache.assign(3, 40)
    cache.assign(4, 70)
    assert cache.entries() == [(1, 0), (3, 40), (4, 70)]
    assert cache.end_offset_for(4) == (4, 100)      # latest epoch ends at the log end
    assert cache.end_offset_for(3) == (3, 70)
    assert cache.end_offset_for(2) == (1, 40)       # unknown epoch: largest below it
    assert cache.end_offset_for(0) == (0, 0)        # below every epoch
    assert cache.end_offset_for(9) == (-1, -1)
    assert cache.epoch_for_offset(39) == 1 and cache.epoch_for_offset(40) == 3
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n1 0\n3 40\n4 70\n"
    cache.truncate_from_end(45)
    assert cache.entries() == [(1, 0), (3, 40)]
    cache.truncate_from_start(42)
    assert cache.entries() == [(3, 42)]
    assert LeaderEpochCache(str(tmp_path), lambda: 0).entries() == [(3, 42)]
    cache.assign(2, 50)                             # a lower epoch replaces larger ones
    assert cache.entries() == [(2, 50)]


def test_topic_id_text_form():
    topic_id = uuid.UUID("78083c37-fdc8-4ec7-8682-3628183a34fa")
    text = checkpoints.topic_id_to_str(topic_id)
    assert len(text) == 22 and checkpoints.topic_id_from_str(text) == topic_id
    assert checkpoints.as_topic_id(topic_id.bytes) == topic_id
