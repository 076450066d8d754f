"""The local metadata backend: one JSON file in the first log dir.

Used when `zookeeper.connect` is not set (one broker). File `kbroker-metadata.json`:

    {"version": 1,
     "cluster_id": "<22 chars, base64url of a random UUID, as Kafka's Uuid.toString>",
     "topics": {"<name>": {"topic_id": "<uuid hex>",
                           "partitions": {"0": {"replicas": [0], "leader_epoch": 0}, ...},
                           "configs": {"retention.ms": "1000"}}},
     "broker_configs": {"": {...cluster default...}, "0": {...broker 0...}},
     "client_quotas": [{"entity": [["client-id", null], ["user", "alice"]],
                        "values": {"producer_byte_rate": 1024.0}}, ...]}

(null names the default entity of its type; a file without "client_quotas" has none.)

Crash policy: every change rewrites the whole file atomically (write `<file>.tmp`, fsync, rename
over the old one, fsync the directory: storage.files.fs.write_atomically, the seam the crash
tests fail on purpose), so after a crash the file is the old or the new state,
never a mix. A leftover `.tmp` is ignored and overwritten. The file is small (one entry per
topic partition), and changes are admin operations, so rewriting it whole is fine.

Cluster id on first start: `cluster.id` from an existing meta.properties in the log dir (a dir
written by Apache Kafka keeps its id), else the `cluster.id` property, else a new random one.
"""
from __future__ import annotations

import base64
import json
import os
import uuid

from storage import files

from broker.metadata.store import MetadataStore, PartitionState, TopicMetadata

FILE_NAME = "kbroker-metadata.json"
FORMAT_VERSION = 1


def new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class LocalMetadataStore(MetadataStore):
    def __init__(self, log_dir: str, cluster_id: str | None = None):
        super().__init__()
        self.log_dir = os.fspath(log_dir)
        self.path = os.path.join(self.log_dir, FILE_NAME)
        self._cluster_id = cluster_id

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    def load(self) -> None:
        os.makedirs(self.log_dir, exist_ok=True)
        try:
            with open(self.path, encoding="utf-8") as f:
                state = json.load(f)
        except FileNotFoundError:
            self._cluster_id = _meta_properties_cluster_id(self.log_dir) or self._cluster_id \
                or new_cluster_id()
            self._persist()
            return
        if state.get("version") != FORMAT_VERSION:
            raise ValueError(f"{self.path}: unsupported metadata format {state.get('version')}")
        self._cluster_id = state["cluster_id"]
        for name, entry in state["topics"].items():
            topic = TopicMetadata(
                name, uuid.UUID(hex=entry["topic_id"]),
                {int(p): PartitionState(list(s["replicas"]), int(s["leader_epoch"]))
                 for p, s in entry["partitions"].items()},
                dict(entry.get("configs", {})))
            topic.partitions = dict(sorted(topic.partitions.items()))
            self._topics[name] = topic
            self._by_id[topic.topic_id] = topic
        self._broker_configs = {k: dict(v) for k, v in state.get("broker_configs", {}).items()}
        self._client_quotas = {
            tuple(sorted((str(t), None if n is None else str(n)) for t, n in item["entity"])):
                {str(k): float(v) for k, v in item["values"].items()}
            for item in state.get("client_quotas", [])}

    def _persist(self) -> None:
        state = {
            "version": FORMAT_VERSION,
            "cluster_id": self._cluster_id,
            "topics": {
                t.name: {"topic_id": t.topic_id.hex,
                         "partitions": {str(p): {"replicas": s.replicas,
                                                 "leader_epoch": s.leader_epoch}
                                        for p, s in t.partitions.items()},
                         "configs": t.configs}
                for t in self._topics.values()},
            "broker_configs": self._broker_configs,
            "client_quotas": [{"entity": [list(pair) for pair in entity], "values": values}
                              for entity, values in sorted(
                                  self._client_quotas.items(),
                                  key=lambda item: [(t, n or "") for t, n in item[0]])],
        }
        files.fs.write_atomically(self.path, json.dumps(state, indent=1, sort_keys=True).encode())


def _meta_properties_cluster_id(log_dir: str) -> str | None:
    try:
        with open(os.path.join(log_dir, "meta.properties"), encoding="utf-8") as f:
            for line in f:
                key, sep, value = line.strip().partition("=")
                if sep and key.strip() == "cluster.id" and value.strip():
                    return value.strip()
    except FileNotFoundError:
        pass
    return None
