"""kafka-log-dirs.sh --describe: log directories of brokers and the size of each partition in them.

Output, as Kafka's LogDirsCommand prints it: two progress lines, then one JSON document:
    Querying brokers for log directories information
    Received log directory information from brokers 1
    {"version":1,"brokers":[{"broker":1,"logDirs":[{"logDir":"/data","error":null,
     "partitions":[{"partition":"t-0","size":1234,"offsetLag":0,"isFuture":false}]}]}]}
"""
from __future__ import annotations

import json


from broker.client.admin import Admin
from broker.client.cluster import ClusterClient
from broker.tools.common import (ToolError, ToolParser, add_bootstrap, client_kwargs, exception_class,
                                 main_entry, read_properties)


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


async def run(opts) -> int:
    if not opts.describe:
        raise ToolError("Missing required argument \"[describe]\"")
    topics = [t for t in opts.topic_list.split(",") if t]
    props = read_properties(opts.command_config) if opts.command_config else {}
    async with ClusterClient(opts.bootstrap_server, **client_kwargs(props)) as cluster:
        admin = Admin(cluster)
        if opts.broker_list:
            try:
                brokers = [int(b) for b in opts.broker_list.split(",") if b.strip()]
            except ValueError:
                raise ToolError(f"Invalid broker list '{opts.broker_list}'") from None
            missing = [b for b in brokers if b not in cluster.brokers]
            if missing:
                raise ToolError(f"ERROR: The given brokers do not exist from --broker-list: "
                                f"{','.join(map(str, missing))}. Current existent brokers: "
                                f"{','.join(map(str, sorted(cluster.brokers)))}")
        else:
            brokers = sorted(cluster.brokers)
        print("Querying brokers for log directories information")
        results = await admin.describe_log_dirs(brokers)
        print(f"Received log directory information from brokers {','.join(map(str, brokers))}")
        doc = {"version": 1, "brokers": []}
        for broker in brokers:
            dirs = []
            for d in results[broker]:
                partitions = [{"partition": f"{t.name}-{p.partition_index}", "size": p.partition_size,
                               "offsetLag": p.offset_lag, "isFuture": p.is_future_key}
                              for t in d.topics if not topics or t.name in topics for p in t.partitions]
                error = None if not d.error_code else exception_class(d.error_code)
                dirs.append({"logDir": d.log_dir, "error": error, "partitions": partitions})
            doc["brokers"].append({"broker": broker, "logDirs": dirs})
        print(json.dumps(doc, separators=(",", ":")))
    return 0


def main(argv=None):
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main_entry(main)
