"""Legacy message sets (message format magic 0 and 1): parsing, up-conversion to v2, and writing.

A legacy message set is a sequence of entries, big-endian::

    offset         int64     absolute offset (see wrapper rules below)
    message_size   int32     bytes after this field
    crc            uint32    zlib CRC32 of magic .. end of the message
    magic          int8      0 or 1
    attributes     int8      bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4), bit 3 timestamp
                             type (magic 1 only: 0 CreateTime, 1 LogAppendTime)
    timestamp      int64     magic 1 only
    key            int32 length (-1 = null) + bytes
    value          int32 length (-1 = null) + bytes

A compressed message is a *wrapper*: its value is the codec's compression of an inner message
set (uncompressed messages of the same magic). Wrapper rules, as Kafka applies them:
- magic 1: inner offsets are relative (0..n-1); the wrapper's offset is the absolute offset of
  the last inner message, so inner absolute = wrapper offset - last inner relative + inner
  relative. With LogAppendTime, every inner message takes the wrapper's timestamp.
- magic 0: inner offsets are whatever the writer put there (absolute in a log written by a
  broker); there are no timestamps (NO_TIMESTAMP, -1).
- A wrapper inside a wrapper is corrupt.

`convert_to_v2` is what the leader does when a magic 0/1 producer writes to a v2 log: one v2
batch holding every message in order, compressed with the codec the producer used, CreateTime
timestamps (or -1 for magic 0), no producer id. Offsets restart at 0: the validator assigns real
ones afterwards. `build_message_set` writes legacy messages (tests and down-conversion).

`convert_from_v2(buf, magic, first_offset)` is Kafka's down-conversion for old fetchers (Fetch
v0-3, broker/handlers/fetch.py): each v2 batch becomes one wrapper message (compressed batches,
same codec) or one message per record from the fetch offset on, keeping offsets; control batches
are dropped and headers lost, as in Kafka; zstd has no legacy form (Kafka answers
UNSUPPORTED_COMPRESSION_TYPE), which raises DownConversionUnsupported here.
"""
import struct
import zlib
from collections import namedtuple

from storage.compression import (Codec, CorruptRecordError, compress, decompress,
                                 kafka08_lz4_header)
from storage.record_batch import (CREATE_TIME, LOG_APPEND_TIME, LOG_OVERHEAD, MAGIC_V2,
                                  NO_TIMESTAMP, RecordBatchBuilder, iter_batches)

MAGIC_V0, MAGIC_V1 = 0, 1
CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
_ENTRY = struct.Struct(">qiIbb")           # offset, message_size, crc, magic, attributes
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
# Smallest message after the size field: crc 4 + magic 1 + attributes 1 + key len 4 + value len 4.
MIN_MESSAGE_SIZE = {MAGIC_V0: 14, MAGIC_V1: 22}

LegacyRecord = namedtuple("LegacyRecord", "offset timestamp timestamp_type key value magic codec crc",
                          defaults=(None,))
LegacyRecord.__doc__ = "One message of a legacy set, with wrappers already unpacked."


def _bytes_field(buf, pos, end):
    (n,) = _INT32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        if n != -1:
            raise CorruptRecordError(f"negative length {n}")
        return None, pos
    if pos + n > end:
        raise CorruptRecordError("key or value extends past the message")
    return bytes(buf[pos:pos + n]), pos + n


def _parse_message(buf, pos, end):
    """Parse one entry at pos (complete and bounded by end); return its fields and next pos."""
    if pos + LOG_OVERHEAD + 6 > end:
        raise CorruptRecordError("truncated legacy message")
    offset, size, crc, magic, attributes = _ENTRY.unpack_from(buf, pos)
    if magic not in MIN_MESSAGE_SIZE:
        raise CorruptRecordError(f"unexpected magic {magic} in a legacy message set")
    if size < MIN_MESSAGE_SIZE[magic]:
        raise CorruptRecordError(f"message size {size} is below the minimum for magic {magic}")
    msg_end = pos + LOG_OVERHEAD + size
    if msg_end > end:
        raise CorruptRecordError("legacy message extends past its message set")
    if zlib.crc32(memoryview(buf)[pos + 16:msg_end]) != crc:
        raise CorruptRecordError(f"legacy message at offset {offset}: CRC mismatch")
    p = pos + 18
    timestamp = NO_TIMESTAMP
    if magic == MAGIC_V1:
        (timestamp,) = _INT64.unpack_from(buf, p)
        p += 8
    key, p = _bytes_field(buf, p, msg_end)
    value, p = _bytes_field(buf, p, msg_end)
    if p != msg_end:
        raise CorruptRecordError("legacy message size does not match its fields")
    return offset, magic, attributes, timestamp, key, value, msg_end, crc


def iter_messages(buf, start=0, end=None):
    """Yield LegacyRecord for every message in a COMPLETE legacy message set, unpacking
    wrappers; raises CorruptRecordError on any bad CRC, size or codec."""
    if end is None:
        end = len(buf)
    pos = start
    while pos < end:
        offset, magic, attributes, timestamp, key, value, pos, crc = _parse_message(buf, pos, end)
        codec = attributes & CODEC_MASK
        ts_type = LOG_APPEND_TIME if magic == MAGIC_V1 and attributes & TIMESTAMP_TYPE_MASK \
            else CREATE_TIME
        if codec == Codec.NONE:
            yield LegacyRecord(offset, timestamp, ts_type, key, value, magic, Codec.NONE, crc)
            continue
        if codec > Codec.LZ4:
            raise CorruptRecordError(f"codec {codec} is not valid for magic {magic}")
        if value is None:
            raise CorruptRecordError("compressed wrapper message without a value")
        yield from _unwrap(offset, magic, ts_type, timestamp, Codec(codec),
                           decompress(codec, value))


def _unwrap(wrapper_offset, magic, ts_type, wrapper_timestamp, codec, inner):
    inner_msgs = []
    pos, end = 0, len(inner)
    while pos < end:
        offset, imagic, attributes, timestamp, key, value, pos, crc = _parse_message(inner, pos, end)
        if attributes & CODEC_MASK:
            raise CorruptRecordError("compressed message inside a compressed wrapper")
        if imagic != magic:
            raise CorruptRecordError("inner message magic differs from its wrapper's")
        inner_msgs.append((offset, timestamp, key, value, crc))
    if not inner_msgs:
        raise CorruptRecordError("compressed wrapper holds no messages")
    last_relative = inner_msgs[-1][0]
    for offset, timestamp, key, value, crc in inner_msgs:
        if magic == MAGIC_V1:
            offset = wrapper_offset - last_relative + offset
            if ts_type == LOG_APPEND_TIME:
                timestamp = wrapper_timestamp
        yield LegacyRecord(offset, timestamp, ts_type, key, value, magic, codec, crc)


def convert_to_v2(buf):
    """Up-convert a complete legacy message set to one v2 batch (bytes), base_offset 0."""
    records = list(iter_messages(buf))
    if not records:
        raise CorruptRecordError("empty legacy message set")
    codec = next((r.codec for r in records if r.codec != Codec.NONE), Codec.NONE)
    builder = RecordBatchBuilder(compression=codec)
    for r in records:
        builder.append(r.timestamp, r.key, r.value)
    return builder.build()


def encode_message(offset, magic, key, value, timestamp=NO_TIMESTAMP, attributes=0):
    """One legacy entry (offset, size, crc, magic, attributes, [timestamp], key, value)."""
    parts = [struct.pack(">bb", magic, attributes)]
    if magic == MAGIC_V1:
        parts.append(_INT64.pack(timestamp))
    for field in (key, value):
        if field is None:
            parts.append(_INT32.pack(-1))
        else:
            parts.append(_INT32.pack(len(field)))
            parts.append(bytes(field))
    body = b"".join(parts)
    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + body


def build_message_set(messages, magic=MAGIC_V1, codec=Codec.NONE, base_offset=0,
                      timestamp_type=CREATE_TIME):
    """Legacy message set from (timestamp, key, value) tuples; compressed sets are one wrapper
    with relative inner offsets (magic 1) or absolute ones (magic 0), like Kafka writes (magic 0 +
    LZ4 with Kafka 0.8's frame header checksum)."""
    if codec == Codec.NONE:
        return b"".join(encode_message(base_offset + i, magic, k, v, ts)
                        for i, (ts, k, v) in enumerate(messages))
    if codec > Codec.LZ4:
        raise ValueError(f"{Codec(codec).name} needs message format v2")
    first = 0 if magic == MAGIC_V1 else base_offset
    inner = b"".join(encode_message(first + i, magic, k, v, ts)
                     for i, (ts, k, v) in enumerate(messages))
    max_ts = max((ts for ts, _, _ in messages), default=NO_TIMESTAMP)
    attributes = int(codec) | (TIMESTAMP_TYPE_MASK if timestamp_type == LOG_APPEND_TIME else 0)
    value = compress(codec, inner)
    if magic == MAGIC_V0 and codec == Codec.LZ4:
        value = kafka08_lz4_header(value)    # magic 0 readers expect Kafka 0.8's checksum
    return encode_message(base_offset + len(messages) - 1, magic, None, value, max_ts, attributes)


class DownConversionUnsupported(ValueError):
    """zstd data has no magic 0/1 form (Kafka: UNSUPPORTED_COMPRESSION_TYPE)."""


def convert_from_v2(buf, magic, first_offset=-1, max_bytes=None):
    """Down-convert the complete batches of `buf` to magic `magic` (0 or 1) bytes, as Kafka's
    RecordsUtil.downConvert: entries already at that magic or below pass as they are; a
    compressed batch (v2, or a magic 1 wrapper going to 0) becomes one wrapper message with the
    same codec, an uncompressed one a message per record, dropping those below `first_offset`
    (the fetch offset: the batch holding it starts earlier, and librdkafka counts on not seeing
    them again). Stops once the output holds `max_bytes` (at least one batch: Kafka's
    LazyDownConversionRecordsSend sends no more than was read), and before a zstd batch, which
    raises DownConversionUnsupported only when nothing comes before it (the fetcher then gets
    the error when it asks from there)."""
    out = []
    size = 0
    for batch in iter_batches(buf):
        if out and max_bytes is not None and size >= max_bytes:
            break
        if batch.magic <= magic:
            out.append(bytes(batch.raw()))
            size += len(out[-1])
            continue
        if batch.magic == MAGIC_V2:
            if batch.is_control:
                continue
            codec = batch.compression
            if codec == Codec.ZSTD:
                if out:
                    break
                raise DownConversionUnsupported("zstd batches cannot be down-converted to "
                                                "magic 0/1")
            records = batch.records()
            ts_type, max_timestamp = batch.timestamp_type, batch.max_timestamp
        else:                                   # a magic 1 message set going to magic 0
            codec = batch.compression
            records = list(iter_messages(bytes(batch.raw())))
            ts_type, max_timestamp = CREATE_TIME, NO_TIMESTAMP
        if codec == Codec.NONE:
            records = [r for r in records if r.offset >= first_offset]
        if not records:
            continue
        if codec == Codec.NONE:
            attributes = TIMESTAMP_TYPE_MASK if magic == MAGIC_V1 and ts_type else 0
            pieces = [encode_message(r.offset, magic, r.key, r.value, r.timestamp, attributes)
                      for r in records]
        else:
            pieces = [wrapper(records, magic, codec, ts_type, max_timestamp)]
        out.extend(pieces)
        size += sum(len(piece) for piece in pieces)
    return b"".join(out)


def wrapper(records, magic, codec, ts_type, max_timestamp):
    """One compressed wrapper message holding `records` (LegacyRecord-like, in offset order):
    its offset the last record's, magic 1 inner offsets relative to the first, as Kafka's
    MemoryRecordsBuilder writes them (down-conversion here, the log cleaner)."""
    last = records[-1].offset
    first = records[0].offset      # magic 1 inner offsets are relative to the first record
    inner = b"".join(encode_message(r.offset - first if magic == MAGIC_V1 else r.offset, magic,
                                    r.key, r.value, r.timestamp)
                     for r in records)
    value = compress(codec, inner)
    if magic == MAGIC_V0 and codec == Codec.LZ4:
        value = kafka08_lz4_header(value)
    attributes = int(codec) | (TIMESTAMP_TYPE_MASK if magic == MAGIC_V1 and ts_type else 0)
    return encode_message(last, magic, None, value, max_timestamp, attributes)
