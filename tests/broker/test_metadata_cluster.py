"""Metadata in a cluster as Kafka's ZkMetadataCache.getPartitionMetadata answers it: a partition
whose leader is not alive, or has no endpoint on the listener the client came in on, has no
leader for that client (-1) with LEADER_NOT_AVAILABLE, or LISTENER_NOT_FOUND from v6. The
handler runs over a real cluster metadata store fed an UpdateMetadata request, as from the
controller."""
import asyncio
import types
import uuid

import pytest

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.metadata import MetadataRequest, MetadataResponse
from protocol.messages.update_metadata import UpdateMetadataRequest as UM

from broker.handlers import metadata
from broker.metadata.cluster import ClusterMetadataStore


def fake_broker():
    store = ClusterMetadataStore("cluster-1")

    def endpoint(listener, port):
        return UM.UpdateMetadataEndpoint(port=port, host="127.0.0.1", listener=listener,
                                         security_protocol=0)
    store.apply_update_metadata(UM(
        controller_id=0, controller_epoch=1, broker_epoch=1,
        live_brokers=[UM.UpdateMetadataBroker(id=0, endpoints=[endpoint("PLAINTEXT", 9092),
                                                               endpoint("INTERNAL", 9093)]),
                      UM.UpdateMetadataBroker(id=1, endpoints=[endpoint("INTERNAL", 9094)])],
        topic_states=[UM.UpdateMetadataTopicState(
            topic_name="t", topic_id=uuid.uuid4(), partition_states=[
                UM.UpdateMetadataPartitionState(
                    topic_name="t", partition_index=p, controller_epoch=1, leader=leader,
                    leader_epoch=3, isr=[leader], zk_version=1, replicas=[leader],
                    offline_replicas=[])
                for p, leader in ((0, 0), (1, 1), (2, 2))])]))
    return types.SimpleNamespace(
        metadata=store, cluster=object(), cluster_id="cluster-1", controller_id=0,
        topics=types.SimpleNamespace(metadata_cache=None, leadership_version=0, encoded_metadata={}),
        metadata_brokers=store.brokers_for_listener)


@pytest.mark.parametrize("version, listener_error", [(5, ErrorCode.LEADER_NOT_AVAILABLE),
                                                     (6, ErrorCode.LISTENER_NOT_FOUND),
                                                     (12, ErrorCode.LISTENER_NOT_FOUND)])
def test_a_leader_the_client_cannot_reach_is_no_leader(version, listener_error):
    broker = fake_broker()
    for listener, expected in (
            ("PLAINTEXT", {0: (0, ErrorCode.NONE), 1: (-1, listener_error),
                           2: (-1, ErrorCode.LEADER_NOT_AVAILABLE)}),
            ("INTERNAL", {0: (0, ErrorCode.NONE), 1: (1, ErrorCode.NONE),
                          2: (-1, ErrorCode.LEADER_NOT_AVAILABLE)})):
        ctx = types.SimpleNamespace(api_version=version, listener_name=listener)
        for topics in ([MetadataRequest.MetadataRequestTopic(name="t")], None):
            response = asyncio.run(metadata.handle(broker, ctx, MetadataRequest(
                topics=topics, allow_auto_topic_creation=False)))
            if isinstance(response, metadata.EncodedResponse):    # the all-topics answer
                response = MetadataResponse.decode(response.body, version)
            [topic] = response.topics
            assert {p.partition_index: (p.leader_id, p.error_code) for p in topic.partitions} == expected
            assert version < 7 or all(p.leader_epoch == 3 for p in topic.partitions)
            assert [b.node_id for b in response.brokers] == ([0] if listener == "PLAINTEXT" else [0, 1])


def test_topics_auto_created_by_one_request_are_created_together():
    """In a cluster each auto-creation waits for its leaders (up to seconds without a
    controller): the topics of one request are created at the same time, not one by one. A
    barrier every creation must reach before any finishes proves it."""
    broker = fake_broker()
    names = [f"new-{i}" for i in range(5)]
    entered, everyone = [], asyncio.Event()

    async def maybe_auto_create(name):
        entered.append(name)
        if len(entered) == len(names):
            everyone.set()
        await asyncio.wait_for(everyone.wait(), 2)
        raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{name} is being created")
    broker.topics.maybe_auto_create = maybe_auto_create
    ctx = types.SimpleNamespace(api_version=12, listener_name="PLAINTEXT")
    response = asyncio.run(metadata.handle(broker, ctx, MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names + ["bad name", "new-0"]],
        allow_auto_topic_creation=True)))
    assert sorted(entered) == names
    assert [(t.name, t.error_code) for t in response.topics] == (
        [(n, ErrorCode.LEADER_NOT_AVAILABLE) for n in names]
        + [("bad name", ErrorCode.INVALID_TOPIC_EXCEPTION), ("new-0", ErrorCode.LEADER_NOT_AVAILABLE)])


def test_only_the_coordinators_internal_topics_are_auto_created():
    """__share_group_state (Kafka 4's share coordinator, not served here) is internal but no
    coordinator here owns it: unknown, and nothing created in its place."""
    broker = fake_broker()
    created = []

    async def maybe_auto_create(name):
        created.append(name)
    broker.topics.maybe_auto_create = maybe_auto_create
    broker.config = types.SimpleNamespace(get=lambda name: True)
    ctx = types.SimpleNamespace(api_version=12, listener_name="PLAINTEXT")
    response = asyncio.run(metadata.handle(broker, ctx, MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name="__share_group_state")],
        allow_auto_topic_creation=True)))
    assert [(t.name, t.error_code, t.is_internal) for t in response.topics] == [
        ("__share_group_state", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, True)]
    assert created == [] and broker.metadata.get_topic("__transaction_state") is None


def test_update_metadata_moves_the_controller_epoch_leader_and_isr_is_checked_against():
    """Kafka's maybeUpdateMetadataCache: after the new controller's UpdateMetadata, an old
    controller's LeaderAndIsr or StopReplica queued behind it is STALE_CONTROLLER_EPOCH."""
    from broker.context import RequestContext
    from broker.handlers import update_metadata
    rm = types.SimpleNamespace(controller_epoch=3)
    broker = types.SimpleNamespace(
        cluster=types.SimpleNamespace(broker_epoch=1, metadata_updated=lambda: None),
        metadata=ClusterMetadataStore("cluster"), replica_manager=rm,
        topics=types.SimpleNamespace(metadata_changed=lambda: None))
    request = UM(controller_id=1, controller_epoch=5, broker_epoch=-1)
    ctx = RequestContext(update_metadata.API_KEY, 7, 1, "controller")
    response = asyncio.run(update_metadata.handle(broker, ctx, request))
    assert response.error_code == ErrorCode.NONE
    assert rm.controller_epoch == 5
