"""The group handlers over the coordinator runtime, at the oldest, a middle and the newest
versions: every response is encoded and decoded in the request's version (no real socket)."""
import asyncio
from types import SimpleNamespace

import pytest

from protocol.errors import ErrorCode as E
from protocol.messages.delete_groups import DeleteGroupsRequest
from protocol.messages.describe_groups import DescribeGroupsRequest
from protocol.messages.find_coordinator import FindCoordinatorRequest
from protocol.messages.heartbeat import HeartbeatRequest
from protocol.messages.join_group import JoinGroupRequest
from protocol.messages.leave_group import LeaveGroupRequest
from protocol.messages.list_groups import ListGroupsRequest
from protocol.messages.offset_commit import OffsetCommitRequest
from protocol.messages.offset_delete import OffsetDeleteRequest
from protocol.messages.offset_fetch import OffsetFetchRequest
from protocol.messages.sync_group import SyncGroupRequest

from broker.handlers import (delete_groups, describe_groups, find_coordinator, heartbeat,
                             join_group, leave_group, list_groups, offset_commit, offset_delete,
                             offset_fetch, sync_group)
from broker.context import RequestContext
from coordinator.results import GroupConfig
from coordinator.runtime import GroupCoordinator
from group_fake_log import FakeReplicaManager

OLDEST = dict(join=0, sync=0, hb=0, leave=0, commit=0, fetch=1, describe=0, list=0, delete=0,
              find=0)
MIDDLE = dict(join=5, sync=3, hb=3, leave=3, commit=6, fetch=5, describe=3, list=3, delete=1,
              find=2)
NEWEST = dict(join=9, sync=5, hb=4, leave=5, commit=9, fetch=9, describe=5, list=5, delete=2,
              find=6)


def make_broker():
    from coordinator.transaction.runtime import TransactionCoordinator
    rm = FakeReplicaManager(range(50), topics=[("t", 3), ("__transaction_state", 50)])
    coordinator = GroupCoordinator(rm, num_partitions=50, config=GroupConfig(
        initial_rebalance_delay_ms=0, min_session_timeout_ms=10))
    txn = TransactionCoordinator(rm, next_producer_id=lambda: 1000, marker_sender=None,
                                 num_partitions=50)
    counts = {"t": 3, "__transaction_state": 50}       # the cluster's topics (Metadata's view)
    metadata = SimpleNamespace(get_topic=lambda name: SimpleNamespace(
        partitions=dict.fromkeys(range(counts[name]))) if name in counts else None)
    return SimpleNamespace(group_coordinator=coordinator, txn_coordinator=txn,
                           replica_manager=rm, broker_id=1, metadata=metadata,
                           advertised_endpoint=lambda listener: ("127.0.0.1", 19092))


async def call(broker, module, request, version, client_id="cli"):
    ctx = RequestContext(int(module.API_KEY), version, 7, client_id, "127.0.0.1", 5555)
    assert module.MIN_VERSION <= version <= module.MAX_VERSION
    response = await module.handle(broker, ctx, request)
    # what a client would receive
    return type(response).decode(response.encode(version), version)


@pytest.mark.parametrize("v", [OLDEST, MIDDLE, NEWEST], ids=["oldest", "middle", "newest"])
def test_group_lifecycle_through_handlers(v):
    async def scenario():
        broker = make_broker()
        await broker.group_coordinator.startup()
        G = "test"
        find = FindCoordinatorRequest(key=G, key_type=0, coordinator_keys=[G, "other"])
        found = await call(broker, find_coordinator, find, v["find"])
        if v["find"] >= 4:
            assert [(c.key, c.node_id, c.port, c.error_code) for c in found.coordinators] == [
                (G, 1, 19092, 0), ("other", 1, 19092, 0)]
        else:
            assert (found.error_code, found.node_id, found.host, found.port) == (
                0, 1, "127.0.0.1", 19092)

        join = JoinGroupRequest(group_id=G, session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                                member_id="", protocol_type="consumer",
                                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(
                                    name="range", metadata=b"meta")])
        joined = await call(broker, join_group, join, v["join"])
        if v["join"] >= 4:
            assert joined.error_code == E.MEMBER_ID_REQUIRED
            join.member_id = joined.member_id
            joined = await call(broker, join_group, join, v["join"])
        assert joined.error_code == 0 and joined.generation_id == 1
        assert joined.leader == joined.member_id and joined.member_id.startswith("cli-")
        assert [(m.member_id, bytes(m.metadata)) for m in joined.members] == [
            (joined.member_id, b"meta")]
        assert joined.protocol_name == "range"
        member, gen = joined.member_id, joined.generation_id

        sync = SyncGroupRequest(group_id=G, generation_id=gen, member_id=member,
                                protocol_type="consumer", protocol_name="range", assignments=[
            SyncGroupRequest.SyncGroupRequestAssignment(member_id=member, assignment=b"mine")])
        synced = await call(broker, sync_group, sync, v["sync"])
        assert synced.error_code == 0 and bytes(synced.assignment) == b"mine"

        hb = await call(broker, heartbeat, HeartbeatRequest(group_id=G, generation_id=gen,
                                                            member_id=member), v["hb"])
        assert hb.error_code == 0
        hb = await call(broker, heartbeat, HeartbeatRequest(group_id=G, generation_id=gen + 5,
                                                            member_id=member), v["hb"])
        assert hb.error_code == E.ILLEGAL_GENERATION

        P = OffsetCommitRequest.OffsetCommitRequestPartition
        commit = OffsetCommitRequest(
            group_id=G, generation_id_or_member_epoch=gen, member_id=member,
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=[
                P(partition_index=0, committed_offset=10, committed_metadata="m"),
                P(partition_index=9, committed_offset=10)])])
        committed = await call(broker, offset_commit, commit, v["commit"])
        if v["commit"] == 0:
            # v0 has no member/generation: a simple commit, refused while the group is active
            assert committed.topics[0].partitions[0].error_code == E.UNKNOWN_MEMBER_ID
            committed = await call(broker, offset_commit, commit, 1)
        assert [(p.partition_index, p.error_code) for p in committed.topics[0].partitions] == [
            (0, 0), (9, E.UNKNOWN_TOPIC_OR_PARTITION)]

        T = OffsetFetchRequest.OffsetFetchRequestTopic
        if v["fetch"] >= 8:
            fetch = OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
                group_id=G, topics=None), OffsetFetchRequest.OffsetFetchRequestGroup(
                group_id="none", topics=[OffsetFetchRequest.OffsetFetchRequestTopics(
                    name="t", partition_indexes=[1])])])
            fetched = await call(broker, offset_fetch, fetch, v["fetch"])
            [mine, none] = fetched.groups
            assert [(t.name, p.partition_index, p.committed_offset, p.metadata)
                    for t in mine.topics for p in t.partitions] == [("t", 0, 10, "m")]
            assert none.topics[0].partitions[0].committed_offset == -1
        else:
            fetch = OffsetFetchRequest(group_id=G, topics=[T(name="t", partition_indexes=[0, 1])])
            fetched = await call(broker, offset_fetch, fetch, v["fetch"])
            assert [(p.partition_index, p.committed_offset) for p in
                    fetched.topics[0].partitions] == [(0, 10), (1, -1)]

        described = await call(broker, describe_groups, DescribeGroupsRequest(groups=[G, "zz"]),
                               v["describe"])
        mine, unknown = described.groups
        assert (mine.group_state, mine.protocol_type, mine.protocol_data) == (
            "Stable", "consumer", "range")
        assert [(m.member_id, m.client_id, m.client_host, bytes(m.member_assignment))
                for m in mine.members] == [(member, "cli", "/127.0.0.1", b"mine")]
        assert unknown.group_state == "Dead"
        if v["describe"] >= 3:
            # no authorizer: every operation of a group, as Kafka's AuthHelper (READ, DELETE,
            # DESCRIBE), when asked for
            asked = await call(broker, describe_groups, DescribeGroupsRequest(
                groups=[G], include_authorized_operations=True), v["describe"])
            assert asked.groups[0].authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)
            assert mine.authorized_operations == -2147483648

        listed = await call(broker, list_groups, ListGroupsRequest(), v["list"])
        assert [(g.group_id, g.protocol_type) for g in listed.groups] == [(G, "consumer")]

        deleted = await call(broker, delete_groups, DeleteGroupsRequest(groups_names=[G]),
                             v["delete"])
        assert deleted.results[0].error_code == E.NON_EMPTY_GROUP

        if v["leave"] >= 3:
            leave = LeaveGroupRequest(group_id=G, members=[
                LeaveGroupRequest.MemberIdentity(member_id=member)])
        else:
            leave = LeaveGroupRequest(group_id=G, member_id=member)
        left = await call(broker, leave_group, leave, v["leave"])
        assert left.error_code == 0
        if v["leave"] >= 3:
            assert [(m.member_id, m.error_code) for m in left.members] == [(member, 0)]
        listed = await call(broker, list_groups, ListGroupsRequest(states_filter=["Empty"]),
                            v["list"])
        assert [g.group_id for g in listed.groups] == [G]

        od = OffsetDeleteRequest(group_id=G, topics=[OffsetDeleteRequest.OffsetDeleteRequestTopic(
            name="t", partitions=[OffsetDeleteRequest.OffsetDeleteRequestPartition(
                partition_index=0)])])
        od_answer = await call(broker, offset_delete, od, 0)
        assert od_answer.error_code == 0 and od_answer.topics[0].partitions[0].error_code == 0
        # those were the Empty group's last offsets: it is gone (Kafka's cleanupGroupMetadata)
        listed = await call(broker, list_groups, ListGroupsRequest(), v["list"])
        assert G not in [g.group_id for g in listed.groups]

        simple = OffsetCommitRequest(group_id=G, generation_id_or_member_epoch=-1, member_id="",
                                     topics=[OffsetCommitRequest.OffsetCommitRequestTopic(
                                         name="t", partitions=[P(partition_index=1, committed_offset=12)])])
        simple = await call(broker, offset_commit, simple, v["commit"])
        assert simple.topics[0].partitions[0].error_code == 0
        deleted = await call(broker, delete_groups, DeleteGroupsRequest(groups_names=[G, "x", G]),
                             v["delete"])
        assert [(r.group_id, r.error_code) for r in deleted.results] == [
            (G, 0), ("x", E.GROUP_ID_NOT_FOUND)]            # each group once (Kafka's .distinct)
        broker.group_coordinator.shutdown()
    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_oversized_metadata_never_loses_the_committed_offset():
    async def scenario():
        broker = make_broker()
        await broker.group_coordinator.startup()
        P = OffsetCommitRequest.OffsetCommitRequestPartition
        T = OffsetCommitRequest.OffsetCommitRequestTopic

        def commit(offset, metadata):
            return OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=-1, topics=[
                T(name="t", partitions=[P(partition_index=1, committed_offset=offset,
                                          committed_metadata=metadata)])])
        ok = await call(broker, offset_commit, commit(5, "fine"), 8)
        assert ok.topics[0].partitions[0].error_code == 0
        big = await call(broker, offset_commit, commit(6, "x" * 4097), 8)
        assert big.topics[0].partitions[0].error_code == E.OFFSET_METADATA_TOO_LARGE
        fetch = OffsetFetchRequest(group_id="g", topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[1])],
            require_stable=True)
        fetched = await call(broker, offset_fetch, fetch, 7)
        assert fetched.topics[0].partitions[0].committed_offset == 5
        assert fetched.topics[0].partitions[0].metadata == "fine"
        # a member of no group, a wrong generation, a foreign protocol type
        sync = SyncGroupRequest(group_id="g", generation_id=1, member_id="nobody")
        # v5+ without protocol type and name: Kafka's areMandatoryProtocolTypeAndNamePresent
        assert (await call(broker, sync_group, sync, 5)).error_code == E.INCONSISTENT_GROUP_PROTOCOL
        sync.protocol_type, sync.protocol_name = "consumer", "range"
        assert (await call(broker, sync_group, sync, 5)).error_code == E.UNKNOWN_MEMBER_ID
        join = JoinGroupRequest(group_id="g", session_timeout_ms=10_000, member_id="",
                                protocol_type="consumer", protocols=[
                                    JoinGroupRequest.JoinGroupRequestProtocol(name="range")])
        first = await call(broker, join_group, join, 3)       # v3: no KIP-394 round trip
        assert first.error_code == 0
        join.protocol_type = "connect"
        join.member_id = ""
        assert (await call(broker, join_group, join, 3)).error_code == \
            E.INCONSISTENT_GROUP_PROTOCOL
        hb = HeartbeatRequest(group_id="g", generation_id=first.generation_id + 1,
                              member_id=first.member_id)
        assert (await call(broker, heartbeat, hb, 2)).error_code == E.ILLEGAL_GENERATION
        broker.group_coordinator.shutdown()
    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_bad_group_ids_and_missing_coordinator():
    async def scenario():
        broker = make_broker()
        await broker.group_coordinator.startup()
        join = JoinGroupRequest(group_id="", session_timeout_ms=10_000, protocol_type="consumer")
        assert (await call(broker, join_group, join, 9)).error_code == E.INVALID_GROUP_ID
        join.group_id = "g" * 40_000
        assert (await call(broker, join_group, join, 9)).error_code == E.INVALID_GROUP_ID
        hb = HeartbeatRequest(group_id="", generation_id=1, member_id="m")
        assert (await call(broker, heartbeat, hb, 4)).error_code == E.INVALID_GROUP_ID
        join.group_id = "g"
        join.session_timeout_ms = 1
        assert (await call(broker, join_group, join, 9)).error_code == E.INVALID_SESSION_TIMEOUT
        broker.group_coordinator.shutdown()
        broker.group_coordinator = None
        hb.group_id = "g"
        assert (await call(broker, heartbeat, hb, 4)).error_code == E.COORDINATOR_NOT_AVAILABLE
        find = FindCoordinatorRequest(key="g")
        assert (await call(broker, find_coordinator, find, 3)).error_code == \
            E.COORDINATOR_NOT_AVAILABLE
    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_find_coordinator_key_types_and_batched_keys():
    async def scenario():
        broker = make_broker()
        await broker.group_coordinator.startup()
        find = FindCoordinatorRequest(key_type=1, coordinator_keys=["txn-a", "txn-b"])
        found = await call(broker, find_coordinator, find, 4)
        assert [(c.key, c.node_id, c.error_code) for c in found.coordinators] == [
            ("txn-a", 1, 0), ("txn-b", 1, 0)]
        find = FindCoordinatorRequest(key="txn-a", key_type=1)
        assert (await call(broker, find_coordinator, find, 3)).node_id == 1
        find = FindCoordinatorRequest(key_type=7, coordinator_keys=["x"])
        [bad] = (await call(broker, find_coordinator, find, 6)).coordinators
        assert (bad.error_code, bad.node_id) == (E.INVALID_REQUEST, -1)
        broker.group_coordinator.shutdown()
    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_requests_while_the_groups_partition_is_loading():
    """As Kafka: JoinGroup and OffsetCommit are told COORDINATOR_LOAD_IN_PROGRESS; SyncGroup gets
    REBALANCE_IN_PROGRESS (older clients do not expect the loading error there; they rejoin);
    a Heartbeat is answered blindly with NONE."""
    async def scenario():
        broker = make_broker()
        c = broker.group_coordinator
        await c.startup()
        p = c.partition_for("g")
        c._loaded.discard(p)
        c._loading.add(p)
        join = JoinGroupRequest(group_id="g", session_timeout_ms=10_000, protocol_type="consumer")
        assert (await call(broker, join_group, join, 9)).error_code == \
            E.COORDINATOR_LOAD_IN_PROGRESS
        sync = SyncGroupRequest(group_id="g", generation_id=1, member_id="m", protocol_type="consumer",
                                protocol_name="range")
        assert (await call(broker, sync_group, sync, 5)).error_code == E.REBALANCE_IN_PROGRESS
        hb = HeartbeatRequest(group_id="g", generation_id=1, member_id="m")
        assert (await call(broker, heartbeat, hb, 4)).error_code == E.NONE
        P = OffsetCommitRequest.OffsetCommitRequestPartition
        commit = OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=-1, topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=[
                P(partition_index=0, committed_offset=1)])])
        answer = await call(broker, offset_commit, commit, 9)
        assert answer.topics[0].partitions[0].error_code == E.COORDINATOR_LOAD_IN_PROGRESS
        c._loading.discard(p)
        c._loaded.add(p)
        c.shutdown()
    asyncio.run(asyncio.wait_for(scenario(), 10))
