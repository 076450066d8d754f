"""Kafka's operations on ZooKeeper (Kafka 3.9's KafkaZkClient and AdminZkClient), over a ZkClient.

`zk` is broker.zookeeper.ZkClient in a broker, or the in-memory fake of the unit tests: both
offer get/exists/children/create/set/delete/multi returning broker.zk_data types.

Fencing, as Kafka does it:
- every controller write is a multi that starts with `CheckOp(/controller_epoch, the version
  this controller's election left it at)`: a deposed controller's write fails with
  `ControllerMovedError` and changes nothing;
- partition state writes also expect the state znode's version (the partition epoch): a racing
  writer makes them fail with BADVERSION, and the caller re-reads.
- a broker registers with a two-op multi (create an empty ephemeral znode, then set its data at
  version 0), so the znode's data version is 1 afterwards, as with Kafka; its czxid is the
  broker epoch.
"""
from __future__ import annotations

import asyncio
import logging

from broker import zk_data as zd
from broker.zk_data import (BadVersionError, CheckOp, CreateOp, DeleteOp, NodeExistsError,
                            NoNodeError, SetDataOp, ZkError, ZNodeDataError)

log = logging.getLogger(__name__)


WRITES_PER_MULTI = 100


CONFIG_CHANGE_EXPIRATION_MS = 15 * 60 * 1000     # Kafka's changeExpirationMs


class ControllerMovedError(Exception):
    """This broker is no longer the controller (its epoch check failed)."""


class BrokerIdTakenError(Exception):
    pass


class TopicExistsError(Exception):
    pass


class KafkaZk:
    def __init__(self, zk, max_in_flight: int = 10):
        self.zk = zk
        self.max_in_flight = max_in_flight

    # -- start-up ------------------------------------------------------------------------------

    async def create_top_level_paths(self) -> None:
        for path in zd.PERSISTENT_PATHS:
            if await self.zk.exists(path) is None:
                await self.zk.ensure_path(path)

    async def get_or_create_cluster_id(self, proposed: str) -> str:
        found = await self.zk.get(zd.CLUSTER_ID)
        if found is None:
            try:
                await self.zk.create(zd.CLUSTER_ID, zd.encode_cluster_id(proposed),
                                     makepath=True)
                return proposed
            except NodeExistsError:
                found = await self.zk.get(zd.CLUSTER_ID)
        return zd.decode_cluster_id(found[0])

    async def generate_broker_id(self, reserved_max_id: int) -> int:
        """A new broker id above reserved.broker.max.id (Kafka's /brokers/seqid counter)."""
        stat = await self.zk.set(zd.BROKER_SEQID, b"")
        return stat.version + reserved_max_id

    async def register_broker(self, info: zd.BrokerInfo, timestamp_ms: int) -> int:
        """Create /brokers/ids/N; returns the broker epoch (the znode's czxid). Raises
        BrokerIdTakenError when another live broker holds the id."""
        path = zd.broker_path(info.id)
        data = zd.encode_broker_info(info, timestamp_ms)
        results = await self.zk.multi([CreateOp(path, b"", ephemeral=True),
                                       SetDataOp(path, data, 0)])
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        if isinstance(results[0], NodeExistsError):
            found = await self.zk.get(path)
            if found is not None and found[1].ephemeral_owner == self.zk.session_id:
                return found[1].czxid          # ours already (a retry after a lost answer)
            raise BrokerIdTakenError(
                f"Error while creating ephemeral at {path}, node already exists and owner "
                f"'0x{found[1].ephemeral_owner if found else 0:x}' does not match current "
                f"session '0x{self.zk.session_id:x}'")
        if failure is not None:
            raise failure
        stat = await self.zk.exists(path)
        return stat.czxid

    async def update_broker_info(self, info: zd.BrokerInfo, timestamp_ms: int) -> None:
        await self.zk.set(zd.broker_path(info.id), zd.encode_broker_info(info, timestamp_ms))

    async def get_all_brokers(self, watch=None) -> dict:
        """{broker id: (BrokerInfo, broker epoch)}; a malformed znode is logged and skipped."""
        out = {}
        for child in await self.zk.children(zd.BROKER_IDS, watch) or []:
            try:
                broker_id = int(child)
            except ValueError:
                broker_id = None
            if broker_id is None or not -2 ** 31 <= broker_id < 2 ** 31:    # a Java int
                log.warning("Ignoring %s/%s: not a broker id", zd.BROKER_IDS, child)
                continue
            found = await self.zk.get(zd.broker_path(broker_id))
            if found is None:
                continue                        # gone meanwhile
            try:
                out[broker_id] = (zd.decode_broker_info(broker_id, found[0]), found[1].czxid)
            except ZNodeDataError as exc:
                log.error("Ignoring broker registration %s", exc)
        return out

    # -- controller election -------------------------------------------------------------------

    async def get_controller_id(self, watch=None) -> int | None:
        """The controller's broker id, or None; `watch` fires when /controller changes (also
        when it is created while absent)."""
        stat = await self.zk.exists(zd.CONTROLLER, watch)
        if stat is None:
            return None
        found = await self.zk.get(zd.CONTROLLER)
        if found is None:
            return None
        try:
            return zd.decode_controller(found[0])
        except ZNodeDataError as exc:
            log.error("Unreadable %s", exc)
            return -1

    async def get_controller_epoch(self):
        found = await self.zk.get(zd.CONTROLLER_EPOCH)
        if found is None:
            return None
        return zd.decode_controller_epoch(found[0]), found[1].version

    async def register_controller_and_increment_epoch(self, broker_id: int,
                                                      timestamp_ms: int) -> tuple:
        """Try to become controller: (epoch, epoch zk version). Raises ControllerMovedError
        when another broker won."""
        current = await self.get_controller_epoch()
        if current is None:
            try:
                await self.zk.create(zd.CONTROLLER_EPOCH, zd.encode_controller_epoch(0))
            except NodeExistsError:
                pass
            current = await self.get_controller_epoch()
        epoch, version = current
        results = await self.zk.multi([
            CreateOp(zd.CONTROLLER, zd.encode_controller(broker_id, timestamp_ms),
                     ephemeral=True),
            SetDataOp(zd.CONTROLLER_EPOCH, zd.encode_controller_epoch(epoch + 1), version)])
        if not any(isinstance(r, BaseException) for r in results):
            return epoch + 1, results[1].version
        # Lost the race, or our own earlier attempt won and its answer was lost.
        controller = await self.get_controller_id()
        now = await self.get_controller_epoch()
        if controller == broker_id and now is not None and now[0] == epoch + 1:
            return now
        raise ControllerMovedError(f"controller is {controller}, not {broker_id}")

    async def delete_controller(self, epoch_zk_version: int) -> None:
        """Kafka's deleteController: give up /controller (so the brokers elect again), fenced
        by the controller epoch's version."""
        await self._guarded(epoch_zk_version, [DeleteOp(zd.CONTROLLER)])

    async def _guarded(self, epoch_zk_version: int, ops: list) -> list:
        """Run `ops` after the controller-epoch check; ControllerMovedError if it fails."""
        _refuse_unelected(epoch_zk_version)
        results = await self.zk.multi([CheckOp(zd.CONTROLLER_EPOCH, epoch_zk_version), *ops])
        if isinstance(results[0], BaseException) and not _rolled_back(results[0]):
            raise ControllerMovedError("controller epoch changed: another broker is controller")
        return results[1:]

    # -- topics --------------------------------------------------------------------------------

    async def get_all_topics(self, watch=None) -> list:
        return await self.zk.children(zd.BROKER_TOPICS, watch) or []

    async def topic_exists(self, topic: str) -> bool:
        """Whether /brokers/topics/<topic> exists, readable or not (Kafka's topicExists)."""
        return await self.zk.exists(zd.topic_path(topic)) is not None

    async def get_topic(self, topic: str, watch=None):
        """(TopicAssignment, zk version) or None; raises ZNodeDataError if malformed."""
        if watch is not None:
            if await self.zk.exists(zd.topic_path(topic), watch) is None:
                return None
        found = await self.zk.get(zd.topic_path(topic))
        if found is None:
            return None
        return zd.decode_topic(topic, found[0]), found[1].version

    async def set_topic(self, topic: str, assignment: zd.TopicAssignment,
                        expected_version: int = -1, epoch_zk_version: int | None = None):
        op = SetDataOp(zd.topic_path(topic), zd.encode_topic(assignment), expected_version)
        if epoch_zk_version is None:
            return await self.zk.set(op.path, op.data, op.version)
        results = await self._guarded(epoch_zk_version, [op])
        if isinstance(results[0], BaseException):
            raise results[0]
        return results[0]

    async def create_topic(self, topic: str, assignment: zd.TopicAssignment,
                           configs: dict) -> None:
        """The admin path (AdminZkClient.createTopicWithAssignment): the topic's config first,
        then its assignment; the controller sees the new child of /brokers/topics."""
        await self.set_entity_config("topics", topic, configs, notify=False)
        try:
            await self.zk.create(zd.topic_path(topic), zd.encode_topic(assignment))
        except NodeExistsError:
            raise TopicExistsError(f"Topic '{topic}' already exists.") from None

    async def get_reassignment(self, watch=None):
        """{(topic, partition): [replicas]} of /admin/reassign_partitions, or None when the
        znode does not exist (its existence is watched); ZNodeDataError if malformed."""
        return (await self.get_reassignment_created(watch))[0]

    async def get_reassignment_created(self, watch=None) -> tuple:
        """(get_reassignment(), the znode's creation zxid or None): the zxid tells a new
        znode from a rewritten one."""
        return await self._get_watching_creation(zd.REASSIGN_PARTITIONS, watch,
                                                 zd.decode_reassignment, with_czxid=True)

    async def _get_watching_creation(self, path: str, watch, decode, with_czxid=False):
        """`decode(data)` of an admin znode, or None when it does not exist; `watch` is set
        on its existence, so a creation fires it too (Kafka's registerZNodeChangeHandler).
        With `with_czxid`, a pair (that, the znode's creation zxid or None)."""
        found = None
        if await self.zk.exists(path, watch) is not None:
            found = await self.zk.get(path)
        if found is None:
            return (None, None) if with_czxid else None
        data, stat = found
        return (decode(data), stat.czxid) if with_czxid else decode(data)

    async def set_reassignment(self, partitions: dict, epoch_zk_version: int) -> None:
        """Rewrite /admin/reassign_partitions with what is left, or delete it when empty."""
        if partitions:
            op = SetDataOp(zd.REASSIGN_PARTITIONS, zd.encode_reassignment(partitions), -1)
        else:
            op = DeleteOp(zd.REASSIGN_PARTITIONS)
        await self._guarded(epoch_zk_version, [op])

    async def get_preferred_replica_election(self, watch=None):
        """The partitions /admin/preferred_replica_election asks for, or None when the znode
        does not exist (its creation is watched); ZNodeDataError if malformed."""
        return await self._get_watching_creation(zd.PREFERRED_REPLICA_ELECTION, watch,
                                                 zd.decode_preferred_replica_election)

    async def delete_preferred_replica_election(self, epoch_zk_version: int) -> None:
        await self._guarded(epoch_zk_version, [DeleteOp(zd.PREFERRED_REPLICA_ELECTION)])

    async def get_isr_change_notifications(self, watch=None) -> dict:
        """{znode name: {(topic, partition)}, or None when unreadable} of the pending
        /isr_change_notification children (brokers before IBP 2.7 write them)."""
        out = {}
        for name in sorted(await self.zk.children(zd.ISR_CHANGE_NOTIFICATION, watch) or []):
            path = f"{zd.ISR_CHANGE_NOTIFICATION}/{name}"
            found = await self.zk.get(path)
            if found is None:
                continue
            try:
                out[name] = zd.decode_partition_set(path, found[0])
            except ZNodeDataError as exc:
                log.error("Ignoring ISR change notification %s", exc)
                out[name] = None
        return out

    async def delete_isr_change_notifications(self, names, epoch_zk_version: int) -> None:
        await self._delete_children(zd.ISR_CHANGE_NOTIFICATION, names, epoch_zk_version)

    async def _delete_children(self, parent: str, names, epoch_zk_version: int) -> None:
        """Delete these children of `parent`, WRITES_PER_MULTI per controller-guarded multi."""
        ops = [DeleteOp(f"{parent}/{n}") for n in names]
        for i in range(0, len(ops), WRITES_PER_MULTI):
            await self._guarded(epoch_zk_version, ops[i:i + WRITES_PER_MULTI])

    async def propagate_log_dir_event(self, broker_id: int) -> None:
        """A broker's log dir failed: a sequential /log_dir_event_notification znode tells the
        controller (Kafka's propagateLogDirEvent)."""
        await self.zk.create(f"{zd.LOG_DIR_EVENT_NOTIFICATION}/{zd.LOG_DIR_EVENT_PREFIX}",
                             zd.encode_log_dir_event(broker_id), sequence=True, makepath=True)

    async def get_log_dir_events(self, watch=None) -> dict:
        """{znode name: broker id} of the pending notifications (unreadable ones: None)."""
        names = await self.zk.children(zd.LOG_DIR_EVENT_NOTIFICATION, watch) or []
        out = {}
        for name in sorted(names):
            path = f"{zd.LOG_DIR_EVENT_NOTIFICATION}/{name}"
            found = await self.zk.get(path)
            try:
                out[name] = None if found is None else zd.decode_log_dir_event(path, found[0])
            except ZNodeDataError:
                out[name] = None
        return out

    async def delete_log_dir_events(self, names, epoch_zk_version: int) -> None:
        await self._delete_children(zd.LOG_DIR_EVENT_NOTIFICATION, names, epoch_zk_version)

    async def mark_topic_for_deletion(self, topic: str) -> None:
        try:
            await self.zk.create(zd.delete_topic_path(topic))
        except NodeExistsError:
            pass

    async def is_marked_for_deletion(self, topic: str) -> bool:
        return await self.zk.exists(zd.delete_topic_path(topic)) is not None

    async def get_topics_to_delete(self, watch=None) -> list:
        return await self.zk.children(zd.DELETE_TOPICS, watch) or []

    async def delete_topic_znodes(self, topic: str, epoch_zk_version: int) -> None:
        """The last step of a deletion: the topic's znodes, its config and its deletion mark."""
        await self._check_epoch(epoch_zk_version)
        await self.zk.delete(zd.topic_path(topic), recursive=True)
        await self.zk.delete(zd.config_path("topics", topic))
        await self.zk.delete(zd.delete_topic_path(topic))

    async def remove_deletion_mark(self, topic: str, epoch_zk_version: int) -> None:
        await self._guarded(epoch_zk_version, [DeleteOp(zd.delete_topic_path(topic))])

    async def _check_epoch(self, epoch_zk_version: int) -> None:
        _refuse_unelected(epoch_zk_version)
        results = await self.zk.multi([CheckOp(zd.CONTROLLER_EPOCH, epoch_zk_version)])
        if isinstance(results[0], BaseException):
            raise ControllerMovedError("controller epoch changed: another broker is controller")

    # -- partition state -----------------------------------------------------------------------

    async def get_partition_state(self, topic: str, partition: int):
        """LeaderAndIsr with its zk version as partition epoch, or None. Raises
        ZNodeDataError for a malformed znode."""
        found = await self.zk.get(zd.partition_state_path(topic, partition))
        if found is None:
            return None
        return zd.decode_partition_state(topic, partition, found[0], found[1].version)

    async def _each(self, items, fn) -> dict:
        """{key: await fn(key, value)} with up to `max_in_flight` calls outstanding, as Kafka
        pipelines its ZooKeeper requests (zookeeper.max.in.flight.requests): a failover or a
        1,000-partition topic is then a few round trips deep, not one per partition."""
        semaphore = asyncio.Semaphore(self.max_in_flight)

        async def one(key, value):
            async with semaphore:
                return key, await fn(key, value)
        return dict(await asyncio.gather(*(one(k, v) for k, v in items)))

    async def create_partition_states(self, states: dict, epoch_zk_version: int) -> dict:
        """{(topic, p): LeaderAndIsr} for new partitions -> {(topic, p): state or error}."""
        for topic in sorted({t for t, _ in states}):
            results = await self._guarded(epoch_zk_version, [CreateOp(zd.partitions_path(topic))])
            if isinstance(results[0], BaseException) and \
                    not isinstance(results[0], NodeExistsError):
                raise results[0]

        async def create(tp, state):
            topic, partition = tp
            data = zd.encode_partition_state(state)
            state_op = CreateOp(zd.partition_state_path(topic, partition), data)
            results = await self._guarded(
                epoch_zk_version, [CreateOp(zd.partition_path(topic, partition)), state_op])
            if isinstance(results[0], NodeExistsError):          # /partitions/P was there
                results = await self._guarded(epoch_zk_version, [state_op])
            else:
                results = results[1:]
            if isinstance(results[0], BaseException):
                return results[0]
            state.partition_epoch = 0
            return state
        return await self._each(states.items(), create)

    async def get_partition_states(self, partitions) -> dict:
        """{(topic, p): LeaderAndIsr | None | ZNodeDataError} read concurrently."""
        async def read(tp, _):
            try:
                return await self.get_partition_state(*tp)
            except ZNodeDataError as exc:
                return exc
        return await self._each(((tp, None) for tp in partitions), read)

    async def update_leader_and_isr(self, states: dict, epoch_zk_version: int) -> dict:
        """Conditional writes of {(topic, p): LeaderAndIsr} (each expecting its
        `partition_epoch` as the znode version) -> {(topic, p): new state (partition epoch
        bumped) | BadVersionError | other exception}.

        Up to WRITES_PER_MULTI partitions go in one multi behind the controller-epoch check
        (all or nothing): a failover of a thousand partitions is a dozen requests, not a
        thousand. When one write of a multi fails (a racing writer moved that znode), that
        partition gets its error and the multi is sent again without it."""
        items = list(states.items())
        chunks = [items[i:i + WRITES_PER_MULTI] for i in range(0, len(items), WRITES_PER_MULTI)]

        async def write(_, chunk):
            out = {}
            while chunk:
                ops = [SetDataOp(zd.partition_state_path(*tp), zd.encode_partition_state(state),
                                 state.partition_epoch) for tp, state in chunk]
                results = await self._guarded(epoch_zk_version, ops)
                failed = [i for i, r in enumerate(results)
                          if isinstance(r, BaseException) and not _rolled_back(r)]
                if not failed:
                    for (tp, state), stat in zip(chunk, results):
                        out[tp] = zd.LeaderAndIsr(state.leader, state.leader_epoch,
                                                  list(state.isr), state.controller_epoch,
                                                  state.recovering, stat.version)
                    break
                for i in failed:
                    out[chunk[i][0]] = results[i]
                chunk = [item for i, item in enumerate(chunk) if i not in failed]
            return out
        merged = {}
        for part in (await self._each(enumerate(chunks), write)).values():
            merged.update(part)
        return merged

    # -- producer ids --------------------------------------------------------------------------

    async def allocate_producer_id_block(self, broker_id: int, block_size: int) -> tuple:
        """Reserve the next block of producer ids in /latest_producer_id_block with a
        conditional write (a racing broker makes it retry): (first id, last id)."""
        path = zd.LATEST_PRODUCER_ID_BLOCK
        while True:
            found = await self.zk.get(path)
            if found is None:
                await self.zk.ensure_path(path)
                continue
            data, stat = found
            start = 0
            if data:
                try:
                    start = int(zd.decode_producer_id_block(data)[1]) + 1
                except ZNodeDataError as exc:
                    raise ZkError(f"cannot allocate producer ids: {exc}") from None
            end = start + block_size - 1
            if end > (1 << 63) - 1:
                raise ZkError(f"cannot allocate producer ids: exhausted, the next block would "
                              f"end at {end}, past the long type limit")
            try:
                await self.zk.set(path, zd.encode_producer_id_block(broker_id, start, end),
                                  stat.version)
                return start, end
            except BadVersionError:
                continue

    # -- configs -------------------------------------------------------------------------------

    async def get_entity_config(self, entity_type: str, name: str) -> dict:
        path = zd.config_path(entity_type, name)
        found = await self.zk.get(path)
        if found is None:
            return {}
        return zd.decode_config(path, found[0])

    async def get_all_entity_configs(self, entity_type: str) -> dict:
        out = {}
        for child in await self.zk.children(f"/config/{entity_type}") or []:
            try:
                out[child] = await self.get_entity_config(entity_type, child)
            except ZNodeDataError as exc:
                log.error("Ignoring config %s", exc)
        return out

    async def set_entity_config(self, entity_type: str, name: str, configs: dict,
                                notify: bool = True) -> None:
        """Write /config/<type>/<name> and (notify) a /config/changes notification, as
        AdminZkClient.changeEntityConfig."""
        path = zd.config_path(entity_type, name)
        data = zd.encode_config(configs)
        try:
            await self.zk.set(path, data)
        except NoNodeError:
            try:
                await self.zk.create(path, data, makepath=True)
            except NodeExistsError:
                await self.zk.set(path, data)
        if notify:
            await self.zk.create(f"{zd.CONFIG_CHANGES}/{zd.CONFIG_CHANGE_PREFIX}",
                                 zd.encode_config_change(f"{entity_type}/{name}"),
                                 sequence=True, makepath=True)

    async def get_config_changes(self, watch=None) -> list:
        return [c for c in await self.zk.children(zd.CONFIG_CHANGES, watch) or []
                if c.startswith(zd.CONFIG_CHANGE_PREFIX)]

    async def purge_config_changes(self, names, now_ms: int,
                                   expiration_ms: int = CONFIG_CHANGE_EXPIRATION_MS) -> int:
        """Kafka's purgeObsoleteNotifications: notifications older than 15 minutes are
        deleted (every broker has applied them by then; without this /config/changes grows
        for ever, and every broker lists it on each change). Returns how many went."""
        purged = 0
        for name in names:
            path = f"{zd.CONFIG_CHANGES}/{name}"
            stat = await self.zk.exists(path)
            if stat is not None and now_ms - stat.ctime > expiration_ms:
                try:
                    await self.zk.delete(path)
                    purged += 1
                except NoNodeError:
                    pass                        # another broker purged it first
        return purged

    async def read_config_change(self, name: str):
        """The entity path a notification names, or None when it is gone or unreadable."""
        path = f"{zd.CONFIG_CHANGES}/{name}"
        found = await self.zk.get(path)
        if found is None:
            return None
        try:
            return zd.decode_config_change(path, found[0])
        except ZNodeDataError as exc:
            log.error("Ignoring config change notification %s", exc)
            return None


def _rolled_back(exc: BaseException) -> bool:
    return type(exc) is ZkError and "rolled back" in str(exc)


__all__ = ["KafkaZk", "ControllerMovedError", "BrokerIdTakenError", "TopicExistsError",
           "BadVersionError", "NoNodeError", "ZkError"]


def _refuse_unelected(epoch_zk_version: int) -> None:
    """A controller write with no epoch version of its own (-1: a context reset by a
    resignation) would match any version in ZooKeeper's check: refused, as Kafka's reset
    context (epochZkVersion 0, which no election leaves) is fenced."""
    if epoch_zk_version < 0:
        raise ControllerMovedError("not the controller (no controller epoch version)")
