"""An in-memory stand-in for the ReplicaManager/Partition/Log trio the runtime talks to."""
from types import SimpleNamespace

from protocol.errors import ErrorCode
from storage.record_batch import RecordBatchView, iter_batches


class FakeLog:
    def __init__(self):
        self.buf = bytearray()
        self.log_start_offset = 0
        self.log_end_offset = 0

    def append(self, records: bytes) -> tuple[int, int]:
        data = bytearray(records)
        first = self.log_end_offset
        for batch in iter_batches(data):
            batch.set_base_offset(self.log_end_offset)
            self.log_end_offset = batch.next_offset
        self.buf += data
        return first, self.log_end_offset - 1

    def read(self, offset, max_bytes, max_offset=None, min_one_message=True):
        out = bytearray()
        for batch in iter_batches(self.buf):
            if batch.last_offset >= offset and (max_offset is None or batch.base_offset < max_offset):
                out += bytes(batch.raw())
        return SimpleNamespace(records=bytes(out))


class FakePartition:
    def __init__(self):
        self.log = FakeLog()
        self.leader_epoch = 0

    @property
    def high_watermark(self):
        return self.log.log_end_offset


class FakeReplicaManager:
    def __init__(self, partitions=(), topics=()):
        """`partitions`: the __consumer_offsets partitions led here; `topics`: (name, count)."""
        self.parts = {("__consumer_offsets", p): FakePartition() for p in partitions}
        for name, count in topics:
            for p in range(count):
                self.parts[(name, p)] = FakePartition()
        self.fail_with = ErrorCode.NONE
        self.appends = 0

    def get_partition(self, topic, p):
        return self.parts.get((topic, p))

    def append_records(self, entries, required_acks, now_ms=None, verification=None):
        results = {}
        for key, records in entries.items():
            self.appends += 1
            if self.fail_with != ErrorCode.NONE or key not in self.parts:
                code = self.fail_with or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                results[key] = SimpleNamespace(error_code=code, last_offset=-1)
                continue
            first, last = self.parts[key].log.append(records)
            results[key] = SimpleNamespace(error_code=ErrorCode.NONE, last_offset=last)
        return results
