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

Responses are read by `_ResponseReader`, an asyncio BufferedProtocol: small frames are received
several at a time into a 64 KiB scratch buffer and copied out; a frame larger than that is
received straight into a buffer of its own size, so a follower's Fetch response (megabytes of
record batches) is copied once, by the kernel, and its records reach the log as slices of it.
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
_SCRATCH_SIZE = 1 << 16
CLIENT_SOFTWARE_NAME = "kbroker-client"
CLIENT_SOFTWARE_VERSION = "0.1.0"


def _uninitialised(size: int):
    """A writable buffer of `size` bytes that the socket is about to fill: bytearray(size)
    would zero it first, a memset of every replicated byte (4% of a catching-up follower's CPU,
    perf). numpy is imported on the first large frame (tools rarely get one)."""
    import numpy
    return numpy.empty(size, dtype=numpy.uint8)


class _ResponseReader(asyncio.BufferedProtocol):
    """Splits the byte stream of one connection into response frames for `on_frame(frame)`
    (bytes, or a memoryview of a frame's own buffer when it is larger than the scratch), and
    tells `on_lost(reason)` once when the connection ends or sends a frame size that cannot be
    right. Also the write side's flow control (`drain`)."""

    def __init__(self, max_frame_size: int, on_frame, on_lost):
        self.max_frame_size = max_frame_size
        self.on_frame, self.on_lost = on_frame, on_lost
        self.transport = None
        self._scratch = bytearray(_SCRATCH_SIZE)
        self._filled = 0                # bytes of the scratch holding unsplit data
        self._body = None               # memoryview of the large frame being received
        self._body_filled = 0
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future] = []
        self._lost = False

    def connection_made(self, transport):
        self.transport = transport

    def get_buffer(self, sizehint):
        if self._body is not None:
            return self._body[self._body_filled:]
        return memoryview(self._scratch)[self._filled:]

    def buffer_updated(self, nbytes):
        if self._body is not None:
            self._body_filled += nbytes
            if self._body_filled == len(self._body):
                body, self._body = self._body, None
                self.on_frame(body)
            return
        self._filled += nbytes
        self._split()

    def _split(self) -> None:
        scratch, end, pos = self._scratch, self._filled, 0
        while end - pos >= 4 and not self._lost:
            (size,) = _SIZE.unpack_from(scratch, pos)
            if size < 0 or size > self.max_frame_size:
                self._lose(f"invalid response frame size {size}")
                self.transport.abort()
                return
            if end - pos - 4 >= size:
                self.on_frame(bytes(scratch[pos + 4:pos + 4 + size]))
                pos += 4 + size
                continue
            if size + 4 > len(scratch):
                have = end - pos - 4
                body = memoryview(_uninitialised(size))
                body[:have] = memoryview(scratch)[pos + 4:end]
                self._body, self._body_filled = body, have
                pos = end
            break
        if pos:
            scratch[:end - pos] = scratch[pos:end]
            self._filled = end - pos

    def eof_received(self):
        return False                    # close our side too

    def connection_lost(self, exc):
        self._lose(str(exc) if exc else "closed by the broker")
        self._wake_writers(exc)

    def _lose(self, reason: str) -> None:
        if not self._lost:
            self._lost = True
            self.on_lost(reason)

    def pause_writing(self):
        self._write_paused = True

    def resume_writing(self):
        self._write_paused = False
        self._wake_writers(None)

    def _wake_writers(self, exc) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                if exc is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(ConnectionResetError(str(exc)))

    async def drain(self) -> None:
        if self._lost:
            raise ConnectionResetError("connection lost")
        if self._write_paused:
            waiter = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(waiter)
            await waiter


class BrokerConnection:
    def __init__(self, host: str, port: int, *, client_id: str = "kbroker-client", node_id: int = -1,
                 request_timeout_ms: int = 30000, connect_timeout_ms: int = 10000,
                 max_frame_size: int = 512 * 1024 * 1024, max_in_flight: int = 64,
                 close_on_timeout: bool = False):
        self.host = host
        # Java's NetworkClient.handleTimedOutRequests: a request that timed out takes its
        # connection down (the broker may be hung: the next request goes on a new connection,
        # or to another broker). The clients' connections do; inter-broker ones keep their
        # callers' own handling.
        self.close_on_timeout = close_on_timeout
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
        self._transport = None
        self._protocol: _ResponseReader | None = None
        self._closed_error: Exception | None = None

    def __repr__(self):
        return f"<BrokerConnection node={self.node_id} {self.host}:{self.port}>"

    @property
    def connected(self) -> bool:
        return self._transport is not None and self._closed_error is None

    @property
    def socket(self):
        """The connected socket (to tune its buffers), or None."""
        return self._transport.get_extra_info("socket") if self._transport else None

    async def connect(self) -> "BrokerConnection":
        try:
            async with asyncio.timeout(self.connect_timeout):
                self._transport, self._protocol = \
                    await asyncio.get_running_loop().create_connection(
                        lambda: _ResponseReader(self.max_frame_size, self._on_frame,
                                                self._on_lost),
                        self.host, self.port)
        except (OSError, asyncio.TimeoutError) as e:
            raise KafkaConnectionError(f"Connection to node {self.node_id} ({self.host}:{self.port}) "
                                       f"could not be established: {e or 'timed out'}") from None
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
        if self._transport is None:
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
            self._transport.write(data)
            try:
                await self._protocol.drain()
            except (OSError, RuntimeError) as e:
                self._fail_all(KafkaConnectionError(f"write to {self.host}:{self.port} failed: {e}"))
            if future is None:
                return None
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns the answer instead
            # of raising CancelledError when the cancel comes after the answer arrived and
            # before this task resumed (CPython gh-86296), and a cancelled request loop (a
            # replica fetcher being stopped) would go on.
            try:
                async with asyncio.timeout(timeout or self.request_timeout):
                    return await future
            except asyncio.TimeoutError:
                self._pending.pop(correlation_id, None)
                error = KafkaTimeoutError(
                    f"{ApiKey(type(request).API_KEY).name} to node {self.node_id} timed out "
                    f"after {timeout or self.request_timeout:.1f}s")
                if self.close_on_timeout:
                    self._fail_all(KafkaConnectionError(
                        f"connection to {self.host}:{self.port} closed: {error}"))
                raise error from None

    def _on_frame(self, frame) -> None:
        (correlation_id,) = _SIZE.unpack_from(frame, 0)
        entry = self._pending.pop(correlation_id, None)
        if entry is None:
            return                      # its request timed out; drop the late answer
        future, api_key, version = entry
        try:
            _, response = decode_response(memoryview(frame), api_key, version)
        except Exception as e:          # a corrupt response fails that request only
            if not future.done():
                future.set_exception(e)
            return
        if not future.done():
            future.set_result(response)

    def _on_lost(self, reason: str) -> None:
        self._fail_all(KafkaConnectionError(
            f"Connection to node {self.node_id} ({self.host}:{self.port}) lost: {reason}"))

    def _fail_all(self, error: Exception) -> None:
        self._closed_error = error
        pending, self._pending = self._pending, {}
        for future, _, _ in pending.values():
            if not future.done():
                future.set_exception(error)
                future.exception()   # mark retrieved: its waiter may have been cancelled (no stray warning)
        if self._transport is not None:
            self._transport.close()

    async def close(self) -> None:
        self._fail_all(KafkaConnectionError("connection closed"))
        await asyncio.sleep(0)          # the transport's connection_lost runs
