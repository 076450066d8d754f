"""kafka-broker-api-versions.sh: the API versions each broker serves, next to what this client speaks.

Output, as Kafka's BrokerApiVersionsCommand prints it, per broker:
    127.0.0.1:9092 (id: 1 rack: null) -> (
    	Produce(0): 3 to 11 [usable: 11],
    	...
    	UpdateFeatures(57): UNSUPPORTED,
    )
Every API a broker (or ZooKeeper-mode broker) listener may serve is listed, by api key; a range of one
version prints as that version; "usable" is the highest version both sides speak.
"""
from __future__ import annotations

from protocol.api import API_SPECS
from protocol.errors import KafkaError

from broker.client.cluster import ClusterClient
from broker.client.errors import ClientError
from broker.tools.common import ToolParser, add_bootstrap, client_kwargs, main_entry, read_properties


def build_parser() -> ToolParser:
    p = ToolParser("kafka-broker-api-versions.sh", "This tool helps to retrieve broker version information.")
    add_bootstrap(p, required=True)
    return p


def describe_versions(versions: dict) -> str:
    lines = []
    known = set()
    for key, spec in sorted(API_SPECS.items()):
        if not ({"broker", "zkBroker"} & set(spec.listeners)):
            continue
        known.add(key)
        theirs = versions.get(key)
        if theirs is None:
            lines.append(f"{spec.name}({key}): UNSUPPORTED")
            continue
        lo, hi = theirs
        text = f"{lo}" if lo == hi else f"{lo} to {hi}"
        if hi < spec.min_version:
            usable = "[unusable: node too old]"
        elif lo > spec.max_version:
            usable = "[unusable: node too new]"
        else:
            usable = f"[usable: {min(hi, spec.max_version)}]"
        lines.append(f"{spec.name}({key}): {text} {usable}")
    for key in sorted(set(versions) - known):
        lo, hi = versions[key]
        lines.append(f"UNKNOWN({key}): {lo if lo == hi else f'{lo} to {hi}'}")
    return "(\n\t" + ",\n\t".join(lines) + "\n)"      # Kafka's NodeApiVersions: no comma after the last


async def run(opts) -> int:
    props = read_properties(opts.command_config) if opts.command_config else {}
    async with ClusterClient(opts.bootstrap_server, **client_kwargs(props)) as cluster:
        for node_id in sorted(cluster.brokers):
            broker = cluster.brokers[node_id]
            rack = broker.rack if broker.rack is not None else "null"
            try:
                versions = describe_versions((await cluster.connection(node_id)).api_versions)
            except (ClientError, KafkaError, OSError):
                # Kafka's BrokerApiVersionsCommand prints the failure and goes on.
                versions = "ERROR: org.apache.kafka.common.errors.DisconnectException"
            print(f"{broker.host}:{broker.port} (id: {node_id} rack: {rack}) -> {versions}")
    return 0


def main(argv=None):
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main_entry(main)
