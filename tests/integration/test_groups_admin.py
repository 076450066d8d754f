"""Group administration through real admin clients, and groups stored by Apache Kafka itself."""

import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka.admin import KafkaAdminClient
from kafka.structs import OffsetAndMetadata, TopicPartition as KTopicPartition

from test_groups import BROKER, Worker, create_topic, wait_for, workers  # noqa: F401
from tests.storage.log_checks import copy_fixture

pytestmark = pytest.mark.integration


def _result(future):
    return future.result(15)


@pytest.mark.timeout(120)
def test_confluent_admin_lists_describes_commits_and_deletes_groups(broker_process, workers):
    broker = broker_process(**BROKER)
    create_topic(broker.bootstrap, "adm", 3)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    # offsets stored by an admin (a simple commit: no group management)
    request = ConsumerGroupTopicPartitions("offline", [TopicPartition("adm", 0, 11),
                                                       TopicPartition("adm", 2, 22)])
    _result(admin.alter_consumer_group_offsets([request])["offline"])
    listed = _result(admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("offline")])["offline"])
    assert sorted((tp.partition, tp.offset) for tp in listed.topic_partitions) == [(0, 11), (2, 22)]

    live = Worker("confluent", broker.bootstrap, "live", "adm")
    workers.append(live)
    wait_for(lambda: len(live.assigned) == 3, 60, "the live member's assignment")

    groups = _result(admin.list_consumer_groups())
    states = {g.group_id: g.state for g in groups.valid}
    assert states == {"offline": ConsumerGroupState.EMPTY, "live": ConsumerGroupState.STABLE}
    empty_only = _result(admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}))
    assert [g.group_id for g in empty_only.valid] == ["offline"]

    described = _result(admin.describe_consumer_groups(["live"])["live"])
    assert described.state == ConsumerGroupState.STABLE
    assert described.partition_assignor == "range"
    [member] = described.members
    assert sorted(tp.partition for tp in member.assignment.topic_partitions) == [0, 1, 2]

    futures = admin.delete_consumer_groups(["offline", "live"])
    _result(futures["offline"])
    with pytest.raises(Exception) as info:
        _result(futures["live"])
    assert "NON_EMPTY_GROUP" in str(info.value) or "not empty" in str(info.value).lower()
    assert {g.group_id for g in _result(admin.list_consumer_groups()).valid} == {"live"}


@pytest.mark.timeout(120)
def test_kafka_python_admin_group_operations(broker_process):
    broker = broker_process(**BROKER)
    create_topic(broker.bootstrap, "kp", 2)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.alter_group_offsets("kp-group", {
            KTopicPartition("kp", 0): OffsetAndMetadata(5, "meta", -1),
            KTopicPartition("kp", 1): OffsetAndMetadata(7, "", -1)})
        offsets = admin.list_group_offsets("kp-group")["kp-group"]
        assert {tp.partition: (om.offset, om.metadata) for tp, om in offsets.items()} == {
            0: (5, "meta"), 1: (7, "")}
        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert listed["kp-group"]["group_state"] == "Empty"
        assert listed["kp-group"]["protocol_type"] == ""
        desc = admin.describe_groups(["kp-group"])["kp-group"]
        assert desc["group_state"] == "Empty" and desc["members"] == []
        admin.delete_group_offsets("kp-group", [KTopicPartition("kp", 0)])
        offsets = admin.list_group_offsets("kp-group")["kp-group"]
        assert {tp.partition for tp in offsets} == {1}
        result = admin.delete_groups(["kp-group", "missing"])
        assert result["kp-group"] == "OK"
        assert "GroupIdNotFound" in str(result["missing"])
        assert admin.list_group_offsets("kp-group")["kp-group"] == {}
        assert "kp-group" not in {g["group_id"] for g in admin.list_groups()}
    finally:
        admin.close()


@pytest.mark.timeout(120)
def test_aiokafka_admin_lists_and_describes_groups(broker_process, workers):
    """aiokafka's admin client has no DeleteGroups; it lists, describes and reads offsets."""
    import asyncio

    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.structs import TopicPartition as ATopicPartition

    broker = broker_process(**BROKER)
    create_topic(broker.bootstrap, "ai", 2)
    committer = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        committer.alter_group_offsets("ai-offline", {
            KTopicPartition("ai", 1): OffsetAndMetadata(9, "nine", -1)})
    finally:
        committer.close()
    live = Worker("aiokafka", broker.bootstrap, "ai-live", "ai")
    workers.append(live)
    wait_for(lambda: len(live.assigned) == 2, 60, "the live member's assignment")

    async def scenario():
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            listed = await admin.list_consumer_groups()
            groups = {g[0]: g[1] for g in listed}
            assert groups == {"ai-offline": "", "ai-live": "consumer"}
            [response] = await admin.describe_consumer_groups(["ai-live"])
            [group] = response.groups
            error, group_id, state, protocol_type, protocol, members = group[:6]
            assert (error, group_id, state, protocol_type, protocol) == (
                0, "ai-live", "Stable", "consumer", "range")
            assert len(members) == 1 and members[0][0].startswith("aiokafka")
            offsets = await admin.list_consumer_group_offsets("ai-offline")
            assert {tp.partition: (om.offset, om.metadata) for tp, om in offsets.items()} == {
                1: (9, "nine")}
            some = await admin.list_consumer_group_offsets(
                "ai-offline", partitions=[ATopicPartition("ai", 0)])
            assert [om.offset for om in some.values()] in ([], [-1])
        finally:
            await admin.close()
    asyncio.run(asyncio.wait_for(scenario(), 60))


@pytest.mark.timeout(120)
def test_offsets_topic_is_created_on_first_use_with_its_settings(broker_process):
    """FindCoordinator creates __consumer_offsets with offsets.topic.num.partitions,
    cleanup.policy=compact and offsets.topic.segment.bytes; group `test` is stored in partition
    abs(Java hashCode) % 10 = 8 (48 with the default 50 partitions)."""
    import pathlib

    from confluent_kafka.admin import ConfigResource

    broker = broker_process(offsets_topic_num_partitions=10,
                            offsets_topic_segment_bytes=2 * 1024 * 1024, **BROKER)
    create_topic(broker.bootstrap, "cfg", 1)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert "__consumer_offsets" not in admin.list_topics(timeout=10).topics
    request = ConsumerGroupTopicPartitions("test", [TopicPartition("cfg", 0, 5)])
    _result(admin.alter_consumer_group_offsets([request])["test"])
    topic = admin.list_topics(timeout=10).topics["__consumer_offsets"]
    assert len(topic.partitions) == 10
    resource = ConfigResource(ConfigResource.Type.TOPIC, "__consumer_offsets")
    configs = _result(admin.describe_configs([resource])[resource])
    assert configs["cleanup.policy"].value == "compact"
    assert configs["segment.bytes"].value == str(2 * 1024 * 1024)
    sizes = {p: sum(f.stat().st_size for f in
                    pathlib.Path(broker.log_dir, f"__consumer_offsets-{p}").glob("*.log"))
             for p in range(10)}
    assert [p for p, size in sizes.items() if size > 0] == [8]


def _copy(kafka_fixtures, name, tmp_path):
    return copy_fixture(kafka_fixtures / name, tmp_path / f"{name}-copy")


@pytest.mark.timeout(120)
def test_groups_stored_by_apache_kafka_3_4_0_are_listed_and_described(broker_process,
                                                                      kafka_fixtures, tmp_path):
    data = _copy(kafka_fixtures, "kafka-3.4.0", tmp_path)
    broker = broker_process(log_dirs=str(data), **BROKER)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    groups = _result(admin.list_consumer_groups())
    assert [g.group_id for g in groups.valid] == ["console-consumer-73122"]
    described = _result(admin.describe_consumer_groups(
        ["console-consumer-73122"])["console-consumer-73122"])
    assert described.state == ConsumerGroupState.STABLE
    [member] = described.members
    assert member.client_id == "console-consumer" and member.host == "/192.168.56.1"
    assert [(tp.topic, tp.partition) for tp in member.assignment.topic_partitions] == [("test", 0)]


@pytest.mark.timeout(120)
def test_groups_stored_by_apache_kafka_3_1_0_are_listed(broker_process, kafka_fixtures, tmp_path):
    data = _copy(kafka_fixtures, "kafka-3.1.0", tmp_path)
    broker = broker_process(log_dirs=str(data), **BROKER)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        names = sorted(g["group_id"] for g in admin.list_groups())
        assert names == ["console-consumer-14897", "console-consumer-2399",
                         "console-consumer-76901", "console-consumer-89616"]
        desc = admin.describe_groups(["console-consumer-2399"])["console-consumer-2399"]
        assert desc["group_state"] == "Empty" and desc["protocol_type"] == "consumer"
    finally:
        admin.close()
