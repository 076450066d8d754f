"""Storage engine speed, next to `dd` on the same disk in the same run (issue 3 targets).

1. append: 1,000 batches of 1 MiB through `Log.append_as_leader` (validation, CRC, offset
   assignment, index upkeep), then one `flush()`; against `dd bs=1M conv=fdatasync` copying
   that segment (same bytes, source in the page cache); best of 3 alternating rounds each.
   Target >= 80% of dd's rate.
2. read: the same log read back by offset (`Log.read` -> FileRegion -> os.preadv into one
   reused buffer, as dd reuses its buffer), page cache dropped first (posix_fadvise
   DONTNEED) for both; against `dd if=<the segment> of=/dev/null bs=1M`; best of 5
   interleaved rounds each.
   Target >= 80% of dd's rate.
3. lookup: `Log.read(random offset, 1)` (segment bisect, index binary search, header walk) in a
   log of 1,000 segments.  Target < 50 us on average.
4. open: `LogManager.startup()` over 10,000 empty partitions after a clean shutdown.
   Target < 5 s.
5. recover: reopening the ~1 GiB segment of (1) with no clean-shutdown marker: every batch's
   CRC checked, indexes rebuilt, producer state replayed.  Target < 10 s.

All data lives under a temporary directory in /tmp, removed at the end.
Run: `python -m bench.storage_bench` (or `python -m bench storage`).
"""
import os
import random
import shutil
import subprocess
import tempfile
import time

from storage.log import Log
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.record_batch import RecordBatchBuilder

MIB = 1024 * 1024
APPEND_BATCHES = 1000
LOOKUP_SEGMENTS = 1000
LOOKUPS = 20_000
EMPTY_PARTITIONS = 10_000
READ_ROUNDS = 5
WRITE_ROUNDS = 3


def _one_mib_batch() -> bytes:
    """A producer batch of exactly 1 MiB: 16 records of ~64 KiB."""
    builder = RecordBatchBuilder()
    value = os.urandom(64 * 1024 - 80)
    for i in range(16):
        builder.append(1_700_000_000_000 + i, b"key-%02d" % i, value)
    data = builder.build()
    pad = MIB - len(data)
    builder = RecordBatchBuilder()
    for i in range(16):
        builder.append(1_700_000_000_000 + i, b"key-%02d" % i,
                       value + (os.urandom(pad) if i == 0 else b""))
    data = builder.build()
    assert abs(len(data) - MIB) < 8, len(data)
    return data


def _drop_cache(path: str) -> None:
    for root, _, names in os.walk(path) if os.path.isdir(path) else [("", [], [path])]:
        for name in names:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _dd(args) -> float:
    started = time.perf_counter()
    subprocess.run(["dd", *args], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def _read_all(log_dir: str, config: LogConfig, end: int, size: int) -> float:
    """Seconds to read the whole log by offset, copying each region into one reused buffer
    (as dd reuses its buffer; the broker would sendfile the region instead)."""
    log_ = Log(log_dir, config, had_clean_shutdown=True)
    buffer = memoryview(bytearray(2 * MIB))
    started = time.perf_counter()
    offset, total = 0, 0
    while offset < end:
        info = log_.read(offset, MIB)
        region = info.records
        total += os.preadv(region.file.fileno(), [buffer[:region.length]], region.position)
        offset = info.first_offset + 16          # 16 records per batch
    took = time.perf_counter() - started
    assert total >= size, total
    log_.close()
    return took


def _append_all(log_dir: str, config: LogConfig, batch: bytes) -> tuple[float, int]:
    """Seconds to append APPEND_BATCHES batches and flush; the log end offset."""
    log_ = Log(log_dir, config)
    started = time.perf_counter()
    for _ in range(APPEND_BATCHES):
        log_.append_as_leader(batch, leader_epoch=0)
    log_.flush()
    took = time.perf_counter() - started
    end = log_.log_end_offset
    log_.close()
    return took, end


def bench_append_read_recover(work: str, ok: dict) -> None:
    size = APPEND_BATCHES * MIB
    dd_file = os.path.join(work, "dd.bin")
    config = LogConfig(max_message_bytes=2 * MIB, segment_ms=10**15)
    batch = _one_mib_batch()
    log_dir = os.path.join(work, "append-0")
    segment_file = os.path.join(log_dir, "00000000000000000000.log")
    # Best of WRITE_ROUNDS, dd and ours alternating (the disk is shared with other work, and
    # one 1 GiB write takes 1 s or 8 s depending on the neighbours).  dd copies the segment we
    # wrote (from the page cache), so both write the same bytes.
    ours_write, end = _append_all(log_dir, config, batch)
    dd_write = float("inf")
    for _ in range(1, WRITE_ROUNDS):
        dd_write = min(dd_write, _dd([f"if={segment_file}", f"of={dd_file}", "bs=1M",
                                      "conv=fdatasync"]))
        shutil.rmtree(log_dir)
        took, end = _append_all(log_dir, config, batch)
        ours_write = min(ours_write, took)
        os.remove(dd_file)
    dd_write = min(dd_write, _dd([f"if={segment_file}", f"of={dd_file}", "bs=1M",
                                  "conv=fdatasync"]))
    os.remove(dd_file)

    # Best of READ_ROUNDS, dd and ours interleaved: the machine is shared, and one slow round
    # says more about the neighbours than about either reader.
    dd_read = ours_read = float("inf")
    for _ in range(READ_ROUNDS):
        _drop_cache(log_dir)
        dd_read = min(dd_read, _dd([f"if={segment_file}", "of=/dev/null", "bs=1M"]))
        _drop_cache(log_dir)
        ours_read = min(ours_read, _read_all(log_dir, config, end, size))

    _report(ok, "append 1 MiB batches", size / ours_write / MIB, "MiB/s",
            f"dd write {size / dd_write / MIB:.0f} MiB/s", ours_write <= dd_write / 0.8)
    _report(ok, "read back by offset", size / ours_read / MIB, "MiB/s",
            f"dd read {size / dd_read / MIB:.0f} MiB/s", ours_read <= dd_read / 0.8)

    _drop_cache(log_dir)
    started = time.perf_counter()
    recovered = Log(log_dir, config, had_clean_shutdown=False, recovery_point=0)
    took = time.perf_counter() - started
    assert recovered.log_end_offset == end
    segment_mib = recovered.segments[0].size / MIB
    recovered.close()
    _report(ok, f"recover a {segment_mib:.0f} MiB segment", took, "s", "target < 10 s", took < 10)
    shutil.rmtree(log_dir)


def bench_lookup(work: str, ok: dict) -> None:
    batches_per_segment = 20
    config = LogConfig(segment_bytes=batches_per_segment * 700, segment_ms=10**15,
                       segment_index_bytes=64 * 1024, index_interval_bytes=4096)
    log_ = Log(os.path.join(work, "lookup-0"), config)
    offset = 0
    while len(log_.segments) < LOOKUP_SEGMENTS:
        builder = RecordBatchBuilder(base_offset=offset)
        for i in range(5):
            builder.append(1_700_000_000_000 + offset + i, None, b"v" * 100)
        log_.append_as_follower(builder.build())
        offset += 5
    end = log_.log_end_offset
    rng = random.Random(1)
    targets = [rng.randrange(end) for _ in range(LOOKUPS)]
    read = log_.read
    started = time.perf_counter()
    for target in targets:
        read(target, 1)
    per = (time.perf_counter() - started) / LOOKUPS * 1e6
    segments = len(log_.segments)
    log_.close()
    _report(ok, f"random offset lookup ({segments} segments)", per, "us", "target < 50 us",
            per < 50)
    shutil.rmtree(os.path.join(work, "lookup-0"))


def bench_open(work: str, ok: dict) -> None:
    log_dir = os.path.join(work, "many")
    config = LogConfig()
    manager = LogManager([log_dir], config)
    manager.startup(cluster_id="bench", broker_id=0)
    for p in range(EMPTY_PARTITIONS):
        manager.get_or_create_log("t%d" % (p % 100), p // 100, config)
    manager.shutdown()
    manager = LogManager([log_dir], config)
    started = time.perf_counter()
    manager.startup(cluster_id="bench", broker_id=0)
    took = time.perf_counter() - started
    count = len(manager.logs())
    manager.shutdown()
    _report(ok, f"open {count} empty partitions", took, "s", "target < 5 s", took < 5)
    shutil.rmtree(log_dir)


def _report(ok: dict, name: str, value: float, unit: str, reference: str, met: bool) -> None:
    ok[name] = met
    print(f"{name:<42}{value:>10.1f} {unit:<6} ({reference}) {'met' if met else 'NOT met'}",
          flush=True)


def main() -> None:
    work = tempfile.mkdtemp(prefix="storage-bench-", dir="/tmp")
    ok = {}
    try:
        bench_append_read_recover(work, ok)
        bench_lookup(work, ok)
        bench_open(work, ok)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"storage targets: {sum(ok.values())}/{len(ok)} met")


if __name__ == "__main__":
    main()
