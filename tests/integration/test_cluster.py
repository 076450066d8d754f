"""A three-broker ZooKeeper-mode cluster as operators run it: a real ZooKeeper, brokers as
processes (the kafka_cluster fixture, broker/testing/cluster.py), real clients.

What a user of Kafka's ZooKeeper mode would check: the znodes Kafka writes, topics created
from any broker with Kafka's placement, produce and consume through any bootstrap, the
controller's failover after kill -9, leaderships coming back after a restart, a group's
coordinator moving with its committed offsets, and a taken broker.id refused."""
import asyncio
import json
import pathlib
import re
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from broker.client.connection import BrokerConnection
from broker.controller.placement import BrokerMetadata, assign_replicas_to_brokers
from protocol.messages.metadata import MetadataRequest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def admin(bootstrap):
    return AdminClient({"bootstrap.servers": bootstrap})


def create(bootstrap, name, partitions, replication, config=None):
    client = admin(bootstrap)                # kept alive until the result is in
    futures = client.create_topics(
        [NewTopic(name, partitions, replication, config=config or {})], operation_timeout=30)
    futures[name].result(60)


def produce(bootstrap, topic, values, **config):
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, **config})
    acked, errors = [], []

    def on_delivery(err, msg):
        if err is None:
            acked.append((msg.partition(), msg.offset(), msg.value()))
        else:
            errors.append(err)
    for value in values:
        producer.produce(topic, value, on_delivery=on_delivery)
    assert producer.flush(60) == 0
    assert not errors, errors[:3]
    return acked


def poll(consumer, count, timeout=60, commit=False):
    """(partition, offset, value) of up to `count` records; the consumer is closed after."""
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                out.append((msg.partition(), msg.offset(), msg.value()))
        if commit:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return out


def group_consumer(bootstrap, topic, group, **config):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, **config})
    consumer.subscribe([topic])
    return consumer


def consume_all(bootstrap, topic, count, group="reader", timeout=60):
    return poll(group_consumer(bootstrap, topic, group), count, timeout)


def test_brokers_register_and_elect_one_controller(kafka_cluster):
    cluster = kafka_cluster
    assert cluster.live_brokers() == {0, 1, 2}
    controller = cluster.controller()
    assert controller in (0, 1, 2)
    registration = json.loads(cluster._read("/brokers/ids/1"))
    assert registration["version"] == 5
    assert registration["endpoints"] == [f"PLAINTEXT://127.0.0.1:{cluster.brokers[1].port}"]
    assert registration["host"] == "127.0.0.1" and isinstance(registration["timestamp"], str)
    cluster_id = json.loads(cluster._read("/cluster/id"))
    assert cluster_id["version"] == "1"
    assert cluster._read("/controller_epoch") == b"1"
    # Every broker's log dir names the cluster, and every broker tells clients the same.
    for node in cluster.brokers.values():
        meta = (node.log_dir / "meta.properties").read_text()
        assert f"cluster.id={cluster_id['id']}" in meta
        md = admin(node.bootstrap).list_topics(timeout=20)
        assert set(md.brokers) == {0, 1, 2}
        assert md.controller_id == controller
        assert md.cluster_id == cluster_id["id"]


def test_topics_from_any_bootstrap_with_kafkas_placement(kafka_cluster):
    cluster = kafka_cluster
    controller = cluster.controller()
    other = next(b for b in (0, 1, 2) if b != controller)
    # confluent-kafka's AdminClient sends CreateTopics to the controller it learns from
    # Metadata; kafka-python's too. Bootstrapping from a broker that is not the controller
    # must work all the same.
    create(cluster.bootstrap(other), "placed", 6, 3)
    znode = json.loads(cluster._read("/brokers/topics/placed"))
    assignment = {int(p): r for p, r in znode["partitions"].items()}
    brokers = [BrokerMetadata(i) for i in range(3)]
    # Kafka draws the start index and the shift at random: the placement is one of its
    # nine outcomes.

    class Draws:
        def __init__(self, start, shift):
            self.values = [start, shift]

        def randrange(self, n):
            return self.values.pop(0)
    outcomes = [assign_replicas_to_brokers(brokers, 6, 3, rng=Draws(start, shift))
                for start in range(3) for shift in range(3)]
    assert assignment in outcomes
    assert znode["version"] == 3 and len(znode["topic_id"]) == 22
    from kafka.admin import KafkaAdminClient, NewTopic as KPNewTopic
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(other), request_timeout_ms=30000)
    try:
        client.create_topics([KPNewTopic("from-kafka-python", 3, 2)])
    finally:
        client.close()
    cluster.wait_until(lambda: all(cluster.leader("from-kafka-python", p) >= 0
                                   for p in range(3)), 30, "no leaders")
    for p in range(3):
        state = cluster.partition_state("from-kafka-python", p)
        assert len(state["isr"]) == 2 and state["leader_epoch"] == 0
    # CreatePartitions continues Kafka's placement; every broker's metadata shows it.
    client = admin(cluster.bootstrap(other))
    futures = client.create_partitions([NewPartitions("placed", 8)])
    futures["placed"].result(60)
    # (The answer comes once the controller's broker knows; the others learn a moment later,
    # as with Kafka.)
    for node in cluster.brokers.values():
        client = admin(node.bootstrap)
        cluster.wait_until(lambda: len(client.list_topics("placed", timeout=20).topics[
            "placed"].partitions) == 8, 10, f"broker {node.id} does not know 8 partitions")


def test_produce_and_consume_through_any_bootstrap(kafka_cluster):
    cluster = kafka_cluster
    create(cluster.bootstrap(0), "orders", 3, 3, {"min.insync.replicas": "2"})
    values = [f"v{i}".encode() for i in range(3000)]
    acked = produce(cluster.bootstrap(1), "orders", values)
    assert len(acked) == 3000
    got = consume_all(cluster.bootstrap(2), "orders", 3000)
    assert sorted(got) == sorted(acked)
    # Every replica has every record (the followers copied the leader's log), and the ISR
    # is the full replica set.
    for p in range(3):
        assert sorted(cluster.isr("orders", p)) == [0, 1, 2]
    for node in cluster.brokers.values():
        consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": f"check-{node.id}"})
        for p in range(3):
            low, high = consumer.get_watermark_offsets(TopicPartition("orders", p), timeout=20)
            assert high == sum(1 for q, _, _ in acked if q == p)
        consumer.close()


def test_killed_controller_is_replaced_and_topics_can_still_be_created(kafka_cluster):
    cluster = kafka_cluster
    create(cluster.bootstrap(0), "before", 3, 3)
    old = cluster.controller()
    started = time.monotonic()
    cluster.kill(old)
    cluster.wait_until(lambda: cluster.controller() not in (None, old), 30,
                       "no new controller")
    took = time.monotonic() - started
    assert took < 6.0 + 2.0 + 2.0, f"new controller after {took:.1f} s"
    survivors = [b for b in (0, 1, 2) if b != old]
    for p in range(3):
        leader = cluster.wait_for_leader("before", p, not_in={old}, timeout=20)
        assert leader in survivors
        # The new controller takes the dead broker out of every ISR during its failover (a
        # partition it did not lead may already show its old leader before that).
        cluster.wait_until(lambda: old not in cluster.isr("before", p), 10,
                           f"broker {old} still in the ISR of before-{p}")
    create(cluster.bootstrap(survivors[0]), "after", 2, 2)
    acked = produce(cluster.bootstrap(survivors[1]), "after", [b"x"] * 100)
    assert len(acked) == 100


# A check every 2 s: the controller's first one comes 5 s after its election and the next
# after leader.imbalance.check.interval.seconds (300 s by default), so with the default the
# leaderships came back only if the restart was over within those 5 s.
@pytest.mark.kafka_cluster_config({"leader.imbalance.check.interval.seconds": 2})
def test_restarted_broker_catches_up_and_gets_its_leaderships_back(kafka_cluster):
    cluster = kafka_cluster
    create(cluster.bootstrap(0), "back", 3, 3)
    preferred = {p: json.loads(cluster._read("/brokers/topics/back"))["partitions"][str(p)][0]
                 for p in range(3)}
    victim = 2 if cluster.controller() != 2 else 1
    cluster.stop(victim)
    acked = produce(cluster.bootstrap(0 if victim else 1), "back",
                    [f"r{i}".encode() for i in range(500)])
    for p in range(3):
        assert cluster.leader("back", p) != victim
    cluster.start(victim)
    # It fetches what it missed, rejoins every ISR, and the controller's preferred-leader
    # check (leader.imbalance.check.interval.seconds) hands its leaderships back.
    for p in range(3):
        cluster.wait_for_isr("back", p, [0, 1, 2], timeout=60)
    cluster.wait_until(lambda: all(cluster.leader("back", p) == preferred[p] for p in range(3)),
                       60, "preferred leaders did not come back")
    got = consume_all(cluster.bootstrap(victim), "back", 500)
    assert sorted(got) == sorted(acked)
    # The rest of a rolling restart, the controller last: the leaderships come back again,
    # with no election asked for.
    others = sorted(b for b in cluster.brokers if b != victim and b != cluster.controller())
    for broker in others + [cluster.controller()]:
        cluster.stop(broker)
        acked += produce(cluster.bootstrap(victim), "back",
                         [f"{broker}-{i}".encode() for i in range(100)])
        cluster.start(broker)
        for p in range(3):
            cluster.wait_for_isr("back", p, [0, 1, 2], timeout=60)
    cluster.wait_until(lambda: all(cluster.leader("back", p) == preferred[p] for p in range(3)),
                       60, "preferred leaders did not come back after the rolling restart")
    got = consume_all(cluster.bootstrap(victim), "back", len(acked), group="reader-after")
    assert sorted(got) == sorted(acked)


def test_a_broker_stopped_by_sigterm_closes_connections_once_every_broker_names_new_leaders(
        kafka_cluster):
    """What a client does when its leader's connection closes in a controlled shutdown: it
    asks another broker for metadata at once. That broker must already name the new leaders;
    librdkafka, told the old leader, asks again only a second later (the benchmark's SIGTERM
    ack gap was 2.00 s in about one run in five). The controller answers ControlledShutdown
    before the new leaders have applied its UpdateMetadata (each one's LeaderAndIsr first), so
    the stopping broker waits for the others to name them before it closes connections.

    One of the new leaders is paused (SIGSTOP) for a second across the shutdown, so it is
    deterministic that it applies the change late: the stopping broker must keep its clients'
    connections open until that broker is back and names the new leaders."""
    cluster = kafka_cluster
    controller = cluster.controller()
    victim = 2 if controller != 2 else 1
    others = sorted(b for b in cluster.brokers if b != victim)
    slow = next(b for b in others if b != controller)
    partitions = 20
    topic = "handover"
    client = admin(cluster.bootstrap(others[0]))
    client.create_topics([NewTopic(topic, partitions, replica_assignment=[
        [victim] + (others if p % 2 else others[::-1]) for p in range(partitions)])])[topic] \
        .result(60)

    async def leaders_named_by(conn) -> dict:
        response = await conn.send(MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 1)
        return {p.partition_index: p.leader_id for t in response.topics for p in t.partitions}

    async def scenario():
        loop = asyncio.get_running_loop()
        conns = [await BrokerConnection("127.0.0.1", cluster.brokers[b].port, node_id=b)
                 .connect() for b in others]
        try:
            # Every broker names the victim leader of every partition, and every ISR is whole.
            deadline = time.monotonic() + 60
            while True:
                named = [await leaders_named_by(c) for c in conns]
                if all(n == {p: victim for p in range(partitions)} for n in named) and all(
                        len(cluster.isr(topic, p)) == 3 for p in range(partitions)):
                    break
                assert time.monotonic() < deadline, named
                await asyncio.sleep(0.2)
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", cluster.brokers[victim].port)
            cluster.pause(slow)
            resume_at = loop.time() + 1.0
            resuming = loop.call_at(resume_at, cluster.resume, slow)
            try:
                stopping = loop.run_in_executor(None, cluster.stop, victim)
                assert await asyncio.wait_for(reader.read(), 30) == b""    # the victim closed
                closed_at = loop.time()
            finally:
                if not resuming.cancelled() and loop.time() < resume_at:
                    resuming.cancel()
                    cluster.resume(slow)
            named = await asyncio.gather(*(leaders_named_by(c) for c in conns))
            writer.close()
            return await stopping, closed_at - resume_at, named
        finally:
            for conn in conns:
                await conn.close()
    code, closed_after_resume, named = asyncio.run(scenario())
    assert code == 0
    assert closed_after_resume > 0, \
        f"broker {victim} closed its connections {-closed_after_resume:.2f} s before broker " \
        f"{slow}, paused, could have named the new leaders"
    still_victim = {b: sorted(p for p, leader in n.items() if leader == victim)
                    for b, n in zip(others, named)}
    assert still_victim == {b: [] for b in others}


def test_group_coordinator_moves_and_offsets_survive(kafka_cluster):
    cluster = kafka_cluster
    create(cluster.bootstrap(0), "work", 2, 3)
    produce(cluster.bootstrap(0), "work", [f"a{i}".encode() for i in range(200)])
    seen = poll(group_consumer(cluster.bootstrap_servers, "work", "movers"), 200, commit=True)
    assert len(seen) == 200
    # The group's coordinator: the leader of its __consumer_offsets partition.
    from coordinator.partitioning import partition_for
    p = partition_for("movers", 50)
    coordinator = cluster.leader("__consumer_offsets", p)
    assert coordinator >= 0
    cluster.stop(coordinator)
    assert cluster.wait_for_leader("__consumer_offsets", p, not_in={coordinator}) != coordinator
    produce(cluster.bootstrap_servers, "work", [f"b{i}".encode() for i in range(50)])
    later = poll(group_consumer(cluster.bootstrap_servers, "work", "movers"), 50)
    # Only the new records: the committed offsets were replicated and came along.
    assert sorted(v for _, _, v in later) == sorted(f"b{i}".encode() for i in range(50))


def test_a_group_commits_offsets_of_partitions_on_other_brokers(kafka_cluster):
    # RF 1 over three brokers: most partitions have no replica on the group's coordinator.
    # Kafka checks the cluster's metadata, not the coordinator's own replicas.
    cluster = kafka_cluster
    create(cluster.bootstrap(0), "spread", 6, 1)
    offsets = [TopicPartition("spread", p, 10 + p) for p in range(6)]
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "spreaders",
                         "enable.auto.commit": False})
    try:
        results = consumer.commit(offsets=offsets, asynchronous=False)
        assert [(t.partition, t.error) for t in results] == [(p, None) for p in range(6)]
        committed = consumer.committed([TopicPartition("spread", p) for p in range(6)], timeout=30)
        assert [(t.partition, t.offset) for t in committed] == [(p, 10 + p) for p in range(6)]
    finally:
        consumer.close()


def test_delete_records_answers_once_every_live_replica_followed(kafka_cluster):
    # Kafka's DelayedDeleteRecords: with a follower stalled (SIGSTOP, still registered), the
    # request times out rather than claim records gone that the follower still holds and could
    # bring back as the next leader; once it runs again, the deletion completes.
    cluster = kafka_cluster
    create(cluster.bootstrap(0), "trimmed", 1, 3)
    produce(cluster.bootstrap_servers, "trimmed", [b"r%d" % i for i in range(100)])
    leader = cluster.wait_for_leader("trimmed", 0)
    stalled = next(b for b in (0, 1, 2) if b != leader)
    client = admin(cluster.bootstrap(leader))
    cluster.pause(stalled)
    try:
        future = client.delete_records([TopicPartition("trimmed", 0, 40)], request_timeout=20,
                                       operation_timeout=2)[TopicPartition("trimmed", 0, 40)]
        with pytest.raises(KafkaException) as refused:
            future.result(30)
        assert refused.value.args[0].code() == KafkaError.REQUEST_TIMED_OUT
    finally:
        cluster.resume(stalled)
    future = client.delete_records([TopicPartition("trimmed", 0, 60)], operation_timeout=20)[
        TopicPartition("trimmed", 0, 60)]
    assert future.result(30).low_watermark == 60


def test_a_taken_broker_id_refuses_to_start(kafka_cluster, tmp_path):
    cluster = kafka_cluster
    props = tmp_path / "dup.properties"
    props.write_text(f"broker.id=1\nlisteners=PLAINTEXT://127.0.0.1:0\nlog.dirs={tmp_path}/dup\n"
                     f"zookeeper.connect={cluster.zookeeper.connect_string}\n")
    result = subprocess.run([sys.executable, "-m", "broker", str(props)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 1
    assert "another live broker is registered with broker.id 1" in result.stderr
    assert cluster.live_brokers() == {0, 1, 2}


def test_no_zookeeper_refuses_to_start_in_time(tmp_path):
    from broker.testing.zookeeper import free_port
    props = tmp_path / "nozk.properties"
    props.write_text(f"broker.id=0\nlisteners=PLAINTEXT://127.0.0.1:0\nlog.dirs={tmp_path}/d\n"
                     f"zookeeper.connect=127.0.0.1:{free_port()}\n"
                     f"zookeeper.connection.timeout.ms=2000\n")
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "broker", str(props)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 1
    assert "\nkbroker: Timed out waiting for connection to ZooKeeper at 127.0.0.1:" in result.stderr
    assert time.monotonic() - started < 20


def test_kafka_configs_alters_one_broker_or_every_broker(kafka_cluster):
    cluster = kafka_cluster
    tool = [sys.executable, "-m", "broker.tools.configs", "--bootstrap-server",
            cluster.bootstrap(0)]

    def configs(*args):
        result = subprocess.run(tool + list(args), capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout

    configs("--entity-type", "brokers", "--entity-default", "--alter", "--add-config",
            "log.retention.ms=3600000")
    configs("--entity-type", "brokers", "--entity-name", "1", "--alter", "--add-config",
            "log.cleaner.threads=2")

    def described(broker_id):
        return configs("--entity-type", "brokers", "--entity-name", str(broker_id),
                       "--describe", "--all")
    deadline = time.monotonic() + 30
    while True:
        outputs = {b: described(b) for b in (0, 1, 2)}
        if all("log.retention.ms=3600000" in out for out in outputs.values()):
            break
        assert time.monotonic() < deadline, outputs
        time.sleep(0.5)
    assert "log.cleaner.threads=2" in outputs[1]
    assert "log.cleaner.threads=2" not in outputs[0] and "log.cleaner.threads=2" not in outputs[2]
    change = json.loads(cluster._read("/config/brokers/<default>"))
    assert change == {"version": 1, "config": {"log.retention.ms": "3600000"}}


@pytest.mark.kafka_cluster_config(
    replica_selector_class="org.apache.kafka.common.replica.RackAwareReplicaSelector")
def test_consumers_read_from_a_replica_in_their_rack(tmp_path):
    """KIP-392: with broker.rack and replica.selector.class, a consumer with client.rack reads
    from the in-sync replica in its rack, up to that replica's high watermark."""
    from broker.testing.cluster import KafkaCluster
    racks = {0: "rack-a", 1: "rack-b", 2: "rack-c"}
    with KafkaCluster(3, tmp_path / "c", config={
            "replica.selector.class":
                "org.apache.kafka.common.replica.RackAwareReplicaSelector"},
            broker_configs={b: {"broker.rack": r} for b, r in racks.items()}) as cluster:
        create(cluster.bootstrap(0), "near", 1, 3)
        acked = produce(cluster.bootstrap(0), "near", [f"n{i}".encode() for i in range(300)])
        cluster.wait_for_isr("near", 0, [0, 1, 2])
        leader = cluster.leader("near", 0)
        follower = next(b for b in (0, 1, 2) if b != leader)
        # The leader points a consumer of the follower's rack at the follower.
        from tests.integration.test_cluster_bad_input import send
        from protocol.messages.fetch import FetchRequest
        request = FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
            session_id=0, session_epoch=-1, rack_id=racks[follower],
            topics=[FetchRequest.FetchTopic(topic="near", partitions=[FetchRequest.FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=1 << 20)])],
            forgotten_topics_data=[])
        part = send(cluster.brokers[leader].port, request, 12).responses[0].partitions[0]
        assert part.preferred_read_replica == follower and not part.records
        # And the follower serves it, up to its own high watermark (which trails the leader's
        # by up to one of its fetches, replica.fetch.wait.max.ms when idle, as in Kafka).
        deadline = time.monotonic() + 10
        while True:
            part = send(cluster.brokers[follower].port, request, 12).responses[0].partitions[0]
            assert part.error_code == 0
            if part.high_watermark == 300:
                break
            assert time.monotonic() < deadline, "the follower's high watermark stayed behind"
            time.sleep(0.2)
        assert len(part.records) > 0
        # A real client follows the hint and reads everything.
        got = poll(group_consumer(cluster.bootstrap_servers, "near", "rack-reader",
                                  **{"client.rack": racks[follower]}), 300)
        assert sorted(got) == sorted(acked)


def test_racks_in_placement_metadata_and_the_tools(tmp_path):
    """broker.rack end to end: topics created through a broker are placed with Kafka's
    rack-aware algorithm (each partition over both racks), the racks are in Metadata,
    kafka-topics.sh --describe reads as without racks, kafka-reassign-partitions.sh --generate
    proposes rack-aware (or not, with --disable-rack-aware), and replica sets that cannot
    cover the racks are still allowed, as Kafka allows them."""
    from broker.testing.cluster import KafkaCluster
    racks = {0: "a", 1: "a", 2: "b"}
    bin_dir = pathlib.Path(__file__).resolve().parents[2] / "bin"

    def script(name, *args):
        result = subprocess.run([str(bin_dir / name), *map(str, args)], capture_output=True,
                                text=True, timeout=90)
        assert result.returncode == 0, (name, args, result.stdout, result.stderr)
        return result.stdout

    class Draws:
        def __init__(self, start, shift):
            self.values = [start, shift]

        def randrange(self, n):
            return self.values.pop(0)
    racked = [BrokerMetadata(b, r) for b, r in racks.items()]
    outcomes = [assign_replicas_to_brokers(racked, 6, 2, rng=Draws(start, shift))
                for start in range(3) for shift in range(3)]
    with KafkaCluster(3, tmp_path / "c", broker_configs={b: {"broker.rack": r}
                                                          for b, r in racks.items()}) as cluster:
        bootstrap = cluster.bootstrap_servers
        create(cluster.bootstrap(0), "racked", 6, 2)
        znode = json.loads(cluster._read("/brokers/topics/racked"))
        assignment = {int(p): r for p, r in znode["partitions"].items()}
        assert assignment in outcomes
        assert all({racks[b] for b in replicas} == {"a", "b"} for replicas in assignment.values())
        client = admin(bootstrap)
        nodes = client.describe_cluster(request_timeout=30).result(60).nodes
        assert {n.id: n.rack for n in nodes} == racks
        # More replicas than racks, and a manual assignment within one rack: allowed.
        create(cluster.bootstrap(1), "wide", 2, 3)
        client.create_topics([NewTopic("one-rack", 1, replica_assignment=[[0, 1]])])[
            "one-rack"].result(60)
        cluster.wait_until(lambda: cluster.leader("one-rack", 0) >= 0, 30, "no leader")
        described = script("kafka-topics.sh", "--bootstrap-server", bootstrap, "--describe",
                           "--topic", "racked")
        lines = described.splitlines()
        assert re.fullmatch(r"Topic: racked\tTopicId: \S{22}\tPartitionCount: 6\t"
                            r"ReplicationFactor: 2\tConfigs: .*", lines[0]), lines[0]
        for p, line in enumerate(lines[1:]):
            replicas = ",".join(map(str, assignment[p]))
            assert re.fullmatch(rf"\tTopic: racked\tPartition: {p}\tLeader: \d+\t"
                                rf"Replicas: {replicas}\tIsr: [\d,]+\tElr: N/A\t"
                                r"LastKnownElr: N/A", line), line
        assert len(lines) == 7
        # --generate: Kafka's placement with the racks, or without them (then some partition
        # of six always has both replicas in rack a)
        moving = tmp_path / "move.json"
        moving.write_text(json.dumps({"version": 1, "topics": [{"topic": "racked"}]}))
        unaware = [assign_replicas_to_brokers([BrokerMetadata(b) for b in racks], 6, 2,
                                              rng=Draws(start, shift))
                   for start in range(3) for shift in range(3)]
        assert all(any({racks[b] for b in r} == {"a"} for r in o.values()) for o in unaware)
        for flags, expected in (((), outcomes), (("--disable-rack-aware",), unaware)):
            out = script("kafka-reassign-partitions.sh", "--bootstrap-server", bootstrap,
                         "--generate", "--topics-to-move-json-file", moving,
                         "--broker-list", "0,1,2", *flags)
            proposed = json.loads(out.split("Proposed partition reassignment configuration\n")[1])
            assert {p["partition"]: p["replicas"] for p in proposed["partitions"]} in expected, out


def test_topics_are_auto_created_from_any_broker(kafka_cluster):
    cluster = kafka_cluster
    not_controller = next(b for b in (0, 1, 2) if b != cluster.controller())
    acked = produce(cluster.bootstrap(not_controller), "auto-made", [b"a", b"b"])
    assert len(acked) == 2
    assert cluster.leader("auto-made", 0) >= 0
    znode = json.loads(cluster._read("/brokers/topics/auto-made"))
    assert len(znode["partitions"]) == 1                # num.partitions


def test_deleted_topics_leave_every_broker(kafka_cluster):
    cluster = kafka_cluster
    create(cluster.bootstrap(0), "doomed", 3, 3)
    produce(cluster.bootstrap(0), "doomed", [b"x"] * 30)
    assert committed_offset(cluster.bootstrap_servers, "doomed", offset=7) == 7
    client = admin(cluster.bootstrap(1))
    client.delete_topics(["doomed"], operation_timeout=30)["doomed"].result(60)
    cluster.wait_until(lambda: cluster._read("/brokers/topics/doomed") is None, 30,
                       "topic znode still there")
    assert cluster._read("/admin/delete_topics/doomed") is None
    assert cluster._read("/config/topics/doomed") is None
    for node in cluster.brokers.values():
        # Renamed to <topic>-<p>.<id>-delete at once, removed after file.delete.delay.ms.
        cluster.wait_until(lambda: not any(p.name.startswith("doomed-") and
                                           not p.name.endswith("-delete")
                                           for p in node.log_dir.iterdir()), 30,
                           f"broker {node.id} still has the topic's logs")
        assert "doomed" not in admin(node.bootstrap).list_topics(timeout=20).topics
    # The name can be used again at once, and the group's offsets went with the old topic
    # (Kafka's onPartitionsDeleted): its consumers start from auto.offset.reset.
    create(cluster.bootstrap(2), "doomed", 1, 3)
    assert committed_offset(cluster.bootstrap_servers, "doomed") < 0
    # As Kafka in ZooKeeper mode, a manual assignment may name a broker that is not alive
    # (one being restarted): the topic is created and led by a live replica.
    client = admin(cluster.bootstrap(0))
    client.create_topics([NewTopic("later", 1, replica_assignment=[[1, 7]])],
                         operation_timeout=30)["later"].result(60)
    assert json.loads(cluster._read("/brokers/topics/later"))["partitions"] == {"0": [1, 7]}
    assert cluster.leader("later", 0) == 1
    # Every replica down: created, and answered REQUEST_TIMED_OUT once the request's timeout
    # has passed (Kafka's DelayedCreatePartitions), not after a fixed wait.
    started = time.monotonic()
    future = client.create_topics([NewTopic("nowhere", 1, replica_assignment=[[7]])],
                                  operation_timeout=2)["nowhere"]
    with pytest.raises(KafkaException) as caught:
        future.result(60)
    assert caught.value.args[0].code() == KafkaError.REQUEST_TIMED_OUT
    assert time.monotonic() - started < 15
    assert cluster._read("/brokers/topics/nowhere") is not None


def committed_offset(bootstrap, topic, offset=None, group="g-doomed") -> int:
    """The group's committed offset of `topic`-0, after committing `offset` if given."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        if offset is not None:
            consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
        return consumer.committed([TopicPartition(topic, 0)], timeout=30)[0].offset
    finally:
        consumer.close()


def test_broker_api_versions_lists_every_broker(kafka_cluster):
    cluster = kafka_cluster
    result = subprocess.run([sys.executable, "-m", "broker.tools.broker_api_versions",
                             "--bootstrap-server", cluster.bootstrap(0)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    for node in cluster.brokers.values():
        assert f"127.0.0.1:{node.port} (id: {node.id} rack: null) -> (" in result.stdout
    assert "LeaderAndIsr(4): 0 to 7 [usable: 7]" in result.stdout


def test_metadata_creates_the_internal_topics_with_their_settings(kafka_cluster):
    # Kafka's AutoTopicCreationManager: a client asking for __transaction_state by name (a
    # console consumer of it, say) on a fresh cluster gets it created with the coordinator's
    # partitions and replication, LEADER_NOT_AVAILABLE meanwhile.
    cluster = kafka_cluster
    client = admin(cluster.bootstrap(0))

    def created():
        topic = client.list_topics("__transaction_state", timeout=20).topics["__transaction_state"]
        return topic.error is None and len(topic.partitions) > 0 and all(
            p.leader >= 0 for p in topic.partitions.values())
    cluster.wait_until(created, 30, "__transaction_state was not created")
    znode = json.loads(cluster._read("/brokers/topics/__transaction_state"))
    assert len(znode["partitions"]) == 50                      # transaction.state.log.num.partitions
    assert {len(r) for r in znode["partitions"].values()} == {3}   # ...replication.factor
    config = json.loads(cluster._read("/config/topics/__transaction_state"))["config"]
    assert config["cleanup.policy"] == "compact"


def test_delete_topics_and_create_partitions_honour_timeout_ms(kafka_cluster):
    # Kafka's ZkAdminManager: with timeout_ms 0 the answer comes once ZooKeeper is written,
    # REQUEST_TIMED_OUT (the work goes on); otherwise it waits for the topic to leave the
    # metadata (DelayedDeleteTopics) or the new partitions' leaders (DelayedCreatePartitions).
    cluster = kafka_cluster
    create(cluster.bootstrap(0), "stuck", 1, 3)
    create(cluster.bootstrap(0), "grown", 1, 1)
    # (confluent-kafka sends no timeout of 0: its operation_timeout=0 means "the default")
    import asyncio
    from broker.client.admin import Admin
    from broker.client.cluster import ClusterClient

    async def at_once():
        async with ClusterClient(cluster.bootstrap_servers) as c:
            deleted = await Admin(c).delete_topics(["stuck"], timeout_ms=0)
            grown = await Admin(c).create_partitions({"grown": 3}, timeout_ms=0)
            return deleted["stuck"][0], grown["grown"][0]
    assert asyncio.run(at_once()) == (KafkaError.REQUEST_TIMED_OUT, KafkaError.REQUEST_TIMED_OUT)
    client = admin(cluster.bootstrap(cluster.controller()))
    cluster.wait_until(lambda: cluster._read("/brokers/topics/stuck") is None, 30,
                       "the deletion did not go on")
    cluster.wait_until(lambda: len(json.loads(cluster._read("/brokers/topics/grown"))["partitions"]) == 3,
                       30, "the partitions were not added")
    future = client.create_partitions([NewPartitions("grown", 4)], operation_timeout=30)["grown"]
    assert future.result(60) is None                          # waited for the leader: done
    # ZkAdminManager.createPartitions checks the brokers before the number of assignments
    future = client.create_partitions([NewPartitions("grown", 6, [[99]])])["grown"]
    with pytest.raises(KafkaException) as unknown:
        future.result(30)
    assert (unknown.value.args[0].code(), unknown.value.args[0].str()) == (
        KafkaError.INVALID_REPLICA_ASSIGNMENT, "Unknown broker(s) in replica assignment: 99.")


def test_a_topic_still_being_deleted_cannot_be_created_again(kafka_cluster):
    # Kafka's AdminZkClient.validateTopicCreate (validate_only too): while a replica's broker is
    # down the deletion waits, the topic has left the metadata, and CreateTopics says so.
    cluster = kafka_cluster
    create(cluster.bootstrap(0), "limbo", 1, 3)
    down = next(b for b in (0, 1, 2) if b != cluster.controller())
    cluster.stop(down)
    client = admin(cluster.bootstrap(cluster.controller()))
    client.delete_topics(["limbo"], operation_timeout=30)["limbo"].result(60)
    assert cluster._read("/admin/delete_topics/limbo") is not None     # waits for the broker
    for validate_only in (True, False):
        future = client.create_topics([NewTopic("limbo", 1, 2)], validate_only=validate_only)["limbo"]
        with pytest.raises(KafkaException) as refused:
            future.result(30)
        assert (refused.value.args[0].code(), refused.value.args[0].str()) == (
            KafkaError.TOPIC_ALREADY_EXISTS, "Topic 'limbo' is marked for deletion.")
    cluster.start(down)
    cluster.wait_until(lambda: cluster._read("/brokers/topics/limbo") is None, 60,
                       "the deletion did not complete once the broker was back")
    create(cluster.bootstrap(0), "limbo", 1, 3)
