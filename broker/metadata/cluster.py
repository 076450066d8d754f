"""The metadata backend of a broker in a ZooKeeper-mode cluster (`zookeeper.connect` set).

Two sources, as in Kafka 3.9's ZooKeeper mode:
- topics, partitions (replicas, leader, leader epoch, ISR, offline replicas), the live brokers
  with their endpoints and racks, and the controller id come from the controller's
  UpdateMetadata requests (`apply_update_metadata`, Kafka's ZkMetadataCache). The cache is
  empty until the first one arrives;
- topic configs, dynamic broker configs and client quotas are read from ZooKeeper
  (/config/topics, /config/brokers, /config/users|clients|ips) at start-up and again when a
  /config/changes notification names them (broker/cluster.py).

Reads are served from memory, as the MetadataStore contract says. Writes do not go through
here: the admin paths write ZooKeeper (broker/kafka_zk.py), the controller reacts, and its
UpdateMetadata brings the result back; `wait_until` lets a request wait for that.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import urllib.parse
import uuid

from broker import zk_data as zd
from broker.quotas import keys_for, zk_quota_text
from broker.metadata.store import MetadataStore, PartitionState, TopicMetadata

log = logging.getLogger(__name__)

LEADER_DURING_DELETE = -2
ZERO_UUID = uuid.UUID(int=0)


@dataclasses.dataclass(frozen=True)
class LiveBroker:
    id: int
    endpoints: dict          # listener name -> (host, port)
    rack: str | None = None


def quota_entity_from_path(entity_type: str, name: str):
    """(/config/<type>/<name>) -> the quota entity tuple broker/quotas.py uses, or None."""
    def unsanitize(text):
        return None if text == zd.DEFAULT_ENTITY else urllib.parse.unquote(text)
    if entity_type == "users":
        user, sep, client = name.partition("/clients/")
        entity = [("user", unsanitize(user))]
        if sep:
            entity.append(("client-id", unsanitize(client)))
    elif entity_type == "clients":
        entity = [("client-id", unsanitize(name))]
    elif entity_type == "ips":
        entity = [("ip", unsanitize(name))]
    else:
        return None
    return tuple(sorted(entity))


def quota_entity_path(entity: tuple) -> tuple:
    """The inverse: entity tuple -> (entity type, name below /config/<type>)."""
    def sanitize(text):
        # Kafka's Sanitizer (Java's URLEncoder): '~' is encoded too
        return zd.DEFAULT_ENTITY if text is None else \
            urllib.parse.quote(text, safe="").replace("~", "%7E")
    parts = dict(entity)
    if "user" in parts:
        name = sanitize(parts["user"])
        if "client-id" in parts:
            name += "/clients/" + sanitize(parts["client-id"])
        return "users", name
    if "client-id" in parts:
        return "clients", sanitize(parts["client-id"])
    return "ips", sanitize(parts.get("ip"))


class ClusterMetadataStore(MetadataStore):
    def __init__(self, cluster_id: str):
        super().__init__()
        self._cluster_id = cluster_id
        self.controller_id = -1
        self.controller_epoch = -1
        self.live_brokers: dict[int, LiveBroker] = {}
        self._topic_configs: dict[str, dict] = {}
        self._waiters: list = []

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    def load(self) -> None:
        """Nothing to read synchronously: `load_from_zookeeper` reads the configs."""

    def _persist(self) -> None:
        """Nothing: the cluster's state lives in ZooKeeper."""

    async def load_from_zookeeper(self, kzk) -> None:
        self._topic_configs = await kzk.get_all_entity_configs("topics")
        brokers = await kzk.get_all_entity_configs("brokers")
        self._broker_configs = {("" if name == zd.DEFAULT_ENTITY else name): values
                                for name, values in brokers.items() if values}
        quotas = {}
        for entity_type in ("users", "clients", "ips"):
            for name, values in (await kzk.get_all_entity_configs(entity_type)).items():
                self._add_quota(quotas, entity_type, name, values)
            if entity_type == "users":
                for user in await kzk.zk.children("/config/users") or []:
                    for client in await kzk.zk.children(f"/config/users/{user}/clients") or []:
                        name = f"{user}/clients/{client}"
                        try:
                            values = await kzk.get_entity_config("users", name)
                        except zd.ZNodeDataError as exc:    # hand-edited: as Kafka, skipped
                            log.error("Ignoring the quotas of %s: %s", name, exc)
                            continue
                        self._add_quota(quotas, "users", name, values)
        self._client_quotas = quotas
        self.version += 1

    @staticmethod
    def _add_quota(quotas: dict, entity_type: str, name: str, values: dict) -> None:
        entity = quota_entity_from_path(entity_type, name)
        if entity is None:
            return
        numeric = {}
        known = keys_for(entity)
        for key, value in values.items():
            if key not in known:
                continue                # e.g. a user's SCRAM credentials, same znode
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if not math.isfinite(number):       # Kafka's toLong/toDouble refuse nan and inf
                log.error("Ignoring quota %s=%r of /config/%s/%s: not a number", key, value,
                          entity_type, name)
                continue
            numeric[key] = number
        if numeric:
            quotas[entity] = numeric

    # -- configs (kept current by the config change listener) --------------------------------

    def topic_config(self, name: str) -> dict:
        return dict(self._topic_configs.get(name, {}))

    def set_cached_topic_config(self, name: str, configs: dict) -> None:
        if configs:
            self._topic_configs[name] = dict(configs)
        else:
            self._topic_configs.pop(name, None)
        topic = self._topics.get(name)
        if topic is not None:
            topic.configs = dict(configs)
        self._bump()

    def set_cached_broker_config(self, broker_id: int | None, configs: dict) -> None:
        key = "" if broker_id is None else str(broker_id)
        if configs:
            self._broker_configs[key] = dict(configs)
        else:
            self._broker_configs.pop(key, None)
        self._bump()

    def set_cached_quota(self, entity_type: str, name: str, values: dict) -> None:
        entity = quota_entity_from_path(entity_type, name)
        if entity is None:
            return
        self._client_quotas.pop(entity, None)
        self._add_quota(self._client_quotas, entity_type, name, values)
        self._bump()

    # -- writes (to ZooKeeper, with a /config/changes notification every broker applies) --

    kzk = None          # set by broker/cluster.py once connected

    async def write_broker_config(self, broker_id: int | None, configs: dict) -> None:
        name = zd.DEFAULT_ENTITY if broker_id is None else str(broker_id)
        await self.kzk.set_entity_config("brokers", name, configs)
        self.set_cached_broker_config(broker_id, configs)

    async def write_client_quotas(self, changes: dict) -> None:
        """`changes`: {entity: its quota values after the change}. As Kafka's
        ZkAdminManager.alterClientQuotas, the znode's other properties (a user's SCRAM
        credentials) stay, and values are written as Kafka brokers read them."""
        for entity, values in changes.items():
            entity_type, name = quota_entity_path(entity)
            try:
                props = await self.kzk.get_entity_config(entity_type, name)
            except zd.ZNodeDataError as exc:
                log.error("Rewriting unreadable /config/%s/%s: %s", entity_type, name, exc)
                props = {}
            keys = keys_for(entity)
            props = {k: v for k, v in props.items() if k not in keys}
            props.update({k: zk_quota_text(entity, k, v) for k, v in values.items()})
            await self.kzk.set_entity_config(entity_type, name, props)
            self.set_cached_quota(entity_type, name, values)

    # -- UpdateMetadata ------------------------------------------------------------------------

    def apply_update_metadata(self, request) -> list:
        """Kafka's ZkMetadataCache.updateMetadata: the live brokers are replaced, the partition
        states in the request replace the cached ones, and leader -2 removes a partition (its
        topic is being deleted). Returns those deleted partitions, [(topic, partition)]."""
        self.controller_id = request.controller_id
        self.controller_epoch = request.controller_epoch
        self.live_brokers = {
            b.id: LiveBroker(b.id, {ep.listener: (ep.host, ep.port) for ep in b.endpoints},
                             b.rack)
            for b in request.live_brokers}
        deleted = []
        for topic_state in request.topic_states or []:
            name = topic_state.topic_name
            for ps in topic_state.partition_states:
                self._apply_partition(name, topic_state.topic_id, ps)
                if ps.leader == LEADER_DURING_DELETE:
                    deleted.append((name, ps.partition_index))
        self._bump()
        return deleted

    def _apply_partition(self, name: str, topic_id, ps) -> None:
        topic = self._topics.get(name)
        if ps.leader == LEADER_DURING_DELETE:
            if topic is not None:
                topic.partitions.pop(ps.partition_index, None)
                if not topic.partitions:
                    self._topics.pop(name, None)
                    self._by_id.pop(topic.topic_id, None)
                    self._topic_configs.pop(name, None)     # a topic of that name comes anew
            return
        if topic is None or (topic_id not in (None, ZERO_UUID) and topic.topic_id != topic_id):
            if topic is not None:                           # deleted and made again
                self._by_id.pop(topic.topic_id, None)
                self._topic_configs.pop(name, None)
            topic = TopicMetadata(name, topic_id or ZERO_UUID, {},
                                  dict(self._topic_configs.get(name, {})))
            self._topics[name] = topic
            self._by_id[topic.topic_id] = topic
        topic.partitions[ps.partition_index] = PartitionState(
            list(ps.replicas), ps.leader_epoch, ps.leader, list(ps.isr),
            list(ps.offline_replicas or []))
        if len(topic.partitions) > 1 and list(topic.partitions) != sorted(topic.partitions):
            topic.partitions = dict(sorted(topic.partitions.items()))

    def _bump(self) -> None:
        self.version += 1
        waiters, self._waiters = self._waiters, []
        for predicate, future in waiters:
            if future.done():
                continue
            try:
                ok = predicate()
            except Exception as exc:                  # noqa: BLE001
                future.set_exception(exc)
                continue
            if ok:
                future.set_result(True)
            else:
                self._waiters.append((predicate, future))

    async def wait_until(self, predicate, timeout_s: float) -> bool:
        """Wait until `predicate()` holds after a metadata change; False on timeout."""
        if predicate():
            return True
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((predicate, future))
        try:
            async with asyncio.timeout(timeout_s):       # not wait_for: it can swallow a cancel
                return await future
        except asyncio.TimeoutError:
            return False

    # -- what handlers ask -------------------------------------------------------------------

    def brokers_for_listener(self, listener: str) -> list:
        """[(id, host, port, rack)] of live brokers with that listener, by id."""
        out = []
        for broker_id in sorted(self.live_brokers):
            b = self.live_brokers[broker_id]
            endpoint = b.endpoints.get(listener)
            if endpoint is not None:
                out.append((broker_id, endpoint[0], endpoint[1], b.rack))
        return out

    def has_leaders(self, name: str, partitions=None) -> bool:
        topic = self._topics.get(name)
        if topic is None:
            return False
        wanted = topic.partitions if partitions is None else partitions
        return all(p in topic.partitions and topic.partitions[p].leader >= 0 for p in wanted)
