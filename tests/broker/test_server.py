"""The server and its connections, in-process: framing, ordering, limits, bad input, shutdown."""
import asyncio
import os
import struct
import types

import pytest

from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from protocol.messages.metadata import MetadataRequest
from protocol.messages.sasl_handshake import SaslHandshakeRequest
from protocol.records import FileRegion

from broker.handlers import HANDLERS
from tests.broker.conftest import RawClient


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


async def api_versions_ok(port) -> bool:
    c = await RawClient.connect(port)
    try:
        response = await c.request(ApiVersionsRequest(), 0)
        return response.error_code == 0
    finally:
        await c.close()


async def test_api_versions_lists_the_registry(client):
    for version in range(0, 5):
        request = ApiVersionsRequest(client_software_name="kbroker-test",
                                     client_software_version="1.0")
        response = await client.request(request, version)
        assert response.error_code == 0
        served = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        assert served == {key: (m.MIN_VERSION, m.MAX_VERSION) for key, m in HANDLERS.items()}


async def test_api_versions_v3_does_not_write_default_tagged_fields(client):
    client.send(ApiVersionsRequest(client_software_name="x", client_software_version="1"), 3)
    size = struct.unpack(">i", await client.reader.readexactly(4))[0]
    body = await client.reader.readexactly(size)
    # v3 body ends with throttle_time_ms then an empty tagged-field section (0 tags).
    assert body[-5:] == b"\x00\x00\x00\x00\x00"


async def test_api_versions_unknown_version_answers_v0_with_list(client):
    client.send(ApiVersionsRequest(), 0)                # encode as v0 ...
    # ... then forge a version we do not serve: rewrite the header's api_version.
    client.correlation_id += 1
    raw = struct.pack(">hhih", ApiKey.API_VERSIONS, 99, client.correlation_id, 1) + b"x"
    client.send_raw(frame(raw + b"\x00\x01\x02"))
    first = await client.receive(ApiKey.API_VERSIONS, 0)
    cid, response = await client.receive(ApiKey.API_VERSIONS, 0)
    assert first[1].error_code == 0
    assert cid == client.correlation_id
    assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert any(k.api_key == ApiKey.METADATA for k in response.api_keys)


async def test_api_versions_v3_rejects_bad_software_name(client):
    client.send(ApiVersionsRequest(client_software_name="bad name!",
                                   client_software_version="1"), 3)
    size = struct.unpack(">i", await client.reader.readexactly(4))[0]
    body = await client.reader.readexactly(size)
    # Kafka answers INVALID_REQUEST in a v3 body (only UNSUPPORTED_VERSION falls back to v0).
    response = ApiVersionsResponse.decode(body, 3, offset=4)
    assert response.error_code == ErrorCode.INVALID_REQUEST
    assert len(response.api_keys) == len(HANDLERS)


async def test_sasl_handshake_no_mechanisms(client):
    for version in (0, 1):
        response = await client.request(SaslHandshakeRequest(mechanism="PLAIN"), version)
        assert response.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert response.mechanisms == []


async def test_pipelined_requests_answer_in_order(client):
    sent = [client.send(ApiVersionsRequest() if i % 2 else MetadataRequest(topics=None),
                        0 if i % 2 else 1) for i in range(40)]
    got = []
    for i in range(40):
        key = ApiKey.API_VERSIONS if i % 2 else ApiKey.METADATA
        cid, _ = await client.receive(key, 0 if i % 2 else 1)
        got.append(cid)
    assert got == sent


@pytest.mark.parametrize("garbage", [
    frame(b"\x00\x03"),                             # header shorter than its fields
    frame(b"\x00\x03\x00\x01\x00\x00\x00\x07\x7f\xff"),   # client id length past the frame
    b"\xff\xff\xff\xfe",                            # negative size
    frame(os.urandom(64)),                          # random bytes
])
async def test_garbage_closes_only_that_connection(broker, garbage):
    bystander = await RawClient.connect(broker.port)
    assert (await bystander.request(ApiVersionsRequest(), 1)).error_code == 0
    bad = await RawClient.connect(broker.port)
    bad.send_raw(garbage)
    assert await bad.is_closed()
    assert (await bystander.request(ApiVersionsRequest(), 2)).error_code == 0
    assert await api_versions_ok(broker.port)
    await bad.close()
    await bystander.close()


async def test_truncated_body_closes(client, broker):
    body = struct.pack(">hhih", ApiKey.METADATA, 1, 1, -1) + b"\x00\x00\x00\x05\x00"
    client.send_raw(frame(body))                    # 5 topics promised, none there
    assert await client.is_closed()
    assert await api_versions_ok(broker.port)


async def test_unknown_api_key_closes(client, broker):
    client.send_raw(frame(struct.pack(">hhih", 9999, 0, 1, -1)))
    assert await client.is_closed()
    assert await api_versions_ok(broker.port)


async def test_unsupported_version_closes(client, broker):
    client.send_raw(frame(struct.pack(">hhih", ApiKey.METADATA, 99, 1, -1)))
    assert await client.is_closed()
    assert await api_versions_ok(broker.port)


async def test_api_not_served_closes(client, broker):
    # A key the specs define but this broker does not serve (KRaft's Vote).
    assert ApiKey.VOTE not in HANDLERS
    client.send_raw(frame(struct.pack(">hhih", ApiKey.VOTE, 0, 1, -1)
                          + b"\x00\x00\x00\x00\x00\x00\x00\x00"))
    assert await client.is_closed()


async def test_oversized_frame_closes(start_broker):
    broker = await start_broker(socket_request_max_bytes=1024)
    client = await RawClient.connect(broker.port)
    client.send_raw(struct.pack(">i", 1025) + b"\x00" * 100)
    assert await client.is_closed()
    assert await api_versions_ok(broker.port)
    await client.close()


async def test_max_connections_per_ip(start_broker):
    broker = await start_broker(max_connections_per_ip=2)
    first = await RawClient.connect(broker.port)
    second = await RawClient.connect(broker.port)
    third = await RawClient.connect(broker.port)
    assert await third.is_closed()
    assert (await first.request(ApiVersionsRequest(), 0)).error_code == 0
    await first.close()
    await asyncio.sleep(0.1)
    assert await api_versions_ok(broker.port)
    await second.close()
    await third.close()


async def test_max_connections_per_ip_override(start_broker):
    broker = await start_broker(max_connections_per_ip=0,
                                max_connections_per_ip_overrides="127.0.0.1:1")
    first = await RawClient.connect(broker.port)
    second = await RawClient.connect(broker.port)
    assert await second.is_closed()
    assert (await first.request(ApiVersionsRequest(), 0)).error_code == 0
    await first.close()
    await second.close()


async def test_max_connections_makes_new_connections_wait_for_a_slot(start_broker):
    """As Kafka: a connection beyond max.connections is not refused; it is not read until
    another connection closes, then served (oldest first)."""
    broker = await start_broker(max_connections=1)
    first = await RawClient.connect(broker.port)
    assert (await first.request(ApiVersionsRequest(), 0)).error_code == 0
    second = await RawClient.connect(broker.port)
    third = await RawClient.connect(broker.port)
    second.send(ApiVersionsRequest(), 0)
    third.send(ApiVersionsRequest(), 0)
    answers = [asyncio.ensure_future(c.receive(ApiKey.API_VERSIONS, 0, timeout=10))
               for c in (second, third)]
    await asyncio.sleep(0.5)
    assert not any(a.done() for a in answers)
    assert (await first.request(ApiVersionsRequest(), 0)).error_code == 0   # still served
    await first.close()
    _, response = await asyncio.wait_for(answers[0], 5)
    assert response.error_code == 0
    await asyncio.sleep(0.3)
    assert not answers[1].done()                        # one slot: the third still waits
    await second.close()
    _, response = await asyncio.wait_for(answers[1], 5)
    assert response.error_code == 0
    await third.close()


async def test_a_waiting_connection_that_closes_leaves_the_queue(start_broker):
    broker = await start_broker(max_connections=1, max_connections_per_ip=1)
    first = await RawClient.connect(broker.port)
    assert (await first.request(ApiVersionsRequest(), 0)).error_code == 0
    gone = await RawClient.connect(broker.port)
    waiting = await RawClient.connect(broker.port)
    await gone.close()                                  # leaves the queue, takes no slot
    await asyncio.sleep(0.2)
    assert (await first.request(ApiVersionsRequest(), 0)).error_code == 0
    await first.close()
    assert (await waiting.request(ApiVersionsRequest(), 0)).error_code == 0
    await waiting.close()


async def test_idle_connections_close(start_broker):
    broker = await start_broker(connections_max_idle_ms=300)
    idle = await RawClient.connect(broker.port)
    busy = await RawClient.connect(broker.port)
    for _ in range(6):
        assert (await busy.request(ApiVersionsRequest(), 0)).error_code == 0
        await asyncio.sleep(0.1)
    assert await idle.is_closed(timeout=3.0)
    assert (await busy.request(ApiVersionsRequest(), 0)).error_code == 0
    await idle.close()
    await busy.close()


def _slow_module(delay_event, started):
    """A stand-in handler module for ApiVersions that parks until `delay_event` is set."""
    real = HANDLERS[ApiKey.API_VERSIONS]

    async def handle(broker, ctx, request):
        started.set()
        await delay_event.wait()
        return await real.handle(broker, ctx, request)

    return types.SimpleNamespace(API_KEY=real.API_KEY, MIN_VERSION=real.MIN_VERSION,
                                 MAX_VERSION=real.MAX_VERSION, handle=handle)


async def test_waiting_request_does_not_stall_other_connections(broker, monkeypatch):
    release, started = asyncio.Event(), asyncio.Event()
    monkeypatch.setitem(HANDLERS, ApiKey.API_VERSIONS, _slow_module(release, started))
    parked = await RawClient.connect(broker.port)
    parked.send(ApiVersionsRequest(), 0)
    parked.send(MetadataRequest(topics=None), 1)          # queued behind the parked one
    await asyncio.wait_for(started.wait(), 5)
    other = await RawClient.connect(broker.port)
    response = await other.request(MetadataRequest(topics=None), 1)
    assert response.brokers[0].port == broker.port
    release.set()
    assert (await parked.receive(ApiKey.API_VERSIONS, 0))[0] == 1
    assert (await parked.receive(ApiKey.METADATA, 1))[0] == 2
    await parked.close()
    await other.close()


async def test_shutdown_answers_in_flight_requests(start_broker, monkeypatch):
    broker = await start_broker()
    release, started = asyncio.Event(), asyncio.Event()
    monkeypatch.setitem(HANDLERS, ApiKey.API_VERSIONS, _slow_module(release, started))
    client = await RawClient.connect(broker.port)
    client.send(ApiVersionsRequest(), 0)
    await asyncio.wait_for(started.wait(), 5)
    stopping = asyncio.create_task(broker.shutdown())
    await asyncio.sleep(0.1)
    with pytest.raises(OSError):                          # no longer accepting
        await RawClient.connect(broker.port)
    release.set()
    cid, response = await client.receive(ApiKey.API_VERSIONS, 0)
    assert (cid, response.error_code) == (1, 0)
    await asyncio.wait_for(stopping, 10)
    assert await client.is_closed()
    marker = os.path.join(broker.config.log_dirs[0], ".kafka_cleanshutdown")
    assert os.path.exists(marker)
    await client.close()


async def test_handler_bug_becomes_unknown_server_error(client, monkeypatch):
    async def broken(broker, ctx, request):
        raise RuntimeError("bug")
    real = HANDLERS[ApiKey.METADATA]
    monkeypatch.setitem(HANDLERS, ApiKey.METADATA, types.SimpleNamespace(
        API_KEY=real.API_KEY, MIN_VERSION=0, MAX_VERSION=12, handle=broken))
    response = await client.request(
        MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")]), 12)
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("t", ErrorCode.UNKNOWN_SERVER_ERROR)]
    assert (await client.request(ApiVersionsRequest(), 0)).error_code == 0


async def test_file_region_pieces_are_sent_with_sendfile(client, broker, tmp_path, monkeypatch):
    """A response holding a FileRegion goes out in order, bytes around it intact."""
    data_file = tmp_path / "segment.bin"
    payload = os.urandom(300_000)
    data_file.write_bytes(b"x" * 10 + payload + b"y" * 10)
    handle = open(data_file, "rb")
    sent = []
    real_sendfile = os.sendfile

    def spy(out_fd, in_fd, offset, count):
        n = real_sendfile(out_fd, in_fd, offset, count)
        sent.append(n)
        return n
    monkeypatch.setattr(os, "sendfile", spy)

    region = FileRegion(handle, 10, len(payload))

    class RegionMessage:
        def encode_pieces(self, version):
            return [b"AB", region, b"CD"]

    async def handle_request(broker, ctx, request):
        return RegionMessage()

    real = HANDLERS[ApiKey.SASL_HANDSHAKE]
    monkeypatch.setitem(HANDLERS, ApiKey.SASL_HANDSHAKE, types.SimpleNamespace(
        API_KEY=real.API_KEY, MIN_VERSION=0, MAX_VERSION=1, handle=handle_request))
    client.send(SaslHandshakeRequest(mechanism="PLAIN"), 1)
    size = struct.unpack(">i", await client.reader.readexactly(4))[0]
    body = await asyncio.wait_for(client.reader.readexactly(size), 5)
    assert size == 4 + 2 + len(payload) + 2
    assert body[4:6] == b"AB" and body[6:-2] == payload and body[-2:] == b"CD"
    assert sum(sent) == len(payload)
    handle.close()
    # The connection still works afterwards.
    assert (await client.request(ApiVersionsRequest(), 0)).error_code == 0


def test_sendfile_under_uvloop(tmp_path):
    """The production loop: uvloop has no loop.sendfile; os.sendfile on a dup'ed fd is used."""
    import uvloop

    from broker.config import BrokerConfig
    from broker.server import Broker

    payload = os.urandom(2_000_000)          # larger than the socket buffer: hits EAGAIN
    data_file = tmp_path / "segment.bin"
    data_file.write_bytes(payload)

    class RegionMessage:
        def __init__(self, f):
            self.f = f

        def encode_pieces(self, version):
            return [b"AB", FileRegion(self.f, 0, len(payload)), b"CD"]

    async def scenario():
        broker = Broker(BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0",
                                      "log.dirs": str(tmp_path / "logs")}))
        await broker.start()
        f = open(data_file, "rb")

        async def handle_request(b, ctx, request):
            return RegionMessage(f)
        real = HANDLERS[ApiKey.SASL_HANDSHAKE]
        saved = HANDLERS[ApiKey.SASL_HANDSHAKE]
        HANDLERS[ApiKey.SASL_HANDSHAKE] = types.SimpleNamespace(
            API_KEY=real.API_KEY, MIN_VERSION=0, MAX_VERSION=1, handle=handle_request)
        try:
            client = await RawClient.connect(broker.port)
            for _ in range(2):
                client.send(SaslHandshakeRequest(mechanism="PLAIN"), 1)
            for _ in range(2):
                size = struct.unpack(">i", await client.reader.readexactly(4))[0]
                body = await asyncio.wait_for(client.reader.readexactly(size), 10)
                assert body[4:6] == b"AB" and body[6:-2] == payload and body[-2:] == b"CD"
            assert (await client.request(ApiVersionsRequest(), 0)).error_code == 0
            await client.close()
        finally:
            HANDLERS[ApiKey.SASL_HANDSHAKE] = saved
            f.close()
            await broker.shutdown()

    uvloop.run(scenario())


async def test_in_process_tests_run_on_uvloop():
    import uvloop
    assert isinstance(asyncio.get_running_loop(), uvloop.Loop)


async def test_connections_max_idle_ms_minus_one_never_closes_idle_connections(start_broker):
    # Kafka's Selector: a negative connections.max.idle.ms turns idle expiry off (every idle
    # connection was closed within 50 ms).
    import asyncio
    broker = await start_broker(connections_max_idle_ms=-1)
    client = await RawClient.connect(broker.port)
    await asyncio.sleep(0.3)
    assert (await client.request(ApiVersionsRequest(), 0)).error_code == 0
    await client.close()
