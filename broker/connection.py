"""One client connection: frames in, responses out, strictly in request order.

Theory of operation (uvicorn's one-protocol-object-per-connection, Kafka's one-request-in-flight
per channel):

- Reading is buffered (asyncio.BufferedProtocol): the socket reads straight into our memory.
  Small frames are read into a 64 KiB scratch buffer and copied out; a frame larger than what
  the scratch holds gets its own (uninitialised) buffer, and the rest of its body is read
  directly into it. So a large produce request is never joined from chunks, and its frame is
  writable: storage patches offsets into it in place instead of copying the batch (issue 9's
  profile: the join and that copy were ~11% of the broker's CPU producing 1 KiB messages).
  The scratch is shared by every connection of the thread (the loop calls `get_buffer`, reads,
  then `buffer_updated`, with nothing in between), so an idle connection holds only the bytes
  of a partial frame it has received (`_pending`), not 64 KiB. Complete frames go to a queue.
  A frame whose size prefix exceeds `socket.request.max.bytes` closes the connection with a
  log line (Kafka's InvalidReceiveException), as does a negative size. `data_received` (the
  protocol's `FrameReader`) stays for transports that push bytes.
- One task per connection (`_serve`) takes frames in order: decode, run the handler, write the
  response, then the next frame. So responses leave in request order by construction, and a
  handler that waits (a long-polling Fetch in the purgatory) only holds up its own connection;
  every other connection has its own task.
- Back-pressure: while more than `MAX_QUEUED_FRAMES` frames, or more than
  `socket.request.max.bytes` of them, wait, reading pauses (Kafka mutes the channel while a
  request is in flight; we allow a little pipelining, and one connection holds a few hundred
  MB at most). Writing uses a write
  buffer high-water mark of 0, so the transport tells us (`pause_writing`/`resume_writing`)
  exactly when the socket has taken every byte: the next response waits for that.
- Zero-copy: response pieces are bytes (written to the transport) and `FileRegion`s (record data
  in segment files). uvloop has no `loop.sendfile`, so a region goes out with `os.sendfile` on a
  duplicate of the socket's fd, after the transport's buffer has drained (TOOLCHAIN.md); on
  EAGAIN we wait for the fd to become writable with `loop.add_writer`. `os.sendfile` takes an
  explicit offset, so the shared segment file's position never moves. A region goes out in
  calls of at most 192 KiB with a turn of the event loop between them, so a large fetch
  response does not keep other connections' requests waiting for its whole length.
- Bad input: an undecodable header or body, an unknown api key or an unsupported version closes
  the connection with a log line (what Kafka does), except ApiVersions at an unsupported version,
  answered at v0 with UNSUPPORTED_VERSION. Handler exceptions become error responses (dispatch).
- Quota throttling: a handler that sets `ctx.throttle_time_ms` (Produce/Fetch over a byte-rate
  quota) gets its response sent at once, then the connection is muted: no further frame is
  handled until the throttle time has passed (KIP-219), or the broker stops. Kafka 3.9 does
  this for every request version (its ThrottledChannel), the versions before KIP-219 included.
- Idle: `last_active` is refreshed on every read and write; the server closes connections idle
  longer than `connections.max.idle.ms` that have no request in flight.
"""
from __future__ import annotations

import asyncio
import collections
import errno
import logging
import os
import socket
import struct
import threading

import numpy

from protocol.api import API_SPECS
from protocol.errors import ErrorCode
from protocol.exceptions import FrameTooLarge, ProtocolError
from protocol.framing import FrameReader
from protocol.headers import encode_response
from protocol.records import FileRegion

from broker.context import RequestContext
from broker.dispatch import (BadRequest, UnsupportedApiVersions, decode_request, error_response,
                             run_handler)

log = logging.getLogger(__name__)

MAX_QUEUED_FRAMES = 16        # frames read ahead of the one being handled before reading pauses
# A file region goes out in os.sendfile calls of at most this many bytes, with a turn of the
# event loop between them, so one large fetch does not hold every other connection up for its
# whole length (a 3 MiB response took ~1.1 ms of kernel time in one call). The size was
# measured on the consume benchmark (1 GiB, 2 consumers). With librdkafka consumers, which
# limit the rate themselves: 1,036 MB/s mean over 10 runs with one call per region, about
# 1,000 with 512, 256 or 192 KiB calls. With the batch-counting consumers of
# bench/fetch_load.py, which the broker limits: means over 15 runs of 2,090 MB/s with 192 KiB
# calls, 1,815 with 256 KiB; over 9 runs, 1,623 with 512 KiB; ~1,760 with 128 KiB, ~1,300 with
# 2 MiB. Smaller calls cost less kernel time per byte down to about 192 KiB.
_SENDFILE_CHUNK = 192 * 1024
_SCRATCH_SIZE = 1 << 16       # small frames are read here, several per read, then copied out
_SIZE = struct.Struct(">i")
_local = threading.local()    # the thread's shared read scratch (see the module docstring)
# What ConnectionServer.register (broker/server.py) decides for a new connection.
ADMITTED, WAITING, REFUSED = "admitted", "waiting", "refused"


def _uninitialised(size: int):
    """A writable buffer of `size` bytes that the socket is about to fill."""
    return numpy.empty(size, dtype=numpy.uint8)


def _shared_scratch() -> bytearray:
    scratch = getattr(_local, "scratch", None)
    if scratch is None:
        scratch = _local.scratch = bytearray(_SCRATCH_SIZE)
    return scratch


class Connection(asyncio.BufferedProtocol):
    def __init__(self, broker, server, listener_name: str):
        self.broker = broker
        self.server = server
        self.listener_name = listener_name
        self.transport = None
        self.connection_id = ""
        self.client_host = ""
        self.client_port = 0
        self.reader = FrameReader(broker.config.socket_request_max_bytes)
        self.frames = collections.deque()
        self._queued_bytes = 0         # sum of the sizes of `frames`
        self.in_flight = False
        self.closed = False
        self.last_active = 0.0
        self._wakeup = None            # future the serving task waits on for frames
        self._drained = None           # future the serving task waits on for the socket to drain
        self._writing_paused = False
        self._reading_paused = False
        self._last_frame_read = False  # a bad size prefix: answer what came before it, then close
        self._task = None
        self._dup_fd = -1
        self._pending = b""            # start of a frame received but not complete yet
        self._scratch_len = 0          # bytes in the shared scratch for this read
        self._body = None              # memoryview of the large frame being read directly
        self._body_filled = 0
        self._muted_until = 0.0        # loop time before which no frame is handled (throttled)

    # -- asyncio.Protocol callbacks ------------------------------------------------------------

    def connection_made(self, transport):
        self.transport = transport
        peer = transport.get_extra_info("peername") or ("", 0)
        local = transport.get_extra_info("sockname") or ("", 0)
        self.client_host, self.client_port = peer[0], peer[1]
        self.connection_id = f"{local[0]}:{local[1]}-{peer[0]}:{peer[1]}"
        self.last_active = self.broker.loop.time()
        status = self.server.register(self)
        if status == REFUSED:
            self.closed = True
            transport.abort()
        elif status == WAITING:                 # over max.connections: unread until a slot frees
            transport.pause_reading()
        else:
            self.admit()

    def admit(self):
        """Start serving (at once, or when a max.connections slot frees up)."""
        transport = self.transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            _tune_socket(sock, self.broker.config)
        transport.set_write_buffer_limits(high=0, low=0)
        transport.resume_reading()
        self.last_active = self.broker.loop.time()
        self._task = self.broker.loop.create_task(self._serve())

    def data_received(self, data):
        self.last_active = self.broker.loop.time()
        self.reader.feed(data)
        try:
            while True:
                frame = self.reader.next_frame()
                if frame is None:
                    break
                self.frames.append(frame)
                self._queued_bytes += len(frame)
        except FrameTooLarge as exc:
            self._bad_size(exc.size)
            return
        except ProtocolError as exc:
            log.warning("Closing connection %s: invalid frame: %s", self.connection_id, exc)
            self._read_no_more()
            return
        self._frames_ready()

    def get_buffer(self, sizehint):
        if self._body is not None:
            return memoryview(self._body)[self._body_filled:]
        scratch = _shared_scratch()
        n = len(self._pending)
        if n:
            scratch[:n] = self._pending
        self._scratch_len = n
        return memoryview(scratch)[n:]

    def buffer_updated(self, nbytes):
        self.last_active = self.broker.loop.time()
        if self._body is not None:
            self._body_filled += nbytes
            if self._body_filled < len(self._body):
                return
            self.frames.append(self._body)
            self._queued_bytes += len(self._body)
            self._body = None
        else:
            self._scratch_len += nbytes
            if not self._split_scratch():
                return
        self._frames_ready()

    def _split_scratch(self) -> bool:
        """Move complete frames out of the scratch buffer; a frame too big for what is there
        becomes `_body`. False after a bad size prefix (see `_bad_size`)."""
        scratch, end, pos = _shared_scratch(), self._scratch_len, 0
        max_size = self.reader.max_frame_size
        while end - pos >= 4:
            size = _SIZE.unpack_from(scratch, pos)[0]
            if size < 0 or size > max_size:
                self._bad_size(size)
                return False
            if end - pos - 4 >= size:
                self.frames.append(scratch[pos + 4:pos + 4 + size])
                self._queued_bytes += size
                pos += 4 + size
                continue
            if size + 4 > _SCRATCH_SIZE:
                have = end - pos - 4
                # Uninitialised memory: bytearray(size) would zero it first, a memset of the
                # whole request that showed as ~8% of the broker's CPU producing 1 KiB values.
                body = memoryview(_uninitialised(size))
                body[:have] = memoryview(scratch)[pos + 4:end]
                self._body, self._body_filled = body, have
                pos = end
            break
        self._pending = bytes(scratch[pos:end]) if pos < end else b""
        return True

    def _bad_size(self, size):
        """A size prefix Kafka refuses: nothing more is read, and the connection closes once the
        requests before it are answered (Kafka reads a connection's next request only after
        the previous response went out, so it sees the bad size only then: acknowledgements
        of produce requests already taken are not lost)."""
        if size < 0:
            log.warning("Closing connection %s: invalid frame: negative frame size %d",
                        self.connection_id, size)
        else:
            log.warning("Closing connection %s: request of %d bytes is larger than "
                        "socket.request.max.bytes (%d)", self.connection_id, size,
                        self.reader.max_frame_size)
        self._read_no_more()

    def _read_no_more(self):
        self._last_frame_read = True
        if not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        if self.idle:
            self.close()
        else:
            self._wake()

    def _frames_ready(self):
        if self.frames:
            if (len(self.frames) > MAX_QUEUED_FRAMES
                    or self._queued_bytes > self.reader.max_frame_size) \
                    and not self._reading_paused:
                self._reading_paused = True
                self.transport.pause_reading()
            self._wake()

    def eof_received(self):
        return False        # close our side too once the client half-closes

    def connection_lost(self, exc):
        self.closed = True
        self.server.unregister(self)
        self._wake()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        if self._dup_fd >= 0:
            try:
                self.broker.loop.remove_writer(self._dup_fd)
            except Exception:
                pass
            os.close(self._dup_fd)
            self._dup_fd = -1

    def pause_writing(self):
        self._writing_paused = True

    def resume_writing(self):
        self._writing_paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    # -- serving -------------------------------------------------------------------------------

    def _wake(self):
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    def close(self):
        if not self.closed:
            self.closed = True
            self.transport.close()

    @property
    def idle(self) -> bool:
        return not self.in_flight and not self.frames

    async def _serve(self):
        loop = self.broker.loop
        try:
            while not self.closed:
                if self._muted_until:
                    await self._wait_until(self._muted_until)
                    self._muted_until = 0.0
                if not self.frames:
                    if self.server.stopping or self._last_frame_read:
                        break
                    self._wakeup = loop.create_future()
                    await self._wakeup
                    self._wakeup = None
                    continue
                frame = self.frames.popleft()
                self._queued_bytes -= len(frame)
                if (self._reading_paused and len(self.frames) <= MAX_QUEUED_FRAMES // 2
                        and self._queued_bytes <= self.reader.max_frame_size // 2
                        and not self._last_frame_read):
                    self._reading_paused = False
                    self.transport.resume_reading()
                self.in_flight = True
                try:
                    await self._handle(frame)
                finally:
                    self.in_flight = False
                    self.last_active = loop.time()
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("Unexpected error on connection %s; closing it", self.connection_id)
        finally:
            self.close()
            self.server.request_done(self)

    async def _wait_until(self, deadline: float) -> None:
        """Wait out a throttle (loop time `deadline`); frames arriving meanwhile wake us to
        re-check, and shutdown or a close ends the wait."""
        loop = self.broker.loop
        while not self.closed and not self.server.stopping and loop.time() < deadline:
            self._wakeup = loop.create_future()
            timer = loop.call_later(deadline - loop.time(), self._wake)
            try:
                await self._wakeup
            finally:
                timer.cancel()
                self._wakeup = None

    async def _handle(self, frame):
        try:
            header, module, request = decode_request(frame)
        except UnsupportedApiVersions as exc:
            from broker.handlers.api_versions import unsupported_version
            await self._send(exc.header.correlation_id, exc.header.api_key, 0,
                             unsupported_version())
            return
        except BadRequest as exc:
            log.warning("Closing connection %s due to invalid request: %s",
                        self.connection_id, exc)
            self.close()
            return
        ctx = RequestContext(header.api_key, header.api_version, header.correlation_id,
                             header.client_id, self.client_host, self.client_port,
                             self.connection_id, self.listener_name,
                             request_size=len(frame))
        try:
            response = await run_handler(self.broker, ctx, module, request)
        except BadRequest as exc:
            log.warning("Closing connection %s: %s", self.connection_id, exc)
            self.close()
            return
        # Throttled: the response goes at once and the connection reads nothing more for that
        # long, whatever the version (Kafka >= 2.0; clients before KIP-219 wait on the mute).
        throttle_s = ctx.throttle_time_ms / 1000.0
        if response is not None and not self.closed:
            try:
                pieces = encode_response(header.correlation_id, header.api_key,
                                         header.api_version, response)
            except (ProtocolError, struct.error, OverflowError, ValueError) as exc:
                # e.g. a stored string longer than a string field holds, a number past its
                # field: as Kafka's handleError, the request gets UNKNOWN_SERVER_ERROR and
                # the connection stays (it closes if even that cannot be encoded)
                log.error("[KafkaApi-%s] Cannot encode the %s v%d response to %s: %s",
                          self.broker.broker_id, API_SPECS[header.api_key].name,
                          header.api_version, self.connection_id, exc)
                try:
                    fallback = error_response(header.api_key, header.api_version, request,
                                              ErrorCode.UNKNOWN_SERVER_ERROR)
                    pieces = None if fallback is None else encode_response(
                        header.correlation_id, header.api_key, header.api_version, fallback)
                except (ProtocolError, struct.error, OverflowError, ValueError):
                    pieces = None
                if pieces is None:
                    self.close()
                    return
            await self._write_pieces(pieces)
        if throttle_s > 0:
            self._muted_until = self.broker.loop.time() + throttle_s

    async def _send(self, correlation_id, api_key, api_version, response):
        await self._write_pieces(encode_response(correlation_id, api_key, api_version, response))

    async def _write_pieces(self, pieces):
        transport = self.transport
        for piece in pieces:
            if self.closed:
                return
            if type(piece) is FileRegion:
                await self._drain()
                await self._sendfile(piece)
            else:
                transport.write(piece)
        await self._drain()
        self.last_active = self.broker.loop.time()

    async def _drain(self):
        """Wait until the transport has handed every written byte to the socket."""
        while self._writing_paused and not self.closed:
            self._drained = self.broker.loop.create_future()
            await self._drained
            self._drained = None
        # Belt and braces for sendfile ordering: a transport that buffered without pausing us
        # (it should not, with a high-water mark of 0) still gets to flush first.
        spins = 0
        while not self.closed and self.transport.get_write_buffer_size() > 0 and spins < 1000:
            await asyncio.sleep(0 if spins < 10 else 0.001)
            spins += 1

    async def _sendfile(self, region: FileRegion):
        """Send a file region with os.sendfile on a dup of the socket fd (socket drained)."""
        if self._dup_fd < 0:
            sock = self.transport.get_extra_info("socket")
            if sock is None:                     # not a real socket (in-memory transport)
                self.transport.write(region.read_bytes())
                return
            self._dup_fd = os.dup(sock.fileno())
        fd = self._dup_fd
        in_fd = region.file.fileno()
        offset, remaining = region.position, region.length
        loop = self.broker.loop
        while remaining > 0 and not self.closed:
            try:
                sent = os.sendfile(fd, in_fd, offset, min(remaining, _SENDFILE_CHUNK))
            except BlockingIOError:
                await self._writable(fd)
                continue
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.ECONNRESET):
                    self.close()
                    return
                raise
            if sent == 0:
                raise OSError(f"file region {region.position}+{region.length} is past the "
                              f"end of its file")
            offset += sent
            remaining -= sent
            self.last_active = loop.time()
            if remaining > 0:
                await asyncio.sleep(0)          # let other connections' requests in

    async def _writable(self, fd):
        loop = self.broker.loop
        future = loop.create_future()
        loop.add_writer(fd, lambda: future.done() or future.set_result(None))
        try:
            await future
        finally:
            loop.remove_writer(fd)


def _tune_socket(sock, config):
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if config.socket_send_buffer_bytes > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, config.socket_send_buffer_bytes)
        if config.socket_receive_buffer_bytes > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF,
                            config.socket_receive_buffer_bytes)
    except OSError:
        pass
