"""The compiled loops (storage/_records.c) against the pure-Python ones. Decoding: same records,
same exception, on valid batches of every shape, on every truncation and byte flip of one, and
on random bytes. Encoding: the same batch bytes for every record shape (the C encoder declines
the uncommon ones and Python encodes them). Skipped when the extension was not built (setup.py
makes it optional)."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import records as records_mod
from storage.compression import CorruptRecordError
from storage.record_batch import RecordBatchBuilder, RecordBatchView
from storage.records import Record, decode_records_py

from storage import record_batch

try:
    from storage._records import decode_records as decode_c
    from storage._records import encode_records as encode_c
except ImportError:
    decode_c = encode_c = None

pytestmark = pytest.mark.skipif(decode_c is None, reason="storage._records was not built")


def both(data, count, base_offset=0, base_timestamp=0, base_sequence=-1, lat=None):
    """(result or exception type) of each decoder."""
    out = []
    for fn in (lambda: decode_records_py(data, count, base_offset, base_timestamp,
                                         base_sequence, lat),
               lambda: decode_c(data, count, base_offset, base_timestamp, base_sequence, lat,
                                Record, CorruptRecordError)):
        try:
            out.append(fn())
        except CorruptRecordError:
            out.append(CorruptRecordError)
    return out


def _section(records):
    b = RecordBatchBuilder()
    for ts, key, value, headers in records:
        b.append(ts, key, value, headers)
    view = RecordBatchView(b.build())
    return view.records_data(), view.records_count, view.base_timestamp


header_st = st.tuples(st.text(max_size=70), st.one_of(st.none(), st.binary(max_size=70)))
record_st = st.tuples(st.integers(1_000, 2**45), st.one_of(st.none(), st.binary(max_size=200)),
                      st.one_of(st.none(), st.binary(max_size=9000)),
                      st.lists(header_st, max_size=3))


def test_decode_records_uses_the_compiled_decoder_for_bytes():
    assert records_mod._decode_records_c is decode_c or records_mod._decode_records_c is None


@settings(max_examples=150, deadline=None)
@given(records=st.lists(record_st, min_size=1, max_size=20),
       base_offset=st.integers(0, 2**63 - 2**40), base_sequence=st.integers(-1, 2**31 - 1),
       lat=st.one_of(st.none(), st.integers(0, 2**45)))
def test_same_records_as_python(records, base_offset, base_sequence, lat):
    data, count, base_ts = _section(records)
    py, c = both(data, count, base_offset, base_ts, base_sequence, lat)
    assert py == c and type(c[0]) is Record


@settings(max_examples=60, deadline=None)
@given(records=st.lists(record_st, min_size=1, max_size=4), data=st.data())
def test_same_answer_on_damaged_sections(records, data):
    section, count, base_ts = _section(records)
    cut = data.draw(st.integers(0, len(section)))
    assert len(set(map(repr, both(section[:cut], count, 0, base_ts)))) == 1
    flipped = bytearray(section)
    at = data.draw(st.integers(0, len(section) - 1))
    flipped[at] ^= data.draw(st.integers(1, 255))
    py, c = both(bytes(flipped), count, 0, base_ts)
    assert py == c
    for wrong_count in (count - 1, count + 1, 0):
        py, c = both(section, wrong_count, 0, base_ts)
        assert py == c


@settings(max_examples=400, deadline=None)
@given(data=st.binary(max_size=120), count=st.integers(-1, 12))
def test_same_answer_on_random_bytes(data, count):
    py, c = both(data, count, 5, 7, 3)
    assert py == c


def test_extreme_varints_and_sums():
    # A 10-byte varint that does not fit 64 bits is corrupt in both; int64 sums overflow into
    # Python integers in both.
    too_big = bytes([0x20, 0x00]) + b"\xff" * 9 + b"\x7f"
    assert both(too_big, 1) == [CorruptRecordError, CorruptRecordError]
    data, count, _ = _section([(1, b"k", b"v", []), (2, None, None, [])])
    py, c = both(data, count, 2**63 - 1, 2**63 - 1, 2**31 - 1)
    assert py == c
    assert [r.offset for r in c] == [2**63 - 1, 2**63]
    assert [r.timestamp for r in c] == [2**63 - 1, 2**63]
    assert [r.sequence for r in c] == [2**31 - 1, 0]


def test_header_errors_match():
    from storage.records import encode_record
    good = encode_record(0, 0, b"k", b"v", [("ab", b"x"), ("c", None)])
    bad_utf8 = good.replace(b"ab", b"\xff\xfe")
    with pytest.raises(CorruptRecordError, match="UTF-8"):
        decode_c(bad_utf8, 1, 0, 0, -1, None, Record, CorruptRecordError)
    for cut in range(len(good)):
        assert both(good[:cut], 1) == [CorruptRecordError, CorruptRecordError]


def _build(records, monkeypatch, compiled, **kw):
    monkeypatch.setattr(record_batch, "_encode_records_c", encode_c if compiled else None)
    b = RecordBatchBuilder(**kw)
    for i, (ts, key, value, headers) in enumerate(records):
        b.append(ts, key, value, headers)
        if i == 1:
            assert b.size_in_bytes > 0          # encode part of the batch early, as producers do
    return b.build()


any_bytes = st.one_of(st.none(), st.binary(max_size=300),
                      st.binary(max_size=20).map(bytearray), st.binary(max_size=20).map(memoryview))
odd_header_st = st.tuples(st.one_of(st.text(max_size=9), st.binary(max_size=9)),
                          st.one_of(st.none(), st.binary(max_size=40),
                                    st.binary(max_size=9).map(bytearray)))
odd_record_st = st.tuples(st.integers(-2**40, 2**45), any_bytes,
                          st.one_of(any_bytes, st.binary(min_size=8000, max_size=9000)),
                          st.one_of(st.lists(header_st, max_size=3),
                                    st.lists(odd_header_st, max_size=2).map(tuple),
                                    st.just(None), st.just(())))


@settings(max_examples=150, deadline=None)
@given(records=st.lists(odd_record_st, min_size=1, max_size=12),
       base_sequence=st.integers(-1, 2**31 - 1))
def test_encoder_gives_python_bytes(records, base_sequence):
    from _pytest.monkeypatch import MonkeyPatch
    with MonkeyPatch.context() as mp:
        kw = dict(producer_id=3 if base_sequence >= 0 else -1, producer_epoch=0,
                  base_sequence=base_sequence)
        c = _build(records, mp, True, **kw)
        py = _build(records, mp, False, **kw)
    assert c == py
    view = RecordBatchView(c)
    assert view.is_valid() and view.records_count == len(records)


def test_encoder_declines_uncommon_shapes():
    assert encode_c([(0, 1, bytearray(b"k"), b"v", [])], 1) is None
    assert encode_c([(0, 1, b"k", b"v", [(b"h", b"x")])], 1) is None
    assert encode_c([(0, 2**63, b"k", b"v", [])], -5) is None         # ts delta leaves int64
    data, max_ts = encode_c([(0, 5, None, b"v", []), (1, 3, b"k", None, [("h", None)])], 4)
    assert max_ts == 5 and decode_records_py(data, 2, 0, 4, -1, None)[1].headers == [("h", None)]


# --- validation's scan (scan_records in _records.c, called by record_scan.scan_records_fast) ---

def scan_both(data, count, base_timestamp=0):
    """(answer or exception type) of the Python scan_records and of the compiled scan as
    scan_records_fast uses it (None from C = Python decides)."""
    from storage.record_scan import scan_records_fast
    from storage.records import scan_records
    out = []
    for fn in (scan_records, scan_records_fast):
        try:
            out.append(fn(memoryview(data), count, base_timestamp))
        except CorruptRecordError as exc:
            out.append((CorruptRecordError, str(exc)))
    return out


def test_scan_records_fast_uses_the_compiled_scan():
    from storage import record_scan
    from storage._records import scan_records as scan_c
    assert record_scan._scan_records_c in (scan_c, None)


@settings(max_examples=150, deadline=None)
@given(records=st.lists(record_st, min_size=1, max_size=20))
def test_scan_same_answer_as_python(records):
    from storage._records import scan_records as scan_c
    data, count, base_ts = _section(records)
    py, c = scan_both(data, count, base_ts)
    assert py == c
    assert scan_c(data, count) is not None          # well-formed: answered without Python


@settings(max_examples=300, deadline=None)
@given(records=st.lists(record_st, min_size=1, max_size=5), data=st.data())
def test_scan_same_answer_on_damaged_sections(records, data):
    section, count, base_ts = _section(records)
    cut = data.draw(st.integers(0, len(section)))
    py, c = scan_both(section[:cut], count, base_ts)
    assert py == c
    flipped = bytearray(section)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(section) - 1))
        flipped[at] ^= data.draw(st.integers(1, 255))
    py, c = scan_both(flipped, count, base_ts)
    assert py == c
    for wrong_count in (count - 1, count + 1, 0, -1):
        py, c = scan_both(section, wrong_count, base_ts)
        assert py == c


@settings(max_examples=400, deadline=None)
@given(data=st.binary(max_size=120), count=st.integers(-1, 12))
def test_scan_same_answer_on_random_bytes(data, count):
    py, c = scan_both(data, count, 7)
    assert py == c


def test_scan_odd_fields_match():
    from storage.records import encode_record, encode_varint
    from storage._records import scan_records as scan_c
    good = encode_record(0, 5, b"k", b"v", [("ab", b"x"), ("c", None)])
    for cut in range(len(good)):
        assert scan_both(good[:cut], 1)[0] == scan_both(good[:cut], 1)[1]
    # negative key/value lengths other than -1 are null for scan_records: same here
    body = b"\x00" + encode_varint(3) + encode_varint(0) + encode_varint(-5) \
        + encode_varint(-2) + b"\x00"
    odd = encode_varint(len(body)) + body
    assert scan_c(odd, 1) is not None
    assert scan_both(odd, 1) == [(True, 3, 3, 0)] * 2
    # negative header count / key length, extreme timestamp deltas, overlong varints
    for headers in (encode_varint(-1), encode_varint(1) + encode_varint(-1) + b"\x00",
                    encode_varint(2**40) + b"\x00\x00"):
        body = b"\x00\x00\x00\x01\x01" + headers
        rec = encode_varint(len(body)) + body
        assert scan_both(rec, 1)[0] == scan_both(rec, 1)[1]
    for ts in (2**63 - 1, -2**63):
        body = b"\x00" + encode_varint(ts) + b"\x00\x01\x01\x00"
        rec = encode_varint(len(body)) + body
        assert scan_both(rec, 1, 2**63 - 1) == [(True, 2**63 - 1 + ts, 2**63 - 1 + ts, 0)] * 2
    too_big = b"\x20\x00" + b"\xff" * 9 + b"\x7f" + b"\x00" * 13
    assert scan_both(too_big, 1)[0] == scan_both(too_big, 1)[1]
    assert scan_c(bytearray(good), 1) is not None and scan_c(memoryview(good), 1) is not None
    assert scan_c("not a buffer", 1) is None
