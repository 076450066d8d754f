"""kafka-leader-election.sh: move leaderships back to the preferred replicas, or elect a leader
where none is left (unclean), as Kafka's LeaderElectionCommand.

    kafka-leader-election.sh --bootstrap-server HOST:PORT --election-type preferred|unclean
        (--all-topic-partitions | --topic T --partition P | --path-to-json-file FILE)

The JSON file is ``{"partitions": [{"topic": "foo", "partition": 1}, ...]}``. Output, as Kafka
prints it::

    Successfully completed leader election (PREFERRED) for partitions foo-1, foo-2
    Valid replica already elected for partitions bar-0
    Error completing leader election (PREFERRED) for partition: baz-0: <exception>: <message>

and, when some partition failed, "N replica(s) could not be elected" on stderr with exit
status 1.
"""
from __future__ import annotations

import sys

from protocol.errors import ErrorCode, KafkaError

from broker.client.admin import Admin
from broker.client.cluster import ClusterClient, is_retriable
from broker.client.errors import ClientError
from broker.client.types import TopicPartition
from broker.tools.common import (ToolError, ToolParser, client_kwargs, error_text,
                                 exception_class, main_entry, parse_java_int, read_properties)
from broker.tools.javautil import java_hash_order, java_tp_hash
from broker.tools.kafka_json import Failure, as_array, as_object, field, parse_json, to_int, to_str

ELECTION_TYPES = {"preferred": 0, "unclean": 1}
TIMEOUT_MS = 30000


def build_parser() -> ToolParser:
    p = ToolParser("kafka-leader-election.sh", "This tool attempts to elect a new leader for a set "
                   "of topic partitions. The type of elections supported are preferred replicas "
                   "and unclean replicas.")
    p.add_argument("--bootstrap-server", metavar="<String: host:port>",
                   help="A hostname and port for the broker to connect to, in the form host:port. "
                        "Multiple comma separated URLs can be given. REQUIRED.")
    p.add_argument("--admin.config", dest="admin_config", metavar="<String: config file>",
                   help="Configuration properties files to pass to the admin client")
    p.add_argument("--path-to-json-file", metavar="<String: Path to JSON file>",
                   help="The JSON file with the list  of partition for which leader elections "
                        "should be performed. This is an example format. \n{\"partitions\":\n\t"
                        "[{\"topic\": \"foo\", \"partition\": 1},\n\t {\"topic\": \"foobar\", "
                        "\"partition\": 2}]\n}\nNot allowed if --all-topic-partitions or --topic "
                        "flags are specified.")
    p.add_argument("--topic", metavar="<String: topic name>",
                   help="Name of topic for which to perform an election. Not allowed if "
                        "--path-to-json-file or --all-topic-partitions is specified.")
    p.add_argument("--partition", metavar="<Integer: partition id>",
                   help="Partition id for which to perform an election. REQUIRED if --topic is "
                        "specified.")
    p.add_argument("--all-topic-partitions", action="store_true",
                   help="Perform election on all of the eligible topic partitions based on the "
                        "type of election (see the --election-type flag). Not allowed if --topic "
                        "or --path-to-json-file is specified.")
    p.add_argument("--election-type", metavar="<[PREFERRED,UNCLEAN]: election type>",
                   help="Type of election to attempt. Possible values are \"preferred\" for "
                        "preferred leader election or \"unclean\" for unclean leader election. "
                        "If preferred election is selection, the election is only performed if "
                        "the current leader is not the preferred leader for the topic partition. "
                        "If unclean election is selected, the election is only performed if "
                        "there are no leader for the topic partition. REQUIRED.")
    return p


def validate(opts) -> None:
    """Kafka's LeaderElectionCommandOptions.validate, same messages and order."""
    missing = [name for name, value in (("bootstrap-server", opts.bootstrap_server),
                                        ("election-type", opts.election_type)) if not value]
    if missing:
        raise ToolError(f"Missing required option(s): {', '.join(missing)}")
    chosen = sum(bool(x) for x in (opts.topic, opts.all_topic_partitions,
                                   opts.path_to_json_file))
    if chosen != 1:
        raise ToolError("One and only one of the following options is required: topic, "
                        "all-topic-partitions, path-to-json-file")
    if opts.topic and opts.partition is None:
        raise ToolError("Missing required option(s): partition")
    if not opts.topic and opts.partition is not None:
        raise ToolError("Option partition is only allowed if topic is used")


def converted(opts, name: str, convert):
    """An option's value as joptsimple converts it when the command first reads it."""
    value = getattr(opts, name.replace("-", "_"))
    try:
        return convert(value)
    except (ValueError, KeyError):
        raise ToolError(f"Cannot parse argument '{value}' of option {name}") from None


JACKSON_MAPPING = "com.fasterxml.jackson.databind.JsonMappingException"


def parse_election_file(path: str) -> list:
    """The partitions of a ``{"partitions": [...]}`` file, read as Kafka's
    LeaderElectionCommand reads it: JSON integers only (a partition 1.9 or "1" is refused,
    not taken as 1), Kafka's messages for the rest."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:            # Kafka's RuntimeException around the IOException
        kind = {FileNotFoundError: "java.nio.file.NoSuchFileException",
                PermissionError: "java.nio.file.AccessDeniedException"}.get(type(e))
        raise ToolError(f"{kind}: {path}" if kind else f"java.io.IOException: {e.strerror}") from None
    try:
        doc = parse_json(text) if text.strip() else None
    except Failure:
        doc = None                      # Kafka's Json.parseFull: empty for unparsable text
    if doc is None:
        raise ToolError("Replica election data is empty")
    try:
        obj = as_object(doc)
        if "partitions" not in obj:
            raise ToolError("Replica election data is missing \"partitions\" field")
        partitions = []
        for entry in as_array(obj["partitions"]):
            fields = as_object(entry)
            partitions.append(TopicPartition(to_str(field(fields, "topic")),
                                             to_int(field(fields, "partition"))))
    except Failure as e:                # a RuntimeException around Jackson's exception
        raise ToolError(f"{JACKSON_MAPPING}: {e}") from None
    duplicates = sorted({str(tp) for tp in partitions if partitions.count(tp) > 1})
    if duplicates:
        raise ToolError("Replica election data contains duplicate partitions: "
                        f"[{', '.join(duplicates)}]")
    return list(dict.fromkeys(partitions))


async def run(opts) -> int:
    validate(opts)
    # read in the order Kafka's command reads them: the type, the file, the partition
    election = converted(opts, "election-type",
                         lambda v: {"PREFERRED": "PREFERRED", "UNCLEAN": "UNCLEAN"}[v.upper()])
    if opts.path_to_json_file:
        partitions = parse_election_file(opts.path_to_json_file)
    elif opts.topic:
        partitions = [TopicPartition(opts.topic, converted(opts, "partition", parse_java_int))]
    else:
        partitions = None
    props = read_properties(opts.admin_config) if opts.admin_config else {}
    # Kafka's tool: 30 s for the call and 15 s per request unless --admin.config says
    props.setdefault("default.api.timeout.ms", str(TIMEOUT_MS))
    props.setdefault("request.timeout.ms", str(TIMEOUT_MS // 2))
    async with ClusterClient(opts.bootstrap_server, **client_kwargs(props)) as cluster:
        try:
            results = await Admin(cluster).elect_leaders(ELECTION_TYPES[election.lower()],
                                                         partitions)
        except (KafkaError, ClientError) as e:
            if not is_retriable(e):
                raise
            # the call's time ran out while it was still being retried (a timeout, a
            # controller moving): Kafka's admin client fails it with a TimeoutException
            print("Timeout waiting for election results")
            raise ToolError("Timeout waiting for election results") from None
    # each in the iteration order of its own HashSet / HashMap of TopicPartition, as Kafka's
    done = (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED)
    succeeded = java_hash_order([tp for tp, (code, _) in results.items() if code == done[0]],
                                java_tp_hash)
    noop = java_hash_order([tp for tp, (code, _) in results.items() if code == done[1]],
                           java_tp_hash)
    failed = {tp: results[tp] for tp in java_hash_order(
        [tp for tp, (code, _) in results.items() if code not in done], java_tp_hash)}
    if succeeded:
        print(f"Successfully completed leader election ({election}) for partitions "
              f"{', '.join(map(str, succeeded))}")
    if noop:
        print(f"Valid replica already elected for partitions {', '.join(map(str, noop))}")
    for tp, (code, message) in failed.items():
        print(f"Error completing leader election ({election}) for partition: {tp}: "
              f"{exception_class(code)}: {message or error_text(code)}")
    if failed:
        print(f"{len(failed)} replica(s) could not be elected", file=sys.stderr)
        return 1
    return 0


def main(argv=None):
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main_entry(main, error_prefix="")           # Kafka prints the bare message
