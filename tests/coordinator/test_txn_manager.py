"""The pure transaction manager against Kafka 3.9's TransactionCoordinator rules, driven
directly (no event loop): every operation, its error codes, the markers, timers, loading, and a
hypothesis state machine checking invariants over random operation sequences."""
import itertools
from collections import defaultdict

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from protocol.errors import ErrorCode as E, KafkaError

from coordinator.partitioning import OFFSETS_TOPIC, partition_for
from coordinator.records import Record
from coordinator.transaction.manager import TransactionManager
from coordinator.transaction.records import (TxnKey, TxnValue, build_batch, replay_buffer,
                                             tombstone)
from coordinator.transaction.results import (InitProducerIdResponse, TxnConfig, map_append_error,
                                             not_attempted, txn_config_from)
from coordinator.transaction.state import (PREPARE_STATES, VALID_PREVIOUS_STATES,
                                           IllegalTransactionState, TxnState as S)

T0 = 1_000_000
TID = "txn-a"
TIMEOUT = 60_000


class Harness:
    """Plays the runtime: applies results, keeps `__transaction_state` per partition (a failed
    append writes nothing), queues markers and timers, and checks that every marker follows
    the Prepare* record it completes."""

    def __init__(self, num_partitions: int = 1, **config):
        self.now = T0
        self.pids = itertools.count(1000)
        self.config = TxnConfig(transaction_state_log_num_partitions=num_partitions, **config)
        self.manager = TransactionManager(self.config, self.next_pid)
        self.log: dict[int, list] = defaultdict(list)
        self.markers: list = []
        self.timers: dict[tuple, int] = {}
        self.fail_next: list[int] = []           # errors of the next appends, in order
        self.epochs: dict[int, int] = {}         # coordinator epoch per partition
        self.delivered: dict[str, set] = {}      # partitions with markers, per transaction
        self.pid_error = None
        self.answers: dict = {}                  # token -> answer of a request that waited
        for p in range(num_partitions):
            self.load(p)
        self.apply(self.manager.start(self.now))

    def next_pid(self) -> int:
        if self.pid_error is not None:
            raise KafkaError(self.pid_error)
        return next(self.pids)

    # ------------------------------------------------------------------------- the runtime
    def apply(self, result):
        response = result.response
        for key, deadline in result.timers:
            self.timers[key] = min(deadline, self.timers.get(key, deadline))
        for token, answer in result.completions:
            assert token not in self.answers, "a request that waited is answered once"
            self.answers[token] = answer
        for marker in result.markers:
            self.check_marker(marker)
            self.markers.append(marker)
        for append in result.appends:
            error = self.fail_next.pop(0) if self.fail_next else E.NONE
            if error == E.NONE:
                for record in append.records:
                    self.check_complete_follows_markers(record)
                    self.log[self.manager.partition_for(record.key.transactional_id)].append(
                        record)
            follow = self.apply(append.on_append(error, self.now))
            if follow is not None:
                response = follow
        return response

    def check_marker(self, marker):
        records = [r for r in self.log[self.manager.partition_for(marker.transactional_id)]
                   if r.key.transactional_id == marker.transactional_id]
        assert records, f"marker without any record: {marker}"
        last = records[-1].value
        assert last is not None and last.state in PREPARE_STATES, (marker, last)
        assert (last.state is S.PREPARE_COMMIT) == marker.committed
        assert (last.producer_id, last.producer_epoch) == (marker.producer_id,
                                                            marker.producer_epoch)
        assert set(marker.partitions) <= last.partitions

    def check_complete_follows_markers(self, record):
        """A Complete* record only once every partition of its Prepare* record has its
        marker (reported written since that Prepare* record)."""
        tid, value = record.key.transactional_id, record.value
        if value is None or value.state not in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT,
                                                S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return
        if value.state in PREPARE_STATES:
            self.delivered[tid] = set()
            return
        prepare = self.records(tid)[-1]
        assert prepare.state in PREPARE_STATES, (tid, prepare)
        assert prepare.partitions <= self.delivered.get(tid, set()), (tid, prepare)

    def call(self, op: str, *args, **kwargs):
        return self.apply(getattr(self.manager, op)(*args, self.now, **kwargs))

    def deliver(self, count: int | None = None):
        """Reports the queued markers written (all, or the first `count`)."""
        todo = self.markers[:count] if count is not None else list(self.markers)
        del self.markers[:len(todo)]
        for m in todo:
            self.delivered.setdefault(m.transactional_id, set()).update(m.partitions)
            self.apply(self.manager.on_markers_written(
                m.transactional_id, m.producer_id, m.producer_epoch, self.now,
                coordinator_epoch=m.coordinator_epoch))

    def report(self, tid, pid, epoch, partitions, **kwargs):
        """Reports the markers of some partitions written (a WriteTxnMarkers response)."""
        self.delivered.setdefault(tid, set()).update(partitions)
        return self.apply(self.manager.on_markers_written(tid, pid, epoch, self.now,
                                                          partitions=partitions, **kwargs))

    def advance(self, ms: int):
        end = self.now + ms
        while True:
            due = sorted((d, k) for k, d in self.timers.items() if d <= end)
            if not due:
                break
            deadline, key = due[0]
            del self.timers[key]
            self.now = max(self.now, deadline)
            self.apply(self.manager.on_timer(key, self.now))
        self.now = end

    def load(self, p: int):
        self.epochs[p] = self.epochs.get(p, -1) + 1
        self.manager.begin_loading(p, self.epochs[p])
        for record in self.log[p]:
            self.manager.replay(record, p)
        return self.apply(self.manager.finish_loading(p, self.epochs[p], self.now))

    def reload(self, p: int = 0):
        self.manager.unload(p, self.epochs[p])
        self.markers = [m for m in self.markers
                        if self.manager.partition_for(m.transactional_id) != p]
        return self.load(p)

    # ---------------------------------------------------------------------- operations
    def init(self, tid=TID, timeout=TIMEOUT, expected=(-1, -1)) -> InitProducerIdResponse:
        return self.call("init_producer_id", tid, timeout, *expected)

    def add(self, tid, pid, epoch, partitions, verify_only=False):
        return self.call("add_partitions", tid, pid, epoch, partitions, verify_only)

    def end(self, tid, pid, epoch, commit=True):
        return self.call("end_txn", tid, pid, epoch, commit)

    def state(self, tid=TID):
        md = self.manager.metadata(tid)
        return None if md is None else md.state

    def records(self, tid=TID):
        return [r.value for r in self.log[self.manager.partition_for(tid)]
                if r.key.transactional_id == tid]

    def ongoing(self, tid=TID, partitions=(("t", 0), ("t", 1))):
        """A producer with an open transaction: (producer id, epoch)."""
        answer = self.init(tid)
        assert answer.error == E.NONE
        assert set(self.add(tid, answer.producer_id, answer.producer_epoch,
                            list(partitions)).values()) == {E.NONE}
        return answer.producer_id, answer.producer_epoch


# ------------------------------------------------------------------------ InitProducerId
def test_init_producer_id_new_transactional_id_gets_new_producer_id_at_epoch_0():
    h = Harness()
    assert h.init() == InitProducerIdResponse(E.NONE, 1000, 0)
    [value] = h.records()
    assert (value.producer_id, value.producer_epoch, value.state, value.txn_timeout_ms,
            value.txn_start_timestamp, value.txn_last_update_timestamp) == \
        (1000, 0, S.EMPTY, TIMEOUT, -1, T0)


def test_init_producer_id_again_bumps_the_epoch_of_the_same_producer_id():
    h = Harness()
    h.init()
    assert h.init(timeout=5000) == InitProducerIdResponse(E.NONE, 1000, 1)
    assert h.manager.metadata(TID).txn_timeout_ms == 5000


def test_init_producer_id_after_epoch_exhaustion_rotates_to_a_new_producer_id():
    h = Harness()
    h.init()
    h.manager.metadata(TID).producer_epoch = 32765
    assert h.init() == InitProducerIdResponse(E.NONE, 1000, 32766)     # the last usable epoch
    assert h.init() == InitProducerIdResponse(E.NONE, 1001, 0)
    md = h.manager.metadata(TID)
    assert (md.last_producer_id, md.last_producer_epoch) == (1000, -1)


def test_init_producer_id_kip360_retry_of_a_rotation_with_the_previous_producer_id():
    h = Harness()
    h.init()
    h.manager.metadata(TID).producer_epoch = 32766
    first = h.init(expected=(1000, 32766))
    assert first == InitProducerIdResponse(E.NONE, 1001, 0)
    assert h.manager.metadata(TID).last_producer_epoch == 32766
    # The client lost the answer and retries with what it had (the previous producer id and
    # its exhausted epoch): it gets the same answer again, not another bump.
    assert h.init(expected=(1000, 32766)) == InitProducerIdResponse(E.NONE, 1001, 0)
    assert h.init(expected=(1000, 5)).error == E.PRODUCER_FENCED


@pytest.mark.parametrize("timeout", [0, -1, 900_001])
def test_init_producer_id_timeout_outside_1_to_max_is_invalid_transaction_timeout(timeout):
    h = Harness()
    assert h.init(timeout=timeout) == InitProducerIdResponse(E.INVALID_TRANSACTION_TIMEOUT)
    assert h.manager.metadata(TID) is None and not h.log[0]
    assert h.init(timeout=900_000).error == E.NONE


def test_init_producer_id_empty_transactional_id_is_invalid_request():
    assert Harness().init(tid="").error == E.INVALID_REQUEST


def test_init_producer_id_without_transactional_id_is_idempotent_new_id_at_epoch_0():
    h = Harness()
    assert h.init(tid=None) == InitProducerIdResponse(E.NONE, 1000, 0)
    assert not h.log[0]


def test_init_producer_id_with_only_one_of_expected_id_and_epoch_is_invalid_request():
    h = Harness()
    assert h.init(expected=(5, -1)).error == E.INVALID_REQUEST
    assert h.init(expected=(-1, 5)).error == E.INVALID_REQUEST


def test_init_producer_id_allocation_failure_returns_its_error_and_keeps_nothing():
    h = Harness()
    h.pid_error = E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.init().error == E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.manager.metadata(TID) is None


def test_init_producer_id_on_ongoing_transaction_fences_aborts_and_answers_concurrent():
    h = Harness()
    pid, epoch = h.ongoing()
    assert h.init() == InitProducerIdResponse(E.CONCURRENT_TRANSACTIONS)
    last = h.records()[-1]
    assert (last.state, last.producer_epoch, last.partitions) == \
        (S.PREPARE_ABORT, epoch + 1, {("t", 0), ("t", 1)})
    [marker] = h.markers
    assert (marker.committed, marker.producer_epoch, marker.partitions) == \
        (False, epoch + 1, [("t", 0), ("t", 1)])
    # the fenced producer: its epoch is stale now
    assert h.end(TID, pid, epoch) == E.PRODUCER_FENCED
    assert h.init() == InitProducerIdResponse(E.CONCURRENT_TRANSACTIONS)   # markers in flight
    h.deliver()
    assert h.records()[-1].state is S.COMPLETE_ABORT
    assert h.init() == InitProducerIdResponse(E.NONE, pid, epoch + 2)


@pytest.mark.parametrize("state_maker", ["prepare", "pending"])
def test_init_producer_id_while_markers_in_flight_or_write_pending_is_concurrent(state_maker):
    h = Harness()
    pid, epoch = h.ongoing()
    if state_maker == "prepare":
        assert h.end(TID, pid, epoch) == E.NONE          # PrepareCommit, markers not written
    else:
        h.manager.metadata(TID).pending_state = S.PREPARE_COMMIT
    assert h.init() == InitProducerIdResponse(E.CONCURRENT_TRANSACTIONS)


def test_init_producer_id_prepare_commit_without_pending_state_is_concurrent():
    h = Harness()
    pid, epoch = h.ongoing()
    h.end(TID, pid, epoch)
    h.reload()                    # loaded in PrepareCommit: markers re-sent, Complete pending
    md = h.manager.metadata(TID)
    md.pending_state = None
    assert h.init().error == E.CONCURRENT_TRANSACTIONS


def test_init_producer_id_kip360_current_epoch_bumps_and_records_last_epoch():
    h = Harness()
    h.init()
    h.init()
    assert h.init(expected=(1000, 1)) == InitProducerIdResponse(E.NONE, 1000, 2)
    assert h.manager.metadata(TID).last_producer_epoch == 1


def test_init_producer_id_kip360_retry_with_last_epoch_gets_the_same_epoch_until_reload():
    h = Harness()
    h.init()
    h.init(expected=(1000, 0))
    assert h.init(expected=(1000, 0)) == InitProducerIdResponse(E.NONE, 1000, 1)
    h.reload()                    # the last epoch is not in the v0 record
    assert h.init(expected=(1000, 0)).error == E.PRODUCER_FENCED


def test_init_producer_id_kip360_stale_epoch_or_unknown_producer_id_is_producer_fenced():
    h = Harness()
    h.init()
    h.init()
    h.init()
    assert h.init(expected=(1000, 0)).error == E.PRODUCER_FENCED
    assert h.init(expected=(4242, 2)).error == E.PRODUCER_FENCED
    assert h.manager.metadata(TID).pending_state is None


def test_init_producer_id_kip360_for_an_expired_transactional_id_gets_a_new_producer_id():
    h = Harness()
    assert h.init(expected=(77, 3)) == InitProducerIdResponse(E.NONE, 1000, 0)


@pytest.mark.parametrize("append_error, client_error", [
    (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.COORDINATOR_NOT_AVAILABLE),
    (E.REQUEST_TIMED_OUT, E.COORDINATOR_NOT_AVAILABLE),
    (E.UNKNOWN_TOPIC_OR_PARTITION, E.COORDINATOR_NOT_AVAILABLE),
    (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
    (E.KAFKA_STORAGE_ERROR, E.NOT_COORDINATOR),
    (E.MESSAGE_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
    (E.RECORD_LIST_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
    (E.INVALID_REQUIRED_ACKS, E.INVALID_REQUIRED_ACKS),
])
def test_init_producer_id_failed_append_maps_error_and_clears_pending_state(append_error,
                                                                             client_error):
    assert map_append_error(append_error) == client_error
    h = Harness()
    h.init()
    h.fail_next = [append_error]
    assert h.init() == InitProducerIdResponse(client_error)
    md = h.manager.metadata(TID)
    assert (md.producer_epoch, md.pending_state) == (0, None)
    assert h.init() == InitProducerIdResponse(E.NONE, 1000, 1)


def test_first_init_whose_append_fails_leaves_an_epochless_id_that_a_retry_initialises():
    h = Harness()
    h.fail_next = [E.NOT_ENOUGH_REPLICAS]
    assert h.init().error == E.COORDINATOR_NOT_AVAILABLE
    assert h.manager.metadata(TID).producer_epoch == -1          # as Kafka keeps it
    assert h.init() == InitProducerIdResponse(E.NONE, 1000, 0)


def test_failed_epoch_fence_is_not_bumped_twice():
    h = Harness()
    pid, epoch = h.ongoing()
    h.fail_next = [E.NOT_ENOUGH_REPLICAS]
    assert h.init().error == E.COORDINATOR_NOT_AVAILABLE
    md = h.manager.metadata(TID)
    assert (md.state, md.producer_epoch, md.has_failed_epoch_fence, md.pending_state) == \
        (S.ONGOING, epoch + 1, True, None)
    assert h.records()[-1].producer_epoch == epoch                # never written
    assert h.init().error == E.CONCURRENT_TRANSACTIONS
    assert h.records()[-1].producer_epoch == epoch + 1            # not epoch + 2
    h.deliver()
    assert not h.manager.metadata(TID).has_failed_epoch_fence
    assert h.init() == InitProducerIdResponse(E.NONE, pid, epoch + 2)


def test_init_producer_id_epoch_exhausted_with_another_expected_epoch_raises_as_kafka():
    h = Harness()
    h.init()
    h.manager.metadata(TID).producer_epoch = 32766
    with pytest.raises(IllegalTransactionState):
        h.init(expected=(1000, 100))


def test_init_after_a_transaction_keeps_its_start_time_in_memory_but_writes_minus_one():
    h = Harness()
    pid, epoch = h.ongoing()
    h.end(TID, pid, epoch)
    h.deliver()
    h.now += 50
    h.init()
    assert h.records()[-1].txn_start_timestamp == -1
    assert h.manager.describe([TID])[0].transaction_start_time_ms == T0    # as Kafka's
    h.reload()
    assert h.manager.describe([TID])[0].transaction_start_time_ms == -1


# -------------------------------------------------------------------- AddPartitionsToTxn
def test_add_partitions_moves_to_ongoing_with_start_time_and_writes_the_partitions():
    h = Harness()
    a = h.init()
    h.now += 10
    assert h.add(TID, a.producer_id, 0, [("t", 0), ("u", 3)]) == {("t", 0): E.NONE,
                                                                  ("u", 3): E.NONE}
    last = h.records()[-1]
    assert (last.state, last.partitions, last.txn_start_timestamp) == \
        (S.ONGOING, {("t", 0), ("u", 3)}, T0 + 10)
    h.now += 10
    assert h.add(TID, a.producer_id, 0, [("t", 1)]) == {("t", 1): E.NONE}
    last = h.records()[-1]
    assert last.partitions == {("t", 0), ("t", 1), ("u", 3)}
    assert (last.txn_start_timestamp, last.txn_last_update_timestamp) == (T0 + 10, T0 + 20)


def test_add_partitions_already_in_the_transaction_answers_none_without_a_write():
    h = Harness()
    h.ongoing()
    count = len(h.log[0])
    assert h.add(TID, 1000, 0, [("t", 1)]) == {("t", 1): E.NONE}
    assert len(h.log[0]) == count


@pytest.mark.parametrize("tid, pid, epoch, error", [
    ("unknown", 1000, 0, E.INVALID_PRODUCER_ID_MAPPING),
    (TID, 999, 0, E.INVALID_PRODUCER_ID_MAPPING),
    (TID, 1000, 1, E.PRODUCER_FENCED),
    (TID, 1000, -1, E.PRODUCER_FENCED),
    ("", 1000, 0, E.INVALID_REQUEST),
])
def test_add_partitions_errors_apply_to_every_partition(tid, pid, epoch, error):
    h = Harness()
    h.init()
    assert h.add(tid, pid, epoch, [("t", 0), ("t", 1)]) == {("t", 0): error, ("t", 1): error}
    assert h.state() is S.EMPTY


def test_add_partitions_during_prepare_or_pending_write_is_concurrent_transactions():
    h = Harness()
    pid, epoch = h.ongoing()
    h.end(TID, pid, epoch)
    assert h.add(TID, pid, epoch, [("t", 5)]) == {("t", 5): E.CONCURRENT_TRANSACTIONS}
    assert h.call("add_offsets", TID, pid, epoch, "g") == E.CONCURRENT_TRANSACTIONS


def waiting_add():
    """A committed transaction waiting for its markers, and an AddPartitionsToTxn of the next
    one made with a token (as the broker's handler makes it): (harness, pid, epoch, token)."""
    h = Harness()
    pid, epoch = h.ongoing()
    h.end(TID, pid, epoch)
    token = object()
    assert h.call("add_partitions", TID, pid, epoch, [("t", 5)], False, token=token) is None
    return h, pid, epoch, token


def test_add_partitions_with_a_token_waits_for_the_markers_then_starts_the_next_transaction():
    h, pid, epoch, token = waiting_add()
    h.advance(5)
    assert token not in h.answers and h.state() is S.PREPARE_COMMIT
    h.deliver()                       # markers written: CompleteCommit, then the waiting add
    assert h.answers[token] == {("t", 5): E.NONE}
    assert [r.state for r in h.records()][-2:] == [S.COMPLETE_COMMIT, S.ONGOING]
    assert h.manager.metadata(TID).partitions == {("t", 5)}
    h.advance(100)                    # its wait timer finds nothing left to answer
    assert len(h.answers) == 1


def test_add_offsets_with_a_token_waits_too_and_is_answered_with_an_error_code():
    h = Harness()
    pid, epoch = h.ongoing()
    h.end(TID, pid, epoch, commit=False)
    token = object()
    assert h.call("add_offsets", TID, pid, epoch, "g", token=token) is None
    h.deliver()
    assert h.answers[token] == E.NONE
    assert h.manager.metadata(TID).partitions == {(OFFSETS_TOPIC, partition_for("g", 50))}


def test_a_waiting_add_is_answered_concurrent_transactions_when_its_wait_ends():
    h, pid, epoch, token = waiting_add()
    h.advance(h.config.concurrent_wait_ms - 1)
    assert token not in h.answers
    h.advance(1)
    assert h.answers[token] == {("t", 5): E.CONCURRENT_TRANSACTIONS}
    h.deliver()                       # the transaction completes; nothing is added to it
    assert h.state() is S.COMPLETE_COMMIT and h.records()[-1].state is S.COMPLETE_COMMIT


def test_a_waiting_add_keeps_its_deadline_through_a_failed_completion_write():
    h, pid, epoch, token = waiting_add()
    h.fail_next.append(E.NOT_ENOUGH_REPLICAS)     # CompleteCommit: COORDINATOR_NOT_AVAILABLE
    h.deliver()
    assert token not in h.answers and h.state() is S.PREPARE_COMMIT
    h.advance(h.config.concurrent_wait_ms)
    assert h.answers[token] == {("t", 5): E.CONCURRENT_TRANSACTIONS}
    h.advance(h.config.complete_retry_backoff_ms)  # the completion is written on retry
    assert h.state() is S.COMPLETE_COMMIT


def test_a_waiting_add_is_answered_when_its_wait_ends_after_the_coordinator_moved():
    h, pid, epoch, token = waiting_add()
    h.manager.unload(0)
    h.advance(h.config.concurrent_wait_ms)
    assert h.answers[token] == {("t", 5): E.CONCURRENT_TRANSACTIONS}   # the retry: elsewhere
    assert h.add(TID, pid, epoch, [("t", 5)]) == {("t", 5): E.NOT_COORDINATOR}


def test_add_partitions_without_a_token_or_with_verify_only_never_waits():
    h = Harness()
    pid, epoch = h.ongoing()
    h.end(TID, pid, epoch)
    assert h.add(TID, pid, epoch, [("t", 5)]) == {("t", 5): E.CONCURRENT_TRANSACTIONS}
    assert h.call("add_partitions", TID, pid, epoch, [("t", 0)], True, token=object()) == \
        {("t", 0): E.CONCURRENT_TRANSACTIONS}
    assert not h.answers


def test_add_partitions_after_complete_starts_a_new_transaction_with_a_new_start_time():
    h = Harness()
    pid, epoch = h.ongoing()
    h.end(TID, pid, epoch)
    h.deliver()
    h.now += 500
    h.add(TID, pid, epoch, [("x", 0)])
    last = h.records()[-1]
    assert (last.state, last.partitions, last.txn_start_timestamp) == \
        (S.ONGOING, {("x", 0)}, T0 + 500)


def test_add_partitions_failed_append_leaves_the_transaction_unchanged():
    h = Harness()
    pid, epoch = h.ongoing()
    h.fail_next = [E.REQUEST_TIMED_OUT]
    assert h.add(TID, pid, epoch, [("z", 0)]) == {("z", 0): E.COORDINATOR_NOT_AVAILABLE}
    md = h.manager.metadata(TID)
    assert (md.partitions, md.pending_state) == ({("t", 0), ("t", 1)}, None)


def test_not_attempted_marks_the_others_when_some_partitions_fail_handler_checks():
    assert not_attempted([("t", 0), ("nope", 0)], {("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}) \
        == {("t", 0): E.OPERATION_NOT_ATTEMPTED, ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}


def test_verify_only_answers_membership_without_any_change():
    h = Harness()
    pid, epoch = h.ongoing()
    count = len(h.log[0])
    assert h.add(TID, pid, epoch, [("t", 0), ("t", 9)], verify_only=True) == {
        ("t", 0): E.NONE, ("t", 9): E.TRANSACTION_ABORTABLE}
    assert len(h.log[0]) == count and h.manager.metadata(TID).partitions == {("t", 0), ("t", 1)}


@pytest.mark.parametrize("tid, pid, epoch, error", [
    ("unknown", 1000, 0, E.INVALID_PRODUCER_ID_MAPPING),
    (TID, 999, 0, E.INVALID_PRODUCER_ID_MAPPING),
    (TID, 1000, 3, E.PRODUCER_FENCED),
    ("", 1000, 0, E.INVALID_REQUEST),
])
def test_verify_only_errors(tid, pid, epoch, error):
    h = Harness()
    h.ongoing()
    assert h.add(tid, pid, epoch, [("t", 0)], verify_only=True) == {("t", 0): error}


def test_verify_only_during_prepare_is_concurrent_and_ignores_a_pending_write():
    h = Harness()
    pid, epoch = h.ongoing()
    h.manager.metadata(TID).pending_state = S.ONGOING
    assert h.add(TID, pid, epoch, [("t", 0)], verify_only=True) == {("t", 0): E.NONE}
    h.manager.metadata(TID).pending_state = None
    h.end(TID, pid, epoch)
    assert h.add(TID, pid, epoch, [("t", 0)], verify_only=True) == {
        ("t", 0): E.CONCURRENT_TRANSACTIONS}


def test_verify_only_on_empty_transaction_is_transaction_abortable():
    h = Harness()
    a = h.init()
    assert h.add(TID, a.producer_id, 0, [("t", 0)], verify_only=True) == {
        ("t", 0): E.TRANSACTION_ABORTABLE}


# ----------------------------------------------------------------------- AddOffsetsToTxn
def test_add_offsets_adds_the_groups_consumer_offsets_partition():
    h = Harness()
    a = h.init()
    assert h.call("add_offsets", TID, a.producer_id, 0, "my-group") == E.NONE
    assert h.manager.metadata(TID).partitions == {(OFFSETS_TOPIC, partition_for("my-group", 50))}
    assert h.call("add_offsets", TID, a.producer_id, 5, "my-group") == E.PRODUCER_FENCED
    assert h.call("add_offsets", "nope", 1, 0, "g") == E.INVALID_PRODUCER_ID_MAPPING


# -------------------------------------------------------------------------------- EndTxn
def test_commit_writes_prepare_commit_answers_then_markers_then_complete_commit():
    h = Harness()
    pid, epoch = h.ongoing()
    h.now += 7
    assert h.end(TID, pid, epoch, commit=True) == E.NONE
    prepare = h.records()[-1]
    assert (prepare.state, prepare.partitions, prepare.txn_last_update_timestamp) == \
        (S.PREPARE_COMMIT, {("t", 0), ("t", 1)}, T0 + 7)
    [marker] = h.markers
    assert (marker.transactional_id, marker.producer_id, marker.producer_epoch,
            marker.coordinator_epoch, marker.committed, marker.partitions) == \
        (TID, pid, epoch, 0, True, [("t", 0), ("t", 1)])
    md = h.manager.metadata(TID)
    assert (md.state, md.pending_state) == (S.PREPARE_COMMIT, S.COMPLETE_COMMIT)
    h.now += 3
    h.deliver()
    complete = h.records()[-1]
    assert (complete.state, complete.partitions, complete.txn_start_timestamp,
            complete.txn_last_update_timestamp) == (S.COMPLETE_COMMIT, frozenset(), T0, T0 + 7)
    assert (md.state, md.pending_state, md.partitions) == (S.COMPLETE_COMMIT, None, set())


def test_abort_writes_prepare_abort_then_abort_markers_then_complete_abort():
    h = Harness()
    pid, epoch = h.ongoing()
    assert h.end(TID, pid, epoch, commit=False) == E.NONE
    assert h.records()[-1].state is S.PREPARE_ABORT and not h.markers[0].committed
    h.deliver()
    assert h.records()[-1].state is S.COMPLETE_ABORT


@pytest.mark.parametrize("first, again, answer", [
    (True, True, E.NONE), (True, False, E.INVALID_TXN_STATE),
    (False, False, E.NONE), (False, True, E.INVALID_TXN_STATE),
])
def test_end_txn_repeated_after_completion(first, again, answer):
    h = Harness()
    pid, epoch = h.ongoing()
    h.end(TID, pid, epoch, first)
    h.deliver()
    count = len(h.log[0])
    assert h.end(TID, pid, epoch, again) == answer
    assert len(h.log[0]) == count


@pytest.mark.parametrize("first, again, answer", [
    (True, True, E.CONCURRENT_TRANSACTIONS), (True, False, E.INVALID_TXN_STATE),
    (False, False, E.CONCURRENT_TRANSACTIONS), (False, True, E.INVALID_TXN_STATE),
])
def test_end_txn_repeated_while_markers_are_written(first, again, answer):
    h = Harness()
    pid, epoch = h.ongoing()
    h.end(TID, pid, epoch, first)
    h.manager.metadata(TID).pending_state = None       # as after a reload's failed write
    assert h.end(TID, pid, epoch, again) == answer
    h.manager.metadata(TID).pending_state = S.COMPLETE_COMMIT if first else S.COMPLETE_ABORT
    assert h.end(TID, pid, epoch, again) == E.CONCURRENT_TRANSACTIONS


def test_end_txn_on_empty_transaction_is_invalid_txn_state():
    h = Harness()
    a = h.init()
    assert h.end(TID, a.producer_id, 0) == E.INVALID_TXN_STATE
    assert h.end(TID, a.producer_id, 0, commit=False) == E.INVALID_TXN_STATE


@pytest.mark.parametrize("tid, pid, epoch, error", [
    ("unknown", 1000, 0, E.INVALID_PRODUCER_ID_MAPPING),
    (TID, 999, 0, E.INVALID_PRODUCER_ID_MAPPING),
    (TID, 1000, 1, E.PRODUCER_FENCED),                # a client's epoch must match exactly
    ("", 1000, 0, E.INVALID_REQUEST),
])
def test_end_txn_errors_change_nothing(tid, pid, epoch, error):
    h = Harness()
    h.ongoing()
    count = len(h.log[0])
    assert h.end(tid, pid, epoch) == error
    assert len(h.log[0]) == count and h.state() is S.ONGOING and not h.markers


def test_end_txn_failed_prepare_append_keeps_ongoing_and_sends_no_markers():
    h = Harness()
    pid, epoch = h.ongoing()
    h.fail_next = [E.NOT_LEADER_OR_FOLLOWER]
    assert h.end(TID, pid, epoch) == E.NOT_COORDINATOR
    md = h.manager.metadata(TID)
    assert (md.state, md.pending_state) == (S.ONGOING, None) and not h.markers
    assert h.end(TID, pid, epoch) == E.NONE


def test_markers_written_partition_by_partition_complete_after_the_last():
    h = Harness()
    pid, epoch = h.ongoing()
    h.end(TID, pid, epoch)
    h.report(TID, pid, epoch, [("t", 0)])
    assert h.records()[-1].state is S.PREPARE_COMMIT
    [described] = h.manager.describe([TID])
    assert described.topics == [("t", [1])]           # only partitions still waiting
    h.report(TID, pid, epoch, [("t", 1)])
    assert h.records()[-1].state is S.COMPLETE_COMMIT


def test_stale_marker_reports_are_ignored():
    h = Harness()
    pid, epoch = h.ongoing()
    h.end(TID, pid, epoch)
    m = h.markers[0]
    count = len(h.log[0])
    for kwargs in ({"coordinator_epoch": 7}, {}):
        other_epoch = epoch + 1 if not kwargs else epoch
        h.apply(h.manager.on_markers_written(TID, pid, other_epoch, h.now, **kwargs))
    h.apply(h.manager.on_markers_written("other", pid, epoch, h.now))
    assert len(h.log[0]) == count
    h.deliver()
    assert h.records()[-1].state is S.COMPLETE_COMMIT
    h.apply(h.manager.on_markers_written(TID, m.producer_id, m.producer_epoch, h.now))
    assert len(h.log[0]) == count + 1                  # reported twice: written once


def test_complete_append_not_available_is_retried_after_backoff():
    h = Harness()
    pid, epoch = h.ongoing()
    h.end(TID, pid, epoch)
    h.fail_next = [E.NOT_ENOUGH_REPLICAS, E.REQUEST_TIMED_OUT]
    h.deliver()
    md = h.manager.metadata(TID)
    assert (md.state, md.pending_state) == (S.PREPARE_COMMIT, S.COMPLETE_COMMIT)
    assert h.init().error == E.CONCURRENT_TRANSACTIONS
    h.advance(100)                                     # second try fails too
    assert md.state is S.PREPARE_COMMIT
    h.advance(100)
    assert (md.state, md.pending_state) == (S.COMPLETE_COMMIT, None)
    assert [v.state for v in h.records()].count(S.COMPLETE_COMMIT) == 1


def test_complete_append_not_coordinator_gives_up_until_the_next_load():
    h = Harness()
    pid, epoch = h.ongoing()
    h.end(TID, pid, epoch)
    h.fail_next = [E.NOT_LEADER_OR_FOLLOWER]
    h.deliver()
    md = h.manager.metadata(TID)
    assert (md.state, md.pending_state) == (S.PREPARE_COMMIT, None)
    h.reload()                                         # the new leader resends the markers
    h.deliver()
    assert h.state() is S.COMPLETE_COMMIT


def test_transaction_without_partitions_completes_without_markers():
    h = Harness()
    a = h.init()
    assert h.add(TID, a.producer_id, 0, []) == {}
    assert h.state() is S.ONGOING
    assert h.end(TID, a.producer_id, 0) == E.NONE
    assert not h.markers and h.state() is S.COMPLETE_COMMIT
    assert [v.state for v in h.records()] == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT,
                                              S.COMPLETE_COMMIT]


# -------------------------------------------------------------------------------- timers
def test_start_arms_both_periodic_timers_and_early_wakeups_rearm():
    h = Harness()
    assert h.timers == {("txn-abort-timed-out",): T0 + 10_000, ("txn-expire-ids",): T0 + 3_600_000}
    result = h.manager.on_timer(("txn-abort-timed-out",), T0 + 1)
    assert result.timers == [(("txn-abort-timed-out",), T0 + 10_000)]
    with pytest.raises(ValueError):
        h.manager.on_timer(("nope",), T0)


def test_timed_out_transaction_is_aborted_with_bumped_epoch_and_producer_is_fenced():
    h = Harness()
    pid, epoch = h.ongoing()
    h.advance(60_000)                        # start + timeout == now: not yet (strictly less)
    assert h.state() is S.ONGOING
    h.advance(10_000)
    prepare = [v for v in h.records() if v.state is S.PREPARE_ABORT][0]
    assert prepare.producer_epoch == epoch + 1
    assert h.markers[0].producer_epoch == epoch + 1 and not h.markers[0].committed
    h.deliver()
    assert h.state() is S.COMPLETE_ABORT
    assert h.end(TID, pid, epoch) == E.PRODUCER_FENCED
    assert h.add(TID, pid, epoch, [("t", 0)]) == {("t", 0): E.PRODUCER_FENCED}
    assert h.init() == InitProducerIdResponse(E.NONE, pid, epoch + 2)


def test_timeout_abort_skips_transactions_with_a_write_in_flight():
    h = Harness()
    h.ongoing()
    h.manager.metadata(TID).pending_state = S.ONGOING
    h.advance(80_000)
    assert h.state() is S.ONGOING and not h.markers


def test_idle_transactional_ids_expire_with_a_tombstone_but_open_ones_do_not():
    h = Harness(num_partitions=3)
    h.init("idle")
    h.ongoing("open")
    h.init("fresh")
    h.now += 604_800_000 - 3_600_000
    h.init("fresh")
    h.advance(3_600_000)          # the first expiry run after 7 days
    assert h.manager.metadata("idle") is None
    assert h.records("idle")[-1] is None
    assert h.manager.metadata("fresh") is not None and h.records("fresh")[-1] is not None
    # "open" was aborted by its timeout long ago, then expired too
    assert h.manager.metadata("open") is not None
    h.deliver()
    h.advance(604_800_000)
    assert h.manager.metadata("open") is None
    assert h.init("idle") == InitProducerIdResponse(E.NONE, 1003, 0)   # a brand-new producer id


def test_failed_tombstone_keeps_the_transactional_id():
    h = Harness()
    h.init()
    h.fail_next = [E.NOT_ENOUGH_REPLICAS]
    h.advance(604_800_000)                        # the run that finds it idle for 7 days
    md = h.manager.metadata(TID)
    assert md is not None and md.pending_state is None
    h.advance(3_600_000)
    assert h.manager.metadata(TID) is None


def test_expiration_interval_and_abort_interval_come_from_config():
    h = Harness(abort_timed_out_transaction_cleanup_interval_ms=1000,
                remove_expired_transaction_cleanup_interval_ms=2000,
                transactional_id_expiration_ms=5000)
    h.init()
    h.advance(6000)
    assert h.manager.metadata(TID) is None


# ------------------------------------------------------------------ loading, ownership
def test_requests_for_a_loading_partition_get_load_in_progress_and_others_not_coordinator():
    h = Harness(num_partitions=2)
    tid = next(t for t in (f"t{i}" for i in range(100)) if h.manager.partition_for(t) == 1)
    h.manager.unload(1)
    assert h.init(tid).error == E.NOT_COORDINATOR
    assert h.end(tid, 1, 0) == E.NOT_COORDINATOR
    assert h.manager.describe([tid])[0].error == E.NOT_COORDINATOR
    h.manager.begin_loading(1, 5)
    assert h.manager.coordinator_error(tid) == E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.init(tid).error == E.COORDINATOR_LOAD_IN_PROGRESS
    assert h.add(tid, 1, 0, [("t", 0)]) == {("t", 0): E.COORDINATOR_LOAD_IN_PROGRESS}
    assert h.manager.list_transactions([], [], -1, h.now).error == \
        E.COORDINATOR_LOAD_IN_PROGRESS
    h.apply(h.manager.finish_loading(1, 4, h.now))         # a superseded load: nothing
    assert h.manager.coordinator_error(tid) == E.COORDINATOR_LOAD_IN_PROGRESS
    h.apply(h.manager.finish_loading(1, 5, h.now))
    assert h.init(tid).error == E.NONE


def test_loading_resends_markers_for_prepare_states_and_completes_them():
    h = Harness(num_partitions=3)
    committing, aborting = "c-1", "a-1"
    pc, ec = h.ongoing(committing)
    pa, ea = h.ongoing(aborting, partitions=[("u", 2)])
    h.end(committing, pc, ec, True)
    h.end(aborting, pa, ea, False)
    h.markers.clear()                         # the old leader died before writing them
    for p in range(3):
        h.reload(p)
    assert sorted((m.transactional_id, m.committed, tuple(m.partitions),
                   m.coordinator_epoch) for m in h.markers) == [
        ("a-1", False, (("u", 2),), 1), ("c-1", True, (("t", 0), ("t", 1)), 1)]
    h.deliver()
    assert h.state(committing) is S.COMPLETE_COMMIT and h.state(aborting) is S.COMPLETE_ABORT


def test_loaded_prepare_epoch_fence_is_left_alone_as_kafka_does():
    h = Harness()
    h.log[0].append(Record(TxnKey(TID), TxnValue(5, 1, TIMEOUT, S.PREPARE_EPOCH_FENCE,
                                                 frozenset({("t", 0)}), T0, T0)))
    h.reload()
    assert not h.markers and h.state() is S.PREPARE_EPOCH_FENCE


def test_replay_keeps_the_latest_value_and_a_tombstone_removes():
    h = Harness()
    h.init()
    h.init()
    h.init("other")
    h.log[0].append(tombstone("other"))
    h.reload()
    assert h.manager.metadata(TID).producer_epoch == 1
    assert h.manager.metadata("other") is None
    with pytest.raises(ValueError, match="not being loaded"):
        h.manager.replay(h.log[0][0], 0)


def test_loading_from_the_logs_batches_replays_every_record():
    h = Harness()
    pid, epoch = h.ongoing()
    h.end(TID, pid, epoch, commit=False)
    h.init("other")
    fresh = TransactionManager(h.config, lambda: 0)
    fresh.begin_loading(0, 3)
    buf = b"".join(build_batch([r], T0) for r in h.log[0])
    assert replay_buffer(fresh, buf, 0) == len(h.log[0])
    result = fresh.finish_loading(0, 3, T0)
    [marker] = result.markers
    assert (marker.committed, marker.coordinator_epoch) == (False, 3)
    assert fresh.metadata("other").producer_epoch == 0


def test_config_from_broker_properties_keeps_defaults_for_undeclared_ones():
    class BrokerConfig:
        values = {"transaction.max.timeout.ms": 1000,
                  "transaction.state.log.num.partitions": 3}

        def get(self, name):
            return self.values[name]
    config = txn_config_from(BrokerConfig())
    assert (config.transaction_max_timeout_ms, config.transaction_state_log_num_partitions,
            config.transactional_id_expiration_ms) == (1000, 3, 604_800_000)
    assert TxnConfig() == TxnConfig(900_000, 604_800_000, 10_000, 3_600_000, 50)


def test_append_completing_after_unload_answers_not_coordinator_and_changes_nothing():
    h = Harness()
    h.init()
    pending = h.manager.init_producer_id(TID, TIMEOUT, -1, -1, h.now)
    h.manager.unload(0)
    [append] = pending.appends
    assert append.on_append(E.NONE, h.now).response.error == E.NOT_COORDINATOR
    h.load(0)
    assert h.manager.metadata(TID).producer_epoch == 0


def test_end_txn_follow_up_after_reload_at_a_new_epoch_sends_no_markers():
    h = Harness()
    pid, epoch = h.ongoing()
    pending = h.manager.end_txn(TID, pid, epoch, True, h.now)
    h.reload()
    follow = pending.appends[0].on_append(E.NONE, h.now)
    assert follow.response == E.NOT_COORDINATOR and not follow.markers


def test_markers_of_an_unloaded_partition_are_forgotten():
    h = Harness()
    pid, epoch = h.ongoing()
    h.end(TID, pid, epoch)
    marker = h.markers[0]
    h.manager.unload(0)
    assert not h.manager.on_markers_written(TID, pid, epoch, h.now).appends
    h.load(0)
    result = h.manager.on_markers_written(TID, pid, epoch, h.now,
                                          coordinator_epoch=marker.coordinator_epoch)
    assert not result.appends                         # an earlier epoch's report


# ---------------------------------------------------------------------- Describe, List
def test_describe_shows_kafkas_fields():
    h = Harness()
    pid, epoch = h.ongoing(partitions=[("b", 1), ("a", 2), ("b", 0)])
    [d] = h.manager.describe([TID])
    assert (d.transactional_id, d.error, d.state, d.producer_id, d.producer_epoch,
            d.transaction_timeout_ms, d.transaction_start_time_ms, d.topics) == \
        (TID, E.NONE, "Ongoing", pid, epoch, TIMEOUT, T0, [("a", [2]), ("b", [0, 1])])
    assert [(x.error, x.state) for x in h.manager.describe(["nope", ""])] == [
        (E.TRANSACTIONAL_ID_NOT_FOUND, ""), (E.INVALID_REQUEST, "")]


def test_list_transactions_filters_by_state_producer_id_and_duration():
    h = Harness(num_partitions=2)
    pa, _ = h.ongoing("a")
    h.now += 1000
    h.init("b")
    pc, ec = h.ongoing("c")
    h.now += 1000

    def listed(states=(), pids=(), duration=-1):
        answer = h.manager.list_transactions(list(states), list(pids), duration, h.now)
        return answer.error, sorted((t.transactional_id, t.state) for t in answer.transactions), \
            answer.unknown_state_filters
    assert listed() == (E.NONE, [("a", "Ongoing"), ("b", "Empty"), ("c", "Ongoing")], [])
    assert listed(states=["Empty", "Bogus"]) == (E.NONE, [("b", "Empty")], ["Bogus"])
    assert listed(pids=[pa]) == (E.NONE, [("a", "Ongoing")], [])
    # running longer than 1500 ms: "a" (2000 ms); "b" has no start time (-1): always included
    assert listed(states=["Ongoing"], duration=1500) == (E.NONE, [("a", "Ongoing")], [])
    assert listed(duration=1500)[1] == [("a", "Ongoing"), ("b", "Empty")]


# -------------------------------------------------------------- random operation sequences
def persisted_view(md):
    return (md.producer_id, md.producer_epoch, md.txn_timeout_ms, md.state,
            frozenset(md.partitions), md.txn_start_timestamp, md.txn_last_update_timestamp)


TIDS = ["alpha", "beta", "gamma"]
PARTS = [("t", 0), ("t", 1), ("u", 0)]
WHO = st.sampled_from([0, 0, 0, 1])            # producer 1 is mostly the zombie
APPEND_ERRORS = [E.NOT_ENOUGH_REPLICAS, E.NOT_LEADER_OR_FOLLOWER, E.REQUEST_TIMED_OUT,
                 E.MESSAGE_TOO_LARGE]


class TransactionMachine(RuleBasedStateMachine):
    """Producers (two per transactional id, so one may be a zombie) doing random operations,
    markers delivered late, time passing, appends failing and partitions reloading."""

    def __init__(self):
        super().__init__()
        self.h = Harness(num_partitions=2, transactional_id_expiration_ms=400_000,
                         remove_expired_transaction_cleanup_interval_ms=50_000)
        self.producers: dict[tuple[str, int], tuple[int, int]] = {}
        self.max_epoch: dict[int, int] = {}          # producer id -> highest epoch seen
        self.checked = 0                             # log records already checked
        self.waiting: dict = {}                      # token -> (deadline, partitions)

    def producer(self, tid, who):
        return self.producers.get((tid, who), (4242, 0))

    def note_answer(self, tid, who, answer):
        assert answer is not None, "every request is answered"
        if answer.error == E.NONE:
            self.producers[(tid, who)] = (answer.producer_id, answer.producer_epoch)
            assert answer.producer_epoch >= self.max_epoch.get(answer.producer_id, 0)

    @rule(tid=st.sampled_from(TIDS), commit=st.booleans(),
          parts=st.lists(st.sampled_from(PARTS), min_size=1, max_size=3))
    def whole_transaction(self, tid, commit, parts):
        """Producer 0 (re)starts and runs a transaction up to its EndTxn."""
        answer = self.h.init(tid)
        self.note_answer(tid, 0, answer)
        if answer.error == E.NONE:
            pid, epoch = answer.producer_id, answer.producer_epoch
            if set(self.h.add(tid, pid, epoch, parts).values()) == {E.NONE}:
                assert self.h.end(tid, pid, epoch, commit) is not None

    @rule(tid=st.sampled_from(TIDS), who=WHO, recover=st.booleans(),
          timeout=st.sampled_from([10_000, 60_000, 1_000_000]))
    def init(self, tid, who, recover, timeout):
        expected = self.producer(tid, who) if recover and (tid, who) in self.producers \
            else (-1, -1)
        answer = self.h.init(tid, timeout, expected)
        if timeout > 900_000:
            assert answer.error == E.INVALID_TRANSACTION_TIMEOUT
        self.note_answer(tid, who, answer)

    @rule(tid=st.sampled_from(TIDS), who=WHO,
          parts=st.lists(st.sampled_from(PARTS), max_size=3), verify=st.booleans())
    def add_partitions(self, tid, who, parts, verify):
        pid, epoch = self.producer(tid, who)
        answer = self.h.add(tid, pid, epoch, parts, verify_only=verify)
        assert answer is not None and set(answer) == set(parts)

    @rule(tid=st.sampled_from(TIDS), who=WHO,
          parts=st.lists(st.sampled_from(PARTS), min_size=1, max_size=3))
    def add_partitions_waiting(self, tid, who, parts):
        """As the broker's handler calls it: with a token, so it may wait."""
        pid, epoch = self.producer(tid, who)
        token = object()
        answer = self.h.call("add_partitions", tid, pid, epoch, parts, False, token=token)
        if answer is None:
            self.waiting[token] = (self.h.now + self.h.config.concurrent_wait_ms, set(parts))
        else:
            assert set(answer) == set(parts) and \
                set(answer.values()) != {E.CONCURRENT_TRANSACTIONS}

    @rule(tid=st.sampled_from(TIDS), who=WHO, group=st.sampled_from(["g1", "g2"]))
    def add_offsets(self, tid, who, group):
        pid, epoch = self.producer(tid, who)
        assert self.h.call("add_offsets", tid, pid, epoch, group) is not None

    @rule(tid=st.sampled_from(TIDS), who=WHO, commit=st.booleans())
    def end_txn(self, tid, who, commit):
        pid, epoch = self.producer(tid, who)
        assert self.h.end(tid, pid, epoch, commit) is not None

    @precondition(lambda self: self.h.markers)
    @rule(count=st.integers(1, 3))
    def deliver_markers(self, count):
        self.h.deliver(count)

    @rule(ms=st.sampled_from([1, 5_000, 30_000, 200_000]))
    def advance(self, ms):
        self.h.advance(ms)

    @rule(error=st.sampled_from(APPEND_ERRORS))
    def fail_next_append(self, error):
        self.h.fail_next.append(error)

    @rule(p=st.integers(0, 1))
    def reload(self, p):
        self.h.fail_next.clear()
        self.h.reload(p)

    # ------------------------------------------------------------------------ invariants
    @invariant()
    def a_waiting_request_is_answered_by_its_deadline_for_its_partitions(self):
        for token, (deadline, parts) in self.waiting.items():
            answer = self.h.answers.get(token)
            if answer is None:
                assert self.h.now < deadline
            else:
                assert set(answer) == parts

    @invariant()
    def persisted_states_follow_the_transition_table_and_epochs_never_decrease(self):
        records = [r for p in sorted(self.h.log) for r in self.h.log[p]]
        previous: dict[str, S] = {}
        epochs: dict[int, int] = {}
        for record in records:
            tid, value = record.key.transactional_id, record.value
            if value is None:
                previous.pop(tid, None)
                continue
            before = previous.get(tid, S.EMPTY)      # a new id starts Empty, in memory
            assert before in VALID_PREVIOUS_STATES[value.state], (tid, before, value.state)
            previous[tid] = value.state
            assert value.producer_epoch >= epochs.get(value.producer_id, 0)
            epochs[value.producer_id] = value.producer_epoch
        for pid, epoch in epochs.items():
            self.max_epoch[pid] = max(self.max_epoch.get(pid, 0), epoch)

    @invariant()
    def replaying_the_log_into_a_fresh_manager_gives_the_same_metadata(self):
        h = self.h
        fresh = TransactionManager(h.config, lambda: 0)
        for p in range(h.config.transaction_state_log_num_partitions):
            fresh.begin_loading(p, 0)
            for record in h.log[p]:
                fresh.replay(record, p)
            fresh.finish_loading(p, 0, h.now)
        live = {md.transactional_id: md for md in h.manager.transactions()
                if md.producer_epoch != -1}          # created, never written
        replayed = {md.transactional_id: md for md in fresh.transactions()}
        assert live.keys() == replayed.keys()
        for tid, md in live.items():
            a, b = persisted_view(md), persisted_view(replayed[tid])
            if md.has_failed_epoch_fence:            # bumped in memory, never written
                assert a[1] == b[1] + 1
                a, b = a[:1] + a[2:], b[:1] + b[2:]
            if md.state in PREPARE_STATES:           # markers written remove partitions
                assert a[4] <= b[4]
                a, b = a[:4] + a[5:], b[:4] + b[5:]
            elif md.state is S.EMPTY:
                # Kafka's completeTransitionTo(Empty) keeps the last transaction's start time
                # in memory while the record says -1.
                assert b[5] == -1
                a, b = a[:5] + a[6:], b[:5] + b[6:]
            assert a == b, tid


def test_random_operations_keep_invariants():
    run = TransactionMachine.TestCase
    run.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
    run().runTest()
