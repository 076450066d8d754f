"""`LogSegment`: one ``.log`` file of record batches with its offset and time indexes.

A segment holds the batches whose offsets start at `base_offset` (its 20-digit file name) and
end below the next segment's base offset.  The ``.log`` file is the concatenation of the batches
exactly as the leader validated them (see storage/record_batch.py for the batch layout); there is
no segment header.  Only the log's last segment (the *active* one) is appended to.

Writing: `append()` writes the batches with one `os.pwrite` at the end of the file (page cache,
no fsync), then adds an offset-index entry (batch last offset -> batch start position) and a
time-index entry whenever more than `index.interval.bytes` have been written since the last
entry.  Positions are int32 in the index, so a segment stays below 2 GiB (segment.bytes is an
int; Kafka enforces the same).  `flush()` fsyncs the file and msyncs the indexes.

Reading: `translate_offset()` looks up the index and then walks batch headers forward with
`os.pread` (never moving a file position, so readers share the file object with the writer and
with `sendfile`).  `read()` returns the (position, length) of a byte range that starts at the
batch holding the fetch offset; like Kafka, the range may end inside a batch when `max_size`
cuts it (clients discard a partial trailing batch) but holds at least the first whole batch
when `min_one_message` asks for it.

Recovery: `recover()` re-reads the whole file, checks every batch (size, magic, CRC32C for v2,
CRC32 for legacy magic 0/1 entries, offsets increasing and in this segment's range), rebuilds
both indexes from scratch, and truncates the file at the first batch that fails: bytes after a
torn or corrupt batch cannot be trusted.  A missing or insane index is rebuilt the same way.

Concurrency: all methods run on the caller's thread with the log's lock where they mutate;
`flush()` may run on a flush thread concurrently with appends (fsync and msync are safe then).
"""
import os
import struct
import zlib

import crc32c

from storage import files
from storage.errors import CorruptIndex
from storage.offset_index import OffsetIndex
from storage.time_index import NO_TIMESTAMP, TimeIndex
from storage.txn_index import TransactionIndex

LOG_OVERHEAD = 12                  # base_offset int64 + length int32
V2_HEADER_SIZE = 61
LEGACY_HEADER_SIZE = 17            # offset, size, crc, magic
MIN_V2_LENGTH = V2_HEADER_SIZE - LOG_OVERHEAD
MIN_LEGACY_LENGTH = 14
# base_offset, batch_length, (epoch), magic, (crc, attributes), last_offset_delta, (base_ts),
# max_timestamp: the header fields a scan needs, in one unpack.
_PEEK = struct.Struct(">qi4xb6xi8xq")
_OFFSET_LENGTH_MAGIC = struct.Struct(">qi4xb")
_LEGACY_TIMESTAMP = struct.Struct(">q")       # magic 1: after offset, size, crc, magic, attributes
_LEGACY_TIMESTAMP_AT = 18
MIN_V1_LENGTH = 22
_CRC = struct.Struct(">I")
SCAN_CHUNK = 16 * 1024             # header walk reads this much per pread
RECOVERY_CHUNK = 8 * 1024 * 1024   # recovery reads this much per pread


def _legacy_timestamp(buf, pos: int, magic: int, length: int) -> int:
    """A legacy entry's max timestamp, as Kafka's AbstractLegacyRecordBatch: a magic 1
    message's own (a compressed wrapper's is its messages' largest, or the log append time);
    magic 0 has none."""
    if magic == 1 and length >= MIN_V1_LENGTH \
            and pos + _LEGACY_TIMESTAMP_AT + _LEGACY_TIMESTAMP.size <= len(buf):
        return _LEGACY_TIMESTAMP.unpack_from(buf, pos + _LEGACY_TIMESTAMP_AT)[0]
    return NO_TIMESTAMP


class BatchInfo(tuple):
    """(position, size, base_offset, last_offset, max_timestamp, magic) of one batch."""

    __slots__ = ()
    position = property(lambda self: self[0])
    size = property(lambda self: self[1])
    base_offset = property(lambda self: self[2])
    last_offset = property(lambda self: self[3])
    max_timestamp = property(lambda self: self[4])
    magic = property(lambda self: self[5])


def scan_headers(fd: int, position: int, end: int, chunk: int = SCAN_CHUNK):
    """Yield BatchInfo for each batch starting in [position, end) whose bytes end by `end`.

    Reads headers only (no CRC); stops at a short or impossible header.  Legacy entries report
    base_offset == last_offset == their offset field and their timestamp (-1 for magic 0)."""
    buf, buf_start = b"", position
    while position + LEGACY_HEADER_SIZE <= end:
        rel = position - buf_start
        if rel + _PEEK.size > len(buf) and buf_start + len(buf) < end:
            buf, buf_start, rel = os.pread(fd, min(chunk, end - position), position), position, 0
        if rel + _PEEK.size <= len(buf):
            base, length, magic, delta, max_ts = _PEEK.unpack_from(buf, rel)
        elif rel + LEGACY_HEADER_SIZE <= len(buf):
            base, length, magic = _OFFSET_LENGTH_MAGIC.unpack_from(buf, rel)
            delta, max_ts = 0, NO_TIMESTAMP
        else:
            return
        size = length + LOG_OVERHEAD
        if magic == 2:
            if length < MIN_V2_LENGTH:
                return
            info = BatchInfo((position, size, base, base + delta, max_ts, magic))
        elif magic in (0, 1) and length >= MIN_LEGACY_LENGTH:
            info = BatchInfo((position, size, base, base,
                              _legacy_timestamp(buf, rel, magic, length), magic))
        else:
            return
        if position + size > end:
            return
        yield info
        position += size


def validate_chunk(buf, start: int, file_position: int, prev_last_offset: int):
    """Yield BatchInfo (file positions) for each complete, valid batch in `buf[start:]`.

    Stops at the first incomplete batch (the caller reads more) and raises `_Invalid` at the
    first batch that is corrupt.  `prev_last_offset` is the last offset before this chunk."""
    pos, end = start, len(buf)
    view = memoryview(buf)
    while pos + LEGACY_HEADER_SIZE <= end:
        base, length, magic = _OFFSET_LENGTH_MAGIC.unpack_from(buf, pos)
        size = length + LOG_OVERHEAD
        if length == 0 and base == 0 and magic == 0:
            raise _Invalid("zeros after the last batch (a preallocated segment's tail)")
        if magic == 2:
            if length < MIN_V2_LENGTH:
                raise _Invalid(f"batch length {length}")
            if pos + size > end:
                return
            _, _, _, delta, max_ts = _PEEK.unpack_from(buf, pos)
            if crc32c.crc32c(view[pos + 21:pos + size]) != _CRC.unpack_from(buf, pos + 17)[0]:
                raise _Invalid(f"CRC mismatch in batch at offset {base}")
            last = base + delta
            if delta < 0:
                raise _Invalid(f"negative last offset delta {delta}")
        elif magic in (0, 1):
            if length < MIN_LEGACY_LENGTH:
                raise _Invalid(f"message size {length}")
            if pos + size > end:
                return
            if zlib.crc32(view[pos + 16:pos + size]) != _CRC.unpack_from(buf, pos + 12)[0]:
                raise _Invalid(f"CRC mismatch in message at offset {base}")
            last, max_ts = base, _legacy_timestamp(buf, pos, magic, length)
        else:
            raise _Invalid(f"unknown magic {magic}")
        if (magic == 2 and base <= prev_last_offset) or last <= prev_last_offset:
            raise _Invalid(f"offset {base} does not follow {prev_last_offset}")
        yield BatchInfo((file_position + pos - start, size, base, last, max_ts, magic))
        prev_last_offset = last
        pos += size


class _Invalid(Exception):
    pass


class LogSegment:
    """One segment: ``<base_offset>.log`` plus lazily opened ``.index``, ``.timeindex`` and
    ``.txnindex`` (storage/txn_index.py; the aborted transactions whose markers it holds)."""

    def __init__(self, directory: str, base_offset: int, *, index_interval_bytes: int,
                 max_index_size: int, roll_jitter_ms: int = 0, created_ms: int = 0,
                 preallocate_bytes: int = 0, suffix: str = ""):
        """`suffix` (``.cleaned``) names every file of a segment the log cleaner is writing;
        `change_suffix` renames them when it swaps the segment in."""
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.roll_jitter_ms = roll_jitter_ms
        self.preallocate_bytes = preallocate_bytes
        self.suffix = suffix
        self.path = files.segment_path(directory, base_offset, files.LOG_SUFFIX + suffix)
        self.index_path = files.segment_path(directory, base_offset, files.INDEX_SUFFIX + suffix)
        self.time_index_path = files.segment_path(directory, base_offset,
                                                  files.TIME_INDEX_SUFFIX + suffix)
        self.txn_index_path = files.segment_path(directory, base_offset,
                                                 files.TXN_INDEX_SUFFIX + suffix)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        # The file object FileRegions point at; buffering=0 so it is just an fd holder.
        self.log_file = open(fd, "r+b", buffering=0)
        # Fetches and recovery read segments front to back: ask for the larger readahead.
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        self.size = os.fstat(fd).st_size
        self._file_length = self.size       # > size while preallocated (the tail is zeros)
        self.created_ms = created_ms or int(os.fstat(fd).st_mtime * 1000)
        self._offset_index = None
        self._time_index = None
        self._txn_index = None
        self._active = False
        self._next_offset = None            # computed lazily for old segments
        self._max_ts = None                 # (max timestamp so far, offset of it), lazily
        self._rolling_ts = None             # first batch's max timestamp (segment.ms rolls)
        self.bytes_since_last_index_entry = 0
        self.deleted = False
        self.recovery_error = None          # why recover() truncated, for the log line

    # -- indexes -------------------------------------------------------------------------------

    def index_files_exist(self) -> bool:
        return os.path.exists(self.index_path) and os.path.exists(self.time_index_path)

    @property
    def offset_index(self) -> OffsetIndex:
        if self._offset_index is None:
            self._offset_index = OffsetIndex(self.index_path, self.base_offset,
                                             self.max_index_size)
            if self._active:
                self._offset_index.resize(self.max_index_size)
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            self._time_index = TimeIndex(self.time_index_path, self.base_offset,
                                         self.max_index_size)
            if self._active:
                self._time_index.resize(self.max_index_size)
        return self._time_index

    @property
    def txn_index(self) -> TransactionIndex:
        if self._txn_index is None:
            self._txn_index = TransactionIndex(self.txn_index_path, self.base_offset)
        return self._txn_index

    def sanity_check(self) -> None:
        """Raises CorruptIndex if an index file looks wrong (recovery rebuilds it)."""
        if self.size == 0 and self._offset_index is None and self._time_index is None:
            return                  # an empty segment: its indexes are created when needed
        if not self.index_files_exist():
            raise CorruptIndex(f"index files of {self.path} are missing")
        self.offset_index.sanity_check(self.size)
        self.time_index.sanity_check()
        self.txn_index.sanity_check()

    def make_active(self) -> None:
        """This segment is now the log's last: grow its indexes back to full size."""
        self._active = True
        if self._offset_index is not None:
            self._offset_index.resize(self.max_index_size)
        if self._time_index is not None:
            self._time_index.resize(self.max_index_size)

    def on_become_inactive(self) -> None:
        """The log rolled past this segment: final time-index entry, then trim both indexes."""
        ts, offset = self.max_timestamp_and_offset
        if ts != NO_TIMESTAMP:
            self.time_index.maybe_append(ts, offset, skip_full_check=True)
        self.offset_index.trim()
        self.time_index.trim()
        self._trim_file()
        self._active = False

    # -- derived state -------------------------------------------------------------------------

    @property
    def next_offset(self) -> int:
        """One past the last offset in this segment (base_offset when empty)."""
        if self._next_offset is None:
            self._load_tail()
        return self._next_offset

    @property
    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """(largest batch max_timestamp, last offset of that batch); (-1, base) when none."""
        if self._max_ts is None:
            self._load_tail()
        return self._max_ts

    @property
    def max_timestamp(self) -> int:
        return self.max_timestamp_and_offset[0]

    @property
    def largest_timestamp(self) -> int:
        """What retention.ms compares: the max timestamp, else the file's modification time."""
        ts = self.max_timestamp
        if ts != NO_TIMESTAMP:
            return ts
        return self.last_modified_ms

    @property
    def last_modified_ms(self) -> int:
        """The log file's modification time; 0 once it is gone (Java's File.lastModified)."""
        try:
            return int(os.stat(self.path).st_mtime * 1000)
        except OSError:
            return 0

    def _load_tail(self) -> None:
        """Next offset and max timestamp from the last index entries plus a header walk.

        The time index's last entry covers every batch up to the offset index's last entry
        (both are written together), so only the batches after that position are read."""
        if self.size == 0:          # no need to open (or create) the indexes
            self._next_offset, self._max_ts = self.base_offset, (NO_TIMESTAMP, self.base_offset)
            return
        index_offset, position = self.offset_index.lookup(2**63 - 1)
        ts, ts_offset = self.time_index.last_entry
        next_offset = self.base_offset
        if self.offset_index.entries:
            next_offset = index_offset + 1
        for batch in scan_headers(self.log_file.fileno(), position, self.size):
            next_offset = batch.last_offset + 1
            if batch.max_timestamp > ts:
                ts, ts_offset = batch.max_timestamp, batch.last_offset
        self._next_offset = next_offset
        self._max_ts = (ts, ts_offset)

    def rolling_based_timestamp(self):
        """The first batch's max timestamp, which segment.ms measures from (None if empty)."""
        if self._rolling_ts is None and self.size > 0:
            for batch in scan_headers(self.log_file.fileno(), 0, self.size):
                self._rolling_ts = batch.max_timestamp
                break
        return self._rolling_ts

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """Kafka's rule: from the first batch's timestamp if it has one, else wall time."""
        first = self.rolling_based_timestamp()
        if first is not None and first >= 0:
            return message_timestamp - first
        return now_ms - self.created_ms

    def should_roll(self, config, append_size: int, max_timestamp: int, max_offset: int,
                    now_ms: int) -> bool:
        """Kafka's LogSegment.shouldRoll for an append of `append_size` bytes."""
        reached_roll_ms = (self.size > 0 and self.time_waited_for_roll(now_ms, max_timestamp)
                           > config.roll_ms - self.roll_jitter_ms)
        return (self.size > config.segment_bytes - append_size or reached_roll_ms
                or self.offset_index.is_full() or self.time_index.is_full()
                or not self.offset_index.can_append_offset(max_offset))

    # -- append --------------------------------------------------------------------------------

    def append(self, data, batches) -> None:
        """Write `data` (whole batches) at the end; `batches` describes them as BatchInfo with
        positions relative to `data`.  Page cache only: no fsync."""
        start = self.size
        view = memoryview(data)
        if start + len(view) > self._file_length and self.preallocate_bytes:
            self._preallocate(start + len(view))
        written = 0
        while written < len(view):
            written += os.pwrite(self.log_file.fileno(), view[written:], start + written)
        if self._max_ts is None or self._next_offset is None:
            self._load_tail()
        max_ts, max_ts_offset = self._max_ts
        for batch in batches:
            if batch.max_timestamp > max_ts:
                max_ts, max_ts_offset = batch.max_timestamp, batch.last_offset
            # An entry per batch past the interval (Kafka: one per append, which for a
            # follower's many-batch appends indexes far less).
            if self.bytes_since_last_index_entry > self.index_interval_bytes:
                self._index_entry(batch.last_offset, start + batch.position, max_ts,
                                  max_ts_offset)
                self.bytes_since_last_index_entry = 0
            self.bytes_since_last_index_entry += batch.size
        if self._rolling_ts is None and batches:
            self._rolling_ts = batches[0].max_timestamp
        self._max_ts = (max_ts, max_ts_offset)
        self._next_offset = batches[-1].last_offset + 1
        self.size = start + len(view)

    def _index_entry(self, last_offset: int, position: int, max_ts: int,
                     max_ts_offset: int) -> None:
        # The roll check before an append leaves room for one entry; an index that fills part
        # way through a many-batch append (or its recovery) leaves the rest unindexed, and the
        # next append rolls (the index overflowed and every append after failed).
        if self.offset_index.is_full():
            return
        self.offset_index.append(last_offset, position)
        if not self.time_index.is_full():
            self.time_index.maybe_append(max_ts, max_ts_offset)

    def _preallocate(self, end: int) -> None:
        """`preallocate` (Kafka's file.preallocate): set the file's length to segment.bytes
        ahead of the data.  On ext4 an append that extends a file costs several times one that
        does not (the inode's size is journaled on every write): 16-64 KiB pwrites reach about
        600 MB per CPU second when extending, 3.7 GB inside the preallocated length.  The
        file is sparse until written; `_trim_file` cuts it back when the segment rolls or
        closes, and recovery truncates the zeros after a crash."""
        self._file_length = max(self.preallocate_bytes, end)
        os.ftruncate(self.log_file.fileno(), self._file_length)

    def _trim_file(self) -> None:
        if self._file_length > self.size and not self.log_file.closed:
            os.ftruncate(self.log_file.fileno(), self.size)
        self._file_length = self.size

    # -- read ----------------------------------------------------------------------------------

    def translate_offset(self, offset: int, starting_position: int = 0):
        """BatchInfo of the first batch whose last offset >= `offset`, or None.

        The hot path of every fetch: a v2 header walk over one pread, with no per-batch
        objects; anything unusual (a legacy entry, a header across the chunk) falls back to
        `scan_headers`."""
        position = max(self.offset_index.lookup(offset)[1], starting_position)
        end = self.size
        buf = os.pread(self.log_file.fileno(), min(SCAN_CHUNK, end - position), position)
        rel, limit = 0, len(buf) - _PEEK.size
        unpack = _PEEK.unpack_from
        while rel <= limit:
            base, length, magic, delta, max_ts = unpack(buf, rel)
            if magic != 2 or length < MIN_V2_LENGTH:
                break
            size = length + LOG_OVERHEAD
            if base + delta >= offset:
                if position + rel + size > end:
                    return None
                return BatchInfo((position + rel, size, base, base + delta, max_ts, magic))
            rel += size
        for batch in scan_headers(self.log_file.fileno(), position + rel, end):
            if batch.last_offset >= offset:
                return batch
        return None

    def read(self, fetch_offset: int, max_size: int, max_position: int | None = None,
             min_one_message: bool = True):
        """(first BatchInfo, position, length) of the range to send for a fetch, or None when
        this segment has no batch at or after `fetch_offset` below `max_position`. Without
        `min_one_message` a first batch larger than `max_size` gives length 0: a piece of a
        batch with no whole batch in it would stop a consumer (Kafka's readFromLog answers
        such an incomplete first entry with no records for Fetch v3+)."""
        size = self.size                          # snapshot: appends only grow it
        if max_position is None or max_position > size:
            max_position = size
        first = self.translate_offset(fetch_offset)
        if first is None or first.position >= max_position:
            return None
        if min_one_message:
            limit = max(max_size, first.size)
        elif max_size < first.size:
            return first, first.position, 0
        else:
            limit = max_size
        length = min(max_position - first.position, limit)
        return first, first.position, length

    def batches_by_timestamp(self, timestamp: int, starting_offset: int):
        """BatchInfo of each batch at/after `starting_offset` whose max timestamp >=
        `timestamp`, in order (Kafka's searchForTimestamp walk): the caller looks for the
        exact record in each, and goes on to the next when none qualifies."""
        _, ts_offset = self.time_index.lookup(timestamp)
        start = self.offset_index.lookup(max(ts_offset, starting_offset))[1]
        for batch in scan_headers(self.log_file.fileno(), start, self.size):
            if batch.max_timestamp >= timestamp and batch.last_offset >= starting_offset:
                yield batch

    def batches(self, start_position: int = 0):
        """Header walk over the whole segment (BatchInfo)."""
        return scan_headers(self.log_file.fileno(), start_position, self.size)

    def read_bytes(self, position: int, length: int) -> bytes:
        return os.pread(self.log_file.fileno(), length, position)

    def index_sanity_errors(self) -> list[str]:
        """What `kafka-dump-log.sh --index-sanity-check` would report, as messages: every
        offset-index entry must point at a batch start whose last offset it names, entries
        strictly increase; every time-index entry must name a batch's last offset and that
        batch's max timestamp, timestamps strictly increase.  Reads headers only."""
        batches = {b.position: b for b in self.batches()}
        by_last = {b.last_offset: b for b in batches.values()}
        errors = []
        prev = None
        for i in range(self.offset_index.entries):
            offset, position = self.offset_index.entry(i)
            batch = batches.get(position)
            if batch is None or batch.last_offset != offset:
                errors.append(f"{self.index_path}: entry {i} ({offset}, {position}) does not "
                              f"match a batch")
            if prev is not None and (offset <= prev[0] or position <= prev[1]):
                errors.append(f"{self.index_path}: entry {i} does not increase")
            prev = (offset, position)
        prev = None
        for i in range(self.time_index.entries):
            timestamp, offset = self.time_index.entry(i)
            batch = by_last.get(offset)
            if batch is None or batch.max_timestamp != timestamp:
                errors.append(f"{self.time_index_path}: entry {i} ({timestamp}, {offset}) "
                              f"does not match a batch")
            if prev is not None and (timestamp <= prev[0] or offset < prev[1]):
                errors.append(f"{self.time_index_path}: entry {i} decreases")
            prev = (timestamp, offset)
        return errors

    # -- recovery and truncation ---------------------------------------------------------------

    def recover(self) -> int:
        """Validate every batch, rebuild both indexes, truncate at the first invalid batch.

        Returns the number of bytes truncated (0 for a clean segment).  The transaction
        index is emptied: the log rebuilds it as it replays the producer state.  Blocking."""
        self.offset_index.reset()
        self.time_index.reset()
        self.txn_index.reset()
        fd = self.log_file.fileno()
        size = os.fstat(fd).st_size
        valid = 0
        prev_last = self.base_offset - 1
        max_ts, max_ts_offset = NO_TIMESTAMP, self.base_offset
        since_index = 0
        first_ts = None
        try:
            while valid < size:
                want = min(max(RECOVERY_CHUNK, self._batch_size_at(valid)), size - valid)
                buf = os.pread(fd, want, valid)
                progressed = False
                for batch in validate_chunk(buf, 0, valid, prev_last):
                    if not self.offset_index.can_append_offset(batch.last_offset):
                        raise _Invalid(f"offset {batch.last_offset} overflows the index")
                    if first_ts is None:
                        first_ts = batch.max_timestamp
                    if batch.max_timestamp > max_ts:
                        max_ts, max_ts_offset = batch.max_timestamp, batch.last_offset
                    if since_index > self.index_interval_bytes:
                        self._index_entry(batch.last_offset, batch.position, max_ts,
                                          max_ts_offset)
                        since_index = 0
                    since_index += batch.size
                    prev_last = batch.last_offset
                    valid = batch.position + batch.size
                    progressed = True
                if not progressed:
                    self.recovery_error = "a torn batch at the tail"
                    break
        except _Invalid as exc:
            self.recovery_error = str(exc)
        truncated = size - valid
        if truncated:
            os.ftruncate(fd, valid)
        self.size = self._file_length = valid
        self._next_offset = prev_last + 1
        self._max_ts = (max_ts, max_ts_offset)
        self._rolling_ts = first_ts
        self.bytes_since_last_index_entry = since_index
        if not self._active:
            self.on_become_inactive()
        return truncated

    def _batch_size_at(self, position: int) -> int:
        head = os.pread(self.log_file.fileno(), LOG_OVERHEAD, position)
        if len(head) < LOG_OVERHEAD:
            return 0
        return max(struct.unpack(">qi", head)[1] + LOG_OVERHEAD, 0)

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset >= `offset`; returns the bytes removed."""
        batch = self.translate_offset(offset)
        if batch is None:
            return 0
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        removed = self.size - batch.position
        self.log_file.truncate(batch.position)
        self.size = self._file_length = batch.position
        self._next_offset = None
        self._max_ts = None
        self.bytes_since_last_index_entry = 0
        if self.size == 0:
            self._rolling_ts = None
        if self._active:
            self.make_active()
        return removed

    # -- durability and life cycle -------------------------------------------------------------

    def flush(self) -> None:
        """fsync the log file and msync the indexes (blocking: run it off the event loop)."""
        files.fs.fsync(self.log_file.fileno())
        if self._offset_index is not None:
            self._offset_index.flush()
        if self._time_index is not None:
            self._time_index.flush()
        if self._txn_index is not None:
            self._txn_index.flush()

    def close_indexes(self, trim: bool = True) -> None:
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.close(trim=trim)
        if self._txn_index is not None:
            self._txn_index.close()
        self._offset_index = self._time_index = self._txn_index = None

    def close(self, trim: bool = True) -> None:
        """Final time-index entry (as Kafka's close), trim and close the indexes and the file.
        `trim=False` only closes (files about to be removed, perhaps already moved)."""
        if trim and self._active and not self.deleted and self.size > 0 \
                and not self.log_file.closed:
            ts, offset = self.max_timestamp_and_offset
            if ts != NO_TIMESTAMP:
                self.time_index.maybe_append(ts, offset, skip_full_check=True)
        if trim and not self.deleted:
            self._trim_file()
        self.close_indexes(trim)
        if not self.log_file.closed:
            self.log_file.close()

    def rename_with_suffix(self, suffix: str) -> None:
        """Append `suffix` (e.g. ``.deleted``) to every file of this segment; files stay open."""
        for attr in ("path", "index_path", "time_index_path", "txn_index_path"):
            path = getattr(self, attr)
            if os.path.exists(path):
                files.fs.rename(path, path + suffix)
            setattr(self, attr, path + suffix)
        for index in (self._offset_index, self._time_index, self._txn_index):
            if index is not None:
                index.path += suffix

    def change_suffix(self, new_suffix: str) -> None:
        """Rename every file of a segment written with a `suffix` (the cleaner's ``.cleaned``)
        to end in `new_suffix` instead (``.swap``, then ``""``); files stay open."""
        old = self.suffix
        for attr in ("path", "index_path", "time_index_path", "txn_index_path"):
            path = getattr(self, attr)
            target = path[:len(path) - len(old)] + new_suffix
            if os.path.exists(path):
                files.fs.rename(path, target)
            setattr(self, attr, target)
        for index in (self._offset_index, self._time_index, self._txn_index):
            if index is not None:
                index.path = index.path[:len(index.path) - len(old)] + new_suffix
        self.suffix = new_suffix

    def delete_files(self) -> None:
        """Close everything and unlink the files (after file.delete.delay.ms for old segments)."""
        self.close(trim=False)
        for path in (self.path, self.index_path, self.time_index_path, self.txn_index_path):
            try:
                files.fs.remove(path)
            except FileNotFoundError:
                pass

    def __repr__(self):
        return f"LogSegment({self.path}, size={self.size})"
