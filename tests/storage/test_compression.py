"""Codecs: round trips, Java-compatible framings, and corrupt input raising CorruptRecordError."""
import gzip
import struct

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.compression import (XERIAL_HEADER, Codec, CorruptRecordError, _xxh32, compress,
                                 decompress)


@settings(max_examples=60, deadline=None)
@given(codec=st.sampled_from(list(Codec)), data=st.binary(max_size=5000))
def test_round_trip(codec, data):
    assert decompress(codec, compress(codec, data)) == data


def test_snappy_writes_xerial_framing_in_32k_blocks():
    data = bytes(range(256)) * 300          # 76,800 bytes -> 3 blocks
    out = compress(Codec.SNAPPY, data)
    assert out[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, blocks = 16, []
    while pos < len(out):
        (n,) = struct.unpack_from(">i", out, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(out[pos + 4:pos + 4 + n])))
        pos += 4 + n
    assert [len(b) for b in blocks] == [32768, 32768, 11264]
    assert b"".join(blocks) == data


def test_snappy_reads_raw_snappy():
    data = b"raw snappy from a non-Java client " * 50
    assert decompress(Codec.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data


def test_gzip_reads_concatenated_members_and_stdlib_output():
    assert decompress(Codec.GZIP, gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"
    assert gzip.decompress(compress(Codec.GZIP, b"hello")) == b"hello"


def test_zstd_reads_frames_without_content_size():
    cctx = zstandard.ZstdCompressor(write_content_size=False)
    frame = cctx.compress(b"streamed by Java" * 100)
    assert zstandard.frame_content_size(frame) == -1
    assert decompress(Codec.ZSTD, frame) == b"streamed by Java" * 100


def test_lz4_frame_parameters_match_kafka():
    out = compress(Codec.LZ4, b"x" * 1000)
    assert out[:4] == b"\x04\x22\x4d\x18"          # LZ4 frame magic
    flg, bd = out[4], out[5]
    assert flg >> 6 == 1                            # version 01
    assert flg & 0x20                               # independent blocks
    assert not flg & 0x10 and not flg & 0x08 and not flg & 0x04   # no block/content size/sum
    assert (bd >> 4) & 0x7 == 4                     # 64 KiB max block size


def test_lz4_reads_broken_header_checksum_of_kafka_0_8():
    good = lz4.frame.compress(b"old lz4" * 20, content_checksum=False, store_size=False)
    # Kafka < 0.10 hashed the 4 magic bytes too.
    broken_hc = (_xxh32(good[0:6]) >> 8) & 0xFF
    broken = good[:6] + bytes([broken_hc]) + good[7:]
    assert broken != good
    assert decompress(Codec.LZ4, broken) == b"old lz4" * 20


def test_xxh32_known_vectors():
    assert _xxh32(b"") == 0x02CC5D05
    assert _xxh32(b"a") == 0x550D7456
    assert _xxh32(b"abc") == 0x32D153FF
    assert _xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_garbage_raises_corrupt_record_error(codec):
    with pytest.raises(CorruptRecordError):
        decompress(codec, b"\x82SNAPPY\x00garbage that is not compressed" if codec == Codec.SNAPPY
                   else b"garbage that is not compressed")


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_truncated_stream_raises(codec):
    out = compress(codec, bytes(range(256)) * 40)
    with pytest.raises(CorruptRecordError):
        decompress(codec, out[:len(out) // 2])


def test_unknown_codec_raises():
    with pytest.raises(CorruptRecordError):
        decompress(7, b"")
    assert XERIAL_HEADER[:8] == b"\x82SNAPPY\x00"


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_a_decompression_bomb_stops_at_the_limit(codec):
    """A few KB of compressed zeros can expand 30,000 times: reading stops past `max_size`
    (the broker's limit, MAX_DECOMPRESSED_BYTES, is 256 MiB) instead of allocating it all."""
    zeros = bytes(4 << 20)
    bomb = compress(codec, zeros)
    assert decompress(codec, bomb, max_size=len(zeros)) == zeros
    with pytest.raises(CorruptRecordError, match="decompresses to more than"):
        decompress(codec, bomb, max_size=len(zeros) - 1)
    with pytest.raises(CorruptRecordError, match="decompresses to more than"):
        decompress(codec, bomb, max_size=1 << 16)
    if codec == Codec.SNAPPY:                                # raw snappy, unframed
        raw = bytes(cramjam.snappy.compress_raw(zeros))
        with pytest.raises(CorruptRecordError, match="decompresses to more than"):
            decompress(codec, raw, max_size=1 << 16)


@pytest.mark.parametrize("codec", [Codec.LZ4, Codec.ZSTD])
def test_a_frame_whose_blocks_do_not_parse_is_still_read_within_the_limit(codec, monkeypatch):
    """lz4 and zstd are bounded by their frames' block headers; where those do not parse,
    the library reads within the limit itself (lz4) or in small pieces (zstd)."""
    from storage import compression
    monkeypatch.setattr(compression, "_lz4_bound", lambda data: None)
    monkeypatch.setattr(compression, "_zstd_bound", lambda data: None)
    zeros = bytes(4 << 20)
    bomb = compress(codec, zeros)
    assert decompress(codec, bomb, max_size=len(zeros)) == zeros
    with pytest.raises(CorruptRecordError, match="decompresses to more than"):
        decompress(codec, bomb, max_size=1 << 16)
    with pytest.raises(CorruptRecordError):
        decompress(codec, bomb[:-9], max_size=len(zeros))        # truncated
