"""The cluster view: bootstrap, metadata, one connection per broker, leader routing, retries.

``ClusterClient`` is the root object the producer, consumer, admin client, tools and (later) broker
replication share. It connects to the first reachable bootstrap server, asks for Metadata and keeps
the answer (brokers, controller, topics with partitions, leaders and epochs). Requests go to a node
id; ``connection(node_id)`` opens and caches the connection (one per broker, pipelined).

Retries (``retry``): an operation is retried when it fails with a retriable Kafka error
(``protocol.errors.RETRIABLE``: NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS,
...) or a broken/timed-out connection; before each retry the client waits ``retry.backoff.ms``
and refreshes metadata, so the next attempt goes to the new leader. Attempts are bounded by count
and by ``default.api.timeout.ms``.
"""
from __future__ import annotations

import asyncio
import time
from typing import NamedTuple

from protocol.errors import RETRIABLE, ErrorCode, KafkaError
from protocol.messages import FindCoordinatorRequest, MetadataRequest

from broker.client.connection import BrokerConnection
from broker.client.errors import ClientError, KafkaConnectionError, KafkaTimeoutError
from broker.client.types import BrokerInfo, PartitionInfo

BOOTSTRAP_NODE_BASE = -1    # bootstrap connections get ids -1, -2, ... like Kafka's


class TopicMetadata(NamedTuple):
    name: str
    error_code: int
    topic_id: object
    is_internal: bool
    partitions: dict        # partition index -> PartitionInfo


def parse_bootstrap(servers) -> list[tuple[str, int]]:
    """'host:port,host2:port2' (or a list) -> [(host, port)]; raises ValueError naming the bad entry."""
    if isinstance(servers, str):
        servers = [s for s in servers.split(",") if s.strip()]
    out = []
    for entry in servers:
        entry = entry.strip()
        # like Kafka's ClientUtils, a listener prefix ("PLAINTEXT://host:port") is allowed and skipped
        host, sep, port = entry.rpartition("/")[2].rpartition(":")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise ValueError(f"Invalid url in bootstrap.servers: {entry}")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("No resolvable bootstrap urls given in bootstrap.servers")
    return out


def is_retriable(error: BaseException) -> bool:
    if isinstance(error, KafkaError):
        return int(error.error_code) in RETRIABLE
    return isinstance(error, ClientError) and error.retriable


class ClusterClient:
    def __init__(self, bootstrap_servers, *, client_id: str = "kbroker-client",
                 request_timeout_ms: int = 30000, default_api_timeout_ms: int = 60000,
                 retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 1000,
                 retries: int = 2**31 - 1, connect_timeout_ms: int = 10000):
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.default_api_timeout_ms = default_api_timeout_ms
        self.retry_backoff = retry_backoff_ms / 1000
        self.retry_backoff_max = max(retry_backoff_max_ms, retry_backoff_ms) / 1000
        self.retries = retries
        self.connect_timeout_ms = connect_timeout_ms
        self.brokers: dict[int, BrokerInfo] = {}
        self.controller_id = -1
        self.cluster_id = None
        self.topics: dict[str, TopicMetadata] = {}
        self._connections: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Lock] = {}
        self._bootstrap_conn: BrokerConnection | None = None

    async def __aenter__(self):
        await self.start()
        return self

    async def __aexit__(self, *exc):
        await self.close()

    # --- connections -------------------------------------------------------------------------

    async def start(self) -> None:
        await self._connect_bootstrap()
        await self.refresh_metadata([])

    async def _connect_bootstrap(self) -> BrokerConnection:
        if self._bootstrap_conn is not None and self._bootstrap_conn.connected:
            return self._bootstrap_conn
        errors = []
        for i, (host, port) in enumerate(self.bootstrap):
            conn = self._new_connection(host, port, BOOTSTRAP_NODE_BASE - i)
            try:
                self._bootstrap_conn = await conn.connect()
                return conn
            except (ClientError, KafkaError) as e:
                await conn.close()
                errors.append(str(e))
        servers = ",".join(f"{h}:{p}" for h, p in self.bootstrap)
        error = KafkaConnectionError(f"Could not connect to any bootstrap server {servers} ({errors[-1]})")
        # Never reached a broker: a wrong address or a cluster that is down, reported at once
        # rather than after default.api.timeout.ms. A cluster known before is worth waiting for.
        error.retriable = bool(self.brokers)
        raise error

    def _new_connection(self, host, port, node_id) -> BrokerConnection:
        return BrokerConnection(host, port, client_id=self.client_id, node_id=node_id,
                                request_timeout_ms=self.request_timeout_ms,
                                connect_timeout_ms=self.connect_timeout_ms, close_on_timeout=True)

    async def connection(self, node_id: int) -> BrokerConnection:
        conn = self._connections.get(node_id)
        if conn is not None and conn.connected:
            return conn
        lock = self._connecting.setdefault(node_id, asyncio.Lock())
        async with lock:
            conn = self._connections.get(node_id)
            if conn is not None and conn.connected:
                return conn
            if conn is not None:
                await conn.close()
            broker = self.brokers.get(node_id)
            if broker is None:
                await self.refresh_metadata()
                broker = self.brokers.get(node_id)
                if broker is None:
                    raise KafkaConnectionError(f"Node {node_id} is not in the cluster metadata")
            conn = await self._new_connection(broker.host, broker.port, node_id).connect()
            self._connections[node_id] = conn
            return conn

    async def any_connection(self) -> BrokerConnection:
        for conn in self._connections.values():
            if conn.connected:
                return conn
        for node_id in list(self.brokers):
            try:
                return await self.connection(node_id)
            except KafkaConnectionError:
                continue
        return await self._connect_bootstrap()

    async def send(self, node_id: int | None, request, *, cap: int | None = None, version: int | None = None,
                   expect_response: bool = True, timeout: float | None = None):
        """Send to ``node_id`` (None: any broker) and return the response."""
        conn = await (self.any_connection() if node_id is None else self.connection(node_id))
        return await conn.send(request, version, cap=cap, expect_response=expect_response, timeout=timeout)

    async def close(self) -> None:
        conns = list(self._connections.values())
        if self._bootstrap_conn is not None:
            conns.append(self._bootstrap_conn)
        self._connections.clear()
        self._bootstrap_conn = None
        for conn in conns:
            await conn.close()

    # --- metadata ----------------------------------------------------------------------------

    async def refresh_metadata(self, topics: list | None = None, *, allow_auto_topic_creation: bool = False):
        """Metadata for ``topics`` (None: every topic; []: brokers only) merged into the cache."""
        conn = await self.any_connection()
        version = conn.pick_version(MetadataRequest)
        if topics is None:
            request_topics = None if version >= 1 else []   # v0: an empty list means every topic
        else:
            request_topics = [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
        request = MetadataRequest(topics=request_topics, allow_auto_topic_creation=allow_auto_topic_creation)
        response = await conn.send(request, version)
        self.brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in response.brokers}
        self.controller_id = response.controller_id
        self.cluster_id = response.cluster_id
        if topics is None:
            self.topics = {}
        for t in response.topics:
            if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                self.topics.pop(t.name, None)
                continue
            partitions = {
                p.partition_index: PartitionInfo(t.name, p.partition_index, p.leader_id, p.leader_epoch,
                                                 tuple(p.replica_nodes), tuple(p.isr_nodes),
                                                 tuple(p.offline_replicas), p.error_code)
                for p in t.partitions}
            self.topics[t.name] = TopicMetadata(t.name, t.error_code, t.topic_id, t.is_internal, partitions)
        return response

    async def topic_metadata(self, topic: str, *, auto_create: bool = False, refresh: bool = False) -> TopicMetadata:
        """Partitions of ``topic``; raises KafkaError(UNKNOWN_TOPIC_OR_PARTITION) when it does not exist."""
        meta = self.topics.get(topic)
        if meta is None or refresh or meta.error_code:
            response = await self.refresh_metadata([topic], allow_auto_topic_creation=auto_create)
            for t in response.topics:
                if t.name == topic and t.error_code and t.error_code not in RETRIABLE:
                    raise KafkaError(ErrorCode(t.error_code), f"Topic '{topic}': {ErrorCode(t.error_code).name}")
            meta = self.topics.get(topic)
            if meta is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{topic}' does not exist")
            if meta.error_code:
                raise KafkaError(ErrorCode(meta.error_code), f"Topic '{topic}': {ErrorCode(meta.error_code).name}")
        return meta

    async def leader_for(self, topic: str, partition: int) -> int:
        meta = await self.topic_metadata(topic)
        info = meta.partitions.get(partition)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Partition {topic}-{partition} does not exist")
        if info.leader < 0:
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"No leader for {topic}-{partition}")
        return info.leader

    # --- coordinators ------------------------------------------------------------------------

    async def find_coordinator(self, key: str, key_type: int = 0) -> int:
        """Node id of the group (key_type 0) or transaction (1) coordinator for ``key``."""
        conn = await self.any_connection()
        version = conn.pick_version(FindCoordinatorRequest)
        if version >= 4:
            response = await conn.send(FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key]), version)
            c = response.coordinators[0]
            error, node_id, host, port, message = c.error_code, c.node_id, c.host, c.port, c.error_message
        else:
            response = await conn.send(FindCoordinatorRequest(key=key, key_type=key_type), version)
            error, node_id, host, port = response.error_code, response.node_id, response.host, response.port
            message = getattr(response, "error_message", None)
        if error:
            raise KafkaError(ErrorCode(error), message or f"FindCoordinator for '{key}': {ErrorCode(error).name}")
        if node_id not in self.brokers:
            self.brokers[node_id] = BrokerInfo(node_id, host, port)
        return node_id

    # --- retries -----------------------------------------------------------------------------

    # A topic, partition or leader the metadata lacks is asked about this many times (about
    # 5 s with the default backoff), not for the whole timeout: a tool naming a deleted topic
    # or a leaderless partition answers in seconds. (Kafka's admin client fails some of these
    # at once, describeConfigs of an unknown topic, and waits the timeout out for others.)
    METADATA_ERROR_ATTEMPTS = 10
    _METADATA_ERRORS = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
                                  ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REPLICA_NOT_AVAILABLE,
                                  ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.LISTENER_NOT_FOUND})

    async def retry(self, operation, *, timeout_ms: int | None = None, refresh: bool = True):
        """Run ``await operation()``; retry retriable failures with backoff and a metadata refresh.

        As Kafka's AdminClient: retries are bounded by the call's timeout (``retries`` is
        Integer.MAX_VALUE by default), the backoff doubles from ``retry.backoff.ms`` up to
        ``retry.backoff.max.ms`` (KIP-580), so a call outlives a controller or leader failover
        (connection errors, NOT_CONTROLLER, coordinator errors); errors about what the metadata
        lacks get METADATA_ERROR_ATTEMPTS."""
        deadline = time.monotonic() + (timeout_ms or self.default_api_timeout_ms) / 1000
        attempt = metadata_attempts = 0
        while True:
            try:
                return await operation()
            except (KafkaError, ClientError) as e:
                attempt += 1
                if isinstance(e, KafkaError) and int(e.error_code) in self._METADATA_ERRORS:
                    metadata_attempts += 1
                if not is_retriable(e) or attempt > self.retries or time.monotonic() >= deadline \
                        or metadata_attempts > self.METADATA_ERROR_ATTEMPTS:
                    raise
                await asyncio.sleep(min(self.backoff(attempt), max(0.0, deadline - time.monotonic())))
                if refresh:
                    try:
                        await self.refresh_metadata(list(self.topics) or [])
                    except (KafkaError, ClientError):
                        pass

    def backoff(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based): ``retry.backoff.ms``
        doubling up to ``retry.backoff.max.ms`` (KIP-580's exponential backoff)."""
        return min(self.retry_backoff * 2 ** min(attempt - 1, 30), self.retry_backoff_max)

    def deadline_error(self, what: str) -> KafkaTimeoutError:
        return KafkaTimeoutError(f"Timed out waiting for {what}")
