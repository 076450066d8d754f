"""What a cluster does with stale, foreign and malformed input, and with ZooKeeper restarting:
each is refused with Kafka's error code or logged and skipped, and nothing is harmed.

Inter-broker requests are sent raw (the project's BrokerConnection) as a deposed controller or
an earlier incarnation of a broker would send them; the znodes are hand-edited with the same
ZooKeeper client the broker uses."""
import asyncio
import json
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.client.connection import BrokerConnection
from protocol.errors import ErrorCode
from protocol.messages.fetch import FetchRequest
from protocol.messages.leader_and_isr import LeaderAndIsrRequest
from protocol.messages.produce import ProduceRequest
from protocol.messages.stop_replica import StopReplicaRequest
from protocol.messages.update_metadata import UpdateMetadataRequest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def send(port, request, version):
    async def go():
        conn = BrokerConnection("127.0.0.1", port, request_timeout_ms=20000)
        await conn.connect()
        try:
            return await conn.send(request, version)
        finally:
            await conn.close()
    return asyncio.run(go())


def zk_write(cluster, path, data, create=False):
    from kazoo.client import KazooClient
    client = KazooClient(hosts=cluster.zookeeper.connect_string)
    client.start(10)
    try:
        if create:
            client.create(path, data, makepath=True, sequence=path.endswith("_"))
        else:
            client.set(path, data)
    finally:
        client.stop()
        client.close()


def create_topic(cluster, name, partitions=1, replication=3, config=None):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(name, partitions, replication, config=config or {})])[
        name].result(60)
    for p in range(partitions):
        cluster.wait_for_leader(name, p)


def produce(cluster, topic, n):
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i in range(n):
        producer.produce(topic, f"m{i}".encode())
    assert producer.flush(60) == 0


def end_offset(cluster, topic, p=0):
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "x"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[1]
    finally:
        consumer.close()


def test_stale_controller_and_broker_epochs_change_nothing(kafka_cluster):
    cluster = kafka_cluster
    create_topic(cluster, "fenced")
    produce(cluster, "fenced", 10)
    state = cluster.partition_state("fenced", 0)
    leader = state["leader"]
    follower = next(r for r in state["isr"] if r != leader)
    port = cluster.brokers[follower].port
    epoch = int(cluster._read("/controller_epoch"))
    registration = json.loads(cluster._read(f"/brokers/ids/{follower}"))
    del registration
    # A deposed controller (epoch 0) tells the follower to lead: refused, nothing changes.
    lai = LeaderAndIsrRequest(
        controller_id=leader, controller_epoch=0, broker_epoch=-1, type=0,
        topic_states=[LeaderAndIsrRequest.LeaderAndIsrTopicState(
            topic_name="fenced", topic_id=uuid.UUID(int=0), partition_states=[
                LeaderAndIsrRequest.LeaderAndIsrPartitionState(
                    topic_name="fenced", partition_index=0, controller_epoch=0,
                    leader=follower, leader_epoch=99, isr=[follower], partition_epoch=99,
                    replicas=[follower], adding_replicas=[], removing_replicas=[],
                    is_new=False)])],
        live_leaders=[])
    assert send(port, lai, 7).error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    # The current epoch but an earlier incarnation's broker epoch: STALE_BROKER_EPOCH.
    lai.controller_epoch = epoch
    lai.broker_epoch = 1
    assert send(port, lai, 7).error_code == ErrorCode.STALE_BROKER_EPOCH
    # The current epochs but the leader epoch the broker already has: per-partition refusal.
    lai.broker_epoch = -1
    lai.topic_states[0].partition_states[0].leader_epoch = state["leader_epoch"]
    response = send(port, lai, 7)
    assert response.topics[0].partition_errors[0].error_code == \
        ErrorCode.STALE_CONTROLLER_EPOCH
    um = UpdateMetadataRequest(controller_id=leader, controller_epoch=0, broker_epoch=-1,
                               type=0, topic_states=[], live_brokers=[])
    assert send(port, um, 8).error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    stop = StopReplicaRequest(
        controller_id=leader, controller_epoch=epoch, broker_epoch=-1,
        topic_states=[StopReplicaRequest.StopReplicaTopicState(
            topic_name="fenced", partition_states=[StopReplicaRequest.StopReplicaPartitionState(
                partition_index=0, leader_epoch=state["leader_epoch"] - 1,
                delete_partition=True)])])
    if state["leader_epoch"] >= 1:
        response = send(port, stop, 4)
        assert response.partition_errors[0].error_code == ErrorCode.FENCED_LEADER_EPOCH
    stop.controller_epoch = 0
    assert send(port, stop, 4).error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    # Nothing changed: same leader, same ISR, every broker still answers with all brokers,
    # and the follower still holds its copy.
    assert cluster.partition_state("fenced", 0) == state
    assert (cluster.brokers[follower].log_dir / "fenced-0").is_dir()
    controller, brokers = cluster.metadata(follower)
    assert brokers == {0, 1, 2} and controller >= 0
    produce(cluster, "fenced", 10)
    assert end_offset(cluster, "fenced") == 20


def test_bad_follower_fetches_get_kafkas_errors(kafka_cluster):
    cluster = kafka_cluster
    create_topic(cluster, "ff", replication=2)
    produce(cluster, "ff", 5)
    state = cluster.partition_state("ff", 0)
    leader = state["leader"]
    outsider = next(b for b in (0, 1, 2) if b not in
                    json.loads(cluster._read("/brokers/topics/ff"))["partitions"]["0"])

    def fetch(replica_id, offset, epoch):
        request = FetchRequest(
            replica_id=replica_id, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
            isolation_level=0, session_id=0, session_epoch=-1,
            topics=[FetchRequest.FetchTopic(topic="ff", partitions=[FetchRequest.FetchPartition(
                partition=0, current_leader_epoch=epoch, fetch_offset=offset,
                last_fetched_epoch=-1, log_start_offset=0, partition_max_bytes=1 << 20)])],
            forgotten_topics_data=[], rack_id="")
        return send(cluster.brokers[leader].port, request, 12).responses[0].partitions[0]

    # Not a replica: NOT_LEADER_OR_FOLLOWER, or with a leader epoch UNKNOWN_LEADER_EPOCH (as
    # Kafka's followerReplicaOrThrow: the pair is not known, the fetcher retries).
    assert fetch(outsider, 0, -1).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert fetch(outsider, 0, state["leader_epoch"]).error_code == \
        ErrorCode.UNKNOWN_LEADER_EPOCH
    follower = next(r for r in state["isr"] if r != leader)
    assert fetch(follower, 0, state["leader_epoch"] - 1).error_code == \
        ErrorCode.FENCED_LEADER_EPOCH if state["leader_epoch"] > 0 else True
    assert fetch(follower, 0, state["leader_epoch"] + 1).error_code == \
        ErrorCode.UNKNOWN_LEADER_EPOCH
    assert fetch(follower, 999, state["leader_epoch"]).error_code == \
        ErrorCode.OFFSET_OUT_OF_RANGE
    # None of it moved the high watermark or the ISR.
    assert cluster.partition_state("ff", 0)["isr"] == state["isr"]
    assert end_offset(cluster, "ff") == 5


def test_produce_to_a_follower_names_the_leader(kafka_cluster):
    """KIP-951: NOT_LEADER_OR_FOLLOWER with the leader and its endpoint (Produce v10+)."""
    cluster = kafka_cluster
    create_topic(cluster, "hint", replication=2)
    state = cluster.partition_state("hint", 0)
    follower = next(r for r in state["isr"] if r != state["leader"])
    request = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name="hint", partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=_batch())])])
    response = send(cluster.brokers[follower].port, request, 11)
    part = response.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert part.current_leader.leader_id == state["leader"]
    assert part.current_leader.leader_epoch == state["leader_epoch"]
    (endpoint,) = response.node_endpoints
    assert (endpoint.node_id, endpoint.port) == (state["leader"],
                                                 cluster.brokers[state["leader"]].port)


def _batch():
    from storage.record_batch import RecordBatchBuilder
    builder = RecordBatchBuilder()
    builder.append(int(time.time() * 1000), None, b"v")
    return builder.build()


def test_malformed_znodes_are_logged_and_skipped(kafka_cluster):
    cluster = kafka_cluster
    create_topic(cluster, "good")
    # A hand-edited topic config with its change notification, and a garbage topic znode.
    zk_write(cluster, "/config/topics/good", b"{this is not json")
    zk_write(cluster, "/config/changes/config_change_", json.dumps(
        {"version": 2, "entity_path": "topics/good"}).encode(), create=True)
    zk_write(cluster, "/brokers/topics/garbage", b"[1,2,", create=True)
    time.sleep(2)
    # Every broker is alive and serves; a controller failover reads the bad znodes too.
    old = cluster.controller()
    cluster.kill(old)
    cluster.wait_until(lambda: cluster.controller() not in (None, old), 30, "no controller")
    new = cluster.controller()
    survivors = [b for b in (0, 1, 2) if b != old]
    for b in survivors:
        assert cluster.brokers[b].running()
    create_topic(cluster, "after-garbage", replication=2)
    produce(cluster, "after-garbage", 3)
    output = cluster.output(new)
    assert "Ignoring topic garbage" in output
    assert any("/config/topics/good" in cluster.output(b) for b in survivors)
    # A Metadata request naming the unreadable topic (auto-creation on) failed as a whole with
    # UNKNOWN_SERVER_ERROR: its creation check decoded the znode. Kafka only asks whether it
    # exists; the other topics of the request are answered.
    from protocol.messages.metadata import MetadataRequest
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)
                                      for name in ("garbage", "after-garbage")],
                              allow_auto_topic_creation=True)
    answer = send(cluster.brokers[survivors[0]].port, request, 12)
    errors = {t.name: t.error_code for t in answer.topics}
    assert errors == {"garbage": ErrorCode.LEADER_NOT_AVAILABLE, "after-garbage": 0}, errors
    # A /cluster/id Kafka cannot parse: a broker refuses to start with one line, no traceback.
    zk_write(cluster, "/cluster/id", b"{garbage")
    result = subprocess.run([sys.executable, "-m", "broker", str(cluster.brokers[old].properties)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "Failed to parse the cluster id json" in result.stderr
    assert "Traceback" not in result.stderr, result.stderr


def describe_topic_config(cluster, topic, name):
    from confluent_kafka.admin import ConfigResource
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(30)[name].value


def test_bad_config_changes_and_producer_id_block_are_logged_and_skipped(kafka_cluster):
    cluster = kafka_cluster
    create_topic(cluster, "kept", config={"retention.ms": "3600000"})
    # A notification naming a broker that is no number, then one whose topic config holds a
    # value Kafka refuses, then a good one: the good one is still applied everywhere, and the
    # topic keeps its config (Kafka's TopicConfigHandler logs and keeps it too).
    zk_write(cluster, "/config/changes/config_change_", json.dumps(
        {"version": 2, "entity_path": "brokers/abc"}).encode(), create=True)
    zk_write(cluster, "/config/topics/kept", json.dumps(
        {"version": 1, "config": {"retention.ms": "abc"}}).encode())
    zk_write(cluster, "/config/changes/config_change_", json.dumps(
        {"version": 2, "entity_path": "topics/kept"}).encode(), create=True)
    create_topic(cluster, "later")
    zk_write(cluster, "/config/topics/later", json.dumps(
        {"version": 1, "config": {"retention.ms": "7200000"}}).encode())
    zk_write(cluster, "/config/changes/config_change_", json.dumps(
        {"version": 2, "entity_path": "topics/later"}).encode(), create=True)
    cluster.wait_until(lambda: all("Ignoring config change of topic kept" in cluster.output(b)
                                   for b in (0, 1, 2)), 30, "bad topic config not logged")
    assert describe_topic_config(cluster, "kept", "retention.ms") == "3600000"
    cluster.wait_until(lambda: describe_topic_config(cluster, "later", "retention.ms")
                       == "7200000", 30, "the change after the bad ones was not applied")
    # A producer id block Kafka would not write: InitProducerId is retriable, not a closed
    # connection; once the znode is fixed the producer gets its id.
    zk_write(cluster, "/latest_producer_id_block", b"{garbage")
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                         "enable.idempotence": True, "message.timeout.ms": 60000})
    producer.produce("kept", b"v")
    time.sleep(3)
    zk_write(cluster, "/latest_producer_id_block", json.dumps(
        {"version": 1, "broker": 0, "block_start": "0", "block_end": "999999"}).encode())
    assert producer.flush(60) == 0
    for b in (0, 1, 2):
        assert cluster.brokers[b].running()
        assert "Traceback" not in cluster.output(b), cluster.output(b)[-3000:]


def test_zookeeper_restart_loses_no_metadata(kafka_cluster):
    cluster = kafka_cluster
    create_topic(cluster, "kept", partitions=2, config={"retention.ms": "123456789"})
    produce(cluster, "kept", 20)
    before = {p: cluster.partition_state("kept", p) for p in range(2)}
    cluster.zookeeper.kill()
    time.sleep(2)
    cluster.zookeeper.start()
    cluster.wait_until(lambda: cluster.live_brokers() == {0, 1, 2}, 60,
                       "brokers did not come back to ZooKeeper")
    for p in range(2):
        after = cluster.partition_state("kept", p)
        assert after["isr"] == before[p]["isr"] and after["leader"] == before[p]["leader"]
    assert json.loads(cluster._read("/config/topics/kept"))["config"]["retention.ms"] == \
        "123456789"
    produce(cluster, "kept", 20)
    assert end_offset(cluster, "kept", 0) + end_offset(cluster, "kept", 1) == 40
    create_topic(cluster, "new-after-restart", replication=3)


def test_log_dirs_of_another_cluster_are_refused(kafka_cluster, tmp_path):
    cluster = kafka_cluster
    data = tmp_path / "foreign"
    data.mkdir()
    (data / "meta.properties").write_text("version=0\nbroker.id=7\ncluster.id=someOtherCluster1234567\n")
    props = tmp_path / "b7.properties"
    props.write_text(f"broker.id=7\nlisteners=PLAINTEXT://127.0.0.1:0\nlog.dirs={data}\n"
                     f"zookeeper.connect={cluster.zookeeper.connect_string}\n")
    result = subprocess.run([sys.executable, "-m", "broker", str(props)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 1
    assert "doesn't match stored clusterId Some(someOtherCluster1234567)" in result.stderr
    assert cluster.live_brokers() == {0, 1, 2}


def test_a_corrupt_batch_stops_only_that_partitions_fetcher(kafka_cluster):
    """A batch whose CRC fails reaches a follower (here: bytes flipped in the leader's segment
    file): the follower stores nothing of it, logs the error and stops fetching that
    partition; its other partitions keep replicating."""
    cluster = kafka_cluster
    created = subprocess.run(
        [sys.executable, "-m", "broker.tools.topics", "--bootstrap-server",
         cluster.bootstrap_servers, "--create", "--topic", "crc", "--replica-assignment",
         "0:1,0:1"], capture_output=True, text=True, timeout=60)
    assert created.returncode == 0, created.stderr
    for p in (0, 1):
        cluster.wait_for_leader("crc", p)
        cluster.wait_for_isr("crc", p, [0, 1])
    cluster.stop(1)                         # the follower misses what comes next
    producer = Producer({"bootstrap.servers": cluster.bootstrap(0), "acks": "1"})
    for i in range(50):
        producer.produce("crc", f"p0-{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    segment = next((cluster.brokers[0].log_dir / "crc-0").glob("*.log"))
    with open(segment, "r+b") as f:
        data = bytearray(f.read())
        data[len(data) // 2] ^= 0xFF        # inside a batch's records: its CRC no longer holds
        f.seek(0)
        f.write(data)
    cluster.start(1)
    for i in range(50):
        producer.produce("crc", f"p1-{i}".encode(), partition=1)
    assert producer.flush(30) == 0
    # Partition 1 replicates to the follower again; partition 0 does not, and nothing of the
    # corrupt batch is in the follower's log.
    cluster.wait_for_isr("crc", 1, [0, 1], timeout=60)
    cluster.wait_until(lambda: "Found invalid records in crc-0" in cluster.output(1), 30,
                       "no error logged")
    follower_log = next((cluster.brokers[1].log_dir / "crc-0").glob("*.log"))
    assert b"p0-" not in follower_log.read_bytes()
    assert cluster.brokers[1].running()


def test_a_cluster_that_cannot_start_stops_what_it_started(tmp_path):
    # KafkaCluster.__enter__ raising leaves no ZooKeeper or broker behind (its __exit__ never
    # runs), so a bad value in a test's kafka_cluster_config leaks nothing.
    from broker.testing.cluster import KafkaCluster
    cluster = KafkaCluster(3, tmp_path / "c", broker_configs={1: {"num.partitions": "many"}})
    with pytest.raises(RuntimeError, match="broker 1 exited"):
        cluster.__enter__()
    assert cluster.zookeeper.proc.poll() is not None
    assert all(node.proc is None or node.proc.poll() is not None
               for node in cluster.brokers.values())


@pytest.mark.kafka_cluster_config(brokers=1)
def test_the_cluster_helpers_work_from_a_coroutine(kafka_cluster):
    # A pytest-asyncio test calls restart()/wait_for_metadata() inside a running loop: the
    # Metadata probe must not need asyncio.run there (it timed out after 60 s).
    async def inside_a_loop():
        kafka_cluster.wait_for_metadata(0, {0}, timeout=20)
        return kafka_cluster.metadata(0)
    assert asyncio.run(inside_a_loop()) == (0, {0})
    with pytest.raises(ValueError, match="no broker -1"):
        kafka_cluster.kill(-1)
