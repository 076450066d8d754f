"""Bad input: every decoder raises only ProtocolError — on truncation, mutation, random bytes."""
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msgvalues import all_classes, sample, versions
from protocol.exceptions import ProtocolError
from protocol.messages import ProduceRequest

CLASSES = all_classes()
CASES = [(cls, v) for cls in CLASSES for v in versions(cls)]
IDS = [f"{c.__name__}-v{v}" for c, v in CASES]


def decode_or_protocol_error(cls, data, version):
    try:
        cls.decode(data, version)
    except ProtocolError as exc:
        assert exc.api == cls.__qualname__ and exc.version == version
        assert exc.offset is not None
        str(exc)


@pytest.mark.parametrize("cls,version", CASES, ids=IDS)
def test_every_truncation_is_a_protocol_error(cls, version):
    data = sample(cls, version).encode(version)
    step = max(1, len(data) // 60)     # every cut of short messages, 60 spread cuts of long ones
    for cut in range(0, len(data), step):
        with pytest.raises(ProtocolError):
            cls.decode(data[:cut], version)


@pytest.mark.parametrize("cls,version", CASES, ids=IDS)
def test_mutated_bytes_raise_only_protocol_error(cls, version):
    data = bytearray(sample(cls, version).encode(version))
    rnd = random.Random(f"mutate-{cls.__name__}-{version}")
    for _ in range(12):
        mutated = bytearray(data)
        for _ in range(rnd.randint(1, 3)):
            if mutated:
                mutated[rnd.randrange(len(mutated))] = rnd.choice([0, 0x7F, 0x80, 0xFF, rnd.randrange(256)])
        decode_or_protocol_error(cls, bytes(mutated), version)


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__name__ for c in CLASSES])
@settings(max_examples=15)
@given(data=st.data())
def test_random_bytes_raise_only_protocol_error(cls, data):
    version = data.draw(st.sampled_from(versions(cls)))
    decode_or_protocol_error(cls, data.draw(st.binary(max_size=64)), version)


def test_error_carries_field_path_and_offset():
    request = ProduceRequest(acks=-1, timeout_ms=1000, topic_data=[
        ProduceRequest.TopicProduceData(name="t", partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=b"a" * 10),
            ProduceRequest.PartitionProduceData(index=1, records=b"b" * 10)])])
    data = request.encode(9)
    with pytest.raises(ProtocolError) as info:
        ProduceRequest.decode(data[:-5], 9)
    exc = info.value
    assert exc.api == "ProduceRequest" and exc.version == 9
    assert exc.field == "topic_data[0].partition_data[1].records"
    assert exc.offset == len(data) - 1 - 1 - 1 - 10 - 1   # at the records' length varint
    assert "topic_data[0].partition_data[1].records" in str(exc)


def test_negative_length_and_bad_varint():
    from protocol.messages import FindCoordinatorRequest
    with pytest.raises(ProtocolError, match="null string"):
        FindCoordinatorRequest.decode(b"\xff\xff", 0)
    with pytest.raises(ProtocolError, match="varint"):
        FindCoordinatorRequest.decode(b"\xff\xff\xff\xff\xff\xff", 3)
    with pytest.raises(ProtocolError, match="past the end"):
        FindCoordinatorRequest.decode(b"\x00\x09abc", 0)
    # not UTF-8: replaced, as Java's new String(bytes, UTF_8) in Kafka's readers, never refused
    assert FindCoordinatorRequest.decode(b"\x00\x02\xc3\x28", 0).key == "\ufffd("
    assert FindCoordinatorRequest.decode(b"\x04\xe9t\xe9\x00\x00", 3).key == "\ufffdt\ufffd"


def test_compact_strings_longer_than_0x7fff_are_refused():
    """Kafka's generated readers: "string field key had invalid length"; its writers refuse too."""
    from protocol.messages import FindCoordinatorRequest
    from protocol.primitives import write_uvarint
    for n in (0x7FFF, 0x8000):
        buf = bytearray()
        write_uvarint(buf, n + 1)
        data = bytes(buf) + b"k" * n + b"\x00\x00"         # key, key_type int8... then tags
        if n == 0x7FFF:
            assert len(FindCoordinatorRequest.decode(data + b"\x00", 3).key) == n
        else:
            with pytest.raises(ProtocolError, match="invalid length 32768"):
                FindCoordinatorRequest.decode(data + b"\x00", 3)
    with pytest.raises(ProtocolError, match="invalid length 32768"):
        FindCoordinatorRequest(key="k" * 0x8000).encode(3)
    with pytest.raises(ProtocolError, match="invalid length 32768"):
        FindCoordinatorRequest(key="k" * 0x8000).encode(0)


def test_unsupported_version_is_a_protocol_error():
    with pytest.raises(ProtocolError, match="unsupported version"):
        ProduceRequest.decode(b"", 99)
    with pytest.raises(ProtocolError, match="unsupported version"):
        ProduceRequest().encode(99)
