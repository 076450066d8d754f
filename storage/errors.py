"""Exceptions raised by the storage engine.

Two error channels (STYLE.md): Kafka error codes travel as data in responses; exceptions report
bugs, corrupt input and I/O failure.  Storage raises `protocol.errors.KafkaError` carrying the
code the broker answers with (OFFSET_OUT_OF_RANGE for a read outside the log, CORRUPT_MESSAGE for
a batch that fails its checks, KAFKA_STORAGE_ERROR for a failed disk), so a handler can put
`exc.error_code` straight into its response.  The subclasses below only make tests and log
lines more precise.
"""
from protocol.errors import ErrorCode, KafkaError


class OffsetOutOfRange(KafkaError):
    """A read or lookup asked for an offset outside [log_start_offset, log_end_offset]."""

    def __init__(self, message):
        super().__init__(ErrorCode.OFFSET_OUT_OF_RANGE, message)


class CorruptRecord(KafkaError):
    """Bytes that are not a valid record batch (bad size, magic or CRC)."""

    def __init__(self, message):
        super().__init__(ErrorCode.CORRUPT_MESSAGE, message)


class StorageError(KafkaError):
    """An I/O failure on a log directory (Kafka marks the directory offline)."""

    def __init__(self, message):
        super().__init__(ErrorCode.KAFKA_STORAGE_ERROR, message)


class StaleAppend(Exception):
    """A follower append begun before the log was fenced (`Log.fence_appends`: the replica's
    role changed, its fetching stopped or moved, the log closed): nothing was written."""


class CorruptIndex(Exception):
    """An index file fails its sanity check; the caller rebuilds it from the log."""


class LogDirUnusable(Exception):
    """A log dir this broker must not use: another broker holds its ``.lock``, or its
    meta.properties belongs to another broker or cluster.  Start-up stops with the message
    (one line, as Kafka's fatal start-up errors), and nothing in the dir is touched."""


class CleaningAborted(Exception):
    """A log clean stopped because the log changed under it (truncated, deleted) or the
    cleaner is shutting down; its ``.cleaned`` files are removed and nothing else changes."""
