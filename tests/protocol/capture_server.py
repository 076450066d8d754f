"""A tiny fake Kafka broker that records the request frames real clients send.

It speaks just enough Kafka — answered entirely with this project's protocol layer — for a
producer to produce and a group consumer to join, sync, fetch, list offsets and commit:
ApiVersions, Metadata, Produce, Fetch, ListOffsets, FindCoordinator, JoinGroup, SyncGroup,
Heartbeat, OffsetFetch, OffsetCommit, LeaveGroup, InitProducerId — and, for the admin clients,
CreateTopics, DeleteTopics, DescribeConfigs, ListGroups, DescribeGroups, DescribeCluster.  Any
other request gets the response class's default instance.  Because the clients must understand these responses to go
on, a capture run is also an end-to-end check of the response encoders.

The first frame of each (api key, version) is kept.  Running this file refreshes the golden
files under tests/protocol/golden (`<api>_v<version>_<client>.bin`, each the frame body
without its 4-byte size prefix):

    .venv/bin/python tests/protocol/capture_server.py [CLIENT ...]     (default: all of CLIENTS)

Everything listens on 127.0.0.1 and every client run is bounded in time.
"""
import asyncio
import pathlib
import socket
import sys
import threading
import time
import uuid

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from protocol.api import API_SPECS, ApiKey, request_class, response_class  # noqa: E402
from protocol.exceptions import ProtocolError  # noqa: E402
from protocol.framing import FrameReader  # noqa: E402
from protocol.headers import encode_response, parse_request_header  # noqa: E402
from protocol import messages as m  # noqa: E402

GOLDEN = pathlib.Path(__file__).resolve().parent / "golden"
TOPIC = "golden"
TOPIC_ID = uuid.UUID("6f1c1e4e-0000-4000-8000-00000000beef")
NODE_ID = 1


class CaptureServer:
    """Accepts connections on 127.0.0.1; one thread per connection; records first frames."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.frames = {}            # (api_key, api_version) -> frame body bytes
        self.errors = []
        self.records = None         # the first produced batch, served back by Fetch
        self.high_watermark = 0
        self.members = 0
        self.lock = threading.Lock()
        self.closed = False
        self.threads = []

    def __enter__(self):
        thread = threading.Thread(target=self._accept, daemon=True)
        thread.start()
        self.threads.append(thread)
        return self

    def __exit__(self, *exc):
        self.closed = True
        self.sock.close()
        for thread in self.threads:
            thread.join(timeout=2)

    def _accept(self):
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _serve(self, conn):
        reader = FrameReader(100 * 1024 * 1024)
        conn.settimeout(0.5)
        with conn:
            while not self.closed:
                try:
                    data = conn.recv(65536)
                except socket.timeout:
                    continue
                except OSError:
                    return
                if not data:
                    return
                reader.feed(data)
                while (frame := reader.next_frame()) is not None:
                    try:
                        pieces = self._handle(bytes(frame))
                    except (ProtocolError, KeyError) as exc:
                        self.errors.append(repr(exc))
                        return
                    if pieces:
                        try:
                            conn.sendall(b"".join(pieces))
                        except OSError:     # the client went away (e.g. after LeaveGroup)
                            return

    def _handle(self, frame):
        header, offset = parse_request_header(frame)
        key, version = header.api_key, header.api_version
        spec = API_SPECS.get(key)
        if key == ApiKey.API_VERSIONS and not spec.supports(version):
            body = m.ApiVersionsResponse(error_code=35, api_keys=[m.ApiVersionsResponse.ApiVersion(
                api_key=18, min_version=spec.min_version, max_version=spec.max_version)])
            return encode_response(header.correlation_id, key, 0, body)
        with self.lock:
            self.frames.setdefault((key, version), frame)
        request = request_class(key).decode(frame, version, offset)
        handler = HANDLERS.get(key)
        response = handler(self, request, version) if handler else response_class(key)()
        if response is None:
            return None
        return encode_response(header.correlation_id, key, version, response)


# --- handlers: request -> response ------------------------------------------------------

def api_versions(server, request, version):
    R = m.ApiVersionsResponse
    return R(api_keys=[R.ApiVersion(api_key=k, min_version=s.min_version, max_version=s.max_version)
                       for k, s in sorted(API_SPECS.items()) if "broker" in s.listeners
                       or "zkBroker" in s.listeners])


def metadata(server, request, version):
    R = m.MetadataResponse
    names = [t.name or TOPIC for t in request.topics] if request.topics else [TOPIC]
    return R(brokers=[R.MetadataResponseBroker(node_id=NODE_ID, host="127.0.0.1", port=server.port)],
             cluster_id="golden-cluster", controller_id=NODE_ID,
             topics=[R.MetadataResponseTopic(name=name, topic_id=TOPIC_ID, partitions=[
                 R.MetadataResponsePartition(partition_index=0, leader_id=NODE_ID, leader_epoch=0,
                                             replica_nodes=[NODE_ID], isr_nodes=[NODE_ID])])
                 for name in names])


def produce(server, request, version):
    R = m.ProduceResponse
    responses = []
    for topic in request.topic_data:
        partitions = []
        for p in topic.partition_data:
            with server.lock:
                base_offset = server.high_watermark
                if server.records is None and p.records is not None:
                    server.records = bytes(p.records)
                    server.high_watermark += 1
            partitions.append(R.PartitionProduceResponse(index=p.index, base_offset=base_offset,
                                                         log_append_time_ms=-1, log_start_offset=0))
        responses.append(R.TopicProduceResponse(name=topic.name, partition_responses=partitions))
    return None if request.acks == 0 else R(responses=responses)


def fetch(server, request, version):
    R = m.FetchResponse
    time.sleep(min(request.max_wait_ms, 100) / 1000)
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            records = server.records if (p.fetch_offset == 0 and server.records) else b""
            partitions.append(R.PartitionData(
                partition_index=p.partition, high_watermark=server.high_watermark,
                last_stable_offset=server.high_watermark, log_start_offset=0, records=records))
        topics.append(R.FetchableTopicResponse(topic=topic.topic, topic_id=topic.topic_id,
                                               partitions=partitions))
    return R(responses=topics)


def list_offsets(server, request, version):
    R = m.ListOffsetsResponse
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            offset = server.high_watermark if p.timestamp == -1 else 0
            partitions.append(R.ListOffsetsPartitionResponse(
                partition_index=p.partition_index, old_style_offsets=[offset], timestamp=-1,
                offset=offset, leader_epoch=0))
        topics.append(R.ListOffsetsTopicResponse(name=topic.name, partitions=partitions))
    return R(topics=topics)


def find_coordinator(server, request, version):
    R = m.FindCoordinatorResponse
    return R(node_id=NODE_ID, host="127.0.0.1", port=server.port,
             coordinators=[R.Coordinator(key=k, node_id=NODE_ID, host="127.0.0.1", port=server.port)
                           for k in request.coordinator_keys])


def join_group(server, request, version):
    R = m.JoinGroupResponse
    member_id = request.member_id
    if not member_id:
        with server.lock:
            server.members += 1
            member_id = f"member-{server.members}"
    protocol = request.protocols[0]
    return R(generation_id=1, protocol_type=request.protocol_type, protocol_name=protocol.name,
             leader=member_id, member_id=member_id,
             members=[R.JoinGroupResponseMember(member_id=member_id,
                                                group_instance_id=request.group_instance_id,
                                                metadata=protocol.metadata)])


def sync_group(server, request, version):
    assignment = next((a.assignment for a in request.assignments if a.member_id == request.member_id),
                      None)
    if assignment is None:
        A = m.ConsumerProtocolAssignment
        assignment = b"\x00\x00" + A(assigned_partitions=[A.TopicPartition(topic=TOPIC, partitions=[0])]).encode(0)
    return m.SyncGroupResponse(protocol_type=request.protocol_type, protocol_name=request.protocol_name,
                               assignment=assignment)


def offset_fetch(server, request, version):
    R = m.OffsetFetchResponse
    if version >= 8:
        return R(groups=[R.OffsetFetchResponseGroup(group_id=g.group_id, topics=[
            R.OffsetFetchResponseTopics(name=t.name, partitions=[
                R.OffsetFetchResponsePartitions(partition_index=i, committed_offset=-1, metadata="")
                for i in t.partition_indexes]) for t in (g.topics or [])]) for g in request.groups])
    return R(topics=[R.OffsetFetchResponseTopic(name=t.name, partitions=[
        R.OffsetFetchResponsePartition(partition_index=i, committed_offset=-1, metadata="")
        for i in t.partition_indexes]) for t in (request.topics or [])])


def offset_commit(server, request, version):
    R = m.OffsetCommitResponse
    return R(topics=[R.OffsetCommitResponseTopic(name=t.name, partitions=[
        R.OffsetCommitResponsePartition(partition_index=p.partition_index) for p in t.partitions])
        for t in request.topics])


def leave_group(server, request, version):
    R = m.LeaveGroupResponse
    return R(members=[R.MemberResponse(member_id=x.member_id, group_instance_id=x.group_instance_id)
                      for x in request.members])


def init_producer_id(server, request, version):
    return m.InitProducerIdResponse(producer_id=1000, producer_epoch=0)


def create_topics(server, request, version):
    R = m.CreateTopicsResponse
    return R(topics=[R.CreatableTopicResult(name=t.name, topic_id=TOPIC_ID,
                                            num_partitions=max(t.num_partitions, 1),
                                            replication_factor=max(t.replication_factor, 1))
                     for t in request.topics])


def delete_topics(server, request, version):
    R = m.DeleteTopicsResponse
    names = request.topic_names or [t.name for t in request.topics]
    return R(responses=[R.DeletableTopicResult(name=n) for n in names])


def describe_configs(server, request, version):
    R = m.DescribeConfigsResponse
    return R(results=[R.DescribeConfigsResult(
        resource_type=r.resource_type, resource_name=r.resource_name,
        configs=[R.DescribeConfigsResourceResult(name="retention.ms", value="604800000",
                                                 is_default=True, config_source=5)])
        for r in request.resources])


def list_groups(server, request, version):
    R = m.ListGroupsResponse
    return R(groups=[R.ListedGroup(group_id="golden-group", protocol_type="consumer",
                                   group_state="Empty")])


def describe_groups(server, request, version):
    R = m.DescribeGroupsResponse
    return R(groups=[R.DescribedGroup(group_id=g, group_state="Empty", protocol_type="consumer")
                     for g in request.groups])


def describe_cluster(server, request, version):
    R = m.DescribeClusterResponse
    return R(cluster_id="golden-cluster", controller_id=NODE_ID, brokers=[
        R.DescribeClusterBroker(broker_id=NODE_ID, host="127.0.0.1", port=server.port)])


HANDLERS = {
    ApiKey.CREATE_TOPICS: create_topics, ApiKey.DELETE_TOPICS: delete_topics,
    ApiKey.DESCRIBE_CONFIGS: describe_configs, ApiKey.LIST_GROUPS: list_groups,
    ApiKey.DESCRIBE_GROUPS: describe_groups, ApiKey.DESCRIBE_CLUSTER: describe_cluster,
    ApiKey.API_VERSIONS: api_versions, ApiKey.METADATA: metadata, ApiKey.PRODUCE: produce,
    ApiKey.FETCH: fetch, ApiKey.LIST_OFFSETS: list_offsets,
    ApiKey.FIND_COORDINATOR: find_coordinator, ApiKey.JOIN_GROUP: join_group,
    ApiKey.SYNC_GROUP: sync_group, ApiKey.OFFSET_FETCH: offset_fetch,
    ApiKey.OFFSET_COMMIT: offset_commit, ApiKey.LEAVE_GROUP: leave_group,
    ApiKey.INIT_PRODUCER_ID: init_producer_id,
}


# --- client drivers ---------------------------------------------------------------------

def run_confluent(port, deadline=15.0, legacy=False):
    from confluent_kafka import Consumer, Producer
    bootstrap = f"127.0.0.1:{port}"
    # legacy: no ApiVersions request; librdkafka then uses the versions of Kafka 0.9.0
    # (Produce v1, Fetch v1, Metadata v0, ...), which covers the old non-flexible layouts.
    extra = {"api.version.request": False, "broker.version.fallback": "0.9.0",
             "log_level": 3} if legacy else {}
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "golden-confluent", **extra})
    producer.produce(TOPIC, key=b"k", value=b"value-confluent")
    assert producer.flush(deadline) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "golden-group",
                         "client.id": "golden-confluent", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, **extra})
    consumer.subscribe([TOPIC])
    got = None
    end = time.monotonic() + deadline
    while got is None and time.monotonic() < end:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got = msg
    assert got is not None, "confluent consumer received nothing"
    consumer.commit(message=got, asynchronous=False)
    consumer.close()
    return got.value()


def run_kafka_python(port, deadline=15.0, api_version=None):
    from kafka import KafkaConsumer, KafkaProducer
    bootstrap = f"127.0.0.1:{port}"
    # api_version pins the versions kafka-python uses instead of asking ApiVersions.
    extra = {"api_version": api_version} if api_version else {}
    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="golden-kafka-python", **extra)
    producer.send(TOPIC, key=b"k", value=b"value-kafka-python").get(timeout=deadline)
    producer.close(timeout=5)
    consumer = KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id="golden-group",
                             client_id="golden-kafka-python", auto_offset_reset="earliest",
                             enable_auto_commit=False, **extra)
    got = None
    end = time.monotonic() + deadline
    while got is None and time.monotonic() < end:
        for records in consumer.poll(timeout_ms=500).values():
            got = got or records[0]
    assert got is not None, "kafka-python consumer received nothing"
    consumer.commit()
    consumer.close()
    return got.value


def run_aiokafka(port, deadline=15.0):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def main():
        bootstrap = f"127.0.0.1:{port}"
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, client_id="golden-aiokafka")
        await producer.start()
        try:
            await asyncio.wait_for(producer.send_and_wait(TOPIC, b"value-aiokafka", key=b"k"), deadline)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id="golden-group",
                                    client_id="golden-aiokafka", auto_offset_reset="earliest",
                                    enable_auto_commit=False, **extra)
        await consumer.start()
        try:
            msg = await asyncio.wait_for(consumer.getone(), deadline)
            await consumer.commit()
        finally:
            await consumer.stop()
        return msg.value

    return asyncio.run(main())


def run_confluent_admin(port, deadline=15.0):
    from confluent_kafka import ConsumerGroupTopicPartitions  # noqa: F401  (API presence)
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "client.id": "golden-confluent"})
    for future in admin.create_topics([NewTopic("golden-new", 3, 1)]).values():
        future.result(deadline)
    resource = ConfigResource(ConfigResource.Type.TOPIC, TOPIC)
    configs = admin.describe_configs([resource])[resource].result(deadline)
    for future in admin.delete_topics(["golden-new"]).values():
        future.result(deadline)
    groups = admin.list_consumer_groups().result(deadline)
    admin.describe_cluster().result(deadline)
    return f"{sorted(configs)} {[g.group_id for g in groups.valid]}".encode()


def run_kafka_python_admin(port, deadline=15.0):
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", client_id="golden-kafka-python",
                             request_timeout_ms=int(deadline * 1000))
    try:
        admin.create_topics([NewTopic("golden-new", 3, 1)])
        admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, TOPIC)])
        admin.delete_topics(["golden-new"])
        groups = admin.list_groups()
        admin.describe_groups(["golden-group"])
        admin.describe_cluster()
    finally:
        admin.close()
    return repr(groups).encode()


CLIENTS = {"confluent": run_confluent, "kafka_python": run_kafka_python, "aiokafka": run_aiokafka,
           "confluent_legacy": lambda port: run_confluent(port, legacy=True),
           "kafka_python_legacy": lambda port: run_kafka_python(port, api_version=(0, 10, 1)),
           "confluent_admin": run_confluent_admin, "kafka_python_admin": run_kafka_python_admin}


def capture(client):
    """Runs one client against a fresh capture server; returns ({(key, version): frame}, value)."""
    with CaptureServer() as server:
        value = CLIENTS[client](server.port)
        time.sleep(0.3)             # let a trailing LeaveGroup/commit arrive
        assert not server.errors, server.errors
        return dict(server.frames), value


def golden_name(api_key, version, client):
    return f"{ApiKey(api_key).name.lower()}_v{version}_{client}.bin"


def main(argv):
    GOLDEN.mkdir(exist_ok=True)
    for client in argv or list(CLIENTS):
        frames, value = capture(client)
        for (key, version), frame in sorted(frames.items()):
            (GOLDEN / golden_name(key, version, client)).write_bytes(frame)
        print(f"{client}: consumed {value!r}; captured "
              + ", ".join(golden_name(k, v, client)[:-4] for k, v in sorted(frames)))


if __name__ == "__main__":
    main(sys.argv[1:])
