"""Transaction states, TransactionMetadata's two-phase transitions, and `__transaction_state`
records (Kafka 3.9's TransactionState, TransactionMetadata and TransactionLog)."""
import struct

import pytest
from hypothesis import given, strategies as st

from protocol.errors import ErrorCode as E
from protocol.exceptions import ProtocolError
from protocol.internal import TransactionLogKey, TransactionLogValue
from protocol.internal_records import encode_key, encode_value

from coordinator.records import Record
from coordinator.transaction.records import (TxnKey, TxnValue, build_batch, decode_record,
                                             encode_record, iter_log_records,
                                             metadata_from_value, tombstone, transit_record)
from coordinator.transaction.state import (EXPIRATION_ALLOWED, VALID_PREVIOUS_STATES,
                                           IllegalTransactionState, TransactionMetadata,
                                           TxnState as S, is_epoch_exhausted)

T0 = 1_000_000


def metadata(state=S.EMPTY, epoch=0, partitions=(), start=-1, producer_id=7, last_epoch=-1):
    return TransactionMetadata("tx", producer_id, -1, epoch, last_epoch, 60_000, state,
                               set(partitions), start, T0)


# --------------------------------------------------------------------------------- states
def test_state_ids_and_names_are_kafkas():
    assert [(s.value, s.kafka_name) for s in S] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"),
        (4, "CompleteCommit"), (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]
    assert str(S.PREPARE_COMMIT) == "PrepareCommit"


def test_state_from_id_rejects_unknown_id_and_from_name_is_case_sensitive():
    assert S.from_id(4) is S.COMPLETE_COMMIT
    with pytest.raises(ValueError, match="Unknown transaction state id 8"):
        S.from_id(8)
    assert S.from_name("Ongoing") is S.ONGOING
    assert S.from_name("ongoing") is None and S.from_name("Nope") is None


def test_valid_previous_states_table_is_kafkas():
    assert VALID_PREVIOUS_STATES == {
        S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.PREPARE_COMMIT: {S.ONGOING},
        S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE},
        S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
        S.COMPLETE_ABORT: {S.PREPARE_ABORT},
        S.DEAD: {S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT},
        S.PREPARE_EPOCH_FENCE: {S.ONGOING},
    }
    assert EXPIRATION_ALLOWED == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}


def test_epoch_is_exhausted_from_short_max_minus_one():
    assert not is_epoch_exhausted(32765)
    assert is_epoch_exhausted(32766) and is_epoch_exhausted(32767)


# ------------------------------------------------------------------------- transitions
def test_prepare_sets_pending_state_and_a_second_prepare_raises():
    md = metadata()
    transit = md.prepare_add_partitions({("t", 0)}, T0 + 5)
    assert md.pending_state is S.ONGOING and md.state is S.EMPTY
    assert transit.partitions == {("t", 0)} and transit.txn_start_timestamp == T0 + 5
    with pytest.raises(IllegalTransactionState, match="already a pending state"):
        md.prepare_add_partitions({("t", 1)}, T0 + 6)


def test_prepare_to_a_state_whose_previous_states_exclude_the_current_raises():
    with pytest.raises(IllegalTransactionState, match="not a valid previous state"):
        metadata(S.EMPTY).prepare_abort_or_commit(S.PREPARE_COMMIT, T0)
    with pytest.raises(IllegalTransactionState):
        metadata(S.PREPARE_COMMIT, partitions=[("t", 0)], start=T0).prepare_add_partitions(
            {("t", 1)}, T0)


def test_complete_transition_applies_only_the_prepared_move():
    md = metadata()
    transit = md.prepare_add_partitions({("t", 0)}, T0 + 5)
    md.complete_transition_to(transit)
    assert (md.state, md.pending_state, md.partitions) == (S.ONGOING, None, {("t", 0)})
    assert md.txn_start_timestamp == T0 + 5 and md.txn_last_update_timestamp == T0 + 5
    with pytest.raises(IllegalTransactionState):       # no pending state any more
        md.complete_transition_to(transit)


def test_complete_transition_rejects_an_epoch_that_is_not_a_bump():
    md = metadata(S.COMPLETE_COMMIT, epoch=3, start=T0)
    _, transit = md.prepare_increment_producer_epoch(60_000, None, T0)
    forged = transit.__class__(**{**transit.__dict__, "producer_epoch": 9})
    with pytest.raises(IllegalTransactionState):
        md.complete_transition_to(forged)


def test_add_partitions_keeps_start_time_of_ongoing_transaction_and_resets_after_complete():
    md = metadata(S.ONGOING, partitions=[("t", 0)], start=T0)
    assert md.prepare_add_partitions({("t", 1)}, T0 + 9).txn_start_timestamp == T0
    md = metadata(S.COMPLETE_ABORT, start=T0)
    assert md.prepare_add_partitions({("t", 1)}, T0 + 9).txn_start_timestamp == T0 + 9


def test_increment_epoch_without_expected_epoch_bumps_and_forgets_last_epoch():
    md = metadata(epoch=4, last_epoch=3)
    error, transit = md.prepare_increment_producer_epoch(30_000, None, T0 + 1)
    assert error == E.NONE
    assert (transit.producer_epoch, transit.last_producer_epoch, transit.txn_timeout_ms) == \
        (5, -1, 30_000)
    md.complete_transition_to(transit)
    assert (md.producer_epoch, md.last_producer_epoch, md.txn_timeout_ms) == (5, -1, 30_000)


def test_increment_epoch_kip360_current_epoch_bumps_last_epoch_retries_and_others_fenced():
    md = metadata(epoch=4, last_epoch=3)
    assert md.prepare_increment_producer_epoch(1, 4, T0)[1].last_producer_epoch == 4
    md.pending_state = None
    error, transit = md.prepare_increment_producer_epoch(1, 3, T0)
    assert error == E.NONE and (transit.producer_epoch, transit.last_producer_epoch) == (4, 3)
    md.pending_state = None
    assert md.prepare_increment_producer_epoch(1, 2, T0) == (E.PRODUCER_FENCED, None)
    assert md.pending_state is None


def test_increment_epoch_of_exhausted_epoch_raises():
    with pytest.raises(IllegalTransactionState, match="Cannot allocate any more"):
        metadata(epoch=32766).prepare_increment_producer_epoch(1, None, T0)


def test_producer_id_rotation_starts_at_epoch_zero_and_may_record_last_epoch():
    md = metadata(epoch=32766)
    transit = md.prepare_producer_id_rotation(99, 1000, T0, record_last_epoch=True)
    assert (transit.producer_id, transit.last_producer_id, transit.producer_epoch,
            transit.last_producer_epoch) == (99, 7, 0, 32766)
    md.complete_transition_to(transit)
    assert (md.producer_id, md.last_producer_id, md.producer_epoch) == (99, 7, 0)
    with pytest.raises(IllegalTransactionState, match="rotate"):
        metadata(S.ONGOING).prepare_producer_id_rotation(1, 1, T0, False)


def test_fence_bumps_epoch_unless_a_previous_fence_failed_and_never_overflows():
    md = metadata(S.ONGOING, epoch=5, start=T0)
    assert md.prepare_fence_producer_epoch().producer_epoch == 6
    assert md.pending_state is S.PREPARE_EPOCH_FENCE
    md = metadata(S.ONGOING, epoch=5, start=T0)
    md.has_failed_epoch_fence = True
    assert md.prepare_fence_producer_epoch().producer_epoch == 5
    with pytest.raises(IllegalTransactionState, match="Short.MaxValue"):
        metadata(S.ONGOING, epoch=32767).prepare_fence_producer_epoch()


def test_prepare_epoch_fence_is_never_completed():
    md = metadata(S.ONGOING, epoch=5, start=T0)
    transit = md.prepare_fence_producer_epoch()
    with pytest.raises(IllegalTransactionState):
        md.complete_transition_to(transit)


def test_prepare_complete_clears_partitions_and_failed_fence_flag():
    md = metadata(S.PREPARE_ABORT, partitions=[("t", 0)], start=T0)
    md.has_failed_epoch_fence = True
    transit = md.prepare_complete(T0 + 3)
    assert transit.state is S.COMPLETE_ABORT and not transit.partitions
    assert not md.has_failed_epoch_fence
    md.complete_transition_to(transit)
    assert md.state is S.COMPLETE_ABORT and not md.partitions
    assert metadata(S.PREPARE_COMMIT, start=T0).prepare_complete(T0).state is S.COMPLETE_COMMIT


def test_dead_is_prepared_for_expiry_but_never_completed():
    md = metadata(S.COMPLETE_COMMIT, start=T0)
    transit = md.prepare_dead()
    assert md.pending_state is S.DEAD and transit.txn_last_update_timestamp == T0
    with pytest.raises(IllegalTransactionState):
        md.complete_transition_to(transit)
    with pytest.raises(IllegalTransactionState):
        metadata(S.ONGOING).prepare_dead()


def test_remove_partition_only_while_markers_are_written():
    md = metadata(S.PREPARE_COMMIT, partitions=[("t", 0), ("t", 1)], start=T0)
    md.remove_partition(("t", 0))
    assert md.partitions == {("t", 1)}
    with pytest.raises(IllegalTransactionState):
        metadata(S.ONGOING, partitions=[("t", 0)]).remove_partition(("t", 0))


# ------------------------------------------------------------------------------- records
def test_value_is_written_as_version_0_in_kafkas_layout():
    value = TxnValue(7, 3, 60_000, S.ONGOING, frozenset({("t", 2), ("t", 0), ("a", 1)}),
                     1000, 900)
    key_bytes, value_bytes = encode_record(Record(TxnKey("txn"), value))
    assert key_bytes == struct.pack(">hh", 0, 3) + b"txn"
    assert value_bytes == (
        struct.pack(">hqhib", 0, 7, 3, 60_000, 1) + struct.pack(">i", 2)
        + struct.pack(">h", 1) + b"a" + struct.pack(">ii", 1, 1)
        + struct.pack(">h", 1) + b"t" + struct.pack(">iii", 2, 0, 2)
        + struct.pack(">qq", 1000, 900))


def test_empty_state_writes_null_partitions_and_tombstone_has_null_value():
    _, value_bytes = encode_record(Record(TxnKey("txn"), TxnValue(
        7, 0, 60_000, S.EMPTY, frozenset(), 1000, -1)))
    assert value_bytes == struct.pack(">hqhibiqq", 0, 7, 0, 60_000, 0, -1, 1000, -1)
    assert encode_record(tombstone("txn")) == (struct.pack(">hh", 0, 3) + b"txn", None)
    assert decode_record(*encode_record(tombstone("txn"))) == tombstone("txn")


def test_transit_record_of_empty_state_with_partitions_is_refused():
    md = metadata(S.ONGOING, partitions=[("t", 0)], start=T0)
    transit = md.prepare_abort_or_commit(S.PREPARE_COMMIT, T0)
    bad = transit.__class__(**{**transit.__dict__, "state": S.EMPTY})
    with pytest.raises(ValueError, match="not expected to have any partitions"):
        transit_record("tx", bad)


def test_decode_reads_flexible_version_1_as_kafka_writes_it_with_transaction_version_2():
    key = TransactionLogKey("txn")
    value = TransactionLogValue(
        producer_id=5, producer_epoch=2, transaction_timeout_ms=10, transaction_status=2,
        transaction_partitions=[TransactionLogValue.PartitionsSchema("t", [3])],
        transaction_last_update_timestamp_ms=8, transaction_start_timestamp_ms=7,
        previous_producer_id=4, client_transaction_version=2)
    record = decode_record(encode_key(key), encode_value(value, 1))
    assert record == Record(TxnKey("txn"), TxnValue(5, 2, 10, S.PREPARE_COMMIT,
                                                    frozenset({("t", 3)}), 8, 7))


def test_decode_skips_unknown_key_version_and_refuses_unknown_value_version():
    assert decode_record(struct.pack(">hh", 1, 1) + b"x", b"\x00\x00") is None
    with pytest.raises(ProtocolError, match="Unknown version 5"):
        decode_record(struct.pack(">hh", 0, 1) + b"x", struct.pack(">h", 5) + b"\x00" * 40)


def test_decode_ignores_partitions_of_empty_state_as_kafka_does():
    value = TransactionLogValue(producer_id=5, producer_epoch=2, transaction_timeout_ms=10,
                                transaction_status=0, transaction_partitions=[
                                    TransactionLogValue.PartitionsSchema("t", [3])])
    record = decode_record(encode_key(TransactionLogKey("txn")), encode_value(value, 0))
    assert record.value.partitions == frozenset()


def test_loaded_metadata_has_no_last_producer_id_or_epoch():
    md = metadata_from_value("tx", TxnValue(5, 2, 10, S.ONGOING, frozenset({("t", 3)}), 8, 7))
    assert (md.producer_id, md.last_producer_id, md.producer_epoch, md.last_producer_epoch,
            md.state, md.partitions, md.txn_start_timestamp, md.txn_last_update_timestamp) == \
        (5, -1, 2, -1, S.ONGOING, {("t", 3)}, 7, 8)


tp = st.tuples(st.sampled_from(["a", "topic", "ü"]), st.integers(0, 2**31 - 1))
values = st.builds(TxnValue, st.integers(0, 2**63 - 1), st.integers(0, 32767),
                   st.integers(1, 2**31 - 1),
                   st.sampled_from([s for s in S if s is not S.EMPTY]),
                   st.frozensets(tp, max_size=6), st.integers(-1, 2**62),
                   st.integers(-1, 2**62))


@given(st.text(min_size=1, max_size=20), st.one_of(st.none(), values))
def test_records_round_trip_through_bytes_and_batches(tid, value):
    record = Record(TxnKey(tid), value)
    assert decode_record(*encode_record(record)) == record
    assert list(iter_log_records(build_batch([record, tombstone("z")], T0))) == \
        [record, tombstone("z")]
