"""Request/response headers: version choice, parsing, unknown keys, whole-frame helpers."""
import pytest

from protocol.api import API_SPECS, ApiKey, request_class, response_class
from protocol.errors import RETRIABLE, ErrorCode, KafkaError
from protocol.exceptions import ProtocolError
from protocol.headers import (RequestHeader, decode_response, encode_request, encode_response,
                              encode_response_header, parse_request_header,
                              request_header_version, response_header_version)
from protocol.messages import ApiVersionsResponse, MetadataRequest, MetadataResponse


def test_header_versions():
    assert request_header_version(ApiKey.METADATA, 8) == 1
    assert request_header_version(ApiKey.METADATA, 9) == 2
    assert request_header_version(ApiKey.CONTROLLED_SHUTDOWN, 0) == 0
    assert request_header_version(ApiKey.CONTROLLED_SHUTDOWN, 1) == 1
    assert response_header_version(ApiKey.METADATA, 9) == 1
    assert response_header_version(ApiKey.METADATA, 8) == 0
    assert response_header_version(ApiKey.API_VERSIONS, 3) == 0
    assert request_header_version(ApiKey.API_VERSIONS, 3) == 2
    assert encode_response_header(7, 0) == b"\x00\x00\x00\x07"
    assert encode_response_header(7, 1) == b"\x00\x00\x00\x07\x00"


def test_request_roundtrip_v1_and_v2():
    for version in (1, 9, 12):
        header = RequestHeader(ApiKey.METADATA, version, 42, "client-ä")
        frame = encode_request(header, MetadataRequest(topics=None))
        body = memoryview(frame)[4:]
        parsed, offset = parse_request_header(body)
        assert parsed == header
        assert MetadataRequest.decode(body, version, offset) == MetadataRequest(topics=None)


def test_unknown_key_or_version_parses_as_v1():
    body = b"\x03\xe7\x00\x05\x00\x00\x00\x09\xff\xff" + b"junk"
    header, offset = parse_request_header(body)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (999, 5, 9, None)
    assert offset == 10
    body = b"\x00\x12\x00\x63\x00\x00\x00\x01\x00\x01x"    # ApiVersions v99
    header, offset = parse_request_header(body)
    assert header.api_version == 99 and header.client_id == "x" and offset == 11


def test_truncated_header():
    with pytest.raises(ProtocolError):
        parse_request_header(b"\x00\x03\x00")
    with pytest.raises(ProtocolError):
        parse_request_header(b"\x00\x03\x00\x09\x00\x00\x00\x01\x00\x05ab")


def test_response_frame_helpers():
    response = MetadataResponse(brokers=[MetadataResponse.MetadataResponseBroker(node_id=1, host="h", port=9)])
    pieces = encode_response(5, ApiKey.METADATA, 12, response)
    frame = b"".join(pieces)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    correlation_id, decoded = decode_response(memoryview(frame)[4:], ApiKey.METADATA, 12)
    assert correlation_id == 5 and decoded == response
    api_versions = ApiVersionsResponse(error_code=35)
    frame = b"".join(encode_response(6, ApiKey.API_VERSIONS, 3, api_versions))
    assert frame[4:8] == b"\x00\x00\x00\x06" and frame[8:10] == b"\x00\x23"   # header v0


def test_registry_and_errors():
    spec = API_SPECS[ApiKey.FETCH]
    assert spec.name == "Fetch" and spec.flexible_min == 12 and spec.min_version == 0
    assert request_class(0).__name__ == "ProduceRequest"
    assert response_class(ApiKey.LIST_OFFSETS).__name__ == "ListOffsetsResponse"
    assert ApiKey.PRODUCE == 0 and ApiKey.SASL_HANDSHAKE == 17 and ApiKey.DESCRIBE_TOPIC_PARTITIONS == 75
    assert ErrorCode.NONE == 0 and ErrorCode.UNKNOWN_TOPIC_OR_PARTITION == 3
    assert ErrorCode.NOT_LEADER_OR_FOLLOWER in RETRIABLE and ErrorCode.NONE not in RETRIABLE
    error = KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "bad name")
    assert error.error_code is ErrorCode.INVALID_TOPIC_EXCEPTION and "bad name" in str(error)


def test_api_versions_error_answer_is_read_as_v0():
    body = ApiVersionsResponse(error_code=35, api_keys=[ApiVersionsResponse.ApiVersion(
        api_key=18, min_version=0, max_version=4)])
    frame = b"".join(encode_response(9, ApiKey.API_VERSIONS, 0, body))
    correlation_id, decoded = decode_response(memoryview(frame)[4:], ApiKey.API_VERSIONS, 4)
    assert correlation_id == 9 and decoded == body


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=200)
@given(st.binary(max_size=40))
def test_random_header_bytes_raise_only_protocol_error(data):
    try:
        header, offset = parse_request_header(data)
    except ProtocolError:
        return
    assert 8 <= offset <= len(data)


@settings(max_examples=100)
@given(st.binary(max_size=40), st.sampled_from([(3, 12), (3, 8), (18, 3), (18, 0), (1, 16)]))
def test_random_response_bytes_raise_only_protocol_error(data, key_version):
    try:
        decode_response(data, *key_version)
    except ProtocolError:
        pass


def test_api_versions_error_answers_parse_in_their_version():
    """Kafka's ApiVersionsResponse.parse: the version asked first, v0 when that fails, so an
    UNSUPPORTED_VERSION answer (a v0 body) and an INVALID_REQUEST one (in the version asked)
    both read."""
    import struct

    from protocol.headers import decode_response
    from protocol.messages.api_versions import ApiVersionsResponse as R
    unsupported = R(error_code=35, api_keys=[R.ApiVersion(api_key=18, min_version=0,
                                                          max_version=4)]).encode(0)
    invalid = R(error_code=42, api_keys=[], throttle_time_ms=7).encode(3)
    for body, code in ((unsupported, 35), (invalid, 42)):
        cid, response = decode_response(memoryview(struct.pack(">i", 9) + bytes(body)),
                                        ApiKey.API_VERSIONS, 3)
        assert (cid, response.error_code) == (9, code)
    assert response.throttle_time_ms == 7
