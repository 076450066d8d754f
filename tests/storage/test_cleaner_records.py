"""The cleaner's record walks (storage/cleaner_records.py): the rules, checked against decoded
records, and the compiled twins (storage/_records.c) held to the Python answers on valid,
damaged and random sections."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.cleaner_records import filter_records_py, map_keys_py
from storage.compression import CorruptRecordError
from storage.record_batch import RecordBatchBuilder, RecordBatchView
from storage.records import decode_records_py

try:
    from storage._records import filter_records as filter_c
    from storage._records import map_keys as map_keys_c
except ImportError:
    filter_c = map_keys_c = None

header_st = st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=10)))
record_st = st.tuples(st.integers(-5, 2**41),
                      st.one_of(st.none(), st.sampled_from([b"a", b"b", b"c", b"d", b""])),
                      st.one_of(st.none(), st.binary(max_size=300)),
                      st.lists(header_st, max_size=2))


def _section(records, base_offset=1000, gaps=1):
    b = RecordBatchBuilder(base_offset=base_offset)
    for i, (ts, key, value, headers) in enumerate(records):
        b.append(ts, key, value, headers, offset=base_offset + i * gaps)
    view = RecordBatchView(b.build())
    return view.records_data(), view.records_count, view.base_timestamp


def _decoded(section, count, base_offset, base_ts):
    return decode_records_py(section, count, base_offset, base_ts, -1, None)


@settings(max_examples=200, deadline=None)
@given(records=st.lists(record_st, min_size=1, max_size=30), gaps=st.integers(1, 3),
       latest_delta=st.integers(-5, 100), retain_deletes=st.booleans(),
       horizon=st.sampled_from([-1, 5_000]), new_horizon=st.sampled_from([-1, 9_000]),
       mapped=st.dictionaries(st.sampled_from([b"a", b"b", b"c"]), st.integers(900, 1100)))
def test_filter_keeps_what_the_rule_says_and_c_agrees(records, gaps, latest_delta,
                                                      retain_deletes, horizon, new_horizon,
                                                      mapped):
    section, count, base_ts = _section(records, gaps=gaps)
    latest = 1000 + latest_delta
    result = filter_records_py(section, count, 1000, base_ts, mapped, latest, retain_deletes,
                               horizon, new_horizon)
    retained, new_section, new_base, max_ts, horizon_set, keyless = result
    want = [r for r in _decoded(section, count, 1000, base_ts)
            if r.offset > latest or (r.key is not None and r.offset >= mapped.get(r.key, -1)
                                     and (r.value is not None or retain_deletes))]
    assert retained == len(want)
    assert keyless == sum(1 for r in _decoded(section, count, 1000, base_ts)
                          if r.offset <= latest and r.key is None)
    if new_section is None:
        assert retained == count and not horizon_set and new_base == base_ts
    else:
        got = _decoded(new_section, retained, 1000, new_base)
        assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in got] == \
            [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in want]
        if horizon >= 0:
            assert new_base == horizon
        elif horizon_set:
            assert new_base == new_horizon and any(r.value is None for r in want)
        elif want:
            assert new_base == want[0].timestamp
    assert max_ts == (max(r.timestamp for r in want) if want else -1)
    if filter_c is not None:
        assert filter_c(section, count, 1000, base_ts, mapped, latest, retain_deletes, horizon,
                        new_horizon) == result


@settings(max_examples=150, deadline=None)
@given(records=st.lists(record_st, min_size=1, max_size=30), gaps=st.integers(1, 3))
def test_map_keys_maps_the_last_offset_of_each_key(records, gaps):
    section, count, base_ts = _section(records, gaps=gaps)
    mapping = {b"zzz": 1}
    result = map_keys_py(section, count, 1000, mapping)
    want = {b"zzz": 1}
    for r in _decoded(section, count, 1000, base_ts):
        if r.key is not None:
            want[r.key] = r.offset
    assert mapping == want
    assert result == (len(want) - 1, sum(len(k) for k in want if k != b"zzz"))
    if map_keys_c is not None:
        again = {b"zzz": 1}
        assert map_keys_c(section, count, 1000, again) == result and again == want


@pytest.mark.skipif(filter_c is None, reason="storage._records was not built")
@settings(max_examples=200, deadline=None)
@given(records=st.lists(record_st, min_size=1, max_size=8), data=st.data())
def test_damaged_sections_fall_back_to_the_python_error(records, data):
    section, count, base_ts = _section(records)
    cut = data.draw(st.integers(0, len(section)))
    flip = data.draw(st.integers(0, len(section) - 1))
    for damaged in (section[:cut], section[:flip] + bytes([section[flip] ^ 0xFF])
                    + section[flip + 1:]):
        for c_fn, py_fn, args in (
                (map_keys_c, map_keys_py, lambda: (damaged, count, 0, {})),
                (filter_c, filter_records_py, lambda: (damaged, count, 0, base_ts, {b"a": 5},
                                                       10**9, True, -1, -1))):
            try:
                py = py_fn(*args())
            except CorruptRecordError:
                py = CorruptRecordError
            c = c_fn(*args())
            assert c is None or c == py


@pytest.mark.skipif(filter_c is None, reason="storage._records was not built")
@given(blob=st.binary(max_size=64), count=st.integers(0, 5))
def test_random_bytes_never_crash_the_compiled_walks(blob, count):
    map_keys_c(blob, count, 0, {})
    filter_c(blob, count, 0, 0, {}, 10**9, False, -1, 100)
