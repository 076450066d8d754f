"""kafka-delete-records.sh: delete records before given offsets (moves each partition's log start offset).

Input: ``--offset-json-file`` with ``{"partitions": [{"topic": "t", "partition": 0, "offset": 5}], "version": 1}``
(offset -1 means the high watermark). Output, as Kafka's DeleteRecordsCommand prints it:
    Executing records delete operation
    Records delete operation completed:
    partition: t-0	low_watermark: 5
or ``partition: t-0	error: <exception class>: <message>`` for a partition that failed (then the exit status is 1).
"""
from __future__ import annotations

from protocol.errors import ErrorCode

from broker.client.admin import Admin
from broker.client.cluster import ClusterClient
from broker.client.types import TopicPartition
from broker.tools.common import (TerseError, ToolError, ToolParser, add_bootstrap, client_kwargs,
                                 error_text, exception_class, main_entry, read_properties)
from broker.tools.javautil import java_hash_order, java_tp_hash
from broker.tools.kafka_json import (Failure, as_array, as_object, field, parse_json, to_int,
                                     to_long, to_str)

def build_parser() -> ToolParser:
    p = ToolParser("kafka-delete-records.sh", "This tool helps to delete records of the given partitions down to "
                   "the specified offset.")
    add_bootstrap(p, required=True)
    p.add_argument("--offset-json-file", required=True, metavar="<String: Offset json file path>",
                   help="REQUIRED: The JSON file with offset per partition. The format to use is:\n"
                        "{\"partitions\":\n  [{\"topic\": \"foo\", \"partition\": 1, \"offset\": 1}],\n \"version\":1\n}")
    return p


def parse_offsets(path: str) -> dict:
    """{TopicPartition: offset} from the file, read as Kafka's DeleteRecordsCommand reads it:
    version 1 only, integers that are JSON integers (a partition 1.7 or "1" is refused, not
    taken as 1), Kafka's messages for the rest, printed bare."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ToolError(str(e)) from None
    try:
        doc = parse_json(text)
    except Failure:
        raise TerseError("The input string is not a valid JSON") from None
    try:
        obj = as_object(doc)
        version = to_int(obj["version"]) if "version" in obj else 1
        if version != 1:
            raise TerseError(f"Not supported version field value {version}")
        if "partitions" not in obj:
            raise TerseError("Missing partitions field")
        out, duplicates = {}, []
        for entry in as_array(obj["partitions"]):
            fields = as_object(entry)
            tp = TopicPartition(to_str(field(fields, "topic")), to_int(field(fields, "partition")))
            offset = to_long(field(fields, "offset"))
            if tp in out:
                duplicates.append(tp)
            else:
                out[tp] = offset
    except Failure as e:
        raise TerseError(str(e)) from None
    if duplicates:
        raise TerseError("Offset json file contains duplicate topic partitions: "
                         + ",".join(map(str, java_hash_order(duplicates, java_tp_hash))))
    return out


async def run(opts) -> int:
    offsets = parse_offsets(opts.offset_json_file)
    props = read_properties(opts.command_config) if opts.command_config else {}
    async with ClusterClient(opts.bootstrap_server, **client_kwargs(props)) as cluster:
        admin = Admin(cluster)
        print("Executing records delete operation")
        known, results = {}, {}
        for tp, offset in offsets.items():
            meta = cluster.topics.get(tp.topic) or (await cluster.refresh_metadata([tp.topic]) and
                                                   cluster.topics.get(tp.topic))
            if meta is None or tp.partition not in meta.partitions:
                results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)
            else:
                known[tp] = offset
        if known:
            results.update(await admin.delete_records(known))
        print("Records delete operation completed:")
        failed = 0
        for tp in java_hash_order(list(offsets), java_tp_hash):     # Kafka's HashMap order
            code, low = results[tp]
            if code:
                failed += 1
                print(f"partition: {tp}\terror: {exception_class(code)}: {error_text(code)}")
            else:
                print(f"partition: {tp}\tlow_watermark: {low}")
    return 1 if failed else 0


def main(argv=None):
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main_entry(main)
