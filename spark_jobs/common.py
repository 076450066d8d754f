"""What every job shares: the SparkSession, command-line options, loading, tables and output.

A job runs the same code two ways:
  spark-submit spark_jobs/<job>.py --log-dirs DIR [...]     (any --master; the master comes from
                                                            spark-submit's configuration)
  python -m spark_jobs.<job> --log-dirs DIR [--master local[*]]   (local[*] unless --master)
When the master is not local, `build_session` zips `spark_jobs/`, `storage/` and `protocol/` and ships them with
`addPyFile`, so executors can import the data source without installing the project.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import zipfile

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED_PACKAGES = ("spark_jobs", "storage", "protocol")


SPARK_EXTRA = ("the Spark jobs need PySpark and pyarrow, the project's 'spark' extra: "
               "pip install -e '.[spark]' (make install installs it)")


def require_spark() -> None:
    """Exit with one line naming the extra to install when PySpark is missing (`make run`
    installs only the broker's dependencies)."""
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError:
        sys.exit(f"spark_jobs: {SPARK_EXTRA}")


def build_session(app_name: str, master: str | None = None, extra: dict | None = None):
    """A SparkSession with the kafkalog source registered.

    Sets SPARK_LOCAL_IP=127.0.0.1 and PYSPARK_PYTHON to this interpreter unless already set:
    Spark otherwise binds an external interface and starts workers with whatever `python3` is first
    on PATH (see README, "Spark jobs").
    """
    require_spark()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    _add_to_pythonpath(PROJECT_ROOT)
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    from spark_jobs.datasource import register

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif not SparkConf().contains("spark.master"):
        builder = builder.master("local[*]")
    # Hours and dates are reported in UTC whatever the machine's zone.
    for key, value in dict({"spark.sql.session.timeZone": "UTC"}, **(extra or {})).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if not spark.sparkContext.master.startswith("local"):
        spark.sparkContext.addPyFile(_zip_packages())
    register(spark)
    return spark


@contextlib.contextmanager
def session(app_name: str, master: str | None = None, log_level: str | None = None):
    """build_session for a job's main(): stops the session at the end only if it started it (a test
    or a notebook may call main() inside its own session). log_level (e.g. WARN) quiets Spark's
    log from then on; spark-submit's default profile logs every task at INFO."""
    require_spark()
    from pyspark.sql import SparkSession
    existing = SparkSession.getActiveSession()
    spark = build_session(app_name, master)
    if log_level and existing is None:
        spark.sparkContext.setLogLevel(log_level)
    try:
        yield spark
    finally:
        if existing is None:
            spark.stop()


def _add_to_pythonpath(path: str) -> None:
    """Local workers inherit PYTHONPATH: make the project importable by them too."""
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if path not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([path] + parts)
    if path not in sys.path:
        sys.path.insert(0, path)


def _zip_packages() -> str:
    fd, path = tempfile.mkstemp(prefix="kbroker-spark-", suffix=".zip")
    os.close(fd)
    with zipfile.ZipFile(path, "w") as zf:
        for package in SHIPPED_PACKAGES:
            for dirpath, _, files in os.walk(os.path.join(PROJECT_ROOT, package)):
                for name in files:
                    if name.endswith(".py"):
                        full = os.path.join(dirpath, name)
                        zf.write(full, os.path.relpath(full, PROJECT_ROOT))
    return path


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--log-dirs", required=True,
                   help="comma-separated Kafka log dirs (the broker's log.dirs)")
    p.add_argument("--master", help="Spark master; default: spark-submit's, else local[*]")
    p.add_argument("--log-level", default="WARN", help="Spark log level once started (default WARN)")
    p.add_argument("--topics", help="comma-separated topics (default: all but internal ones)")
    p.add_argument("--topic-pattern", help="regex of topics to read")
    p.add_argument("--isolation", choices=["read_uncommitted", "read_committed"],
                   default="read_uncommitted")
    p.add_argument("--output", help="also write the result: a .csv/.parquet path (a directory)")
    p.add_argument("--format", choices=["csv", "parquet", "json"],
                   help="output format (default: from the --output extension, else csv)")
    return p


def source_options(args, **extra) -> dict:
    options = {"logDirs": args.log_dirs, "isolation": args.isolation}
    if args.topics:
        options["topics"] = args.topics
    if args.topic_pattern:
        options["topicPattern"] = args.topic_pattern
    options.update({k: str(v) for k, v in extra.items() if v is not None})
    return options


def load(spark, options: dict):
    reader = spark.read.format("kafkalog")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def format_table(columns: list[str], rows: list, max_rows: int = 200) -> str:
    """A plain-text table: left-aligned strings, right-aligned numbers."""
    shown = [[_cell(v) for v in row] for row in rows[:max_rows]]
    widths = [max([len(c)] + [len(r[i]) for r in shown]) for i, c in enumerate(columns)]
    numeric = [bool(rows) and all(isinstance(row[i], (int, float)) or row[i] is None for row in rows[:max_rows])
               for i in range(len(columns))]

    def line(cells):
        return "  ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cells, widths, numeric))
    out = [line(columns), "  ".join("-" * w for w in widths)] + [line(r) for r in shown]
    if len(rows) > max_rows:
        out.append(f"... {len(rows) - max_rows} more rows")
    return "\n".join(out)


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def print_table(title: str, df) -> list:
    """Collects a (small) result DataFrame, prints it as a table, returns its rows."""
    rows = df.collect()
    print(f"\n{title}")
    print(format_table(df.columns, [tuple(r) for r in rows]))
    return rows


def output_format(args, default: str = "csv") -> str:
    """--format, else the --output path's extension (.csv/.parquet/.json), else default."""
    if args.format:
        return args.format
    ext = os.path.splitext((args.output or "").rstrip("/"))[1].lstrip(".").lower()
    return ext if ext in ("csv", "parquet", "json") else default


def write_output(df, path: str, fmt: str, partition_by: list[str] | None = None) -> None:
    """Writes df to the directory path (overwriting it) as csv (with a header), json or parquet."""
    writer = df.write.mode("overwrite")
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    if fmt == "csv":
        writer.option("header", "true").csv(path)
    elif fmt == "json":
        writer.json(path)
    else:
        writer.parquet(path)
