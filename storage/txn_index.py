"""`TransactionIndex`: a segment's ``.txnindex``, the aborted transactions whose markers it holds.

A `read_committed` consumer must drop the records of aborted transactions, and it can only do
so if the broker tells it which ones lie in the range it fetched: a Fetch response lists
(producer_id, first_offset) of each aborted transaction that overlaps the returned records, and
the client skips that producer's batches from first_offset until it meets the abort marker.
The broker finds them here. When an ABORT marker is appended, the log adds one entry to the
``.txnindex`` of the segment that took the marker; entries are in marker order.

File format (Kafka's TransactionIndex and AbortedTxn, version 0), 34 bytes per entry, no
header, big-endian::

    version             int16   0
    producer_id         int64
    first_offset        int64   the transaction's first record
    last_offset         int64   its ABORT marker
    last_stable_offset  int64   the last stable offset once the marker was written: the first
                                offset of the oldest transaction of another producer still
                                open then, else last_offset + 1

`collect(fetch_offset, upper_bound)` returns the entries with last_offset >= fetch_offset and
first_offset < upper_bound, and says whether the search may stop (an entry's
last_stable_offset reached upper_bound: no later segment can hold an abort that concerns the
range). The file is created on the first append, as Kafka's: most segments have none.

The entries are also kept in memory, in marker order (read from the file on first use), so a
read_committed fetch finds its range with a bisection instead of reading the file.

Concurrency: the log's lock for appends and truncation; reads (`collect`) may run concurrently
with an append and then see the entries written before it (the list is replaced, never
changed in place).
"""
import bisect
import os
import struct
from collections import namedtuple

from storage import files
from storage.errors import CorruptIndex

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size            # 34
VERSION = 0

AbortedTxn = namedtuple("AbortedTxn", "producer_id first_offset last_offset last_stable_offset")
AbortedTxn.__doc__ = "One aborted transaction of a segment's transaction index."


class TransactionIndex:
    def __init__(self, path: str, start_offset: int):
        self.path = path
        self.start_offset = start_offset
        self._fd = -1
        self._size = 0
        self._last_offset = None
        self._entries: list[AbortedTxn] = []
        self._last_offsets: list[int] = []              # for bisect: the entries' last_offset
        if os.path.exists(path):
            self._open()
            self._size -= self._size % ENTRY_SIZE       # a torn last entry is not read
            self._set(self._read())
            if self._entries:
                self._last_offset = self._entries[-1].last_offset

    def _set(self, entries: list[AbortedTxn]) -> None:
        self._entries, self._last_offsets = entries, [t.last_offset for t in entries]

    def _open(self) -> None:
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size

    def __len__(self) -> int:
        return self._size // ENTRY_SIZE

    def append(self, txn: AbortedTxn) -> None:
        if self._last_offset is not None and txn.last_offset <= self._last_offset:
            raise ValueError(f"aborted transaction ending at {txn.last_offset} does not follow "
                             f"{self._last_offset} in {self.path}")
        if self._fd < 0:
            self._open()
        os.pwrite(self._fd, _ENTRY.pack(VERSION, *txn), self._size)
        self._size += ENTRY_SIZE
        self._last_offset = txn.last_offset
        self._set(self._entries + [AbortedTxn(*txn)])

    def entries(self) -> list[AbortedTxn]:
        return list(self._entries)

    def _read(self) -> list[AbortedTxn]:
        if self._fd < 0 or not self._size:
            return []
        data = os.pread(self._fd, self._size, 0)
        out = []
        for version, *fields in _ENTRY.iter_unpack(data[:len(data) - len(data) % ENTRY_SIZE]):
            if version > VERSION:
                raise CorruptIndex(f"{self.path}: aborted transaction entry of unknown "
                                   f"version {version}")
            out.append(AbortedTxn(*fields))
        return out

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """(aborted transactions overlapping [fetch_offset, upper_bound), search complete)."""
        found = []
        entries = self._entries
        # Kafka walks the file from its start; the entries ending before fetch_offset can be
        # skipped: one is never reported, and its last stable offset (at most its marker's
        # offset + 1) cannot reach the upper bound of a non-empty range after it.
        start = bisect.bisect_left(self._last_offsets, fetch_offset)
        for txn in entries[start:]:
            if txn.first_offset < upper_bound:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or past `offset`."""
        entries = self._entries
        keep = bisect.bisect_left(self._last_offsets, offset)
        if keep < len(entries):
            self._size = keep * ENTRY_SIZE
            os.ftruncate(self._fd, self._size)
            self._last_offset = entries[keep - 1].last_offset if keep else None
            self._set(entries[:keep])

    def reset(self) -> None:
        """Empty it (the segment is being recovered and the entries rebuilt)."""
        if self._fd >= 0:
            os.ftruncate(self._fd, 0)
        self._size = 0
        self._last_offset = None
        self._set([])

    def sanity_check(self) -> None:
        for txn in self._entries:
            if txn.last_offset < self.start_offset:
                raise CorruptIndex(f"{self.path}: aborted transaction ending at "
                                   f"{txn.last_offset} is below the segment's base offset "
                                   f"{self.start_offset}")

    def flush(self) -> None:
        if self._fd >= 0:
            files.fs.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
