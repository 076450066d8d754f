"""`RequestContext`: what a handler knows about the request besides its body.

`request_size` is the request's size in bytes, header and body without the 4-byte length prefix
(Kafka's `sizeInBytes`, what a produce quota counts). A handler
that throttles the client (a byte-rate quota, broker/quotas.py) sets `throttle_time_ms`: the
response carries it, and the connection reads no further request until it has passed.
"""


class RequestContext:
    __slots__ = ("api_key", "api_version", "correlation_id", "client_id", "client_host",
                 "client_port", "connection_id", "listener_name", "principal", "request_size",
                 "throttle_time_ms")

    def __init__(self, api_key, api_version, correlation_id, client_id=None, client_host="",
                 client_port=0, connection_id="", listener_name="PLAINTEXT",
                 principal="User:ANONYMOUS", request_size=0):
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.client_host = client_host
        self.client_port = client_port
        self.connection_id = connection_id
        self.listener_name = listener_name
        self.principal = principal
        self.request_size = request_size
        self.throttle_time_ms = 0

    def __repr__(self):
        return (f"RequestContext(api_key={self.api_key}, api_version={self.api_version}, "
                f"correlation_id={self.correlation_id}, client_id={self.client_id!r}, "
                f"connection={self.connection_id})")


class CloseConnection(Exception):
    """Raised by a handler that wants its connection closed instead of answered (Produce with
    acks=0 that failed); the message says why and goes to the log."""
