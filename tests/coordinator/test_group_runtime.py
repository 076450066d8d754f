"""The asyncio runtime: futures for parked requests, real timers, appends to the offsets log,
loading on start-up. Uses an in-memory replica manager (tests/coordinator/group_fake_log.py)."""
import asyncio
from types import SimpleNamespace

from protocol.errors import ErrorCode as E

from coordinator.partitioning import partition_for
from coordinator.results import GroupConfig
from coordinator.runtime import GroupCoordinator
from group_fake_log import FakeReplicaManager

CONFIG = GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=10)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


def coordinator(rm=None, config=CONFIG):
    return GroupCoordinator(rm or FakeReplicaManager(range(50)), num_partitions=50, config=config)


async def join(c, group, member_id="", session=200, instance=None, client="c"):
    return await c.execute("join_group", group, member_id, instance, client, "/h", session,
                           session, "consumer", [("range", b"m")], True, parked=True)


async def join_member(c, group, **kwargs):
    first = await join(c, group, **kwargs)
    if first.error == E.MEMBER_ID_REQUIRED:
        return await join(c, group, member_id=first.member_id, **kwargs)
    return first


def test_join_sync_commit_and_reload_from_the_log():
    rm = FakeReplicaManager(range(50))

    async def scenario():
        c = coordinator(rm)
        await c.startup()
        a, b = await asyncio.gather(join_member(c, "test", client="a"),
                                    join_member(c, "test", client="b"))
        assert a.generation_id == b.generation_id == 1
        leader = a if a.members else b
        follower = b if leader is a else a
        syncs = await asyncio.gather(
            c.execute("sync_group", "test", 1, leader.member_id, None, None, None,
                      {a.member_id: b"A", b.member_id: b"B"}, parked=True),
            c.execute("sync_group", "test", 1, follower.member_id, None, None, None, {},
                      parked=True))
        assert {s.assignment for s in syncs} == {b"A", b"B"}
        answer = await c.execute("commit_offsets", "test", a.member_id, None, 1,
                                 [("t", 0, 42, -1, "x")])
        assert answer == {("t", 0): E.NONE}
        c.shutdown()
        return a, b

    a, b = run(scenario())
    # everything went to partition 48 (group "test")
    assert partition_for("test", 50) == 48
    assert rm.parts[("__consumer_offsets", 48)].log.log_end_offset == 2

    async def reload():
        c = coordinator(rm)
        await c.startup()
        offsets = c.manager.fetch_offsets("test", None)
        group = c.manager.group("test")
        c.shutdown()
        return offsets, group
    offsets, group = run(reload())
    assert [(p.topic, p.partition, p.offset, p.metadata) for p in offsets.partitions] == [
        ("t", 0, 42, "x")]
    assert group.state.value == "Stable" and set(group.members) == {a.member_id, b.member_id}


def test_session_timeout_fires_through_loop_timers():
    async def scenario():
        c = coordinator()
        await c.startup()
        first = await join_member(c, "g", session=600)
        await c.execute("sync_group", "g", 1, first.member_id, None, None, None,
                        {first.member_id: b"x"}, parked=True)
        assert c.manager.group("g").state.value == "Stable"
        for _ in range(4):                        # heartbeats keep it alive past 600 ms
            await asyncio.sleep(0.2)
            assert await c.execute("heartbeat", "g", first.member_id, None, 1) == E.NONE
        await asyncio.sleep(1.5)
        state = c.manager.group("g").state.value
        c.shutdown()
        return state
    assert run(scenario()) == "Empty"


def test_append_failure_reaches_the_client():
    rm = FakeReplicaManager(range(50))
    rm.fail_with = E.NOT_LEADER_OR_FOLLOWER

    async def scenario():
        c = coordinator(rm)
        await c.startup()
        answer = await c.execute("commit_offsets", "g", "", None, -1, [("t", 0, 1, -1, "")])
        c.shutdown()
        return answer
    assert run(scenario()) == {("t", 0): E.NOT_COORDINATOR}


def test_coordinator_errors_for_missing_partitions():
    async def scenario():
        c = coordinator(FakeReplicaManager([]))
        await c.startup()
        errors = (c.coordinator_error("test"), await c.ensure_offsets_topic())
        c2 = coordinator(FakeReplicaManager([1]))
        await c2.startup()
        errors += (c2.coordinator_error("test"),)
        c.shutdown()
        c2.shutdown()
        return errors
    # Not owning the group's partition is NOT_COORDINATOR, whether or not the topic exists
    # (Kafka's isCoordinatorForGroup); creating it without a way to is COORDINATOR_NOT_AVAILABLE.
    assert run(scenario()) == (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE,
                               E.NOT_COORDINATOR)


def test_offsets_expire_on_the_retention_check_timer():
    config = GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=10,
                         offsets_retention_ms=100, offsets_retention_check_interval_ms=50)
    rm = FakeReplicaManager(range(50))

    async def scenario():
        c = coordinator(rm, config)
        await c.startup()
        assert await c.execute("commit_offsets", "old", "", None, -1,
                               [("t", 0, 1, -1, "")]) == {("t", 0): E.NONE}
        await asyncio.sleep(0.05)
        still_there = c.manager.group("old") is not None
        await asyncio.sleep(0.3)
        gone = c.manager.group("old") is None
        c.shutdown()
        return still_there, gone
    assert run(scenario()) == (True, True)
    # the tombstones are in the log: a reload finds nothing
    async def reload():
        c = coordinator(rm, config)
        await c.startup()
        groups = set(c.manager.groups)
        c.shutdown()
        return groups
    assert run(reload()) == set()


def test_shutdown_answers_parked_requests():
    async def scenario():
        c = coordinator(config=GroupConfig(initial_rebalance_delay_ms=60_000,
                                           min_session_timeout_ms=10))
        await c.startup()
        first = await join(c, "g")
        parked = asyncio.ensure_future(join(c, "g", member_id=first.member_id))
        await asyncio.sleep(0.01)
        assert not parked.done()
        c.shutdown()
        return await parked
    assert run(scenario()).error == E.NOT_COORDINATOR


def test_groups_hash_over_the_topics_real_partition_count():
    rm = FakeReplicaManager(range(3))       # __consumer_offsets created with 3 partitions

    async def scenario():
        c = GroupCoordinator(rm, num_partitions=50, config=CONFIG, partition_count=lambda: 3)
        await c.startup()
        error = c.coordinator_error("test")     # 48 of 50 is not here; 3 partitions are
        answer = await c.execute("commit_offsets", "test", "", None, -1, [("t", 0, 1, -1, "")])
        c.shutdown()
        return error, c.partition_for("test"), answer
    error, p, answer = run(scenario())
    assert error == E.NONE and p == partition_for("test", 3) and answer == {("t", 0): E.NONE}
    assert rm.parts[("__consumer_offsets", p)].log.log_end_offset == 1


def test_group_settings_come_from_the_broker_config():
    from broker.config import BrokerConfig
    from coordinator.runtime import group_config_from
    config = group_config_from(BrokerConfig({
        "offset.metadata.max.bytes": "10", "group.max.size": "3",
        "group.min.session.timeout.ms": "100", "group.max.session.timeout.ms": "200",
        "group.initial.rebalance.delay.ms": "0", "offsets.retention.minutes": "2",
        "offsets.commit.timeout.ms": "1234", "offsets.load.buffer.size": "4096"}))
    assert (config.offset_metadata_max_bytes, config.max_size, config.min_session_timeout_ms,
            config.max_session_timeout_ms, config.initial_rebalance_delay_ms,
            config.offsets_retention_ms, config.offsets_commit_timeout_ms,
            config.offsets_load_buffer_size) == (10, 3, 100, 200, 0, 120_000, 1234, 4096)


def test_unloading_a_partition_answers_parked_requests_and_reload_rebuilds_the_groups():
    """Kafka's onResignation / onElection: groups of a partition this broker no longer leads
    are dropped (parked joins answered NOT_COORDINATOR); leading it again reloads them."""
    async def scenario():
        rm = FakeReplicaManager(range(50))
        c = coordinator(rm)
        await c.startup()
        stable = await join_member(c, "kept", session=5000)
        await c.execute("sync_group", "kept", stable.generation_id, stable.member_id, None,
                        None, None, {stable.member_id: b"a"}, parked=True)
        await c.execute("commit_offsets", "kept", stable.member_id, None,
                        stable.generation_id, [("t", 0, 42, -1, "")])
        # a second member's join is parked in the rebalance it starts
        first = await join(c, "kept", session=5000)
        parked = asyncio.ensure_future(join(c, "kept", member_id=first.member_id, session=5000))
        await asyncio.sleep(0.01)
        assert not parked.done()
        p = c.partition_for("kept")
        rm.get_partition("__consumer_offsets", p).is_leader = False
        assert c.unload_partition(p) == 1
        assert (await parked).error == E.NOT_COORDINATOR
        assert c.manager.group("kept") is None
        assert c.coordinator_error("kept") == E.NOT_COORDINATOR
        rm.get_partition("__consumer_offsets", p).is_leader = True
        assert c.coordinator_error("kept") == E.NONE            # loads it again
        group = c.manager.group("kept")
        assert group.state.value == "Stable" and list(group.members) == [stable.member_id]
        assert group.offsets[("t", 0)].offset == 42
        c.shutdown()
    run(scenario())


def test_a_verified_txn_offset_commit_is_appended_alone():
    """A TxnOffsetCommit carrying a verification guard goes in its own append: the log may
    refuse it (a marker ended its transaction meanwhile) without failing the commits that the
    same loop turn batched for the same partition."""
    stale = object()

    class Refusing(FakeReplicaManager):
        def __init__(self):
            super().__init__(range(50))
            self.calls = []

        def append_records(self, entries, required_acks, now_ms=None, verification=None):
            self.calls.append((sorted(entries), verification))
            if verification and any(stale in guards.values() for guards in verification.values()):
                return {key: SimpleNamespace(error_code=E.INVALID_TXN_STATE, last_offset=-1)
                        for key in entries}
            return super().append_records(entries, required_acks, now_ms)
    rm = Refusing()

    async def scenario():
        c = coordinator(rm)
        await c.startup()
        rm.calls.clear()
        answers = await asyncio.gather(
            c.execute("commit_offsets", "g", "", None, -1, [("t", 0, 1, -1, "")]),
            c.execute("txn_commit_offsets", "g", 7, 0, "", None, -1, [("t", 1, 2, -1, "")],
                      verification=stale),
            c.execute("txn_commit_offsets", "g", 8, 0, "", None, -1, [("t", 2, 3, -1, "")]))
        c.shutdown()
        return answers
    plain, refused, other = run(scenario())
    assert plain == {("t", 0): E.NONE} and other == {("t", 2): E.NONE}
    assert refused == {("t", 1): E.INVALID_TXN_STATE}
    key = ("__consumer_offsets", partition_for("g", 50))
    assert rm.calls == [([key], None), ([key], {key: {7: stale}})]
