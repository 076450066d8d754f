"""compaction_preview: per topic, how many records and bytes one log-cleaner run now would remove.

    python -m spark_jobs.compaction_preview --log-dirs DIR [--topics a,b] [--output preview.csv]
        [--now-ms MS] [--min-compaction-lag-ms MS]
    spark-submit spark_jobs/compaction_preview.py --log-dirs DIR ...

Which topics are compacted (cleanup.policy=compact) is topic configuration. --topics names them;
otherwise they come from this broker's metadata file in the log dir (`kbroker-metadata.json`: each
topic's `cleanup.policy`, else the dynamic cluster default `log.cleanup.policy`, else delete) plus
the internal topics, which are always compacted. A log dir without that file (Apache Kafka keeps
topic configs in ZooKeeper or KRaft) previews every topic, internal ones included, as if compacted.

The prediction is exact for one clean of each partition now by the broker's cleaner
(storage/cleaner.py, storage/log_cleaner.py), whatever its dirty ratio:

* The cleanable range is [log start offset, first uncleanable offset). The first uncleanable offset
  is the lowest of the last stable offset, the active segment's base offset and the base offset of
  the first dirty segment younger than min.compaction.lag.ms (its largest timestamp after
  now - lag), rounded down to a segment boundary (storage/log_cleaner.py's `cleanable_offsets`).
  Read offline, the last stable offset is the high watermark of the log dir's
  `replication-offset-checkpoint` when it covers the partition (else the log end offset, so the
  active segment bounds the range), lowered to the first offset of a transaction still open or
  whose marker is at or past that high watermark. The first dirty offset comes from
  `cleaner-offset-checkpoint` when present, else the log start offset; when the cleaner would start
  at or past the first uncleanable offset nothing is cleanable. Below the first dirty offset the log
  is already clean (one record per key), so the key map over the whole range decides as the
  cleaner's map over the dirty part does.
* In that range a record is removed when it belongs to an aborted transaction, has no key (the
  cleaner drops it and counts it "invalid"), has a later record of its key in the range (records of
  aborted transactions do not count as later), or is a tombstone (null value) whose batch already
  carries a delete horizon (KIP-534; stamped by an earlier clean as now + delete.retention.ms) that
  is not after now. A tombstone that is the latest of its key and has no horizon yet stays (this
  clean stamps one). Records past the range stay. Transaction markers are not data: they are
  neither counted nor previewed. A legacy (magic 0/1) tombstone has no horizon: the cleaner
  removes it once its segment file is older than the last clean segment's by
  delete.retention.ms, which the preview does not model (it counts it as staying).
* It assumes the cleaner's offset map holds every key of the range (log.cleaner.dedupe.buffer.size
  / log.cleaner.threads); a larger range takes the cleaner several runs. Records below a log start
  offset that is inside a segment are not read, so not counted.

now is --now-ms (option nowMs), else the clock. min.compaction.lag.ms is --min-compaction-lag-ms
(option minCompactionLagMs) for every topic, else each topic's config in `kbroker-metadata.json`,
else the dynamic broker default `log.cleaner.min.compaction.lag.ms` there, else 0.

Columns, per topic: `records`, `bytes` (key + value bytes) and `distinct_keys` of the data records
in the log now (up to the high watermark; aborted ones included); `removed_records` and
`removed_bytes`: what the clean removes; `tombstones`: tombstones left after it; `null_keys`:
records without a key in the log now (those in the cleanable range are part of removed_records);
`removed_pct`: removed_records / records. compute() also returns `partitions`, the cleanable range
of each partition, and `records`, one row per record with `removed` and its `reason`.
The records are always read read_uncommitted (the rule needs the aborted ones).
"""
if not __package__:                      # run as a script (spark-submit): make the project importable
    import os
    import sys
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402

from spark_jobs import common  # noqa: E402

METADATA_FILE = "kbroker-metadata.json"      # broker/metadata/local.py
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")
JOB_OPTIONS = ("nowMs", "minCompactionLagMs")    # this job's; the others go to the data source

PARTITIONS_SCHEMA = ("topic string, partition int, log_start_offset long, first_dirty_offset long, "
                     "first_uncleanable_offset long, cleanable_end long")


def _is_compact(policy) -> bool:
    if isinstance(policy, list):
        policy = ",".join(policy)
    return "compact" in str(policy).replace(" ", "").split(",")


def _metadata(log_dirs: list[str]) -> dict | None:
    """The first log dir's broker metadata file (parsed), or None when no log dir holds one."""
    for log_dir in log_dirs:
        try:
            with open(os.path.join(log_dir, METADATA_FILE), encoding="utf-8") as f:
                return json.load(f)
        except (FileNotFoundError, ValueError):
            continue
    return None


def _broker_default(state: dict, name: str, default):
    broker_configs = state.get("broker_configs", {})
    for scope in ("", "0"):                      # cluster default, then broker 0's
        default = broker_configs.get(scope, {}).get(name, default)
    return default


def compacted_topics(log_dirs: list[str]) -> list[str] | None:
    """Topics whose cleanup.policy includes compact, per the broker's metadata file (plus the
    internal topics), or None when no log dir holds that file."""
    state = _metadata(log_dirs)
    if state is None:
        return None
    default = _broker_default(state, "log.cleanup.policy", "delete")
    topics = {name for name, entry in state.get("topics", {}).items()
              if _is_compact(entry.get("configs", {}).get("cleanup.policy", default))}
    return sorted(topics | set(INTERNAL_TOPICS))


def min_compaction_lags(log_dirs: list[str], override=None):
    """topic -> min.compaction.lag.ms: the override for every topic, else the topic's config in the
    broker's metadata file, else its dynamic broker default, else 0."""
    if override is not None:
        return lambda topic: int(override)
    state = _metadata(log_dirs) or {}
    default = int(_broker_default(state, "log.cleaner.min.compaction.lag.ms", 0))
    topics = state.get("topics", {})

    def lag(topic: str) -> int:
        return int(topics.get(topic, {}).get("configs", {}).get("min.compaction.lag.ms", default))
    return lag


def _largest_timestamp(segment) -> int:
    """What min.compaction.lag.ms compares (storage/segment.py's largest_timestamp): the segment's
    max timestamp, else its file's modification time."""
    from spark_jobs import layout
    ts = layout.segment_max_timestamp(segment)
    return ts if ts >= 0 else int(os.stat(segment.log_path).st_mtime * 1000)


def cleanable_range(log, first_dirty_checkpoint, last_stable_offset: int, now_ms: int,
                    min_compaction_lag_ms: int) -> tuple[int, int]:
    """(first dirty, first uncleanable) of one partition (a layout.PartitionLog), as
    storage/log_cleaner.py's `cleanable_offsets` computes them on the broker."""
    start, end = log.log_start_offset, log.log_end_offset
    segments = log.segments
    if not segments:
        return start, start
    checkpoint = first_dirty_checkpoint
    first_dirty = checkpoint if checkpoint is not None and start <= checkpoint <= end else start
    active = segments[-1]
    bound = min(last_stable_offset, active.base_offset)
    if min_compaction_lag_ms > 0:
        for i, segment in enumerate(segments[:-1]):
            if segments[i + 1].base_offset <= first_dirty:
                continue
            if _largest_timestamp(segment) > now_ms - min_compaction_lag_ms:
                bound = min(bound, segment.base_offset)
                break
    bound = max(first_dirty, bound)
    first_uncleanable = active.base_offset
    for segment in reversed(segments):               # round down to a segment boundary
        if segment.base_offset <= bound:
            first_uncleanable = segment.base_offset
            break
    return first_dirty, first_uncleanable


def cleanable_ranges(log_dirs: list[str], topic_filter, now_ms: int, lag_of) -> list[tuple]:
    """One row per partition (PARTITIONS_SCHEMA): its log start, the cleaner's first dirty and first
    uncleanable offsets, and `cleanable_end`, where the records one clean removes end (the log start
    when nothing is cleanable). Planning on the driver: segment files and batch headers only."""
    from spark_jobs import layout
    checkpoints = {}
    for log_dir in log_dirs:
        checkpoints.update(layout.read_checkpoint(os.path.join(log_dir, layout.CLEANER_OFFSET_CHECKPOINT)))
    rows = []
    for log in layout.discover(log_dirs, topic_filter):
        lso = layout.scan_transactions(log).last_stable_offset
        first_dirty, first_uncleanable = cleanable_range(
            log, checkpoints.get((log.topic, log.partition)), lso, now_ms, lag_of(log.topic))
        cleanable_end = first_uncleanable if first_dirty < first_uncleanable else log.log_start_offset
        rows.append((log.topic, log.partition, log.log_start_offset, first_dirty, first_uncleanable,
                     cleanable_end))
    return rows


def compute(spark, options: dict) -> dict:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from spark_jobs.datasource import KafkaLogScanReader

    options = dict(options)
    now_ms, lag = (options.pop(name, None) for name in JOB_OPTIONS)
    now_ms = int(time.time() * 1000) if now_ms is None else int(now_ms)
    log_dirs = [d for d in options["logDirs"].split(",") if d]
    lag_of = min_compaction_lags(log_dirs, lag)
    if "topics" not in options and "topicPattern" not in options:
        compacted = compacted_topics(log_dirs)
        if compacted is None:
            options["includeInternal"] = "true"
        else:
            options["topics"] = ",".join(compacted)
    options.update(isolation="read_uncommitted", includeBatchFields="true")
    df = common.load(spark, options)
    # The partitions the load reads, chosen by the data source's own topic options.
    topic_filter = KafkaLogScanReader(options)._topic_filter()
    partitions = spark.createDataFrame(cleanable_ranges(log_dirs, topic_filter, now_ms, lag_of),
                                       PARTITIONS_SCHEMA)

    size = F.coalesce(F.length("key"), F.lit(0)) + F.coalesce(F.length("value"), F.lit(0))
    rows = (df.select("topic", "partition", "offset", "key", F.col("value").isNull().alias("tombstone"),
                      size.alias("bytes"), "isAborted", "deleteHorizon")
            .join(F.broadcast(partitions.select("topic", "partition", "cleanable_end")),
                  ["topic", "partition"], "left"))
    cleanable = F.coalesce(F.col("offset") < F.col("cleanable_end"), F.lit(False))
    mapped = cleanable & ~F.col("isAborted") & F.col("key").isNotNull()      # what the offset map holds
    latest = F.max(F.when(mapped, F.col("offset"))).over(Window.partitionBy("topic", "partition", "key"))
    horizon_passed = F.coalesce(F.unix_millis("deleteHorizon") <= F.lit(now_ms), F.lit(False))
    reason = (F.when(~cleanable, F.lit(None))
              .when(F.col("isAborted"), "aborted transaction")
              .when(F.col("key").isNull(), "no key")
              .when(F.col("offset") < latest, "superseded")
              .when(F.col("tombstone") & horizon_passed, "tombstone past its delete horizon"))
    marked = (rows.withColumn("reason", reason)
              .withColumn("removed", F.col("reason").isNotNull())
              .select("topic", "partition", "offset", "key", "tombstone", "bytes", "removed", "reason"))
    per_topic = (marked.groupBy("topic")
                 .agg(F.count(F.lit(1)).alias("records"), F.sum("bytes").alias("bytes"),
                      F.countDistinct("key").alias("distinct_keys"),
                      F.sum(F.col("removed").cast("int")).alias("removed_records"),
                      F.sum(F.when(F.col("removed"), F.col("bytes")).otherwise(0)).alias("removed_bytes"),
                      F.sum((F.col("tombstone") & ~F.col("removed")).cast("int")).alias("tombstones"),
                      F.sum(F.col("key").isNull().cast("int")).alias("null_keys"))
                 .withColumn("removed_pct", F.round(100 * F.col("removed_records") / F.col("records"), 1))
                 .orderBy("topic"))
    return {"topics": per_topic, "partitions": partitions, "records": marked}


def main(argv=None) -> int:
    p = common.parser(__doc__.split("\n")[0])
    p.add_argument("--now-ms", type=int, help="the cleaner's clock, ms since the epoch (default: now)")
    p.add_argument("--min-compaction-lag-ms", type=int,
                   help="min.compaction.lag.ms for every topic (default: from kbroker-metadata.json, else 0)")
    args = p.parse_args(argv)
    with common.session("compaction_preview", args.master, args.log_level) as spark:
        results = compute(spark, common.source_options(args, nowMs=args.now_ms,
                                                       minCompactionLagMs=args.min_compaction_lag_ms))
        common.print_table("Log compaction preview", results["topics"])
        if args.output:
            common.write_output(results["topics"].coalesce(1), args.output, common.output_format(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
