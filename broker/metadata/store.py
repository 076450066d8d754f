"""The metadata store interface every backend implements (local file now, ZooKeeper later).

What it holds is what Kafka keeps in ZooKeeper under /brokers/topics, /config/topics and
/config/brokers: per topic its topic id (a UUID, KIP-516), each partition's replica list and
leader epoch, and the topic's config overrides; dynamic broker configs per broker id and the
cluster-wide default; client quotas per entity (/config/users, /config/clients, /config/ips:
{entity tuple: {key: float}}, see broker/quotas.py); the cluster id.

Contract:
- Reads (`list_topics`, `get_topic`, `get_topic_by_id`, `topic_config`, `broker_config`) are
  served from memory and never block.
- Writes persist before they return (the local backend writes its file atomically), then bump
  `version`, which readers use to invalidate caches (the Metadata response cache).
- Writes validate only what the store itself needs (the topic exists / does not exist); naming,
  partition counts and config values are checked by the TopicManager and the handlers.
- Concurrency: on the event loop thread. Local writes do a small fsync'ed file write, which is
  rare (admin operations), so they run inline.
"""
from __future__ import annotations

import abc
import dataclasses
import uuid


@dataclasses.dataclass
class PartitionState:
    replicas: list            # broker ids, preferred leader first
    leader_epoch: int = 0
    # In a cluster, what the controller's UpdateMetadata says (None on a single broker, where
    # the first replica leads and the ISR is the replica layer's).
    leader_id: int | None = None
    isr: list | None = None
    offline_replicas: list = dataclasses.field(default_factory=list)

    @property
    def leader(self) -> int:
        if self.leader_id is not None:
            return self.leader_id
        return self.replicas[0] if self.replicas else -1


@dataclasses.dataclass
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    partitions: dict          # partition index -> PartitionState
    configs: dict = dataclasses.field(default_factory=dict)   # topic config overrides (str -> str)

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


class MetadataStore(abc.ABC):
    """Backends keep `_topics` (name -> TopicMetadata) in memory; see the module docstring."""

    def __init__(self):
        self._topics: dict[str, TopicMetadata] = {}
        self._by_id: dict[uuid.UUID, TopicMetadata] = {}
        self._broker_configs: dict[str, dict] = {}   # "" = cluster default, else str(broker id)
        self._client_quotas: dict[tuple, dict] = {}  # entity tuple -> {quota key: float}
        self.version = 0

    # -- lifecycle
    @property
    @abc.abstractmethod
    def cluster_id(self) -> str: ...

    @abc.abstractmethod
    def load(self) -> None:
        """Read the persisted state (start-up)."""

    @abc.abstractmethod
    def _persist(self) -> None:
        """Durably write the current state (called after every change)."""

    def close(self) -> None:
        pass

    # -- reads
    def list_topics(self) -> list:
        return list(self._topics.values())

    def get_topic(self, name: str) -> TopicMetadata | None:
        return self._topics.get(name)

    def get_topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self._by_id.get(topic_id)

    def topic_config(self, name: str) -> dict:
        topic = self._topics.get(name)
        return dict(topic.configs) if topic is not None else {}

    def broker_config(self, broker_id: int | None) -> dict:
        """Dynamic configs of one broker, or the cluster default when broker_id is None."""
        return dict(self._broker_configs.get(_broker_key(broker_id), {}))

    def client_quotas(self) -> dict:
        """{entity tuple ((type, name or None), ...) sorted by type: {key: float}}."""
        return {entity: dict(values) for entity, values in self._client_quotas.items()}

    # -- writes
    def create_topic(self, name: str, topic_id: uuid.UUID, assignments: dict,
                     configs: dict | None = None,
                     leader_epochs: dict | None = None) -> TopicMetadata:
        """`leader_epochs`: {partition: first leader epoch} (default 0)."""
        if name in self._topics:
            raise KeyError(f"topic {name} already exists")
        epochs = leader_epochs or {}
        topic = TopicMetadata(name, topic_id,
                              {p: PartitionState(list(r), epochs.get(p, 0))
                               for p, r in sorted(assignments.items())},
                              dict(configs or {}))
        self._topics[name] = topic
        self._by_id[topic_id] = topic
        self._changed()
        return topic

    def delete_topic(self, name: str) -> TopicMetadata:
        topic = self._topics.pop(name)
        self._by_id.pop(topic.topic_id, None)
        self._changed()
        return topic

    def add_partitions(self, name: str, assignments: dict) -> TopicMetadata:
        topic = self._topics[name]
        for partition, replicas in sorted(assignments.items()):
            if partition in topic.partitions:
                raise KeyError(f"partition {name}-{partition} already exists")
            topic.partitions[partition] = PartitionState(list(replicas))
        self._changed()
        return topic

    def set_leader_epoch(self, name: str, partition: int, leader_epoch: int) -> None:
        self.set_leader_epochs({(name, partition): leader_epoch})

    def set_leader_epochs(self, epochs: dict) -> None:
        """{(topic, partition): leader epoch}, in one write."""
        for (name, partition), leader_epoch in epochs.items():
            self._topics[name].partitions[partition].leader_epoch = leader_epoch
        self._changed()

    def set_topic_config(self, name: str, configs: dict) -> None:
        """Replace the topic's overrides with `configs` ({name: str})."""
        self._topics[name].configs = dict(configs)
        self._changed()

    def set_broker_config(self, broker_id: int | None, configs: dict) -> None:
        """Replace the dynamic configs of a broker (None: the cluster default)."""
        key = _broker_key(broker_id)
        if configs:
            self._broker_configs[key] = dict(configs)
        else:
            self._broker_configs.pop(key, None)
        self._changed()

    def set_client_quotas(self, changes: dict) -> None:
        """Replace the values of each entity in {entity tuple: {key: float}} (empty: remove
        the entity), all in one write."""
        for entity, values in changes.items():
            if values:
                self._client_quotas[tuple(entity)] = {k: float(v) for k, v in values.items()}
            else:
                self._client_quotas.pop(tuple(entity), None)
        self._changed()

    # -- writes as the admin handlers make them (a cluster's backend writes ZooKeeper)
    async def write_broker_config(self, broker_id: int | None, configs: dict) -> None:
        self.set_broker_config(broker_id, configs)

    async def write_client_quotas(self, changes: dict) -> None:
        self.set_client_quotas(changes)

    def _changed(self):
        self._persist()
        self.version += 1


def _broker_key(broker_id):
    return "" if broker_id is None else str(broker_id)
