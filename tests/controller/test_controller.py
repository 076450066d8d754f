"""The controller's state machine driven directly: an in-memory ZooKeeper (fake_zk), a sender
that records requests, a fixed clock. What a real cluster does is in
tests/integration/test_cluster.py; these pin the decisions (who leads, which ISR, which epochs,
which requests to whom) exactly, as Kafka 3.9's controller makes them."""
import asyncio
import json
import sys
import pathlib

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from fake_zk import FakeZooKeeper  # noqa: E402

from broker import zk_data as zd  # noqa: E402
from broker.controller.controller import KafkaController  # noqa: E402
from broker.kafka_zk import ControllerMovedError, KafkaZk  # noqa: E402
from protocol.errors import ErrorCode  # noqa: E402
from protocol.messages.stop_replica import StopReplicaResponse  # noqa: E402


class Clock:
    def ms(self):
        return 1_700_000_000_000


class Config(dict):
    def get(self, name, default=None):
        return super().get(name, {"unclean.leader.election.enable": False,
                                  "delete.topic.enable": True}.get(name, default))


class RecordingSender:
    def __init__(self):
        self.brokers = {}
        self.sent = []                      # (broker, api name, request)

    def add_broker(self, info):
        self.brokers[info.id] = info

    def remove_broker(self, broker_id):
        self.brokers.pop(broker_id, None)

    def send(self, broker_id, request, version, callback=None):
        self.sent.append((broker_id, type(request).__name__.replace("Request", ""), request,
                          callback))

    def take(self, api=None):
        out = [s for s in self.sent if api is None or s[1] == api]
        self.sent = [s for s in self.sent if not (api is None or s[1] == api)]
        return out


class Node:
    """One broker as the controller sees it: a ZooKeeper session, a registration, a
    controller module."""

    def __init__(self, server, broker_id, config=None):
        self.id = broker_id
        self.zk = server.client()
        self.kzk = KafkaZk(self.zk)
        self.sender = RecordingSender()
        self.controller = KafkaController(broker_id, self.kzk, self.sender, time=Clock(),
                                          config=config or Config())

    async def register(self):
        info = zd.BrokerInfo(self.id, (zd.EndPoint("PLAINTEXT", "127.0.0.1", 9000 + self.id),))
        self.epoch = await self.kzk.register_broker(info, 0)


async def cluster(n=3, config=None):
    server = FakeZooKeeper()
    nodes = [Node(server, i, config) for i in range(n)]
    await nodes[0].kzk.create_top_level_paths()
    for node in nodes:
        await node.register()
    for node in nodes:
        await node.controller.startup()
        await node.controller.idle()
    return server, nodes


async def settle(nodes):
    for _ in range(3):
        await asyncio.sleep(0)
        for node in nodes:
            await node.controller.idle()


def active(nodes):
    (node,) = [n for n in nodes if n.controller.is_active]
    return node


async def create_topic(node, name, assignment, configs=None):
    await node.kzk.create_topic(name, zd.TopicAssignment(assignment), configs or {})


async def state(server, topic, p):
    data = server.nodes[zd.partition_state_path(topic, p)]
    return json.loads(data.data), data.version


async def come_back(server, node):
    """A broker whose session expired registers again with a new session."""
    node.zk = server.client()
    node.kzk.zk = node.zk
    await node.register()


async def shutdown(nodes):
    for node in nodes:
        await node.controller.shutdown()


async def test_first_broker_becomes_controller_with_epoch_1():
    server, nodes = await cluster()
    try:
        assert active(nodes).id == 0
        assert all(n.controller.active_controller_id == 0 for n in nodes)
        assert server.nodes[zd.CONTROLLER_EPOCH].data == b"1"
        assert server.nodes[zd.CONTROLLER_EPOCH].version == 1
        controller = json.loads(server.nodes[zd.CONTROLLER].data)
        assert controller == {"version": 2, "brokerid": 0, "timestamp": "1700000000000",
                              "kraftControllerEpoch": -1}
        # Failover told every broker the live brokers.
        sent = nodes[0].sender.take("UpdateMetadata")
        assert sorted(b for b, *_ in sent) == [0, 1, 2]
        assert [b.id for b in sent[0][2].live_brokers] == [0, 1, 2]
    finally:
        await shutdown(nodes)


async def test_registration_is_a_two_op_multi_and_the_epoch_is_the_czxid():
    server, nodes = await cluster(1)
    try:
        node = server.nodes[zd.broker_path(0)]
        assert node.version == 1 and node.czxid == nodes[0].epoch
        assert json.loads(node.data)["endpoints"] == ["PLAINTEXT://127.0.0.1:9000"]
    finally:
        await shutdown(nodes)


async def test_new_topic_gets_states_leaders_and_requests():
    server, nodes = await cluster()
    try:
        c = active(nodes)
        c.sender.take()
        await create_topic(nodes[2], "t", {0: [1, 2, 0], 1: [2, 0, 1]})
        await settle(nodes)
        assert await state(server, "t", 0) == ({"controller_epoch": 1, "leader": 1, "version": 1,
                                                "leader_epoch": 0, "isr": [1, 2, 0]}, 0)
        # The controller wrote a topic id into the topic znode.
        topic = json.loads(server.nodes["/brokers/topics/t"].data)
        assert topic["version"] == 3 and len(topic["topic_id"]) == 22
        lai = c.sender.take("LeaderAndIsr")
        assert sorted(b for b, *_ in lai) == [0, 1, 2]
        for _, _, request, _ in lai:
            (topic_state,) = request.topic_states
            assert all(p.is_new for p in topic_state.partition_states)
            assert request.controller_epoch == 1
        um = c.sender.take("UpdateMetadata")
        assert sorted(b for b, *_ in um) == [0, 1, 2]
    finally:
        await shutdown(nodes)


async def test_dead_leader_is_replaced_from_the_isr_with_a_bumped_epoch():
    server, nodes = await cluster()
    try:
        await create_topic(nodes[0], "t", {0: [1, 2, 0]})
        await settle(nodes)
        server.expire(nodes[1].zk)
        await settle(nodes)
        got, version = await state(server, "t", 0)
        assert got["leader"] == 2 and got["isr"] == [2, 0]
        assert got["leader_epoch"] == 1
        assert version == 1
    finally:
        await shutdown(nodes)


async def test_last_replica_standing_keeps_the_isr_and_no_unclean_election(caplog):
    server, nodes = await cluster()
    try:
        await create_topic(nodes[0], "t", {0: [1, 2]})
        await create_topic(nodes[0], "u", {0: [1, 2]})
        await settle(nodes)
        server.expire(nodes[2].zk)
        await settle(nodes)
        got, _ = await state(server, "t", 0)
        assert got["leader"] == 1 and got["isr"] == [1]
        server.expire(nodes[1].zk)
        await settle(nodes)
        got, _ = await state(server, "t", 0)
        assert got["leader"] == -1 and got["isr"] == [1]
        # Broker 2 (out of sync) comes back: not elected without unclean election.
        await come_back(server, nodes[2])
        await settle(nodes)
        got, _ = await state(server, "t", 0)
        assert got["leader"] == -1
        # The operator turns it on for the topic: elected at once (Kafka's
        # UncleanLeaderElectionEnable), not at the next broker change.
        await nodes[0].kzk.set_entity_config("topics", "t",
                                             {"unclean.leader.election.enable": "true"})
        c = active(nodes).controller
        caplog.clear()
        await c.enqueue(c.unclean_leader_election_enabled, "t")
        got, _ = await state(server, "t", 0)
        assert got["leader"] == 2 and got["leader_recovery_state"] == 1
        # Only that topic's partitions are tried (Kafka's TopicUncleanLeaderElectionEnable):
        # topic u, still offline and still clean-only, is left alone and logs no failure.
        got, _ = await state(server, "u", 0)
        assert got["leader"] == -1
        assert not [r for r in caplog.records if "u-0" in r.getMessage()]
    finally:
        await shutdown(nodes)


async def test_unclean_election_when_the_topic_allows_it():
    server, nodes = await cluster()
    try:
        await create_topic(nodes[0], "t", {0: [1, 2]},
                           {"unclean.leader.election.enable": "true"})
        await settle(nodes)
        server.expire(nodes[2].zk)
        await settle(nodes)
        server.expire(nodes[1].zk)
        await settle(nodes)
        await come_back(server, nodes[2])
        await settle(nodes)
        got, _ = await state(server, "t", 0)
        assert got["leader"] == 2 and got["isr"] == [2]
        assert got["leader_recovery_state"] == 1
        # Broker 2 dies before it said RECOVERED and comes back: elected cleanly from the ISR,
        # the partition is still recovering (Kafka's Election keeps the state).
        server.expire(nodes[2].zk)
        await settle(nodes)
        await come_back(server, nodes[2])
        await settle(nodes)
        got, _ = await state(server, "t", 0)
        assert got["leader"] == 2 and got["leader_epoch"] > 1
        assert got["leader_recovery_state"] == 1
    finally:
        await shutdown(nodes)


async def test_controller_failover_and_the_deposed_controller_is_fenced():
    server, nodes = await cluster()
    try:
        await create_topic(nodes[1], "t", {0: [0, 1, 2]})
        await create_topic(nodes[1], "u", {0: [1, 2]})
        await settle(nodes)
        old = nodes[0]
        epoch_version = old.controller.ctx.epoch_zk_version
        server.expire(old.zk)
        await settle(nodes)
        new = active([n for n in nodes if n is not old])
        assert new.controller.ctx.epoch == 2
        got, _ = await state(server, "t", 0)
        assert got["leader"] == 1 and got["controller_epoch"] == 2
        # An ISR change the new controller writes carries its epoch (Kafka's
        # updateLeaderAndIsr), whatever epoch wrote the state before.
        assert (await state(server, "u", 0))[0]["controller_epoch"] == 1
        c = new.controller
        error, out = await c.enqueue(c.alter_partition, 1, nodes[1].epoch,
                                     {("u", 0): (0, [1], False, 0)})
        assert error == ErrorCode.NONE and out[("u", 0)].isr == [1]
        assert (await state(server, "u", 0))[0]["controller_epoch"] == 2
        # The old controller's conditional write fails (its epoch version is stale).
        fresh = nodes[1].kzk                     # a live session, old epoch version
        with pytest.raises(ControllerMovedError):
            await fresh.delete_topic_znodes("t", epoch_version)
        assert "/brokers/topics/t" in server.nodes
    finally:
        await shutdown(nodes)


async def test_restarted_broker_gets_leader_and_isr_for_its_replicas():
    server, nodes = await cluster()
    try:
        await create_topic(nodes[0], "t", {0: [2, 1], 1: [0, 1]})
        await settle(nodes)
        server.expire(nodes[2].zk)
        await settle(nodes)
        c = active(nodes)
        c.sender.take()
        await come_back(server, nodes[2])
        await settle(nodes)
        lai = [s for s in c.sender.take("LeaderAndIsr") if s[0] == 2]
        assert lai, "the restarted broker must learn its replicas"
        (ts,) = lai[0][2].topic_states
        assert [p.partition_index for p in ts.partition_states] == [0]
    finally:
        await shutdown(nodes)


async def test_controlled_shutdown_moves_leadership_and_leaves_out_rf1_partitions():
    """Kafka's answer lists the partitions with other replicas the broker still leads: a
    partition with one replica cannot move and must not make the broker retry for nothing."""
    server, nodes = await cluster()
    try:
        await create_topic(nodes[0], "t", {0: [1, 2, 0], 1: [1]})
        await settle(nodes)
        c = active(nodes)
        error, remaining = await c.controller.enqueue(c.controller.controlled_shutdown, 1,
                                                      nodes[1].epoch)
        assert error == ErrorCode.NONE
        assert remaining == []
        got, _ = await state(server, "t", 1)
        assert got["leader"] == 1
        got, _ = await state(server, "t", 0)
        assert got["leader"] == 2 and got["isr"] == [2, 0] and got["leader_epoch"] == 1
        error, _ = await c.controller.enqueue(c.controller.controlled_shutdown, 1,
                                              nodes[1].epoch - 1)
        assert error == ErrorCode.STALE_BROKER_EPOCH
    finally:
        await shutdown(nodes)


async def test_topic_deletion_completes_when_every_replica_answers():
    server, nodes = await cluster()
    try:
        await create_topic(nodes[0], "t", {0: [0, 1]})
        await settle(nodes)
        c = active(nodes)
        stops = await delete_topic(nodes, c)
        assert sorted(b for b, *_ in stops) == [0, 1]
        for broker, _, request, callback in stops:
            (ts,) = request.topic_states
            assert ts.partition_states[0].delete_partition
            assert ts.partition_states[0].leader_epoch == -2
        answer_stop_replicas(stops)
        await settle(nodes)
        assert "/brokers/topics/t" not in server.nodes
        assert "/admin/delete_topics/t" not in server.nodes
        assert "t" not in c.controller.ctx.assignments
    finally:
        await shutdown(nodes)


async def delete_topic(nodes, c, topic="t") -> list:
    """Marks `topic` for deletion; returns the StopReplica requests the controller sent."""
    c.sender.take()
    await nodes[0].kzk.mark_topic_for_deletion(topic)
    await settle(nodes)
    return c.sender.take("StopReplica")


def answer_stop_replicas(stops, topic="t") -> None:
    for broker, _, request, callback in stops:
        errors = [StopReplicaResponse.StopReplicaPartitionError(
            topic_name=topic, partition_index=ps.partition_index, error_code=0)
            for ts in request.topic_states for ps in ts.partition_states]
        callback(StopReplicaResponse(error_code=0, partition_errors=errors))


async def broker_2_back_deletes_its_replica(server, nodes, c) -> None:
    """Broker 2 comes back, is told to delete its replica of t-0, answers, and the topic's
    deletion completes."""
    await come_back(server, nodes[2])
    await settle(nodes)
    stops = c.sender.take("StopReplica")
    assert [b for b, *_ in stops] == [2]
    answer_stop_replicas(stops)
    await settle(nodes)
    assert "/brokers/topics/t" not in server.nodes
    assert "/admin/delete_topics/t" not in server.nodes
    assert "t" not in c.controller.ctx.assignments


async def test_a_topic_deleted_while_a_replica_is_down_goes_at_once_where_it_can():
    """Kafka's onTopicDeletion: every broker learns at once that the topic goes (leader -2)
    and the live replicas are deleted; the dead broker's replica is deleted when it comes
    back, and only then do the topic's znodes go."""
    server, nodes = await cluster()
    try:
        await create_topic(nodes[0], "t", {0: [1, 2]})
        await settle(nodes)
        c = active(nodes)
        assert c is nodes[0]
        server.expire(nodes[2].zk)
        await settle(nodes)
        c.sender.take()
        await nodes[0].kzk.mark_topic_for_deletion("t")
        await settle(nodes)
        metadata = c.sender.take("UpdateMetadata")
        assert metadata and all(
            ps.leader == -2 for _, _, request, _ in metadata
            for ts in request.topic_states for ps in ts.partition_states)
        stops = c.sender.take("StopReplica")
        assert [b for b, *_ in stops] == [1]
        answer_stop_replicas(stops)
        await settle(nodes)
        assert "/brokers/topics/t" in server.nodes           # broker 2's replica is left
        await broker_2_back_deletes_its_replica(server, nodes, c)
    finally:
        await shutdown(nodes)


async def test_a_replica_whose_broker_died_mid_deletion_is_deleted_when_it_returns():
    """Kafka's failReplicaDeletion and resumeDeletionForTopics: the StopReplica lost with the
    broker is sent again when it comes back, and the deletion completes."""
    server, nodes = await cluster()
    try:
        await create_topic(nodes[0], "t", {0: [1, 2]})
        await settle(nodes)
        c = active(nodes)
        stops = await delete_topic(nodes, c)
        assert sorted(b for b, *_ in stops) == [1, 2]
        answer_stop_replicas([s for s in stops if s[0] == 1])
        server.expire(nodes[2].zk)                            # before it answered
        await settle(nodes)
        assert "/brokers/topics/t" in server.nodes
        await broker_2_back_deletes_its_replica(server, nodes, c)
    finally:
        await shutdown(nodes)


async def test_a_broker_dying_during_a_deletion_sends_no_leader_and_isr_for_the_topic():
    """Kafka's onReplicasBecomeOffline leaves topics being deleted alone: a LeaderAndIsr for
    one would make a replica whose log was already deleted create it again and lead it."""
    server, nodes = await cluster(4)
    try:
        await create_topic(nodes[0], "t", {0: [1, 2, 3]})
        await settle(nodes)
        c = active(nodes)
        server.expire(nodes[3].zk)
        await settle(nodes)
        answer_stop_replicas(await delete_topic(nodes, c))      # 1 and 2 deleted theirs
        await settle(nodes)
        c.sender.take()
        server.expire(nodes[2].zk)
        await settle(nodes)
        assert not [ps for _, _, request, _ in c.sender.take("LeaderAndIsr")
                    for ts in request.topic_states if ts.topic_name == "t"
                    for ps in ts.partition_states]
        assert c.controller.ctx.deletion_started == {"t": {(3, ("t", 0))}}
    finally:
        await shutdown(nodes)


async def test_malformed_topic_znode_is_skipped_not_fatal(caplog):
    server, nodes = await cluster()
    try:
        await nodes[0].zk.create("/brokers/topics/bad", b"{not json")
        await create_topic(nodes[0], "good", {0: [0]})
        await settle(nodes)
        assert "/brokers/topics/good/partitions/0/state" in server.nodes
        assert "Ignoring topic bad" in caplog.text
    finally:
        await shutdown(nodes)


async def test_an_unreadable_partition_state_fails_only_its_own_election(caplog):
    """A hand-edited state znode (no isr) must not stop the failover of other partitions,
    as Kafka's controller only fails that partition's election."""
    server, nodes = await cluster()
    try:
        await create_topic(nodes[0], "bad", {0: [1, 2, 0]})
        await create_topic(nodes[0], "good", {0: [1, 2, 0]})
        await settle(nodes)
        path = zd.partition_state_path("bad", 0)
        await nodes[0].zk.set(path, json.dumps({"leader": 1, "leader_epoch": 0,
                                                "controller_epoch": 1}).encode())
        server.expire(nodes[1].zk)              # leader of both
        await settle(nodes)
        got, _ = await state(server, "good", 0)
        assert got["leader"] == 2 and got["isr"] == [2, 0]
        assert "isr is not a list" in caplog.text
        # And when a new controller finds the state unreadable at failover.
        server.nodes[path].data = b"{oops"
        server.expire(nodes[0].zk)
        await settle(nodes)
        assert active(nodes[2:]).id == 2
        got, _ = await state(server, "good", 0)
        assert got["leader"] == 2 and got["isr"] == [2]
        assert server.nodes[path].data == b"{oops"           # left as it was
    finally:
        await shutdown(nodes)


async def test_values_that_do_not_fit_kafkas_types_are_refused_at_decode():
    with pytest.raises(zd.ZNodeDataError, match="32-bit"):
        zd.decode_partition_state("t", 0, json.dumps({
            "leader": 0, "leader_epoch": 0, "isr": [0],
            "controller_epoch": 99999999999}).encode())
    with pytest.raises(zd.ZNodeDataError, match="32-bit"):
        zd.decode_topic("t", b'{"partitions":{"0":[0,1,2147483648]}}')
    with pytest.raises(zd.ZNodeDataError, match="out of range"):
        zd.decode_controller_epoch(b"2147483647")
    with pytest.raises(zd.ZNodeDataError, match="bad port"):
        zd.decode_broker_info(1, json.dumps({"endpoints": ["PLAINTEXT://h:70000"]}).encode())
    assert zd.decode_producer_id_block(json.dumps(
        {"block_start": str(2**40), "block_end": str(2**40 + 999)}).encode()) == \
        (2**40, 2**40 + 999)


async def test_a_bad_replica_list_leaves_the_topics_other_partitions_managed(caplog):
    server, nodes = await cluster()
    try:
        await create_topic(nodes[0], "t", {0: [0, 1], 1: [1, 2], 2: [2, 0]})
        await settle(nodes)
        path = zd.topic_path("t")
        value = json.loads(server.nodes[path].data)
        value["partitions"]["2"] = []
        await nodes[0].zk.set(path, json.dumps(value).encode())
        server.expire(nodes[0].zk)              # a new controller reads the topic again
        await settle(nodes)
        controller = active(nodes[1:]).controller
        assert sorted(controller.ctx.assignments["t"]) == [0, 1]
        assert "Ignoring partition t-2: bad replica list" in caplog.text
        got, _ = await state(server, "t", 0)
        assert got["leader"] == 1                 # partition 0 still elects
        # Written back as found (a topic id or a new partition rewrites the znode).
        assignment = zd.decode_topic("t", server.nodes[path].data)
        assert assignment.partition_count == 3
        assert json.loads(zd.encode_topic(assignment))["partitions"]["2"] == []
    finally:
        await shutdown(nodes)


async def test_an_unreadable_topic_id_is_not_replaced(caplog):
    server, nodes = await cluster()
    try:
        await create_topic(nodes[0], "t", {0: [0, 1]})
        await settle(nodes)
        path = zd.topic_path("t")
        value = json.loads(server.nodes[path].data)
        value["topic_id"] = "xyz!"
        await nodes[0].zk.set(path, json.dumps(value).encode())
        server.expire(nodes[0].zk)
        await settle(nodes)
        assert "Ignoring topic t: unreadable topic_id 'xyz!'" in caplog.text
        assert json.loads(server.nodes[path].data)["topic_id"] == "xyz!"
    finally:
        await shutdown(nodes)


async def test_controller_changes_leave_one_watch_per_broker(caplog):
    """Each broker reads /controller again on every change, and with no controller it also
    tries an election that reads it once more: one watch each all the same, not twice as many
    after every change (they all fired and were handled)."""
    server, nodes = await cluster()
    try:
        await nodes[0].zk.set(zd.CONTROLLER_EPOCH, b"garbage")   # no election can succeed
        server.expire(active(nodes).zk)
        await settle(nodes)
        for _ in range(4):
            await nodes[1].zk.create(zd.CONTROLLER, zd.encode_controller(7, 0))
            await settle(nodes)
            await nodes[1].zk.delete(zd.CONTROLLER)
            await settle(nodes)
        assert len(server.data_watches.get(zd.CONTROLLER, [])) <= 2      # two live brokers
        assert caplog.text.count("Unreadable /controller") <= 2 * 10
        assert "Cannot become the controller: /controller_epoch: not a number" in caplog.text
        assert "ZNodeDataError" not in caplog.text          # one line, no traceback
    finally:
        await shutdown(nodes)


async def test_alter_partition_validation():
    server, nodes = await cluster()
    try:
        await create_topic(nodes[0], "t", {0: [1, 2, 0]})
        await settle(nodes)
        c = active(nodes).controller
        tp = ("t", 0)
        error, out = await c.enqueue(c.alter_partition, 1, nodes[1].epoch,
                                     {tp: (0, [1, 2], False, 0)})
        assert error == ErrorCode.NONE and out[tp].isr == [1, 2] and out[tp].partition_epoch == 1
        got, version = await state(server, "t", 0)
        assert got["isr"] == [1, 2] and got["leader_epoch"] == 0 and version == 1
        # A stale partition epoch, a fenced leader epoch, a stale broker epoch.
        _, out = await c.enqueue(c.alter_partition, 1, nodes[1].epoch, {tp: (0, [1], False, 0)})
        assert out[tp] == ErrorCode.INVALID_UPDATE_VERSION
        _, out = await c.enqueue(c.alter_partition, 1, nodes[1].epoch, {tp: (-1, [1], False, 1)})
        assert out[tp] == ErrorCode.FENCED_LEADER_EPOCH
        error, _ = await c.enqueue(c.alter_partition, 1, nodes[1].epoch + 1,
                                   {tp: (0, [1], False, 1)})
        assert error == ErrorCode.STALE_BROKER_EPOCH
        # Retrying what is already there succeeds with the current state.
        _, out = await c.enqueue(c.alter_partition, 1, nodes[1].epoch, {tp: (0, [2, 1], False, 1)})
        assert out[tp].partition_epoch == 1
    finally:
        await shutdown(nodes)


async def test_preferred_leaders_come_back_when_imbalanced():
    server, nodes = await cluster()
    try:
        await create_topic(nodes[0], "t", {0: [1, 2, 0], 1: [2, 0, 1], 2: [0, 1, 2]})
        await settle(nodes)
        server.expire(nodes[1].zk)
        await settle(nodes)
        got, _ = await state(server, "t", 0)
        assert got["leader"] == 2
        await come_back(server, nodes[1])
        await settle(nodes)
        c = active(nodes).controller
        # Broker 1 is back but not yet in the ISR of t-0: not electable.
        assert await c.enqueue(c.rebalance_preferred_leaders) == {}
        error, out = await c.enqueue(c.alter_partition, 2, c.ctx.broker_epochs[2],
                                     {("t", 0): (1, [2, 0, 1], False, 1)})
        assert out[("t", 0)].isr == [2, 0, 1]
        elected = await c.enqueue(c.rebalance_preferred_leaders)
        assert elected[("t", 0)].leader == 1 and elected[("t", 0)].leader_epoch == 2
        got, _ = await state(server, "t", 0)
        assert got["leader"] == 1 and got["isr"] == [2, 0, 1]
    finally:
        await shutdown(nodes)


async def test_an_imbalance_at_or_under_the_percentage_is_left_alone():
    """Kafka's checkAndTriggerAutoLeaderRebalance: a broker's preferred partitions led
    elsewhere are elected back only while their share is above
    leader.imbalance.per.broker.percentage (here 50: 2 of 2 is, 1 of 2 is not)."""
    server, nodes = await cluster(config=Config({"leader.imbalance.per.broker.percentage": 50}))
    try:
        await create_topic(nodes[0], "t", {0: [1, 2, 0], 1: [1, 0, 2]})
        await settle(nodes)
        server.expire(nodes[1].zk)
        await settle(nodes)
        c = await broker_1_back_in_the_isr_of_t0(server, nodes)
        assert set(await c.enqueue(c.rebalance_preferred_leaders)) == {("t", 0)}
        got, version = await state(server, "t", 1)
        assert got["leader"] == 0 and 1 not in got["isr"]
        error, out = await c.enqueue(c.alter_partition, 0, c.ctx.broker_epochs[0],
                                     {("t", 1): (got["leader_epoch"], got["isr"] + [1], False,
                                                 version)})
        assert 1 in out[("t", 1)].isr
        # broker 1 leads 1 of its 2 partitions: 50 %, not above, t-1 stays with broker 0
        assert await c.enqueue(c.rebalance_preferred_leaders) == {}
        got, _ = await state(server, "t", 1)
        assert got["leader"] == 0
    finally:
        await shutdown(nodes)


async def broker_1_back_in_the_isr_of_t0(server, nodes):
    """Broker 1, expired while t-0 (replicas [1, 2, 0]) moved to 2, registers again and its
    leader 2 adds it back to the ISR. Returns the active controller."""
    await come_back(server, nodes[1])
    await settle(nodes)
    c = active(nodes).controller
    await c.enqueue(c.alter_partition, 2, c.ctx.broker_epochs[2],
                    {("t", 0): (1, [2, 0, 1], False, 1)})
    return c


async def test_admin_elections_preferred_and_unclean():
    server, nodes = await cluster()
    try:
        await create_topic(nodes[0], "t", {0: [1, 2, 0], 1: [2, 0, 1], 2: [0, 1, 2]})
        await settle(nodes)
        c = active(nodes).controller
        got = await c.enqueue(c.elect_leaders, [("t", 0), ("t", 9), ("u", 0)], 0)
        assert got == {("t", 0): (ErrorCode.ELECTION_NOT_NEEDED, None, None),
                       ("t", 9): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                  "The partition does not exist.", None),
                       ("u", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                  "The partition does not exist.", None)}
        server.expire(nodes[1].zk)                  # broker 1 dies: t-0 moves to 2
        await settle(nodes)
        c = active(nodes).controller
        got = await c.enqueue(c.elect_leaders, [("t", 0)], 0)
        assert got[("t", 0)] == (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                                 "Failed to elect leader for partition t-0 under strategy "
                                 "PreferredReplicaPartitionLeaderElectionStrategy", None)
        assert (await c.enqueue(c.elect_leaders, [("t", 0)], 1))[("t", 0)][0] == \
            ErrorCode.ELECTION_NOT_NEEDED                    # a live leader: nothing to do
        c = await broker_1_back_in_the_isr_of_t0(server, nodes)
        got = await c.enqueue(c.elect_leaders, [("t", 0)], 0)
        assert got[("t", 0)] == (ErrorCode.NONE, None, 1)
        assert (await state(server, "t", 0))[0]["leader"] == 1
        assert [s[0] for s in active(nodes).sender.take("LeaderAndIsr")] != []
        follower = [n for n in nodes if not n.controller.is_active][0].controller
        assert (await follower.enqueue(follower.elect_leaders, [("t", 0)], 0)) == \
            {("t", 0): (ErrorCode.NOT_CONTROLLER, None, None)}
    finally:
        await shutdown(nodes)


async def test_the_legacy_preferred_replica_election_znode_is_served_and_deleted(caplog):
    """kafka-preferred-replica-election.sh (before 3.0) and tools like CMAK write
    /admin/preferred_replica_election; Kafka 3.9's controller still runs that election and
    deletes the znode, an unreadable one too."""
    server, nodes = await cluster()
    try:
        await create_topic(nodes[0], "t", {0: [1, 2, 0]})
        await settle(nodes)
        server.expire(nodes[1].zk)                  # t-0 moves to 2
        await settle(nodes)
        await broker_1_back_in_the_isr_of_t0(server, nodes)
        assert (await state(server, "t", 0))[0]["leader"] == 2
        await nodes[0].zk.create(zd.PREFERRED_REPLICA_ELECTION,
                                 zd.encode_preferred_replica_election({("t", 0), ("u", 3)}))
        await settle(nodes)
        assert (await state(server, "t", 0))[0]["leader"] == 1
        assert zd.PREFERRED_REPLICA_ELECTION not in server.nodes
        assert "{'u-3': 'UNKNOWN_TOPIC_OR_PARTITION'}" in caplog.text
        # Garbage is logged and deleted; the next one is still watched.
        await nodes[0].zk.create(zd.PREFERRED_REPLICA_ELECTION, b"{garbage")
        await settle(nodes)
        assert zd.PREFERRED_REPLICA_ELECTION not in server.nodes
        assert "Ignoring /admin/preferred_replica_election" in caplog.text
        await nodes[0].zk.create(zd.PREFERRED_REPLICA_ELECTION,
                                 zd.encode_preferred_replica_election({("t", 0)}))
        await settle(nodes)
        assert zd.PREFERRED_REPLICA_ELECTION not in server.nodes
    finally:
        await shutdown(nodes)


async def test_isr_change_notifications_are_read_told_and_deleted():
    """Leaders before IBP 2.7 write ISR changes to ZooKeeper and leave a notification: the
    controller re-reads those states, sends UpdateMetadata and deletes the notifications,
    unreadable ones too, as Kafka 3.9's does."""
    server, nodes = await cluster()
    try:
        await create_topic(nodes[0], "t", {0: [1, 2, 0]})
        await settle(nodes)
        path = zd.partition_state_path("t", 0)
        got, version = await state(server, "t", 0)
        got["isr"] = [1, 2]
        await nodes[1].zk.set(path, json.dumps(got).encode(), version)
        c = active(nodes)
        c.sender.take()
        base = zd.ISR_CHANGE_NOTIFICATION + "/isr_change_"
        await nodes[1].zk.create(base, zd.encode_preferred_replica_election({("t", 0)}),
                                 sequence=True)
        await nodes[1].zk.create(base, b"{garbage", sequence=True)
        await settle(nodes)
        assert c.controller.ctx.states[("t", 0)].isr == [1, 2]
        sent = c.sender.take("UpdateMetadata")
        assert sorted(b for b, *_ in sent) == [0, 1, 2]
        assert not [p for p in server.nodes if p.startswith(zd.ISR_CHANGE_NOTIFICATION + "/")]
    finally:
        await shutdown(nodes)


async def test_unclean_admin_election_takes_an_out_of_sync_replica():
    server, nodes = await cluster()
    try:
        await create_topic(nodes[0], "t", {0: [1, 2]})
        await settle(nodes)
        c = active(nodes).controller
        # Shrink the ISR to the leader, then lose it: no eligible leader (unclean is off).
        await c.enqueue(c.alter_partition, 1, c.ctx.broker_epochs[1],
                        {("t", 0): (0, [1], False, 0)})
        server.expire(nodes[1].zk)
        await settle(nodes)
        c = active(nodes).controller
        assert (await state(server, "t", 0))[0]["leader"] == -1
        got = await c.enqueue(c.elect_leaders, [("t", 0)], 1)
        assert got[("t", 0)] == (ErrorCode.NONE, None, 2)
        got_state = (await state(server, "t", 0))[0]
        assert got_state["leader"] == 2 and got_state["isr"] == [2]
    finally:
        await shutdown(nodes)


async def test_new_controller_takes_dead_brokers_out_of_every_isr():
    server, nodes = await cluster()
    try:
        await create_topic(nodes[1], "t", {0: [1, 0, 2], 1: [2, 1, 0]})
        await settle(nodes)
        # The controller (0) dies: its follower replicas leave the ISRs under the new one.
        server.expire(nodes[0].zk)
        await settle(nodes)
        for p in (0, 1):
            got, _ = await state(server, "t", p)
            assert 0 not in got["isr"] and got["leader"] in (1, 2)
            assert got["controller_epoch"] == 2
    finally:
        await shutdown(nodes)


async def test_controlled_shutdown_sends_leader_and_isr_for_moved_leaderships():
    server, nodes = await cluster()
    try:
        await create_topic(nodes[0], "t", {0: [1, 2, 0], 1: [0, 1, 2]})
        await settle(nodes)
        c = active(nodes)
        c.sender.take()
        await c.controller.enqueue(c.controller.controlled_shutdown, 1, nodes[1].epoch)
        sent = {}
        for broker, _, request, _ in c.sender.take("LeaderAndIsr"):
            for ts in request.topic_states:
                for ps in ts.partition_states:
                    sent.setdefault(broker, {})[ps.partition_index] = (ps.leader, ps.isr)
        # t-0 moved to 2 (the shutting-down broker 1 hears it too); t-1 lost follower 1.
        assert sent[2][0] == (2, [2, 0]) and sent[0][0] == (2, [2, 0])
        assert sent[1][0] == (2, [2, 0])
        assert sent[0][1] == (0, [0, 2]) and sent[2][1] == (0, [0, 2])
        assert 1 not in {b for b, parts in sent.items() if 1 in parts}
    finally:
        await shutdown(nodes)


async def test_a_leader_in_controlled_shutdown_hears_of_its_smaller_isr():
    """Kafka's OfflineReplica sends LeaderAndIsr to every other replica on a live or shutting-
    down broker: a leader whose controlled shutdown could not move its leadership (say, a
    replica only it had in the ISR) still applies the ISR without a dead follower, or its high
    watermark would stop and acks=all produces time out until it stops."""
    server, nodes = await cluster()
    try:
        await create_topic(nodes[0], "t", {0: [1, 2]})
        await settle(nodes)
        c = active(nodes)
        c.controller.ctx.shutting_down.add(1)          # a controlled shutdown in progress
        c.sender.take()
        server.expire(nodes[2].zk)                      # the follower dies meanwhile
        await settle(nodes)
        got, _ = await state(server, "t", 0)
        assert got["leader"] == 1 and got["isr"] == [1]
        told = [(broker, ps.isr) for broker, _, request, _ in c.sender.take("LeaderAndIsr")
                for ts in request.topic_states for ps in ts.partition_states]
        assert (1, [1]) in told
    finally:
        await shutdown(nodes)


async def test_a_leader_in_controlled_shutdown_is_not_replaced_by_an_unclean_election():
    """Kafka's triggerOnlinePartitionStateChange acts on offline partitions only: one led by a
    broker still in controlled shutdown is online, so a broker starting meanwhile does not make
    an out-of-sync replica its leader (acknowledged records lost) even with unclean election."""
    server, nodes = await cluster(config=Config({"unclean.leader.election.enable": True}))
    try:
        await create_topic(nodes[0], "t", {0: [1, 2]})
        await settle(nodes)
        c = active(nodes)
        c.controller.ctx.shutting_down.add(1)          # its leadership could not move
        server.expire(nodes[2].zk)
        await settle(nodes)
        await come_back(server, nodes[2])              # out of sync, starting again
        await settle(nodes)
        got, _ = await state(server, "t", 0)
        assert got["leader"] == 1 and got["isr"] == [1]
    finally:
        await shutdown(nodes)


async def test_state_writes_share_multis_and_a_racing_write_fails_alone():
    server, nodes = await cluster()
    try:
        await create_topic(nodes[0], "t", {p: [0, 1, 2] for p in range(150)})
        await settle(nodes)
        c = active(nodes).controller
        states = {tp: s for tp, s in c.ctx.states.items() if tp[0] == "t"}
        writes = {tp: zd.LeaderAndIsr(s.leader, s.leader_epoch + 1, [0, 1], c.ctx.epoch,
                                      False, s.partition_epoch) for tp, s in states.items()}
        writes[("t", 7)].partition_epoch = 5            # somebody else wrote it meanwhile
        before = server.writes
        results = await c.kzk.update_leader_and_isr(writes, c.ctx.epoch_zk_version)
        from broker.zk_data import BadVersionError
        assert isinstance(results[("t", 7)], BadVersionError)
        assert all(r.partition_epoch == 1 for tp, r in results.items() if tp != ("t", 7))
        assert server.writes - before == 149                # each write once, in two multis
        got, version = await state(server, "t", 8)
        assert got["isr"] == [0, 1] and version == 1
        got, version = await state(server, "t", 7)
        assert got["isr"] == [0, 1, 2] and version == 0
    finally:
        await shutdown(nodes)


async def test_generated_broker_ids_start_above_the_reserved_range():
    server = FakeZooKeeper()
    kzk = KafkaZk(server.client())
    await kzk.create_top_level_paths()
    assert [await kzk.generate_broker_id(1000) for _ in range(3)] == [1001, 1002, 1003]
    assert await KafkaZk(server.client()).generate_broker_id(1000) == 1004


async def test_cluster_id_is_created_once_and_then_read():
    server = FakeZooKeeper()
    first, second = KafkaZk(server.client()), KafkaZk(server.client())
    assert await first.get_or_create_cluster_id("AAAAAAAAAAAAAAAAAAAAAA") == \
        "AAAAAAAAAAAAAAAAAAAAAA"
    assert await second.get_or_create_cluster_id("BBBBBBBBBBBBBBBBBBBBBB") == \
        "AAAAAAAAAAAAAAAAAAAAAA"
    assert json.loads(server.nodes["/cluster/id"].data) == {"version": "1",
                                                            "id": "AAAAAAAAAAAAAAAAAAAAAA"}


async def test_a_taken_broker_id_is_refused_and_an_own_retry_accepted():
    from broker.kafka_zk import BrokerIdTakenError
    server = FakeZooKeeper()
    a, b = KafkaZk(server.client()), KafkaZk(server.client())
    await a.create_top_level_paths()
    info = zd.BrokerInfo(5, (zd.EndPoint("PLAINTEXT", "127.0.0.1", 9005),))
    epoch = await a.register_broker(info, 0)
    assert await a.register_broker(info, 0) == epoch        # a retry of its own
    with pytest.raises(BrokerIdTakenError):
        await b.register_broker(info, 0)


# -- reassignment --------------------------------------------------------------------------------

def topic_znode(server, topic):
    return json.loads(server.nodes[f"/brokers/topics/{topic}"].data)


async def catch_up(c, tp, isr):
    """The leader of `tp` reports `isr` (AlterPartition), as it does when followers catch up."""
    st = c.ctx.states[tp]
    error, out = await c.enqueue(c.alter_partition, st.leader, c.ctx.broker_epochs[st.leader],
                                 {tp: (st.leader_epoch, isr, False, st.partition_epoch)})
    assert error == ErrorCode.NONE and not isinstance(out[tp], ErrorCode), out


async def test_reassignment_adds_catches_up_moves_the_leader_and_removes():
    server, nodes = await cluster(4)
    try:
        await create_topic(nodes[0], "t", {0: [0, 1], 1: [1, 0]})
        await settle(nodes)
        node = active(nodes)
        c = node.controller
        node.sender.take()
        got = await c.enqueue(c.alter_partition_reassignments, {("t", 0): [2, 3]})
        assert got == {("t", 0): (ErrorCode.NONE, None)}
        znode = topic_znode(server, "t")
        assert znode["partitions"]["0"] == [2, 3, 0, 1]
        assert znode["adding_replicas"] == {"0": [2, 3]}
        assert znode["removing_replicas"] == {"0": [0, 1]}
        assert c.list_partition_reassignments() == {("t", 0): ([2, 3, 0, 1], [2, 3], [0, 1])}
        st, _ = await state(server, "t", 0)
        assert st["leader"] == 0 and st["leader_epoch"] == 1 and st["isr"] == [0, 1]
        sent = {b: r for b, api, r, _ in node.sender.take("LeaderAndIsr")}
        assert sorted(sent) == [0, 1, 2, 3]
        ps = sent[2].topic_states[0].partition_states[0]
        assert ps.is_new and ps.adding_replicas == [2, 3] and ps.removing_replicas == [0, 1]
        assert not sent[0].topic_states[0].partition_states[0].is_new
        # Deleting the topic waits for the reassignment.
        await catch_up(c, ("t", 0), [0, 1, 2])
        await settle(nodes)
        assert c.ctx.is_reassigning(("t", 0))                # 3 is not in the ISR yet
        node.sender.take()
        await catch_up(c, ("t", 0), [0, 1, 2, 3])
        await settle(nodes)
        assert not c.ctx.is_reassigning(("t", 0))
        znode = topic_znode(server, "t")
        assert znode["partitions"]["0"] == [2, 3] and znode["adding_replicas"] == {}
        assert znode["removing_replicas"] == {} and znode["partitions"]["1"] == [1, 0]
        st, _ = await state(server, "t", 0)
        assert st["leader"] == 2 and st["isr"] == [2, 3]
        stops = node.sender.take("StopReplica")
        deleted = {b for b, _, r, _ in stops
                   if r.topic_states[0].partition_states[0].delete_partition}
        assert deleted == {0, 1}
        assert c.list_partition_reassignments() == {}
    finally:
        await shutdown(nodes)


async def test_a_hand_broken_partition_is_written_back_as_found_not_dropped():
    """A new controller found partition 0's replica list emptied by hand (it cannot manage
    it); a reassignment of partition 1 then rewrote the topic znode without partition 0, whose
    acknowledged data was unreachable for good. Kafka's controller writes "0": [] back; so
    do we, and mending the list by hand brings the partition back."""
    server, nodes = await cluster(3)
    try:
        await create_topic(nodes[0], "t", {0: [0, 1], 1: [1, 0]})
        await settle(nodes)
        path = "/brokers/topics/t"
        znode = topic_znode(server, "t")
        znode["partitions"]["0"] = []
        await nodes[0].zk.set(path, json.dumps(znode).encode())
        old = active(nodes)
        server.expire(old.zk)                           # a new controller reads it
        await settle(nodes)
        node = active([n for n in nodes if n is not old])
        c = node.controller
        got = await c.enqueue(c.alter_partition_reassignments, {("t", 1): [1, 2]})
        assert got == {("t", 1): (ErrorCode.NONE, None)}
        await settle(nodes)
        znode = topic_znode(server, "t")
        assert znode["partitions"]["0"] == [] and znode["partitions"]["1"] == [1, 2, 0]
        znode["partitions"]["0"] = [0, 1]               # mended
        await node.zk.set(path, json.dumps(znode).encode())
        await settle(nodes)
        assert c.ctx.replicas(("t", 0)) == [0, 1] and "t" not in c.ctx.unreadable
    finally:
        await shutdown(nodes)


async def test_a_topic_unreadable_at_failover_is_taken_on_once_mended():
    """A topic znode a new controller could not read was left unmanaged until the next
    failover, mended or not: its leaders could not change their ISR (UNKNOWN_TOPIC_ID) and a
    restarted replica never got it back."""
    server, nodes = await cluster(3)
    try:
        await create_topic(nodes[0], "t", {0: [0, 1], 1: [1, 2]})
        await settle(nodes)
        path = "/brokers/topics/t"
        good = server.nodes[path].data
        await nodes[0].zk.set(path, b"{garbage")
        old = active(nodes)
        server.expire(old.zk)
        await settle(nodes)
        node = active([n for n in nodes if n is not old])
        c = node.controller
        assert "t" not in c.ctx.assignments
        node.sender.take()
        await node.zk.set(path, good)                   # mended
        await settle(nodes)
        assert c.ctx.assignments["t"] == {0: [0, 1], 1: [1, 2]}
        # As a failover would: broker 0 (the old controller, expired) leaves the ISR, and
        # partition 0, which it led, gets a new leader; every replica hears of its partitions,
        # not as new ones.
        st, _ = await state(server, "t", 0)
        assert st["leader"] == 1 and st["isr"] == [1]
        sent = node.sender.take("LeaderAndIsr")
        assert {b for b, _, _, _ in sent} == {1, 2}
        assert not any(ps.is_new for _, _, r, _ in sent for t in r.topic_states
                       for ps in t.partition_states)
    finally:
        await shutdown(nodes)


async def test_reassignment_refusals_and_cancellation():
    server, nodes = await cluster(3)
    try:
        await create_topic(nodes[0], "t", {0: [0, 1]})
        await settle(nodes)
        c = active(nodes).controller
        got = await c.enqueue(c.alter_partition_reassignments, {
            ("t", 0): [], ("t", 1): [0], ("u", 0): [0],
        })
        assert got[("t", 0)] == (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 "Empty replica list specified in partition reassignment.")
        assert got[("t", 1)][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert got[("u", 0)][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        got = await c.enqueue(c.alter_partition_reassignments, {("t", 0): [0, 0]})
        assert got[("t", 0)] == (ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Duplicate replica ids "
                                 "in partition reassignment replica list: [0, 0]")
        got = await c.enqueue(c.alter_partition_reassignments, {("t", 0): [0, 7]})
        assert got[("t", 0)] == (ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Replica assignment has "
                                 "brokers that are not alive. Replica list: [7], live broker "
                                 "list: [0, 1, 2]")
        got = await c.enqueue(c.alter_partition_reassignments, {("t", 0): None})
        assert got[("t", 0)] == (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)
        assert (await c.enqueue(c.alter_partition_reassignments, {("t", 0): [1, 2]})) == \
            {("t", 0): (ErrorCode.NONE, None)}
        active(nodes).sender.take()
        got = await c.enqueue(c.alter_partition_reassignments, {("t", 0): None})
        assert got == {("t", 0): (ErrorCode.NONE, None)}
        # Back to the origin replicas (Kafka keeps RS minus the adding ones, in RS's order).
        znode = topic_znode(server, "t")
        assert znode["partitions"]["0"] == [1, 0] and znode["adding_replicas"] == {}
        stops = active(nodes).sender.take("StopReplica")
        assert [b for b, *_ in stops] == [2]
    finally:
        await shutdown(nodes)


async def test_a_new_controller_resumes_a_reassignment():
    server, nodes = await cluster(3)
    try:
        await create_topic(nodes[0], "t", {0: [0, 1]})
        await settle(nodes)
        old = active(nodes)
        await old.controller.enqueue(old.controller.alter_partition_reassignments,
                                     {("t", 0): [1, 2]})
        server.expire(old.zk)                       # the controller's broker dies
        await settle(nodes)
        new = active([n for n in nodes if n is not old])
        c = new.controller
        assert c.list_partition_reassignments() == {("t", 0): ([1, 2, 0], [2], [0])}
        await catch_up(c, ("t", 0), [1, 2])         # 0 died: 1 leads, 2 caught up
        await settle(nodes)
        assert topic_znode(server, "t")["partitions"]["0"] == [1, 2]
        assert not c.ctx.is_reassigning(("t", 0))
    finally:
        await shutdown(nodes)


async def test_the_legacy_reassign_partitions_znode_is_served_and_emptied():
    server, nodes = await cluster(3)
    try:
        await create_topic(nodes[0], "t", {0: [0, 1], 1: [1, 2]})
        await settle(nodes)
        await nodes[0].zk.create(zd.REASSIGN_PARTITIONS, json.dumps({"version": 1, "partitions": [
            {"topic": "t", "partition": 0, "replicas": [2, 1]},
            {"topic": "t", "partition": 1, "replicas": [2, 2]}]}).encode())
        await settle(nodes)
        c = active(nodes).controller
        assert c.list_partition_reassignments() == {("t", 0): ([2, 1, 0], [2], [0])}
        left = json.loads(server.nodes[zd.REASSIGN_PARTITIONS].data)["partitions"]
        assert left == [{"topic": "t", "partition": 0, "replicas": [2, 1]}]   # t-1 refused
        await catch_up(c, ("t", 0), [0, 1, 2])
        await settle(nodes)
        assert zd.REASSIGN_PARTITIONS not in server.nodes
        assert topic_znode(server, "t")["partitions"]["0"] == [2, 1]
    finally:
        await shutdown(nodes)


async def test_a_legacy_entry_that_changes_nothing_or_only_the_order_is_removed():
    server, nodes = await cluster(3)
    try:
        await create_topic(nodes[0], "t", {0: [0, 1], 1: [1, 2]})
        await settle(nodes)
        await nodes[0].zk.create(zd.REASSIGN_PARTITIONS, json.dumps({"version": 1, "partitions": [
            {"topic": "t", "partition": 0, "replicas": [0, 1]},     # unchanged
            {"topic": "t", "partition": 1, "replicas": [2, 1]}]}).encode())   # reordered
        await settle(nodes)
        assert zd.REASSIGN_PARTITIONS not in server.nodes
        assert topic_znode(server, "t")["partitions"] == {"0": [0, 1], "1": [2, 1]}
    finally:
        await shutdown(nodes)


async def test_a_legacy_entry_naming_a_dead_broker_starts_and_completes_when_it_returns():
    # Kafka's ZK path does not check liveness (the API path does): the move waits for broker 2.
    server, nodes = await cluster(3)
    try:
        await create_topic(nodes[0], "t", {0: [0, 1]})
        await settle(nodes)
        server.expire(nodes[2].zk)
        await settle(nodes)
        await nodes[0].zk.create(zd.REASSIGN_PARTITIONS, json.dumps({"version": 1, "partitions": [
            {"topic": "t", "partition": 0, "replicas": [1, 2]}]}).encode())
        await settle(nodes)
        c = active(nodes).controller
        assert c.list_partition_reassignments() == {("t", 0): ([1, 2, 0], [2], [0])}
        await come_back(server, nodes[2])
        await settle(nodes)
        c = active(nodes).controller
        await catch_up(c, ("t", 0), [0, 1, 2])
        await settle(nodes)
        assert zd.REASSIGN_PARTITIONS not in server.nodes
        assert topic_znode(server, "t")["partitions"]["0"] == [1, 2]
    finally:
        await shutdown(nodes)


async def test_a_rewrite_of_the_legacy_znode_does_not_restart_its_entries():
    # Kafka acts on the znode's creation only: each completed entry rewrites it, and the
    # entries still in flight must not get a new leader epoch each time.
    server, nodes = await cluster(3)
    try:
        await create_topic(nodes[0], "t", {0: [0, 1], 1: [0, 1]})
        await settle(nodes)
        await nodes[0].zk.create(zd.REASSIGN_PARTITIONS, json.dumps({"version": 1, "partitions": [
            {"topic": "t", "partition": 0, "replicas": [0, 1, 2]},
            {"topic": "t", "partition": 1, "replicas": [0, 1, 2]}]}).encode())
        await settle(nodes)
        c = active(nodes).controller
        before = (await state(server, "t", 1))[0]["leader_epoch"]
        await catch_up(c, ("t", 0), [0, 1, 2])
        await settle(nodes)
        assert not c.ctx.is_reassigning(("t", 0))
        assert json.loads(server.nodes[zd.REASSIGN_PARTITIONS].data)["partitions"] == [
            {"topic": "t", "partition": 1, "replicas": [0, 1, 2]}]
        assert (await state(server, "t", 1))[0]["leader_epoch"] == before
        await catch_up(c, ("t", 1), [0, 1, 2])
        await settle(nodes)
        assert zd.REASSIGN_PARTITIONS not in server.nodes
        # The watch is armed again: a new znode is served.
        await nodes[0].zk.create(zd.REASSIGN_PARTITIONS, json.dumps({"version": 1, "partitions": [
            {"topic": "t", "partition": 0, "replicas": [1, 2]}]}).encode())
        await settle(nodes)
        assert topic_znode(server, "t")["partitions"]["0"] == [1, 2]
        assert zd.REASSIGN_PARTITIONS not in server.nodes
    finally:
        await shutdown(nodes)


async def test_a_reassignment_to_a_broker_in_controlled_shutdown_is_refused():
    server, nodes = await cluster(3)
    try:
        await create_topic(nodes[0], "t", {0: [0, 1]})
        await settle(nodes)
        c = active(nodes).controller
        err, _ = await c.enqueue(c.controlled_shutdown, 2, nodes[2].epoch)
        assert err == ErrorCode.NONE
        got = await c.enqueue(c.alter_partition_reassignments, {("t", 0): [1, 2]})
        assert got[("t", 0)][0] == ErrorCode.INVALID_REPLICA_ASSIGNMENT
        assert not c.ctx.is_reassigning(("t", 0))
    finally:
        await shutdown(nodes)


async def test_an_isr_change_notification_completes_a_reassignment():
    # A leader from before IBP 2.7 writes the ISR to ZooKeeper and notifies.
    server, nodes = await cluster(3)
    try:
        await create_topic(nodes[0], "t", {0: [0, 1]})
        await settle(nodes)
        c = active(nodes).controller
        await c.enqueue(c.alter_partition_reassignments, {("t", 0): [1, 2]})
        got, version = await state(server, "t", 0)
        got["isr"] = [0, 1, 2]
        await nodes[0].zk.set(zd.partition_state_path("t", 0), json.dumps(got).encode(), version)
        await nodes[0].zk.create(zd.ISR_CHANGE_NOTIFICATION + "/isr_change_0000000000",
                                 json.dumps({"version": 1, "partitions": [
                                     {"topic": "t", "partition": 0}]}).encode())
        await settle(nodes)
        assert not c.ctx.is_reassigning(("t", 0))
        assert topic_znode(server, "t")["partitions"]["0"] == [1, 2]
    finally:
        await shutdown(nodes)


async def test_a_failed_log_dir_moves_leadership_and_marks_the_replica_offline():
    from protocol.messages.leader_and_isr import LeaderAndIsrResponse as R
    server, nodes = await cluster(3)
    try:
        await create_topic(nodes[0], "t", {0: [1, 2, 0], 1: [2, 0, 1]})
        await settle(nodes)
        node = active(nodes)
        c = node.controller
        node.sender.take()
        await nodes[1].kzk.propagate_log_dir_event(1)            # broker 1 lost a dir
        await settle(nodes)
        assert server.nodes.keys() & {n for n in server.nodes
                                      if n.startswith("/log_dir_event_notification/")} == set()
        sent = [s for s in node.sender.take("LeaderAndIsr") if s[0] == 1]
        assert len(sent) == 1
        request, callback = sent[0][2], sent[0][3]
        assert sorted(p.partition_index for t in request.topic_states
                      for p in t.partition_states) == [0, 1]
        topic_id = request.topic_states[0].topic_id
        callback(R(error_code=0, topics=[R.LeaderAndIsrTopicError(
            topic_id=topic_id, partition_errors=[
                R.LeaderAndIsrPartitionError(partition_index=0, error_code=56),
                R.LeaderAndIsrPartitionError(partition_index=1, error_code=0)])]))
        await settle(nodes)
        st, _ = await state(server, "t", 0)
        assert st["leader"] == 2 and 1 not in st["isr"]
        assert c.ctx.offline_replicas == {("t", 0): {1}}
        um = [r for b, _, r, _ in node.sender.take("UpdateMetadata")]
        offline = {(t.topic_name, p.partition_index): p.offline_replicas
                   for r in um for t in r.topic_states for p in t.partition_states}
        assert offline[("t", 0)] == [1]
        # Broker 1 comes back (a new disk): its replicas are online again.
        server.expire(nodes[1].zk)
        await settle(nodes)
        await come_back(server, nodes[1])
        await settle(nodes)
        assert active(nodes).controller.ctx.offline_replicas == {}
    finally:
        await shutdown(nodes)


async def test_a_resigned_controllers_write_is_fenced_whatever_the_version_it_holds():
    """A controller's context reset by its resignation holds no epoch version (-1, ZooKeeper's
    match-any): a write made with it is refused (Kafka's reset sets 0, which no election
    leaves). An event in flight at the session expiry deleted /admin/delete_topics/t for the
    next controller this way."""
    server, nodes = await cluster()
    try:
        await create_topic(nodes[1], "t", {0: [0, 1, 2]})
        await settle(nodes)
        old = nodes[0].controller
        old._resign()                      # as at a session expiry, with an event in flight
        assert old.ctx.epoch_zk_version == -1
        await nodes[1].kzk.mark_topic_for_deletion("t")
        with pytest.raises(ControllerMovedError):
            await nodes[0].kzk.remove_deletion_mark("t", old.ctx.epoch_zk_version)
        assert zd.delete_topic_path("t") in server.nodes
    finally:
        await shutdown(nodes)


async def test_a_failover_that_fails_gives_up_controller_and_the_brokers_elect_again():
    """Kafka's elect(): an error in onControllerFailover triggers a controller move (resign,
    delete /controller fenced by its epoch), so no broker holds /controller with half a view
    (dead brokers then stayed in ISRs for good)."""
    server = FakeZooKeeper()
    nodes = [Node(server, i) for i in range(3)]
    await nodes[0].kzk.create_top_level_paths()
    for node in nodes:
        await node.register()
    await create_topic(nodes[1], "t", {0: [0, 1, 2]})
    real = nodes[0].kzk.get_all_topics
    calls = []

    async def failing_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("injected")
        return await real(*args, **kwargs)
    nodes[0].kzk.get_all_topics = failing_once
    try:
        for node in nodes:
            await node.controller.startup()
        await settle(nodes)
        await settle(nodes)
        c = active(nodes).controller
        assert c.ctx.epoch >= 2                      # elected again after the move
        assert ("t", 0) in c.ctx.states               # with the whole view this time
        assert sorted(c.ctx.live_brokers) == [0, 1, 2]
    finally:
        await shutdown(nodes)


async def test_a_new_controller_with_deletion_disabled_removes_marks_and_deletes_nothing():
    cfg = Config({"delete.topic.enable": False})
    server, nodes = await cluster(config=cfg)
    try:
        await create_topic(nodes[0], "t", {0: [1, 2, 0]})
        await settle(nodes)
        c = active(nodes)
        # A mark left from before deletion was disabled (or written by a tool), found by the
        # next controller: Kafka's TopicDeletionManager.init removes it and deletes nothing.
        await c.controller.shutdown()
        await nodes[1].zk.create("/admin/delete_topics/t", b"")
        server.expire(c.zk)
        await settle([n for n in nodes if n is not c])
        c2 = active([n for n in nodes if n is not c])
        assert not c2.controller.ctx.topics_to_delete
        assert not [s for s in c2.sender.sent if s[1] == "StopReplica"]
        assert not await c2.kzk.is_marked_for_deletion("t")
    finally:
        await shutdown(nodes)


async def test_a_new_controller_completes_a_deletion_whose_topic_is_gone():
    server, nodes = await cluster()
    try:
        c = active(nodes)
        await c.controller.shutdown()
        await nodes[1].zk.create("/admin/delete_topics/gone", b"")
        server.expire(c.zk)
        rest = [n for n in nodes if n is not c]
        await settle(rest)
        c2 = active(rest)
        assert not await c2.kzk.is_marked_for_deletion("gone")
    finally:
        await shutdown(nodes)


async def test_a_restarted_broker_is_no_longer_offline_in_the_other_brokers_metadata():
    server, nodes = await cluster()
    try:
        await create_topic(nodes[0], "t", {0: [1, 2, 0]})
        await settle(nodes)
        c = active(nodes)
        victim = nodes[2] if c is not nodes[2] else nodes[1]
        server.expire(victim.zk)
        await settle(nodes)
        c.sender.take()
        await come_back(server, victim)
        await settle(nodes)
        ums = [(b, r) for b, api, r, _ in c.sender.take("UpdateMetadata")]
        others = [r for b, r in ums if b != victim.id]
        told = [p for r in others for ts in r.topic_states if ts.topic_name == "t"
                for p in ts.partition_states]
        assert told and all(p.offline_replicas == [] for p in told)
    finally:
        await shutdown(nodes)


async def test_a_restarted_reassignment_target_of_a_topic_queued_for_deletion_fetches():
    server, nodes = await cluster(4)
    try:
        await create_topic(nodes[0], "t", {0: [0, 1]})
        await settle(nodes)
        node = active(nodes)
        c = node.controller
        target = [n for n in nodes if n is not node and n.id not in (0, 1)][0]
        got = await c.enqueue(c.alter_partition_reassignments, {("t", 0): [0, target.id]})
        assert got[("t", 0)][0] == ErrorCode.NONE
        await nodes[0].kzk.mark_topic_for_deletion("t")
        await settle(nodes)
        assert "t" in c.ctx.topics_to_delete and "t" not in c.ctx.deletion_started
        server.expire(target.zk)
        await settle(nodes)
        node.sender.take()
        await come_back(server, target)
        await settle(nodes)
        lai = [(b, r) for b, api, r, _ in node.sender.take("LeaderAndIsr") if b == target.id]
        assert lai, "restarted reassignment target never told to fetch: reassignment and deletion stuck"
    finally:
        await shutdown(nodes)


async def test_only_a_delete_true_answer_counts_towards_a_deletion():
    """Kafka's isPartitionDeleted: a controlled shutdown's StopReplica(delete=false) answered
    while the topic is being deleted does not complete the deletion (the broker could then stop
    before deleting, its log left behind)."""
    server, nodes = await cluster()
    try:
        await create_topic(nodes[0], "t", {0: [0, 1]})
        await settle(nodes)
        await nodes[0].kzk.mark_topic_for_deletion("t")
        await settle(nodes)
        c = active(nodes).controller
        assert c.ctx.deletion_started["t"] == {(0, ("t", 0)), (1, ("t", 0))}
        answer = StopReplicaResponse(error_code=0, partition_errors=[
            StopReplicaResponse.StopReplicaPartitionError(topic_name="t", partition_index=0,
                                                          error_code=0)])
        await c.enqueue(c.stop_replica_response, 0, answer, set())            # delete=false
        assert (0, ("t", 0)) in c.ctx.deletion_started["t"]
        await c.enqueue(c.stop_replica_response, 0, answer, {("t", 0)})       # delete=true
        assert c.ctx.deletion_started["t"] == {(1, ("t", 0))}
    finally:
        await shutdown(nodes)


async def test_partitions_added_to_a_topic_being_deleted_are_taken_out_of_its_znode():
    """Kafka's restorePartitionReplicaAssignment: the topic znode goes back to the partitions
    the deletion waits for (a later controller would wait for the added ones too)."""
    server, nodes = await cluster()
    try:
        await create_topic(nodes[0], "t", {0: [0, 2]})
        await settle(nodes)
        server.expire(nodes[2].zk)                       # the deletion waits for broker 2
        await settle(nodes[:2])
        await nodes[0].kzk.mark_topic_for_deletion("t")
        await settle(nodes[:2])
        assignment, version = await nodes[0].kzk.get_topic("t")
        assignment.partitions[1] = [0, 1]
        await nodes[0].kzk.set_topic("t", assignment, version)
        await settle(nodes[:2])
        again, _ = await nodes[0].kzk.get_topic("t")
        assert sorted(again.partitions) == [0]
    finally:
        await shutdown(nodes)


async def test_replicas_on_a_broker_shutting_down_are_offline_in_update_metadata():
    """Kafka's isReplicaOnline leaves out brokers in controlled shutdown."""
    server, nodes = await cluster()
    try:
        await create_topic(nodes[0], "t", {0: [2, 1, 0]})
        await settle(nodes)
        node = active(nodes)
        c = node.controller
        node.sender.take()
        await c.enqueue(c.controlled_shutdown, 2, nodes[2].epoch)
        told = [p for _, _, r, _ in node.sender.take("UpdateMetadata")
                for ts in r.topic_states for p in ts.partition_states]
        assert told and all(2 in p.offline_replicas for p in told)
    finally:
        await shutdown(nodes)
