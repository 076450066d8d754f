"""Exceptions the client raises.

Kafka error codes from responses surface as ``protocol.errors.KafkaError`` (``.error_code``); the
client adds only failures that have no Kafka code: a broker that cannot be reached or closed the
connection, and a request that got no answer in ``request.timeout.ms``. Both are retriable.
The tools turn any of these into one line on stderr.
"""


class ClientError(Exception):
    """A client-side failure (no Kafka error code)."""

    retriable = False


class KafkaConnectionError(ClientError):
    """Connecting failed, or the connection broke while requests were in flight."""

    retriable = True


class KafkaTimeoutError(ClientError):
    """No response within the request timeout, or an operation ran out of its time budget."""

    retriable = True


class UnsupportedVersionError(ClientError):
    """The broker serves no version of an API this client can speak."""
