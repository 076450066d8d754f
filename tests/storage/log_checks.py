"""Helpers for the storage tests: batch building and a log integrity check that makes the
checks `kafka-dump-log.sh --index-sanity-check` makes (and a few more)."""
import os
import shutil

from storage import files
from storage.record_batch import RecordBatchBuilder, RecordBatchView


class NoSync(files.FileSystem):
    """For tests of logic, not of durability: fsync makes them slow and proves nothing there
    (no power cut is simulated: a process crash keeps the page cache), so the seam skips it."""

    def fsync(self, fd):
        pass

    def fsync_dir(self, directory):
        pass


def make_batch(base_offset, values, timestamp=1_700_000_000_000, epoch=0, key=b"k"):
    """A v2 batch with one record per value, offsets from `base_offset`, timestamps +1 each."""
    builder = RecordBatchBuilder(base_offset=base_offset, partition_leader_epoch=epoch)
    for i, value in enumerate(values):
        builder.append(timestamp + i, key, value)
    return builder.build()


def copy_fixture(src, dst):
    """Copy a read-only fixture folder and make the copy writable."""
    shutil.copytree(src, dst)
    for root, dirs, names in os.walk(dst):
        os.chmod(root, 0o755)
        for name in names:
            os.chmod(os.path.join(root, name), 0o644)
    return dst


def check_log(log_):
    """Assert every batch is CRC-valid, offsets are contiguous across the log, and both indexes
    agree with the log (Kafka's index sanity check).  Returns the list of batch views."""
    views = []
    expected = None
    for segment in log_.segments:
        positions = {}
        total = 0
        for info in segment.batches():
            data = segment.read_bytes(info.position, info.size)
            view = RecordBatchView(data, 0)
            assert view.is_valid(), f"batch at offset {info.base_offset} fails its CRC"
            if expected is not None:
                assert info.base_offset == expected, (
                    f"offset gap: batch at {info.base_offset}, expected {expected}")
            expected = info.last_offset + 1
            positions[info.position] = info
            total += info.size
            views.append(view)
        assert total == segment.size, segment
        length = os.path.getsize(segment.path)
        if segment is log_.segments[-1] and segment.preallocate_bytes and length > segment.size:
            # preallocate=true: the active segment's file runs on in zeros past its data.
            assert length == max(segment.preallocate_bytes, segment.size), segment
            with open(segment.path, "rb") as f:
                f.seek(segment.size)
                assert f.read(4096).count(0) == min(4096, length - segment.size)
        else:
            assert length == segment.size, segment
        check_indexes(segment, positions)
        assert segment.index_sanity_errors() == []
    assert expected is None or expected == log_.log_end_offset
    return views


def check_indexes(segment, positions):
    by_last_offset = {b.last_offset: b for b in positions.values()}
    index = segment.offset_index
    prev = None
    for i in range(index.entries):
        offset, position = index.entry(i)
        assert position in positions, f"index entry {i} points inside a batch ({position})"
        assert positions[position].last_offset == offset, f"index entry {i}: offset mismatch"
        if prev is not None:
            assert offset > prev[0] and position > prev[1], f"index entry {i} does not increase"
        prev = (offset, position)
    time_index = segment.time_index
    prev = None
    for i in range(time_index.entries):
        timestamp, offset = time_index.entry(i)
        batch = by_last_offset.get(offset)
        assert batch is not None, f"time index entry {i} names no batch's last offset"
        assert batch.max_timestamp == timestamp, f"time index entry {i}: timestamp mismatch"
        if prev is not None:
            assert timestamp > prev[0] and offset >= prev[1], f"time entry {i} decreases"
        prev = (timestamp, offset)
