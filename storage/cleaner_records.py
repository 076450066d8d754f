"""The log cleaner's two walks over a batch's records: build the key map, filter a batch.

Both work on an uncompressed v2 records section (storage/records.py has the layout); the cleaner
(storage/cleaner.py) decompresses and recompresses around them.

`map_keys(section, count, base_offset, offset_map)` sets ``offset_map[key] = offset`` for every
record that has a key (a tombstone too: it is the latest value of its key). It returns
(keys added, bytes of the keys added) so the cleaner can charge the map's memory.

`filter_records(...)` decides which records of one batch stay, with Kafka's rule (LogCleaner's
shouldRetainRecord):

* a record past the mapped range (offset > `latest_offset`) stays: it was not looked at;
* a record without a key goes (compacted topics refuse them; older data may hold some);
* a record whose key has a later offset in the map goes;
* a tombstone (null value) goes once `retain_deletes` is false (its batch's delete horizon
  passed); otherwise it stays.

The retained records keep their offsets (the batch keeps its base offset); their timestamps are
re-encoded against the new base timestamp: the batch's delete horizon if it has one
(`horizon_ms` >= 0), else `new_horizon_ms` when a tombstone stays and `new_horizon_ms` >= 0
(Kafka's KIP-534: the first clean that keeps a tombstone stamps the batch with now +
delete.retention.ms), else the first retained record's timestamp, as Kafka's
MemoryRecordsBuilder sets it. Returns (retained count, new section or None when every record
stays and no horizon is set, new base timestamp, max timestamp of the retained records or -1,
horizon set, keyless records dropped).

storage/_records.c has compiled twins of both (a few hundred ns per record less); they return
None for a section that is not well formed and the Python walk here then raises the precise
CorruptRecordError. KBROKER_PURE_PYTHON=1 turns them off; tests/storage/test_cleaner_records.py
holds both to the same answers.
"""
import os

from storage.compression import CorruptRecordError
from storage.records import _read_varint, _skip_headers, encode_varint

try:        # optional compiled walks (storage/_records.c, built by setup.py)
    from storage._records import filter_records as _filter_records_c
    from storage._records import map_keys as _map_keys_c
except ImportError:
    _filter_records_c = _map_keys_c = None
if os.environ.get("KBROKER_PURE_PYTHON"):
    _filter_records_c = _map_keys_c = None


def _walk(data, count):
    """(start, end, ts_pos, ts_end, ts_delta, offset_delta, key_len, key_pos, value_len) of
    every record; raises CorruptRecordError for a section that is not well formed."""
    out = []
    pos, size = 0, len(data)
    try:
        for _ in range(count):
            start = pos
            length, pos = _read_varint(data, pos)
            if length < 6 or length > size - pos:
                raise CorruptRecordError(f"record length {length} does not fit its section")
            end = pos + length
            pos += 1                                            # attributes
            ts_pos = pos
            ts_delta, pos = _read_varint(data, pos)
            ts_end = pos
            offset_delta, pos = _read_varint(data, pos)
            key_len, pos = _read_varint(data, pos)
            key_pos = pos
            if key_len > 0:
                pos += key_len
            value_len, pos = _read_varint(data, pos)
            if value_len > 0:
                pos += value_len
            if pos >= end:
                raise CorruptRecordError("record fields run past its length")
            pos = _skip_headers(data, pos)
            if pos != end:
                raise CorruptRecordError(f"record length {length} does not match its fields")
            out.append((start, end, ts_pos, ts_end, ts_delta, offset_delta, key_len, key_pos,
                        value_len))
    except IndexError:
        raise CorruptRecordError("records section is truncated") from None
    if pos != size:
        raise CorruptRecordError(f"{size - pos} bytes after the last record")
    return out


def map_keys(section, count, base_offset, offset_map):
    """See the module docstring."""
    if _map_keys_c is not None:
        result = _map_keys_c(section, count, base_offset, offset_map)
        if result is not None:
            return result
    return map_keys_py(section, count, base_offset, offset_map)


def map_keys_py(section, count, base_offset, offset_map):
    data = bytes(section)
    new_keys = new_bytes = 0
    for _, _, _, _, _, offset_delta, key_len, key_pos, _ in _walk(data, count):
        if key_len < 0:
            continue
        key = data[key_pos:key_pos + key_len]
        before = len(offset_map)
        offset_map[key] = base_offset + offset_delta
        if len(offset_map) != before:
            new_keys += 1
            new_bytes += key_len
    return new_keys, new_bytes


def filter_records(section, count, base_offset, base_timestamp, offset_map, latest_offset,
                   retain_deletes, horizon_ms, new_horizon_ms):
    """See the module docstring."""
    if _filter_records_c is not None:
        result = _filter_records_c(section, count, base_offset, base_timestamp, offset_map,
                                   latest_offset, retain_deletes, horizon_ms, new_horizon_ms)
        if result is not None:
            return result
    return filter_records_py(section, count, base_offset, base_timestamp, offset_map,
                             latest_offset, retain_deletes, horizon_ms, new_horizon_ms)


def filter_records_py(section, count, base_offset, base_timestamp, offset_map, latest_offset,
                      retain_deletes, horizon_ms, new_horizon_ms):
    data = bytes(section)
    kept = []
    keyless = 0
    tombstone = False
    first_ts = max_ts = None
    for rec in _walk(data, count):
        _, _, _, _, ts_delta, offset_delta, key_len, key_pos, value_len = rec
        offset = base_offset + offset_delta
        keep = True
        if offset <= latest_offset:
            if key_len < 0:
                keep = False
                keyless += 1
            else:
                found = offset_map.get(data[key_pos:key_pos + key_len], -1)
                if offset < found or (value_len < 0 and not retain_deletes):
                    keep = False
        if keep:
            kept.append(rec)
            ts = base_timestamp + ts_delta
            tombstone = tombstone or value_len < 0
            if first_ts is None:
                first_ts = max_ts = ts
            elif ts > max_ts:
                max_ts = ts
    max_ts = -1 if max_ts is None else max_ts
    set_horizon = horizon_ms < 0 <= new_horizon_ms and tombstone
    if len(kept) == count and not set_horizon:
        return count, None, base_timestamp, max_ts, False, keyless
    new_base = horizon_ms if horizon_ms >= 0 else (
        new_horizon_ms if set_horizon else base_timestamp if first_ts is None else first_ts)
    section = _reencoded(data, kept, base_timestamp, new_base)
    return len(kept), section, new_base, max_ts, set_horizon, keyless


def _reencoded(data, records, base_timestamp, new_base):
    """`records` (from `_walk`) joined, each timestamp delta against `new_base`."""
    parts = []
    for _, end, ts_pos, ts_end, ts_delta, *_ in records:
        body = b"".join((data[ts_pos - 1:ts_pos],
                         encode_varint(base_timestamp + ts_delta - new_base),
                         data[ts_end:end]))
        parts.append(encode_varint(len(body)))
        parts.append(body)
    return b"".join(parts)


def rebase_timestamps(section, count, base_timestamp, new_base_timestamp):
    """Every record of `section`, its timestamp delta re-encoded against `new_base_timestamp`
    (a marker batch getting its delete horizon; markers hold one record, so Python is enough)."""
    data = bytes(section)
    return _reencoded(data, _walk(data, count), base_timestamp, new_base_timestamp)
