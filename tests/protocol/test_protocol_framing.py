"""FrameReader accepts any split of the stream; frame() prefixes sizes; bad sizes are errors."""
import os
import struct
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.exceptions import FrameTooLarge, ProtocolError
from protocol.framing import FrameReader, frame
from protocol.records import FileRegion


def stream_of(bodies):
    return b"".join(struct.pack(">i", len(b)) + b for b in bodies)


BODIES = [b"", b"a", b"hello world", bytes(range(256)) * 3, b"\x00" * 5]


def drain(reader):
    out = []
    while (body := reader.next_frame()) is not None:
        out.append(bytes(body))
    return out


def test_byte_at_a_time():
    reader = FrameReader(1 << 20)
    got = []
    for byte in stream_of(BODIES):
        reader.feed(bytes([byte]))
        got.extend(drain(reader))
    assert got == BODIES
    assert reader.buffered == 0


def test_all_at_once_and_views_stay_valid():
    reader = FrameReader(1 << 20)
    reader.feed(stream_of(BODIES))
    views = []
    while (body := reader.next_frame()) is not None:
        views.append(body)
    reader.feed(stream_of([b"later"]))
    assert [bytes(v) for v in views] == BODIES
    assert drain(reader) == [b"later"]


@settings(max_examples=60)
@given(bodies=st.lists(st.binary(max_size=300), max_size=8), cuts=st.lists(st.integers(0, 4000)))
def test_any_split(bodies, cuts):
    data = stream_of(bodies)
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    reader = FrameReader(1 << 20)
    got = []
    for a, b in zip(points, points[1:]):
        reader.feed(data[a:b])
        got.extend(drain(reader))
    assert got == bodies


def test_incomplete_frame_waits():
    reader = FrameReader(100)
    reader.feed(struct.pack(">i", 10) + b"12345")
    assert reader.next_frame() is None
    reader.feed(b"67890")
    assert bytes(reader.next_frame()) == b"1234567890"
    assert reader.next_frame() is None


def test_frame_too_large():
    reader = FrameReader(100)
    reader.feed(struct.pack(">i", 101))
    with pytest.raises(FrameTooLarge) as info:
        reader.next_frame()
    assert info.value.size == 101
    assert isinstance(info.value, ProtocolError)


def test_negative_size():
    reader = FrameReader(100)
    reader.feed(struct.pack(">i", -5))
    with pytest.raises(ProtocolError, match="negative"):
        reader.next_frame()


def test_frame_pieces_with_file_region():
    with tempfile.TemporaryFile() as f:
        f.write(b"0123456789")
        f.flush()
        region = FileRegion(f, 2, 5)
        pieces = frame([b"head", region, b"tail"])
        assert pieces[0] == struct.pack(">i", 13) + b"head"
        assert pieces[1] is region and pieces[2] == b"tail"
        assert region.read_bytes() == b"23456"
        assert len(region) == 5
        assert frame([region]) == [struct.pack(">i", 5), region]
        assert os.lseek(f.fileno(), 0, os.SEEK_CUR) == 10   # pread left the position alone


def test_fetch_response_pieces_keep_file_regions_apart():
    from protocol.messages import FetchResponse
    with tempfile.TemporaryFile() as f:
        f.write(b"R" * 100)
        f.flush()
        region = FileRegion(f, 10, 50)
        response = FetchResponse(responses=[FetchResponse.FetchableTopicResponse(
            topic="t", partitions=[FetchResponse.PartitionData(partition_index=0, records=region),
                                   FetchResponse.PartitionData(partition_index=1, records=b"xyz")])])
        for version in (4, 12, 16):
            pieces = response.encode_pieces(version)
            assert sum(1 for p in pieces if p is region) == 1
            assert all(type(p) in (bytes, FileRegion) for p in pieces)
            joined = b"".join(p.read_bytes() if type(p) is FileRegion else p for p in pieces)
            assert joined == response.encode(version)
            decoded = FetchResponse.decode(joined, version)
            assert bytes(decoded.responses[0].partitions[0].records) == b"R" * 50
            assert bytes(decoded.responses[0].partitions[1].records) == b"xyz"


def test_produce_records_are_views_not_copies():
    from protocol.messages import ProduceRequest
    batch = bytes(range(256)) * 4
    request = ProduceRequest(acks=1, timeout_ms=5, topic_data=[ProduceRequest.TopicProduceData(
        name="t", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)])])
    data = memoryview(request.encode(9))
    decoded = ProduceRequest.decode(data, 9)
    records = decoded.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and records.obj is data.obj
    assert records == batch
