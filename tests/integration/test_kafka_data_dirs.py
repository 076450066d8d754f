"""Data directories written by Apache Kafka, adopted by a kbroker subprocess (copies of
tests/fixtures/kafka-data): the leader epoch history is kept and answered from, KRaft's metadata
log stays hidden and untouched, meta.properties is checked as Kafka checks it, and the internal
topics are recognised. Driven with real clients (confluent-kafka, kafka-python)."""
import hashlib
import os
import subprocess
import sys

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.conftest import ROOT, SERVER_PROPERTIES, free_port
from tests.storage import log_checks

pytestmark = pytest.mark.integration

KRAFT = "kafka-3.4.0-kraft"
BROKER = {"group.initial.rebalance.delay.ms": 0}


def copy_fixture(kafka_fixtures, name, tmp_path):
    return log_checks.copy_fixture(kafka_fixtures / name, tmp_path / f"{name}-copy")


def epochs(data, partition_dir):
    """The leader-epoch-checkpoint's entries [(epoch, start offset)]."""
    lines = (data / partition_dir / "leader-epoch-checkpoint").read_text().split("\n")
    return [tuple(map(int, line.split())) for line in lines[2:] if line.strip()]


def offset_for_leader_epoch(bootstrap, topic, requested):
    """{epoch asked: (leader epoch, end offset)} as kafka-python's OffsetForLeaderEpoch
    (the request its consumer sends to validate positions, KIP-320) gets them."""
    from kafka import KafkaAdminClient
    from kafka.protocol.consumer.offsets import OffsetForLeaderEpochRequest as Request
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        answers = {}
        for epoch in requested:
            partition = Request.OffsetForLeaderTopic.OffsetForLeaderPartition(
                partition=0, current_leader_epoch=-1, leader_epoch=epoch)
            request = Request(replica_id=-1, topics=[(topic, [partition])])
            response = admin._manager.run(admin._manager.send, request)
            [part] = response.topics[0].partitions
            assert part.error_code == 0, part
            answers[epoch] = (part.leader_epoch, part.end_offset)
        return answers
    finally:
        admin.close()


def tree_digest(path) -> dict:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def test_leader_epoch_history_is_kept_and_answered(broker_process, kafka_fixtures, tmp_path):
    data = copy_fixture(kafka_fixtures, KRAFT, tmp_path)
    assert epochs(data, "_schemas-0") == [(0, 0), (2, 2), (4, 3)]     # 4 records, as Kafka left it
    broker = broker_process(log_dirs=str(data), broker_id=1, **BROKER)

    # Led at an epoch above the history (Kafka's controller would have bumped it), history kept.
    assert epochs(data, "_schemas-0") == [(0, 0), (2, 2), (4, 3), (5, 4)]
    assert offset_for_leader_epoch(broker.bootstrap, "_schemas", [0, 1, 2, 3, 4, 5]) == {
        0: (0, 2), 1: (0, 2), 2: (2, 3), 3: (2, 3), 4: (4, 4), 5: (5, 4)}

    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("_schemas", b"after-adoption", partition=0)
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "epochs",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("_schemas", 0, 4)])
    message = consumer.consume(1, 10)[0]
    assert message.value() == b"after-adoption" and message.offset() == 4
    assert message.leader_epoch() == 5             # above every epoch the log holds
    consumer.close()

    broker.restart()                               # a clean restart keeps every entry
    assert epochs(data, "_schemas-0") == [(0, 0), (2, 2), (4, 3), (5, 4)]
    assert offset_for_leader_epoch(broker.bootstrap, "_schemas", [4, 5]) == {
        4: (4, 4), 5: (5, 5)}


def test_missing_epoch_checkpoint_is_rebuilt_from_the_batches(broker_process, kafka_fixtures,
                                                              tmp_path):
    data = copy_fixture(kafka_fixtures, KRAFT, tmp_path)
    os.remove(data / "_schemas-0" / "leader-epoch-checkpoint")
    broker = broker_process(log_dirs=str(data), broker_id=1, **BROKER)
    assert epochs(data, "_schemas-0") == [(0, 0), (2, 2), (4, 3), (5, 4)]
    assert offset_for_leader_epoch(broker.bootstrap, "_schemas", [2])[2] == (2, 3)


def test_cluster_metadata_is_not_a_topic(broker_process, kafka_fixtures, tmp_path):
    data = copy_fixture(kafka_fixtures, KRAFT, tmp_path)
    before = tree_digest(data / "__cluster_metadata-0")
    broker = broker_process(log_dirs=str(data), broker_id=1, **BROKER)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = admin.list_topics(timeout=10).topics
    assert "__cluster_metadata" not in topics
    assert {"_schemas", "locations", "__consumer_offsets", "__transaction_state"} <= set(topics)
    assert len(topics["__transaction_state"].partitions) == 50

    # Not in Metadata when asked for by name, not auto-created, not writable, not creatable.
    asked = admin.list_topics("__cluster_metadata", timeout=10).topics["__cluster_metadata"]
    assert asked.error is not None and asked.error.code() == 3       # UNKNOWN_TOPIC_OR_PARTITION
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 3000})
    failures = []
    producer.produce("__cluster_metadata", b"x", partition=0,
                     on_delivery=lambda err, msg: failures.append(err))
    producer.flush(10)
    assert failures and failures[0] is not None, failures
    with pytest.raises(KafkaException) as refused:
        admin.create_topics([NewTopic("__cluster_metadata", 1, 1)])["__cluster_metadata"] \
            .result(10)
    assert refused.value.args[0].code() == 42                       # INVALID_REQUEST
    assert "Creation of internal topic __cluster_metadata is prohibited." in \
        refused.value.args[0].str()

    listed = subprocess.run([str(ROOT / "bin" / "kafka-topics.sh"), "--bootstrap-server",
                             broker.bootstrap, "--list"], capture_output=True, text=True,
                            timeout=60)
    assert "__cluster_metadata" not in listed.stdout and "__transaction_state" in listed.stdout
    assert broker.stop() == 0
    assert tree_digest(data / "__cluster_metadata-0") == before


def test_a_stale_registration_of_cluster_metadata_is_dropped(broker_process, kafka_fixtures,
                                                              tmp_path):
    """A kbroker from before this fix registered __cluster_metadata as a topic in its metadata
    file: the registration goes, the log stays unopened and unlisted."""
    import json
    data = copy_fixture(kafka_fixtures, KRAFT, tmp_path)
    broker = broker_process(log_dirs=str(data), broker_id=1, **BROKER)
    assert broker.stop() == 0
    state = json.loads((data / "kbroker-metadata.json").read_text())
    state["topics"]["__cluster_metadata"] = {
        "topic_id": "00000000000000000000000000000001", "configs": {},
        "partitions": {"0": {"replicas": [1], "leader_epoch": 0}}}
    (data / "kbroker-metadata.json").write_text(json.dumps(state))
    before = tree_digest(data / "__cluster_metadata-0")
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert "__cluster_metadata" not in admin.list_topics(timeout=10).topics
    assert broker.stop() == 0
    assert tree_digest(data / "__cluster_metadata-0") == before
    assert "__cluster_metadata" not in json.loads(
        (data / "kbroker-metadata.json").read_text())["topics"]


def start_broker(data, broker_id) -> subprocess.CompletedProcess:
    """`python -m broker` on `data` with `broker_id`, run to its exit (a refusal)."""
    command = [sys.executable, "-m", "broker", str(SERVER_PROPERTIES),
               "--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
               "--override", f"log.dirs={data}", "--override", f"broker.id={broker_id}"]
    return subprocess.run(command, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=60)


def test_meta_properties_mismatch_is_one_line(kafka_fixtures, tmp_path):
    data = copy_fixture(kafka_fixtures, KRAFT, tmp_path)          # node.id=1, version 1
    before = tree_digest(data)
    refused = start_broker(data, 0)
    assert refused.returncode == 1, refused.stderr
    errors = [line for line in refused.stderr.splitlines() if "INFO" not in line]
    assert errors == [
        "kbroker: Configured broker.id 0 doesn't match stored node.id Some(1) in "
        "meta.properties. If you moved your data, make sure your configured broker.id "
        "matches. If you intend to create a new broker, you should remove all data in your "
        "data directories (log.dirs)."], refused.stderr
    assert tree_digest(data) == before              # nothing written, not even kbroker's metadata

    zk_dir = copy_fixture(kafka_fixtures, "kafka-3.4.0", tmp_path)   # broker.id=0, version 0
    refused = start_broker(zk_dir, 3)
    assert refused.returncode == 1
    assert "kbroker: Configured broker.id 3 doesn't match stored broker.id Some(0)" in \
        refused.stderr
    assert "Traceback" not in refused.stderr


def test_meta_properties_without_cluster_id_gets_one(broker_process, kafka_fixtures, tmp_path):
    data = copy_fixture(kafka_fixtures, "kafka-3.4.0", tmp_path)
    (data / "meta.properties").write_text("version=0\nbroker.id=0\n")
    broker = broker_process(log_dirs=str(data), **BROKER)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    cluster_id = admin.describe_cluster().result(10).cluster_id
    text = (data / "meta.properties").read_text()
    assert f"cluster.id={cluster_id}\n" in text and "broker.id=0\n" in text
    assert "version=0\n" in text


def test_kraft_meta_properties_is_kept_as_kafka_wrote_it(broker_process, kafka_fixtures,
                                                         tmp_path):
    data = copy_fixture(kafka_fixtures, KRAFT, tmp_path)
    before = (data / "meta.properties").read_bytes()
    broker = broker_process(log_dirs=str(data), broker_id=1, **BROKER)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert admin.describe_cluster().result(10).cluster_id == "OTMwNzFhYTY1ODNiNGE5OQ"
    assert broker.stop() == 0
    assert (data / "meta.properties").read_bytes() == before
