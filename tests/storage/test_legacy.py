"""Legacy message sets (magic 0/1): kafka-python as an independent writer and reader, wrapper
offset rules, CRC checks, and up-conversion to v2."""
import struct

import lz4.frame
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder

from storage.compression import Codec, CorruptRecordError, _xxh32, kafka08_lz4_header
from storage.legacy import build_message_set, convert_to_v2, encode_message, iter_messages
from storage.record_batch import RecordBatchView, iter_batches

LEGACY_CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4]


def _kafka_python_set(magic, codec, n=25, last_offset=None):
    """A message set written by kafka-python. For a compressed magic 1 set the wrapper gets the
    last inner offset (`last_offset`, default n - 1) as Java producers and brokers write it."""
    if magic == 0 and codec == Codec.LZ4:
        return _old_lz4_set(n)
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=int(codec), batch_size=1 << 20)
    for i in range(n):
        b.append(i, timestamp=1_600_000_000_000 + i if magic else None,
                 key=None if i % 3 else b"key%d" % i, value=b"value %d" % i * (i % 5))
    data = bytearray(b.build())
    if magic == 1 and codec != Codec.NONE:
        struct.pack_into(">q", data, 0, n - 1 if last_offset is None else last_offset)
    return bytes(data)


def _old_lz4_set(n):
    """Magic 0 + LZ4 as Kafka 0.8/0.9 wrote it: the frame header checksum also hashes the
    4 magic bytes (kafka-python needs the xxhash package to write this, so build it here)."""
    inner = _kafka_python_set(0, Codec.NONE, n)
    frame = lz4.frame.compress(inner, content_checksum=False, store_size=False)
    frame = frame[:6] + bytes([(_xxh32(frame[0:6]) >> 8) & 0xFF]) + frame[7:]
    assert frame == kafka08_lz4_header(frame)
    return encode_message(n - 1, 0, None, frame, attributes=int(Codec.LZ4))


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_reads_kafka_python_message_sets(magic, codec):
    data = _kafka_python_set(magic, codec)
    msgs = list(iter_messages(data))
    assert len(msgs) == 25
    assert [m.offset for m in msgs] == list(range(25))
    assert msgs[3].key == b"key3" and msgs[4].key is None and msgs[4].value == b"value 4" * 4
    assert all(m.magic == magic and m.codec == codec for m in msgs)
    if magic == 1:
        assert [m.timestamp for m in msgs] == [1_600_000_000_000 + i for i in range(25)]
    else:
        assert all(m.timestamp == -1 for m in msgs)


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4])
def test_magic1_wrapper_offset_is_last_inner_offset(codec):
    data = _kafka_python_set(1, codec, n=5, last_offset=104)
    assert [m.offset for m in iter_messages(data)] == [100, 101, 102, 103, 104]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_our_message_sets_decode_with_kafka_python(magic, codec):
    msgs = [(1000 + i if magic else -1, b"k%d" % i, b"v" * i) for i in range(10)]
    data = build_message_set(msgs, magic=magic, codec=codec, base_offset=50)
    assert [(m.offset, m.key, m.value) for m in iter_messages(data)] == \
           [(50 + i, b"k%d" % i, b"v" * i) for i in range(10)]
    if magic == 0 and codec == Codec.LZ4:
        # kafka-python needs the xxhash package for Kafka 0.8's LZ4 header checksum
        frame = next(iter_batches(data)).raw()[26:]
        assert frame[6] == (_xxh32(bytes(frame[:6])) >> 8) & 0xFF
        return
    theirs = []
    for entry in iter_batches(data):
        batch = LegacyRecordBatch(bytes(entry.raw()), magic)
        assert batch.validate_crc()
        theirs.extend((r.offset, r.key, r.value) for r in batch)
    assert theirs == [(50 + i, b"k%d" % i, b"v" * i) for i in range(10)]


def test_log_append_time_wrapper_stamps_inner_timestamps():
    data = build_message_set([(5, None, b"a"), (6, None, b"b")], magic=1, codec=Codec.GZIP,
                             timestamp_type=1)
    assert [(m.timestamp, m.timestamp_type) for m in iter_messages(data)] == [(6, 1), (6, 1)]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_convert_to_v2(magic, codec):
    data = _kafka_python_set(magic, codec)
    batch = convert_to_v2(data)
    view = RecordBatchView(batch)
    assert view.is_valid() and view.magic == 2 and view.compression == codec
    assert view.producer_id == -1 and view.base_offset == 0 and view.records_count == 25
    expected = list(iter_messages(data))
    got = view.records()
    assert [(r.offset, r.key, r.value, r.timestamp) for r in got] == \
           [(i, m.key, m.value, m.timestamp) for i, m in enumerate(expected)]


def test_crc_mismatch_and_bad_sizes_are_corrupt():
    good = encode_message(0, 1, b"k", b"v", 123)
    for pos in range(16, len(good)):
        bad = bytearray(good)
        bad[pos] ^= 0x01
        with pytest.raises(CorruptRecordError):
            list(iter_messages(bytes(bad)))
    with pytest.raises(CorruptRecordError):
        list(iter_messages(good[:-1]))
    with pytest.raises(CorruptRecordError):
        convert_to_v2(b"")


def test_nested_wrapper_is_corrupt():
    inner_wrapper = build_message_set([(1, None, b"x")], magic=1, codec=Codec.GZIP)
    from storage.compression import compress
    outer = encode_message(0, 1, None, compress(Codec.GZIP, inner_wrapper), 1, int(Codec.GZIP))
    with pytest.raises(CorruptRecordError):
        list(iter_messages(outer))


def test_zstd_is_not_a_legacy_codec():
    from storage.compression import compress
    inner = encode_message(0, 1, None, b"x", 1)
    msg = encode_message(0, 1, None, compress(Codec.ZSTD, inner), 1, int(Codec.ZSTD))
    with pytest.raises(CorruptRecordError):
        list(iter_messages(msg))


def test_legacy_entry_view_records():
    data = build_message_set([(7, b"k", b"v"), (8, None, b"w")], magic=1, codec=Codec.GZIP,
                             base_offset=20)
    (entry,) = list(iter_batches(data))
    assert entry.magic == 1 and entry.last_offset == 21 and entry.is_valid()
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in entry.records()] == \
           [(20, 7, b"k", b"v", []), (21, 8, None, b"w", [])]


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=120))
def test_garbage_legacy_sets_only_raise_corrupt_record_error(data):
    try:
        list(iter_messages(data))
    except CorruptRecordError:
        pass


def test_every_truncation_of_a_wrapper_is_corrupt_not_a_crash():
    data = build_message_set([(1, b"k", b"v" * 30)] * 3, magic=1, codec=Codec.SNAPPY)
    for cut in range(len(data)):
        with pytest.raises(CorruptRecordError):
            list(iter_messages(data[:cut])) if cut else convert_to_v2(b"")


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_down_conversion_reads_back_with_kafka_python(magic, codec):
    from storage.legacy import convert_from_v2
    from storage.record_batch import RecordBatchBuilder, build_control_batch
    b = RecordBatchBuilder(compression=codec, base_offset=100)
    b.append(1000, b"a", b"1", [("dropped", b"h")], offset=100)
    b.append(1001, None, b"2", offset=103)                   # a gap, as after compaction
    b.append(1002, b"c", None, offset=104)
    data = b.build() + build_control_batch(1, 5, 0, 0, 1003, base_offset=105)
    out = convert_from_v2(data, magic)
    expected = [(100, b"a", b"1"), (103, None, b"2"), (104, b"c", None)]
    assert [(m.offset, m.key, m.value) for m in iter_messages(out)] == expected
    if magic == 1:
        assert [m.timestamp for m in iter_messages(out)] == [1000, 1001, 1002]
    if magic == 0 and codec == Codec.LZ4:
        return                  # kafka-python needs xxhash for Kafka 0.8's LZ4 checksum
    theirs = []
    for entry in iter_batches(out):
        theirs.extend((r.offset, r.key, r.value)
                      for r in LegacyRecordBatch(bytes(entry.raw()), magic))
    assert theirs == expected


def test_down_conversion_refuses_zstd():
    from storage.legacy import convert_from_v2
    from storage.record_batch import RecordBatchBuilder
    b = RecordBatchBuilder(compression=Codec.ZSTD)
    b.append(1, None, b"x")
    with pytest.raises(ValueError):
        convert_from_v2(b.build(), 1)


@pytest.mark.parametrize("clean", [True, False])
def test_an_old_segment_is_found_by_timestamp(tmp_path, clean):
    """A Kafka 0.10-era segment adopted with the data dir: its magic 1 messages (one by one
    and in a gzip wrapper) are found by ListOffsets by time and -3, its time index has their
    timestamps (they counted as -1: nothing was found and time retention used the file's
    mtime); magic 0 has no timestamps."""
    from storage.log import Log
    from storage.log_config import LogConfig
    from storage.legacy import MAGIC_V0
    path = tmp_path / "old-0"
    path.mkdir()
    (path / "00000000000000000000.log").write_bytes(
        build_message_set([(1000 + i, b"k", b"v%d" % i) for i in range(10)])
        + build_message_set([(2000 + i, b"k", b"w%d" % i) for i in range(10)],
                            codec=Codec.GZIP, base_offset=10)
        + build_message_set([(-1, b"k", b"x%d" % i) for i in range(5)], magic=MAGIC_V0,
                            base_offset=20))
    log_ = Log(str(path), LogConfig(index_interval_bytes=0), had_clean_shutdown=clean,
               recovery_point=25 if clean else 0)
    log_.update_high_watermark(log_.log_end_offset)
    assert log_.log_end_offset == 25
    assert log_.segments[0].max_timestamp == 2009
    assert log_.fetch_offset_by_timestamp(1000)[:2] == (0, 1000)
    assert log_.fetch_offset_by_timestamp(1005)[:2] == (5, 1005)
    assert log_.fetch_offset_by_timestamp(1500)[:2] == (10, 2000)
    assert log_.fetch_offset_by_timestamp(2004)[:2] == (14, 2004)
    assert log_.fetch_offset_by_timestamp(-3)[:2] == (19, 2009)
    assert log_.fetch_offset_by_timestamp(2010) is None
    assert log_.segments[0].time_index.entries > 0
    log_.close()


@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_down_conversion_leaves_out_records_before_the_fetch_offset(codec):
    """Kafka's RecordsUtil.downConvert: the records of an uncompressed batch below the fetch
    offset are not sent again (a fetch inside a batch reads it whole from disk; librdkafka
    counts on this); a compressed batch goes whole, as one wrapper."""
    from storage.legacy import convert_from_v2
    from storage.record_batch import RecordBatchBuilder
    b = RecordBatchBuilder(compression=codec, base_offset=10)
    for i in range(5):
        b.append(1000 + i, None, b"%d" % i, offset=10 + i)
    out = convert_from_v2(b.build(), 1, first_offset=13)
    offsets = [m.offset for m in iter_messages(out)]
    assert offsets == ([13, 14] if codec == Codec.NONE else [10, 11, 12, 13, 14])


@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_magic_1_messages_go_to_a_magic_0_fetcher_as_magic_0(codec):
    """Data a 0.10 broker wrote (magic 1), read with Fetch v0-1: converted, as Kafka does for
    every batch of a higher magic than the fetcher's."""
    from storage.legacy import convert_from_v2
    data = build_message_set([(1000, b"k", b"a"), (1001, None, b"b")], magic=1, codec=codec,
                             base_offset=20)
    out = convert_from_v2(data, 0)
    messages = list(iter_messages(out))
    assert [(m.offset, m.key, m.value, m.magic) for m in messages] == [
        (20, b"k", b"a", 0), (21, None, b"b", 0)]
    assert convert_from_v2(data, 1) == data        # already at the fetcher's magic


def test_down_conversion_stops_before_zstd_and_at_the_size_read():
    """Kafka's lazy conversion: the batches before a zstd one are sent (the error comes when
    the fetch starts at it), and no more bytes than were read (magic 1 messages of small
    records take about three times the room: converting a whole 50 MiB fetch stalled the
    broker)."""
    from storage.legacy import DownConversionUnsupported, convert_from_v2
    from storage.record_batch import RecordBatchBuilder

    def batch(codec, base, n):
        b = RecordBatchBuilder(compression=codec, base_offset=base)
        for i in range(n):
            b.append(1000, None, b"v", offset=base + i)
        return b.build()
    data = batch(Codec.GZIP, 0, 3) + batch(Codec.ZSTD, 3, 3) + batch(Codec.NONE, 6, 3)
    assert [m.offset for m in iter_messages(convert_from_v2(data, 1))] == [0, 1, 2]
    with pytest.raises(DownConversionUnsupported):
        convert_from_v2(data[len(batch(Codec.GZIP, 0, 3)):], 1)
    many = b"".join(batch(Codec.NONE, 10 * i, 10) for i in range(20))
    out = convert_from_v2(many, 1, max_bytes=len(many))
    offsets = [m.offset for m in iter_messages(out)]
    assert offsets == list(range(len(offsets))) and 10 <= len(offsets) < 200
    assert len(out) < len(many) + len(convert_from_v2(many[:len(batch(Codec.NONE, 0, 10))], 1))
