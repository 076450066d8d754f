"""compaction_preview: per topic, how many records and bytes log compaction would remove now.

    python -m spark_jobs.compaction_preview --log-dirs DIR [--topics a,b] [--output preview.csv]
    spark-submit spark_jobs/compaction_preview.py --log-dirs DIR ...

Which topics are compacted (cleanup.policy=compact) is topic configuration. --topics names them;
otherwise they come from this broker's metadata file in the log dir (`kbroker-metadata.json`: each
topic's `cleanup.policy`, else the dynamic cluster default `log.cleanup.policy`, else delete) plus
the internal topics, which are always compacted. A log dir without that file (Apache Kafka keeps
topic configs in ZooKeeper or KRaft) previews every topic, internal ones included, as if compacted.

The rule is Kafka's log cleaner's: only the cleanable part of a partition is cleaned, the segments
before the active one (`min.compaction.lag.ms` taken as 0). The cleaner builds a map key -> latest
offset over that part, then drops every record in it whose key has a later record in the map.
Records of the active segment are neither removed nor counted in the map. Tombstones (null values)
that are the latest for their key stay until `delete.retention.ms` has passed: they are reported
as `tombstones`, not as removed. Records without a key cannot be compacted (Kafka rejects them on
compacted topics) and are reported as `null_keys`. `bytes` counts key + value bytes.
"""
if not __package__:                      # run as a script (spark-submit): make the project importable
    import os
    import sys
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import json  # noqa: E402
import os  # noqa: E402

from spark_jobs import common  # noqa: E402

METADATA_FILE = "kbroker-metadata.json"      # broker/metadata/local.py
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state")


def _is_compact(policy) -> bool:
    if isinstance(policy, list):
        policy = ",".join(policy)
    return "compact" in str(policy).replace(" ", "").split(",")


def compacted_topics(log_dirs: list[str]) -> list[str] | None:
    """Topics whose cleanup.policy includes compact, per the broker's metadata file (plus the
    internal topics), or None when no log dir holds that file."""
    for log_dir in log_dirs:
        try:
            with open(os.path.join(log_dir, METADATA_FILE), encoding="utf-8") as f:
                state = json.load(f)
        except (FileNotFoundError, ValueError):
            continue
        broker_configs = state.get("broker_configs", {})
        default = "delete"
        for scope in ("", "0"):                      # cluster default, then broker 0's
            default = broker_configs.get(scope, {}).get("log.cleanup.policy", default)
        topics = {name for name, entry in state.get("topics", {}).items()
                  if _is_compact(entry.get("configs", {}).get("cleanup.policy", default))}
        return sorted(topics | set(INTERNAL_TOPICS))
    return None


def active_segments(log_dirs: list[str], topic_filter=None) -> list[tuple]:
    """(topic, partition, base_offset of the active segment) per partition: where cleaning stops."""
    from spark_jobs import layout
    return [(log.topic, log.partition, log.segments[-1].base_offset if log.segments else 0)
            for log in layout.discover(log_dirs, topic_filter)]


def compute(spark, options: dict) -> dict:
    from pyspark.sql import functions as F

    options = dict(options)
    log_dirs = [d for d in options["logDirs"].split(",") if d]
    if "topics" not in options and "topicPattern" not in options:
        compacted = compacted_topics(log_dirs)
        if compacted is None:
            options["includeInternal"] = "true"
        else:
            options["topics"] = ",".join(compacted)
    df = common.load(spark, options)
    size = F.coalesce(F.length("key"), F.lit(0)) + F.coalesce(F.length("value"), F.lit(0))
    active = spark.createDataFrame(active_segments(log_dirs), "topic string, partition int, active_base long")
    rows = df.select("topic", "partition", "offset", "key", (F.col("value").isNull()).alias("tombstone"),
                     size.alias("bytes")).join(active, ["topic", "partition"])
    rows = rows.withColumn("cleanable", F.col("offset") < F.col("active_base"))
    latest = (rows.where("cleanable AND key IS NOT NULL").groupBy("topic", "partition", "key")
              .agg(F.max("offset").alias("latest_offset")))
    marked = (rows.join(latest, ["topic", "partition", "key"], "left")
              .withColumn("removed", F.col("cleanable") & F.col("key").isNotNull()
                          & (F.col("offset") < F.col("latest_offset"))))
    per_topic = (marked.groupBy("topic")
                 .agg(F.count(F.lit(1)).alias("records"), F.sum("bytes").alias("bytes"),
                      F.countDistinct("key").alias("distinct_keys"),
                      F.sum(F.col("removed").cast("int")).alias("removed_records"),
                      F.sum(F.when(F.col("removed"), F.col("bytes")).otherwise(0)).alias("removed_bytes"),
                      F.sum((F.col("tombstone") & ~F.col("removed")).cast("int")).alias("tombstones"),
                      F.sum(F.col("key").isNull().cast("int")).alias("null_keys"))
                 .withColumn("removed_pct", F.round(100 * F.col("removed_records") / F.col("records"), 1))
                 .orderBy("topic"))
    return {"topics": per_topic}


def main(argv=None) -> int:
    args = common.parser(__doc__.split("\n")[0]).parse_args(argv)
    with common.session("compaction_preview", args.master, args.log_level) as spark:
        results = compute(spark, common.source_options(args))
        common.print_table("Log compaction preview", results["topics"])
        if args.output:
            common.write_output(results["topics"].coalesce(1), args.output, common.output_format(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
