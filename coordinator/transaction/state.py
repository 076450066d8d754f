"""Transaction states, the table of legal transitions, and one transactional id's metadata.

A transactional id moves through Kafka's eight states (the int8 id is what `__transaction_state`
stores; the name is what DescribeTransactions / ListTransactions and kafka-transactions.sh show):

                 AddPartitions,        EndTxn(commit)                  markers written
                 AddOffsets
      Empty ────────────────▶ Ongoing ──────────────▶ PrepareCommit ──────────────▶ CompleteCommit
        ▲                      │  │     EndTxn(abort)                  markers written
        │                      │  └─────────────────▶ PrepareAbort ───────────────▶ CompleteAbort
        │                      │                          ▲
        │                      │ InitProducerId, timeout  │ at once (in memory only)
        │                      └──▶ PrepareEpochFence ────┘
        │
        └── InitProducerId from Empty / CompleteCommit / CompleteAbort (which AddPartitions
            also leaves, for a new Ongoing transaction)
    Dead: the id expired; a pending state only (the tombstone's follow-up removes the metadata).

The table lists, for every state, the states a transaction may come FROM (Kafka's
TransactionState.validPreviousStates); every transition is checked against it.

Transitions are two-phase, as in Kafka's TransactionMetadata: `prepare_*` checks the move,
records the target as `pending_state` and returns an immutable `TxnTransit` (what the record
will say); the manager appends the transit's record, and only once the append succeeded does
`complete_transition_to(transit)` change the metadata. A pending state blocks every other
transition (clients get CONCURRENT_TRANSACTIONS), so at most one write per id is in flight.
A failed append just clears `pending_state` (coordinator/transaction/manager.py).

Pure data: no clock (timestamps are passed in), no I/O. Violations of the table or of a
completion's expectations are coordinator bugs and raise IllegalTransactionState, as Kafka's
IllegalStateException does.
"""
import enum
from dataclasses import dataclass, field

from protocol.errors import ErrorCode

NO_PRODUCER_ID = -1            # RecordBatch.NO_PRODUCER_ID
NO_PRODUCER_EPOCH = -1         # RecordBatch.NO_PRODUCER_EPOCH
MAX_PRODUCER_EPOCH = 32767     # Short.MaxValue: only the coordinator's fencing bump reaches it


def is_epoch_exhausted(producer_epoch: int) -> bool:
    """Kafka's TransactionMetadata.isEpochExhausted: clients never get Short.MaxValue, so that
    the coordinator can always fence the current producer with one more bump."""
    return producer_epoch >= MAX_PRODUCER_EPOCH - 1


class TxnState(enum.IntEnum):
    # The value is the transaction_status id written in TransactionLogValue.
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name Kafka shows (DescribeTransactions, ListTransactions, kafka-transactions.sh)."""
        return _NAMES[self]

    def __str__(self) -> str:
        return _NAMES[self]

    @classmethod
    def from_id(cls, state_id: int) -> "TxnState":
        """A state from its stored id; ValueError for an id Kafka does not know."""
        try:
            return cls(state_id)
        except ValueError:
            raise ValueError(f"Unknown transaction state id {state_id} from the transaction "
                             f"status message") from None

    @classmethod
    def from_name(cls, name: str) -> "TxnState | None":
        """A state from its Kafka name, case-sensitively as Kafka's fromName (ListTransactions'
        state filters); None if unknown."""
        return _BY_NAME.get(name)


_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}

S = TxnState
VALID_PREVIOUS_STATES: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}

# States whose transactional id may expire after transactional.id.expiration.ms of inactivity
# (Kafka's isExpirationAllowed): no transaction is open.
EXPIRATION_ALLOWED = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})
PREPARE_STATES = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})
COMPLETE_STATES = frozenset({S.COMPLETE_COMMIT, S.COMPLETE_ABORT})

TopicPartition = tuple[str, int]


class IllegalTransactionState(RuntimeError):
    """A transition the table or the completion checks forbid: always a coordinator bug."""


@dataclass(frozen=True)
class TxnTransit:
    """The target of a prepared transition (Kafka's TxnTransitMetadata): what the record says."""
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int


@dataclass(eq=False)
class TransactionMetadata:
    """One transactional id's state (Kafka's TransactionMetadata).

    `last_producer_id` / `last_producer_epoch` let a retried InitProducerId (KIP-360) get the
    answer it lost; they live in memory only (TransactionLogValue v0 does not store them).
    `has_failed_epoch_fence`: a fencing bump was applied in memory but its PrepareAbort record
    failed to append; the next fence reuses that epoch instead of bumping again (the bumped
    epoch was never given to anyone)."""
    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TxnState
    partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    pending_state: TxnState | None = None
    has_failed_epoch_fence: bool = False

    @classmethod
    def new(cls, transactional_id: str, producer_id: int, txn_timeout_ms: int,
            now_ms: int) -> "TransactionMetadata":
        """A transactional id seen for the first time: Empty, no epoch yet (InitProducerId's
        first bump makes it 0)."""
        return cls(transactional_id, producer_id, NO_PRODUCER_ID, NO_PRODUCER_EPOCH,
                   NO_PRODUCER_EPOCH, txn_timeout_ms, S.EMPTY, set(), -1, now_ms)

    def __repr__(self) -> str:
        return (f"TransactionMetadata(transactionalId={self.transactional_id}, producerId="
                f"{self.producer_id}, producerEpoch={self.producer_epoch}, txnTimeoutMs="
                f"{self.txn_timeout_ms}, state={self.state}, pendingState={self.pending_state}, "
                f"topicPartitions={sorted(self.partitions)}, txnStartTimestamp="
                f"{self.txn_start_timestamp}, txnLastUpdateTimestamp="
                f"{self.txn_last_update_timestamp})")

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    # --------------------------------------------------------------------------- prepare_*
    def prepare_fence_producer_epoch(self) -> TxnTransit:
        """InitProducerId on an Ongoing transaction, or its timeout: bump the epoch (fencing the
        current producer) on the way to aborting. Never written: the manager turns it into a
        PrepareAbort at once."""
        if self.producer_epoch == MAX_PRODUCER_EPOCH:
            raise IllegalTransactionState(
                f"Cannot fence producer with epoch equal to Short.MaxValue since this would "
                f"overflow ({self.transactional_id})")
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(S.PREPARE_EPOCH_FENCE, self.producer_id, bumped, NO_PRODUCER_EPOCH,
                             self.txn_timeout_ms, frozenset(self.partitions),
                             self.txn_start_timestamp, self.txn_last_update_timestamp)

    def prepare_increment_producer_epoch(self, new_txn_timeout_ms: int,
                                         expected_epoch: int | None,
                                         now_ms: int) -> tuple[int, TxnTransit | None]:
        """InitProducerId's epoch bump: (error, transit). With no expected epoch the epoch is
        bumped and no last epoch kept; KIP-360's expected epoch is bumped when it is the current
        one, answered unchanged when it is the last one (a retry that lost its response), and
        fenced otherwise (PRODUCER_FENCED, 90)."""
        if self.is_producer_epoch_exhausted:
            raise IllegalTransactionState(
                f"Cannot allocate any more producer epochs for producerId {self.producer_id}")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last_epoch = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            return ErrorCode.PRODUCER_FENCED, None
        return ErrorCode.NONE, self._prepare(S.EMPTY, self.producer_id, epoch, last_epoch,
                                             new_txn_timeout_ms, frozenset(), -1, now_ms)

    def prepare_producer_id_rotation(self, new_producer_id: int, new_txn_timeout_ms: int,
                                     now_ms: int, record_last_epoch: bool) -> TxnTransit:
        """InitProducerId once the epochs are exhausted: a new producer id at epoch 0."""
        if self.state in (S.ONGOING, S.PREPARE_ABORT, S.PREPARE_COMMIT):
            raise IllegalTransactionState(
                "Cannot rotate producer ids while a transaction is still pending")
        last_epoch = self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH
        return self._prepare(S.EMPTY, new_producer_id, 0, last_epoch, new_txn_timeout_ms,
                             frozenset(), -1, now_ms)

    def prepare_add_partitions(self, added, now_ms: int) -> TxnTransit:
        """AddPartitionsToTxn / AddOffsetsToTxn: Ongoing with the union of partitions; a new
        transaction starts its clock now."""
        start = now_ms if self.state in EXPIRATION_ALLOWED else self.txn_start_timestamp
        return self._prepare(S.ONGOING, self.producer_id, self.producer_epoch,
                             self.last_producer_epoch, self.txn_timeout_ms,
                             frozenset(self.partitions) | frozenset(added), start, now_ms)

    def prepare_abort_or_commit(self, new_state: TxnState, now_ms: int) -> TxnTransit:
        return self._prepare(new_state, self.producer_id, self.producer_epoch,
                             self.last_producer_epoch, self.txn_timeout_ms,
                             frozenset(self.partitions), self.txn_start_timestamp, now_ms)

    def prepare_complete(self, now_ms: int) -> TxnTransit:
        """Markers are being written: CompleteCommit / CompleteAbort, with no partitions."""
        new_state = S.COMPLETE_COMMIT if self.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        # The Prepare* record is in the log, so an earlier failed fence no longer matters.
        self.has_failed_epoch_fence = False
        return self._prepare(new_state, self.producer_id, self.producer_epoch,
                             self.last_producer_epoch, self.txn_timeout_ms, frozenset(),
                             self.txn_start_timestamp, now_ms)

    def prepare_dead(self) -> TxnTransit:
        """Expiration of the transactional id (its tombstone is written, not this state)."""
        return self._prepare(S.DEAD, self.producer_id, self.producer_epoch,
                             self.last_producer_epoch, self.txn_timeout_ms, frozenset(),
                             self.txn_start_timestamp, self.txn_last_update_timestamp)

    def _prepare(self, new_state: TxnState, producer_id: int, epoch: int, last_epoch: int,
                 txn_timeout_ms: int, partitions: frozenset, start_ms: int,
                 update_ms: int) -> TxnTransit:
        if self.pending_state is not None:
            raise IllegalTransactionState(
                f"Preparing transaction state transition to {new_state} while it already a "
                f"pending state {self.pending_state} ({self.transactional_id})")
        if producer_id < 0:
            raise IllegalTransactionState(f"Illegal new producer id {producer_id}")
        if new_state is not S.DEAD and epoch < 0:
            raise IllegalTransactionState(f"Illegal new producer epoch {epoch}")
        if self.state not in VALID_PREVIOUS_STATES[new_state]:
            raise IllegalTransactionState(
                f"Preparing transaction state transition to {new_state} failed since the "
                f"target state {new_state} is not a valid previous state of the current state "
                f"{self.state} ({self.transactional_id})")
        self.pending_state = new_state
        return TxnTransit(producer_id, self.producer_id, epoch, last_epoch, txn_timeout_ms,
                          new_state, partitions, start_ms, update_ms)

    # ------------------------------------------------------------------------- completion
    def complete_transition_to(self, transit: TxnTransit) -> None:
        """Applies a prepared transit once its record is in the log, checking that it is the
        move that was prepared (Kafka's completeTransitionTo)."""
        to_state = self.pending_state
        if to_state is None or to_state is not transit.state:
            self._fail(transit)
        if to_state is S.EMPTY:                     # InitProducerId
            if (self.producer_epoch != transit.producer_epoch and not self._valid_bump(transit)) \
                    or transit.partitions or transit.txn_start_timestamp != -1:
                self._fail(transit)
            self.txn_timeout_ms = transit.txn_timeout_ms
            self.producer_epoch = transit.producer_epoch
            self.last_producer_epoch = transit.last_producer_epoch
            self.producer_id = transit.producer_id
            self.last_producer_id = transit.last_producer_id
        elif to_state is S.ONGOING:                 # AddPartitions / AddOffsets
            if not self._same_producer(transit) or not self.partitions <= transit.partitions \
                    or self.txn_timeout_ms != transit.txn_timeout_ms:
                self._fail(transit)
            self.txn_start_timestamp = transit.txn_start_timestamp
            self.partitions |= transit.partitions
        elif to_state in PREPARE_STATES:            # EndTxn
            if not self._same_producer(transit) or self.partitions != transit.partitions \
                    or self.txn_timeout_ms != transit.txn_timeout_ms \
                    or self.txn_start_timestamp != transit.txn_start_timestamp:
                self._fail(transit)
        elif to_state in COMPLETE_STATES:           # markers written
            if not self._same_producer(transit) or self.txn_timeout_ms != transit.txn_timeout_ms \
                    or transit.txn_start_timestamp == -1:
                self._fail(transit)
            self.txn_start_timestamp = transit.txn_start_timestamp
            self.partitions.clear()
        else:
            # PrepareEpochFence is never completed (it turns into PrepareAbort), and an expired
            # id is removed by its tombstone's follow-up, never moved to Dead.
            self._fail(transit)
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.pending_state = None
        self.state = to_state

    def remove_partition(self, partition: TopicPartition) -> None:
        """A marker was written to this partition (only while Prepare*)."""
        if self.state not in PREPARE_STATES:
            raise IllegalTransactionState(
                f"Transaction metadata's current state is {self.state}, and its pending state is "
                f"{self.pending_state} while trying to remove partitions whose txn marker has "
                f"been sent, this is not expected ({self.transactional_id})")
        self.partitions.discard(partition)

    def _same_producer(self, transit: TxnTransit) -> bool:
        return transit.producer_epoch == self.producer_epoch and \
            transit.producer_id == self.producer_id

    def _valid_bump(self, transit: TxnTransit) -> bool:
        return transit.producer_epoch == self.producer_epoch + 1 or \
            (transit.producer_epoch == 0 and transit.producer_id != self.producer_id)

    def _fail(self, transit: TxnTransit):
        raise IllegalTransactionState(
            f"TransactionalId {self.transactional_id} failed transition to state {transit} due "
            f"to unexpected metadata {self!r}")

