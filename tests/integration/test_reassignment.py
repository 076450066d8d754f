"""Partition reassignment in a three-broker ZooKeeper cluster, as an operator moves data: the
new replicas copy the log and join the ISR, leadership moves off removed replicas, the removed
replicas' data is deleted, clients never lose a record; a reassignment survives the
controller's kill -9; the legacy /admin/reassign_partitions znode still works; and
AlterPartitionReassignments / ListPartitionReassignments answer as Kafka's."""
import asyncio
import json
import os
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from broker.client.admin import Admin
from broker.client.cluster import ClusterClient
from broker.client.types import TopicPartition
from protocol.errors import ErrorCode

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def produce(bootstrap, topic, n, start=0):
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
    acked = []
    for i in range(start, start + n):
        producer.produce(topic, f"v{i}".encode() * 20, key=str(i).encode(),
                         on_delivery=lambda err, msg: acked.append(msg.offset())
                         if err is None else None)
    assert producer.flush(60) == 0
    assert len(acked) == n
    return acked


def read_all(bootstrap, topic, partition, count, timeout=60):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r{time.monotonic()}",
                         "enable.auto.commit": False})
    consumer.assign([CTP(topic, partition, 0)])
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                out.append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return out


def create(bootstrap, topic, assignment):
    client = AdminClient({"bootstrap.servers": bootstrap})     # alive until the result is in
    client.create_topics([NewTopic(topic, len(assignment), replica_assignment=assignment)]
                         )[topic].result(60)


def admin_call(bootstrap, method, *args):
    async def run():
        async with ClusterClient(bootstrap) as cluster:
            return await getattr(Admin(cluster), method)(*args)
    return asyncio.run(run())


def replicas_of(cluster, topic, partition):
    return json.loads(cluster._read(f"/brokers/topics/{topic}"))["partitions"][str(partition)]


def partition_dirs(cluster, broker, topic):
    base = cluster.brokers[broker].log_dir
    return sorted(n for n in os.listdir(base) if n.startswith(topic + "-")
                  and not n.endswith("-delete"))


def test_a_partition_moves_to_other_brokers_with_its_data(kafka_cluster):
    cluster = kafka_cluster
    bootstrap = cluster.bootstrap_servers
    create(bootstrap, "moving", [[0, 1]])
    cluster.wait_for_isr("moving", 0, [0, 1])
    produce(bootstrap, "moving", 3000)
    tp = TopicPartition("moving", 0)
    got = admin_call(bootstrap, "alter_partition_reassignments", {tp: [2, 1]})
    assert got == {tp: (ErrorCode.NONE, None)}
    produce(bootstrap, "moving", 500, 3000)             # writes go on during the move
    cluster.wait_until(lambda: replicas_of(cluster, "moving", 0) == [2, 1], 60,
                       "reassignment did not complete")
    assert admin_call(bootstrap, "list_partition_reassignments") == {}
    cluster.wait_for_isr("moving", 0, [2, 1])
    assert cluster.leader("moving", 0) in (2, 1)
    cluster.wait_until(lambda: partition_dirs(cluster, 0, "moving") == [], 30,
                       "the removed replica's data stayed")
    assert partition_dirs(cluster, 2, "moving") == ["moving-0"]
    records = read_all(bootstrap, "moving", 0, 3500)
    assert [o for o, _ in records] == list(range(3500))
    # Preferred leader: the first target replica.
    cluster.stop(1)
    cluster.wait_until(lambda: cluster.leader("moving", 0) == 2, 30, "no failover to 2")
    cluster.start(1)


def test_refusals_cancel_and_the_legacy_znode(kafka_cluster):
    cluster = kafka_cluster
    bootstrap = cluster.bootstrap_servers
    create(bootstrap, "r", [[0, 1], [1, 2]])
    a, b, unknown = TopicPartition("r", 0), TopicPartition("r", 1), TopicPartition("r", 7)
    got = admin_call(bootstrap, "alter_partition_reassignments",
                     {a: [0, 9], b: None, unknown: [0]})
    assert got[a] == (ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Replica assignment has brokers "
                      "that are not alive. Replica list: [9], live broker list: [0, 1, 2]")
    assert got[b][0] == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    assert got[unknown] == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
    # The legacy znode (what pre-KIP-455 tooling writes) is served, then emptied.
    zk = KazooClient(hosts=cluster.zookeeper.connect_string)
    zk.start(timeout=30)
    try:
        zk.create("/admin/reassign_partitions", json.dumps({"version": 1, "partitions": [
            {"topic": "r", "partition": 1, "replicas": [0, 2]}]}).encode())
        cluster.wait_until(lambda: replicas_of(cluster, "r", 1) == [0, 2], 60,
                           "the znode's reassignment did not complete")
        cluster.wait_until(lambda: zk.exists("/admin/reassign_partitions") is None, 30,
                           "the znode stayed")
    finally:
        zk.stop()
        zk.close()


def test_a_reassignment_survives_the_controllers_kill_9(kafka_cluster):
    cluster = kafka_cluster
    bootstrap = cluster.bootstrap_servers
    controller = cluster.controller()
    others = sorted({0, 1, 2} - {controller})
    create(bootstrap, "survive", [[others[0]]])
    produce(bootstrap, "survive", 2000)
    cluster.pause(others[1])                            # the new replica cannot catch up yet
    tp = TopicPartition("survive", 0)
    got = admin_call(bootstrap, "alter_partition_reassignments", {tp: [others[1], others[0]]})
    assert got == {tp: (ErrorCode.NONE, None)}
    assert admin_call(bootstrap, "list_partition_reassignments", [tp]) == {
        tp: ([others[1], others[0]], [others[1]], [])}
    # A client keeps writing through the failover and the end of the reassignment.
    live = ",".join(cluster.bootstrap(b) for b in others)
    stop, acked, failed, unflushed = threading.Event(), [], [], []

    def keep_producing():
        producer = Producer({"bootstrap.servers": live, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 5})
        i = 0
        while not stop.is_set():
            producer.produce("survive", b"during-%d" % i, on_delivery=lambda err, msg:
                             (acked if err is None else failed).append(msg.value()))
            producer.poll(0.005)
            i += 1
        unflushed.append(producer.flush(60))
    writer = threading.Thread(target=keep_producing)
    writer.start()
    try:
        time.sleep(0.5)
        cluster.kill(controller)
        cluster.resume(others[1])
        cluster.wait_until(lambda: replicas_of(cluster, "survive", 0) == [others[1], others[0]],
                           90, "the reassignment did not complete after the failover")
        cluster.wait_for_isr("survive", 0, [others[1], others[0]])
        time.sleep(0.5)
    finally:
        stop.set()
        writer.join(90)
    assert not writer.is_alive() and unflushed == [0], unflushed
    assert acked and not failed, failed[:3]
    values = [v for _, v in read_all(live, "survive", 0, 2000 + len(acked))]
    assert len(values) == 2000 + len(acked)
    assert values[2000:] == acked                       # each once, in order
    cluster.start(controller)
