"""A job run the two ways the README shows: `spark-submit spark_jobs/<job>.py` and `python -m`.

conftest.py runs these tests last and they stop the shared SparkSession first: spark-submit starts
its own JVM, and only one Spark session runs at a time on this machine.
"""
import collections
import csv
import os
import subprocess
import sys

import pytest

from .conftest import ROOT

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SPARK_SUBMIT = os.path.join(os.path.dirname(sys.executable), "spark-submit")


def _stop_shared_session():
    from pyspark.sql import SparkSession
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()


def _env():
    return dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
                PYSPARK_DRIVER_PYTHON=sys.executable)


def test_python_m_entry_points_parse_their_options():
    for job in ("topic_stats", "export", "consumer_lag", "compaction_preview"):
        done = subprocess.run([sys.executable, "-m", f"spark_jobs.{job}", "--help"], cwd=ROOT, env=_env(),
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "--log-dirs" in done.stdout and "--output" in done.stdout


@pytest.mark.skipif(not os.path.exists(SPARK_SUBMIT), reason="pyspark's bin/spark-submit is missing")
def test_topic_stats_through_spark_submit(sample_dir, tmp_path):
    log_dir, expected = sample_dir
    _stop_shared_session()
    out = tmp_path / "stats.csv"
    # From another directory, as a user would: the job script makes the project importable itself.
    done = subprocess.run(
        [SPARK_SUBMIT, "--master", "local[2]", "--conf", "spark.ui.enabled=false",
         "--conf", "spark.sql.shuffle.partitions=2", str(ROOT / "spark_jobs" / "topic_stats.py"),
         "--log-dirs", str(log_dir), "--topics", "events,appendtime", "--output", str(out)],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Per topic-partition" in done.stdout and "Compression by codec" in done.stdout
    records = collections.Counter((r["topic"], r["partition"]) for r in expected
                                  if r["topic"] in ("events", "appendtime"))
    written = {}
    for name in os.listdir(out / "partitions"):
        if name.endswith(".csv"):
            with open(out / "partitions" / name, newline="") as f:
                for row in csv.DictReader(f):
                    written[(row["topic"], int(row["partition"]))] = int(row["records"])
    assert written == dict(records)
    assert sorted(os.listdir(out)) == ["codecs", "hours", "partitions"]
