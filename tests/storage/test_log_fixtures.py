"""Logs written by Apache Kafka 3.4.0 and 3.1.0: read exactly, indexes rebuilt, appends after."""
import os

import pytest

from storage.log import Log
from storage.log_config import LogConfig
from storage.log_manager import LogManager

from tests.storage.log_checks import check_log, copy_fixture, make_batch


@pytest.fixture
def kafka_340(kafka_fixtures, tmp_path):
    return copy_fixture(kafka_fixtures / "kafka-3.4.0", tmp_path / "kafka-3.4.0")


@pytest.fixture
def kafka_310(kafka_fixtures, tmp_path):
    return copy_fixture(kafka_fixtures / "kafka-3.1.0", tmp_path / "kafka-3.1.0")


def test_kafka_340_test_topic_reads_97_records_in_28_batches(kafka_340):
    log_ = Log(str(kafka_340 / "test-0"), LogConfig(index_interval_bytes=128))
    views = check_log(log_)
    assert len(views) == 28
    assert sum(v.records_count for v in views) == 97
    records = [r for v in views for r in v.records()]
    assert [r.offset for r in records] == list(range(97))
    assert log_.log_start_offset == 0 and log_.log_end_offset == 97
    # The missing index files were rebuilt from the log.
    segment = log_.active_segment
    assert os.path.exists(segment.index_path) and segment.offset_index.entries > 5
    assert segment.time_index.entries > 0
    assert str(log_.topic_id) == "78083c37-fdc8-4ec7-8682-3628183a34fa"
    log_.close()


def test_kafka_340_read_by_offset_and_timestamp(kafka_340):
    log_ = Log(str(kafka_340 / "test-0"), LogConfig(index_interval_bytes=128))
    views = check_log(log_)
    for view in views:
        for offset in range(view.base_offset, view.last_offset + 1):
            info = log_.read(offset, 1)              # min_one_message: exactly that batch
            assert info.first_offset == view.base_offset
            assert info.records.read_bytes() == bytes(view.raw())
    records = [r for v in views for r in v.records()]
    for record in records[::7]:
        found = log_.fetch_offset_by_timestamp(record.timestamp)
        first = next(r for r in records if r.timestamp >= record.timestamp)
        assert found[:2] == (first.offset, first.timestamp)
    best = max(records, key=lambda r: r.timestamp)
    assert log_.fetch_offset_by_timestamp(-3)[:2] == (best.offset, best.timestamp)
    assert log_.fetch_offset_by_timestamp(-2)[0] == 0
    assert log_.fetch_offset_by_timestamp(-1)[0] == 97
    assert log_.fetch_offset_by_timestamp(best.timestamp + 1) is None
    log_.close()


def test_kafka_340_append_after_and_reopen(kafka_340):
    config = LogConfig(index_interval_bytes=128, segment_ms=10**15)
    log_ = Log(str(kafka_340 / "test-0"), config)
    info = log_.append_as_follower(make_batch(97, [b"a", b"b", b"c"], epoch=1))
    assert (info.first_offset, info.last_offset) == (97, 99)
    log_.flush()
    log_.close()
    reopened = Log(str(kafka_340 / "test-0"), config, had_clean_shutdown=True)
    views = check_log(reopened)
    assert reopened.log_end_offset == 100 and len(views) == 29
    assert reopened.leader_epoch_cache.entries() == [(0, 0), (1, 97)]
    reopened.close()


def test_log_manager_opens_kafka_340_dir(kafka_340):
    manager = LogManager([str(kafka_340)], LogConfig())
    manager.startup(cluster_id=None, broker_id=0)
    assert len(manager.logs()) == 51
    offsets = manager.get_log("__consumer_offsets", 36)
    views = check_log(offsets)
    assert views and offsets.log_end_offset == views[-1].last_offset + 1
    assert manager.get_log("test", 0).log_end_offset == 97
    manager.shutdown()
    assert os.path.exists(kafka_340 / ".kafka_cleanshutdown")


def test_kafka_310_cities(kafka_310):
    manager = LogManager([str(kafka_310)], LogConfig())
    manager.startup(cluster_id="P4mWrUMKRvm3AylnZYNBaQ", broker_id=0)
    cities = manager.get_log("cities", 0)
    views = check_log(cities)
    values = [r.value for v in views for r in v.records()]
    assert len(values) == 11 and values[0] == b"New York"
    assert cities.high_watermark == 11                    # from replication-offset-checkpoint
    cities.append_as_follower(make_batch(11, [b"Hanoi"], epoch=0))
    manager.shutdown()
    manager = LogManager([str(kafka_310)], LogConfig())
    manager.startup(cluster_id="P4mWrUMKRvm3AylnZYNBaQ", broker_id=0)
    cities = manager.get_log("cities", 0)
    assert [r.value for v in check_log(cities) for r in v.records()][-1] == b"Hanoi"
    assert cities.recovery_point == 12
    for partition in (0, 2, 31, 34):
        check_log(manager.get_log("__consumer_offsets", partition))
    manager.shutdown()


def test_epoch_history_of_a_kafka_log_is_read_or_rebuilt(kafka_fixtures, tmp_path):
    """_schemas-0 of the KRaft dir: Kafka's checkpoint says epochs 0, 2, 4 start at 0, 2, 3;
    without the checkpoint the same history comes back from the batches (as Kafka's recovery
    assigns the epochs of the batches it reads), and OffsetForLeaderEpoch answers from it."""
    kraft = copy_fixture(kafka_fixtures / "kafka-3.4.0-kraft", tmp_path / "kraft")
    log_ = Log(str(kraft / "_schemas-0"), LogConfig())
    assert log_.leader_epoch_cache.entries() == [(0, 0), (2, 2), (4, 3)]
    assert [log_.leader_epoch_cache.end_offset_for(e) for e in (0, 1, 2, 3, 4, 5)] == [
        (0, 2), (0, 2), (2, 3), (2, 3), (4, 4), (-1, -1)]
    log_.close()
    os.remove(kraft / "_schemas-0" / "leader-epoch-checkpoint")
    log_ = Log(str(kraft / "_schemas-0"), LogConfig(), had_clean_shutdown=True)
    assert log_.leader_epoch_cache.entries() == [(0, 0), (2, 2), (4, 3)]
    log_.close()
    with open(kraft / "_schemas-0" / "leader-epoch-checkpoint") as f:
        assert f.read() == "0\n3\n0 0\n2 2\n4 3\n"


def test_epochs_of_recovered_batches_complete_a_stale_checkpoint(tmp_path):
    """After a crash, the epochs of the batches above the recovery point are added to the
    history, as Kafka's LogSegment.recover does (the checkpoint may predate them)."""
    path = str(tmp_path / "t-0")
    log_ = Log(path, LogConfig())
    log_.append_as_leader(make_batch(0, [b"a", b"b"]), leader_epoch=0)
    log_.append_as_leader(make_batch(0, [b"c"]), leader_epoch=3)
    log_.append_as_leader(make_batch(0, [b"d"]), leader_epoch=5)
    log_.close()
    with open(os.path.join(path, "leader-epoch-checkpoint"), "w") as f:
        f.write("0\n1\n0 0\n")                  # written before epochs 3 and 5 began
    log_ = Log(path, LogConfig(), recovery_point=2, had_clean_shutdown=False)
    assert log_.leader_epoch_cache.entries() == [(0, 0), (3, 2), (5, 3)]
    log_.close()
