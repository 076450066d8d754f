"""Truncation against a reference model, with leader epochs: what replication needs of the log.

tests/storage/test_log_model.py already checks truncate_to / truncate_fully_and_start_at
against a model, at batch boundaries and in leader epoch 0. This adds what a follower's
truncation depends on: appends as leader at rising epochs and as follower (raw batches at the
leader's offsets, several per append, with their own epochs), a leader's epoch start recorded
at its LEO before any append (Partition.make_leader), truncation to any offset (a batch that
straddles it goes whole), and the leader-epoch cache, checked after every step.

The model is a list of batches (base_offset, epoch, values), the log start offset, the high
watermark and the epoch entry recorded at the LEO with no record yet (`pending`). The epoch
cache it expects is derived from the records, as Kafka's is: each epoch's first offset, plus
the pending entry.

Truncating at or past the LEO while such an entry exists is the separate test below: Kafka's
UnifiedLog.truncateTo removes that entry, and so does the log here.
"""
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from storage import files
from storage.log import Log
from storage.log_config import LogConfig
from storage.record_batch import RecordBatchBuilder

from tests.storage.log_checks import NoSync, check_log

TS = 1_700_000_000_000


def config():
    return LogConfig(segment_bytes=500, index_interval_bytes=60, segment_index_bytes=96,
                     segment_ms=10**12, retention_ms=-1, file_delete_delay_ms=0)


def producer_batch(values):
    builder = RecordBatchBuilder()
    for value in values:
        builder.append(TS, b"k", value)
    return builder.build()


def leader_batch(base_offset, epoch, values):
    builder = RecordBatchBuilder(base_offset=base_offset, partition_leader_epoch=epoch)
    for value in values:
        builder.append(TS, b"k", value)
    return builder.build()


values_st = st.lists(st.binary(max_size=30), min_size=1, max_size=5)


class TruncationModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.saved_fs, files.fs = files.fs, NoSync()
        self.dir = tempfile.mkdtemp(prefix="truncation-model-")
        self.log = Log(self.dir + "/m-0", config())
        self.batches = []             # [(base_offset, epoch, [values])]
        self.start = 0
        self.hw = 0
        self.pending = None           # (epoch, offset): an epoch started at the LEO, no record
        self.epoch = 0                # the highest epoch this replica has heard of

    def teardown(self):
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        files.fs = self.saved_fs

    # -- the model -----------------------------------------------------------------------------

    @property
    def end(self):
        if not self.batches:
            return self.start
        base, _, values = self.batches[-1]
        return base + len(values)

    @property
    def last_record_epoch(self):
        return self.batches[-1][1] if self.batches else None

    def records(self):
        return [(base + i, epoch, value) for base, epoch, values in self.batches
                for i, value in enumerate(values)]

    def expected_epochs(self):
        entries = []
        for base, epoch, _ in self.batches:
            if not entries or entries[-1][0] != epoch:
                entries.append((epoch, base))
        if self.pending is not None:
            entries.append(self.pending)
        return entries

    def add_batch(self, epoch, values):
        self.batches.append((self.end, epoch, list(values)))
        self.pending = None

    # -- operations ----------------------------------------------------------------------------

    @rule(bump=st.integers(1, 3))
    def become_leader(self, bump):
        """Partition.make_leader at a new epoch: the epoch starts at the LEO."""
        self.epoch += bump
        self.log.leader_epoch_cache.assign(self.epoch, self.log.log_end_offset)
        self.pending = (self.epoch, self.end)

    @rule(values=values_st)
    def append_as_leader(self, values):
        info = self.log.append_as_leader(producer_batch(values), self.epoch)
        assert (info.first_offset, info.last_offset) == (self.end, self.end + len(values) - 1)
        self.add_batch(self.epoch, values)

    @rule(batches=st.lists(st.tuples(st.integers(0, 2), values_st), min_size=1, max_size=3),
          data=st.data())
    def append_as_follower(self, batches, data):
        """What a fetch response brings: consecutive batches at the leader's offsets, at
        non-decreasing epochs from the follower's last one (it agrees with the leader up to
        its LEO). Over an epoch this replica started at its LEO as a leader, only later
        epochs: no other replica has records of that epoch, so a leader with an older one
        there answers a diverging epoch first (and Kafka's truncation drops the entry)."""
        epoch = self.last_record_epoch if self.last_record_epoch is not None else 0
        if self.pending is not None:
            epoch = max(epoch, self.pending[0] + 1)
        raw = b""
        offset = self.end
        planned = []
        for bump, values in batches:
            epoch += bump
            raw += leader_batch(offset, epoch, values)
            planned.append((epoch, values))
            offset += len(values)
        # As the fetcher hands them over: a slice of the response's buffer, maybe ending in
        # part of a batch cut off by the fetch size.
        tail = leader_batch(offset, epoch, [b"cut"])[:data.draw(st.integers(0, 20), "cut")]
        response = memoryview(bytearray(b"\0" * 7 + raw + tail + b"\0" * 5))
        info = self.log.append_as_follower(response[7:7 + len(raw) + len(tail)])
        assert (info.first_offset, info.last_offset) == (self.end, offset - 1)
        for epoch, values in planned:
            self.add_batch(epoch, values)
        self.epoch = max(self.epoch, epoch)

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def truncate_to(self, data):
        target = data.draw(st.integers(self.start, self.end - 1), label="target")
        assert self.log.truncate_to(target) is True
        # The cut is at a batch boundary: a batch holding `target` goes whole.
        self.batches = [b for b in self.batches if b[0] + len(b[2]) <= target]
        self.pending = None
        self.hw = min(self.hw, self.end)

    @precondition(lambda self: self.pending is None)
    @rule(past=st.integers(0, 5))
    def truncate_at_or_past_the_end(self, past):
        """Nothing to remove. Kafka still truncates the epoch cache at the LEO, which drops a
        pending entry (the precondition leaves that case to the separate test below)."""
        assert self.log.truncate_to(self.end + past) is False
        self.pending = None

    @rule(data=st.data())
    def truncate_fully_and_start_at(self, data):
        new_start = data.draw(st.integers(0, self.end + 30), label="new_start")
        self.log.truncate_fully_and_start_at(new_start)
        self.log.delete_expired_files()
        self.batches = []
        self.pending = None
        self.start = self.hw = new_start

    @rule(data=st.data())
    def update_high_watermark(self, data):
        target = data.draw(st.integers(self.start - 3, self.end + 3), label="hw")
        assert self.log.update_high_watermark(target) == min(max(target, self.start), self.end)
        self.hw = min(max(target, self.start), self.end)

    @rule()
    def roll(self):
        self.log.roll()

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def matches_model(self):
        log_ = self.log
        assert log_.log_start_offset == self.start
        assert log_.log_end_offset == self.end
        assert log_.high_watermark == self.hw
        assert log_.leader_epoch_cache.entries() == self.expected_epochs()
        views = check_log(log_)
        actual = [(r.offset, v.partition_leader_epoch, r.value) for v in views
                  for r in v.records()]
        assert actual == self.records()
        assert [v.base_offset for v in views] == [b[0] for b in self.batches]


TestTruncationModel = TruncationModel.TestCase
TestTruncationModel.settings = settings(max_examples=75, stateful_step_count=40, deadline=None,
                                        suppress_health_check=[HealthCheck.too_slow])


# -- examples ----------------------------------------------------------------------------------

@pytest.fixture
def log_(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "fs", NoSync())
    log_ = Log(str(tmp_path / "t-0"), config())
    yield log_
    log_.close()


def test_truncation_inside_a_batch_cuts_at_its_base_and_drops_later_epochs(log_):
    log_.append_as_follower(leader_batch(0, 1, [b"a", b"b", b"c"]) +
                            leader_batch(3, 2, [b"d", b"e"]) +
                            leader_batch(5, 4, [b"f", b"g", b"h"]))
    log_.update_high_watermark(8)
    assert log_.leader_epoch_cache.entries() == [(1, 0), (2, 3), (4, 5)]
    assert log_.truncate_to(6) is True
    assert (log_.log_end_offset, log_.high_watermark) == (5, 5)
    assert log_.leader_epoch_cache.entries() == [(1, 0), (2, 3)]
    assert log_.truncate_to(4) is True
    assert log_.log_end_offset == 3 and log_.leader_epoch_cache.entries() == [(1, 0)]
    # The follower goes on from there, with the new leader's batches.
    log_.append_as_follower(leader_batch(3, 5, [b"x"]))
    assert log_.leader_epoch_cache.entries() == [(1, 0), (5, 3)]
    log_.truncate_fully_and_start_at(40)
    assert log_.leader_epoch_cache.entries() == []
    assert (log_.log_start_offset, log_.log_end_offset, log_.high_watermark) == (40, 40, 40)


def test_truncating_at_the_end_drops_an_epoch_started_there(log_):
    """Kafka's UnifiedLog.truncateTo, when targetOffset >= logEndOffset: "Always truncate
    epoch cache since we may have a conflicting epoch entry at the end of the log from the
    leader. This could happen if this broker was a leader and inserted the first start offset
    entry, but then failed to append any entries before another leader was elected." Without
    it the follower keeps sending that epoch as its last fetched one and is told to diverge on
    every fetch (tests/broker/test_replication_state.py,
    test_a_leadership_without_appends_does_not_wedge_the_follower)."""
    log_.append_as_follower(leader_batch(0, 1, [b"a", b"b"]))
    log_.leader_epoch_cache.assign(2, 2)             # led epoch 2 from offset 2, wrote nothing
    assert log_.truncate_to(2) is False              # nothing to remove from the log...
    assert log_.leader_epoch_cache.entries() == [(1, 0)]   # ...but epoch 2 has no record
