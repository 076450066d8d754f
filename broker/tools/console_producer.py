"""kafka-console-producer.sh: read lines from stdin and produce them as records.

Each line is one record (Kafka's LineMessageReader). With ``--property parse.key=true`` the line is
``key<key.separator>value`` (separator default TAB); with ``parse.headers=true`` it starts with
``h1:v1,h2:v2<headers.delimiter>`` (delimiter TAB, separator ",", key separator ":"); ``null.marker``
turns a key, value or header value equal to it into null. A line without the separator is an error
(``No key separator found on line number N: '...'``) unless ``ignore.error=true``.
``--sync`` waits for each record's acknowledgement and stops at the first failure (exit 1);
otherwise records are batched (``--timeout`` is linger.ms, ``--batch-size``) and a failure is
reported on stderr per record and the tool goes on, exit status 0, as Kafka's does.
"""
from __future__ import annotations

import asyncio
import re
import sys

from protocol.errors import KafkaError

from broker.client.cluster import ClusterClient
from broker.client.errors import ClientError
from broker.client.producer import Producer
from broker.client.transaction_manager import TransactionError
from broker.tools.common import (ToolError, ToolParser, client_kwargs, main_entry, parse_key_values, producer_kwargs,
                                 read_properties)
from broker.tools.javautil import java_split


def build_parser() -> ToolParser:
    p = ToolParser("kafka-console-producer.sh", "This tool helps to read data from standard input and publish "
                   "it to Kafka.")
    p.add_argument("--bootstrap-server", metavar="<String: server to connect to>",
                   help="REQUIRED unless --broker-list(deprecated) is specified. The server(s) to connect to.")
    p.add_argument("--broker-list", metavar="<String: broker-list>",
                   help="DEPRECATED, use --bootstrap-server instead; ignored if --bootstrap-server is specified.")
    p.add_argument("--topic", required=True, metavar="<String: topic>",
                   help="REQUIRED: The topic id to produce messages to.")
    p.add_argument("--batch-size", type=int, default=None, metavar="<Integer: size>",
                   help="Number of messages to send in a single batch if they are not being sent synchronously.")
    p.add_argument("--compression-codec", nargs="?", const="gzip", metavar="[String: compression-codec]",
                   help="The compression codec: either 'none', 'gzip', 'snappy', 'lz4', or 'zstd'. If specified "
                        "without value, then it defaults to 'gzip'")
    p.add_argument("--line-reader", metavar="<String: reader_class>",
                   help="Accepted for compatibility: only kafka.tools.LineMessageReader is available.")
    p.add_argument("--max-block-ms", type=int, default=None, metavar="<Long: max block on send>",
                   help="The max time that the producer will block for during a send request.")
    p.add_argument("--max-memory-bytes", type=int, default=None, metavar="<Long: total memory in bytes>",
                   help="The total memory used by the producer to buffer records waiting to be sent to the server.")
    p.add_argument("--max-partition-memory-bytes", type=int, default=None, metavar="<Integer: memory in bytes per partition>",
                   help="The buffer size allocated for a partition.")
    p.add_argument("--message-send-max-retries", type=int, default=None, metavar="<Integer>",
                   help="Number of times a send is retried before giving up.")
    p.add_argument("--metadata-expiry-ms", type=int, default=300000, metavar="<Long: metadata expiration interval>",
                   help="The period of time in milliseconds after which we force a refresh of metadata.")
    p.add_argument("--producer-property", action="append", metavar="<String: producer_prop>",
                   help="A mechanism to pass user-defined properties in the form key=value to the producer.")
    p.add_argument("--producer.config", "--command-config", dest="producer_config", metavar="<String: config file>",
                   help="Producer config properties file. Note that [producer-property] takes precedence.")
    p.add_argument("--property", action="append", metavar="<String: prop>",
                   help="A mechanism to pass user-defined properties in the form key=value to the message reader: "
                        "parse.key, key.separator, parse.headers, headers.delimiter, headers.separator, "
                        "headers.key.separator, ignore.error, null.marker.")
    p.add_argument("--reader-config", metavar="<String: config file>",
                   help="Config properties file for the message reader. Note that [property] takes precedence.")
    p.add_argument("--request-required-acks", default=None, metavar="<String: request required acks>",
                   help="The required acks of the producer requests (default: -1)")
    p.add_argument("--request-timeout-ms", type=int, default=None, metavar="<Integer: request timeout ms>",
                   help="The ack timeout of the producer requests. Value must be non-negative and non-zero.")
    p.add_argument("--retry-backoff-ms", type=int, default=None, metavar="<Long>",
                   help="Before each retry, the producer refreshes the metadata of relevant topics.")
    p.add_argument("--socket-buffer-size", type=int, default=102400, metavar="<Integer: size>",
                   help="The size of the tcp RECV size. (accepted for compatibility)")
    p.add_argument("--sync", action="store_true",
                   help="If set message send requests to the brokers are synchronously, one at a time as they arrive.")
    p.add_argument("--timeout", type=int, default=None, metavar="<Long: timeout_ms>",
                   help="If set and the producer is running in asynchronous mode, this gives the maximum amount of "
                        "time a message will queue awaiting sufficient batch size. The value is given in ms.")
    return p


class LineReader:
    """Kafka's LineMessageReader (3.9): one line -> (key, value, headers).

    As Kafka's: `headers.separator` is a regular expression split as Java's String.split does
    it (an empty header section is one empty pair, so an error unless ignore.error); a header
    section equal to the null marker means no headers; `null.marker` may be empty (then empty
    keys, values and header values are null); separators that collide are refused when the
    reader is configured."""

    def __init__(self, props: dict):
        truthy = lambda k: props.get(k, "false").strip().lower() == "true"  # noqa: E731
        self.parse_key = truthy("parse.key")
        self.key_separator = props.get("key.separator", "\t")
        self.parse_headers = truthy("parse.headers")
        self.headers_delimiter = props.get("headers.delimiter", "\t")
        self.headers_separator = props.get("headers.separator", ",")
        self.headers_key_separator = props.get("headers.key.separator", ":")
        self.ignore_error = truthy("ignore.error")
        self.null_marker = props.get("null.marker")
        try:
            self.headers_pattern = re.compile(self.headers_separator)
        except re.error as exc:
            raise ToolError(f"Invalid headers.separator '{self.headers_separator}': {exc}") from None
        for (name_a, a), (name_b, b) in (
                (("headers.delimiter", self.headers_delimiter), ("headers.separator", self.headers_separator)),
                (("headers.delimiter", self.headers_delimiter),
                 ("headers.key.separator", self.headers_key_separator)),
                (("headers.separator", self.headers_separator),
                 ("headers.key.separator", self.headers_key_separator)),
                (("null.marker", self.null_marker), ("key.separator", self.key_separator)),
                (("null.marker", self.null_marker), ("headers.separator", self.headers_separator)),
                (("null.marker", self.null_marker), ("headers.delimiter", self.headers_delimiter)),
                (("null.marker", self.null_marker),
                 ("headers.key.separator", self.headers_key_separator))):
            if a == b:
                raise ToolError(f"{name_a} and {name_b} may not be equal")
        self.line_number = 0

    def _null(self, text: str | None):
        if text is None or text == self.null_marker:
            return None
        return text.encode("utf-8")

    def _until(self, enabled: bool, line: str, start: int, separator: str, what: str):
        """The text from `start` to `separator` (None: not parsed, or missing and ignored)."""
        if not enabled:
            return None
        index = line.find(separator, start)
        if index < 0:
            if self.ignore_error:
                return None
            raise ToolError(f"No {what} found on line number {self.line_number}: '{line}'")
        return line[start:index]

    def parse(self, line: str):
        self.line_number += 1
        head = self._until(self.parse_headers, line, 0, self.headers_delimiter, "headers delimiter")
        offset = 0 if head is None else len(head) + len(self.headers_delimiter)
        key = self._until(self.parse_key, line, offset, self.key_separator, "key separator")
        value = line[offset + (0 if key is None else len(key) + len(self.key_separator)):]
        headers = []
        if head is not None and head != self.null_marker:
            for pair in java_split(self.headers_pattern, head):
                k, sep, v = pair.partition(self.headers_key_separator)
                if not sep:
                    if not self.ignore_error:
                        raise ToolError(f"No header key separator found in pair '{pair}' on line number "
                                        f"{self.line_number}")
                    headers.append((pair, None))
                    continue
                if k == self.null_marker:
                    raise ToolError(f"Header keys should not be equal to the null marker '{self.null_marker}' "
                                    f"as they can't be null")
                headers.append((k, self._null(v)))
        return self._null(key), self._null(value), headers


# Flag -> the producer property it sets, and the flag's default (Kafka's ConsoleProducer merges
# them so, maybeMergeOptions: a flag on the command line wins, else the properties, else the
# default; in this order, so --max-partition-memory-bytes given wins over --batch-size).
FLAG_PROPERTIES = {"request_required_acks": "acks", "compression_codec": "compression.type", "timeout": "linger.ms",
                   "batch_size": "batch.size", "max_partition_memory_bytes": "batch.size",
                   "request_timeout_ms": "request.timeout.ms", "retry_backoff_ms": "retry.backoff.ms",
                   "message_send_max_retries": "retries", "max_block_ms": "max.block.ms",
                   "max_memory_bytes": "buffer.memory"}
# compression.type: Kafka 3.9 puts --compression-codec's value (none when not given) over any
# compression.type property; here the property holds unless the flag is given, as for the others.
FLAG_DEFAULTS = {"acks": "-1", "compression.type": "none", "linger.ms": 1000, "batch.size": 16384,
                 "request.timeout.ms": 1500, "retry.backoff.ms": 100, "retries": 3, "max.block.ms": 60000,
                 "buffer.memory": 33554432}


def producer_settings(opts) -> tuple[dict, dict]:
    """(Producer keyword arguments, all properties). As Kafka merges them: a flag given on the command
    line wins, then --producer-property, then --producer.config, then the flags' defaults."""
    props = dict(FLAG_DEFAULTS)
    props["client.id"] = "console-producer"              # Kafka's ConsoleProducer default
    props.update(read_properties(opts.producer_config) if opts.producer_config else {})
    props.update(parse_key_values(opts.producer_property, "producer property"))
    for dest, prop in FLAG_PROPERTIES.items():
        value = getattr(opts, dest)
        if value is not None:               # given on the command line (no flag defaults)
            props[prop] = value
    return producer_kwargs(props), props


LINE_READERS = ("kafka.tools.ConsoleProducer$LineMessageReader", "kafka.tools.LineMessageReader",
                "org.apache.kafka.tools.LineMessageReader")


async def _input_lines(stream, prompt: bool):
    """The lines of `stream` (bytes, without their newline). At a terminal, one read per line
    after a ">" prompt, as Kafka's; from a pipe or a file, whatever one read returns (up to 64
    KiB), split into lines, so a file of 200,000 lines is not 200,000 trips to the reading
    thread (that was three quarters of the tool's time); a line is never held back waiting
    for more input."""
    loop = asyncio.get_running_loop()
    if prompt:
        while True:
            sys.stdout.write(">")
            sys.stdout.flush()
            raw = await loop.run_in_executor(None, stream.readline)
            if not raw:
                return
            yield raw[:-1] if raw.endswith(b"\n") else raw
    pending = b""
    while True:
        chunk = await loop.run_in_executor(None, stream.read1, 1 << 16)
        if not chunk:
            if pending:
                yield pending
            return
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        for line in lines:
            yield line


async def run(opts) -> int:
    if opts.line_reader is not None and opts.line_reader not in LINE_READERS:
        raise ToolError(f"Unknown line reader class {opts.line_reader}: only Kafka's LineMessageReader is available")
    bootstrap = opts.bootstrap_server or opts.broker_list
    if not bootstrap:
        raise ToolError("Missing required argument \"[bootstrap-server]\"")
    reader_props = read_properties(opts.reader_config) if opts.reader_config else {}
    reader_props.update(parse_key_values(opts.property, "property"))
    reader = LineReader(reader_props)
    settings, props = producer_settings(opts)
    prompt = sys.stdin.isatty()
    loop = asyncio.get_running_loop()
    async with ClusterClient(bootstrap, **client_kwargs(props)) as cluster:
        producer = Producer(cluster, **settings)

        def report(future, topic=opts.topic, key=None, value=None):
            # Kafka's ErrorLoggingCallback: the send failed, the tool goes on (and exits 0)
            if not future.cancelled() and future.exception() is not None:
                sys.stderr.write(f"ERROR Error when sending message to topic {topic} with key: "
                                 f"{'null' if key is None else f'{len(key)} bytes'}, value: "
                                 f"{'null' if value is None else f'{len(value)} bytes'} with error: "
                                 f"{future.exception()}\n")
        try:
            async for raw in _input_lines(sys.stdin.buffer, prompt):
                line = raw.decode("utf-8", errors="replace").rstrip("\r")
                key, value, headers = reader.parse(line)
                try:
                    future = await producer.send(opts.topic, value, key, headers)
                except TransactionError:
                    raise       # Java's IllegalStateException (a transactional.id): exit 1
                except (KafkaError, ClientError) as exc:
                    # refused before it was sent (too large, no such topic): Kafka's doSend
                    # returns a failed future, so the same as a failed send
                    future = loop.create_future()
                    future.set_exception(exc)
                if opts.sync:
                    # Kafka's send(record).get(): the first failure ends the tool, exit 1
                    await producer.flush()   # one record at a time: do not wait for linger.ms
                    await asyncio.wait([future])
                    future.result()
                else:
                    future.add_done_callback(lambda f, k=key, v=value: report(f, key=k, value=v))
        finally:
            await producer.close()
    return 0


def main(argv=None):
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main_entry(main)
