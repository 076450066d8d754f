"""The kafkalog data source against Kafka's own data dirs and against logs with known contents."""
import collections
import datetime as dt
import json
import os
import shutil

import pytest

from spark_jobs import layout
from storage.record_batch import CONTROL_FLAG_MASK, RecordBatchView, iter_batches

pytestmark = pytest.mark.spark

UTC = dt.timezone.utc


def read(spark, log_dir, **options):
    reader = spark.read.format("kafkalog").option("logDirs", str(log_dir))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def rows_of(df):
    return sorted((r.asDict(recursive=True) for r in df.collect()), key=lambda r: (r["topic"], r["partition"], r["offset"]))


def storage_reader_records(partition_dir):
    """Every data record of a partition as storage's own reader decodes it: (offset, ts, key, value)."""
    out = []
    for name in sorted(os.listdir(partition_dir)):
        if name.endswith(".log"):
            with open(os.path.join(partition_dir, name), "rb") as f:
                buf = f.read()
            for batch in iter_batches(buf):
                assert isinstance(batch, RecordBatchView) and batch.is_valid()
                if not batch.attributes & CONTROL_FLAG_MASK:
                    out += [(r.offset, r.timestamp, r.key and bytes(r.key), r.value and bytes(r.value))
                            for r in batch.records()]
    return out


def as_tuple(r):
    ts = r["timestamp"]
    ms = round(ts.timestamp() * 1000)
    return (r["offset"], ms, r["key"], r["value"])


@pytest.mark.parametrize("kafka_version,topic,count", [("kafka-3.4.0", "test", 97), ("kafka-3.1.0", "cities", 11)])
def test_reads_what_apache_kafka_wrote(spark, kafka_fixtures, tmp_path, kafka_version, topic, count):
    log_dir = tmp_path / kafka_version
    shutil.copytree(kafka_fixtures / kafka_version, log_dir)
    df = read(spark, log_dir)
    rows = rows_of(df)
    assert {r["topic"] for r in rows} == {topic}         # internal topics only when asked
    assert len(rows) == count
    assert [as_tuple(r) for r in rows] == storage_reader_records(log_dir / f"{topic}-0")
    assert [r["offset"] for r in rows] == list(range(count))
    if topic == "cities":
        assert rows[0]["value"] == b"New York"


def test_internal_topics_only_when_asked(spark, kafka_fixtures):
    df = read(spark, kafka_fixtures / "kafka-3.1.0", topics="__consumer_offsets")
    rows = rows_of(df)
    assert {r["topic"] for r in rows} == {"__consumer_offsets"}
    assert sorted({r["partition"] for r in rows}) == [0, 2, 31, 34]
    assert len(rows) == 8
    everything = read(spark, kafka_fixtures / "kafka-3.1.0", includeInternal="true")
    assert everything.count() == 8 + 11


def expected_visible(rows, committed=False):
    out = []
    for r in rows:
        if committed and (r.get("aborted") or r.get("open")):
            continue
        out.append(r)
    return out


def normalize(r):
    return (r["topic"], r["partition"], r["offset"], round(r["timestamp"].timestamp() * 1000) if "timestamp" in r
            else r["timestamp_ms"], r["key"], r["value"], [tuple(h.values()) if isinstance(h, dict) else tuple(h)
                                                         for h in r.get("headers", [])],
            r["timestampType"], r["producerId"], r["isTransactional"])


def test_every_codec_key_header_and_timestamp_type(spark, sample_dir):
    log_dir, expected = sample_dir
    df = read(spark, log_dir, includeHeaders="true", maxSplitBytes="1500")
    assert df.rdd.getNumPartitions() > 10                 # small segments, cut at index positions
    got = sorted(normalize(r) for r in rows_of(df))
    want = sorted(normalize(r) for r in expected if r["topic"] != "__consumer_offsets")
    assert got == want
    assert all(r["leaderEpoch"] == 0 for r in df.select("leaderEpoch").collect())


def test_matches_storage_reader_on_sample(spark, sample_dir):
    log_dir, _ = sample_dir
    for partition in range(3):
        df = read(spark, log_dir, topics="events").where(f"partition = {partition}")
        assert [as_tuple(r) for r in rows_of(df)] == storage_reader_records(log_dir / f"events-{partition}")


def test_read_committed_skips_aborted_and_stops_at_last_stable_offset(spark, sample_dir):
    log_dir, expected = sample_dir
    txn = [r for r in expected if r["topic"] == "txn"]
    uncommitted = rows_of(read(spark, log_dir, topics="txn"))
    assert [r["offset"] for r in uncommitted] == [r["offset"] for r in txn]
    committed = rows_of(read(spark, log_dir, topics="txn", isolation="read_committed"))
    first_open = min(r["offset"] for r in txn if r["open"])
    want = [r["offset"] for r in txn if not r["aborted"] and r["offset"] < first_open]
    assert [r["offset"] for r in committed] == want
    assert all(r["value"].startswith(b"t7-") for r in committed)


OFFSET_CASES = [
    ('{"events": {"0": 10, "1": -2}}', '{"events": {"0": 20, "2": 5}}'),
    ("earliest", '{"events": {"1": 1}}'),
    ('{"events": {"2": 139}}', "latest"),
]


@pytest.mark.parametrize("starting,ending", OFFSET_CASES)
def test_offset_bounds(spark, sample_dir, starting, ending):
    log_dir, expected = sample_dir
    df = read(spark, log_dir, topics="events", startingOffsets=starting, endingOffsets=ending)
    start = {} if starting == "earliest" else json.loads(starting)["events"]
    end = {} if ending == "latest" else json.loads(ending)["events"]
    want = [(r["partition"], r["offset"]) for r in expected if r["topic"] == "events"
            and max(0, start.get(str(r["partition"]), 0)) <= r["offset"]
            < end.get(str(r["partition"]), 1 << 62)]
    assert [(r["partition"], r["offset"]) for r in rows_of(df)] == want


def test_pushed_down_filters_return_exact_rows(spark, sample_dir):
    log_dir, expected = sample_dir
    df = read(spark, log_dir)
    lo = dt.datetime.fromtimestamp((expected[0]["timestamp_ms"] + 3 * 3_600_000) / 1000, UTC)
    hi = lo + dt.timedelta(hours=2)
    q = df.where("topic = 'events' AND partition IN (0, 2) AND offset >= 30 AND offset < 120")
    q = q.where(df.timestamp > lo).where(df.timestamp <= hi)
    lo_ms, hi_ms = lo.timestamp() * 1000, hi.timestamp() * 1000
    want = [(r["partition"], r["offset"]) for r in expected if r["topic"] == "events"
            and r["partition"] in (0, 2) and 30 <= r["offset"] < 120 and lo_ms < r["timestamp_ms"] <= hi_ms]
    assert want and [(r["partition"], r["offset"]) for r in rows_of(q)] == want
    point = df.where("topic = 'events' AND partition = 1 AND offset = 77")
    assert [(r["partition"], r["offset"]) for r in rows_of(point)] == [(1, 77)]
    some = df.where("topic = 'events' AND partition = 1 AND offset IN (3, 5, 90)")
    assert [r["offset"] for r in rows_of(some)] == [3, 5, 90]


def test_pushdown_prunes_input_partitions(spark, sample_dir):
    log_dir, _ = sample_dir
    df = read(spark, log_dir, maxSplitBytes="1500")
    every = df.rdd.getNumPartitions()
    one_partition = df.where("topic = 'events' AND partition = 1").rdd.getNumPartitions()
    tail = df.where("topic = 'events' AND partition = 1 AND offset >= 130").rdd.getNumPartitions()
    assert every > one_partition > tail >= 1


def test_timestamp_options_resolve_offsets(spark, sample_dir):
    log_dir, expected = sample_dir
    events = [r for r in expected if r["topic"] == "events" and r["partition"] == 1]
    start_ts, end_ts = events[25]["timestamp_ms"] - 1, events[60]["timestamp_ms"]
    df = read(spark, log_dir, topics="events", startingTimestamp=str(start_ts), endingTimestamp=str(end_ts))
    got = [r["offset"] for r in rows_of(df) if r["partition"] == 1]
    assert got == list(range(25, 60))
    late = read(spark, log_dir, topics="events", startingTimestamp=str(events[-1]["timestamp_ms"] + 10 ** 9))
    assert late.count() == 0


def test_high_watermark_and_torn_tail(spark, tmp_path):
    from spark_jobs.sample_data import LogDirWriter
    w = LogDirWriter(str(tmp_path))
    for i in range(10):
        w.append("t", 0, [(1000 + i, None, b"v%d" % i, [])])
    w.close(high_watermarks={("t", 0): 6})
    assert [r["offset"] for r in rows_of(read(spark, tmp_path))] == list(range(6))
    # Without a checkpoint entry the committed end is the last complete batch: a torn tail is cut.
    os.remove(tmp_path / "replication-offset-checkpoint")
    with open(tmp_path / "t-0" / "00000000000000000000.log", "ab") as f:
        f.write(b"\x00" * 8 + b"\x00\x00\x01\x00" + b"\x01" * 30)
    assert [r["offset"] for r in rows_of(read(spark, tmp_path))] == list(range(10))
    log, = layout.discover([str(tmp_path)])
    assert (log.log_end_offset, log.high_watermark) == (10, None)


def test_topic_pattern_leaves_internal_topics_out_unless_asked(spark, kafka_fixtures, sample_dir):
    fixture = kafka_fixtures / "kafka-3.1.0"
    assert {r.topic for r in read(spark, fixture, topicPattern=".*").select("topic").distinct().collect()} \
        == {"cities"}
    assert read(spark, fixture, topicPattern="__.*").count() == 0      # exclude.internal.topics, as Kafka
    assert read(spark, fixture, topicPattern="__.*", includeInternal="true").count() == 8
    assert read(spark, fixture, topicPattern="nomatch", topics="__consumer_offsets").count() == 8
    log_dir, expected = sample_dir
    got = read(spark, log_dir, topicPattern="ev.*|append.*").groupBy("topic").count().collect()
    assert {r["topic"]: r["count"] for r in got} == dict(
        collections.Counter(r["topic"] for r in expected if r["topic"] in ("events", "appendtime")))
    assert read(spark, log_dir, topicPattern="vents").count() == 0        # a full match, not a search


def test_timestamp_options_per_partition(spark, sample_dir):
    log_dir, expected = sample_dir
    events = {p: [r for r in expected if r["topic"] == "events" and r["partition"] == p] for p in range(3)}
    starting = {"events": {"0": events[0][10]["timestamp_ms"], "2": events[2][100]["timestamp_ms"] + 1}}
    ending = {"events": {"0": events[0][12]["timestamp_ms"] + 1, "1": events[1][3]["timestamp_ms"]}}
    df = read(spark, log_dir, topics="events", startingTimestamp=json.dumps(starting),
              endingTimestamp=json.dumps(ending))
    got = collections.defaultdict(list)
    for r in rows_of(df):
        got[r["partition"]].append(r["offset"])
    # p0: [10, 13); p1: no start -> earliest, end at 3; p2: from 101 to the end.
    assert dict(got) == {0: [10, 11, 12], 1: [0, 1, 2], 2: list(range(101, len(events[2])))}


@pytest.mark.parametrize("options,message", [
    ({"isolation": "read_comitted"}, "option isolation"),
    ({"startingOffsets": "{not json"}, "option startingOffsets"),
    ({"endingOffsets": '{"events": 5}'}, "option endingOffsets"),
    ({"topicPattern": "(unclosed"}, "option topicPattern"),
    ({"maxSplitBytes": "0"}, "option maxSplitBytes"),
])
def test_bad_options_fail_with_a_clear_message(spark, sample_dir, options, message):
    log_dir, _ = sample_dir
    with pytest.raises(Exception, match=message):
        read(spark, log_dir, **options).count()


def test_missing_log_dir_fails_with_a_clear_message(spark, tmp_path):
    with pytest.raises(Exception, match="is not a directory"):
        read(spark, tmp_path / "nope").count()


def _pyspark_version() -> tuple:
    import pyspark
    return tuple(int(p) for p in pyspark.__version__.split(".")[:3] if p.isdigit())


# Strict where the Spark bug is known to be present; on a later pyspark a pass is reported
# (XPASS) without failing the run, so a fixed Spark cannot turn CI red.
@pytest.mark.xfail(strict=_pyspark_version() <= (4, 3, 0),
                   reason="Spark <= 4.3.0 reuses a DataFrame's filter-pushdown plan for a later unfiltered "
                          "scan of it (see the caveat in spark_jobs/datasource.py); passes once Spark is fixed")
def test_reusing_a_filtered_dataframe_unfiltered(spark, sample_dir):
    log_dir, expected = sample_dir
    df = read(spark, log_dir, topics="events")
    assert df.where("partition = 0 AND offset < 10").count() == 10
    assert df.count() == sum(r["topic"] == "events" for r in expected)


def test_one_load_per_query_is_exact_after_filtered_queries(spark, sample_dir):
    log_dir, expected = sample_dir
    assert read(spark, log_dir, topics="events").where("partition = 0 AND offset < 10").count() == 10
    assert read(spark, log_dir, topics="events").count() == sum(r["topic"] == "events" for r in expected)


def test_without_pushdown_a_reused_dataframe_is_exact(spark, sample_dir):
    log_dir, expected = sample_dir
    df = read(spark, log_dir, topics="events", pushFilters="false")
    assert df.where("partition = 0 AND offset < 10").count() == 10
    assert df.count() == sum(r["topic"] == "events" for r in expected)


def test_kraft_metadata_log_is_not_a_topic(spark, kafka_fixtures):
    """KRaft's __cluster_metadata-0 (16,593 data records and one control record) is not user
    data: left out by default and with includeInternal, read only when named in `topics`."""
    kraft = kafka_fixtures / "kafka-3.4.0-kraft"
    assert "__cluster_metadata" not in {r.topic for r in read(spark, kraft).select("topic")
                                        .distinct().collect()}
    assert "__cluster_metadata" not in {
        r.topic for r in read(spark, kraft, includeInternal="true").select("topic").distinct()
        .collect()}
    assert read(spark, kraft, topics="__cluster_metadata").count() == 16593


def test_a_record_without_timestamp_reads_as_null(spark, tmp_path):
    """Kafka's NO_TIMESTAMP (-1; e.g. a message converted from the v0 format) is null in
    Spark, not 1969-12-31 23:59:59.999."""
    from storage.record_batch import RecordBatchBuilder
    builder = RecordBatchBuilder()
    builder.append(-1, b"k", b"no time")
    builder.append(1_700_000_000_000, b"k", b"timed")
    part = tmp_path / "t-0"
    part.mkdir()
    (part / "00000000000000000000.log").write_bytes(builder.build())
    rows = rows_of(read(spark, tmp_path, topics="t"))
    assert [r["value"] for r in rows] == [b"no time", b"timed"]
    assert rows[0]["timestamp"] is None
    assert round(rows[1]["timestamp"].timestamp() * 1000) == 1_700_000_000_000
    # A null timestamp matches no time bound, pushed down or not, as in Spark's SQL.
    for push in ("true", "false"):
        df = read(spark, tmp_path, topics="t", pushFilters=push)
        assert df.where("timestamp < '2030-01-01'").count() == 1
        assert df.where("timestamp >= '2000-01-01'").count() == 1
        assert df.where("timestamp is null").count() == 1


def test_read_committed_on_transactions_written_by_the_broker(spark, tmp_path):
    """A real broker's log of committed and aborted transactions (its .txnindex, its markers),
    read after a clean stop: read_committed gives exactly what a read_committed consumer got."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from broker.embedded import EmbeddedBroker
    data_dir = tmp_path / "logs"
    with EmbeddedBroker(data_dir=data_dir) as kafka:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
        for future in admin.create_topics([NewTopic("spark-txn", 2, 1)]).values():
            future.result(30)
        producer = Producer({"bootstrap.servers": kafka.bootstrap_servers,
                             "transactional.id": "spark-tx"})
        producer.init_transactions(30)
        for n, commit in enumerate((True, False, True, False, True)):
            producer.begin_transaction()
            for i in range(10):
                producer.produce("spark-txn", key=b"%d" % i, value=b"%d-%d" % (n, i))
            producer.flush(30)
            producer.commit_transaction(30) if commit else producer.abort_transaction(30)
    committed = rows_of(read(spark, data_dir, topics="spark-txn", isolation="read_committed"))
    assert sorted(r["value"] for r in committed) == sorted(
        b"%d-%d" % (n, i) for n in (0, 2, 4) for i in range(10))
    everything = rows_of(read(spark, data_dir, topics="spark-txn"))
    assert len(everything) == 50
