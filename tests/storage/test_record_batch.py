"""RecordBatch v2: builder -> view -> records round trips, CRC checks, kafka-python as an
independent encoder/decoder, and batches Apache Kafka 3.4.0 wrote to disk."""
import glob
import os
import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from storage.compression import Codec, CorruptRecordError
from storage.record_batch import (HEADER_SIZE, LOG_APPEND_TIME, LOG_OVERHEAD, MAGIC_V2,
                                  ControlRecordType, LegacyEntryView, RecordBatchBuilder,
                                  RecordBatchView, build_control_batch, iter_batches,
                                  peek_batches, read_batch_header)

KAFKA_DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "fixtures", "kafka-data")
KAFKA_340 = os.path.join(KAFKA_DATA, "kafka-3.4.0")

header_st = st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20)))
record_st = st.tuples(
    st.integers(min_value=0, max_value=2**41),                  # timestamp
    st.one_of(st.none(), st.binary(max_size=300)),              # key
    st.one_of(st.none(), st.binary(max_size=20000)),            # value
    st.lists(header_st, max_size=3),
)


def _plain(records):
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]


@settings(max_examples=80, deadline=None)
@given(codec=st.sampled_from(list(Codec)), records=st.lists(record_st, max_size=30),
       base_offset=st.integers(min_value=0, max_value=2**62),
       base_sequence=st.one_of(st.just(-1), st.integers(min_value=0, max_value=2**31 - 1)))
def test_builder_view_round_trip(codec, records, base_offset, base_sequence):
    builder = RecordBatchBuilder(compression=codec, base_offset=base_offset, producer_id=42,
                                 producer_epoch=3, base_sequence=base_sequence)
    for ts, key, value, headers in records:
        builder.append(ts, key, value, headers)
    data = builder.build()
    view = RecordBatchView(data)
    assert view.is_valid()
    assert view.magic == MAGIC_V2 and view.compression == codec
    assert view.size_in_bytes == len(data) == view.batch_length + LOG_OVERHEAD
    assert view.records_count == len(records)
    assert view.last_offset == base_offset + len(records) - 1
    assert view.next_offset == base_offset + len(records)
    assert view.max_timestamp == (max(r[0] for r in records) if records else -1)
    expected = [(base_offset + i, ts, key, value, list(headers))
                for i, (ts, key, value, headers) in enumerate(records)]
    assert _plain(view.records()) == expected
    # kafka-python reads the same bytes (it mistakes an empty xerial stream for raw snappy)
    theirs = DefaultRecordBatch(data)
    assert theirs.validate_crc()
    assert not records or \
        [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs] == expected
    if base_sequence >= 0 and records:
        seqs = [r.sequence for r in view.records()]
        assert seqs[0] == base_sequence
        assert view.last_sequence == seqs[-1]
        assert all(0 <= s <= 2**31 - 1 for s in seqs)


@pytest.mark.parametrize("codec", list(Codec))
def test_reads_kafka_python_batches(codec):
    theirs = DefaultRecordBatchBuilder(magic=2, compression_type=int(codec), is_transactional=1,
                                       producer_id=77, producer_epoch=5, base_sequence=100,
                                       batch_size=1 << 20)
    for i in range(200):
        theirs.append(i, timestamp=1_700_000_000_000 + i * 7, key=None if i % 4 else b"k%d" % i,
                      value=b"value-%d" % i * (i % 13), headers=[("h", b"%d" % i)] if i % 2 else [])
    data = bytes(theirs.build())
    view = RecordBatchView(data)
    assert view.is_valid()
    assert (view.compression, view.is_transactional, view.producer_id, view.producer_epoch,
            view.base_sequence, view.records_count) == (codec, True, 77, 5, 100, 200)
    recs = view.records()
    assert recs[5].key is None and recs[5].value == b"value-5" * 5
    assert recs[8].key == b"k8" and recs[9].headers == [("h", b"9")]
    assert [r.sequence for r in recs] == list(range(100, 300))
    assert view.max_timestamp == 1_700_000_000_000 + 199 * 7


def test_sequence_wraps_at_int32_max():
    b = RecordBatchBuilder(producer_id=1, producer_epoch=0, base_sequence=2**31 - 2)
    for i in range(4):
        b.append(i, None, b"x")
    view = RecordBatchView(b.build())
    assert [r.sequence for r in view.records()] == [2**31 - 2, 2**31 - 1, 0, 1]
    assert view.last_sequence == 1


def test_header_layout_offsets():
    b = RecordBatchBuilder(base_offset=0x0102030405060708, partition_leader_epoch=9,
                           producer_id=11, producer_epoch=12, base_sequence=13)
    b.append(1000, b"k", b"v")
    b.append(999, b"k", b"v")
    data = b.build()
    assert struct.unpack_from(">q", data, 0)[0] == 0x0102030405060708
    assert struct.unpack_from(">i", data, 12)[0] == 9
    assert data[16] == 2
    assert struct.unpack_from(">I", data, 17)[0] == crc32c.crc32c(data[21:])
    assert struct.unpack_from(">i", data, 23)[0] == 1          # last_offset_delta
    assert struct.unpack_from(">qq", data, 27) == (1000, 1000)  # base ts = first, max ts = max
    assert struct.unpack_from(">qhii", data, 43) == (11, 12, 13, 2)
    assert read_batch_header(data, 0)[0] == 0x0102030405060708
    assert RecordBatchView(data).records()[1].timestamp == 999


def test_every_single_byte_mutation_inside_crc_is_detected():
    b = RecordBatchBuilder(compression=Codec.NONE)
    for i in range(3):
        b.append(i, b"key", b"value %d" % i, [("a", b"b")])
    data = b.build()
    for pos in range(21, len(data)):
        mutated = bytearray(data)
        mutated[pos] ^= 0x5A
        view = RecordBatchView(mutated)
        assert not view.is_valid(), pos
        with pytest.raises(CorruptRecordError):
            view.ensure_valid()
    # base_offset and partition_leader_epoch are outside the CRC
    mutated = bytearray(data)
    view = RecordBatchView(mutated)
    view.set_base_offset(1234)
    view.set_partition_leader_epoch(77)
    assert view.is_valid()
    again = RecordBatchView(mutated)
    assert (again.base_offset, again.partition_leader_epoch) == (1234, 77)
    assert [r.offset for r in again.records()] == [1234, 1235, 1236]


def test_set_max_timestamp_log_append_time_recomputes_crc():
    b = RecordBatchBuilder(compression=Codec.GZIP)
    b.append(5, None, b"a")
    b.append(6, None, b"b")
    buf = bytearray(b.build())
    view = RecordBatchView(memoryview(buf), 0)
    view.set_max_timestamp(99999, LOG_APPEND_TIME)
    assert view.is_valid()
    again = RecordBatchView(bytes(buf))
    assert again.timestamp_type == LOG_APPEND_TIME and again.max_timestamp == 99999
    assert again.compression == Codec.GZIP
    assert [r.timestamp for r in again.records()] == [99999, 99999]
    assert [r.timestamp for r in DefaultRecordBatch(bytes(buf))] == [99999, 99999]


def test_truncated_or_garbled_records_raise_corrupt():
    b = RecordBatchBuilder()
    b.append(1, b"k", b"v" * 100)
    data = bytearray(b.build())
    struct.pack_into(">i", data, 57, 2)                 # claims 2 records, holds 1
    with pytest.raises(CorruptRecordError):
        RecordBatchView(data).records()
    struct.pack_into(">i", data, 57, 1)
    data[HEADER_SIZE] = 0x7E                            # record length varint 63 (too short)
    with pytest.raises(CorruptRecordError):
        RecordBatchView(data).records()
    z = RecordBatchBuilder(compression=Codec.ZSTD)
    z.append(1, None, b"x" * 1000)
    zdata = bytearray(z.build())
    zdata[HEADER_SIZE + 5] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        RecordBatchView(zdata).records()


def _three_batches():
    out = []
    for i, codec in enumerate([Codec.NONE, Codec.LZ4, Codec.SNAPPY]):
        b = RecordBatchBuilder(compression=codec, base_offset=i * 10)
        for j in range(i + 1):
            b.append(100 + j, None, b"v%d" % j)
        out.append(b.build())
    return out


def test_iter_batches_stops_at_every_torn_tail():
    batches = _three_batches()
    buf = b"".join(batches)
    full = [v.base_offset for v in iter_batches(buf)]
    assert full == [0, 10, 20]
    ends = [len(batches[0]), len(batches[0]) + len(batches[1]), len(buf)]
    for cut in range(len(buf) + 1):
        got = list(iter_batches(buf[:cut]))
        assert len(got) == sum(1 for e in ends if e <= cut), cut
        peeked = list(peek_batches(buf[:cut]))
        assert [p[2] for p in peeked] == [v.base_offset for v in got]


def test_iter_batches_window_and_peek_fields():
    buf = b"".join(_three_batches())
    views = list(iter_batches(buf))
    second = views[1]
    assert [v.base_offset for v in iter_batches(buf, second.position)] == [10, 20]
    assert [v.base_offset for v in iter_batches(buf, 0, second.position + 1)] == [0]
    peeked = list(peek_batches(buf))
    assert peeked == [(v.position, v.size_in_bytes, v.base_offset, v.last_offset,
                       v.max_timestamp, 2) for v in views]


def test_iter_batches_rejects_impossible_length():
    buf = bytearray(_three_batches()[0])
    struct.pack_into(">i", buf, 8, 10)
    with pytest.raises(CorruptRecordError):
        list(iter_batches(buf))
    buf = bytearray(_three_batches()[0])
    buf[16] = 9
    with pytest.raises(CorruptRecordError):
        list(peek_batches(buf))


def test_iter_batches_reports_legacy_entries():
    from kafka.record.legacy_records import LegacyRecordBatchBuilder
    legacy = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    legacy.append(0, timestamp=5, key=None, value=b"old")
    legacy.append(1, timestamp=6, key=None, value=b"older")
    buf = bytes(legacy.build()) + _three_batches()[0]
    views = list(iter_batches(buf))
    assert [type(v) for v in views] == [LegacyEntryView, LegacyEntryView, RecordBatchView]
    assert [v.magic for v in views] == [1, 1, 2]
    assert all(v.is_valid() for v in views)
    assert sum(v.size_in_bytes for v in views) == len(buf)


def test_control_batch():
    data = build_control_batch(ControlRecordType.ABORT, producer_id=5, producer_epoch=2,
                               coordinator_epoch=7, timestamp=1234, base_offset=40)
    view = RecordBatchView(data)
    assert view.is_valid() and view.is_control and view.is_transactional
    assert view.control_record_type() == ControlRecordType.ABORT
    rec = view.records()[0]
    assert rec.key == b"\x00\x00\x00\x00" and rec.value == b"\x00\x00\x00\x00\x00\x07"
    theirs = DefaultRecordBatch(data)
    assert theirs.is_control_batch and theirs.is_transactional


def test_builder_explicit_offsets_leave_gaps_like_compaction():
    b = RecordBatchBuilder(base_offset=100)
    b.append(1, b"a", b"1", offset=100)
    b.append(2, b"b", b"2", offset=105)
    with pytest.raises(ValueError):
        b.append(3, b"c", b"3", offset=105)
    view = RecordBatchView(b.build())
    assert view.last_offset == 105 and view.records_count == 2
    assert [r.offset for r in view.records()] == [100, 105]


def _kafka_logs():
    return [f"{KAFKA_340}/test-0/00000000000000000000.log",
            f"{KAFKA_340}/__consumer_offsets-36/00000000000000000000.log"]


def test_reads_topic_written_by_kafka_340():
    with open(_kafka_logs()[0], "rb") as f:
        buf = f.read()
    views = list(iter_batches(buf))
    assert len(views) == 28
    assert sum(v.size_in_bytes for v in views) == len(buf)
    assert all(v.is_valid() for v in views)
    records = [r for v in views for r in v.records()]
    assert len(records) == 97
    assert [r.offset for r in records] == list(range(97))
    # cross-check against kafka-python's reader
    for v in views:
        theirs = DefaultRecordBatch(bytes(v.raw()))
        assert theirs.validate_crc()
        assert [(r.offset, r.timestamp, r.key, r.value) for r in theirs] == \
               [(r.offset, r.timestamp, r.key, r.value) for r in v.records()]


def test_reads_consumer_offsets_written_by_kafka_340():
    paths = glob.glob(f"{KAFKA_340}/__consumer_offsets-36/*.log")
    assert paths
    total = 0
    for path in paths:
        with open(path, "rb") as f:
            buf = f.read()
        for v in iter_batches(buf):
            assert v.is_valid()
            for r in v.records():
                # group metadata / offset commit keys start with a version int16 and a group id
                version, glen = struct.unpack_from(">hh", r.key)
                assert version in (0, 1, 2) and r.key[4:4 + glen].startswith(b"console-consumer")
                total += 1
    assert total >= 1


ALL_KAFKA_LOGS = sorted(p for p in glob.glob(os.path.join(KAFKA_DATA, "*", "*", "*.log"))
                        if os.path.getsize(p) > 0)


@pytest.mark.parametrize("path", ALL_KAFKA_LOGS, ids=lambda p: p.split("kafka-data/")[1])
def test_builder_reproduces_kafka_batches_byte_for_byte(path):
    with open(path, "rb") as f:
        buf = f.read()
    views = list(iter_batches(buf))
    assert views and sum(v.size_in_bytes for v in views) == len(buf)
    for v in views:
        assert v.is_valid()
        b = RecordBatchBuilder(compression=v.compression, timestamp_type=v.timestamp_type,
                               base_offset=v.base_offset, producer_id=v.producer_id,
                               producer_epoch=v.producer_epoch, base_sequence=v.base_sequence,
                               is_transactional=v.is_transactional, is_control=v.is_control,
                               partition_leader_epoch=v.partition_leader_epoch)
        for r in v.records():
            b.append(r.timestamp, r.key, r.value, r.headers, offset=r.offset)
        assert b.build() == bytes(v.raw())


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200), count=st.integers(0, 10))
def test_decoding_garbage_only_raises_corrupt_record_error(data, count):
    from storage.records import decode_records, scan_records
    for fn in (lambda: decode_records(data, count, 0, 0, 0, None),
               lambda: scan_records(memoryview(data), count, 0),
               lambda: list(iter_batches(data)),
               lambda: list(peek_batches(data))):
        try:
            fn()
        except CorruptRecordError:
            pass


@pytest.mark.parametrize("headers", [[("trace", b"0001")], [("k", None)], [("k", b"")],
                                     [("", b"v")], [("k" * 70, b"v")], [("k", b"v" * 70)],
                                     [("a", b"1"), ("b", None)], [("é", b"x")]])
def test_header_shapes_round_trip(headers):
    """One-header records take an inlined decode path; other shapes the general one."""
    b = RecordBatchBuilder()
    for i in range(3):
        b.append(i, b"k", b"v", headers if i != 1 else [])
    recs = RecordBatchView(b.build()).records()
    assert [r.headers for r in recs] == [headers, [], headers]


def test_bad_single_header_raises_corrupt():
    from storage.records import decode_records, encode_record
    good = encode_record(0, 0, b"k", b"v", [("ab", b"x")])
    bad_utf8 = good.replace(b"ab", b"\xff\xfe")
    with pytest.raises(CorruptRecordError, match="UTF-8"):
        decode_records(bad_utf8, 1, 0, 0, -1, None)
    for cut in range(1, len(good)):
        with pytest.raises(CorruptRecordError):
            decode_records(good[:cut], 1, 0, 0, -1, None)
