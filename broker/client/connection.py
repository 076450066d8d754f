"""One TCP connection to one broker, with request pipelining.

Theory of operation: ``send()`` encodes a request with the next correlation id, registers a future
under that id, writes the frame and awaits the future; a single reader task reads frames (4-byte size,
then body), looks the correlation id up and resolves the matching future with the decoded response.
Kafka answers requests on a connection in the order they were sent, but matching by id costs nothing
and catches a confused peer. Many requests may be in flight at once (up to
``max_in_flight``). A request sent with ``expect_response=False`` (Produce with acks=0) gets no future.

On connect the connection negotiates versions: it sends ApiVersions at the highest version this
client knows; a broker that does not know that version answers with UNSUPPORTED_VERSION and a v0
body listing its ranges, and the client retries at v0 (KIP-511). ``pick_version(api_key, cap)`` then
returns the highest version both sides speak (capped by the caller when a newer version would change
the semantics the caller relies on, e.g. Fetch v13 identifies topics by id).

When the connection breaks, every pending future fails with KafkaConnectionError; the owner
(ClusterClient) drops the connection and opens a new one on the next request.
"""
from __future__ import annotations

import asyncio
import itertools
import struct

from protocol.api import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.headers import RequestHeader, decode_response, encode_request
from protocol.messages import ApiVersionsRequest, ApiVersionsResponse

from broker.client.errors import KafkaConnectionError, KafkaTimeoutError, UnsupportedVersionError

_SIZE = struct.Struct(">i")
CLIENT_SOFTWARE_NAME = "kbroker-client"
CLIENT_SOFTWARE_VERSION = "0.1.0"


class BrokerConnection:
    def __init__(self, host: str, port: int, *, client_id: str = "kbroker-client", node_id: int = -1,
                 request_timeout_ms: int = 30000, connect_timeout_ms: int = 10000,
                 max_frame_size: int = 512 * 1024 * 1024, max_in_flight: int = 64):
        self.host = host
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout = request_timeout_ms / 1000
        self.connect_timeout = connect_timeout_ms / 1000
        self.max_frame_size = max_frame_size
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._correlation = itertools.count(1)
        self._pending: dict[int, tuple[asyncio.Future, int, int]] = {}
        self._slots = asyncio.Semaphore(max_in_flight)
        self._reader = None
        self._writer = None
        self._read_task = None
        self._closed_error: Exception | None = None

    def __repr__(self):
        return f"<BrokerConnection node={self.node_id} {self.host}:{self.port}>"

    @property
    def connected(self) -> bool:
        return self._writer is not None and self._closed_error is None

    async def connect(self) -> "BrokerConnection":
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port), self.connect_timeout)
        except (OSError, asyncio.TimeoutError) as e:
            raise KafkaConnectionError(f"Connection to node {self.node_id} ({self.host}:{self.port}) "
                                       f"could not be established: {e or 'timed out'}") from None
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())
        await self._negotiate_versions()
        return self

    async def _negotiate_versions(self) -> None:
        version = ApiVersionsRequest.MAX_VERSION
        for _ in range(2):
            request = ApiVersionsRequest(client_software_name=CLIENT_SOFTWARE_NAME,
                                         client_software_version=CLIENT_SOFTWARE_VERSION)
            response = await self.send(request, version)
            if response.error_code == ErrorCode.UNSUPPORTED_VERSION and version > 0:
                ranges = [k.max_version for k in response.api_keys if k.api_key == ApiKey.API_VERSIONS]
                version = min(ranges[0], ApiVersionsResponse.MAX_VERSION) if ranges else 0
                continue
            if response.error_code:
                raise KafkaError(ErrorCode(response.error_code), "ApiVersions failed")
            self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            return
        raise UnsupportedVersionError("broker refused every ApiVersions version")

    def pick_version(self, request_cls, cap: int | None = None) -> int:
        """Highest version of ``request_cls``'s API both sides speak (at most ``cap``)."""
        ours_max = request_cls.MAX_VERSION if cap is None else min(cap, request_cls.MAX_VERSION)
        theirs = self.api_versions.get(request_cls.API_KEY)
        if theirs is None:
            raise UnsupportedVersionError(
                f"The broker does not support {ApiKey(request_cls.API_KEY).name}")
        version = min(ours_max, theirs[1])
        if version < max(theirs[0], request_cls.MIN_VERSION):
            raise UnsupportedVersionError(
                f"The broker supports {ApiKey(request_cls.API_KEY).name} v{theirs[0]}-{theirs[1]}, "
                f"this client v{request_cls.MIN_VERSION}-{ours_max}")
        return version

    def supports(self, request_cls, version: int) -> bool:
        theirs = self.api_versions.get(request_cls.API_KEY)
        return theirs is not None and theirs[0] <= version <= theirs[1]

    async def send(self, request, version: int | None = None, *, cap: int | None = None,
                   expect_response: bool = True, timeout: float | None = None):
        """Send ``request`` and return the decoded response (None when ``expect_response`` is False)."""
        if self._closed_error is not None:
            raise KafkaConnectionError(str(self._closed_error))
        if self._writer is None:
            raise KafkaConnectionError(f"{self!r} is not connected")
        if version is None:
            version = self.pick_version(type(request), cap)
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        header = RequestHeader(type(request).API_KEY, version, correlation_id, self.client_id)
        data = encode_request(header, request)
        async with self._slots:
            future = None
            if expect_response:
                future = asyncio.get_running_loop().create_future()
                self._pending[correlation_id] = (future, type(request).API_KEY, version)
            self._writer.write(data)
            try:
                await self._writer.drain()
            except (OSError, RuntimeError) as e:
                self._fail_all(KafkaConnectionError(f"write to {self.host}:{self.port} failed: {e}"))
            if future is None:
                return None
            try:
                return await asyncio.wait_for(asyncio.shield(future), timeout or self.request_timeout)
            except asyncio.TimeoutError:
                self._pending.pop(correlation_id, None)
                raise KafkaTimeoutError(
                    f"{ApiKey(type(request).API_KEY).name} to node {self.node_id} timed out "
                    f"after {timeout or self.request_timeout:.1f}s") from None

    async def _read_loop(self) -> None:
        reader = self._reader
        try:
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                if size < 0 or size > self.max_frame_size:
                    raise KafkaConnectionError(f"invalid response frame size {size}")
                frame = await reader.readexactly(size)
                (correlation_id,) = _SIZE.unpack_from(frame, 0)
                entry = self._pending.pop(correlation_id, None)
                if entry is None:
                    continue  # its request timed out; drop the late answer
                future, api_key, version = entry
                try:
                    _, response = decode_response(memoryview(frame), api_key, version)
                except Exception as e:  # a corrupt response fails that request only
                    if not future.done():
                        future.set_exception(e)
                    continue
                if not future.done():
                    future.set_result(response)
        except asyncio.CancelledError:
            self._fail_all(KafkaConnectionError(f"connection to {self.host}:{self.port} closed"))
            raise
        except (OSError, asyncio.IncompleteReadError, KafkaConnectionError) as e:
            reason = "closed by the broker" if isinstance(e, asyncio.IncompleteReadError) else str(e)
            self._fail_all(KafkaConnectionError(
                f"Connection to node {self.node_id} ({self.host}:{self.port}) lost: {reason}"))

    def _fail_all(self, error: Exception) -> None:
        self._closed_error = error
        pending, self._pending = self._pending, {}
        for future, _, _ in pending.values():
            if not future.done():
                future.set_exception(error)
                future.exception()   # mark retrieved: its waiter may have been cancelled (no stray warning)
        if self._writer is not None:
            self._writer.close()

    async def close(self) -> None:
        if self._read_task is not None:
            self._read_task.cancel()
            try:
                await self._read_task
            except (asyncio.CancelledError, Exception):
                pass
            self._read_task = None
        if self._writer is not None:
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except (OSError, ConnectionError):
                pass
        self._fail_all(KafkaConnectionError("connection closed"))
