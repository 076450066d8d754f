"""storage.record_scan.scan_records_fast must answer exactly as scan_records, or raise the same
CorruptRecordError, for well-formed and damaged records sections alike."""
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.compression import CorruptRecordError
from storage.record_batch import HEADER_SIZE, RecordBatchBuilder
from storage.record_scan import MIN_RECORDS, scan_records_fast, scan_records_numpy
from storage.records import scan_records

NOW = 1_700_000_000_000
# scan_records_fast runs the compiled walk when storage/_records.c was built; the numpy scan is
# tested on its own too (it is what runs without the extension).
FAST = pytest.mark.parametrize("fast", [scan_records_fast, scan_records_numpy],
                               ids=["fast", "numpy"])


def _section(count, value_size=100, keys=False, headers=False, offsets=None, ts_step=1,
             ts_mod=5000):
    b = RecordBatchBuilder()
    for i in range(count):
        kwargs = {}
        if headers and i % 7 == 3:
            kwargs["headers"] = [("h", b"x")]
        if offsets is not None:
            kwargs["offset"] = offsets[i]
        b.append(NOW + (i * ts_step) % ts_mod, b"key-%d" % i if keys else None,
                 b"v" * (value_size + i % 3), **kwargs)
    data = b.build()
    return bytearray(data[HEADER_SIZE:]), count


def _outcome(fn, data, count):
    try:
        return fn(memoryview(bytes(data)), count, NOW)
    except CorruptRecordError as exc:
        return ("corrupt", type(exc))


_SHAPES = [
    {}, {"keys": True}, {"headers": True}, {"value_size": 5000}, {"value_size": 0},
    {"ts_step": -3},
    {"ts_step": 100_003, "ts_mod": 2**20},         # 3- and 4-byte timestamp deltas
    {"ts_step": 100_003, "ts_mod": 2**29},         # 5-byte ones: the per-record scan's job
]
# 200 KB values: 3-byte record lengths, also the per-record scan's job (few records: small).
_CASES = [(count, shape) for count in (1, MIN_RECORDS - 1, MIN_RECORDS, 500) for shape in _SHAPES]
_CASES += [(count, {"value_size": 200_000}) for count in (1, MIN_RECORDS)]


@FAST
@pytest.mark.parametrize("count, shape", _CASES)
def test_same_answer_on_well_formed_sections(fast, count, shape):
    data, n = _section(count, **shape)
    assert _outcome(fast, data, n) == _outcome(scan_records, data, n)


@FAST
def test_irregular_offset_deltas_are_reported(fast):
    offsets = [i if i < 50 else i + 1 for i in range(100)]      # a gap after 49
    data, n = _section(100, offsets=offsets)
    assert fast(memoryview(data), n, NOW)[0] is False
    assert _outcome(fast, data, n) == _outcome(scan_records, data, n)


@FAST
def test_count_mismatch_and_trailing_bytes(fast):
    data, n = _section(200)
    for count in (n - 1, n + 1):
        assert _outcome(fast, data, count) == _outcome(scan_records, data, count)
    assert _outcome(fast, data + b"\x00", n) == \
        _outcome(scan_records, data + b"\x00", n)


@FAST
@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32), flips=st.integers(1, 4), count=st.sampled_from([64, 130]),
       keys=st.booleans())
def test_same_answer_on_damaged_sections(fast, seed, flips, count, keys):
    data, n = _section(count, value_size=20, keys=keys)
    rng = random.Random(seed)
    for _ in range(flips):
        data[rng.randrange(len(data))] = rng.randrange(256)
    assert _outcome(fast, data, n) == _outcome(scan_records, data, n)


@FAST
@pytest.mark.parametrize("shape", [{}, {"keys": True}, {"value_size": 1024},
                                   {"ts_step": 100_003, "ts_mod": 2**20}])
def test_well_formed_sections_do_not_fall_back(fast, monkeypatch, shape):
    import storage.record_scan as record_scan
    expected = scan_records(memoryview(_section(300, **shape)[0]), 300, NOW)

    def fail(*args):
        raise AssertionError("fell back to the per-record scan")
    monkeypatch.setattr(record_scan, "scan_records", fail)
    data, n = _section(300, **shape)
    assert fast(memoryview(data), n, NOW) == expected


@FAST
def test_reads_nothing_past_a_slice_of_a_larger_buffer(fast):
    data, n = _section(100, value_size=30)
    for cut in (1, 2, 3, 5):
        big = bytearray(data[:-cut]) + b"\x85\x85\x85\x85\x01" * 4      # varint-ish garbage after
        view = memoryview(big)[:len(data) - cut]
        assert _outcome(fast, view, n) == _outcome(scan_records, view, n)
    whole = memoryview(bytearray(data) + b"\xff" * 16)[:len(data)]
    assert fast(whole, n, NOW) == scan_records(memoryview(data), n, NOW)
