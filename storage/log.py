"""`Log`: one partition's log — an ordered list of segments and the offsets that bound it.

Offsets (Kafka's words)::

    log_start_offset <= high_watermark <= log_end_offset
    recovery_point   <= log_end_offset     everything below it is fsynced

* log_start_offset: first offset a consumer may read; moved by retention (to the first kept
  segment's base offset) and by DeleteRecords (anywhere up to the high watermark).
* log_end_offset: one past the last appended offset.
* high_watermark: moved by the replica layer (`update_high_watermark`); consumers read below it.
* last_stable_offset: the high watermark, or the first offset of a transaction that is still
  open (or whose marker is not below the high watermark yet) when that is lower; read_committed
  consumers read below it. Each ABORT marker adds an entry to its segment's ``.txnindex``
  (storage/txn_index.py), which `collect_aborted_transactions` searches for a fetch.
* recovery_point: data below it survived an fsync; start-up after a crash re-validates only
  the segments at or above it.

Segments are kept in a list sorted by base offset, plus a parallel list of base offsets for
`bisect`.  Writers (append, roll, truncate, retention) hold `_lock` and *replace* both lists
(copy on write) rather than mutating them, so `read()` takes no lock: it works on whatever pair
it picked up, and a segment removed meanwhile stays readable because its file is closed only
after file.delete.delay.ms (it is renamed ``.deleted`` and queued in `_pending_deletes`).

Compaction (storage/cleaner.py): the log cleaner reads non-active segments without the lock,
writes their cleaned replacement as ``.cleaned`` files, and swaps it in with `replace_segments`
under the lock (``.cleaned`` -> ``.swap``, old segments -> ``.deleted``, ``.swap`` -> final
names; start-up finishes or drops a swap a crash interrupted, files.clean_partition_dir).  A
truncation or the log's deletion meanwhile bumps `generation`, and the swap is refused.

Durability: appends go to the page cache.  `flush()` (blocking; the broker runs it in an
executor) fsyncs segments up to an offset and then advances the recovery point.  A roll marks
the log dirty so the next `LogManager.flush_dirty()` fsyncs the finished segment, and
flush.messages / flush.ms make `needs_flush()` true (the broker's produce path then fsyncs
before answering, broker/replica_manager.py `flush_if_due`); an append itself never fsyncs.

Concurrency contract: every method runs on the event loop thread except `flush()`, `close()`
and loading (the constructor), which block on the disk and run in an executor; a log dir
move's `append_as_follower` to the *future* log, in the mover's executor; the cleaner's
`replace_segments`, in its thread; and a catching-up follower's large
`append_as_follower(..., fence=...)`, in its fetcher's append thread (its page-cache writes
beside the loop's socket reads): `fence_appends()`, called by every role change, the end of a
partition's fetching, a log dir move's swap and the log's closing, waits for such an append
under way (the lock) and makes one not begun yet fail with `StaleAppend`.
"""
import bisect
import dataclasses
import logging
import os
import struct
import threading
import time

from protocol.records import FileRegion
from storage import checkpoints, files, legacy
from storage.errors import CleaningAborted, CorruptIndex, CorruptRecord, OffsetOutOfRange, StaleAppend
from storage.leader_epoch import LeaderEpochCache
from storage.log_config import LogConfig
from storage.producer_state import LogProducerState, ProducerStateManager
from storage.txn_index import AbortedTxn
from storage.record_batch import (MAGIC_V2, NO_TIMESTAMP, PARTITION_LEADER_EPOCH_OFFSET,
                                  RecordBatchView, peek_batches)
from storage.compression import CorruptRecordError
from storage.segment import BatchInfo, LogSegment
from storage.validation import ORIGIN_CLIENT, Settings, validate_and_assign_offsets

log = logging.getLogger(__name__)

_EPOCH = struct.Struct(">i")
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3


@dataclasses.dataclass
class LogAppendInfo:
    """What an append did (Kafka's LogAppendInfo, trimmed to what the broker uses)."""
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int           # -1 unless LogAppendTime; a duplicate: its batch's timestamp
    log_start_offset: int
    record_count: int
    valid_bytes: int
    duplicate: bool = False        # an idempotent retry: nothing was appended
    flush_needed: bool = False     # flush.messages/flush.ms or a roll asks for flush_dirty()


@dataclasses.dataclass
class FetchDataInfo:
    """A read's result: `records` is a FileRegion ready for sendfile, or b"" when empty."""
    fetch_offset: int
    records: object
    first_offset: int = -1         # base offset of the first batch in `records`
    segment_base_offset: int = -1

    def __len__(self):
        return len(self.records)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _time_ms_of(time_ms):
    return time_ms if time_ms is not None else _now_ms


def parse_batches(buffer) -> list[BatchInfo]:
    """Header summaries of every complete batch in `buffer` (in-memory counterpart of
    segment.scan_headers)."""
    try:
        return [BatchInfo(t) for t in peek_batches(buffer)]
    except CorruptRecordError as exc:
        raise CorruptRecord(str(exc)) from None


class Log:
    """One partition's log directory.  See the module docstring for the offsets and locking."""

    def __init__(self, directory: str, config: LogConfig, *, topic_id=None,
                 recovery_point: int = 0, log_start_offset: int = 0, high_watermark: int = 0,
                 had_clean_shutdown: bool = False, time_ms=None):
        """Open (or create) the log in `directory` and load it.  Blocking: executor.

        After an unclean shutdown every segment at or above `recovery_point` is validated and
        its indexes rebuilt; a corrupt tail is truncated.  Missing or insane index files are
        rebuilt either way."""
        self.dir = os.path.abspath(directory)
        name = os.path.basename(self.dir)
        parsed = files.parse_partition_dir(name) or files.parse_future_dir(name)
        self.topic, self.partition = parsed if parsed else (os.path.basename(self.dir), 0)
        # Kafka's log lines start so: "[UnifiedLog partition=t-0, dir=/var/kafka-logs] "
        self._ident = f"[UnifiedLog partition={self.topic}-{self.partition}, " \
                      f"dir={os.path.dirname(self.dir)}] "
        self.config = config
        self._settings = (None, None)  # (config, its validation Settings): see append_as_leader
        self._time_ms = _time_ms_of(time_ms)
        self._lock = threading.RLock()
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._dir_dirty = not os.path.isdir(self.dir)     # creations to fsync at next flush
        self.generation = 0            # bumped by truncation and deletion (see the docstring)
        self._append_fence = 0         # bumped by fence_appends (see the docstring)
        self.truncated_below = None    # lowest truncation point the cleaner has not seen yet
        if self._dir_dirty:
            os.makedirs(self.dir, exist_ok=True)
        names = files.clean_partition_dir(self.dir, os.listdir(self.dir))
        self.topic_id = (checkpoints.read_partition_metadata(self.dir)
                         if files.PARTITION_METADATA in names else None)
        if topic_id is not None:
            self.assign_topic_id(topic_id)
        self._load_segments(names, recovery_point, had_clean_shutdown, log_start_offset)
        start_above_end = log_start_offset > self._segments[-1].next_offset
        if start_above_end:
            self._start_empty_at(log_start_offset)
        active = self._segments[-1]
        self._log_end_offset = active.next_offset
        self._log_start_offset = max(log_start_offset, self._segments[0].base_offset)
        self._log_start_offset = min(self._log_start_offset, self._log_end_offset)
        self._recovery_point = (self._log_end_offset if had_clean_shutdown
                                else min(recovery_point, self._log_end_offset))
        self._high_watermark = min(max(high_watermark, self._log_start_offset),
                                   self._log_end_offset)
        self._last_flush_ms = self._time_ms()
        self.leader_epoch_cache = LeaderEpochCache(
            self.dir, lambda: self._log_end_offset,
            exists=files.LEADER_EPOCH_CHECKPOINT in names)
        if files.LEADER_EPOCH_CHECKPOINT not in names:
            self._assign_epochs_from_batches(self._log_start_offset)
        elif self._first_recovered_offset is not None:
            self._assign_epochs_from_batches(self._first_recovered_offset)
        if start_above_end:
            self.leader_epoch_cache.clear()
        self.leader_epoch_cache.truncate_from_end(self._log_end_offset)
        self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
        self.producer_state = None
        self._load_producer_state(None if start_above_end else names,
                                  rebuild_txn_index_from=self._first_recovered_offset)

    def _start_empty_at(self, log_start_offset: int) -> None:
        """The checkpointed log start is above what the segments hold (DeleteRecords up to
        the end, then a crash lost the unflushed tail): as Kafka's LogLoader
        (deleteSegmentsIfLogStartGreaterThanLogEnd), every segment and producer snapshot goes
        and the log starts empty there, so no offset below it is handed out again."""
        log.warning("Deleting all segments of %s: the log start offset %d is above the log end "
                    "offset %d", self.dir, log_start_offset, self._segments[-1].next_offset)
        for segment in self._segments:
            segment.delete_files()
        for offset in self._snapshot_offsets():
            files.fs.remove(files.segment_path(self.dir, offset, files.SNAPSHOT_SUFFIX))
        segment = self._new_segment(log_start_offset, created_ms=self._time_ms())
        segment.make_active()
        self._set_segments([segment])
        self._first_recovered_offset = None
        self._recovered_bases = set()
        self._dir_dirty = True

    # -- loading -------------------------------------------------------------------------------

    def _load_segments(self, names: list[str], recovery_point: int, had_clean_shutdown: bool,
                       log_start_offset: int) -> None:
        bases = sorted(p[0] for p in map(files.parse_segment_file, names)
                       if p and p[1] == files.LOG_SUFFIX and not p[2])
        segments = [self._new_segment(base) for base in bases]
        if not segments:
            segments = [self._new_segment(max(log_start_offset, 0), created_ms=self._time_ms())]
            self._dir_dirty = True
        segments[-1].make_active()
        truncated_at = None
        self._first_recovered_offset = None
        self._recovered_bases = set()       # segments whose indexes recover() rewrote
        for i, segment in enumerate(segments):
            upper = segments[i + 1].base_offset if i + 1 < len(segments) else None
            needs_recovery = not had_clean_shutdown and (upper is None or upper > recovery_point)
            index_only = False
            if not needs_recovery:
                # After a clean shutdown only the active segment's indexes are checked (the
                # others were trimmed and fsynced when they rolled); after a crash all are.
                try:
                    if (upper is None or not had_clean_shutdown
                            or not segment.index_files_exist()):
                        segment.sanity_check()
                except (CorruptIndex, ValueError) as exc:
                    log.warning("Rebuilding index of %s: %s", segment.path, exc)
                    needs_recovery = index_only = True
            if not needs_recovery:
                continue
            if self._first_recovered_offset is None:
                self._first_recovered_offset = segment.base_offset
            self._recovered_bases.add(segment.base_offset)
            if segment.recover():
                log.warning("Truncated %s at byte %d: %s", segment.path, segment.size,
                            segment.recovery_error)
                if index_only and upper is not None:
                    # Below the recovery point (an index rebuild): as Kafka's
                    # loadSegmentFiles, only this segment is cut; the later ones were
                    # flushed and stay.
                    continue
                truncated_at = i
                break
        if truncated_at is not None:
            for segment in segments[truncated_at + 1:]:
                log.warning("Deleting %s, which follows a corrupt segment", segment.path)
                segment.delete_files()
            segments = segments[:truncated_at + 1]
            segments[-1].make_active()
        self._set_segments(segments)

    def _assign_epochs_from_batches(self, start_offset: int) -> None:
        """Add the leader epochs the v2 batches from `start_offset` on were written in to the
        epoch cache, as Kafka's LogSegment.recover does for the batches it recovers (only an
        epoch above the latest known one is added): the recovered tail after a crash, and
        the whole log when leader-epoch-checkpoint is missing (where Kafka would start with
        an empty history).  Reads four bytes per batch."""
        entries, last = [], self.leader_epoch_cache.latest_epoch
        for segment in self._segments:
            if segment.next_offset <= start_offset:
                continue
            for batch in segment.batches():
                if batch.magic != MAGIC_V2 or batch.last_offset < start_offset:
                    continue
                epoch = _EPOCH.unpack(segment.read_bytes(
                    batch.position + PARTITION_LEADER_EPOCH_OFFSET, 4))[0]
                if epoch >= 0 and (last is None or epoch > last):
                    entries.append((epoch, batch.base_offset))
                    last = epoch
        if entries:
            log.info("Leader epochs of %s-%d rebuilt from its batches from offset %d: %s",
                     self.topic, self.partition, start_offset, entries)
            self.leader_epoch_cache.assign_all(entries)

    def _new_segment(self, base_offset: int, created_ms: int = 0) -> LogSegment:
        return LogSegment(self.dir, base_offset,
                          index_interval_bytes=self.config.index_interval_bytes,
                          max_index_size=self.config.segment_index_bytes,
                          roll_jitter_ms=self.config.random_segment_jitter(),
                          created_ms=created_ms,
                          preallocate_bytes=self.config.segment_bytes if self.config.preallocate else 0)

    def _set_segments(self, segments: list[LogSegment]) -> None:
        # One assignment of a tuple: a reader sees the old pair or the new one, never a mix.
        self._view = (segments, [s.base_offset for s in segments])
        self._segments, self._bases = self._view

    def assign_topic_id(self, topic_id) -> None:
        topic_id = checkpoints.as_topic_id(topic_id)
        if topic_id is None or topic_id.int == 0 or topic_id == self.topic_id:
            return
        checkpoints.write_partition_metadata(self.dir, topic_id)
        self.topic_id = topic_id

    # -- offsets -------------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._view[0])

    @property
    def active_segment(self) -> LogSegment:
        return self._view[0][-1]

    @property
    def first_segment_base(self) -> int:
        """The oldest segment's base offset (Kafka's localLogStartOffset), without copying the
        segment list."""
        return self._view[0][0].base_offset

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._view[0])

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped to [log_start_offset, log_end_offset]."""
        self._high_watermark = min(max(offset, self._log_start_offset), self._log_end_offset)
        if self.producer_state is not None:
            self.producer_state.manager.on_high_watermark(self._high_watermark)
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        """read_committed consumers read below this (see the module docstring). An open
        transaction that began below the log start offset (DeleteRecords, retention) holds it
        at the log start, as Kafka's maybeIncrementFirstUnstableOffset: never below the
        earliest offset a consumer can be at."""
        hw = self._high_watermark
        unstable = self.producer_state.manager.first_unstable_offset() \
            if self.producer_state is not None else None
        if unstable is None:
            return hw
        return min(max(unstable, self._log_start_offset), hw)

    def fetch_upper_bound_offset(self, info: FetchDataInfo) -> int:
        """An offset at or past the end of the records a read returned (Kafka's
        LocalLog.addAbortedTransactions bound): from the offset index of their segment, else
        the next segment's base or the log end."""
        segments, bases = self._view
        i = bisect.bisect_left(bases, info.segment_base_offset)
        if i == len(bases) or bases[i] != info.segment_base_offset:
            return self._log_end_offset
        region = info.records
        found = segments[i].offset_index.upper_bound_offset(region.position + region.length)
        if found is not None:
            return found
        return bases[i + 1] if i + 1 < len(bases) else self._log_end_offset

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list:
        """The aborted transactions (producer_id, first_offset) a read_committed fetch of
        [fetch_offset, upper_bound) must be told about, from the ``.txnindex`` of the segment
        holding fetch_offset and of the later ones until a search is complete (Kafka's
        LocalLog.collectAbortedTransactions)."""
        segments, bases = self._view
        i = max(bisect.bisect_right(bases, fetch_offset) - 1, 0)
        found = []
        for segment in segments[i:]:
            if segment.deleted:
                continue
            txns, complete = segment.txn_index.collect(fetch_offset, upper_bound)
            found.extend((t.producer_id, t.first_offset) for t in txns)
            if complete:
                break
        return found

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        """Every aborted transaction overlapping [start, end), from the ``.txnindex`` files,
        ordered by first offset (the log cleaner's input; Kafka's collectAbortedTransactions)."""
        found = {}
        for segment in self._view[0]:
            if segment.deleted or segment.next_offset <= start:
                continue
            for txn in segment.txn_index.entries():
                if txn.last_offset >= start and txn.first_offset < end:
                    found[(txn.producer_id, txn.first_offset)] = txn
        return sorted(found.values(), key=lambda t: t.first_offset)

    # -- append --------------------------------------------------------------------------------

    def start_transaction_verification(self, producer_id: int, sequence: int,
                                       epoch: int) -> object:
        """The guard a producer's transactional write must carry to `append_as_leader`
        (storage/producer_state.py, Verification): NOT_VERIFYING when its transaction is open
        here, else the entry of a verification to ask the coordinator for."""
        with self._lock:
            return self.producer_state.manager.start_verification(producer_id, sequence, epoch,
                                                                  self._time_ms())

    def append_as_leader(self, records, leader_epoch: int, now_ms: int | None = None, *,
                         origin: str = ORIGIN_CLIENT, produce_version: int | None = None,
                         verification=None):
        """Validate producer `records` (storage/validation.py), assign offsets from the log
        end, stamp `leader_epoch`, append.  `origin="coordinator"` for the group/transaction
        coordinators' own appends. `verification`: the guard from
        start_transaction_verification when the broker verifies transactional writes (a
        transactional batch is then refused unless its transaction is open here or the guard
        is still the producer's), or {producer id: guard} for a coordinator's append; None
        checks nothing.

        Raises KafkaError with the validation's error code; a duplicate idempotent batch
        returns the offsets it was first written at and appends nothing.  Records with no
        complete batch append nothing and report first_offset = last_offset = -1."""
        now_ms = self._time_ms() if now_ms is None else now_ms
        with self._lock:
            # Only a client's retry is a duplicate (Kafka checks origin CLIENT only): the
            # coordinators write every transactional batch of theirs at sequence 0.
            duplicate = self._find_duplicate(records) if origin == ORIGIN_CLIENT else None
            if duplicate is not None:
                return duplicate
            config, settings = self._settings
            if config is not self.config:         # a new config object (dynamic change)
                settings = Settings(self.config)
                self._settings = (self.config, settings)
            result = validate_and_assign_offsets(records, self._log_end_offset, leader_epoch,
                                                 now_ms, settings, origin=origin,
                                                 produce_version=produce_version)
            batches = parse_batches(result.buffer)
            if not batches:
                return LogAppendInfo(-1, -1, -1, -1, result.log_append_time,
                                     self._log_start_offset, 0, 0)
            if origin != ORIGIN_CLIENT and self.producer_state is not None:
                self.producer_state.check_coordinator_batches(batches, result.buffer)
            if verification is not None and self.producer_state is not None:
                self.producer_state.check_verified(batches, result.buffer, verification,
                                                   sequences=origin == ORIGIN_CLIENT)
            self.leader_epoch_cache.assign(leader_epoch, result.first_offset)
            self._append(result.buffer, batches, now_ms)
            self._update_producer_state(batches, result.buffer)
            return LogAppendInfo(
                result.first_offset, result.last_offset, result.max_timestamp,
                result.offset_of_max_timestamp, result.log_append_time, self._log_start_offset,
                result.record_count, len(result.buffer), flush_needed=self.needs_flush(now_ms))

    def append_as_follower(self, records, now_ms: int | None = None, *,
                           fence: int | None = None) -> LogAppendInfo:
        """Append batches whose offsets the leader assigned (replication; recovery tools).

        Every batch must be CRC-valid and start past the log end offset, with one exception
        (Kafka's Partition.appendRecordsToFollowerOrFutureReplica): an empty log whose start
        offset falls inside the first batch (DeleteRecords moved the leader's log start into
        a batch, and this replica started its log there) starts again at that batch's base
        offset, as the leader's log holds that batch whole. `fence`: `append_fence` when the
        append was decided; fenced since, it raises StaleAppend and writes nothing."""
        now_ms = self._time_ms() if now_ms is None else now_ms
        # A memoryview stays one: a follower's batches are slices of the Fetch response's
        # buffer, written from there (no copy).
        buffer = records if isinstance(records, (bytes, memoryview)) else bytes(records)
        batches = parse_batches(buffer)
        if not batches:
            raise CorruptRecord("no complete record batch to append")
        buffer = buffer[:batches[-1].position + batches[-1].size]
        max_ts, max_ts_offset = -1, batches[0].base_offset
        for batch in batches:
            if batch.magic == MAGIC_V2:
                view = RecordBatchView(buffer, batch.position)
                if not view.is_valid():
                    raise CorruptRecord(f"batch at offset {batch.base_offset} fails its CRC")
            if batch.max_timestamp > max_ts:
                max_ts, max_ts_offset = batch.max_timestamp, batch.last_offset
        with self._lock:
            if fence is not None and fence != self._append_fence:
                raise StaleAppend(f"append to {self.topic}-{self.partition} fenced")
            first, end = batches[0].base_offset, self._log_end_offset
            if first < end and end == self._log_start_offset \
                    and batches[-1].last_offset >= end:
                log.info("Starting the log of %s-%d at %d instead of %d: its first batch "
                         "begins there (the log start offset is inside it)", self.topic,
                         self.partition, first, end)
                self.truncate_fully_and_start_at(first)
            elif first < end:
                raise CorruptRecord(f"follower append at {first} is below the log end offset "
                                    f"{end}")
            for batch in batches:
                if batch.magic == MAGIC_V2:
                    epoch = RecordBatchView(buffer, batch.position).partition_leader_epoch
                    self.leader_epoch_cache.assign(epoch, batch.base_offset)
            self._append(buffer, batches, now_ms)
            self._update_producer_state(batches, buffer)
            count = batches[-1].last_offset - batches[0].base_offset + 1
            return LogAppendInfo(batches[0].base_offset, batches[-1].last_offset, max_ts,
                                 max_ts_offset, -1, self._log_start_offset, count, len(buffer),
                                 flush_needed=self.needs_flush(now_ms))

    def _append(self, buffer, batches: list[BatchInfo], now_ms: int) -> None:
        """Write validated batches to the active segment, rolling first when needed."""
        last_offset = batches[-1].last_offset
        max_ts = max(b.max_timestamp for b in batches)
        segment = self.active_segment
        if segment.should_roll(self.config, len(buffer), max_ts, last_offset, now_ms):
            segment = self._roll(max(batches[0].base_offset, self._log_end_offset), now_ms)
        if not segment.offset_index.can_append_offset(last_offset):
            raise CorruptRecord(f"offsets {batches[0].base_offset}..{last_offset} do not fit "
                                f"one segment")
        segment.append(buffer, batches)
        self._log_end_offset = last_offset + 1

    # -- producer state (idempotence) ----------------------------------------------------------
    #
    # `producer_state` (storage/producer_state.py) remembers each idempotent producer's last
    # batches so a retry is answered with its original offsets.  It is rebuilt at load and
    # after a truncation from the newest ``<offset>.snapshot`` at or below the log end (written
    # on every roll and on close), replaying only the batches after it.  A snapshot is a
    # cache like the indexes: written without fsync, and one that fails its CRC is ignored
    # (the replay then starts further back).

    def _snapshot_offsets(self, names=None) -> list[int]:
        names = os.listdir(self.dir) if names is None else names
        return sorted(p[0] for p in map(files.parse_segment_file, names)
                      if p and p[1] == files.SNAPSHOT_SUFFIX and not p[2])

    def _load_producer_state(self, names=None, rebuild_txn_index_from: int | None = None) -> None:
        """From the newest usable snapshot plus a replay of the batches after it. With
        `rebuild_txn_index_from` (the first offset that recovery re-validated, whose segments'
        transaction indexes it emptied), the replay starts at or below it and writes their
        aborted transactions again, as Kafka's LogSegment.recover does."""
        manager, start = None, self._log_start_offset
        limit = self._log_end_offset if rebuild_txn_index_from is None \
            else min(self._log_end_offset, rebuild_txn_index_from)
        for offset in reversed(self._snapshot_offsets(names)):
            path = files.segment_path(self.dir, offset, files.SNAPSHOT_SUFFIX)
            if limit < offset <= self._log_end_offset:
                continue                    # kept: it is fine, only past the rebuild point
            # One at or below the log start is removed, as Kafka's truncateAndReload removes
            # it: below, it lacks the batches between it and the start, which the replay (from
            # the start) would skip (a follower's start follows the leader's; DeleteRecords);
            # at it, Kafka starts from the log start with no producers either.
            if self._log_start_offset < offset <= limit:
                try:
                    with open(path, "rb") as fh:
                        manager = ProducerStateManager.decode_snapshot(fh.read(), offset)
                    start = max(offset, start)
                    break
                except ValueError as exc:
                    log.warning("Ignoring producer snapshot %s: %s", path, exc)
            files.fs.remove(path)
        state = LogProducerState(manager)
        on_completed = None
        if rebuild_txn_index_from is not None:
            def on_completed(txn):
                if txn.aborted and txn.first_offset is not None \
                        and txn.last_offset >= rebuild_txn_index_from:
                    segments, bases = self._view
                    segment = segments[bisect.bisect_right(bases, txn.last_offset) - 1]
                    # Only a segment recovery emptied gets its entries again; the others
                    # (after an index rebuild further back) still have theirs.
                    if segment.base_offset in self._recovered_bases:
                        segment.txn_index.append(AbortedTxn(
                            txn.producer_id, txn.first_offset, txn.last_offset,
                            txn.last_stable_offset))
        self._replay_producer_state(state, start, on_completed)
        state.manager.truncate_head(self._log_start_offset)
        state.manager.on_high_watermark(self._high_watermark)
        self.producer_state = state

    def _replay_producer_state(self, state, start: int, on_completed=None) -> None:
        chunk = 8 * 1024 * 1024
        segments = self._view[0]
        for i, segment in enumerate(segments):
            if i + 1 < len(segments) and segments[i + 1].base_offset <= start:
                continue        # wholly below `start`: its indexes are not opened (lazily)
            first = segment.translate_offset(start) if segment.next_offset > start else None
            if first is None:
                continue
            begin = end = first.position
            for batch in segment.batches(first.position):
                end = batch.position + batch.size
                if end - begin >= chunk:
                    state.replay(segment.read_bytes(begin, end - begin), on_completed=on_completed)
                    begin = end
            if end > begin:
                state.replay(segment.read_bytes(begin, end - begin), on_completed=on_completed)

    def _take_producer_snapshot(self, durable: bool = False) -> None:
        if self.producer_state is None:
            return
        if not len(self.producer_state.manager) and self._log_end_offset == self._log_start_offset:
            return                  # an empty log replays nothing: no file to create
        path = files.segment_path(self.dir, self._log_end_offset, files.SNAPSHOT_SUFFIX)
        manager = self.producer_state.manager
        # fsync only when there is state to lose: 10,000 idle partitions close fast.
        files.fs.write_atomically(path, manager.encode_snapshot(), durable and len(manager) > 0)

    def _delete_snapshots(self, below: int | None = None, above: int | None = None) -> None:
        for offset in self._snapshot_offsets():
            if (below is not None and offset < below) or (above is not None and offset > above):
                files.fs.remove(files.segment_path(self.dir, offset, files.SNAPSHOT_SUFFIX))

    def _find_duplicate(self, records):
        """A LogAppendInfo for an already-appended idempotent batch, else None."""
        if self.producer_state is None:
            return None
        return self.producer_state.find_duplicate(records, self)

    def _update_producer_state(self, batches, buffer) -> None:
        if self.producer_state is not None:
            completed = self.producer_state.update(batches, buffer, self)
            if completed:
                segment = self.active_segment          # the one the markers went to
                for txn in completed:
                    if txn.aborted and txn.first_offset is not None:
                        segment.txn_index.append(AbortedTxn(
                            txn.producer_id, txn.first_offset, txn.last_offset,
                            txn.last_stable_offset))

    # -- roll and flush ------------------------------------------------------------------------

    def roll(self, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active one is empty)."""
        with self._lock:
            return self._roll(self._log_end_offset, self._time_ms() if now_ms is None else now_ms)

    def _roll(self, new_base: int, now_ms: int) -> LogSegment:
        segments = self._segments
        active = segments[-1]
        if active.size == 0 and active.base_offset == new_base:
            return active
        started = time.monotonic()
        active.on_become_inactive()
        self._take_producer_snapshot()
        segment = self._new_segment(new_base, created_ms=now_ms)
        segment.make_active()
        self._set_segments(segments + [segment])
        self._dir_dirty = True
        log.info("%sRolled new log segment at offset %d in %d ms.", self._ident, new_base,
                 (time.monotonic() - started) * 1000)
        return segment

    def needs_flush(self, now_ms: int | None = None) -> bool:
        """True when flush.messages / flush.ms are reached, or a rolled segment is unflushed."""
        unflushed = self._log_end_offset - self._recovery_point
        if unflushed <= 0:
            return False
        if self._recovery_point < self.active_segment.base_offset:
            return True
        if unflushed >= self.config.flush_messages:
            return True
        now_ms = self._time_ms() if now_ms is None else now_ms
        return now_ms - self._last_flush_ms >= self.config.flush_ms

    def flush(self, up_to: int | None = None) -> None:
        """fsync every segment holding offsets below `up_to` (default: the log end), then move
        the recovery point there.  Blocking: run in an executor."""
        segments, bases = self._view
        target = self._log_end_offset if up_to is None else min(up_to, self._log_end_offset)
        if target <= self._recovery_point:
            return
        first = max(bisect.bisect_right(bases, self._recovery_point) - 1, 0)
        for segment in segments[first:]:
            if segment.base_offset >= target and segment.base_offset > self._recovery_point:
                break
            try:
                segment.flush()
            except ValueError:
                if not segment.deleted:      # closed because it was deleted meanwhile: fine
                    raise
        if self._dir_dirty:
            self._dir_dirty = False
            files.fs.fsync_dir(self.dir)
        with self._lock:
            self._recovery_point = max(self._recovery_point, min(target, self._log_end_offset))
            self._last_flush_ms = self._time_ms()

    # -- read ----------------------------------------------------------------------------------

    def read(self, fetch_offset: int, max_bytes: int, max_offset: int | None = None,
             min_one_message: bool = True) -> FetchDataInfo:
        """Bytes starting at the batch holding `fetch_offset`, as a FileRegion.

        At most `max_bytes` (the range may end inside a batch, as Kafka's does), but at least
        the first whole batch when `min_one_message`; never a batch that reaches `max_offset`
        (exclusive; e.g. the high watermark).  Raises OffsetOutOfRange outside
        [log_start_offset, log_end_offset].  Takes no lock."""
        segments, bases = self._view
        end = self._log_end_offset
        if fetch_offset < self._log_start_offset or fetch_offset > end:
            raise OffsetOutOfRange(
                f"fetch offset {fetch_offset} outside [{self._log_start_offset}, {end}] "
                f"of {self.topic}-{self.partition}")
        if max_offset is None or max_offset > end:
            max_offset = end
        empty = FetchDataInfo(fetch_offset, b"")
        if fetch_offset >= max_offset:
            return empty
        i = max(bisect.bisect_right(bases, fetch_offset) - 1, 0)
        while i < len(segments):
            segment = segments[i]
            max_position = None
            if max_offset < end and (i + 1 == len(segments) or max_offset < bases[i + 1]):
                bound = segment.translate_offset(max_offset)
                max_position = bound.position if bound is not None else segment.size
            found = segment.read(fetch_offset, max_bytes, max_position, min_one_message)
            if found is not None:
                first, position, length = found
                if length <= 0:
                    return empty
                return FetchDataInfo(fetch_offset, FileRegion(segment.log_file, position, length),
                                     first.base_offset, segment.base_offset)
            if max_position is not None:
                return empty
            i += 1
        return empty

    def on_older_segment(self, offset: int, than: int) -> bool:
        """Whether `offset` lies in an older segment than `than` (Kafka's
        LogOffsetMetadata.onOlderSegment). Takes no lock."""
        _, bases = self._view
        return bisect.bisect_right(bases, offset) < bisect.bisect_right(bases, than)

    def read_batches(self, start_offset: int | None = None, end_offset: int | None = None):
        """Yield RecordBatchView for every batch overlapping [start, end) (tools, tests)."""
        start = self._log_start_offset if start_offset is None else start_offset
        end = self._log_end_offset if end_offset is None else end_offset
        for segment in self._view[0]:
            if segment.base_offset >= end:
                break
            first = segment.translate_offset(start)
            if first is None:
                continue
            for info in segment.batches(first.position):
                if info.base_offset >= end:
                    break
                yield RecordBatchView(segment.read_bytes(info.position, info.size), 0)

    # -- offsets by time -----------------------------------------------------------------------

    def legacy_offsets_before(self, timestamp: int, max_num_offsets: int, now_ms: int) -> list:
        """ListOffsets v0 (Kafka's legacyFetchOffsetsBefore): segment start offsets by the
        segment files' modification times, plus (log end, now) when the last segment holds
        data; up to `max_num_offsets` of those last modified at or before `timestamp` (-1:
        from the end, -2: from the start), newest first."""
        segments = self._view[0]
        pairs = [(max(s.base_offset, self._log_start_offset), s.last_modified_ms)
                 for s in segments]
        if segments[-1].size > 0:
            pairs.append((self._log_end_offset, now_ms))
        if timestamp == LATEST_TIMESTAMP:
            start = len(pairs) - 1
        elif timestamp == EARLIEST_TIMESTAMP:
            start = 0
        else:
            start = len(pairs) - 1
            while start >= 0 and pairs[start][1] > timestamp:
                start -= 1
        count = max(0, min(max_num_offsets, start + 1))
        return sorted((pairs[start - j][0] for j in range(count)), reverse=True)

    def fetch_offset_by_timestamp(self, timestamp: int):
        """ListOffsets: (offset, timestamp, leader_epoch) or None.

        -2 = earliest (log_start_offset), -1 = latest (log_end_offset), -3 = the record with
        the largest timestamp; otherwise the first record whose timestamp >= `timestamp`."""
        cache = self.leader_epoch_cache
        if timestamp == EARLIEST_TIMESTAMP:
            start = self._log_start_offset
            return start, -1, _epoch_or_none(cache.epoch_for_offset(start))
        if timestamp == LATEST_TIMESTAMP:
            return self._log_end_offset, -1, _epoch_or_none(cache.latest_epoch)
        segments = self._view[0]
        if timestamp == MAX_TIMESTAMP:
            # the first segment with the largest timestamp; with none (-1 everywhere), its
            # first record (Kafka: the first batch whose max timestamp is -1)
            start = self._log_start_offset
            live = [seg for i, seg in enumerate(segments)       # not wholly below the start
                    if i + 1 == len(segments) or segments[i + 1].base_offset > start]
            best = max(live, key=lambda s: s.max_timestamp)
            candidates, target = [best], best.max_timestamp
        else:
            candidates = [s for s in segments if s.max_timestamp >= timestamp]
            target = timestamp
        for segment in candidates:
            for batch in segment.batches_by_timestamp(target, self._log_start_offset):
                data = segment.read_bytes(batch.position, batch.size)
                if batch.magic == MAGIC_V2:
                    view = RecordBatchView(data, 0)
                    records, epoch = view.records(), view.partition_leader_epoch
                else:                           # a magic 0/1 entry of an adopted old log
                    records, epoch = legacy.iter_messages(data), -1
                for record in records:
                    if record.timestamp >= target and record.offset >= self._log_start_offset:
                        return record.offset, record.timestamp, epoch
        return None

    # -- compaction ----------------------------------------------------------------------------

    def replace_segments(self, new: LogSegment, old: list[LogSegment], generation: int) -> None:
        """Swap the cleaner's `new` segment (written and fsynced with suffix ``.cleaned``) in
        for `old`, the consecutive non-active segments it was cleaned from, as Kafka's
        replaceSegments: rename it ``.swap`` and fsync the folder (from here a crash completes
        the swap), replace the segments for readers, rename the old ones ``.deleted`` (removed
        after file.delete.delay.ms, so a reader holding one finishes), drop the suffix.
        Raises `CleaningAborted` if the log was truncated or deleted since `generation`, or
        an old segment is no longer in the log."""
        with self._lock:
            current = self._segments
            ids = {id(s) for s in current}
            if generation != self.generation or any(id(s) not in ids for s in old) \
                    or current[-1] in old:
                raise CleaningAborted(f"{self.topic}-{self.partition} changed while it was "
                                      f"being cleaned")
            new.change_suffix(files.SWAP_SUFFIX)
            files.fs.fsync_dir(self.dir)
            doomed = {id(s) for s in old}
            segments = [s for s in current if id(s) not in doomed] + [new]
            segments.sort(key=lambda s: s.base_offset)
            self._set_segments(segments)
            self._schedule_delete(old)
            new.change_suffix("")
        files.fs.fsync_dir(self.dir)

    def mark_deleted(self) -> None:
        """The partition is being deleted: a clean in progress must not swap, a follower
        append not begun must not write."""
        with self._lock:
            self.generation += 1
            self._append_fence += 1

    def active_producers(self) -> list:
        """[(producer id, epoch, last sequence, last timestamp, coordinator epoch, first offset
        of its open transaction or -1)] (DescribeProducers), read under the lock: a catching-up
        follower's appends update the table from its fetcher's thread."""
        with self._lock:
            state = self.producer_state
            if state is None:
                return []
            return [(e.producer_id, e.producer_epoch, e.last_seq, e.last_timestamp,
                     e.coordinator_epoch,
                     -1 if e.current_txn_first_offset is None else e.current_txn_first_offset)
                    for e in state.manager.producers.values()]

    @property
    def append_fence(self) -> int:
        """Pass it to a follower append decided now (see `fence_appends`)."""
        return self._append_fence

    def fence_appends(self) -> None:
        """A follower append under way in another thread ends first (the lock); one decided
        before this call and not begun yet raises StaleAppend (see the module docstring)."""
        with self._lock:
            self._append_fence += 1

    def take_truncation(self):
        """The lowest offset the log was truncated to since the last call, or None (the
        cleaner lowers its checkpoint to it)."""
        with self._lock:
            offset, self.truncated_below = self.truncated_below, None
            return offset

    # -- truncation, retention, log start ------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove everything at or above `offset` (replication).  True if anything changed.

        The cut is at a batch boundary: a batch that straddles `offset` goes too."""
        with self._lock:
            if offset < 0:
                raise ValueError(f"cannot truncate to a negative offset {offset}")
            if offset >= self._log_end_offset:
                # Nothing to cut, but an epoch recorded at the end with no records yet (a
                # leadership that appended nothing) is not this log's any more: as Kafka's
                # truncateTo, drop it, or the next fetch would diverge again at the same place.
                self.leader_epoch_cache.truncate_from_end(self._log_end_offset)
                return False
            segments = self._segments
            if offset <= segments[0].base_offset:
                self.truncate_fully_and_start_at(offset)
                return True
            self._note_truncation(offset)
            keep = bisect.bisect_left(self._bases, offset)
            self._schedule_delete(segments[keep:])
            segments = segments[:keep]
            active = segments[-1]
            active.make_active()
            active.truncate_to(offset)
            self._set_segments(segments)
            self._log_end_offset = active.next_offset
            self._after_truncation()
            return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and start empty at `new_offset` (a follower far behind)."""
        with self._lock:
            self._note_truncation(new_offset)
            self._schedule_delete(self._segments)
            segment = self._new_segment(new_offset, created_ms=self._time_ms())
            segment.make_active()
            self._set_segments([segment])
            self._log_end_offset = new_offset
            self._log_start_offset = new_offset
            self._recovery_point = new_offset
            self._high_watermark = new_offset
            self.leader_epoch_cache.clear()
            self._delete_snapshots(below=2**63 - 1)
            self._after_truncation()

    def _note_truncation(self, offset: int) -> None:
        self.generation += 1
        if self.truncated_below is None or offset < self.truncated_below:
            self.truncated_below = offset

    def _after_truncation(self) -> None:
        end = self._log_end_offset
        self._recovery_point = min(self._recovery_point, end)
        self._high_watermark = min(self._high_watermark, end)
        self._log_start_offset = min(self._log_start_offset, end)
        self.leader_epoch_cache.truncate_from_end(end)
        self._delete_snapshots(above=end)
        self._load_producer_state()

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move log_start_offset up to `offset` (<= high watermark).  Whole
        segments below it go at the next retention run.  Returns the new log_start_offset."""
        with self._lock:
            if offset > self._high_watermark:
                raise OffsetOutOfRange(f"cannot move the log start offset of {self.topic}-"
                                       f"{self.partition} past the high watermark "
                                       f"{self._high_watermark} (asked {offset})")
            if offset > self._log_start_offset:
                log.info("%sIncremented log start offset to %d due to ClientRecordDeletion",
                         self._ident, offset)
                self._log_start_offset = offset
                self.leader_epoch_cache.truncate_from_start(offset)
                self.producer_state.manager.truncate_head(offset)
            return self._log_start_offset

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget idempotent producers whose last batch is older than `expiration_ms`
        (producer.id.expiration.ms) and that have no open transaction, as Kafka's periodic
        check does; a retry from one of them is then an unknown producer.  Returns how many.
        Executor (holds the log's lock; a scan of the producer table)."""
        with self._lock:
            if self.producer_state is None:
                return 0
            return len(self.producer_state.manager.remove_expired_producers(now_ms,
                                                                            expiration_ms))

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Retention: drop whole segments by retention.ms, retention.bytes and the log start
        offset; only segments entirely below the high watermark.  Returns how many."""
        now_ms = self._time_ms() if now_ms is None else now_ms
        with self._lock:
            deleted = 0
            config = self.config
            if config.delete and config.retention_ms >= 0:
                def by_time(doomed):
                    for seg in doomed:
                        based = "the largest record timestamp in the segment" \
                            if seg.max_timestamp != NO_TIMESTAMP \
                            else "the last modified time of the segment"
                        log.info("%sDeleting segment %s due to log retention time %dms breach "
                                 "based on %s", self._ident, _describe(seg),
                                 config.retention_ms, based)
                deleted += self._delete_where(
                    lambda seg, nxt: now_ms - seg.largest_timestamp > config.retention_ms,
                    now_ms, by_time, "SegmentDeletion")
            if config.delete and config.retention_bytes >= 0:
                excess = [self.size_in_bytes - config.retention_bytes]

                def too_big(seg, nxt):
                    if excess[0] - seg.size >= 0:
                        excess[0] -= seg.size
                        return True
                    return False

                def by_size(doomed):
                    size = self.size_in_bytes
                    for seg in doomed:
                        size -= seg.size
                        log.info("%sDeleting segment %s due to log retention size %d breach. "
                                 "Log size after deletion will be %d.", self._ident,
                                 _describe(seg), config.retention_bytes, size)
                deleted += self._delete_where(too_big, now_ms, by_size, "SegmentDeletion")

            def by_start(doomed):
                log.info("%sDeleting segments due to log start offset %d breach: %s",
                         self._ident, self._log_start_offset,
                         ",".join(_describe(seg) for seg in doomed))
            deleted += self._delete_where(
                lambda seg, nxt: nxt is not None and nxt.base_offset <= self._log_start_offset,
                now_ms, by_start)
            return deleted

    def _delete_where(self, predicate, now_ms: int, tell=None, reason: str | None = None) -> int:
        """Deletes the leading segments `predicate(segment, next)` holds for, below the high
        watermark; `tell(doomed)` logs why (Kafka's SegmentDeletionReason), `reason` names
        the log start's move."""
        segments = self._segments
        doomed = []
        for i, segment in enumerate(segments):
            nxt = segments[i + 1] if i + 1 < len(segments) else None
            upper = nxt.base_offset if nxt is not None else self._log_end_offset
            if nxt is None and segment.size == 0:
                break
            if self._high_watermark < upper or not predicate(segment, nxt):
                break
            doomed.append(segment)
        if not doomed:
            return 0
        if tell is not None:
            tell(doomed)
        if len(doomed) == len(segments):
            self._roll(self._log_end_offset, now_ms)     # never delete the active segment
            segments = self._segments
        self._schedule_delete(doomed)
        self._set_segments(segments[len(doomed):])
        if self._segments[0].base_offset > self._log_start_offset and reason is not None:
            log.info("%sIncremented log start offset to %d due to %s", self._ident,
                     self._segments[0].base_offset, reason)
        self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
        self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
        self._delete_snapshots(below=self._segments[0].base_offset)
        self.producer_state.manager.truncate_head(self._log_start_offset)
        return len(doomed)

    def _schedule_delete(self, segments) -> None:
        """Rename to .deleted now; close and unlink after file.delete.delay.ms, so a reader
        holding a FileRegion of it can still send it."""
        deadline = self._time_ms() + self.config.file_delete_delay_ms
        for segment in segments:
            segment.close_indexes()
            segment.rename_with_suffix(files.DELETED_SUFFIX)
            segment.deleted = True
            self._pending_deletes.append((deadline, segment))
        if segments:
            self._dir_dirty = True

    def delete_expired_files(self, now_ms: int | None = None, force: bool = False) -> int:
        """Unlink the .deleted segments whose delay has passed.  Returns how many."""
        if not self._pending_deletes:
            return 0                        # the usual case, checked about every second
        now_ms = self._time_ms() if now_ms is None else now_ms
        with self._lock:
            due = [s for d, s in self._pending_deletes if force or d <= now_ms]
            self._pending_deletes = [(d, s) for d, s in self._pending_deletes
                                     if not (force or d <= now_ms)]
        for segment in due:
            segment.delete_files()
        return len(due)

    # -- life cycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Snapshot producer state, trim indexes and close every file (pending deletes are
        removed now).  Blocking."""
        with self._lock:
            self._take_producer_snapshot(durable=True)
            self.close_files(trim=True)

    def close_files(self, trim: bool = False) -> None:
        """Close every file; without `trim`, write nothing (a deleted partition's folder may
        have moved)."""
        with self._lock:
            self._append_fence += 1
            self.delete_expired_files(force=True)
            for segment in self._segments:
                segment.close(trim)

    def delete_files(self) -> None:
        """Close and remove every file of this log (its folder is the caller's)."""
        with self._lock:
            self._append_fence += 1
            self.delete_expired_files(force=True)
            for segment in self._segments:
                segment.delete_files()

    def __repr__(self):
        return (f"Log({self.topic}-{self.partition}, start={self._log_start_offset}, "
                f"hw={self._high_watermark}, end={self._log_end_offset}, "
                f"segments={len(self._segments)})")


def _epoch_or_none(epoch):
    return -1 if epoch is None else epoch


def _describe(segment) -> str:
    """A segment as Kafka's LogSegment.toString names it in log lines."""
    return (f"LogSegment(baseOffset={segment.base_offset}, size={segment.size}, "
            f"lastModifiedTime={_mtime_ms(segment.path)}, "
            f"largestRecordTimestamp={segment.max_timestamp})")


def _mtime_ms(path: str) -> int:
    try:
        return int(os.stat(path).st_mtime * 1000)
    except OSError:
        return 0
