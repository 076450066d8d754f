"""The broker process: start-up, the listening sockets, periodic tasks and graceful shutdown.

Lifecycle (Kafka's KafkaServer.startup/shutdown, in order):

start():
 1. lock every log dir (``.lock``; another broker holding one stops start-up here, before
    anything in the dirs is read or written), then check every dir's meta.properties (another
    broker's or cluster's dir stops start-up here too, before anything is written);
 2. open the metadata store (first log dir) -> cluster id; apply persisted dynamic broker configs
    and client quotas;
 3. start the LogManager (recovery of every partition dir; blocking: run in an executor);
 4. create the ReplicaManager and make this broker leader of every assigned partition
    (TopicManager.startup);
 5. listen on every `listeners` entry (port 0 picks a free port; `bound_ports` tells which);
 6. schedule the periodic tasks: retention, flush, checkpoints, idle-connection reaper,
    producer id expiry.

In a cluster (`zookeeper.connect`, `_start_cluster`, broker/cluster.py) the cluster id and the
broker id come from ZooKeeper and the metadata store is the controller's UpdateMetadata; the
broker registers in /brokers/ids once its logs are recovered and its listeners bound, and its
partitions arrive with LeaderAndIsr. Its shutdown starts with a controlled shutdown (the
controller moves its leaderships while it still answers), stops the follower fetchers, and ends
by closing the ZooKeeper session (its registration vanishes at once).

shutdown() (SIGTERM/SIGINT; bounded so the process exits within 10 s, or in a cluster 10 s plus
the controlled shutdown's attempts):
 1. stop accepting; pause reading on every connection;
 2. release parked requests (purgatory shutdown: long polls answer with what they have);
 3. wait (at most `DRAIN_TIMEOUT_S`) for in-flight requests to be answered, then close sockets;
 4. shut the LogManager down in an executor: flush, checkpoints, clean-shutdown marker, only if
    it loaded the logs (a start that failed before then leaves the dirs as it found them);
    then the dir locks are released;
 5. close the metadata store.

The `Broker` object is what every handler receives (its attributes are set in `__init__`).
Tests construct it with a BrokerConfig and may inject `log_manager`, `replica_manager` or
`store`.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import os
import socket
import time as _time

from broker.config import BrokerConfig
from broker.connection import ADMITTED, REFUSED, WAITING, Connection
from broker.quotas import QuotaManagers

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 5.0       # in-flight requests get this long at shutdown (exit within 10 s)
ROLL_FLUSH_CHECK_S = 1.0    # how soon a rolled segment is fsynced (storage/log.py needs_flush)


class SystemClock:
    @staticmethod
    def ms() -> int:
        return int(_time.time() * 1000)


class ConnectionServer:
    """The set of live connections: limits, idle reaping, and shutdown draining.

    Limits as Kafka's ConnectionQuotas: a connection beyond `max.connections` waits, unread,
    until another one closes (Kafka's acceptor stops accepting and leaves it in the listen
    backlog; here it is accepted but not read, which a client cannot tell apart). A connection
    beyond `max.connections.per.ip` (or its override) is closed at once, also when it is
    admitted after waiting."""

    def __init__(self, broker):
        self.broker = broker
        self.connections: set = set()
        self.per_ip: dict = {}
        self.waiting: collections.deque = collections.deque()
        self.stopping = False
        self._all_done = None

    def register(self, conn) -> str:
        """ADMITTED (serve it), WAITING (hold it unread; `conn.admit()` is called later) or
        REFUSED (close it)."""
        if self.stopping:
            return REFUSED
        if len(self.connections) >= self.broker.config.max_connections:
            if not self.waiting:
                log.info("max.connections (%d) reached: new connections wait for a free slot",
                         self.broker.config.max_connections)
            self.waiting.append(conn)
            return WAITING
        return ADMITTED if self._take_slot(conn) else REFUSED

    def _take_slot(self, conn) -> bool:
        host = conn.client_host
        limit = self.broker.config.max_connections_for(host)
        if self.per_ip.get(host, 0) >= limit:
            log.warning("Closing connection from %s: max.connections.per.ip (%d) reached",
                        host, limit)
            return False
        self.connections.add(conn)
        self.per_ip[host] = self.per_ip.get(host, 0) + 1
        return True

    def admit_waiting(self) -> None:
        """Give free slots to waiting connections, oldest first."""
        while (self.waiting and not self.stopping
               and len(self.connections) < self.broker.config.max_connections):
            conn = self.waiting.popleft()
            if conn.closed:
                continue
            if self._take_slot(conn):
                conn.admit()
            else:
                conn.close()

    def unregister(self, conn) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            left = self.per_ip.get(conn.client_host, 1) - 1
            if left:
                self.per_ip[conn.client_host] = left
            else:
                self.per_ip.pop(conn.client_host, None)
            self.admit_waiting()
        else:
            try:
                self.waiting.remove(conn)
            except ValueError:
                pass
        self.request_done(conn)

    def request_done(self, conn) -> None:
        if self._all_done is not None and not self._all_done.done() and not any(
                c.in_flight or c.frames for c in self.connections if not c.closed):
            self._all_done.set_result(None)

    def reap_idle(self, now: float, max_idle_s: float) -> int:
        self.admit_waiting()            # max.connections may have been raised meanwhile
        closed = 0
        for conn in list(self.connections):
            if conn.idle and now - conn.last_active > max_idle_s:
                log.info("Closing idle connection %s (connections.max.idle.ms)",
                         conn.connection_id)
                conn.close()
                closed += 1
        return closed

    async def drain(self, timeout: float) -> None:
        """Stop reading and wait for every in-flight request to be answered."""
        self.stopping = True
        while self.waiting:
            self.waiting.popleft().close()
        for conn in list(self.connections):
            if conn.transport is not None and not conn.closed:
                conn.transport.pause_reading()
            conn._wake()
        busy = [c for c in self.connections if not c.closed and (c.in_flight or c.frames)]
        if busy:
            self._all_done = self.broker.loop.create_future()
            try:
                await asyncio.wait_for(asyncio.shield(self._all_done), timeout)
            except asyncio.TimeoutError:
                log.warning("%d connections still busy after %.1f s; closing them",
                            sum(1 for c in self.connections if c.in_flight), timeout)
        for conn in list(self.connections):
            conn.close()


class Broker:
    def __init__(self, config: BrokerConfig, *, time=None, store=None, log_manager=None,
                 replica_manager=None):
        self.config = config
        self.broker_id = config.broker_id if config.broker_id >= 0 else 0
        self.time = time or SystemClock()
        self.loop = None
        self.metadata = store
        self.log_manager = log_manager
        self.replica_manager = replica_manager
        self.group_coordinator = None
        self.txn_coordinator = None         # coordinator/transaction/runtime.py
        self.txn_marker_sender = None       # broker/txn_markers.py
        self.topics = None
        self.cluster = None                 # broker/cluster.py ClusterMembership (ZooKeeper mode)
        self.connections = ConnectionServer(self)
        self.quotas = QuotaManagers(config.get("quota.window.num"),
                                    config.get("quota.window.size.seconds"))
        self.bound_ports: dict = {}         # listener name -> port actually bound
        self._advertised = None
        self._servers: list = []
        self._tasks: list = []
        self._stopped = None
        self._shutting_down = False

    # -- properties handlers use
    @property
    def cluster_id(self) -> str:
        return self.metadata.cluster_id

    @property
    def fetch_purgatory(self):
        return self.replica_manager.fetch_purgatory

    @property
    def advertised_listeners(self) -> list:
        """[(listener name, host, port)] published to clients (bound ports filled in).

        Computed once the sockets are bound: an empty host means this machine's name, and
        looking it up (DNS) must not happen per Metadata request."""
        if self._advertised is None:
            out = []
            for listener in self.config.advertised_listeners:
                host = listener.host or socket.getfqdn()
                port = listener.port or self.bound_ports.get(listener.name, 0)
                out.append((listener.name, host, port))
            if not self.bound_ports:
                return out                       # not started yet: do not cache
            self._advertised = out
        return self._advertised

    def advertised_endpoint(self, listener_name: str) -> tuple:
        listeners = self.advertised_listeners
        for name, host, port in listeners:
            if name == listener_name:
                return host, port
        return listeners[0][1], listeners[0][2]

    def metadata_brokers(self, listener_name: str) -> list:
        """[(id, host, port, rack)] of the live brokers clients on this listener are told
        about: this broker alone, or in a cluster every live broker with that listener (from
        the controller's UpdateMetadata; brokers without the listener are left out, as
        Kafka does)."""
        if self.cluster is not None:
            return self.metadata.brokers_for_listener(listener_name)
        host, port = self.advertised_endpoint(listener_name)
        return [(self.broker_id, host, port, self.config.get("broker.rack"))]

    def leader_hint(self, topic: str, partition: int, listener_name: str):
        """KIP-951: for a partition this broker answered NOT_LEADER_OR_FOLLOWER (or a fenced
        epoch) about, the leader the metadata names: (leader id, leader epoch, (host, port,
        rack)), or None when none is known (and on a single broker)."""
        if self.cluster is None:
            return None
        topic_md = self.metadata.get_topic(topic)
        state = topic_md.partitions.get(partition) if topic_md is not None else None
        if state is None or state.leader < 0:
            return None
        for node_id, host, port, rack in self.metadata_brokers(listener_name):
            if node_id == state.leader:
                return state.leader, state.leader_epoch, (host, port, rack)
        return None

    @property
    def controller_id(self) -> int:
        """The controller's broker id (-1 until a cluster member has learned it)."""
        if self.cluster is not None:
            return self.metadata.controller_id
        return self.broker_id

    @property
    def port(self) -> int:
        """The first listener's bound port (tests)."""
        return next(iter(self.bound_ports.values()))

    # -- start-up
    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stopped = self.loop.create_future()
        load_logs = self.log_manager is None
        stored_cluster_id = stored_id = None
        if load_logs:
            stored_cluster_id, stored_id = self._open_log_dirs()
        # after the dirs are locked and their meta.properties checked: a broker refused there
        # (a second one on the same dirs) says so in one line
        log.info("%s", self.config.values_text())
        if self.config.get("zookeeper.connect"):
            await self._start_cluster(stored_cluster_id, stored_id, load_logs)
            return
        if stored_id is not None and self.config.broker_id < 0:
            self.broker_id = stored_id
        if self.metadata is None:
            from broker.metadata import open_store
            self.metadata = open_store(self.config, stored_cluster_id)
        self.metadata.load()
        self.apply_dynamic_broker_configs()
        self.quotas.update(self.metadata.client_quotas())
        log.info("[KafkaServer id=%d] starting, cluster id %s", self.broker_id, self.cluster_id)
        # Kafka itself refuses to start without zookeeper.connect (or KRaft settings): say
        # plainly which mode this is, so a properties file that lost it is noticed
        log.info("[KafkaServer id=%d] no zookeeper.connect: running as a single broker, its "
                 "metadata in %s", self.broker_id, self.config.log_dirs[0])
        if load_logs:
            await self._load_logs()
        self._create_replica_manager()
        from broker.topics import TopicManager
        self.topics = TopicManager(self)
        await self.topics.startup()
        await self._start_group_coordinator()
        await self._listen()
        self._start_periodic_tasks()
        log.info("[KafkaServer id=%d] started", self.broker_id)

    def _open_log_dirs(self) -> tuple:
        """Lock the log dirs and read what their meta.properties name: (cluster id, broker id).

        The dirs are locked before anything reads or writes them (the metadata store lives in
        the first one): a second broker on the same dirs stops here, untouched. Every dir's
        meta.properties is checked before anything is written (a dir of another broker or
        cluster stops start-up here, untouched); without broker.id configured, the one the
        files name is taken, as Kafka takes it."""
        from storage.log_manager import LogManager
        self.log_manager = LogManager(
            self.config.log_dirs, self.config.topic_config(),
            time_ms=self.time.ms,
            recovery_threads=self.config.get("num.recovery.threads.per.data.dir"))
        try:
            self.log_manager.lock_log_dirs()
        except BaseException:
            self.log_manager = None         # nothing to shut down: the dirs are not ours
            raise
        configured = self.config.broker_id if self.config.broker_id >= 0 else None
        return self.log_manager.verify_meta_properties(broker_id=configured)

    async def _load_logs(self) -> None:
        store, config = self.metadata, self.config
        await self.loop.run_in_executor(
            None, lambda: self.log_manager.startup(
                self.cluster_id, self.broker_id,
                config_for=lambda topic: config.topic_config(store.topic_config(topic))))
        from storage.log_cleaner import CleanerConfig
        await self.loop.run_in_executor(
            None, self.log_manager.start_cleaner, CleanerConfig.from_broker(config))
        # Producers that expired while the broker was down are not loaded back (Kafka drops
        # them when it reads a producer snapshot).
        await self.loop.run_in_executor(None, self._expire_producer_ids)

    def _create_replica_manager(self) -> None:
        if self.replica_manager is None:
            from broker.replica_manager import ReplicaManager
            self.replica_manager = ReplicaManager(self.log_manager, broker_id=self.broker_id,
                                                  time=self.time, config=self.config)
            rm = self.replica_manager
            rm.on_log_dir_failure = self._on_log_dir_failure
            self.log_manager.on_dir_failure = lambda d, exc: self.loop.call_soon_threadsafe(
                rm.fail_log_dir, d, exc)
            from broker.replication_quota import ReplicationQuota
            for side in ("leader", "follower"):
                setattr(self.replica_manager, f"{side}_quota", ReplicationQuota(
                    self.broker_id,
                    lambda side=side: self.config.get(f"{side}.replication.throttled.rate"),
                    lambda topic, side=side: self.metadata.topic_config(topic).get(
                        f"{side}.replication.throttled.replicas"),
                    windows=self.config.get("replication.quota.window.num"),
                    window_s=self.config.get("replication.quota.window.size.seconds")))

    async def _start_group_coordinator(self) -> None:
        # Loads the __consumer_offsets partitions this broker leads (coordinator/runtime.py);
        # in a cluster, leadership arrives later with LeaderAndIsr, which loads them.
        from coordinator.runtime import GroupCoordinator
        self.group_coordinator = GroupCoordinator.for_broker(self)
        await self.group_coordinator.startup()
        # The same for __transaction_state, with the sender of its WriteTxnMarkers.
        from broker.txn_markers import TxnMarkerSender
        from coordinator.transaction.runtime import TransactionCoordinator
        self.txn_marker_sender = TxnMarkerSender(self)
        self.txn_coordinator = TransactionCoordinator.for_broker(self, self.txn_marker_sender)
        await self.txn_coordinator.startup()
        prefetch = getattr(self.replica_manager.producer_ids, "prefetch", None)
        if prefetch is not None:                  # a cluster: ids come from ZooKeeper
            await prefetch()

    def coordinators(self) -> list:
        """The coordinator runtimes (group, transaction): each serves the internal topic
        named by its `topic` and loads/unloads partitions as leadership moves."""
        return [c for c in (self.group_coordinator, self.txn_coordinator) if c is not None]

    async def _listen(self) -> None:
        for listener in self.config.listeners:
            server = await self.loop.create_server(
                lambda name=listener.name: Connection(self, self.connections, name),
                host=listener.host or None, port=listener.port, reuse_address=True,
                backlog=1024)
            self._servers.append(server)
            self.bound_ports[listener.name] = server.sockets[0].getsockname()[1]
            log.info("Awaiting socket connections on %s:%d (%s)", listener.host or "0.0.0.0",
                     self.bound_ports[listener.name], listener.name)

    async def _start_cluster(self, stored_cluster_id, stored_id, load_logs: bool) -> None:
        """ZooKeeper mode (broker/cluster.py): the cluster id and broker id come from
        ZooKeeper, topics and leaders from the controller, and the broker registers once its
        logs are recovered and its listeners bound."""
        from broker.cluster import ClusterMembership
        from broker.metadata.cluster import ClusterMetadataStore
        from broker.replica_fetcher import ReplicaFetcherManager
        from broker.topics import ClusterTopicManager
        self.cluster = ClusterMembership(self)
        cluster_id = await self.cluster.connect(stored_cluster_id)
        configured = self.config.broker_id if self.config.broker_id >= 0 else None
        self.broker_id = await self.cluster.resolve_broker_id(configured, stored_id)
        self.metadata = ClusterMetadataStore(cluster_id)
        self.metadata.kzk = self.cluster.kzk
        await self.cluster.load_configs(self.metadata)
        self.apply_dynamic_broker_configs()
        self.quotas.update(self.metadata.client_quotas())
        log.info("[KafkaServer id=%d] starting, cluster id %s, ZooKeeper %s", self.broker_id,
                 cluster_id, self.config.get("zookeeper.connect"))
        if load_logs:
            await self._load_logs()
        self._create_replica_manager()
        from broker.alter_partition_manager import AlterPartitionManager
        self.replica_manager.fetchers = ReplicaFetcherManager(self)
        self.replica_manager.metadata_cache = self.metadata
        self.replica_manager.isr_changes = AlterPartitionManager(self)
        from broker.producer_ids import ZkProducerIdManager
        self.replica_manager.producer_ids = ZkProducerIdManager(self.cluster.kzk, self.broker_id)
        self.topics = ClusterTopicManager(self)
        await self._start_group_coordinator()
        await self._listen()
        await self.cluster.register()
        self._start_periodic_tasks()
        # Kafka's isr-expiration task: followers that stopped catching up leave the ISR.
        self._every(self.config.get("replica.lag.time.max.ms") / 2000,
                    self.replica_manager.maybe_shrink_isrs)
        log.info("[KafkaServer id=%d] started", self.broker_id)

    def apply_dynamic_broker_configs(self) -> None:
        """The persisted dynamic layers (cluster default, then this broker's). As Kafka's
        DynamicBrokerConfig.removeInvalidConfigs, a key this version refuses on its own (a
        value out of range, a config no longer dynamic after an upgrade) is dropped with a log
        line and the rest of its layer still applies."""
        from broker.config import ConfigError
        for cluster_default, broker_id in ((True, None), (False, self.broker_id)):
            values = dict(self.metadata.broker_config(broker_id))
            which = "default cluster" if cluster_default else "broker"
            try:
                self.config.set_dynamic(values, cluster_default=cluster_default)
                continue
            except ConfigError as exc:
                problem = exc
            invalid = []
            for name in list(values):
                try:
                    self.config.validate_dynamic({name: values[name]})
                except ConfigError:
                    invalid.append(name)
                    del values[name]
            if invalid:
                log.error("Dynamic %s config contains invalid values in: %s, these configs "
                          "will be ignored (%s)", which, ", ".join(sorted(invalid)), problem)
            try:
                self.config.set_dynamic(values, cluster_default=cluster_default)
            except ConfigError as exc:
                log.error("Ignoring invalid persisted dynamic %s config: %s", which, exc)
        if self.log_manager is not None:
            # Kafka's reconfigureDefaultLogConfig: what the log manager itself reads (the
            # delay before a deleted partition's files go, new logs' defaults)
            self.log_manager.default_config = self.config.topic_config()
        if self.loop is not None and self.loop.is_running():
            self.loop.create_task(self.reconfigure_cleaner())

    def _on_log_dir_failure(self, log_dir: str) -> None:
        """A log dir went offline (broker/replica_manager.py fail_log_dir): the controller is
        told; with no dir left, the broker halts, as Kafka's does."""
        if not self.log_manager.online_dirs():
            log.error("Shutdown broker because all log dirs in %s have failed",
                      ", ".join(self.log_manager.log_dirs))
            logging.shutdown()
            os._exit(1)
        if self.cluster is not None:
            self.loop.create_task(self.cluster.notify_log_dir_failure())
        else:
            self.topics.metadata_changed()       # Metadata shows its partitions offline

    async def reconfigure_cleaner(self) -> None:
        """Apply changed dynamic log.cleaner.* settings to the running cleaner."""
        cleaner = self.log_manager.cleaner if self.log_manager is not None else None
        if cleaner is None:
            return
        from storage.log_cleaner import CleanerConfig
        wanted = CleanerConfig.from_broker(self.config)
        wanted.enable = cleaner.config.enable              # not dynamic in Kafka either
        if wanted != cleaner.config:
            await self.loop.run_in_executor(None, cleaner.reconfigure, wanted)

    def _start_periodic_tasks(self) -> None:
        config = self.config
        idle_ms = config.connections_max_idle_ms
        if idle_ms >= 0:                       # -1: idle connections are never closed (Kafka)
            self._every(max(0.05, min(idle_ms / 4000, 10.0)), self._reap_idle)
        # Kafka's LogManager starts retention and its checkpoints log.initial.task.delay.ms
        # after start (30 s), not a whole interval (5 min for retention) later.
        initial_s = config.get("log.initial.task.delay.ms") / 1000
        self._every(config.log_retention_check_interval_ms / 1000, self._retention,
                    executor=True, first_s=initial_s)
        self._every(config.replica_high_watermark_checkpoint_interval_ms / 1000,
                    self._checkpoint_high_watermarks, executor=True)
        self._every(config.log_flush_offset_checkpoint_interval_ms / 1000 or 60,
                    self._checkpoint_recovery_points, executor=True, first_s=initial_s)
        # flush_dirty also fsyncs segments that rolled since the last pass (Kafka flushes a
        # segment when it rolls, which moves the recovery point), so it runs at least every
        # ROLL_FLUSH_CHECK_S even when log.flush.scheduler.interval.ms leaves flushing to the OS.
        flush_s = min(config.log_flush_scheduler_interval_ms / 1000, ROLL_FLUSH_CHECK_S)
        self._every(flush_s, self._flush, executor=True)
        self._every(config.get("producer.id.expiration.check.interval.ms") / 1000,
                    self._expire_producer_ids, executor=True)

    def _every(self, interval_s: float, fn, executor: bool = False,
               first_s: float | None = None) -> None:
        """`fn` every `interval_s`, the first time after min(`first_s`, `interval_s`)."""
        async def run():
            wait = interval_s if first_s is None else min(first_s, interval_s)
            while True:
                await asyncio.sleep(wait)
                wait = interval_s
                try:
                    if executor:
                        await self.loop.run_in_executor(None, fn)
                    else:
                        fn()
                except Exception:
                    log.exception("Periodic task %s failed", fn.__name__)
        self._tasks.append(self.loop.create_task(run()))

    def _reap_idle(self):
        self.connections.reap_idle(self.loop.time(), self.config.connections_max_idle_ms / 1000)

    def _retention(self):
        try:
            self.log_manager.run_retention(self.time.ms())
        finally:
            self._cleanup_deleted()

    def _cleanup_deleted(self):
        # Files of deleted segments and partitions go once file.delete.delay.ms has passed
        # (checked with every flush pass, about every second, as Kafka schedules each).
        cleanup = getattr(self.log_manager, "cleanup_deleted", None)
        if cleanup is not None:
            cleanup()

    def _checkpoint_high_watermarks(self):
        self.log_manager.checkpoint_high_watermarks()

    def _checkpoint_recovery_points(self):
        self.log_manager.checkpoint_recovery_points()
        self.log_manager.checkpoint_log_start_offsets()

    def _flush(self):
        try:
            self.log_manager.flush_dirty(self.time.ms())
        finally:
            self._cleanup_deleted()

    def _expire_producer_ids(self):
        removed = self.log_manager.remove_expired_producers(
            self.config.get("producer.id.expiration.ms"), self.time.ms())
        if removed:
            log.info("Removed %d expired producer ids (producer.id.expiration.ms)", removed)

    # -- shutdown
    async def shutdown(self) -> None:
        """Graceful stop (see the module docstring); each step runs even if one before failed."""
        if self._shutting_down:
            await self.wait_stopped()
            return
        self._shutting_down = True
        if self.metadata is None and self.log_manager is None and self.cluster is None:
            # start() failed before it touched anything (a log dir locked by another broker)
            if self._stopped is not None and not self._stopped.done():
                self._stopped.set_result(None)
            return
        log.info("[KafkaServer id=%d] shutting down", self.broker_id)
        try:
            if self.cluster is not None:
                if self.replica_manager is not None:
                    self.replica_manager.shutting_down = True
                # Leaderships move away while this broker still answers the controller.
                await self._step("controlled shutdown", self.cluster.controlled_shutdown)
                fetchers = self.replica_manager.fetchers if self.replica_manager else None
                if fetchers is not None:
                    await self._step("stopping the replica fetchers", fetchers.shutdown)
                isr_changes = self.replica_manager.isr_changes if self.replica_manager else None
                if isr_changes is not None:
                    await self._step("stopping ISR changes", isr_changes.shutdown)
            for server in self._servers:
                server.close()
            for task in self._tasks:
                task.cancel()
            if self.replica_manager is not None:
                await self._step("releasing parked requests", self.replica_manager.shutdown)
                await self._step("stopping moves between log dirs",
                                 self.replica_manager.log_dir_mover.drain)
            await self._step("draining connections", self.connections.drain, DRAIN_TIMEOUT_S)
            for server in self._servers:
                try:
                    await asyncio.wait_for(server.wait_closed(), 1.0)
                except asyncio.TimeoutError:
                    pass
            if self.group_coordinator is not None and hasattr(self.group_coordinator,
                                                              "shutdown"):
                await self._step("stopping the group coordinator",
                                 self.group_coordinator.shutdown)
            if self.txn_coordinator is not None:
                await self._step("stopping the transaction coordinator",
                                 self.txn_coordinator.shutdown)
            if self.txn_marker_sender is not None:
                await self._step("stopping the transaction marker sender",
                                 self.txn_marker_sender.close)
            if self.log_manager is not None:
                await self._step("shutting down the log manager", self.loop.run_in_executor,
                                 None, self.log_manager.shutdown)
            if self.cluster is not None:
                # The session ends: /brokers/ids/N (and /controller) vanish at once.
                await self._step("closing the ZooKeeper session", self.cluster.close)
            if self.metadata is not None:
                await self._step("closing the metadata store", self.metadata.close)
            log.info("[KafkaServer id=%d] shut down completed", self.broker_id)
        finally:
            if self._stopped is not None and not self._stopped.done():
                self._stopped.set_result(None)

    async def _step(self, what: str, fn, *args) -> None:
        try:
            result = fn(*args)
            if asyncio.isfuture(result) or asyncio.iscoroutine(result):
                await result
        except Exception:
            log.exception("Error while %s during shutdown", what)

    async def wait_stopped(self) -> None:
        await asyncio.shield(self._stopped)
