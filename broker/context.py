"""`RequestContext`: what a handler knows about the request besides its body."""


class RequestContext:
    __slots__ = ("api_key", "api_version", "correlation_id", "client_id", "client_host",
                 "client_port", "connection_id", "listener_name", "principal")

    def __init__(self, api_key, api_version, correlation_id, client_id=None, client_host="",
                 client_port=0, connection_id="", listener_name="PLAINTEXT",
                 principal="User:ANONYMOUS"):
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.client_host = client_host
        self.client_port = client_port
        self.connection_id = connection_id
        self.listener_name = listener_name
        self.principal = principal

    def __repr__(self):
        return (f"RequestContext(api_key={self.api_key}, api_version={self.api_version}, "
                f"correlation_id={self.correlation_id}, client_id={self.client_id!r}, "
                f"connection={self.connection_id})")


class CloseConnection(Exception):
    """Raised by a handler that wants its connection closed instead of answered (Produce with
    acks=0 that failed); the message says why and goes to the log."""
