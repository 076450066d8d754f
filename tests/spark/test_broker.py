"""The data source and the jobs over the log dir of a RUNNING broker, against what real clients see.

A broker subprocess (tests/integration's BrokerProcess) receives known data from confluent-kafka
producers (every codec, keys, null keys, headers, explicit timestamps) and offset commits; a
confluent-kafka consumer then reads everything back through the broker. The broker checkpoints its
high watermarks every 200 ms, so once the checkpoint covers what the consumer saw, the data source
reading the same files (while the broker keeps running) must return exactly those records, and each
job's numbers must equal the ones computed from the consumer's records.
"""
import base64
import collections
import datetime as dt
import importlib.util
import os
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from spark_jobs import compaction_preview, consumer_lag, export, layout, topic_stats

from .conftest import HOUR_MS, ROOT

pytestmark = [pytest.mark.spark, pytest.mark.integration]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BASE_TS = 1_700_000_000_000
PARTITIONS = 3


def _integration():
    spec = importlib.util.spec_from_file_location("_integration_conftest",
                                                  ROOT / "tests" / "integration" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def produce_known_data(bootstrap):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic("orders", PARTITIONS, 1, config={"segment.bytes": "2048"}),
                                   NewTopic("clicks", PARTITIONS, 1)])
    for future in futures.values():
        future.result(30)
    for i, codec in enumerate(CODECS):
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20,
                      "batch.num.messages": 40, "enable.idempotence": i % 2 == 0})
        for n in range(120):
            key = None if n % 10 == 0 else f"user{n % 17}".encode()
            headers = [("codec", codec.encode()), ("n", str(n).encode())] if n % 4 == 0 else None
            p.produce("orders", value=f"{codec}-{n}-".encode() + b"x" * (n % 50), key=key,
                      headers=headers, timestamp=BASE_TS + (i * 120 + n) * 60_000,
                      partition=n % PARTITIONS)
        assert p.flush(30) == 0
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for n in range(50):
        p.produce("clicks", value=b"c%d" % n, timestamp=BASE_TS + n * 1000, partition=0)
    assert p.flush(30) == 0


def consume_all(bootstrap, topics):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-test-reader", "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    tps = [TopicPartition(t, p, -2) for t, n in topics.items() for p in range(n)]
    c.assign(tps)
    pending, rows = {(tp.topic, tp.partition) for tp in tps}, []
    deadline = time.monotonic() + 60
    while pending and time.monotonic() < deadline:
        msg = c.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == -191:          # _PARTITION_EOF
                pending.discard((msg.topic(), msg.partition()))
                continue
            raise AssertionError(msg.error())
        rows.append(dict(topic=msg.topic(), partition=msg.partition(), offset=msg.offset(), key=msg.key(),
                         value=msg.value(), timestamp_ms=msg.timestamp()[1],
                         headers=[(k, v) for k, v in (msg.headers() or [])]))
    watermarks = {(tp.topic, tp.partition): c.get_watermark_offsets(tp, timeout=10)[1] for tp in tps}
    c.close()
    assert not pending, f"no EOF from {pending}"
    return rows, watermarks


def commit_offsets(bootstrap, group, offsets):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    committed = {(tp.topic, tp.partition): tp.offset
                 for tp in c.committed([TopicPartition(t, p) for t, p in offsets], timeout=10)}
    c.close()
    return committed


@pytest.fixture(scope="module")
def live_broker(tmp_path_factory):
    integration = _integration()
    broker = integration.BrokerProcess(tmp_path_factory.mktemp("spark-broker"), {
        "num.partitions": PARTITIONS, "offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0,
        "replica.high.watermark.checkpoint.interval.ms": 200,
        # The known data is from 2023 (BASE_TS): kept, or the first retention pass (30 s after
        # start, log.initial.task.delay.ms) deletes it mid-module, as Kafka's would.
        "log.retention.ms": -1})
    broker.start()
    try:
        produce_known_data(broker.bootstrap)
        rows, watermarks = consume_all(broker.bootstrap, {"orders": PARTITIONS, "clicks": PARTITIONS})
        committed = {"analytics": commit_offsets(broker.bootstrap, "analytics",
                                                 {("orders", 0): 5, ("orders", 1): 40, ("clicks", 0): 50}),
                     "late": commit_offsets(broker.bootstrap, "late", {("orders", 2): 1})}
        _wait_for_checkpoint(broker.log_dir, watermarks)
        yield broker, rows, watermarks, committed
    finally:
        try:
            broker.stop()
        except subprocess.TimeoutExpired:
            pass


def _wait_for_checkpoint(log_dir, watermarks, timeout=20.0):
    """Until replication-offset-checkpoint holds every partition's high watermark (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        hws = layout.read_checkpoint(os.path.join(log_dir, layout.HIGH_WATERMARK_CHECKPOINT))
        if all(hws.get(tp, -1) >= hw for tp, hw in watermarks.items()):
            return
        time.sleep(0.1)
    raise AssertionError(f"high watermarks not checkpointed within {timeout} s")


def test_data_source_returns_what_the_consumer_read(spark, live_broker):
    """The broker holds its log dir's lock all along: the data source reads without taking it."""
    broker, rows, _, _ = live_broker
    from storage.file_lock import DirLockedError, lock_dir
    with pytest.raises(DirLockedError):
        lock_dir(broker.log_dir)
    df = (spark.read.format("kafkalog").option("logDirs", broker.log_dir).option("includeHeaders", "true")
          .load())
    got = sorted((r.topic, r.partition, r.offset, r.key, r.value, round(r.timestamp.timestamp() * 1000),
                  [(h.key, h.value) for h in r.headers]) for r in df.collect())
    want = sorted((r["topic"], r["partition"], r["offset"], r["key"], r["value"], r["timestamp_ms"], r["headers"])
                  for r in rows)
    assert len(want) == 5 * 120 + 50
    assert got == want
    assert broker.proc.poll() is None


def test_topic_stats_equal_consumer_numbers(spark, live_broker):
    broker, rows, _, _ = live_broker
    results = topic_stats.compute(spark, {"logDirs": broker.log_dir})
    by_tp = collections.defaultdict(list)
    for r in rows:
        by_tp[(r["topic"], r["partition"])].append(r)
    got = {(r.topic, r.partition): (r.records, r.bytes, r.distinct_keys, r.null_keys,
                                    round(r.min_timestamp.timestamp() * 1000), round(r.max_timestamp.timestamp() * 1000))
           for r in results["partitions"].collect()}
    want = {tp: (len(rs), sum(len(r["key"] or b"") + len(r["value"]) for r in rs),
                 len({r["key"] for r in rs if r["key"] is not None}), sum(r["key"] is None for r in rs),
                 min(r["timestamp_ms"] for r in rs), max(r["timestamp_ms"] for r in rs))
            for tp, rs in by_tp.items()}
    assert got == want
    hours = collections.Counter((r["topic"], r["timestamp_ms"] // HOUR_MS) for r in rows)
    assert {(r.topic, round(r.hour.timestamp() * 1000) // HOUR_MS): r.records
            for r in results["hours"].collect()} == dict(hours)
    codecs = {r.codec: r.records for r in results["codecs"].collect()}
    assert set(CODECS) <= set(codecs) and sum(codecs.values()) == len(rows)


def test_consumer_lag_equals_broker_committed_and_watermarks(spark, live_broker):
    broker, _, watermarks, committed = live_broker
    lag = consumer_lag.compute(spark, broker.log_dir)["lag"].collect()
    got = {(r.group, r.topic, r.partition): (r.committed_offset, r.log_end_offset, r.lag) for r in lag}
    want = {(g, t, p): (o, watermarks[(t, p)], watermarks[(t, p)] - o)
            for g, offsets in committed.items() for (t, p), o in offsets.items()}
    assert got == want


def test_compaction_preview_on_broker_segments(spark, live_broker):
    broker, rows, _, _ = live_broker
    logs = {(log.topic, log.partition): log for log in layout.discover([broker.log_dir])}
    assert min(len(logs[("orders", p)].segments) for p in range(PARTITIONS)) > 1   # 2 KiB segments rolled
    got = {r.topic: (r.records, r.removed_records, r.null_keys)
           for r in compaction_preview.compute(spark, {"logDirs": broker.log_dir, "topics": "orders"})["topics"].collect()}
    latest, orders = {}, [r for r in rows if r["topic"] == "orders"]
    for r in orders:
        active = logs[("orders", r["partition"])].segments[-1].base_offset
        if r["key"] is not None and r["offset"] < active:
            k = (r["partition"], r["key"])
            latest[k] = max(latest.get(k, -1), r["offset"])
    # The cleaner also drops keyless records of the cleanable part (orders is not compacted on this
    # broker, so they are there; compacted topics refuse them).
    removed = sum(1 for r in orders if r["offset"] < logs[("orders", r["partition"])].segments[-1].base_offset
                  and (r["key"] is None or r["offset"] < latest[(r["partition"], r["key"])]))
    assert got == {"orders": (len(orders), removed, sum(r["key"] is None for r in orders))}
    assert removed > 0


def test_export_equals_consumer_rows(spark, live_broker, tmp_path):
    broker, rows, _, _ = live_broker
    out = tmp_path / "export"
    assert export.main(["--log-dirs", broker.log_dir, "--output", str(out), "--format", "json",
                        "--decode", "utf8", "--include-headers"]) == 0
    df = spark.read.json(str(out))
    got = sorted((r.topic, str(r.date), r.partition, r.offset, r.key, r.value, [(h.key, h.value) for h in r.headers or []])
                 for r in df.collect())

    def date(ms):
        return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d")
    want = sorted((r["topic"], date(r["timestamp_ms"]), r["partition"], r["offset"],
                   r["key"] and r["key"].decode(), r["value"].decode(),
                   [(k, base64.b64encode(v).decode()) for k, v in r["headers"]]) for r in rows)
    assert got == want


@pytest.mark.slow
def test_reads_a_consistent_prefix_while_the_broker_appends(spark, live_broker):
    """A producer keeps appending (small segments roll all the time) while queries run: each query
    returns exactly the records of offsets [0, n) that the broker acknowledged, n growing."""
    import threading
    broker, _, _, _ = live_broker
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic("live", 1, 1, config={"segment.bytes": "16384"})]).values():
        future.result(30)
    delivered, errors, stop = {}, [], threading.Event()

    def on_delivery(err, msg):
        if err is None:
            delivered[msg.offset()] = msg.value()
        else:
            errors.append(err)

    def produce():
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2, "batch.size": 4096,
                      "enable.idempotence": True})
        deadline, n = time.monotonic() + 90, 0
        while not stop.is_set() and time.monotonic() < deadline and n < 200_000:
            p.produce("live", value=b"live-%d" % n, key=b"k%d" % (n % 7), partition=0, on_delivery=on_delivery)
            n += 1
            if n % 50 == 0:
                p.poll(0.005)
        p.flush(30)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    results = []
    try:
        deadline = time.monotonic() + 60
        while len(results) < 3 and time.monotonic() < deadline:
            rows = (spark.read.format("kafkalog").option("logDirs", broker.log_dir).option("topics", "live")
                    .load().select("offset", "value").collect())
            if rows and (not results or len(rows) > len(results[-1])):
                results.append({r.offset: r.value for r in rows})
            time.sleep(0.3)
    finally:
        stop.set()
        thread.join(60)
    assert not errors and not thread.is_alive()
    assert len(results) >= 2, "the reads did not see the log grow"
    for got in results:
        assert sorted(got) == list(range(len(got)))
        assert got == {o: delivered[o] for o in got}
