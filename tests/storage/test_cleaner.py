"""The log cleaner (storage/cleaner.py, storage/log_cleaner.py) on real logs: a hypothesis model
of what survives cleaning (keys, tombstones and their delete horizon, transactions, partial
offset maps, segment groups), the rules one by one, a crash at every filesystem step of a swap
(a child process dies there), and the cleaner threads' choices and checkpoint."""
import errno
import os
import shutil
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import checkpoints, files, legacy
from storage.cleaner import Cleaner, OffsetMap
from storage.log import Log
from storage.log_cleaner import CleanerConfig, LogCleaner, cleanable_offsets
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.record_batch import (ControlRecordType, RecordBatchBuilder, RecordBatchView,
                                  build_control_batch, iter_batches)
from storage.compression import Codec

from tests.storage.log_checks import NoSync

NOW = 1_700_000_000_000
RETENTION = 1_000
CONFIG = LogConfig(segment_bytes=1500, segment_ms=10**12, cleanup_policy="compact",
                   delete_retention_ms=RETENTION, index_interval_bytes=200,
                   segment_index_bytes=4096, file_delete_delay_ms=0)


@pytest.fixture(autouse=True)
def no_fsync(monkeypatch):
    monkeypatch.setattr(files, "fs", NoSync())


def open_log(path, config=CONFIG, now=NOW):
    return Log(str(path), config, time_ms=lambda: now)


def batch(records, producer=None, seq=0, transactional=False, codec=Codec.NONE, ts=NOW):
    b = RecordBatchBuilder(compression=codec,
                           producer_id=producer if producer is not None else -1,
                           producer_epoch=0 if producer is not None else -1,
                           base_sequence=seq if producer is not None else -1,
                           is_transactional=transactional)
    for i, (key, value) in enumerate(records):
        b.append(ts + i, key, value)
    return b.build()


def marker(producer, commit):
    kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    return build_control_batch(kind, producer, 0, 0, NOW)


def data_records(log_):
    """(offset, key, value) of every data record, as a consumer reading from 0 sees them."""
    out = []
    for view in log_.read_batches():
        if not view.is_control:
            out.extend((r.offset, r.key, r.value) for r in view.records())
    return out


def clean(log_, now=NOW, memory=1 << 20, checkpoint=None):
    log_.update_high_watermark(log_.log_end_offset)
    first_dirty, first_uncleanable, _, _ = cleanable_offsets(log_, checkpoint, now)
    return Cleaner(dedupe_memory=memory).clean(log_, first_dirty, first_uncleanable, now)


def check_readable(log_, offsets):
    """A fetch at each offset returns the batch holding it (indexes agree after the swap)."""
    for offset in offsets:
        info = log_.read(offset, 1)
        region = info.records
        data = os.pread(region.file.fileno(), region.length, region.position)
        view = RecordBatchView(data, 0)
        assert view.base_offset <= offset <= view.last_offset


# -- the model ---------------------------------------------------------------------------------

class Model:
    """Records as the rules say they survive; batches keyed by base offset with their horizon."""

    def __init__(self):
        self.records = []          # [offset, key, value, batch base, txn (producer) or None]
        self.aborted = set()       # offsets of aborted transactional records
        self.horizon = {}          # batch base offset -> delete horizon
        self.open = {}             # producer -> offsets of its open transaction

    def appended(self, base, records, producer=None):
        for i, (key, value) in enumerate(records):
            self.records.append([base + i, key, value, base, producer])
            if producer is not None:
                self.open.setdefault(producer, []).append(base + i)

    def ended(self, producer, commit):
        offsets = self.open.pop(producer, [])
        if not commit:
            self.aborted.update(offsets)

    def cleaned(self, first_dirty, end, rewritten_batches, now):
        # Records past the map's latest offset are kept as they are (Kafka's pastLatestOffset):
        # with an empty dirty range the map is empty (latest offset -1) and no tombstone goes,
        # whatever its horizon.
        map_latest = end - 1 if end > first_dirty else -1
        latest = {}
        for offset, key, value, base, producer in self.records:
            if first_dirty <= offset < end and offset not in self.aborted:
                latest[key] = max(latest.get(key, -1), offset)
        kept = []
        for rec in self.records:
            offset, key, value, base, producer = rec
            if base in rewritten_batches and offset <= map_latest:
                if offset in self.aborted or offset < latest.get(key, -1):
                    continue
                horizon = self.horizon.get(base)
                if value is None and horizon is not None and now >= horizon:
                    continue
            elif base in rewritten_batches and offset in self.aborted:
                continue
            kept.append(rec)
        self.records = kept
        for offset, key, value, base, producer in kept:
            if base in rewritten_batches and value is None and base not in self.horizon:
                self.horizon[base] = now + RETENTION

    def visible(self):
        return [(o, k, v) for o, k, v, _, _ in self.records]


op = st.one_of(
    st.tuples(st.just("append"),
              st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", b"e"]),
                                 st.one_of(st.none(), st.binary(min_size=1, max_size=60))),
                       min_size=1, max_size=12),
              st.sampled_from([Codec.NONE, Codec.NONE, Codec.LZ4, Codec.GZIP])),
    st.tuples(st.just("txn"), st.sampled_from([7, 8]),
              st.lists(st.tuples(st.sampled_from([b"a", b"b", b"x"]), st.binary(max_size=20)),
                       min_size=1, max_size=4)),
    st.tuples(st.just("end"), st.sampled_from([7, 8]), st.booleans()),
    st.tuples(st.just("roll")),
    st.tuples(st.just("clean"), st.integers(0, 3 * RETENTION), st.sampled_from([1 << 20, 400])),
)


@settings(max_examples=int(os.environ.get("CLEANER_EXAMPLES", 60)), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=1, max_size=40))
def test_cleaning_keeps_what_the_model_keeps(tmp_path_factory, ops):
    path = tmp_path_factory.mktemp("model") / "t-0"
    now = [NOW]
    log_ = Log(str(path), CONFIG, time_ms=lambda: now[0])
    model = Model()
    checkpoint = None
    sequences = {}
    for step in ops:
        if step[0] == "append":
            info = log_.append_as_leader(batch(step[1], codec=step[2], ts=now[0]), 0)
            model.appended(info.first_offset, step[1])
        elif step[0] == "txn":
            producer, records = step[1], step[2]
            seq = sequences.get(producer, 0)
            sequences[producer] = seq + len(records)
            info = log_.append_as_leader(batch(records, producer, seq, True, ts=now[0]), 0)
            model.appended(info.first_offset, records, producer)
        elif step[0] == "end":
            if step[1] in model.open:
                log_.append_as_leader(marker(step[1], step[2]), 0, origin="coordinator")
                model.ended(step[1], step[2])
        elif step[0] == "roll":
            log_.roll()
        else:
            now[0] += step[1]
            log_.update_high_watermark(log_.log_end_offset)
            first_dirty, first_uncleanable, _, _ = cleanable_offsets(log_, checkpoint, now[0])
            rewritten_segments = [s for s in log_.segments[:-1]]
            bases = {s.base_offset: s for s in rewritten_segments}
            stats = Cleaner(dedupe_memory=step[2] * 10).clean(log_, first_dirty,
                                                             first_uncleanable, now[0])
            assert first_dirty <= stats.end_offset <= first_uncleanable
            rewritten = {b.base_offset for base, s in bases.items()
                         if base < stats.end_offset
                         for b in _batches_before(s)}
            model.cleaned(first_dirty, stats.end_offset, rewritten, now[0])
            checkpoint = stats.end_offset
            assert data_records(log_) == model.visible()
            check_readable(log_, [o for o, _, _ in model.visible()])
    assert data_records(log_) == model.visible()
    log_.close()
    reopened = open_log(path)
    assert data_records(reopened) == model.visible()
    reopened.close()


_SEEN = {}


def _batches_before(segment):
    """Base offsets of a segment's batches, read before the clean replaces it (cached by the
    segment object, which the swap keeps readable until its files go)."""
    if id(segment) not in _SEEN:
        _SEEN[id(segment)] = [b for b in segment.batches()]
    return _SEEN.pop(id(segment))


# -- the rules, one by one ---------------------------------------------------------------------

def test_untouched_batches_keep_their_bytes_and_offsets_stay(tmp_path):
    log_ = open_log(tmp_path / "t-0")
    kept = batch([(b"x", b"1"), (b"y", b"2")])
    log_.append_as_leader(kept, 0)
    log_.append_as_leader(batch([(b"a", b"old")]), 0)
    log_.append_as_leader(batch([(b"a", b"new")]), 0)
    log_.roll()
    log_.append_as_leader(batch([(b"z", b"active")]), 0)
    before = [bytes(v.raw()) for v in log_.read_batches()][0]
    clean(log_)
    assert data_records(log_) == [(0, b"x", b"1"), (1, b"y", b"2"), (3, b"a", b"new"),
                                  (4, b"z", b"active")]
    assert bytes(next(log_.read_batches()).raw()) == before
    assert log_.log_end_offset == 5


def test_tombstones_stay_until_their_horizon_then_go(tmp_path):
    log_ = open_log(tmp_path / "t-0")
    log_.append_as_leader(batch([(b"a", b"1"), (b"b", b"2")]), 0)
    log_.append_as_leader(batch([(b"a", None)]), 0)
    log_.roll()
    log_.append_as_leader(batch([(b"c", b"3")]), 0)
    clean(log_, now=NOW)
    assert data_records(log_) == [(1, b"b", b"2"), (2, b"a", None), (3, b"c", b"3")]
    tomb = [v for v in log_.read_batches() if v.base_offset == 2][0]
    assert tomb.has_delete_horizon and tomb.delete_horizon_ms == NOW + RETENTION
    assert [r.timestamp for r in tomb.records()] == [NOW]      # absolute timestamps kept
    clean(log_, now=NOW + RETENTION - 1)
    assert (2, b"a", None) in data_records(log_)
    clean(log_, now=NOW + RETENTION)
    assert data_records(log_) == [(1, b"b", b"2"), (3, b"c", b"3")]


def test_keyless_records_are_dropped_from_the_cleaned_range(tmp_path):
    log_ = open_log(tmp_path / "t-0")
    b = RecordBatchBuilder(base_offset=0)
    b.append(NOW, None, b"no key")
    b.append(NOW, b"k", b"v")
    log_.append_as_follower(b.build())             # a replica may hold what a leader refuses
    log_.roll()
    log_.append_as_leader(batch([(b"z", b"1")]), 0)
    stats = clean(log_)
    assert stats.invalid_messages == 1
    assert data_records(log_) == [(1, b"k", b"v"), (2, b"z", b"1")]


def test_the_last_batch_of_a_producer_stays_empty_and_its_sequence_survives(tmp_path):
    log_ = open_log(tmp_path / "t-0")
    log_.append_as_leader(batch([(b"a", b"1")], producer=5, seq=0), 0)
    log_.append_as_leader(batch([(b"a", b"2")], producer=6, seq=0), 0)
    log_.roll()
    log_.append_as_leader(batch([(b"b", b"x")]), 0)
    clean(log_)
    views = list(log_.read_batches())
    assert [(v.base_offset, v.records_count, v.producer_id) for v in views] == \
        [(0, 0, 5), (1, 1, 6), (2, 1, -1)]
    assert views[0].is_valid() and views[0].base_sequence == 0
    log_.close()
    log_ = open_log(tmp_path / "t-0")
    assert log_.producer_state.manager.last_entry(5).last_seq == 0
    info = log_.append_as_leader(batch([(b"a", b"3")], producer=5, seq=1), 0)   # in sequence
    assert info.first_offset == 3
    dup = log_.append_as_leader(batch([(b"a", b"3")], producer=5, seq=1), 0)    # a retry
    assert dup.first_offset == 3 and log_.log_end_offset == 4


def test_aborted_data_goes_then_its_marker_after_the_horizon(tmp_path):
    log_ = open_log(tmp_path / "t-0")
    log_.append_as_leader(batch([(b"a", b"aborted")], 7, 0, True), 0)     # 0
    log_.append_as_leader(marker(7, commit=False), 0, origin="coordinator")   # 1
    log_.append_as_leader(batch([(b"a", b"committed")], 8, 0, True), 0)   # 2
    log_.append_as_leader(marker(8, commit=True), 0, origin="coordinator")    # 3
    log_.append_as_leader(batch([(b"c", b"x")], 9, 0, False), 0)        # 4
    log_.roll()
    log_.append_as_leader(batch([(b"z", b"1")]), 0)
    clean(log_)
    assert data_records(log_) == [(2, b"a", b"committed"), (4, b"c", b"x"), (5, b"z", b"1")]
    markers = [v for v in log_.read_batches() if v.is_control]
    # Producer 7's data is gone, but its batch stays empty (its last); the abort marker stays
    # while a batch of the transaction is seen, with its .txnindex entry; the commit marker
    # stays (its transaction has data).
    assert [(v.base_offset, v.has_delete_horizon) for v in markers] == [(1, False), (3, False)]
    assert [(v.base_offset, v.records_count) for v in log_.read_batches()][0] == (0, 0)
    assert [t.first_offset for s in log_.segments for t in s.txn_index.entries()] == [0]
    log_.append_as_leader(batch([(b"q", b"1")], 7, 1, False), 0)   # 7 moves on
    log_.roll()
    clean(log_, now=NOW)                   # the empty aborted batch goes; the marker stays
    assert [v.base_offset for v in log_.read_batches()][:2] == [1, 2]
    clean(log_, now=NOW + 1)               # no batch of the transaction left: horizon stamped
    markers = {v.base_offset: v for v in log_.read_batches() if v.is_control}
    assert markers[1].has_delete_horizon and not markers[3].has_delete_horizon
    assert markers[1].delete_horizon_ms == NOW + 1 + RETENTION
    clean(log_, now=NOW + RETENTION)
    assert 1 in {v.base_offset for v in log_.read_batches()}
    clean(log_, now=NOW + 1 + RETENTION)
    markers = {v.base_offset: v for v in log_.read_batches() if v.is_control}
    assert sorted(markers) == [3]
    assert data_records(log_)[0] == (2, b"a", b"committed")


def test_a_full_offset_map_cleans_in_several_rounds(tmp_path):
    log_ = open_log(tmp_path / "t-0", LogConfig(**{**CONFIG.__dict__, "segment_bytes": 600}))
    expected = {}
    for i in range(60):
        key = b"k%d" % (i % 23)
        info = log_.append_as_leader(batch([(key, b"v%d" % i)]), 0)
        expected[key] = (info.first_offset, b"v%d" % i)
    log_.roll()
    checkpoint, rounds = None, 0
    while True:
        log_.update_high_watermark(log_.log_end_offset)
        first_dirty, first_uncleanable, _, _ = cleanable_offsets(log_, checkpoint, NOW)
        if first_dirty >= first_uncleanable:
            break
        # 12 keys of 2 bytes + overhead fill a map of this size
        stats = Cleaner(dedupe_memory=int(12 * 112 / 0.9)).clean(
            log_, first_dirty, first_uncleanable, NOW)
        assert first_dirty < stats.end_offset <= first_uncleanable
        checkpoint, rounds = stats.end_offset, rounds + 1
    assert rounds > 1
    assert sorted((o, k, v) for o, k, v in data_records(log_)) == \
        sorted((o, k, v) for k, (o, v) in expected.items())


def test_offset_map_refuses_a_size_that_holds_nothing():
    with pytest.raises(ValueError, match="log.cleaner.dedupe.buffer.size"):
        OffsetMap(64)


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path):
    config = LogConfig(**{**CONFIG.__dict__, "min_compaction_lag_ms": 10_000})
    log_ = open_log(tmp_path / "t-0", config)
    log_.append_as_leader(batch([(b"a", b"1")], ts=NOW - 20_000), 0)
    log_.roll()
    log_.append_as_leader(batch([(b"a", b"2")], ts=NOW - 5_000), 0)
    log_.roll()
    log_.append_as_leader(batch([(b"a", b"3")], ts=NOW), 0)
    log_.update_high_watermark(log_.log_end_offset)
    assert cleanable_offsets(log_, None, NOW)[:2] == (0, 1)
    assert cleanable_offsets(log_, None, NOW + 10_000)[:2] == (0, 2)


def test_max_compaction_lag_makes_a_log_due(tmp_path):
    config = LogConfig(**{**CONFIG.__dict__, "max_compaction_lag_ms": 60_000})
    log_ = open_log(tmp_path / "t-0", config)
    log_.append_as_leader(batch([(b"a", b"1")], ts=NOW - 120_000), 0)
    log_.roll()
    log_.update_high_watermark(log_.log_end_offset)
    assert cleanable_offsets(log_, None, NOW)[3] is True
    assert cleanable_offsets(log_, None, NOW - 90_000)[3] is False
    assert config.roll_ms == 60_000


@pytest.mark.parametrize("in_worker", [False, True])
def test_a_full_offset_map_keeps_the_aborted_transactions_of_the_rest_of_the_segment(
        tmp_path, in_worker):
    # The map holds 8 keys, so it stops at offset 8; the segment is still rewritten whole, and
    # the transaction aborted at 20-21 must stay aborted (data gone, .txnindex entry kept), as
    # Kafka collects aborted transactions over each segment's whole range.
    from storage.cleaner import apply_swaps, clean_in_worker, clean_request
    from storage.log_cleaner import cleanable_offsets
    log_ = open_log(tmp_path / "t-0", LogConfig(**{**CONFIG.__dict__, "segment_bytes": 100000}))
    for i in range(20):
        log_.append_as_leader(batch([(b"k%02d" % i, b"v")]), 0)             # 0..19
    log_.append_as_leader(batch([(b"a", b"aborted")], 7, 0, True), 0)       # 20
    log_.append_as_leader(marker(7, commit=False), 0, origin="coordinator")  # 21
    log_.append_as_leader(batch([(b"q", b"x")]), 0)                          # 22
    log_.roll()
    log_.append_as_leader(batch([(b"z", b"1")]), 0)
    log_.update_high_watermark(log_.log_end_offset)
    before = log_.collect_aborted_transactions(0, log_.log_end_offset)
    assert before == [(7, 20)]
    first_dirty, first_uncleanable, _, _ = cleanable_offsets(log_, None, NOW)
    memory = int(8 * 113 / 0.9)
    if in_worker:
        request = clean_request(log_, first_dirty, first_uncleanable, NOW)
        stats, swaps = clean_in_worker(request, memory, 0.9, 65536, float("inf"))
        apply_swaps(log_, request, swaps)
    else:
        stats = Cleaner(dedupe_memory=memory).clean(log_, first_dirty, first_uncleanable, NOW)
    assert stats.end_offset < 20
    assert log_.collect_aborted_transactions(0, log_.log_end_offset) == before
    assert (20, b"a", b"aborted") not in data_records(log_)
    assert [(v.base_offset, v.has_delete_horizon) for v in log_.read_batches()
            if v.is_control] == [(21, False)]


@pytest.mark.parametrize("pure_python", [False, True])
def test_delete_retention_ms_near_long_max_keeps_tombstones_for_ever(tmp_path, monkeypatch,
                                                                     pure_python):
    # now + delete.retention.ms overflows a long: Kafka's sum wraps negative, "no horizon",
    # so tombstones and markers stay unstamped; the clean failed and the partition was marked
    # uncleanable.
    from storage import cleaner as cleaner_module
    from storage import cleaner_records
    from storage.log_config import LONG_MAX
    if pure_python:
        monkeypatch.setattr(cleaner_module, "filter_records", cleaner_records.filter_records_py)
    log_ = open_log(tmp_path / "t-0", LogConfig(**{**CONFIG.__dict__,
                                                    "delete_retention_ms": LONG_MAX}))
    log_.append_as_leader(batch([(b"a", b"1"), (b"b", None)]), 0)
    log_.append_as_leader(batch([(b"a", b"2")], 7, 0, True), 0)
    log_.append_as_leader(marker(7, commit=False), 0, origin="coordinator")
    log_.roll()
    log_.append_as_leader(batch([(b"z", b"1")]), 0)
    clean(log_)
    clean(log_, now=NOW + 10**9)
    assert data_records(log_) == [(0, b"a", b"1"), (1, b"b", None), (4, b"z", b"1")]
    assert not [v for v in log_.read_batches() if v.has_delete_horizon]


def test_an_open_transaction_bounds_the_cleanable_range(tmp_path):
    log_ = open_log(tmp_path / "t-0")
    log_.append_as_leader(batch([(b"a", b"1")]), 0)
    log_.roll()
    log_.append_as_leader(batch([(b"a", b"2")], 7, 0, True), 0)           # open at 1
    log_.roll()
    log_.append_as_leader(batch([(b"a", b"3")]), 0)
    log_.roll()
    log_.update_high_watermark(log_.log_end_offset)
    assert cleanable_offsets(log_, None, NOW)[:2] == (0, 1)


# -- crash safety ------------------------------------------------------------------------------

class Counting(files.FileSystem):
    def __init__(self):
        self.calls = 0

    def rename(self, src, dst):
        self.calls += 1
        super().rename(src, dst)

    def remove(self, path):
        self.calls += 1
        super().remove(path)

    def fsync(self, fd):
        self.calls += 1
        super().fsync(fd)

    def fsync_dir(self, directory):
        self.calls += 1
        super().fsync_dir(directory)


def _dirty_log(path):
    log_ = open_log(path)
    for i in range(120):
        log_.append_as_leader(batch([(b"k%d" % (i % 9), b"value-%d" % i)]), 0)
    log_.append_as_leader(batch([(b"k1", None)]), 0)
    log_.roll()
    log_.append_as_leader(batch([(b"tail", b"t")]), 0)
    log_.update_high_watermark(log_.log_end_offset)
    log_.close()


def test_a_crash_at_any_step_of_a_clean_leaves_the_old_log_or_the_new(tmp_path, monkeypatch):
    base = tmp_path / "base" / "t-0"
    _dirty_log(base)
    old = data_records(open_log(base))
    reference = tmp_path / "reference" / "t-0"
    shutil.copytree(base, reference)
    counting = Counting()
    monkeypatch.setattr(files, "fs", counting)
    ref_log = open_log(reference)
    clean(ref_log)
    new = data_records(ref_log)
    steps = counting.calls
    assert new != old and steps > 6
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    outcomes = set()
    # make soak tries every step; make test the first and last few and some between.
    chosen = range(1, steps + 1)
    if os.environ.get("KBROKER_CLEAN_CRASH_STEPS") != "all":
        chosen = sorted({1, 2, 3, steps - 2, steps - 1, steps} | set(range(4, steps - 2, 4)))
    for n in chosen:
        crashed = tmp_path / f"crash-{n}" / "t-0"
        shutil.copytree(base, crashed)
        child = subprocess.run([sys.executable, "-m", "tests.storage.clean_crash_child",
                                str(crashed), str(n), str(NOW)], cwd=root, timeout=60,
                               capture_output=True, text=True)
        assert child.returncode == 9, child.stderr
        recovered = open_log(crashed)
        got = data_records(recovered)
        # Each group's swap is atomic; a crash between two groups leaves the first cleaned.
        offsets = [o for o, _, _ in got]
        assert offsets == sorted(set(offsets)), f"crash at step {n}: duplicated offsets"
        assert set(got) <= set(old) and set(new) <= set(got), f"crash at step {n}"
        outcomes.add("new" if got == new else "old" if got == old else "between")
        check_readable(recovered, [o for o, _, _ in got])
        leftovers = [n for n in os.listdir(crashed) if n.endswith((".cleaned", ".swap"))]
        assert leftovers == []
        clean(recovered)                           # a later clean finishes the job
        assert data_records(recovered) == new
        recovered.close()
    assert {"old", "new"} <= outcomes


def test_a_truncation_during_a_clean_refuses_the_swap(tmp_path):
    log_ = open_log(tmp_path / "t-0")
    for i in range(40):
        log_.append_as_leader(batch([(b"k%d" % (i % 3), b"v%d" % i)]), 0)
    log_.roll()
    log_.append_as_leader(batch([(b"z", b"1")]), 0)
    log_.update_high_watermark(log_.log_end_offset)
    before = data_records(log_)
    cleaner = Cleaner(dedupe_memory=1 << 20)
    original = log_.replace_segments

    def truncate_first(new, old, generation):
        log_.truncate_to(log_.log_end_offset - 1)
        return original(new, old, generation)
    log_.replace_segments = truncate_first
    from storage.errors import CleaningAborted
    with pytest.raises(CleaningAborted):
        cleaner.clean(log_, 0, log_.segments[-1].base_offset, NOW)
    assert data_records(log_) == before[:-1]
    assert not [n for n in os.listdir(log_.dir) if n.endswith(".cleaned")]


# -- the cleaner threads' choices --------------------------------------------------------------

def _manager(tmp_path, now):
    manager = LogManager([str(tmp_path / "logs")], CONFIG, time_ms=lambda: now[0])
    manager.startup(cluster_id="c", broker_id=0)
    return manager


def _fill(log_, overwrites, keys=3):
    for i in range(overwrites):
        log_.append_as_leader(batch([(b"k%d" % (i % keys), b"v%d" % i)]), 0)
    log_.roll()
    log_.append_as_leader(batch([(b"z", b"1")]), 0)
    log_.update_high_watermark(log_.log_end_offset)


class _FailingSwap(NoSync):
    """The disk fails when a cleaned segment is renamed into place."""

    def rename(self, src, dst):
        if src.endswith(files.CLEANED_SUFFIX) or dst.endswith(files.SWAP_SUFFIX):
            raise OSError(errno.EIO, "Input/output error", src)
        return super().rename(src, dst)


def test_a_disk_error_while_cleaning_takes_the_log_dir_offline(tmp_path, monkeypatch):
    # Kafka's cleanLog: an IOException goes to the LogDirFailureChannel; the partition is not
    # merely marked uncleanable while the broker goes on serving from the failing disk.
    now = [NOW]
    manager = _manager(tmp_path, now)
    failures = []
    manager.on_dir_failure = lambda log_dir, exc: failures.append((log_dir, exc.errno))
    _fill(manager.get_or_create_log("t", 0, CONFIG), 60)
    monkeypatch.setattr(files, "fs", _FailingSwap())
    cleaner = LogCleaner(manager, CleanerConfig(backoff_ms=10, worker_process=False))
    cleaner.run_once()
    assert failures == [(str(tmp_path / "logs"), errno.EIO)]
    assert cleaner.uncleanable_partitions() == set()
    monkeypatch.setattr(files, "fs", NoSync())
    manager.shutdown()


def test_a_worker_passes_a_disk_error_on_as_one(tmp_path, monkeypatch):
    # Other failures cross the process boundary as WorkerError text; a disk error stays an
    # OSError so the broker takes the dir offline.
    from storage import cleaner as cleaner_module
    log_ = open_log(tmp_path / "t-0")
    _fill(log_, 60)
    request = cleaner_module.clean_request(log_, 0, log_.segments[-1].base_offset, NOW)

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", "x.cleaned")
    monkeypatch.setattr(cleaner_module.Cleaner, "clean", full_disk)
    with pytest.raises(OSError) as info:
        cleaner_module.clean_in_worker(request, 1 << 20, 0.9, 65536, float("inf"))
    assert info.value.errno == errno.ENOSPC


def test_the_filthiest_log_goes_first_and_the_checkpoint_is_kafkas_file(tmp_path):
    now = [NOW]
    manager = _manager(tmp_path, now)
    dirty = manager.get_or_create_log("dirty", 0, CONFIG)
    _fill(dirty, 60)
    less = manager.get_or_create_log("less", 0, CONFIG)
    _fill(less, 30, keys=25)
    plain = manager.get_or_create_log("plain", 0, LogConfig(segment_ms=10**12))
    _fill(plain, 60)
    cleaner = LogCleaner(manager, CleanerConfig(backoff_ms=10))
    chosen = cleaner.grab_filthiest(now[0])
    assert chosen.key == ("dirty", 0)
    cleaner._in_progress.clear()
    assert cleaner.run_once() is True
    assert cleaner.run_once() is True                        # then "less"
    assert cleaner.run_once() is False                       # nothing above the ratio now
    path = tmp_path / "logs" / files.CLEANER_CHECKPOINT
    text = path.read_text().splitlines()
    assert text[:2] == ["0", "2"]
    assert checkpoints.read_offsets(str(path)) == {
        ("dirty", 0): dirty.segments[-1].base_offset, ("less", 0): less.segments[-1].base_offset}
    assert data_records(plain)[0][0] == 0                   # delete policy: never cleaned
    manager.shutdown()
    again = _manager(tmp_path, now)
    assert LogCleaner(again, CleanerConfig()).checkpoint_of("dirty", 0) == \
        checkpoints.read_offsets(str(path))[("dirty", 0)]
    again.shutdown()


def test_a_corrupt_segment_marks_only_its_log_uncleanable(tmp_path):
    now = [NOW]
    manager = _manager(tmp_path, now)
    bad = manager.get_or_create_log("bad", 0, CONFIG)
    _fill(bad, 60)
    good = manager.get_or_create_log("good", 0, CONFIG)
    _fill(good, 40)
    segment = bad.segments[0]
    with open(segment.path, "r+b") as fh:                   # flip a byte inside a record
        fh.seek(100)
        byte = fh.read(1)
        fh.seek(100)
        fh.write(bytes([byte[0] ^ 0xFF]))
    before = os.path.getsize(segment.path)
    cleaner = LogCleaner(manager, CleanerConfig(backoff_ms=10))
    cleaner.run_once()
    cleaner.run_once()
    assert cleaner.uncleanable_partitions() == {("bad", 0)}
    assert os.path.getsize(bad.segments[0].path) == before
    assert len(data_records(good)) == 4
    assert cleaner.run_once() is False
    manager.shutdown()


def test_truncation_lowers_the_checkpoint(tmp_path):
    now = [NOW]
    manager = _manager(tmp_path, now)
    log_ = manager.get_or_create_log("t", 0, CONFIG)
    _fill(log_, 60)
    cleaner = LogCleaner(manager, CleanerConfig(backoff_ms=10))
    assert cleaner.run_once()
    cleaned_to = cleaner.checkpoint_of("t", 0)
    log_.truncate_to(cleaned_to - 1)
    cleaner.grab_filthiest(now[0])
    assert cleaner.checkpoint_of("t", 0) == cleaned_to - 1
    manager.shutdown()


def _expired_compact_delete_log(manager, now):
    """A compact,delete log of 30 records in a rolled segment, with retention.ms=1000."""
    config = LogConfig(**{**CONFIG.__dict__, "cleanup_policy": "compact,delete",
                          "retention_ms": 1000})
    log_ = manager.get_or_create_log("cd", 0, config)
    for i in range(30):
        log_.append_as_leader(batch([(b"k%d" % (i % 3), b"v%d" % i)], ts=now[0]), 0)
    log_.roll()
    log_.update_high_watermark(log_.log_end_offset)
    return log_


def test_compacted_logs_get_retention_from_the_cleaner_threads(tmp_path):
    # Wall-clock time: an emptied cleaned segment's age is its file's modification time.
    now = [int(time.time() * 1000)]
    manager = _manager(tmp_path, now)
    log_ = _expired_compact_delete_log(manager, now)
    manager.start_cleaner(CleanerConfig(threads=0))
    now[0] += 10_000
    assert manager.run_retention() == 0                      # not the retention task's job
    manager.cleaner.run_once()
    assert log_.log_start_offset == log_.log_end_offset == 30
    manager.shutdown()


def test_without_the_cleaner_compacted_logs_keep_every_segment(tmp_path):
    # log.cleaner.enable=false: Kafka's cleanupLogs leaves compacted logs alone (they grow),
    # even compact,delete ones past their retention.
    now = [int(time.time() * 1000)]
    manager = _manager(tmp_path, now)
    log_ = _expired_compact_delete_log(manager, now)
    now[0] += 10_000
    assert manager.cleaner is None
    assert manager.run_retention() == 0
    assert log_.log_start_offset == 0
    manager.shutdown()


def test_an_emptied_marker_replays_and_goes_once_the_producer_moves_on(tmp_path):
    # A transaction the coordinator aborted with a bumped epoch: the marker is producer 7's
    # last entry, so cleaning keeps it, emptied, and every reader of the log must take that.
    log_ = open_log(tmp_path / "t-0")
    log_.append_as_leader(batch([(b"a", b"x")], 7, 0, True), 0)                       # 0
    bumped = build_control_batch(ControlRecordType.ABORT, 7, 1, 0, NOW)
    log_.append_as_leader(bumped, 0, origin="coordinator")                            # 1
    log_.roll()
    log_.append_as_leader(batch([(b"z", b"1")]), 0)
    clean(log_, now=NOW)                                  # the aborted data goes
    clean(log_, now=NOW + 1)                              # the marker gets its horizon
    clean(log_, now=NOW + 2 + RETENTION)                  # and is emptied (7's last entry)
    marker = [v for v in log_.read_batches() if v.is_control][0]
    assert (marker.base_offset, marker.records_count) == (1, 0)
    assert marker.control_record_type() is None
    # A replica copying this log, and a restart without snapshots, replay it.
    follower = open_log(tmp_path / "copy-0")
    for view in log_.read_batches():
        follower.append_as_follower(bytes(view.raw()))
    log_.close()
    for name in os.listdir(tmp_path / "t-0"):
        if name.endswith(".snapshot"):
            os.remove(tmp_path / "t-0" / name)
    log_ = open_log(tmp_path / "t-0")
    assert [v.base_offset for v in follower.read_batches()] == \
        [v.base_offset for v in log_.read_batches()]
    log_.append_as_leader(batch([(b"q", b"2")], 7, 0, False, ts=NOW), 0)   # 7 moves on
    log_.roll()
    clean(log_, now=NOW + 3 + RETENTION)
    assert not [v for v in log_.read_batches() if v.is_control]


def test_retention_waits_for_a_clean_begun_before_the_policy_changed(tmp_path):
    """Kafka's pauseCleaningForNonCompactedPartitions: cleanup.policy set to delete while the
    log is being cleaned; the broker's retention must not delete segments under the clean (it
    took the whole log dir offline), and gets its turn after."""
    now = [int(time.time() * 1000)]
    manager = _manager(tmp_path, now)
    log_ = manager.get_or_create_log("t", 0, CONFIG)
    _fill(log_, 60)
    manager.start_cleaner(CleanerConfig(threads=0, worker_process=False))
    cleaner = manager.cleaner
    chosen = cleaner.grab_filthiest(now[0])             # a clean begins
    assert chosen.key == ("t", 0)
    log_.config = LogConfig(**{**CONFIG.__dict__, "cleanup_policy": "delete",
                               "retention_ms": 1})
    now[0] += 10_000
    segments = list(log_.segments)
    assert manager.run_retention() == 0
    assert log_.segments == segments
    cleaner._clean(cleaner.new_cleaner(), chosen, now[0], "0")
    assert manager.run_retention() > 0                  # the clean is over
    assert cleaner.grab_filthiest(now[0]) is None       # a delete log: never cleaned
    manager.shutdown()


def test_a_paused_log_is_neither_cleaned_nor_given_retention_until_resumed(tmp_path):
    now = [NOW]
    manager = _manager(tmp_path, now)
    _fill(manager.get_or_create_log("t", 0, CONFIG), 60)
    cleaner = LogCleaner(manager, CleanerConfig(backoff_ms=10, worker_process=False))
    cleaner.pause("t", 0)
    cleaner.pause("t", 0)
    assert cleaner.grab_filthiest(now[0]) is None
    cleaner.resume("t", 0)
    assert cleaner.grab_filthiest(now[0]) is None       # paused twice, resumed once
    cleaner.resume("t", 0)
    assert cleaner.grab_filthiest(now[0]).key == ("t", 0)
    assert cleaner.try_pause("t", 0) is False           # being cleaned
    manager.shutdown()


def test_a_paused_log_gets_no_retention_from_either_side(tmp_path):
    """Kafka's paused cleaning (a log dir move): the cleaner threads give a paused compacted
    log no retention, and the broker's retention skips a paused delete log."""
    now = [int(time.time() * 1000)]
    manager = _manager(tmp_path, now)
    compacted = _expired_compact_delete_log(manager, now)
    plain = manager.get_or_create_log("plain", 0, LogConfig(segment_ms=10**12, retention_ms=1000))
    for i in range(30):
        plain.append_as_leader(batch([(None, b"v%d" % i)], ts=now[0]), 0)
    plain.roll()
    plain.update_high_watermark(plain.log_end_offset)
    manager.start_cleaner(CleanerConfig(threads=0, worker_process=False))
    cleaner = manager.cleaner
    cleaner.pause("cd", 0)
    cleaner.pause("plain", 0)
    now[0] += 10_000
    cleaner.run_once()
    assert manager.run_retention() == 0
    assert compacted.log_start_offset == 0 and plain.log_start_offset == 0
    cleaner.resume("cd", 0)
    cleaner.resume("plain", 0)
    cleaner.run_once()
    assert manager.run_retention() > 0
    assert compacted.log_start_offset == 30 and plain.log_start_offset == 30
    manager.shutdown()


def test_a_deleted_partitions_checkpoint_does_not_reach_a_topic_created_again(tmp_path):
    """Kafka's asyncDelete rewrites the cleaner checkpoint at once: an entry left by a
    partition deleted before a crash must not apply to a log created again under its name
    (its range below the old offset would count as clean, never compacted)."""
    now = [NOW]
    manager = _manager(tmp_path, now)
    log_ = manager.get_or_create_log("t", 0, CONFIG)
    _fill(log_, 60)
    manager.start_cleaner(CleanerConfig(threads=0, worker_process=False))
    assert manager.cleaner.run_once()
    path = tmp_path / "logs" / files.CLEANER_CHECKPOINT
    assert ("t", 0) in checkpoints.read_offsets(str(path))
    manager.delete_log("t", 0)
    manager.get_or_create_log("t", 0, CONFIG)            # created again: the file rewritten
    assert ("t", 0) not in checkpoints.read_offsets(str(path))
    manager.shutdown()
    # The state a crash right after a deletion leaves: the file still names the partition.
    checkpoints.write_offsets(str(path), {("t", 0): 300, ("gone", 0): 7})
    again = _manager(tmp_path, now)
    cleaner = LogCleaner(again, CleanerConfig(worker_process=False))
    assert cleaner.checkpoint_of("gone", 0) is None
    assert cleaner.checkpoint_of("t", 0) == 300          # still held by the dir
    again.shutdown()


def test_the_worker_throttle_carries_over_from_one_clean_to_the_next(tmp_path, monkeypatch):
    """Kafka's one throttler for the cleaner's life: a run of cleans each shorter than the
    check interval is held to the rate too (a new one per clean never reached a check)."""
    from storage import cleaner as cleaner_module
    used = []
    real_init = cleaner_module.Cleaner.__init__

    def init(self, *args, **kwargs):
        used.append(kwargs["throttler"])
        real_init(self, *args, **kwargs)
    monkeypatch.setattr(cleaner_module.Cleaner, "__init__", init)
    for name in ("a-0", "b-0", "c-0"):
        log_ = open_log(tmp_path / name)
        _fill(log_, 60)
        request = cleaner_module.clean_request(log_, 0, log_.segments[-1].base_offset, NOW)
        cleaner_module.clean_in_worker(request, 1 << 20, 0.9, 65536, 1000.0)
    cleaner_module.clean_in_worker(request, 1 << 20, 0.9, 65536, 2000.0)
    assert used[0] is used[1] is used[2]
    assert used[3] is not used[0] and used[3].rate == 2000.0       # the rate changed


# -- legacy (magic 0/1) entries, as in a data dir written by Kafka before 0.11 ------------------

def entries(log_):
    """Every batch or legacy entry of the log's segment files, in order."""
    out = []
    for segment in log_.segments:
        with open(segment.path, "rb") as f:
            out.extend(iter_batches(f.read()))
    return out


def legacy_records(log_):
    """(offset, key, value) of every message, legacy wrappers unpacked."""
    return [(r.offset, r.key, r.value) for view in entries(log_)
            if not getattr(view, "is_control", False) for r in view.records()]


def test_legacy_messages_are_compacted_as_kafka_filters_them(tmp_path):
    """Kafka's cleaner maps and filters magic 0/1 messages as any other: an older value of a
    key goes, a compressed wrapper losing some messages is written again with the rest (same
    magic and codec, magic 1 inner offsets relative), keyless messages go. They used to be
    copied as they were, so a key deleted later came back once its tombstone went."""
    log_ = open_log(tmp_path / "t-0")
    log_.append_as_follower(legacy.build_message_set(
        [(NOW, b"A", b"old"), (NOW, b"B", b"b")], magic=legacy.MAGIC_V1))
    log_.append_as_follower(legacy.build_message_set(
        [(NOW + 1, b"C", b"c1"), (NOW + 2, b"D", b"d"), (NOW + 3, b"C", b"c2"),
         (NOW + 4, None, b"keyless")], magic=legacy.MAGIC_V1, codec=Codec.GZIP, base_offset=2))
    log_.append_as_follower(legacy.build_message_set(
        [(-1, b"E", b"e"), (-1, b"F", b"f")], magic=legacy.MAGIC_V0, codec=Codec.LZ4,
        base_offset=6))
    log_.append_as_leader(batch([(b"A", None), (b"E", b"e2")]), 0)
    log_.roll()
    log_.append_as_leader(batch([(b"z", b"active")]), 0)
    stats = clean(log_)
    assert legacy_records(log_) == [(1, b"B", b"b"), (3, b"D", b"d"), (4, b"C", b"c2"),
                                    (7, b"F", b"f"), (8, b"A", None), (9, b"E", b"e2"),
                                    (10, b"z", b"active")]
    assert stats.invalid_messages == 1
    views = entries(log_)
    # the rebuilt wrappers: magic, codec, offset (the last kept) and CreateTime as Kafka's
    gzip, lz4 = views[1], views[2]
    assert (gzip.magic, gzip.compression, gzip.base_offset) == (1, Codec.GZIP, 4)
    assert [r.timestamp for r in gzip.records()] == [NOW + 2, NOW + 3]
    assert (lz4.magic, lz4.compression, lz4.base_offset) == (0, Codec.LZ4, 7)
    for offset in (1, 3, 4, 7, 8, 9):               # the index finds each after the swap
        region = log_.read(offset, 1).records
        data = os.pread(region.file.fileno(), region.length, region.position)
        assert offset in [r.offset for r in next(iter_batches(data)).records()]
    assert log_.log_end_offset == 11


def test_a_legacy_tombstone_goes_once_its_segment_is_older_than_the_legacy_horizon(tmp_path):
    """Legacy batches have no delete horizon: Kafka keeps a legacy tombstone while its segment
    was modified after the last clean segment's modification time minus delete.retention.ms
    (LogCleaner's legacyDeleteHorizonMs)."""
    def build(path, tombstone_age_s):
        log_ = open_log(path)
        log_.append_as_follower(legacy.build_message_set([(NOW, b"A", None)],
                                                         magic=legacy.MAGIC_V1))
        log_.roll()
        log_.append_as_leader(batch([(b"K", b"x" * 1420)]), 0)     # too big to share a group
        log_.roll()
        log_.append_as_leader(batch([(b"B", b"1")]), 0)
        log_.roll()
        log_.append_as_leader(batch([(b"z", b"active")]), 0)
        now = time.time()
        first, second = log_.segments[0], log_.segments[1]
        os.utime(first.path, (now - tombstone_age_s, now - tombstone_age_s))
        os.utime(second.path, (now, now))
        clean(log_, checkpoint=2)                   # the first two segments cleaned before
        return legacy_records(log_)
    assert build(tmp_path / "old-0", 3600)[0] == (1, b"K", b"x" * 1420)
    assert build(tmp_path / "new-0", 0)[0] == (0, b"A", None)
