"""Plumbing shared by the tools: argument parsing, error reporting, client construction.

Error policy (issue 6): a bad flag, an unreachable broker, an unknown topic or group ends the tool
with ONE line on stderr and a non-zero exit status, never a traceback. ``ToolParser.error`` does it
for argparse; ``run`` does it for everything raised while the tool runs (Kafka errors, client
errors, OS errors, bad values). ``--help`` is argparse's, listing every flag.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import re
import sys

from protocol.errors import ErrorCode, KafkaError

from broker.client.connection import CLIENT_SOFTWARE_VERSION
from broker.client.errors import ClientError
from broker.client.producer import CODECS
from broker.config import java_int


class ToolError(Exception):
    """A user-facing failure: the message is printed as is."""


class TerseError(ToolError):
    """Kafka's TerseException: its message alone, without the tool's "Error: " prefix."""


class ToolParser(argparse.ArgumentParser):
    """argparse with Kafka's conventions: no abbreviated flags, ``--version`` on every tool, a
    one-line error (exit 1) for a bad flag or value, and the description and every option on
    stderr, exit 1, when run with no argument at all (Kafka's printUsageAndExit through
    maybePrintHelpOrVersion; `no_args_help_exit` 0: the help on stdout, exit 0, as
    ProducerPerformance prints it; None: no such rule)."""

    def __init__(self, prog, description, *, version_flags=("--version",),
                 version_help="Display the version of these tools.", no_args_help_exit=1,
                 dash_values=(), **kw):
        super().__init__(prog=prog, description=description, allow_abbrev=False, **kw)
        self.add_argument(*version_flags, action="version", version=CLIENT_SOFTWARE_VERSION, help=version_help)
        self.no_args_help_exit = no_args_help_exit
        # Options whose value may start with a dash (an ISO duration "-PT1H"): as joptsimple
        # does for an option that requires an argument, the next word is the value.
        self.dash_values = frozenset(dash_values)

    zookeeper_refusal = ""               # set below: ZOOKEEPER_REMOVED

    def error(self, message):
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(1)

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        if not args and self.no_args_help_exit is not None:
            out = sys.stdout if self.no_args_help_exit == 0 else sys.stderr
            out.write(self.format_help())
            sys.exit(self.no_args_help_exit)
        if any(a == "--zookeeper" or a.startswith("--zookeeper=") for a in args):
            self.error(self.zookeeper_refusal)
        if self.dash_values:
            joined, i = [], 0
            while i < len(args):
                if args[i] in self.dash_values and i + 1 < len(args) and args[i + 1].startswith("-"):
                    joined.append(f"{args[i]}={args[i + 1]}")
                    i += 2
                else:
                    joined.append(args[i])
                    i += 1
            args = joined
        return super().parse_known_args(args, namespace)


# Kafka 3.0 removed --zookeeper from the admin tools (KIP-604 and its siblings): they talk to a
# broker, which talks to ZooKeeper. joptsimple then says "zookeeper is not a recognized option".
ZOOKEEPER_REMOVED = ("zookeeper is not a recognized option: Kafka 3.0 removed --zookeeper from "
                     "its tools, which talk to a broker instead; use --bootstrap-server "
                     "HOST:PORT")
ToolParser.zookeeper_refusal = ZOOKEEPER_REMOVED


def parse_java_int(text: str) -> int:
    """Java's Integer.parseInt (broker.config.java_int), with NumberFormatException's message as
    a ValueError where it fails."""
    value = java_int(text)
    if value is None:
        raise ValueError(f'For input string: "{text}"')
    return value


def integer_option(name: str):
    """argparse type of a joptsimple Integer option: its message for a value that is none."""
    def convert(text: str) -> int:
        try:
            return parse_java_int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"Cannot parse argument '{text}' of option {name}") from None
    convert.__name__ = "Integer"
    return convert


def add_bootstrap(parser: ToolParser, required: bool = True) -> None:
    parser.add_argument("--bootstrap-server", metavar="<String: server to connect to>", required=required,
                        help="REQUIRED: The Kafka server to connect to (host:port[,host:port...]).")
    parser.add_argument("--command-config", metavar="<String: command config property file>",
                        help="Property file containing configs to be passed to the admin/clients.")


def read_properties(path: str) -> dict:
    """A Java .properties file (key=value or key: value, # and ! comments) as a dict."""
    props = {}
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.strip()
            if not line or line[0] in "#!":
                continue
            for sep in ("=", ":"):
                if sep in line:
                    k, v = line.split(sep, 1)
                    props[k.strip()] = v.strip()
                    break
            else:
                props[line] = ""
    return props


def parse_key_values(items, what: str) -> dict:
    """['a=1', 'b=2'] -> dict; raises ToolError naming a malformed entry."""
    out = {}
    for item in items or ():
        if "=" not in item:
            raise ToolError(f"Invalid {what} '{item}': expected key=value")
        k, v = item.split("=", 1)
        out[k.strip()] = v
    return out


def include_list(raw: str) -> re.Pattern:
    """Kafka's TopicFilter.IncludeList: commas mean "or", spaces and surrounding quotes go
    ("t1,t2" names two topics)."""
    regex = re.sub(r"[\"']+$", "", re.sub(r"^[\"']+", "", raw.strip().replace(",", "|")
                                                       .replace(" ", "")))
    return compile_pattern(regex)


def compile_pattern(pattern: str) -> re.Pattern:
    """A topic regular expression given on the command line; a bad one is a one-line error."""
    try:
        return re.compile(pattern)
    except re.error as e:
        raise ToolError(f"Invalid regular expression '{pattern}': {e}") from None


# Kafka client properties the ClusterClient honours: property -> (keyword, parser).
CLIENT_PROPERTIES = {
    "client.id": ("client_id", str),
    "request.timeout.ms": ("request_timeout_ms", int),
    "default.api.timeout.ms": ("default_api_timeout_ms", int),
    "retry.backoff.ms": ("retry_backoff_ms", int),
    "retry.backoff.max.ms": ("retry_backoff_max_ms", int),
    "retries": ("retries", int),
}


def client_kwargs(props: dict) -> dict:
    """Client settings a tool honours from --command-config / --*-property. Other Kafka client
    properties are accepted and ignored, except a security protocol the client cannot speak."""
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol != "PLAINTEXT":
        raise ToolError(f"security.protocol={protocol} is not supported: these tools speak PLAINTEXT only")
    return _kwargs(props, CLIENT_PROPERTIES)


# The messages of Kafka's exceptions for the error codes the tools report per partition or group
# (org.apache.kafka.common.protocol.Errors), so that rows read as Kafka's do.
ERROR_TEXTS = {
    ErrorCode.OFFSET_OUT_OF_RANGE: "The requested offset is not within the range of offsets maintained by the server.",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    ErrorCode.NOT_LEADER_OR_FOLLOWER: "For requests intended only for the leader, this error indicates that the broker "
                                      "is not the current leader. For requests intended for any replica, this error "
                                      "indicates that the broker is not a replica of the topic partition.",
    ErrorCode.LEADER_NOT_AVAILABLE: "There is no leader for this topic-partition as we are in the middle of a "
                                    "leadership election.",
    ErrorCode.REQUEST_TIMED_OUT: "The request timed out.",
    ErrorCode.INVALID_TOPIC_EXCEPTION: "The request attempted to perform an operation on an invalid topic.",
    ErrorCode.NOT_ENOUGH_REPLICAS: "Messages are rejected since there are fewer in-sync replicas than required.",
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
    ErrorCode.NOT_CONTROLLER: "This is not the correct controller for this cluster.",
    ErrorCode.KAFKA_STORAGE_ERROR: "Disk error when trying to access log file on the disk.",
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: "The preferred leader was not available.",
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: "Eligible topic partition leaders are not available.",
    ErrorCode.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition.",
    ErrorCode.POLICY_VIOLATION: "Request parameters do not satisfy the configured policy.",
    ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC: "Deleting offsets of a topic is forbidden while the "
                                         "consumer group is actively subscribed to it.",
    ErrorCode.GROUP_ID_NOT_FOUND: "The group id does not exist.",
    ErrorCode.NON_EMPTY_GROUP: "The group is not empty.",
}


def error_text(code) -> str:
    """Kafka's message for an error code (its name when the table has none)."""
    return ERROR_TEXTS.get(code, ErrorCode(code).name)


# The Java exception Kafka's tools print for an error code ("<class>: <message>").
# The exception class Kafka's Errors enum gives each code: its name in CamelCase (without a
# trailing _EXCEPTION or _ERROR) + "Exception", except these.
EXCEPTION_CLASSES = {
    ErrorCode.CORRUPT_MESSAGE: "CorruptRecordException",
    ErrorCode.REQUEST_TIMED_OUT: "TimeoutException",
    ErrorCode.MESSAGE_TOO_LARGE: "RecordTooLargeException",
    ErrorCode.STALE_CONTROLLER_EPOCH: "ControllerMovedException",
    ErrorCode.OFFSET_METADATA_TOO_LARGE: "OffsetMetadataTooLarge",
    ErrorCode.RECORD_LIST_TOO_LARGE: "RecordBatchTooLargeException",
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "TopicAuthorizationException",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "GroupAuthorizationException",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "ClusterAuthorizationException",
    ErrorCode.TOPIC_ALREADY_EXISTS: "TopicExistsException",
    ErrorCode.INVALID_CONFIG: "InvalidConfigurationException",
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: "OutOfOrderSequenceException",
    ErrorCode.DUPLICATE_SEQUENCE_NUMBER: "DuplicateSequenceException",
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: "InvalidPidMappingException",
    ErrorCode.INVALID_TRANSACTION_TIMEOUT: "InvalidTxnTimeoutException",
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "TransactionalIdAuthorizationException",
    ErrorCode.SASL_AUTHENTICATION_FAILED: "SaslAuthenticationException",
    ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED: "DelegationTokenDisabledException",
    ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED: "UnsupportedByAuthenticationException",
    ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED: "DelegationTokenAuthorizationException",
    ErrorCode.NON_EMPTY_GROUP: "GroupNotEmptyException",
    ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE: "PrincipalDeserializationException",
}


def exception_class(code) -> str:
    """org.apache.kafka.common.errors.<the exception Kafka's Errors gives `code`>."""
    found = EXCEPTION_CLASSES.get(code)
    if found is None:
        name = ErrorCode(code).name
        for suffix in ("_EXCEPTION", "_ERROR"):
            if name.endswith(suffix):
                name = name[:-len(suffix)]
                break
        found = "".join(word.capitalize() for word in name.split("_")) + "Exception"
    return "org.apache.kafka.common.errors." + found


# Kafka consumer properties the built-in Consumer honours: property -> (keyword, parser).
CONSUMER_PROPERTIES = {
    "group.instance.id": ("group_instance_id", str),
    "auto.offset.reset": ("auto_offset_reset", str),
    "enable.auto.commit": ("enable_auto_commit", lambda v: v.strip().lower() == "true"),
    "auto.commit.interval.ms": ("auto_commit_interval_ms", int),
    "isolation.level": ("isolation_level", str),
    "fetch.min.bytes": ("fetch_min_bytes", int),
    "fetch.max.wait.ms": ("fetch_max_wait_ms", int),
    "fetch.max.bytes": ("fetch_max_bytes", int),
    "max.partition.fetch.bytes": ("max_partition_fetch_bytes", int),
    "max.poll.records": ("max_poll_records", int),
    "session.timeout.ms": ("session_timeout_ms", int),
    "heartbeat.interval.ms": ("heartbeat_interval_ms", int),
    "max.poll.interval.ms": ("max_poll_interval_ms", int),
    "exclude.internal.topics": ("exclude_internal_topics", lambda v: v.strip().lower() == "true"),
    "metadata.max.age.ms": ("metadata_max_age_ms", int),
    "partition.assignment.strategy": ("assignors", lambda v: [s.strip().rsplit(".", 1)[-1] for s in v.split(",")
                                                              if s.strip()]),
}
# Kafka's class names for the assignors, as partition.assignment.strategy may give them.
ASSIGNOR_CLASSES = {"RangeAssignor": "range", "RoundRobinAssignor": "roundrobin", "StickyAssignor": "sticky",
                    "CooperativeStickyAssignor": "cooperative-sticky"}


def _acks(value: str) -> int:
    value = value.strip()
    if value not in ("all", "-1", "0", "1"):
        raise ToolError(f"Invalid value {value} for configuration acks: String must be one of: all, -1, 0, 1")
    return -1 if value == "all" else int(value)


class _Explained(ValueError):
    """A bad property value whose message follows Kafka's "Invalid value V for configuration
    P" after a colon (ConfigException(name, value, message))."""


def _boolean(value: str) -> bool:
    """Kafka's BOOLEAN config type: true or false, any case."""
    value = value.strip().lower()
    if value not in ("true", "false"):
        raise _Explained("Expected value to be either true or false")
    return value == "true"


def _codec(value: str) -> str:
    if value not in CODECS:
        raise ToolError(f"Invalid value {value} for configuration compression.type: "
                        f"String must be one of: {', '.join(CODECS)}")
    return value


# Kafka producer properties the built-in Producer honours: property -> (keyword, parser).
PRODUCER_PROPERTIES = {
    "acks": ("acks", _acks),
    "compression.type": ("compression_type", _codec),
    "linger.ms": ("linger_ms", int),
    "batch.size": ("batch_size", int),
    "max.request.size": ("max_request_size", int),
    "request.timeout.ms": ("request_timeout_ms", int),
    "delivery.timeout.ms": ("delivery_timeout_ms", int),
    "max.in.flight.requests.per.connection": ("max_in_flight", int),
    "retry.backoff.ms": ("retry_backoff_ms", int),
    "retries": ("retries", int),
    "enable.idempotence": ("enable_idempotence", _boolean),
    "transactional.id": ("transactional_id", str),
    "transaction.timeout.ms": ("transaction_timeout_ms", int),
    "max.block.ms": ("max_block_ms", int),
    "buffer.memory": ("buffer_memory", int),
}


def producer_kwargs(props: dict) -> dict:
    """Producer keyword arguments from Kafka producer properties (others are ignored)."""
    return _kwargs(props, PRODUCER_PROPERTIES)


def _kwargs(props: dict, table: dict) -> dict:
    out = {}
    for prop, (keyword, parse) in table.items():
        if prop in props:
            try:
                out[keyword] = parse(str(props[prop]))
            except ValueError as exc:
                why = f": {exc}" if isinstance(exc, _Explained) else ""
                raise ToolError(f"Invalid value {props[prop]} for configuration {prop}{why}") from None
    return out


def consumer_kwargs(props: dict) -> dict:
    """Consumer keyword arguments from Kafka consumer properties (others are ignored)."""
    out = _kwargs(props, CONSUMER_PROPERTIES)
    if "assignors" in out:
        out["assignors"] = [ASSIGNOR_CLASSES.get(a, a) for a in out["assignors"]]
    return out


def describe_error(e: BaseException) -> str:
    if isinstance(e, KafkaError):
        return e.message or ErrorCode(e.error_code).name
    if isinstance(e, FileNotFoundError):
        return f"{e.filename}: No such file or directory"
    return str(e) or type(e).__name__


def run(main, argv=None, error_prefix: str = "Error: ") -> int:
    """Run ``main(argv)`` (sync or async); turn every failure into one stderr line and exit 1."""
    try:
        result = main(argv)
        if asyncio.iscoroutine(result):
            try:
                import uvloop
                result = uvloop.run(result)
            except ImportError:
                result = asyncio.run(result)
        return int(result or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except TerseError as e:
        sys.stderr.write(f"{e}\n")
        return 1
    except (ToolError, KafkaError, ClientError, OSError, ValueError) as e:
        sys.stderr.write(f"{error_prefix}{describe_error(e)}\n")
        return 1
    except Exception as e:  # a bug: still one line, with its type so it can be reported
        sys.stderr.write(f"{error_prefix}{type(e).__name__}: {e}\n")
        return 1


def main_entry(main, error_prefix: str = "Error: ") -> None:
    """``if __name__ == '__main__': main_entry(main)``: the tool as its own process."""
    # Each record a tool sends or reads makes a few container objects, and CPython's default
    # thresholds (700, 10, 10) then run a collection every few hundred records, each full one
    # over every object the imports made too: 40 % of kafka-producer-perf-test.sh's time with
    # 200 B records. Collections every 50,000 allocations, the start-up objects left out of
    # them: 93k -> 121-128k records/s there. (Not in run(): tests call it in their process.)
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    code = run(main, sys.argv[1:], error_prefix)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    sys.exit(code)
