"""Planning and split reading without Spark: read_committed without `.txnindex` (this broker's storage
does not write one), and splits that keep reading the planned file while a segment is rewritten."""
import os
import shutil

import pytest

from spark_jobs import layout
from spark_jobs.decoder import SegmentChangedError, SplitReader
from spark_jobs.sample_data import LogDirWriter

from .conftest import write_sample


def _offsets(split, start=0, end=1 << 62, aborted=None):
    return [o for batch in SplitReader(split, start, end, aborted=aborted)
            for o in batch.column("offset").to_pylist()]


def test_read_committed_scans_control_batches_when_txnindex_is_absent(tmp_path):
    _, rows = write_sample(tmp_path / "with")
    shutil.copytree(tmp_path / "with", tmp_path / "without")
    removed = 0
    for name in os.listdir(tmp_path / "without" / "txn-0"):
        if name.endswith(layout.TXN_INDEX_SUFFIX):
            os.remove(tmp_path / "without" / "txn-0" / name)
            removed += 1
    assert removed                                      # the sample wrote one; the scan must not need it
    with_index, = layout.discover([str(tmp_path / "with")], lambda t: t == "txn")
    without, = layout.discover([str(tmp_path / "without")], lambda t: t == "txn")
    state = layout.scan_transactions(without)
    assert state == layout.scan_transactions(with_index)
    txn = [r for r in rows if r["topic"] == "txn"]
    assert {a.producer_id for a in state.aborted} == {8}
    assert state.last_stable_offset == min(r["offset"] for r in txn if r["open"])
    got = [o for split in layout.plan_splits(without, 0, state.last_stable_offset, 1 << 30)
           for o in _offsets(split, 0, state.last_stable_offset, state.aborted)]
    assert got == [r["offset"] for r in txn if not r["aborted"] and r["offset"] < state.last_stable_offset]


def test_split_reads_the_planned_file_while_a_segment_is_rewritten(tmp_path):
    w = LogDirWriter(str(tmp_path))
    for i in range(6):
        w.append("t", 0, [(1000 + i, b"k", b"v%d" % i, [])])
    w.close()
    log, = layout.discover([str(tmp_path)])
    split, = layout.plan_splits(log, 0, log.committed_end, 1 << 20)
    path = split.log_path
    # What Kafka's cleaner does: the old segment becomes `.deleted`, the cleaned one takes its name.
    os.rename(path, path + ".deleted")
    with open(path + ".deleted", "rb") as old, open(path, "wb") as new:
        new.write(old.read()[: split.end_position // 2])
    assert _offsets(split) == list(range(6))            # still the planned (old) file
    os.remove(path + ".deleted")
    with pytest.raises(SegmentChangedError, match="run the query again"):
        _offsets(split)
    os.remove(path)
    with pytest.raises(SegmentChangedError):
        _offsets(split)


def test_legacy_entries_read_at_their_own_offsets_and_timestamp_types(tmp_path):
    # Data from before Kafka 0.11 (a topic kept since an old cluster): magic 1 messages, a
    # gzip LogAppendTime wrapper (inner offsets relative to it) and magic 0 messages, in a
    # segment based at 100. Kafka's consumer sees offsets 100-107, timestamp type 1 for the
    # wrapper's messages (all at its time) and -1 for magic 0, which has no timestamp.
    from spark_jobs.decoder import offsets_and_timestamps, read_batch_infos
    from storage.compression import Codec
    from storage.legacy import MAGIC_V0, MAGIC_V1, build_message_set
    from storage.record_batch import LOG_APPEND_TIME
    (tmp_path / "t-0").mkdir()
    data = build_message_set([(1000, b"k0", b"v0"), (1001, b"k1", b"v1"), (1002, None, b"v2")],
                             MAGIC_V1, base_offset=100)
    data += build_message_set([(2000, b"a", b"x"), (2001, b"b", b"y"), (2002, b"c", b"z")],
                              MAGIC_V1, Codec.GZIP, base_offset=103, timestamp_type=LOG_APPEND_TIME)
    data += build_message_set([(0, b"m0", b"w0"), (0, b"m1", b"w1")], MAGIC_V0, Codec.NONE,
                              base_offset=106)
    (tmp_path / "t-0" / "00000000000000000100.log").write_bytes(data)
    log, = layout.discover([str(tmp_path)])
    split, = layout.plan_splits(log, log.log_start_offset, log.committed_end, 1 << 20)
    rows = [r for b in SplitReader(split, 104, log.committed_end) for r in b.to_pylist()]
    assert [(r["offset"], r["value"], r["timestampType"]) for r in rows] == [
        (104, b"y", 1), (105, b"z", 1), (106, b"w0", -1), (107, b"w1", -1)]
    assert rows[0]["timestamp"] == rows[1]["timestamp"] and rows[2]["timestamp"] is None
    all_rows = [r for b in SplitReader(split, 0, log.committed_end) for r in b.to_pylist()]
    assert [r["offset"] for r in all_rows] == list(range(100, 108))
    assert layout.offset_for_timestamp(log, 1500, offsets_and_timestamps) == 103
    batches = [r for b in read_batch_infos(split, 0, 200) for r in b.to_pylist()]
    assert [(b["baseOffset"], b["lastOffset"], b["codec"], b["recordsCount"]) for b in batches] == [
        (100, 100, "none", 1), (101, 101, "none", 1), (102, 102, "none", 1), (103, 105, "gzip", 3),
        (106, 106, "none", 1), (107, 107, "none", 1)]


def test_spark_kafka_option_names_are_honoured_or_refused(tmp_path):
    from spark_jobs.datasource import KafkaLogScanReader
    _, rows = write_sample(tmp_path / "logs")

    def offsets(**options):
        reader = KafkaLogScanReader({"logDirs": str(tmp_path / "logs"), "topics": "txn", **options})
        return sorted(o for p in reader.plan() for b in reader.read(p)
                      for o in b.column("offset").to_pylist())
    assert offsets(**{"kafka.isolation.level": "read_committed"}) == offsets(isolation="read_committed")
    assert offsets(**{"kafka.isolation.level": "read_committed"}) != offsets()
    with pytest.raises(ValueError, match="option assign .* is not supported"):
        KafkaLogScanReader({"logDirs": str(tmp_path / "logs"), "assign": '{"txn": [0]}'})


def test_an_unknown_consumer_offsets_record_type_is_skipped():
    # Kafka's GroupMetadataManager.readMessageKey: an unknown key version is UnknownKey,
    # skipped when loading; it failed the whole consumer_lag job.
    from spark_jobs.consumer_lag import decode_commit
    assert decode_commit(b"\x00\x63" + b"\x00" * 10, b"x") is None


def test_a_segment_deleted_while_planning_asks_for_the_query_again(tmp_path, monkeypatch):
    from spark_jobs.datasource import KafkaLogScanReader
    write_sample(tmp_path / "logs")
    real = layout.scan_transactions

    def retention_strikes(log):
        for segment in log.segments:
            os.rename(segment.log_path, segment.log_path + ".deleted")
        return real(log)
    monkeypatch.setattr(layout, "scan_transactions", retention_strikes)
    reader = KafkaLogScanReader({"logDirs": str(tmp_path / "logs"), "topics": "txn",
                                 "isolation": "read_committed"})
    with pytest.raises(SegmentChangedError, match="run the query again"):
        reader.plan()


def test_a_split_stops_at_the_high_watermark_so_a_truncated_tail_does_not_break_it(tmp_path):
    """The bytes above the high watermark are not read: a follower truncating its uncommitted
    tail after planning (a leader change) left the split's planned bytes short, and the query
    failed although every committed record was there."""
    w = LogDirWriter(str(tmp_path))
    for i in range(10):
        w.append("t", 0, [(1000 + i, b"k", b"v%d" % i, [])])
    w.close(high_watermarks={("t", 0): 6})
    log, = layout.discover([str(tmp_path)])
    assert (log.committed_end, log.log_end_offset) == (6, 10)
    split, = layout.plan_splits(log, 0, log.committed_end, 1 << 20)
    with open(split.log_path, "rb") as f:
        data = f.read()
    cut = split.end_position
    assert 0 < cut < len(data)
    with open(split.log_path, "r+b") as f:
        f.truncate(cut)                                 # offsets 6-9 truncated away
    assert _offsets(split, 0, 6) == list(range(6))


def test_a_compacted_segment_being_swapped_in_is_read_in_place_of_those_it_replaces(tmp_path):
    """Kafka's replaceSegments renames the cleaned segment `.swap`, the old ones `.deleted`,
    then drops the `.swap`: planned in between (or on a dir a crash left so), the rows of the
    replaced segments were silently missing."""
    w = LogDirWriter(str(tmp_path), segment_bytes=300)
    for i in range(30):
        w.append("t", 0, [(1000 + i, b"k", b"v%d" % i, [])])
    w.close()
    log, = layout.discover([str(tmp_path)])
    assert len(log.segments) >= 3
    first, second = log.segments[0], log.segments[1]
    # the "cleaned" segment: the first segment's records again (a cleaner keeping them all)
    shutil.copyfile(first.log_path, first.log_path + ".swap")
    os.rename(first.log_path, first.log_path + ".deleted")      # mid-swap
    log, = layout.discover([str(tmp_path)])
    assert log.segments[0].log_path.endswith(".log.swap")
    assert log.segments[1].base_offset == second.base_offset
    got = [o for split in layout.plan_splits(log, 0, log.committed_end, 1 << 20)
           for o in _offsets(split)]
    assert got == list(range(30))
    splits = layout.plan_splits(log, 0, log.committed_end, 1 << 20)
    os.rename(first.log_path + ".swap", first.log_path)          # the swap finishes
    assert [o for split in splits for o in _offsets(split)] == list(range(30))
    # A swap not fully prepared (a .cleaned file at or below its base: the cleaner was still
    # renaming) is ignored, as Kafka's loader ignores it: the old segments are whole.
    shutil.copyfile(second.log_path, second.log_path + ".swap")
    open(second.log_path[:-len(".log")] + ".index.cleaned", "wb").close()
    log, = layout.discover([str(tmp_path)])
    assert not any(s.log_path.endswith(".swap") for s in log.segments)
    assert [o for split in layout.plan_splits(log, 0, log.committed_end, 1 << 20)
            for o in _offsets(split)] == list(range(30))


def test_one_partition_in_two_log_dirs_is_refused_not_read_twice(tmp_path):
    for d in ("a", "b"):
        w = LogDirWriter(str(tmp_path / d))
        w.append("t", 0, [(1000, b"k", b"v", [])])
        w.close()
    with pytest.raises(layout.DuplicatePartitionError, match="t-0 is in two of the log dirs"):
        layout.discover([str(tmp_path / "a"), str(tmp_path / "b")])


def test_an_old_compressed_segment_cut_into_splits_keeps_every_row(tmp_path):
    """A magic 1 gzip wrapper's offset field is its last message's: a split starting there
    was labelled with it, and an end offset inside the wrapper dropped the split (rows
    0-4 of 0-6 came back when the segment was cut)."""
    from storage.compression import Codec
    from storage.legacy import build_message_set
    path = tmp_path / "t-0"
    path.mkdir()
    (path / "00000000000000000000.log").write_bytes(b"".join(
        build_message_set([(1000 + b * 5 + i, b"k", b"v%d" % (b * 5 + i)) for i in range(5)],
                          codec=Codec.GZIP, base_offset=b * 5) for b in range(3)))
    log, = layout.discover([str(tmp_path)])
    for target in (1 << 20, 50):
        splits = layout.plan_splits(log, 0, 7, target)
        assert [o for split in splits for o in _offsets(split, 0, 7)] == list(range(7))
    assert [s.first_offset for s in layout.plan_splits(log, 0, 15, 50)] == [0, 5, 10]


def test_a_chunk_is_decoded_once_its_records_reach_the_byte_cap(tmp_path, monkeypatch):
    """Very compressible data holds more than Arrow's 2 GiB per binary array in fewer than
    rows_per_batch records: chunks are cut by bytes too (a task failed on it)."""
    from spark_jobs import decoder
    w = LogDirWriter(str(tmp_path))
    for i in range(8):
        w.append("t", 0, [(1000 + i, b"k", b"x" * 10_000, [])])
    w.close()
    log, = layout.discover([str(tmp_path)])
    split, = layout.plan_splits(log, 0, log.committed_end, 1 << 20)
    monkeypatch.setattr(decoder, "MAX_CHUNK_BYTES", 25_000)
    sizes = [b.num_rows for b in SplitReader(split, 0, 1 << 62)]
    assert sum(sizes) == 8 and max(sizes) <= 3


def test_a_starting_offset_below_the_log_start_fails_unless_failondataloss_is_false(tmp_path):
    """As Spark's Kafka source (failOnDataLoss=true by default): records asked for that were
    deleted fail the query rather than being skipped silently (the option was ignored)."""
    from spark_jobs.datasource import DataLossError, KafkaLogReader
    w = LogDirWriter(str(tmp_path))
    for i in range(6):
        w.append("t", 0, [(1000 + i, b"k", b"v%d" % i, [])])
    w.close()
    (tmp_path / "log-start-offset-checkpoint").write_text("0\n1\nt 0 3\n")
    options = {"logDirs": str(tmp_path), "startingOffsets": '{"t": {"0": 1}}'}
    with pytest.raises(DataLossError, match="t-0 from offset 1, but its log starts at 3"):
        KafkaLogReader(options).partitions()
    planned = KafkaLogReader({**options, "failOnDataLoss": "false"}).partitions()
    assert [p.start_offset for p in planned] == [3]
    assert [p.start_offset for p in KafkaLogReader({"logDirs": str(tmp_path)}).partitions()] == [3]


def test_a_partition_filter_leaves_other_partitions_unopened(tmp_path, monkeypatch):
    """Partitions a pushed-down filter excludes are not loaded (their active segment was
    scanned at planning, then dropped)."""
    from spark_jobs.datasource import KafkaLogReader
    w = LogDirWriter(str(tmp_path))
    for p in range(4):
        w.append("t", p, [(1000, b"k", b"v", [])])
    w.close()
    loaded = []
    real = layout.load_partition
    monkeypatch.setattr(layout, "load_partition",
                        lambda path, topic, p, *a: loaded.append(p) or real(path, topic, p, *a))
    reader = KafkaLogReader({"logDirs": str(tmp_path)})
    from pyspark.sql.datasource import EqualTo
    list(reader.pushFilters([EqualTo(("partition",), 2)]))     # (a generator: Spark drains it)
    assert [p.split.partition for p in reader.partitions()] == [2]
    assert loaded == [2]


def test_the_end_reaches_what_the_cleaner_cleaned_past_a_stale_high_watermark(tmp_path):
    """replication-offset-checkpoint is up to 5 s old while the cleaner compacts up to the live
    high watermark: a key's older records below the checkpointed end may be gone for a newer
    one above it. Reading only to that end lost most live keys of a compacted topic while the
    broker wrote (70 of 80 snapshots in an audit); the end is where the cleaner got to."""
    w = LogDirWriter(str(tmp_path))
    for i in range(10):
        w.append("c", 0, [(1000 + i, b"k%d" % (i % 3), b"v%d" % i, [])])
    w.close({("c", 0): 4})
    log, = layout.discover([str(tmp_path)])
    assert log.committed_end == 4
    w._checkpoint(layout.CLEANER_OFFSET_CHECKPOINT, {("c", 0): 8})
    log, = layout.discover([str(tmp_path)])
    assert log.committed_end == 8
    w._checkpoint(layout.CLEANER_OFFSET_CHECKPOINT, {("c", 0): 2})     # behind: the HW stands
    log, = layout.discover([str(tmp_path)])
    assert log.committed_end == 4


def test_aborted_transactions_are_found_by_bisection_as_by_a_scan(tmp_path):
    """read_committed asks, for each transactional batch, whether its producer aborted a
    transaction around it; with 40,000 aborts a linear scan per batch took 10 s (80,000: 60 s)."""
    import random
    w = LogDirWriter(str(tmp_path))
    w.append("t", 0, [(1000, b"k", b"v", [])])
    w.close()
    log, = layout.discover([str(tmp_path)])
    split, = layout.plan_splits(log, 0, log.committed_end, 1 << 20)
    rng = random.Random(7)
    aborted, ranges = [], {}
    for pid in (1, 2, 3):
        offset = rng.randrange(5)
        for _ in range(200):                     # disjoint, as one producer's transactions are
            first = offset + rng.randrange(1, 6)
            last = first + rng.randrange(0, 4)
            ranges.setdefault(pid, []).append((first, last))
            offset = last + 1
        for first, last in rng.sample(ranges[pid], len(ranges[pid])):     # in any order
            aborted.append(layout.AbortedTxn(pid, first, last))
    reader = SplitReader(split, 0, 1 << 62, aborted=aborted)
    for pid in (1, 2, 3, 4):
        for offset in range(0, 2000):
            assert reader._is_aborted(pid, offset) == any(
                f <= offset <= l for f, l in ranges.get(pid, ())), (pid, offset)


def test_bad_option_values_fail_naming_the_option(tmp_path):
    """README: bad options fail at planning with a message that names the option. These were
    taken quietly: a misspelt boolean as false (failOnDataLoss=flase turned the data-loss check
    off), true as offset 1, a partition id that is no number, offsets below -2, and a
    partition's directory given as a log dir (no rows)."""
    from spark_jobs.datasource import KafkaLogScanReader
    write_sample(tmp_path / "logs")
    logs = str(tmp_path / "logs")
    bad = [({"failOnDataLoss": "flase"}, "option failOnDataLoss: expected true or false"),
           ({"includeHeaders": "ture"}, "option includeHeaders: expected true or false"),
           ({"startingOffsets": '{"txn": {"0": true}}'}, "option startingOffsets"),
           ({"startingOffsets": '{"txn": {"zero": 10}}'}, "option startingOffsets"),
           ({"startingOffsets": "-5"}, "option startingOffsets"),
           ({"endingOffsets": '{"txn": {"0": -5}}'}, "option endingOffsets"),
           ({"startingTimestamp": "-1"}, "option startingTimestamp"),
           ({"logDirs": os.path.join(logs, "txn-0")}, "is a partition's directory")]
    for options, message in bad:
        with pytest.raises(ValueError, match=message):
            KafkaLogScanReader({"logDirs": logs, "topics": "txn", **options})
    for value in ("TRUE", "false", "0", "yes"):                 # still accepted
        KafkaLogScanReader({"logDirs": logs, "topics": "txn", "failOnDataLoss": value})
    KafkaLogScanReader({"logDirs": logs, "topics": "txn", "startingOffsets": '{"txn": {"0": -2}}'})
