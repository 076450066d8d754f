"""The partition side of transactions in the log: last stable offset, the `.txnindex` of aborted
transactions (written on append, searched for a fetch, truncated, rebuilt by recovery), and a
hypothesis model of both against interleaved transactions of several producers."""
import os
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from storage import files
from storage.log import Log
from storage.log_config import LogConfig
from storage.record_batch import ControlRecordType, RecordBatchBuilder, build_control_batch
from storage.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex

NOW = 1_700_000_000_000


def open_log(path, **config):
    config.setdefault("segment_ms", 10**12)
    return Log(str(path), LogConfig(**config), time_ms=lambda: NOW)


class Producer:
    def __init__(self, pid, epoch=0):
        self.pid, self.epoch, self.seq = pid, epoch, 0

    def batch(self, n=1, transactional=True):
        b = RecordBatchBuilder(producer_id=self.pid, producer_epoch=self.epoch,
                               base_sequence=self.seq, is_transactional=transactional)
        for i in range(n):
            b.append(NOW, b"k", b"v%d" % (self.seq + i))
        self.seq += n
        return b.build()

    def marker(self, commit, coordinator_epoch=0):
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        return build_control_batch(kind, self.pid, self.epoch, coordinator_epoch, NOW)


def send(log_, producer, n=1, epoch=0):
    return log_.append_as_leader(producer.batch(n), epoch)


def end(log_, producer, commit, epoch=0):
    return log_.append_as_leader(producer.marker(commit), epoch, origin="coordinator")


def all_aborted(log_):
    return [t for s in log_.segments for t in s.txn_index.entries()]


def test_last_stable_offset_waits_for_open_transactions_and_the_high_watermark(tmp_path):
    log_ = open_log(tmp_path / "t-0")
    a, b = Producer(1), Producer(2)
    send(log_, a, 2)                           # 0-1, a opens at 0
    send(log_, b, 1)                           # 2, b opens at 2
    log_.update_high_watermark(3)
    assert log_.last_stable_offset == 0
    end(log_, a, commit=True)                  # marker 3
    assert log_.last_stable_offset == 0        # marker not replicated yet
    log_.update_high_watermark(4)
    assert log_.last_stable_offset == 2        # b is still open
    end(log_, b, commit=False)                 # marker 4
    log_.update_high_watermark(5)
    assert log_.last_stable_offset == 5
    assert all_aborted(log_) == [AbortedTxn(2, 2, 4, 5)]


def test_abort_entry_records_the_oldest_other_open_transaction(tmp_path):
    log_ = open_log(tmp_path / "t-0")
    a, b = Producer(1), Producer(2)
    send(log_, a)                              # 0
    send(log_, b)                              # 1
    end(log_, b, commit=False)                 # 2: a still open from 0
    assert all_aborted(log_) == [AbortedTxn(2, 1, 2, 0)]
    log_.update_high_watermark(3)
    # A fetch from 0 to the LSO (0) returns nothing; from 1 on, b's abort concerns the range.
    assert log_.collect_aborted_transactions(1, 3) == [(2, 1)]
    assert log_.collect_aborted_transactions(3, 4) == []


def test_txnindex_file_is_kafkas_format_and_only_exists_with_aborts(tmp_path):
    log_ = open_log(tmp_path / "t-0")
    a = Producer(7)
    send(log_, a, 3)
    end(log_, a, commit=True)
    path = files.segment_path(log_.dir, 0, files.TXN_INDEX_SUFFIX)
    assert not os.path.exists(path)
    send(log_, a, 2)                           # 4-5
    end(log_, a, commit=False)                 # 6
    raw = open(path, "rb").read()
    assert len(raw) == ENTRY_SIZE
    assert struct.unpack(">hqqqq", raw) == (0, 7, 4, 6, 7)


def test_entries_go_to_the_segment_of_the_marker_and_the_search_crosses_segments(tmp_path):
    log_ = open_log(tmp_path / "t-0", segment_bytes=400)
    a, b = Producer(1), Producer(2)
    send(log_, a)                                          # a opens at 0
    for _ in range(6):
        send(log_, b, 1)
        end(log_, b, commit=False)
    end(log_, a, commit=False)
    assert len(log_.segments) > 2
    log_.update_high_watermark(log_.log_end_offset)
    by_segment = {s.base_offset: s.txn_index.entries() for s in log_.segments}
    for base, entries in by_segment.items():
        assert all(base <= t.last_offset for t in entries)
    everything = log_.collect_aborted_transactions(0, log_.log_end_offset)
    assert (1, 0) in everything and len(everything) == 7
    # b's aborts each leave the stable offset at a's open transaction (0): a fetch of the
    # first offsets must look past them to the segment holding a's abort.
    assert (1, 0) in log_.collect_aborted_transactions(0, 1)


def test_truncation_drops_entries_and_reopens_the_transaction(tmp_path):
    log_ = open_log(tmp_path / "t-0")
    a = Producer(1)
    send(log_, a, 2)                           # 0-1
    end(log_, a, commit=False)                 # 2
    log_.update_high_watermark(2)
    assert log_.truncate_to(2)
    assert all_aborted(log_) == []
    assert log_.last_stable_offset == 0        # open again: its marker is gone
    end(log_, a, commit=False)                 # written again by the coordinator
    log_.update_high_watermark(3)
    assert all_aborted(log_) == [AbortedTxn(1, 0, 2, 3)]
    assert log_.last_stable_offset == 3


def test_restart_keeps_open_transactions_and_the_index(tmp_path):
    log_ = open_log(tmp_path / "t-0")
    a, b = Producer(1), Producer(2)
    send(log_, a, 2)
    send(log_, b)
    end(log_, b, commit=False)
    log_.update_high_watermark(4)
    log_.close()
    again = open_log(tmp_path / "t-0")
    again.update_high_watermark(4)
    assert again.last_stable_offset == 0
    assert all_aborted(again) == [AbortedTxn(2, 2, 3, 0)]
    end(again, a, commit=True)
    again.update_high_watermark(5)
    assert again.last_stable_offset == 5


def test_recovery_rebuilds_a_lost_txnindex(tmp_path):
    log_ = open_log(tmp_path / "t-0", segment_bytes=300)
    a, b = Producer(1), Producer(2)
    for i in range(5):
        send(log_, a)
        end(log_, a, commit=i % 2 == 0)
        send(log_, b)
        end(log_, b, commit=False)
    expected = all_aborted(log_)
    assert len(expected) == 7
    log_.close_files()                         # no clean-shutdown marker: a crash
    for name in os.listdir(log_.dir):
        if name.endswith(files.TXN_INDEX_SUFFIX) or name.endswith(files.SNAPSHOT_SUFFIX):
            os.remove(os.path.join(log_.dir, name))
    again = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=300, segment_ms=10**12),
                time_ms=lambda: NOW, recovery_point=0, had_clean_shutdown=False)
    assert all_aborted(again) == expected


def test_torn_txnindex_entry_is_ignored(tmp_path):
    path = str(tmp_path / "00000000000000000000.txnindex")
    index = TransactionIndex(path, 0)
    index.append(AbortedTxn(1, 0, 5, 6))
    index.close()
    with open(path, "ab") as fh:
        fh.write(b"\0" * 10)
    again = TransactionIndex(path, 0)
    assert again.entries() == [AbortedTxn(1, 0, 5, 6)]
    again.append(AbortedTxn(1, 7, 9, 10))
    assert again.entries() == [AbortedTxn(1, 0, 5, 6), AbortedTxn(1, 7, 9, 10)]


# -- model ---------------------------------------------------------------------------------------

step = st.one_of(
    st.tuples(st.just("send"), st.integers(0, 2), st.integers(1, 3)),
    st.tuples(st.just("end"), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("hw"), st.integers(0, 2), st.just(0)),
)


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(step, max_size=25), segment_bytes=st.sampled_from([250, 600, 10**6]))
def test_model_of_lso_and_aborted_transactions(tmp_path_factory, steps, segment_bytes):
    """Against a model that remembers each transaction's offsets: the LSO is the high
    watermark or the first offset of the oldest transaction not finished below it, and a fetch
    of any range learns exactly the aborted transactions that overlap it."""
    log_ = open_log(tmp_path_factory.mktemp("m") / "t-0", segment_bytes=segment_bytes)
    producers = [Producer(10 + i) for i in range(3)]
    open_at = {}                       # pid -> first offset
    txns = []                          # (pid, first, marker, aborted)
    for kind, who, arg in steps:
        p = producers[who]
        if kind == "send":
            info = send(log_, p, arg)
            open_at.setdefault(p.pid, info.first_offset)
        elif kind == "end" and p.pid in open_at:
            info = end(log_, p, arg)
            txns.append((p.pid, open_at.pop(p.pid), info.first_offset, not arg))
        else:
            log_.update_high_watermark(log_.log_end_offset)
    hw = log_.high_watermark
    unstable = [f for f in open_at.values()] + [f for _, f, m, _ in txns if m >= hw]
    assert log_.last_stable_offset == min([hw] + unstable)
    end_offset = log_.log_end_offset
    for start in range(0, end_offset + 1, 2):
        for upper in (start + 1, start + 3, end_offset):
            got = set(log_.collect_aborted_transactions(start, upper))
            want = {(pid, f) for pid, f, m, aborted in txns
                    if aborted and m >= start and f < upper}
            assert want <= got, (start, upper)
            # Nothing that ends before the range is reported.
            assert all(any(pid == t[0] and f == t[1] and t[2] >= start for t in txns)
                       for pid, f in got)
