"""What the offset index and the time index share: a file of fixed-size big-endian entries,
memory-mapped, with a count of valid entries and a binary search.

Life cycle (Kafka's `AbstractIndex`):

* A new index file is preallocated to `max_index_size` rounded down to a whole entry (a sparse
  file: `ftruncate`), then memory-mapped; `entries` counts the valid ones from the front.
* An existing file (even an empty one) is mapped as it is; its entry count is its length /
  entry size.  After a clean shutdown that count is exact (indexes are trimmed on roll and on
  close).  After a crash the active segment's index still has its zero-filled preallocated
  tail, which fails `sanity_check()`; recovery then rebuilds the index from the log (indexes
  are caches).
* `trim()` shrinks the file to its entries when the segment stops being active or closes;
  `resize()` grows it again when truncation makes an old segment active again.

A full disk must not kill the broker: storing into a page of a sparse file that the file
system cannot back is SIGBUS, not an error. So the blocks under the entries are reserved
(`posix_fallocate`) ahead of them, RESERVE_BYTES at a time, before an entry is stored there;
a full disk is then an OSError (ENOSPC) from the append, which takes the log dir offline as
any write error does, while the preallocated length stays sparse (10,000 idle partitions do not
hold 10 MB of disk each).

Resizing goes through `mmap.resize` (ftruncate and mremap together), or unmaps first when the
file shrinks to nothing: touching a map past the end of its file is SIGBUS.  The file
descriptor is closed right after mapping (the map keeps its own), so an open index costs one
descriptor.
`_lock` serialises the operations that replace or close the map (trim, resize, close) with
`flush()`, which a flush thread calls while the loop appends; appends and lookups run on the
loop thread only and take no lock.
"""
import errno
import mmap
import os
import threading

from storage import files

RESERVE_BYTES = 64 * 1024      # blocks reserved ahead of the entries (8,192 offset entries)


class IndexBase:
    ENTRY = None            # struct.Struct of one entry, set by subclasses

    def __init__(self, path: str, base_offset: int, max_index_size: int):
        self.path = path
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self._lock = threading.Lock()
        self._entry_size = self.ENTRY.size
        self._closed = False
        existed = os.path.exists(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            length = os.fstat(fd).st_size
            if not existed:
                length = self._round(max_index_size)
                os.ftruncate(fd, length)
            # An existing file keeps its length (an empty trimmed index stays empty) until the
            # segment becomes active and `resize()` grows it.
            self.entries = length // self._entry_size if existed else 0
            # Nothing is taken as reserved, not even an existing file's entries: after a crash
            # they include the preallocated sparse tail (reserving allocated blocks again is
            # cheap).
            self._reserved = 0
            self._map(fd, length)
        finally:
            os.close(fd)        # the map holds its own descriptor: one fd per index, not two

    # -- sizing --------------------------------------------------------------------------------

    def _round(self, size: int) -> int:
        return max(size // self._entry_size, 0) * self._entry_size

    def _map(self, fd: int, length: int) -> None:
        self._length = length
        self.max_entries = length // self._entry_size
        self._mm = mmap.mmap(fd, length) if length > 0 else None

    def _unmap(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None

    @property
    def size_in_bytes(self) -> int:
        return self.entries * self._entry_size

    @property
    def file_length(self) -> int:
        return self._length

    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def trim(self) -> None:
        """Shrink the file to its valid entries (segment no longer active, or closing)."""
        self.resize(self.size_in_bytes)

    def resize(self, new_size: int) -> None:
        """Grow or shrink the file and its map (never below the valid entries)."""
        new_length = max(self._round(new_size), self.size_in_bytes)
        with self._lock:
            if self._closed or new_length == self._length:
                return
            self._reserved = min(self._reserved, new_length)
            if self._mm is not None and new_length > 0:
                self._mm.resize(new_length)        # ftruncate + mremap on the map's own fd
                self._length = new_length
                self.max_entries = new_length // self._entry_size
                return
            self._unmap()
            fd = os.open(self.path, os.O_RDWR)
            try:
                os.ftruncate(fd, new_length)
                self._map(fd, new_length)
            finally:
                os.close(fd)

    # -- entries -------------------------------------------------------------------------------

    def _entry(self, i: int):
        return self.ENTRY.unpack_from(self._mm, i * self._entry_size)

    def _put(self, values) -> None:
        if self.entries >= self.max_entries:
            raise OverflowError(f"index {self.path} is full ({self.entries} entries)")
        position = self.entries * self._entry_size
        if position + self._entry_size > self._reserved:
            self._reserve(position + self._entry_size)
        self.ENTRY.pack_into(self._mm, position, *values)
        self.entries += 1

    def _reserve(self, end: int) -> None:
        """Allocate the file's blocks up to `end` and a little beyond (module docstring).
        Raises OSError (ENOSPC) when the disk is full."""
        upto = min(self._length, -(-end // RESERVE_BYTES) * RESERVE_BYTES)
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.posix_fallocate(fd, self._reserved, upto - self._reserved)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise
            # A file system that cannot allocate ahead (EINVAL, EOPNOTSUPP): store as before.
            upto = self._length
        finally:
            os.close(fd)
        self._reserved = upto

    def _search(self, target: int, field: int) -> int:
        """Index of the last entry whose `field` <= target, or -1 (entries sorted on `field`)."""
        lo, hi = 0, self.entries - 1
        if hi < 0 or self._entry(0)[field] > target:
            return -1
        unpack, size, mm = self.ENTRY.unpack_from, self._entry_size, self._mm
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if unpack(mm, mid * size)[field] <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _truncate_entries(self, count: int) -> None:
        self.entries = max(0, min(count, self.entries))

    def reset(self) -> None:
        """Forget every entry and grow back to full size (before a rebuild)."""
        self.entries = 0
        self.resize(self.max_index_size)

    # -- durability ----------------------------------------------------------------------------

    def flush(self) -> None:
        """msync the map and fsync the file, whose length a trim changed (blocking: run it
        off the event loop)."""
        with self._lock:
            if self._closed:
                return
            if self._mm is not None:
                self._mm.flush()
            fd = os.open(self.path, os.O_RDONLY)
            try:
                files.fs.fsync(fd)
            finally:
                os.close(fd)

    def close(self, trim: bool = True) -> None:
        if trim:
            self.trim()
        with self._lock:
            self._unmap()
            self._closed = True

    def rename_to(self, path: str) -> None:
        os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.close(trim=False)
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass
