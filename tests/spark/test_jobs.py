"""Each job's numbers against the same numbers computed in plain Python from the known sample rows
(which the data source tests check against storage's own reader and against what was written)."""
import collections
import datetime as dt

import pyarrow.parquet as pq
import pytest

from spark_jobs import compaction_preview, consumer_lag, export, layout, topic_stats

from .conftest import COMMITS, HOUR_MS

pytestmark = pytest.mark.spark


def user_rows(expected):
    return [r for r in expected if not r["topic"].startswith("__")]


def size(r):
    return len(r["key"] or b"") + len(r["value"] or b"")


def test_topic_stats(spark, sample_dir):
    log_dir, expected = sample_dir
    results = topic_stats.compute(spark, {"logDirs": str(log_dir)})
    by_tp = collections.defaultdict(list)
    for r in user_rows(expected):
        by_tp[(r["topic"], r["partition"])].append(r)
    got = {(r["topic"], r["partition"]): r for r in results["partitions"].collect()}
    assert set(got) == set(by_tp)
    for tp, rows in by_tp.items():
        g = got[tp]
        assert g["records"] == len(rows)
        assert g["bytes"] == sum(size(r) for r in rows)
        assert g["distinct_keys"] == len({r["key"] for r in rows if r["key"] is not None})
        assert g["null_keys"] == sum(r["key"] is None for r in rows)
        assert round(g["min_timestamp"].timestamp() * 1000) == min(r["timestamp_ms"] for r in rows)
        assert round(g["max_timestamp"].timestamp() * 1000) == max(r["timestamp_ms"] for r in rows)
    hours = collections.Counter((r["topic"], r["timestamp_ms"] // HOUR_MS) for r in user_rows(expected))
    got_hours = {(r["topic"], round(r["hour"].timestamp() * 1000) // HOUR_MS): r["records"]
                 for r in results["hours"].collect()}
    assert got_hours == dict(hours)
    codecs = {r["codec"]: r for r in results["codecs"].collect()}
    assert set(codecs) == {"none", "gzip", "snappy", "lz4", "zstd"}
    assert codecs["none"]["ratio"] == 1.0
    assert codecs["zstd"]["ratio"] > 1.0 and codecs["gzip"]["ratio"] > 1.0
    # LZ4 batches: 4 events partitions x 3 batches + 3 appendtime batches -> records add up.
    assert sum(r["records"] for r in codecs.values()) == len(expected) - len(
        [r for r in expected if r["topic"] == "__consumer_offsets"]) + 0


def test_topic_stats_cli_writes_tables_and_chart(spark, sample_dir, tmp_path, capsys):
    log_dir, _ = sample_dir
    out, png = tmp_path / "stats.parquet", tmp_path / "hours.png"
    assert topic_stats.main(["--log-dirs", str(log_dir), "--topics", "events", "--output", str(out),
                             "--plot", str(png)]) == 0
    printed = capsys.readouterr().out
    assert "Per topic-partition" in printed and "events" in printed and "Compression by codec" in printed
    assert pq.read_table(out / "partitions").num_rows == 3
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_export_parquet_partitioned_by_topic_and_date(spark, sample_dir, tmp_path):
    log_dir, expected = sample_dir
    out = tmp_path / "export"
    assert export.main(["--log-dirs", str(log_dir), "--topics", "events,appendtime", "--output", str(out),
                        "--decode", "utf8"]) == 0
    want = collections.Counter((r["topic"], dt.datetime.fromtimestamp(r["timestamp_ms"] / 1000, dt.timezone.utc)
                                .strftime("%Y-%m-%d")) for r in user_rows(expected) if r["topic"] != "txn")
    written = collections.Counter()
    for topic_dir in out.iterdir():
        if topic_dir.is_dir():
            for date_dir in topic_dir.iterdir():
                table = pq.read_table(date_dir)
                written[(topic_dir.name.split("=")[1], date_dir.name.split("=")[1])] += table.num_rows
    assert written == want
    table = pq.read_table(out / "topic=events")
    values = set(table.column("value").to_pylist())
    assert values == {r["value"].decode() if r["value"] is not None else None
                      for r in expected if r["topic"] == "events"}


def test_export_json_decode(spark, tmp_path):
    from spark_jobs.sample_data import LogDirWriter
    w = LogDirWriter(str(tmp_path / "logs"))
    w.append("j", 0, [(1000, b"a", b'{"n": 1, "s": "x"}', []), (2000, None, b'{"n": 2}', []),
                      (3000, b"c", b"not json", [])])
    w.close()
    df = export.prepare(spark, {"logDirs": str(tmp_path / "logs")}, "json")
    rows = sorted(df.select("offset", "key", "value.n", "value.s").collect())
    assert [tuple(r) for r in rows] == [(0, "a", 1, "x"), (1, None, 2, None), (2, "c", None, None)]


def test_consumer_lag(spark, sample_dir):
    log_dir, expected = sample_dir
    results = consumer_lag.compute(spark, str(log_dir))
    latest = {}
    for group, topic, partition, offset in COMMITS:
        latest[(group, topic, partition)] = offset
    ends = {(log.topic, log.partition): log.committed_end for log in layout.discover([str(log_dir)])}
    want = {k: (v, ends.get(k[1:]), None if k[1:] not in ends else ends[k[1:]] - v)
            for k, v in latest.items() if v is not None}
    got = {(r["group"], r["topic"], r["partition"]): (r["committed_offset"], r["log_end_offset"], r["lag"])
           for r in results["lag"].collect()}
    assert got == want
    assert got[("g1", "events", 0)] == (50, 140, 90)
    groups = {r["group"]: r["total_lag"] for r in results["groups"].collect()}
    assert groups["g1"] == 90 + 120 + 0
    # --topics / --topic-pattern keep those topics' commits (they were accepted and ignored)
    for kwargs in ({"topics": "appendtime"}, {"topic_pattern": "append.*"}):
        rows = consumer_lag.compute(spark, str(log_dir), **kwargs)["lag"].collect()
        assert {(r["group"], r["topic"]) for r in rows} == {("g2", "appendtime")}, kwargs
    assert consumer_lag.compute(spark, str(log_dir), topic_pattern="event")["lag"].count() == 0
    # --isolation read_committed: a partition's end is its last stable offset (an open
    # transaction in txn-0 holds it below the high watermark)
    committed = {(t, p): e for t, p, e in consumer_lag.end_offsets([str(log_dir)], True)}
    txn, = layout.discover([str(log_dir)], lambda t: t == "txn")
    assert committed[("txn", 0)] == layout.scan_transactions(txn).last_stable_offset < txn.committed_end
    assert committed[("events", 0)] == ends[("events", 0)]


def test_consumer_lag_counts_offsets_committed_in_transactions_once_they_commit(spark, tmp_path):
    # sendOffsetsToTransaction: Kafka's group coordinator applies such offsets at the COMMIT
    # marker, drops them at ABORT and keeps them pending while the transaction is open.
    from protocol.internal import OffsetCommitKey, OffsetCommitValue
    from protocol.internal_records import encode_key, encode_value
    from spark_jobs.sample_data import LogDirWriter

    def commit(group, offset):
        key = OffsetCommitKey(group=group, topic="orders", partition=0)
        value = OffsetCommitValue(offset=offset, leader_epoch=-1, metadata="",
                                  commit_timestamp=1, expire_timestamp=-1)
        return (1, encode_key(key), encode_value(value, 3), [])
    writer = LogDirWriter(str(tmp_path / "logs"))
    writer.append("orders", 0, [(1, b"k", b"v", [])] * 500)
    writer.append("__consumer_offsets", 0, [commit("aborted", 100)])
    writer.append("__consumer_offsets", 0, [commit("aborted", 300)], producer_id=7,
                  producer_epoch=0, transactional=True)
    writer.end_transaction("__consumer_offsets", 0, 7, 0, commit=False, timestamp=2)
    writer.append("__consumer_offsets", 0, [commit("committed", 200)], producer_id=8,
                  producer_epoch=0, transactional=True)
    writer.end_transaction("__consumer_offsets", 0, 8, 0, commit=True, timestamp=3)
    writer.append("__consumer_offsets", 0, [commit("open", 50)])
    writer.append("__consumer_offsets", 0, [commit("open", 400)], producer_id=9,
                  producer_epoch=0, transactional=True)
    writer.append("__consumer_offsets", 0, [commit("plain-after-open", 450)])
    # another producer's transaction committed while producer 9's is still open: it counts
    writer.append("__consumer_offsets", 0, [commit("committed-after-open", 42)], producer_id=10,
                  producer_epoch=0, transactional=True)
    writer.end_transaction("__consumer_offsets", 0, 10, 0, commit=True, timestamp=4)
    writer.close()
    got = {r["group"]: r["committed_offset"]
           for r in consumer_lag.compute(spark, str(tmp_path / "logs"))["lag"].collect()}
    assert got == {"aborted": 100, "committed": 200, "open": 50, "plain-after-open": 450,
                   "committed-after-open": 42}


def test_consumer_lag_on_kafka_fixture_has_only_group_metadata(spark, kafka_fixtures):
    results = consumer_lag.compute(spark, str(kafka_fixtures / "kafka-3.4.0"))
    assert results["lag"].count() == 0       # the fixture's __consumer_offsets holds GroupMetadata only


def test_compaction_preview(spark, sample_dir):
    """The cleaner's rule over the sample: in [log start, first uncleanable offset), the last stable
    offset (txn-0 has an open transaction) and the active segment rounded down to a segment boundary,
    records of aborted transactions, keyless records and records with a later one of their key go.
    (tests/spark/test_compaction_preview_cleaner.py checks the job against a real clean.)"""
    log_dir, expected = sample_dir
    results = compaction_preview.compute(spark, {"logDirs": str(log_dir), "topics": "events,txn"})
    end = {}
    for log in layout.discover([str(log_dir)]):
        bound = min(layout.scan_transactions(log).last_stable_offset, log.segments[-1].base_offset)
        end[(log.topic, log.partition)] = max(s.base_offset for s in log.segments if s.base_offset <= bound)
    assert end[("txn", 0)] == 0 and end[("events", 0)] > 0     # txn-0: one segment, or the open transaction
    want = {}
    for topic in ("events", "txn"):
        rows = [r for r in expected if r["topic"] == topic]
        cleanable = [r for r in rows if r["offset"] < end[(topic, r["partition"])]]
        latest = {}
        for r in cleanable:
            if r["key"] is not None and not r.get("aborted"):
                latest[(r["partition"], r["key"])] = max(latest.get((r["partition"], r["key"]), -1), r["offset"])
        removed = [r for r in cleanable if r.get("aborted") or r["key"] is None
                   or r["offset"] < latest[(r["partition"], r["key"])]]
        want[topic] = (len(rows), len(removed), sum(size(r) for r in removed), sum(r["key"] is None for r in rows),
                       sum(r["value"] is None for r in rows if r not in removed))
    got = {r["topic"]: (r["records"], r["removed_records"], r["removed_bytes"], r["null_keys"], r["tombstones"])
           for r in results["topics"].collect()}
    assert got == want
    assert got["events"][1] > 0
    assert any(r["key"] is None and r["offset"] < end[("events", r["partition"])]
               for r in expected if r["topic"] == "events")                  # keyless records go too
    ranges = {(r.topic, r.partition): r.first_uncleanable_offset for r in results["partitions"].collect()}
    assert ranges == {tp: e for tp, e in end.items() if tp[0] in ("events", "txn")}


def test_compaction_preview_takes_compacted_topics_from_broker_metadata(spark, tmp_path):
    import json

    from spark_jobs.sample_data import LogDirWriter
    w = LogDirWriter(str(tmp_path), segment_bytes=200)
    for topic in ("profiles", "clicks", "defaulted"):
        for i in range(12):
            w.append(topic, 0, [(1000 + i, b"k%d" % (i % 3), b"v" * 20, [])])
    w.close()
    metadata = {"version": 1, "cluster_id": "x", "broker_configs": {"": {"log.cleanup.policy": "delete"}},
                "topics": {"profiles": {"topic_id": "0" * 32, "partitions": {"0": {"replicas": [0], "leader_epoch": 0}},
                                        "configs": {"cleanup.policy": "compact,delete"}},
                           "clicks": {"topic_id": "1" * 32, "partitions": {"0": {"replicas": [0], "leader_epoch": 0}},
                                      "configs": {}}}}
    (tmp_path / compaction_preview.METADATA_FILE).write_text(json.dumps(metadata))
    assert compaction_preview.compacted_topics([str(tmp_path)]) == [
        "__consumer_offsets", "__transaction_state", "profiles"]
    got = {r["topic"]: (r["records"], r["removed_records"])
           for r in compaction_preview.compute(spark, {"logDirs": str(tmp_path)})["topics"].collect()}
    active = layout.discover([str(tmp_path)], lambda t: t == "profiles")[0].segments[-1].base_offset
    assert 3 < active < 12                     # several segments: the cleanable part has duplicates
    assert got == {"profiles": (12, active - 3)}
    metadata["broker_configs"][""]["log.cleanup.policy"] = "compact"
    (tmp_path / compaction_preview.METADATA_FILE).write_text(json.dumps(metadata))
    assert "clicks" in compaction_preview.compacted_topics([str(tmp_path)])
    assert compaction_preview.compacted_topics([str(tmp_path / "profiles-0")]) is None
