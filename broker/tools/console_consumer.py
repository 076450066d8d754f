"""kafka-console-consumer.sh: consume records and print them to stdout.

Kafka's rules: ``--topic`` (or ``--include`` regex) subscribes with a consumer group (``--group``, or
a generated ``console-consumer-NNNNN`` group with auto-commit off); ``--partition`` assigns that one
partition instead, starting at ``--offset`` (earliest, latest or a number; default latest, or earliest
with ``--from-beginning``). ``--max-messages`` and ``--timeout-ms`` bound the run; at the end
``Processed a total of N messages`` goes to stderr.

The default formatter prints, in this order and separated by ``key.separator`` (TAB):
``CreateTime:<ts>`` (print.timestamp), ``Partition:<p>`` (print.partition), ``Offset:<o>``
(print.offset), ``h1:v1,h2:v2`` or ``NO_HEADERS`` (print.headers), the key (print.key), the value
(print.value, default on), then ``line.separator``; nulls print as ``null.literal`` ("null").
``--formatter`` also accepts Kafka's __consumer_offsets and __transaction_state formatters
(broker/tools/formatters.py: Kafka 3.9's JSON ones, and the deprecated Scala names with their text
and Kafka's deprecation warning) and NoOpMessageFormatter.
"""
from __future__ import annotations

import asyncio
import random
import re
import signal
import struct
import sys

from broker.client.cluster import ClusterClient
from broker.client.consumer import Consumer
from broker.client.types import TopicPartition
from broker.tools import formatters
from broker.tools.common import (TerseError, ToolError, ToolParser, client_kwargs, compile_pattern,
                                 consumer_kwargs, main_entry, parse_key_values, read_properties)
from broker.tools.javautil import java_hash_order, java_string_hash

DEFAULT_FORMATTERS = ("org.apache.kafka.tools.consumer.DefaultMessageFormatter", "kafka.tools.DefaultMessageFormatter")
NOOP_FORMATTERS = ("org.apache.kafka.tools.consumer.NoOpMessageFormatter", "kafka.tools.NoOpMessageFormatter")
# Kafka 3.9's ConsoleConsumerOptions.convertDeprecatedClass: these names still work, with a warning.
DEPRECATED_FORMATTERS = {DEFAULT_FORMATTERS[1]: DEFAULT_FORMATTERS[0], NOOP_FORMATTERS[1]: NOOP_FORMATTERS[0],
                         **formatters.LEGACY_FORMATTERS}


def build_parser() -> ToolParser:
    p = ToolParser("kafka-console-consumer.sh", "This tool helps to read data from Kafka topics and outputs it "
                   "to standard output.")
    p.add_argument("--bootstrap-server", required=True, metavar="<String: server to connect to>",
                   help="REQUIRED: The server(s) to connect to.")
    p.add_argument("--topic", metavar="<String: topic>", help="The topic to consume on.")
    p.add_argument("--include", "--whitelist", dest="include", metavar="<String: Java regex (String)>",
                   help="Regular expression specifying list of topics to include for consumption.")
    p.add_argument("--partition", type=int, metavar="<Integer: partition>",
                   help="The partition to consume from. Consumption starts from the end of the partition unless "
                        "'--offset' is specified.")
    p.add_argument("--offset", metavar="<String: consume offset>",
                   help="The offset to consume from (a non-negative number), or 'earliest' which means from "
                        "beginning, or 'latest' which means from end (default: latest)")
    p.add_argument("--group", metavar="<String: consumer group id>", help="The consumer group id of the consumer.")
    p.add_argument("--from-beginning", action="store_true",
                   help="If the consumer does not already have an established offset to consume from, start with "
                        "the earliest message present in the log rather than the latest message.")
    p.add_argument("--max-messages", type=int, metavar="<Integer: num_messages>",
                   help="The maximum number of messages to consume before exiting. If not set, consumption is "
                        "continual.")
    p.add_argument("--timeout-ms", type=int, metavar="<Integer: timeout_ms>",
                   help="If specified, exit if no message is available for consumption for the specified interval.")
    p.add_argument("--isolation-level", default="read_uncommitted", metavar="<String>",
                   help="Set to read_committed in order to filter out transactional messages which are not "
                        "committed. Set to read_uncommitted to read all messages. (default: read_uncommitted)")
    p.add_argument("--consumer-property", action="append", metavar="<String: consumer_prop>",
                   help="A mechanism to pass user-defined properties in the form key=value to the consumer.")
    p.add_argument("--consumer.config", "--command-config", dest="consumer_config", metavar="<String: config file>",
                   help="Consumer config properties file. Note that [consumer-property] takes precedence.")
    p.add_argument("--formatter", default=DEFAULT_FORMATTERS[0], metavar="<String: class>",
                   help="The name of a class to use for formatting kafka messages for display. "
                        "(default: org.apache.kafka.tools.consumer.DefaultMessageFormatter)")
    p.add_argument("--formatter-config", metavar="<String: config file>",
                   help="Config properties file to initialize the message formatter.")
    p.add_argument("--property", action="append", metavar="<String: prop>",
                   help="The properties to initialize the message formatter: print.timestamp, print.key, "
                        "print.offset, print.partition, print.headers, print.value, key.separator, line.separator, "
                        "headers.separator, null.literal, key.deserializer, value.deserializer, headers.deserializer")
    p.add_argument("--skip-message-on-error", action="store_true",
                   help="If there is an error when processing a message, skip it instead of halt.")
    p.add_argument("--key-deserializer", metavar="<String: deserializer for key>", help="Key deserializer class.")
    p.add_argument("--value-deserializer", metavar="<String: deserializer for values>",
                   help="Value deserializer class.")
    p.add_argument("--enable-systest-events", action="store_true",
                   help="Log lifecycle events of the consumer in addition to logging consumed messages.")
    return p


def deserializer(class_name: str | None):
    """bytes -> bytes to print, after Kafka's deserializer of that class name."""
    name = (class_name or "StringDeserializer").rsplit(".", 1)[-1]
    if name in ("StringDeserializer", "ByteArrayDeserializer", "BytesDeserializer", "ByteBufferDeserializer"):
        return lambda b: bytes(b)
    if name in ("LongDeserializer", "IntegerDeserializer", "ShortDeserializer"):
        fmt = {"LongDeserializer": ">q", "IntegerDeserializer": ">i", "ShortDeserializer": ">h"}[name]
        return lambda b: str(struct.unpack(fmt, bytes(b))[0]).encode()
    if name in ("DoubleDeserializer", "FloatDeserializer"):
        fmt = ">d" if name == "DoubleDeserializer" else ">f"
        return lambda b: repr(struct.unpack(fmt, bytes(b))[0]).encode()
    if name == "UUIDDeserializer":
        return lambda b: bytes(b)
    raise ToolError(f"Unknown deserializer class {class_name}")


_ESCAPES = {"\\t": "\t", "\\n": "\n", "\\r": "\r", "\\\\": "\\"}


def unescape(text: str) -> str:
    """``\\t``, ``\\n``, ``\\r`` and ``\\\\`` in a separator property become the characters (a
    convenience over Kafka, which takes the text as is); everything else, non-ASCII included, is kept."""
    return re.sub(r"\\[tnr\\]", lambda m: _ESCAPES[m.group(0)], text)


class DefaultFormatter:
    def __init__(self, props: dict, key_deserializer=None, value_deserializer=None):
        flag = lambda k, d="false": props.get(k, d).strip().lower() == "true"  # noqa: E731
        self.print_timestamp = flag("print.timestamp")
        self.print_key = flag("print.key")
        self.print_offset = flag("print.offset")
        self.print_partition = flag("print.partition")
        self.print_headers = flag("print.headers")
        self.print_value = flag("print.value", "true")
        self.key_separator = unescape(props.get("key.separator", "\t")).encode()
        self.line_separator = unescape(props.get("line.separator", "\n")).encode()
        self.headers_separator = unescape(props.get("headers.separator", ",")).encode()
        self.null_literal = props.get("null.literal", "null").encode()
        self.key_deser = deserializer(props.get("key.deserializer", key_deserializer))
        self.value_deser = deserializer(props.get("value.deserializer", value_deserializer))
        self.headers_deser = deserializer(props.get("headers.deserializer"))

    def _value(self, deser, data) -> bytes:
        return self.null_literal if data is None else deser(data)

    def format(self, r) -> bytes:
        out = []
        cols = [self.print_timestamp, self.print_partition, self.print_offset, self.print_headers,
                self.print_key, self.print_value]

        def sep(i):
            out.append(self.key_separator if any(cols[i + 1:]) else self.line_separator)
        if self.print_timestamp:
            kind = "LogAppendTime" if r.timestamp_type == 1 else "CreateTime"
            out.append(f"{kind}:{r.timestamp}".encode() if r.timestamp >= 0 else b"NO_TIMESTAMP")
            sep(0)
        if self.print_partition:
            out.append(f"Partition:{r.partition}".encode())
            sep(1)
        if self.print_offset:
            out.append(f"Offset:{r.offset}".encode())
            sep(2)
        if self.print_headers:
            if r.headers:
                out.append(self.headers_separator.join(k.encode() + b":" + self._value(self.headers_deser, v)
                                                       for k, v in r.headers))
            else:
                out.append(b"NO_HEADERS")
            sep(3)
        if self.print_key:
            out.append(self._value(self.key_deser, r.key))
            sep(4)
        if self.print_value:
            out.append(self._value(self.value_deser, r.value))
            out.append(self.line_separator)
        return b"".join(out)


def make_formatter(opts, props: dict):
    name = opts.formatter
    if name in DEPRECATED_FORMATTERS:
        sys.stderr.write(f"WARNING: {name} is deprecated and will be removed in the next major release. "
                         f"Please use {DEPRECATED_FORMATTERS[name]} instead\n")
    if name in DEFAULT_FORMATTERS:
        return DefaultFormatter(props, opts.key_deserializer, opts.value_deserializer).format
    if name in NOOP_FORMATTERS:
        return lambda r: b""
    internal = formatters.internal_formatter(name)
    if internal is not None:
        def fmt(r):
            line = internal(r.key, r.value)
            return b"" if line is None else line.encode() + b"\n"
        return fmt
    raise ToolError(f"Unknown formatter class {name}")


def check_args(opts) -> None:
    if bool(opts.topic) == bool(opts.include):
        raise ToolError("Exactly one of --include/--topic is required.")
    if opts.partition is not None and not opts.topic:
        raise ToolError("The topic is required when partition is specified.")
    if opts.offset is not None and opts.partition is None:
        raise ToolError("The partition is required when offset is specified.")
    if opts.from_beginning and opts.offset is not None:
        raise ToolError("Options from-beginning and offset cannot be specified together.")
    if opts.group and opts.partition is not None:
        raise ToolError("Options group and partition cannot be specified together.")
    if opts.offset is not None:
        opts.offset = opts.offset.lower() if opts.offset.lower() in ("earliest", "latest") \
            else opts.offset               # Kafka's parseOffset lower-cases the value first
    # Kafka: --max-messages -1 and a negative --timeout-ms mean no limit
    if opts.max_messages is not None and opts.max_messages < 0:
        opts.max_messages = None
    if opts.timeout_ms is not None and opts.timeout_ms < 0:
        opts.timeout_ms = None
    if opts.offset is not None and opts.offset not in ("earliest", "latest"):
        if not opts.offset.isdigit():
            raise ToolError(f"The provided offset value '{opts.offset}' is incorrect. Valid values are "
                            "'earliest', 'latest', or a non-negative long.")
    if opts.include:
        compile_pattern(opts.include)
    if opts.isolation_level not in ("read_committed", "read_uncommitted"):
        raise ToolError(f"Invalid value {opts.isolation_level} for configuration isolation.level")


def check_consumer_props(opts, from_file: dict, extra: dict) -> None:
    """Kafka's checkConsumerGroup and setAutoOffsetResetValue: one group id wherever it is
    given, none with --partition, and --from-beginning agreeing with auto.offset.reset."""
    given = []
    for value in (opts.group, from_file.get("group.id"), extra.get("group.id")):
        if value is not None and value not in given:
            given.append(value)
    if len(given) > 1:
        detected = ", ".join(f"'{g}'" for g in java_hash_order(given, java_string_hash))
        raise ToolError("The group ids provided in different places (directly using '--group', via "
                        "'--consumer-property', or via '--consumer.config') do not match. Detected "
                        f"group ids: {detected}")
    if given and opts.partition is not None:
        raise ToolError("Options group and partition cannot be specified together.")
    reset = extra.get("auto.offset.reset", from_file.get("auto.offset.reset"))
    if reset is not None and opts.from_beginning and reset != "earliest":
        raise TerseError(f"Can't simultaneously specify --from-beginning and "
                         f"'auto.offset.reset={reset}', please remove one option")


async def run(opts) -> int:
    check_args(opts)
    props = read_properties(opts.consumer_config) if opts.consumer_config else {}
    extra = parse_key_values(opts.consumer_property, "consumer property")
    check_consumer_props(opts, props, extra)
    props.update(extra)
    props.setdefault("client.id", "console-consumer")     # Kafka's ConsoleConsumerOptions
    fmt_props = read_properties(opts.formatter_config) if opts.formatter_config else {}
    fmt_props.update(parse_key_values(opts.property, "property"))
    formatter = make_formatter(opts, fmt_props)
    group = opts.group or props.get("group.id")
    auto_commit = props.get("enable.auto.commit", "true").lower() == "true"
    if group is None and opts.partition is None:
        group = f"console-consumer-{random.randrange(100000)}"
        auto_commit = props.get("enable.auto.commit", "false").lower() == "true"
    reset = props.get("auto.offset.reset", "earliest" if opts.from_beginning else "latest")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    count = 0
    started = False     # the count is reported once consuming began (a setup failure stays one line)
    out = sys.stdout.buffer
    async with ClusterClient(opts.bootstrap_server, **client_kwargs(props)) as cluster:
        settings = dict(isolation_level=opts.isolation_level, assignors=["range", "cooperative-sticky"])
        settings.update(consumer_kwargs(props))
        settings.update(group_id=group, auto_offset_reset=reset, enable_auto_commit=auto_commit)
        consumer = Consumer(cluster, **settings)
        try:
            if opts.partition is not None:
                tp = TopicPartition(opts.topic, opts.partition)
                meta = await cluster.topic_metadata(opts.topic)
                if opts.partition not in meta.partitions:
                    raise ToolError(f"Partition {opts.partition} of topic {opts.topic} does not exist")
                consumer.assign([tp])
                offset = opts.offset or ("earliest" if opts.from_beginning else "latest")
                if offset == "earliest":
                    await consumer.seek_to_beginning([tp])
                elif offset == "latest":
                    await consumer.seek_to_end([tp])
                else:
                    consumer.seek(tp, int(offset))
            elif opts.topic:
                consumer.subscribe([opts.topic])
            else:
                consumer.subscribe(pattern=opts.include)
            started = True
            unprinted = []              # polled but not printed (--max-messages reached)
            idle_deadline = None if opts.timeout_ms is None else loop.time() + opts.timeout_ms / 1000
            while not stop.is_set():
                if opts.max_messages is not None and count >= opts.max_messages:
                    break
                wait = 0.2 if idle_deadline is None else max(0.0, min(0.2, idle_deadline - loop.time()))
                records = await consumer.poll(timeout_ms=int(wait * 1000))
                if records:
                    for i, r in enumerate(records):
                        if opts.max_messages is not None and count >= opts.max_messages:
                            unprinted = records[i:]
                            break
                        try:
                            out.write(formatter(r))
                        except (ValueError, struct.error) as e:
                            if not opts.skip_message_on_error:
                                raise ToolError(f"Error processing message, terminating consumer process: {e}")
                        count += 1
                    out.flush()
                    if idle_deadline is not None:
                        idle_deadline = loop.time() + opts.timeout_ms / 1000
                elif idle_deadline is not None and loop.time() >= idle_deadline:
                    break
        finally:
            if started:
                consumer.rewind_unconsumed(unprinted)      # the group's commit skips nothing
            try:
                await asyncio.wait_for(consumer.close(), 10)
            except asyncio.TimeoutError:
                pass
            out.flush()
            if started:
                sys.stderr.write(f"Processed a total of {count} messages\n")
    return 0


def main(argv=None):
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main_entry(main)
