"""One local SparkSession for every Spark test, and sample log dirs written in Kafka's layout."""
import os
import pathlib
import sys

import pytest

from spark_jobs.sample_data import LogDirWriter
from storage.compression import Codec

# Spark facts for this machine (see ../shared/TOOLCHAIN.md): bind to loopback, and run the workers
# with this interpreter so they import the project and its venv.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

ROOT = pathlib.Path(__file__).resolve().parents[2]
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)

BASE_TS = 1_700_000_000_000          # 2023-11-14T22:13:20Z
HOUR_MS = 3_600_000


SPARK_SUBMIT_MODULE = "test_spark_submit.py"


def pytest_collection_modifyitems(session, config, items):
    """Runs the spark-submit tests last: they stop the shared session first, so that only one Spark
    JVM runs at a time (a session takes ~850 MB), and no later test may need it."""
    last = [item for item in items if item.path.name == SPARK_SUBMIT_MODULE
            and item.path.parent == pathlib.Path(__file__).parent]
    if last:
        items[:] = [item for item in items if item not in last] + last


@pytest.fixture(scope="session")
def spark():
    from spark_jobs.common import build_session
    session = build_session("kbroker-tests", master="local[2]",
                            extra={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"})
    yield session
    session.stop()


def expected_row(topic, partition, offset, ts, key, value, headers, ts_type=0, producer_id=-1,
                 transactional=False):
    return dict(topic=topic, partition=partition, offset=offset, timestamp_ms=ts, key=key, value=value,
                headers=list(headers), timestampType=ts_type, producerId=producer_id,
                isTransactional=transactional)


def write_sample(log_dir, *, with_transactions=True):
    """Several topics, every codec, keys, null keys/values, headers, LogAppendTime, small segments
    (some with indexes, some without), transactions. Returns (writer, expected rows as dicts).

    Expected rows hold what a read_uncommitted consumer returns (aborted records included, control
    batches not); rows of aborted transactions carry "aborted": True.
    """
    rows = []
    plain = LogDirWriter(str(log_dir), segment_bytes=4096, index_interval_bytes=512)
    codecs = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]
    for partition in range(3):
        ts = BASE_TS + partition
        for batch in range(20):
            codec = codecs[batch % len(codecs)]
            records = []
            for i in range(7):
                n = batch * 7 + i
                key = None if n % 11 == 0 else f"k{n % 13}".encode()
                value = None if n % 17 == 5 else (f"v{partition}-{n}-" + "x" * (n % 40)).encode()
                headers = [("h", f"{n}".encode()), ("nil", None)] if n % 3 == 0 else []
                ts_n = ts + n * 600_000                 # ten minutes apart: several hours per partition
                records.append((ts_n, key, value, headers))
            first, _ = plain.append("events", partition, records, compression=codec)
            for i, (t, k, v, h) in enumerate(records):
                rows.append(expected_row("events", partition, first + i, t, k, v, h))
    # LogAppendTime: every record carries the batch's max_timestamp.
    for batch in range(3):
        records = [(BASE_TS + batch * 1000, b"lat", b"x" * i, []) for i in range(4)]
        first, _ = plain.append("appendtime", 0, records, compression=Codec.LZ4, timestamp_type=1)
        for i, (t, k, v, h) in enumerate(records):
            rows.append(expected_row("appendtime", 0, first + i, t, k, v, h, ts_type=1))
    _write_commits(plain, rows)
    if with_transactions:
        _write_transactions(plain, rows)
    plain.close()
    return plain, rows


# Offset commits written to __consumer_offsets, in order: (group, topic, partition, offset or None for
# a tombstone). The latest per (group, topic, partition) wins.
COMMITS = [
    ("g1", "events", 0, 10), ("g1", "events", 1, 20), ("g1", "events", 0, 50), ("g1", "events", 2, 140),
    ("g2", "events", 0, 5), ("g2", "appendtime", 0, 3), ("g2", "events", 0, None), ("g2", "events", 1, 7),
    ("g3", "missing", 0, 4),
]


def _write_commits(w, rows):
    from protocol.internal import GroupMetadataKey, GroupMetadataValue, OffsetCommitKey, OffsetCommitValue
    from protocol.internal_records import encode_key, encode_value
    records = [(BASE_TS, encode_key(GroupMetadataKey(group="g1")),
                encode_value(GroupMetadataValue(protocol_type="consumer", generation=1), 3), [])]
    for i, (group, topic, partition, offset) in enumerate(COMMITS):
        value = None if offset is None else encode_value(
            OffsetCommitValue(offset=offset, commit_timestamp=BASE_TS + i, metadata=f"m{i}"), 3)
        records.append((BASE_TS + i, encode_key(OffsetCommitKey(group=group, topic=topic, partition=partition)),
                        value, []))
    for i in range(0, len(records), 4):      # several batches, like a coordinator's separate commits
        first, _ = w.append("__consumer_offsets", 0, records[i:i + 4])
        for j, (t, k, v, h) in enumerate(records[i:i + 4]):
            rows.append(expected_row("__consumer_offsets", 0, first + j, t, k, v, h))


def _write_transactions(w, rows):
    """txn-0: committed (pid 7), aborted (pid 8), interleaved; then an open transaction (pid 9)."""
    def produce(pid, n, aborted=False):
        records = [(BASE_TS + 10_000 + n * 10 + i, f"p{pid}".encode(), f"t{pid}-{n}-{i}".encode(), [])
                   for i in range(3)]
        first, _ = w.append("txn", 0, records, producer_id=pid, producer_epoch=0, base_sequence=n * 3,
                            transactional=True, compression=Codec.GZIP if n % 2 else Codec.NONE)
        for i, (t, k, v, h) in enumerate(records):
            row = expected_row("txn", 0, first + i, t, k, v, h, producer_id=pid, transactional=True)
            row["aborted"] = aborted
            row["open"] = pid == 9
            rows.append(row)
    produce(7, 0)
    produce(8, 0, aborted=True)
    produce(7, 1)
    produce(8, 1, aborted=True)
    w.end_transaction("txn", 0, 7, 0, True, BASE_TS + 20_000)
    w.end_transaction("txn", 0, 8, 0, False, BASE_TS + 20_001)
    produce(7, 2)
    w.end_transaction("txn", 0, 7, 0, True, BASE_TS + 20_002)
    produce(9, 0)                       # never ends: bounds the last_stable_offset
    produce(7, 3)
    w.end_transaction("txn", 0, 7, 0, True, BASE_TS + 20_003)


@pytest.fixture(scope="session")
def sample_dir(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("sample-logs")
    _, rows = write_sample(log_dir)
    return log_dir, rows
