"""In-process broker fixtures: a real Broker (real storage, replica manager) on 127.0.0.1:0,
started inside the test's event loop, and a raw protocol client built on our own codecs.

Async tests here run on uvloop, the loop the broker runs on in production (uvloop has no
loop.sendfile, for one, so the connection's zero-copy path differs from asyncio's)."""
import asyncio
import struct

import pytest
import uvloop

from protocol.api import API_SPECS
from protocol.headers import RequestHeader, decode_response, encode_request

from broker.config import BrokerConfig
from broker.server import Broker


def pytest_asyncio_loop_factories(config, item):
    return {"uvloop": uvloop.new_event_loop}


class RawClient:
    """Speaks the Kafka protocol with protocol/ codecs; one connection."""

    def __init__(self, reader, writer):
        self.reader = reader
        self.writer = writer
        self.correlation_id = 0

    @classmethod
    async def connect(cls, port: int) -> "RawClient":
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    def send(self, message, version: int, client_id="test") -> int:
        self.correlation_id += 1
        header = RequestHeader(message.API_KEY, version, self.correlation_id, client_id)
        self.writer.write(encode_request(header, message))
        return self.correlation_id

    async def receive(self, api_key: int, version: int, timeout: float = 5.0):
        size_bytes = await asyncio.wait_for(self.reader.readexactly(4), timeout)
        size = struct.unpack(">i", size_bytes)[0]
        body = await asyncio.wait_for(self.reader.readexactly(size), timeout)
        return decode_response(memoryview(body), api_key, version)

    async def request(self, message, version: int, timeout: float = 5.0):
        correlation_id = self.send(message, version)
        got, response = await self.receive(message.API_KEY, version, timeout)
        assert got == correlation_id
        return response

    def send_raw(self, data: bytes) -> None:
        self.writer.write(data)

    async def is_closed(self, timeout: float = 3.0) -> bool:
        """True when the broker closed the connection (EOF) within `timeout`."""
        try:
            data = await asyncio.wait_for(self.reader.read(1), timeout)
        except (ConnectionResetError, BrokenPipeError):
            return True
        except asyncio.TimeoutError:
            return False
        return data == b""

    async def close(self):
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass


@pytest.fixture
async def start_broker(tmp_path):
    """`await start_broker(**overrides)` -> a started Broker; all are shut down after the test."""
    brokers = []

    async def start(**overrides):
        props = {"broker.id": "0", "listeners": "PLAINTEXT://127.0.0.1:0",
                 "log.dirs": str(tmp_path / f"logs{len(brokers)}")}
        props.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
        broker = Broker(BrokerConfig(props))
        await broker.start()
        brokers.append(broker)
        return broker

    yield start
    for broker in brokers:
        await broker.shutdown()


@pytest.fixture
async def broker(start_broker):
    return await start_broker()


@pytest.fixture
async def client(broker):
    c = await RawClient.connect(broker.port)
    yield c
    await c.close()


def api_name(api_key: int) -> str:
    return API_SPECS[api_key].name
