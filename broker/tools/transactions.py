"""kafka-transactions.sh: list and describe transactions, describe a partition's producers, find
hanging transactions and abort them (Kafka 3.9's TransactionsCommand, KIP-664).

The global flags come before the command, as argparse4j (Kafka's parser for this tool) wants them:
    kafka-transactions.sh --bootstrap-server HOST:PORT [--command-config FILE] COMMAND ...
    list [--duration-filter MS]                  ListTransactions to every broker
    describe --transactional-id ID               FindCoordinator (transaction), then DescribeTransactions
    describe-producers --topic T --partition P [--broker-id B]
                                                 DescribeProducers to the leader (or to broker B)
    abort --topic T --partition P (--start-offset O | --producer-id I --producer-epoch E --coordinator-epoch C)
                                                 an ABORT marker, by WriteTxnMarkers to the leader; with
                                                 --start-offset the producer is found by DescribeProducers
    find-hanging (--broker-id B | --topic T [--partition P]) [--max-transaction-timeout MINUTES]

find-hanging is Kafka's algorithm: DescribeProducers for the partitions searched (the broker's
replicas, or the topic's partitions) finds the transactions open longer than the maximum timeout
since their producer's last write; ListTransactions filtered by those producer ids names their
transactional ids; DescribeTransactions tells which partitions each coordinator still means to
write a marker to. An open transaction is hanging when its producer has no transactional id, the
id is unknown, or the coordinator's transaction does not include the partition.

Output, as Kafka prints it (ToolsUtils.prettyPrintTable): headers, then rows, each cell padded to
its column's widest value and followed by a TAB, the last one too. Rows come in the order Kafka's
Java maps hand them over (broker/tools/javautil.py). abort prints nothing when it works.

Errors, as Kafka's: a bad command line is argparse4j's line ("kafka-transactions.sh: error:
argument --topic is required", without the usage Kafka prints before it); a failed call is Kafka's
sentence, the cause's message and "Enable debug logging for additional detail.". Both on stderr,
exit status 1. Where Kafka's admin client would retry an unknown topic or partition until
default.api.timeout.ms, this tool reports it at once.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from collections import defaultdict
from contextlib import contextmanager

from protocol.errors import ErrorCode, KafkaError

from broker.client.admin import Admin
from broker.client.cluster import ClusterClient
from broker.client.errors import ClientError
from broker.client.types import TopicPartition
from broker.tools.common import (ToolError, ToolParser, client_kwargs, describe_error, error_text, main_entry,
                                 read_properties, ZOOKEEPER_REMOVED)
from broker.tools.javautil import copy_capacity, java_hash_order, java_int_hash, java_long_hash, java_string_hash, java_tp_hash

PROG = "kafka-transactions.sh"
ERROR_PREFIX = ""               # Kafka's messages stand alone, without "Error: "
MAX_BATCH_SIZE = 500            # find-hanging: topics or partitions per request (Kafka's)
# Kafka's admin TransactionState: any other name the broker sends shows as "Unknown".
STATES = frozenset({"Ongoing", "PrepareAbort", "PrepareCommit", "CompleteAbort", "CompleteCommit", "Empty",
                    "PrepareEpochFence"})

LIST_HEADERS = ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
DESCRIBE_HEADERS = ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions"]
PRODUCERS_HEADERS = ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                     "CurrentTransactionStartOffset"]
HANGING_HEADERS = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                   "LastTimestamp", "Duration(min)"]


# --- the command line: argparse4j's rules and words ---------------------------------------------

def _java_number(name: str, bits: int):
    """argparse4j's conversion to a Java Integer/Long/Short, with its message for a bad value."""
    low, high = -(1 << bits - 1), (1 << bits - 1) - 1

    def convert(text: str) -> int:
        digits = re.fullmatch(r"[+-]?[0-9]+", text) is not None
        if digits and low <= int(text) <= high:
            return int(text)
        if digits and name == "Short" and -(1 << 31) <= int(text) < 1 << 31:
            cause = f'Value out of range. Value:"{text}" Radix:10'
        else:
            cause = f'For input string: "{text}"'
        raise argparse.ArgumentTypeError(f"could not convert '{text}' to {name} ({cause})")
    return convert


INTEGER, LONG, SHORT = _java_number("Integer", 32), _java_number("Long", 64), _java_number("Short", 16)
_NEGATIVE_NUMBER = re.compile(r"-[0-9]+")


def _unknown_flag(parser: argparse.ArgumentParser, args) -> str | None:
    """The first flag ``parser`` does not know, before its command if it has one: argparse4j stops
    at it before checking anything else (argparse would first complain of a missing flag)."""
    takes_value = {s for a in parser._actions for s in a.option_strings if a.nargs is None}
    known = {s for a in parser._actions for s in a.option_strings}
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("-h", "--help", "-v", "--version", "--"):
            return None
        elif not arg.startswith("-") or _NEGATIVE_NUMBER.fullmatch(arg):
            if parser._subparsers is not None:
                return None
        elif arg.split("=", 1)[0] not in known:
            return arg
        else:
            skip = arg in takes_value
    return None


class TransactionsParser(ToolParser):
    """The tool's parser. argparse4j checks, in this order: an unknown flag (at once), the command,
    the command's values, a missing --bootstrap-server, then the command's missing flags, of which
    it names the last declared; each error is one line under the tool's name."""

    _bootstrap_missing = False

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        if any(a == "--zookeeper" or a.startswith("--zookeeper=") for a in args):
            self.error(ZOOKEEPER_REMOVED)          # as every tool here (broker/tools/common.py)
        unknown = _unknown_flag(self, args)
        if unknown is not None:
            self.error(f"unrecognized arguments: '{unknown}'")
        head, skip = [], False
        for arg in args:
            if not skip and not arg.startswith("-"):
                break
            head.append(arg)
            skip = not skip and arg in ("--bootstrap-server", "--command-config")
        self._bootstrap_missing = not any(a.split("=", 1)[0] == "--bootstrap-server" for a in head)
        return super().parse_known_args(args, namespace)

    def error(self, message):
        super().error(self._argparse4j_words(message))

    def _argparse4j_words(self, message: str) -> str:
        required = re.fullmatch(r"the following arguments are required: (.*)", message)
        if required:
            missing = required.group(1).split(", ")
            if "COMMAND" in missing:
                return "too few arguments"
            if self._bootstrap_missing:
                return "argument --bootstrap-server is required"
            return f"argument {missing[-1]} is required"
        extra = re.fullmatch(r"unrecognized arguments: ([^'].*)", message)
        if extra:
            words = extra.group(1).split(" ")
            return f"unrecognized arguments: '{words[0] if words[0].startswith('-') else extra.group(1)}'"
        return message.removeprefix("argument COMMAND: ")


class CommandParser(argparse.ArgumentParser):
    """A command's parser: its errors are reported by the tool's parser, under the tool's name."""

    def __init__(self, *, root: TransactionsParser, **kw):
        super().__init__(allow_abbrev=False, **kw)
        self._optionals.title = "optional arguments"
        self.root = root

    def parse_known_args(self, args=None, namespace=None):
        unknown = _unknown_flag(self, args or [])
        if unknown is not None:
            self.error(f"unrecognized arguments: '{unknown}'")
        return super().parse_known_args(args, namespace)

    def error(self, message):
        self.root.error(message)


def build_parser() -> TransactionsParser:
    p = TransactionsParser(PROG, "This tool is used to analyze the transactional state of producers in the "
                           "cluster. It can be used to detect and recover from hanging transactions.",
                           version_flags=("-v", "--version"),
                           version_help="show the version of this Kafka distribution and exit",
                           no_args_help_exit=None)     # argparse4j: "too few arguments"
    p._optionals.title = "optional arguments"          # argparse4j's heading (Python 3.10 says "options")
    # argparse4j's words for these two, not add_bootstrap's (joptsimple's, as Kafka's other tools)
    p.add_argument("--command-config", metavar="FILE",
                   help="property file containing configs to be passed to admin client")
    p.add_argument("--bootstrap-server", metavar="host:port", required=True,
                   help="hostname and port for the broker to connect to, in the form `host:port`  "
                        "(multiple comma-separated entries can be given)")
    commands = p.add_subparsers(dest="command", title="commands", metavar="COMMAND", required=True,
                                parser_class=CommandParser)

    def command(name, help, description=None):
        return commands.add_parser(name, help=help, description=description, root=p,
                                   prog=f"{PROG} --bootstrap-server host:port {name}")
    c = command("list", "list transactions")
    c.add_argument("--duration-filter", type=LONG,
                   help="Duration (in millis) to filter by: if < 0, all transactions will be returned; otherwise, "
                        "only transactions running longer than this duration will be returned")
    c = command("describe", "describe the state of an active transactional-id",
                "Describe the state of an active transactional-id.")
    c.add_argument("--transactional-id", required=True, help="transactional id")
    c = command("describe-producers", "describe the states of active producers for a topic partition")
    c.add_argument("--broker-id", type=INTEGER,
                   help="optional broker id to describe the producer state on a specific replica")
    c.add_argument("--topic", required=True, help="topic name")
    c.add_argument("--partition", type=INTEGER, required=True, help="partition number")
    c = command("abort", "abort a hanging transaction (requires administrative privileges)")
    c.add_argument("--topic", required=True, help="topic name")
    c.add_argument("--partition", type=INTEGER, required=True, help="partition number")
    g = c.add_argument_group("Brokers on versions 3.0 and above",
                             "For newer brokers, only the start offset of the transaction to be aborted is required")
    g.add_argument("--start-offset", type=LONG, help="start offset of the transaction to abort")
    g = c.add_argument_group("Brokers on versions older than 3.0",
                             "For older brokers, you must provide all of these arguments")
    g.add_argument("--producer-id", type=LONG, help="producer id")
    g.add_argument("--producer-epoch", type=SHORT, help="producer epoch")
    g.add_argument("--coordinator-epoch", type=INTEGER, help="coordinator epoch")
    c = command("find-hanging", "find hanging transactions")
    c.add_argument("--broker-id", type=INTEGER, help="broker id to search for hanging transactions")
    c.add_argument("--max-transaction-timeout", type=INTEGER, default=15,
                   help="maximum transaction timeout in minutes to limit the scope of the search "
                        "(15 minutes by default)")
    c.add_argument("--topic", help="topic name to limit search to (required if --partition is specified)")
    c.add_argument("--partition", type=INTEGER, help="partition number")
    return p


# --- Java's iteration order (broker/tools/javautil.py) ------------------------------------------

def describe_producers_order(tps: list) -> list:
    """DescribeProducersResult.all()'s order: ``new HashSet<>(tps)``, collected into a HashMap, copied
    into ``new HashMap<>(n)``."""
    keys = java_hash_order(tps, java_tp_hash, copy_capacity(len(tps)))
    keys = java_hash_order(keys, java_tp_hash)
    return java_hash_order(keys, java_tp_hash, len(keys))


# --- output and errors --------------------------------------------------------------------------

def print_table(headers: list, rows: list) -> None:
    """Kafka's ToolsUtils.prettyPrintTable: every cell padded to its column's width, then a TAB."""
    widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(headers)]
    for row in [headers, *rows]:
        print("".join(f"{cell:<{width}}\t" for cell, width in zip(row, widths)))


def explain(message: str, cause: str) -> str:
    """Kafka's printErrorAndExit(message, cause)."""
    return f"{message}: {cause}. Enable debug logging for additional detail."


@contextmanager
def failing(message: str):
    """A call that fails ends the tool with Kafka's line for it."""
    try:
        yield
    except (KafkaError, ClientError, OSError) as e:
        raise ToolError(explain(message, describe_error(e))) from None


def state_name(state: str) -> str:
    return state if state in STATES else "Unknown"


def epoch_or_none(value: int) -> int:
    """An OptionalInt/OptionalLong field printed with orElse(-1)."""
    return value if value >= 0 else -1


def now_ms() -> int:
    return int(time.time() * 1000)


def describe_transaction_error(transactional_id: str, code: int) -> str:
    """DescribeTransactionsHandler's exception messages."""
    prefix = f"DescribeTransactions request for transactionalId `{transactional_id}`"
    if code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        return f"{prefix} failed due to authorization failure"
    if code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
        return f"{prefix} failed because the ID could not be found"
    return f"{prefix} failed due to unexpected error"


def producers_error(tp: TopicPartition, result, broker_id: int | None) -> str:
    """DescribeProducersHandler's exception messages (an unknown partition: Kafka's exception's own)."""
    code = result.error_code
    if code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
        return f"Failed to describe active producers for partition {tp} on brokerId {broker_id}"
    if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return error_text(code)
    if code == ErrorCode.INVALID_TOPIC_EXCEPTION:
        return (f"Failed to fetch metadata for partition {tp} due to invalid topic error: "
                f"{result.error_message or error_text(code)}")
    if code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
        return (f"Failed to describe active producers for partition {tp} due to authorization failure on "
                f"topic `{tp.topic}`")
    return f"Failed to describe active producers for partition {tp} due to unexpected error"


def abort_error(spec: str, coordinator_epoch: int, code: int) -> str:
    """AbortTransactionHandler's exception messages."""
    if code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        return f"WriteTxnMarkers request with {spec} failed due to cluster authorization error"
    if code == ErrorCode.INVALID_PRODUCER_EPOCH:
        return f"WriteTxnMarkers request with {spec} failed due an invalid producer epoch"
    if code == ErrorCode.TRANSACTION_COORDINATOR_FENCED:
        return (f"WriteTxnMarkers request with {spec} failed since the provided coordinator epoch "
                f"{coordinator_epoch} has been fenced by the active coordinator")
    return f"WriteTxnMarkers request with {spec} failed due to unexpected error: {error_text(code)}"


def batches(items: list):
    for start in range(0, len(items), MAX_BATCH_SIZE):
        yield items[start:start + MAX_BATCH_SIZE]


# --- the commands -------------------------------------------------------------------------------

class TransactionsCommand:
    def __init__(self, admin: Admin, cluster: ClusterClient, opts):
        self.admin = admin
        self.cluster = cluster
        self.opts = opts

    async def list(self) -> None:
        duration = -1 if self.opts.duration_filter is None else self.opts.duration_filter
        with failing("Failed to list transactions"):
            by_broker = await self.admin.list_transactions(duration_filter_ms=duration)
        print_table(LIST_HEADERS, [[t.transactional_id, str(broker), str(t.producer_id), state_name(t.state)]
                                   for broker in java_hash_order(list(by_broker), java_int_hash)
                                   for t in by_broker[broker]])

    async def describe(self) -> None:
        tid = self.opts.transactional_id
        message = f"Failed to describe transaction state of transactional-id `{tid}`"
        with failing(message):
            d = (await self.admin.describe_transactions([tid]))[tid]
        if d.error_code:
            raise ToolError(explain(message, describe_transaction_error(tid, d.error_code)))
        if d.transaction_start_time_ms >= 0:
            start, duration = str(d.transaction_start_time_ms), str(now_ms() - d.transaction_start_time_ms)
        else:
            start = duration = "None"
        partitions = java_hash_order(list(dict.fromkeys(d.topic_partitions)), java_tp_hash)
        print_table(DESCRIBE_HEADERS, [[str(d.coordinator_id), tid, str(d.producer_id), str(d.producer_epoch),
                                        state_name(d.state), str(d.transaction_timeout_ms), start, duration,
                                        ",".join(map(str, partitions))]])

    async def producers_of(self, tp: TopicPartition, message: str, broker_id: int | None = None) -> list:
        with failing(message):
            result = (await self.admin.describe_producers([tp], broker_id=broker_id))[tp]
        if result.error_code:
            raise ToolError(explain(message, producers_error(tp, result, broker_id)))
        return result.producers

    async def describe_producers(self) -> None:
        o = self.opts
        tp = TopicPartition(o.topic, o.partition)
        where = "leader" if o.broker_id is None else f"broker {o.broker_id}"
        producers = await self.producers_of(tp, f"Failed to describe producers for partition {tp} on {where}",
                                            o.broker_id)
        print_table(PRODUCERS_HEADERS, [
            [str(p.producer_id), str(p.producer_epoch), str(epoch_or_none(p.coordinator_epoch)),
             str(p.last_sequence), str(p.last_timestamp),
             str(p.current_txn_start_offset) if p.current_txn_start_offset >= 0 else "None"]
            for p in producers])

    async def abort(self) -> None:
        o = self.opts
        tp = TopicPartition(o.topic, o.partition)
        if o.start_offset is None and o.producer_id is None:
            raise ToolError("The transaction to abort must be identified either with --start-offset (for brokers "
                            "on 3.0 or above) or with --producer-id, --producer-epoch, and --coordinator-epoch "
                            "(for older brokers)")
        if o.start_offset is None:
            if o.producer_epoch is None:
                raise ToolError("Missing required argument --producer-epoch")
            if o.coordinator_epoch is None:
                raise ToolError("Missing required argument --coordinator-epoch")
            producer_id, producer_epoch, coordinator_epoch = o.producer_id, o.producer_epoch, o.coordinator_epoch
        else:
            producers = await self.producers_of(tp, f"Failed to validate producer state for partition {tp}")
            found = next((p for p in producers if 0 <= p.current_txn_start_offset == o.start_offset), None)
            if found is None:
                raise ToolError(f"Could not find any open transactions starting at offset {o.start_offset} on "
                                f"partition {tp}")
            producer_id, producer_epoch, coordinator_epoch = (found.producer_id, found.producer_epoch,
                                                              found.coordinator_epoch)
        # A producer id whose transaction hung before its first marker has coordinator epoch -1 in
        # DescribeProducers; 0 is at most any coordinator's epoch (Kafka's reasoning).
        coordinator_epoch = max(coordinator_epoch, 0)
        spec = (f"AbortTransactionSpec(topicPartition={tp}, producerId={producer_id}, "
                f"producerEpoch={producer_epoch}, coordinatorEpoch={coordinator_epoch})")
        message = f"Failed to abort transaction {spec}"
        with failing(message):
            code = await self.admin.abort_transaction(tp, producer_id, producer_epoch, coordinator_epoch)
        if code:
            raise ToolError(explain(message, abort_error(spec, coordinator_epoch, code)))

    async def find_hanging(self) -> None:
        o = self.opts
        if o.topic is None and o.broker_id is None:
            raise ToolError("The `find-hanging` command requires either --topic or --broker-id to limit the scope "
                            "of the search")
        if o.partition is not None and o.topic is None:
            raise ToolError("The --partition argument requires --topic to be provided")
        candidates = await self.open_transactions(await self.partitions_to_search(),
                                                  o.max_transaction_timeout * 60_000)
        hanging = await self.hanging(candidates) if candidates else []
        now = now_ms()
        print_table(HANGING_HEADERS, [
            [tp.topic, str(tp.partition), str(p.producer_id), str(p.producer_epoch),
             str(epoch_or_none(p.coordinator_epoch)), str(epoch_or_none(p.current_txn_start_offset)),
             str(p.last_timestamp), str(int((now - p.last_timestamp) / 60_000))]     # Java's truncating division
            for tp, p in hanging])

    async def partitions_to_search(self) -> list:
        """The partitions named, or the topic's, or every topic's (internal ones too), keeping those
        with a replica on --broker-id when it is given."""
        o = self.opts
        if o.topic is not None and o.partition is not None:
            return [TopicPartition(o.topic, o.partition)]
        if o.topic is not None:
            with failing("Failed to describe 1 topics"):
                await self.cluster.refresh_metadata([o.topic])
                if o.topic not in self.cluster.topics:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    raise KafkaError(code, error_text(code))
            topics, names = self.cluster.topics, [o.topic]
        else:
            with failing("Failed to list topics"):
                topics = await self.admin.list_topics()
            names = java_hash_order(sorted(topics), java_string_hash)
        tps = []
        for batch in batches(names):
            for name in java_hash_order(batch, java_string_hash, len(batch)):
                for p, info in sorted(topics[name].partitions.items()):
                    if o.broker_id is None or o.broker_id in info.replicas:
                        tps.append(TopicPartition(name, p))
        return tps

    async def open_transactions(self, tps: list, max_timeout_ms: int) -> list:
        """[(TopicPartition, ProducerState)] of the transactions open longer than ``max_timeout_ms``
        since their producer's last write."""
        o = self.opts
        broker = "Optional.empty" if o.broker_id is None else f"Optional[{o.broker_id}]"      # Java's toString
        found = []
        for batch in batches(tps):
            message = f"Failed to describe producers for {len(batch)} partitions on broker {broker}"
            with failing(message):
                results = await self.admin.describe_producers(batch, broker_id=o.broker_id)
            order = describe_producers_order(batch)
            for tp in order:
                if results[tp].error_code:
                    raise ToolError(explain(message, producers_error(tp, results[tp], o.broker_id)))
            now = now_ms()
            found += [(tp, p) for tp in order for p in results[tp].producers
                      if p.current_txn_start_offset >= 0 and now - p.last_timestamp > max_timeout_ms]
        return found

    async def hanging(self, candidates: list) -> list:
        """The candidates whose coordinator will write no marker."""
        by_producer = defaultdict(list)
        for tp, p in candidates:
            by_producer[p.producer_id].append((tp, p))
        producer_ids = java_hash_order(list(by_producer), java_long_hash)
        with failing(f"Failed to list transactions for {len(producer_ids)} producers"):
            listed = await self.admin.list_transactions(producer_ids=producer_ids)
        transactional_ids = {}
        for broker in java_hash_order(list(listed), java_int_hash):
            for t in listed[broker]:
                if t.producer_id in by_producer:
                    transactional_ids[t.producer_id] = t.transactional_id
        message = f"Failed to describe {len(transactional_ids)} transactions"
        with failing(message):
            descriptions = await self.admin.describe_transactions(list(dict.fromkeys(transactional_ids.values())))
        for tid, d in descriptions.items():
            if d.error_code and d.error_code != ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                raise ToolError(explain(message, describe_transaction_error(tid, d.error_code)))
        hanging = []
        for producer_id in producer_ids:
            d = descriptions.get(transactional_ids.get(producer_id))
            if d is None or d.error_code:
                hanging += by_producer[producer_id]
            else:       # the coordinator still writes markers to the partitions of its transaction
                hanging += [(tp, p) for tp, p in by_producer[producer_id] if tp not in d.topic_partitions]
        return hanging


COMMANDS = {"list": "list", "describe": "describe", "describe-producers": "describe_producers",
            "abort": "abort", "find-hanging": "find_hanging"}


def load_properties(path: str | None) -> dict:
    if path is None:
        return {}
    try:
        return read_properties(path)
    except OSError as e:
        raise ToolError(explain("Failed to load admin client properties", f"{path} ({e.strerror})")) from None


async def run(opts) -> int:
    """The client connects on its first call, so that an unreachable broker is reported as that call's failure."""
    cluster = ClusterClient(opts.bootstrap_server, **client_kwargs(load_properties(opts.command_config)))
    try:
        command = TransactionsCommand(Admin(cluster), cluster, opts)
        await getattr(command, COMMANDS[opts.command])()
    finally:
        await cluster.close()
    return 0


def main(argv=None):
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main_entry(main, error_prefix=ERROR_PREFIX)
