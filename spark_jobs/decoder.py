"""Decodes a byte range of a segment into Arrow record batches, column by column.

Theory of operation
-------------------
A Spark task reads one `Split` (a byte range of one `.log` file that starts on a batch boundary) with
one `pread` and walks the batch headers (layout in spark_jobs/layout.py and storage/record_batch.py).
Batches that pass the checks below are queued; every `rows_per_batch` records (or MAX_CHUNK_BYTES
of decompressed records, which very compressible data reaches first) the queue is decoded
at once, column by column, into one `pyarrow.RecordBatch` (spark_jobs/columnar.py). No per-record
Python object is built, unlike `RecordBatchView.records()`, which builds a Record per row for the
broker's convenience; the tests check this decoder against storage's reader record by record.

Per batch, in order:
  1. a CRC32C mismatch raises `CorruptBatchError` (a consumer checks CRCs too; torn tails of the
     active segment were already cut off when the split was planned);
  2. control batches (transaction markers) are skipped, as a consumer never returns them;
  3. batches entirely outside [start_offset, end_offset) or older than the timestamp lower bound
     (by max_timestamp) are skipped without decompressing them;
  4. with read_committed, transactional batches of an aborted transaction are skipped (with
     includeBatchFields and read_uncommitted they are returned, `isAborted` true);
  5. batches without records are skipped: the log cleaner leaves empty batches (a 61-byte header,
     records_count 0) where it emptied a producer's last batch;
  6. the records are decompressed (storage/compression.py) and decoded; rows outside the offset or
     timestamp bounds are dropped afterwards, as one Arrow filter per decoded chunk.

Batches the log cleaner rewrote read like any other: offsets keep their gaps (each record carries its
offset delta), and a batch stamped with a delete horizon (KIP-534: attribute bit 6, the horizon in
the base timestamp) holds records whose timestamp deltas are negative; the record timestamp is
base_timestamp + delta either way. With includeBatchFields, `deleteHorizon` is that horizon.

A v2 record inside a batch::

    length varint, attributes int8, timestamp_delta varlong, offset_delta varint,
    key_length varint (-1 = null), key, value_length varint (-1 = null), value,
    header_count varint, then per header: key_length varint, key (utf-8), value_length varint, value

Varints are zigzag-encoded (Kafka's ByteUtils.readVarint). With LogAppendTime (attribute bit 3) every
record's timestamp is the batch's max_timestamp.

Entries of the message formats before 0.11 (magic 0 and 1, from data written by old clusters) are
read as Kafka's consumer reads them: a compressed wrapper's inner messages get absolute offsets
(magic 1 stores them relative to the wrapper, whose offset is the last one), a LogAppendTime
wrapper's timestamp is every inner message's, and magic 0 has no timestamp (timestampType -1).
"""
from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Iterator

import crc32c
import numpy as np
import pyarrow as pa

from spark_jobs.columnar import CorruptBatchError, decode_chunk, record_starts
from spark_jobs.layout import AbortedTxn, Split
from storage.compression import decompress
from storage.record_batch import (ATTRIBUTES_OFFSET, COMPRESSION_CODEC_MASK, CONTROL_FLAG_MASK,
                                  DELETE_HORIZON_FLAG_MASK, HEADER_SIZE, LOG_OVERHEAD, MAGIC_OFFSET,
                                  TIMESTAMP_TYPE_MASK, TRANSACTIONAL_FLAG_MASK, read_batch_header)

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

NO_TIMESTAMP = -1       # Kafka's RecordBatch.NO_TIMESTAMP: the record has none (here: null;
                        # Spark's Kafka source makes it 1969-12-31 23:59:59.999)

# Column names and Arrow types, in schema order. Names follow Spark's Kafka source.
BASE_COLUMNS = [
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
]
EXTRA_COLUMNS = [("leaderEpoch", pa.int32()), ("producerId", pa.int64()), ("isTransactional", pa.bool_())]
# With includeBatchFields: whether the record's batch belongs to an aborted transaction, and the
# batch's delete horizon (null when it has none), what the log cleaner decides by.
BATCH_FIELD_COLUMNS = [("isAborted", pa.bool_()), ("deleteHorizon", pa.timestamp("us", tz="UTC"))]
DEFAULT_ROWS_PER_BATCH = 65536
# A chunk's keys or values must stay under Arrow's 2 GiB per binary array: a 64 MiB split of
# data that compresses 32 times holds more than that in fewer than 65536 records.
MAX_CHUNK_BYTES = 256 << 20


def arrow_schema(include_headers: bool, batch_fields: bool = False) -> pa.Schema:
    columns = list(BASE_COLUMNS)
    if include_headers:
        columns.append(("headers", HEADER_TYPE))
    return pa.schema(columns + EXTRA_COLUMNS + (BATCH_FIELD_COLUMNS if batch_fields else []))


def batch_records(buf, pos: int, header) -> tuple[bytes, int]:
    """The (decompressed) records bytes of the v2 batch at pos, and its record count."""
    start = pos + HEADER_SIZE
    end = pos + LOG_OVERHEAD + header[1]
    data = buf[start:end]
    codec = header[5] & COMPRESSION_CODEC_MASK
    if codec:
        data = decompress(codec, data)
    return data, header[12]


def _legacy_messages(buf, pos: int, length: int) -> list:
    """The messages of the magic 0/1 entry at pos (storage.legacy.LegacyRecord: absolute
    offsets, timestamps and timestamp types as Kafka's consumer sees them)."""
    from storage.legacy import CorruptRecordError, iter_messages
    try:
        return list(iter_messages(bytes(buf[pos:pos + LOG_OVERHEAD + length])))
    except CorruptRecordError as exc:
        raise CorruptBatchError(f"legacy entry at {pos}: {exc}") from None


def _legacy_to_v2(messages) -> tuple[bytes, bool]:
    """(a v2 batch holding `messages` at their own offsets, whether they are magic 0: no
    timestamp type)."""
    from storage.record_batch import CREATE_TIME, LOG_APPEND_TIME, RecordBatchBuilder
    first = messages[0]
    builder = RecordBatchBuilder(timestamp_type=LOG_APPEND_TIME
                                 if first.timestamp_type == LOG_APPEND_TIME else CREATE_TIME,
                                 base_offset=first.offset)
    try:
        for m in messages:
            builder.append(m.timestamp, m.key, m.value, offset=m.offset)
    except ValueError as exc:                   # offsets that do not increase
        raise CorruptBatchError(f"legacy entry at offset {first.offset}: {exc}") from None
    return builder.build(), first.magic == 0


class SegmentChangedError(RuntimeError):
    """The segment a split was planned on is gone or was rewritten since: the query must be re-run."""


def _open_planned_segment(split: Split) -> int:
    """A descriptor of the very file the split was planned on (same inode).

    Kafka renames a segment to `.deleted` before deleting it (retention, and log compaction, which
    also puts the rewritten segment under the old name): the planned file stays readable there for
    file.delete.delay.ms, so a query sees one consistent snapshot even while the broker cleans. A
    segment planned under its `.swap` name is found under its final one.
    """
    paths = [split.log_path, split.log_path + ".deleted"]
    if split.log_path.endswith(".swap"):        # a compacted segment swapped in since planning
        paths.insert(1, split.log_path[:-len(".swap")])
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        if not split.inode or os.fstat(fd).st_ino == split.inode:
            return fd
        os.close(fd)
    raise SegmentChangedError(f"{split.log_path} was deleted or rewritten (retention or log compaction) "
                              "after the query was planned: run the query again")


def read_split_bytes(split: Split) -> bytes:
    """The split's bytes, with one pread, from the file the split was planned on."""
    fd = _open_planned_segment(split)
    try:
        buf = os.pread(fd, split.end_position - split.start_position, split.start_position)
    finally:
        os.close(fd)
    if len(buf) < split.end_position - split.start_position:
        raise CorruptBatchError(f"{split.log_path} shrank below {split.end_position} bytes")
    return buf


class SplitReader:
    """Reads one split into Arrow record batches; bounds are applied as described in the module doc.

    start_offset/end_offset: offsets [start, end) to return. min_ts_us/max_ts_us: inclusive bounds on
    the timestamp in microseconds (Spark's unit), or None. aborted: the partition's aborted
    transactions (read_committed, or batch_fields), else None; their batches are skipped unless
    skip_aborted is false. batch_fields adds the isAborted and deleteHorizon columns. Batches that
    pass the batch-level checks are queued; every `rows_per_batch` records the queue is decoded at
    once (spark_jobs/columnar.py).
    """

    def __init__(self, split: Split, start_offset: int, end_offset: int, *, min_ts_us: int | None = None,
                 max_ts_us: int | None = None, aborted: list[AbortedTxn] | None = None,
                 skip_aborted: bool = True, include_headers: bool = False, batch_fields: bool = False,
                 rows_per_batch: int = DEFAULT_ROWS_PER_BATCH):
        self.split = split
        self.start_offset = start_offset
        self.end_offset = end_offset
        self.min_ts_us = min_ts_us
        self.max_ts_us = max_ts_us
        # per producer: its aborted transactions' (first, last) offsets, sorted by first, and
        # the firsts alone, to find a batch's candidate by bisection (a producer's transactions
        # do not overlap; a linear scan made read_committed quadratic in the aborts)
        self.aborted: dict[int, list[tuple[int, int]]] = {}
        for txn in aborted or ():
            self.aborted.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
        for ranges in self.aborted.values():
            ranges.sort()
        self._aborted_firsts = {pid: [first for first, _ in ranges]
                                for pid, ranges in self.aborted.items()}
        self.skip_aborted = skip_aborted
        self.schema = arrow_schema(include_headers, batch_fields)
        self.include_headers = include_headers
        self.batch_fields = batch_fields
        self.rows_per_batch = rows_per_batch
        self._queue: list[tuple] = []
        self._queued_records = 0
        self._queued_bytes = 0

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        buf = read_split_bytes(self.split)
        yield from self._read_buffer(buf, 0, len(buf))
        if self._queue:
            yield from self._flush()

    def _read_buffer(self, buf, pos: int, end: int) -> Iterator[pa.RecordBatch]:
        while pos < end:
            if buf[pos + MAGIC_OFFSET] < 2:             # magic 0/1: convert, then read as v2
                _, batch_length = struct.unpack_from(">qi", buf, pos)
                if pos + LOG_OVERHEAD + batch_length > end:
                    raise CorruptBatchError(f"{self.split.log_path}: entry at {pos} runs past {end}")
                v2, no_timestamp_type = _legacy_to_v2(_legacy_messages(buf, pos, batch_length))
                self._queue_batch(v2, 0, len(v2), read_batch_header(v2, 0), no_timestamp_type)
                pos += LOG_OVERHEAD + batch_length
                if self._chunk_full():
                    yield from self._flush()
                continue
            header = read_batch_header(buf, pos)
            next_pos = pos + LOG_OVERHEAD + header[1]
            if next_pos > end:
                raise CorruptBatchError(f"{self.split.log_path}: batch at {pos} runs past {end}")
            self._queue_batch(buf, pos, next_pos, header)
            pos = next_pos
            if self._chunk_full():
                yield from self._flush()

    def _queue_batch(self, buf, pos: int, next_pos: int, header,
                     no_timestamp_type: bool = False) -> None:
        (base_offset, _length, leader_epoch, _magic, crc, attributes, last_delta, base_ts, max_ts,
         producer_id, _epoch, _seq, count) = header
        last_offset = base_offset + last_delta
        if attributes & CONTROL_FLAG_MASK or last_offset < self.start_offset or base_offset >= self.end_offset:
            return
        if self.min_ts_us is not None and max_ts * 1000 < self.min_ts_us:
            return
        aborted = bool(attributes & TRANSACTIONAL_FLAG_MASK) and self._is_aborted(producer_id, base_offset)
        if aborted and self.skip_aborted:
            return
        if crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:next_pos]) != crc:
            raise CorruptBatchError(f"{self.split.log_path}: CRC mismatch in batch at offset {base_offset}")
        if count <= 0:
            return
        data, count = batch_records(buf, pos, header)
        horizon = base_ts if attributes & DELETE_HORIZON_FLAG_MASK and base_ts >= 0 else NO_TIMESTAMP
        # Element 4: the LogAppendTime of every record (>= 0), -1 for CreateTime, or -2 for
        # magic 0 data, which has no timestamp type.
        log_append_ts = -2 if no_timestamp_type else (
            max_ts if attributes & TIMESTAMP_TYPE_MASK else -1)
        self._queue.append((data, count, base_offset, base_ts, log_append_ts, leader_epoch,
                            producer_id, bool(attributes & TRANSACTIONAL_FLAG_MASK), aborted,
                            horizon))
        self._queued_records += count
        self._queued_bytes += len(data)

    def _chunk_full(self) -> bool:
        return self._queued_records >= self.rows_per_batch or self._queued_bytes >= MAX_CHUNK_BYTES

    def _is_aborted(self, producer_id: int, offset: int) -> bool:
        firsts = self._aborted_firsts.get(producer_id)
        if not firsts:
            return False
        i = bisect.bisect_right(firsts, offset) - 1
        return i >= 0 and offset <= self.aborted[producer_id][i][1]

    def _flush(self) -> Iterator[pa.RecordBatch]:
        queue, self._queue, self._queued_records, self._queued_bytes = self._queue, [], 0, 0
        counts = np.array([q[1] for q in queue], np.int64)
        starts, position = [], 0
        for data, count, *_ in queue:
            starts.append(record_starts(data, count) + position)
            position += len(data)
        data = b"".join(q[0] for q in queue)

        def per_record(i, dtype=np.int64):
            return np.repeat(np.array([q[i] for q in queue], dtype), counts)
        try:
            keys, values, offsets, timestamps, headers = decode_chunk(
                data, np.concatenate(starts), per_record(2), per_record(3), per_record(4),
                self.include_headers)
        except CorruptBatchError as exc:
            raise CorruptBatchError(f"{self.split.log_path}: {exc}") from None
        n = len(offsets)
        log_append_ts = per_record(4)
        timestamp_types = np.where(log_append_ts == -2, -1, log_append_ts >= 0)
        split = self.split
        arrays = [keys, values, pa.repeat(pa.scalar(split.topic, pa.string()), n),
                  pa.repeat(pa.scalar(split.partition, pa.int32()), n), pa.array(offsets, pa.int64()),
                  pa.array(timestamps * 1000, pa.int64(), mask=timestamps == NO_TIMESTAMP)
                  .view(self.schema.field("timestamp").type),
                  pa.array(timestamp_types.astype(np.int32), pa.int32())]
        if headers is not None:
            arrays.append(pa.array(headers, HEADER_TYPE))
        arrays += [pa.array(per_record(5, np.int32), pa.int32()), pa.array(per_record(6), pa.int64()),
                   pa.array(per_record(7, np.bool_), pa.bool_())]
        if self.batch_fields:
            horizons = per_record(9)
            arrays += [pa.array(per_record(8, np.bool_), pa.bool_()),
                       pa.array(horizons * 1000, pa.int64(), mask=horizons == NO_TIMESTAMP)
                       .view(self.schema.field("deleteHorizon").type)]
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        keep = (offsets >= self.start_offset) & (offsets < self.end_offset)
        if self.min_ts_us is not None:        # a null timestamp matches no time bound
            keep &= (timestamps * 1000 >= self.min_ts_us) & (timestamps != NO_TIMESTAMP)
        if self.max_ts_us is not None:
            keep &= (timestamps * 1000 <= self.max_ts_us) & (timestamps != NO_TIMESTAMP)
        if not keep.all():
            batch = batch.filter(pa.array(keep))
        if batch.num_rows:
            yield batch


def offsets_and_timestamps(buf, pos: int) -> list[tuple[int, int]]:
    """(offset, timestamp ms) of every record of the batch (or legacy entry) at pos: for
    timestamp lookups."""
    if buf[pos + MAGIC_OFFSET] < 2:
        length = struct.unpack_from(">i", buf, pos + 8)[0]
        return [(m.offset, m.timestamp) for m in _legacy_messages(buf, pos, length)]
    header = read_batch_header(buf, pos)
    data, count = batch_records(buf, pos, header)
    n = max(count, 0)
    log_append_time = header[8] if header[5] & TIMESTAMP_TYPE_MASK else -1
    _, _, offsets, timestamps, _ = decode_chunk(
        data, record_starts(data, n), np.full(n, header[0], np.int64), np.full(n, header[7], np.int64),
        np.full(n, log_append_time, np.int64), False)
    return list(zip(offsets.tolist(), timestamps.tolist()))


CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
BATCH_COLUMNS = [
    ("topic", pa.string()), ("partition", pa.int32()), ("baseOffset", pa.int64()),
    ("lastOffset", pa.int64()), ("codec", pa.string()), ("sizeInBytes", pa.int64()),
    ("uncompressedBytes", pa.int64()), ("recordsCount", pa.int32()), ("isControl", pa.bool_()),
    ("isTransactional", pa.bool_()), ("producerId", pa.int64()), ("maxTimestamp", pa.timestamp("us", tz="UTC")),
]


def _legacy_size(message) -> int:
    """The bytes of one uncompressed legacy entry holding `message` (offset, size, crc, magic,
    attributes, [timestamp], key and value with their lengths)."""
    return (LOG_OVERHEAD + 4 + 2 + (8 if message.magic >= 1 else 0)
            + 4 + len(message.key or b"") + 4 + len(message.value or b""))


def read_batch_infos(split: Split, start_offset: int, end_offset: int) -> Iterator[pa.RecordBatch]:
    """One row per batch of the split (the `batches` view): sizes on disk and uncompressed, codec.

    uncompressedBytes is the batch as it would be without compression (header + records section).
    Batches are decompressed only to measure them; records are not decoded.
    """
    buf = read_split_bytes(split)
    columns = [[] for _ in BATCH_COLUMNS]
    pos = 0
    while pos + LOG_OVERHEAD <= len(buf):
        if buf[pos + MAGIC_OFFSET] < 2:
            length = struct.unpack_from(">qi", buf, pos)[1]
            messages = _legacy_messages(buf, pos, length)
            first, last = messages[0].offset, messages[-1].offset
            if start_offset <= last and first < end_offset:
                codec = buf[pos + MAGIC_OFFSET + 1] & 0x07
                size = LOG_OVERHEAD + length
                stamps = [m.timestamp for m in messages if m.timestamp != NO_TIMESTAMP]
                row = (split.topic, split.partition, first, last, CODEC_NAMES.get(codec, str(codec)),
                       size, size if codec == 0 else sum(_legacy_size(m) for m in messages),
                       len(messages), False, False, -1, max(stamps) * 1000 if stamps else None)
                for column, value in zip(columns, row):
                    column.append(value)
            pos += LOG_OVERHEAD + length
            continue
        header = read_batch_header(buf, pos)
        base_offset, length, attributes = header[0], header[1], header[5]
        last_offset = base_offset + header[6]
        if start_offset <= last_offset and base_offset < end_offset:
            codec = attributes & COMPRESSION_CODEC_MASK
            size = LOG_OVERHEAD + length
            uncompressed = size if codec == 0 else HEADER_SIZE + len(batch_records(buf, pos, header)[0])
            row = (split.topic, split.partition, base_offset, last_offset, CODEC_NAMES.get(codec, str(codec)),
                   size, uncompressed, header[12], bool(attributes & CONTROL_FLAG_MASK),
                   bool(attributes & TRANSACTIONAL_FLAG_MASK), header[9],
                   None if header[8] == NO_TIMESTAMP else header[8] * 1000)
            for column, value in zip(columns, row):
                column.append(value)
        pos += LOG_OVERHEAD + length
    if columns[0]:
        yield pa.RecordBatch.from_arrays([pa.array(c, t) for c, (_, t) in zip(columns, BATCH_COLUMNS)],
                                         names=[n for n, _ in BATCH_COLUMNS])
