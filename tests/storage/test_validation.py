"""LogValidator: every rejection code, in-place offset assignment, LogAppendTime, re-compression,
legacy up-conversion, and batches written by kafka-python."""
import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from protocol.errors import ErrorCode, KafkaError
from storage.compression import Codec
from storage.legacy import build_message_set
from storage.record_batch import (LOG_APPEND_TIME, RecordBatchBuilder, RecordBatchView,
                                  build_control_batch, iter_batches)
from storage.validation import (ORIGIN_COORDINATOR, RecordValidationError,
                                validate_and_assign_offsets)

NOW = 1_700_000_000_000


def _batch(n=5, codec=Codec.NONE, ts=NOW, producer_id=-1, base_sequence=-1, keys=True, **kw):
    b = RecordBatchBuilder(compression=codec, producer_id=producer_id,
                           producer_epoch=0 if producer_id >= 0 else -1,
                           base_sequence=base_sequence, **kw)
    for i in range(n):
        b.append(ts + i, b"k%d" % i if keys else None, b"value %d" % i, [("h", b"x")])
    return b.build()


def _code(excinfo):
    return excinfo.value.error_code


def _validate(data, config=None, **kw):
    return validate_and_assign_offsets(data, kw.pop("next_offset", 100), kw.pop("epoch", 3),
                                       kw.pop("now", NOW), config, **kw)


@pytest.mark.parametrize("codec", list(Codec))
def test_in_place_assignment_keeps_bytes_and_patches_header(codec):
    data = _batch(5, codec, producer_id=9, base_sequence=20)
    result = _validate(data)          # bytes are read-only: copied once
    assert not result.converted
    out = bytes(result.buffer)
    assert out[61:] == data[61:] and out[16:] == data[16:]      # only offset/epoch changed
    view = RecordBatchView(out)
    assert view.is_valid()
    assert (view.base_offset, view.partition_leader_epoch) == (100, 3)
    assert (result.first_offset, result.last_offset, result.record_count) == (100, 104, 5)
    assert result.max_timestamp == NOW + 4 and result.log_append_time == -1
    assert result.offset_of_max_timestamp == 104
    (info,) = result.batches
    assert (info.producer_id, info.producer_epoch, info.base_sequence, info.last_sequence,
            info.first_offset, info.last_offset) == (9, 0, 20, 24, 100, 104)
    assert [r.offset for r in view.records()] == list(range(100, 105))


def test_writable_buffer_is_patched_without_copy():
    buf = bytearray(_batch(3))
    result = _validate(memoryview(buf))
    assert result.buffer.obj is buf
    assert RecordBatchView(buf).base_offset == 100


def test_log_append_time_sets_max_timestamp_and_crc():
    result = _validate(_batch(4, Codec.SNAPPY), {"message.timestamp.type": "LogAppendTime"},
                       now=NOW + 999)
    view = RecordBatchView(bytes(result.buffer))
    assert view.is_valid() and view.timestamp_type == LOG_APPEND_TIME
    assert view.max_timestamp == NOW + 999 == result.log_append_time == result.max_timestamp
    assert [r.timestamp for r in view.records()] == [NOW + 999] * 4
    assert [r.timestamp for r in DefaultRecordBatch(bytes(result.buffer))] == [NOW + 999] * 4


@pytest.mark.parametrize("target", ["gzip", "lz4", "zstd", "snappy", "uncompressed"])
def test_topic_compression_type_recompresses(target):
    data = _batch(6, Codec.LZ4 if target != "lz4" else Codec.NONE, producer_id=4,
                  base_sequence=0, is_transactional=True)
    result = _validate(data, {"compression_type": target})
    assert result.converted
    view = RecordBatchView(bytes(result.buffer))
    assert view.is_valid() and view.compression.name.lower() in (target, "none")
    assert (view.producer_id, view.base_sequence, view.is_transactional) == (4, 0, True)
    assert [(r.offset, r.key, r.headers) for r in view.records()] == \
           [(100 + i, b"k%d" % i, [("h", b"x")]) for i in range(6)]


def test_irregular_offset_deltas_are_rebuilt():
    b = RecordBatchBuilder()
    b.append(NOW, b"a", b"1", offset=0)
    b.append(NOW, b"b", b"2", offset=2)          # gap: last_offset_delta 2 but 2 records
    data = bytearray(b.build())
    struct.pack_into(">i", data, 23, 1)          # make the header consistent (count 2)
    view = RecordBatchView(data)
    struct.pack_into(">I", data, 17, view.compute_crc())
    result = _validate(bytes(data))
    assert result.converted
    assert [r.offset for r in RecordBatchView(bytes(result.buffer)).records()] == [100, 101]


def test_max_timestamp_recomputed_from_records_like_kafka():
    data = bytearray(_batch(3))
    struct.pack_into(">q", data, 35, NOW - 50)    # header lies about max_timestamp
    v = RecordBatchView(data)
    struct.pack_into(">I", data, 17, v.compute_crc())
    result = _validate(data)
    view = RecordBatchView(result.buffer)
    assert view.max_timestamp == NOW + 2 and view.is_valid()


def test_kafka_python_batch_accepted():
    b = DefaultRecordBatchBuilder(magic=2, compression_type=3, is_transactional=0,
                                  producer_id=1, producer_epoch=0, base_sequence=0,
                                  batch_size=1 << 20)
    for i in range(10):
        b.append(i, timestamp=NOW, key=b"k", value=b"v", headers=[])
    result = _validate(bytes(b.build()))
    assert result.record_count == 10 and result.last_offset == 109


def test_empty_and_truncated_input_append_nothing():
    assert _validate(b"").record_count == 0
    data = _batch(3)
    result = _validate(data[:-1])                # Kafka drops a partial trailing batch
    assert result.record_count == 0 and bytes(result.buffer) == b""


# --- rejections -------------------------------------------------------------------------------

def test_corrupt_message_on_crc_mismatch():
    data = bytearray(_batch(3))
    data[70] ^= 1
    with pytest.raises(KafkaError) as e:
        _validate(data)
    assert _code(e) == ErrorCode.CORRUPT_MESSAGE
    assert RecordBatchView(data).base_offset == 0          # input untouched


def test_corrupt_message_on_impossible_size():
    data = bytearray(_batch(3))
    struct.pack_into(">i", data, 8, 5)
    with pytest.raises(KafkaError) as e:
        _validate(data)
    assert _code(e) == ErrorCode.CORRUPT_MESSAGE


def test_corrupt_message_on_legacy_crc():
    data = bytearray(build_message_set([(NOW, b"k", b"v")], magic=1))
    data[-1] ^= 1
    with pytest.raises(KafkaError) as e:
        _validate(data)
    assert _code(e) == ErrorCode.CORRUPT_MESSAGE


def test_message_too_large():
    data = _batch(1)
    with pytest.raises(KafkaError) as e:
        _validate(data, {"max.message.bytes": len(data) - 1})
    assert _code(e) == ErrorCode.MESSAGE_TOO_LARGE
    assert _validate(data, {"max.message.bytes": len(data)}).record_count == 1


def test_record_list_too_large():
    data = _batch(2)
    with pytest.raises(KafkaError) as e:
        _validate(data, {"segment.bytes": len(data) - 1})
    assert _code(e) == ErrorCode.RECORD_LIST_TOO_LARGE
    # a batch over max.message.bytes too: that error first, as Kafka (the Java producer
    # splits on MESSAGE_TOO_LARGE, gives up on RECORD_LIST_TOO_LARGE)
    with pytest.raises(KafkaError) as e:
        _validate(data, {"segment.bytes": len(data) - 1, "max.message.bytes": len(data) - 1})
    assert _code(e) == ErrorCode.MESSAGE_TOO_LARGE


def test_a_batch_grown_by_recompression_is_checked_again():
    """Kafka's UnifiedLog.append re-checks max.message.bytes after a re-compression: a small gzip
    batch that decompresses to more than the limit is MESSAGE_TOO_LARGE, not stored."""
    b = RecordBatchBuilder(compression=Codec.GZIP)
    for i in range(20):
        b.append(NOW + i, b"k%d" % i, b"\0" * 5000)
    data = b.build()
    assert len(data) < 5000
    with pytest.raises(KafkaError) as e:
        _validate(data, {"compression_type": "uncompressed", "max.message.bytes": 50_000})
    assert _code(e) == ErrorCode.MESSAGE_TOO_LARGE
    assert _validate(data, {"compression_type": "uncompressed",
                            "max.message.bytes": 200_000}).record_count == 20


def _rewrite(data, fmt, pos, value):
    buf = bytearray(data)
    struct.pack_into(fmt, buf, pos, value)
    v = RecordBatchView(buf)
    struct.pack_into(">I", buf, 17, v.compute_crc())
    return bytes(buf)


@pytest.mark.parametrize("mutate, why", [
    (lambda d: _rewrite(d, ">i", 57, 4), "records_count != last_offset_delta + 1"),
    (lambda d: _rewrite(_rewrite(d, ">i", 57, 0), ">i", 23, -1), "records_count 0"),
    (lambda d: _rewrite(d, ">i", 23, -3), "negative offset range"),
    (lambda d: _rewrite(d, ">q", 0, 5), "base_offset not 0"),
    (lambda d: _rewrite(d, ">h", 21, 0x20), "control batch from a client"),
    (lambda d: _rewrite(d, ">q", 43, 77), "producer id without sequence"),
    (lambda d: d + d, "two batches"),
    (lambda d: _rewrite(_rewrite(d, ">i", 57, 6), ">i", 23, 5), "count larger than the records"),
])
def test_invalid_record(mutate, why):
    with pytest.raises(KafkaError) as e:
        _validate(mutate(_batch(5)))
    assert _code(e) == ErrorCode.INVALID_RECORD, why


def test_invalid_record_magic_mismatch_and_old_produce_version():
    legacy = build_message_set([(NOW, b"k", b"v")], magic=1)
    with pytest.raises(KafkaError) as e:
        _validate(legacy + _batch(1))
    assert _code(e) == ErrorCode.INVALID_RECORD
    with pytest.raises(KafkaError) as e:
        _validate(legacy, produce_version=3)
    assert _code(e) == ErrorCode.INVALID_RECORD


def test_invalid_record_missing_key_on_compacted_topic():
    data = _batch(3, keys=False)
    with pytest.raises(RecordValidationError) as e:
        _validate(data, {"cleanup.policy": "compact"})
    assert _code(e) == ErrorCode.INVALID_RECORD
    assert [i for i, _ in e.value.record_errors] == [0, 1, 2]
    assert _validate(_batch(3), {"cleanup.policy": "compact,delete"}).record_count == 3


@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP])
def test_invalid_timestamp_before_and_after(codec):
    old = _batch(3, codec, ts=NOW - 10_000)
    with pytest.raises(RecordValidationError) as e:
        _validate(old, {"message.timestamp.before.max.ms": 5_000})
    assert _code(e) == ErrorCode.INVALID_TIMESTAMP
    assert [i for i, _ in e.value.record_errors] == [0, 1, 2]
    future = _batch(3, codec, ts=NOW + 10_000)
    with pytest.raises(RecordValidationError) as e:
        _validate(future, {"message.timestamp.after.max.ms": 5_000})
    assert _code(e) == ErrorCode.INVALID_TIMESTAMP
    with pytest.raises(RecordValidationError) as e:
        _validate(future, {"message.timestamp.difference.max.ms": 9_999})
    assert _code(e) == ErrorCode.INVALID_TIMESTAMP
    # Kafka's LogConfig: an explicit before/after wins over the deprecated difference, even a
    # larger one.
    assert _validate(old, {"message.timestamp.difference.max.ms": 5_000,
                           "message.timestamp.before.max.ms": 20_000}).record_count == 3
    # LogAppendTime topics ignore producer timestamps
    assert _validate(old, {"message.timestamp.type": "LogAppendTime",
                           "message.timestamp.before.max.ms": 5_000}).record_count == 3


def test_invalid_timestamp_when_producer_claims_log_append_time():
    data = _batch(2, timestamp_type=LOG_APPEND_TIME)
    with pytest.raises(KafkaError) as e:
        _validate(data)
    assert _code(e) == ErrorCode.INVALID_TIMESTAMP


def test_unsupported_compression_type():
    data = _rewrite(_batch(2), ">h", 21, 5)
    with pytest.raises(KafkaError) as e:
        _validate(data)
    assert _code(e) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    with pytest.raises(KafkaError) as e:
        _validate(_batch(2, Codec.ZSTD), produce_version=6)
    assert _code(e) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert _validate(_batch(2, Codec.ZSTD), produce_version=7).record_count == 2


# --- legacy up-conversion and coordinator appends ------------------------------------------

@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4])
def test_legacy_is_up_converted(magic, codec):
    if magic == 0 and codec == Codec.LZ4:     # kafka-python needs xxhash for this one
        data = build_message_set([(-1, b"k%d" % i, b"v%d" % i) for i in range(4)], magic=0,
                                 codec=codec)
    else:
        b = LegacyRecordBatchBuilder(magic=magic, compression_type=int(codec),
                                     batch_size=1 << 20)
        for i in range(4):
            b.append(i, timestamp=NOW + i if magic else None, key=b"k%d" % i, value=b"v%d" % i)
        data = bytes(b.build())
    result = _validate(data)
    assert result.converted and result.record_count == 4
    (view,) = list(iter_batches(bytes(result.buffer)))
    assert view.magic == 2 and view.is_valid() and view.partition_leader_epoch == 3
    recs = view.records()
    assert [(r.offset, r.key, r.value) for r in recs] == \
           [(100 + i, b"k%d" % i, b"v%d" % i) for i in range(4)]
    assert [r.timestamp for r in recs] == ([NOW + i for i in range(4)] if magic else [-1] * 4)


def test_coordinator_may_append_control_and_several_batches():
    marker = build_control_batch(1, producer_id=8, producer_epoch=0, coordinator_epoch=2,
                                 timestamp=NOW)
    with pytest.raises(KafkaError):
        _validate(marker)                                    # clients may not
    result = _validate(_batch(2) + marker, origin=ORIGIN_COORDINATOR)
    views = list(iter_batches(bytes(result.buffer)))
    assert [v.base_offset for v in views] == [100, 102]
    assert views[1].is_control and all(v.is_valid() for v in views)
    assert result.last_offset == 102 and result.record_count == 3


# --- properties -------------------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

CONFIGS = st.fixed_dictionaries({
    "compression.type": st.sampled_from(["producer", "none", "gzip", "snappy", "lz4", "zstd"]),
    "message.timestamp.type": st.sampled_from(["CreateTime", "LogAppendTime"]),
})


@settings(max_examples=60, deadline=None)
@given(codec=st.sampled_from(list(Codec)), config=CONFIGS,
       records=st.lists(st.tuples(st.integers(NOW - 10**6, NOW + 10**6),
                                  st.one_of(st.none(), st.binary(max_size=40)),
                                  st.one_of(st.none(), st.binary(max_size=400))),
                        min_size=1, max_size=40),
       next_offset=st.integers(0, 2**40), writable=st.booleans())
def test_validated_output_holds_the_same_records(codec, config, records, next_offset, writable):
    b = RecordBatchBuilder(compression=codec)
    for ts, key, value in records:
        b.append(ts, key, value)
    data = b.build()
    result = validate_and_assign_offsets(bytearray(data) if writable else data, next_offset, 5,
                                         NOW, config)
    (view,) = list(iter_batches(bytes(result.buffer)))
    assert view.is_valid() and view.partition_leader_epoch == 5
    got = view.records()
    assert [(r.offset, r.key, r.value) for r in got] == \
           [(next_offset + i, k, v) for i, (_, k, v) in enumerate(records)]
    if config["message.timestamp.type"] == "LogAppendTime":
        assert all(r.timestamp == NOW for r in got) and result.log_append_time == NOW
    else:
        assert [r.timestamp for r in got] == [ts for ts, _, _ in records]
        assert result.max_timestamp == max(ts for ts, _, _ in records)
    if config["compression.type"] != "producer":
        assert view.compression.name.lower() in (config["compression.type"], "none")
    assert (result.first_offset, result.last_offset) == (next_offset,
                                                          next_offset + len(records) - 1)


@settings(max_examples=300, deadline=None)
@given(codec=st.sampled_from(list(Codec)), data=st.data())
def test_mutated_batches_only_ever_raise_kafka_errors(codec, data):
    b = RecordBatchBuilder(compression=codec)
    for i in range(4):
        b.append(NOW + i, b"k%d" % i, b"v" * i, [("h", b"x")] if i % 2 else ())
    buf = bytearray(b.build())
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(buf) - 1))
        buf[pos] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()) and len(buf) >= 61:        # make the CRC match the damage
        view = RecordBatchView(buf)
        if 0 <= view.batch_length and 61 <= view.size_in_bytes <= len(buf):
            struct.pack_into(">I", buf, 17, view.compute_crc())
    cut = data.draw(st.integers(0, len(buf)))
    try:
        validate_and_assign_offsets(bytes(buf[:cut]), 0, 0, NOW,
                                    {"cleanup.policy": data.draw(st.sampled_from(
                                        ["delete", "compact"]))})
    except KafkaError:
        pass


def _hand_built_batch(base_timestamp, deltas, codec=Codec.NONE, count=None, max_timestamp=None,
                      payload=None):
    """A v2 batch of records with these timestamp deltas (no key, value b"v"), written field by
    field (the builder refuses what a client can still send: a timestamp past a long, a header
    that does not match its records): `codec` compresses the records, or `payload` replaces
    them; `count` and `max_timestamp` go in the header as given."""
    import crc32c
    from storage.compression import compress
    from storage.records import encode_varint
    records = b""
    for i, delta in enumerate(deltas):
        body = (b"\x00" + encode_varint(delta) + encode_varint(i) + encode_varint(-1)
                + encode_varint(1) + b"v" + encode_varint(0))
        records += encode_varint(len(body)) + body
    if payload is not None:
        records = payload
    elif codec != Codec.NONE:
        records = compress(codec, records)
    count = len(deltas) if count is None else count
    max_timestamp = base_timestamp if max_timestamp is None else max_timestamp
    header = struct.pack(">qiibIhiqqqhii", 0, 49 + len(records), -1, 2, 0, int(codec),
                         count - 1, base_timestamp, max_timestamp, -1, -1, -1, count)
    data = bytearray(header + records)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def test_a_timestamp_past_a_long_wraps_as_in_java():
    """base timestamp + delta is Java long arithmetic in Kafka: 2^62 + 2^62 wraps to -2^63 and
    the batch is accepted. It was an UNKNOWN_SERVER_ERROR (a struct error patching the header)."""
    result = _validate(_hand_built_batch(2**62, [0, 2**62]))
    view = RecordBatchView(result.buffer)
    assert view.is_valid() and result.record_count == 2
    assert view.max_timestamp == 2**62 and result.max_timestamp == 2**62
    result = _validate(_hand_built_batch(2**62, [2**62]))
    assert RecordBatchView(result.buffer).max_timestamp == -2**63


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_a_compressed_batch_is_read_whole_before_it_is_stored(codec):
    """Kafka's LogValidator reads every record of a compressed batch, also on its in-place
    path. Such batches used to be stored on the strength of their header: a payload that does
    not decompress, or a count the records do not match, poisoned the partition (librdkafka
    consumers failed at that offset for ever), and a lying max_timestamp went into the time
    index and retention."""
    with pytest.raises(KafkaError) as e:
        _validate(_hand_built_batch(NOW, [0], codec=codec, payload=b"not compressed at all"))
    assert _code(e) == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(KafkaError) as e:
        _validate(_hand_built_batch(NOW, [0], codec=codec, count=3))
    assert _code(e) == ErrorCode.INVALID_RECORD
    result = _validate(_hand_built_batch(NOW, [0, 5], codec=codec, max_timestamp=2**63 - 1))
    view = RecordBatchView(result.buffer)
    assert view.is_valid() and view.max_timestamp == NOW + 5 == result.max_timestamp
    assert result.offset_of_max_timestamp == result.last_offset      # Kafka's shallow offset
