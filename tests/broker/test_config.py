"""The declarative config table: parsing, validation, layering, topic synonyms."""
import logging

import pytest

from broker.config import (BROKER_CONFIGS, SOURCE_DEFAULT, SOURCE_DYNAMIC_BROKER,
                           SOURCE_DYNAMIC_DEFAULT_BROKER, SOURCE_STATIC_BROKER, SOURCE_TOPIC,
                           TOPIC_CONFIGS, BrokerConfig, ConfigError, parse_overrides,
                           read_properties, validate_topic_configs)

ROOT_PROPERTIES = "config/server.properties"


def test_defaults_are_kafkas():
    config = BrokerConfig({})
    assert config.get("num.partitions") == 1
    assert config.get("socket.request.max.bytes") == 104857600
    assert config.get("log.segment.bytes") == 1073741824
    assert config.get("auto.create.topics.enable") is True
    assert config.get("listeners") == ["PLAINTEXT://:9092"]
    assert config.log_dirs == ["/tmp/kafka-logs"]
    assert config.connections_max_idle_ms == 600000      # attribute-style access


def test_types_are_parsed():
    config = BrokerConfig({"num.partitions": " 6 ", "auto.create.topics.enable": "FALSE",
                           "log.dirs": "/a, /b", "log.cleaner.min.cleanable.ratio": "0.25"})
    assert config.num_partitions == 6
    assert config.auto_create_topics_enable is False
    assert config.log_dirs == ["/a", "/b"]
    assert config.get("log.cleaner.min.cleanable.ratio") == 0.25


def test_wildcard_address_cannot_be_advertised():
    """As Kafka: listeners may bind 0.0.0.0 only with a routable advertised.listeners."""
    with pytest.raises(ConfigError) as info:
        BrokerConfig({"listeners": "PLAINTEXT://0.0.0.0:9092"})
    assert "advertised.listeners" in str(info.value) and "\n" not in str(info.value)
    config = BrokerConfig({"listeners": "PLAINTEXT://0.0.0.0:9092",
                           "advertised.listeners": "PLAINTEXT://broker1:9092"})
    assert config.advertised_listeners[0].host == "broker1"
    assert BrokerConfig({"listeners": "PLAINTEXT://:9092"}).listeners[0].host == ""


@pytest.mark.parametrize("name,value,fragment", [
    ("num.partitions", "0", "at least 1"),
    ("num.partitions", "many", "INT"),
    ("num.partitions", "2147483648", "INT"),
    ("num.partitions", "1_000", "INT"),               # Java's parseInt: no underscores
    ("auto.create.topics.enable", "yes", "true or false"),
    ("compression.type", "brotli", "one of"),
    ("log.cleanup.policy", "delete,shred", "one of"),
    ("listeners", "PLAINTEXT:/x", "endpoint"),
    ("listeners", "PLAINTEXT://127.0.0.1:99999", "out of range"),      # would bind 34463
    ("log.dirs", "", "At least one log directory"),
    ("log.cleaner.min.cleanable.ratio", "1.5", "[0.0,1.0]"),
    ("log.cleaner.dedupe.buffer.size", "1048576", "at least 1MB per cleaner thread"),
    ("log.cleaner.backoff.ms", "-1", "at least 0"),
    # What ZooKeeper's client refuses (it threw from inside kazoo, a traceback, before).
    ("zookeeper.connect", "localhost:abc", "abc"),
    ("zookeeper.connect", "127.0.0.1:70000", "port out of range"),
    ("zookeeper.connect", ",,,", "HostProvider may not be empty"),
    ("zookeeper.connect", "", "HostProvider may not be empty"),     # not "standalone"
    ("zookeeper.connect", "127.0.0.1:2181/kafka/./x", "relative paths"),
    ("zookeeper.connect", "127.0.0.1:2181/kafka//x", "empty node name"),
    ("zookeeper.connect", "127.0.0.1:2181/kafka/", "must not end with /"),
    # Kafka's KafkaConfig.validateValues, between properties.
    ("listeners", "", "at least one broker advertised listener"),
    ("advertised.listeners", "", "at least one broker advertised listener"),
    ("advertised.listeners", "EXTERNAL://127.0.0.1:9999", "subset"),
    ("listeners", "PLAINTEXT://:9092,OTHER://:9092", "different port"),
    ("listener.security.protocol.map", "garbage", "Error parsing"),
    ("listener.security.protocol.map", "PLAINTEXT:BOGUS", "`BOGUS`"),
    ("security.inter.broker.protocol", "bogus", "one of"),
    ("broker.id", "-5", "greater than or equal to -1"),
    ("broker.id", "5000", "not greater than reserved.broker.max.id"),
    ("replica.lag.time.max.ms", "0", "less than or equal to replica.lag.time.max.ms"),
    ("replica.socket.timeout.ms", "-1", "at least replica.fetch.wait.max.ms"),
    ("max.connections.per.ip", "0", "max.connections.per.ip.overrides"),
    ("log.roll.ms", "0", "greater than or equal to 1"),
    ("log.roll.jitter.ms", "-100", "greater than or equal to 0"),
    ("log.retention.ms", "0", "unlimited (-1)"),
    ("log.retention.minutes", "0", "unlimited (-1)"),
    ("replica.selector.class", "", "RackAwareReplicaSelector"),
])
def test_invalid_value_names_the_property(name, value, fragment):
    static = {name: value}
    if "OTHER" in value:
        static["listener.security.protocol.map"] = "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT"
    with pytest.raises(ConfigError) as info:
        BrokerConfig(static)
    message = str(info.value)
    assert fragment in message and "\n" not in message
    assert name in message or name in ("replica.lag.time.max.ms", "log.retention.minutes")


def test_values_kafka_accepts_between_properties():
    # One port for an IPv4 and an IPv6 listener, as Kafka allows.
    BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:9092,OTHER://[::1]:9092",
                  "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT"})
    # A negative retention is unlimited, as Kafka's logRetentionTimeMillis makes it.
    config = BrokerConfig({"log.retention.ms": "-5"})
    assert config.topic_config().retention_ms == -1
    BrokerConfig({"log.retention.hours": "-1", "zookeeper.connect": "[::1]:2181,zk2/kafka"})
    BrokerConfig({"max.connections.per.ip": "0",
                  "max.connections.per.ip.overrides": "127.0.0.1:10"})
    BrokerConfig({"inter.broker.protocol.version": "0.10.2",
                  "log.message.format.version": "0.10.2"})
    with pytest.raises(ConfigError, match="0.11.0 or higher"):
        BrokerConfig({"inter.broker.protocol.version": "0.10.2"})


def test_inter_broker_listener_in_a_cluster():
    zk = {"zookeeper.connect": "127.0.0.1:2181",
          "listeners": "INTERNAL://127.0.0.1:9091,CLIENT://127.0.0.1:9092",
          "listener.security.protocol.map": "INTERNAL:PLAINTEXT,CLIENT:PLAINTEXT"}
    with pytest.raises(ConfigError, match="must be a listener name defined in advertised"):
        BrokerConfig(zk)                    # PLAINTEXT (the default protocol) is no listener
    BrokerConfig({k: v for k, v in zk.items() if k != "zookeeper.connect"})     # alone: fine
    assert BrokerConfig({**zk, "inter.broker.listener.name": "INTERNAL"})
    with pytest.raises(ConfigError, match="not found in listener.security.protocol.map"):
        BrokerConfig({**zk, "inter.broker.listener.name": "FOO"})
    with pytest.raises(ConfigError, match="Only one of"):
        BrokerConfig({**zk, "inter.broker.listener.name": "INTERNAL",
                      "security.inter.broker.protocol": "PLAINTEXT"})
    with pytest.raises(ConfigError, match="greater than or equal to 0"):
        BrokerConfig({"zookeeper.connect": "127.0.0.1:2181", "broker.id": "-1",
                      "broker.id.generation.enable": "false"})


def test_only_plaintext_listeners_and_unique_names():
    with pytest.raises(ConfigError, match="listeners"):
        BrokerConfig({"listeners": "SSL://:9093"})
    with pytest.raises(ConfigError, match="different name"):
        BrokerConfig({"listeners": "PLAINTEXT://:1,PLAINTEXT://:2"})
    config = BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0",
                           "advertised.listeners": "PLAINTEXT://example.com:9999"})
    assert [(l.name, l.host, l.port) for l in config.listeners] == [("PLAINTEXT", "127.0.0.1", 0)]
    assert [(l.host, l.port) for l in config.advertised_listeners] == [("example.com", 9999)]


def test_unknown_property_is_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        config = BrokerConfig({"no.such.thing": "1"})
    assert "no.such.thing" in caplog.text
    assert config.get("no.such.thing") == "1"
    with pytest.raises(KeyError):
        config.get("still.unknown")


# The properties an Apache Kafka 3.x (ZooKeeper mode) server.properties sets, with typical values:
# a user's existing file must start this broker without warnings about unknown names.
KAFKA_3_SERVER_PROPERTIES = """
broker.id=0
listeners=PLAINTEXT://127.0.0.1:9092
advertised.listeners=PLAINTEXT://127.0.0.1:9092
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kafka-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.flush.interval.messages=10000
log.flush.interval.ms=1000
log.retention.hours=168
log.retention.bytes=1073741824
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
zookeeper.connect=localhost:2181
zookeeper.connection.timeout.ms=18000
group.initial.rebalance.delay.ms=0
inter.broker.protocol.version=3.7
log.message.format.version=3.0
reserved.broker.max.id=1000
broker.id.generation.enable=true
num.replica.fetchers=1
"""


def test_a_kafka_server_properties_has_no_unknown_names(caplog):
    with caplog.at_level(logging.WARNING):
        config = BrokerConfig(read_properties(KAFKA_3_SERVER_PROPERTIES))
    assert caplog.text == "" and config.unknown == {}


def test_read_properties_java_syntax():
    text = ("# comment\n! also comment\n\n a = 1\nb:2\nc 3\nd=x\\\n   y\ne=tab\\tsep\n"
            "empty=\n")
    assert read_properties(text) == {"a": "1", "b": "2", "c": "3", "d": "xy", "e": "tab\tsep",
                                     "empty": ""}


def test_from_file_with_overrides(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("broker.id=3\nnum.partitions=2\n")
    config = BrokerConfig.from_file(path, ["num.partitions=7", "log.dirs=/x"])
    assert (config.broker_id, config.num_partitions, config.log_dirs) == (3, 7, ["/x"])
    with pytest.raises(ConfigError, match="name=value"):
        parse_overrides(["nonsense"])


def test_shipped_server_properties_is_valid():
    config = BrokerConfig.from_file(ROOT_PROPERTIES)
    assert config.broker_id == 0
    assert [(l.host, l.port) for l in config.listeners] == [("127.0.0.1", 9092)]
    assert config.log_dirs == ["/tmp/kafka-logs"]
    assert config.get("zookeeper.connect") is None
    assert config.get("offsets.topic.replication.factor") == 1


def test_layers_and_sources():
    config = BrokerConfig({"log.retention.bytes": "100"})
    assert config.source_of("log.retention.bytes") == SOURCE_STATIC_BROKER
    assert config.source_of("log.segment.bytes") == SOURCE_DEFAULT
    config.set_dynamic({"log.retention.bytes": "200"}, cluster_default=True)
    assert config.get("log.retention.bytes") == 200
    assert config.source_of("log.retention.bytes") == SOURCE_DYNAMIC_DEFAULT_BROKER
    config.set_dynamic({"log.retention.bytes": "300"})
    assert config.log_retention_bytes == 300
    assert [s for _, _, s in config.synonyms_of("log.retention.bytes")] == [
        SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT_BROKER, SOURCE_STATIC_BROKER,
        SOURCE_DEFAULT]
    config.set_dynamic({})
    assert config.get("log.retention.bytes") == 200


def test_dynamic_validation():
    config = BrokerConfig({})
    with pytest.raises(ConfigError, match="dynamically"):
        config.set_dynamic({"broker.id": "5"})
    with pytest.raises(ConfigError, match="at least"):
        config.set_dynamic({"log.segment.bytes": "1"})
    # Read-only in Kafka: of a topic config's broker synonyms only the first (log.retention.ms,
    # log.roll.ms, ...) is reconfigurable, and num.partitions is not at all.
    for name in ("num.partitions", "log.retention.hours", "log.retention.minutes",
                 "log.roll.hours", "log.roll.jitter.hours"):
        with pytest.raises(ConfigError, match="dynamically"):
            config.set_dynamic({name: "5"})


def test_dynamic_changes_are_checked_as_kafka_reconfigures():
    config = BrokerConfig({"num.replica.fetchers": "2"})
    config.check_dynamic({"num.replica.fetchers": "4"})
    config.check_dynamic({"num.replica.fetchers": "1"})
    with pytest.raises(ConfigError, match="not be greater than double the current value 2"):
        config.check_dynamic({"num.replica.fetchers": "5"})
    with pytest.raises(ConfigError, match="Log cleaner threads should be at least 1"):
        config.check_dynamic({"log.cleaner.threads": "0"}, cluster_default=True)
    with pytest.raises(ConfigError, match="more than double the current value 1"):
        config.check_dynamic({"log.cleaner.threads": "3"})
    # The checks between properties run on the merged layers.
    with pytest.raises(ConfigError, match="at least 1MB per cleaner thread"):
        config.check_dynamic({"log.cleaner.dedupe.buffer.size": "1000"})
    with pytest.raises(ConfigError, match="log.roll.ms must be greater than or equal to 1"):
        config.set_dynamic({"log.roll.ms": "0"}, cluster_default=True)
    assert config.get("log.roll.ms") is None                   # nothing changed
    # A broker's own layer is merged over the default one.
    config.set_dynamic({"log.cleaner.threads": "2"}, cluster_default=True)
    config.check_dynamic({"log.cleaner.threads": "2"})


def test_topic_config_synonyms_and_units():
    config = BrokerConfig({"log.retention.hours": "2", "log.segment.bytes": "5000"})
    value, source, synonyms = config.topic_value("retention.ms")
    # Kafka's chain starts at the primary synonym (log.retention.ms): with only
    # log.retention.hours set the value comes from it, but the source is DEFAULT_CONFIG and
    # there are no synonyms, so kafka-topics.sh --describe does not list retention.ms
    assert (value, source, synonyms) == (2 * 3600 * 1000, SOURCE_DEFAULT, [])
    assert config.topic_value("segment.bytes")[1:] == (
        SOURCE_STATIC_BROKER, [("log.segment.bytes", "5000", SOURCE_STATIC_BROKER),
                               ("log.segment.bytes", "1073741824", SOURCE_DEFAULT)])
    config = BrokerConfig({"log.retention.hours": "2"})
    config.set_dynamic({"log.retention.ms": "1000"}, cluster_default=True)
    value, source, synonyms = config.topic_value("retention.ms")
    # by source first, then by synonym priority: the cluster-wide dynamic ms, then the hours
    assert (value, source) == (1000, SOURCE_DYNAMIC_DEFAULT_BROKER)
    assert [(n, s) for n, _, s in synonyms] == [
        ("log.retention.ms", SOURCE_DYNAMIC_DEFAULT_BROKER),
        ("log.retention.hours", SOURCE_STATIC_BROKER), ("log.retention.hours", SOURCE_DEFAULT)]
    config = BrokerConfig({"log.retention.minutes": "3", "log.retention.ms": "-1"})
    assert config.topic_value("retention.ms")[0] == -1        # ms wins over minutes
    assert config.topic_value("retention.ms", {"retention.ms": "10"})[:2] == (10, SOURCE_TOPIC)
    log_config = BrokerConfig({"log.segment.bytes": "5000"}).topic_config(
        {"cleanup.policy": "compact", "max.message.bytes": "2048"})
    assert log_config.segment_bytes == 5000
    assert log_config.cleanup_policy == "compact"
    assert log_config.max_message_bytes == 2048
    assert log_config.retention_ms == 7 * 24 * 3600 * 1000


def test_topic_config_validation():
    assert validate_topic_configs({"retention.ms": "100", "cleanup.policy": "compact,delete"}) \
        == {"retention.ms": 100, "cleanup.policy": ["compact", "delete"]}
    with pytest.raises(ConfigError, match="Unknown topic config"):
        validate_topic_configs({"retention.hours": "1"})
    with pytest.raises(ConfigError, match="segment.bytes"):
        validate_topic_configs({"segment.bytes": "1"})
    for bad in ("0: 1", "0 :1", "\u00b2:0", "0:1:2"):      # Kafka's ([0-9]+:[0-9]+), trimmed
        with pytest.raises(ConfigError, match="partitionId:brokerId"):
            validate_topic_configs({"leader.replication.throttled.replicas": bad})
    assert validate_topic_configs({"follower.replication.throttled.replicas": " 0:1 , 1:2"}) \
        == {"follower.replication.throttled.replicas": ["0:1", "1:2"]}


def test_compaction_lags_must_not_conflict():
    with pytest.raises(ConfigError, match=r"conflict topic config setting min.compaction.lag.ms "
                                          r"\(5000\) > max.compaction.lag.ms \(1000\)"):
        validate_topic_configs({"min.compaction.lag.ms": "5000", "max.compaction.lag.ms": "1000"})
    assert validate_topic_configs({"min.compaction.lag.ms": "1000",
                                   "max.compaction.lag.ms": "1000"})


def test_kafka_topic_configs_this_broker_does_not_act_on_are_accepted():
    """Tools that copy a topic's configs from Apache Kafka (mirroring, reassignment throttles)
    send these; Kafka 3.x validates them, and so does this broker."""
    assert validate_topic_configs({
        "message.format.version": "2.8", "follower.replication.throttled.replicas": "*",
        "leader.replication.throttled.replicas": "0:1,1:0", "local.retention.ms": "-2",
        "local.retention.bytes": "1000", "remote.storage.enable": "false",
        "compression.gzip.level": "9", "compression.lz4.level": "17",
        "compression.zstd.level": "-5"}) == {
        "message.format.version": "2.8", "follower.replication.throttled.replicas": ["*"],
        "leader.replication.throttled.replicas": ["0:1", "1:0"], "local.retention.ms": -2,
        "local.retention.bytes": 1000, "remote.storage.enable": False,
        "compression.gzip.level": 9, "compression.lz4.level": 17, "compression.zstd.level": -5}
    for name, value in [("remote.storage.enable", "true"), ("compression.gzip.level", "0"),
                        ("compression.lz4.level", "18"), ("local.retention.ms", "-3"),
                        ("leader.replication.throttled.replicas", "0-1")]:
        with pytest.raises(ConfigError, match=name.replace(".", r"\.")):
            validate_topic_configs({name: value})


def test_table_is_well_formed():
    names = [c.name for c in BROKER_CONFIGS]
    assert len(names) == len(set(names))
    broker_names = set(names)
    for definition in TOPIC_CONFIGS:
        for synonym, factor in definition.synonyms:
            assert synonym in broker_names and factor >= 1
    for definition in BROKER_CONFIGS:
        assert definition.importance in ("high", "medium", "low") and definition.doc


def test_shipped_server_properties_has_only_known_properties():
    with open(ROOT_PROPERTIES) as f:
        text = f.read()
    names = set(read_properties(text))
    commented = {line[1:].split("=")[0].strip() for line in text.splitlines()
                 if line.startswith("#") and "=" in line and " " not in line.split("=")[0]}
    known = {c.name for c in BROKER_CONFIGS}
    assert names <= known and commented <= known, (names | commented) - known


def test_markdown_reference_lists_every_property():
    from broker.config import markdown_table
    table = markdown_table()
    for definition in BROKER_CONFIGS + TOPIC_CONFIGS:
        assert f"| `{definition.name}` |" in table


def test_metadata_versions_parse_as_kafka_parses_them():
    from broker import metadata_version as mv
    assert mv.parse("0.10.0.0") == mv.parse("0.10.0") == mv.parse("0.10.0-IV1")
    assert mv.parse("2.8.1") == mv.parse("2.8") == mv.parse("2.8-IV1")
    assert mv.parse("3.9") == mv.parse("3.9-IV0")
    assert mv.parse("4.0-IV1") > mv.parse("3.9")                # named exactly: accepted
    for bad in ("bogus", "4.0", "3.10", "", "0.10"):
        with pytest.raises(ValueError, match=f"Version {bad} is not a valid version"):
            mv.parse(bad)
    assert mv.before_v2_format("0.10.2") and not mv.before_v2_format("0.11.0")


def test_deprecated_broker_configs_are_accepted_with_a_warning(caplog):
    caplog.set_level("WARNING", logger="broker.config")
    config = BrokerConfig({"log.message.format.version": "0.9.0",
                           "offsets.commit.required.acks": "1",
                           "auto.include.jmx.reporter": "false"})
    assert config.get("offsets.commit.required.acks") == 1
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "isn't a known config" not in text
    assert "Broker configuration log.message.format.version with value 0.9.0 is ignored" in text
    assert "offsets.commit.required.acks is deprecated" in text
    assert "auto.include.jmx.reporter is deprecated" in text
    with pytest.raises(ConfigError, match="Version 0.7 is not a valid version"):
        BrokerConfig({"log.message.format.version": "0.7"})


def test_message_format_warning_only_when_the_ibp_ignores_it(caplog):
    """Kafka warns that a pre-v2 message format is ignored only when the inter-broker protocol
    is 3.0 or later, where it is."""
    caplog.set_level("WARNING", logger="broker.config")
    BrokerConfig({"log.message.format.version": "0.10.2", "inter.broker.protocol.version": "2.8"})
    assert not caplog.records
    BrokerConfig({"log.message.format.version": "0.10.2", "inter.broker.protocol.version": "3.9"})
    assert "inter-broker protocol version `3.9` is greater or equal than 3.0" in caplog.text


def test_listener_and_connection_settings_as_kafka_reads_them():
    # Kafka's URI_PARSE_REGEXP: any listener name, IPv6 without brackets, a zone id.
    BrokerConfig({"listeners": "CLIENT-EXT://:9092",
                  "listener.security.protocol.map": "CLIENT-EXT:PLAINTEXT,"})   # trailing comma
    BrokerConfig({"listeners": "PLAINTEXT://[::]:9092"})       # only 0.0.0.0 is refused
    # A listener named PLAINTEXT is checked against the map like any other.
    with pytest.raises(ConfigError, match="only PLAINTEXT listeners"):
        BrokerConfig({"listeners": "PLAINTEXT://:9092",
                      "listener.security.protocol.map": "PLAINTEXT:SSL"})
    with pytest.raises(ConfigError, match="No security protocol defined for listener PLAINTEXT"):
        BrokerConfig({"listeners": "PLAINTEXT://:9092",
                      "listener.security.protocol.map": "INTERNAL:PLAINTEXT"})
    with pytest.raises(ConfigError, match="max.connections.per.ip.overrides"):
        BrokerConfig({"max.connections.per.ip.overrides": "127.0.0.1:abc"})
    with pytest.raises(ConfigError, match="invalid addresses"):
        BrokerConfig({"max.connections.per.ip.overrides": "bad host!:3"})
    config = BrokerConfig({"max.connections.per.ip.overrides": "localhost:2,0:0:0:0:0:0:0:1:4"})
    assert config.max_connections_for("127.0.0.1") == 2       # a name, resolved
    assert config.max_connections_for("::1") == 4             # another spelling of ::1
    assert config.max_connections_for("10.0.0.9") == config.get("max.connections.per.ip")
    with pytest.raises(ConfigError, match="Log cleaner threads should be at least 1"):
        BrokerConfig({"log.cleaner.threads": "0"})
    with pytest.raises(ConfigError, match="at least 1MB per cleaner thread"):
        BrokerConfig({"log.cleaner.enable": "false", "log.cleaner.dedupe.buffer.size": "1000"})
    config = BrokerConfig({"log.cleaner.threads": "5"})
    config.check_dynamic({"log.cleaner.threads": "2"})         # 5 // 2, as Kafka


def test_a_latin_1_properties_file_is_read_as_java_reads_it(tmp_path):
    path = tmp_path / "server.properties"
    path.write_bytes(b"# caf\xe9\nbroker.id=3\n")
    assert BrokerConfig.from_file(path).broker_id == 3


def test_java_int_reads_what_integer_parse_int_reads():
    from broker.config import java_int
    assert java_int("01") == 1 and java_int("+7") == 7 and java_int("-2147483648") == -2**31
    assert java_int("\u0661\u0660\u0660") == 100          # Character.digit: Unicode digits
    for bad in ("2147483648", "1_000", " 1", "1 ", "", "0x10", "1.0"):
        assert java_int(bad) is None, bad
    assert java_int("9223372036854775807", bits=64) == 2**63 - 1
