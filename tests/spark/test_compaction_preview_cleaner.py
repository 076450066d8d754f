"""compaction_preview against the real log cleaner, and the data source over what the cleaner wrote.

Logs are built with storage.log.Log (small segments; random keys, overwrites and tombstones from
plain, idempotent and transactional producers; committed and aborted transactions with their
markers, one left open; keyless records, which only a follower append takes on a compacted topic).
Each round appends more, previews with compaction_preview, then runs one real clean per partition
(storage.cleaner.Cleaner on the range storage.log_cleaner.cleanable_offsets gives, the checkpoint
kept as LogCleaner keeps it) and checks the prediction against what disappeared from the log, read
back with Log.read_batches. Later rounds run on cleaned segments: batches stamped with a delete
horizon (negative timestamp deltas), empty batches, offset gaps, segments swapped in; the data source
must read exactly the records the cleaner kept. One Spark job per question covers every partition.
"""
import collections
import json
import os
import random

import pytest

from spark_jobs import compaction_preview, layout
from spark_jobs.decoder import SplitReader
from storage import checkpoints, files
from storage.cleaner import Cleaner, _empty_batch
from storage.compression import Codec
from storage.log import Log
from storage.log_cleaner import cleanable_offsets
from storage.log_config import LogConfig
from storage.record_batch import (CONTROL_FLAG_MASK, DELETE_HORIZON_FLAG_MASK, ControlRecordType,
                                  RecordBatchBuilder, RecordBatchView, build_control_batch)

NOW = 1_700_000_000_000
RETENTION_MS = 3_600_000                    # delete.retention.ms
LAG_MS = 60_000                             # min.compaction.lag.ms of the "lagged" topic
CODECS = [Codec.NONE, Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]
TOPICS = ("lagged", "profiles")


class Producer:
    def __init__(self, pid, transactional):
        self.pid, self.transactional, self.seq = pid, transactional, 0

    def batch(self, records, codec):
        b = RecordBatchBuilder(producer_id=self.pid, producer_epoch=0, base_sequence=self.seq,
                               is_transactional=self.transactional, compression=codec)
        for ts, key, value in records:
            b.append(ts, key, value)
        self.seq += len(records)
        return b.build()


class Traffic:
    """Random appends to one compacted Log, across rounds (producers and open transactions persist)."""

    def __init__(self, log_, seed, keys=14):
        self.log = log_
        self.rng = random.Random(seed)
        self.keys = [b"key-%02d" % i for i in range(keys)]
        self.idempotent = Producer(100, False)
        self.txn = {pid: Producer(pid, True) for pid in (200, 201)}
        self.open = set()

    def _records(self, ts):
        rng = self.rng
        return [(ts + j, rng.choice(self.keys),
                 None if rng.random() < 0.15 else b"v%d-" % ts + b"x" * rng.randrange(40))
                for j in range(rng.choice([1, 1, 2, 3, 5, 8]))]

    def _end(self, pid, commit, ts):
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        self.log.append_as_leader(build_control_batch(kind, pid, 0, 0, ts), 0, origin="coordinator")
        self.open.discard(pid)

    def run(self, batches, start_ts, leave_open=False, deleted=()) -> int:
        """Appends `batches` random batches from start_ts on; first, keys `deleted` get a value and
        then a tombstone (never written again: their tombstones reach their delete horizon)."""
        rng, log_, ts = self.rng, self.log, start_ts
        for value in (b"soon deleted", None):
            b = RecordBatchBuilder()
            for key in deleted:
                b.append(ts, key, value)
            if deleted:
                log_.append_as_leader(b.build(), 0)
        for _ in range(batches):
            ts += rng.randrange(200, 2000)
            codec = rng.choice(CODECS)
            records = self._records(ts)
            kind = rng.random()
            if kind < 0.08:                    # a compacted topic refuses keyless records from clients
                b = RecordBatchBuilder(base_offset=log_.log_end_offset, partition_leader_epoch=0,
                                       compression=codec)
                for j, (t, k, v) in enumerate(records):
                    b.append(t, None if j % 2 == 0 else k, v)
                log_.append_as_follower(b.build())
            elif kind < 0.30:
                pid = rng.choice(sorted(self.txn))
                log_.append_as_leader(self.txn[pid].batch(records, codec), 0)
                self.open.add(pid)
            elif kind < 0.40 and self.open:
                self._end(rng.choice(sorted(self.open)), rng.random() < 0.5, ts)
            elif kind < 0.55:
                log_.append_as_leader(self.idempotent.batch(records, codec), 0)
            else:
                b = RecordBatchBuilder(compression=codec)
                for t, k, v in records:
                    b.append(t, k, v)
                log_.append_as_leader(b.build(), 0)
        if not leave_open:
            for pid in sorted(self.open):
                self._end(pid, rng.random() < 0.5, ts)
        elif not self.open:
            log_.append_as_leader(self.txn[200].batch(self._records(ts), Codec.NONE), 0)
            self.open.add(200)
        return ts


def data_records(log_, end=None):
    """offset -> (key, value, timestamp) of every data record of the log below `end`."""
    out = {}
    for view in log_.read_batches(None, end):
        if view.attributes & CONTROL_FLAG_MASK:
            continue
        for r in view.records():
            if end is None or r.offset < end:
                out[r.offset] = (r.key and bytes(r.key), r.value and bytes(r.value), r.timestamp)
    return out


def batch_fields(log_, end):
    """offset -> (aborted, delete horizon or None) of every data record below `end`, from storage:
    the aborted transactions of its `.txnindex` files and the batch headers."""
    aborted = log_.aborted_transactions(0, log_.log_end_offset)
    out = {}
    for view in log_.read_batches(None, end):
        if view.attributes & CONTROL_FLAG_MASK:
            continue
        in_aborted = view.is_transactional and any(
            t.producer_id == view.producer_id and t.first_offset <= view.base_offset <= t.last_offset for t in aborted)
        horizon = view.base_timestamp if view.attributes & DELETE_HORIZON_FLAG_MASK else None
        for r in view.records():
            if r.offset < end:
                out[r.offset] = (in_aborted, horizon)
    return out


def census(log_) -> collections.Counter:
    """The shapes a clean leaves, for the coverage check."""
    seen = collections.Counter()
    last = None
    for view in log_.read_batches():
        control = bool(view.attributes & CONTROL_FLAG_MASK)
        if view.records_count == 0:
            seen["empty batch"] += 1
        if view.attributes & DELETE_HORIZON_FLAG_MASK and not control:
            seen["delete horizon"] += 1
            if any(r.timestamp < view.base_timestamp for r in view.records()):
                seen["negative timestamp delta"] += 1
        if not control:
            offsets = [r.offset for r in view.records()]
            if offsets and offsets != list(range(offsets[0], offsets[0] + len(offsets))):
                seen["gap inside a batch"] += 1
        if last is not None and view.base_offset > last + 1:
            seen["gap between batches"] += 1
        last = view.last_offset
    return seen


def size(key, value):
    return len(key or b"") + len(value or b"")


def compacted_config(min_compaction_lag_ms=0):
    return LogConfig(cleanup_policy="compact", segment_bytes=3000, segment_ms=10**13,
                     delete_retention_ms=RETENTION_MS, min_compaction_lag_ms=min_compaction_lag_ms)


class Scenario:
    """The log dir: partitions of `profiles` and one of `lagged` (min.compaction.lag.ms in the
    broker's metadata file), each with its own random traffic; `events` is not compacted.

    profiles-0 is left out of replication-offset-checkpoint (the preview then takes the log end);
    profiles-1 leaves a transaction open after the first round; profiles-2's high watermark trails
    its log end offset."""

    def __init__(self, log_dir, seed, partitions=4):
        self.dir = str(log_dir)
        self.logs = {(topic, p): Log(os.path.join(self.dir, f"{topic}-{p}"),
                                     compacted_config(LAG_MS if topic == "lagged" else 0), time_ms=lambda: NOW)
                     for topic, p in [("profiles", p) for p in range(partitions)] + [("lagged", 0)]}
        self.traffic = {tp: Traffic(log_, seed * 10 + i) for i, (tp, log_) in enumerate(sorted(self.logs.items()))}
        self.checkpoint = {}                 # the cleaner's first dirty offsets, as LogCleaner keeps them
        self.plain = Log(os.path.join(self.dir, "events-0"), LogConfig(segment_bytes=1500), time_ms=lambda: NOW)
        metadata = {"version": 1, "cluster_id": "x", "broker_configs": {},
                    "topics": {"profiles": {"configs": {"cleanup.policy": "compact"}},
                               "lagged": {"configs": {"cleanup.policy": "compact",
                                                      "min.compaction.lag.ms": str(LAG_MS)}},
                               "events": {"configs": {}}}}
        with open(os.path.join(self.dir, compaction_preview.METADATA_FILE), "w") as f:
            json.dump(metadata, f)

    def append(self, round_no, start_ts) -> int:
        last = start_ts
        for tp, traffic in sorted(self.traffic.items()):
            deleted = [b"deleted-%d-%d" % (round_no, i) for i in range(3)]
            last = max(last, traffic.run(110, start_ts, leave_open=tp == ("profiles", 1) and round_no == 0,
                                         deleted=deleted))
        b = RecordBatchBuilder()
        b.append(start_ts, None, b"not compacted")
        self.plain.append_as_leader(b.build(), 0)
        hws = {}
        for tp, log_ in self.logs.items():
            hw = log_.log_end_offset - (25 if tp == ("profiles", 2) else 0)
            log_.update_high_watermark(hw)
            if tp != ("profiles", 0):
                hws[tp] = hw
        checkpoints.write_offsets(os.path.join(self.dir, files.REPLICATION_CHECKPOINT), hws)
        return last

    def clean(self, now_ms) -> dict:
        """One clean of every compacted partition; returns (range, stats) per partition."""
        done = {}
        for tp, log_ in sorted(self.logs.items()):
            first_dirty, first_uncleanable, _, _ = cleanable_offsets(log_, self.checkpoint.get(tp), now_ms)
            stats = Cleaner(dedupe_memory=64 << 20).clean(log_, first_dirty, first_uncleanable, now_ms)
            self.checkpoint[tp] = stats.end_offset
            done[tp] = ((first_dirty, first_uncleanable), stats)
        checkpoints.write_offsets(os.path.join(self.dir, files.CLEANER_CHECKPOINT), self.checkpoint)
        return done


def read_back(spark, log_dir):
    """(topic, partition, offset) -> (key, value, timestamp ms, isAborted, deleteHorizon ms) as the data
    source reads them."""
    from pyspark.sql import functions as F
    df = (spark.read.format("kafkalog").option("logDirs", str(log_dir)).option("topics", ",".join(TOPICS))
          .option("includeBatchFields", "true").load()
          .select("topic", "partition", "offset", "key", "value", F.unix_millis("timestamp").alias("ts"),
                  "isAborted", F.unix_millis("deleteHorizon").alias("horizon")))
    return {(r.topic, r.partition, r.offset): (r.key and bytes(r.key), r.value and bytes(r.value), r.ts,
                                               r.isAborted, r.horizon)
            for r in df.collect()}


@pytest.mark.spark
@pytest.mark.parametrize("seed", [1, 2])       # each: 5 partitions of different traffic, 3 rounds
def test_preview_equals_what_one_clean_removes(spark, tmp_path, seed):
    scenario = Scenario(tmp_path, seed)
    shapes = collections.Counter()
    ts, now = NOW, None
    # Round 1 stamps delete horizons; round 2 runs once they passed; round 3 before the new ones pass.
    for round_no in range(3):
        last = scenario.append(round_no, ts)
        now = last + 1_000 if round_no != 1 else max(last + 1_000, now + RETENTION_MS)
        before = {tp: data_records(log_, log_.high_watermark) for tp, log_ in scenario.logs.items()}

        results = compaction_preview.compute(spark, {"logDirs": scenario.dir, "nowMs": str(now)})
        marked = results["records"].persist()        # the per-topic table is computed from it: one scan
        predicted = collections.defaultdict(dict)
        for r in marked.where("removed").collect():
            predicted[(r.topic, r.partition)][r.offset] = r.reason
        per_topic = {r.topic: r.asDict() for r in results["topics"].collect()}
        ranges = {(r.topic, r.partition): r for r in results["partitions"].collect()}
        marked.unpersist()

        cleaned = scenario.clean(now)
        assert set(per_topic) == set(TOPICS)                 # events is not compacted
        truth = {topic: collections.Counter() for topic in TOPICS}
        for tp, log_ in scenario.logs.items():
            (first_dirty, first_uncleanable), stats = cleaned[tp]
            r = ranges[tp]
            assert (r.first_dirty_offset, r.first_uncleanable_offset) == (first_dirty, first_uncleanable), tp
            after = data_records(log_, log_.high_watermark)
            gone = set(before[tp]) - set(after)
            assert set(after) <= set(before[tp])
            assert all(after[o] == before[tp][o] for o in after)       # kept records keep their bytes and time
            assert set(predicted[tp]) == gone, (tp, round_no, sorted(set(predicted[tp]) ^ gone))
            reasons = collections.Counter(predicted[tp].values())
            assert reasons["no key"] == stats.invalid_messages
            t = truth[tp[0]]
            t["records"] += len(before[tp])
            t["bytes"] += sum(size(k, v) for k, v, _ in before[tp].values())
            t["removed_records"] += len(gone)
            t["removed_bytes"] += sum(size(*before[tp][o][:2]) for o in gone)
            t["tombstones"] += sum(v is None for _, v, _ in after.values())
            t["null_keys"] += sum(k is None for k, _, _ in before[tp].values())
            t["tombstones removed"] += sum(before[tp][o][1] is None for o in gone)
            t["superseded"] += reasons["superseded"]
            t["aborted"] += reasons["aborted transaction"]
            t["expired"] += reasons["tombstone past its delete horizon"]
            shapes += census(log_)
        for topic in TOPICS:
            got = {k: per_topic[topic][k] for k in ("records", "bytes", "removed_records", "removed_bytes",
                                                    "tombstones", "null_keys")}
            assert got == {k: truth[topic][k] for k in got}, (topic, round_no)
            assert truth[topic]["removed_records"] > 0
        expired = sum(t["expired"] for t in truth.values())
        assert (expired > 0) == (round_no == 1), (round_no, expired)   # round 1 passes round 0's horizons
        for reason in ("superseded", "aborted", "null_keys"):
            shapes[reason] += sum(t[reason] for t in truth.values())

        # The data source reads the cleaned log: exactly the records the cleaner kept.
        want = {}
        for tp, log_ in scenario.logs.items():
            fields = batch_fields(log_, log_.high_watermark)
            for o, rec in data_records(log_, log_.high_watermark).items():
                want[(tp[0], tp[1], o)] = rec + fields[o]
        got = read_back(spark, tmp_path)
        assert got == want
        shapes["aborted left (past the range)"] += sum(rec[3] for rec in got.values())
        shapes["horizons read"] += sum(rec[4] is not None for rec in got.values())
        ts = now + 1_000
    # The scenario reached what it is meant to: every shape a clean leaves, the bounds.
    for shape in ("superseded", "aborted", "null_keys", "aborted left (past the range)", "horizons read",
                  "empty batch", "delete horizon", "negative timestamp delta", "gap inside a batch",
                  "gap between batches"):
        assert shapes[shape] > 0, (shape, shapes)
    assert any(f.endswith(".deleted") for f in os.listdir(scenario.logs[("profiles", 0)].dir))   # swapped


# -- the data source over cleaned segments, without Spark ----------------------------------------------------


def decoded(log_dir, topic="t", partition=0, splits=None):
    """offset -> (key, value, timestamp) through layout + the decoder, as a Spark task reads."""
    log = [p for p in layout.discover([str(log_dir)]) if (p.topic, p.partition) == (topic, partition)][0]
    out = {}
    for split in splits if splits is not None else layout.plan_splits(log, log.log_start_offset, log.committed_end, 700):
        for batch in SplitReader(split, log.log_start_offset, log.committed_end, rows_per_batch=7):
            d = batch.to_pydict()
            for o, k, v, t in zip(d["offset"], d["key"], d["value"], d["timestamp"]):
                out[o] = (k, v, round(t.timestamp() * 1000))
    return out


def test_a_query_planned_before_a_clean_reads_the_segments_it_planned(tmp_path):
    """Splits planned on segments the cleaner then swaps out read the replaced files (`.deleted`)."""
    log_ = Log(str(tmp_path / "t-0"), compacted_config(), time_ms=lambda: NOW)
    traffic = Traffic(log_, 7)
    last = traffic.run(120, NOW)
    log_.update_high_watermark(log_.log_end_offset)
    before = data_records(log_)
    assert decoded(tmp_path) == before
    log = layout.discover([str(tmp_path)])[0]
    splits = layout.plan_splits(log, log.log_start_offset, log.committed_end, 700)
    first_dirty, first_uncleanable, _, _ = cleanable_offsets(log_, None, last + 1)
    stats = Cleaner(dedupe_memory=1 << 20).clean(log_, first_dirty, first_uncleanable, last + 1)
    assert stats.segments_swapped > 1
    assert decoded(tmp_path, splits=splits) == before              # the snapshot as planned
    after = data_records(log_)
    assert len(after) < len(before)
    assert decoded(tmp_path) == after                              # planned again: the cleaned log


def test_emptied_marker_and_unreplicated_marker_in_the_transaction_scan(tmp_path):
    """scan_transactions: a marker the cleaner emptied (records_count 0, a 61-byte header) is not
    decoded past its end; a transaction whose marker is at or past the high watermark still bounds
    the last stable offset (as the broker's producer state: storage/producer_state.py)."""
    from spark_jobs.sample_data import LogDirWriter
    w = LogDirWriter(str(tmp_path))
    w.append("t", 0, [(NOW, b"k", b"v", [])], producer_id=5, producer_epoch=0, base_sequence=0,
             transactional=True)                                                         # 0
    marker = build_control_batch(ControlRecordType.ABORT, 5, 0, 0, NOW, base_offset=1, partition_leader_epoch=0)
    emptied = _empty_batch(RecordBatchView(marker, 0))
    assert len(emptied) == 61 and RecordBatchView(emptied, 0).is_valid()
    w._write(w._partition("t", 0), emptied, 1, 1, NOW, 1)                              # 1: emptied
    w._partition("t", 0).open_txns.pop(5)
    w._roll(w._partition("t", 0), 2)            # the emptied marker ends its segment: nothing after it
    w.append("t", 0, [(NOW, b"k2", b"v", [])], producer_id=6, producer_epoch=0, base_sequence=0,
             transactional=True)                                                         # 2
    w.end_transaction("t", 0, 6, 0, False, NOW)                                          # 3: ABORT
    w.close()
    txn = layout.scan_transactions(layout.discover([str(tmp_path)])[0])
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in txn.aborted] == [(6, 2, 3)]
    assert txn.last_stable_offset == 4
    assert decoded(tmp_path) == {0: (b"k", b"v", NOW), 2: (b"k2", b"v", NOW)}
    w.close(high_watermarks={("t", 0): 3})
    log = layout.discover([str(tmp_path)])[0]
    assert layout.scan_transactions(log).last_stable_offset == 2    # 6's ABORT (3) is not below the HW


def test_cleanable_range_follows_the_cleaner_offline(tmp_path):
    """compaction_preview.cleanable_range against storage.log_cleaner.cleanable_offsets on one log:
    the active segment, min.compaction.lag.ms at every cut, a first dirty checkpoint."""
    log_ = Log(str(tmp_path / "t-0"), compacted_config(), time_ms=lambda: NOW)
    last = Traffic(log_, 3).run(150, NOW)
    log_.update_high_watermark(log_.log_end_offset)
    log = layout.discover([str(tmp_path)])[0]
    lso = layout.scan_transactions(log).last_stable_offset
    assert lso == log_.last_stable_offset
    bases = [s.base_offset for s in log_.segments]
    assert len(bases) > 5
    for lag in (0, 1, 30_000, 120_000, 10**9):
        for checkpoint in (None, bases[2], bases[-2] + 1, log_.log_end_offset + 5):
            log_.config.min_compaction_lag_ms = lag
            want = cleanable_offsets(log_, checkpoint, last + 500)[:2]
            got = compaction_preview.cleanable_range(log, checkpoint, lso, last + 500, lag)
            assert got == want, (lag, checkpoint)
