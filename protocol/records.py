"""`FileRegion`: record data that stays in a file until the socket sends it.

Encoders accept a FileRegion wherever a `records` field goes.  `encode_pieces()` then returns
the encoded bytes *around* the region as separate pieces — ``[b"...header...", region,
b"...rest..."]`` — so the broker can `write()` the bytes and `sendfile()` the region in order,
never reading the log segment into Python.  `encode()` (which must return one bytes object)
reads the region with `os.pread`, so it does not move the file position.
"""
import os


class FileRegion:
    """`length` bytes of `file` (anything with `fileno()`) starting at byte `position`."""

    __slots__ = ("file", "position", "length")

    def __init__(self, file, position, length):
        if position < 0 or length < 0:
            raise ValueError(f"negative file region ({position}, {length})")
        self.file = file
        self.position = position
        self.length = length

    def __len__(self):
        return self.length

    def read_bytes(self):
        """The region's content, read without moving the file position."""
        data = os.pread(self.file.fileno(), self.length, self.position)
        if len(data) != self.length:
            raise OSError(f"file region {self.position}+{self.length} is past the end of the file")
        return data

    def __eq__(self, other):
        if not isinstance(other, FileRegion):
            return NotImplemented
        return (self.file is other.file and self.position == other.position
                and self.length == other.length)

    def __hash__(self):
        return hash((id(self.file), self.position, self.length))

    def __repr__(self):
        return f"FileRegion({self.file!r}, position={self.position}, length={self.length})"
