"""Child process for test_cleaner's crash test: cleans a log and dies (os._exit) at the n-th
filesystem operation the cleaner performs (rename, remove, fsync, directory fsync), as a
`kill -9` at that moment would leave the files.

Usage: python -m tests.storage.clean_crash_child <partition_dir> <n> <now_ms>
"""
import os
import sys

from storage import files
from storage.cleaner import Cleaner
from storage.log import Log
from storage.log_cleaner import cleanable_offsets

from tests.storage.test_cleaner import CONFIG


class DieAt(files.FileSystem):
    def __init__(self, n):
        self.remaining = n

    def _tick(self):
        self.remaining -= 1
        if self.remaining == 0:
            os._exit(9)

    def rename(self, src, dst):
        self._tick()
        super().rename(src, dst)

    def remove(self, path):
        self._tick()
        super().remove(path)

    def fsync(self, fd):
        self._tick()
        super().fsync(fd)

    def fsync_dir(self, directory):
        self._tick()
        super().fsync_dir(directory)


def main(directory: str, n: int, now_ms: int) -> None:
    log_ = Log(directory, CONFIG, time_ms=lambda: now_ms)
    log_.update_high_watermark(log_.log_end_offset)
    first_dirty, first_uncleanable, _, _ = cleanable_offsets(log_, None, now_ms)
    files.fs = DieAt(n)
    Cleaner(dedupe_memory=1 << 20).clean(log_, first_dirty, first_uncleanable, now_ms)
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
