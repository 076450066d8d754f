"""RecordBatch v2 (message format magic 2): the unit Kafka writes to the wire and to `.log` files.

Byte layout, big-endian, as Apache Kafka's DefaultRecordBatch defines it::

    offset  field                    type     notes
    0       base_offset              int64    offset of the first record
    8       batch_length             int32    bytes after this field (size_in_bytes - 12)
    12      partition_leader_epoch   int32    set by the leader on append; outside the CRC
    16      magic                    int8     2
    17      crc                      uint32   CRC32C of bytes 21..end (attributes onwards)
    21      attributes               int16    bit layout below
    23      last_offset_delta        int32    last record's offset - base_offset
    27      base_timestamp           int64    first record's timestamp (or the delete horizon)
    35      max_timestamp            int64    largest record timestamp, or the log append time
    43      producer_id              int64    -1 when not idempotent
    51      producer_epoch           int16
    53      base_sequence            int32    sequence of the first record, -1 when none
    57      records_count            int32
    61      records                  ...      see storage/records.py; compressed as a whole

Attribute bits: 0-2 compression codec, 3 timestamp type (0 CreateTime, 1 LogAppendTime),
4 transactional, 5 control batch, 6 base_timestamp holds a delete horizon (compacted logs).

Invariants and policy:
- base_offset and partition_leader_epoch sit outside the CRC, so the leader patches them in
  place when it assigns offsets; changing max_timestamp or attributes needs a new CRC.
- Legacy message sets (magic 0 and 1, see storage/legacy.py) share the first 17 bytes' shape:
  offset int64, size int32, crc uint32, magic int8 at byte 16. `iter_batches` uses that to walk
  a mixed buffer and yields `LegacyEntryView` for those entries.
- Readers never trust a size: `iter_batches` stops at an incomplete tail (recovery truncates it)
  and raises `CorruptRecordError` only for a size field that cannot be a batch at all.
- `RecordBatchView` reads its header fields with one `struct.unpack_from` and parses no records
  until asked; it works over bytes, bytearray, memoryview or mmap.
"""
import struct
from operator import itemgetter

import crc32c

from storage.compression import Codec, CorruptRecordError, compress, decompress
from storage.records import (_HEADER_KEY_CACHE, _NULL, _VARINT_TABLE, Record,  # noqa: F401
                             _encode_records_c, decode_records, encode_headers, encode_record,
                             encode_varint)

MAGIC_V0, MAGIC_V1, MAGIC_V2 = 0, 1, 2
LOG_OVERHEAD = 12                    # base_offset int64 + batch_length int32
HEADER_SIZE = 61                     # RecordBatch v2 header up to the records
PARTITION_LEADER_EPOCH_OFFSET = 12  # int32, right after base_offset and batch_length
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21               # the CRC covers attributes .. end of batch
MAX_TIMESTAMP_OFFSET = 35
MAGIC_OFFSET = 16
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD      # 49: a v2 batch with no records
MIN_LEGACY_MESSAGE_SIZE = 14         # crc 4 + magic 1 + attributes 1 + key len 4 + value len 4

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_PEEK = struct.Struct(">qi4xb6xi8xq")    # base_offset, length, magic, last_offset_delta, max_ts
_OFFSET_LENGTH = struct.Struct(">qi")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
assert _HEADER.size == HEADER_SIZE
_TIMESTAMP_OF = itemgetter(1)           # of a RecordBatchBuilder pending entry


class ControlRecordType:
    """Control record key `type` values (Kafka's ControlRecordType)."""

    ABORT = 0
    COMMIT = 1


class RecordBatchView:
    """A v2 batch at `position` in `buffer`; header fields only until `records()` is called."""

    __slots__ = ("buffer", "position", "base_offset", "batch_length", "partition_leader_epoch",
                 "magic", "crc", "attributes", "last_offset_delta", "base_timestamp",
                 "max_timestamp", "producer_id", "producer_epoch", "base_sequence",
                 "records_count")

    def __init__(self, buffer, position=0):
        self.buffer = buffer
        self.position = position
        (self.base_offset, self.batch_length, self.partition_leader_epoch, self.magic, self.crc,
         self.attributes, self.last_offset_delta, self.base_timestamp, self.max_timestamp,
         self.producer_id, self.producer_epoch, self.base_sequence,
         self.records_count) = _HEADER.unpack_from(buffer, position)

    def __repr__(self):
        return (f"RecordBatchView(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"records={self.records_count}, size={self.size_in_bytes}, "
                f"codec={self.compression.name}, producer_id={self.producer_id})")

    # --- derived header fields ---
    @property
    def size_in_bytes(self):
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self):
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self):
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self):
        return Codec(self.attributes & COMPRESSION_CODEC_MASK)

    @property
    def timestamp_type(self):
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self):
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self):
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self):
        return bool(self.attributes & DELETE_HORIZON_FLAG_MASK)

    @property
    def delete_horizon_ms(self):
        return self.base_timestamp if self.attributes & DELETE_HORIZON_FLAG_MASK else NO_TIMESTAMP

    @property
    def last_sequence(self):
        if self.base_sequence < 0:
            return NO_SEQUENCE
        seq = self.base_sequence + self.last_offset_delta
        return seq - 2**31 if seq > 2**31 - 1 else seq   # sequences wrap at int32 max

    @property
    def has_producer_id(self):
        return self.producer_id >= 0

    def raw(self):
        """The batch's bytes (a memoryview slice when the buffer allows it)."""
        return memoryview(self.buffer)[self.position:self.position + self.size_in_bytes]

    # --- CRC ---
    def compute_crc(self):
        view = memoryview(self.buffer)
        start = self.position + ATTRIBUTES_OFFSET
        return crc32c.crc32c(view[start:self.position + self.size_in_bytes])

    def is_valid(self):
        """Magic 2, sane length, and the stored CRC matches the bytes."""
        return (self.magic == MAGIC_V2 and self.batch_length >= MIN_BATCH_LENGTH
                and self.position + self.size_in_bytes <= len(self.buffer)
                and self.compute_crc() == self.crc)

    def ensure_valid(self):
        if self.magic != MAGIC_V2:
            raise CorruptRecordError(f"unexpected magic {self.magic} in a v2 batch")
        if self.batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batch length {self.batch_length} is below the minimum")
        if self.position + self.size_in_bytes > len(self.buffer):
            raise CorruptRecordError("batch extends past the end of the buffer")
        crc = self.compute_crc()
        if crc != self.crc:
            raise CorruptRecordError(f"batch at offset {self.base_offset}: CRC {crc:#010x} "
                                     f"does not match stored {self.crc:#010x}")

    # --- in-place patches (writable buffer) ---
    def set_base_offset(self, base_offset):
        _INT64.pack_into(self.buffer, self.position, base_offset)
        self.base_offset = base_offset

    def set_partition_leader_epoch(self, epoch):
        _INT32.pack_into(self.buffer, self.position + 12, epoch)
        self.partition_leader_epoch = epoch

    def set_max_timestamp(self, timestamp, timestamp_type):
        """Set max_timestamp and the timestamp-type bit, then recompute the CRC (Kafka does
        this for LogAppendTime topics). A no-op when both already hold those values."""
        attrs = self.attributes & ~TIMESTAMP_TYPE_MASK
        if timestamp_type == LOG_APPEND_TIME:
            attrs |= TIMESTAMP_TYPE_MASK
        if attrs == self.attributes and timestamp == self.max_timestamp:
            return
        _INT16.pack_into(self.buffer, self.position + ATTRIBUTES_OFFSET, attrs)
        _INT64.pack_into(self.buffer, self.position + MAX_TIMESTAMP_OFFSET, timestamp)
        self.attributes = attrs
        self.max_timestamp = timestamp
        self.crc = self.compute_crc()
        _UINT32.pack_into(self.buffer, self.position + CRC_OFFSET, self.crc)

    # --- records ---
    def records_data(self):
        """The uncompressed records section as bytes."""
        start = self.position + HEADER_SIZE
        raw = memoryview(self.buffer)[start:self.position + self.size_in_bytes]
        codec = self.attributes & COMPRESSION_CODEC_MASK
        if codec == 0:
            return bytes(raw)
        return decompress(codec, raw)

    def records(self):
        """Every record, decompressing when needed; raises CorruptRecordError on bad data."""
        if self.records_count < 0:
            raise CorruptRecordError(f"negative records count {self.records_count}")
        lat = self.max_timestamp if self.attributes & TIMESTAMP_TYPE_MASK else None
        return decode_records(self.records_data(), self.records_count, self.base_offset,
                              self.base_timestamp, self.base_sequence, lat)

    def iter_records(self):
        return iter(self.records())

    __iter__ = iter_records

    def control_record_type(self):
        """For a control batch: ControlRecordType of its (single) record's key; None for a
        marker the log cleaner emptied (no record: its transaction was cleaned away)."""
        if self.records_count == 0:
            return None
        rec = self.records()[0]
        if rec.key is None or len(rec.key) < 4:
            raise CorruptRecordError("control record without a valid key")
        return struct.unpack_from(">hh", rec.key)[1]


class LegacyEntryView:
    """A magic 0/1 message at `position` (offset int64, size int32, crc, magic, attributes...).

    `base_offset` is the message's offset field: for a compressed wrapper that is the offset of
    its LAST inner message. storage/legacy.py parses the content and up-converts it.
    """

    __slots__ = ("buffer", "position", "base_offset", "message_size", "crc", "magic",
                 "attributes")

    def __init__(self, buffer, position=0):
        self.buffer = buffer
        self.position = position
        self.base_offset, self.message_size = _OFFSET_LENGTH.unpack_from(buffer, position)
        self.crc, self.magic, self.attributes = struct.unpack_from(">IbB", buffer, position + 12)

    @property
    def size_in_bytes(self):
        return self.message_size + LOG_OVERHEAD

    @property
    def batch_length(self):
        return self.message_size

    @property
    def compression(self):
        return Codec(self.attributes & COMPRESSION_CODEC_MASK)

    @property
    def last_offset(self):
        return self.base_offset

    @property
    def next_offset(self):
        return self.base_offset + 1

    def compute_crc(self):
        import zlib
        view = memoryview(self.buffer)
        return zlib.crc32(view[self.position + 16:self.position + self.size_in_bytes])

    def is_valid(self):
        return (self.position + self.size_in_bytes <= len(self.buffer)
                and self.compute_crc() == self.crc)

    def raw(self):
        return memoryview(self.buffer)[self.position:self.position + self.size_in_bytes]

    def records(self):
        """The message(s) as Records (a compressed wrapper yields its inner messages); checks
        the CRCs. Legacy messages have no headers and no sequence."""
        from storage.legacy import iter_messages   # legacy.py builds on this module
        return [Record(m.offset, m.timestamp, m.key, m.value, [], NO_SEQUENCE, 0)
                for m in iter_messages(self.raw())]

    def iter_records(self):
        return iter(self.records())


def iter_batches(buf, start=0, end=None):
    """Yield a view of every COMPLETE batch in buf[start:end], in order.

    Magic 2 batches come out as RecordBatchView, magic 0/1 messages as LegacyEntryView. Stops
    silently at a short tail, and at zeros where a batch should start (the unwritten rest of a
    preallocated active segment, `preallocate=true`). Raises CorruptRecordError only for a
    length field too small to be any batch (the caller treats everything from there on as
    corrupt). CRCs are not checked.
    """
    if end is None:
        end = len(buf)
    pos = start
    unpack = _OFFSET_LENGTH.unpack_from
    while pos + MAGIC_OFFSET + 1 <= end:
        base, length = unpack(buf, pos)
        magic = buf[pos + MAGIC_OFFSET]
        if length == 0 and base == 0 and magic == 0:
            return
        size = length + LOG_OVERHEAD
        if magic == MAGIC_V2:
            if length < MIN_BATCH_LENGTH:
                raise CorruptRecordError(f"batch length {length} at position {pos} is too small")
            if pos + size > end:
                return
            yield RecordBatchView(buf, pos)
        elif magic in (MAGIC_V0, MAGIC_V1):
            if length < MIN_LEGACY_MESSAGE_SIZE:
                raise CorruptRecordError(f"message size {length} at position {pos} is too small")
            if pos + size > end:
                return
            yield LegacyEntryView(buf, pos)
        else:
            raise CorruptRecordError(f"unknown magic {magic} at position {pos}")
        pos += size


def read_batch_header(buf, pos):
    """The 13 header fields of the v2 batch at `pos`, as a tuple in layout order."""
    return _HEADER.unpack_from(buf, pos)


def peek_batches(buf, start=0, end=None):
    """Yield (position, size, base_offset, last_offset, max_timestamp, magic) for each complete
    entry, without objects or CRC checks (recovery and index building). For legacy entries
    base_offset == last_offset == the offset field and max_timestamp is -1.
    Same tail and corruption rules as iter_batches."""
    if end is None:
        end = len(buf)
    pos = start
    unpack = _PEEK.unpack_from
    while pos + MAGIC_OFFSET + 1 <= end:
        if pos + HEADER_SIZE <= end:
            base_offset, length, magic, delta, max_ts = unpack(buf, pos)
        else:
            base_offset, length = _OFFSET_LENGTH.unpack_from(buf, pos)
            magic, delta, max_ts = buf[pos + MAGIC_OFFSET], 0, NO_TIMESTAMP
        size = length + LOG_OVERHEAD
        if magic == MAGIC_V2:
            if length < MIN_BATCH_LENGTH:
                raise CorruptRecordError(f"batch length {length} at position {pos} is too small")
            if pos + size > end:
                return
            yield pos, size, base_offset, base_offset + delta, max_ts, magic
        elif magic in (MAGIC_V0, MAGIC_V1):
            if length < MIN_LEGACY_MESSAGE_SIZE:
                raise CorruptRecordError(f"message size {length} at position {pos} is too small")
            if pos + size > end:
                return
            yield pos, size, base_offset, base_offset, NO_TIMESTAMP, magic
        else:
            raise CorruptRecordError(f"unknown magic {magic} at position {pos}")
        pos += size


class RecordBatchBuilder:
    """Accumulates records and encodes one v2 batch.

    Not thread-safe; cheap to create. `append` returns the record's offset. Keys, values and
    header values are bytes-like or None (referenced, not copied, until encoded: do not mutate
    them); header keys are str.

    Encoding is deferred: `append` only records its arguments, and the pending records are
    encoded together, in one tight loop, when `size_in_bytes` or `build()` needs them. A
    caller that reads `size_in_bytes` after every append (a producer filling batch.size) gets
    exact sizes at the cost of encoding one record at a time; one that appends a whole batch
    and then builds pays no per-record attribute or call overhead (bench/batch_bench.py).
    """

    def __init__(self, magic=MAGIC_V2, compression=Codec.NONE, timestamp_type=CREATE_TIME,
                 base_offset=0, producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH,
                 base_sequence=NO_SEQUENCE, is_transactional=False, is_control=False,
                 partition_leader_epoch=NO_PARTITION_LEADER_EPOCH):
        if magic != MAGIC_V2:
            raise ValueError("RecordBatchBuilder writes magic 2 only (see storage/legacy.py)")
        self.compression = Codec(compression)
        self.timestamp_type = timestamp_type
        self.base_offset = base_offset
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.partition_leader_epoch = partition_leader_epoch
        self._pending = []             # (offset_delta, timestamp, key, value, headers)
        self._records = []             # encoded record bytes, joined by build()
        self._count = 0                # records in _records
        self._base_timestamp = None
        self._max_timestamp = NO_TIMESTAMP
        self._last_offset_delta = -1
        self._size = 0                 # bytes in _records

    def __len__(self):
        return self._count + len(self._pending)

    @property
    def size_in_bytes(self):
        """Exact uncompressed size of the batch so far (an upper bound once compressed)."""
        if self._pending:
            self._encode_pending()
        return HEADER_SIZE + self._size

    def append(self, timestamp, key, value, headers=(), offset=None):
        """Add a record; `offset` (absolute) defaults to the next one and must increase."""
        if offset is None:
            delta = self._last_offset_delta + 1
        else:
            delta = offset - self.base_offset
            if delta <= self._last_offset_delta:
                raise ValueError(f"offset {offset} does not increase")
        self._last_offset_delta = delta
        self._pending.append((delta, timestamp, key, value, headers))
        return self.base_offset + delta

    def _encode_pending(self):
        """Encode the pending records (storage/records.py layout): each body is one join of
        table-looked-up varints and the key/value; its length varint comes from the table.

        storage/_records.c encodes the common shapes (bytes or None keys and values, str header
        keys) when it was built; anything else, or no build, takes the Python loop below.
        Measured choices there (bench/batch_bench.py): the common one-header shape (a str key
        seen before, a value under 8 KiB) is joined inline instead of calling encode_headers,
        and the running size and max timestamp are computed once per call with C-level map()s
        rather than per record."""
        pending = self._pending
        base_ts = self._base_timestamp
        if base_ts is None:
            base_ts = self._base_timestamp = pending[0][1]
        self._count += len(pending)
        encoded = _encode_records_c(pending, base_ts) if _encode_records_c else None
        if encoded is not None:                     # storage/_records.c, when built
            data, max_ts = encoded
            self._records.append(data)
            self._size += len(data)
            self._max_timestamp = max(self._max_timestamp, max_ts)
            pending.clear()
            return
        table = _VARINT_TABLE
        header_keys = _HEADER_KEY_CACHE
        join = b"".join
        out = []
        append = out.append
        for delta, timestamp, key, value, headers in pending:
            ts_delta = timestamp - base_ts
            if key is None:
                key_len = _NULL
                key = b""
            else:
                n = len(key)
                key_len = table[n << 1] if n < 8192 else encode_varint(n)
            if value is None:
                value_len = _NULL
                value = b""
            else:
                n = len(value)
                value_len = table[n << 1] if n < 8192 else encode_varint(n)
            if not headers:
                encoded_headers = b"\x00"
            elif len(headers) == 1:
                hkey, hvalue = headers[0]
                encoded_key = header_keys.get(hkey) if hkey.__class__ is str else None
                if encoded_key is None or hvalue is None or len(hvalue) >= 8192:
                    encoded_headers = encode_headers(headers)
                else:
                    encoded_headers = join((b"\x02", encoded_key, table[len(hvalue) << 1],
                                            hvalue))
            else:
                encoded_headers = encode_headers(headers)
            body = join((b"\x00",
                         table[ts_delta << 1] if 0 <= ts_delta < 8192 else encode_varint(ts_delta),
                         table[delta << 1] if delta < 8192 else encode_varint(delta),
                         key_len, key, value_len, value, encoded_headers))
            n = len(body)
            append(table[n << 1] if n < 8192 else encode_varint(n))
            append(body)
        self._max_timestamp = max(self._max_timestamp, max(map(_TIMESTAMP_OF, pending)))
        self._size += sum(map(len, out))
        self._records += out
        pending.clear()

    def build(self):
        """The encoded batch as bytes."""
        if self._pending:
            self._encode_pending()
        data = b"".join(self._records)
        if self.compression != Codec.NONE:
            data = compress(self.compression, data)
        attributes = int(self.compression)
        if self.timestamp_type == LOG_APPEND_TIME:
            attributes |= TIMESTAMP_TYPE_MASK
        if self.is_transactional:
            attributes |= TRANSACTIONAL_FLAG_MASK
        if self.is_control:
            attributes |= CONTROL_FLAG_MASK
        base_ts = NO_TIMESTAMP if self._base_timestamp is None else self._base_timestamp
        header = bytearray(_HEADER.pack(
            self.base_offset, HEADER_SIZE - LOG_OVERHEAD + len(data),
            self.partition_leader_epoch, MAGIC_V2, 0, attributes, self._last_offset_delta,
            base_ts, self._max_timestamp, self.producer_id, self.producer_epoch,
            self.base_sequence, self._count))
        crc = crc32c.crc32c(data, crc32c.crc32c(memoryview(header)[ATTRIBUTES_OFFSET:]))
        _UINT32.pack_into(header, CRC_OFFSET, crc)
        return bytes(header) + data


def build_control_batch(control_type, producer_id, producer_epoch, coordinator_epoch,
                        timestamp, base_offset=0, partition_leader_epoch=NO_PARTITION_LEADER_EPOCH):
    """A transaction marker batch: one control record, key (version 0, type), value
    (version 0, coordinator_epoch), as Kafka's EndTransactionMarker writes it."""
    builder = RecordBatchBuilder(base_offset=base_offset, producer_id=producer_id,
                                 producer_epoch=producer_epoch, is_transactional=True,
                                 is_control=True, partition_leader_epoch=partition_leader_epoch)
    builder.append(timestamp, struct.pack(">hh", 0, control_type),
                   struct.pack(">hi", 0, coordinator_epoch))
    return builder.build()
