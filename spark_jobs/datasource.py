"""The `kafkalog` Spark data source: reads Kafka `log.dirs` directly, in parallel, read-only.

Usage::

    from spark_jobs.datasource import register
    register(spark)                        # also enables Python filter pushdown for the session
    df = (spark.read.format("kafkalog").option("logDirs", "/var/kafka-logs")
          .option("topics", "orders,payments").load())

Theory of operation
-------------------
Planning runs on the driver (`KafkaLogReader.partitions`): spark_jobs/layout.py lists every
`<topic>-<partition>` directory of every log dir, snapshots each partition's committed end (the high
watermark of `replication-offset-checkpoint` when it covers the partition, else the end of the last
complete batch), resolves the offset bounds (options, pushed-down filters, timestamps through
`.timeindex`), and cuts each segment into splits of about `maxSplitBytes` at offset-index positions.
Each split is one Spark input partition, so one segment (or part of one) is one task. Executors
read their split with one pread and decode it column by column into Arrow record batches
(spark_jobs/decoder.py); nothing goes through a broker, and nothing is ever written.

Options (names follow Spark's own Kafka source where one exists):

  logDirs / path        comma-separated log dirs (required)
  topics                comma-separated topic names; topicPattern: a regex (full match); with both,
                        a topic matching either is read. Default: every topic except internal ones
                        (`__consumer_offsets`, `__transaction_state`, `__share_group_state`), read only when named
                        in `topics` or with includeInternal=true (a pattern does not match them, as
                        a Kafka consumer's exclude.internal.topics=true). KRaft's metadata log
                        (`__cluster_metadata`, in dirs written by Kafka in KRaft mode) is not a
                        topic: it is read only when named in `topics`
  startingOffsets       "earliest" (default), "latest", or JSON {"topic": {"0": 42, "1": -2}}
                        (-2 = earliest, -1 = latest); inclusive
  endingOffsets         "latest" (default) or JSON as above (-1 = latest); exclusive. A partition
                        the JSON leaves out takes the default (Spark's Kafka source wants them all)
  failOnDataLoss        true (default, as Spark's Kafka source) | false: a starting offset below a
                        partition's log start (records deleted by retention or DeleteRecords) fails
                        the query, or, false, reads from the log start
  startingTimestamp     ms since the epoch, or JSON per partition: start at the earliest offset whose
                        timestamp >= it (Kafka's ListOffsets by time; none -> no rows)
  endingTimestamp       ms, or JSON: end (exclusive) at the earliest offset whose timestamp >= it
                        (none -> latest)
  (Spark's Kafka source names kafka.isolation.level, startingOffsetsByTimestamp and
  endingOffsetsByTimestamp mean isolation, startingTimestamp and endingTimestamp; its assign and
  startingOffsetsByTimestampStrategy are refused, not ignored)
  isolation             read_uncommitted (default) | read_committed: skips aborted transactions and
                        stops at the last_stable_offset; control batches are never returned
  includeHeaders        false (default) | true: adds the `headers` column
  includeBatchFields    false (default) | true: adds two columns of the record's batch, last:
                        `isAborted` (it belongs to an aborted transaction: always false with
                        read_committed, which skips them; planning then scans the partition's
                        transactions as read_committed does) and `deleteHorizon` (timestamp: the
                        delete horizon the log cleaner stamped on the batch when it kept a tombstone,
                        KIP-534; null when the batch has none). What spark_jobs/compaction_preview
                        needs to predict the cleaner
  maxSplitBytes         target bytes per split (default 64 MiB)
  pushFilters           true (default) | false: no filter pushdown (see the caveat below)
  view                  records (default) | batches: one row per batch instead (topic, partition,
                        baseOffset, lastOffset, codec, sizeInBytes, uncompressedBytes, recordsCount,
                        isControl, isTransactional, producerId, maxTimestamp); used for compression
                        ratios. Offset bounds apply to whole batches; timestamp filters are not pushed.

Pushed-down filters, applied exactly (Spark does not re-check them): topic = / IN / startsWith;
partition and offset = / IN / < / <= / > / >=; timestamp < / <= / > / >=.

Caveat, a Spark bug (4.0 to 4.3.0 at least): Spark keeps the plan of a filter pushdown (partitions
and read function) on the relation that `load()` created, shared by every DataFrame derived from
it, and reuses it for a later scan of that relation that pushes no filter. So after
`df.where("partition = 0").count()`, `df.count()` counts partition 0 only; and one query that
scans the same `df` twice with different filters (a self-join) reads both sides with the last
plan. Upstream Spark's PythonScanBuilder now keeps that plan per scan. Until a release has the
fix, call `load()` once per query when filtering (the jobs here do), or read with option
pushFilters=false: then Spark filters the rows itself, correct but reading everything.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re

from pyspark.sql.datasource import (DataSource, DataSourceReader, EqualTo, GreaterThan,
                                    GreaterThanOrEqual, In, InputPartition, LessThan, LessThanOrEqual,
                                    StringStartsWith)
from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, IntegerType, LongType, StringType,
                               StructField, StructType, TimestampType)

from spark_jobs import layout
from spark_jobs.decoder import SegmentChangedError, SplitReader, offsets_and_timestamps, read_batch_infos

SHORT_NAME = "kafkalog"
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
DEFAULT_MAX_SPLIT_BYTES = 64 * 1024 * 1024
EARLIEST, LATEST = -2, -1          # Kafka's ListOffsets sentinels, as Spark's JSON offsets use them
_INT64_MAX = (1 << 63) - 1


def spark_schema(include_headers: bool, batch_fields: bool = False) -> StructType:
    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()),
              StructField("topic", StringType()), StructField("partition", IntegerType()),
              StructField("offset", LongType()), StructField("timestamp", TimestampType()),
              StructField("timestampType", IntegerType())]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    fields += [StructField("leaderEpoch", IntegerType()), StructField("producerId", LongType()),
               StructField("isTransactional", BooleanType())]
    if batch_fields:
        fields += [StructField("isAborted", BooleanType()), StructField("deleteHorizon", TimestampType())]
    return StructType(fields)


BATCHES_SCHEMA = StructType([
    StructField("topic", StringType()), StructField("partition", IntegerType()),
    StructField("baseOffset", LongType()), StructField("lastOffset", LongType()),
    StructField("codec", StringType()), StructField("sizeInBytes", LongType()),
    StructField("uncompressedBytes", LongType()), StructField("recordsCount", IntegerType()),
    StructField("isControl", BooleanType()), StructField("isTransactional", BooleanType()),
    StructField("producerId", LongType()), StructField("maxTimestamp", TimestampType()),
])


def register(spark) -> None:
    """Registers the source under SHORT_NAME; the reader pushes filters down, which Spark allows only
    with spark.sql.python.filterPushdown.enabled."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(KafkaLogDataSource)


class KafkaLogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> StructType:
        if self.options.get("view", "records") == "batches":
            return BATCHES_SCHEMA
        return spark_schema(_bool_option(self.options, "includeHeaders", False),
                            _bool_option(self.options, "includeBatchFields", False))

    def reader(self, schema: StructType) -> "KafkaLogScanReader":
        options = dict(self.options)
        if _bool_option(options, "pushFilters", True):
            return KafkaLogReader(options)
        return KafkaLogScanReader(options)      # Spark refuses a pushFilters() it will not call


class SplitPartition(InputPartition):
    """One split with the bounds to apply to it (picklable; sent to an executor)."""

    def __init__(self, split: layout.Split, start_offset: int, end_offset: int, aborted):
        super().__init__(None)
        self.split = split
        self.start_offset = start_offset
        self.end_offset = end_offset
        self.aborted = aborted

    def __repr__(self) -> str:
        s = self.split
        return f"SplitPartition({s.topic}-{s.partition} @{s.start_position}..{s.end_position})"


class _Range:
    """An inclusive [lo, hi] range narrowed by pushed-down comparisons, plus an optional value set."""

    def __init__(self, lo=None, hi=None):
        self.lo, self.hi, self.values = lo, hi, None

    def narrow(self, f) -> bool:
        v = getattr(f, "value", None)
        if v is None:
            return False
        if isinstance(f, EqualTo):
            self._set({v})
        elif isinstance(f, In):
            self._set(set(v))
        elif isinstance(f, GreaterThan):
            self.lo = v + 1 if self.lo is None else max(self.lo, v + 1)
        elif isinstance(f, GreaterThanOrEqual):
            self.lo = v if self.lo is None else max(self.lo, v)
        elif isinstance(f, LessThan):
            self.hi = v - 1 if self.hi is None else min(self.hi, v - 1)
        elif isinstance(f, LessThanOrEqual):
            self.hi = v if self.hi is None else min(self.hi, v)
        else:
            return False
        return True

    def _set(self, values):
        self.values = values if self.values is None else self.values & values

    def contains(self, v) -> bool:
        return ((self.lo is None or v >= self.lo) and (self.hi is None or v <= self.hi)
                and (self.values is None or v in self.values))


def _micros(value) -> int | None:
    """A pushed-down timestamp (datetime; naive means UTC) in microseconds since the epoch."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
        return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    return None


# Spark's Kafka source option names read as this source's own (lower case).
_SPARK_KAFKA_ALIASES = {"kafka.isolation.level": "isolation",
                        "startingoffsetsbytimestamp": "startingtimestamp",
                        "endingoffsetsbytimestamp": "endingtimestamp"}
# Spark's Kafka source options this source cannot honour: refused rather than ignored.
_SPARK_KAFKA_UNSUPPORTED = {
    "assign": "name the topics in option topics and filter on the partition column",
    "startingoffsetsbytimestampstrategy": "a timestamp with no offset at or after it reads no rows",
}


class DataLossError(ValueError):
    """Offsets asked for are no longer in the log (failOnDataLoss)."""


class KafkaLogScanReader(DataSourceReader):
    """Plans and reads; filters Spark pushed down (KafkaLogReader) narrow the plan."""

    def __init__(self, options: dict):
        self.options = {k.lower(): v for k, v in options.items()}
        for alias, name in _SPARK_KAFKA_ALIASES.items():    # Spark's Kafka source names
            if alias in self.options and name not in self.options:
                self.options[name] = self.options[alias]
        self.topic_names: set[str] | None = None
        self.topic_prefixes: list[str] = []
        self.partition_range = _Range()
        self.offset_range = _Range()
        self.ts_range = _Range()
        self._check_options()
        self.fail_on_data_loss = _bool_option(self.options, "failOnDataLoss", True)

    def _check_options(self) -> None:
        """Bad options fail the query at planning with a message naming the option."""
        o = self.options
        for name, instead in _SPARK_KAFKA_UNSUPPORTED.items():
            if name in o:         # silently ignored, it would read other records than asked
                raise ValueError(f"kafkalog option {name} (Spark's Kafka source) is not supported: "
                                 f"{instead}")
        choices = {"isolation": ("read_uncommitted", "read_committed"), "view": ("records", "batches")}
        for name, allowed in choices.items():
            if o.get(name, allowed[0]) not in allowed:
                raise ValueError(f"kafkalog option {name}: expected one of {', '.join(allowed)}, got {o[name]!r}")
        for name in ("startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp"):
            _parse_offsets(o.get(name.lower()), None, name)
        for name in ("failOnDataLoss", "includeHeaders", "includeBatchFields", "includeInternal",
                     "pushFilters"):
            if name.lower() in o:
                _bool(o[name.lower()], name)
        raw = o.get("maxsplitbytes", str(DEFAULT_MAX_SPLIT_BYTES))
        if not str(raw).strip().isdigit() or int(raw) <= 0:
            raise ValueError(f"kafkalog option maxSplitBytes: expected a positive number of bytes, got {raw!r}")
        pattern = o.get("topicpattern", o.get("subscribepattern"))
        if pattern:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"kafkalog option topicPattern: {pattern!r} is not a valid regex: {exc}") from None
        for log_dir in self._log_dirs():
            if not os.path.isdir(log_dir):
                raise ValueError(f"kafkalog option logDirs: {log_dir!r} is not a directory")
            if layout.is_partition_dir(log_dir):
                raise ValueError(f"kafkalog option logDirs: {log_dir!r} is a partition's directory; "
                                 f"name the log dir that holds it ({os.path.dirname(log_dir.rstrip('/')) or '/'})")

    # -- planning (driver) -------------------------------------------------------------------------
    def _named_topics(self) -> set | None:
        """The topics named in the `topics` (or `subscribe`) option, or None."""
        names = self.options.get("topics", self.options.get("subscribe"))
        return {t.strip() for t in names.split(",") if t.strip()} if names else None

    def _topic_filter(self):
        wanted = self._named_topics()
        pattern = self.options.get("topicpattern", self.options.get("subscribepattern"))
        regex = re.compile(pattern) if pattern else None
        include_internal = _bool_option(self.options, "includeInternal", False)

        def accept(topic: str) -> bool:
            if self.topic_names is not None and topic not in self.topic_names:
                return False
            if self.topic_prefixes and not all(topic.startswith(p) for p in self.topic_prefixes):
                return False
            if wanted is not None and topic in wanted:
                return True                         # a topic named explicitly, internal or not
            if regex is not None and not regex.fullmatch(topic):
                return False
            if wanted is not None and regex is None:
                return False
            return include_internal or topic not in INTERNAL_TOPICS
        return accept

    def _log_dirs(self) -> list[str]:
        raw = self.options.get("logdirs", self.options.get("path"))
        if not raw:
            raise ValueError("the kafkalog source needs option logDirs (or a path)")
        return [d.strip() for d in raw.split(",") if d.strip()]

    def plan(self) -> list[SplitPartition]:
        try:
            return self._plan()
        except FileNotFoundError as exc:
            # A segment went (retention, compaction) while the plan was being made.
            raise SegmentChangedError(f"{exc.filename} was deleted or rewritten while the query "
                                      f"was planned: run the query again") from None

    def _plan(self) -> list[SplitPartition]:
        named = self._named_topics() or set()
        logs = layout.discover(self._log_dirs(), self._topic_filter(),
                               layout.CLUSTER_METADATA_TOPIC in named,
                               self.partition_range.contains)
        read_committed = self.options.get("isolation", "read_uncommitted") == "read_committed"
        batch_fields = _bool_option(self.options, "includeBatchFields", False) and \
            self.options.get("view", "records") == "records"
        target = int(self.options.get("maxsplitbytes", DEFAULT_MAX_SPLIT_BYTES))
        starting = _parse_offsets(self.options.get("startingoffsets", "earliest"), EARLIEST, "startingOffsets")
        ending = _parse_offsets(self.options.get("endingoffsets", "latest"), LATEST, "endingOffsets")
        starting_ts = _parse_offsets(self.options.get("startingtimestamp"), None, "startingTimestamp")
        ending_ts = _parse_offsets(self.options.get("endingtimestamp"), None, "endingTimestamp")
        result = []
        for log in logs:
            end = log.committed_end
            aborted = None
            if read_committed or batch_fields:
                txn = layout.scan_transactions(log)
                aborted = txn.aborted
                if read_committed:
                    end = min(end, txn.last_stable_offset)
            start = _resolve(starting(log), log, log.log_start_offset, end)
            if start < log.log_start_offset and self.fail_on_data_loss:
                # Spark's Kafka source (failOnDataLoss=true, its default) fails here too
                raise DataLossError(
                    f"kafkalog: startingOffsets asks {log.topic}-{log.partition} from offset "
                    f"{start}, but its log starts at {log.log_start_offset}: the records before "
                    f"were deleted (retention, DeleteRecords). Set option failOnDataLoss to "
                    f"false to read from the log start instead")
            stop = _resolve(ending(log), log, end, end)
            ts = starting_ts(log)
            if ts is not None:
                found = layout.offset_for_timestamp(log, ts, offsets_and_timestamps)
                start = max(start, end if found is None else found)
            ts = ending_ts(log)
            if ts is not None:
                found = layout.offset_for_timestamp(log, ts, offsets_and_timestamps)
                stop = min(stop, end if found is None else found)
            if self.offset_range.lo is not None:
                start = max(start, self.offset_range.lo)
            if self.offset_range.hi is not None:
                stop = min(stop, self.offset_range.hi + 1)
            if self.offset_range.values is not None:
                if not self.offset_range.values:
                    continue
                start = max(start, min(self.offset_range.values))
                stop = min(stop, max(self.offset_range.values) + 1)
            start, stop = max(start, log.log_start_offset), min(stop, end)
            for split in layout.plan_splits(log, start, stop, target):
                result.append(SplitPartition(split, start, stop, aborted))
        return result

    def partitions(self):
        return self.plan()    # Spark turns an empty list into one InputPartition(None): read() skips it

    # -- reading (executors) -----------------------------------------------------------------------
    def read(self, partition: SplitPartition):
        if not isinstance(partition, SplitPartition):
            return iter(())
        if self.options.get("view", "records") == "batches":
            return read_batch_infos(partition.split, partition.start_offset, partition.end_offset)
        values = self.offset_range.values
        ts = self.ts_range
        reader = SplitReader(partition.split, partition.start_offset, partition.end_offset,
                             min_ts_us=ts.lo, max_ts_us=ts.hi, aborted=partition.aborted,
                             skip_aborted=self.options.get("isolation", "read_uncommitted") == "read_committed",
                             include_headers=_bool_option(self.options, "includeHeaders", False),
                             batch_fields=_bool_option(self.options, "includeBatchFields", False))
        if values is None:
            return iter(reader)
        return (batch.filter(_is_in(batch.column("offset"), values)) for batch in reader)


class KafkaLogReader(KafkaLogScanReader):
    """The reader with filter pushdown (option pushFilters=false gives KafkaLogScanReader instead)."""

    # -- filter pushdown ---------------------------------------------------------------------------
    def pushFilters(self, filters):
        for f in filters:
            attribute = getattr(f, "attribute", ())
            column = attribute[0] if len(attribute) == 1 else None
            if column == "topic" and isinstance(f, (EqualTo, In)):
                names = {f.value} if isinstance(f, EqualTo) else set(f.value)
                self.topic_names = names if self.topic_names is None else self.topic_names & names
            elif column == "topic" and isinstance(f, StringStartsWith):
                self.topic_prefixes.append(f.value)
            elif column == "partition" and self.partition_range.narrow(f):
                pass
            elif column == "offset" and self.offset_range.narrow(f):
                pass
            elif (column == "timestamp" and self.options.get("view", "records") == "records"
                  and isinstance(f, (GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual))
                  and _micros(f.value) is not None):
                self.ts_range.narrow(type(f)(f.attribute, _micros(f.value)))
            else:
                yield f


def _is_in(column, values):
    import pyarrow as pa
    import pyarrow.compute as pc
    return pc.is_in(column, value_set=pa.array(sorted(values), pa.int64()))


def _bool_option(options, name: str, default: bool) -> bool:
    """Boolean option `name` of `options`, looked up as written and lowercased (Spark's options
    are case-insensitive; SplitPartition keeps them lowercased), or `default` when absent."""
    value = options.get(name, options.get(name.lower()))
    return default if value is None else _bool(value, name)


def _bool(value, name: str) -> bool:
    """A boolean option: true or false (any case; 1/0 and yes/no too), else an error naming it
    (a typo such as "flase" quietly read as false turned failOnDataLoss off)."""
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError(f"kafkalog option {name}: expected true or false, got {value!r}")


def _parse_offsets(raw, default, name: str = "offsets"):
    """Returns log -> requested value (offset, timestamp or sentinel) for one of the offset options."""
    if raw is None:
        return lambda log: default
    raw = str(raw).strip()
    if raw == "earliest":
        return lambda log: EARLIEST
    if raw == "latest":
        return lambda log: LATEST
    # offsets: -2 (earliest) and -1 (latest) are Spark's sentinels; timestamps are never negative
    lowest = -2 if name.endswith("Offsets") else 0

    def number(value) -> bool:
        return type(value) is int and value >= lowest
    if raw.lstrip("-").isdigit() and number(int(raw)):
        return lambda log: int(raw)
    try:
        per_partition = json.loads(raw)
        if not isinstance(per_partition, dict) or not all(
                isinstance(v, dict) and all(k.isdigit() and number(x) for k, x in v.items())
                for v in per_partition.values()):
            raise ValueError("not a topic -> partition id -> number object"
                             + (" (offsets: -2 earliest, -1 latest, or >= 0)" if lowest else
                                " (timestamps >= 0)"))
    except ValueError as exc:
        raise ValueError(f'kafkalog option {name}: expected earliest, latest, a number or JSON like '
                         f'{{"topic": {{"0": 42}}}}, got {raw!r} ({exc})') from None

    def lookup(log):
        value = per_partition.get(log.topic, {}).get(str(log.partition))
        return default if value is None else int(value)
    return lookup


def _resolve(value, log: layout.PartitionLog, default: int, end: int) -> int:
    if value == EARLIEST:
        return log.log_start_offset
    if value == LATEST:
        return end
    return default if value is None else value
