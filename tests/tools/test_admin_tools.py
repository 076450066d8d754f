"""kafka-configs, kafka-get-offsets, kafka-delete-records, kafka-log-dirs, kafka-broker-api-versions and the
perf tests against a live broker, output compared with Kafka's formats."""
import json
import re

import pytest

from broker.tools.common import error_text, exception_class
from protocol.errors import ErrorCode


def test_configs_alter_and_describe(tools_broker, tool):
    b = tools_broker.bootstrap
    assert tool("topics", "--bootstrap-server", b, "--create", "--topic", "cfg").code == 0
    r = tool("configs", "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", "cfg", "--alter",
             "--add-config", "retention.ms=1000,cleanup.policy=[compact,delete]")
    assert (r.code, r.out) == (0, "Completed updating config for topic cfg.\n")
    r = tool("configs", "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", "cfg", "--describe")
    assert r.lines[0] == "Dynamic configs for topic cfg are:"
    assert r.lines[1].startswith("  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
                                 "cleanup.policy=compact,delete")
    assert r.lines[2].startswith("  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000")
    assert len(r.lines) == 3
    r = tool("configs", "--bootstrap-server", b, "--topic", "cfg", "--alter", "--delete-config", "retention.ms")
    assert r.code == 0
    r = tool("configs", "--bootstrap-server", b, "--topic", "cfg", "--alter", "--delete-config", "retention.ms,segment.ms")
    assert (r.code, r.err) == (1, "Invalid config(s): retention.ms,segment.ms\n")   # not set any more / never
    r = tool("configs", "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", "cfg", "--describe")
    assert [l.split("=")[0].strip() for l in r.lines[1:]] == ["cleanup.policy"]
    r = tool("configs", "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", "cfg", "--describe",
             "--all")
    assert r.lines[0] == "All configs for topic cfg are:" and any(l.startswith("  segment.bytes=") for l in r.lines)
    r = tool("configs", "--bootstrap-server", b, "--entity-type", "brokers", "--entity-default", "--describe")
    assert r.lines[0] == "Default configs for brokers in the cluster are:"
    r = tool("configs", "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", "nope", "--describe")
    assert r.code == 1 and len(r.err.splitlines()) == 1 and "nope" in r.err
    r = tool("configs", "--bootstrap-server", b, "--entity-type", "planets", "--entity-name", "x", "--describe")
    assert r.code == 1 and r.err == (
        "Invalid entity type planets, the entity type must be one of topics, clients, users, "
        "brokers, ips, broker-loggers, client-metrics with a --bootstrap-server or "
        "--bootstrap-controller argument\n")


def test_configs_brokers_and_quota_entities(tools_broker, tool):
    b = tools_broker.bootstrap
    r = tool("configs", "--bootstrap-server", b, "--alter", "--entity-type", "brokers", "--entity-default",
             "--add-config", "log.cleaner.threads=2")
    assert (r.code, r.out) == (0, "Completed updating default config for brokers in the cluster.\n")
    r = tool("configs", "--bootstrap-server", b, "--describe", "--entity-type", "brokers")
    headers = [l for l in r.lines if not l.startswith("  ")]
    assert headers[-1] == "Default configs for brokers in the cluster are:"      # every broker, then the default
    assert all(re.fullmatch(r"Dynamic configs for broker \d+ are:", h) for h in headers[:-1]) and headers[:-1]
    assert r.lines[-1] == ("  log.cleaner.threads=2 sensitive=false "
                           "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.threads=2}")
    r = tool("configs", "--bootstrap-server", b, "--alter", "--entity-type", "brokers", "--entity-default",
             "--delete-config", "log.cleaner.threads")
    assert r.code == 0, r
    broker_id = headers[0].split()[4]
    # broker-loggers: every logger is a DYNAMIC_BROKER_LOGGER_CONFIG entry, altered by name
    r = tool("configs", "--bootstrap-server", b, "--alter", "--entity-type", "broker-loggers", "--entity-name",
             broker_id, "--add-config", "broker=DEBUG")
    assert (r.code, r.out) == (0, f"Completed updating config for broker-logger {broker_id}.\n")
    r = tool("configs", "--bootstrap-server", b, "--describe", "--broker-logger", broker_id)
    assert r.lines[0] == f"Dynamic configs for broker-logger {broker_id} are:"
    assert "  broker=DEBUG sensitive=false synonyms={}" in r.lines
    r = tool("configs", "--bootstrap-server", b, "--alter", "--broker-logger", broker_id, "--delete-config", "broker")
    assert r.code == 0, r
    # users/clients/ips (client quotas): tests/tools/test_configs_quotas.py


def test_get_offsets_and_delete_records(tools_broker, tool, script, tmp_path):
    b = tools_broker.bootstrap
    assert tool("topics", "--bootstrap-server", b, "--create", "--topic", "offs", "--partitions", 2).code == 0
    assert script("kafka-console-producer.sh", "--bootstrap-server", b, "--topic", "offs",
                  "--property", "parse.key=true", stdin=b"".join(b"k%d\tv\n" % i for i in range(20))).code == 0
    r = tool("get_offsets", "--bootstrap-server", b, "--topic", "offs")
    assert [re.fullmatch(r"offs:(\d):(\d+)", l) is not None for l in r.lines] == [True, True]
    ends = {int(l.split(":")[1]): int(l.split(":")[2]) for l in r.lines}
    assert sum(ends.values()) == 20
    r = tool("get_offsets", "--bootstrap-server", b, "--topic", "offs", "--time", "earliest")
    assert r.lines == ["offs:0:0", "offs:1:0"]
    r = tool("get_offsets", "--bootstrap-server", b, "--topic-partitions", "offs:1", "--time", -1)
    assert r.lines == [f"offs:1:{ends[1]}"]
    r = tool("get_offsets", "--bootstrap-server", b, "--topic", "no-such-topic")
    assert r.code == 1 and r.err == \
        "Error occurred: Could not match any topic-partitions with the specified filters\n"
    # Kafka's IncludeList: a comma means "or"; the names earliest-local and latest-tiered exist.
    assert tool("topics", "--bootstrap-server", b, "--create", "--topic", "offs2").code == 0
    r = tool("get_offsets", "--bootstrap-server", b, "--topic", "offs2, offs", "--time", "earliest-local")
    assert r.lines == ["offs:0:0", "offs:1:0", "offs2:0:0"]
    # latest-tiered needs ListOffsets v9; with no tiered storage no partition has one: no lines
    for time_ in ("latest-tiered", "-5"):
        r = tool("get_offsets", "--bootstrap-server", b, "--topic", "offs", "--time", time_)
        assert (r.code, r.lines, r.err) == (0, [], "")
    # ordered by the text "topic-partition", as Kafka's TreeMap does: t-10 before t-2
    assert tool("topics", "--bootstrap-server", b, "--create", "--topic", "many", "--partitions", 11).code == 0
    r = tool("get_offsets", "--bootstrap-server", b, "--topic", "many")
    assert [l.split(":")[1] for l in r.lines] == ["0", "1", "10", "2", "3", "4", "5", "6", "7", "8", "9"]

    spec = tmp_path / "delete.json"
    spec.write_text(json.dumps({"partitions": [{"topic": "offs", "partition": 0, "offset": 2},
                                               {"topic": "offs", "partition": 1, "offset": 10**6}], "version": 1}))
    r = tool("delete_records", "--bootstrap-server", b, "--offset-json-file", spec)
    assert r.lines[:2] == ["Executing records delete operation", "Records delete operation completed:"]
    # in the order of Kafka's HashMap of TopicPartition: offs-1 before offs-0
    assert r.lines[3] == "partition: offs-0\tlow_watermark: 2"
    assert r.lines[2] == ("partition: offs-1\terror: org.apache.kafka.common.errors.OffsetOutOfRangeException: "
                          "The requested offset is not within the range of offsets maintained by the server.")
    assert r.code == 1
    r = tool("get_offsets", "--bootstrap-server", b, "--topic", "offs", "--partitions", "0", "--time", -2)
    assert r.lines == ["offs:0:2"]
    # --partitions takes ids only (ranges are --topic-partitions'), as Kafka's createPartitionSet
    r = tool("get_offsets", "--bootstrap-server", b, "--topic", "offs", "--partitions", "0-1")
    assert (r.code, r.err) == (1, "Error occurred: --partitions expects a comma separated list of "
                                  "numeric partition ids, but received: 0-1\n")
    r = tool("get_offsets", "--bootstrap-server", b, "--topic-partitions", "offs:0-2", "--time", -2)
    assert r.lines == ["offs:0:2", "offs:1:0"]


@pytest.mark.parametrize("doc, message", [
    ('{"partitions": [{"topic": "t", "partition": 1.7, "offset": 1}]}',
     "Expected `Integer` value, received 1.7"),           # it deleted records of t-1
    ('{"partitions": [{"topic": "t", "partition": "1", "offset": 1}]}',
     'Expected `Integer` value, received "1"'),
    ('{"partitions": [{"topic": "t", "partition": true, "offset": 1}]}',
     "Expected `Integer` value, received true"),
    ('{"partitions": [{"topic": "t", "partition": 0, "offset": "6"}]}',
     'Expected `Long` value, received "6"'),
    ('{"partitions": [{"topic": 5, "partition": 0, "offset": 6}]}',
     "Expected `String` value, received 5"),
    ('{"partitions": [{"topic": "t", "partition": 0}]}', "No such field exists: `offset`"),
    ('{"partitions": [{"topic": "t", "partition": 0, "offset": 1}], "version": 2}',
     "Not supported version field value 2"),
    ('{"version": 1}', "Missing partitions field"),
    ('{"partitions": {}}', "Expected JSON array, received {}"),
    ('[1]', "Expected JSON object, received [1]"),
    ('{"partitions": [', "The input string is not a valid JSON"),
    ('', "The input string is not a valid JSON"),
    ('{"partitions": [{"topic": "t", "partition": 0, "offset": 1},'
     ' {"topic": "t", "partition": 0, "offset": 2}]}',
     "Offset json file contains duplicate topic partitions: t-0"),
    ('{"partitions": [{"topic": "t", "partition": 0, "offset": 1},'
     ' {"topic": "t", "partition": 1, "offset": 1}, {"topic": "t", "partition": 0, "offset": 2},'
     ' {"topic": "t", "partition": 1, "offset": 2}]}',
     "Offset json file contains duplicate topic partitions: t-1,t-0"),    # HashSet order
])
def test_delete_records_reads_its_file_as_kafka_does(tmp_path, doc, message):
    """DeleteRecordsCommand's parse: JSON integers only (a partition 1.7 was taken as 1 and
    deleted records of t-1), version 1 only, Kafka's messages, printed bare."""
    from broker.tools.common import TerseError
    from broker.tools.delete_records import parse_offsets
    path = tmp_path / "offsets.json"
    path.write_text(doc)
    with pytest.raises(TerseError) as e:
        parse_offsets(str(path))
    assert str(e.value) == message
    path.write_text('{"partitions": [{"topic": "t", "partition": 2, "offset": -1}], "version": 1}')
    from broker.client.types import TopicPartition
    assert parse_offsets(str(path)) == {TopicPartition("t", 2): -1}


def test_log_dirs_prints_brokers_in_kafkas_order():
    from broker.tools.log_dirs import broker_order
    assert broker_order([1, 2, 4]) == [4, 1, 2]          # a map sized for three brokers
    assert broker_order([101, 102, 103, 104]) == [104, 101, 102, 103]
    assert broker_order([0, 1, 2]) == [0, 1, 2]


def test_log_dirs_and_api_versions(tools_broker, tool):
    b = tools_broker.bootstrap
    assert tool("topics", "--bootstrap-server", b, "--create", "--topic", "dirs").code == 0
    r = tool("log_dirs", "--bootstrap-server", b, "--describe", "--topic-list", "dirs")
    assert r.lines[0] == "Querying brokers for log directories information"
    assert re.fullmatch(r"Received log directory information from brokers \d+", r.lines[1])
    doc = json.loads(r.lines[2])
    # Kafka 3.9 builds the document from Java HashMaps: their key order, not the old Scala tool's.
    assert list(doc) == ["brokers", "version"] and doc["version"] == 1
    assert list(doc["brokers"][0]) == ["broker", "logDirs"]
    log_dir = doc["brokers"][0]["logDirs"][0]
    assert list(log_dir) == ["partitions", "error", "logDir"] and log_dir["error"] is None
    assert log_dir["partitions"] == [{"partition": "dirs-0", "size": 0, "offsetLag": 0, "isFuture": False}]
    broker_id = doc["brokers"][0]["broker"]
    r = tool("log_dirs", "--bootstrap-server", b, "--describe", "--broker-list", f"{broker_id},{broker_id}")
    assert r.lines[1] == f"Received log directory information from brokers {broker_id}"   # a set
    assert len(json.loads(r.lines[2])["brokers"]) == 1
    r = tool("log_dirs", "--bootstrap-server", b, "--describe", "--broker-list", "7777")
    assert r.code == 1 and r.err == (f"ERROR: The given brokers do not exist from --broker-list: 7777. "
                                     f"Current existent brokers: {broker_id}\n")       # TerseException: bare
    r = tool("log_dirs", "--bootstrap-server", b)
    assert r.code == 1 and r.err == 'Missing required argument "[describe]"\n'

    r = tool("broker_api_versions", "--bootstrap-server", b)
    assert re.fullmatch(r"127\.0\.0\.1:\d+ \(id: \d+ rack: null\) -> \(", r.lines[0])
    assert r.lines[-1] == ")"
    entries = r.lines[1:-1]
    entry = r"\t\w+\(\d+\): (UNSUPPORTED|\d+( to \d+)? \[usable: \d+\])"
    assert all(re.fullmatch(entry + ",", e) for e in entries[:-1]), entries
    assert re.fullmatch(entry, entries[-1]), entries       # Kafka joins with ",\n\t": no comma after the last
    assert any(e.startswith("\tProduce(0): ") and "[usable: " in e for e in entries)
    assert any(e.startswith("\tApiVersions(18): ") for e in entries)


def test_perf_tests(tools_broker, tool, tmp_path):
    b = tools_broker.bootstrap
    r = tool("producer_perf_test", "--topic", "perf", "--num-records", 2000, "--record-size", 50,
             "--throughput", -1, "--producer-props", f"bootstrap.servers={b}", "acks=1")
    assert r.code == 0, r
    assert re.fullmatch(r"2000 records sent, \d+\.\d{6} records/sec \(\d+\.\d\d MB/sec\), \d+\.\d\d ms avg latency, "
                        r"\d+\.\d\d ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.",
                        r.lines[-1]), r.lines
    r = tool("consumer_perf_test", "--bootstrap-server", b, "--topic", "perf", "--messages", 2000, "--timeout", 10000)
    assert r.code == 0, r
    assert r.lines[0] == ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
                          "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
    cells = r.lines[1].split(", ")
    assert len(cells) == 10 and cells[4] == "2000"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}", cells[0])
    assert cells[2] == f"{2000 * 50 / 1024 / 1024:.4f}"
    # --payload-monotonic: the record number as the value (Kafka 3.9)
    r = tool("producer_perf_test", "--topic", "mono", "--num-records", 5, "--payload-monotonic",
             "--throughput", -1, "--producer-props", f"bootstrap.servers={b}")
    assert r.code == 0, r
    r = tool("console_consumer", "--bootstrap-server", b, "--topic", "mono", "--from-beginning",
             "--max-messages", 5, "--timeout-ms", 10000)
    assert r.lines == ["0", "1", "2", "3", "4"]
    # --show-detailed-stats: the first interval starts before the join and counts it apart, as
    # Kafka's ConsumerPerformance; the later ones have no join time, so fetch time is the interval
    config = tmp_path / "consumer.properties"
    config.write_text("max.poll.records=1\n")          # 2000 polls: several intervals of 1 ms
    r = tool("consumer_perf_test", "--bootstrap-server", b, "--topic", "perf", "--messages", 2000,
             "--timeout", 10000, "--show-detailed-stats", "--reporting-interval", 1, "--consumer.config", config)
    assert r.code == 0 and r.lines[0].startswith("time, threadId, "), r
    rows = [line.split(", ") for line in r.lines[1:]]
    assert len(rows) >= 2 and all(len(row) == 10 for row in rows), r.lines
    assert int(rows[0][7]) >= 0
    for row in rows[1:]:
        assert row[6] == "0" and (row[8], row[9]) == (row[3], row[5]), row
    r = tool("consumer_perf_test", "--bootstrap-server", b, "--topic", "perf", "--messages", 1,
             "--reporting-interval", 0)
    assert (r.code, r.err) == (1, "Error: Reporting interval must be greater than 0.\n")


def test_producer_perf_test_with_transactions(tools_broker, tool):
    """Kafka 3.9's --transaction-duration-ms: transactions of that age, committed; a
    --transactional-id without it changes nothing."""
    b = tools_broker.bootstrap
    assert tool("topics", "--bootstrap-server", b, "--create", "--topic", "perf-tx",
                "--partitions", 1).code == 0
    r = tool("producer_perf_test", "--topic", "perf-tx", "--num-records", 3000, "--record-size", 20,
             "--throughput", 10000, "--producer-props", f"bootstrap.servers={b}",
             "--transaction-duration-ms", 40, "--transactional-id", "perf-tx-id")
    assert r.code == 0, r
    assert r.lines[-1].startswith("3000 records sent, ")
    r = tool("transactions", "--bootstrap-server", b, "list")
    states = {row.split()[0]: row.split()[3] for row in r.lines[1:]}
    assert states["perf-tx-id"] == "CompleteCommit"
    r = tool("console_consumer", "--bootstrap-server", b, "--topic", "perf-tx", "--from-beginning",
             "--isolation-level", "read_committed", "--max-messages", 3000, "--timeout-ms", 10000)
    assert len(r.lines) == 3000
    r = tool("dump_log", "--files", f"{tools_broker.log_dir}/perf-tx-0/00000000000000000000.log")
    markers = [line for line in r.lines if "isControl: true" in line]
    assert len(markers) >= 3, r.out                 # 300 ms of sending: about seven
    r = tool("producer_perf_test", "--topic", "perf-notx", "--num-records", 10, "--record-size", 20,
             "--throughput", -1, "--producer-props", f"bootstrap.servers={b}",
             "--transactional-id", "perf-notx-id")
    assert r.code == 0, r
    r = tool("transactions", "--bootstrap-server", b, "list")
    assert "perf-notx-id" not in r.out


@pytest.mark.parametrize("code,name", [
    (ErrorCode.KAFKA_STORAGE_ERROR, "KafkaStorageException"),
    (ErrorCode.UNKNOWN_SERVER_ERROR, "UnknownServerException"),
    (ErrorCode.INVALID_TOPIC_EXCEPTION, "InvalidTopicException"),
    (ErrorCode.NOT_LEADER_OR_FOLLOWER, "NotLeaderOrFollowerException"),
    (ErrorCode.LOG_DIR_NOT_FOUND, "LogDirNotFoundException"),
    (ErrorCode.REQUEST_TIMED_OUT, "TimeoutException"),
    (ErrorCode.CORRUPT_MESSAGE, "CorruptRecordException"),
    (ErrorCode.TOPIC_ALREADY_EXISTS, "TopicExistsException"),
])
def test_exception_class_names_are_kafkas(code, name):
    # What Kafka's tools print from Errors.forCode(code).exception().getClass().getName().
    assert exception_class(code) == "org.apache.kafka.common.errors." + name


def test_configs_repeated_flags_as_kafkas_parser():
    # --delete-config repeats (each comma-separated); a second --add-config is refused.
    from broker.tools import configs
    from broker.tools.common import TerseError
    opts = configs.build_parser().parse_args(
        ["--bootstrap-server", "x", "--alter", "--topic", "t", "--delete-config", "a",
         "--delete-config", "b,c"])
    assert configs.config_changes(opts) == ({}, ["a", "b", "c"])
    opts = configs.build_parser().parse_args(
        ["--bootstrap-server", "x", "--alter", "--topic", "t", "--add-config", "x=1",
         "--add-config", "y=2"])
    with pytest.raises(TerseError, match="Found multiple arguments for option add-config"):
        configs.config_changes(opts)


def test_get_offsets_skips_a_partition_that_cannot_answer(tools_broker, tool, monkeypatch):
    # Kafka's GetOffsetShell: "Skip getting offsets for topic-partition ..." on stderr, the
    # other partitions printed, exit 0 (one leaderless partition failed the whole run).
    from broker.client.errors import KafkaTimeoutError
    from broker.tools import get_offsets
    from protocol.errors import KafkaError
    b = tools_broker.bootstrap
    assert tool("topics", "--bootstrap-server", b, "--create", "--topic", "skip", "--partitions", 2).code == 0
    real = get_offsets.Admin.list_offsets

    async def leaderless_1(self, specs, **kwargs):
        if any(tp.partition == 1 for tp in specs):
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, "No leader for skip-1")
        return await real(self, specs, **kwargs)
    monkeypatch.setattr(get_offsets.Admin, "list_offsets", leaderless_1)
    r = tool("get_offsets", "--bootstrap-server", b, "--topic", "skip")
    assert (r.code, r.lines) == (0, ["skip:0:0"])
    assert r.err == ("Skip getting offsets for topic-partition skip-1 due to error: org.apache.kafka.common."
                     "errors.LeaderNotAvailableException: " + error_text(ErrorCode.LEADER_NOT_AVAILABLE) + "\n")

    async def unreachable_1(self, specs, **kwargs):     # a leader that does not answer
        if any(tp.partition == 1 for tp in specs):
            raise KafkaTimeoutError("Request to broker 7 timed out")
        return await real(self, specs, **kwargs)
    monkeypatch.setattr(get_offsets.Admin, "list_offsets", unreachable_1)
    r = tool("get_offsets", "--bootstrap-server", b, "--topic", "skip")
    assert (r.code, r.lines) == (0, ["skip:0:0"]) and "TimeoutException" in r.err


def test_api_versions_of_an_unreachable_broker_is_an_error_line(tools_broker, tool, monkeypatch):
    # Kafka's BrokerApiVersionsCommand: "-> ERROR: ..." for that broker, the others printed, exit 0.
    from broker.client.cluster import ClusterClient
    from broker.client.errors import KafkaConnectionError

    async def refused(self, node_id):
        raise KafkaConnectionError(f"Connection to node {node_id} refused")
    monkeypatch.setattr(ClusterClient, "connection", refused)
    r = tool("broker_api_versions", "--bootstrap-server", tools_broker.bootstrap)
    assert r.code == 0 and re.fullmatch(r"127\.0\.0\.1:\d+ \(id: \d+ rack: null\) -> ERROR: "
                                        r"org\.apache\.kafka\.common\.errors\.DisconnectException",
                                        r.lines[0]), r
