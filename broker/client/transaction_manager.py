"""The producer's idempotence and transactions: its producer id and epoch, the sequence numbers
of each partition, and the calls to the transaction coordinator (Java's TransactionManager).

Theory of operation. An idempotent producer asks any broker for a producer id
(InitProducerId without a transactional id); a transactional one finds the coordinator of its
`transactional.id` (FindCoordinator, key type 1) and asks it, which also fences an older
producer with the same id and aborts what that one left open. Each batch then carries the id,
the epoch and the partition's next sequence number, given when the batch is first sent and kept
through its retries, so the broker drops a retried batch it already has; the producer keeps one
batch per partition in flight (see broker/client/producer.py), so sequences reach the broker in
order.

A transaction: `begin()` opens it locally; before a batch goes to a partition new to the
transaction, `add_partitions` registers the partition with the coordinator
(AddPartitionsToTxn v3, the client's version); `end(commit)` sends EndTxn once the records are
acknowledged, and the coordinator writes the markers. A transaction that added no partition
ends without asking the coordinator, as Java's does.

States, as Java's: UNINITIALIZED until `init`, then READY; IN_TRANSACTION after `begin`;
COMMITTING_TRANSACTION / ABORTING_TRANSACTION from the commit or abort call (no more sends)
until EndTxn is answered, then READY (a commit or abort that failed on its way may be called
again); ABORTABLE_ERROR when a record of the transaction failed (only an abort gets out of it:
the batches not sent yet fail with it); FATAL when the producer was fenced by a newer one with
its id (nothing more can be done with it).
"""
from __future__ import annotations

import asyncio
import time

from protocol.errors import ErrorCode, KafkaError
from protocol.messages import AddPartitionsToTxnRequest, EndTxnRequest, InitProducerIdRequest

from broker.client.errors import ClientError, KafkaTimeoutError

TRANSACTION_COORDINATOR = 1          # FindCoordinator key type

# Asked again after a backoff: the coordinator is elsewhere now or still loading, or the
# previous transaction's markers are still being written (Java's retriable cases).
_COORDINATOR_MOVED = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})
_AGAIN = _COORDINATOR_MOVED | {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                               ErrorCode.CONCURRENT_TRANSACTIONS,
                               ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                               ErrorCode.REQUEST_TIMED_OUT}
# The producer cannot go on: a newer instance with the same transactional.id took over.
FENCED = frozenset({ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH,
                    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    ErrorCode.INVALID_PRODUCER_ID_MAPPING})

UNINITIALIZED, READY, IN_TRANSACTION, COMMITTING, ABORTING, ABORTABLE_ERROR, FATAL = (
    "UNINITIALIZED", "READY", "IN_TRANSACTION", "COMMITTING_TRANSACTION",
    "ABORTING_TRANSACTION", "ABORTABLE_ERROR", "FATAL_ERROR")


class TransactionError(ClientError):
    """A transactional call made in the wrong state, or one the producer cannot recover from."""


class TransactionManager:
    def __init__(self, cluster, transactional_id: str | None, *,
                 transaction_timeout_ms: int = 60000, request_timeout_ms: int = 30000,
                 retry_backoff_ms: int = 100, max_block_ms: int = 60000):
        self.cluster = cluster
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.request_timeout = request_timeout_ms / 1000
        self.retry_backoff = retry_backoff_ms / 1000
        self.max_block = max_block_ms / 1000
        self.producer_id = -1
        self.epoch = -1
        self.state = UNINITIALIZED
        self.last_error: Exception | None = None
        self._sequences: dict = {}
        self._partitions: set = set()          # registered with the coordinator
        self._coordinator: int | None = None
        self._init_lock = asyncio.Lock()
        # A batch with a sequence failed for good: the partition's sequences have a gap the
        # broker would refuse, so the epoch moves on and every sequence starts again at 0
        # (KIP-360): locally for an idempotent producer, by the coordinator after an abort.
        self._needs_bump = False

    @property
    def transactional(self) -> bool:
        return self.transactional_id is not None

    # --- producer id and sequences ----------------------------------------------------------

    async def init(self) -> None:
        """InitProducerId (for a transactional producer: from its coordinator, which fences
        an older instance and aborts what it left open)."""
        async with self._init_lock:
            if self.producer_id >= 0 and not self.transactional:
                return
            if self.transactional and self.state != UNINITIALIZED:
                raise TransactionError(f"TransactionalId {self.transactional_id}: Invalid "
                                       f"transition attempted from state {self.state} to state "
                                       f"INITIALIZING")
            request = InitProducerIdRequest(transactional_id=self.transactional_id,
                                            transaction_timeout_ms=self.transaction_timeout_ms,
                                            producer_id=-1, producer_epoch=-1)
            response = await self._call(request, "InitProducerId", coordinator=self.transactional)
            self.producer_id, self.epoch = response.producer_id, response.producer_epoch
            self._sequences.clear()
            self.state = READY

    async def ensure_producer_id(self) -> None:
        if self.producer_id < 0:
            if self.transactional:
                raise TransactionError("Cannot send before initTransactions() completed "
                                       "(transactions are enabled)")
            await self.init()

    def maybe_bump_epoch(self) -> None:
        """Before a new batch's sequence: an idempotent producer's local epoch bump (Java's
        bumpIdempotentEpochAndResetIdIfNeeded; the broker takes a higher epoch from sequence 0)."""
        if self._needs_bump and not self.transactional and self.epoch < 0x7FFF:
            self._needs_bump = False
            self.epoch += 1
            self._sequences.clear()

    def next_sequence(self, tp, count: int) -> int:
        """The base sequence of a batch of `count` records for `tp`, the partition's next one
        moved past it (Java's int wrap)."""
        sequence = self._sequences.get(tp, 0)
        self._sequences[tp] = (sequence + count) & 0x7FFFFFFF
        return sequence

    # --- transactions -----------------------------------------------------------------------

    def check_send(self) -> None:
        """Raise unless a record may be sent now."""
        if not self.transactional:
            return
        if self.state == FATAL:
            raise TransactionError(f"The producer cannot send: {self.last_error}")
        if self.state == ABORTABLE_ERROR:
            raise TransactionError(f"Cannot send: the transaction must be aborted "
                                   f"({self.last_error})")
        if self.state != IN_TRANSACTION:
            raise TransactionError(
                "Cannot call send in state " + self.state if self.state != UNINITIALIZED else
                "Cannot perform a 'send' before completing a call to initTransactions when "
                "transactions are enabled.")

    def begin(self) -> None:
        self._require(READY, "beginTransaction")
        self.state = IN_TRANSACTION
        self._partitions.clear()

    @property
    def open(self) -> bool:
        """A transaction begun and not ended (a close aborts it)."""
        return self.transactional and self.state in (IN_TRANSACTION, COMMITTING, ABORTING,
                                                     ABORTABLE_ERROR)

    @property
    def failed(self) -> Exception | None:
        """The error that leaves only an abort (or nothing) to do, if any."""
        return self.last_error if self.state in (ABORTABLE_ERROR, FATAL) or (
            self.state == ABORTING and self.last_error is not None) else None

    def begin_completing(self, commit: bool) -> None:
        """commitTransaction / abortTransaction called: no send from now on. A commit of a
        transaction with a failed record raises (abort it); an abort is allowed from every
        state of an open transaction."""
        what = "commitTransaction" if commit else "abortTransaction"
        if self.state == FATAL:
            raise TransactionError(f"Cannot call {what}: the producer failed ({self.last_error})")
        if commit:
            if self.state == ABORTABLE_ERROR:
                raise TransactionError(f"Cannot commit transaction: a record failed "
                                       f"({self.last_error}); abort it")
            if self.state not in (IN_TRANSACTION, COMMITTING):
                self._require(IN_TRANSACTION, what)
            self.state = COMMITTING
        else:
            if self.state not in (IN_TRANSACTION, ABORTABLE_ERROR, ABORTING, COMMITTING):
                self._require(IN_TRANSACTION, what)
            self.state = ABORTING

    def batch_failed(self, error: Exception, *, sequenced: bool, aborted: bool) -> None:
        """A batch's records failed (`aborted`: dropped by abort_transaction); `sequenced`: it
        had been sent, so its sequence numbers were used."""
        if sequenced:
            self._needs_bump = True
        if not aborted:
            self.fail(error)

    def fail(self, error: Exception) -> None:
        """A record of the transaction failed: only an abort is possible now (fenced: nothing).
        During a commit the commit then fails; during an abort nothing changes."""
        if not self.transactional or self.state == FATAL:
            return
        if isinstance(error, KafkaError) and int(error.error_code) in FENCED:
            self.state, self.last_error = FATAL, error
        elif self.state in (IN_TRANSACTION, COMMITTING):
            self.state, self.last_error = ABORTABLE_ERROR, error

    async def add_partitions(self, tps) -> None:
        """Register `tps` not yet in the transaction with its coordinator."""
        new = sorted(set(tps) - self._partitions)
        if not self.transactional or not new:
            return
        by_topic: dict[str, list] = {}
        for topic, partition in new:
            by_topic.setdefault(topic, []).append(partition)
        R = AddPartitionsToTxnRequest
        request = R(v3_and_below_transactional_id=self.transactional_id,
                    v3_and_below_producer_id=self.producer_id,
                    v3_and_below_producer_epoch=self.epoch,
                    v3_and_below_topics=[R.AddPartitionsToTxnTopic(name=t, partitions=ps)
                                         for t, ps in by_topic.items()])
        await self._call(request, "AddPartitionsToTxn", coordinator=True, cap=3)
        self._partitions.update(new)

    async def end(self, commit: bool) -> None:
        """EndTxn, when the transaction registered a partition; READY after it. Called after
        `begin_completing` and the flush (a record failed meanwhile: the commit raises)."""
        if commit and self.state == ABORTABLE_ERROR:
            raise TransactionError(f"Cannot commit transaction: a record failed "
                                   f"({self.last_error}); abort it")
        if self.state == FATAL:
            raise TransactionError(f"The producer failed ({self.last_error})")
        if self._partitions:
            request = EndTxnRequest(transactional_id=self.transactional_id,
                                    producer_id=self.producer_id, producer_epoch=self.epoch,
                                    committed=commit)
            await self._call(request, "EndTxn", coordinator=True)
        self._partitions.clear()
        if self._needs_bump:
            # KIP-360: the coordinator gives the same producer id a new epoch, sequences anew
            bump = InitProducerIdRequest(transactional_id=self.transactional_id,
                                         transaction_timeout_ms=self.transaction_timeout_ms,
                                         producer_id=self.producer_id, producer_epoch=self.epoch)
            response = await self._call(bump, "InitProducerId", coordinator=True)
            self.producer_id, self.epoch = response.producer_id, response.producer_epoch
            self._sequences.clear()
            self._needs_bump = False
        self.state, self.last_error = READY, None

    def _require(self, state: str, what: str) -> None:
        if not self.transactional:
            raise TransactionError(f"Cannot use {what} without a transactional.id")
        if self.state == FATAL:
            raise TransactionError(f"Cannot call {what}: the producer failed ({self.last_error})")
        if self.state != state:
            raise TransactionError(f"Invalid transition attempted from state {self.state} "
                                   f"by {what}")

    # --- requests ---------------------------------------------------------------------------

    async def _call(self, request, what: str, *, coordinator: bool, cap: int | None = None):
        """Send `request` (to the transaction coordinator, found again when it moved), retrying
        the retriable answers with backoff for up to max.block.ms; returns the response."""
        deadline = time.monotonic() + self.max_block
        attempt = 0
        while True:
            attempt += 1
            try:
                node = await self._coordinator_node() if coordinator else None
                response = await self.cluster.send(node, request, cap=cap,
                                                   timeout=self.request_timeout)
                code = _error_of(response)
            except KafkaError as exc:           # FindCoordinator's own error
                code, response = ErrorCode(exc.error_code), None
            except ClientError as exc:
                if not getattr(exc, "retriable", False):
                    raise
                code = ErrorCode.COORDINATOR_NOT_AVAILABLE
            if code == ErrorCode.NONE:
                return response
            if code in _COORDINATOR_MOVED:
                self._coordinator = None
            if code not in _AGAIN:
                error = KafkaError(code, f"{what} failed: {code.name}")
                if code in FENCED and self.transactional:
                    self.state, self.last_error = FATAL, error
                raise error
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"Timed out after {self.max_block:.0f}s waiting for "
                                        f"{what} ({code.name})")
            # Java retries CONCURRENT_TRANSACTIONS quickly (the markers take milliseconds)
            backoff = (0.02 if code == ErrorCode.CONCURRENT_TRANSACTIONS
                       else self.retry_backoff * min(2 ** (attempt - 1), 10))
            await asyncio.sleep(backoff)

    async def _coordinator_node(self) -> int:
        if self._coordinator is None:
            self._coordinator = await self.cluster.find_coordinator(self.transactional_id,
                                                                    TRANSACTION_COORDINATOR)
        return self._coordinator


def _error_of(response) -> ErrorCode:
    """The first error of an InitProducerId, EndTxn or AddPartitionsToTxn (v3) response."""
    code = getattr(response, "error_code", 0)
    if code:
        return ErrorCode(code)
    worst = ErrorCode.NONE
    for topic in getattr(response, "results_by_topic_v3_and_below", None) or ():
        for partition in topic.results_by_partition:
            if partition.partition_error_code and \
                    partition.partition_error_code != ErrorCode.OPERATION_NOT_ATTEMPTED:
                return ErrorCode(partition.partition_error_code)
            if partition.partition_error_code:
                worst = ErrorCode(partition.partition_error_code)
    return worst
