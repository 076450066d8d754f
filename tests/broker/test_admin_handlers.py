"""Admin APIs over real sockets against an in-process broker (real storage underneath)."""
import os
import uuid

import pytest

from protocol.errors import ErrorCode
from protocol.messages.alter_configs import AlterConfigsRequest
from protocol.messages.create_partitions import CreatePartitionsRequest
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.delete_topics import DeleteTopicsRequest
from protocol.messages.describe_cluster import DescribeClusterRequest
from protocol.messages.describe_configs import DescribeConfigsRequest
from protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from protocol.messages.metadata import MetadataRequest

from broker.config import SOURCE_DEFAULT, SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT_BROKER, \
    SOURCE_STATIC_BROKER, SOURCE_TOPIC
from broker.handlers.metadata import CLUSTER_OPERATIONS
from tests.broker.conftest import RawClient

CT = CreateTopicsRequest
TOPIC, BROKER = 2, 4


def creatable(name, partitions=-1, rf=-1, configs=None, assignments=None):
    return CT.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=rf,
        configs=[CT.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()],
        assignments=[CT.CreatableReplicaAssignment(partition_index=p, broker_ids=b)
                     for p, b in (assignments or {}).items()])


async def create(client, *topics, version=7, validate_only=False):
    response = await client.request(CT(topics=list(topics), timeout_ms=1000,
                                       validate_only=validate_only), version)
    return {t.name: t for t in response.topics}


async def metadata(client, names=None, version=12, auto=True):
    topics = None if names is None else [MetadataRequest.MetadataRequestTopic(name=n)
                                         for n in names]
    return await client.request(MetadataRequest(topics=topics, allow_auto_topic_creation=auto),
                                version)


async def test_create_topic_and_metadata_every_version(client, broker):
    result = (await create(client, creatable("orders", 3)))["orders"]
    assert result.error_code == 0 and result.num_partitions == 3 and result.replication_factor == 1
    assert result.topic_id != uuid.UUID(int=0)
    assert {c.name: c.value for c in result.configs}["retention.ms"] == "604800000"
    for version in range(0, 13):
        response = await metadata(client, ["orders"], version=version)
        [topic] = response.topics
        assert topic.error_code == 0 and topic.name == "orders"
        assert [p.partition_index for p in topic.partitions] == [0, 1, 2]
        assert all(p.leader_id == 0 and p.replica_nodes == [0] and p.isr_nodes == [0]
                   for p in topic.partitions)
        assert response.brokers[0].port == broker.port
        if version >= 10:
            assert topic.topic_id == result.topic_id
        if version >= 2:
            assert response.cluster_id == broker.cluster_id
    for partition in range(3):
        assert broker.replica_manager.get_partition("orders", partition) is not None
        assert os.path.isdir(os.path.join(broker.config.log_dirs[0], f"orders-{partition}"))


async def test_topic_ids_are_logged_as_the_tools_print_them(client, caplog):
    """Kafka's base64 form (kafka-topics.sh --describe's TopicId), not Python's UUID text."""
    import base64
    caplog.set_level("INFO", logger="broker.topics")
    result = (await create(client, creatable("logged", 1)))["logged"]
    text = base64.urlsafe_b64encode(result.topic_id.bytes).decode().rstrip("=")
    assert any(f"Created topic logged with topic id {text}," in r.getMessage()
               for r in caplog.records)


async def test_metadata_by_topic_id_and_all_topics(client):
    created = (await create(client, creatable("a", 1), creatable("b", 2)))
    response = await client.request(MetadataRequest(topics=[
        MetadataRequest.MetadataRequestTopic(name=None, topic_id=created["b"].topic_id),
        MetadataRequest.MetadataRequestTopic(name=None, topic_id=uuid.uuid4())]), 12)
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("b", 0), (None, ErrorCode.UNKNOWN_TOPIC_ID)]
    assert sorted(t.name for t in (await metadata(client)).topics) == ["a", "b"]
    assert sorted(t.name for t in (await client.request(MetadataRequest(topics=[]), 0)).topics) \
        == ["a", "b"]                                   # v0: empty list = all
    assert (await client.request(MetadataRequest(topics=[]), 1)).topics == []


async def test_metadata_auto_create(client, broker):
    response = await metadata(client, ["auto"])
    [topic] = response.topics
    assert topic.error_code == 0 and len(topic.partitions) == 1
    assert broker.metadata.get_topic("auto") is not None
    # allow_auto_topic_creation=false (v4+) is honoured.
    [topic] = (await metadata(client, ["not-created"], auto=False)).topics
    assert topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert broker.metadata.get_topic("not-created") is None


async def test_metadata_auto_create_uses_num_partitions(start_broker):
    broker = await start_broker(num_partitions=4)
    client = await RawClient.connect(broker.port)
    [topic] = (await metadata(client, ["four"], version=1)).topics
    assert len(topic.partitions) == 4
    await client.close()


async def test_metadata_auto_create_with_too_high_default_replication(start_broker):
    """default.replication.factor above the live brokers: the topic's error, nothing created."""
    broker = await start_broker(default_replication_factor=3)
    client = await RawClient.connect(broker.port)
    [topic] = (await metadata(client, ["three"])).topics
    assert topic.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert broker.metadata.get_topic("three") is None
    await client.close()


async def test_metadata_auto_create_disabled(start_broker):
    broker = await start_broker(auto_create_topics_enable="false")
    client = await RawClient.connect(broker.port)
    [topic] = (await metadata(client, ["nope"])).topics
    assert topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert broker.metadata.get_topic("nope") is None
    await client.close()


@pytest.mark.parametrize("name", ["bad name", "..", ".", "x" * 250, "ü", "a/b"])
async def test_invalid_topic_names(client, name):
    [topic] = (await metadata(client, [name])).topics
    assert topic.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert (await create(client, creatable(name, 1)))[name].error_code == \
        ErrorCode.INVALID_TOPIC_EXCEPTION


async def test_create_topics_errors(client):
    await create(client, creatable("exists", 1))
    results = await create(
        client,
        creatable("exists", 1),
        creatable("zero", 0),
        creatable("rf", 1, 3),
        creatable("cfg", 1, configs={"retention.ms": "soon"}),
        creatable("unknowncfg", 1, configs={"retention.days": "1"}),
        creatable("assign", assignments={0: [0], 1: [5]}),
        creatable("both", 2, assignments={0: [0]}),
        creatable("gap", assignments={0: [0], 2: [0]}),
    )
    codes = {name: r.error_code for name, r in results.items()}
    assert codes == {
        "exists": ErrorCode.TOPIC_ALREADY_EXISTS,
        "zero": ErrorCode.INVALID_PARTITIONS,
        "rf": ErrorCode.INVALID_REPLICATION_FACTOR,
        "cfg": ErrorCode.INVALID_CONFIG,
        "unknowncfg": ErrorCode.INVALID_CONFIG,
        "assign": ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        "both": ErrorCode.INVALID_REQUEST,
        "gap": ErrorCode.INVALID_REPLICA_ASSIGNMENT,
    }
    assert all(r.error_message for r in results.values())
    assert results["rf"].configs == [] and results["rf"].num_partitions == -1


async def test_create_topics_duplicate_in_request(client):
    response = await client.request(CT(topics=[creatable("dup", 1), creatable("dup", 1)]), 5)
    assert [(t.error_code, t.error_message) for t in response.topics] == [
        (ErrorCode.INVALID_REQUEST, "Found multiple entries for this topic.")] * 2


async def test_create_topics_validate_only_and_assignments(client, broker):
    result = (await create(client, creatable("v", 5, configs={"cleanup.policy": "compact"}),
                           validate_only=True))["v"]
    assert result.error_code == 0 and result.num_partitions == 5
    assert {c.name: (c.value, c.config_source) for c in result.configs}["cleanup.policy"] == \
        ("compact", SOURCE_TOPIC)
    assert broker.metadata.get_topic("v") is None
    result = (await create(client, creatable("explicit", assignments={0: [0], 1: [0]})))
    assert result["explicit"].error_code == 0
    assert len(broker.metadata.get_topic("explicit").partitions) == 2


async def test_create_topics_old_versions(client):
    for version in range(0, 5):
        name = f"old{version}"
        result = (await create(client, creatable(name, 1, 1), version=version))[name]
        assert result.error_code == 0


async def test_topic_configs_reach_the_log(client, broker):
    await create(client, creatable("conf", 1, configs={"segment.bytes": "100000",
                                                      "retention.ms": "60000"}))
    log = broker.replica_manager.get_partition("conf", 0).log
    assert (log.config.segment_bytes, log.config.retention_ms) == (100000, 60000)


async def test_delete_topics_by_name_and_id(client, broker):
    created = await create(client, creatable("d1", 2), creatable("d2", 1))
    response = await client.request(DeleteTopicsRequest(topic_names=["d1", "missing"],
                                                        timeout_ms=1000), 5)
    assert {r.name: r.error_code for r in response.responses} == {
        "d1": 0, "missing": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert broker.replica_manager.get_partition("d1", 0) is None
    response = await client.request(DeleteTopicsRequest(topics=[
        DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=created["d2"].topic_id),
        DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=uuid.uuid4())]), 6)
    assert [(r.name, r.error_code) for r in response.responses] == [
        ("d2", 0), (None, ErrorCode.UNKNOWN_TOPIC_ID)]
    assert (await metadata(client)).topics == []
    # Gone from disk once file.delete.delay.ms passes: renamed to *-delete now.
    names = os.listdir(broker.config.log_dirs[0])
    assert not any(n in ("d1-0", "d1-1", "d2-0") for n in names)
    # Named twice: deleted once, answered in the first entry (Kafka's result collection)
    await create(client, creatable("d3", 1))
    response = await client.request(DeleteTopicsRequest(topic_names=["d3", "d3"]), 5)
    assert [(r.name, r.error_code) for r in response.responses] == [("d3", 0), ("d3", 0)]
    assert broker.metadata.get_topic("d3") is None


async def test_delete_topic_disabled(start_broker):
    broker = await start_broker(delete_topic_enable="false")
    client = await RawClient.connect(broker.port)
    await create(client, creatable("keep", 1))
    response = await client.request(DeleteTopicsRequest(topic_names=["keep", "nope"]), 4)
    assert [r.error_code for r in response.responses] == [ErrorCode.TOPIC_DELETION_DISABLED] * 2
    response = await client.request(DeleteTopicsRequest(topic_names=["keep"]), 2)
    assert response.responses[0].error_code == ErrorCode.INVALID_REQUEST   # v2 lacks the code
    await client.close()


async def test_create_partitions(client, broker):
    await create(client, creatable("grow", 1))
    CP = CreatePartitionsRequest
    response = await client.request(CP(topics=[
        CP.CreatePartitionsTopic(name="grow", count=3, assignments=None),
        CP.CreatePartitionsTopic(name="missing", count=3, assignments=None)]), 3)
    assert {r.name: r.error_code for r in response.results} == {
        "grow": 0, "missing": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert len((await metadata(client, ["grow"])).topics[0].partitions) == 3
    assert broker.replica_manager.get_partition("grow", 2) is not None
    response = await client.request(CP(topics=[
        CP.CreatePartitionsTopic(name="grow", count=2, assignments=None)]), 1)
    assert response.results[0].error_code == ErrorCode.INVALID_PARTITIONS
    response = await client.request(CP(topics=[CP.CreatePartitionsTopic(
        name="grow", count=5, assignments=[CP.CreatePartitionsAssignment(broker_ids=[0])])]), 2)
    assert response.results[0].error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    response = await client.request(CP(topics=[CP.CreatePartitionsTopic(
        name="grow", count=4, assignments=None)], validate_only=True), 0)
    assert response.results[0].error_code == 0
    assert len(broker.metadata.get_topic("grow").partitions) == 3


async def describe(client, resource_type, name, keys=None, version=4, synonyms=True, docs=True):
    DC = DescribeConfigsRequest
    response = await client.request(DC(resources=[DC.DescribeConfigsResource(
        resource_type=resource_type, resource_name=name, configuration_keys=keys)],
        include_synonyms=synonyms, include_documentation=docs), version)
    return response.results[0]


async def test_describe_topic_configs(client):
    await create(client, creatable("dc", 1, configs={"retention.ms": "1234"}))
    result = await describe(client, TOPIC, "dc")
    assert result.error_code == 0
    configs = {c.name: c for c in result.configs}
    assert configs["retention.ms"].value == "1234"
    assert configs["retention.ms"].config_source == SOURCE_TOPIC
    # Kafka's chain starts at log.retention.ms, which has no default: log.retention.hours
    # (default 168) is not listed
    assert [s.name for s in configs["retention.ms"].synonyms] == ["retention.ms"]
    assert configs["segment.bytes"].config_source == SOURCE_DEFAULT
    assert configs["segment.bytes"].config_type == 3 and configs["segment.bytes"].documentation
    only = await describe(client, TOPIC, "dc", keys=["cleanup.policy"], version=0)
    assert [(c.name, c.value, c.is_default) for c in only.configs] == [
        ("cleanup.policy", "delete", True)]
    missing = await describe(client, TOPIC, "nope")
    assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    bad = await describe(client, TOPIC, "bad name")
    assert bad.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


async def test_describe_broker_configs(client, broker):
    result = await describe(client, BROKER, "0")
    configs = {c.name: c for c in result.configs}
    assert configs["log.dirs"].value == broker.config.log_dirs[0]
    assert configs["log.dirs"].config_source == SOURCE_STATIC_BROKER
    assert configs["log.dirs"].read_only is True
    assert configs["log.retention.bytes"].read_only is False
    assert configs["num.io.threads"].config_source == SOURCE_DEFAULT
    assert (await describe(client, BROKER, "7")).error_code == ErrorCode.INVALID_REQUEST
    assert (await describe(client, BROKER, "")).configs == []


async def test_broker_configs_as_kafkas_config_helper_describes_them(start_broker):
    # Kafka's ConfigHelper.createBrokerConfigEntry / configSynonyms / brokerConfigSynonyms
    from tests.broker.conftest import RawClient
    broker = await start_broker(**{"delegation.token.secret.key": "s3cr3t", "log.retention.ms": "5000",
                                   "log.retention.minutes": "10", "log.flush.interval.ms": "1000",
                                   "my.own.setting": "x"})
    client = await RawClient.connect(broker.port)
    try:
        configs = {c.name: c for c in (await describe(client, BROKER, "0")).configs}
        secret = configs["delegation.token.secret.key"]
        assert secret.value is None and secret.is_sensitive
        assert [(s.name, s.value) for s in secret.synonyms] == [("delegation.token.secret.key", None)]
        assert [(s.name, s.value, s.source) for s in configs["log.retention.ms"].synonyms] == [
            ("log.retention.ms", "5000", SOURCE_STATIC_BROKER),
            ("log.retention.minutes", "10", SOURCE_STATIC_BROKER),
            ("log.retention.hours", "168", SOURCE_DEFAULT)]
        assert [s.name for s in configs["log.retention.hours"].synonyms] == ["log.retention.hours"]
        assert [(s.name, s.source) for s in configs["log.flush.interval.ms"].synonyms] == [
            ("log.flush.interval.ms", SOURCE_STATIC_BROKER),
            ("log.flush.scheduler.interval.ms", SOURCE_DEFAULT)]
        assert configs["log.cleaner.io.max.bytes.per.second"].value == "1.7976931348623157E308"
        # a property no config knows: listed, null and sensitive (its type is unknown)
        own = configs["my.own.setting"]
        assert (own.value, own.is_sensitive, own.read_only, own.config_source, own.config_type) == (
            None, True, True, SOURCE_STATIC_BROKER, 0)
        assert configs["listeners"].config_type == 2 and configs["log.dirs"].config_type == 2
        # quota rates and settings Kafka has not: only once set
        for name in ("leader.replication.throttled.rate", "cluster.id",
                     "producer.id.expiration.check.interval.ms"):
            assert name not in configs
        IAC = IncrementalAlterConfigsRequest
        response = await client.request(IAC(resources=[IAC.AlterConfigsResource(
            resource_type=BROKER, resource_name="0", configs=[IAC.AlterableConfig(
                name="leader.replication.throttled.rate", config_operation=0, value="1000")])]), 1)
        assert response.responses[0].error_code == 0
        rate = {c.name: c for c in (await describe(client, BROKER, "0")).configs}[
            "leader.replication.throttled.rate"]
        assert (rate.value, rate.read_only, rate.config_source) == ("1000", True, SOURCE_DYNAMIC_BROKER)
        assert [(s.name, s.source) for s in rate.synonyms] == [
            ("leader.replication.throttled.rate", SOURCE_DYNAMIC_BROKER)]
        # an empty key list is every config; a broker id is a Java int
        assert len((await describe(client, BROKER, "0", keys=[])).configs) == len(configs) + 1
        assert (await describe(client, BROKER, "00")).error_code == 0
        bad = await describe(client, BROKER, "zero")
        assert (bad.error_code, bad.error_message) == (ErrorCode.INVALID_REQUEST,
                                                       "Broker id must be an integer, but it is: zero")
    finally:
        await client.close()


async def test_alter_topic_configs_replaces_overrides(client, broker):
    await create(client, creatable("ac", 1, configs={"retention.ms": "1000",
                                                    "cleanup.policy": "compact"}))
    AC = AlterConfigsRequest
    response = await client.request(AC(resources=[AC.AlterConfigsResource(
        resource_type=TOPIC, resource_name="ac",
        configs=[AC.AlterableConfig(name="segment.bytes", value="50000")])]), 1)
    assert response.responses[0].error_code == 0
    assert broker.metadata.topic_config("ac") == {"segment.bytes": "50000"}
    assert broker.replica_manager.get_partition("ac", 0).log.config.segment_bytes == 50000
    response = await client.request(AC(resources=[
        AC.AlterConfigsResource(resource_type=TOPIC, resource_name="ac", configs=[
            AC.AlterableConfig(name="segment.bytes", value="tiny")]),
        AC.AlterConfigsResource(resource_type=TOPIC, resource_name="gone", configs=[])]), 2)
    assert [r.error_code for r in response.responses] == [
        ErrorCode.INVALID_CONFIG, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]


async def test_alter_dynamic_broker_config_persists(start_broker, tmp_path):
    broker = await start_broker(log_retention_bytes=100)
    client = await RawClient.connect(broker.port)
    await create(client, creatable("inherit", 1))
    AC = AlterConfigsRequest

    async def alter(resource_name, name, value):
        response = await client.request(AC(resources=[AC.AlterConfigsResource(
            resource_type=BROKER, resource_name=resource_name,
            configs=[AC.AlterableConfig(name=name, value=value)])]), 0)
        return response.responses[0].error_code

    assert await alter("0", "log.retention.bytes", "555") == 0
    assert await alter("", "log.segment.bytes", "2000000") == 0
    assert await alter("0", "broker.id", "5") == ErrorCode.INVALID_REQUEST
    assert await alter("", "num.partitions", "2") == ErrorCode.INVALID_REQUEST  # read-only
    # Kafka's ConfigAdminManager.validateBrokerConfigChange: INVALID_REQUEST (KAFKA-13609)
    assert await alter("0", "message.max.bytes", "-5") == ErrorCode.INVALID_REQUEST
    assert await alter("00", "log.retention.bytes", "555") == 0          # a Java int
    assert await alter("zero", "log.retention.bytes", "556") == ErrorCode.INVALID_REQUEST
    assert await alter("0", "message.max.bytes", None) == ErrorCode.INVALID_REQUEST
    # A resource named twice in one request: both refused, nothing changed (Kafka's
    # ConfigAdminManager.preprocess).
    response = await client.request(AC(resources=[AC.AlterConfigsResource(
        resource_type=BROKER, resource_name="0", configs=[
            AC.AlterableConfig(name="log.retention.bytes", value=v)]) for v in ("1", "2")]), 0)
    assert [r.error_code for r in response.responses] == [ErrorCode.INVALID_REQUEST] * 2
    # The last three were refused and changed nothing.
    assert broker.config.get("log.retention.bytes") == 555
    assert broker.config.get("num.partitions") == 1
    assert broker.replica_manager.get_partition("inherit", 0).log.config.retention_bytes == 555
    assert broker.replica_manager.get_partition("inherit", 0).log.config.segment_bytes == \
        2000000                                            # the cluster default
    configs = {c.name: c for c in (await describe(client, BROKER, "0")).configs}
    assert configs["log.retention.bytes"].config_source == SOURCE_DYNAMIC_BROKER
    assert [s.source for s in configs["log.retention.bytes"].synonyms][:2] == [
        SOURCE_DYNAMIC_BROKER, SOURCE_STATIC_BROKER]
    assert configs["log.segment.bytes"].config_source == SOURCE_DYNAMIC_DEFAULT_BROKER
    assert configs["num.partitions"].read_only
    topic_configs = {c.name: c for c in (await describe(client, TOPIC, "inherit")).configs}
    assert topic_configs["retention.bytes"].value == "555"
    assert topic_configs["retention.bytes"].config_source == SOURCE_DYNAMIC_BROKER
    await client.close()
    log_dir = broker.config.log_dirs[0]
    await broker.shutdown()
    again = await start_broker(log_dirs=log_dir)
    assert again.config.get("log.retention.bytes") == 555
    assert again.config.get("log.segment.bytes") == 2000000
    assert again.replica_manager.get_partition("inherit", 0).log.config.retention_bytes == 555


async def test_a_persisted_dynamic_config_this_version_refuses_drops_only_that_key(
        start_broker, caplog):
    """Kafka's DynamicBrokerConfig.removeInvalidConfigs: after an upgrade that made
    log.retention.hours read-only, a cluster default persisted with it keeps the rest of its
    layer (min.insync.replicas here), with a log line."""
    broker = await start_broker()
    broker.metadata.set_broker_config(None, {"log.retention.hours": "1",
                                             "min.insync.replicas": "2"})
    log_dir = broker.config.log_dirs[0]
    await broker.shutdown()
    again = await start_broker(log_dirs=log_dir)
    assert again.config.get("min.insync.replicas") == 2
    assert again.config.get("log.retention.hours") == 168
    assert "Dynamic default cluster config contains invalid values in: log.retention.hours" \
        in caplog.text


async def test_incremental_alter_configs(client, broker):
    await create(client, creatable("inc", 1, configs={"retention.ms": "1000"}))
    IAC = IncrementalAlterConfigsRequest

    async def alter(*ops, name="inc", resource_type=TOPIC, version=1):
        response = await client.request(IAC(resources=[IAC.AlterConfigsResource(
            resource_type=resource_type, resource_name=name, configs=[
                IAC.AlterableConfig(name=n, config_operation=op, value=v)
                for n, op, v in ops])]), version)
        return response.responses[0].error_code

    assert await alter(("segment.bytes", 0, "70000")) == 0
    assert broker.metadata.topic_config("inc") == {"retention.ms": "1000",
                                                   "segment.bytes": "70000"}
    assert await alter(("retention.ms", 1, None), version=0) == 0
    assert broker.metadata.topic_config("inc") == {"segment.bytes": "70000"}
    assert await alter(("cleanup.policy", 2, "compact")) == 0
    assert broker.metadata.topic_config("inc")["cleanup.policy"] == "delete,compact"
    assert await alter(("cleanup.policy", 3, "delete")) == 0
    assert broker.metadata.topic_config("inc")["cleanup.policy"] == "compact"
    assert await alter(("segment.bytes", 2, "1")) == ErrorCode.INVALID_CONFIG
    # APPEND starts from the topic's own value, else the config's default (delete), never
    # from a value inherited from the broker (Kafka's prepareIncrementalConfigs).
    assert await alter(("log.cleanup.policy", 0, "compact"), name="", resource_type=BROKER) == 0
    await create(client, creatable("inc2", 1))
    assert await alter(("cleanup.policy", 2, "delete"), name="inc2") == 0
    assert broker.metadata.topic_config("inc2")["cleanup.policy"] == "delete"
    assert await alter(("segment.bytes", 9, "1")) == ErrorCode.INVALID_REQUEST
    assert await alter(("segment.bytes", 0, "1"), ("segment.bytes", 1, None)) == \
        ErrorCode.INVALID_REQUEST
    assert await alter(("segment.bytes", 0, "80000"), name="nope") == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert await alter(("log.retention.bytes", 0, "999"), name="0", resource_type=BROKER) == 0
    assert broker.config.get("log.retention.bytes") == 999
    assert await alter(("log.retention.bytes", 1, None), name="0", resource_type=BROKER) == 0
    assert broker.config.get("log.retention.bytes") == -1
    assert broker.metadata.topic_config("inc")["segment.bytes"] == "70000"


async def test_describe_cluster(client, broker):
    for version in (0, 1):
        response = await client.request(DescribeClusterRequest(), version)
        assert response.error_code == 0
        assert response.cluster_id == broker.cluster_id and response.controller_id == 0
        assert [(b.broker_id, b.host, b.port) for b in response.brokers] == [
            (0, "127.0.0.1", broker.port)]
        assert response.cluster_authorized_operations == -2**31     # not asked
    # Kafka's AuthHelper: controllers are asked of a broker: MISMATCHED; no such type:
    # UNSUPPORTED; without an authorizer every cluster operation is allowed.
    response = await client.request(DescribeClusterRequest(endpoint_type=2), 1)
    assert response.error_code == ErrorCode.MISMATCHED_ENDPOINT_TYPE
    response = await client.request(DescribeClusterRequest(endpoint_type=7), 1)
    assert response.error_code == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
    response = await client.request(DescribeClusterRequest(
        include_cluster_authorized_operations=True), 1)
    assert response.cluster_authorized_operations == CLUSTER_OPERATIONS


async def test_acl_apis_answer_that_no_authorizer_is_configured(broker):
    """As Kafka's AclApis without authorizer.class.name (the default); an UNKNOWN element is a
    request Kafka cannot parse: that connection closes, the others go on."""
    from protocol.messages.create_acls import CreateAclsRequest as C
    from protocol.messages.delete_acls import DeleteAclsRequest as D
    from protocol.messages.describe_acls import DescribeAclsRequest
    client = await RawClient.connect(broker.port)
    any_acl = dict(resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1)
    for version in range(4):
        response = await client.request(DescribeAclsRequest(**any_acl), version)
        assert (response.error_code, response.error_message, response.resources) == (
            ErrorCode.SECURITY_DISABLED, "No Authorizer is configured on the broker", [])
        creation = C.AclCreation(resource_type=2, resource_name="t", resource_pattern_type=3,
                                 principal="User:alice", host="*", operation=3, permission_type=3)
        response = await client.request(C(creations=[creation, creation]), version)
        assert [(r.error_code, r.error_message) for r in response.results] == [
            (ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")] * 2
        response = await client.request(D(filters=[D.DeleteAclsFilter(**any_acl)]), version)
        assert [(r.error_code, r.error_message, r.matching_acls) for r in response.filter_results] \
            == [(ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.", [])]
    for bad in (DescribeAclsRequest(**dict(any_acl, operation=0)),
                C(creations=[C.AclCreation(resource_type=0, resource_name="t")]),
                D(filters=[D.DeleteAclsFilter(**dict(any_acl, permission_type=0))])):
        doomed = await RawClient.connect(broker.port)
        doomed.send(bad, 1)
        assert await doomed.is_closed()
        await doomed.close()
    assert (await client.request(DescribeClusterRequest(), 0)).error_code == 0
    await client.close()


async def test_delegation_token_requests_are_not_allowed_on_plaintext(broker):
    """As Kafka's allowTokenRequests on a PLAINTEXT listener: every token request is answered
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED (Create with its owner and requester filled in)."""
    from protocol.messages.create_delegation_token import CreateDelegationTokenRequest as C
    from protocol.messages.describe_delegation_token import DescribeDelegationTokenRequest
    from protocol.messages.expire_delegation_token import ExpireDelegationTokenRequest
    from protocol.messages.renew_delegation_token import RenewDelegationTokenRequest
    not_allowed = ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    client = await RawClient.connect(broker.port)
    for version in range(4):
        created = await client.request(C(renewers=[], max_lifetime_ms=-1), version)
        assert (created.error_code, created.principal_type, created.principal_name,
                created.issue_timestamp_ms, created.expiry_timestamp_ms, created.token_id,
                created.hmac) == (not_allowed, "User", "ANONYMOUS", -1, -1, "", b"")
        if version >= 3:
            assert (created.token_requester_principal_type,
                    created.token_requester_principal_name) == ("User", "ANONYMOUS")
            created = await client.request(C(owner_principal_type="User",
                                             owner_principal_name="alice", renewers=[]), version)
            assert (created.principal_type, created.principal_name) == ("User", "alice")
        described = await client.request(DescribeDelegationTokenRequest(owners=None), version)
        assert (described.error_code, described.tokens) == (not_allowed, [])
        if version <= 2:
            for request in (RenewDelegationTokenRequest(hmac=b"x", renew_period_ms=1),
                            ExpireDelegationTokenRequest(hmac=b"x", expiry_time_period_ms=1)):
                answer = await client.request(request, version)
                assert (answer.error_code, answer.expiry_timestamp_ms) == (not_allowed, -1)
    await client.close()


async def test_topics_survive_restart(start_broker):
    broker = await start_broker()
    client = await RawClient.connect(broker.port)
    created = (await create(client, creatable("durable", 2, configs={"retention.ms": "5000"})))
    await client.close()
    log_dir = broker.config.log_dirs[0]
    await broker.shutdown()
    again = await start_broker(log_dirs=log_dir)
    assert again.cluster_id == broker.cluster_id
    client = await RawClient.connect(again.port)
    [topic] = (await metadata(client, ["durable"])).topics
    assert topic.topic_id == created["durable"].topic_id and len(topic.partitions) == 2
    assert again.replica_manager.get_partition("durable", 1).log.config.retention_ms == 5000
    await client.close()


async def test_kafka_written_log_dir_is_adopted(start_broker, kafka_fixtures, tmp_path):
    import shutil
    data = tmp_path / "kafka-3.4.0"
    shutil.copytree(kafka_fixtures / "kafka-3.4.0", data)
    broker = await start_broker(log_dirs=str(data))
    topic = broker.metadata.get_topic("test")
    assert topic is not None and list(topic.partitions) == [0]
    partition = broker.replica_manager.get_partition("test", 0)
    assert partition.log.log_end_offset == 97                 # 97 records written by Kafka
    client = await RawClient.connect(broker.port)
    [entry] = (await metadata(client, ["test"], auto=False)).topics
    assert entry.error_code == 0 and entry.topic_id == topic.topic_id
    await client.close()


async def test_creating_many_partitions_does_not_stall_other_connections(broker):
    import asyncio
    from protocol.api import ApiKey
    from protocol.messages.api_versions import ApiVersionsRequest
    creator = await RawClient.connect(broker.port)
    other = await RawClient.connect(broker.port)
    creator.send(CT(topics=[creatable("wide", 100)], timeout_ms=30000), 7)
    await asyncio.sleep(0.05)                     # the create is under way (logs in executor)
    answered = await other.request(ApiVersionsRequest(), 0)
    assert answered.error_code == 0
    [partial] = (await other.request(MetadataRequest(topics=[
        MetadataRequest.MetadataRequestTopic(name="wide")], allow_auto_topic_creation=False),
        12)).topics
    assert partial.error_code == 0
    _, response = await creator.receive(ApiKey.CREATE_TOPICS, 7, timeout=60)
    assert response.topics[0].error_code == 0 and response.topics[0].num_partitions == 100
    [topic] = (await metadata(other, ["wide"])).topics
    assert all(p.error_code == 0 and p.leader_id == 0 for p in topic.partitions)
    await creator.close()
    await other.close()


async def test_names_colliding_on_dot_and_underscore(client):
    assert (await create(client, creatable("metrics.a", 1)))["metrics.a"].error_code == 0
    result = (await create(client, creatable("metrics_a", 1)))["metrics_a"]
    assert result.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert "collides" in result.error_message


async def test_a_failed_log_dir_shows_its_partitions_offline_in_metadata(start_broker, tmp_path):
    # Kafka's controller, told by /log_dir_event_notification: no leader, the ISR as it was,
    # the replica offline; the other dir's partitions are untouched.
    broker = await start_broker(log_dirs=f"{tmp_path}/a,{tmp_path}/b")
    client = await RawClient.connect(broker.port)
    try:
        assert (await create(client, creatable("jbod", 2)))["jbod"].error_code == 0
        assert (await metadata(client, ["jbod"])).topics[0].partitions[0].leader_id == 0
        failed = broker.log_manager.log_dir_of("jbod", 0)
        assert broker.log_manager.log_dir_of("jbod", 1) != failed
        broker.replica_manager.fail_log_dir(failed, OSError(5, "Input/output error"))
        [topic] = (await metadata(client, ["jbod"])).topics
        p0, p1 = topic.partitions
        assert (p0.error_code, p0.leader_id, p0.isr_nodes, p0.offline_replicas) == (
            ErrorCode.LEADER_NOT_AVAILABLE, -1, [0], [0])
        assert (p1.error_code, p1.leader_id, p1.isr_nodes, p1.offline_replicas) == (0, 0, [0], [])
        # deleted and created again (in the dir still online): led, whatever failed before
        response = await client.request(DeleteTopicsRequest(topic_names=["jbod"]), 5)
        assert response.responses[0].error_code == 0
        assert (await create(client, creatable("jbod", 2)))["jbod"].error_code == 0
        [topic] = (await metadata(client, ["jbod"])).topics
        assert [(p.error_code, p.leader_id) for p in topic.partitions] == [(0, 0), (0, 0)]
    finally:
        await client.close()


async def test_metadata_creates_the_internal_topics_as_kafka_does(start_broker):
    # Kafka's AutoTopicCreationManager.creatableTopic: with the coordinators' settings; a
    # consumer of __consumer_offsets on a fresh broker no longer waits for ever.
    broker = await start_broker(offsets_topic_num_partitions=3, transaction_state_log_num_partitions=2)
    client = await RawClient.connect(broker.port)
    try:
        topics = (await metadata(client, ["__consumer_offsets", "__transaction_state"])).topics
        assert [(t.name, t.error_code, t.is_internal, len(t.partitions)) for t in topics] == [
            ("__consumer_offsets", 0, True, 3), ("__transaction_state", 0, True, 2)]
        assert broker.metadata.topic_config("__consumer_offsets")["cleanup.policy"] == "compact"
        # not asked to create: unknown, but still reported as internal
        off = await start_broker(auto_create_topics_enable="false")
        other = await RawClient.connect(off.port)
        [topic] = (await metadata(other, ["__consumer_offsets"])).topics
        assert (topic.error_code, topic.is_internal) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, True)
        await other.close()
    finally:
        await client.close()


async def test_tiered_storage_switches_are_known_and_refused_in_zookeeper_mode(client):
    # Kafka 3.9's LogConfig: both are topic configs (listed by DescribeConfigs), and
    # validateNoInvalidRemoteStorageConfigsInZK refuses true
    for name in ("remote.log.copy.disable", "remote.log.delete.on.disable"):
        result = (await create(client, creatable(f"ts-{name}", 1, configs={name: "true"})))[f"ts-{name}"]
        assert (result.error_code, result.error_message) == (
            ErrorCode.INVALID_CONFIG, "It is invalid to set `remote.log.delete.on.disable` or "
                                      "`remote.log.copy.disable` under Zookeeper's mode.")
    assert (await create(client, creatable("ts-off", 1, configs={
        "remote.log.copy.disable": "false"})))["ts-off"].error_code == 0
    configs = {c.name: c for c in (await describe(client, TOPIC, "ts-off")).configs}
    assert configs["remote.log.copy.disable"].value == "false"
    assert configs["remote.log.delete.on.disable"].value == "false"


async def test_alter_configs_of_a_topic_resource_kafka_does_not_know(client):
    # ZkAdminManager.alterTopicConfigs: an empty name is no default resource, an illegal or
    # unknown name an unknown topic
    AC = AlterConfigsRequest
    IAC = IncrementalAlterConfigsRequest
    for name, code in (("", ErrorCode.INVALID_REQUEST), ("bad name", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                       ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)):
        legacy = await client.request(AC(resources=[AC.AlterConfigsResource(
            resource_type=TOPIC, resource_name=name,
            configs=[AC.AlterableConfig(name="retention.ms", value="1")])]), 1)
        incremental = await client.request(IAC(resources=[IAC.AlterConfigsResource(
            resource_type=TOPIC, resource_name=name, configs=[IAC.AlterableConfig(
                name="retention.ms", config_operation=0, value="1")])]), 1)
        assert legacy.responses[0].error_code == code, name
        assert incremental.responses[0].error_code == code, name
