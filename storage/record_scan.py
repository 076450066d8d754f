"""Validation's scan of an uncompressed v2 records section, with the per-record work in numpy.

`scan_records` (storage/records.py) walks every record in Python, ~0.7 us each: for 100-byte
messages that was ~70% of the broker's CPU while producing (issue 9's profile). Here Python only
follows the chain of record lengths (one varint per record, ~4x less work); every other field is
decoded for all records at once with numpy, at the record starts that walk found:

    record: length varint | attributes int8 | timestamp_delta varint | offset_delta varint |
            key_length varint | key | value_length varint | value | header_count varint | headers

A fast scan only ever *confirms* a well-formed section. Anything it does not handle - fewer than
`MIN_RECORDS` records, a varint longer than 4 bytes, records with headers, any inconsistency
(a field running past its record's length, bytes left over) - is handed to `scan_records`, which
gives the same answer or raises the precise CorruptRecordError. So the result is always exactly
`scan_records`'s: (offset deltas are 0..count-1, min timestamp, max timestamp, index of the first
record with the max timestamp).

When storage/_records.c was built (setup.py; KBROKER_PURE_PYTHON=1 turns it off) its compiled
`scan_records` walks the whole section instead, ~10x faster again; it too only confirms, and
returns None for anything that scan_records must judge (tests/storage/test_records_c.py).

Pure CPU work on bytes; no I/O.
"""
from __future__ import annotations

import os

import numpy as np

from storage.records import _ZZ1, _ZZ2, scan_records

try:        # optional compiled walk (storage/_records.c, built by setup.py)
    from storage._records import scan_records as _scan_records_c
except ImportError:
    _scan_records_c = None
if os.environ.get("KBROKER_PURE_PYTHON"):
    _scan_records_c = None

MIN_RECORDS = 64        # below this numpy's per-call overhead costs more than it saves


def scan_records_fast(data, count, base_timestamp):
    """Same contract as `storage.records.scan_records`."""
    if _scan_records_c is not None:
        result = _scan_records_c(data, count)
        if result is None:
            return scan_records(data, count, base_timestamp)
        consecutive, min_delta, max_delta, max_index = result
        return consecutive, base_timestamp + min_delta, base_timestamp + max_delta, max_index
    return scan_records_numpy(data, count, base_timestamp)


def scan_records_numpy(data, count, base_timestamp):
    """scan_records_fast without the compiled walk: lengths in Python, other fields in numpy."""
    if count < MIN_RECORDS:
        return scan_records(data, count, base_timestamp)
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    bounds = _walk_lengths(view, len(view), count)
    result = None if bounds is None else _check_fields(view, bounds)
    if result is None:
        return scan_records(data, count, base_timestamp)
    consecutive, min_delta, max_delta, max_index = result
    return consecutive, base_timestamp + min_delta, base_timestamp + max_delta, max_index


def _walk_lengths(buf, size: int, count: int):
    """The offset where each record starts, plus `size`, following the length varints; None
    if they do not end exactly at `size` or a length takes 3+ bytes. Lengths are checked
    (>= 6, inside the section) by `_check_fields`."""
    zz1, zz2 = _ZZ1, _ZZ2
    bounds = [0]
    append = bounds.append
    pos = 0
    try:
        for _ in range(count):
            b = buf[pos]
            if b < 0x80:
                pos += 1 + zz1[b]
            else:
                c = buf[pos + 1]
                if c >= 0x80:
                    return None
                pos += 2 + zz2[(c << 7) | (b & 0x7F)]
            append(pos)
    except IndexError:
        return None
    return bounds if pos == size else None


def _varints(arr, pos, limit):
    """Decode the zigzag varint at each position (up to 4 bytes); (values, next positions), or
    None if some varint is longer. Lengths, offset and timestamp deltas nearly always take one
    or two bytes, so those cases read no further. Positions are checked against `limit` (the
    section's end; no copy pads it) before each read."""
    if int(pos.max()) + 1 > limit:
        return None
    b0 = arr[pos].astype(np.int64)
    c0 = b0 >= 0x80
    if not c0.any():
        return (b0 >> 1) ^ -(b0 & 1), pos + 1
    if int(pos.max()) + 2 > limit:
        return None
    b1 = arr[pos + 1].astype(np.int64)
    c1 = c0 & (b1 >= 0x80)
    if not c1.any():
        value = (b0 & 0x7F) | np.where(c0, b1 << 7, 0)
        return (value >> 1) ^ -(value & 1), pos + 1 + c0
    if int(pos.max()) + 4 > limit:
        return None
    b2 = arr[pos + 2].astype(np.int64)
    b3 = arr[pos + 3].astype(np.int64)
    c2 = c1 & (b2 >= 0x80)
    if (c2 & (b3 >= 0x80)).any():
        return None
    n = 1 + c0 + c1 + c2
    value = (b0 & 0x7F) | np.where(c0, (b1 & 0x7F) << 7, 0) \
        | np.where(c1, (b2 & 0x7F) << 14, 0) | np.where(c2, (b3 & 0x7F) << 21, 0)
    return (value >> 1) ^ -(value & 1), pos + n


def _check_fields(view, bounds):
    arr = np.frombuffer(view, dtype=np.uint8)
    limit = len(arr)
    bounds = np.array(bounds, dtype=np.int64)
    begin, end = bounds[:-1], bounds[1:]
    if (begin < 0).any() or (begin >= limit).any():
        return None
    body = begin + 1 + (arr[begin] >= 0x80)                # past the length varint
    if (end - body < 6).any():                             # scan_records' minimum length
        return None
    pos = body + 1                                         # past the attributes byte
    decoded = _varints(arr, pos, limit)                           # timestamp delta
    if decoded is None:
        return None
    ts_delta, pos = decoded
    decoded = _varints(arr, pos, limit)                           # offset delta
    if decoded is None:
        return None
    offset_delta, pos = decoded
    for _ in ("key", "value"):
        if (pos >= end).any():
            return None
        decoded = _varints(arr, pos, limit)
        if decoded is None:
            return None
        length, pos = decoded
        pos = pos + np.maximum(length, 0)                  # negative = null, as scan_records
        if (pos >= end).any():                             # the next field must follow
            return None
    if arr[pos].any():                                     # header counts: only 0 handled here
        return None
    if not (pos + 1 == end).all():
        return None
    consecutive = bool((offset_delta == np.arange(len(begin))).all())
    max_index = int(np.argmax(ts_delta))                   # first index of the max
    return consecutive, int(ts_delta.min()), int(ts_delta[max_index]), max_index
