"""The partition side of transactions in the log: last stable offset, the `.txnindex` of aborted
transactions (written on append, searched for a fetch, truncated, rebuilt by recovery), and a
hypothesis model of both against interleaved transactions of several producers."""
import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import ErrorCode, KafkaError

from storage import files
from storage.log import Log
from storage.log_config import LogConfig
from storage.producer_state import NOT_VERIFYING, VerificationEntry
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


def test_last_stable_offset_is_never_below_the_log_start_offset(tmp_path):
    """DeleteRecords past the start of a transaction still open: the LSO stays at the log start
    (Kafka's maybeIncrementFirstUnstableOffset), so a read_committed consumer placed at the
    latest offset is not sent below the earliest one."""
    log_ = open_log(tmp_path / "t-0")
    a, b = Producer(1), Producer(2)
    send(log_, a, 1)                           # 0: a opens a transaction
    for _ in range(5):                         # 1-5: plain idempotent writes
        log_.append_as_leader(b.batch(1, transactional=False), 0)
    log_.update_high_watermark(6)
    assert log_.last_stable_offset == 0
    log_.delete_records_before(3)
    assert log_.last_stable_offset == 3
    end(log_, a, commit=True)                  # marker 6
    log_.update_high_watermark(7)
    assert log_.last_stable_offset == 7


def test_a_plain_write_while_the_producers_transaction_is_open_is_refused(tmp_path):
    """Kafka's ProducerAppendInfo.appendDataBatch: INVALID_TXN_STATE, nothing written; the
    retry of a batch already in the log is still answered as a duplicate."""
    log_ = open_log(tmp_path / "t-0")
    a = Producer(1)
    send(log_, a, 2)                           # 0-1: a's transaction
    with pytest.raises(KafkaError) as caught:
        log_.append_as_leader(a.batch(1, transactional=False), 0)
    assert caught.value.error_code == ErrorCode.INVALID_TXN_STATE
    assert log_.log_end_offset == 2
    a.seq = 0                                  # the transaction's first batch sent again:
    assert send(log_, a, 2).duplicate          # answered as the duplicate it is
    end(log_, a, commit=True)                  # 2: marker
    assert log_.append_as_leader(a.batch(1, transactional=False), 0).first_offset == 3


def test_a_producer_outlives_its_batches_removed_by_delete_records(tmp_path):
    """Kafka's onLogStartOffsetIncremented keeps producers (producer.id.expiration.ms ends
    them): a retry of a batch DeleteRecords already removed is still the duplicate it is, not
    written again, and a gap in the producer's sequences is still refused."""
    log_ = open_log(tmp_path / "t-0")
    a, other = Producer(7), Producer(8)
    first = log_.append_as_leader(a.batch(2, transactional=False), 0)     # 0-1
    log_.append_as_leader(other.batch(3, transactional=False), 0)          # 2-4
    log_.update_high_watermark(5)
    log_.delete_records_before(2)
    a.seq = 0
    again = log_.append_as_leader(a.batch(2, transactional=False), 0)
    assert again.duplicate and again.first_offset == first.first_offset == 0
    assert log_.log_end_offset == 5
    a.seq = 5                                  # 2-4 never sent
    with pytest.raises(KafkaError) as caught:
        log_.append_as_leader(a.batch(1, transactional=False), 0)
    assert caught.value.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_duplicate_is_answered_with_the_log_append_time_of_its_batch(tmp_path):
    """Kafka's UnifiedLog.append: a retried batch's answer carries the time the broker stamped
    on it the first time (a Java producer's RecordMetadata.timestamp() on LogAppendTime)."""
    log_ = open_log(tmp_path / "t-0", message_timestamp_type="LogAppendTime")
    a = Producer(7)
    first = log_.append_as_leader(a.batch(2, transactional=False), 0)
    assert first.log_append_time == NOW
    a.seq = 0
    again = log_.append_as_leader(a.batch(2, transactional=False), 0, now_ms=NOW + 5000)
    assert again.duplicate and again.log_append_time == NOW


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


def test_an_old_segments_index_rebuild_leaves_the_later_txnindexes_alone(tmp_path):
    # After a clean shutdown an old segment lost its offset index: only it is recovered (as
    # Kafka's loadSegmentFiles); the aborted transaction of a later segment keeps its one
    # entry (it was appended a second time, and the load failed with a ValueError).
    log_ = open_log(tmp_path / "t-0")
    a = Producer(1)
    send(log_, a, 2)                          # 0-1
    log_.roll()
    send(log_, a, 2)                          # 2-3
    end(log_, a, commit=False)                # 4: aborted, in the second segment
    log_.update_high_watermark(5)
    log_.roll()
    send(log_, Producer(2), 1)                # 5, active
    expected = all_aborted(log_)
    assert len(expected) == 1
    log_.close()
    os.remove(tmp_path / "t-0" / "00000000000000000000.index")
    again = Log(str(tmp_path / "t-0"), LogConfig(segment_ms=10**12), recovery_point=6,
                had_clean_shutdown=True, time_ms=lambda: NOW)
    assert all_aborted(again) == expected
    assert [s.base_offset for s in again.segments] == [0, 2, 5]


def test_a_torn_tail_found_by_an_index_rebuild_keeps_the_later_segments(tmp_path):
    log_ = open_log(tmp_path / "t-0")
    a = Producer(1)
    send(log_, a, 2, )                        # 0-1
    log_.roll()
    send(log_, a, 2)                          # 2-3
    log_.roll()
    send(log_, a, 1)                          # 4, active
    log_.close()
    first = tmp_path / "t-0" / "00000000000000000000.log"
    with open(first, "ab") as fh:
        fh.write(b"\0\0\0\0\0\0\0\0\0\0\0\x40garbage")
    os.remove(tmp_path / "t-0" / "00000000000000000000.index")
    again = Log(str(tmp_path / "t-0"), LogConfig(segment_ms=10**12), recovery_point=5,
                had_clean_shutdown=True, time_ms=lambda: NOW)
    assert [s.base_offset for s in again.segments] == [0, 2, 4]
    assert again.log_end_offset == 5


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
    st.tuples(st.just("trim"), st.just(0), st.integers(0, 4)),
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
        elif kind == "trim":               # DeleteRecords up to `arg` below the high watermark
            log_.delete_records_before(max(log_.log_start_offset, log_.high_watermark - arg))
        else:
            log_.update_high_watermark(log_.log_end_offset)
    hw = log_.high_watermark
    unstable = [f for f in open_at.values()] + [f for _, f, m, _ in txns if m >= hw]
    first_unstable = max(min(unstable), log_.log_start_offset) if unstable else hw
    assert log_.last_stable_offset == min(hw, first_unstable)
    end_offset = log_.log_end_offset
    for start in range(log_.log_start_offset, end_offset + 1, 2):
        for upper in (start + 1, start + 3, end_offset):
            got = set(log_.collect_aborted_transactions(start, upper))
            want = {(pid, f) for pid, f, m, aborted in txns
                    if aborted and m >= start and f < upper}
            assert want <= got, (start, upper)
            # Nothing that ends before the range is reported.
            assert all(any(pid == t[0] and f == t[1] and t[2] >= start for t in txns)
                       for pid, f in got)


# -- verification guard (KIP-890 part 1): the write a coordinator's answer let through ---------
def verified(log_, producer, n=1, guard=None):
    """A transactional write appended as the Produce handler appends it: with the guard
    start_transaction_verification gave (taken now unless given)."""
    batch = producer.batch(n)
    if guard is None:
        guard = log_.start_transaction_verification(producer.pid, producer.seq - n,
                                                    producer.epoch)
    return log_.append_as_leader(batch, 0, verification=guard)


def refused(log_, producer, guard, code):
    end_before = log_.log_end_offset
    with pytest.raises(KafkaError) as caught:
        log_.append_as_leader(producer.batch(1), 0, verification=guard)
    producer.seq -= 1                          # not written: the client sends it again
    assert caught.value.error_code == code
    assert log_.log_end_offset == end_before


def test_a_verified_first_write_opens_the_transaction_and_drops_its_verification(tmp_path):
    log_ = open_log(tmp_path / "t-0")
    a = Producer(1)
    guard = log_.start_transaction_verification(1, 0, 0)
    assert isinstance(guard, VerificationEntry)
    verified(log_, a, 2, guard)
    assert not log_.producer_state.manager.verifying
    assert log_.start_transaction_verification(1, 2, 0) is NOT_VERIFYING
    verified(log_, a, 1)                       # the later writes of the transaction
    log_.update_high_watermark(log_.log_end_offset)
    assert log_.last_stable_offset == 0


def test_a_marker_between_the_answer_and_the_append_refuses_the_write(tmp_path):
    log_ = open_log(tmp_path / "t-0")
    a = Producer(1)
    guard = log_.start_transaction_verification(1, 0, 0)
    end(log_, a, commit=False)                 # the coordinator aborted the transaction
    refused(log_, a, guard, ErrorCode.INVALID_TXN_STATE)
    log_.update_high_watermark(log_.log_end_offset)
    assert log_.last_stable_offset == log_.log_end_offset      # nothing left hanging


def test_a_stale_guard_cannot_pass_for_a_later_verification(tmp_path):
    log_ = open_log(tmp_path / "t-0")
    a = Producer(1)
    stale = log_.start_transaction_verification(1, 0, 0)
    end(log_, a, commit=False)
    fresh = log_.start_transaction_verification(1, 0, 0)       # the next transaction's
    assert fresh is not stale
    refused(log_, a, stale, ErrorCode.INVALID_TXN_STATE)
    verified(log_, a, 1, fresh)


def test_a_write_that_found_its_transaction_open_is_refused_once_a_marker_ended_it(tmp_path):
    log_ = open_log(tmp_path / "t-0")
    a = Producer(1)
    verified(log_, a, 1)
    guard = log_.start_transaction_verification(1, a.seq, 0)
    assert guard is NOT_VERIFYING
    end(log_, a, commit=False)
    refused(log_, a, guard, ErrorCode.INVALID_TXN_STATE)


def test_sequences_above_the_lowest_one_being_verified_wait_for_it(tmp_path):
    log_ = open_log(tmp_path / "t-0")
    a = Producer(1)
    guard = log_.start_transaction_verification(1, 0, 0)
    assert log_.start_transaction_verification(1, 5, 0) is guard
    later = Producer(1)
    later.seq = 5
    refused(log_, later, guard, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    verified(log_, a, 5, guard)
    verified(log_, later, 1)


def test_appends_without_a_guard_are_not_checked_and_old_verifications_expire(tmp_path):
    log_ = open_log(tmp_path / "t-0")
    a = Producer(1)
    log_.start_transaction_verification(1, 0, 0)
    end(log_, a, commit=False)
    send(log_, a, 1)                           # verification off: written as before
    log_.start_transaction_verification(2, 0, 0)
    manager = log_.producer_state.manager
    assert set(manager.verifying) == {2}
    manager.remove_expired_producers(NOW + 10, expiration_ms=10)
    assert not manager.verifying


def test_a_coordinators_append_checks_the_guards_of_the_producers_it_names(tmp_path):
    """TxnOffsetCommit: the group coordinator's append carries {producer id: guard}; no
    sequence check (the coordinators write every batch at sequence 0)."""
    log_ = open_log(tmp_path / "t-0")
    a, b = Producer(1), Producer(2)
    stale = log_.start_transaction_verification(1, -1, 0)
    end(log_, a, commit=False)
    with pytest.raises(KafkaError) as caught:
        log_.append_as_leader(a.batch(1), 0, origin="coordinator", verification={1: stale})
    assert caught.value.error_code == ErrorCode.INVALID_TXN_STATE
    fresh = log_.start_transaction_verification(1, -1, 0)
    log_.append_as_leader(a.batch(1), 0, origin="coordinator", verification={1: fresh})
    log_.append_as_leader(b.batch(1), 0, origin="coordinator", verification={1: fresh})


def test_a_read_committed_fetch_lists_the_aborts_of_its_records_not_every_later_one(tmp_path):
    log_ = open_log(tmp_path / "t-0", index_interval_bytes=1)
    a, b, plain = Producer(1), Producer(2), Producer(3)
    send(log_, a, 2)                           # 0-1
    end(log_, a, commit=False)                 # 2
    for _ in range(20):
        log_.append_as_leader(plain.batch(5, transactional=False), 0)     # 3-102
    send(log_, b, 2)                           # 103-104
    end(log_, b, commit=False)                 # 105
    log_.update_high_watermark(log_.log_end_offset)

    def aborts(offset, max_bytes):
        info = log_.read(offset, max_bytes)
        bound = log_.fetch_upper_bound_offset(info)
        return bound, log_.collect_aborted_transactions(offset, bound)
    bound, found = aborts(0, 300)
    assert bound < 103 and found == [(1, 0)]
    bound, found = aborts(3, 300)
    assert bound < 103 and found == []
    assert aborts(90, 10**6) == (106, [(2, 103)])
    whole = log_.read(0, 10**6)
    assert log_.fetch_upper_bound_offset(whole) == log_.log_end_offset


# -- producer state against its snapshots and older epochs -----------------------------------
def _snapshot_below_the_log_start(tmp_path):
    """A's transaction open at 0 is in the snapshot of the roll at 1; A commits at 1, B writes
    and commits at 2-3, and DeleteRecords moves the log start to 2, above that snapshot."""
    log_ = open_log(tmp_path / "t-0")
    a, b = Producer(1), Producer(2)
    send(log_, a)                              # 0
    log_.roll()                                # snapshot 1: A open at 0
    end(log_, a, commit=True)                  # 1
    send(log_, b)                              # 2
    end(log_, b, commit=True)                  # 3
    log_.update_high_watermark(4)
    log_.delete_records_before(2)
    return log_, b


def test_a_truncation_does_not_rebuild_from_a_snapshot_below_the_log_start(tmp_path):
    """Kafka's truncateAndReload deletes snapshots at or below the log start: the batches
    between such a snapshot and the start are not replayed (the replay starts at the log
    start), so loading it reopened A's committed transaction for good (LSO stuck at 2)."""
    log_, b = _snapshot_below_the_log_start(tmp_path)
    log_.truncate_to(3)                        # B's marker goes (a follower's truncation)
    end(log_, b, commit=True)                  # and comes back
    log_.update_high_watermark(log_.log_end_offset)
    assert log_.last_stable_offset == log_.log_end_offset == 4


def test_a_crash_restart_does_not_rebuild_from_a_snapshot_below_the_log_start(tmp_path):
    log_, _ = _snapshot_below_the_log_start(tmp_path)
    log_.close_files()                         # a crash
    for name in os.listdir(log_.dir):          # the roll's snapshot is all that is left
        if name.endswith(files.SNAPSHOT_SUFFIX) and not name.startswith("%020d" % 1):
            os.remove(os.path.join(log_.dir, name))
    again = Log(str(tmp_path / "t-0"), LogConfig(segment_ms=10**12), time_ms=lambda: NOW,
                recovery_point=2, log_start_offset=2, had_clean_shutdown=False)
    again.update_high_watermark(again.log_end_offset)
    assert again.last_stable_offset == 4
    assert not any(n.endswith(files.SNAPSHOT_SUFFIX) and n.startswith("%020d" % 1)
                   for n in os.listdir(again.dir))


def test_a_fenced_producers_write_does_not_hold_back_the_live_producers_sequences(tmp_path):
    """Kafka's hasOngoingTransaction ignores the epoch: a zombie (older epoch) writing to a
    partition where the live producer's transaction is open gets INVALID_PRODUCER_EPOCH and
    leaves no verification entry behind (ours used to, and every later write of the live
    producer then failed OUT_OF_ORDER_SEQUENCE_NUMBER, aborting its transaction)."""
    log_ = open_log(tmp_path / "t-0")
    live, zombie = Producer(1, epoch=5), Producer(1, epoch=4)
    verified(log_, live, 1)
    guard = log_.start_transaction_verification(1, 0, 4)
    assert guard is NOT_VERIFYING
    refused(log_, zombie, guard, ErrorCode.INVALID_PRODUCER_EPOCH)
    verified(log_, live, 1)
    verified(log_, live, 1)
    assert not log_.producer_state.manager.verifying


def test_a_coordinators_data_batch_with_an_older_epoch_is_fenced(tmp_path):
    """ProducerAppendInfo.checkProducerEpoch for coordinator-origin data (a zombie's
    TxnOffsetCommit): INVALID_PRODUCER_EPOCH, and the producer's epoch stays."""
    log_ = open_log(tmp_path / "t-0")
    live, zombie = Producer(1, epoch=5), Producer(1, epoch=3)
    log_.append_as_leader(live.batch(1), 0, origin="coordinator")
    with pytest.raises(KafkaError) as caught:
        log_.append_as_leader(zombie.batch(1), 0, origin="coordinator")
    assert caught.value.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert log_.producer_state.manager.last_entry(1).producer_epoch == 5
    assert log_.log_end_offset == 1
