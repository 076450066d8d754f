"""kafka-log-dirs.sh --describe: log directories of brokers and the size of each partition in them.

Output, as Kafka 3.9's LogDirsCommand prints it: two progress lines, then one JSON document whose
objects are Java HashMaps, so keys and lists come in their iteration order:
    Querying brokers for log directories information
    Received log directory information from brokers 1
    {"brokers":[{"broker":1,"logDirs":[{"partitions":[{"partition":"t-0","size":1234,
     "offsetLag":0,"isFuture":false}],"error":null,"logDir":"/data"}]}],"version":1}
"""
from __future__ import annotations

import json

from broker.client.admin import Admin
from broker.client.cluster import ClusterClient
from broker.client.types import TopicPartition
from broker.tools.common import (TerseError, ToolError, ToolParser, add_bootstrap, client_kwargs,
                                 exception_class, main_entry, read_properties)
from broker.tools.javautil import copy_capacity, java_hash_order, java_int_hash, java_string_hash, java_tp_hash


def build_parser() -> ToolParser:
    p = ToolParser("kafka-log-dirs.sh", "This tool helps to query log directory usage on the specified brokers.")
    add_bootstrap(p, required=True)
    p.add_argument("--describe", action="store_true", help="Describe the specified log directories on the "
                                                           "specified brokers.")
    p.add_argument("--broker-list", metavar="<String: Broker list>",
                   help="The list of brokers to be queried in the form \"0,1,2\". All brokers in the cluster will be "
                        "queried if no broker list is specified")
    p.add_argument("--topic-list", metavar="<String: Topic list>", default="",
                   help="The list of topics to be queried in the form \"topic1,topic2,topic3\". All topics will be "
                        "queried if no topic list is specified (default: )")
    return p


def _int_set_order(ids) -> list:
    """A java.util.HashSet<Integer> copied from a collection of `ids`: its iteration order."""
    ids = list(dict.fromkeys(ids))
    return java_hash_order(ids, java_int_hash, copy_capacity(len(ids)))


def broker_order(brokers: list) -> list:
    """The order Kafka prints brokers in: DescribeLogDirsResult.allDescriptions() fills a
    new HashMap<>(number of brokers) (brokers 1, 2, 4 come out 4, 1, 2)."""
    return java_hash_order(brokers, java_int_hash, len(brokers))


async def run(opts) -> int:
    if not opts.describe:
        raise TerseError("Missing required argument \"[describe]\"")
    topics = [t for t in opts.topic_list.split(",") if t]
    props = read_properties(opts.command_config) if opts.command_config else {}
    async with ClusterClient(opts.bootstrap_server, **client_kwargs(props)) as cluster:
        admin = Admin(cluster)
        existing = _int_set_order(cluster.brokers)
        if opts.broker_list:
            try:
                asked = _int_set_order(int(b) for b in opts.broker_list.split(",") if b.strip())
            except ValueError:
                raise ToolError(f"Invalid broker list '{opts.broker_list}'") from None
            missing = [b for b in asked if b not in cluster.brokers]
            if missing:
                raise TerseError(f"ERROR: The given brokers do not exist from --broker-list: "
                                 f"{','.join(map(str, missing))}. Current existent brokers: "
                                 f"{','.join(map(str, existing))}")
            brokers = asked
        else:
            brokers = existing
        print("Querying brokers for log directories information")
        results = await admin.describe_log_dirs(brokers)
        print(f"Received log directory information from brokers {','.join(map(str, brokers))}")
        described = []
        for broker in broker_order(brokers):
            dirs = {d.log_dir: d for d in results[broker]}
            names = java_hash_order(dirs, java_string_hash, len(dirs))
            log_dirs = []
            for name in names:
                d = dirs[name]
                sizes = {TopicPartition(t.name, p.partition_index): p
                         for t in d.topics if not topics or t.name in topics
                         for p in t.partitions}
                partitions = [{"partition": f"{tp.topic}-{tp.partition}",
                               "size": sizes[tp].partition_size,
                               "offsetLag": sizes[tp].offset_lag,
                               "isFuture": sizes[tp].is_future_key}
                              for tp in java_hash_order(list(sizes), java_tp_hash)]
                error = None if not d.error_code else exception_class(d.error_code)
                log_dirs.append({"partitions": partitions, "error": error, "logDir": name})
            described.append({"broker": broker, "logDirs": log_dirs})
        print(json.dumps({"brokers": described, "version": 1}, separators=(",", ":")))
    return 0


def main(argv=None):
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main_entry(main)
