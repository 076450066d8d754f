"""export: topics to Parquet (or JSON/CSV) files partitioned by topic and date.

    python -m spark_jobs.export --log-dirs DIR --output OUT [--format parquet|json] [--decode utf8|json]
    spark-submit spark_jobs/export.py --log-dirs DIR --output OUT ...

Rows keep the data source's columns (key, value, partition, offset, timestamp, timestampType, headers
with --include-headers) plus `date` (UTC, from the timestamp); files land in OUT/topic=T/date=D/.
--decode utf8 turns key and value into strings (invalid bytes become U+FFFD); --decode json also
parses each value as JSON, with a schema Spark infers from all values (a value that is not JSON
becomes null). Prints the number of rows written per topic and date.
"""
if not __package__:                      # run as a script (spark-submit): make the project importable
    import os
    import sys
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spark_jobs import common  # noqa: E402


def prepare(spark, options: dict, decode: str | None = None):
    """The DataFrame export writes: source rows + date, with key/value decoded as asked."""
    from pyspark.sql import functions as F

    # The session time zone is UTC (common.build_session), so this is the UTC date.
    df = common.load(spark, options).withColumn("date", F.date_format("timestamp", "yyyy-MM-dd"))
    if decode in ("utf8", "json"):
        df = (df.withColumn("key", F.decode("key", "UTF-8"))
                .withColumn("value", F.decode("value", "UTF-8")))
    if decode == "json":
        values = df.select("value").where(F.col("value").isNotNull())
        schema = spark.read.json(values.rdd.map(lambda r: r[0])).schema
        fields = [f for f in schema.fields if f.name != "_corrupt_record"]
        if fields:
            from pyspark.sql.types import StructType
            df = df.withColumn("value", F.from_json("value", StructType(fields)))
    return df


def main(argv=None) -> int:
    p = common.parser(__doc__.split("\n")[0])
    p.add_argument("--decode", choices=["utf8", "json"], help="decode keys/values (default: keep bytes)")
    p.add_argument("--include-headers", action="store_true")
    args = p.parse_args(argv)
    if not args.output:
        p.error("--output is required")
    with common.session("export", args.master, args.log_level) as spark:
        options = common.source_options(args, includeHeaders=str(args.include_headers).lower())
        df = prepare(spark, options, args.decode).cache()
        fmt = common.output_format(args, default="parquet")
        common.write_output(df, args.output, fmt, partition_by=["topic", "date"])
        from pyspark.sql import functions as F
        common.print_table(f"Rows written to {args.output} ({fmt})",
                           df.groupBy("topic", "date").agg(F.count(F.lit(1)).alias("rows")).orderBy("topic", "date"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
