"""The one exception type every decoder raises on bad input.

Two error channels never mix (see STYLE.md): Kafka error codes are *data* carried in responses
(`protocol.errors`), while `ProtocolError` reports bytes that cannot be decoded at all — a
truncated frame, a negative length, a length past the end of the frame, an over-long varint,
invalid UTF-8.  A connection that receives such a frame is closed by the broker.

Generated decoders catch the low-level failures (`struct.error`, `IndexError`,
`UnicodeDecodeError`, ...) at each struct and re-raise them as `ProtocolError`, filling in where
it happened: the api (message name), the version, the dotted field path (built from the inside
out as the error passes through the enclosing structs) and the byte offset of the field.
"""


class ProtocolError(ValueError):
    """Undecodable (or unencodable) protocol data.

    Attributes: ``api`` (message name such as "ProduceRequest", or None), ``version``,
    ``field`` (dotted path like "topic_data[0].partition_data[1].records", or None) and
    ``offset`` (byte offset in the decoded buffer, or None).
    """

    def __init__(self, reason, *, api=None, version=None, field=None, offset=None):
        super().__init__(reason)
        self.reason = reason
        self.api = api
        self.version = version
        self.field = field
        self.offset = offset

    def __str__(self):
        where = []
        if self.api is not None:
            where.append(self.api if self.version is None else f"{self.api} v{self.version}")
        if self.field:
            where.append(f"field {self.field}")
        if self.offset is not None:
            where.append(f"offset {self.offset}")
        return f"{self.reason} ({', '.join(where)})" if where else self.reason

    def add_field(self, outer):
        """Prefixes the enclosing field name to the path (used while unwinding nested decoders)."""
        self.field = outer if not self.field else f"{outer}.{self.field}"
        return self


class FrameTooLarge(ProtocolError):
    """A frame's size prefix exceeds the reader's maximum (Kafka: socket.request.max.bytes)."""

    def __init__(self, size, max_size):
        super().__init__(f"frame of {size} bytes exceeds the maximum of {max_size}")
        self.size = size
        self.max_size = max_size
