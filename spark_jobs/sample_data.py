"""Writes log dirs in Apache Kafka's on-disk layout, for tests, benchmarks and demos.

`LogDirWriter` appends batches built with storage's `RecordBatchBuilder` to `<topic>-<partition>`
directories, rolls segments at `segment_bytes`, writes the `.index`/`.timeindex` entries every
`index_interval_bytes` the way Kafka's LogSegment does (offset index: the batch's last offset -> the
batch's position; time index: the largest timestamp so far and its offset, when it grows), records
aborted transactions in `.txnindex`, and on `close()` writes `replication-offset-checkpoint` and
`log-start-offset-checkpoint`. It is not a broker: no validation, no producer state, no fsync.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

from storage.compression import Codec
from storage.record_batch import ControlRecordType, RecordBatchBuilder, build_control_batch

_INDEX_ENTRY = struct.Struct(">ii")
_TIME_INDEX_ENTRY = struct.Struct(">qi")
_TXN_INDEX_ENTRY = struct.Struct(">hqqqq")


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


@dataclass
class _Partition:
    dir: str
    next_offset: int = 0
    segment_base: int = 0
    segment_size: int = 0
    bytes_since_index: int = 0
    max_timestamp: int = -1
    offset_of_max_timestamp: int = -1
    last_time_entry: int = -1
    open_txns: dict = field(default_factory=dict)     # producer_id -> first offset


class LogDirWriter:
    def __init__(self, log_dir: str, *, segment_bytes: int = 1 << 30, index_interval_bytes: int = 4096,
                 write_indexes: bool = True):
        self.log_dir = log_dir
        self.segment_bytes = segment_bytes
        self.index_interval_bytes = index_interval_bytes
        self.write_indexes = write_indexes
        self.partitions: dict[tuple[str, int], _Partition] = {}
        os.makedirs(log_dir, exist_ok=True)

    def _partition(self, topic: str, partition: int) -> _Partition:
        p = self.partitions.get((topic, partition))
        if p is None:
            p = _Partition(os.path.join(self.log_dir, f"{topic}-{partition}"))
            os.makedirs(p.dir, exist_ok=True)
            open(self._path(p, ".log"), "ab").close()
            self.partitions[(topic, partition)] = p
        return p

    @staticmethod
    def _path(p: _Partition, suffix: str) -> str:
        return os.path.join(p.dir, segment_name(p.segment_base, suffix))

    def append(self, topic: str, partition: int, records, *, compression: Codec = Codec.NONE,
               timestamp_type: int = 0, producer_id: int = -1, producer_epoch: int = -1,
               base_sequence: int = -1, transactional: bool = False, leader_epoch: int = 0) -> tuple[int, int]:
        """Appends one batch of (timestamp, key, value, headers) records; returns (first, last) offset."""
        p = self._partition(topic, partition)
        builder = RecordBatchBuilder(compression=compression, timestamp_type=timestamp_type,
                                     base_offset=p.next_offset, producer_id=producer_id,
                                     producer_epoch=producer_epoch, base_sequence=base_sequence,
                                     is_transactional=transactional, partition_leader_epoch=leader_epoch)
        max_ts, max_ts_offset = -1, -1
        for timestamp, key, value, headers in records:
            offset = builder.append(timestamp, key, value, headers)
            if timestamp > max_ts:
                max_ts, max_ts_offset = timestamp, offset
        if timestamp_type == 1:      # LogAppendTime: the batch's max_timestamp is every record's time
            max_ts_offset = p.next_offset
        data = builder.build()
        if transactional:
            p.open_txns.setdefault(producer_id, p.next_offset)
        return self._write(p, data, p.next_offset, p.next_offset + len(builder) - 1, max_ts, max_ts_offset)

    def end_transaction(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                        commit: bool, timestamp: int) -> int:
        """Writes a COMMIT or ABORT marker; returns its offset."""
        p = self._partition(topic, partition)
        marker = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        data = build_control_batch(marker, producer_id, producer_epoch, 0, timestamp, base_offset=p.next_offset,
                                   partition_leader_epoch=0)
        offset = p.next_offset
        first = p.open_txns.pop(producer_id, None)
        self._write(p, data, offset, offset, timestamp, offset)
        if not commit and first is not None:
            lso = min(p.open_txns.values(), default=offset + 1)
            with open(self._path(p, ".txnindex"), "ab") as f:
                f.write(_TXN_INDEX_ENTRY.pack(0, producer_id, first, offset, lso))
        return offset

    def _write(self, p: _Partition, data: bytes, first: int, last: int, max_ts: int, max_ts_offset: int):
        if p.segment_size > 0 and p.segment_size + len(data) > self.segment_bytes:
            self._roll(p, first)
        position = p.segment_size
        with open(self._path(p, ".log"), "ab") as f:
            f.write(data)
        if max_ts > p.max_timestamp:
            p.max_timestamp, p.offset_of_max_timestamp = max_ts, max_ts_offset
        if self.write_indexes and p.bytes_since_index > self.index_interval_bytes:
            with open(self._path(p, ".index"), "ab") as f:
                f.write(_INDEX_ENTRY.pack(last - p.segment_base, position))
            self._maybe_time_entry(p)
            p.bytes_since_index = 0
        p.bytes_since_index += len(data)
        p.segment_size += len(data)
        p.next_offset = last + 1
        return first, last

    def _maybe_time_entry(self, p: _Partition) -> None:
        if p.max_timestamp > p.last_time_entry:
            with open(self._path(p, ".timeindex"), "ab") as f:
                f.write(_TIME_INDEX_ENTRY.pack(p.max_timestamp, p.offset_of_max_timestamp - p.segment_base))
            p.last_time_entry = p.max_timestamp

    def _roll(self, p: _Partition, new_base: int) -> None:
        if self.write_indexes:
            self._maybe_time_entry(p)       # Kafka appends the segment's max timestamp on roll
        p.segment_base, p.segment_size, p.bytes_since_index = new_base, 0, 0
        p.max_timestamp = p.offset_of_max_timestamp = p.last_time_entry = -1
        open(self._path(p, ".log"), "ab").close()

    def close(self, high_watermarks: dict[tuple[str, int], int] | None = None) -> None:
        """Writes the checkpoints: each partition's high watermark (default: its log_end_offset)."""
        hws = {tp: p.next_offset for tp, p in self.partitions.items()}
        hws.update(high_watermarks or {})
        self._checkpoint("replication-offset-checkpoint", hws)
        self._checkpoint("log-start-offset-checkpoint", {tp: 0 for tp in self.partitions})

    def _checkpoint(self, name: str, values: dict) -> None:
        lines = [f"{t} {p} {v}" for (t, p), v in sorted(values.items())]
        with open(os.path.join(self.log_dir, name), "w", encoding="utf-8") as f:
            f.write("0\n%d\n%s" % (len(lines), "".join(line + "\n" for line in lines)))
