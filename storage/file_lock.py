"""`FileLock`: the exclusive ``.lock`` a broker holds on each of its log dirs, as Kafka's.

Apache Kafka opens ``<log.dir>/.lock`` and takes ``FileChannel.tryLock()`` on it before it reads
or writes anything in the dir, and holds it until it exits; a second broker (or a second
LogManager in the same JVM) on the same dir fails to start with Kafka's message
(`LOCKED_MESSAGE`). The ``.lock`` file itself is empty and stays behind.

Which lock: Java's ``tryLock`` on Linux is a POSIX record lock (``fcntl(F_SETLK)``). Those are
owned by the *process* (a second lock in the same process succeeds, and closing any descriptor
of the file drops it), so they cannot keep two embedded brokers in one Python process apart.
Linux's open-file-description locks (``F_OFD_SETLK``) are owned by the open file instead, so
two opens in one process exclude each other, and they conflict with POSIX record locks held by
other processes: a kbroker and an Apache Kafka broker exclude each other on the same dir too.
Where OFD locks do not exist (macOS), ``flock`` gives the per-open-file behaviour.

The lock goes away with the process, so a ``kill -9`` leaves nothing to clean up.  Readers that
only read segments (the Spark jobs, ``kafka-dump-log.sh``) never take it.
"""
from __future__ import annotations

import errno
import fcntl
import os
import struct

from storage.errors import LogDirUnusable
from storage.files import LOCK_FILE

LOCKED_MESSAGE = ("Failed to acquire lock on file .lock in {dir}. A Kafka instance in another "
                  "process or thread is using this directory.")

# struct flock on Linux (x86_64 and aarch64): l_type, l_whence (short), l_start, l_len (off_t),
# l_pid (pid_t), padded to 32 bytes. l_pid must be 0 for OFD locks.
_FLOCK = struct.Struct("hhqqi4x")
_OFD_SETLK = getattr(fcntl, "F_OFD_SETLK", None)


class FileLock:
    """An exclusive lock on one file, held by this open file (not by the process)."""

    def __init__(self, path: str):
        self.path = path
        self._fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self.locked = False

    def try_lock(self) -> bool:
        """Take the lock without waiting: False if another holder has it."""
        try:
            if _OFD_SETLK is not None:
                fcntl.fcntl(self._fd, _OFD_SETLK,
                            _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0))
            else:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                return False
            raise
        self.locked = True
        return True

    def release(self) -> None:
        """Drop the lock and close the file (the ``.lock`` file stays, as Kafka leaves it)."""
        if self._fd is not None:
            os.close(self._fd)          # closing the only descriptor releases an OFD/flock lock
            self._fd = None
        self.locked = False


def lock_dir(directory: str) -> FileLock:
    """Lock ``<directory>/.lock``; raise `DirLockedError` when someone else holds it."""
    lock = FileLock(os.path.join(directory, LOCK_FILE))
    try:
        locked = lock.try_lock()
    except OSError:
        lock.release()
        raise
    if not locked:
        lock.release()
        raise DirLockedError(LOCKED_MESSAGE.format(dir=directory))
    return lock


class DirLockedError(LogDirUnusable):
    """Another broker (process or thread) holds a log dir's ``.lock``."""
