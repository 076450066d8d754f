"""ProducerStateManager: Kafka's duplicate/epoch/sequence rules, transactions, snapshots."""
import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import ErrorCode, KafkaError
from storage.producer_state import (INT32_MAX, NUM_BATCHES_TO_RETAIN, BatchMetadata, CompletedTxn,
                                    ProducerStateManager)
from storage.record_batch import (ControlRecordType, RecordBatchBuilder, RecordBatchView,
                                  build_control_batch)

PID = 1000


def _append(m, epoch, first_seq, n, first_offset, ts=0, pid=PID, txn=False):
    last_seq = (first_seq + n - 1) % (INT32_MAX + 1)
    dup = m.check(pid, epoch, first_seq, last_seq)
    if dup is None:
        m.update(pid, epoch, first_seq, last_seq, first_offset, first_offset + n - 1, ts, txn)
    return dup


def _error(fn):
    with pytest.raises(KafkaError) as e:
        fn()
    return e.value.error_code


def test_in_order_sequences_accepted_and_duplicates_found_in_last_five():
    m = ProducerStateManager()
    offset = 0
    for i in range(8):
        assert _append(m, 0, i * 10, 10, offset) is None
        offset += 10
    # the last 5 batches (seq 30..79) are retained for duplicate detection
    assert m.check(PID, 0, 70, 79) == BatchMetadata(70, 79, 70, 79, 0)
    assert m.check(PID, 0, 30, 39).first_offset == 30
    assert len(m.last_entry(PID).batches) == NUM_BATCHES_TO_RETAIN
    # seq 20..29 fell out of the window: now it is simply out of order
    assert _error(lambda: m.check(PID, 0, 20, 29)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert m.map_end_offset == 80


def test_gap_and_rewind_are_out_of_order():
    m = ProducerStateManager()
    _append(m, 0, 0, 5, 0)
    assert _error(lambda: m.check(PID, 0, 6, 7)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert _error(lambda: m.check(PID, 0, 3, 7)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert m.check(PID, 0, 5, 9) is None


def test_old_epoch_is_fenced_and_new_epoch_restarts_at_zero():
    m = ProducerStateManager()
    _append(m, 3, 0, 5, 0)
    assert _error(lambda: m.check(PID, 2, 5, 5)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert _error(lambda: m.check(PID, 4, 5, 5)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert _append(m, 4, 0, 2, 5) is None
    entry = m.last_entry(PID)
    assert entry.producer_epoch == 4 and entry.last_seq == 1 and len(entry.batches) == 1
    # a duplicate from the old epoch is not a duplicate any more: it is fenced
    assert _error(lambda: m.check(PID, 3, 0, 4)) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_unknown_producer_accepts_any_sequence():
    m = ProducerStateManager()
    assert _append(m, 0, 4242, 3, 0) is None
    assert m.last_entry(PID).last_seq == 4244
    assert m.check(PID, 0, 4245, 4245) is None


def test_sequence_wraps_at_int32_max():
    m = ProducerStateManager()
    _append(m, 0, INT32_MAX - 1, 2, 0)          # seq MAX-1, MAX
    assert m.check(PID, 0, 0, 4) is None
    _append(m, 0, 0, 5, 2)
    assert m.last_entry(PID).last_seq == 4


def test_negative_producer_id_is_not_tracked():
    m = ProducerStateManager()
    assert m.check(-1, -1, -1, -1) is None
    m.update(-1, -1, -1, -1, 0, 0, 0)
    assert len(m) == 0


def test_transactions_first_unstable_offset_and_markers():
    m = ProducerStateManager()
    _append(m, 0, 0, 2, 10, txn=True)
    _append(m, 0, 0, 1, 12, pid=7, txn=True)
    _append(m, 0, 2, 2, 13, txn=True)
    assert m.first_unstable_offset() == 10
    # Producer 7's transaction (from 12) is still open: the stable offset stops there.
    assert m.complete_txn(PID, 0, ControlRecordType.COMMIT, 1, 15, 0) == \
        CompletedTxn(PID, 10, 15, False, 12)
    assert m.first_unstable_offset() == 10          # its marker is not replicated yet
    m.on_high_watermark(15)
    assert m.first_unstable_offset() == 10
    m.on_high_watermark(16)
    assert m.first_unstable_offset() == 12
    assert m.complete_txn(7, 0, ControlRecordType.ABORT, 1, 16, 0) == \
        CompletedTxn(7, 12, 16, True, 17)
    m.on_high_watermark(17)
    assert m.first_unstable_offset() is None
    assert _error(lambda: m.check_marker(7, 0, 0)) == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert _error(lambda: m.check_marker(7, -1, 1)) == ErrorCode.INVALID_PRODUCER_EPOCH
    # Already in the log (replicated, replayed): applied, never refused after the fact.
    m.complete_txn(7, 0, ControlRecordType.ABORT, 0, 17, 0)
    assert m.producers[7].coordinator_epoch == 1


def test_truncation_reopens_a_transaction_whose_marker_is_cut_off():
    m = ProducerStateManager()
    _append(m, 0, 0, 2, 10, txn=True)
    m.complete_txn(PID, 0, ControlRecordType.ABORT, 1, 13, 0)
    _append(m, 0, 0, 1, 14, pid=7, txn=True)
    m.truncate_tail(13)
    assert m.first_unstable_offset() == 10
    assert m.ongoing == {10: PID}
    assert m.producers[PID].current_txn_first_offset == 10


def test_snapshot_keeps_open_transactions():
    m = ProducerStateManager()
    _append(m, 0, 0, 2, 10, txn=True)
    _append(m, 0, 0, 1, 13, pid=7)
    loaded = ProducerStateManager.decode_snapshot(m.encode_snapshot(), 14)
    assert loaded.ongoing == {10: PID}
    assert loaded.first_unstable_offset() == 10


def test_replay_from_batches_matches_live_updates():
    batches = []
    offset = 0
    for i in range(3):
        b = RecordBatchBuilder(base_offset=offset, producer_id=PID, producer_epoch=1,
                               base_sequence=i * 2, is_transactional=True)
        b.append(100 + i, None, b"a")
        b.append(100 + i, None, b"b")
        batches.append(b.build())
        offset += 2
    batches.append(build_control_batch(ControlRecordType.COMMIT, PID, 1, coordinator_epoch=4,
                                       timestamp=200, base_offset=offset))
    plain = RecordBatchBuilder(base_offset=offset + 1)
    plain.append(300, None, b"x")
    batches.append(plain.build())
    m = ProducerStateManager()
    results = [m.update_from_batch(RecordBatchView(b)) for b in batches]
    assert results[3] == CompletedTxn(PID, 0, 6, False, 7)
    entry = m.last_entry(PID)
    assert (entry.producer_epoch, entry.last_seq, entry.coordinator_epoch,
            entry.current_txn_first_offset) == (1, 5, 4, None)
    assert m.map_end_offset == 8
    assert m.check(PID, 1, 4, 5).first_offset == 4          # still a duplicate after replay


def test_expiration_and_head_truncation():
    m = ProducerStateManager()
    _append(m, 0, 0, 1, 0, ts=1000)
    _append(m, 0, 0, 1, 1, ts=5000, pid=2)
    _append(m, 0, 0, 1, 2, ts=1000, pid=3, txn=True)          # open txn: never expires
    assert m.remove_expired_producers(now_ms=4000, expiration_ms=2000) == [PID]
    m.truncate_head(3)                  # the log start moved past every batch: producers stay
    assert set(m.producers) == {2, 3}    # (Kafka's onLogStartOffsetIncremented), expiry ends them
    m.truncate_fully_and_start_at(50)
    assert len(m) == 0 and m.map_end_offset == 50


def test_snapshot_layout_matches_kafka():
    m = ProducerStateManager()
    _append(m, 2, 10, 5, 100, ts=777, txn=True)
    data = m.encode_snapshot()
    version, crc, count = struct.unpack_from(">hIi", data, 0)
    assert (version, count) == (1, 1)
    assert crc == crc32c.crc32c(data[6:])
    assert struct.unpack_from(">qhiqiqiq", data, 10) == (PID, 2, 14, 104, 4, 777, -1, 100)
    assert len(data) == 10 + 46                  # one 46-byte entry


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 5), st.integers(1, 50),
                          st.integers(0, INT32_MAX), st.booleans()), max_size=20))
def test_snapshot_round_trip(entries):
    m = ProducerStateManager()
    offset = 0
    for pid, epoch, n, seq, txn in entries:
        m.producers.pop(pid, None)
        m.update(pid, epoch, seq, (seq + n - 1) % (INT32_MAX + 1), offset, offset + n - 1,
                 offset * 3, txn)
        offset += n
    loaded = ProducerStateManager.decode_snapshot(m.encode_snapshot(), map_end_offset=offset)
    assert set(loaded.producers) == set(m.producers)
    for pid, entry in m.producers.items():
        other = loaded.producers[pid]
        assert other.batches[-1] == entry.batches[-1]
        assert (other.producer_epoch, other.current_txn_first_offset, other.last_timestamp) == \
               (entry.producer_epoch, entry.current_txn_first_offset, entry.last_timestamp)
    assert loaded.map_end_offset == offset


def test_corrupt_snapshot_is_rejected():
    m = ProducerStateManager()
    _append(m, 0, 0, 3, 0)
    data = bytearray(m.encode_snapshot())
    data[-1] ^= 1
    with pytest.raises(ValueError):
        ProducerStateManager.decode_snapshot(bytes(data))
    with pytest.raises(ValueError):
        ProducerStateManager.decode_snapshot(m.encode_snapshot()[:-3])
    with pytest.raises(ValueError):
        ProducerStateManager.decode_snapshot(b"\x00\x02" + m.encode_snapshot()[2:])


def test_truncate_tail_forgets_batches_past_the_end():
    m = ProducerStateManager()
    _append(m, 0, 0, 2, 0)
    _append(m, 0, 2, 2, 2, txn=True)
    _append(m, 0, 0, 2, 4, pid=9)
    m.truncate_tail(4)
    assert 9 not in m.producers
    entry = m.last_entry(PID)
    assert entry.last_seq == 3 and entry.current_txn_first_offset == 2
    m.truncate_tail(2)
    assert entry.last_seq == 1 and entry.current_txn_first_offset is None
    assert m.map_end_offset == 2


class _FakeLog:
    log_start_offset = 0
    log_end_offset = 0


def test_log_adapter_detects_duplicates_and_fences():
    from storage.log import parse_batches
    from storage.producer_state import LogProducerState
    from storage.validation import validate_and_assign_offsets
    hook, log = LogProducerState(), _FakeLog()

    def produce(epoch, seq, n=3):
        b = RecordBatchBuilder(producer_id=PID, producer_epoch=epoch, base_sequence=seq)
        for i in range(n):
            b.append(1, None, b"x")
        return b.build()

    first = produce(0, 0)
    assert hook.find_duplicate(first, log) is None
    result = validate_and_assign_offsets(first, 40, 0, 1)
    hook.update(parse_batches(result.buffer), result.buffer, log)
    dup = hook.find_duplicate(first, log)
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (40, 42)
    assert _error(lambda: hook.find_duplicate(produce(0, 5), log)) == \
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    bumped = validate_and_assign_offsets(produce(1, 0), 43, 0, 1).buffer
    hook.update(parse_batches(bumped), bumped, log)
    assert _error(lambda: hook.find_duplicate(produce(0, 3), log)) == \
        ErrorCode.INVALID_PRODUCER_EPOCH
    log.log_end_offset = 43          # the epoch-1 batch is truncated away
    hook.truncate(log)
    assert hook.manager.last_entry(PID) is None          # unknown again: nothing is fenced
    assert hook.find_duplicate(produce(0, 3), log) is None


def test_replay_log_bytes_restores_duplicate_detection():
    from storage.producer_state import LogProducerState
    log_bytes = b""
    for i in range(3):
        b = RecordBatchBuilder(base_offset=i * 2, producer_id=PID, producer_epoch=0,
                               base_sequence=i * 2)
        b.append(1, None, b"a")
        b.append(1, None, b"b")
        log_bytes += b.build()
    hook = LogProducerState()
    assert hook.replay(log_bytes + log_bytes[:10]) == 6        # torn tail ignored
    retry = RecordBatchBuilder(producer_id=PID, producer_epoch=0, base_sequence=4)
    retry.append(1, None, b"a")
    retry.append(1, None, b"b")
    dup = hook.find_duplicate(retry.build(), _FakeLog())
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (4, 5)
