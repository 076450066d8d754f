"""The vectorized record decoder against storage's record-by-record reader (no Spark needed)."""
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_jobs.columnar import CorruptBatchError, decode_chunk, record_starts
from storage.compression import Codec
from storage.record_batch import RecordBatchBuilder, RecordBatchView

blobs = st.one_of(st.none(), st.binary(max_size=300))
records = st.lists(st.tuples(st.integers(-10 ** 6, 10 ** 9), blobs, blobs,
                             st.lists(st.tuples(st.text(max_size=5), blobs), max_size=3)),
                   min_size=1, max_size=200)


def build(recs, codec=Codec.NONE, base_offset=0):
    b = RecordBatchBuilder(compression=codec, base_offset=base_offset)
    for ts, k, v, h in recs:
        b.append(1_600_000_000_000 + ts, k, v, h)
    return b.build()


def decode_batches(raw_batches):
    """Decodes several batches as one chunk, as SplitReader does."""
    datas, starts, base_offsets, base_ts, counts, position = [], [], [], [], [], 0
    for raw in raw_batches:
        view = RecordBatchView(raw, 0)
        data = view.records_data()
        starts.append(record_starts(data, view.records_count) + position)
        position += len(data)
        datas.append(data)
        counts.append(view.records_count)
        base_offsets.append(view.base_offset)
        base_ts.append(view.base_timestamp)
    rep = lambda v: np.repeat(np.array(v, np.int64), counts)  # noqa: E731
    return decode_chunk(b"".join(datas), np.concatenate(starts), rep(base_offsets), rep(base_ts),
                        rep([-1] * len(counts)), True)


def expected(raw_batches):
    out = []
    for raw in raw_batches:
        for r in RecordBatchView(raw, 0).records():
            out.append((r.offset, r.timestamp, r.key and bytes(r.key), r.value and bytes(r.value),
                        [(k, v and bytes(v)) for k, v in r.headers]))
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(records, min_size=1, max_size=3), st.sampled_from(list(Codec)))
def test_matches_storage_reader(batches, codec):
    raws, base = [], 0
    for recs in batches:
        raws.append(build(recs, codec, base))
        base += len(recs) + 5
    keys, values, offsets, timestamps, headers = decode_batches(raws)
    got = list(zip(offsets.tolist(), timestamps.tolist(), keys.to_pylist(), values.to_pylist(), headers))
    assert got == [tuple(e) for e in expected(raws)]


def test_fixed_size_runs_take_the_vectorized_path_and_stay_exact():
    # 5,000 records: sizes change where the offset delta and timestamp delta varints grow.
    recs = [(i * 3, b"key%04d" % (i % 1000), bytes([i % 251]) * 100, []) for i in range(5000)]
    raw = build(recs)
    keys, values, offsets, timestamps, _ = decode_batches([raw])
    assert offsets.tolist() == list(range(5000))
    assert keys.to_pylist() == [r[1] for r in recs] and values.to_pylist() == [r[2] for r in recs]


def test_truncated_records_raise():
    data = RecordBatchView(build([(0, b"k", b"v" * 50, [])] * 3), 0).records_data()
    with pytest.raises(CorruptBatchError):
        record_starts(data[:-1], 3)
    with pytest.raises(CorruptBatchError):
        record_starts(data, 4)


def test_split_of_a_segment_deleted_after_planning_is_read_under_its_deleted_name(tmp_path):
    from spark_jobs import layout
    from spark_jobs.decoder import SplitReader
    from spark_jobs.sample_data import LogDirWriter
    w = LogDirWriter(str(tmp_path))
    w.append("t", 0, [(1000 + i, b"k", b"v%d" % i, []) for i in range(5)])
    w.close()
    log, = layout.discover([str(tmp_path)])
    split, = layout.plan_splits(log, 0, log.committed_end, 1 << 20)
    os.rename(split.log_path, split.log_path + ".deleted")         # what retention does first
    batch, = SplitReader(split, 0, log.committed_end)
    assert batch.column("value").to_pylist() == [b"v%d" % i for i in range(5)]
