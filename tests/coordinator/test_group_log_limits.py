"""The runtime over the real ReplicaManager and storage Log: what max.message.bytes of
`__consumer_offsets` does to group writes (oversized metadata, many commits in one loop turn)."""
import asyncio

import pytest

from protocol.errors import ErrorCode as E

from broker.replica_manager import ReplicaManager
from coordinator.partitioning import partition_for
from coordinator.results import GroupConfig
from coordinator.runtime import GroupCoordinator
from storage.log_config import LogConfig
from storage.log_manager import LogManager

TOPIC = "events"


@pytest.fixture
def stack(tmp_path):
    log_manager = LogManager([str(tmp_path)], LogConfig())
    log_manager.startup("group-tests", 0)
    rm = ReplicaManager(log_manager, broker_id=0, producer_id_dir=str(tmp_path))
    for p in range(50):
        rm.become_leader("__consumer_offsets", p, None, 0, [0], LogConfig())
    rm.become_leader(TOPIC, 0, None, 0, [0], LogConfig())
    config = GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=10)
    yield rm, GroupCoordinator(rm, num_partitions=50, config=config)
    rm.shutdown()
    log_manager.shutdown()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


async def commit(c, group, offset, metadata="", member="", generation=-1):
    answer = await c.execute("commit_offsets", group, member, None, generation,
                             [(TOPIC, 0, offset, -1, metadata)])
    return answer[(TOPIC, 0)]


def test_many_commits_of_one_loop_turn_are_split_under_max_message_bytes(stack):
    """300 commits with 4 KB metadata each, to groups of ONE offsets partition, arrive in the
    same loop turn: together they are over 1 MB, yet each is valid and must be stored."""
    rm, c = stack

    async def scenario():
        await c.startup()
        groups = [g for g in (f"g{i}" for i in range(20_000))
                  if partition_for(g, 50) == partition_for("g0", 50)][:300]
        codes = await asyncio.gather(*(commit(c, g, i, "m" * 4000)
                                       for i, g in enumerate(groups)))
        assert set(codes) == {E.NONE}
        fetched = [c.manager.fetch_offsets(g, [(TOPIC, 0)]).partitions[0].offset for g in groups]
        assert fetched == list(range(300))
        c.shutdown()
    run(scenario())


def test_oversized_group_metadata_fails_the_sync_alone_and_loses_no_offset(stack):
    """A member whose subscription metadata makes the GroupMetadata record bigger than
    max.message.bytes: the leader's SyncGroup gets UNKNOWN_SERVER_ERROR (Kafka's mapping of
    MESSAGE_TOO_LARGE for group writes), the group goes back to PreparingRebalance, and a
    commit written in the same loop turn, and the offsets committed before, are unharmed."""
    rm, c = stack

    async def scenario():
        await c.startup()
        assert await commit(c, "big", 7) == E.NONE                 # a simple commit first
        first = await c.execute("join_group", "big", "", None, "cli", "/h", 10_000, 10_000,
                                "consumer", [("range", b"x" * 2_000_000)], True, parked=True)
        assert first.error == E.MEMBER_ID_REQUIRED
        joined = await c.execute("join_group", "big", first.member_id, None, "cli", "/h",
                                 10_000, 10_000, "consumer", [("range", b"x" * 2_000_000)], True,
                                 parked=True)
        assert joined.error == E.NONE and joined.leader == joined.member_id
        sync = c.execute("sync_group", "big", joined.generation_id, joined.member_id, None,
                         None, None, {joined.member_id: b"a"}, parked=True)
        other = commit(c, "big-neighbour", 3)
        sync_answer, other_code = await asyncio.gather(sync, other)
        assert sync_answer.error == E.UNKNOWN_SERVER_ERROR
        assert other_code == E.NONE
        assert c.manager.group("big").state.value == "PreparingRebalance"
        assert c.manager.fetch_offsets("big", [(TOPIC, 0)]).partitions[0].offset == 7
        # the log holds nothing of the failed write: a reload sees the same offsets
        fresh = GroupCoordinator(rm, num_partitions=50, config=c.manager.config)
        await fresh.startup()
        assert fresh.manager.fetch_offsets("big", [(TOPIC, 0)]).partitions[0].offset == 7
        assert fresh.manager.group("big").state.value == "Empty"
        c.shutdown()
        fresh.shutdown()
    run(scenario())


def test_transactional_commits_share_a_loop_turn_with_plain_ones_and_survive_a_reload(stack):
    """A plain commit and two transactions' commits to groups of one offsets partition in the
    same loop turn: one append of three batches (the transactional ones of their producers);
    the markers decide, and a coordinator loading the partition afresh sees the same."""
    from storage.record_batch import ControlRecordType, build_control_batch
    from storage.validation import ORIGIN_COORDINATOR
    rm, c = stack

    async def scenario():
        await c.startup()
        groups = [g for g in (f"g{i}" for i in range(20_000))
                  if partition_for(g, 50) == partition_for("g0", 50)][:3]
        p = partition_for(groups[0], 50)
        codes = await asyncio.gather(
            commit(c, groups[0], 1),
            c.execute("txn_commit_offsets", groups[1], 900, 0, "", None, -1,
                      [(TOPIC, 0, 2, -1, "")]),
            c.execute("txn_commit_offsets", groups[2], 901, 0, "", None, -1,
                      [(TOPIC, 0, 3, -1, "")]))
        assert codes == [E.NONE, {(TOPIC, 0): E.NONE}, {(TOPIC, 0): E.NONE}]
        log_ = rm.get_partition("__consumer_offsets", p).log
        assert log_.last_stable_offset < log_.log_end_offset        # two open transactions
        for pid, kind in ((900, ControlRecordType.COMMIT), (901, ControlRecordType.ABORT)):
            marker = build_control_batch(kind, pid, 0, 0, 0)
            result = rm.append_records({("__consumer_offsets", p): marker}, -1,
                                       origin=ORIGIN_COORDINATOR)
            assert result[("__consumer_offsets", p)].error_code == E.NONE
            c.on_transaction_completed(pid, [p], kind == ControlRecordType.COMMIT)
        assert log_.last_stable_offset == log_.log_end_offset

        def offsets(coordinator):
            return [coordinator.manager.fetch_offsets(g, [(TOPIC, 0)], True).partitions[0].offset
                    for g in groups]
        assert offsets(c) == [1, 2, -1]
        c.shutdown()
        fresh = GroupCoordinator(rm, num_partitions=50, config=c.manager.config)
        await fresh.startup()
        assert offsets(fresh) == [1, 2, -1]
        fresh.shutdown()
    run(scenario())
