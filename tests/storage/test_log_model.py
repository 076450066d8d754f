"""Stateful property test: random append / roll / truncate / truncate fully / retention /
DeleteRecords / clean and unclean reopen, checked after every step against an in-memory model.

The model is a list of batches (base_offset, [(offset, timestamp, value)]) plus the log start
offset and high watermark; batches an idempotent producer wrote are also remembered with their
sequences, so a retry of the producer's last batch must come back as a duplicate with its
original offsets (producer state survives reopen, truncation and retention), and its next
sequence must follow the last batch of it still in the log.  Where the real log decides something the model cannot know in
advance (which whole segments retention removes), the model follows the log's new
log_start_offset and checks everything else.
"""
import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from storage import files
from storage.log import Log
from storage.log_config import LogConfig
from storage.record_batch import RecordBatchBuilder

from tests.storage.log_checks import NoSync, check_log

BASE_TS = 1_700_000_000_000


def config():
    return LogConfig(segment_bytes=600, index_interval_bytes=60, segment_index_bytes=96,
                     segment_ms=10**12, retention_ms=-1, file_delete_delay_ms=0)


class LogModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.saved_fs, files.fs = files.fs, NoSync()
        self.dir = tempfile.mkdtemp(prefix="log-model-")
        self.path = self.dir + "/model-0"
        self.log = Log(self.path, config())
        self.batches = []                  # [(base_offset, [(offset, ts, value), ...])]
        self.log_start = 0
        self.hw = 0
        self.ts = BASE_TS
        self.idempotent = {}               # base_offset -> (first_seq, values) of producer PID
        self.next_seq = 0                  # used when no batch of PID is left in the log

    def teardown(self):
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        files.fs = self.saved_fs

    @property
    def end(self):
        return self.batches[-1][1][-1][0] + 1 if self.batches else self.log_start

    # -- operations ----------------------------------------------------------------------------

    @rule(values=st.lists(st.binary(max_size=40), min_size=1, max_size=6),
          ts_step=st.integers(0, 1000))
    def append(self, values, ts_step):
        self.ts += ts_step
        builder = RecordBatchBuilder()
        for value in values:
            builder.append(self.ts, None, value)
        info = self.log.append_as_leader(builder.build(), leader_epoch=0)
        base = self.end
        assert (info.first_offset, info.last_offset) == (base, base + len(values) - 1)
        self.batches.append((base, [(base + i, self.ts, v) for i, v in enumerate(values)]))

    def _last_idempotent(self):
        """(base_offset, first_seq, values) of PID's last batch still in the log, or None."""
        present = [b for b, recs in self.batches
                   if b in self.idempotent and recs[-1][0] >= self.log_start]
        if not present:
            return None
        base = max(present)
        return (base, *self.idempotent[base])

    @rule(values=st.lists(st.binary(max_size=40), min_size=1, max_size=4))
    def append_idempotent(self, values):
        # The next sequence after the producer's last batch not truncated away, also when
        # retention or DeleteRecords removed its data: the broker keeps a producer's state
        # after its records go (Kafka's, until producer.id.expiration.ms). A log that forgot
        # it (rebuilt from the log start) takes any sequence.
        if self.idempotent:
            first_seq, last_values = self.idempotent[max(self.idempotent)]
            seq = first_seq + len(last_values)
        else:
            seq = self.next_seq
        info = self.log.append_as_leader(_idempotent_batch(seq, self.ts, values), leader_epoch=0)
        base = self.end
        assert not info.duplicate
        assert (info.first_offset, info.last_offset) == (base, base + len(values) - 1)
        self.batches.append((base, [(base + i, self.ts, v) for i, v in enumerate(values)]))
        self.idempotent[base] = (seq, values)
        self.next_seq = seq + len(values)

    @precondition(lambda self: self.idempotent)
    @rule()
    def retry_last_idempotent(self):
        last = self._last_idempotent()
        if last is None:
            return
        base, seq, values = last
        info = self.log.append_as_leader(_idempotent_batch(seq, self.ts, values), leader_epoch=0)
        assert info.duplicate, "a retried batch was appended again"
        assert (info.first_offset, info.last_offset) == (base, base + len(values) - 1)

    @rule()
    def roll(self):
        self.log.roll()

    @rule(data=st.data())
    def truncate(self, data):
        bases = [b for b, _ in self.batches if b > self.log_start]
        if not bases:
            return
        target = data.draw(st.sampled_from(bases))
        self.log.truncate_to(target)
        self.batches = [b for b in self.batches if b[0] < target]
        self.idempotent = {b: v for b, v in self.idempotent.items() if b < target}
        self.hw = min(self.hw, target)

    @rule(jump=st.integers(0, 50))
    def truncate_fully(self, jump):
        """A follower far behind its leader: start empty at a later offset."""
        new_start = self.end + jump
        self.log.truncate_fully_and_start_at(new_start)
        self.log.delete_expired_files()
        self.batches = []
        self.idempotent = {}
        self.log_start = self.hw = new_start

    @rule(fraction=st.floats(0, 1))
    def advance_high_watermark(self, fraction):
        self.hw = self.hw + int((self.end - self.hw) * fraction)
        self.log.update_high_watermark(self.hw)

    @rule(retention_bytes=st.integers(0, 2000))
    def retention(self, retention_bytes):
        self.log.config.retention_bytes = retention_bytes
        self.log.delete_old_segments()
        self.log.config.retention_bytes = -1
        new_start = self.log.log_start_offset
        assert new_start >= self.log_start
        if new_start > self.log_start:
            assert new_start <= self.hw
            self.log_start = new_start
            self.batches = [b for b in self.batches if b[1][-1][0] >= new_start]
        self.log.delete_expired_files()

    @rule(fraction=st.floats(0, 1))
    def delete_records(self, fraction):
        target = self.log_start + int((self.hw - self.log_start) * fraction)
        self.log.delete_records_before(target)
        self.log_start = max(self.log_start, target)

    @rule(clean=st.booleans())
    def reopen(self, clean):
        old = self.log
        if clean:
            old.flush()
            old.close()
        else:
            # A crash: nothing trimmed or closed cleanly; the recovery point is whatever the
            # last flush reached.
            for segment in old.segments:
                for index in (segment._offset_index, segment._time_index):
                    if index is not None:
                        index.close(trim=False)
                segment.log_file.close()
        self.log = Log(self.path, config(), recovery_point=old.recovery_point,
                       log_start_offset=old.log_start_offset, high_watermark=old.high_watermark,
                       had_clean_shutdown=clean)

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def read_at_offset(self, data):
        offsets = [o for _, recs in self.batches for o, _, _ in recs if o >= self.log_start]
        if not offsets:
            return
        offset = data.draw(st.sampled_from(offsets))
        info = self.log.read(offset, 1)
        base, records = next(b for b in self.batches if b[1][-1][0] >= offset)
        assert info.first_offset == base

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def lookup_timestamp(self, data):
        records = [r for _, recs in self.batches for r in recs if r[0] >= self.log_start]
        if not records:
            return
        target = data.draw(st.integers(BASE_TS - 10, self.ts + 10))
        expected = next(((o, t) for o, t, _ in records if t >= target), None)
        found = self.log.fetch_offset_by_timestamp(target)
        assert (found[:2] if found else None) == expected

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def matches_model(self):
        log_ = self.log
        assert log_.log_start_offset == self.log_start
        assert log_.log_end_offset == self.end
        assert log_.high_watermark == min(self.hw, self.end)
        views = check_log(log_)
        actual = [(r.offset, r.timestamp, r.value) for v in views for r in v.records()
                  if r.offset >= self.log_start]
        expected = [r for _, recs in self.batches for r in recs if r[0] >= self.log_start]
        assert actual == expected


PID = 7


def _idempotent_batch(sequence, timestamp, values):
    builder = RecordBatchBuilder(producer_id=PID, producer_epoch=0, base_sequence=sequence)
    for value in values:
        builder.append(timestamp, None, value)
    return builder.build()


TestLogModel = LogModel.TestCase
TestLogModel.settings = settings(max_examples=100, stateful_step_count=40, deadline=None,
                                 suppress_health_check=[HealthCheck.too_slow])
