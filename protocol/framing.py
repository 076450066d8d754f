"""Kafka framing: every request and response is a 4-byte big-endian size, then that many bytes.

`FrameReader` is sans-I/O, in the style of h11: the connection feeds it whatever the socket
returned (`feed`) and pulls complete frames (`next_frame`) until it returns None.  Any split of
the stream works, down to one byte at a time.  Frame bodies come back as memoryviews over the
reader's buffer without copying; a body stays valid after later `feed` calls because the
reader never mutates a buffer it has handed out — it only drops its reference once consumed.

`frame(pieces)` does the opposite for the writer: it prepends the size prefix to encoded
pieces (bytes and `FileRegion`s, see protocol.records) without joining them.
"""
import struct

from .exceptions import FrameTooLarge, ProtocolError
from .records import FileRegion

_SIZE = struct.Struct(">i")


class FrameReader:
    """Splits a byte stream into frame bodies; `max_frame_size` bounds the size prefix.

    Fed chunks wait in a list and are joined only once a whole frame (or its size prefix) is
    there, so a large frame arriving in many small reads is copied O(1) times, not O(reads).
    """

    __slots__ = ("max_frame_size", "_buffer", "_start", "_chunks", "_pending")

    def __init__(self, max_frame_size: int):
        self.max_frame_size = max_frame_size
        self._buffer = b""      # immutable: views handed out stay valid
        self._start = 0         # first unconsumed byte of _buffer
        self._chunks = []       # fed after _buffer was built
        self._pending = 0       # total length of _chunks

    def feed(self, data: bytes) -> None:
        if data:
            self._chunks.append(bytes(data))
            self._pending += len(data)

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buffer) - self._start + self._pending

    def _merge(self):
        self._buffer = b"".join([self._buffer[self._start:], *self._chunks])
        self._start = 0
        self._chunks = []
        self._pending = 0

    def next_frame(self):
        """The next complete frame body as a memoryview, or None if more data is needed."""
        available = len(self._buffer) - self._start
        if available < 4:
            if available + self._pending < 4:
                return None
            self._merge()
            available = len(self._buffer)
        start = self._start
        size = _SIZE.unpack_from(self._buffer, start)[0]
        if size < 0:
            raise ProtocolError(f"negative frame size {size}", offset=start)
        if size > self.max_frame_size:
            raise FrameTooLarge(size, self.max_frame_size)
        if available < 4 + size:
            if available + self._pending < 4 + size:
                return None
            self._merge()
            start = 0
        end = start + 4 + size
        self._start = end
        return memoryview(self._buffer)[start + 4:end]


def frame_size(pieces) -> int:
    return sum(p.length if type(p) is FileRegion else len(p) for p in pieces)


def frame(pieces) -> list:
    """Prepends the 4-byte size prefix to encoded pieces; the first piece absorbs the prefix."""
    prefix = _SIZE.pack(frame_size(pieces))
    if pieces and type(pieces[0]) is not FileRegion:
        return [prefix + pieces[0], *pieces[1:]]
    return [prefix, *pieces]
