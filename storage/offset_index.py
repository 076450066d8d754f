"""The offset index (``<base_offset>.index``): a sparse map from offset to file position.

Byte layout (Apache Kafka's; big-endian; no header)::

    entry = struct ">ii"
      relative_offset   int32   batch last offset - segment base offset
      position          int32   byte position of that batch's start in the .log file

One entry per `index.interval.bytes` appended bytes (4096 by default); the entry names the
*last* offset of a batch and the position where the batch *starts* (Kafka's
`offsetIndex.append(batch.lastOffset, position)`, and what `kafka-dump-log.sh
--index-sanity-check` verifies).  Invariants: relative offsets strictly increase, positions
increase, and every position is a batch boundary below the log's size.

`lookup(offset)` returns the entry with the largest offset <= the target (or the segment's start);
the reader then scans batch headers forward from that position.
"""
import struct

from storage.errors import CorruptIndex
from storage.index_base import IndexBase

INT32_MAX = 2**31 - 1


class OffsetIndex(IndexBase):
    ENTRY = struct.Struct(">ii")

    def __init__(self, path: str, base_offset: int, max_index_size: int):
        super().__init__(path, base_offset, max_index_size)
        self.last_offset = self._last_offset()

    def _last_offset(self) -> int:
        if self.entries == 0:
            return self.base_offset
        return self.base_offset + self._entry(self.entries - 1)[0]

    def entry(self, i: int) -> tuple[int, int]:
        """The i-th entry as (absolute offset, position)."""
        relative, position = self._entry(i)
        return self.base_offset + relative, position

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry with offset <= target, else (base_offset, 0)."""
        i = self._search(target_offset - self.base_offset, 0)
        if i < 0:
            return self.base_offset, 0
        return self.entry(i)

    def upper_bound_offset(self, position: int) -> int | None:
        """The offset of the first entry at or past byte `position`, or None when every entry
        is before it (Kafka's fetchUpperBoundOffset: no record at or past `position` has a
        smaller offset than that entry's batch)."""
        i = self._search(position, 1)
        if i < 0 or self._entry(i)[1] < position:
            i += 1
        if i >= self.entries:
            return None
        return self.entry(i)[0]

    def can_append_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def append(self, offset: int, position: int) -> None:
        if self.entries and offset <= self.last_offset:
            raise ValueError(f"offset index {self.path}: {offset} after {self.last_offset}")
        self._put((offset - self.base_offset, position))
        self.last_offset = offset

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset >= `offset`."""
        i = self._search(offset - 1 - self.base_offset, 0)
        self._truncate_entries(i + 1)
        self.last_offset = self._last_offset()

    def reset(self) -> None:
        super().reset()
        self.last_offset = self.base_offset

    def sanity_check(self, log_size: int) -> None:
        """Raises CorruptIndex unless the tail looks like one Kafka (or we) wrote."""
        if self.file_length % self.ENTRY.size:
            raise CorruptIndex(f"{self.path}: length {self.file_length} is not a multiple of 8")
        if not self.entries:
            return
        relative, position = self._entry(self.entries - 1)
        if relative < 0 or position >= max(log_size, 1):
            raise CorruptIndex(f"{self.path}: last entry ({relative}, {position}) is out of range")
        if self.entries > 1:
            prev_relative, prev_position = self._entry(self.entries - 2)
            if prev_relative >= relative or prev_position >= position:
                raise CorruptIndex(f"{self.path}: entries do not increase at the end")
