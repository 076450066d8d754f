"""`Cleaner`: one compaction of one log, as Kafka 3.9's LogCleaner.Cleaner does it.

Given a log and its cleanable range [first dirty offset, first uncleanable offset) (chosen by
storage/log_cleaner.py), `Cleaner.clean`:

1. builds the **offset map** key -> last offset over the dirty range (`OffsetMap`): records
   of aborted transactions and control records add nothing; the map holds at most what
   log.cleaner.dedupe.buffer.size / log.cleaner.threads allows, and when it is full the range
   ends at the last batch mapped (`end_offset`, the next first dirty offset);
2. rewrites every segment below `end_offset` (the clean part too), in groups whose sum fits one
   segment (`group_segments`), each group into one ``.cleaned`` segment at the group's first
   base offset, keeping per batch (`_Filter`, Kafka's RecordFilter and MemoryRecords.filterTo):
   - the records that are the latest of their key (cleaner_records.filter_records), tombstones
     until their batch's delete horizon (KIP-534: the first clean that keeps a tombstone stamps
     its batch with now + delete.retention.ms in the base timestamp and attribute bit 6);
   - a batch whose every record stays, byte for byte; otherwise a rebuilt batch with the same
     base offset, last offset delta, producer id, epoch and base sequence, leader epoch, codec
     and timestamp type; the last batch of each active producer stays even when it empties (a
     61-byte header), so producer state and sequences survive;
   - no batch of an aborted transaction; transaction markers until their transaction has no
     data left and then delete.retention.ms more (the same horizon rule);
   the aborted transactions whose ABORT markers stay are written to the new ``.txnindex``;
3. swaps each cleaned segment in (`Log.replace_segments`: ``.cleaned`` -> ``.swap`` -> final
   names, old segments ``.deleted`` and removed after file.delete.delay.ms).

Legacy (magic 0/1) entries are mapped and filtered as Kafka's filterTo does them: a message
stays when it is the latest of its key, and a legacy tombstone until its segment was last
modified before the legacy delete horizon (the last clean segment's modification time minus
delete.retention.ms: legacy batches have no delete horizon of their own); a compressed wrapper
that loses some messages is written again with the rest (same magic, codec and timestamp type).
Reading goes through ``os.pread`` chunks of
log.cleaner.io.buffer.size, throttled by log.cleaner.io.max.bytes.per.second (`Throttler`).
Per-record work runs in storage/_records.c when it was built (cleaner_records.py).

Runs on a cleaner thread; touches the log only through its lock-free readers and
`replace_segments`. A log changed meanwhile (truncated, deleted) or a cleaner stopping raises
`CleaningAborted` and leaves nothing behind; a batch that fails its CRC raises CorruptRecord.
"""
import collections
import dataclasses
from typing import NamedTuple
import logging
import os
import struct
import threading
import time

import crc32c

from storage import files, legacy
from storage.cleaner_records import filter_records, map_keys, rebase_timestamps
from storage.compression import CorruptRecordError, compress
from storage.errors import CleaningAborted, CorruptRecord
from storage.log_config import LONG_MAX
from storage.record_batch import (ATTRIBUTES_OFFSET, COMPRESSION_CODEC_MASK, CONTROL_FLAG_MASK,
                                  CRC_OFFSET, DELETE_HORIZON_FLAG_MASK, HEADER_SIZE, LOG_OVERHEAD,
                                  MAGIC_V2, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_FLAG_MASK,
                                  ControlRecordType, iter_batches)
from storage.segment import BatchInfo, LogSegment

log = logging.getLogger("kbroker.log_cleaner")

_HEADER = struct.Struct(">qiibIhiqqqhii")
_UINT32 = struct.Struct(">I")
_LENGTH = struct.Struct(">qi")
INT32_MAX = 2**31 - 1
# CPython bytes one map entry costs besides its key: dict slot and index, the bytes object's
# header, the int offset. Kafka's SkimpyOffsetMap spends 24 (an MD5 hash and the offset); this
# map keeps the keys themselves (no hash collisions), so it charges what it really uses.
ENTRY_OVERHEAD = 110


class OffsetMap:
    """key -> last offset over the dirty range, bounded by `memory` bytes x `load_factor`."""

    def __init__(self, memory: int, load_factor: float = 0.9):
        if memory * load_factor < ENTRY_OVERHEAD + 1:
            raise ValueError("offset map is too small to fit in even a single message, so log "
                             "cleaning will never make progress. You can increase "
                             "log.cleaner.dedupe.buffer.size or decrease log.cleaner.threads")
        self.memory = memory
        self.capacity = int(memory * load_factor)
        self.entries: dict = {}
        self.used = 0
        self.latest_offset = -1

    def clear(self) -> None:
        self.entries = {}
        self.used = 0
        self.latest_offset = -1

    @property
    def full(self) -> bool:
        return self.used >= self.capacity

    @property
    def utilization(self) -> float:
        return self.used / self.memory


class Throttler:
    """Kafka's Throttler: sleeps when the bytes observed over a check interval (300 ms) exceed
    `rate` per second. Shared by every cleaner thread."""

    def __init__(self, rate: float, check_interval_s: float = 0.3, clock=time.monotonic,
                 sleep=time.sleep):
        self.rate = rate
        self.check_interval_s = check_interval_s
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        self._period_start = clock()
        self._observed = 0.0

    def maybe_throttle(self, observed: float) -> None:
        if self.rate >= 1.7e308:                    # the default: unlimited
            return
        with self._lock:
            self._observed += observed
            now = self._clock()
            elapsed = now - self._period_start
            if elapsed < self.check_interval_s:
                return
            wait = self._observed / self.rate - elapsed
            self._period_start, self._observed = now, 0.0
        if wait > 0:
            self._sleep(wait)
            with self._lock:
                self._period_start = self._clock()


@dataclasses.dataclass
class CleanerStats:
    """What one clean did (Kafka's CleanerStats); `end_offset` is the next first dirty offset."""
    start_s: float = 0.0
    map_done_s: float = 0.0
    end_s: float = 0.0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    messages_read: int = 0
    messages_written: int = 0
    invalid_messages: int = 0
    buffer_utilization: float = 0.0
    first_dirty_offset: int = 0
    end_offset: int = 0
    segments_swapped: int = 0

    def describe(self, thread: str, name: str) -> str:
        """Kafka's recordStats message (one INFO entry)."""
        mb = 1024 * 1024
        elapsed = max(self.end_s - self.start_s, 1e-9)
        map_s = max(self.map_done_s - self.start_s, 1e-9)
        clean_s = max(self.end_s - self.map_done_s, 1e-9)
        read = self.bytes_read / mb
        reduction = 100 * (1 - self.bytes_written / self.bytes_read) if self.bytes_read else 0.0
        fewer = (100 * (1 - self.messages_written / self.messages_read)
                 if self.messages_read else 0.0)
        return (f"\n\tLog cleaner thread {thread} cleaned log {name} (dirty section = "
                f"[{self.first_dirty_offset}, {self.end_offset}])\n"
                f"\t{(self.map_bytes_read + self.bytes_read) / mb:,.1f} MB of log processed in "
                f"{elapsed:,.1f} seconds ({(self.map_bytes_read + self.bytes_read) / mb / elapsed:,.1f}"
                f" MB/sec).\n"
                f"\tIndexed {self.map_bytes_read / mb:,.1f} MB in {map_s:,.1f} seconds "
                f"({self.map_bytes_read / mb / map_s:,.1f} Mb/sec, {100 * map_s / elapsed:,.1f}% "
                f"of total time)\n"
                f"\tBuffer utilization: {100 * self.buffer_utilization:,.1f}%\n"
                f"\tCleaned {read:,.1f} MB in {clean_s:,.1f} seconds ({read / clean_s:,.1f} "
                f"Mb/sec, {100 * clean_s / elapsed:,.1f}% of total time)\n"
                f"\tStart size: {read:,.1f} MB ({self.messages_read:,d} messages)\n"
                f"\tEnd size: {self.bytes_written / mb:,.1f} MB ({self.messages_written:,d} "
                f"messages)\n"
                f"\t{reduction:,.1f}% size reduction ({fewer:,.1f}% fewer messages)\n")


class _TxnMetadata:
    """Kafka's CleanedTransactionMetadata: which transactional batches are aborted, and which
    markers may go, while the cleaner walks the log in offset order."""

    def __init__(self, aborted):
        self._pending = collections.deque(sorted(aborted, key=lambda t: t.first_offset))
        self._aborted: dict[int, list] = {}      # producer id -> [AbortedTxn, last batch seen]
        self._committed: set[int] = set()
        self.cleaned_index = None                # TransactionIndex of the segment being written

    def _consume_up_to(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[0].first_offset <= offset:
            txn = pending.popleft()
            self._aborted.setdefault(txn.producer_id, [txn, None])

    def on_batch(self, batch) -> bool:
        """A data batch: True when it belongs to an aborted transaction (it goes)."""
        self._consume_up_to(batch.last_offset)
        if not batch.attributes & TRANSACTIONAL_FLAG_MASK:
            return False
        entry = self._aborted.get(batch.producer_id)
        if entry is not None:
            entry[1] = batch.last_offset
            return True
        self._committed.add(batch.producer_id)
        return False

    def on_control_batch(self, batch) -> bool:
        """A marker: True when its transaction has no data left in this pass (it may go once
        its delete horizon passed). A kept ABORT marker keeps its ``.txnindex`` entry."""
        self._consume_up_to(batch.last_offset)
        if batch.records_count == 0:
            return True
        pid = batch.producer_id
        control_type = batch.control_record_type()
        if control_type == ControlRecordType.ABORT:
            entry = self._aborted.pop(pid, None)
            if entry is not None and entry[1] is not None:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(entry[0])
                return False
            return True
        if control_type == ControlRecordType.COMMIT:
            if pid in self._committed:
                self._committed.discard(pid)
                return False
            return True
        return False


def group_segments(segments: list, all_segments: list, max_size: int, max_index_size: int,
                   first_uncleanable: int) -> list[list]:
    """Kafka's groupSegmentsBySize: consecutive segments whose log bytes fit segment.bytes,
    whose offset and time index bytes each fit segment.index.bytes, and whose offsets fit an
    int32 from the group's base offset."""
    nexts = {id(s): (all_segments[i + 1].base_offset if i + 1 < len(all_segments)
                     else first_uncleanable) for i, s in enumerate(all_segments)}
    groups, i = [], 0
    while i < len(segments):
        group = [segments[i]]
        size = segments[i].size
        index_size, time_size = _index_bytes(segments[i])
        i += 1
        while i < len(segments):
            nxt = segments[i]
            last_estimate = nexts[id(nxt)] - 1
            nxt_index, nxt_time = _index_bytes(nxt)
            if (size + nxt.size > max_size
                    or index_size + nxt_index > max_index_size
                    or time_size + nxt_time > max_index_size
                    or (nxt.size > 0 and last_estimate - group[0].base_offset > INT32_MAX)):
                break
            group.append(nxt)
            size += nxt.size
            index_size += nxt_index
            time_size += nxt_time
            i += 1
        groups.append(group)
    return groups


def _index_bytes(segment) -> tuple:
    """(offset index bytes, time index bytes) of a segment (LogSegment or ReadOnlySegment)."""
    if isinstance(segment, ReadOnlySegment):
        return segment.index_bytes()
    return segment.offset_index.entries * 8, segment.time_index.entries * 12


class Cleaner:
    """One cleaner thread's worker: its offset map and I/O buffer are reused from clean to
    clean. `check_abort()` raises CleaningAborted when the manager wants the clean to stop."""

    def __init__(self, *, dedupe_memory: int, load_factor: float = 0.9,
                 io_buffer_size: int = 512 * 1024, throttler: Throttler | None = None,
                 time_ms=None, check_abort=None):
        self.offset_map = OffsetMap(dedupe_memory, load_factor)
        self.io_buffer_size = max(io_buffer_size, 64 * 1024)
        self.throttler = throttler or Throttler(float("inf"))
        self._time_ms = time_ms or (lambda: int(time.time() * 1000))
        self._check_abort = check_abort or (lambda: None)

    # -- the whole clean -----------------------------------------------------------------------

    def clean(self, log_, first_dirty: int, first_uncleanable: int,
              now_ms: int | None = None) -> CleanerStats:
        """Compact `log_` for the dirty range [first_dirty, first_uncleanable) (segment
        aligned at the end). Returns the stats; `stats.end_offset` is the new checkpoint."""
        now_ms = self._time_ms() if now_ms is None else now_ms
        stats = CleanerStats(start_s=time.monotonic(), first_dirty_offset=first_dirty)
        generation = log_.generation
        offset_map = self.offset_map
        offset_map.clear()
        name = f"{log_.topic}-{log_.partition}"
        log.info("Building offset map for log %s for offset range [%d, %d).", name,
                 first_dirty, first_uncleanable)
        self._build_offset_map(log_, first_dirty, first_uncleanable, offset_map, stats,
                               generation)
        stats.map_done_s = time.monotonic()
        stats.buffer_utilization = offset_map.utilization
        end_offset = max(offset_map.latest_offset + 1, first_dirty)
        stats.end_offset = end_offset
        all_segments = log_.segments
        to_clean = [s for s in all_segments[:-1] if s.base_offset < end_offset]
        if to_clean:
            config = log_.config
            # Every segment is rewritten whole, also the part past end_offset when the map
            # filled up: its aborted transactions are wanted to its end (the next segment's
            # base), or their data would be kept and their index entries lost.
            upper = all_segments[len(to_clean)].base_offset
            txn = _TxnMetadata(log_.aborted_transactions(0, upper))
            # Kafka's legacyDeleteHorizonMs: below the last segment of the clean part
            clean_part = [s for s in all_segments[:-1] if s.base_offset < first_dirty]
            legacy_horizon_ms = (_modified_ms(clean_part[-1]) - config.delete_retention_ms
                                 if clean_part else 0)
            log.info("Cleaning log %s (discarding tombstones whose delete horizon is before "
                     "%d)...", name, now_ms)
            for group in group_segments(to_clean, all_segments, config.segment_bytes,
                                        config.segment_index_bytes, first_uncleanable):
                self._clean_segments(log_, group, offset_map, now_ms, stats, txn, generation,
                                     legacy_horizon_ms)
        stats.end_s = time.monotonic()
        return stats

    def _abort_if_changed(self, log_, generation: int) -> None:
        self._check_abort()
        if log_.generation != generation:
            raise CleaningAborted(f"{log_.topic}-{log_.partition} changed while it was being "
                                  f"cleaned")

    # -- reading -------------------------------------------------------------------------------

    def _batches(self, segment, position: int = 0):
        """Every batch of `segment` from `position`, read in io-buffer chunks (a batch larger
        than the buffer is read whole)."""
        end = segment.size
        while position < end:
            buf = segment.read_bytes(position, min(self.io_buffer_size, end - position))
            consumed = 0
            for batch in iter_batches(buf):
                consumed = batch.position + batch.size_in_bytes
                yield batch
            if consumed == 0:
                if len(buf) < LOG_OVERHEAD:
                    raise CorruptRecord(f"{segment.path}: truncated batch at {position}")
                size = _LENGTH.unpack_from(buf)[1] + LOG_OVERHEAD
                if size <= len(buf) or position + size > end:
                    raise CorruptRecord(f"{segment.path}: batch of {size} bytes at {position} "
                                        f"does not fit the segment")
                buf = segment.read_bytes(position, size)
                for batch in iter_batches(buf):
                    consumed = batch.position + batch.size_in_bytes
                    yield batch
                if consumed == 0:
                    raise CorruptRecord(f"{segment.path}: unreadable batch at {position}")
            position += consumed
            self.throttler.maybe_throttle(consumed)

    # -- the offset map ------------------------------------------------------------------------

    def _build_offset_map(self, log_, start: int, end: int, offset_map: OffsetMap,
                          stats: CleanerStats, generation: int) -> None:
        all_segments = log_.segments
        txn = _TxnMetadata(log_.aborted_transactions(start, end))
        for i, segment in enumerate(all_segments):
            if segment.base_offset >= end:
                break
            next_base = all_segments[i + 1].base_offset if i + 1 < len(all_segments) else end
            if next_base <= start:
                continue
            first = segment.translate_offset(start) if segment.base_offset < start else None
            position = first.position if first is not None else 0
            if segment.base_offset < start and first is None:
                continue
            self._abort_if_changed(log_, generation)
            for batch in self._batches(segment, position):
                if batch.magic != MAGIC_V2:
                    stats.map_bytes_read += batch.size_in_bytes
                    messages = _legacy_messages(batch, segment)
                    stats.map_messages_read += len(messages)
                    keyed = [(m.key, m.offset) for m in messages
                             if m.key is not None and m.offset >= start]
                    if keyed:
                        if offset_map.full:
                            log.debug("Offset map for %s-%d is full at offset %d", log_.topic,
                                      log_.partition, batch.base_offset)
                            return
                        entries = offset_map.entries
                        for key, offset in keyed:
                            if key not in entries:
                                offset_map.used += len(key) + ENTRY_OVERHEAD
                            entries[key] = offset
                    if batch.last_offset >= start:
                        offset_map.latest_offset = max(offset_map.latest_offset,
                                                       batch.last_offset)
                    continue
                if not batch.is_valid():
                    raise CorruptRecord(f"{segment.path}: batch at offset {batch.base_offset} "
                                        f"fails its CRC")
                stats.map_bytes_read += batch.size_in_bytes
                stats.map_messages_read += batch.records_count
                if batch.attributes & CONTROL_FLAG_MASK:
                    txn.on_control_batch(batch)
                elif not txn.on_batch(batch) and batch.records_count > 0:
                    if offset_map.full:
                        log.debug("Offset map for %s-%d is full at offset %d", log_.topic,
                                  log_.partition, batch.base_offset)
                        return
                    new_keys, new_bytes = map_keys(batch.records_data(), batch.records_count,
                                                   batch.base_offset, offset_map.entries)
                    offset_map.used += new_bytes + new_keys * ENTRY_OVERHEAD
                if batch.last_offset >= start:
                    offset_map.latest_offset = max(offset_map.latest_offset, batch.last_offset)
            offset_map.latest_offset = max(offset_map.latest_offset, next_base - 1)

    # -- rewriting -----------------------------------------------------------------------------

    def _clean_segments(self, log_, group: list, offset_map: OffsetMap, now_ms: int,
                        stats: CleanerStats, txn: _TxnMetadata, generation: int,
                        legacy_horizon_ms: int = 0) -> None:
        config = log_.config
        base = group[0].base_offset
        for suffix in (files.LOG_SUFFIX, files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX,
                       files.TXN_INDEX_SUFFIX):
            stale = files.segment_path(log_.dir, base, suffix + files.CLEANED_SUFFIX)
            if os.path.exists(stale):
                files.fs.remove(stale)
        cleaned = LogSegment(log_.dir, base, index_interval_bytes=config.index_interval_bytes,
                             max_index_size=config.segment_index_bytes,
                             suffix=files.CLEANED_SUFFIX)
        try:
            txn.cleaned_index = cleaned.txn_index
            keep = _Filter(offset_map, now_ms, config.delete_retention_ms,
                           _last_batches_of_producers(log_), txn, stats, legacy_horizon_ms)
            out, infos = bytearray(), []
            for segment in group:
                self._abort_if_changed(log_, generation)
                for batch in self._batches(segment):
                    data = keep.batch(batch, segment)
                    if data is None:
                        continue
                    last = _last_offset(batch, data)
                    infos.append(BatchInfo((len(out), len(data),
                                            batch.base_offset if batch.magic == MAGIC_V2 else last,
                                            last, _max_timestamp(data), batch.magic)))
                    out += data
                    if len(out) >= self.io_buffer_size:
                        self._write(cleaned, out, infos, stats)
                        out, infos = bytearray(), []
            if out:
                self._write(cleaned, out, infos, stats)
            txn.cleaned_index = None
            cleaned.on_become_inactive()
            cleaned.flush()
            mtime = os.stat(group[-1].path).st_mtime
            os.utime(cleaned.path, (mtime, mtime))
            self._abort_if_changed(log_, generation)
            log.info("Swapping in cleaned segment %s for segment(s) %s in log %s-%d",
                     os.path.basename(cleaned.path)[:-len(files.CLEANED_SUFFIX)],
                     ",".join(str(s.base_offset) for s in group), log_.topic, log_.partition)
            log_.replace_segments(cleaned, group, generation)
            stats.segments_swapped += len(group)
        except BaseException:
            txn.cleaned_index = None
            cleaned.delete_files()
            raise

    def _write(self, cleaned, out, infos, stats) -> None:
        cleaned.append(out, infos)
        stats.bytes_written += len(out)
        self.throttler.maybe_throttle(len(out))


def _last_batches_of_producers(log_) -> dict:
    """producer id -> (last offset of its last data batch or None, epoch), for every producer
    the log still remembers (Kafka's lastRecordsOfActiveProducers)."""
    if isinstance(log_, LogView):
        return log_.last_batches
    with log_._lock:
        state = log_.producer_state
        if state is None:
            return {}
        return {pid: (entry.last_offset if entry.batches else None, entry.producer_epoch)
                for pid, entry in state.manager.producers.items()}


def _last_offset(batch, data) -> int:
    if batch.magic != MAGIC_V2:         # a legacy entry's offset field (a wrapper's last)
        return struct.unpack_from(">q", data, 0)[0]
    return batch.base_offset + struct.unpack_from(">i", data, 23)[0]


def _max_timestamp(data) -> int:
    magic = data[16]
    if magic == MAGIC_V2:
        return struct.unpack_from(">q", data, 35)[0]
    if magic == legacy.MAGIC_V1:        # the message's (a wrapper's: its largest) timestamp
        return struct.unpack_from(">q", data, 18)[0]
    return -1


def _modified_ms(segment) -> int:
    """A segment's last modification time in ms (Kafka's LogSegment.lastModified)."""
    return int(os.stat(segment.path).st_mtime * 1000)


def _legacy_messages(batch, segment) -> list:
    """The messages of a legacy entry (a compressed wrapper's inner ones), CRCs checked."""
    try:
        return list(legacy.iter_messages(bytes(batch.raw())))
    except CorruptRecordError as exc:
        raise CorruptRecord(f"{segment.path}: legacy message at offset {batch.base_offset}: "
                            f"{exc}") from None


class _Filter:
    """Kafka's RecordFilter of one clean, applied batch by batch: the bytes to keep (the batch
    as it is, rebuilt, or an empty header) or None."""

    def __init__(self, offset_map: OffsetMap, now_ms: int, delete_retention_ms: int,
                 last_batches: dict, txn: _TxnMetadata, stats: CleanerStats,
                 legacy_horizon_ms: int = 0):
        self.map = offset_map
        self.legacy_horizon_ms = legacy_horizon_ms
        self._legacy_retains: dict = {}     # segment path -> its legacy tombstones stay
        self.now_ms = now_ms
        # Past Long.MAX (delete.retention.ms near it: "keep tombstones for ever") Kafka's sum
        # wraps negative, which means no horizon: tombstones and markers simply stay.
        horizon = now_ms + delete_retention_ms
        self.new_horizon_ms = horizon if horizon <= LONG_MAX else -1
        self.last_batches = last_batches
        self.txn = txn
        self.stats = stats

    def _is_last_of_producer(self, batch) -> bool:
        last = self.last_batches.get(batch.producer_id) if batch.producer_id >= 0 else None
        if last is None:
            return False
        last_data_offset, epoch = last
        if last_data_offset is not None:
            return batch.last_offset == last_data_offset
        return bool(batch.attributes & CONTROL_FLAG_MASK) and batch.producer_epoch == epoch

    def batch(self, batch, segment):
        stats = self.stats
        size = batch.size_in_bytes
        stats.bytes_read += size
        if batch.magic != MAGIC_V2:
            return self._legacy(batch, segment)
        if not batch.is_valid():
            raise CorruptRecord(f"{segment.path}: batch at offset {batch.base_offset} fails "
                                f"its CRC")
        count = batch.records_count
        stats.messages_read += count
        retain_empty = self._is_last_of_producer(batch)
        horizon = batch.base_timestamp if batch.attributes & DELETE_HORIZON_FLAG_MASK else -1
        if batch.attributes & CONTROL_FLAG_MASK:
            discardable = self.txn.on_control_batch(batch)
            if count == 0:                 # emptied by an earlier clean: DELETE_EMPTY
                return bytes(batch.raw()) if retain_empty else None
            if discardable and 0 <= horizon <= self.now_ms:
                return _empty_batch(batch) if retain_empty else None
            stats.messages_written += count
            if discardable and horizon < 0 <= self.new_horizon_ms:   # stamp its horizon
                section = rebase_timestamps(batch.records_data(), count, batch.base_timestamp,
                                            self.new_horizon_ms)
                return _rebuilt(batch, section, count, self.new_horizon_ms,
                                batch.max_timestamp, True)
            return bytes(batch.raw())
        if self.txn.on_batch(batch):                              # aborted transaction
            return _empty_batch(batch) if retain_empty else None
        if count <= 0:
            return bytes(batch.raw()) if retain_empty else None
        retain_deletes = horizon < 0 or self.now_ms < horizon
        retained, section, new_base, max_ts, horizon_set, keyless = filter_records(
            batch.records_data(), count, batch.base_offset, batch.base_timestamp,
            self.map.entries, self.map.latest_offset, retain_deletes, horizon,
            self.new_horizon_ms)
        stats.invalid_messages += keyless
        stats.messages_written += retained
        if retained == 0:
            return _empty_batch(batch) if retain_empty else None
        if section is None:
            return bytes(batch.raw())
        return _rebuilt(batch, section, retained, new_base, max_ts, horizon >= 0 or horizon_set)


    def _legacy(self, batch, segment):
        """Kafka's shouldRetainRecord for a magic 0/1 entry: the latest message of its key
        stays (a tombstone only while its segment is newer than the legacy delete horizon),
        messages past the map's last offset stay, keyless ones go."""
        messages = _legacy_messages(batch, segment)
        self.stats.messages_read += len(messages)
        retain_deletes = self._legacy_retains.get(segment.path)
        if retain_deletes is None:
            retain_deletes = _modified_ms(segment) > self.legacy_horizon_ms
            self._legacy_retains[segment.path] = retain_deletes
        entries, latest = self.map.entries, self.map.latest_offset
        kept = []
        for m in messages:
            if m.offset > latest:
                kept.append(m)
            elif m.key is None:
                self.stats.invalid_messages += 1
            elif m.offset >= entries.get(m.key, -1) and (m.value is not None or retain_deletes):
                kept.append(m)
        self.stats.messages_written += len(kept)
        if len(kept) == len(messages):
            return bytes(batch.raw())
        if not kept:
            return None
        # a compressed wrapper (an uncompressed entry is one message: kept whole or not):
        # Kafka's buildRetainedRecordsInto, the wrapper's timestamp its LogAppendTime or the
        # largest kept CreateTime
        first = kept[0]
        if first.magic == legacy.MAGIC_V0:
            wrapper_ts = legacy.NO_TIMESTAMP
        elif first.timestamp_type == legacy.LOG_APPEND_TIME:
            wrapper_ts = struct.unpack_from(">q", batch.raw(), 18)[0]
        else:
            wrapper_ts = max(m.timestamp for m in kept)
        return legacy.wrapper(kept, first.magic, first.codec, first.timestamp_type, wrapper_ts)


def _rebuilt(batch, section, count, base_timestamp, max_timestamp, has_horizon) -> bytes:
    """A batch like `batch` holding `section` (uncompressed records, compressed here with the
    batch's codec), as Kafka's MemoryRecordsBuilder writes a cleaned batch."""
    codec = batch.attributes & COMPRESSION_CODEC_MASK
    data = compress(codec, section) if codec else section
    attributes = batch.attributes & ~DELETE_HORIZON_FLAG_MASK
    if has_horizon:
        attributes |= DELETE_HORIZON_FLAG_MASK
    if batch.attributes & TIMESTAMP_TYPE_MASK:
        max_timestamp = batch.max_timestamp                  # the log append time
    return _with_crc(_HEADER.pack(
        batch.base_offset, HEADER_SIZE - LOG_OVERHEAD + len(data), batch.partition_leader_epoch,
        MAGIC_V2, 0, attributes, batch.last_offset_delta, base_timestamp, max_timestamp,
        batch.producer_id, batch.producer_epoch, batch.base_sequence, count), data)


def _empty_batch(batch) -> bytes:
    """Kafka's DefaultRecordBatch.writeEmptyHeader: the batch's offsets, producer fields and
    flags, no records, no codec, base timestamp -1."""
    attributes = batch.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_FLAG_MASK
                                     | CONTROL_FLAG_MASK)
    return _with_crc(_HEADER.pack(
        batch.base_offset, HEADER_SIZE - LOG_OVERHEAD, batch.partition_leader_epoch, MAGIC_V2, 0,
        attributes, batch.last_offset_delta, -1, batch.max_timestamp, batch.producer_id,
        batch.producer_epoch, batch.base_sequence, 0), b"")


def _with_crc(header: bytes, data) -> bytes:
    header = bytearray(header)
    crc = crc32c.crc32c(data, crc32c.crc32c(memoryview(header)[ATTRIBUTES_OFFSET:]))
    _UINT32.pack_into(header, CRC_OFFSET, crc)
    return bytes(header) + bytes(data)


# -- cleaning in a worker process -----------------------------------------------------------------
#
# A cleaner thread in the broker holds the GIL for the per-batch Python work, and the event loop
# then waits for it on every system call (measured: a third of its time, produce p99 x4). So the
# broker's cleaner threads hand the clean to a worker process each (storage/log_cleaner.py):
# `CleanRequest` describes the log as the thread sees it (segment files, aborted transactions,
# producers), `clean_in_worker` runs the same `Cleaner` there over read-only views of the
# segment files and writes the ``.cleaned`` segments, and the thread swaps them in with
# `apply_swaps` (the log's lock and generation check, as in-process).

class CleanRequest(NamedTuple):
    dir: str
    topic: str
    partition: int
    config: object                  # LogConfig
    segments: list                  # [(base offset, size)] of the non-active segments
    active_base: int
    generation: int
    aborted: list                   # AbortedTxn overlapping [0, first uncleanable)
    last_batches: dict
    first_dirty: int
    first_uncleanable: int
    now_ms: int


def clean_request(log_, first_dirty: int, first_uncleanable: int, now_ms: int) -> CleanRequest:
    segments = log_.segments
    return CleanRequest(log_.dir, log_.topic, log_.partition, log_.config,
                        [(s.base_offset, s.size) for s in segments[:-1]],
                        segments[-1].base_offset, log_.generation,
                        log_.aborted_transactions(0, first_uncleanable),
                        _last_batches_of_producers(log_), first_dirty, first_uncleanable,
                        now_ms)


class ReadOnlySegment:
    """A segment's ``.log`` opened for reading only (never created): what the cleaner reads."""

    def __init__(self, directory: str, base_offset: int, size: int):
        self.base_offset = base_offset
        self.path = files.segment_path(directory, base_offset, files.LOG_SUFFIX)
        self._directory = directory
        self._fd = os.open(self.path, os.O_RDONLY)
        self.size = min(size, os.fstat(self._fd).st_size)

    def index_bytes(self) -> tuple:
        sizes = []
        for suffix in (files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX):
            try:
                sizes.append(os.path.getsize(files.segment_path(self._directory,
                                                                self.base_offset, suffix)))
            except OSError:
                sizes.append(0)
        return tuple(sizes)

    def batches(self, start_position: int = 0):
        from storage.segment import scan_headers
        return scan_headers(self._fd, start_position, self.size)

    def translate_offset(self, offset: int):
        for batch in self.batches():
            if batch.last_offset >= offset:
                return batch
        return None

    def read_bytes(self, position: int, length: int) -> bytes:
        return os.pread(self._fd, length, position)

    def close(self) -> None:
        os.close(self._fd)


class _ActiveStub(NamedTuple):
    base_offset: int
    size: int = 0


class LogView:
    """What `Cleaner.clean` uses of a Log, from a CleanRequest, in a worker process; a swap
    is recorded (the broker makes it) instead of made."""

    def __init__(self, request: CleanRequest):
        self.dir, self.topic, self.partition = request.dir, request.topic, request.partition
        self.config = request.config
        self.generation = request.generation
        self.last_batches = request.last_batches
        self._aborted = request.aborted
        self.segments = [ReadOnlySegment(request.dir, base, size)
                         for base, size in request.segments] + [_ActiveStub(request.active_base)]
        self.swaps: list = []

    def aborted_transactions(self, start: int, end: int) -> list:
        return [t for t in self._aborted if t.last_offset >= start and t.first_offset < end]

    def replace_segments(self, new, old, generation) -> None:
        new.close(trim=False)
        self.swaps.append((new.base_offset, [s.base_offset for s in old]))

    def close(self) -> None:
        for segment in self.segments[:-1]:
            segment.close()


_ABORT = None


def init_worker(abort_event, niceness: int = 0, parent: int | None = None) -> None:
    """Worker process start: the cleaner's stop signal, a lower priority than the broker, and a
    watchdog that ends the worker when the broker is gone (``kill -9`` leaves no orphan: the
    pool's queues cannot tell, as the worker holds both ends of its pipes)."""
    global _ABORT
    _ABORT = abort_event
    if niceness:
        try:
            os.nice(niceness)
        except OSError:
            pass
    if parent is None:
        parent = os.getppid()
    threading.Thread(target=_exit_with_parent, args=(parent,), name="parent-watchdog",
                     daemon=True).start()


def _exit_with_parent(parent: int, interval: float = 0.5) -> None:
    # Reparented (to init or a subreaper) once the broker dies, maybe before this process got
    # here: `parent` is the broker's pid as the broker saw it. A clean cut short leaves only
    # ``.cleaned`` files, which the next start-up drops.
    while os.getppid() == parent:
        time.sleep(interval)
    os._exit(1)


def _check_worker_abort() -> None:
    if _ABORT is not None and _ABORT.is_set():
        raise CleaningAborted("the log cleaner is shutting down")


def clean_in_worker(request: CleanRequest, dedupe_memory: int, load_factor: float,
                    io_buffer_size: int, io_rate: float):
    """Run one clean in a worker process: (CleanerStats, [(cleaned base offset, [old base
    offsets])]) with the ``.cleaned`` segments written and fsynced."""
    view = LogView(request)
    try:
        cleaner = Cleaner(dedupe_memory=dedupe_memory, load_factor=load_factor,
                          io_buffer_size=io_buffer_size, throttler=_worker_throttler(io_rate),
                          check_abort=_check_worker_abort)
        stats = cleaner.clean(view, request.first_dirty, request.first_uncleanable,
                              request.now_ms)
        return stats, view.swaps
    except BaseException as exc:
        for base, _ in view.swaps:             # written, never swapped: not to be left behind
            _remove_cleaned(request.dir, base)
        if isinstance(exc, CleaningAborted):
            raise CleaningAborted(str(exc)) from None
        if isinstance(exc, OSError):            # a disk error: the broker takes the dir offline
            raise OSError(exc.errno, exc.strerror, exc.filename) from None
        if isinstance(exc, Exception):          # crosses the process boundary as text
            raise WorkerError(f"{type(exc).__name__}: {exc}") from None
        raise
    finally:
        view.close()


_throttler: Throttler | None = None


def _worker_throttler(rate: float) -> Throttler:
    """The worker process's throttler, kept from one clean to the next as Kafka's one
    throttler is: a run of short cleans is held to the rate too (a new one per clean never
    reached its first check)."""
    global _throttler
    if _throttler is None or _throttler.rate != rate:
        _throttler = Throttler(rate)
    return _throttler


class WorkerError(Exception):
    """A clean failed in the worker process (the message names the original error)."""


def apply_swaps(log_, request: CleanRequest, swaps: list) -> int:
    """Swap the worker's cleaned segments into `log_`, group by group (each atomic, as
    in-process). A change of the log since the request aborts the rest (their files go).
    Returns the number of old segments replaced."""
    replaced = 0
    try:
        for i, (base, old_bases) in enumerate(swaps):
            current = {s.base_offset: s for s in log_.segments[:-1]}
            old = [current.get(b) for b in old_bases]
            if any(s is None for s in old) or log_.generation != request.generation:
                raise CleaningAborted(f"{log_.topic}-{log_.partition} changed while it was "
                                      f"being cleaned")
            cleaned = LogSegment(log_.dir, base,
                                 index_interval_bytes=log_.config.index_interval_bytes,
                                 max_index_size=log_.config.segment_index_bytes,
                                 suffix=files.CLEANED_SUFFIX)
            try:
                log_.replace_segments(cleaned, old, request.generation)
            except BaseException:
                cleaned.close(trim=False)
                raise
            replaced += len(old)
    except BaseException:
        for base, _ in swaps[i:]:
            _remove_cleaned(log_.dir, base)
        raise
    return replaced


def _remove_cleaned(directory: str, base: int) -> None:
    for suffix in (files.LOG_SUFFIX, files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX,
                   files.TXN_INDEX_SUFFIX):
        try:
            files.fs.remove(files.segment_path(directory, base, suffix + files.CLEANED_SUFFIX))
        except FileNotFoundError:
            pass
