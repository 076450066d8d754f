"""Request and response headers, and whole-frame helpers for a client.

Byte layout (after the 4-byte frame size):

    request header v0    api_key int16, api_version int16, correlation_id int32
    request header v1    v0 + client_id nullable string (int16 length, never compact)
    request header v2    v1 + tagged fields (unsigned varint count, ...)
    response header v0   correlation_id int32
    response header v1   correlation_id int32 + tagged fields

Which version applies follows from the api key and version of the request: header v2 /
response header v1 in the API's flexible versions, else v1 / v0.  Exceptions, as in Kafka:
ControlledShutdown v0 uses request header v0, and ApiVersions responses always use response
header v0 (a client must be able to read the answer before it knows the broker's versions).

`parse_request_header` on an unknown api key or an unsupported version does NOT fail: it
parses the header as v1 (api key, version, correlation id, client id — the fields every
header version shares in that layout) so the broker can still answer (e.g. ApiVersions with
UNSUPPORTED_VERSION) or close the connection with a useful log line.  The returned body offset
is then only meaningful for a v1 header.

(`protocol.messages.RequestHeader` / `ResponseHeader` are the generated spec structs, kept so
every spec file has a codec; the broker and client use this hand-written, faster module.)
"""
import struct

from .api import API_SPECS, response_class
from .api_keys import ApiKey
from .exceptions import ProtocolError
from .primitives import (DECODE_ERRORS, read_nullable_string, read_unknown_tags, write_string,
                         write_tags)

_HEADER = struct.Struct(">hhi")
_INT32 = struct.Struct(">i")
_SIZE_CORRELATION = struct.Struct(">ii")


class RequestHeader:
    __slots__ = ("api_key", "api_version", "correlation_id", "client_id", "unknown_tagged_fields")

    def __init__(self, api_key, api_version, correlation_id, client_id=None,
                 unknown_tagged_fields=None):
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.unknown_tagged_fields = unknown_tagged_fields

    def __eq__(self, other):
        if type(other) is not RequestHeader:
            return NotImplemented
        return (self.api_key, self.api_version, self.correlation_id, self.client_id,
                self.unknown_tagged_fields or None) == (
            other.api_key, other.api_version, other.correlation_id, other.client_id,
            other.unknown_tagged_fields or None)

    __hash__ = None

    def __repr__(self):
        return (f"RequestHeader(api_key={self.api_key}, api_version={self.api_version}, "
                f"correlation_id={self.correlation_id}, client_id={self.client_id!r})")

    def encode(self, header_version=None) -> bytes:
        if header_version is None:
            header_version = request_header_version(self.api_key, self.api_version)
        buf = bytearray(_HEADER.pack(self.api_key, self.api_version, self.correlation_id))
        if header_version >= 1:
            write_string(buf, self.client_id)
        if header_version >= 2:
            write_tags(buf, (), self.unknown_tagged_fields)
        return bytes(buf)


def request_header_version(api_key: int, api_version: int) -> int:
    """0, 1 or 2; unknown keys/versions count as 1 (see the module docstring)."""
    if api_key == ApiKey.CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    spec = API_SPECS.get(api_key)
    if spec is None or not spec.supports(api_version):
        return 1
    return 2 if spec.is_flexible(api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """0 or 1; ApiVersions responses always use 0."""
    if api_key == ApiKey.API_VERSIONS:
        return 0
    spec = API_SPECS.get(api_key)
    if spec is None or not spec.supports(api_version):
        return 0
    return 1 if spec.is_flexible(api_version) else 0


def parse_request_header(frame) -> tuple:
    """(RequestHeader, offset where the request body starts) of a frame body."""
    pos = 0
    try:
        api_key, api_version, correlation_id = _HEADER.unpack_from(frame, 0)
        pos = 8
        version = request_header_version(api_key, api_version)
        client_id = None
        unknown = None
        if version >= 1:
            client_id, pos = read_nullable_string(frame, pos)
        if version >= 2:
            unknown, pos = read_unknown_tags(frame, pos)
    except ProtocolError as exc:
        exc.api = "RequestHeader"
        if exc.offset is None:
            exc.offset = pos
        raise
    except DECODE_ERRORS as exc:
        raise ProtocolError(f"truncated or invalid request header ({type(exc).__name__})",
                            api="RequestHeader", offset=pos) from None
    return RequestHeader(api_key, api_version, correlation_id, client_id, unknown), pos


def encode_response_header(correlation_id: int, header_version: int) -> bytes:
    if header_version == 0:
        return _INT32.pack(correlation_id)
    return _INT32.pack(correlation_id) + b"\x00"


def encode_response(correlation_id, api_key, api_version, message) -> list:
    """A whole response frame as pieces (size prefix + header + body; FileRegions kept apart)."""
    header = encode_response_header(correlation_id, response_header_version(api_key, api_version))
    pieces = message.encode_pieces(api_version)
    size = len(header) + sum(len(p) for p in pieces)
    first = _INT32.pack(size) + header
    if pieces and type(pieces[0]) is bytes:
        return [first + pieces[0], *pieces[1:]]
    return [first, *pieces]


def encode_request(header: RequestHeader, body_message) -> bytes:
    """A whole request frame, size prefix included (for the project's own client)."""
    head = header.encode()
    body = body_message.encode(header.api_version)
    return _INT32.pack(len(head) + len(body)) + head + body


def decode_response(frame, api_key: int, api_version: int) -> tuple:
    """(correlation_id, response message) of a response frame body (size prefix removed)."""
    try:
        correlation_id = _INT32.unpack_from(frame, 0)[0]
        pos = 4
        if response_header_version(api_key, api_version) >= 1:
            _, pos = read_unknown_tags(frame, pos)
    except DECODE_ERRORS as exc:
        raise ProtocolError(f"truncated response header ({type(exc).__name__})",
                            api="ResponseHeader", offset=0) from None
    if api_key == ApiKey.API_VERSIONS and api_version > 0 and len(frame) >= pos + 2 \
            and frame[pos:pos + 2] != b"\x00\x00":
        # An error: a broker that rejects the request version answers UNSUPPORTED_VERSION in
        # a v0 body (so that any client can read it); other errors (INVALID_REQUEST) come in
        # the version asked. As Kafka's ApiVersionsResponse.parse: that version first, v0 if
        # it does not parse.
        try:
            return correlation_id, response_class(api_key).decode(frame, api_version, pos)
        except ProtocolError:
            api_version = 0
    return correlation_id, response_class(api_key).decode(frame, api_version, pos)
