"""Child process for test_crash_safety: appends forever, reporting each acknowledged append.

Usage: python -m tests.storage.crash_child <log_dir> <generation>

Each line on stdout, written after `append_as_leader` returned, is
``<first_offset> <last_offset> <generation>-<n>``: the records' values are
``<generation>-<n>-<i>`` for i in 0..(last-first).  The parent SIGKILLs this process at a random
moment; whatever a line acknowledged must survive (it is in the page cache).  Every 25 appends
the child also flushes dirty logs and checkpoints, so the parent's recovery starts from a
recovery point above zero.  The loop is bounded (at most 100,000 appends or 60 s).
"""
import sys
import time

from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.record_batch import RecordBatchBuilder

CONFIG = LogConfig(segment_bytes=16 * 1024, index_interval_bytes=512, segment_index_bytes=4096,
                   segment_ms=10**12)


def main(log_dir: str, generation: str) -> None:
    manager = LogManager([log_dir], CONFIG)
    manager.startup(cluster_id="crash-test", broker_id=0)
    log_ = manager.get_or_create_log("crash", 0, CONFIG)
    out = sys.stdout
    deadline = time.monotonic() + 60
    for n in range(100_000):
        if time.monotonic() > deadline:
            break
        builder = RecordBatchBuilder()
        count = 1 + n % 7
        for i in range(count):
            builder.append(int(time.time() * 1000), None, f"{generation}-{n}-{i}".encode() * 9)
        info = log_.append_as_leader(builder.build(), leader_epoch=int(generation))
        out.write(f"{info.first_offset} {info.last_offset} {generation}-{n}\n")
        out.flush()
        if n % 25 == 24:
            manager.flush_dirty()
            log_.update_high_watermark(log_.log_end_offset)
            manager.checkpoint_high_watermarks()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
