"""Read-only view of Kafka `log.dirs`: partitions, segments, indexes, checkpoints, committed ends.

Theory of operation
-------------------
The Spark data source plans its work on the driver from the files alone, without a broker and without
`storage.Log` (which recovers and therefore writes). Everything here opens files read-only, never
takes a lock, and tolerates a broker appending at the same time:

- A log dir holds one `<topic>-<partition>` directory per partition (directories being deleted or moved,
  `<topic>-<partition>.<uuid>-delete|-future|-stray`, are ignored) and Kafka's checkpoint files:
  `replication-offset-checkpoint` (high watermarks) and `log-start-offset-checkpoint`, each
  "version\\ncount\\n" then one "topic partition offset" line per partition.
- A partition directory holds segments named by their 20-digit base_offset: `.log`, plus the `.index`,
  `.timeindex` and `.txnindex` caches when present. A missing index is normal (Kafka's fixtures have
  none, and a crashed broker rebuilds them): every lookup falls back to scanning batch headers.
- Index files of the active segment are preallocated and zero-filled past their last entry, so an
  index is read up to its first entry that does not increase.
- The committed end of a partition, the exclusive upper bound of every read, is its high_watermark
  from `replication-offset-checkpoint` when that file covers the partition, else the log_end_offset
  (the end of the last complete, CRC-valid batch). That checkpoint is up to
  `replica.high.watermark.checkpoint.interval.ms` (5 s) old, while the log cleaner compacts up to
  the live high watermark: a record below the checkpointed one may be gone for a newer record of
  its key above it. So where `cleaner-offset-checkpoint` (the end of what was cleaned, never past
  the live high watermark) is further, the end is that: every key's latest record is read. What
  a cleaning swaps in before it writes that checkpoint (a moment) is still read as of before. Planning snapshots the byte size of the active
  segment at that moment, so all tasks of one query see the same data while the broker keeps appending.

Byte layouts (all big-endian, as Kafka writes them)::

    .index      entry: relative_offset int32, position int32           (8 bytes; offset = base + relative;
                the offset is the LAST offset of the batch starting at position)
    .timeindex  entry: timestamp int64, relative_offset int32          (12 bytes)
    .txnindex   entry: version int16 (0), producer_id int64, first_offset int64, last_offset int64,
                last_stable_offset int64                               (34 bytes)
    batch header (RecordBatch v2; only these fields are read here, see storage/record_batch.py):
        base_offset int64, batch_length int32, partition_leader_epoch int32, magic int8, crc uint32,
        attributes int16, last_offset_delta int32, base_timestamp int64, max_timestamp int64,
        producer_id int64, producer_epoch int16, base_sequence int32, records_count int32
"""
from __future__ import annotations

import mmap
import os
import re
import struct
from dataclasses import dataclass, field

import crc32c

from storage.files import CLUSTER_METADATA_TOPIC
from storage.record_batch import (ATTRIBUTES_OFFSET, COMPRESSION_CODEC_MASK, CONTROL_FLAG_MASK,
                                  HEADER_SIZE, LOG_OVERHEAD, MAGIC_OFFSET, TIMESTAMP_TYPE_MASK,
                                  TRANSACTIONAL_FLAG_MASK, read_batch_header)

# Kafka's file names (kafka.log.LogFileUtils / UnifiedLog).
LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"      # the log cleaner's first dirty offsets

# A partition dir is "<topic>-<partition>"; topics may contain '-' and '.', so the partition is the
# digits after the last '-'. Deleted/future/stray dirs end in "-delete"/"-future"/"-stray" and fail this.
_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
_SEGMENT_FILE = re.compile(r"^(?P<base>\d{20})\.log$")
_SWAP_FILE = re.compile(r"^(?P<base>\d{20})\.log\.swap$")
_CLEANED_FILE = re.compile(r"^(?P<base>\d{20})\.[a-z]+\.cleaned$")
SWAP_SUFFIX = ".swap"


class DuplicatePartitionError(ValueError):
    """One partition found in two of the log dirs given."""

OFFSET_INDEX_ENTRY = struct.Struct(">ii")
TIME_INDEX_ENTRY = struct.Struct(">qi")
TXN_INDEX_ENTRY = struct.Struct(">hqqqq")


@dataclass(frozen=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int


@dataclass
class Segment:
    base_offset: int
    log_path: str
    size: int                       # bytes of complete batches, as of planning
    index_path: str | None = None
    time_index_path: str | None = None
    txn_index_path: str | None = None
    inode: int = 0                  # of the .log file as planned: a rewrite (compaction) changes it


@dataclass
class PartitionLog:
    """One partition as found on disk: what a reader may read, and its Kafka offsets."""
    topic: str
    partition: int
    dir: str
    segments: list[Segment]
    log_start_offset: int
    log_end_offset: int
    high_watermark: int | None      # from the checkpoint, when it covers this partition

    @property
    def committed_end(self) -> int:
        """Exclusive end of what readers see: the high_watermark when known, else log_end_offset."""
        if self.high_watermark is None:
            return self.log_end_offset
        return min(self.high_watermark, self.log_end_offset)

    def segment_end_offset(self, i: int) -> int:
        """Exclusive end offset of segment i (the next segment's base_offset, or log_end_offset)."""
        if i + 1 < len(self.segments):
            return self.segments[i + 1].base_offset
        return self.log_end_offset


def read_checkpoint(path: str) -> dict[tuple[str, int], int]:
    """Parses a Kafka offset checkpoint file; a missing or malformed file yields {}."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        return {}
    if len(lines) < 2 or lines[0].strip() != "0":
        return {}
    result = {}
    for line in lines[2:2 + int(lines[1] or 0)]:
        parts = line.split()
        if len(parts) == 3:
            result[(parts[0], int(parts[1]))] = int(parts[2])
    return result


def _map(path: str):
    """A read-only mmap of the whole file, or b"" when empty (mmap of an empty file raises)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def read_offset_index(path: str | None, base_offset: int) -> list[tuple[int, int]]:
    """(offset, position) entries up to the first one that does not increase (preallocated tail)."""
    if path is None:
        return []
    entries = []
    with open(path, "rb") as f:
        data = f.read()
    last_offset, last_pos = -1, -1
    for relative, position in OFFSET_INDEX_ENTRY.iter_unpack(data[:len(data) // 8 * 8]):
        offset = base_offset + relative
        if offset <= last_offset or position <= last_pos:
            break
        entries.append((offset, position))
        last_offset, last_pos = offset, position
    return entries


def read_time_index(path: str | None, base_offset: int) -> list[tuple[int, int]]:
    """(timestamp, offset) entries up to the first one that does not increase."""
    if path is None:
        return []
    entries = []
    with open(path, "rb") as f:
        data = f.read()
    last_ts, last_offset = -1, -1
    for timestamp, relative in TIME_INDEX_ENTRY.iter_unpack(data[:len(data) // 12 * 12]):
        offset = base_offset + relative
        if timestamp < last_ts or offset < last_offset or (timestamp == 0 and relative == 0 and entries):
            break
        entries.append((timestamp, offset))
        last_ts, last_offset = timestamp, offset
    return entries


def read_txn_index(path: str | None) -> list[AbortedTxn]:
    if path is None:
        return []
    with open(path, "rb") as f:
        data = f.read()
    return [AbortedTxn(pid, first, last)
            for version, pid, first, last, _lso in TXN_INDEX_ENTRY.iter_unpack(data[:len(data) // 34 * 34])
            if version == 0]


def iter_batch_headers(buf, start: int = 0, end: int | None = None, check_crc: bool = False):
    """Yields (position, header tuple) for each complete batch in buf[start:end].

    Stops quietly at a torn tail (short header, batch_length past the end, or, with check_crc, a
    CRC mismatch): that is what a reader sees while a broker is mid-write or after a crash.
    Legacy (magic 0/1) entries are yielded too; their header tuple is only valid up to the magic byte.
    """
    end = len(buf) if end is None else end
    pos = start
    while pos + LOG_OVERHEAD <= end:
        base_offset, batch_length = struct.unpack_from(">qi", buf, pos)
        next_pos = pos + LOG_OVERHEAD + batch_length
        if batch_length <= 0 or next_pos > end:
            return
        if buf[pos + MAGIC_OFFSET] >= 2:
            if batch_length < HEADER_SIZE - LOG_OVERHEAD:
                return
            header = read_batch_header(buf, pos)
            if check_crc and crc32c.crc32c(buf[pos + ATTRIBUTES_OFFSET:next_pos]) != header[4]:
                return
        else:
            header = (base_offset, batch_length, -1, buf[pos + MAGIC_OFFSET]) + (0,) * 9
        yield pos, header
        pos = next_pos


def last_offset_of(header) -> int:
    return header[0] + header[6] if header[3] >= 2 else header[0]


def _scan_tail(path: str, start: int) -> tuple[int, int | None]:
    """Scans complete, CRC-valid batches from start: (end position, next offset or None if none)."""
    buf = _map(path)
    try:
        end, next_offset = start, None
        for pos, header in iter_batch_headers(buf, start, check_crc=True):
            end = pos + LOG_OVERHEAD + header[1]
            next_offset = last_offset_of(header) + 1
        return end, next_offset
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()


def _list_segments(dir_path: str) -> list[Segment]:
    names = set(os.listdir(dir_path))
    segments = []
    for name in names:
        m = _SEGMENT_FILE.match(name)
        if not m:
            continue
        stem = name[:-len(LOG_SUFFIX)]
        path = os.path.join(dir_path, name)

        def sibling(suffix):
            return os.path.join(dir_path, stem + suffix) if stem + suffix in names else None
        try:
            st = os.stat(path)
        except FileNotFoundError:      # deleted by retention since the listing: not read
            continue
        segments.append(Segment(int(m["base"]), path, st.st_size, sibling(INDEX_SUFFIX),
                                sibling(TIME_INDEX_SUFFIX), sibling(TXN_INDEX_SUFFIX), st.st_ino))
    # As Kafka's loader: a .swap at or above the lowest .cleaned file's base is a swap not
    # fully prepared (the old segments are still whole): ignored.
    cleaned = [int(m["base"]) for m in map(_CLEANED_FILE.match, names) if m]
    min_cleaned = min(cleaned) if cleaned else None
    for name in names:
        m = _SWAP_FILE.match(name)
        if m and (min_cleaned is None or int(m["base"]) < min_cleaned):
            segments = _swapped_in(dir_path, names, int(m["base"]), segments)
    segments.sort(key=lambda s: s.base_offset)
    return segments


def _swapped_in(dir_path: str, names: set, base: int, segments: list) -> list:
    """A compacted segment being swapped in (Kafka's replaceSegments: the cleaned segment is
    renamed `.swap`, the segments it replaces `.deleted`, then the `.swap` drops its suffix;
    a crash can leave it so, for the broker's restart to finish): it is read in place of the
    segments it covers, as Kafka's loader takes it (those segments may already be gone from
    the listing: without it their rows were silently missing)."""
    stem = f"{base:020d}"
    path = os.path.join(dir_path, stem + LOG_SUFFIX + SWAP_SUFFIX)
    try:
        st = os.stat(path)
    except FileNotFoundError:           # swapped in since the listing: its .log was listed
        return segments
    end, next_offset = _scan_tail(path, 0)
    covered_end = next_offset if next_offset is not None else base
    kept = [seg for seg in segments if not base <= seg.base_offset < max(covered_end, base + 1)]

    def sibling(suffix):
        name = stem + suffix + SWAP_SUFFIX
        return os.path.join(dir_path, name) if name in names else None
    kept.append(Segment(base, path, end, sibling(INDEX_SUFFIX), sibling(TIME_INDEX_SUFFIX),
                        sibling(TXN_INDEX_SUFFIX), st.st_ino))
    return kept


def is_partition_dir(path: str) -> bool:
    """A topic partition's directory (named topic-N, holding segments), not a log dir."""
    if not _PARTITION_DIR.match(os.path.basename(path.rstrip("/"))):
        return False
    try:
        return any(name.endswith(LOG_SUFFIX) for name in os.listdir(path))
    except OSError:
        return False


def load_partition(dir_path: str, topic: str, partition: int,
                   high_watermarks: dict, log_start_offsets: dict,
                   cleaned_offsets: dict | None = None) -> PartitionLog:
    """Snapshots one partition directory: segments, the active segment's complete size, offsets.
    `cleaned_offsets`: cleaner-offset-checkpoint's entries (see the module doc, committed end)."""
    high_watermark = high_watermarks.get((topic, partition))
    cleaned = (cleaned_offsets or {}).get((topic, partition))
    if high_watermark is not None and cleaned is not None:
        high_watermark = max(high_watermark, cleaned)
    segments = _list_segments(dir_path)
    if not segments:
        return PartitionLog(topic, partition, dir_path, [], 0, 0, high_watermark)
    # Only the active (last) segment can have a torn tail; scan it from its last index entry on.
    active = segments[-1]
    entries = read_offset_index(active.index_path, active.base_offset)
    start = entries[-1][1] if entries and entries[-1][1] < active.size else 0
    end, next_offset = _scan_tail(active.log_path, start)
    if next_offset is None and start > 0:           # a stale index: scan the whole segment
        end, next_offset = _scan_tail(active.log_path, 0)
    active.size = end
    log_end_offset = next_offset if next_offset is not None else active.base_offset
    log_start_offset = max(segments[0].base_offset, log_start_offsets.get((topic, partition), 0))
    return PartitionLog(topic, partition, dir_path, segments, log_start_offset, log_end_offset,
                        high_watermark)


def discover(log_dirs: list[str], topic_filter=None,
             include_cluster_metadata: bool = False, partition_filter=None) -> list[PartitionLog]:
    """Every partition found in the given log dirs, sorted by (topic, partition).

    topic_filter(topic) -> bool and partition_filter(partition) -> bool choose partitions
    before any segment is opened. KRaft's metadata
    log (`__cluster_metadata-0`, in dirs written by Kafka in KRaft mode) is not a topic and is
    left out unless `include_cluster_metadata` (the data source: when named in `topics`).
    """
    found = []
    for log_dir in log_dirs:
        high_watermarks = read_checkpoint(os.path.join(log_dir, HIGH_WATERMARK_CHECKPOINT))
        log_start_offsets = read_checkpoint(os.path.join(log_dir, LOG_START_OFFSET_CHECKPOINT))
        cleaned_offsets = read_checkpoint(os.path.join(log_dir, CLEANER_OFFSET_CHECKPOINT))
        for name in sorted(os.listdir(log_dir)):
            m = _PARTITION_DIR.match(name)
            path = os.path.join(log_dir, name)
            if not m or not os.path.isdir(path):
                continue
            topic, partition = m["topic"], int(m["partition"])
            if topic == CLUSTER_METADATA_TOPIC and not include_cluster_metadata:
                continue
            if topic_filter is not None and not topic_filter(topic):
                continue
            if partition_filter is not None and not partition_filter(partition):
                continue
            found.append(load_partition(path, topic, partition, high_watermarks, log_start_offsets,
                                        cleaned_offsets))
    found.sort(key=lambda p: (p.topic, p.partition))
    for a, b in zip(found, found[1:]):
        if (a.topic, a.partition) == (b.topic, b.partition):
            # Kafka refuses to start so; it is also the moment a move between log dirs renames
            # the future replica before the old one goes
            raise DuplicatePartitionError(
                f"{a.topic}-{a.partition} is in two of the log dirs ({a.dir}, {b.dir}): "
                f"a move between log dirs finishing (run the query again), or log dirs of more "
                f"than one broker (name one broker's)")
    return found


@dataclass(frozen=True)
class Split:
    """A byte range of one segment: the unit of work of one Spark task."""
    topic: str
    partition: int
    log_path: str
    start_position: int
    end_position: int
    first_offset: int               # base_offset of the batch at start_position
    end_offset: int                 # exclusive: the first offset of the next split
    inode: int = 0                  # the segment file's inode at planning (0: not checked)


def segment_split_points(segment: Segment, target_bytes: int) -> list[tuple[int, int]]:
    """(position, base_offset) of batch starts where a segment is cut into ~target_bytes pieces.

    Uses the offset index when present (entries point at batch starts); otherwise scans headers.
    The first point is always (0, segment.base_offset).
    """
    points = [(0, segment.base_offset)]
    if segment.size <= target_bytes:
        return points
    candidates = [pos for _, pos in read_offset_index(segment.index_path, segment.base_offset)
                  if pos < segment.size]
    buf = _map(segment.log_path)
    try:
        if not candidates:
            candidates = [pos for pos, _ in iter_batch_headers(buf, 0, segment.size)]
        next_cut = target_bytes
        for pos in candidates:
            if pos >= next_cut and pos > points[-1][0]:
                first = _first_offset_at(buf, pos)
                if first is None:
                    continue
                points.append((pos, first))
                next_cut = pos + target_bytes
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()
    return points


def _first_offset_at(buf, pos: int) -> int | None:
    """The first offset of the batch at `pos`: a v2 batch's base offset; a legacy entry's
    offset field is its last message's (a compressed wrapper's first is read from inside it).
    None for an entry that cannot be read (not a place to cut)."""
    offset = struct.unpack_from(">q", buf, pos)[0]
    if buf[pos + MAGIC_OFFSET] >= 2:
        return offset
    from storage.legacy import iter_messages
    from storage.compression import CorruptRecordError
    size = struct.unpack_from(">i", buf, pos + 8)[0] + LOG_OVERHEAD
    try:
        return next(iter_messages(bytes(buf[pos:pos + size]))).offset
    except (CorruptRecordError, StopIteration, struct.error, ValueError):
        return None


def plan_splits(log: PartitionLog, start_offset: int, end_offset: int, target_bytes: int) -> list[Split]:
    """Splits covering offsets [start_offset, end_offset) of one partition; none when empty."""
    splits = []
    if start_offset >= end_offset:
        return splits
    for i, segment in enumerate(log.segments):
        seg_end = log.segment_end_offset(i)
        if seg_end <= start_offset or segment.base_offset >= end_offset or segment.size == 0:
            continue
        points = segment_split_points(segment, target_bytes)
        for j, (pos, first) in enumerate(points):
            stop_pos, stop_offset = points[j + 1] if j + 1 < len(points) else (segment.size, seg_end)
            if stop_offset <= start_offset or first >= end_offset:
                continue
            if end_offset < stop_offset:
                # The split holding the end (the high watermark, say) stops at the batch that
                # starts there: the bytes past it are not read, so a follower's truncation of
                # its uncommitted tail cannot break the query (Kafka reads up to the HW too).
                stop_pos, stop_offset = _cut_at(segment.log_path, pos, stop_pos, end_offset)
            splits.append(Split(log.topic, log.partition, segment.log_path, pos, stop_pos, first,
                                stop_offset, segment.inode))
    return splits


def _cut_at(path: str, start: int, end: int, offset: int) -> tuple[int, int]:
    """(position, first offset) of the first batch in [start, end) of `path` with no offset
    below `offset` (end, `offset` when none): where a read that wants offsets < `offset` stops."""
    buf = _map(path)
    previous_last = None
    try:
        for pos, header in iter_batch_headers(buf, start, end):
            # a legacy wrapper's offset is its last message's: its first is only known to
            # follow the entry before it
            first = header[0] if header[3] >= 2 else \
                (previous_last + 1 if previous_last is not None else None)
            if first is not None and first >= offset:
                return pos, offset
            previous_last = last_offset_of(header)
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()
    return end, offset


@dataclass
class TxnState:
    """What read_committed needs of one partition: aborted transactions and the last_stable_offset."""
    aborted: list[AbortedTxn] = field(default_factory=list)
    last_stable_offset: int = 0
    # producer id -> first offset of its transaction not decided for readers yet (no marker, or
    # a marker at or past the committed end)
    undecided: dict = field(default_factory=dict)


CONTROL_KEY = struct.Struct(">hh")  # control record key: version int16, type int16 (0 abort, 1 commit)


def scan_transactions(log: PartitionLog) -> TxnState:
    """Finds aborted transactions and the last_stable_offset of a partition by scanning batch headers.

    A transaction starts at a producer's first transactional batch and ends at its control batch
    (the marker); ABORT markers give the aborted ranges, and a transaction still open at the end, or
    whose marker is at or past the committed end (not replicated yet), bounds the last_stable_offset,
    as the broker's producer state does. `.txnindex` entries, when present, are merged in (the broker may
    have cleaned markers away by compaction). Only control batches are decompressed (they never are).
    A marker the log cleaner emptied (records_count 0: it keeps the header of a producer's last
    batch) ends a transaction without saying which kind; the cleaner empties a marker only once
    its transaction has no data left, and a kept ABORT marker keeps its `.txnindex` entry.
    """
    ongoing: dict[int, int] = {}
    ended_above_hw: dict[int, int] = {}  # producer -> first offset, its marker not committed yet
    committed_end = log.committed_end
    aborted: set[AbortedTxn] = set()
    for segment in log.segments:
        aborted.update(read_txn_index(segment.txn_index_path))
        buf = _map(segment.log_path)
        try:
            for pos, h in iter_batch_headers(buf, 0, segment.size):
                if h[3] < 2 or not h[5] & TRANSACTIONAL_FLAG_MASK:
                    continue
                producer_id = h[9]
                if h[5] & CONTROL_FLAG_MASK:
                    first = ongoing.pop(producer_id, None)
                    if first is not None and h[12] > 0 and _control_type(buf, pos) == 0:
                        aborted.add(AbortedTxn(producer_id, first, h[0]))
                    if first is not None and h[0] >= committed_end:
                        ended_above_hw.setdefault(producer_id, first)
                else:
                    ongoing.setdefault(producer_id, h[0])
        finally:
            if isinstance(buf, mmap.mmap):
                buf.close()
    undecided = {**ongoing, **ended_above_hw}
    for producer_id, first in ongoing.items():            # the earliest one of each producer
        undecided[producer_id] = min(first, ended_above_hw.get(producer_id, first))
    lso = min(undecided.values(), default=log.log_end_offset)
    return TxnState(sorted(aborted, key=lambda a: a.first_offset), min(lso, committed_end),
                    undecided)


def segment_max_timestamp(segment: Segment) -> int:
    """The largest batch max_timestamp of a segment, or -1 (Kafka's LogSegment.maxTimestampSoFar):
    the time index's last entry covers the batches up to the offset index's last entry (both are
    written together, and a rolled segment's time index ends with its maximum), so only the batch
    headers after that position are read, as storage/segment.py's _load_tail does."""
    entries = read_time_index(segment.time_index_path, segment.base_offset)
    largest = entries[-1][0] if entries else -1
    positions = [pos for _, pos in read_offset_index(segment.index_path, segment.base_offset)
                 if pos < segment.size]
    start = positions[-1] if positions and entries else 0
    buf = _map(segment.log_path)
    try:
        for _, h in iter_batch_headers(buf, start, segment.size):
            if h[3] >= 2:
                largest = max(largest, h[8])
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()
    return largest


def _control_type(buf, pos: int) -> int:
    """The type of the first control record of the batch at pos (the marker), from its key."""
    p = _skip_varint(buf, pos + HEADER_SIZE)        # record length
    p = _skip_varint(buf, p + 1)                    # attributes int8, then timestamp delta
    p = _skip_varint(buf, p)                        # offset delta
    p = _skip_varint(buf, p)                        # key length (4)
    return CONTROL_KEY.unpack_from(buf, p)[1]


def _skip_varint(buf, p: int) -> int:
    while buf[p] & 0x80:
        p += 1
    return p + 1


def offset_for_timestamp(log: PartitionLog, timestamp_ms: int, decode_batch) -> int | None:
    """The earliest offset whose timestamp >= timestamp_ms (Kafka's ListOffsets by time), else None.

    Uses each segment's `.timeindex` to skip segments whose largest timestamp is smaller and to start
    the scan near the target; falls back to scanning batch headers (max_timestamp) when absent.
    decode_batch(buf, pos) -> list of (offset, timestamp) resolves the exact record inside a batch.
    """
    for i, segment in enumerate(log.segments):
        entries = read_time_index(segment.time_index_path, segment.base_offset)
        if entries and i + 1 < len(log.segments) and entries[-1][0] < timestamp_ms:
            continue                                # a closed segment's last entry is its max
        start = 0
        if entries:
            offsets = read_offset_index(segment.index_path, segment.base_offset)
            below = [off for ts, off in entries if ts < timestamp_ms]
            if below and offsets:
                # Kafka: the batch holding `below[-1]` starts at or after the index entry <= it.
                start = max((pos for off, pos in offsets if off < below[-1]), default=0)
        buf = _map(segment.log_path)
        try:
            for pos, h in iter_batch_headers(buf, start, segment.size):
                if h[3] >= 2 and (h[5] & CONTROL_FLAG_MASK or h[8] < timestamp_ms):
                    continue
                for offset, ts in decode_batch(buf, pos):
                    if ts >= timestamp_ms and offset >= log.log_start_offset:
                        return offset
        finally:
            if isinstance(buf, mmap.mmap):
                buf.close()
    return None
