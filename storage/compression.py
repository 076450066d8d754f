"""Record compression codecs, byte-compatible with what Apache Kafka's Java clients write.

This is the only module that imports codec libraries (STYLE.md point 8); everything else calls
`compress(codec, data)` / `decompress(codec, data)` with a `Codec` taken from the low three bits
of a batch's attributes.

Formats, per codec:

- GZIP: a standard gzip stream (RFC 1952), as `java.util.zip.GZIPOutputStream` writes it.
  Reading accepts concatenated members.
- SNAPPY: Java producers wrap snappy in the *xerial* framing (`SnappyOutputStream`)::

      magic    8 bytes   b"\\x82SNAPPY\\x00"
      version  int32 BE  1
      compat   int32 BE  1
      then blocks:  length int32 BE, raw snappy block of that length   (repeated)

  Each block holds at most 32 KiB of input (xerial's default block size). Some non-Java clients
  write raw snappy with no framing: reading accepts both, telling them apart by the magic.
- LZ4: the LZ4 *frame* format (Kafka's `KafkaLZ4BlockOutputStream`): independent blocks of at
  most 64 KiB, no block checksums, no content size. Kafka before 0.10 (message format magic 0)
  computed the frame header checksum over the magic bytes too; `decompress` repairs that
  checksum and retries when the first attempt fails, which costs one pure-Python xxHash32 of
  at most 15 bytes.
- ZSTD: a zstd frame. Kafka's streaming writer leaves the content size out of the frame header,
  so reading uses the streaming decompressor, which does not need it.

Every decoding failure raises `CorruptRecordError` (Kafka's CORRUPT_MESSAGE), and so does data
that decompresses to more than `max_size` (MAX_DECOMPRESSED_BYTES unless given): a batch of a few
KB of zeros can expand 30,000 times. Each codec stops before it allocates much more than the
limit: gzip by zlib's output limit, snappy by its blocks' declared lengths, lz4 and zstd by an
upper bound read from their frames' block headers (their libraries' own output limits allocate
the limit up front), or in small pieces when the headers do not parse. So such a "decompression
bomb" costs at most that much memory. Kafka streams the records instead and has no such limit;
no producer writes a batch that large (batch.size is 16 KiB to a few MB).
"""
import struct
import zlib
from enum import IntEnum

import cramjam
import lz4.frame
import zstandard

from protocol.errors import ErrorCode, KafkaError


class CorruptRecordError(KafkaError, ValueError):
    """Record data that fails a CRC, a size check or decompression: Kafka's CORRUPT_MESSAGE.

    A KafkaError, so a produce path that lets it escape answers CORRUPT_MESSAGE; also a
    ValueError for readers (recovery, tools) that treat it as plain bad input.
    """

    def __init__(self, message):
        super().__init__(ErrorCode.CORRUPT_MESSAGE, message)


class Codec(IntEnum):
    """Compression codec ids, as stored in the low 3 bits of a batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# Names accepted by the compression.type topic config ("producer" means keep the producer's codec).
CODEC_BY_NAME = {"none": Codec.NONE, "uncompressed": Codec.NONE, "gzip": Codec.GZIP,
                 "snappy": Codec.SNAPPY, "lz4": Codec.LZ4, "zstd": Codec.ZSTD}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)   # magic, version 1, compatible version 1
XERIAL_BLOCK_SIZE = 32 * 1024                            # xerial SnappyOutputStream default
ZSTD_LEVEL = 3                                           # Kafka's default compression.zstd.level
GZIP_LEVEL = 6                                           # java.util.zip.Deflater default

# The most bytes one compressed batch, message set or wrapper may decompress to.
MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024

_zstd_compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
_zstd_decompressor = zstandard.ZstdDecompressor()


def compress(codec, data):
    """Compress `data` (bytes-like) the way Kafka's Java producer would for `codec`."""
    if codec == Codec.NONE:
        return bytes(data)
    if codec == Codec.GZIP:
        c = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec == Codec.SNAPPY:
        return _xerial_compress(data)
    if codec == Codec.LZ4:
        return lz4.frame.compress(bytes(data), block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                                  block_linked=False, content_checksum=False,
                                  store_size=False)
    if codec == Codec.ZSTD:
        return _zstd_compressor.compress(data)
    raise CorruptRecordError(f"unknown compression codec {int(codec)}")


def decompress(codec, data, max_size=MAX_DECOMPRESSED_BYTES):
    """Decompress `data`; raise CorruptRecordError if it is not a valid `codec` stream or
    holds more than `max_size` bytes."""
    try:
        if codec == Codec.NONE:
            return bytes(data)
        if codec == Codec.GZIP:
            return _gunzip(data, max_size)
        if codec == Codec.SNAPPY:
            return _snappy_decompress(data, max_size)
        if codec == Codec.LZ4:
            return _lz4_decompress(data, max_size)
        if codec == Codec.ZSTD:
            return _zstd_decompress(data, max_size)
    except CorruptRecordError:
        raise
    except Exception as e:  # every codec library has its own exception types
        raise CorruptRecordError(f"cannot decompress {Codec(codec).name} data: {e}") from e
    raise CorruptRecordError(f"unknown compression codec {int(codec)}")


def _too_large(codec: str, max_size: int) -> CorruptRecordError:
    return CorruptRecordError(f"{codec} data decompresses to more than {max_size} bytes")


def _gunzip(data, max_size):
    out = []
    left = max_size
    data = bytes(data)
    while data:
        d = zlib.decompressobj(31)
        out.append(d.decompress(data, left + 1))
        left -= len(out[-1])
        if left < 0 or d.unconsumed_tail:
            raise _too_large("GZIP", max_size)
        if not d.eof:
            raise CorruptRecordError("truncated gzip stream")
        data = d.unused_data
    return b"".join(out)


def _xerial_compress(data):
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    for pos in range(0, len(view), XERIAL_BLOCK_SIZE):
        # cramjam's Buffer goes straight into the join: no bytes() copy per block.
        block = cramjam.snappy.compress_raw(view[pos:pos + XERIAL_BLOCK_SIZE])
        parts.append(struct.pack(">i", len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data, max_size):
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        if _snappy_length(view) > max_size:
            raise _too_large("SNAPPY", max_size)
        return bytes(cramjam.snappy.decompress_raw(view))
    pos, end, out = 16, len(view), []
    left = max_size
    while pos < end:
        if pos + 4 > end:
            raise CorruptRecordError("truncated xerial snappy block length")
        (n,) = struct.unpack_from(">i", view, pos)
        pos += 4
        if n < 0 or pos + n > end:
            raise CorruptRecordError("truncated xerial snappy block")
        block = view[pos:pos + n]
        left -= _snappy_length(block)
        if left < 0:
            raise _too_large("SNAPPY", max_size)
        out.append(cramjam.snappy.decompress_raw(block))    # joined below, not copied
        pos += n
    return b"".join(out)


def _snappy_length(block) -> int:
    """The uncompressed length a raw snappy block declares (its leading varint)."""
    length = shift = 0
    for i in range(min(len(block), 5)):
        length |= (block[i] & 0x7F) << shift
        if block[i] < 0x80:
            return length
        shift += 7
    raise CorruptRecordError("bad snappy block length")


def _zstd_decompress(data, max_size):
    # decompressobj has no output limit (and decompress's allocates it up front): the frame's
    # blocks bound what it holds; failing that, the input goes in pieces that no block type
    # can expand past the limit by more than a piece's worth (RLE: 4 bytes -> 128 KiB)
    bound = _zstd_bound(data)
    if bound is not None and bound > max_size:
        raise _too_large("ZSTD", max_size)
    d = _zstd_decompressor.decompressobj()
    if bound is not None:
        out = d.decompress(data)
    else:
        view, pieces, size = memoryview(data), [], 0
        for pos in range(0, len(view), 1024):
            pieces.append(d.decompress(view[pos:pos + 1024]))
            size += len(pieces[-1])
            if size > max_size:
                raise _too_large("ZSTD", max_size)
            if d.eof:
                break
        out = b"".join(pieces)
    if not d.eof:
        raise CorruptRecordError("truncated zstd frame")
    return out


_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_BLOCK_MAX = 128 << 10


def _zstd_bound(data) -> int:
    """The most bytes zstd frames can decompress to: a raw or RLE block's size, at most 128 KiB
    for a compressed block (zstd's Block_Maximum_Size); None when the frames do not parse."""
    view = memoryview(data)
    pos, end, bound = 0, len(view), 0
    while pos + 4 <= end:
        (magic,) = struct.unpack_from("<I", view, pos)
        if magic & 0xFFFFFFF0 == 0x184D2A50:             # a skippable frame
            if pos + 8 > end:
                return None
            pos += 8 + struct.unpack_from("<I", view, pos + 4)[0]
            continue
        if magic != _ZSTD_MAGIC or pos + 5 > end:
            return None
        fhd = view[pos + 4]
        single = fhd & 0x20
        pos += 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 0x03] + \
            ((1 if single else 0), 2, 4, 8)[fhd >> 6]
        while True:
            if pos + 3 > end:
                return None
            header = view[pos] | view[pos + 1] << 8 | view[pos + 2] << 16
            kind, size = (header >> 1) & 0x03, header >> 3
            bound += size if kind < 2 else _ZSTD_BLOCK_MAX
            pos += 3 + (1 if kind == 1 else size)
            if header & 1:
                break
        pos += 4 if fhd & 0x04 else 0
    return bound


# --- LZ4 -------------------------------------------------------------------------------------

def _lz4_decompress(data, max_size):
    data = bytes(data)
    try:
        return _lz4_frame(data, max_size)
    except RuntimeError:
        fixed = _fix_lz4_header_checksum(data)
        if fixed is None:
            raise
        return _lz4_frame(fixed, max_size)


def _lz4_frame(data, max_size):
    # An output limit makes the lz4 library allocate it up front (8x slower on a 1 MB batch):
    # the frame's blocks bound what it holds instead, each at most the block size its header
    # names (64 KiB in Kafka's frames).
    bound = _lz4_bound(data)
    if bound is None:           # the library says what is wrong, within the limit
        d = lz4.frame.LZ4FrameDecompressor()
        out = d.decompress(data, max_length=max_size + 1)
        if len(out) > max_size or (not d.eof and not d.needs_input):
            raise _too_large("LZ4", max_size)
        if not d.eof:
            raise CorruptRecordError("truncated lz4 frame")
        return out
    if bound > max_size:
        raise _too_large("LZ4", max_size)
    return lz4.frame.decompress(data)


_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}


def _lz4_bound(data) -> int:
    """The most bytes the first LZ4 frame (all the library reads) can decompress to: blocks x
    block size; None when it does not parse."""
    if len(data) < 7 or data[:4] != b"\x04\x22\x4d\x18":
        return None
    flg, bd = data[4], data[5]
    block_max = _LZ4_BLOCK_MAX.get((bd >> 4) & 0x07)
    if block_max is None:
        return None
    pos = 7 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    checksum = 4 if flg & 0x10 else 0
    blocks = 0
    while pos + 4 <= len(data):
        (size,) = struct.unpack_from("<I", data, pos)
        if size == 0:
            break
        blocks += 1
        pos += 4 + (size & 0x7FFFFFFF) + checksum
    return blocks * block_max


def _fix_lz4_header_checksum(data):
    """Recompute the frame header checksum over the descriptor only (Kafka < 0.10 bug), or None."""
    if len(data) < 7 or data[:4] != b"\x04\x22\x4d\x18":
        return None
    flg = data[4]
    desc_len = 2 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    hc_pos = 4 + desc_len
    if len(data) <= hc_pos:
        return None
    hc = (_xxh32(data[4:hc_pos]) >> 8) & 0xFF
    if hc == data[hc_pos]:
        return None
    return data[:hc_pos] + bytes([hc]) + data[hc_pos + 1:]


def kafka08_lz4_header(frame):
    """Rewrite an LZ4 frame's header checksum the way Kafka 0.8/0.9 computed it (over the magic
    bytes too), which is what magic 0 readers expect; Kafka does this when it writes magic 0."""
    if len(frame) < 7 or frame[:4] != b"\x04\x22\x4d\x18":
        raise ValueError("not an LZ4 frame")
    flg = frame[4]
    hc_pos = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    return frame[:hc_pos] + bytes([(_xxh32(frame[:hc_pos]) >> 8) & 0xFF]) + frame[hc_pos + 1:]


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x, r):
    return ((x << r) | (x >> (32 - r))) & _M32


def _xxh32(buf, seed=0):
    """xxHash32 of a short buffer (only used on LZ4 frame descriptors, < 16 bytes)."""
    n = len(buf)
    pos = 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed, (seed - _P1) & _M32]
        while pos + 16 <= n:
            for i in range(4):
                (lane,) = struct.unpack_from("<I", buf, pos)
                v[i] = (_rotl((v[i] + lane * _P2) & _M32, 13) * _P1) & _M32
                pos += 4
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while pos + 4 <= n:
        (lane,) = struct.unpack_from("<I", buf, pos)
        h = (_rotl((h + lane * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        h = (_rotl((h + buf[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h
