"""Every generated class, every version: encode -> decode -> equal, and re-encode byte for byte."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msgvalues import all_classes, sample, strategy, versions

CLASSES = all_classes()
CASES = [(cls, v) for cls in CLASSES for v in versions(cls)]


def roundtrip(message, version):
    data = message.encode(version)
    decoded, end = type(message).decode_from(data, 0, version)
    assert end == len(data)
    assert decoded == message
    assert decoded.encode(version) == data
    return data


def test_every_api_has_classes():
    from protocol.api import API_SPECS
    assert len(API_SPECS) >= 80
    assert API_SPECS[0].request.__name__ == "ProduceRequest"


@pytest.mark.parametrize("cls,version", CASES, ids=[f"{c.__name__}-v{v}" for c, v in CASES])
def test_full_sample_roundtrip(cls, version):
    """All fields present in the version hold non-default values (tagged fields included)."""
    roundtrip(sample(cls, version), version)


@pytest.mark.parametrize("cls,version", CASES, ids=[f"{c.__name__}-v{v}" for c, v in CASES])
def test_default_instance_roundtrip(cls, version):
    roundtrip(cls(), version)


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__name__ for c in CLASSES])
@settings(max_examples=12)
@given(data=st.data())
def test_hypothesis_roundtrip(cls, data):
    version = data.draw(st.sampled_from(versions(cls)), label="version")
    message = data.draw(strategy(cls, version), label="message")
    roundtrip(message, version)


def test_trailing_bytes_allowed_and_offset_honoured():
    from protocol.messages import FindCoordinatorRequest
    body = FindCoordinatorRequest(key="g").encode(1)
    message, end = FindCoordinatorRequest.decode_from(b"xx" + body + b"tail", 2, 1)
    assert message.key == "g" and end == 2 + len(body)


@pytest.mark.parametrize("version", [0, 8, 9, 12])
def test_long_arrays_use_multibyte_counts(version):
    """Counts of 127+ need a multi-byte varint in flexible versions (and the one-pack arrays
    must fall back to it); checked against kafka-python's decoder too."""
    from kafka.protocol.metadata import MetadataResponse as TheirMetadata
    from protocol.messages import MetadataResponse as M
    replicas = list(range(300))
    message = M(brokers=[M.MetadataResponseBroker(node_id=i, host=f"h{i}", port=i) for i in range(130)],
                topics=[M.MetadataResponseTopic(name="t", partitions=[
                    M.MetadataResponsePartition(partition_index=p, leader_id=1, replica_nodes=replicas,
                                                isr_nodes=replicas[:127],
                                                offline_replicas=replicas[:126] if version >= 5 else [])
                    for p in range(3)])])
    data = roundtrip(message, version)
    theirs = TheirMetadata.decode(data, version=version)
    assert list(theirs.topics[0].partitions[2].replica_nodes) == replicas
    assert len(theirs.brokers) == 130


@pytest.mark.parametrize("length", [0, 1, 125, 126, 127, 128, 300])
def test_compact_strings_around_the_inline_limit(length):
    """Compact strings below 127 bytes are decoded inline, longer ones by a call: both must
    agree with kafka-python, and a frame cut inside either kind reports the field."""
    from kafka.protocol.producer import ProduceRequest as TheirProduce
    from protocol.exceptions import ProtocolError
    from protocol.messages import ProduceRequest as P
    name = "é" * (length // 2) + "t" * (length % 2)          # multi-byte UTF-8 too
    message = P(transactional_id="x" * length, topic_data=[P.TopicProduceData(name=name, partition_data=[
        P.PartitionProduceData(index=1, records=b"r")])])
    data = roundtrip(message, 9)
    theirs = TheirProduce.decode(data, version=9)
    assert theirs.transactional_id == "x" * length and theirs.topic_data[0].name == name
    cut = data[:1 + length + 6 + 1 + 1 + len(name.encode()) - 1] if length else data[:9]
    with pytest.raises(ProtocolError, match="topic_data|name"):
        P.decode(cut, 9)
