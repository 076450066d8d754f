"""The pure transaction manager: Kafka's transaction coordinator as a state machine without I/O.

Theory of operation
-------------------
Every public method takes the request's arguments plus `now_ms` and returns a `TxnResult`
(coordinator/transaction/results.py): this request's response (or None when the response
comes with the follow-up of its own append), `__transaction_state` appends with their
`on_append(error, now_ms)` follow-ups, timers, and `markers` — WriteTxnMarkers work for the
runtime. No sockets, tasks or clocks in here; tests drive the class directly.

Which Kafka class each piece follows (Kafka 3.9, core/.../coordinator/transaction/):
    TransactionCoordinator       init_producer_id, add_partitions (and its verify-only form),
                                 add_offsets, end_txn, the timed-out transaction abort, describe
    TransactionStateManager      the metadata cache per `__transaction_state` partition with its
                                 coordinator epoch, loading and unloading, appendTransactionToLog
                                 (the `_append` follow-up: complete the transition, or clear the
                                 pending state and map the error), transactional id expiration,
                                 list_transactions
    TransactionMarkerChannelManager  the transactions waiting for their markers, and the
                                 CompleteCommit / CompleteAbort write once they are all written
    TransactionMetadata          coordinator/transaction/state.py (two-phase transitions)
    TransactionLog               coordinator/transaction/records.py

A transaction's life, as records and markers:

    InitProducerId   -> Empty record (epoch bumped, or a new producer id) -> response
    AddPartitions    -> Ongoing record (the union of partitions) -> response
    EndTxn           -> PrepareCommit / PrepareAbort record -> response NONE, and MarkerRequest
    on_markers_written (every partition has its marker) -> CompleteCommit / CompleteAbort record

Between the Prepare* record and the Complete* record the metadata's pending state is the
Complete* state, so every request for the id answers CONCURRENT_TRANSACTIONS, as in Kafka;
EndTxn repeated for the same outcome answers CONCURRENT_TRANSACTIONS while Prepare* and NONE
once Complete*. The response to EndTxn does not wait for the markers.

One difference from Kafka, in timing only: AddPartitionsToTxn and AddOffsetsToTxn that would
answer CONCURRENT_TRANSACTIONS wait (when the runtime passes a `token`) up to
`TxnConfig.concurrent_wait_ms` for the write in flight or the markers to finish, and are then
answered as if they had just arrived. A producer that commits and begins its next transaction
at once otherwise meets the markers of the previous one and sleeps its retry backoff (20 ms in
the Java client and librdkafka) after every few transactions; the answer it gets is the one its
retry would get, only sooner. Past the wait it gets CONCURRENT_TRANSACTIONS, as from Kafka.

Fencing (InitProducerId on an Ongoing transaction, and the transaction timeout) bumps the epoch
in memory (PrepareEpochFence, never written) and writes PrepareAbort with the bumped epoch, so
the old producer's requests are fenced and the markers carry the new epoch; InitProducerId then
answers CONCURRENT_TRANSACTIONS and the client retries, getting a second bump. If that
PrepareAbort append fails, the in-memory epoch stays bumped (`has_failed_epoch_fence`) and the
next fence reuses it.

Ownership: the transactional id's partition is `abs(javaHashCode(id)) % transaction.state.log.
num.partitions` (`partition_for`). A partition is loading between `begin_loading` and
`finish_loading` (requests: COORDINATOR_LOAD_IN_PROGRESS) and owned after it; any other gets
NOT_COORDINATOR. Loading replays records (`replay`): the latest value of each id, a tombstone
removes it. `finish_loading` resumes the transactions found in PrepareCommit / PrepareAbort by
returning their markers again (a PrepareEpochFence state is never in the log; if one were, it
would be left alone, as Kafka does). Follow-ups check that the partition is still owned at the
same coordinator epoch with the same metadata object, so an append that completes after an
unload (or a reload) answers NOT_COORDINATOR and changes nothing.

Timers (keys the runtime passes back to `on_timer`; `start(now_ms)` arms the first two):
    ("txn-abort-timed-out",)        every transaction.abort.timed.out.transaction.cleanup.
                                    interval.ms: Ongoing transactions older than their timeout
                                    are fenced and aborted
    ("txn-expire-ids",)             every transaction.remove.expired.transaction.cleanup.
                                    interval.ms: ids idle longer than transactional.id.
                                    expiration.ms with no open transaction get a tombstone
    ("txn-complete-retry", id)      a CompleteCommit/CompleteAbort append that failed with
                                    COORDINATOR_NOT_AVAILABLE is tried again
    ("txn-concurrent-wait", id)     an AddPartitionsToTxn / AddOffsetsToTxn waiting for the id's
                                    transaction to settle is answered CONCURRENT_TRANSACTIONS

Concurrency: on the loop (single-threaded); nothing here blocks. Logging at INFO uses Kafka's
words (initialised ids, loading, unloading, rollbacks of timed-out transactions); it is the one
side effect here and changes nothing.
"""
import logging
from dataclasses import dataclass
from typing import Callable, Iterator

from protocol.errors import ErrorCode, KafkaError

from coordinator.internal_topics import TRANSACTION_STATE_TOPIC
from coordinator.partitioning import OFFSETS_TOPIC, partition_for
from coordinator.records import Record
from coordinator.results import Append
from coordinator.transaction.records import metadata_from_value, tombstone, transit_record
from coordinator.transaction.results import (InitProducerIdResponse, ListedTransaction,
                                             MarkerRequest, TransactionDescription,
                                             TransactionListing, TxnConfig, TxnResult,
                                             map_append_error)
from coordinator.transaction.state import (EXPIRATION_ALLOWED, NO_PRODUCER_EPOCH,
                                           PREPARE_STATES, IllegalTransactionState,
                                           TransactionMetadata, TxnState, TxnTransit,
                                           is_epoch_exhausted)

E = ErrorCode
S = TxnState
log = logging.getLogger(__name__)

ABORT_TIMER = ("txn-abort-timed-out",)
EXPIRE_TIMER = ("txn-expire-ids",)
COMPLETE_RETRY = "txn-complete-retry"
CONCURRENT_WAIT = "txn-concurrent-wait"
# Tombstones per append: key bytes kept well under the default max.message.bytes (1 MiB), as
# Kafka fills a batch only while it has room.
_TOMBSTONE_APPEND_BYTES = 256 * 1024


def _name(error: int) -> str:
    try:
        return E(error).name
    except ValueError:
        return str(error)


class _PartitionCache:
    """The transactions of one owned `__transaction_state` partition (TxnMetadataCacheEntry)."""
    __slots__ = ("coordinator_epoch", "transactions")

    def __init__(self, coordinator_epoch: int, transactions: dict[str, TransactionMetadata]):
        self.coordinator_epoch = coordinator_epoch
        self.transactions = transactions


@dataclass(eq=False)
class _PendingComplete:
    """A transaction whose markers are being written (Kafka's PendingCompleteTxn)."""
    transactional_id: str
    coordinator_epoch: int
    metadata: TransactionMetadata
    transit: TxnTransit             # the CompleteCommit / CompleteAbort to write afterwards
    committed: bool
    retry_deadline_ms: int = 0


@dataclass(eq=False)
class _Waiter:
    """An AddPartitionsToTxn / AddOffsetsToTxn waiting for its transaction to settle (module
    docstring); `token` is the runtime's handle for its answer."""
    token: object
    producer_id: int
    producer_epoch: int
    partitions: frozenset
    respond: Callable
    deadline_ms: int


class TransactionManager:
    """All transactional ids of this coordinator. Concurrency: on the loop (single-threaded)."""

    def __init__(self, config: TxnConfig | None, next_producer_id: Callable[[], int],
                 offsets_partition_for: Callable[[str], int] | None = None, *,
                 log_ident: str = "[TransactionCoordinator] "):
        """`next_producer_id()` allocates a producer id (a KafkaError it raises becomes the
        response's error); `offsets_partition_for(group_id)` is the group's
        `__consumer_offsets` partition (default: 50 partitions)."""
        self.config = config or TxnConfig()
        self._next_producer_id = next_producer_id
        self._offsets_partition_for = offsets_partition_for or (lambda g: partition_for(g, 50))
        self.log_ident = log_ident
        self._owned: dict[int, _PartitionCache] = {}
        self._loading: dict[int, tuple[int, dict[str, TransactionMetadata]]] = {}
        self._pending_complete: dict[str, _PendingComplete] = {}
        self._complete_retries: dict[str, _PendingComplete] = {}
        self._waiting: dict[str, list[_Waiter]] = {}
        self._abort_deadline_ms: int | None = None
        self._expire_deadline_ms: int | None = None

    def _info(self, message: str) -> None:
        log.info("%s%s", self.log_ident, message)

    # ---------------------------------------------------------------------------- ownership
    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.transaction_state_log_num_partitions)

    def coordinator_error(self, transactional_id: str) -> int:
        """NONE when this coordinator serves the id, else COORDINATOR_LOAD_IN_PROGRESS or
        NOT_COORDINATOR (for FindCoordinator-style checks in handlers)."""
        return self._lookup(transactional_id)[0]

    @property
    def owned_partitions(self) -> set[int]:
        return set(self._owned)

    @property
    def loading_partitions(self) -> set[int]:
        return set(self._loading)

    def metadata(self, transactional_id: str) -> TransactionMetadata | None:
        """The id's current metadata if its partition is owned (read-only use: tools, tests)."""
        entry = self._owned.get(self.partition_for(transactional_id))
        return None if entry is None else entry.transactions.get(transactional_id)

    def transactions(self) -> Iterator[TransactionMetadata]:
        """Every transactional id of the owned partitions (read-only use)."""
        for entry in self._owned.values():
            yield from entry.transactions.values()

    def _lookup(self, transactional_id: str):
        """(error, partition cache, metadata or None): Kafka's getTransactionState."""
        p = self.partition_for(transactional_id)
        if p in self._loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS, None, None
        entry = self._owned.get(p)
        if entry is None:
            return E.NOT_COORDINATOR, None, None
        return E.NONE, entry, entry.transactions.get(transactional_id)

    def _new_producer_id(self) -> tuple[int, int]:
        try:
            return E.NONE, self._next_producer_id()
        except KafkaError as exc:
            return exc.error_code, -1

    # ----------------------------------------------------------------------- the log append
    def _append(self, transactional_id: str, coordinator_epoch: int,
                metadata: TransactionMetadata, transit: TxnTransit,
                then: Callable[[int, int], TxnResult], retry_on=frozenset()) -> TxnResult:
        """Writes the transit's record; its follow-up completes the transition (or clears the
        pending state, unless the error is one the caller retries) and calls `then(error,
        now_ms)` with the error the client sees (TransactionStateManager.appendTransactionToLog)."""
        def on_append(error: int, now_ms: int) -> TxnResult:
            error = map_append_error(error)
            lookup_error, entry, current = self._lookup(transactional_id)
            same = lookup_error == E.NONE and current is metadata and \
                entry.coordinator_epoch == coordinator_epoch
            if error == E.NONE:
                if lookup_error != E.NONE:
                    error = lookup_error
                elif not same:
                    error = E.NOT_COORDINATOR
                else:
                    metadata.complete_transition_to(transit)
            elif same and error not in retry_on:
                metadata.pending_state = None
            return then(error, now_ms).absorb(self._wake(transactional_id, now_ms))
        return TxnResult(appends=[Append([transit_record(transactional_id, transit)],
                                         on_append)])

    # ----------------------------------------------------------------------- InitProducerId
    def init_producer_id(self, transactional_id: str | None, transaction_timeout_ms: int,
                         expected_producer_id: int, expected_producer_epoch: int,
                         now_ms: int) -> TxnResult:
        """InitProducerId. The response is an InitProducerIdResponse. Expected id and epoch
        are both -1 unless the client recovers its producer (KIP-360, v3+). A None id is an
        idempotent producer: a new producer id at epoch 0, no state kept."""
        def fail(error):
            return TxnResult(response=InitProducerIdResponse(error))

        if (expected_producer_id == -1) != (expected_producer_epoch == -1):
            return fail(E.INVALID_REQUEST)          # KafkaApis' check, before the coordinator
        expected = None if expected_producer_id == -1 else \
            (expected_producer_id, expected_producer_epoch)
        if transactional_id is None:
            error, producer_id = self._new_producer_id()
            return fail(error) if error else \
                TxnResult(response=InitProducerIdResponse(E.NONE, producer_id, 0))
        if not transactional_id:
            return fail(E.INVALID_REQUEST)
        if not 0 < transaction_timeout_ms <= self.config.transaction_max_timeout_ms:
            return fail(E.INVALID_TRANSACTION_TIMEOUT)
        error, entry, md = self._lookup(transactional_id)
        if error:
            return fail(error)
        if md is None:
            error, producer_id = self._new_producer_id()
            if error:
                return fail(error)
            md = entry.transactions[transactional_id] = TransactionMetadata.new(
                transactional_id, producer_id, transaction_timeout_ms, now_ms)
        error, transit = self._prepare_init(md, transaction_timeout_ms, expected, now_ms)
        if error:
            return fail(error)
        if transit.state is S.PREPARE_EPOCH_FENCE:
            # Abort the open transaction first; the client retries and gets its own bump.
            def answer(end_error):
                return InitProducerIdResponse(
                    E.CONCURRENT_TRANSACTIONS if end_error == E.NONE else end_error)
            return self._end_transaction(transactional_id, transit.producer_id,
                                         transit.producer_epoch, False, False, answer, now_ms)

        def then(error: int, now: int) -> TxnResult:
            if error != E.NONE:
                self._info(f"Returning {_name(error)} error code to client for "
                           f"{transactional_id}'s InitProducerId request")
                return fail(error)
            self._info(f"Initialized transactionalId {transactional_id} with producerId "
                       f"{transit.producer_id} and producer epoch {transit.producer_epoch} on "
                       f"partition {TRANSACTION_STATE_TOPIC}-"
                       f"{self.partition_for(transactional_id)}")
            return TxnResult(response=InitProducerIdResponse(E.NONE, transit.producer_id,
                                                             transit.producer_epoch))
        return self._append(transactional_id, entry.coordinator_epoch, md, transit, then)

    def _prepare_init(self, md: TransactionMetadata, timeout_ms: int, expected,
                      now_ms: int) -> tuple[int, TxnTransit | None]:
        """TransactionCoordinator.prepareInitProducerIdTransit."""
        if md.pending_transition_in_progress:
            return E.CONCURRENT_TRANSACTIONS, None
        if expected is not None and not (
                md.producer_epoch == NO_PRODUCER_EPOCH          # just created here
                or expected[0] == md.producer_id                 # epoch checked by the bump
                # a retry of the rotation that exhausted the old id's epochs
                or (expected[0] == md.last_producer_id and is_epoch_exhausted(expected[1]))):
            return E.PRODUCER_FENCED, None
        if md.state in PREPARE_STATES:
            return E.CONCURRENT_TRANSACTIONS, None
        if md.state in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT, S.EMPTY):
            if md.is_producer_epoch_exhausted and \
                    (expected is None or expected[1] == md.producer_epoch):
                error, producer_id = self._new_producer_id()
                if error:
                    return error, None
                return E.NONE, md.prepare_producer_id_rotation(
                    producer_id, timeout_ms, now_ms, record_last_epoch=expected is not None)
            return md.prepare_increment_producer_epoch(
                timeout_ms, None if expected is None else expected[1], now_ms)
        if md.state is S.ONGOING:
            return E.NONE, md.prepare_fence_producer_epoch()
        raise IllegalTransactionState(
            f"Found transactionalId {md.transactional_id} with state {md.state}. This is "
            f"illegal as we should never have transitioned to this state.")

    # ------------------------------------------------------------------ AddPartitionsToTxn
    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions, verify_only: bool, now_ms: int,
                       token=None) -> TxnResult:
        """AddPartitionsToTxn for one transaction; `partitions` are (topic, partition) pairs
        that passed the handler's checks (see results.not_attempted). The response is
        {(topic, partition): error}: one coordinator error for all, or with `verify_only`
        (KIP-890, v4+ from brokers) NONE for partitions in the ongoing transaction and
        TRANSACTION_ABORTABLE for the others, without any change. With a `token`, a request
        that would answer CONCURRENT_TRANSACTIONS may wait (module docstring): its answer then
        comes later as a completion of the token."""
        partitions = frozenset(partitions)

        def respond(error):
            return {tp: error for tp in partitions}
        if verify_only:
            return TxnResult(response=self._verify(transactional_id, producer_id,
                                                   producer_epoch, partitions, respond))
        return self._add_partitions(transactional_id, producer_id, producer_epoch, partitions,
                                    respond, now_ms, token)

    def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                    group_id: str, now_ms: int, token=None) -> TxnResult:
        """AddOffsetsToTxn: adds the group's `__consumer_offsets` partition. The response is
        an error code (waiting as add_partitions does, with a `token`)."""
        partition = (OFFSETS_TOPIC, self._offsets_partition_for(group_id))
        return self._add_partitions(transactional_id, producer_id, producer_epoch,
                                    frozenset([partition]), lambda error: error, now_ms, token)

    def _verify(self, transactional_id, producer_id, producer_epoch, partitions, respond):
        """TransactionCoordinator.handleVerifyPartitionsInTransaction (pending states are not
        checked: the partition's append is validated again later)."""
        if not transactional_id:
            return respond(E.INVALID_REQUEST)
        error, _, md = self._lookup(transactional_id)
        if error:
            return respond(error)
        if md is None or md.producer_id != producer_id:
            return respond(E.INVALID_PRODUCER_ID_MAPPING)
        if md.producer_epoch != producer_epoch:
            return respond(E.PRODUCER_FENCED)
        if md.state in PREPARE_STATES:
            return respond(E.CONCURRENT_TRANSACTIONS)
        return {tp: E.NONE if tp in md.partitions else E.TRANSACTION_ABORTABLE
                for tp in partitions}

    def _add_partitions(self, transactional_id, producer_id, producer_epoch, partitions,
                        respond, now_ms, token=None, waiter=None) -> TxnResult:
        """TransactionCoordinator.handleAddPartitionsToTransaction. `waiter`: a request that
        waited (module docstring) and is answered now, through its token."""
        if waiter is not None:
            token = waiter.token

        def answer(response) -> TxnResult:
            if waiter is not None:
                return TxnResult(completions=[(waiter.token, response)])
            return TxnResult(response=response)
        if not transactional_id:
            return answer(respond(E.INVALID_REQUEST))
        error, entry, md = self._lookup(transactional_id)
        if error == E.NONE:
            if md is None or md.producer_id != producer_id:
                error = E.INVALID_PRODUCER_ID_MAPPING
            elif md.producer_epoch != producer_epoch:
                error = E.PRODUCER_FENCED
            elif md.pending_transition_in_progress or md.state in PREPARE_STATES:
                error = E.CONCURRENT_TRANSACTIONS
                deadline = waiter.deadline_ms if waiter is not None else \
                    now_ms + self.config.concurrent_wait_ms
                if token is not None and now_ms < deadline:
                    self._waiting.setdefault(transactional_id, []).append(_Waiter(
                        token, producer_id, producer_epoch, partitions, respond, deadline))
                    return TxnResult(timers=[((CONCURRENT_WAIT, transactional_id), deadline)])
            elif md.state is S.ONGOING and partitions <= md.partitions:
                return answer(respond(E.NONE))     # already in: nothing to write
            else:
                transit = md.prepare_add_partitions(partitions, now_ms)
                return self._append(transactional_id, entry.coordinator_epoch, md, transit,
                                    lambda err, now: answer(respond(err)))
        return answer(respond(error))

    def _wake(self, transactional_id: str, now_ms: int) -> TxnResult:
        """The id's transaction changed: the requests waiting for it are tried again (those
        still blocked wait on, up to their deadline)."""
        result = TxnResult()
        for w in self._waiting.pop(transactional_id, ()):
            result.absorb(self._add_partitions(transactional_id, w.producer_id,
                                               w.producer_epoch, w.partitions, w.respond,
                                               now_ms, waiter=w))
        return result

    def _expire_waiters(self, transactional_id: str, now_ms: int) -> TxnResult:
        """Waiters past their deadline are answered CONCURRENT_TRANSACTIONS, as Kafka answers
        at once; the client retries after its backoff."""
        result = TxnResult()
        waiting = self._waiting.pop(transactional_id, [])
        left = [w for w in waiting if w.deadline_ms > now_ms]
        for w in waiting:
            if w.deadline_ms <= now_ms:
                result.completions.append((w.token, w.respond(E.CONCURRENT_TRANSACTIONS)))
        if left:
            self._waiting[transactional_id] = left
            result.timers.append(((CONCURRENT_WAIT, transactional_id),
                                  min(w.deadline_ms for w in left)))
        return result

    # ------------------------------------------------------------------------------- EndTxn
    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                committed: bool, now_ms: int) -> TxnResult:
        """EndTxn. The response is an error code, in the follow-up of the Prepare* append
        (which also carries the markers), or at once when nothing is written."""
        return self._end_transaction(transactional_id, producer_id, producer_epoch, committed,
                                     True, lambda error: error, now_ms)

    def _end_transaction(self, transactional_id, producer_id, producer_epoch, committed,
                         from_client, respond, now_ms) -> TxnResult:
        """TransactionCoordinator.endTransaction: from a client (EndTxn, strict epoch) or from
        the coordinator itself (a fence: the epoch it was just bumped to)."""
        if not transactional_id:
            return TxnResult(response=respond(E.INVALID_REQUEST))
        error, entry, md = self._lookup(transactional_id)
        if error == E.NONE and md is None:
            error = E.INVALID_PRODUCER_ID_MAPPING
        if error:
            return TxnResult(response=respond(error))
        error, transit, is_epoch_fence = self._prepare_end(md, producer_id, producer_epoch,
                                                           committed, from_client, now_ms)
        if transit is None:
            return TxnResult(response=respond(error))
        coordinator_epoch = entry.coordinator_epoch
        outcome = "COMMIT" if committed else "ABORT"

        def then(error: int, now: int) -> TxnResult:
            if error != E.NONE:
                self._info(f"Aborting sending of transaction markers and returning "
                           f"{_name(error)} error to client for {transactional_id}'s "
                           f"EndTransaction request of {outcome}, since appending {transit} to "
                           f"transaction log with coordinator epoch {coordinator_epoch} failed")
                if is_epoch_fence:
                    _, entry_now, current = self._lookup(transactional_id)
                    if current is not None and entry_now.coordinator_epoch == coordinator_epoch:
                        current.has_failed_epoch_fence = True
                        log.warning("%sThe coordinator failed to write an epoch fence transition "
                                    "for producer %s to the transaction log with error %s. The "
                                    "epoch was increased to %d but not returned to the client",
                                    self.log_ident, transactional_id, _name(error),
                                    transit.producer_epoch)
                return TxnResult(response=respond(error))
            error, complete = self._prepare_send(md, producer_id, producer_epoch, committed, now)
            if complete is None:
                return TxnResult(response=respond(error))
            result = TxnResult(response=respond(E.NONE))
            return result.absorb(self._send_markers(transactional_id, coordinator_epoch, md,
                                                    complete, committed))
        return self._append(transactional_id, coordinator_epoch, md, transit, then)

    def _prepare_end(self, md: TransactionMetadata, producer_id, producer_epoch, committed,
                     from_client, now_ms):
        """(error, Prepare* transit or None, whether this is an epoch fence)."""
        if md.producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING, None, False
        # A client must use the current epoch; a fence comes with the bumped one.
        if (from_client and producer_epoch != md.producer_epoch) or \
                producer_epoch < md.producer_epoch:
            return E.PRODUCER_FENCED, None, False
        if md.pending_state is not None and md.pending_state is not S.PREPARE_EPOCH_FENCE:
            return E.CONCURRENT_TRANSACTIONS, None, False
        state = md.state
        if state is S.ONGOING:
            next_state = S.PREPARE_COMMIT if committed else S.PREPARE_ABORT
            is_epoch_fence = next_state is S.PREPARE_ABORT and \
                md.pending_state is S.PREPARE_EPOCH_FENCE
            if is_epoch_fence:
                # The fence becomes this abort: the bumped epoch is applied now and written
                # with the PrepareAbort record.
                md.pending_state = None
                md.producer_epoch = producer_epoch
                md.last_producer_epoch = NO_PRODUCER_EPOCH
            return E.NONE, md.prepare_abort_or_commit(next_state, now_ms), is_epoch_fence
        if state is S.COMPLETE_COMMIT:
            return (E.NONE if committed else E.INVALID_TXN_STATE), None, False
        if state is S.COMPLETE_ABORT:
            return (E.INVALID_TXN_STATE if committed else E.NONE), None, False
        if state is S.PREPARE_COMMIT:
            return (E.CONCURRENT_TRANSACTIONS if committed else E.INVALID_TXN_STATE), None, False
        if state is S.PREPARE_ABORT:
            return (E.INVALID_TXN_STATE if committed else E.CONCURRENT_TRANSACTIONS), None, False
        if state is S.EMPTY:
            return E.INVALID_TXN_STATE, None, False
        raise IllegalTransactionState(
            f"Found transactionalId {md.transactional_id} with state {state}. This is illegal "
            f"as we should never have transitioned to this state.")

    @staticmethod
    def _prepare_send(md: TransactionMetadata, producer_id, producer_epoch, committed,
                      now_ms) -> tuple[int, TxnTransit | None]:
        """After the Prepare* record is written: the Complete* transit to write once the
        markers are (EndTxn's sendTxnMarkersCallback checks, in case anything moved)."""
        if md.producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING, None
        if md.producer_epoch != producer_epoch:
            return E.PRODUCER_FENCED, None
        if md.pending_transition_in_progress:
            return E.CONCURRENT_TRANSACTIONS, None
        wanted = S.PREPARE_COMMIT if committed else S.PREPARE_ABORT
        if md.state is not wanted:
            return E.INVALID_TXN_STATE, None
        return E.NONE, md.prepare_complete(now_ms)

    # ----------------------------------------------------------------------------- markers
    def _send_markers(self, transactional_id: str, coordinator_epoch: int,
                      md: TransactionMetadata, complete: TxnTransit,
                      committed: bool) -> TxnResult:
        """TransactionMarkerChannelManager.addTxnMarkersToSend: markers for every partition of
        the transaction, or the Complete* record at once when it has none."""
        pending = _PendingComplete(transactional_id, coordinator_epoch, md, complete, committed)
        if transactional_id in self._pending_complete:
            self._info(f"Replaced an existing pending complete txn for {transactional_id} while "
                       f"adding markers to send.")
        self._pending_complete[transactional_id] = pending
        if md.partitions:
            return TxnResult(markers=[MarkerRequest(
                transactional_id, md.producer_id, md.producer_epoch, coordinator_epoch,
                committed, sorted(md.partitions))])
        del self._pending_complete[transactional_id]
        return self._write_completion(pending)

    def on_markers_written(self, transactional_id: str, producer_id: int, producer_epoch: int,
                           now_ms: int, *, coordinator_epoch: int | None = None,
                           partitions=None) -> TxnResult:
        """The markers of a MarkerRequest were written: to `partitions` (default: all of
        them). A partition that no longer exists counts as written, as in Kafka. Once no
        partition waits, returns the CompleteCommit / CompleteAbort append. Stale reports (an
        earlier coordinator epoch, another producer epoch, an id no longer owned) are ignored."""
        pending = self._pending_complete.get(transactional_id)
        if pending is None:
            return TxnResult()
        md = pending.metadata
        if (coordinator_epoch is not None and coordinator_epoch != pending.coordinator_epoch) \
                or producer_id != md.producer_id or producer_epoch != md.producer_epoch:
            return TxnResult()
        error, entry, current = self._lookup(transactional_id)
        if error or current is not md or entry.coordinator_epoch != pending.coordinator_epoch:
            del self._pending_complete[transactional_id]     # removeMarkersForTxn
            return TxnResult()
        for tp in list(md.partitions) if partitions is None else partitions:
            md.remove_partition(tuple(tp))
        if md.partitions:
            return TxnResult()
        del self._pending_complete[transactional_id]
        return self._write_completion(pending)

    def _write_completion(self, pending: _PendingComplete) -> TxnResult:
        """TransactionMarkerChannelManager.tryAppendToLog of the Complete* record."""
        tid = pending.transactional_id

        def then(error: int, now: int) -> TxnResult:
            if error == E.COORDINATOR_NOT_AVAILABLE:
                self._info(f"Not available to append the completion of {tid}: possible causes "
                           f"include UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS, "
                           f"NOT_ENOUGH_REPLICAS_AFTER_APPEND and REQUEST_TIMED_OUT; retry "
                           f"appending")
                pending.retry_deadline_ms = now + self.config.complete_retry_backoff_ms
                self._complete_retries[tid] = pending
                return TxnResult(timers=[((COMPLETE_RETRY, tid), pending.retry_deadline_ms)])
            if error in (E.NOT_COORDINATOR, E.COORDINATOR_LOAD_IN_PROGRESS):
                self._info(f"No longer the coordinator for transactionalId: {tid} while trying "
                           f"to append to transaction log, skip writing to transaction log")
            elif error != E.NONE:
                # Kafka treats this as fatal; the transaction stays in Prepare* until the
                # partition is loaded again.
                log.error("%sUnexpected error %s while appending to transaction log for %s",
                          self.log_ident, _name(error), tid)
            return TxnResult()
        return self._append(tid, pending.coordinator_epoch, pending.metadata, pending.transit,
                            then, retry_on=frozenset({E.COORDINATOR_NOT_AVAILABLE}))

    def _retry_completion(self, tid: str, now_ms: int) -> TxnResult:
        pending = self._complete_retries.get(tid)
        if pending is None:
            return TxnResult()
        if now_ms < pending.retry_deadline_ms:
            return TxnResult(timers=[((COMPLETE_RETRY, tid), pending.retry_deadline_ms)])
        del self._complete_retries[tid]
        error, entry, current = self._lookup(tid)
        if error or current is not pending.metadata or \
                entry.coordinator_epoch != pending.coordinator_epoch:
            return TxnResult()
        return self._write_completion(pending)

    # ------------------------------------------------------------------------------ timers
    def start(self, now_ms: int) -> TxnResult:
        """The periodic tasks Kafka schedules at start-up (TransactionCoordinator.startup)."""
        config = self.config
        self._abort_deadline_ms = now_ms + config.abort_timed_out_transaction_cleanup_interval_ms
        self._expire_deadline_ms = now_ms + config.remove_expired_transaction_cleanup_interval_ms
        return TxnResult(timers=[(ABORT_TIMER, self._abort_deadline_ms),
                                 (EXPIRE_TIMER, self._expire_deadline_ms)])

    def on_timer(self, key: tuple, now_ms: int) -> TxnResult:
        kind = key[0]
        if kind == ABORT_TIMER[0]:
            if self._abort_deadline_ms is not None and now_ms < self._abort_deadline_ms:
                return TxnResult(timers=[(ABORT_TIMER, self._abort_deadline_ms)])
            self._abort_deadline_ms = now_ms + \
                self.config.abort_timed_out_transaction_cleanup_interval_ms
            result = self.abort_timed_out_transactions(now_ms)
            result.timers.append((ABORT_TIMER, self._abort_deadline_ms))
            return result
        if kind == EXPIRE_TIMER[0]:
            if self._expire_deadline_ms is not None and now_ms < self._expire_deadline_ms:
                return TxnResult(timers=[(EXPIRE_TIMER, self._expire_deadline_ms)])
            self._expire_deadline_ms = now_ms + \
                self.config.remove_expired_transaction_cleanup_interval_ms
            result = self.remove_expired_transactional_ids(now_ms)
            result.timers.append((EXPIRE_TIMER, self._expire_deadline_ms))
            return result
        if kind == COMPLETE_RETRY:
            return self._retry_completion(key[1], now_ms)
        if kind == CONCURRENT_WAIT:
            return self._expire_waiters(key[1], now_ms)
        raise ValueError(f"unknown timer {key!r}")

    def abort_timed_out_transactions(self, now_ms: int) -> TxnResult:
        """TransactionCoordinator.abortTimedOutTransactions: every Ongoing transaction started
        more than its timeout ago, with no write in flight, is fenced (epoch bump) and aborted."""
        result = TxnResult()
        timed_out = [md for md in self.transactions()
                     if md.pending_state is None and md.state is S.ONGOING
                     and md.txn_start_timestamp + md.txn_timeout_ms < now_ms]
        for md in timed_out:
            tid = md.transactional_id
            try:
                transit = md.prepare_fence_producer_epoch()
            except IllegalTransactionState as exc:
                log.error("%s%s", self.log_ident, exc)
                continue

            def done(error, tid=tid):
                self._on_rollback_complete(tid, error)
            result.absorb(self._end_transaction(tid, transit.producer_id,
                                                transit.producer_epoch, False, False, done,
                                                now_ms))
        return result

    def _on_rollback_complete(self, tid: str, error: int) -> None:
        if error == E.NONE:
            self._info(f"Completed rollback of ongoing transaction for transactionalId {tid} "
                       f"due to timeout")
        elif error in (E.INVALID_PRODUCER_ID_MAPPING, E.PRODUCER_FENCED,
                       E.CONCURRENT_TRANSACTIONS):
            log.debug("%sRollback of ongoing transaction for transactionalId %s has been "
                      "cancelled due to error %s", self.log_ident, tid, _name(error))
        else:
            log.warning("%sRollback of ongoing transaction for transactionalId %s failed due "
                        "to error %s", self.log_ident, tid, _name(error))

    def remove_expired_transactional_ids(self, now_ms: int) -> TxnResult:
        """TransactionStateManager.removeExpiredTransactionalIds: a tombstone for every id with
        no open transaction and no write for transactional.id.expiration.ms; its follow-up
        removes the ids whose metadata did not change meanwhile."""
        result = TxnResult()
        horizon = now_ms - self.config.transactional_id_expiration_ms
        for p, entry in self._owned.items():
            expired, size = [], 0
            for md in entry.transactions.values():
                if md.pending_state is None and md.state in EXPIRATION_ALLOWED \
                        and md.txn_last_update_timestamp <= horizon:
                    expired.append((md, md.prepare_dead()))
                    size += len(md.transactional_id) * 3 + 32
                    if size >= _TOMBSTONE_APPEND_BYTES:
                        result.appends.append(self._tombstones(p, entry, expired))
                        expired, size = [], 0
            if expired:
                result.appends.append(self._tombstones(p, entry, expired))
        return result

    def _tombstones(self, p: int, entry: _PartitionCache, expired: list) -> Append:
        def on_append(error: int, now_ms: int) -> TxnResult:
            for md, transit in expired:
                tid = md.transactional_id
                owned = self._owned.get(p)
                if owned is None or owned.transactions.get(tid) is not md:
                    continue              # unloaded or replaced meanwhile
                if owned is entry and md.pending_state is S.DEAD and \
                        md.producer_epoch == transit.producer_epoch and error == E.NONE:
                    del entry.transactions[tid]
                else:
                    log.warning("%sFailed to remove expired transactionalId: %s from cache. "
                                "Tombstone append error code: %s, pendingState: %s",
                                self.log_ident, tid, _name(error), md.pending_state)
                    md.pending_state = None
            return TxnResult()
        return Append([tombstone(md.transactional_id) for md, _ in expired], on_append)

    # ------------------------------------------------------------------ loading, unloading
    def begin_loading(self, partition: int, coordinator_epoch: int) -> None:
        """This broker became the leader of `__transaction_state` partition `partition`
        (onElection): requests for its ids answer COORDINATOR_LOAD_IN_PROGRESS until
        `finish_loading`; markers still pending from an earlier ownership are forgotten."""
        self._info(f"Elected as the txn coordinator for partition {partition} at epoch "
                   f"{coordinator_epoch}")
        self._forget_pending(partition)
        self._loading[partition] = (coordinator_epoch, {})
        self._info(f"Loading transaction metadata from {TRANSACTION_STATE_TOPIC}-{partition} "
                   f"at epoch {coordinator_epoch}")

    def replay(self, record: Record, partition: int | None = None) -> None:
        """Load path: one record of a partition being loaded (default: the id's partition)."""
        tid = record.key.transactional_id
        p = self.partition_for(tid) if partition is None else partition
        loading = self._loading.get(p)
        if loading is None:
            raise ValueError(f"{TRANSACTION_STATE_TOPIC}-{p} is not being loaded")
        pool = loading[1]
        if record.value is None:
            pool.pop(tid, None)
        else:
            pool[tid] = metadata_from_value(tid, record.value)

    def finish_loading(self, partition: int, coordinator_epoch: int, now_ms: int) -> TxnResult:
        """The partition's records were replayed: its ids are served from now on, and the
        transactions found in PrepareCommit / PrepareAbort are completed (their markers are in
        the result). Does nothing if the load was superseded or the partition unloaded."""
        loading = self._loading.get(partition)
        if loading is None or loading[0] != coordinator_epoch:
            return TxnResult()
        pool = loading[1]
        self._info(f"Finished loading {len(pool)} transaction metadata from "
                   f"{TRANSACTION_STATE_TOPIC}-{partition}")
        if partition in self._owned:
            log.warning("%sUnloaded transaction metadata of %s-%d as part of loading metadata "
                        "at epoch %d", self.log_ident, TRANSACTION_STATE_TOPIC, partition,
                        coordinator_epoch)
        entry = self._owned[partition] = _PartitionCache(coordinator_epoch, pool)
        del self._loading[partition]
        result = TxnResult()
        for tid, md in pool.items():
            if md.state in PREPARE_STATES:
                committed = md.state is S.PREPARE_COMMIT
                complete = md.prepare_complete(now_ms)
                self._info(f"Sending txn markers for {tid} ({complete.state}) after loading "
                           f"partition {partition}")
                result.absorb(self._send_markers(tid, entry.coordinator_epoch, md, complete,
                                                 committed))
        self._info(f"Completed loading transaction metadata from {TRANSACTION_STATE_TOPIC}-"
                   f"{partition} for coordinator epoch {coordinator_epoch}")
        return result

    def unload(self, partition: int, coordinator_epoch: int | None = None) -> None:
        """This broker no longer leads the partition (onResignation): its ids are forgotten
        (NOT_COORDINATOR from now on), a load in progress at that epoch (or any, when None) is
        cancelled, and follow-ups still in flight find nothing to change. Requests waiting
        for a transaction of the partition are answered when their wait ends (a retry then
        finds the new coordinator)."""
        loading = self._loading.get(partition)
        if loading is not None and (coordinator_epoch is None or loading[0] == coordinator_epoch):
            del self._loading[partition]
        entry = self._owned.pop(partition, None)
        if entry is None:
            self._info(f"No cached transaction metadata found for {TRANSACTION_STATE_TOPIC}-"
                       f"{partition} during become-follower transition")
        else:
            self._info(f"Unloaded transaction metadata TxnMetadataCacheEntry(coordinatorEpoch="
                       f"{entry.coordinator_epoch}, numTransactionalEntries="
                       f"{len(entry.transactions)}) for {TRANSACTION_STATE_TOPIC}-{partition} "
                       f"on become-follower transition")
        self._forget_pending(partition)

    def _forget_pending(self, partition: int) -> None:
        for table in (self._pending_complete, self._complete_retries):
            for tid in [t for t in table if self.partition_for(t) == partition]:
                del table[tid]

    # ------------------------------------------------------------- Describe / List
    def describe(self, transactional_ids) -> list[TransactionDescription]:
        """DescribeTransactions (TransactionCoordinator.handleDescribeTransactions)."""
        answers = []
        for tid in transactional_ids:
            if not tid:
                answers.append(TransactionDescription(tid, E.INVALID_REQUEST))
                continue
            error, _, md = self._lookup(tid)
            if error:
                answers.append(TransactionDescription(tid, error))
            elif md is None or md.state is S.DEAD:
                answers.append(TransactionDescription(tid, E.TRANSACTIONAL_ID_NOT_FOUND))
            else:
                topics: dict[str, list[int]] = {}
                for topic, partition in sorted(md.partitions):
                    topics.setdefault(topic, []).append(partition)
                answers.append(TransactionDescription(
                    tid, E.NONE, md.state.kafka_name, md.producer_id, md.producer_epoch,
                    md.txn_timeout_ms, md.txn_start_timestamp, list(topics.items())))
        return answers

    def list_transactions(self, state_filters, producer_id_filters, duration_filter_ms: int,
                          now_ms: int) -> TransactionListing:
        """ListTransactions (TransactionStateManager.listTransactionStates): every id of the
        owned partitions but Dead ones, filtered by state names (exact Kafka names; unknown
        ones are reported back), producer ids, and — when the duration filter is >= 0 — only
        transactions running longer than it."""
        if self._loading:
            return TransactionListing(E.COORDINATOR_LOAD_IN_PROGRESS)
        listing = TransactionListing(E.NONE)
        states = set()
        for name in state_filters:
            state = TxnState.from_name(name)
            if state is None:
                listing.unknown_state_filters.append(name)
            else:
                states.add(state)
        producer_ids = set(producer_id_filters)
        for p in sorted(self._owned):
            for md in self._owned[p].transactions.values():
                if md.state is S.DEAD:
                    continue
                if producer_ids and md.producer_id not in producer_ids:
                    continue
                if state_filters and md.state not in states:
                    continue
                if duration_filter_ms >= 0 and \
                        now_ms - md.txn_start_timestamp <= duration_filter_ms:
                    continue
                listing.transactions.append(ListedTransaction(
                    md.transactional_id, md.producer_id, md.state.kafka_name))
        return listing
