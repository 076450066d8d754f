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
    """Kafka's KafkaApis on a PLAINTEXT listener: ILLEGAL_SASL_STATE for both SASL requests."""
    from protocol.messages.sasl_authenticate import SaslAuthenticateRequest
    for version in (0, 1):
        response = await client.request(SaslHandshakeRequest(mechanism="PLAIN"), version)
        assert response.error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert response.mechanisms == []
    for version in (0, 1, 2):
        response = await client.request(SaslAuthenticateRequest(auth_bytes=b"\x00u\x00p"), version)
        assert (response.error_code, response.error_message) == (
            ErrorCode.ILLEGAL_SASL_STATE,
            "SaslAuthenticate request received after successful authentication")


async def test_software_name_with_a_trailing_newline_is_invalid(client):
    client.send(ApiVersionsRequest(client_software_name="name\n",
                                   client_software_version="1"), 3)
    size = struct.unpack(">i", await client.reader.readexactly(4))[0]
    body = await client.reader.readexactly(size)
    assert ApiVersionsResponse.decode(body, 3, offset=4).error_code == ErrorCode.INVALID_REQUEST


async def test_a_client_id_that_is_not_utf8_is_served(broker):
    """Kafka reads strings as Java's new String(bytes, UTF_8): a Latin-1 client id is served."""
    c = await RawClient.connect(broker.port)
    try:
        c.correlation_id += 1
        body = struct.pack(">hhih", ApiKey.API_VERSIONS, 0, c.correlation_id, 5) + b"caf\xe9!"
        c.send_raw(frame(body))
        _, response = await c.receive(ApiKey.API_VERSIONS, 0)
        assert response.error_code == 0
    finally:
        await c.close()


async def test_metadata_topic_ids_before_v12_are_invalid(client):
    """Kafka's handleTopicMetadataRequest: no topic ids, no null names before v12; the error
    answer stays parseable (a name, not null, where names are not nullable)."""
    import uuid
    T = MetadataRequest.MetadataRequestTopic
    for version in (10, 11):
        for topic in (T(name=None, topic_id=uuid.uuid4()), T(name="t", topic_id=uuid.uuid4())):
            response = await client.request(MetadataRequest(topics=[topic]), version)
            assert [(t.name, t.error_code) for t in response.topics] == [
                (topic.name or "", ErrorCode.INVALID_REQUEST)]
    unknown = uuid.uuid4()
    response = await client.request(MetadataRequest(topics=[T(name=None, topic_id=unknown)]), 12)
    assert [(t.name, t.topic_id, t.error_code) for t in response.topics] == [
        (None, unknown, ErrorCode.UNKNOWN_TOPIC_ID)]
    # an error answer for a topic asked by id: "" as Kafka's getErrorResponse, at every version
    from broker.dispatch import error_response
    answer = error_response(ApiKey.METADATA, 12, MetadataRequest(topics=[
        T(name=None, topic_id=unknown)]), ErrorCode.INVALID_REQUEST)
    assert [(t.name, t.topic_id) for t in answer.topics] == [("", unknown)]


async def test_acks_0_produce_that_fails_closes_the_connection(client, broker, monkeypatch):
    """No response carries the error of an acks=0 produce: Kafka closes the connection."""
    from protocol.messages.produce import ProduceRequest

    async def broken(broker, ctx, request):
        raise RuntimeError("bug")
    real = HANDLERS[ApiKey.PRODUCE]
    monkeypatch.setitem(HANDLERS, ApiKey.PRODUCE, types.SimpleNamespace(
        API_KEY=real.API_KEY, MIN_VERSION=real.MIN_VERSION, MAX_VERSION=real.MAX_VERSION,
        handle=broken))
    client.send(ProduceRequest(acks=0, timeout_ms=1000, topic_data=[]), 9)
    assert await client.is_closed()
    assert await api_versions_ok(broker.port)


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


async def test_reading_pauses_once_queued_frames_reach_socket_request_max_bytes(start_broker,
                                                                                 monkeypatch):
    """A client that pipelines large requests behind a slow one: reading pauses once the
    queued frames hold more than socket.request.max.bytes (Kafka reads one request at a time),
    not only after MAX_QUEUED_FRAMES of them; every request is still answered in order."""
    from broker.connection import MAX_QUEUED_FRAMES
    broker = await start_broker(socket_request_max_bytes=64 * 1024)
    release = asyncio.Event()
    real = HANDLERS[ApiKey.METADATA]

    async def slow(broker_, ctx, request):
        await release.wait()
        return await real.handle(broker_, ctx, request)
    monkeypatch.setitem(HANDLERS, ApiKey.METADATA, types.SimpleNamespace(
        API_KEY=real.API_KEY, MIN_VERSION=real.MIN_VERSION, MAX_VERSION=real.MAX_VERSION,
        handle=slow))
    c = await RawClient.connect(broker.port)
    try:
        first = c.send(MetadataRequest(topics=[]), 1)
        # ApiVersions v0 with 40 KiB of trailing bytes (ignored after the body, as Kafka)
        ids = []
        for _ in range(4):
            c.correlation_id += 1
            ids.append(c.correlation_id)
            body = struct.pack(">hhih", ApiKey.API_VERSIONS, 0, c.correlation_id, 1) + b"x"
            c.send_raw(frame(body + b"\0" * 40 * 1024))
        await c.writer.drain()
        (conn,) = broker.connections.connections

        async def paused():
            while not conn._reading_paused:
                await asyncio.sleep(0.01)
        await asyncio.wait_for(paused(), 5)
        assert len(conn.frames) < MAX_QUEUED_FRAMES
        release.set()
        got, _ = await c.receive(ApiKey.METADATA, 1)
        assert got == first
        for expected in ids:
            got, response = await c.receive(ApiKey.API_VERSIONS, 0)
            assert got == expected and response.error_code == 0
        assert not conn._reading_paused
    finally:
        await c.close()


async def test_a_response_that_cannot_be_encoded_is_unknown_server_error(client, monkeypatch):
    """A string longer than a string field holds (a long stored value): as Kafka's
    handleError, the request is answered UNKNOWN_SERVER_ERROR and the connection stays."""
    from protocol.messages.describe_configs import DescribeConfigsRequest as Q
    from protocol.messages.describe_configs import DescribeConfigsResponse as R

    async def long_value(broker, ctx, request):
        return R(results=[R.DescribeConfigsResult(
            resource_type=2, resource_name="t", configs=[R.DescribeConfigsResourceResult(
                name="x", value="v" * 40000)])])
    real = HANDLERS[ApiKey.DESCRIBE_CONFIGS]
    monkeypatch.setitem(HANDLERS, ApiKey.DESCRIBE_CONFIGS, types.SimpleNamespace(
        API_KEY=real.API_KEY, MIN_VERSION=real.MIN_VERSION, MAX_VERSION=real.MAX_VERSION,
        handle=long_value))
    request = Q(resources=[Q.DescribeConfigsResource(resource_type=2, resource_name="t")])
    response = await client.request(request, 4)
    assert [(r.resource_name, r.error_code) for r in response.results] == [
        ("t", ErrorCode.UNKNOWN_SERVER_ERROR)]
    assert (await client.request(ApiVersionsRequest(), 0)).error_code == 0

    async def overflowing(broker, ctx, request):          # a number past its int32 field
        return R(throttle_time_ms=2 ** 40, results=[])
    monkeypatch.setitem(HANDLERS, ApiKey.DESCRIBE_CONFIGS, types.SimpleNamespace(
        API_KEY=real.API_KEY, MIN_VERSION=real.MIN_VERSION, MAX_VERSION=real.MAX_VERSION,
        handle=overflowing))
    response = await client.request(request, 4)
    assert [r.error_code for r in response.results] == [ErrorCode.UNKNOWN_SERVER_ERROR]
