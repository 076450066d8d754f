"""The time index (``<base_offset>.timeindex``): a sparse map from timestamp to offset.

Byte layout (Apache Kafka's; big-endian; no header)::

    entry = struct ">qi"
      timestamp         int64   largest record timestamp in the segment so far
      relative_offset   int32   offset of the batch holding it - segment base offset

An entry is considered next to each offset-index entry, and once more when the segment rolls,
but is only written when its timestamp is larger than the last entry's (Kafka's
`maybeAppend`), so timestamps strictly increase and offsets never decrease.  As in Kafka, the
index counts as full one entry early, keeping a slot for the entry written on roll.

`lookup(ts)` returns the last entry with timestamp <= ts (or (-1, base_offset)); the reader
then scans forward from the offset index position of that offset for the first batch whose
max timestamp >= ts.
"""
import struct

from storage.errors import CorruptIndex
from storage.index_base import IndexBase

NO_TIMESTAMP = -1


class TimeIndex(IndexBase):
    ENTRY = struct.Struct(">qi")

    def __init__(self, path: str, base_offset: int, max_index_size: int):
        super().__init__(path, base_offset, max_index_size)
        self.last_entry = self._last_entry()

    def _last_entry(self) -> tuple[int, int]:
        if self.entries == 0:
            return NO_TIMESTAMP, self.base_offset
        return self.entry(self.entries - 1)

    def entry(self, i: int) -> tuple[int, int]:
        """The i-th entry as (timestamp, absolute offset)."""
        timestamp, relative = self._entry(i)
        return timestamp, self.base_offset + relative

    def is_full(self) -> bool:
        return self.entries >= self.max_entries - 1

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        if timestamp <= self.last_entry[0]:     # (-1, base) when empty: never a -1 entry
            return
        if self.entries and offset < self.last_entry[1]:
            raise ValueError(f"time index {self.path}: offset {offset} after {self.last_entry}")
        if not skip_full_check and self.is_full():
            raise OverflowError(f"time index {self.path} is full")
        self._put((timestamp, offset - self.base_offset))
        self.last_entry = (timestamp, offset)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the last entry with timestamp <= target, else (-1, base)."""
        i = self._search(timestamp, 0)
        if i < 0:
            return NO_TIMESTAMP, self.base_offset
        return self.entry(i)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset >= `offset` (offsets are sorted too)."""
        count = self.entries
        while count and self._entry(count - 1)[1] + self.base_offset >= offset:
            count -= 1
        self._truncate_entries(count)
        self.last_entry = self._last_entry()

    def reset(self) -> None:
        super().reset()
        self.last_entry = self._last_entry()

    def sanity_check(self) -> None:
        if self.file_length % self.ENTRY.size:
            raise CorruptIndex(f"{self.path}: length {self.file_length} is not a multiple of 12")
        if self.entries > 1:
            ts, relative = self._entry(self.entries - 1)
            prev_ts, prev_relative = self._entry(self.entries - 2)
            if ts <= prev_ts or relative < prev_relative or relative < 0:
                raise CorruptIndex(f"{self.path}: entries do not increase at the end")
