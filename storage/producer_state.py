"""Kafka's ProducerStateManager for one partition: idempotence and transaction bookkeeping.

Pure and synchronous: no I/O, no clock (callers pass timestamps). The log owns one instance per
partition, calls `check` before an append and `update` after it, replays batches through
`update_from_batch` on recovery, and writes/reads `.snapshot` files with `encode_snapshot` /
`decode_snapshot` (the bytes only; file naming and fsync belong to the log).

Per producer id it keeps the epoch, the last 5 appended batches (Kafka's
NUM_BATCHES_TO_RETAIN, which is also the producer's max.in.flight.requests.per.connection bound
for idempotence) as (first_seq, last_seq, first_offset, last_offset, timestamp), the coordinator
epoch of its last transaction marker and the first offset of its open transaction.

Transactions (Kafka's ongoingTxns and unreplicatedTxns): `ongoing` maps the first offset of each
open transaction to its producer; a marker moves it to `unreplicated` (first offset -> (producer,
marker offset)) until the high watermark passes the marker (`on_high_watermark`). The first
unstable offset is the smallest first offset of either; the partition's last stable offset is
that, capped by the high watermark, and read_committed consumers read below it.

Verification (KIP-890 part 1, Kafka's VerificationStateEntry and VerificationGuard): before a
producer's first transactional write to the partition, the leader asks the transaction
coordinator whether the partition is in the producer's transaction. `start_verification` opens a
`VerificationEntry` for the producer (or returns NOT_VERIFYING when its transaction is already
open here); any transactional batch of the producer appended afterwards (its first write, or a
marker) drops the entry. The write itself must carry its entry (`check_verified`): if a marker
ended the transaction between the coordinator's answer and the append, the entry is gone and the
write is refused (INVALID_TXN_STATE) instead of opening a transaction the coordinator does not
know about, which would hold the last stable offset back for good (a hanging transaction). Each
entry is a new object, so a stale answer cannot pass for a later verification (Kafka's ABA
case). An entry also blocks sequences above the lowest one seen while verifying
(OUT_OF_ORDER_SEQUENCE_NUMBER), and entries are forgotten with expired producers. In memory
only, as in Kafka.

Rules (Kafka 3.x, origin "client"):
- Duplicate: same epoch and a retained batch with the same first and last sequence -> the
  append is skipped and the original offsets are returned (checked first).
- Epoch: a lower epoch than the current one -> INVALID_PRODUCER_EPOCH.
- A new (higher) epoch must start at sequence 0, unless the producer was unknown here.
- Same epoch: first_seq must be last_seq + 1, wrapping from 2**31-1 to 0 ->
  else OUT_OF_ORDER_SEQUENCE_NUMBER.
- An unknown producer id (never seen, expired, or removed by retention) is accepted with any
  sequence, as Kafka 2.5+ does (KIP-360).

Snapshot format (Kafka's ProducerStateManager, version 1), big-endian::

    version                   int16    1
    crc                       uint32   CRC32C of everything after this field
    producer_entries          int32 count, then per entry:
      producer_id             int64
      producer_epoch          int16
      last_sequence           int32
      last_offset             int64
      offset_delta            int32    last_offset - first offset of that batch
      timestamp               int64
      coordinator_epoch       int32
      current_txn_first_offset int64   -1 when no transaction is open

A snapshot keeps only the last batch of each producer, as Kafka's does.
"""
import struct
from collections import deque, namedtuple

import crc32c

from protocol.errors import ErrorCode, KafkaError
from storage.record_batch import (HEADER_SIZE, MAGIC_OFFSET, MAGIC_V2, ControlRecordType,
                                  RecordBatchView, iter_batches)

NUM_BATCHES_TO_RETAIN = 5            # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1
SNAPSHOT_VERSION = 1
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000   # producer.id.expiration.ms default (1 day)

BatchMetadata = namedtuple("BatchMetadata",
                           "first_seq last_seq first_offset last_offset timestamp")
BatchMetadata.__doc__ = "A retained batch of one producer; a duplicate check returns one."
CompletedTxn = namedtuple("CompletedTxn",
                          "producer_id first_offset last_offset aborted last_stable_offset")
CompletedTxn.__doc__ = """A transaction a marker just ended: its first record, the marker's offset,
whether it aborted, and the last stable offset once it ended (the first offset of the oldest
transaction of another producer still open, else last_offset + 1): a `.txnindex` entry."""

_SNAP_HEADER = struct.Struct(">hI")
_SNAP_COUNT = struct.Struct(">i")
_SNAP_ENTRY = struct.Struct(">qhiqiqiq")


class VerificationEntry:
    """A producer's first transactional write here, being verified with the coordinator (the
    module docstring); the object itself is Kafka's VerificationGuard."""
    __slots__ = ("timestamp", "lowest_sequence", "epoch")

    def __init__(self, timestamp, sequence, epoch):
        self.timestamp = timestamp
        self.lowest_sequence = sequence
        self.epoch = epoch

    def see(self, sequence, epoch):
        """Another write needing verification: keep the lowest sequence of the newest epoch
        (Kafka's maybeUpdateLowestSequenceAndEpoch)."""
        if epoch == self.epoch and sequence < self.lowest_sequence:
            self.lowest_sequence = sequence
        if epoch > self.epoch:
            self.epoch, self.lowest_sequence = epoch, sequence


# The guard of a write whose producer had its transaction open here already (Kafka's
# VerificationGuard.SENTINEL): allowed only while that transaction is still open.
NOT_VERIFYING = object()


def in_sequence(last_seq, next_seq):
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateEntry:
    __slots__ = ("producer_id", "producer_epoch", "batches", "coordinator_epoch",
                 "last_timestamp", "current_txn_first_offset")

    def __init__(self, producer_id, producer_epoch=NO_PRODUCER_EPOCH, coordinator_epoch=-1,
                 current_txn_first_offset=None):
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.batches = deque(maxlen=NUM_BATCHES_TO_RETAIN)
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = -1
        self.current_txn_first_offset = current_txn_first_offset

    def __repr__(self):
        return (f"ProducerStateEntry(id={self.producer_id}, epoch={self.producer_epoch}, "
                f"last_seq={self.last_seq}, last_offset={self.last_offset}, "
                f"txn_first_offset={self.current_txn_first_offset})")

    @property
    def last_seq(self):
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self):
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch, first_seq, last_seq):
        if epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


class ProducerStateManager:
    """Producer state of one partition. Not thread-safe: the log calls it under its append lock.
    `map_end_offset` is the offset after the last batch applied (recovery resumes from it)."""

    def __init__(self):
        self.producers = {}
        self.map_end_offset = 0
        self.ongoing = {}             # first offset -> producer id
        self.unreplicated = {}        # first offset -> (producer id, marker offset)
        self.verifying = {}           # producer id -> VerificationEntry

    def __len__(self):
        return len(self.producers)

    def last_entry(self, producer_id):
        return self.producers.get(producer_id)

    # --- verification (module docstring) ---
    def has_open_transaction(self, producer_id, epoch):
        """Kafka's hasOngoingTransaction: whatever the epoch. A fenced producer's write then
        needs no verification entry (which would hold back the live producer's sequences);
        `check` refuses it with INVALID_PRODUCER_EPOCH."""
        entry = self.producers.get(producer_id)
        return entry is not None and entry.current_txn_first_offset is not None

    def start_verification(self, producer_id, sequence, epoch, now_ms):
        """The guard a producer's transactional write must carry: NOT_VERIFYING when its
        transaction is open here already (nothing to ask the coordinator), else its
        VerificationEntry, opened now or still waiting from an earlier write."""
        if self.has_open_transaction(producer_id, epoch):
            return NOT_VERIFYING
        entry = self.verifying.get(producer_id)
        if entry is None:
            entry = self.verifying[producer_id] = VerificationEntry(now_ms, sequence, epoch)
        else:
            entry.see(sequence, epoch)
        return entry

    def check_verified(self, producer_id, epoch, first_seq, guard):
        """Before a client's transactional data batch is appended with the `guard`
        start_verification gave: raises KafkaError INVALID_TXN_STATE when its transaction is
        not open here and the guard is not the producer's current entry, and
        OUT_OF_ORDER_SEQUENCE_NUMBER for a sequence above the lowest one being verified (None:
        no sequence check)."""
        entry = self.verifying.get(producer_id)
        if not self.has_open_transaction(producer_id, epoch) and guard is not entry:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE,
                             "Record was not part of an ongoing transaction")
        if entry is not None and first_seq is not None and first_seq > entry.lowest_sequence:
            raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                             f"producer {producer_id}: sequence {first_seq} is above the "
                             f"earliest one being verified, {entry.lowest_sequence}")

    # --- append path ---
    def check(self, producer_id, epoch, first_seq, last_seq, is_transactional=None):
        """Validate a client batch before append. Returns the retained BatchMetadata when the
        batch is a duplicate (skip the append, answer with its offsets), else None.
        Raises KafkaError INVALID_PRODUCER_EPOCH or OUT_OF_ORDER_SEQUENCE_NUMBER, and
        INVALID_TXN_STATE for a batch that is not transactional (`is_transactional` False)
        while the producer's transaction is open here (Kafka's appendDataBatch)."""
        if producer_id < 0:
            return None
        entry = self.producers.get(producer_id)
        if entry is None:
            return None                   # unknown producer: any sequence (KIP-360)
        duplicate = entry.find_duplicate(epoch, first_seq, last_seq)
        if duplicate is not None:
            return duplicate
        current = entry.producer_epoch
        if epoch < current:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH,
                             f"producer {producer_id} epoch {epoch} is older than the current "
                             f"epoch {current}")
        if epoch != current:
            if first_seq != 0 and current != NO_PRODUCER_EPOCH:
                raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                 f"producer {producer_id}: a new epoch {epoch} must start at "
                                 f"sequence 0, not {first_seq}")
        elif current != NO_PRODUCER_EPOCH and not in_sequence(entry.last_seq, first_seq):
            raise KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                             f"producer {producer_id} epoch {epoch}: sequence {first_seq} does "
                             f"not follow {entry.last_seq}")
        if is_transactional is False and entry.current_txn_first_offset is not None:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE,
                             f"Expected transactional write from producer {producer_id}: its "
                             f"transaction is open since offset {entry.current_txn_first_offset}")
        return None

    def check_coordinator_data(self, producer_id, epoch):
        """Before a coordinator writes a producer's data batch (TxnOffsetCommit's offsets):
        INVALID_PRODUCER_EPOCH for an epoch older than the producer's, as Kafka's
        ProducerAppendInfo.checkProducerEpoch for every origin but replication."""
        entry = self.producers.get(producer_id)
        if entry is not None and epoch < entry.producer_epoch:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH,
                             f"epoch {epoch} of producer {producer_id} is older than its "
                             f"epoch {entry.producer_epoch}")

    def check_marker(self, producer_id, epoch, coordinator_epoch):
        """Before a COMMIT/ABORT marker is written by the transaction coordinator (Kafka's
        ProducerAppendInfo.appendEndTxnMarker checks): raises KafkaError INVALID_PRODUCER_EPOCH
        for an epoch older than the producer's, TRANSACTION_COORDINATOR_FENCED for a
        coordinator epoch older than the last marker's."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if epoch < entry.producer_epoch:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH,
                             f"marker epoch {epoch} of producer {producer_id} is older than "
                             f"its epoch {entry.producer_epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise KafkaError(ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                             f"coordinator epoch {coordinator_epoch} is older than "
                             f"{entry.coordinator_epoch} for producer {producer_id}")

    def update(self, producer_id, epoch, first_seq, last_seq, first_offset, last_offset,
               timestamp, is_transactional=False):
        """Record an appended data batch (after `check` passed and the log took it)."""
        if producer_id < 0:
            return
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id)
        if epoch != entry.producer_epoch:
            entry.batches.clear()          # a new epoch resets the sequence history
            entry.producer_epoch = epoch
        entry.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset,
                                           timestamp))
        entry.last_timestamp = timestamp
        if is_transactional:
            self.verifying.pop(producer_id, None)      # written: the open transaction rules
            if entry.current_txn_first_offset is None:
                entry.current_txn_first_offset = first_offset
                self.ongoing[first_offset] = producer_id
        self.map_end_offset = max(self.map_end_offset, last_offset + 1)

    def complete_txn(self, producer_id, epoch, control_type, coordinator_epoch, marker_offset,
                     timestamp):
        """A COMMIT/ABORT marker was appended. Returns the CompletedTxn (first_offset None if
        no transaction of this producer was open: a marker written again after a failover)."""
        self.verifying.pop(producer_id, None)          # the transaction ended
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id, epoch)
        # The leader refused a stale marker before writing it (check_marker); one that is in
        # the log anyway (replicated, replayed) is applied, as Kafka's REPLICATION origin does.
        first = entry.current_txn_first_offset
        entry.current_txn_first_offset = None
        last_stable = marker_offset + 1
        if first is not None:
            others = [f for f, pid in self.ongoing.items() if pid != producer_id]
            if others:
                last_stable = min(others)
            self.ongoing.pop(first, None)
            self.unreplicated[first] = (producer_id, marker_offset)
        entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
        if epoch != entry.producer_epoch:
            entry.batches.clear()
            entry.producer_epoch = epoch
        entry.last_timestamp = timestamp
        self.map_end_offset = max(self.map_end_offset, marker_offset + 1)
        return CompletedTxn(producer_id, first, marker_offset,
                            control_type == ControlRecordType.ABORT, last_stable)

    def update_from_batch(self, batch):
        """Apply one RecordBatchView of the log (append, recovery, rebuild). Returns the
        CompletedTxn for a transaction marker, else None."""
        if batch.producer_id < 0:
            self.map_end_offset = max(self.map_end_offset, batch.next_offset)
            return None
        if batch.is_control:
            if batch.records_count == 0:
                # The log cleaner emptied this marker: its whole transaction was cleaned away
                # (Kafka's ProducerAppendInfo skips it the same way).
                self.map_end_offset = max(self.map_end_offset, batch.next_offset)
                return None
            return self.complete_txn(batch.producer_id, batch.producer_epoch,
                                     batch.control_record_type(),
                                     _coordinator_epoch(batch), batch.last_offset,
                                     batch.max_timestamp)
        self.update(batch.producer_id, batch.producer_epoch, batch.base_sequence,
                    batch.last_sequence, batch.base_offset, batch.last_offset,
                    batch.max_timestamp, batch.is_transactional)
        return None

    # --- transactions ---
    def first_unstable_offset(self):
        """Smallest first offset of a transaction open or ended above the high watermark (the
        last stable offset is at most this), or None."""
        if not self.ongoing and not self.unreplicated:
            return None
        return min(min(self.ongoing, default=2**63), min(self.unreplicated, default=2**63))

    def on_high_watermark(self, high_watermark):
        """Transactions whose marker is below the high watermark are stable now."""
        if self.unreplicated:
            for first in [f for f, (_, last) in self.unreplicated.items()
                          if last < high_watermark]:
                del self.unreplicated[first]

    # --- lifecycle helpers for the log ---
    def remove_expired_producers(self, now_ms, expiration_ms=DEFAULT_PRODUCER_ID_EXPIRATION_MS):
        """Forget producers idle longer than producer.id.expiration.ms with no open txn."""
        expired = [pid for pid, e in self.producers.items()
                   if e.current_txn_first_offset is None
                   and now_ms - e.last_timestamp >= expiration_ms]
        for pid in expired:
            del self.producers[pid]
        for pid in [p for p, v in self.verifying.items()
                    if now_ms - v.timestamp >= expiration_ms]:
            del self.verifying[pid]      # a verification that never led to a write
        return expired

    def truncate_head(self, log_start_offset):
        """Retention/DeleteRecords moved the log start (Kafka's ProducerStateManager.
        onLogStartOffsetIncremented): completed transactions below it are forgotten; the
        producers are kept, as Kafka keeps them until producer.id.expiration.ms, so a retry of
        a batch that retention already removed is still answered as the duplicate it is and a
        gap in a producer's sequences is still OUT_OF_ORDER_SEQUENCE_NUMBER."""
        self.on_high_watermark(log_start_offset)
        if self.map_end_offset < log_start_offset:
            self.map_end_offset = log_start_offset

    def truncate_tail(self, end_offset):
        """The log was truncated to `end_offset` (replication): forget retained batches and open
        transactions at or past it. A producer left with nothing is forgotten, which makes it
        "unknown" (any next sequence accepted) rather than wrongly fenced; Kafka instead reloads
        an older snapshot and replays, which this pure class cannot do (the log does that; this
        is for callers without a log). A transaction whose marker is cut off is open again."""
        for first, (pid, last) in list(self.unreplicated.items()):
            if last >= end_offset:
                del self.unreplicated[first]
                entry = self.producers.get(pid)
                if first < end_offset and entry is not None:
                    entry.current_txn_first_offset = first
                    self.ongoing[first] = pid
        for first in [f for f in self.ongoing if f >= end_offset]:
            del self.ongoing[first]
        for pid in list(self.producers):
            entry = self.producers[pid]
            kept = [b for b in entry.batches if b.last_offset < end_offset]
            if len(kept) != len(entry.batches):
                entry.batches.clear()
                entry.batches.extend(kept)
            if entry.current_txn_first_offset is not None and \
                    entry.current_txn_first_offset >= end_offset:
                entry.current_txn_first_offset = None
            if not entry.batches and entry.current_txn_first_offset is None:
                del self.producers[pid]
        self.map_end_offset = min(self.map_end_offset, end_offset)

    def truncate_fully_and_start_at(self, offset):
        """Forget everything (log truncated below every snapshot, or deleted)."""
        self.producers.clear()
        self.ongoing.clear()
        self.unreplicated.clear()
        self.map_end_offset = offset

    # --- snapshots ---
    def encode_snapshot(self):
        """Kafka's `.snapshot` bytes for the current state (name it <map_end_offset>.snapshot)."""
        body = [_SNAP_COUNT.pack(len(self.producers))]
        for e in self.producers.values():
            last = e.batches[-1] if e.batches else None
            body.append(_SNAP_ENTRY.pack(
                e.producer_id, e.producer_epoch,
                last.last_seq if last else NO_SEQUENCE,
                last.last_offset if last else -1,
                last.last_offset - last.first_offset if last else 0,
                e.last_timestamp, e.coordinator_epoch,
                -1 if e.current_txn_first_offset is None else e.current_txn_first_offset))
        payload = b"".join(body)
        return _SNAP_HEADER.pack(SNAPSHOT_VERSION, crc32c.crc32c(payload)) + payload

    @classmethod
    def decode_snapshot(cls, data, map_end_offset=0):
        """A manager loaded from `.snapshot` bytes; ValueError if corrupt or unknown version."""
        if len(data) < _SNAP_HEADER.size + _SNAP_COUNT.size:
            raise ValueError("producer snapshot is truncated")
        version, crc = _SNAP_HEADER.unpack_from(data, 0)
        if version != SNAPSHOT_VERSION:
            raise ValueError(f"unknown producer snapshot version {version}")
        payload = memoryview(data)[_SNAP_HEADER.size:]
        if crc32c.crc32c(payload) != crc:
            raise ValueError("producer snapshot CRC mismatch")
        (count,) = _SNAP_COUNT.unpack_from(payload, 0)
        if count < 0 or len(payload) != _SNAP_COUNT.size + count * _SNAP_ENTRY.size:
            raise ValueError("producer snapshot size does not match its entry count")
        manager = cls()
        manager.map_end_offset = map_end_offset
        for (pid, epoch, last_seq, last_offset, delta, ts, coord_epoch,
             txn_first) in _SNAP_ENTRY.iter_unpack(payload[_SNAP_COUNT.size:]):
            entry = ProducerStateEntry(pid, epoch, coord_epoch,
                                       None if txn_first < 0 else txn_first)
            entry.last_timestamp = ts
            if last_offset >= 0:
                first_seq = NO_SEQUENCE
                if last_seq >= 0:
                    first_seq = last_seq - delta
                    if first_seq < 0:
                        first_seq += INT32_MAX + 1     # the batch wrapped past int32 max
                entry.batches.append(BatchMetadata(first_seq, last_seq, last_offset - delta,
                                                   last_offset, ts))
            manager.producers[pid] = entry
            if txn_first >= 0:
                manager.ongoing[txn_first] = pid
        return manager


def _coordinator_epoch(batch):
    """coordinator_epoch from a transaction marker's value (version int16, epoch int32)."""
    rec = batch.records()[0]
    if rec.value is None or len(rec.value) < 6:
        return -1
    return struct.unpack_from(">hi", rec.value)[1]


class LogProducerState:
    """Adapter for `storage.log.Log.producer_state` (its hook calls find_duplicate / update /
    truncate under the log's append lock): `log.producer_state = LogProducerState()`.

    `find_duplicate` runs before validation, as Kafka's duplicate check runs before the append:
    it looks at the first batch only (a client sends one v2 batch per partition) and ignores
    anything that validation will reject anyway (bad CRC, legacy, control, no producer id).
    """

    def __init__(self, manager=None):
        self.manager = manager if manager is not None else ProducerStateManager()

    def find_duplicate(self, records, log):
        """A LogAppendInfo(duplicate=True) for a retried batch, None for a new one; raises
        KafkaError INVALID_PRODUCER_EPOCH / OUT_OF_ORDER_SEQUENCE_NUMBER / INVALID_TXN_STATE
        (ProducerStateManager.check)."""
        view = memoryview(records)
        if len(view) < HEADER_SIZE or view[MAGIC_OFFSET] != MAGIC_V2:
            return None
        batch = RecordBatchView(view, 0)
        if batch.producer_id not in self.manager.producers:
            return None                    # unknown (or no) producer id: nothing to check
        if batch.is_control or batch.base_sequence < 0 or batch.size_in_bytes > len(view) \
                or not batch.is_valid():   # validation rejects these with Kafka's codes
            return None
        dup = self.manager.check(batch.producer_id, batch.producer_epoch, batch.base_sequence,
                                 batch.last_sequence, batch.is_transactional)
        if dup is None:
            return None
        from storage.log import LogAppendInfo      # storage.log imports this module's users
        # Kafka's UnifiedLog.append answers a duplicate with its batch's timestamp as the
        # log append time (the time the broker stamped, on a LogAppendTime topic).
        return LogAppendInfo(dup.first_offset, dup.last_offset, dup.timestamp, dup.last_offset,
                             dup.timestamp, log.log_start_offset,
                             dup.last_offset - dup.first_offset + 1, 0, duplicate=True)

    def check_coordinator_batches(self, batches, buffer):
        """Before a coordinator's append: every marker among `batches` passes check_marker,
        every producer's data batch check_coordinator_data."""
        for b in batches:
            if b[5] == MAGIC_V2:
                view = RecordBatchView(buffer, b[0])
                if view.is_control:
                    self.manager.check_marker(view.producer_id, view.producer_epoch,
                                              _coordinator_epoch(view))
                elif view.producer_id >= 0:
                    self.manager.check_coordinator_data(view.producer_id, view.producer_epoch)

    def check_verified(self, batches, buffer, guard, sequences=True):
        """Before an append with a verification guard (or {producer id: guard}, for a
        coordinator's: producers without one are not checked): every transactional data batch
        among `batches` passes ProducerStateManager.check_verified. `sequences`: the sequence
        check too (client appends only, as Kafka's checkSequence)."""
        for b in batches:
            if b[5] == MAGIC_V2:
                view = RecordBatchView(buffer, b[0])
                if not view.is_transactional or view.is_control:
                    continue
                pid = view.producer_id
                if type(guard) is dict:
                    if pid not in guard:
                        continue
                    own = guard[pid]
                else:
                    own = guard
                self.manager.check_verified(pid, view.producer_epoch,
                                            view.base_sequence if sequences else None, own)

    def update(self, batches, buffer, log=None):
        """After an append: `batches` are (position, size, base_offset, ...) summaries.
        Returns the CompletedTxns of the markers among them (usually none)."""
        completed = None
        for b in batches:
            if b[5] == MAGIC_V2:
                txn = self.manager.update_from_batch(RecordBatchView(buffer, b[0]))
                if txn is not None:
                    completed = (completed or []) + [txn]
        return completed

    def truncate(self, log):
        self.manager.truncate_tail(log.log_end_offset)
        self.manager.truncate_head(log.log_start_offset)

    def replay(self, buffer, start=0, end=None, on_completed=None):
        """Rebuild from log bytes (a segment's content, read with os.pread) after a restart:
        every complete v2 batch in buffer[start:end] is applied in order, so retried batches
        written before the restart are still recognised as duplicates, and open transactions
        are open again. `on_completed(txn)` is called for each CompletedTxn. Returns the
        offset after the last batch applied (or None when there was none)."""
        next_offset = None
        for batch in iter_batches(buffer, start, end):
            if batch.magic == MAGIC_V2:
                txn = self.manager.update_from_batch(batch)
                if txn is not None and on_completed is not None:
                    on_completed(txn)
                next_offset = batch.next_offset
        return next_offset
