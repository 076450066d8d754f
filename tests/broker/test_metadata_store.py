"""The local metadata store: persistence, atomic rewrites, cluster id."""
import json
import os
import uuid

import pytest

from broker.metadata.local import FILE_NAME, LocalMetadataStore


def test_round_trip(tmp_path):
    store = LocalMetadataStore(tmp_path)
    store.load()
    cluster_id = store.cluster_id
    assert len(cluster_id) == 22
    topic_id = uuid.uuid4()
    store.create_topic("orders", topic_id, {0: [0], 1: [0]}, {"retention.ms": "1000"})
    store.add_partitions("orders", {2: [0]})
    store.set_leader_epoch("orders", 2, 4)
    store.set_broker_config(None, {"log.retention.bytes": "5"})
    store.set_broker_config(0, {"num.partitions": "3"})
    version = store.version

    again = LocalMetadataStore(tmp_path)
    again.load()
    assert again.cluster_id == cluster_id
    topic = again.get_topic("orders")
    assert topic.topic_id == topic_id and again.get_topic_by_id(topic_id) is topic
    assert list(topic.partitions) == [0, 1, 2]
    assert topic.partitions[2].leader_epoch == 4 and topic.partitions[0].replicas == [0]
    assert again.topic_config("orders") == {"retention.ms": "1000"}
    assert again.broker_config(None) == {"log.retention.bytes": "5"}
    assert again.broker_config(0) == {"num.partitions": "3"}
    assert version >= 5


def test_delete_and_errors(tmp_path):
    store = LocalMetadataStore(tmp_path)
    store.load()
    store.create_topic("a", uuid.uuid4(), {0: [0]})
    with pytest.raises(KeyError):
        store.create_topic("a", uuid.uuid4(), {0: [0]})
    with pytest.raises(KeyError):
        store.add_partitions("a", {0: [0]})
    deleted = store.delete_topic("a")
    assert store.get_topic("a") is None and store.get_topic_by_id(deleted.topic_id) is None
    again = LocalMetadataStore(tmp_path)
    again.load()
    assert again.list_topics() == []


def test_leftover_tmp_is_ignored(tmp_path):
    store = LocalMetadataStore(tmp_path)
    store.load()
    store.create_topic("a", uuid.uuid4(), {0: [0]})
    (tmp_path / (FILE_NAME + ".tmp")).write_text("{half a writ")   # a crash mid-rewrite
    again = LocalMetadataStore(tmp_path)
    again.load()
    assert [t.name for t in again.list_topics()] == ["a"]
    assert json.loads((tmp_path / FILE_NAME).read_text())["version"] == 1


def test_cluster_id_from_existing_meta_properties(tmp_path):
    (tmp_path / "meta.properties").write_text(
        "#\nversion=0\nbroker.id=0\ncluster.id=abcdefghijklmnopqrstuv\n")
    store = LocalMetadataStore(tmp_path)
    store.load()
    assert store.cluster_id == "abcdefghijklmnopqrstuv"


def test_configured_cluster_id_for_a_new_dir(tmp_path):
    store = LocalMetadataStore(tmp_path / "new", cluster_id="MyCluster")
    store.load()
    assert store.cluster_id == "MyCluster"
    assert os.path.exists(tmp_path / "new" / FILE_NAME)
