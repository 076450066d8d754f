"""consumer_lag: committed offsets from `__consumer_offsets` joined with log end offsets, per group,
topic and partition.

    python -m spark_jobs.consumer_lag --log-dirs DIR [--group G] [--output lag.csv]
    spark-submit spark_jobs/consumer_lag.py --log-dirs DIR ...

Each record of `__consumer_offsets` is decoded with Kafka's internal record schemas
(protocol/internal_records.py): key version 0/1 is an OffsetCommitKey (group, topic, partition) whose
value is an OffsetCommitValue (offset, metadata, commit_timestamp), or null: a tombstone, which
deletes the committed offset. Other key versions (group metadata, KIP-848 records) are skipped. A
group's records all live in one partition of `__consumer_offsets`, so the record with the highest
offset per (group, topic, partition) is the current state, as the group coordinator's replay finds it.
Offsets committed in a transaction (`sendOffsetsToTransaction`) count only once it committed, as
Kafka's GroupMetadataManager loads them: those of aborted transactions and those of a transaction
its producer has not ended yet are left out (each producer's on its own: another producer's open
transaction does not hold back one that committed).

The log end offset is what `kafka-consumer-groups.sh` shows as LOG-END-OFFSET: the partition's
high watermark (from `replication-offset-checkpoint`, else the end of its last complete batch);
with `--isolation read_committed`, its last stable offset, where a read_committed consumer's lag
ends. lag = log_end_offset - committed_offset; partitions missing from the log dirs show a null
lag. `--topics a,b` / `--topic-pattern REGEX` (the whole name) keep the commits of those topics.
"""
if not __package__:                      # run as a script (spark-submit): make the project importable
    import os
    import sys
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spark_jobs import common  # noqa: E402

COMMIT_TYPE = ("struct<group: string, topic: string, partition: int, committed_offset: long, "
               "commit_timestamp: long, metadata: string, tombstone: boolean>")


def decode_commit(key: bytes | None, value: bytes | None):
    """One __consumer_offsets record -> the offset commit it holds, or None for other record types.

    Runs as a plain Python UDF on the executors (a pandas-free path: pandas is not a dependency).
    """
    from protocol.internal import OffsetCommitKey
    from protocol.internal_records import (OFFSETS_KEY_VERSIONS, decode_offsets_key,
                                           decode_offsets_value)

    if key is None or len(key) < 2:
        return None
    if int.from_bytes(key[:2], "big", signed=True) not in OFFSETS_KEY_VERSIONS:
        return None        # a record type this version does not know: skipped, as Kafka's loader
    k = decode_offsets_key(key)
    if not isinstance(k, OffsetCommitKey):
        return None
    v = decode_offsets_value(k, value)
    if v is None:
        return (k.group, k.topic, k.partition, None, None, None, True)
    return (k.group, k.topic, k.partition, v.offset, v.commit_timestamp, v.metadata, False)


def end_offsets(log_dirs: list[str], read_committed: bool = False) -> list[tuple]:
    """(topic, partition, log_end_offset) of every partition, as readers see it (committed end;
    read_committed: no further than the last stable offset)."""
    from spark_jobs import layout
    out = []
    for log in layout.discover(log_dirs, lambda t: t != "__consumer_offsets"):
        end = log.committed_end
        if read_committed:
            end = min(end, layout.scan_transactions(log).last_stable_offset)
        out.append((log.topic, log.partition, end))
    return out


def undecided_transactions(log_dirs: list[str]) -> list[tuple]:
    """(partition, producer id, first offset) of each transaction of __consumer_offsets that
    its producer has not ended yet (for readers: no marker, or one past the high watermark)."""
    from spark_jobs import layout
    return [(log.partition, producer_id, first)
            for log in layout.discover(log_dirs, lambda t: t == "__consumer_offsets")
            for producer_id, first in layout.scan_transactions(log).undecided.items()]


def compute(spark, log_dirs: str, group: str | None = None, *, topics: str | None = None,
            topic_pattern: str | None = None, isolation: str = "read_uncommitted") -> dict:
    import re

    from pyspark.sql import Window
    from pyspark.sql import functions as F

    dirs = [d for d in log_dirs.split(",") if d]
    raw = common.load(spark, {"logDirs": log_dirs, "topics": "__consumer_offsets",
                              "includeBatchFields": "true"})
    open_txns = spark.createDataFrame(undecided_transactions(dirs) or [(-1, -1, 0)],
                                      "log_partition int, open_producer long, open_from long")
    decided = (raw.join(F.broadcast(open_txns),
                        (raw["partition"] == open_txns["log_partition"])
                        & (raw["producerId"] == open_txns["open_producer"]), "left")
               .where(~F.col("isAborted")
                      & (~F.col("isTransactional") | F.col("open_from").isNull()
                         | (F.col("offset") < F.col("open_from")))))
    decode = F.udf(decode_commit, COMMIT_TYPE, useArrow=False)
    commits = (decided.select(decode("key", "value").alias("c"),
                              F.col("offset").alias("record_offset"))
               .where("c IS NOT NULL").select("c.*", "record_offset"))
    if group:
        commits = commits.where(F.col("group") == group)
    if topics:
        commits = commits.where(F.col("topic").isin([t for t in topics.split(",") if t]))
    if topic_pattern:
        re.compile(topic_pattern)            # a bad regex fails here, with Python's message
        commits = commits.where(F.col("topic").rlike(f"^(?:{topic_pattern})$"))
    latest = Window.partitionBy("group", "topic", "partition").orderBy(F.col("record_offset").desc())
    current = (commits.withColumn("n", F.row_number().over(latest)).where("n = 1 AND NOT tombstone")
               .drop("n", "tombstone", "record_offset"))
    ends = spark.createDataFrame(end_offsets(dirs, isolation == "read_committed"),
                                 "topic string, partition int, log_end_offset long")
    lag = (current.join(ends, ["topic", "partition"], "left")
           .withColumn("lag", F.col("log_end_offset") - F.col("committed_offset"))
           .select("group", "topic", "partition", "committed_offset", "log_end_offset", "lag",
                   F.timestamp_millis("commit_timestamp").alias("commit_time"), "metadata")
           .orderBy("group", "topic", "partition"))
    groups = (lag.groupBy("group").agg(F.countDistinct("topic").alias("topics"),
                                       F.count(F.lit(1)).alias("partitions"), F.sum("lag").alias("total_lag"))
              .orderBy("group"))
    return {"lag": lag, "groups": groups}


def main(argv=None) -> int:
    p = common.parser(__doc__.split("\n")[0])
    p.add_argument("--group", help="only this consumer group")
    args = p.parse_args(argv)
    with common.session("consumer_lag", args.master, args.log_level) as spark:
        results = compute(spark, args.log_dirs, args.group, topics=args.topics,
                          topic_pattern=args.topic_pattern, isolation=args.isolation)
        common.print_table("Lag per group, topic and partition", results["lag"])
        common.print_table("Lag per group", results["groups"])
        if args.output:
            common.write_output(results["lag"].coalesce(1), args.output, common.output_format(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
