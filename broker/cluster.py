"""A broker's membership of a ZooKeeper-mode cluster (`zookeeper.connect` set): what Kafka 3.9's
KafkaServer does with ZooKeeper, around the rest of the broker.

Start-up (Broker.start calls these in this order, as KafkaServer.startup):
 1. `connect()`: the ZooKeeper session (within zookeeper.connection.timeout.ms, creating the
    chroot if needed), the persistent top-level znodes, and the cluster id from /cluster/id
    (created by the first broker): it must agree with the log dirs' meta.properties;
 2. `resolve_broker_id()`: broker.id, else the one meta.properties names, else a new one from
    /brokers/seqid (above reserved.broker.max.id) when broker.id.generation.enable;
 3. `load_configs()`: topic configs, dynamic broker configs and quotas from /config;
 4. (the broker recovers its logs and binds its listeners)
 5. `register()`: the ephemeral /brokers/ids/N (refused if another live broker holds the id);
    its czxid is this broker's epoch; then the controller module starts (it may win the
    election) and the /config/changes listener.

Session expiry: the controller module steps down; when kazoo has a new session the broker
registers again (a new broker epoch) and the election runs again, as Kafka's
RegisterBrokerAndReelect.

Shutdown: `controlled_shutdown()` first (ControlledShutdown to the controller, up to
controlled.shutdown.max.retries attempts; when it succeeds, clients are still served until the
other live brokers name the new leaders, see `_wait_leaderships_moved`), then the rest of the
broker stops, then `close()` ends the session, so /brokers/ids/N (and /controller) vanish at
once.
"""
from __future__ import annotations

import asyncio
import logging

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.controlled_shutdown import ControlledShutdownRequest
from protocol.messages.metadata import MetadataRequest

from broker import zk_data as zd
from broker.config import ConfigError, validate_topic_configs
from broker.kafka_zk import BrokerIdTakenError, KafkaZk

log = logging.getLogger(__name__)

CONTROLLED_SHUTDOWN_VERSION = 3
# After a successful controlled shutdown, how long clients are still served at most while the
# controller's UpdateMetadata reaches the brokers (see `_wait_leaderships_moved`).
LEADERSHIP_MOVE_WAIT_S = 2.0


class ClusterJoinError(Exception):
    """This broker cannot join the cluster (start-up refused with this one line)."""


class ClusterMembership:
    def __init__(self, broker):
        self.broker = broker
        self.config = broker.config
        self.zk = None
        self.kzk: KafkaZk | None = None
        self.broker_epoch = -1
        self.controller = None
        self.channel = None
        self._config_change_seq = -1
        self._config_changes_lock = asyncio.Lock()
        self._registered = False
        self._tasks: set = set()
        self._closing = False
        self._metadata_ready = asyncio.Event()

    @property
    def inter_broker_listener(self) -> str:
        name = self.config.get("inter.broker.listener.name")
        if name:
            return name
        protocol = self.config.get("security.inter.broker.protocol") or "PLAINTEXT"
        for listener in self.config.listeners:
            if listener.name == protocol:
                return listener.name
        return self.config.listeners[0].name

    # -- start-up ------------------------------------------------------------------------------

    async def connect(self, stored_cluster_id: str | None) -> str:
        from broker.metadata.local import new_cluster_id
        from broker.zookeeper import ZkClient
        from broker.zk_data import ZkTimeoutError
        connect = self.config.get("zookeeper.connect")
        session_ms = self.config.get("zookeeper.session.timeout.ms")
        connection_ms = self.config.get("zookeeper.connection.timeout.ms") or session_ms
        self.zk = ZkClient(connect, session_timeout_ms=session_ms,
                           connection_timeout_ms=connection_ms)
        try:
            await self.zk.start()
        except ZkTimeoutError as exc:
            self.zk = None
            raise ClusterJoinError(f"Timed out waiting for connection to ZooKeeper at {connect} "
                                   f"after {connection_ms} ms ({exc}); check zookeeper.connect"
                                   ) from None
        self.kzk = KafkaZk(self.zk, self.config.get("zookeeper.max.in.flight.requests"))
        self.zk.add_session_listener(self._session_event)
        await self.kzk.create_top_level_paths()
        try:
            cluster_id = await self.kzk.get_or_create_cluster_id(stored_cluster_id
                                                                  or new_cluster_id())
        except zd.ZNodeDataError as exc:    # Kafka: "Failed to parse the cluster id json"
            raise ClusterJoinError(f"Failed to parse the cluster id json: {exc}") from None
        if stored_cluster_id is not None and stored_cluster_id != cluster_id:
            raise ClusterJoinError(
                f"The Cluster ID {cluster_id} doesn't match stored clusterId "
                f"Some({stored_cluster_id}) in meta.properties. The broker is trying to join "
                f"the wrong cluster. Configured zookeeper.connect may be wrong.")
        return cluster_id

    async def resolve_broker_id(self, configured: int | None, stored: int | None) -> int:
        if configured is not None:
            return configured
        if stored is not None:
            return stored
        if not self.config.get("broker.id.generation.enable"):
            raise ConfigError("broker.id", -1, "broker.id is not set and "
                              "broker.id.generation.enable is false")
        broker_id = await self.kzk.generate_broker_id(self.config.get("reserved.broker.max.id"))
        log.info("Generated broker id %d (broker.id.generation.enable)", broker_id)
        return broker_id

    async def load_configs(self, store) -> None:
        # Notifications already there are applied by reading /config: start after them. Listed
        # first, so a change written while /config is read is applied by the listener.
        changes = await self.kzk.get_config_changes()
        self._config_change_seq = max((zd.sequence_number(c) for c in changes), default=-1)
        await store.load_from_zookeeper(self.kzk)

    def broker_info(self) -> zd.BrokerInfo:
        endpoints = tuple(
            zd.EndPoint(name, host, port, self.config.security_protocol_of(name) or "PLAINTEXT")
            for name, host, port in self.broker.advertised_listeners)
        return zd.BrokerInfo(self.broker.broker_id, endpoints, self.config.get("broker.rack"))

    async def register(self) -> None:
        info = self.broker_info()
        await self._check_endpoints_unique(info)
        try:
            self.broker_epoch = await self.kzk.register_broker(info, self.broker.time.ms())
        except BrokerIdTakenError as exc:
            raise ClusterJoinError(
                f"Error while registering broker {info.id}: another live broker is registered "
                f"with broker.id {info.id} ({exc})") from None
        self._registered = True
        log.info("Registered broker %d at path %s with addresses: %s, czxid (broker epoch): %d",
                 info.id, zd.broker_path(info.id), ",".join(ep.uri for ep in info.endpoints),
                 self.broker_epoch)
        await self._start_controller()
        await self._watch_config_changes()

    async def _check_endpoints_unique(self, info) -> None:
        """Kafka refuses to register a broker whose advertised host:port another registered
        broker already advertises."""
        mine = {(ep.host, ep.port) for ep in info.endpoints}
        for broker_id, (other, _) in (await self.kzk.get_all_brokers()).items():
            if broker_id == info.id:
                continue
            clash = mine & {(ep.host, ep.port) for ep in other.endpoints}
            if clash:
                host, port = sorted(clash)[0]
                raise ClusterJoinError(
                    f"Configured end points {host}:{port} in advertised listeners are already "
                    f"registered by broker {broker_id}")

    async def notify_log_dir_failure(self) -> None:
        """A log dir of this broker failed: tell the controller (/log_dir_event_notification)."""
        try:
            await self.kzk.propagate_log_dir_event(self.broker.broker_id)
        except Exception as exc:                   # noqa: BLE001 - retried by the next failure
            log.error("Could not notify the controller of a log dir failure: %s", exc)

    async def _start_controller(self) -> None:
        from broker.controller.channel import ControllerChannelManager
        from broker.controller.controller import KafkaController
        self.channel = ControllerChannelManager(
            self.broker.broker_id, self.inter_broker_listener,
            request_timeout_ms=self.config.get("request.timeout.ms") or 30000,
            connect_timeout_ms=self.config.get("controller.socket.timeout.ms") or 30000)
        self.controller = KafkaController(self.broker.broker_id, self.kzk, self.channel,
                                          time=self.broker.time, config=self.config,
                                          inter_broker_listener=self.inter_broker_listener)
        await self.controller.startup()

    # -- metadata the broker needs -------------------------------------------------------------

    async def log_config_for(self, topic: str):
        """The LogConfig of a topic's new log: its config read from ZooKeeper (a topic
        created a moment ago has sent no config change notification)."""
        store = self.broker.metadata
        try:
            configs = await self.kzk.get_entity_config("topics", topic)
        except zd.ZNodeDataError as exc:
            log.error("Using broker defaults for %s: %s", topic, exc)
            configs = {}
        if configs != store.topic_config(topic):
            store.set_cached_topic_config(topic, configs)
        return self.config.topic_config(configs)

    def metadata_updated(self) -> None:
        self._metadata_ready.set()

    async def wait_for_metadata(self, timeout_s: float) -> bool:
        try:
            async with asyncio.timeout(timeout_s):       # not wait_for: it can swallow a cancel
                await self._metadata_ready.wait()
            return True
        except asyncio.TimeoutError:
            return False

    # -- config changes ------------------------------------------------------------------------

    async def _watch_config_changes(self) -> None:
        await self._process_config_changes()

    def _config_watch(self, event) -> None:
        if not self._closing:
            self._spawn(self._process_config_changes())

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _process_config_changes(self) -> None:
        """Apply /config/changes notifications above the last applied one (each broker does,
        as Kafka's ZkConfigManager), one round at a time (each watch starts a round)."""
        async with self._config_changes_lock:
            await self._process_config_changes_now()

    async def _process_config_changes_now(self) -> None:
        try:
            changes = await self.kzk.get_config_changes(watch=self._config_watch)
        except Exception:                       # noqa: BLE001 - session gone: re-read later
            log.exception("Could not read %s", zd.CONFIG_CHANGES)
            return
        for name in changes:
            seq = zd.sequence_number(name)
            if seq <= self._config_change_seq:
                continue
            try:
                entity_path = await self.kzk.read_config_change(name)
            except zd.ZkError as exc:
                # Not marked done: read again on the next round (the next watch, or the
                # re-registration after a session expiry), as Kafka's listener.
                log.warning("Could not read config change %s: %s", name, exc)
                return
            self._config_change_seq = seq
            if entity_path is None:
                continue
            try:
                await self._apply_config_change(entity_path)
            except zd.ZNodeDataError as exc:
                log.error("Ignoring config change %s: %s", name, exc)
            except Exception as exc:            # noqa: BLE001 - one bad change, not the rest
                log.error("Error processing config change %s (%s): %s", name, entity_path, exc)
        try:
            await self.kzk.purge_config_changes(changes, self.broker.time.ms())
        except zd.ZkError as exc:
            log.warning("Could not purge old config change notifications: %s", exc)

    async def _apply_config_change(self, entity_path: str) -> None:
        store = self.broker.metadata
        entity_type, _, name = entity_path.partition("/")
        configs = await self.kzk.get_entity_config(entity_type, name)
        log.info("Processing override for entityPath: %s with config: %s", entity_path, configs)
        if entity_type == "topics":
            try:
                validate_topic_configs(configs)
            except ConfigError as exc:
                # As Kafka's TopicConfigHandler: logged, and the topic keeps its config.
                log.error("Ignoring config change of topic %s: %s", name, exc)
                return
            store.set_cached_topic_config(name, configs)
            self.broker.topics.apply_log_configs([name])
            self._maybe_elect_uncleanly(configs, name)
        elif entity_type == "brokers":
            broker_id = None if name == zd.DEFAULT_ENTITY else name
            if broker_id is not None and not broker_id.isdigit():
                raise zd.ZNodeDataError(entity_path, f"not a broker id: {broker_id!r}")
            if broker_id is not None and broker_id != str(self.broker.broker_id):
                store.set_cached_broker_config(int(broker_id), configs)
                return
            store.set_cached_broker_config(None if broker_id is None else int(broker_id),
                                           configs)
            self.broker.apply_dynamic_broker_configs()
            self.broker.topics.apply_log_configs()     # broker defaults of topic configs
            self._maybe_elect_uncleanly(configs)
        elif entity_type in ("users", "clients", "ips"):
            store.set_cached_quota(entity_type, name, configs)
            self.broker.quotas.update(store.client_quotas())

    def _maybe_elect_uncleanly(self, configs: dict, topic: str | None = None) -> None:
        """Kafka's TopicConfigHandler and DynamicLogConfig: unclean.leader.election.enable
        turned on makes the active controller elect leaders for partitions that have none."""
        value = configs.get("unclean.leader.election.enable")
        controller = self.controller
        if controller is not None and controller.is_active and value is not None and \
                str(value).strip().lower() == "true":
            controller.enqueue(controller.unclean_leader_election_enabled, topic)

    # -- session -------------------------------------------------------------------------------

    def _session_event(self, state: str) -> None:
        if self._closing:
            return
        if state == "expired":
            log.warning("ZooKeeper session expired: broker %d is unregistered until a new "
                        "session is established", self.broker.broker_id)
            if self.controller is not None:
                self.controller.session_expired()
        elif state == "connected" and self._registered:
            self._spawn(self._re_register())

    async def _re_register(self) -> None:
        """After a session expiry: register again (a new broker epoch), watch again, and run
        the election again."""
        for attempt in range(1000):
            if self._closing:
                return
            try:
                self.broker_epoch = await self.kzk.register_broker(self.broker_info(),
                                                                   self.broker.time.ms())
                break
            except Exception as exc:            # noqa: BLE001 - retried
                if attempt % 10 == 0:
                    log.warning("Re-registering broker %d failed (%s); retrying",
                                self.broker.broker_id, exc)
                await asyncio.sleep(1.0)
        log.info("Re-registered broker %d after a session expiry, broker epoch %d",
                 self.broker.broker_id, self.broker_epoch)
        await self._process_config_changes()
        if self.controller is not None:
            await self.controller.enqueue(self.controller.reelect_after_session_renewal)

    # -- shutdown ------------------------------------------------------------------------------

    async def controlled_shutdown(self) -> bool:
        """Ask the controller to move this broker's leaderships away (Kafka's
        controlledShutdown). True when it answered NONE with nothing left to move."""
        if not self._registered or not self.config.get("controlled.shutdown.enable"):
            return False
        retries = self.config.get("controlled.shutdown.max.retries")
        backoff_s = self.config.get("controlled.shutdown.retry.backoff.ms") / 1000
        store = self.broker.metadata
        done = False
        for attempt in range(1, retries + 1):
            controller_id = store.controller_id
            if self.controller is not None and self.controller.active_controller_id is not None:
                controller_id = self.controller.active_controller_id
            # Kafka's: controller.socket.timeout.ms to be connected (its ApiVersions included,
            # as awaitReady), then request.timeout.ms for the answer.
            connect_timeout_ms = self.config.get("controller.socket.timeout.ms")
            conn = self._connection_to(controller_id, connect_timeout_ms=connect_timeout_ms)
            if conn is None:
                log.warning("Controlled shutdown: no known controller (attempt %d of %d)",
                            attempt, retries)
            else:
                try:
                    try:
                        async with asyncio.timeout(connect_timeout_ms / 1000):
                            await conn.connect()
                    except TimeoutError:
                        raise ConnectionError(f"no connection to the controller within "
                                              f"{connect_timeout_ms} ms") from None
                    response = await conn.send(ControlledShutdownRequest(
                        broker_id=self.broker.broker_id, broker_epoch=self.broker_epoch),
                        CONTROLLED_SHUTDOWN_VERSION)
                    if response.error_code == ErrorCode.NONE and not \
                            response.remaining_partitions:
                        log.info("Controlled shutdown request returned successfully after "
                                 "%d attempt(s)", attempt)
                        done = True
                        break
                    remaining = [f"{p.topic_name}-{p.partition_index}"
                                 for p in response.remaining_partitions]
                    log.info("Remaining partitions to move: %s (error %s)",
                             ",".join(remaining[:20]) + ("..." if len(remaining) > 20 else ""),
                             ErrorCode(response.error_code).name)
                except Exception as exc:        # noqa: BLE001 - retried
                    log.warning("Error during controlled shutdown, possibly because leader "
                                "movement took longer than the configured "
                                "controller.socket.timeout.ms: %s", exc)
                finally:
                    await conn.close()
            if attempt < retries:
                log.info("Retrying controlled shutdown after the previous attempt failed...")
                await asyncio.sleep(backoff_s)
        if done:
            await self._wait_leaderships_moved(LEADERSHIP_MOVE_WAIT_S)
            return True
        log.warning("Proceeding to do an unclean shutdown as all the controlled shutdown "
                    "attempts failed")
        return False

    async def _wait_leaderships_moved(self, timeout_s: float) -> None:
        """Keep serving until the other live brokers name new leaders for this broker's
        replicated partitions (at most `timeout_s`).

        The controller answers ControlledShutdown once it has sent the new leaders out, before
        the brokers have applied them (a new leader applies its UpdateMetadata only after its
        LeaderAndIsr). A client whose connection closes at that moment asks another broker for
        metadata, may still be told the old leader, and librdkafka then waits a second before
        it asks again. So this broker asks the others what a client would be told, and closes
        only when none names it. Meanwhile clients are still served: a produce here is
        answered NOT_LEADER_OR_FOLLOWER and sends them to the new leader."""
        store = self.broker.metadata
        me = self.broker.broker_id
        topics = sorted(t.name for t in store.list_topics()
                        if any(me in ps.replicas and len(ps.replicas) > 1
                               for ps in t.partitions.values()))
        others = sorted(b for b in store.live_brokers if b != me)
        if not topics or not others:
            return
        loop = asyncio.get_running_loop()
        start = loop.time()
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.gather(*(self._wait_not_named_leader(b, topics) for b in others))
            log.info("The other brokers name new leaders after %.0f ms",
                     (loop.time() - start) * 1000)
        except TimeoutError:
            log.warning("Some broker still names this one leader %.1f s after the controlled "
                        "shutdown; stopping anyway", timeout_s)

    async def _wait_not_named_leader(self, broker_id: int, topics: list) -> None:
        """Ask `broker_id` for the metadata of `topics` until no partition's leader is this
        broker; gives up quietly if it cannot be reached (it is then no client's answer)."""
        me = self.broker.broker_id
        conn = self._connection_to(broker_id)
        if conn is None:
            return
        request = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False)
        try:
            await conn.connect()
            while True:
                response = await conn.send(request)
                if not any(p.leader_id == me for t in response.topics for p in t.partitions):
                    return
                await asyncio.sleep(0.01)
        except (ConnectionError, OSError, KafkaError) as exc:
            log.info("Could not ask broker %d for metadata during the controlled shutdown: %s",
                     broker_id, exc)
        finally:
            await conn.close()

    def _connection_to(self, broker_id: int, **kwargs):
        """An unconnected BrokerConnection to a live broker's inter-broker listener, or None."""
        from broker.client.connection import BrokerConnection
        broker = self.broker.metadata.live_brokers.get(broker_id)
        if broker is None:
            return None
        endpoint = broker.endpoints.get(self.inter_broker_listener) or next(
            iter(broker.endpoints.values()), None)
        if endpoint is None:
            return None
        return BrokerConnection(endpoint[0], endpoint[1], node_id=broker_id,
                                client_id=f"broker-{self.broker.broker_id}",
                                request_timeout_ms=self.config.get("request.timeout.ms"),
                                **kwargs)

    async def close(self) -> None:
        self._closing = True
        for task in list(self._tasks):
            task.cancel()
        if self.controller is not None:
            await self.controller.shutdown()
        if self.channel is not None:
            await self.channel.close()
        if self.zk is not None:
            await self.zk.close()
