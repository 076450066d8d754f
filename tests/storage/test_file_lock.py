"""The log dir lock (storage/file_lock.py) and the LogManager's use of it."""
import os
import subprocess
import sys
import textwrap

import pytest

from storage.file_lock import DirLockedError, FileLock, lock_dir
from storage.log_config import LogConfig
from storage.log_manager import LogManager

from tests.storage.log_checks import make_batch


def test_a_second_lock_in_the_same_process_is_refused(tmp_path):
    first = lock_dir(str(tmp_path))
    with pytest.raises(DirLockedError, match=r"Failed to acquire lock on file \.lock in "
                                             + str(tmp_path) + r"\. A Kafka instance"):
        lock_dir(str(tmp_path))
    first.release()
    lock_dir(str(tmp_path)).release()
    assert (tmp_path / ".lock").exists()          # Kafka leaves the file behind too


def _hold_posix_lock(path):
    """A child process holding a POSIX record lock on `path`, as Java's FileChannel.tryLock
    (Apache Kafka's FileLock) takes it on Linux; it prints 'locked' (or 'busy') and waits."""
    code = textwrap.dedent(f"""
        import fcntl, sys
        f = open({str(path)!r}, "a+")
        try:
            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            print("busy", flush=True)
            sys.exit(0)
        print("locked", flush=True)
        sys.stdin.read()
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    return child, child.stdout.readline().strip()


def test_the_lock_excludes_apache_kafkas_lock_both_ways(tmp_path):
    lock_path = tmp_path / ".lock"
    child, state = _hold_posix_lock(lock_path)
    try:
        assert state == "locked"
        with pytest.raises(DirLockedError):
            lock_dir(str(tmp_path))
    finally:
        child.stdin.close()
        child.wait(10)
    ours = lock_dir(str(tmp_path))
    try:
        child, state = _hold_posix_lock(lock_path)
        child.wait(10)
        assert state == "busy"
    finally:
        ours.release()


def test_release_is_idempotent(tmp_path):
    lock = FileLock(str(tmp_path / ".lock"))
    assert lock.try_lock()
    lock.release()
    lock.release()
    assert not lock.locked


def _write_segment(manager):
    log_ = manager.get_or_create_log("t", 0)
    log_.append_as_leader(make_batch(0, [b"v%d" % i for i in range(10)]), leader_epoch=0)
    return log_


def _snapshot(log_dir):
    out = {}
    for root, _, names in os.walk(log_dir):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, log_dir)] = f.read()
    return out


def test_a_second_log_manager_stops_before_touching_the_dirs(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    first = LogManager(dirs, LogConfig(segment_bytes=1 << 20, preallocate=True))
    first.startup(cluster_id="c1", broker_id=0)
    _write_segment(first)
    before = {d: _snapshot(d) for d in dirs}

    second = LogManager(dirs, LogConfig())
    with pytest.raises(DirLockedError):
        second.startup(cluster_id="c1", broker_id=0)
    second.shutdown()                           # what a failed start runs on its way out
    assert {d: _snapshot(d) for d in dirs} == before
    assert first.get_log("t", 0).read(0, 1 << 20) is not None

    first.shutdown()
    assert os.path.exists(os.path.join(dirs[0], ".kafka_cleanshutdown"))
    third = LogManager(dirs, LogConfig())       # the locks went with the shutdown
    third.startup(cluster_id="c1", broker_id=0)
    assert third.get_log("t", 0).log_end_offset == 10
    third.shutdown()


def test_locking_is_all_or_nothing(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    held = lock_dir(os.makedirs(b) or b)
    with pytest.raises(DirLockedError):
        LogManager([a, b], LogConfig()).lock_log_dirs()
    lock_dir(a).release()                       # the lock on a was given back
    held.release()


def test_a_failed_shutdown_still_releases_the_locks(tmp_path, monkeypatch):
    """A shutdown step that fails (here: the fsync of a checkpoint) leaves no clean-shutdown
    marker, but the next broker in this process can take the dir."""
    from storage import files

    class FailingFsync(files.FileSystem):
        def fsync(self, fd):
            raise OSError(5, "injected fsync failure")
    manager = LogManager([str(tmp_path)], LogConfig())
    manager.startup(cluster_id="c", broker_id=0)
    _write_segment(manager)
    monkeypatch.setattr(files, "fs", FailingFsync())
    with pytest.raises(OSError):
        manager.shutdown()
    monkeypatch.undo()
    assert not (tmp_path / ".kafka_cleanshutdown").exists()
    lock_dir(str(tmp_path)).release()


def test_a_dir_named_twice_is_refused(tmp_path):
    from storage.log_manager import InvalidMetaProperties
    with pytest.raises(InvalidMetaProperties, match="Duplicate log directory found"):
        LogManager([str(tmp_path), str(tmp_path) + "/"], LogConfig()).lock_log_dirs()
