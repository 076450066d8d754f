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

Every decoding failure raises `CorruptRecordError` (Kafka's CORRUPT_MESSAGE).
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


def decompress(codec, data):
    """Decompress `data`; raise CorruptRecordError if it is not a valid `codec` stream."""
    try:
        if codec == Codec.NONE:
            return bytes(data)
        if codec == Codec.GZIP:
            return _gunzip(data)
        if codec == Codec.SNAPPY:
            return _snappy_decompress(data)
        if codec == Codec.LZ4:
            return _lz4_decompress(data)
        if codec == Codec.ZSTD:
            return _zstd_decompress(data)
    except CorruptRecordError:
        raise
    except Exception as e:  # every codec library has its own exception types
        raise CorruptRecordError(f"cannot decompress {Codec(codec).name} data: {e}") from e
    raise CorruptRecordError(f"unknown compression codec {int(codec)}")


def _gunzip(data):
    out = []
    data = bytes(data)
    while data:
        d = zlib.decompressobj(31)
        out.append(d.decompress(data))
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


def _snappy_decompress(data):
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(view))
    pos, end, out = 16, len(view), []
    while pos < end:
        if pos + 4 > end:
            raise CorruptRecordError("truncated xerial snappy block length")
        (n,) = struct.unpack_from(">i", view, pos)
        pos += 4
        if n < 0 or pos + n > end:
            raise CorruptRecordError("truncated xerial snappy block")
        out.append(cramjam.snappy.decompress_raw(view[pos:pos + n]))    # joined below, not copied
        pos += n
    return b"".join(out)


def _zstd_decompress(data):
    d = _zstd_decompressor.decompressobj()
    out = d.decompress(data)
    if not d.eof:
        raise CorruptRecordError("truncated zstd frame")
    return out


# --- LZ4 -------------------------------------------------------------------------------------

def _lz4_decompress(data):
    data = bytes(data)
    try:
        return lz4.frame.decompress(data)
    except RuntimeError:
        fixed = _fix_lz4_header_checksum(data)
        if fixed is None:
            raise
        return lz4.frame.decompress(fixed)


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
