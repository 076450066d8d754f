"""kafka-get-offsets.sh (Kafka's GetOffsetShell): offsets of topic partitions, one ``topic:partition:offset``
line each, sorted as Kafka sorts them, by the text "topic-partition".

``--time`` is -1/latest (the log end offset), -2/earliest (the log start offset), -3/max-timestamp
(the offset of the record with the largest timestamp), -4/earliest-local and -5/latest-tiered (no
tiered storage here: the log start offset, and none), or a timestamp in ms (the earliest offset
whose timestamp is at or after it); partitions with no such offset are left out, like Kafka does,
and a partition that cannot answer (no leader) is skipped with a line on stderr.
``--topic`` is a regular expression (commas mean "or", as Kafka's IncludeList); ``--partitions``
takes ids ("0,2,4"); ``--topic-partitions`` takes ids and ranges in ``topic-regex:partitions`` entries
separated by commas.
"""
from __future__ import annotations

import re
import sys

from protocol.errors import ErrorCode, KafkaError

from broker.client.admin import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, Admin
from broker.client.cluster import ClusterClient
from broker.client.errors import ClientError
from broker.client.types import TopicPartition
from broker.config import java_int
from broker.tools.common import (ToolError, ToolParser, client_kwargs, error_text, exception_class, include_list,
                                 main_entry, read_properties)
from broker.tools.javautil import java_split

ERROR_PREFIX = "Error occurred: "          # GetOffsetShell.mainNoExit

TIMES = {"latest": LATEST_TIMESTAMP, "earliest": EARLIEST_TIMESTAMP, "max-timestamp": MAX_TIMESTAMP,
         "earliest-local": -4, "latest-tiered": -5}


def build_parser() -> ToolParser:
    p = ToolParser("kafka-get-offsets.sh", "An interactive shell for getting topic-partition offsets.")
    p.add_argument("--bootstrap-server", metavar="<String: HOST1:PORT1,...,HOST3:PORT3>",
                   help="REQUIRED. The server(s) to connect to in the form HOST1:PORT1,HOST2:PORT2.")
    p.add_argument("--broker-list", metavar="<String: HOST1:PORT1,...,HOST3:PORT3>",
                   help="DEPRECATED, use --bootstrap-server instead; ignored if --bootstrap-server is specified.")
    p.add_argument("--topic", metavar="<String: topic>",
                   help="The topic to get the offsets for. It also accepts a regular expression. If not present, "
                        "all authorized topics are queried. Cannot be used if --topic-partitions is present.")
    p.add_argument("--partitions", metavar="<String: partition ids>",
                   help="Comma separated list of partition ids to get the offsets for. If not present, all "
                        "partitions of the authorized topics are queried. Cannot be used if --topic-partitions "
                        "is present.")
    p.add_argument("--topic-partitions", metavar="<String: topic1:1,topic2:0-3,topic3,topic4:5-,topic5:-3>",
                   help="Comma separated list of topic-partition patterns to get the offsets for, with the format "
                        "of: ([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")
    p.add_argument("--time", default="-1", metavar="<String: <timestamp> / -1 or latest / -2 or earliest / -3 or "
                                                   "max-timestamp>",
                   help="timestamp of the offsets before that. (default: -1)")
    p.add_argument("--command-config", metavar="<String: config file>",
                   help="Property file containing configs to be passed to Admin Client.")
    p.add_argument("--exclude-internal-topics", action="store_true",
                   help="By default, internal topics are included. If specified, internal topics are excluded.")
    return p


def parse_time(text: str) -> int:
    if text in TIMES:
        return TIMES[text]
    try:
        value = int(text)
    except ValueError:
        raise ToolError(f"Malformed time argument {text}. Please use -1 or latest / -2 or earliest / -3 or "
                        "max-timestamp / -4 or earliest-local / -5 or latest-tiered, or a specified long "
                        "format timestamp") from None
    return value


def parse_partition_set(text: str):
    """'0,2-4,7-' -> predicate on partition ids."""
    ranges = []
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d*)-(\d*)|(\d+)", part)
        if not part or not m:
            raise ToolError(f"Invalid partition '{part}' specified in --partitions")
        if m.group(3) is not None:
            ranges.append((int(m.group(3)), int(m.group(3)) + 1))
        else:
            lo = int(m.group(1)) if m.group(1) else 0
            hi = int(m.group(2)) if m.group(2) else 2**31
            if hi <= lo and m.group(2):
                raise ToolError(f"Invalid range '{part}': upper bound must be greater than lower bound")
            ranges.append((lo, hi))
    return lambda p: any(lo <= p < hi for lo, hi in ranges)


def partition_ids(text: str):
    """--partitions: ids only, as Kafka's createPartitionSet (ranges are --topic-partitions')."""
    ids = set()
    for part in java_split(re.compile(","), text):
        value = java_int(part)
        if value is None:
            raise ToolError(f"--partitions expects a comma separated list of numeric partition ids, "
                            f"but received: {text}")
        ids.add(value)
    return lambda p: p in ids


def build_filters(opts) -> list:
    """[(topic regex, partition predicate)]."""
    if opts.topic_partitions:
        if opts.topic or opts.partitions:
            raise ToolError("--topic-partitions cannot be used with --topic or --partitions")
        out = []
        for item in _split_topic_partitions(opts.topic_partitions):
            topic, sep, parts = item.partition(":")
            out.append((include_list(topic or ".*"), parse_partition_set(parts) if sep and parts else (lambda p: True)))
        return out
    predicate = partition_ids(opts.partitions) if opts.partitions else (lambda p: True)
    return [(include_list(opts.topic or ".*"), predicate)]


def _split_topic_partitions(text: str) -> list:
    """'t1:1,t2:0-3,t3' -> ['t1:1', 't2:0-3', 't3']: a comma starts a new entry unless it continues
    the partition list of the current one (a partition spec is digits and '-')."""
    items = []
    for token in text.split(","):
        if items and ":" in items[-1] and re.fullmatch(r"\d*-?\d*", token) and token:
            items[-1] += "," + token
        else:
            items.append(token)
    return items


async def run(opts) -> int:
    bootstrap = opts.bootstrap_server or opts.broker_list
    if not bootstrap:
        raise ToolError("Missing required argument \"[bootstrap-server]\"")
    timestamp = parse_time(opts.time)
    filters = build_filters(opts)
    props = read_properties(opts.command_config) if opts.command_config else {}
    async with ClusterClient(bootstrap, **client_kwargs(props)) as cluster:
        admin = Admin(cluster)
        topics = await admin.list_topics()
        wanted = []
        for name, meta in sorted(topics.items()):
            if opts.exclude_internal_topics and meta.is_internal:
                continue
            for p in sorted(meta.partitions):
                if any(rx.fullmatch(name) and pred(p) for rx, pred in filters):
                    wanted.append(TopicPartition(name, p))
        if not wanted:
            raise ToolError("Could not match any topic-partitions with the specified filters")
        try:
            results = await admin.list_offsets({tp: timestamp for tp in wanted})
        except (KafkaError, ClientError):
            # A partition without a leader (or with one that does not answer) fails the batch:
            # ask each on its own, so only those are skipped (Kafka's GetOffsetShell reads each
            # partition's result).
            results = {}
            for tp in wanted:
                try:
                    results.update(await admin.list_offsets({tp: timestamp}))
                except KafkaError as e:
                    results[tp] = e.error_code
                except ClientError:
                    results[tp] = ErrorCode.REQUEST_TIMED_OUT
        # Kafka prints them ordered by the text "topic-partition" (t-10 before t-2).
        for tp in sorted(wanted, key=lambda tp: f"{tp.topic}-{tp.partition}"):
            r = results.get(tp)
            code = r if isinstance(r, int) else (r.error_code if r is not None else None)
            if code:
                sys.stderr.write(f"Skip getting offsets for topic-partition {tp.topic}-{tp.partition} due "
                                 f"to error: {exception_class(code)}: {error_text(code)}\n")
            elif r is not None and r.offset >= 0:
                print(f"{tp.topic}:{tp.partition}:{r.offset}")
    return 0


def main(argv=None):
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main_entry(main, ERROR_PREFIX)
