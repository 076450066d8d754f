"""Golden frames captured from real clients decode and re-encode byte for byte.

The files in golden/ were recorded by capture_server.py (run it to refresh them) from
confluent-kafka (librdkafka), kafka-python and aiokafka — each also in a "legacy" mode that
uses the old pre-flexible versions.  Each file is one request frame body (header + request,
without the size prefix), named `<api>_v<version>_<client>.bin`.
"""
import pathlib
import re

import pytest

from capture_server import GOLDEN, capture
from protocol.api import ApiKey, request_class
from protocol.headers import parse_request_header

FILES = sorted(GOLDEN.glob("*.bin"))
NAME = re.compile(r"^(?P<api>.+)_v(?P<version>\d+)_(?P<client>.+)\.bin$")


def check_frame(frame, api_key, version):
    header, offset = parse_request_header(frame)
    assert (header.api_key, header.api_version) == (api_key, version)
    assert header.encode() == frame[:offset]
    request = request_class(api_key).decode(frame, version, offset)
    assert request.encode(version) == frame[offset:]
    return header, request


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_golden_frame_roundtrip(path: pathlib.Path):
    match = NAME.match(path.name)
    api_key = ApiKey[match["api"].upper()]
    header, request = check_frame(path.read_bytes(), api_key, int(match["version"]))
    assert header.client_id.startswith("golden-") or header.client_id in ("rdkafka", "kafka-python")


def test_golden_set_is_complete():
    clients = {NAME.match(p.name)["client"] for p in FILES}
    assert {"confluent", "kafka_python", "aiokafka", "confluent_legacy", "kafka_python_legacy"} <= clients
    for client in ("confluent", "kafka_python", "aiokafka"):
        apis = {NAME.match(p.name)["api"] for p in FILES if NAME.match(p.name)["client"] == client}
        assert {"api_versions", "metadata", "produce", "fetch", "list_offsets", "find_coordinator",
                "join_group", "sync_group", "offset_fetch", "offset_commit", "leave_group"} <= apis


def test_produce_records_survive_unparsed():
    frame = (GOLDEN / "produce_v10_confluent.bin").read_bytes()
    header, offset = parse_request_header(frame)
    request = request_class(ApiKey.PRODUCE).decode(memoryview(frame), 10, offset)
    records = request.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview)
    assert b"value-confluent" in bytes(records)


@pytest.mark.parametrize("client", ["confluent", "kafka_python"])
def test_live_capture_roundtrips(client):
    """A real client completes produce + group consume against responses from this layer."""
    frames, value = capture(client)
    assert value.startswith(b"value-")
    assert {ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP} <= {k for k, _ in frames}
    for (api_key, version), frame in frames.items():
        check_frame(frame, api_key, version)
