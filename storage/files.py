"""File naming for log directories, and the small filesystem seam used for fault injection.

Layout (Apache Kafka's, byte for byte)::

    <log.dir>/.lock                                 held by the broker using the dir (file_lock.py)
    <log.dir>/meta.properties                       broker.id, cluster.id, version
    <log.dir>/recovery-point-offset-checkpoint      per partition: data below it is fsynced
    <log.dir>/replication-offset-checkpoint         per partition: high watermark
    <log.dir>/log-start-offset-checkpoint           per partition: log_start_offset
    <log.dir>/cleaner-offset-checkpoint             (compaction; written empty)
    <log.dir>/.kafka_cleanshutdown                  present only after a clean shutdown
    <log.dir>/<topic>-<partition>/
        00000000000000000000.log                    record batches, 20-digit base offset
        00000000000000000000.index                  offset index   (see offset_index.py)
        00000000000000000000.timeindex              time index     (see time_index.py)
        00000000000000000000.snapshot               producer state snapshot
        leader-epoch-checkpoint, partition.metadata
    <log.dir>/<topic>-<partition>.<uuid hex>-delete/   a deleted partition awaiting removal
    <log.dir>/__cluster_metadata-0/                 KRaft's metadata log (Kafka in KRaft mode):
                                                    not a partition, never opened

Suffixes ``.deleted`` (segment awaiting async removal), ``.cleaned`` and ``.swap`` (compaction
in progress) are handled by recovery: ``.deleted``/``.cleaned`` files are removed, a ``.swap``
file replaces the segment it was swapping in.

`FileSystem` is the seam: everything in storage that renames, removes, fsyncs or writes whole
files goes through `files.fs`, so a test can substitute an instance that fails on the n-th call.
"""
import os
import re
import uuid

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"

# KRaft's metadata log, in data dirs written by Kafka in KRaft mode: Kafka's LogManager never
# loads it as a partition, and neither does ours (its files stay untouched).
CLUSTER_METADATA_TOPIC = "__cluster_metadata"

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
META_PROPERTIES = "meta.properties"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"

_SEGMENT_FILE = re.compile(r"^(\d{20})(\.[a-z]+)((?:\.deleted|\.cleaned|\.swap)?)$")
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
_DELETE_DIR = re.compile(r"^(.+)-(\d+)\.([0-9a-f]{32})-delete$")
_FUTURE_DIR = re.compile(r"^(.+)-(\d+)\.([0-9a-f]{32})-future$")


def file_name_prefix(base_offset: int) -> str:
    """Kafka's 20-digit zero-padded base offset."""
    return f"{base_offset:020d}"


def segment_path(directory: str, base_offset: int, suffix: str) -> str:
    return os.path.join(directory, file_name_prefix(base_offset) + suffix)


def parse_segment_file(name: str):
    """`(base_offset, suffix, extra)` for a segment-family file name, else None.

    `suffix` is ``.log``, ``.index``...; `extra` is ``""``, ``.deleted``, ``.cleaned`` or ``.swap``.
    """
    match = _SEGMENT_FILE.match(name)
    if match is None:
        return None
    return int(match.group(1)), match.group(2), match.group(3)


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def delete_dir_name(topic: str, partition: int) -> str:
    """``<topic>-<partition>.<uuid>-delete``, the topic cut so the name stays within 255
    characters (a topic name may have 249), as Kafka's logDeleteDirName."""
    suffix = f"-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    return topic[:255 - len(suffix)] + suffix


def parse_partition_dir(name: str):
    """`(topic, partition)` of a live partition folder name, else None (also for -delete dirs)."""
    if name.endswith(DELETE_DIR_SUFFIX) or name.endswith(FUTURE_DIR_SUFFIX) or name.startswith("."):
        return None
    match = _PARTITION_DIR.match(name)
    if match is None:
        return None
    return match.group(1), int(match.group(2))


def parse_delete_dir(name: str):
    """`(topic, partition)` of a ``<topic>-<partition>.<uuid>-delete`` folder, else None."""
    match = _DELETE_DIR.match(name)
    if match is None:
        return None
    return match.group(1), int(match.group(2))


def parse_future_dir(name: str):
    """`(topic, partition)` of a ``<topic>-<partition>.<uuid>-future`` folder (a replica being
    moved to this log dir), else None."""
    match = _FUTURE_DIR.match(name)
    if match is None:
        return None
    return match.group(1), int(match.group(2))


def clean_partition_dir(directory: str, names: list[str]) -> list[str]:
    """Kafka's start-up cleanup of a partition folder (LogLoader), in its order:

    1. ``.deleted`` files and ``.tmp`` leftovers go;
    2. ``.cleaned`` files go, and so do ``.swap`` files at or above the lowest ``.cleaned``
       base offset (a swap that had not been fully prepared);
    3. the remaining ``.swap`` segments replace the segments they cover: every plain file whose
       base offset lies in [lowest swap base, highest swap next offset) is removed;
    4. ``.swap`` files lose their suffix.

    So a crash before the cleaner renamed all its ``.cleaned`` files to ``.swap`` keeps the old
    segments, and one after completes the swap. Index files without a ``.log`` go too.
    Returns the remaining file names."""
    changed = False
    parsed_names = [(n, parse_segment_file(n)) for n in names]
    cleaned = [p[0] for _, p in parsed_names if p and p[2] == CLEANED_SUFFIX]
    min_cleaned = min(cleaned) if cleaned else None
    swaps = []
    for name, parsed in parsed_names:
        path = os.path.join(directory, name)
        if name.endswith(".tmp") or (parsed and parsed[2] in (DELETED_SUFFIX, CLEANED_SUFFIX)):
            fs.remove(path)
            changed = True
        elif parsed and parsed[2] == SWAP_SUFFIX:
            if min_cleaned is not None and parsed[0] >= min_cleaned:
                fs.remove(path)
                changed = True
            else:
                swaps.append((name, parsed))
    if swaps:
        swap_logs = [(n, p) for n, p in swaps if p[1] == LOG_SUFFIX]
        if swap_logs:
            low = min(p[0] for _, p in swap_logs)
            high = max(_next_offset_of(os.path.join(directory, n), p[0]) for n, p in swap_logs)
            for name, parsed in parsed_names:
                if parsed and not parsed[2] and parsed[1] != SNAPSHOT_SUFFIX \
                        and low <= parsed[0] < high:
                    fs.remove(os.path.join(directory, name))
        for name, _ in swaps:
            path = os.path.join(directory, name)
            fs.rename(path, path[:-len(SWAP_SUFFIX)])
        changed = True
    if changed:
        names = os.listdir(directory)
    parsed_names = [(n, parse_segment_file(n)) for n in names]
    logs = {p[0] for _, p in parsed_names if p and p[1] == LOG_SUFFIX and not p[2]}
    kept = []
    for name, parsed in parsed_names:
        if parsed and not parsed[2] and parsed[0] not in logs and parsed[1] in (
                INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            fs.remove(os.path.join(directory, name))
        else:
            kept.append(name)
    return kept


def _next_offset_of(path: str, base_offset: int) -> int:
    """One past the last offset of the batches in a segment file (a header walk; a torn tail
    ends it), or `base_offset` + 1 when it holds none."""
    import struct
    head = struct.Struct(">qi4xb6xi")       # base offset, length, magic, last offset delta
    next_offset = base_offset + 1
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        pos = 0
        while pos + head.size <= size:
            base, length, magic, delta = head.unpack(os.pread(fh.fileno(), head.size, pos))
            if length <= 0 or pos + 12 + length > size:
                break
            next_offset = max(next_offset, (base + delta if magic == 2 else base) + 1)
            pos += 12 + length
    return next_offset


class FileSystem:
    """The filesystem operations storage performs outside the hot append/read path.

    Tests subclass this (or wrap it) to fail a chosen call and check what survives.
    """

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def remove(self, path: str) -> None:
        os.remove(path)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def fsync_dir(self, directory: str) -> None:
        """Make renames and creations in `directory` durable (POSIX needs the dir fsynced)."""
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def write_atomically(self, path: str, data: bytes, durable: bool = True) -> None:
        """Write `path` so a crash leaves either the old or the new content: tmp, fsync, rename,
        fsync of the directory."""
        tmp = path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                self.fsync(fd)
        finally:
            os.close(fd)
        self.rename(tmp, path)
        if durable:
            self.fsync_dir(os.path.dirname(path) or ".")


fs = FileSystem()
