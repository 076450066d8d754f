"""Vectorized decoding of v2 records into Arrow columns (numpy), the hot path of every Spark job.

Theory of operation
-------------------
A record (layout in spark_jobs/decoder.py) is a chain of varints and byte strings, and where record
i+1 starts depends on record i's length: finding the record starts is inherently sequential. So the
work is split in two:

1. `record_starts(data, count)` finds where each record of one batch starts. Fast path: when the
   batch is `count` records of one size s (fixed-size keys and values, the common case), the starts
   are 0, s, 2s...; this is *verified*, not assumed: every record's length prefix must equal the
   first one's bytes, which by induction proves each record ends where the next begins. Otherwise a
   short Python loop follows the length prefixes.
2. `decode_chunk` takes the records of many batches at once (their records sections concatenated)
   and decodes every field of every record with whole-array numpy operations: a varint is decoded
   for all records in a few passes (one per continuation byte present), keys and values become Arrow
   binary arrays built from buffers (a byte mask from the start/end positions selects their bytes,
   in order, in one pass). Only headers, when asked for and present, are decoded per record.

Bounds are then checked as arrays: a truncated or inconsistent record raises CorruptBatchError.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

INT64 = np.int64


class CorruptBatchError(ValueError):
    """A batch inside the committed range fails its CRC or cannot be decoded."""


def _varint_at(data, pos: int) -> tuple[int, int]:
    """(zigzag value, size) of the varint at pos, in Python (for the sequential parts)."""
    result = shift = 0
    size = 0
    while True:
        b = data[pos + size]
        size += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), size
        shift += 7
        if shift > 63:
            raise CorruptBatchError(f"varint too long at {pos}")


PROBE_WINDOW = 64      # records checked per vectorized probe (grows x4 while runs continue)
PYTHON_STEPS = 64      # records walked in Python after a probe finds a short run


def record_starts(data: bytes, count: int) -> np.ndarray:
    """Start position of each of the `count` records in one batch's records section.

    Records of one size s come in runs (sizes change only where a varint gains a byte, e.g. at
    offset delta 64, or where key/value sizes change). From a record of size s, a vectorized probe
    guesses that the next k records start every s bytes and *verifies* it: each guessed record's
    length prefix must equal this one's bytes, which by induction proves each ends where the next
    begins; the first mismatch is a real record start of another size. Short runs fall back to a
    Python walk of the length prefixes.
    """
    if count <= 0:
        return np.zeros(0, INT64)
    arr = np.frombuffer(data, np.uint8)
    pieces = []
    pos = done = 0
    window = PROBE_WINDOW
    try:
        while done < count:
            length, size = _varint_at(data, pos)
            record_size = size + length
            k = min(window, count - done, (len(data) - pos) // record_size if record_size > 0 else 0)
            matched = 0
            if k > 1:
                cand = np.arange(pos, pos + k * record_size, record_size, dtype=INT64)
                same = arr[cand] == arr[pos]
                for j in range(1, size):
                    same &= arr[cand + j] == arr[pos + j]
                matched = k if same.all() else int(np.argmin(same))
                pieces.append(cand[:matched])
                done += matched
                pos += matched * record_size
                window = window * 4 if matched == k else PROBE_WINDOW
            if matched < 8 and done < count:         # irregular sizes: walk a while in Python
                steps = []
                for _ in range(min(PYTHON_STEPS, count - done)):
                    steps.append(pos)
                    b = data[pos]
                    if b < 0x80:                     # lengths are >= 0: zigzag is a shift
                        pos += 1 + (b >> 1)
                    elif data[pos + 1] < 0x80:       # two-byte length: records of 64..8191 bytes
                        pos += 2 + (((b & 0x7F) | (data[pos + 1] << 7)) >> 1)
                    else:
                        length, size = _varint_at(data, pos)
                        pos += size + length
                pieces.append(np.array(steps, INT64))
                done += len(steps)
    except IndexError:
        raise CorruptBatchError("records section is truncated") from None
    if pos != len(data):
        raise CorruptBatchError(f"records end at {pos}, the section is {len(data)} bytes")
    return np.concatenate(pieces) if len(pieces) != 1 else pieces[0]


def varints(arr: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decodes the zigzag varint at every position: (values int64, sizes int64)."""
    b = arr[pos].astype(np.uint64)
    value = b & np.uint64(0x7F)
    size = np.ones(len(pos), INT64)
    more = np.nonzero(b >= 0x80)[0]
    shift = 7
    while len(more):
        if shift > 63:
            raise CorruptBatchError("varint longer than 10 bytes")
        bk = arr[pos[more] + size[more]].astype(np.uint64)
        value[more] |= (bk & np.uint64(0x7F)) << np.uint64(shift)
        size[more] += 1
        more = more[bk >= 0x80]
        shift += 7
    signed = (value >> np.uint64(1)).astype(INT64) ^ -(value & np.uint64(1)).astype(INT64)
    return signed, size


def binary_array(arr: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """An Arrow binary array of arr[starts[i]:starts[i]+lengths[i]] (null where length < 0).

    The slices are in increasing, non-overlapping order, so a +1/-1 mark at each start/end and a
    running sum select exactly their bytes: one pass over arr instead of a Python loop.
    """
    n = len(starts)
    valid = lengths >= 0
    lengths = np.where(valid, lengths, 0)
    offsets = np.zeros(n + 1, INT64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > 2 ** 31 - 1:
        raise CorruptBatchError("more than 2 GiB of keys or values in one chunk")
    # A byte mask of the slices, built from alternating runs: gap, slice 0, gap, slice 1, ..., tail.
    ends = starts + lengths
    runs = np.empty(2 * n + 1, INT64)
    runs[0:-1:2] = starts - np.concatenate(([0], ends[:-1]))
    runs[1::2] = lengths
    runs[-1] = len(arr) - (ends[-1] if n else 0)
    pattern = np.zeros(2 * n + 1, np.bool_)
    pattern[1::2] = True
    mask = np.repeat(pattern, runs)
    selected = arr[mask]
    null_count = int(n - valid.sum())
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets.astype(np.int32)),
                                                  pa.py_buffer(selected)], null_count=null_count)


def decode_chunk(data: bytes, starts: np.ndarray, record_base_offset: np.ndarray,
                 record_base_ts: np.ndarray, record_log_append_ts: np.ndarray, with_headers: bool):
    """Decodes every record whose start is in `starts` (positions in data, the concatenated records
    sections of several batches). Per-record batch fields come as arrays of the same length.

    record_log_append_ts: the batch's max_timestamp for LogAppendTime batches, else -1 (-1 is never
    a log append time). Returns (keys, values, offsets, timestamps, headers or None).
    """
    arr = np.frombuffer(data, np.uint8)
    n = len(starts)
    try:
        length, size = varints(arr, starts)
        record_end = starts + size + length
        pos = starts + size + 1                         # skip attributes
        ts_delta, size = varints(arr, pos)
        pos += size
        offset_delta, size = varints(arr, pos)
        pos += size
        key_len, size = varints(arr, pos)
        key_start = pos + size
        pos = key_start + np.maximum(key_len, 0)
        value_len, size = varints(arr, pos)
        value_start = pos + size
        value_end = value_start + np.maximum(value_len, 0)
    except IndexError:
        raise CorruptBatchError("a record runs past its batch") from None
    if n and ((value_end >= record_end) | (length < 0) | (record_end > len(arr))).any():
        raise CorruptBatchError("a record's fields do not fit its length")
    keys = binary_array(arr, key_start, key_len)
    values = binary_array(arr, value_start, value_len)
    offsets = record_base_offset + offset_delta
    timestamps = np.where(record_log_append_ts >= 0, record_log_append_ts, record_base_ts + ts_delta)
    headers = None
    if with_headers:
        headers = [[] for _ in range(n)]
        counts, _ = varints(arr, value_end)
        for i in np.nonzero(counts)[0].tolist():
            headers[i] = _decode_headers(data, int(value_end[i]))
    return keys, values, offsets, timestamps, headers


def _decode_headers(data, pos: int) -> list:
    count, size = _varint_at(data, pos)
    pos += size
    result = []
    for _ in range(count):
        n, size = _varint_at(data, pos)
        pos += size
        key = bytes(data[pos:pos + n]).decode("utf-8", "replace")
        pos += n
        n, size = _varint_at(data, pos)
        pos += size
        value = None if n < 0 else bytes(data[pos:pos + n])
        pos += max(n, 0)
        result.append((key, value))
    return result
