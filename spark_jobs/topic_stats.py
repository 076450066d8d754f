"""topic_stats: records, bytes, distinct keys, null keys, min/max timestamp per topic-partition and per
hour, and the compression ratio by codec.

    python -m spark_jobs.topic_stats --log-dirs DIR [--topics a,b] [--output stats.parquet] [--plot h.png]
    spark-submit spark_jobs/topic_stats.py --log-dirs DIR ...

`bytes` counts key + value bytes (the payload a consumer receives); the codec table compares each
batch's size on disk with its size uncompressed (the `batches` view of the data source).
With --output PATH the three tables go to PATH/partitions, PATH/hours and PATH/codecs.
"""
if not __package__:                      # run as a script (spark-submit): make the project importable
    import os
    import sys
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spark_jobs import common  # noqa: E402


def compute(spark, options: dict) -> dict:
    """The three result DataFrames: partitions, hours, codecs."""
    from pyspark.sql import functions as F

    df = common.load(spark, options)
    size = F.coalesce(F.length("key"), F.lit(0)) + F.coalesce(F.length("value"), F.lit(0))
    partitions = (df.groupBy("topic", "partition")
                  .agg(F.count(F.lit(1)).alias("records"), F.sum(size).alias("bytes"),
                       F.countDistinct("key").alias("distinct_keys"),
                       F.sum(F.when(F.col("key").isNull(), 1).otherwise(0)).alias("null_keys"),
                       F.min("timestamp").alias("min_timestamp"), F.max("timestamp").alias("max_timestamp"))
                  .orderBy("topic", "partition"))
    hours = (df.groupBy("topic", F.date_trunc("hour", "timestamp").alias("hour"))
             .agg(F.count(F.lit(1)).alias("records"), F.sum(size).alias("bytes"))
             .orderBy("topic", "hour"))
    batch_options = {k: v for k, v in options.items() if k not in ("isolation", "includeHeaders")}
    batches = common.load(spark, dict(batch_options, view="batches")).where(~F.col("isControl"))
    codecs = (batches.groupBy("codec")
              .agg(F.count(F.lit(1)).alias("batches"), F.sum("recordsCount").alias("records"),
                   F.sum("sizeInBytes").alias("bytes_on_disk"),
                   F.sum("uncompressedBytes").alias("bytes_uncompressed"))
              .withColumn("ratio", F.round(F.col("bytes_uncompressed") / F.col("bytes_on_disk"), 3))
              .orderBy("codec"))
    return {"partitions": partitions, "hours": hours, "codecs": codecs}


def plot_hours(rows, path: str) -> None:
    """A PNG line chart of records per hour, one line per topic (needs matplotlib)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5))
    for topic in sorted({r["topic"] for r in rows}):
        points = sorted((r["hour"], r["records"]) for r in rows if r["topic"] == topic)
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=topic)
    ax.set_xlabel("hour (UTC)")
    ax.set_ylabel("records")
    ax.set_title("Records per hour per topic")
    ax.legend()
    fig.autofmt_xdate()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    p = common.parser(__doc__.split("\n")[0])
    p.add_argument("--plot", help="write a PNG chart of records per hour per topic")
    args = p.parse_args(argv)
    if args.plot:
        try:
            import matplotlib  # noqa: F401  (checked before Spark starts, not after the job)
        except ImportError:
            p.error("--plot needs matplotlib: pip install 'kbroker[charts]'")
    with common.session("topic_stats", args.master, args.log_level) as spark:
        results = compute(spark, common.source_options(args))
        hours = None
        for name, title in (("partitions", "Per topic-partition"), ("hours", "Per topic and hour"),
                            ("codecs", "Compression by codec")):
            rows = common.print_table(title, results[name])
            if name == "hours":
                hours = rows
            if args.output:
                common.write_output(results[name].coalesce(1), f"{args.output.rstrip('/')}/{name}",
                                    common.output_format(args))
        if args.plot:
            plot_hours([r.asDict() for r in hours], args.plot)
            print(f"\nchart written to {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
