"""Wire primitives of the Kafka protocol, as used by the generated codecs.

Byte layouts (all integers big-endian, two's complement):

    int8 / int16 / int32 / int64      1 / 2 / 4 / 8 bytes          ">b" ">h" ">i" ">q"
    uint16 / uint32                    2 / 4 bytes                  ">H" ">I"
    float64                            8 bytes IEEE 754             ">d"
    bool                               1 byte, 0 = false            ">?"
    uuid                               16 bytes
    unsigned varint                    7 bits per byte, low group first, high bit = "more";
                                       at most 5 bytes (32 bits)
    varint / varlong                   zigzag-encoded signed value as an unsigned varint
                                       (5 / 10 bytes at most); used inside record batches
    string                             int16 length, then UTF-8; -1 = null
    compact string                     unsigned varint (length + 1), then UTF-8; 0 = null
    bytes / records                    int32 length, then the bytes; -1 = null
    compact bytes / records            unsigned varint (length + 1), then the bytes; 0 = null
    array                              int32 count, then the elements; -1 = null
    compact array                      unsigned varint (count + 1), then the elements; 0 = null
    tagged fields (KIP-482)            unsigned varint count, then per field: unsigned varint
                                       tag, unsigned varint size, `size` bytes; tags ascending

"Compact" encodings and the tagged-field section appear in a message's flexible versions.

Readers take ``(data, pos)`` — `data` a memoryview or bytes — and return ``(value, new_pos)``.
Writers append to a `bytearray`.  Errors leave `offset` unset: the generated decoder fills in
the offset where the failing field starts.  A reader signals bad input with `ProtocolError` (negative or
too-long length, invalid varint) or lets `struct.error`/`IndexError` escape on truncation; the
generated struct decoders convert the latter into `ProtocolError` with the field path and offset.
"""
import struct
import uuid

from .exceptions import ProtocolError
from .records import FileRegion

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")

ZERO_UUID = uuid.UUID(int=0)
_NULL16 = b"\xff\xff"
_NULL32 = b"\xff\xff\xff\xff"
_UUID = uuid.UUID


# --- varints ---------------------------------------------------------------------------

def read_uvarint(data, pos):
    """Unsigned varint of at most 5 bytes (Kafka's ByteUtils.readUnsignedVarint).

    The 1-, 2- and 3-byte forms (values below 2 MiB: every count and most lengths) are
    unrolled; that is measurably faster than the loop in CPython.
    """
    b = data[pos]
    if b < 0x80:
        return b, pos + 1
    b1 = data[pos + 1]
    if b1 < 0x80:
        return (b & 0x7F) | (b1 << 7), pos + 2
    b2 = data[pos + 2]
    if b2 < 0x80:
        return (b & 0x7F) | ((b1 & 0x7F) << 7) | (b2 << 14), pos + 3
    result = (b & 0x7F) | ((b1 & 0x7F) << 7) | ((b2 & 0x7F) << 14)
    shift = 21
    pos += 3
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise ProtocolError("unsigned varint longer than 5 bytes")


def write_uvarint(buf, value):
    if value < 0x80:
        buf.append(value)
        return
    while value >= 0x80:
        buf.append((value & 0x7F) | 0x80)
        value >>= 7
    buf.append(value)


def uvarint_size(value):
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


def _read_zigzag(data, pos, max_bytes):
    result = 0
    shift = 0
    for _ in range(max_bytes):
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
    raise ProtocolError(f"varint longer than {max_bytes} bytes")


def read_varint(data, pos):
    """Zigzag varint (int32, at most 5 bytes) as used in record batches."""
    return _read_zigzag(data, pos, 5)


def read_varlong(data, pos):
    """Zigzag varlong (int64, at most 10 bytes) as used in record batches."""
    return _read_zigzag(data, pos, 10)


def write_varint(buf, value):
    """Zigzag-encodes a signed int32/int64 (the same bytes for varint and varlong)."""
    write_uvarint(buf, (value << 1) ^ (value >> 63))


# --- lengths ---------------------------------------------------------------------------

def _check_length(data, pos, n, what):
    if n > len(data) - pos:
        raise ProtocolError(f"{what} length {n} runs past the end of the data "
                            f"({len(data) - pos} bytes left)")


def past_end(data, pos, n):
    return ProtocolError(f"length {n} runs past the end of the data ({len(data) - pos} bytes left)")


def _null(what):
    return ProtocolError(f"null {what} in a non-nullable field")


# Strings are decoded as Java's `new String(bytes, UTF_8)` does (Kafka's Readable.readString):
# a byte sequence that is not UTF-8 becomes U+FFFD, never an error (a client id in Latin-1 is
# served, not disconnected). A compact string is at most 0x7fff bytes, as Kafka's generated
# readers and writers check ("string field ... had invalid length").
MAX_STRING_LENGTH = 0x7FFF


def _string_too_long(n):
    return ProtocolError(f"string field had invalid length {n}")


# --- strings ---------------------------------------------------------------------------

def read_string(data, pos):
    n = INT16.unpack_from(data, pos)[0]
    pos += 2
    if n < 0:
        raise _null("string")
    end = pos + n
    if end > len(data):
        _check_length(data, pos, n, "string")
    return str(data[pos:end], "utf-8", "replace"), end


def read_nullable_string(data, pos):
    n = INT16.unpack_from(data, pos)[0]
    pos += 2
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(data):
        _check_length(data, pos, n, "string")
    return str(data[pos:end], "utf-8", "replace"), end


def read_compact_string(data, pos):
    n = data[pos]
    if n < 0x80:        # the 1-byte form, inline: most strings and counts
        pos += 1
    else:
        n, pos = read_uvarint(data, pos)
    if n == 0:
        raise _null("string")
    if n - 1 > MAX_STRING_LENGTH:
        raise _string_too_long(n - 1)
    end = pos + n - 1
    if end > len(data):
        _check_length(data, pos, n - 1, "string")
    return str(data[pos:end], "utf-8", "replace"), end


def read_compact_nullable_string(data, pos):
    n = data[pos]
    if n < 0x80:        # the 1-byte form, inline: most strings and counts
        pos += 1
    else:
        n, pos = read_uvarint(data, pos)
    if n == 0:
        return None, pos
    if n - 1 > MAX_STRING_LENGTH:
        raise _string_too_long(n - 1)
    end = pos + n - 1
    if end > len(data):
        _check_length(data, pos, n - 1, "string")
    return str(data[pos:end], "utf-8", "replace"), end


def write_string(buf, value):
    if value is None:
        buf += _NULL16
        return
    b = value.encode()
    if len(b) > MAX_STRING_LENGTH:
        raise _string_too_long(len(b))
    buf += INT16.pack(len(b))
    buf += b


def write_compact_string(buf, value):
    if value is None:
        buf.append(0)
        return
    b = value.encode()
    if len(b) > MAX_STRING_LENGTH:
        raise _string_too_long(len(b))
    write_uvarint(buf, len(b) + 1)
    buf += b


# --- bytes and records -----------------------------------------------------------------

def read_bytes(data, pos):
    n = INT32.unpack_from(data, pos)[0]
    pos += 4
    if n < 0:
        raise _null("bytes")
    _check_length(data, pos, n, "bytes")
    return bytes(data[pos:pos + n]), pos + n


def read_nullable_bytes(data, pos):
    n = INT32.unpack_from(data, pos)[0]
    pos += 4
    if n < 0:
        return None, pos
    _check_length(data, pos, n, "bytes")
    return bytes(data[pos:pos + n]), pos + n


def read_compact_bytes(data, pos):
    n, pos = read_uvarint(data, pos)
    if n == 0:
        raise _null("bytes")
    n -= 1
    _check_length(data, pos, n, "bytes")
    return bytes(data[pos:pos + n]), pos + n


def read_compact_nullable_bytes(data, pos):
    n, pos = read_uvarint(data, pos)
    if n == 0:
        return None, pos
    n -= 1
    _check_length(data, pos, n, "bytes")
    return bytes(data[pos:pos + n]), pos + n


def read_records(data, pos):
    """Records are nullable bytes returned as a slice of `data` — with the memoryview that
    Message.decode_from passes in, a view into the frame, not a copy."""
    n = INT32.unpack_from(data, pos)[0]
    pos += 4
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(data):
        _check_length(data, pos, n, "records")
    return data[pos:end], end


def read_compact_records(data, pos):
    n = data[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = read_uvarint(data, pos)
    if n == 0:
        return None, pos
    end = pos + n - 1
    if end > len(data):
        _check_length(data, pos, n - 1, "records")
    return data[pos:end], end


def _byte_length(value):
    return value.nbytes if type(value) is memoryview else len(value)


def write_bytes(buf, value):
    if value is None:
        buf += _NULL32
        return
    buf += INT32.pack(_byte_length(value))
    buf += value


def write_compact_bytes(buf, value):
    if value is None:
        buf.append(0)
        return
    write_uvarint(buf, _byte_length(value) + 1)
    buf += value


def write_records(buf, pieces, value):
    """Like write_bytes, but a FileRegion becomes its own piece (see protocol.records)."""
    if type(value) is FileRegion:
        buf += INT32.pack(value.length)
        pieces.append(bytes(buf))
        buf.clear()
        pieces.append(value)
    else:
        write_bytes(buf, value)


def write_compact_records(buf, pieces, value):
    if type(value) is FileRegion:
        write_uvarint(buf, value.length + 1)
        pieces.append(bytes(buf))
        buf.clear()
        pieces.append(value)
    else:
        write_compact_bytes(buf, value)


# --- uuid ------------------------------------------------------------------------------

def read_uuid(data, pos):
    end = pos + 16
    if end > len(data):
        _check_length(data, pos, 16, "uuid")
    return _UUID(bytes=bytes(data[pos:end])), end


# --- arrays ----------------------------------------------------------------------------

def read_array_length(data, pos):
    """int32 count (-1 = null); the count is checked against the bytes left, as Kafka does."""
    n = INT32.unpack_from(data, pos)[0]
    pos += 4
    if n > len(data) - pos:
        _check_length(data, pos, n, "array")
    return n, pos


def read_compact_array_length(data, pos):
    n = data[pos]
    if n < 0x80:        # the 1-byte form, inline: most strings and counts
        pos += 1
    else:
        n, pos = read_uvarint(data, pos)
    n -= 1
    if n > len(data) - pos:
        _check_length(data, pos, n, "array")
    return n, pos


_FIXED = {"int8": ("b", 1), "int16": ("h", 2), "int32": ("i", 4), "int64": ("q", 8),
          "uint16": ("H", 2), "uint32": ("I", 4), "float64": ("d", 8)}


def read_fixed_array(data, pos, n, code, size):
    """`n` fixed-width elements with struct format `code` (n already checked >= 0)."""
    end = pos + n * size
    if end > len(data):
        _check_length(data, pos, n * size, "array")
    return list(struct.unpack_from(f">{n}{code}", data, pos)), end


class MultiArrayStructs(dict):
    """Struct objects for a run of fixed-width fields and several fixed-width arrays written
    back to back, keyed by the tuple of array lengths.  `layout` spells the run: field codes,
    and ``[c]`` for an array of code `c` with its count prefix — Metadata's partition is
    ``"hiii[i][i][i]"``, packed as ``table[(3, 3, 0)].pack(e, p, l, ep, 4, r0, r1, r2, 4, i0, i1,
    i2, 1)``.  One pack per partition instead of one per array.  Compact counts of 128 and more
    get an adapter with the same `pack` signature.

    A table with a single array is keyed by its length alone (no tuple to build per call):
    ``ARRAYS["i"][3].pack(3, a, b, c)`` (classic int32 count), ``COMPACT_ARRAYS["i"][3].pack(4,
    a, b, c)`` (compact: count + 1 as an unsigned varint), or with leading fields
    ``fixed_array_structs("hiii", "i", True)[3].pack(e, p, l, ep, 4, a, b, c)``.
    """

    def __init__(self, layout, compact):
        super().__init__()
        self.compact = compact
        self.parts = []                 # (leading field codes, array code or None)
        fields = ""
        i = 0
        while i < len(layout):
            if layout[i] == "[":
                self.parts.append((fields, layout[i + 1]))
                fields = ""
                i += 3
            else:
                fields += layout[i]
                i += 1
        self.parts.append((fields, None))

    def __missing__(self, key):
        counts = (key,) if type(key) is int else key
        count_code = "B" if self.compact else "i"
        if self.compact and max(counts) + 1 >= 0x80:
            packer = _LongMultiArray(self.parts, counts)
        else:
            fmt = ">" + "".join(fields + (f"{count_code}{n}{code}" if code else "")
                                for (fields, code), n in zip(self.parts, counts + (0,)))
            packer = struct.Struct(fmt)
        if len(self) < 4096:
            self[key] = packer
        return packer


class _LongMultiArray:
    """MultiArrayStructs' packer when a compact count needs a multi-byte varint."""
    __slots__ = ("steps",)

    def __init__(self, parts, counts):
        self.steps = [(struct.Struct(">" + fields), len(fields),
                       struct.Struct(f">{n}{code}") if code else None, n)
                      for (fields, code), n in zip(parts, counts + (0,))]

    def pack(self, *values):
        out = bytearray()
        k = 0
        for head, nfields, items, n in self.steps:
            out += head.pack(*values[k:k + nfields])
            k += nfields
            if items is not None:
                write_uvarint(out, values[k])
                out += items.pack(*values[k + 1:k + 1 + n])
                k += 1 + n
        return bytes(out)


_MULTI_TABLES = {}


def fixed_array_structs(fields, code, compact):
    """The shared table for `fields` followed by one array of `code`, keyed by its length."""
    return multi_array_structs(f"{fields}[{code}]", compact)


def multi_array_structs(layout, compact):
    """The shared MultiArrayStructs table for `layout` and count encoding."""
    key = (layout, compact)
    table = _MULTI_TABLES.get(key)
    if table is None:
        table = _MULTI_TABLES[key] = MultiArrayStructs(layout, compact)
    return table


ARRAYS = {code: fixed_array_structs("", code, False) for code in "bhiqHId?"}
COMPACT_ARRAYS = {code: fixed_array_structs("", code, True) for code in "bhiqHId?"}


def write_fixed_array(buf, values, code):
    if values is None:
        buf += _NULL32
        return
    n = len(values)
    buf += ARRAYS[code][n].pack(n, *values)


def write_compact_fixed_array(buf, values, code):
    if values is None:
        buf.append(0)
        return
    n = len(values)
    buf += COMPACT_ARRAYS[code][n].pack(n + 1, *values)


def write_array_length(buf, values):
    buf += _NULL32 if values is None else INT32.pack(len(values))


def write_compact_array_length(buf, values):
    if values is None:
        buf.append(0)
    else:
        write_uvarint(buf, len(values) + 1)


def null_array():
    return _null("array")


def null_struct():
    return _null("struct")


# --- tagged fields ---------------------------------------------------------------------

def read_unknown_tags(data, pos):
    """Reads a tagged-field section holding no known tags: returns ({tag: bytes} or None, pos)."""
    if data[pos] == 0:
        return None, pos + 1
    n, pos = read_uvarint(data, pos)
    unknown = {}
    for _ in range(n):
        tag, pos = read_uvarint(data, pos)
        size, pos = read_uvarint(data, pos)
        _check_length(data, pos, size, "tagged field")
        unknown[tag] = bytes(data[pos:pos + size])
        pos += size
    return unknown, pos


def read_tag_header(data, pos):
    """(tag, size, pos) of one tagged field; the size is checked against the bytes left."""
    tag, pos = read_uvarint(data, pos)
    size, pos = read_uvarint(data, pos)
    _check_length(data, pos, size, "tagged field")
    return tag, size, pos


def write_tags(buf, known, unknown):
    """Writes a tagged-field section.

    `known` is a list of (tag, encoded bytes) in ascending tag order (only the fields that
    differ from their default, as Kafka writes them); `unknown` the tags kept from decoding.
    """
    if unknown:
        known = sorted([*known, *unknown.items()], key=lambda item: item[0])
    write_uvarint(buf, len(known))
    for tag, data in known:
        write_uvarint(buf, tag)
        write_uvarint(buf, len(data))
        buf += data


# --- error context for the generated decoders -------------------------------------------

DECODE_ERRORS = (struct.error, IndexError, UnicodeDecodeError, ValueError, OverflowError,
                 TypeError, MemoryError)


def located(exc, field, index, pos, sub=None):
    """Adds the enclosing field (array index, field of an inlined element) to a ProtocolError."""
    if sub is not None:
        exc.add_field(sub)
    if field is not None:
        exc.add_field(field if index is None else f"{field}[{index}]")
    if exc.offset is None:
        exc.offset = pos
    return exc


def wrapped(exc, field, pos):
    """Turns a low-level failure while reading `field` at `pos` into a ProtocolError."""
    if isinstance(exc, (struct.error, IndexError)):
        reason = "truncated data"
    elif isinstance(exc, UnicodeDecodeError):
        reason = "invalid UTF-8 in string"
    else:
        reason = f"invalid data ({type(exc).__name__}: {exc})"
    return ProtocolError(reason, field=field, offset=pos)


def tag_overrun(pos, end):
    return ProtocolError(f"tagged field value ends at {pos}, past its declared end {end}",
                         offset=end)
NULL_ARRAY = _NULL32
