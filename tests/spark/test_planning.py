"""Planning and split reading without Spark: read_committed without `.txnindex` (this broker's storage
does not write one), and splits that keep reading the planned file while a segment is rewritten."""
import os
import shutil

import pytest

from spark_jobs import layout
from spark_jobs.decoder import SegmentChangedError, SplitReader
from spark_jobs.sample_data import LogDirWriter

from .conftest import write_sample


def _offsets(split, start=0, end=1 << 62, aborted=None):
    return [o for batch in SplitReader(split, start, end, aborted=aborted)
            for o in batch.column("offset").to_pylist()]


def test_read_committed_scans_control_batches_when_txnindex_is_absent(tmp_path):
    _, rows = write_sample(tmp_path / "with")
    shutil.copytree(tmp_path / "with", tmp_path / "without")
    removed = 0
    for name in os.listdir(tmp_path / "without" / "txn-0"):
        if name.endswith(layout.TXN_INDEX_SUFFIX):
            os.remove(tmp_path / "without" / "txn-0" / name)
            removed += 1
    assert removed                                      # the sample wrote one; the scan must not need it
    with_index, = layout.discover([str(tmp_path / "with")], lambda t: t == "txn")
    without, = layout.discover([str(tmp_path / "without")], lambda t: t == "txn")
    state = layout.scan_transactions(without)
    assert state == layout.scan_transactions(with_index)
    txn = [r for r in rows if r["topic"] == "txn"]
    assert {a.producer_id for a in state.aborted} == {8}
    assert state.last_stable_offset == min(r["offset"] for r in txn if r["open"])
    got = [o for split in layout.plan_splits(without, 0, state.last_stable_offset, 1 << 30)
           for o in _offsets(split, 0, state.last_stable_offset, state.aborted)]
    assert got == [r["offset"] for r in txn if not r["aborted"] and r["offset"] < state.last_stable_offset]


def test_split_reads_the_planned_file_while_a_segment_is_rewritten(tmp_path):
    w = LogDirWriter(str(tmp_path))
    for i in range(6):
        w.append("t", 0, [(1000 + i, b"k", b"v%d" % i, [])])
    w.close()
    log, = layout.discover([str(tmp_path)])
    split, = layout.plan_splits(log, 0, log.committed_end, 1 << 20)
    path = split.log_path
    # What Kafka's cleaner does: the old segment becomes `.deleted`, the cleaned one takes its name.
    os.rename(path, path + ".deleted")
    with open(path + ".deleted", "rb") as old, open(path, "wb") as new:
        new.write(old.read()[: split.end_position // 2])
    assert _offsets(split) == list(range(6))            # still the planned (old) file
    os.remove(path + ".deleted")
    with pytest.raises(SegmentChangedError, match="run the query again"):
        _offsets(split)
    os.remove(path)
    with pytest.raises(SegmentChangedError):
        _offsets(split)
