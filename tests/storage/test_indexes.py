"""Offset and time index files: layout, lookup, truncation, trimming, reopening, sanity."""
import os
import struct

import pytest

from storage.errors import CorruptIndex
from storage.offset_index import OffsetIndex
from storage.time_index import TimeIndex


def test_offset_index_is_preallocated_and_trimmed_to_kafka_layout(tmp_path):
    path = str(tmp_path / "00000000000000000100.index")
    index = OffsetIndex(path, 100, max_index_size=1003)
    assert os.path.getsize(path) == 1000            # rounded down to whole 8-byte entries
    assert index.max_entries == 125
    index.append(105, 0)
    index.append(110, 4200)
    index.close()
    with open(path, "rb") as fh:
        data = fh.read()
    assert data == struct.pack(">ii", 5, 0) + struct.pack(">ii", 10, 4200)


def test_offset_index_lookup_returns_largest_entry_not_above_target(tmp_path):
    index = OffsetIndex(str(tmp_path / "a.index"), 1000, max_index_size=4096)
    for i in range(1, 50):
        index.append(1000 + i * 10, i * 100)
    assert index.lookup(999) == (1000, 0)
    assert index.lookup(1005) == (1000, 0)
    assert index.lookup(1010) == (1010, 100)
    assert index.lookup(1019) == (1010, 100)
    assert index.lookup(1490) == (1490, 4900)
    assert index.lookup(10**9) == (1490, 4900)
    with pytest.raises(ValueError):
        index.append(1490, 5000)


def test_offset_index_truncate_and_reopen(tmp_path):
    path = str(tmp_path / "a.index")
    index = OffsetIndex(path, 0, max_index_size=800)
    for i in range(10):
        index.append(i * 3 + 2, i * 50)
    index.truncate_to(15)                          # drops entries with offset >= 15
    assert index.entries == 5 and index.last_offset == 14
    index.close()
    reopened = OffsetIndex(path, 0, max_index_size=800)
    assert reopened.entries == 5 and reopened.lookup(100) == (14, 200)
    reopened.sanity_check(log_size=1000)
    reopened.resize(800)                           # active again: room to grow
    assert reopened.max_entries == 100 and reopened.entries == 5
    reopened.append(20, 300)
    assert reopened.lookup(21) == (20, 300)


def test_zero_filled_tail_after_a_crash_fails_the_sanity_check(tmp_path):
    path = str(tmp_path / "a.index")
    index = OffsetIndex(path, 0, max_index_size=800)
    index.append(10, 100)
    index.append(20, 200)
    index.flush()
    index.close(trim=False)                        # what a crash leaves: the preallocated file
    reopened = OffsetIndex(path, 0, max_index_size=800)
    with pytest.raises(CorruptIndex):
        reopened.sanity_check(log_size=10_000)


def test_time_index_appends_only_larger_timestamps(tmp_path):
    path = str(tmp_path / "a.timeindex")
    index = TimeIndex(path, 50, max_index_size=120)
    assert index.max_entries == 10
    index.maybe_append(-1, 52)                     # no timestamp: never an entry (Kafka)
    assert index.entries == 0
    index.maybe_append(1000, 55)
    index.maybe_append(1000, 60)                   # not larger: skipped
    index.maybe_append(999, 61)                    # smaller: skipped
    index.maybe_append(2000, 70)
    assert index.entries == 2
    assert index.lookup(500) == (-1, 50)
    assert index.lookup(1500) == (1000, 55)
    assert index.lookup(2000) == (2000, 70)
    index.truncate_to(70)
    assert index.last_entry == (1000, 55)
    index.close()
    with open(path, "rb") as fh:
        assert fh.read() == struct.pack(">qi", 1000, 5)


def test_time_index_keeps_a_slot_for_the_roll_entry(tmp_path):
    index = TimeIndex(str(tmp_path / "a.timeindex"), 0, max_index_size=36)
    index.maybe_append(1, 1)
    index.maybe_append(2, 2)
    assert index.is_full()                         # 2 of 3: the last slot is for the roll
    with pytest.raises(OverflowError):
        index.maybe_append(3, 3)
    index.maybe_append(3, 3, skip_full_check=True)
    assert index.entries == 3
    index.sanity_check()


def test_segment_index_sanity_check_reports_a_wrong_entry(tmp_path):
    from storage.log import Log
    from storage.log_config import LogConfig
    from tests.storage.log_checks import make_batch
    log_ = Log(str(tmp_path / "t-0"), LogConfig(index_interval_bytes=0, segment_ms=10**12))
    for base in range(0, 30, 3):
        log_.append_as_follower(make_batch(base, [b"a", b"b", b"c"]))
    segment = log_.active_segment
    assert segment.offset_index.entries == 9 and segment.index_sanity_errors() == []
    struct.pack_into(">ii", segment.offset_index._mm, 8, 5, 100)    # a torn/wrong entry
    errors = segment.index_sanity_errors()
    assert errors and all("entry 1 " in e for e in errors)


_FILL_THEN_INDEX = """
import errno, os, sys
from storage.offset_index import OffsetIndex
from storage.time_index import TimeIndex
disk = sys.argv[1]
indexes = [OffsetIndex(os.path.join(disk, "0.index"), 0, max_index_size=10 * 1024 * 1024),
           TimeIndex(os.path.join(disk, "0.timeindex"), 0, max_index_size=10 * 1024 * 1024)]
with open(os.path.join(disk, "filler"), "wb") as fh:   # the disk fills up
    try:
        while True:
            fh.write(b"x" * 65536)
            fh.flush()
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
for index in indexes:
    try:
        for i in range(200_000):
            if isinstance(index, OffsetIndex):
                index.append(i * 10, i * 4096)
            else:
                index.maybe_append(1_700_000_000_000 + i, i * 10)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
        print("ENOSPC", type(index).__name__, index.entries)
"""


def test_an_index_on_a_full_disk_fails_with_enospc_not_sigbus(small_tmpfs):
    """The preallocated index is sparse; storing into a page the disk cannot back used to kill
    the process (SIGBUS). Its blocks are reserved ahead now, so the append raises ENOSPC,
    which the broker handles as a failed log dir. Needs root (a small tmpfs)."""
    import subprocess
    import sys
    disk = small_tmpfs("256k")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", _FILL_THEN_INDEX, str(disk)], cwd=root,
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=root))
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    assert done.stdout.split("\n")[:2] == ["ENOSPC OffsetIndex 0", "ENOSPC TimeIndex 0"]


def test_a_recovered_index_reserves_its_blocks_again(tmp_path):
    """After a crash the active index still has its preallocated (sparse) length, which its
    entry count includes: nothing of it may be taken as reserved, or the rebuild would store
    into unbacked pages again."""
    path = str(tmp_path / "0.index")
    index = OffsetIndex(path, 0, max_index_size=1024 * 1024)
    for i in range(3):
        index.append(i, i * 100)
    index.close(trim=False)                      # as a kill -9 leaves it
    reopened = OffsetIndex(path, 0, max_index_size=1024 * 1024)
    assert reopened.entries == 1024 * 1024 // 8 and reopened._reserved == 0
    reopened.reset()
    reopened.append(0, 0)
    assert 0 < reopened._reserved <= 64 * 1024
    assert os.stat(path).st_blocks * 512 < 512 * 1024      # still sparse beyond
