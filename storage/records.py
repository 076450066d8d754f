"""Records inside a RecordBatch v2: varint encoding and decoding, tight because it runs per record.

Each record in a batch's (possibly compressed) records section is laid out as::

    length            varint    size of the rest of the record
    attributes        int8      unused, always 0
    timestamp_delta   varlong   timestamp - batch base_timestamp
    offset_delta      varint    offset - batch base_offset
    key_length        varint    -1 for a null key
    key               bytes
    value_length      varint    -1 for a null value
    value             bytes
    headers_count     varint
    headers:          header_key_length varint, header_key utf-8,
                      header_value_length varint (-1 = null), header_value

Kafka's "varint" is protobuf's zigzag varint: `(n << 1) ^ (n >> 63)` in 7-bit little-endian
groups. The decoder inlines the one-byte case (values -64..63), which covers attributes-adjacent
fields, null keys, small offset deltas and header counts; longer varints go through `_read_varint`.
Truncated or overlong input raises `CorruptRecordError`; a record whose fields do not add up to
its declared length is corrupt too.

`Record` is a named tuple (cheap to build, attribute access for callers).

storage/_records.c holds compiled twins of the two per-record loops, `decode_records` and the
builder's encoding (record_batch.py); they are optional (setup.py) and used when built. The
Python here stays the reference: tests/storage/test_records_c.py holds both to the same answers,
and KBROKER_PURE_PYTHON=1 turns the compiled ones off.
"""
import os
from collections import namedtuple

from storage.compression import CorruptRecordError

try:        # optional compiled decode/encode loops (storage/_records.c, built by setup.py)
    from storage._records import decode_records as _decode_records_c
    from storage._records import encode_records as _encode_records_c
except ImportError:
    _decode_records_c = _encode_records_c = None
if os.environ.get("KBROKER_PURE_PYTHON"):
    _decode_records_c = _encode_records_c = None

Record = namedtuple("Record", "offset timestamp key value headers sequence attributes")
Record.__doc__ = ("One record: offset and timestamp are absolute; key/value are bytes or None; "
                  "headers is a list of (str, bytes | None); sequence is -1 when the batch has no "
                  "producer sequence.")
_new_record = tuple.__new__

INT32_MAX = 2**31 - 1

# Zigzag decoding by table: _ZZ1[b] for a one-byte varint b (< 0x80), _ZZ2[(c << 7) | (b & 0x7F)]
# for a two-byte varint b, c. A list subscript is cheaper than the shifts and xor in Python.
_ZZ1 = [(v >> 1) ^ -(v & 1) for v in range(1 << 7)]
_ZZ2 = [(v >> 1) ^ -(v & 1) for v in range(1 << 14)]


def _read_varint(data, pos):
    """Decode the zigzag varint at `pos`; return (value, next position)."""
    shift = 0
    result = 0
    while True:
        b = data[pos]
        pos += 1
        if shift == 63 and b & 0x7F > 1:
            raise CorruptRecordError("varint does not fit 64 bits")
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint is longer than 10 bytes")


def decode_records(data, count, base_offset, base_timestamp, base_sequence, log_append_time):
    """Parse `count` records from `data` (bytes). `log_append_time` is the batch max_timestamp
    when the batch uses LogAppendTime (every record then carries that timestamp), else None.

    Runs storage/_records.c when it was built and `data` is bytes (about 5x faster: a namedtuple
    costs ~250 ns to create from Python, the batch bench's whole budget per record is ~1.35 us),
    else `decode_records_py`; both give the same records and raise the same CorruptRecordError.
    """
    if _decode_records_c is not None and data.__class__ is bytes:
        return _decode_records_c(data, count, base_offset, base_timestamp, base_sequence,
                                 log_append_time, Record, CorruptRecordError)
    return decode_records_py(data, count, base_offset, base_timestamp, base_sequence,
                             log_append_time)


def decode_records_py(data, count, base_offset, base_timestamp, base_sequence, log_append_time):
    """The pure-Python decode_records (the reference the compiled one is tested against).

    Every varint is decoded inline for its one- and two-byte forms (values -8192..8191), which
    covers record lengths, key/value lengths under 8 KiB and offset/timestamp deltas of typical
    batches; longer ones call `_read_varint`. This function is the decode hot path (bench/).
    """
    out = []
    append = out.append
    new = _new_record
    zz1 = _ZZ1
    zz2 = _ZZ2
    pos = 0
    try:
        for _ in range(count):
            b = data[pos]
            if b < 0x80:
                length = zz1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    length = zz2[(c << 7) | (b & 0x7F)]
                    pos += 2
                else:
                    length, pos = _read_varint(data, pos)
            end = pos + length
            attributes = data[pos]
            b = data[pos + 1]
            if b < 0x80:
                ts_delta = zz1[b]
                pos += 2
            else:
                c = data[pos + 2]
                if c < 0x80:
                    ts_delta = zz2[(c << 7) | (b & 0x7F)]
                    pos += 3
                else:
                    ts_delta, pos = _read_varint(data, pos + 1)
            b = data[pos]
            if b < 0x80:
                offset_delta = zz1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    offset_delta = zz2[(c << 7) | (b & 0x7F)]
                    pos += 2
                else:
                    offset_delta, pos = _read_varint(data, pos)
            b = data[pos]
            if b < 0x80:
                n = zz1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    n = zz2[(c << 7) | (b & 0x7F)]
                    pos += 2
                else:
                    n, pos = _read_varint(data, pos)
            if n < 0:
                key = None
            else:
                key = data[pos:pos + n]
                pos += n
            b = data[pos]
            if b < 0x80:
                n = zz1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    n = zz2[(c << 7) | (b & 0x7F)]
                    pos += 2
                else:
                    n, pos = _read_varint(data, pos)
            if n < 0:
                value = None
            else:
                value = data[pos:pos + n]
                pos += n
            b = data[pos]
            if b == 0:
                headers = []
                pos += 1
            elif b == 2 and data[pos + 1] < 0x80 and not data[pos + 1] & 1:
                # Exactly one header whose key is under 64 bytes (a trace id, a type tag):
                # inline, as a call to _decode_headers costs as much as the rest of the record.
                start = pos + 2
                pos = start + (data[pos + 1] >> 1)
                hkey = data[start:pos]
                b = data[pos]
                if b < 0x80 and not b & 1:
                    start = pos + 1
                    pos = start + (b >> 1)
                    headers = [(hkey.decode(), data[start:pos])]
                elif b == 1:
                    pos += 1
                    headers = [(hkey.decode(), None)]
                else:
                    headers, pos = _decode_headers(data, start - 2)
            else:
                headers, pos = _decode_headers(data, pos)
            if pos != end:
                raise CorruptRecordError(f"record length {length} does not match its fields")
            if base_sequence < 0:
                sequence = -1
            else:
                sequence = base_sequence + offset_delta
                if sequence > INT32_MAX:
                    sequence -= INT32_MAX + 1
            append(new(Record, (base_offset + offset_delta,
                                base_timestamp + ts_delta if log_append_time is None
                                else log_append_time,
                                key, value, headers, sequence, attributes)))
    except IndexError:
        raise CorruptRecordError("records section is truncated") from None
    except UnicodeDecodeError:
        raise CorruptRecordError("header key is not valid UTF-8") from None
    if pos != len(data):
        raise CorruptRecordError(f"{len(data) - pos} bytes left after the last record")
    return out


def _decode_headers(data, pos):
    """Headers at `pos`: (list of (str, bytes | None), next position). One-byte varints (count,
    key and value lengths under 64) are decoded inline; anything else takes the general path."""
    count = data[pos]
    if count >= 0x80 or count & 1:
        return _decode_headers_general(data, pos)
    count >>= 1
    start = pos
    pos += 1
    headers = []
    try:
        for _ in range(count):
            n = data[pos]
            if n >= 0x80 or n & 1:
                return _decode_headers_general(data, start)
            n >>= 1
            pos += 1
            hkey = data[pos:pos + n].decode()
            pos += n
            n = data[pos]
            if n == 1:
                hvalue = None
                pos += 1
            elif n >= 0x80 or n & 1:
                return _decode_headers_general(data, start)
            else:
                n >>= 1
                pos += 1
                hvalue = data[pos:pos + n]
                pos += n
            headers.append((hkey, hvalue))
    except UnicodeDecodeError:
        raise CorruptRecordError("header key is not valid UTF-8") from None
    if pos > len(data):
        raise CorruptRecordError("header extends past the records section")
    return headers, pos


def _decode_headers_general(data, pos):
    count, pos = _read_varint(data, pos)
    if count < 0:
        raise CorruptRecordError(f"negative header count {count}")
    headers = []
    for _ in range(count):
        n, pos = _read_varint(data, pos)
        if n < 0 or pos + n > len(data):
            raise CorruptRecordError(f"bad header key length {n}")
        try:
            hkey = data[pos:pos + n].decode()
        except UnicodeDecodeError:
            raise CorruptRecordError("header key is not valid UTF-8") from None
        pos += n
        n, pos = _read_varint(data, pos)
        if n < 0:
            hvalue = None
        else:
            if pos + n > len(data):
                raise CorruptRecordError(f"bad header value length {n}")
            hvalue = data[pos:pos + n]
            pos += n
        headers.append((hkey, hvalue))
    return headers, pos


def scan_records(data, count, base_timestamp):
    """One pass over uncompressed records without building them (validation's fast path).

    Checks each record's length against the section and walks past key, value and headers.
    Returns (offset deltas are 0..count-1, min timestamp, max timestamp, index of the first
    record with the max timestamp); timestamps are -1 and the index -1 when count is 0.
    Varints are decoded inline like in decode_records.
    """
    zz1 = _ZZ1
    zz2 = _ZZ2
    pos = 0
    consecutive = True
    min_delta = max_delta = None
    max_index = -1
    size = len(data)
    try:
        for i in range(count):
            b = data[pos]
            if b < 0x80:
                length = zz1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    length = zz2[(c << 7) | (b & 0x7F)]
                    pos += 2
                else:
                    length, pos = _read_varint(data, pos)
            end = pos + length
            if length < 6 or end > size:
                raise CorruptRecordError(f"record {i} has an invalid length {length}")
            b = data[pos + 1]
            if b < 0x80:
                ts_delta = zz1[b]
                pos += 2
            else:
                c = data[pos + 2]
                if c < 0x80:
                    ts_delta = zz2[(c << 7) | (b & 0x7F)]
                    pos += 3
                else:
                    ts_delta, pos = _read_varint(data, pos + 1)
            b = data[pos]
            if b < 0x80:
                offset_delta = zz1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    offset_delta = zz2[(c << 7) | (b & 0x7F)]
                    pos += 2
                else:
                    offset_delta, pos = _read_varint(data, pos)
            if offset_delta != i:
                consecutive = False
            b = data[pos]
            if b < 0x80:
                n = zz1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    n = zz2[(c << 7) | (b & 0x7F)]
                    pos += 2
                else:
                    n, pos = _read_varint(data, pos)
            if n > 0:
                pos += n
            b = data[pos]
            if b < 0x80:
                n = zz1[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 0x80:
                    n = zz2[(c << 7) | (b & 0x7F)]
                    pos += 2
                else:
                    n, pos = _read_varint(data, pos)
            if n > 0:
                pos += n
            if data[pos] == 0:
                pos += 1
            else:
                pos = _skip_headers(data, pos)
            if pos != end:
                raise CorruptRecordError(f"record {i}: length {length} does not match its fields")
            if max_delta is None:
                min_delta = max_delta = ts_delta
                max_index = i
            elif ts_delta > max_delta:
                max_delta, max_index = ts_delta, i
            elif ts_delta < min_delta:
                min_delta = ts_delta
    except IndexError:
        raise CorruptRecordError("records section is truncated") from None
    if pos != size:
        raise CorruptRecordError(f"{size - pos} bytes left after the last record")
    if max_delta is None:
        return consecutive, -1, -1, -1
    return consecutive, base_timestamp + min_delta, base_timestamp + max_delta, max_index


def _skip_headers(data, pos):
    count, pos = _read_varint(data, pos)
    if count < 0:
        raise CorruptRecordError(f"negative header count {count}")
    for _ in range(count):
        n, pos = _read_varint(data, pos)
        if n < 0:
            raise CorruptRecordError(f"negative header key length {n}")
        pos += n
        n, pos = _read_varint(data, pos)
        if n > 0:
            pos += n
    return pos


# --- encoding --------------------------------------------------------------------------------

def _build_varint_table(limit):
    table = []
    for zz in range(limit):
        out = bytearray()
        v = zz
        while v >= 0x80:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)
        table.append(bytes(out))
    return table


# Zigzag-encoded values below 2**14 (signed values -8192..8191) fit in two bytes: precompute them.
_VARINT_TABLE = _build_varint_table(1 << 14)
_NULL = _VARINT_TABLE[1]         # varint(-1)
_ZERO = _VARINT_TABLE[0]


def encode_varint(n):
    """Zigzag varint of a signed 64-bit integer."""
    zz = (n << 1) ^ (n >> 63)
    if zz < 16384:
        return _VARINT_TABLE[zz]
    out = bytearray()
    while zz >= 0x80:
        out.append((zz & 0x7F) | 0x80)
        zz >>= 7
    out.append(zz)
    return bytes(out)


_HEADER_KEY_CACHE = {}           # header key str -> its length varint + UTF-8 bytes
_HEADER_KEY_CACHE_MAX = 1024     # header keys are few in practice; bound it anyway


def _encode_header_key(hkey):
    hk = hkey.encode() if isinstance(hkey, str) else bytes(hkey)
    encoded = encode_varint(len(hk)) + hk
    if isinstance(hkey, str) and len(_HEADER_KEY_CACHE) < _HEADER_KEY_CACHE_MAX:
        _HEADER_KEY_CACHE[hkey] = encoded
    return encoded


def encode_headers(headers):
    """The headers part of a record: count varint, then each key and value."""
    table = _VARINT_TABLE
    n = len(headers)
    parts = [table[n << 1] if n < 8192 else encode_varint(n)]
    append = parts.append
    cache = _HEADER_KEY_CACHE
    for hkey, hvalue in headers:
        encoded_key = cache.get(hkey) if isinstance(hkey, str) else None
        append(encoded_key if encoded_key is not None else _encode_header_key(hkey))
        if hvalue is None:
            append(_NULL)
        else:
            n = len(hvalue)
            append(table[n << 1] if n < 8192 else encode_varint(n))
            append(hvalue)
    return b"".join(parts)


def encode_record_body(offset_delta, timestamp_delta, key, value, headers):
    """One record's bytes after its length varint (the builder adds the length)."""
    table = _VARINT_TABLE
    zz = (timestamp_delta << 1) ^ (timestamp_delta >> 63)
    if key is None:
        key_len, key = _NULL, b""
    else:
        n = len(key)
        key_len = table[n << 1] if n < 8192 else encode_varint(n)
    if value is None:
        value_len, value = _NULL, b""
    else:
        n = len(value)
        value_len = table[n << 1] if n < 8192 else encode_varint(n)
    return b"".join((
        b"\x00",                                                   # attributes
        table[zz] if zz < 16384 else encode_varint(timestamp_delta),
        table[offset_delta << 1] if offset_delta < 8192 else encode_varint(offset_delta),
        key_len, key, value_len, value,
        encode_headers(headers) if headers else _ZERO))


def encode_record(offset_delta, timestamp_delta, key, value, headers):
    """One record's bytes, including its leading length varint."""
    body = encode_record_body(offset_delta, timestamp_delta, key, value, headers)
    n = len(body)
    return (_VARINT_TABLE[n << 1] if n < 8192 else encode_varint(n)) + body
