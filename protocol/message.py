"""`Message`: the small base class of every generated struct.

Generated classes hold the straight-line codecs: `_write(self, buf, pieces, version)` appends
the struct to a bytearray, and the classmethod `_read(data, pos, version) -> (obj, pos)` parses
one.  This base class only adds the public entry points around them (version check, buffer
handling, error context) plus equality and repr; it interprets no schema at run time.

Conventions of every generated class:
* Constructor keywords are the fields in snake_case with the spec's defaults; a field that is
  nullable in every version it exists in defaults to None; arrays default to a new list.
  Passing `DEFAULT` (or omitting) an array/struct argument means "the spec default".
* Encoding a version skips fields that do not exist in it, whatever they hold (Kafka raises for
  some non-default values; we keep it simple).  Tagged fields are written only when they differ
  from their default, as Kafka does (old librdkafka breaks otherwise).
* Decoding: `records` fields are memoryview slices of the input (no copy), `bytes` fields are
  copied; fields absent in the version get their default.  Unknown tagged fields are kept in
  `unknown_tagged_fields` ({tag: bytes}, or None when there were none) and written back, so a
  decoded frame re-encodes byte for byte.
* Errors: decoding raises only ProtocolError; encoding an unsupported version raises
  ProtocolError; encoding a wrongly typed value raises whatever struct/str raise (a bug).
"""
from operator import attrgetter

from .exceptions import ProtocolError
from .records import FileRegion


class _Default:
    """Marks "use the spec default" for parameters whose explicit None means null."""

    __slots__ = ()

    def __repr__(self):
        return "DEFAULT"


DEFAULT = _Default()


class Message:
    __slots__ = ()
    API_KEY = None
    MIN_VERSION = 0
    MAX_VERSION = 0
    FLEXIBLE_MIN = None
    _FIELDS = ()             # attribute names in wire order, without unknown_tagged_fields

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # All field values as one tuple, read in C: equality is on the hot path of encoding
        # (tagged struct fields are compared with their default before being written).
        fields = cls.__dict__.get("_FIELDS", ())
        cls._values = staticmethod(attrgetter(*fields, "unknown_tagged_fields")) if fields \
            else staticmethod(attrgetter("unknown_tagged_fields"))

    def _check_version(self, version):
        if not self.MIN_VERSION <= version <= self.MAX_VERSION:
            raise ProtocolError(f"unsupported version {version} (valid: "
                                f"{self.MIN_VERSION}-{self.MAX_VERSION})",
                                api=type(self).__qualname__, version=version)

    def encode_pieces(self, version: int) -> list:
        """Encoded bytes as a list of bytes and FileRegion pieces (bytes runs coalesced)."""
        self._check_version(version)
        buf = bytearray()
        pieces = []
        self._write(buf, pieces, version)
        if buf or not pieces:
            pieces.append(bytes(buf))
        return pieces

    def encode(self, version: int) -> bytes:
        """Encoded bytes; FileRegion records are read from their files."""
        self._check_version(version)
        buf = bytearray()
        pieces = []
        self._write(buf, pieces, version)
        if not pieces:
            return bytes(buf)
        pieces.append(bytes(buf))
        return b"".join(p.read_bytes() if type(p) is FileRegion else p for p in pieces)

    @classmethod
    def decode_from(cls, data, offset: int, version: int):
        """Decodes one struct at `offset`; returns (message, end offset). Trailing bytes are allowed."""
        if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
            raise ProtocolError(f"unsupported version {version} (valid: "
                                f"{cls.MIN_VERSION}-{cls.MAX_VERSION})",
                                api=cls.__qualname__, version=version, offset=offset)
        if type(data) is not memoryview:
            data = memoryview(data)
        try:
            return cls._read(data, offset, version)
        except ProtocolError as exc:
            exc.api = cls.__qualname__
            exc.version = version
            raise

    @classmethod
    def decode(cls, data, version: int, offset: int = 0):
        """Decodes one struct at `offset` and returns it (trailing bytes are allowed)."""
        if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
            return cls.decode_from(data, offset, version)[0]     # raises the version error
        if type(data) is not memoryview:
            data = memoryview(data)
        try:
            return cls._read(data, offset, version)[0]
        except ProtocolError as exc:
            exc.api = cls.__qualname__
            exc.version = version
            raise

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        if self._values(self) == self._values(other):
            return True
        # unknown_tagged_fields: None and {} mean the same
        if (self.unknown_tagged_fields or None) != (other.unknown_tagged_fields or None):
            return False
        return all(getattr(self, name) == getattr(other, name) for name in self._FIELDS)

    __hash__ = None

    def __repr__(self):
        parts = [f"{name}={getattr(self, name)!r}" for name in self._FIELDS]
        if self.unknown_tagged_fields:
            parts.append(f"unknown_tagged_fields={self.unknown_tagged_fields!r}")
        return f"{type(self).__qualname__}({', '.join(parts)})"
