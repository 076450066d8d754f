"""Console producer and consumer through bin/*.sh against a live broker: keys, values, headers, nulls,
Kafka's default formatter columns, partitions and offsets."""
import json
import re

from broker.client.partitioner import partition_for_key


def test_round_trip_keys_values_headers(tools_broker, script):
    b = tools_broker.bootstrap
    assert script("kafka-topics.sh", "--bootstrap-server", b, "--create", "--topic", "console",
                  "--partitions", 3).code == 0
    # a header section equal to null.marker means no headers (an empty one is an error, as Kafka)
    lines = b"h1:x,h2:y\tk1\tv1\nNULL\tk2\tv2\nh3:NULL\tk3\tNULL\nh4:z\tNULL\tv4\n"
    r = script("kafka-console-producer.sh", "--bootstrap-server", b, "--topic", "console",
               "--property", "parse.key=true", "--property", "parse.headers=true",
               "--property", "null.marker=NULL", stdin=lines)
    assert r.code == 0 and r.err == "", r
    r = script("kafka-console-consumer.sh", "--bootstrap-server", b, "--topic", "console", "--from-beginning",
               "--max-messages", 4, "--timeout-ms", 10000, "--property", "print.key=true",
               "--property", "print.headers=true", "--property", "print.partition=true",
               "--property", "print.offset=true", "--property", "print.timestamp=true")
    assert r.code == 0, r
    assert r.err.strip().endswith("Processed a total of 4 messages")
    rows = [l.split("\t") for l in r.lines]
    assert len(rows) == 4 and all(len(row) == 6 for row in rows)
    assert all(re.fullmatch(r"CreateTime:\d{13}", row[0]) for row in rows)
    by_value = {row[5]: row for row in rows}
    assert by_value["v1"][3:5] == ["h1:x,h2:y", "k1"]
    assert by_value["v2"][3:5] == ["NO_HEADERS", "k2"]
    assert by_value["null"][3:5] == ["h3:null", "k3"]        # value and header value null.marker -> null
    assert by_value["v4"][3:5] == ["h4:z", "null"]            # null key
    for row in rows:
        key = row[4]
        if key != "null":   # keyed records follow Kafka's murmur2 partitioner
            assert row[1] == f"Partition:{partition_for_key(key.encode(), 3)}"
        assert re.fullmatch(r"Offset:\d+", row[2])


def test_partition_and_offset_selection(tools_broker, script):
    b = tools_broker.bootstrap
    assert script("kafka-topics.sh", "--bootstrap-server", b, "--create", "--topic", "single").code == 0
    r = script("kafka-console-producer.sh", "--bootstrap-server", b, "--topic", "single", "--sync",
               stdin=b"".join(b"m%d\n" % i for i in range(10)))
    assert r.code == 0, r
    r = script("kafka-console-consumer.sh", "--bootstrap-server", b, "--topic", "single", "--partition", 0,
               "--offset", 7, "--timeout-ms", 3000, "--property", "print.offset=true")
    assert r.lines == ["Offset:7\tm7", "Offset:8\tm8", "Offset:9\tm9"]
    assert "Processed a total of 3 messages" in r.err
    r = script("kafka-console-consumer.sh", "--bootstrap-server", b, "--topic", "single", "--partition", 0,
               "--offset", "earliest", "--max-messages", 2)
    assert r.lines == ["m0", "m1"]
    # Kafka: the offset name in any case; --max-messages -1 means no limit (it stopped at once)
    r = script("kafka-console-consumer.sh", "--bootstrap-server", b, "--topic", "single", "--partition", 0,
               "--offset", "EARLIEST", "--max-messages", -1, "--timeout-ms", 3000)
    assert r.lines == [f"m{i}" for i in range(10)], r


def test_producer_properties_for_idempotence_and_transactions(tools_broker, script):
    """enable.idempotence as Java's producer takes it; a transactional.id makes the console
    producer fail at the first line, as Kafka's (it never calls initTransactions): exit 1."""
    b = tools_broker.bootstrap
    r = script("kafka-console-producer.sh", "--bootstrap-server", b, "--topic", "idem-flags",
               "--producer-property", "enable.idempotence=maybe", stdin=b"x\n")
    assert (r.code, r.err) == (1, "Error: Invalid value maybe for configuration enable.idempotence: "
                                  "Expected value to be either true or false\n")
    r = script("kafka-console-producer.sh", "--bootstrap-server", b, "--topic", "idem-flags",
               "--producer-property", "enable.idempotence=true", "--request-required-acks", "1",
               stdin=b"x\n")
    assert r.code == 1 and "acks to all" in r.err and len(r.err.splitlines()) == 1, r
    r = script("kafka-console-producer.sh", "--bootstrap-server", b, "--topic", "idem-flags",
               "--producer-property", "transactional.id=console", stdin=b"x\ny\n")
    assert r.code == 1 and "initTransactions" in r.err and len(r.err.splitlines()) == 1, r


def test_missing_key_separator_and_bad_flags(tools_broker, script):
    b = tools_broker.bootstrap
    # Its own topic, so the test does not depend on others having run first.
    assert script("kafka-console-producer.sh", "--bootstrap-server", b, "--topic", "flags",
                  stdin=b"x\n").code == 0
    r = script("kafka-console-producer.sh", "--bootstrap-server", b, "--topic", "flags",
               "--property", "parse.key=true", stdin=b"no-separator-here\n")
    assert r.code != 0 and r.err == "Error: No key separator found on line number 1: 'no-separator-here'\n"
    r = script("kafka-console-producer.sh", "--bootstrap-server", b, "--topic", "flags",
               "--property", "parse.headers=true", "--property", "headers.separator=\t", stdin=b"x\n")
    assert r.code != 0 and r.err == "Error: headers.delimiter and headers.separator may not be equal\n"
    r = script("kafka-console-producer.sh", "--bootstrap-server", b, "--topic", "flags",
               "--property", "parse.headers=true", stdin=b"\tvalue\n")
    assert r.code != 0 and r.err == "Error: No header key separator found in pair '' on line number 1\n"
    r = script("kafka-console-consumer.sh", "--bootstrap-server", b, "--offset", "3", "--topic", "flags")
    assert r.code != 0 and r.err == "Error: The partition is required when offset is specified.\n"
    r = script("kafka-console-consumer.sh", "--bootstrap-server", b)
    assert r.code != 0 and r.err == "Error: Exactly one of --include/--topic is required.\n"
    # Kafka's checkConsumerGroup and setAutoOffsetResetValue
    r = script("kafka-console-consumer.sh", "--bootstrap-server", b, "--topic", "flags", "--group", "a",
               "--consumer-property", "group.id=b")
    assert r.code != 0 and r.err.startswith("Error: The group ids provided in different places "
                                            "(directly using '--group', via '--consumer-property', or "
                                            "via '--consumer.config') do not match. Detected group ids: "), r
    assert sorted(r.err.strip().rsplit(": ", 1)[1].split(", ")) == ["'a'", "'b'"]
    r = script("kafka-console-consumer.sh", "--bootstrap-server", b, "--topic", "flags", "--partition", 0,
               "--consumer-property", "group.id=b")
    assert r.code != 0 and r.err == "Error: Options group and partition cannot be specified together.\n"
    r = script("kafka-console-consumer.sh", "--bootstrap-server", b, "--topic", "flags", "--from-beginning",
               "--consumer-property", "auto.offset.reset=latest")
    assert r.code != 0 and r.err == ("Can't simultaneously specify --from-beginning and "
                                     "'auto.offset.reset=latest', please remove one option\n")
    # a failure before consuming starts is one line: no "Processed a total of 0 messages" after it
    r = script("kafka-console-consumer.sh", "--bootstrap-server", b, "--topic", "flags", "--partition", 9)
    assert r.code != 0 and r.err == "Error: Partition 9 of topic flags does not exist\n"
    r = script("kafka-console-consumer.sh", "--bootstrap-server", b, "--include", "(", "--timeout-ms", 100)
    assert r.code != 0 and len(r.err.splitlines()) == 1 and "Invalid regular expression" in r.err


def test_offsets_formatter_reads_consumer_offsets(tools_broker, script, tool):
    b = tools_broker.bootstrap
    assert script("kafka-console-producer.sh", "--bootstrap-server", b, "--topic", "fmt",
                  stdin=b"a\nb\nc\n").code == 0
    r = script("kafka-console-consumer.sh", "--bootstrap-server", b, "--topic", "fmt", "--group", "fmt-group",
               "--from-beginning", "--max-messages", 3, "--timeout-ms", 10000)
    assert r.lines == ["a", "b", "c"], r
    r = script("kafka-console-consumer.sh", "--bootstrap-server", b, "--topic", "__consumer_offsets",
               "--from-beginning", "--timeout-ms", 3000,
               "--formatter", "kafka.coordinator.group.GroupMetadataManager$OffsetsMessageFormatter")
    assert r.code == 0, r
    assert any(re.fullmatch(r"\[fmt-group,fmt,0\]::OffsetAndMetadata\(offset=3, leaderEpoch=Optional(\[\d+\]|\.empty), "
                            r"metadata=, commitTimestamp=\d+, expireTimestamp=None\)", l) for l in r.lines), r.lines
    r = script("kafka-console-consumer.sh", "--bootstrap-server", b, "--topic", "__consumer_offsets",
               "--from-beginning", "--timeout-ms", 3000,
               "--formatter", "kafka.coordinator.group.GroupMetadataManager$GroupMetadataMessageFormatter")
    assert any(l.startswith("fmt-group::GroupMetadata(groupId=fmt-group, generation=") for l in r.lines), r.lines
    assert r.err.startswith("WARNING: kafka.coordinator.group.GroupMetadataManager$GroupMetadataMessageFormatter "
                            "is deprecated and will be removed in the next major release. Please use "
                            "org.apache.kafka.tools.consumer.GroupMetadataMessageFormatter instead\n"), r.err
    # Kafka 3.9's own formatter prints JSON (one record a line here; 3.9 runs them together)
    r = script("kafka-console-consumer.sh", "--bootstrap-server", b, "--topic", "__consumer_offsets",
               "--from-beginning", "--timeout-ms", 3000,
               "--formatter", "org.apache.kafka.tools.consumer.OffsetsMessageFormatter")
    assert r.code == 0 and "WARNING" not in r.err, r
    commits = [json.loads(l) for l in r.lines if '"group":"fmt-group","topic":"fmt"' in l]
    assert commits and commits[-1]["key"] == {"version": 1, "data": {"group": "fmt-group", "topic": "fmt",
                                                                      "partition": 0}}, r.lines
    assert commits[-1]["value"]["data"]["offset"] == 3 and commits[-1]["value"]["data"]["metadata"] == ""


def test_compression_codec_and_include_pattern(tools_broker, script):
    b = tools_broker.bootstrap
    for topic, codec in (("inc-lz4", "lz4"), ("inc-zstd", "zstd")):
        r = script("kafka-console-producer.sh", "--bootstrap-server", b, "--topic", topic,
                   "--compression-codec", codec, stdin=f"{codec}-1\n{codec}-2\n".encode())
        assert r.code == 0, r
    r = script("kafka-console-consumer.sh", "--bootstrap-server", b, "--include", "inc-.*", "--from-beginning",
               "--max-messages", 4, "--timeout-ms", 10000)
    assert sorted(r.lines) == ["lz4-1", "lz4-2", "zstd-1", "zstd-2"], r
    r = script("kafka-dump-log.sh", "--files",
               str(tools_broker.base_dir / "kafka-logs-0" / "inc-lz4-0" / "00000000000000000000.log"))
    assert "compresscodec: lz4" in r.out


def test_custom_separators_and_non_ascii(tools_broker, script):
    b = tools_broker.bootstrap
    r = script("kafka-console-producer.sh", "--broker-list", b, "--topic", "sep", "--property", "parse.key=true",
               "--property", "key.separator=→", "--request-required-acks", "all", "--sync",
               stdin="clé→välue\nk2→v2\n".encode())
    assert r.code == 0, r
    r = script("kafka-console-consumer.sh", "--bootstrap-server", b, "--topic", "sep", "--from-beginning",
               "--max-messages", 2, "--property", "print.key=true", "--property", "key.separator= → ",
               "--property", "print.value=true")
    assert r.lines == ["clé → välue", "k2 → v2"], r
    r = script("kafka-console-consumer.sh", "--bootstrap-server", b, "--topic", "sep", "--from-beginning",
               "--max-messages", 2, "--property", "print.key=true", "--property", "print.value=false",
               "--property", "line.separator=\\n--\\n")
    assert r.out == "clé\n--\nk2\n--\n", r


def test_producer_settings_merge_like_kafka(tmp_path):
    """A flag given on the command line wins, then --producer-property, then --producer.config, then
    the flags' defaults (Kafka's ConsoleProducer merge); bad values are one-line errors."""
    from broker.tools.common import ToolError
    from broker.tools.console_producer import build_parser, producer_settings

    def settings(*argv):
        argv = ["--bootstrap-server", "x", "--topic", "t", *map(str, argv)]
        return producer_settings(build_parser().parse_args(argv))[0]
    config = tmp_path / "producer.properties"
    config.write_text("compression.type=snappy\nlinger.ms=7\nacks=1\n")
    assert settings()["compression_type"] == "none" and settings()["acks"] == -1 and settings()["linger_ms"] == 1000
    assert settings("--compression-codec")["compression_type"] == "gzip"
    s = settings("--producer.config", config)
    assert (s["compression_type"], s["linger_ms"], s["acks"]) == ("snappy", 7, 1)
    s = settings("--producer.config", config, "--producer-property", "compression.type=lz4", "--timeout", 3)
    assert (s["compression_type"], s["linger_ms"]) == ("lz4", 3)
    s = settings("--compression-codec", "zstd", "--producer-property", "compression.type=lz4",
                 "--producer-property", "max.in.flight.requests.per.connection=1")
    assert (s["compression_type"], s["max_in_flight"]) == ("zstd", 1)
    # --message-send-max-retries is `retries` (default 3), --max-block-ms `max.block.ms`,
    # --max-partition-memory-bytes given wins over --batch-size
    assert (settings()["retries"], settings()["max_block_ms"]) == (3, 60000)
    s = settings("--message-send-max-retries", 0, "--max-block-ms", 5, "--batch-size", 100,
                 "--max-partition-memory-bytes", 200)
    assert (s["retries"], s["max_block_ms"], s["batch_size"]) == (0, 5, 200)
    assert settings("--producer-property", "retries=9")["retries"] == 9
    # --max-memory-bytes is buffer.memory (32 MiB unless given), as Kafka's ConsoleProducer
    assert settings()["buffer_memory"] == 33554432
    assert settings("--max-memory-bytes", 1000000)["buffer_memory"] == 1000000
    assert settings("--producer-property", "buffer.memory=2000000")["buffer_memory"] == 2000000
    assert settings("--batch-size", 100)["batch_size"] == 100
    # given on the command line, a flag wins even with its default value (options.has)
    assert settings("--batch-size", 100, "--max-partition-memory-bytes", 16384)["batch_size"] == 16384
    s = settings("--producer-property", "retries=9", "--message-send-max-retries", 3,
                 "--producer.config", config, "--timeout", 1000, "--request-required-acks", -1)
    assert (s["retries"], s["linger_ms"], s["acks"]) == (3, 1000, -1)
    for bad in (["--producer-property", "batch.size=big"], ["--producer-property", "acks=2"]):
        try:
            settings(*bad)
        except ToolError as e:
            assert "Invalid value" in str(e) and "\n" not in str(e)
        else:
            raise AssertionError(bad)


def test_max_messages_with_a_group_commits_no_record_it_did_not_print(tools_broker, script, tool):
    # Kafka's ConsoleConsumer resets every partition to its first unprinted record before
    # closing: the next run of the group reads on from there, in every partition.
    b = tools_broker.bootstrap
    from confluent_kafka import Producer
    assert tool("topics", "--bootstrap-server", b, "--create", "--topic", "maxm",
                "--partitions", 2).code == 0
    producer = Producer({"bootstrap.servers": b})
    for i in range(20):
        producer.produce("maxm", b"m%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    first = script("kafka-console-consumer.sh", "--bootstrap-server", b, "--topic", "maxm",
                   "--group", "maxm-g", "--from-beginning", "--max-messages", 5,
                   "--timeout-ms", 10000)
    assert len(first.lines) == 5, first
    rest = script("kafka-console-consumer.sh", "--bootstrap-server", b, "--topic", "maxm",
                  "--group", "maxm-g", "--timeout-ms", 3000)
    assert sorted(first.lines + rest.lines) == sorted(f"m{i}" for i in range(20)), rest


def test_console_clients_name_themselves_as_kafkas(tools_broker, script, tool):
    """client.id console-consumer / console-producer by default (Kafka's tools): what
    kafka-consumer-groups.sh --members shows, and what client-id quotas match. A negative
    --timeout-ms means no limit, so --max-messages ends this run."""
    b = tools_broker.bootstrap
    assert tool("topics", "--bootstrap-server", b, "--create", "--topic", "names").code == 0
    r = script("kafka-console-producer.sh", "--bootstrap-server", b, "--topic", "names", "--sync",
               stdin=b"a\nb\n")
    assert r.code == 0, r
    consumed = script("kafka-console-consumer.sh", "--bootstrap-server", b, "--topic", "names",
                      "--group", "names-g", "--from-beginning", "--max-messages", 2,
                      "--timeout-ms", -1)
    assert consumed.lines == ["a", "b"], consumed
    from broker.tools.console_producer import build_parser, producer_settings
    _, props = producer_settings(build_parser().parse_args(["--bootstrap-server", b,
                                                            "--topic", "names"]))
    assert props["client.id"] == "console-producer"


def test_send_failures_sync_stops_async_goes_on(tools_broker, script):
    """Kafka's ConsoleProducer: --sync is send().get(), so the first failure ends the tool with
    exit 1 and the lines after it are not sent; without --sync a failure is logged (null key ->
    "key: null") and the tool exits 0."""
    b = tools_broker.bootstrap
    assert script("kafka-topics.sh", "--bootstrap-server", b, "--create", "--topic", "small",
                  "--config", "max.message.bytes=200").code == 0
    big = b"x" * 1000
    r = script("kafka-console-producer.sh", "--bootstrap-server", b, "--topic", "small", "--sync",
               stdin=b"first\n" + big + b"\nafter\n")
    assert r.code == 1 and len(r.err.splitlines()) == 1 and "too_large" in r.err.lower(), r
    r = script("kafka-console-producer.sh", "--bootstrap-server", b, "--topic", "small",
               stdin=big + b"\n")
    assert r.code == 0, r
    assert re.fullmatch(r"ERROR Error when sending message to topic small with key: null, value: "
                        r"1000 bytes with error: .*\n", r.err), r.err
    r = script("kafka-console-consumer.sh", "--bootstrap-server", b, "--topic", "small",
               "--from-beginning", "--timeout-ms", 3000)
    assert r.lines == ["first"], r
    # refused before sending (larger than max.request.size): logged, the next lines still go
    r = script("kafka-console-producer.sh", "--bootstrap-server", b, "--topic", "small",
               "--producer-property", "max.request.size=150", stdin=b"a\n" + b"y" * 300 + b"\nb\n")
    assert r.code == 0 and r.err.startswith("ERROR Error when sending message to topic small "
                                            "with key: null, value: 300 bytes with error: "), r
    r = script("kafka-console-consumer.sh", "--bootstrap-server", b, "--topic", "small",
               "--from-beginning", "--timeout-ms", 3000)
    assert r.lines == ["first", "a", "b"], r
