"""Topic administration with real admin clients: confluent-kafka (librdkafka) and kafka-python."""
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewPartitions, NewTopic)

pytestmark = pytest.mark.integration

TIMEOUT = 15


def confluent_admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap, "socket.timeout.ms": 10000})


def source_id(entry) -> int:
    return int(getattr(entry.source, "value", entry.source))


def wait(futures: dict) -> dict:
    """{key: result or the exception}"""
    out = {}
    for key, future in futures.items():
        try:
            out[key] = future.result(timeout=TIMEOUT)
        except KafkaException as exc:
            out[key] = exc.args[0]
    return out


def test_confluent_create_describe_alter_delete(kafka_broker):
    admin = confluent_admin(kafka_broker)
    results = wait(admin.create_topics([
        NewTopic("c-orders", num_partitions=3, replication_factor=1,
                 config={"retention.ms": "3600000", "cleanup.policy": "delete"}),
        NewTopic("c-bad", num_partitions=1, replication_factor=3),
        NewTopic("c-badcfg", num_partitions=1, replication_factor=1,
                 config={"retention.ms": "forever"}),
    ], operation_timeout=10))
    assert results["c-orders"] is None
    assert results["c-bad"].name() == "INVALID_REPLICATION_FACTOR"
    assert results["c-badcfg"].name() == "INVALID_CONFIG"
    again = wait(admin.create_topics([NewTopic("c-orders", 1, 1)]))
    assert again["c-orders"].name() == "TOPIC_ALREADY_EXISTS"

    metadata = admin.list_topics(timeout=TIMEOUT)
    assert sorted(metadata.topics["c-orders"].partitions) == [0, 1, 2]
    assert metadata.topics["c-orders"].partitions[0].leader == 0
    assert "c-bad" not in metadata.topics
    assert admin.list_topics(timeout=TIMEOUT).cluster_id

    resource = ConfigResource(ConfigResource.Type.TOPIC, "c-orders")
    [configs] = wait(admin.describe_configs([resource])).values()
    assert configs["retention.ms"].value == "3600000"
    assert source_id(configs["retention.ms"]) == 1                # DYNAMIC_TOPIC_CONFIG
    assert source_id(configs["segment.bytes"]) == 4               # STATIC_BROKER_CONFIG
    assert configs["index.interval.bytes"].is_default

    resource = ConfigResource(ConfigResource.Type.TOPIC, "c-orders", incremental_configs=[
        ConfigEntry("segment.bytes", "2000000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    assert list(wait(admin.incremental_alter_configs([resource])).values()) == [None]
    [configs] = wait(admin.describe_configs(
        [ConfigResource(ConfigResource.Type.TOPIC, "c-orders")])).values()
    assert configs["segment.bytes"].value == "2000000"
    assert configs["retention.ms"].value == "604800000"

    assert wait(admin.create_partitions([NewPartitions("c-orders", 5)])) == {"c-orders": None}
    assert len(admin.list_topics(timeout=TIMEOUT).topics["c-orders"].partitions) == 5
    shrink = wait(admin.create_partitions([NewPartitions("c-orders", 2)]))
    assert shrink["c-orders"].name() == "INVALID_PARTITIONS"

    assert wait(admin.delete_topics(["c-orders"], operation_timeout=10)) == {"c-orders": None}
    missing = wait(admin.delete_topics(["c-orders"]))
    assert missing["c-orders"].name() == "UNKNOWN_TOPIC_OR_PART"
    assert "c-orders" not in admin.list_topics(timeout=TIMEOUT).topics


def test_confluent_describe_cluster_and_broker_configs(kafka_broker):
    admin = confluent_admin(kafka_broker)
    cluster = admin.describe_cluster().result(timeout=TIMEOUT)
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(0, "127.0.0.1",
                                                                kafka_broker.port)]
    assert cluster.controller.id == 0 and cluster.cluster_id
    [configs] = wait(admin.describe_configs(
        [ConfigResource(ConfigResource.Type.BROKER, "0")])).values()
    assert configs["log.dirs"].value == kafka_broker.log_dir
    assert configs["log.dirs"].is_read_only
    resource = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry("log.retention.bytes", "123456789",
                    incremental_operation=AlterConfigOpType.SET)])
    assert list(wait(admin.incremental_alter_configs([resource])).values()) == [None]
    [configs] = wait(admin.describe_configs(
        [ConfigResource(ConfigResource.Type.BROKER, "0")])).values()
    assert configs["log.retention.bytes"].value == "123456789"
    # Persisted: still there after a restart.
    kafka_broker.restart()
    admin = confluent_admin(kafka_broker)
    [configs] = wait(admin.describe_configs(
        [ConfigResource(ConfigResource.Type.BROKER, "0")])).values()
    assert configs["log.retention.bytes"].value == "123456789"


def test_confluent_validate_only(kafka_broker):
    admin = confluent_admin(kafka_broker)
    results = wait(admin.create_topics([NewTopic("c-dry", 2, 1)], validate_only=True))
    assert results == {"c-dry": None}
    assert "c-dry" not in admin.list_topics(timeout=TIMEOUT).topics


def _kafka_python_partitions(broker, topic):
    """kafka-python's producer asks Metadata for just this topic, auto-creation allowed."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, max_block_ms=3000)
    try:
        return producer.partitions_for(topic)
    except KafkaTimeoutError:
        return None
    finally:
        producer.close()


def _aiokafka_send(broker, topic):
    """aiokafka's producer: send one message to `topic`; the exception if it fails."""
    import asyncio

    from aiokafka import AIOKafkaProducer

    async def send():
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, request_timeout_ms=3000)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"x")
            return None
        except Exception as exc:        # noqa: BLE001 - the test looks at what it is
            return exc
        finally:
            await producer.stop()

    return asyncio.run(send())


def _confluent_send(broker, topic):
    """librdkafka's producer: the delivery error of one message to `topic` (None = delivered)."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 5000,
                         "topic.metadata.propagation.max.ms": 1000})
    errors = []
    producer.produce(topic, b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(15)
    assert len(errors) == 1
    return errors[0]


def test_auto_create_on(broker_process):
    broker = broker_process(num_partitions=2)
    admin = confluent_admin(broker)
    metadata = admin.list_topics(topic="auto-librdkafka", timeout=TIMEOUT)
    assert sorted(metadata.topics["auto-librdkafka"].partitions) == [0, 1]
    assert _kafka_python_partitions(broker, "auto-kafka-python") == {0, 1}
    assert _aiokafka_send(broker, "auto-aiokafka") is None
    assert _confluent_send(broker, "auto-produced") is None
    topics = admin.list_topics(timeout=TIMEOUT).topics
    for name in ("auto-librdkafka", "auto-kafka-python", "auto-aiokafka", "auto-produced"):
        assert sorted(topics[name].partitions) == [0, 1], name


def test_auto_create_off(broker_process):
    """Metadata answers UNKNOWN_TOPIC_OR_PARTITION and nothing is created; producers of all
    three libraries fail to deliver instead of creating the topic."""
    from aiokafka.errors import UnknownTopicOrPartitionError
    broker = broker_process(auto_create_topics_enable="false")
    admin = confluent_admin(broker)
    metadata = admin.list_topics(topic="never-created", timeout=TIMEOUT)
    assert metadata.topics["never-created"].error.name() == "UNKNOWN_TOPIC_OR_PART"
    assert _kafka_python_partitions(broker, "never-either") is None
    assert isinstance(_aiokafka_send(broker, "never-aiokafka"),
                      UnknownTopicOrPartitionError)
    error = _confluent_send(broker, "never-produced")
    assert error is not None and error.name() in ("_UNKNOWN_TOPIC", "UNKNOWN_TOPIC_OR_PART")
    assert admin.list_topics(timeout=TIMEOUT).topics == {}


def test_invalid_topic_name_is_refused(kafka_broker):
    admin = confluent_admin(kafka_broker)
    results = wait(admin.create_topics([NewTopic("bad/name", 1, 1)]))
    assert results["bad/name"].name() == "TOPIC_EXCEPTION"          # librdkafka: code 17
    metadata = admin.list_topics(topic="bad name", timeout=TIMEOUT)
    assert metadata.topics["bad name"].error.name() == "TOPIC_EXCEPTION"


def test_kafka_python_admin(kafka_broker):
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType
    from kafka.admin import NewPartitions as KNewPartitions
    from kafka.admin import NewTopic as KNewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        admin.create_topics([KNewTopic("kp-topic", 2, 1, topic_configs={"retention.ms": "7777"})])
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([KNewTopic("kp-topic", 1, 1)])
        assert "kp-topic" in admin.list_topics()
        [described] = admin.describe_topics(["kp-topic"])
        assert described["error_code"] == 0 and len(described["partitions"]) == 2

        response = admin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "kp-topic")])
        configs = _config_values(response)
        assert configs["retention.ms"] == "7777"

        # kafka-python 3 uses IncrementalAlterConfigs by default: other overrides stay.
        admin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "kp-topic",
                                             configs={"segment.bytes": "3000000"})])
        configs = _config_values(admin.describe_configs(
            [KConfigResource(ConfigResourceType.TOPIC, "kp-topic")]))
        assert (configs["segment.bytes"], configs["retention.ms"]) == ("3000000", "7777")
        # Legacy AlterConfigs (kafka-python resends the other overrides itself).
        admin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "kp-topic",
                                             configs={"segment.bytes": "4000000"})],
                            incremental=False)
        configs = _config_values(admin.describe_configs(
            [KConfigResource(ConfigResourceType.TOPIC, "kp-topic")]))
        assert (configs["segment.bytes"], configs["retention.ms"]) == ("4000000", "7777")
        admin.reset_configs([KConfigResource(ConfigResourceType.TOPIC, "kp-topic",
                                             configs=["retention.ms"])])
        configs = _config_values(admin.describe_configs(
            [KConfigResource(ConfigResourceType.TOPIC, "kp-topic")]))
        assert configs.get("retention.ms", "604800000") == "604800000"

        admin.create_partitions({"kp-topic": KNewPartitions(4)})
        [described] = admin.describe_topics(["kp-topic"])
        assert len(described["partitions"]) == 4

        cluster = admin.describe_cluster()
        assert cluster["controller_id"] == 0 and len(cluster["brokers"]) == 1

        admin.delete_topics(["kp-topic"])
        assert "kp-topic" not in admin.list_topics()
    finally:
        admin.close()


def _config_values(response) -> dict:
    """name -> value from kafka-python's describe_configs answer:
    {"topic": {"<name>": {"<config>": {"value": ..., "config_source": ...}}}}. kafka-python 3
    lists the configs that are not plain defaults."""
    out = {}
    for resources in response.values():
        for configs in resources.values():
            for name, entry in configs.items():
                out[name] = entry["value"]
    return out


def test_aiokafka_admin(kafka_broker):
    import asyncio

    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin import NewPartitions as ANewPartitions
    from aiokafka.admin import NewTopic as ANewTopic
    from aiokafka.admin.config_resource import ConfigResource as AConfigResource
    from aiokafka.admin.config_resource import ConfigResourceType as AType

    async def scenario():
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
        await admin.start()
        try:
            created = await admin.create_topics(
                [ANewTopic("aio-topic", 2, 1, topic_configs={"retention.ms": "1000"})])
            assert [e[1] for e in created.topic_errors] == [0]
            assert "aio-topic" in await admin.list_topics()
            [described] = await admin.describe_topics(["aio-topic"])
            assert described["error_code"] == 0 and len(described["partitions"]) == 2
            [response] = await admin.describe_configs(
                [AConfigResource(AType.TOPIC, "aio-topic")])
            entries = {e[0]: e[1] for e in response.resources[0][4]}
            assert entries["retention.ms"] == "1000"
            [altered] = await admin.alter_configs([AConfigResource(
                AType.TOPIC, "aio-topic", configs={"segment.bytes": "100000"})])
            assert altered.resources[0][0] == 0
            grown = await admin.create_partitions({"aio-topic": ANewPartitions(3)})
            assert [e[1] for e in grown.topic_errors] == [0]
            cluster = await admin.describe_cluster()
            assert cluster["controller_id"] == 0 and len(cluster["brokers"]) == 1
            deleted = await admin.delete_topics(["aio-topic"])
            assert [e[1] for e in deleted.topic_error_codes] == [0]
            assert "aio-topic" not in await admin.list_topics()
        finally:
            await admin.close()

    asyncio.run(scenario())


def test_deprecated_configs_are_accepted_with_kafkas_warning(broker_process):
    """Older clients and test suites send Kafka 3.9's deprecated configs: accepted (and ignored
    or honoured), with Kafka's warning in the broker log; an invalid version is still refused."""
    from kafka.admin import ConfigResource as KpResource, ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic
    broker = broker_process(log_message_format_version="0.10.2", offsets_commit_required_acks=1)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([KpNewTopic("legacy", 1, 1)])
        def alter(configs):
            answer = admin.alter_configs([KpResource(ConfigResourceType.TOPIC, "legacy",
                                                     configs=configs)])
            return answer["topic"]["legacy"]
        assert alter({"message.format.version": "0.10.0.0",
                      "message.timestamp.difference.max.ms": "1000"}) == "OK"
        assert alter({"message.format.version": "2.8.1"}) == "OK"       # read as "2.8"
        assert alter({"message.format.version": "bogus"}) == (
            "[Error 40] InvalidConfigurationError: Invalid value bogus for configuration "
            "message.format.version: Version bogus is not a valid version")
    finally:
        admin.close()
    out = broker.output()
    assert ("WARN Topic configuration message.format.version with value `0.10.0.0` is ignored "
            "for `legacy` because the inter-broker protocol version") in out
    assert ("WARN Broker configuration log.message.format.version with value 0.10.2 is "
            "ignored") in out
    assert ("WARN offsets.commit.required.acks is deprecated and it will be removed in Apache "
            "Kafka 4.0.") in out
    assert "WARN message.timestamp.difference.max.ms is deprecated since Kafka 3.6" in out
    assert "isn't a known config" not in out


def test_a_deleted_topics_committed_offsets_go_with_it(kafka_broker):
    """Kafka's onPartitionsDeleted: a group's offsets of a deleted topic are gone, so a topic
    created again under the name is read from auto.offset.reset, not from the old offsets."""
    from tests.integration.test_cluster import committed_offset
    admin = confluent_admin(kafka_broker)
    assert wait(admin.create_topics([NewTopic("c-again", 1, 1)]))["c-again"] is None
    assert committed_offset(kafka_broker.bootstrap, "c-again", offset=42,
                            group="g-again") == 42
    assert wait(admin.delete_topics(["c-again"], operation_timeout=10))["c-again"] is None
    assert wait(admin.create_topics([NewTopic("c-again", 1, 1)]))["c-again"] is None
    assert committed_offset(kafka_broker.bootstrap, "c-again", group="g-again") < 0


def test_acls_answer_that_no_authorizer_is_configured(kafka_broker):
    """Kafka without authorizer.class.name (its default) answers every ACL call SECURITY_DISABLED
    ("No Authorizer is configured on the broker"); admin tools and UIs report ACLs as disabled.
    The APIs were not served: the clients got an unsupported API."""
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation,
                                       AclPermissionType, ResourcePatternType, ResourceType)
    admin = confluent_admin(kafka_broker)
    any_acl = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                               AclOperation.ANY, AclPermissionType.ANY)
    # librdkafka's DescribeAcls result keeps the answer's error to itself: no ACLs
    assert admin.describe_acls(any_acl).result(timeout=TIMEOUT) == []
    binding = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    [created] = admin.create_acls([binding]).values()
    with pytest.raises(KafkaException) as refused:
        created.result(timeout=TIMEOUT)
    assert refused.value.args[0].name() == "SECURITY_DISABLED"
    [deleted] = admin.delete_acls([any_acl]).values()
    with pytest.raises(KafkaException) as refused:
        deleted.result(timeout=TIMEOUT)
    assert refused.value.args[0].name() == "SECURITY_DISABLED"

    from kafka.admin import (ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             KafkaAdminClient, ResourcePatternFilter)
    from kafka.admin import ResourceType as KpResourceType
    from kafka.errors import SecurityDisabledError
    client = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        with pytest.raises(SecurityDisabledError, match="No Authorizer is configured on the broker"):
            client.describe_acls(ACLFilter(
                principal=None, host="*", operation=ACLOperation.ANY,
                permission_type=ACLPermissionType.ANY,
                resource_pattern=ResourcePatternFilter(KpResourceType.ANY, None,
                                                       ACLResourcePatternType.ANY)))
    finally:
        client.close()
    # the broker still serves this connection's other requests
    assert admin.list_topics(timeout=TIMEOUT).brokers
