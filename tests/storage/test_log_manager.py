"""LogManager: start-up, meta.properties, checkpoints, deletion, retention, clean shutdown."""
import os
import re
import uuid

import pytest

from storage import checkpoints, files
from storage.errors import LogDirUnusable, StorageError
from storage.log_config import LogConfig
from storage.log_manager import InvalidMetaProperties, LogManager
from storage.record_batch import RecordBatchBuilder

from tests.storage.log_checks import check_log

NOW = 1_700_000_000_000


def batch(values):
    builder = RecordBatchBuilder()
    for value in values:
        builder.append(NOW, None, value)
    return builder.build()


class Clock:
    ms = NOW

    def __call__(self):
        return self.ms


def test_startup_writes_meta_properties_and_refuses_another_cluster(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    manager = LogManager(dirs, LogConfig())
    manager.startup(cluster_id="abc", broker_id=3)
    assert manager.meta_properties(dirs[1]) == {"version": "0", "broker.id": "3",
                                                "cluster.id": "abc"}
    manager.shutdown()
    with pytest.raises(InvalidMetaProperties):
        LogManager(dirs, LogConfig()).startup(cluster_id="other", broker_id=3)


def test_partitions_spread_over_dirs_and_survive_a_clean_restart(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    config = LogConfig(segment_ms=10**12)
    manager = LogManager(dirs, config)
    manager.startup(cluster_id="c", broker_id=0)
    topic_id = uuid.uuid4()
    logs = [manager.get_or_create_log("t", p, config, topic_id) for p in range(4)]
    assert sorted(os.path.dirname(l.dir) for l in logs) == sorted(dirs * 2)
    for p, log_ in enumerate(logs):
        for i in range(p + 1):
            log_.append_as_leader(batch([b"%d" % i]), 0)
        log_.update_high_watermark(p + 1)
    logs[3].delete_records_before(2)
    manager.shutdown()
    for d in dirs:
        assert os.path.exists(os.path.join(d, files.CLEAN_SHUTDOWN_FILE))
        assert os.path.exists(os.path.join(d, files.CLEANER_CHECKPOINT))
    manager = LogManager(dirs, config)
    manager.startup(cluster_id="c", broker_id=0)
    assert all(manager.had_clean_shutdown.values())
    for d in dirs:                                  # the marker goes once the logs are open
        assert not os.path.exists(os.path.join(d, files.CLEAN_SHUTDOWN_FILE))
    for p in range(4):
        log_ = manager.get_log("t", p)
        assert log_.topic_id == topic_id
        assert (log_.log_end_offset, log_.high_watermark, log_.recovery_point) == (p + 1,) * 3
        check_log(log_)
    assert manager.get_log("t", 3).log_start_offset == 2
    manager.shutdown()


def test_delete_log_renames_then_removes_after_the_delay(tmp_path):
    clock = Clock()
    manager = LogManager([str(tmp_path)], LogConfig(file_delete_delay_ms=1000), time_ms=clock)
    manager.startup()
    log_ = manager.get_or_create_log("gone", 0)
    log_.append_as_leader(batch([b"x"]), 0)
    region = log_.read(0, 1000).records
    assert manager.delete_log("gone", 0)
    assert region.read_bytes()[:8] == bytes(8)        # still readable until the delay passes
    assert manager.get_log("gone", 0) is None
    names = os.listdir(tmp_path)
    assert not os.path.exists(tmp_path / "gone-0")
    doomed = [n for n in names if files.parse_delete_dir(n) == ("gone", 0)]
    assert len(doomed) == 1
    fresh = manager.get_or_create_log("gone", 0)    # the name is free again at once
    assert fresh.log_end_offset == 0
    assert manager.cleanup_deleted(clock.ms + 999) == 0
    assert manager.cleanup_deleted(clock.ms + 1000) == 1
    assert not os.path.exists(tmp_path / doomed[0])
    manager.shutdown()


def test_a_topic_with_a_249_character_name_is_deleted_and_not_read_again(tmp_path):
    # "<topic>-0.<32 hex>-delete" would be 292 characters: the name is cut to 255 as
    # Kafka's logDeleteDirName, so the rename works and a restart does not bring it back.
    topic = "t" * 249
    manager = LogManager([str(tmp_path)], LogConfig(file_delete_delay_ms=60_000))
    manager.startup()
    manager.get_or_create_log(topic, 0).append_as_leader(batch([b"old"]), 0)
    assert manager.delete_log(topic, 0)
    names = os.listdir(tmp_path)
    assert f"{topic}-0" not in names
    doomed = [n for n in names if n.endswith(files.DELETE_DIR_SUFFIX)]
    assert len(doomed) == 1 and len(doomed[0]) == 255
    manager.shutdown()
    again = LogManager([str(tmp_path)], LogConfig())
    again.startup()
    assert again.get_log(topic, 0) is None
    assert again.cleanup_deleted() == 1
    assert not [n for n in os.listdir(tmp_path) if n.endswith(files.DELETE_DIR_SUFFIX)]
    again.shutdown()


def test_retention_flush_and_checkpoints(tmp_path):
    clock = Clock()
    config = LogConfig(segment_bytes=200, retention_bytes=300, file_delete_delay_ms=0,
                       segment_ms=10**12)
    manager = LogManager([str(tmp_path)], config, time_ms=clock)
    manager.startup()
    log_ = manager.get_or_create_log("r", 0)
    for i in range(10):
        log_.append_as_leader(batch([b"y" * 80]), 0)
    log_.update_high_watermark(log_.log_end_offset)
    assert manager.flush_dirty() == 1
    assert checkpoints.read_offsets(str(tmp_path / files.RECOVERY_POINT_CHECKPOINT)) == {
        ("r", 0): log_.recovery_point}
    assert manager.run_retention() > 0
    assert log_.size_in_bytes <= 300 + 200 and log_.log_start_offset > 0
    assert manager.cleanup_deleted() > 0
    assert not any(n.endswith(".deleted") for n in os.listdir(log_.dir))
    manager.checkpoint_log_start_offsets()
    manager.checkpoint_high_watermarks()
    # Retention moved the start to a segment's base: nothing to write (Kafka's rule).
    assert log_.log_start_offset == log_.segments[0].base_offset
    assert checkpoints.read_offsets(str(tmp_path / files.LOG_START_OFFSET_CHECKPOINT)) == {}
    # An unclean restart keeps the log start offset and validates the tail.
    for l in manager.logs():
        l.close()
    manager.release_locks()                     # the crashed process's locks go with it
    manager = LogManager([str(tmp_path)], config, time_ms=clock, recovery_threads=2)
    manager.startup()
    again = manager.get_log("r", 0)
    assert again.log_start_offset == log_.log_start_offset
    assert again.log_end_offset == 10
    check_log(again)
    manager.shutdown()


def _write_meta(log_dir, text):
    os.makedirs(log_dir, exist_ok=True)
    with open(os.path.join(log_dir, "meta.properties"), "w") as f:
        f.write(text)


@pytest.mark.parametrize("text, configured, message", [
    ("version=1\nnode.id=1\ncluster.id=C\n", 0,
     "Configured broker.id 0 doesn't match stored node.id Some(1) in meta.properties. If you "
     "moved your data, make sure your configured broker.id matches. If you intend to create a "
     "new broker, you should remove all data in your data directories (log.dirs)."),
    ("version=0\nbroker.id=2\n", 0, "doesn't match stored broker.id Some(2)"),
    ("version=1\nnode.id=0\n", 0, "cluster.id was not specified in the v1 file"),
    ("version=1\ncluster.id=C\n", 0, "node.id was not specified in"),
    ("version=7\nbroker.id=0\n", 0, "Unknown meta.properties version 7"),
    ("version=0\nbroker.id=zero\n", 0, "Invalid broker.id 'zero'"),
    ("version=0\nbroker.id=0\ncluster.id=other\n", 0, "Invalid cluster.id in: "),
])
def test_meta_properties_checked_as_kafka_checks_it(tmp_path, text, configured, message):
    log_dir = str(tmp_path / "d")
    _write_meta(log_dir, text)
    manager = LogManager([log_dir], LogConfig())
    with pytest.raises(InvalidMetaProperties, match=re.escape(message)):
        manager.startup(cluster_id="C", broker_id=configured)
    manager.shutdown()
    with open(os.path.join(log_dir, "meta.properties")) as f:
        assert f.read() == text                  # refused: left exactly as it was


def test_meta_properties_gets_what_it_lacks_and_keeps_the_rest(tmp_path):
    kraft, zk = str(tmp_path / "kraft"), str(tmp_path / "zk")
    kraft_text = "#\n#Thu Aug 17 11:12:52 UTC 2023\nnode.id=1\nversion=1\ncluster.id=C\n" \
                 "directory.id=Kqj5IwF2S1e8Xy1bH0Tn4A\n"
    _write_meta(kraft, kraft_text)
    _write_meta(zk, "version=0\nbroker.id=1\n")
    manager = LogManager([kraft, zk], LogConfig())
    assert manager.verify_meta_properties() == ("C", 1)
    manager.startup(cluster_id="C", broker_id=1)
    manager.shutdown()
    with open(os.path.join(kraft, "meta.properties")) as f:
        assert f.read() == kraft_text            # complete: not rewritten, version 1 kept
    assert manager.meta_properties(zk) == {"version": "0", "broker.id": "1", "cluster.id": "C"}


def test_cluster_metadata_log_is_never_opened(tmp_path):
    log_dir = tmp_path / "d"
    metadata = log_dir / "__cluster_metadata-0"
    metadata.mkdir(parents=True)
    (metadata / "00000000000000000000.log").write_bytes(b"\0" * 100)   # not even valid
    (metadata / "quorum-state").write_text("{}")
    manager = LogManager([str(log_dir)], LogConfig())
    manager.startup(cluster_id="C", broker_id=0)
    assert manager.logs() == []
    manager.shutdown()
    assert sorted(os.listdir(metadata)) == ["00000000000000000000.log", "quorum-state"]
    assert (metadata / "00000000000000000000.log").read_bytes() == b"\0" * 100


def test_a_refused_start_writes_to_no_dir(tmp_path):
    """Every dir's meta.properties is checked before any is written: a new dir listed before
    another broker's dir gets nothing."""
    new, other = str(tmp_path / "new"), str(tmp_path / "other")
    _write_meta(other, "version=0\nbroker.id=2\ncluster.id=C\n")
    manager = LogManager([new, other], LogConfig())
    with pytest.raises(InvalidMetaProperties, match="stored broker.id Some\\(2\\)"):
        manager.startup(cluster_id="C", broker_id=0)
    manager.shutdown()
    assert os.listdir(new) == [".lock"]


def _copy_into(future, current):
    region = current.read(future.log_end_offset, 1 << 20).records
    future.append_as_follower(os.pread(region.file.fileno(), region.length, region.position))


@pytest.mark.parametrize("clean", [True, False])
def test_a_move_between_dirs_is_loaded_again_at_restart(tmp_path, clean):
    """A future log (a replica being moved to another dir) is kept over a restart, clean or
    not, with what it had copied, for the broker to resume the move (Kafka's future logs)."""
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    config = LogConfig(segment_ms=10**12)
    manager = LogManager(dirs, config)
    manager.startup(cluster_id="c", broker_id=0)
    current = manager.get_or_create_log("t", 0, config)
    for i in range(5):
        current.append_as_leader(batch([b"%d" % i]), 0)
    here = manager.log_dir_of("t", 0)
    there = dirs[1] if here == dirs[0] else dirs[0]
    future = manager.create_future_log("t", 0, there, config)
    _copy_into(future, current)
    assert future.log_end_offset == 5
    if clean:
        manager.shutdown()
    else:
        future.flush()
        manager.checkpoint_recovery_points()
        manager.release_locks()                  # as a kill -9 leaves them
    manager = LogManager(dirs, config)
    manager.startup(cluster_id="c", broker_id=0)
    log_dir, loaded = manager.future_logs[("t", 0)]
    assert log_dir == there and os.path.dirname(loaded.dir) == there
    assert loaded.log_end_offset == 5 and loaded.recovery_point == 5
    assert manager.log_dir_of("t", 0) == here
    check_log(loaded)
    manager.shutdown()


def test_a_future_log_with_nothing_to_move_is_removed_at_restart(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    config = LogConfig(segment_ms=10**12)
    manager = LogManager(dirs, config)
    manager.startup(cluster_id="c", broker_id=0)
    orphan = manager.create_future_log("gone", 0, dirs[1], config)   # no current log
    current = manager.get_or_create_log("t", 0, config)
    here = manager.log_dir_of("t", 0)
    same_dir = manager.create_future_log("t", 0, here, config)       # nothing to move
    paths = [orphan.dir, same_dir.dir]
    manager.shutdown()
    manager = LogManager(dirs, config)
    manager.startup(cluster_id="c", broker_id=0)
    assert manager.future_logs == {}
    manager.cleanup_deleted()
    assert not any(os.path.exists(p) for p in paths)
    assert manager.get_log("t", 0).dir == current.dir
    manager.shutdown()


def _two_dirs_with_a_log_each(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    manager = LogManager([str(a), str(b)], LogConfig())
    manager.startup()
    manager.get_or_create_log("x", 0).append_as_leader(batch([b"x"]), 0)     # in a
    manager.get_or_create_log("y", 0).append_as_leader(batch([b"y"]), 0)     # in b
    assert {manager.log_dir_of("x", 0), manager.log_dir_of("y", 0)} == {str(a), str(b)}
    manager.shutdown()
    return a, b


def test_a_log_dir_that_cannot_be_used_at_start_up_goes_offline_alone(tmp_path):
    # Kafka's lockLogDirs / loadLogs: a disk error takes that dir offline; the broker starts
    # on the others. A replica that lived there is not re-created empty elsewhere (isNew false).
    a, b = _two_dirs_with_a_log_each(tmp_path)
    os.rename(a, tmp_path / "unmounted")
    a.write_text("a file where the mount point was")
    manager = LogManager([str(a), str(b)], LogConfig())
    manager.startup()
    assert manager.offline_dirs == {str(a)} and manager.online_dirs() == [str(b)]
    assert manager.get_log("y", 0).log_end_offset == 1
    with pytest.raises(StorageError, match="because log directories .* are offline"):
        manager.get_or_create_log("x", 0, is_new=False)
    assert not (b / "x-0").exists()
    assert manager.log_dir_of("z", 0) is None
    manager.get_or_create_log("z", 0)                           # a new replica: created in b
    assert manager.log_dir_of("z", 0) == str(b)
    manager.shutdown()


def test_a_malformed_checkpoint_in_one_log_takes_only_its_dir_offline(tmp_path):
    a, b = _two_dirs_with_a_log_each(tmp_path)
    (a / "x-0" / files.LEADER_EPOCH_CHECKPOINT).write_text("0\n1\n")      # torn: 1 of 1 lines
    before = {p.name: p.stat().st_mtime_ns for p in a.iterdir()}
    manager = LogManager([str(a), str(b)], LogConfig())
    manager.startup()
    assert manager.offline_dirs == {str(a)}
    assert manager.get_log("x", 0) is None and manager.get_log("y", 0) is not None
    manager.shutdown()
    assert {p.name: p.stat().st_mtime_ns for p in a.iterdir()} == before   # a untouched


def test_start_up_stops_when_no_log_dir_is_usable(tmp_path):
    a = tmp_path / "a"
    a.write_text("not a directory")
    with pytest.raises(LogDirUnusable, match="Shutdown broker because none of the specified"):
        LogManager([str(a)], LogConfig()).startup()


@pytest.mark.parametrize("crash_after_the_deletion", [False, True])
def test_a_recreated_topic_keeps_its_data_after_a_crash(tmp_path, crash_after_the_deletion):
    """Kafka's asyncDelete rewrites the dir's checkpoints: the deleted partition's old log
    start (50, DeleteRecords) was applied to the re-created log at the next start after a
    crash, above its end: every segment of the new topic deleted. The entries also outlive a
    crash right after the deletion: the dir is then known stale at the next start (entries
    without a folder), and they are written away before the topic is created again."""
    clock = Clock()
    config = LogConfig(segment_ms=10**12)
    manager = LogManager([str(tmp_path)], config, time_ms=clock)
    manager.startup()
    _delete_a_log_whose_start_moved(manager, clock)
    if crash_after_the_deletion:
        _crash(manager)
        manager = LogManager([str(tmp_path)], config, time_ms=clock)
        manager.startup()
    _recreate_with_ten_records(manager)
    _crash(manager)
    again = LogManager([str(tmp_path)], config, time_ms=clock)
    again.startup()
    log_ = again.get_log("t", 0)
    assert (log_.log_start_offset, log_.log_end_offset) == (0, 10)
    again.shutdown()


def test_log_start_checkpoint_names_only_moved_starts(tmp_path):
    """Kafka's checkpointLogStartOffsetsInDir: only a log start above the first segment's
    base (the others are where loading puts them), as the fixtures written by Kafka show."""
    manager = LogManager([str(tmp_path)], LogConfig(segment_ms=10**12))
    manager.startup()
    moved, kept = manager.get_or_create_log("m", 0), manager.get_or_create_log("k", 0)
    for log_ in (moved, kept):
        for i in range(3):
            log_.append_as_leader(batch([b"x"]), 0)
        log_.update_high_watermark(3)
    moved.delete_records_before(2)
    manager.checkpoint_log_start_offsets()
    assert checkpoints.read_offsets(str(tmp_path / files.LOG_START_OFFSET_CHECKPOINT)) == {
        ("m", 0): 2}
    manager.shutdown()


def test_checkpoint_writers_do_not_race(tmp_path):
    """The flush task and the checkpoint task both write recovery points through the same
    .tmp file: without Kafka's per-file lock the second rename failed and took the log dir
    offline."""
    import threading
    failures = []
    manager = LogManager([str(tmp_path)], LogConfig(segment_ms=10**12))
    manager.on_dir_failure = lambda log_dir, exc: failures.append(exc)
    manager.startup()
    for p in range(20):
        manager.get_or_create_log("t", p)

    def write():
        for _ in range(100):
            manager.checkpoint_recovery_points()
    threads = [threading.Thread(target=write) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert len(checkpoints.read_offsets(str(tmp_path / files.RECOVERY_POINT_CHECKPOINT))) == 20
    manager.shutdown()


def test_one_logs_io_error_does_not_stop_retention_of_the_others(tmp_path, monkeypatch):
    clock = Clock()
    config = LogConfig(segment_bytes=200, retention_bytes=300, file_delete_delay_ms=0,
                       segment_ms=10**12)
    failures = []
    manager = LogManager([str(tmp_path)], config, time_ms=clock)
    manager.on_dir_failure = lambda log_dir, exc: failures.append(log_dir)
    manager.startup()
    logs = [manager.get_or_create_log("r", p) for p in range(3)]
    for log_ in logs:
        for i in range(10):
            log_.append_as_leader(batch([b"y" * 80]), 0)
        log_.update_high_watermark(log_.log_end_offset)

    def broken(now_ms):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(logs[0], "delete_old_segments", broken)
    assert manager.run_retention() > 0
    assert failures == [str(tmp_path)]
    assert all(log_.log_start_offset > 0 for log_ in logs[1:])
    manager.shutdown()


def _delete_a_log_whose_start_moved(manager, clock):
    """t-0 with 60 records and its log start moved to 50 (DeleteRecords), checkpointed, then
    deleted."""
    old = manager.get_or_create_log("t", 0)
    for i in range(60):
        old.append_as_leader(batch([b"%d" % i]), 0)
    old.update_high_watermark(60)
    old.delete_records_before(50)
    manager.flush_dirty(clock.ms + 10**6)
    manager.checkpoint_log_start_offsets()
    assert manager.delete_log("t", 0)


def _crash(manager):
    """No clean shutdown, no checkpoints: the files closed, the dir locks gone with the
    process."""
    for l in manager.logs():
        l.close_files()
    manager.release_locks()


def _recreate_with_ten_records(manager):
    new = manager.get_or_create_log("t", 0)
    for i in range(10):
        new.append_as_leader(batch([b"new-%d" % i]), 0)
    new.flush()
