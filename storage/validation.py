"""Kafka's LogValidator: check a producer's records, assign offsets, stamp the leader epoch.

`validate_and_assign_offsets(buf, next_offset, partition_leader_epoch, now_ms, config)` takes
the `records` bytes of one partition of a Produce request and returns a `ValidationResult`
whose `buffer` is ready to append to the log. It never mutates its input unless every check
passed; then it patches in place (copying once into a bytearray only when `buf` is read-only).

Order of checks, as Kafka does them (UnifiedLog.analyzeAndValidateRecords, then LogValidator):

1. Shallow walk (headers only). A size field below the minimum batch size -> CORRUPT_MESSAGE.
   A truncated trailing batch is dropped silently, as Kafka trims invalid trailing bytes. No
   complete batch at all -> an empty result (record_count 0, nothing to append).
2. Per batch: size_in_bytes > max.message.bytes -> MESSAGE_TOO_LARGE; CRC32C (v2) or CRC32
   (v0/v1) mismatch -> CORRUPT_MESSAGE; an unknown codec, or zstd in a Produce request older
   than v7 -> UNSUPPORTED_COMPRESSION_TYPE. Total bytes > segment.bytes -> RECORD_LIST_TOO_LARGE.
3. Client appends (origin "client"): every batch has the first batch's magic; magic 2 needs
   exactly one batch per partition, base_offset 0, records_count > 0 and equal to
   last_offset_delta + 1, no control flag, a base_sequence >= 0 when it has a producer id;
   a Produce request v3+ carries magic 2 only. All of these -> INVALID_RECORD. A batch that
   claims LogAppendTime -> INVALID_TIMESTAMP.
4. Records. Every v2 batch's records are scanned in one pass (structure, count, offset deltas
   and min/max timestamps), a compressed one after decompressing it (bounded, see
   storage/compression.py: data that does not decompress -> CORRUPT_MESSAGE), as Kafka's
   LogValidator reads every record also on its in-place path. They are decoded into records
   only when the topic's compression.type names another codec (re-compression), the topic is
   compacted (every record needs a key), the offset deltas are irregular, or a timestamp is out
   of range (to name it); legacy (magic 0/1) sets are always up-converted to v2. Bad timestamps
   -> INVALID_TIMESTAMP, missing keys on compacted topics -> INVALID_RECORD, both with
   per-record `record_errors` (batch_index, message) for Produce v8+; malformed records ->
   INVALID_RECORD.
5. Offsets. A batch whose offset deltas are 0..n-1 keeps its bytes: base_offset and
   partition_leader_epoch are patched in place; with LogAppendTime, max_timestamp and the
   timestamp-type bit are set and the CRC recomputed. A batch that needs re-compression, has
   irregular offset deltas (some old clients) or is legacy is rebuilt as a new v2 batch keeping
   its producer id/epoch/sequence, as Kafka does. A rebuilt batch is checked again against
   max.message.bytes (MESSAGE_TOO_LARGE) and the whole against segment.bytes, as Kafka's
   UnifiedLog.append does after a re-compression or up-conversion.

Kafka semantics kept for `offset_of_max_timestamp`: the exact offset when records were read,
otherwise the batch's last offset (Kafka's in-place compressed path does the same). Appends by
the group/transaction coordinator (origin "coordinator") skip step 3 and may carry control
batches and several batches.
"""
from collections import namedtuple

from protocol.errors import ErrorCode, KafkaError
from storage.compression import CODEC_BY_NAME, Codec, CorruptRecordError
from storage.legacy import iter_messages
from storage.record_batch import (CREATE_TIME, HEADER_SIZE, LOG_APPEND_TIME, MAGIC_V2,
                                  NO_TIMESTAMP, RecordBatchBuilder, RecordBatchView, iter_batches)
from storage.record_scan import scan_records_fast
from storage.records import decode_records

ORIGIN_CLIENT = "client"
ORIGIN_COORDINATOR = "coordinator"
LONG_MAX = 2**63 - 1
LONG_MIN = -2**63


def _long(value: int) -> int:
    """`value` as a Java long: base timestamp + delta wraps in Kafka's arithmetic."""
    return (value - LONG_MIN) % 2**64 + LONG_MIN

# Kafka's defaults for the topic configs used here (LogConfig / ServerLogConfigs).
DEFAULTS = {
    "max_message_bytes": 1048588,
    "message_timestamp_type": "CreateTime",
    "message_timestamp_difference_max_ms": LONG_MAX,
    "message_timestamp_before_max_ms": LONG_MAX,
    "message_timestamp_after_max_ms": LONG_MAX,
    "compression_type": "producer",
    "segment_bytes": 1073741824,
    "cleanup_policy": "delete",
}


class RecordValidationError(KafkaError):
    """A rejection naming the offending records: `record_errors` is [(batch_index, message)]."""

    def __init__(self, error_code, message, record_errors=()):
        super().__init__(error_code, message)
        self.record_errors = list(record_errors)


BatchInfo = namedtuple("BatchInfo", "producer_id producer_epoch base_sequence last_sequence "
                                    "first_offset last_offset max_timestamp is_transactional "
                                    "is_control position size")
BatchInfo.__doc__ = "One appended batch: what producer state and the indexes need."

ValidationResult = namedtuple("ValidationResult", "buffer first_offset last_offset max_timestamp "
                                                  "offset_of_max_timestamp record_count batches "
                                                  "log_append_time converted")
ValidationResult.__doc__ = ("buffer: bytes-like to append; log_append_time: now_ms for "
                            "LogAppendTime topics, else -1; converted: the bytes were rebuilt.")


def _setting(config, name):
    """Read a topic setting from a dict (snake_case or Kafka's dotted names) or an object."""
    if config is None:
        return DEFAULTS[name]
    dotted = name.replace("_", ".")
    if isinstance(config, dict):
        if name in config:
            return config[name]
        return config.get(dotted, DEFAULTS[name])
    return getattr(config, name, DEFAULTS[name])


class Settings:
    """The topic settings validation reads, taken from a config once: a log keeps one per
    config object (parsing them costed an eighth of a small append)."""
    __slots__ = ("max_message_bytes", "log_append_time", "before_ms", "after_ms",
                 "target_codec", "segment_bytes", "compacted")

    def __init__(self, config):
        self.max_message_bytes = int(_setting(config, "max_message_bytes"))
        ts_type = _setting(config, "message_timestamp_type")
        self.log_append_time = ts_type in ("LogAppendTime", LOG_APPEND_TIME)
        # Kafka's LogConfig: before/after when set (not Long max), else the deprecated
        # message.timestamp.difference.max.ms.
        diff = int(_setting(config, "message_timestamp_difference_max_ms"))
        before = int(_setting(config, "message_timestamp_before_max_ms"))
        after = int(_setting(config, "message_timestamp_after_max_ms"))
        self.before_ms = before if before != LONG_MAX else diff
        self.after_ms = after if after != LONG_MAX else diff
        compression = str(_setting(config, "compression_type")).lower()
        self.target_codec = None if compression == "producer" else CODEC_BY_NAME[compression]
        self.segment_bytes = int(_setting(config, "segment_bytes"))
        policy = _setting(config, "cleanup_policy")
        names = policy if isinstance(policy, (list, tuple)) else str(policy).split(",")
        self.compacted = "compact" in (name.strip() for name in names)


def _invalid(message):
    return KafkaError(ErrorCode.INVALID_RECORD, message)


def validate_and_assign_offsets(buf, next_offset, partition_leader_epoch, now_ms, config=None,
                                origin=ORIGIN_CLIENT, produce_version=None):
    """Validate a Produce request's records for one partition and assign offsets from
    `next_offset`. Blocking CPU work (decompression, CRC); safe to run in an executor.
    Raises KafkaError / RecordValidationError with Kafka's error codes."""
    settings = config if type(config) is Settings else Settings(config)
    view = memoryview(buf)
    entries = list(iter_batches(view))      # CorruptRecordError on an impossible size
    if not entries:
        return ValidationResult(b"", -1, -1, NO_TIMESTAMP, -1, 0, [],
                                now_ms if settings.log_append_time else -1, False)
    total = sum(e.size_in_bytes for e in entries)
    magic = entries[0].magic
    for entry in entries:       # MESSAGE_TOO_LARGE before RECORD_LIST_TOO_LARGE, as Kafka
        _check_shallow(entry, magic, settings, produce_version)
    _check_segment_size(total, settings)
    if origin == ORIGIN_CLIENT:
        if produce_version is not None and produce_version >= 3 and magic < MAGIC_V2:
            raise _invalid(f"Produce v{produce_version} requires magic 2, got magic {magic}")
        if magic == MAGIC_V2 and len(entries) > 1:
            raise _invalid(f"a produce request holds {len(entries)} batches for one partition; "
                           "magic 2 allows exactly one")
    if magic < MAGIC_V2:
        result = _convert_legacy(view[:total], entries, next_offset, partition_leader_epoch,
                                 now_ms, settings)
    else:
        result = _validate_v2(view, entries, next_offset, partition_leader_epoch, now_ms,
                              settings, origin)
    if result.converted:
        # Kafka's UnifiedLog.append: a re-compressed or up-converted batch is checked again
        # (MESSAGE_TOO_LARGE makes the Java producer split it), and so is the whole.
        for batch in result.batches:
            if batch.size > settings.max_message_bytes:
                raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                                 f"Message batch size is {batch.size} bytes in append to a "
                                 f"partition which exceeds the maximum configured size of "
                                 f"{settings.max_message_bytes}.")
        _check_segment_size(len(result.buffer), settings)
    return result


def _check_segment_size(size: int, settings) -> None:
    if size > settings.segment_bytes:
        raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE,
                         f"{size} bytes of records exceed segment.bytes={settings.segment_bytes}")


def _check_shallow(entry, magic, settings, produce_version):
    if entry.magic != magic:
        raise _invalid(f"batch magic {entry.magic} differs from the first batch's magic {magic}")
    if entry.size_in_bytes > settings.max_message_bytes:
        raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                         f"batch of {entry.size_in_bytes} bytes exceeds max.message.bytes="
                         f"{settings.max_message_bytes}")
    if not entry.is_valid():
        raise CorruptRecordError(f"batch at position {entry.position} fails its CRC check")
    codec = entry.attributes & 0x07
    if codec > Codec.ZSTD or (magic < MAGIC_V2 and codec == Codec.ZSTD):
        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                         f"compression codec id {codec} is not supported with magic {magic}")
    if codec == Codec.ZSTD and produce_version is not None and produce_version < 7:
        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                         "zstd needs Produce v7 or later")


def _check_v2_header(batch, settings, origin):
    if origin != ORIGIN_CLIENT:
        return
    if batch.base_offset != 0:
        raise _invalid(f"base_offset of a produced batch must be 0, not {batch.base_offset}")
    if batch.last_offset_delta < 0:
        raise _invalid(f"batch has an invalid offset range (last_offset_delta "
                       f"{batch.last_offset_delta})")
    if batch.records_count <= 0:
        raise _invalid(f"invalid records count {batch.records_count}")
    if batch.records_count != batch.last_offset_delta + 1:
        raise _invalid(f"records count {batch.records_count} does not match last_offset_delta "
                       f"{batch.last_offset_delta}")
    if batch.is_control:
        raise _invalid("clients may not write control batches")
    if batch.producer_id >= 0 and batch.base_sequence < 0:
        raise _invalid(f"invalid sequence {batch.base_sequence} for producer id "
                       f"{batch.producer_id}")
    if batch.timestamp_type == LOG_APPEND_TIME:
        raise RecordValidationError(
            ErrorCode.INVALID_TIMESTAMP, "producers may not set the LogAppendTime type",
            [(i, "timestamp type LogAppendTime set by the producer")
             for i in range(batch.records_count)])


def _timestamp_errors(timestamps, now_ms, settings):
    errors = []
    low = now_ms - settings.before_ms
    high = now_ms + settings.after_ms
    for i, ts in enumerate(timestamps):
        if ts != NO_TIMESTAMP and (ts < low or ts > high):
            errors.append((i, f"timestamp {ts} is out of range [{low}, {high}]"))
    return errors


def _read_records(batch):
    """Decode a v2 batch's records; malformed ones are INVALID_RECORD (Kafka's wording)."""
    try:
        return decode_records(batch.records_data(), batch.records_count, 0,
                              batch.base_timestamp, -1, None)
    except CorruptRecordError as e:
        raise _invalid(f"malformed records: {e.message}") from None


def _validate_v2(view, entries, next_offset, leader_epoch, now_ms, settings, origin):
    """Validate v2 batches and plan each: patch in place, or rebuild."""
    plans = []          # (batch, records or None, consecutive, min_ts, max_ts, max_ts_index)
    check_before = not settings.log_append_time and settings.before_ms < LONG_MAX
    check_after = not settings.log_append_time and settings.after_ms < LONG_MAX
    for batch in entries:
        _check_v2_header(batch, settings, origin)
        codec = batch.compression
        records = None
        rebuild_codec = settings.target_codec is not None and settings.target_codec != codec \
            and not batch.is_control
        if rebuild_codec or settings.compacted:
            records = _read_records(batch)
            deltas = [r.offset for r in records]
            timestamps = [r.timestamp for r in records]
            consecutive = deltas == list(range(len(deltas)))
            max_index = timestamps.index(max(timestamps)) if timestamps else -1
            min_ts = min(timestamps, default=NO_TIMESTAMP)
            max_ts = max(timestamps, default=NO_TIMESTAMP)
        else:
            # Kafka's in-place compressed path reads every record as well (its
            # skipKeyValueIterator): the count, the structure and the timestamps come from the
            # records, not from the header, so a batch that does not decompress, or whose
            # records do not match its header, is never stored to fail every consumer later.
            if codec == Codec.NONE:
                data = view[batch.position + HEADER_SIZE:batch.position + batch.size_in_bytes]
            else:
                data = batch.records_data()          # CorruptRecordError: CORRUPT_MESSAGE
            try:
                consecutive, min_ts, max_ts, max_index = scan_records_fast(
                    data, batch.records_count, batch.base_timestamp)
            except CorruptRecordError as e:
                raise _invalid(f"malformed records: {e.message}") from None
            if not consecutive:
                records = _read_records(batch)
            elif codec != Codec.NONE:
                max_index = -1     # Kafka's shallowOffsetOfMaxTimestamp: the last offset
        if not (LONG_MIN <= min_ts and max_ts <= LONG_MAX):
            # a delta past the ends of a long: each record's timestamp wraps, as in Java
            timestamps = [_long(r.timestamp) for r in (records or _read_records(batch))]
            min_ts, max_ts = min(timestamps), max(timestamps)
            max_index = timestamps.index(max_ts)
        if not settings.log_append_time and (
                (check_before and min_ts != NO_TIMESTAMP and min_ts < now_ms - settings.before_ms)
                or (check_after and max_ts > now_ms + settings.after_ms)):
            stamps = [_long(r.timestamp) for r in (records or _read_records(batch))]
            raise RecordValidationError(ErrorCode.INVALID_TIMESTAMP,
                                        "One or more records have been rejected due to invalid "
                                        "timestamp", _timestamp_errors(stamps, now_ms, settings))
        if settings.compacted and not batch.is_control:
            missing = [(i, "compacted topic cannot accept a record without a key")
                       for i, r in enumerate(records) if r.key is None]
            if missing:
                raise RecordValidationError(ErrorCode.INVALID_RECORD,
                                            "records without a key on a compacted topic", missing)
        plans.append((batch, records if (rebuild_codec or not consecutive) else None,
                      max_ts, max_index))
    return _assign(view, plans, next_offset, leader_epoch, now_ms, settings)


def _assign(view, plans, next_offset, leader_epoch, now_ms, settings):
    if any(records is not None for _, records, _, _ in plans):
        return _assign_rebuilding(view, plans, next_offset, leader_epoch, now_ms, settings)
    base = plans[0][0].position
    if view.readonly:      # one copy of the whole set, never one per batch
        out = memoryview(bytearray(view[base:_end(plans)]))
    else:
        out = view[base:_end(plans)]
    offset = next_offset
    batches = []
    max_timestamp, offset_of_max = NO_TIMESTAMP, -1
    for batch, _, max_ts, max_index in plans:
        patched = RecordBatchView(out, batch.position - base)
        last_delta = patched.last_offset_delta
        patched.set_base_offset(offset)
        patched.set_partition_leader_epoch(leader_epoch)
        if settings.log_append_time:
            patched.set_max_timestamp(now_ms, LOG_APPEND_TIME)
            batch_max, max_offset = now_ms, offset + last_delta
        else:
            if max_ts is not None and max_ts != patched.max_timestamp:
                patched.set_max_timestamp(max_ts, CREATE_TIME)   # Kafka trusts the records
            batch_max = patched.max_timestamp
            max_offset = offset + (max_index if max_index >= 0 else last_delta)
        if batch_max > max_timestamp:
            max_timestamp, offset_of_max = batch_max, max_offset
        batches.append(_info(patched, offset, batch.position - base))
        offset += last_delta + 1
    count = sum(b.last_offset - b.first_offset + 1 for b in batches)
    return ValidationResult(out, next_offset, offset - 1, max_timestamp, offset_of_max, count,
                            batches, now_ms if settings.log_append_time else -1, False)


def _end(plans):
    last = plans[-1][0]
    return last.position + last.size_in_bytes


def _info(batch, first_offset, position):
    return BatchInfo(batch.producer_id, batch.producer_epoch, batch.base_sequence,
                     batch.last_sequence, first_offset, batch.last_offset, batch.max_timestamp,
                     batch.is_transactional, batch.is_control, position, batch.size_in_bytes)


def _assign_rebuilding(view, plans, next_offset, leader_epoch, now_ms, settings):
    """At least one batch is rebuilt: build every output batch into a fresh buffer."""
    pieces = []
    for batch, records, _, _ in plans:
        if records is None:
            pieces.append((batch, None))
        else:
            codec = settings.target_codec if settings.target_codec is not None \
                else batch.compression
            pieces.append((batch, _rebuild(batch, records, codec)))
    buf = bytearray()
    for batch, rebuilt in pieces:
        buf += rebuilt if rebuilt is not None else batch.raw()
    # Every batch is now regular: assign in place on our own buffer.
    fresh = memoryview(buf)
    new_plans = [(RecordBatchView(fresh, pos), None, max_ts, max_index)
                 for pos, (_, _, max_ts, max_index) in zip(_positions(pieces), plans)]
    result = _assign(fresh, new_plans, next_offset, leader_epoch, now_ms, settings)
    return result._replace(converted=True)


def _positions(pieces):
    pos = 0
    for batch, rebuilt in pieces:
        yield pos
        pos += len(rebuilt) if rebuilt is not None else batch.size_in_bytes


def _rebuild(batch, records, codec):
    builder = RecordBatchBuilder(compression=codec, producer_id=batch.producer_id,
                                 producer_epoch=batch.producer_epoch,
                                 base_sequence=batch.base_sequence,
                                 is_transactional=batch.is_transactional,
                                 is_control=batch.is_control)
    for r in records:
        builder.append(r.timestamp, r.key, r.value, r.headers)
    return builder.build()


def _convert_legacy(view, entries, next_offset, leader_epoch, now_ms, settings):
    """Magic 0/1 -> one v2 batch (Kafka up-converts on append to a v2 log)."""
    compressed = [e for e in entries if e.compression != Codec.NONE]
    if compressed and len(entries) > 1:
        raise _invalid("a compressed legacy message set must hold exactly one wrapper")
    try:
        messages = list(iter_messages(view))
    except CorruptRecordError as e:
        raise _invalid(f"malformed legacy messages: {e.message}") from None
    if not settings.log_append_time:
        errors = _timestamp_errors([m.timestamp for m in messages], now_ms, settings)
        if errors:
            raise RecordValidationError(ErrorCode.INVALID_TIMESTAMP,
                                        "One or more records have been rejected due to invalid "
                                        "timestamp", errors)
    if settings.compacted:
        missing = [(i, "compacted topic cannot accept a record without a key")
                   for i, m in enumerate(messages) if m.key is None]
        if missing:
            raise RecordValidationError(ErrorCode.INVALID_RECORD,
                                        "records without a key on a compacted topic", missing)
    source = compressed[0].compression if compressed else Codec.NONE
    codec = settings.target_codec if settings.target_codec is not None else source
    builder = RecordBatchBuilder(compression=codec)
    for m in messages:
        builder.append(m.timestamp, m.key, m.value)
    fresh = memoryview(bytearray(builder.build()))
    batch = RecordBatchView(fresh, 0)
    stamps = [m.timestamp for m in messages]
    max_index = stamps.index(max(stamps))
    result = _assign(fresh, [(batch, None, max(stamps), max_index)], next_offset, leader_epoch,
                     now_ms, settings)
    return result._replace(converted=True)

