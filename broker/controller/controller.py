"""The controller of a ZooKeeper-mode cluster, as Kafka 3.9's KafkaController runs it.

Every broker runs one. It watches the ephemeral `/controller` znode; when that is absent it
tries to create it together with `/controller_epoch + 1` in one multi, and the broker whose
multi succeeds is the controller until its session ends. The active controller:

- loads the cluster from ZooKeeper (live brokers with their epochs = czxid, topics and their
  assignments, every partition's leader/ISR state znode), tells every broker the live brokers
  (UpdateMetadata) and each its partitions' states (LeaderAndIsr), then elects leaders for
  partitions without one;
- reacts to brokers joining, leaving and re-registering (BrokerChange), new topics and
  partitions (TopicChange, PartitionModifications), deletions (/admin/delete_topics),
  controlled shutdowns and leaders' ISR changes (AlterPartition);
- writes every decision to ZooKeeper first, guarded by `CheckOp(/controller_epoch)` and the
  state znode's version (broker/kafka_zk.py), then sends LeaderAndIsr / UpdateMetadata /
  StopReplica (controller/context.py RequestBatch). A write whose epoch check fails means
  another broker is controller: this one resigns.

Events from watches, RPC handlers and the controller's own timers go through one queue,
processed one at a time by one task (Kafka's ControllerEventManager), so the context is never
seen half-changed. ZooKeeper (a KafkaZk), the request sender and the clock are injected:
tests/controller drives this class with an in-memory ZooKeeper and a recording sender.
"""
from __future__ import annotations

import asyncio
import base64
import logging
import uuid

from protocol.errors import ErrorCode

from broker import zk_data as zd
from broker.controller import election
from broker.controller.context import NO_LEADER, ControllerContext, RequestBatch
from broker.kafka_zk import ControllerMovedError
from broker.tasks import cancel_and_wait
from broker.zk_data import BadVersionError, ZNodeDataError

log = logging.getLogger(__name__)

MAX_STATE_WRITE_ATTEMPTS = 5
AUTO_REBALANCE_FIRST_CHECK_S = 5.0      # Kafka's first check after a failover
PREFERRED, UNCLEAN = 0, 1               # ElectLeaders election types
ELECTION_TYPES = {PREFERRED: "PREFERRED", UNCLEAN: "UNCLEAN"}


def topic_id_text(topic_id: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def parse_topic_id(text: str | None) -> uuid.UUID | None:
    if not text:
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        return uuid.UUID(bytes=raw) if len(raw) == 16 else None
    except (ValueError, TypeError):
        return None


class KafkaController:
    def __init__(self, broker_id: int, kzk, sender, *, time, config=None,
                 inter_broker_listener: str | None = None):
        self.broker_id = broker_id
        self.kzk = kzk
        self.sender = sender                # add_broker / remove_broker / send
        self.time = time
        self.config = config
        self.inter_broker_listener = inter_broker_listener
        self.ctx = ControllerContext()
        self.active_controller_id: int | None = None
        self._queue: asyncio.Queue = asyncio.Queue()
        self._task: asyncio.Task | None = None
        self._stopped = False
        self._rebalance_timer = None
        self.log_prefix = f"[Controller id={broker_id}]"
        self._unreadable_logged: set = set()   # partitions of bad replica lists, logged once
        self._watchers: dict = {}               # (fn, args) -> its watch callback (_watch)

    # -- lifecycle and events ------------------------------------------------------------------

    @property
    def is_active(self) -> bool:
        return self.active_controller_id == self.broker_id

    async def startup(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())
        self.enqueue(self._elect)

    async def shutdown(self) -> None:
        """Resign if active and stop processing events."""
        self._stopped = True
        self._cancel_rebalance()
        await cancel_and_wait(self._task)
        if self.is_active:
            self._resign()

    def enqueue(self, fn, *args) -> asyncio.Future:
        """Run coroutine function `fn(*args)` on the controller's event task; the returned
        future has its result."""
        future = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((fn, args, future))
        return future

    async def idle(self) -> None:
        """Wait until every event queued so far has been processed (tests)."""
        await self.enqueue(_noop)

    async def _run(self) -> None:
        while not self._stopped:
            fn, args, future = await self._queue.get()
            try:
                result = await fn(*args)
            except ControllerMovedError as exc:
                log.info("%s Controller moved to another broker (%s); resigning",
                         self.log_prefix, exc)
                self._resign()
                self.enqueue(self._on_controller_change)
                result = exc
            except asyncio.CancelledError:
                raise
            except Exception as exc:                    # noqa: BLE001 - keep the loop alive
                log.exception("%s Error processing event %s", self.log_prefix,
                              getattr(fn, "__name__", fn))
                result = exc
            if not future.done():
                if isinstance(result, BaseException):
                    future.set_exception(result)
                    future.exception()                  # retrieved: no "never retrieved" noise
                else:
                    future.set_result(result)

    def _watch(self, fn, *args):
        """A ZooKeeper watch callback that queues `fn(*args)`: the same object for the same
        call, so reading a znode again before its watch fired leaves one watch (ZkClient keeps
        one per callback and path), not one more each time."""
        key = (fn, args)
        fire = self._watchers.get(key)
        if fire is None:
            def fire(event):
                if not self._stopped:
                    self.enqueue(fn, *args)
            self._watchers[key] = fire
        return fire

    def _forget_watch(self, fn, *args) -> None:
        self._watchers.pop((fn, args), None)

    # -- election ------------------------------------------------------------------------------

    async def _elect(self) -> None:
        controller = await self.kzk.get_controller_id(watch=self._watch(self._on_controller_change))
        if controller is not None:
            self.active_controller_id = controller
            if controller != self.broker_id:
                return
            if self.ctx.epoch_zk_version >= 0:
                return                                   # already active
        try:
            epoch, version = await self.kzk.register_controller_and_increment_epoch(
                self.broker_id, self.time.ms())
        except ControllerMovedError:
            self.active_controller_id = await self.kzk.get_controller_id()
            log.info("%s Broker %s has been elected as the controller, so stopping the "
                     "election process.", self.log_prefix, self.active_controller_id)
            return
        except ZNodeDataError as exc:
            # A hand-edited /controller_epoch: no broker can become controller until it is
            # fixed (Kafka's election fails there too); the next /controller change retries.
            log.error("%s Cannot become the controller: %s", self.log_prefix, exc)
            return
        self.ctx.reset()
        self.ctx.epoch, self.ctx.epoch_zk_version = epoch, version
        self.active_controller_id = self.broker_id
        log.info("%s %d successfully elected as the controller. Epoch incremented to %d and "
                 "epoch zk version is now %d", self.log_prefix, self.broker_id, epoch, version)
        try:
            await self._on_controller_failover()
        except (ControllerMovedError, asyncio.CancelledError):
            raise
        except Exception:                               # noqa: BLE001 - Kafka's elect()
            # Half a failover is no controller: give /controller up so the brokers elect
            # again (Kafka's triggerControllerMove), rather than hold it with a partial view.
            log.exception("%s Error while electing or becoming controller on broker %d. "
                          "Trigger controller movement immediately", self.log_prefix,
                          self.broker_id)
            await self._trigger_controller_move(version)

    async def _trigger_controller_move(self, epoch_zk_version: int) -> None:
        self._resign()
        self.active_controller_id = None
        try:
            await self.kzk.delete_controller(epoch_zk_version)
        except ControllerMovedError:
            log.warning("%s Controller has already moved when trying to trigger controller "
                        "movement", self.log_prefix)

    async def _on_controller_change(self) -> None:
        was_active = self.is_active
        controller = await self.kzk.get_controller_id(watch=self._watch(self._on_controller_change))
        self.active_controller_id = controller
        if was_active and controller != self.broker_id:
            self._resign()
        if controller is None:
            await self._elect()

    async def reelect_after_session_renewal(self) -> None:
        """After a ZooKeeper session expiry (the broker re-registered): as Kafka's
        RegisterBrokerAndReelect."""
        if self.is_active:
            self._resign()
        self.active_controller_id = None
        await self._elect()

    def session_expired(self) -> None:
        """The session is gone: a controller is no longer one (its /controller vanished)."""
        if self.is_active:
            log.info("%s Resigning: ZooKeeper session expired", self.log_prefix)
            self._resign()
        self._cancel_rebalance()
        self.active_controller_id = None

    def _resign(self) -> None:
        """Stop acting as controller: no timers, no connections, an empty context. Its
        /controller znode goes with its session (another controller's write has replaced it
        already when this broker learns it lost)."""
        log.info("%s Resigned", self.log_prefix)
        self._cancel_rebalance()
        for broker in list(self.ctx.live_brokers):
            self.sender.remove_broker(broker)
        self.ctx.reset()
        if self.active_controller_id == self.broker_id:
            self.active_controller_id = None

    # -- failover ------------------------------------------------------------------------------

    async def _on_controller_failover(self) -> None:
        ctx = self.ctx
        await self._load_brokers()
        for topic in await self.kzk.get_all_topics(watch=self._watch(self._on_topic_change)):
            await self._load_topic(topic)
        await self._load_partition_states(list(ctx.all_partitions()))
        marks = await self.kzk.get_topics_to_delete(watch=self._watch(self._on_topic_deletion))
        await self._init_deletions(marks)
        # The live brokers first (no partitions), so every broker knows every leader's
        # endpoint before any LeaderAndIsr arrives; then every replica's current state.
        batch = self._batch()
        batch.add_update_metadata(ctx.live_or_shutting_down_ids())
        self._send(batch)
        await self._start_replicas(list(ctx.all_partitions()))
        await self._trigger_online_partition_state_change()
        self._zk_reassignment_czxid = None
        from_zk = await self._on_zk_reassignment()
        await self._resume_reassignments(skip=from_zk)
        await self._on_log_dir_event()
        await self._on_isr_change_notification()
        await self._resume_deletions()
        await self._on_zk_preferred_election()
        if self._config("auto.leader.rebalance.enable", False):
            self._schedule_rebalance(AUTO_REBALANCE_FIRST_CHECK_S)
        log.info("%s Ready to serve as the new controller with epoch %d (%d brokers, %d "
                 "topics, %d partitions)", self.log_prefix, ctx.epoch, len(ctx.live_brokers),
                 len(ctx.assignments), len(ctx.states))

    async def _take_on_topic(self, topic: str) -> None:
        """What a failover does, for one topic read late: its partitions' states loaded and
        sent to every replica, dead replicas out of the ISRs, partitions without a state or a
        live leader given one, a reassignment in the znode carried on."""
        ctx = self.ctx
        partitions = [(topic, p) for p in sorted(ctx.assignments[topic])]
        await self._load_partition_states(partitions)
        await self._start_replicas(partitions)
        await self._trigger_online_partition_state_change(topic)
        for tp in partitions:
            if ctx.is_reassigning(tp):
                await self._on_partition_reassignment(tp, ctx.target_replicas(tp))

    async def _start_replicas(self, partitions: list) -> None:
        """Kafka's replica state machine start-up for `partitions`: every replica told its
        partition's state (those that have one), and the replicas on brokers that are not
        alive taken out of every ISR, so the elections that follow and the ISRs agree."""
        ctx = self.ctx
        batch = self._batch()
        for tp in partitions:
            if tp in ctx.states:
                batch.add_leader_and_isr(ctx.replicas(tp), tp)
        dead = sorted({r for tp in partitions for r in ctx.replicas(tp)} - set(ctx.live_brokers))
        for broker in dead:
            await self._remove_replica_from_isr(
                broker, [tp for tp in partitions if broker in ctx.replicas(tp)], batch)
        self._send(batch)

    async def _load_brokers(self) -> dict:
        brokers = await self.kzk.get_all_brokers(watch=self._watch(self._on_broker_change))
        for broker_id, (info, epoch) in brokers.items():
            self.ctx.live_brokers[broker_id] = info
            self.ctx.broker_epochs[broker_id] = epoch
            self.sender.add_broker(info)
        return brokers

    async def _load_topic(self, topic: str) -> bool:
        """Read /brokers/topics/T (setting its data watch) into the context; a topic without
        a topic id gets one, written back as Kafka's controller does."""
        try:
            found = await self.kzk.get_topic(
                topic, watch=self._watch(self._on_partition_modifications, topic))
        except ZNodeDataError as exc:
            log.error("%s Ignoring topic %s: %s", self.log_prefix, topic, exc)
            self.ctx.ignored_topics.add(topic)
            return False
        if found is None:
            return False
        assignment, version = found
        for p, (_, why) in assignment.unreadable.items():
            if (topic, p) not in self._unreadable_logged:
                self._unreadable_logged.add((topic, p))
                log.error("%s Ignoring partition %s-%d: %s", self.log_prefix, topic, p, why)
        topic_id = parse_topic_id(assignment.topic_id)
        if topic_id is None and assignment.topic_id:
            # Kafka cannot read such a topic znode either; replacing the id would cut the
            # topic off from its logs (their partition.metadata names the old one).
            log.error("%s Ignoring topic %s: unreadable topic_id %r", self.log_prefix, topic,
                      assignment.topic_id)
            self.ctx.ignored_topics.add(topic)
            return False
        self.ctx.ignored_topics.discard(topic)
        if topic_id is None:
            topic_id = uuid.uuid4()
            assignment.topic_id = topic_id_text(topic_id)
            await self.kzk.set_topic(topic, assignment, version, self.ctx.epoch_zk_version)
        self.ctx.assignments[topic] = dict(assignment.partitions)
        self.ctx.set_unreadable(topic, assignment.unreadable)
        for p in assignment.partitions:
            adding, removing = assignment.adding.get(p, []), assignment.removing.get(p, [])
            if adding or removing:
                self.ctx.set_assignment((topic, p), assignment.partitions[p], adding, removing)
        self.ctx.topic_ids[topic] = topic_id
        return True

    async def _load_partition_states(self, partitions) -> None:
        for tp, state in (await self.kzk.get_partition_states(partitions)).items():
            if isinstance(state, ZNodeDataError):
                log.error("%s Ignoring unreadable partition state %s", self.log_prefix, state)
            elif state is not None:
                self.ctx.states[tp] = state

    # -- the partition state machine -----------------------------------------------------------

    async def unclean_leader_election_enabled(self, topic: str | None = None) -> None:
        """unclean.leader.election.enable was turned on for `topic` (None: the cluster default
        or this broker's): partitions without a leader get one now, as Kafka's
        UncleanLeaderElectionEnable and TopicUncleanLeaderElectionEnable events (the latter only
        for the topic's partitions), rather than at the next broker change."""
        if not self.is_active:
            return
        log.info("%s Unclean leader election enabled for %s: electing leaders of offline "
                 "partitions", self.log_prefix, f"topic {topic}" if topic else "the cluster")
        await self._trigger_online_partition_state_change(topic)

    async def _trigger_online_partition_state_change(self, topic: str | None = None) -> None:
        """Give every partition without a live leader one (New and Offline -> Online); with
        `topic`, only that topic's partitions."""
        ctx = self.ctx
        # A leader in controlled shutdown is alive: its partitions are online (Kafka acts on
        # OfflinePartition and NewPartition only), not up for an (unclean) election.
        live = ctx.live_or_shutting_down_ids()
        new, offline = [], []
        for tp in ctx.all_partitions():
            if topic is not None and tp[0] != topic:
                continue
            if tp[0] in ctx.topics_to_delete:
                continue
            state = ctx.states.get(tp)
            if state is None:
                new.append(tp)
            elif state.leader not in live or state.leader in ctx.offline_replicas.get(tp, ()):
                offline.append(tp)
        if new:
            await self._init_new_partitions(new)
        if offline:
            await self._elect_leaders(offline, "offline")

    async def _init_new_partitions(self, partitions) -> None:
        ctx = self.ctx
        live = ctx.live_ids()
        states = {}
        for tp in partitions:
            chosen = election.new_partition(ctx.replicas(tp), live)
            if chosen is None:
                log.error("%s Controller failed to initialize partition %s-%d: no live replicas "
                          "among %s", self.log_prefix, tp[0], tp[1], ctx.replicas(tp))
                continue
            leader, isr = chosen
            states[tp] = zd.LeaderAndIsr(leader, 0, isr, ctx.epoch)
        if not states:
            return
        results = await self.kzk.create_partition_states(states, ctx.epoch_zk_version)
        batch = self._batch()
        for tp, result in results.items():
            if isinstance(result, BaseException):
                # Created meanwhile (a previous controller's attempt): take what is there.
                existing = await self._read_state(tp)
                if existing is None:
                    log.error("%s Failed to create state of %s-%d: %s", self.log_prefix, *tp,
                              result)
                    continue
                result = existing
            ctx.states[tp] = result
            batch.add_leader_and_isr(result.isr, tp, is_new=True)
        self._send(batch)

    async def _read_state(self, tp):
        """A partition's state as ZooKeeper has it; None, logged, when it is missing or holds
        what Kafka would not write (that partition is then left alone, as Kafka's controller
        leaves a partition whose state it cannot read)."""
        try:
            return await self.kzk.get_partition_state(*tp)
        except ZNodeDataError as exc:
            log.error("%s Ignoring unreadable partition state %s", self.log_prefix, exc)
            return None

    async def _unclean_allowed(self, topic: str) -> bool:
        if self.config is None:
            return False
        try:
            configs = await self.kzk.get_entity_config("topics", topic)
        except ZNodeDataError as exc:
            log.error("%s %s", self.log_prefix, exc)
            configs = {}
        value = configs.get("unclean.leader.election.enable")
        if value is None:
            return bool(self.config.get("unclean.leader.election.enable"))
        return value.strip().lower() == "true"

    async def _update_states(self, partitions, decide) -> dict:
        """Write new partition states: `decide(tp, current state)` returns the new
        LeaderAndIsr, or anything else to leave the partition as it is (that value is then its
        result). Each write expects the state znode's version; one that lost a race (BADVERSION)
        is decided again on the state re-read from ZooKeeper. Returns {tp: new state (in the
        context now) | the decision's value | the write's exception}."""
        ctx = self.ctx
        out = {}
        attempts = {tp: 0 for tp in partitions if tp in ctx.states}
        while attempts:
            writes = {}
            for tp in list(attempts):
                decision = await decide(tp, ctx.states[tp])
                if isinstance(decision, zd.LeaderAndIsr):
                    writes[tp] = decision
                else:
                    out[tp] = decision
                    del attempts[tp]
            if not writes:
                break
            results = await self.kzk.update_leader_and_isr(writes, ctx.epoch_zk_version)
            for tp, result in results.items():
                if isinstance(result, BadVersionError) and \
                        attempts[tp] < MAX_STATE_WRITE_ATTEMPTS:
                    attempts[tp] += 1
                    try:
                        fresh = await self.kzk.get_partition_state(*tp)
                    except ZNodeDataError as exc:
                        log.error("%s Failed to change the state of %s-%d: %s",
                                  self.log_prefix, *tp, exc)
                        del attempts[tp]
                        out[tp] = exc
                        continue
                    if fresh is not None:
                        ctx.states[tp] = fresh
                    continue
                del attempts[tp]
                if not isinstance(result, BaseException):
                    ctx.states[tp] = result
                out[tp] = result
        return out

    async def _elect_leaders(self, partitions, strategy: str, *, allow_unclean=None,
                             batch: RequestBatch | None = None) -> dict:
        """Elect a leader for each partition with `strategy` (offline, controlled_shutdown,
        preferred); write ZooKeeper, then send LeaderAndIsr/UpdateMetadata. Returns
        {tp: new state or ErrorCode}."""
        ctx = self.ctx
        own_batch = batch is None
        batch = batch if batch is not None else self._batch()
        unclean_cache: dict = {}

        async def decide(tp, state):
            assignment = ctx.replicas(tp)
            live = ctx.live_replica_ids(tp)
            chosen, unclean = None, False
            if strategy == "offline":
                allowed = allow_unclean
                if allowed is None:
                    if tp[0] not in unclean_cache:
                        unclean_cache[tp[0]] = await self._unclean_allowed(tp[0])
                    allowed = unclean_cache[tp[0]]
                found = election.offline_partition(assignment, state.isr, live, allowed)
                if found is not None:
                    chosen, unclean = found[:2], found[2]
            elif strategy == "controlled_shutdown":
                chosen = election.controlled_shutdown(
                    assignment, state.isr, ctx.live_or_shutting_down_ids(), ctx.shutting_down)
            elif strategy == "preferred":
                chosen = election.preferred(assignment, state.isr, live)
            elif strategy == "reassign":
                chosen = election.reassign(ctx.target_replicas(tp), state.isr, live)
            if chosen is None:
                if strategy == "offline":
                    log.error("%s No eligible leader for %s-%d: replicas %s, ISR %s, live "
                              "brokers %s", self.log_prefix, tp[0], tp[1], assignment,
                              state.isr, sorted(live))
                return (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE if strategy == "preferred"
                        else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
            leader, isr = chosen
            if unclean:
                log.warning("%s Unclean leader election for %s-%d: broker %d was not in the "
                            "ISR %s; records it lacks are lost", self.log_prefix, tp[0], tp[1],
                            leader, state.isr)
            # Kafka's Election: a clean election keeps the recovery state (only the leader's
            # own AlterPartition says RECOVERED); an unclean one starts RECOVERING.
            return state.new_leader(leader, isr, ctx.epoch,
                                    recovering=unclean or state.recovering)

        out = await self._update_states(partitions, decide)
        recipients = (ctx.live_or_shutting_down_ids() if strategy == "controlled_shutdown"
                      else ctx.live_ids())
        for tp, result in out.items():
            if isinstance(result, BaseException):
                log.error("%s Failed to elect a leader for %s-%d: %s", self.log_prefix,
                          tp[0], tp[1], result)
                out[tp] = ErrorCode.UNKNOWN_SERVER_ERROR
            elif isinstance(result, zd.LeaderAndIsr):
                batch.add_leader_and_isr([r for r in ctx.replicas(tp) if r in recipients], tp)
        if own_batch:
            self._send(batch)
        return out

    async def _remove_replica_from_isr(self, broker_id: int, partitions,
                                       batch: RequestBatch) -> None:
        """The replica on `broker_id` goes offline (Kafka's OfflineReplica): out of each ISR
        with the leader epoch bumped; a leader that was it becomes -1; an ISR is never left
        empty (the last member stays, leaderless: 'last replica standing'). Partitions of
        topics being deleted are left alone, as Kafka's onReplicasBecomeOffline leaves them:
        a LeaderAndIsr for one would make a replica whose log was deleted create it again."""
        ctx = self.ctx
        partitions = [tp for tp in partitions if tp[0] not in ctx.topics_to_delete]

        async def decide(tp, state):
            if broker_id not in state.isr and state.leader != broker_id:
                return None
            isr = [r for r in state.isr if r != broker_id] or list(state.isr)
            leader = NO_LEADER if state.leader == broker_id else state.leader
            return zd.LeaderAndIsr(leader, zd.next_leader_epoch(state.leader_epoch), isr,
                                   ctx.epoch, state.recovering, state.partition_epoch)

        for tp, result in (await self._update_states(partitions, decide)).items():
            if isinstance(result, BaseException):
                log.error("%s Failed to remove broker %d from the ISR of %s-%d: %s",
                          self.log_prefix, broker_id, tp[0], tp[1], result)
            elif isinstance(result, zd.LeaderAndIsr):
                # every other replica on a live broker, those in controlled shutdown too
                # (Kafka's OfflineReplica recipients): a leader still shutting down applies
                # its smaller ISR and its high watermark moves on
                batch.add_leader_and_isr([r for r in ctx.replicas(tp) if r != broker_id], tp)

    # -- brokers -------------------------------------------------------------------------------

    async def _on_broker_change(self) -> None:
        if not self.is_active:
            return
        ctx = self.ctx
        current = await self.kzk.get_all_brokers(watch=self._watch(self._on_broker_change))
        new = sorted(b for b in current if b not in ctx.live_brokers)
        dead = sorted(b for b in ctx.live_brokers if b not in current)
        bounced = sorted(b for b in current if b in ctx.live_brokers
                         and current[b][1] > ctx.broker_epochs.get(b, -1))
        if not (new or dead or bounced):
            return
        log.info("%s Newly added brokers: %s, deleted brokers: %s, bounced brokers: %s, all "
                 "live brokers: %s", self.log_prefix, ",".join(map(str, new)),
                 ",".join(map(str, dead)), ",".join(map(str, bounced)),
                 ",".join(map(str, sorted(current))))
        for b in dead + bounced:
            self.sender.remove_broker(b)
        if dead or bounced:
            await self._on_broker_failure(dead + bounced)
        for b in new + bounced:
            info, epoch = current[b]
            ctx.live_brokers[b] = info
            ctx.broker_epochs[b] = epoch
            self.sender.add_broker(info)
        if new or bounced:
            await self._on_broker_startup(new + bounced)

    async def _on_broker_failure(self, brokers) -> None:
        ctx = self.ctx
        for b in brokers:
            ctx.live_brokers.pop(b, None)
            ctx.broker_epochs.pop(b, None)
            ctx.shutting_down.discard(b)
        ctx.forget_offline_replicas(brokers)
        batch = self._batch()
        led = [tp for tp in ctx.states if ctx.states[tp].leader in brokers
               and tp[0] not in ctx.topics_to_delete]
        if led:
            await self._elect_leaders(led, "offline", batch=batch)
        for b in brokers:
            await self._remove_replica_from_isr(b, ctx.partitions_on_broker(b), batch)
        if not batch:
            batch.add_update_metadata(ctx.live_or_shutting_down_ids())
        self._send(batch)

    async def _on_broker_startup(self, brokers) -> None:
        ctx = self.ctx
        ctx.forget_offline_replicas(brokers)          # a restarted broker has its dirs back
        existing = ctx.live_or_shutting_down_ids() - set(brokers)
        batch = self._batch()
        batch.add_update_metadata(existing)
        self._send(batch)
        # The new brokers learn every partition, then their own replicas' states.
        batch = self._batch()
        batch.update_metadata_all_partitions = True
        batch.add_update_metadata(brokers)
        self._send(batch)
        batch = self._batch()
        online = []
        for b in brokers:
            for tp in ctx.partitions_on_broker(b):
                # Only a deletion that started leaves the replica alone (Kafka's
                # OnlineReplica for the others: one waiting for a reassignment to finish
                # would otherwise never fetch, and neither would finish).
                if tp in ctx.states and tp[0] not in ctx.deletion_started:
                    batch.leader_and_isr.setdefault(b, {})[tp] = False
                    online.append(tp)
        # Every broker learns the replicas are back (offline_replicas), as Kafka's
        # addLeaderAndIsrRequestForBrokers also queues UpdateMetadata to all of them.
        batch.add_update_metadata(ctx.live_or_shutting_down_ids(), online)
        self._resume_deletions_on(set(brokers), batch)
        self._send(batch)
        await self._trigger_online_partition_state_change()
        await self._resume_deletions()

    # -- topics --------------------------------------------------------------------------------

    async def _on_topic_change(self) -> None:
        if not self.is_active:
            return
        ctx = self.ctx
        topics = set(await self.kzk.get_all_topics(watch=self._watch(self._on_topic_change)))
        for gone in set(ctx.assignments) - topics:
            ctx.remove_topic(gone)
            self._forget_watch(self._on_partition_modifications, gone)
        ctx.ignored_topics &= topics
        added = sorted(topics - set(ctx.assignments))
        new_partitions = []
        for topic in added:
            if await self._load_topic(topic):
                new_partitions += [(topic, p) for p in ctx.assignments[topic]]
                log.info("%s New topics: [%s], new partition replica assignment %s",
                         self.log_prefix, topic, ctx.assignments[topic])
        if new_partitions:
            await self._init_new_partitions(new_partitions)

    async def _on_partition_modifications(self, topic: str) -> None:
        if not self.is_active:
            return
        ctx = self.ctx
        if topic not in ctx.assignments:
            # A topic ignored as unreadable (_load_topic left its watch), mended since: taken
            # on now rather than at the next controller failover (Kafka's controller would
            # keep it unmanaged). Any other topic unknown here is being created or is gone.
            if topic in ctx.ignored_topics and await self._load_topic(topic):
                log.info("%s Topic %s is readable again, partition replica assignment %s",
                         self.log_prefix, topic, ctx.assignments[topic])
                await self._take_on_topic(topic)
            return
        try:
            found = await self.kzk.get_topic(
                topic, watch=self._watch(self._on_partition_modifications, topic))
        except ZNodeDataError as exc:
            log.error("%s Ignoring change of topic %s: %s", self.log_prefix, topic, exc)
            return
        if found is None:
            return
        assignment, _ = found
        ctx.set_unreadable(topic, {p: u for p, u in assignment.unreadable.items()
                                   if p not in ctx.assignments[topic]})
        added = {p: r for p, r in assignment.partitions.items()
                 if p not in ctx.assignments[topic]}
        if not added:
            return
        if topic in ctx.topics_to_delete:
            log.error("%s Skipping adding partitions %s to topic %s: it is being deleted",
                      self.log_prefix, sorted(added), topic)
            # Kafka's restorePartitionReplicaAssignment: the znode goes back to the
            # partitions the deletion waits for (a later controller would wait on the others)
            await self._write_assignment(topic)
            return
        log.info("%s New partitions to be added %s", self.log_prefix, added)
        ctx.assignments[topic].update(added)
        await self._init_new_partitions([(topic, p) for p in sorted(added)])

    async def _init_deletions(self, marks) -> None:
        """Kafka's TopicDeletionManager.init at a failover: with delete.topic.enable=false the
        marks are removed, not acted on (a mark left from before deletion was disabled, or
        written by a tool); a mark whose topic is gone (a crash between the deletion's last
        writes) is completed, so the name can be used again."""
        ctx = self.ctx
        if not (self.config is None or self.config.get("delete.topic.enable")):
            for topic in marks:
                log.info("%s Removing %s from the deletion queue: delete.topic.enable is false",
                         self.log_prefix, topic)
                await self.kzk.remove_deletion_mark(topic, ctx.epoch_zk_version)
            ctx.topics_to_delete = set()
            return
        ctx.topics_to_delete = {t for t in marks if t in ctx.assignments}
        for topic in sorted(set(marks) - ctx.topics_to_delete):
            log.info("%s Completing the deletion of topic %s (its replicas are gone)",
                     self.log_prefix, topic)
            await self.kzk.delete_topic_znodes(topic, ctx.epoch_zk_version)

    async def _on_topic_deletion(self) -> None:
        if not self.is_active:
            return
        ctx = self.ctx
        marks = await self.kzk.get_topics_to_delete(watch=self._watch(self._on_topic_deletion))
        enabled = self.config is None or self.config.get("delete.topic.enable")
        for topic in marks:
            if topic not in ctx.assignments or not enabled:
                if not enabled:
                    log.info("%s Removing %s from the deletion queue: delete.topic.enable is "
                             "false", self.log_prefix, topic)
                else:
                    log.info("%s Ignoring request to delete non-existing topics %s",
                             self.log_prefix, topic)
                await self.kzk.remove_deletion_mark(topic, ctx.epoch_zk_version)
                continue
            if topic not in ctx.topics_to_delete:
                log.info("%s New topics to be deleted: %s", self.log_prefix, topic)
                ctx.topics_to_delete.add(topic)
        await self._resume_deletions()

    async def _resume_deletions(self) -> None:
        ctx = self.ctx
        for topic in sorted(ctx.topics_to_delete):
            if topic in ctx.deletion_started:
                continue
            partitions = [(topic, p) for p in ctx.assignments.get(topic, {})]
            if any(ctx.is_reassigning(tp) for tp in partitions):
                log.info("%s Deletion of topic %s waits: a reassignment is in progress",
                         self.log_prefix, topic)
                continue
            # Kafka's onTopicDeletion: every broker learns the topic is going (leader -2) and
            # the live replicas are deleted at once; a replica on a dead broker waits for it
            # to come back (ReplicaDeletionIneligible), and the topic's znodes go when every
            # replica is deleted.
            replicas = {(b, tp) for tp in partitions for b in ctx.replicas(tp)}
            ctx.deletion_started[topic] = set(replicas)
            batch = self._batch()
            batch.add_update_metadata(ctx.live_or_shutting_down_ids(), partitions)
            self._stop_for_deletion(batch, sorted(replicas))
            self._send(batch)
            if not replicas:
                await self._complete_deletion(topic)

    def _stop_for_deletion(self, batch, replicas) -> None:
        """StopReplica(delete) to the live ones of `replicas` [(broker, tp)]."""
        waiting = set()
        for b, tp in replicas:
            if b in self.ctx.live_brokers:
                batch.add_stop_replica(b, tp, delete=True)
            else:
                waiting.add(b)
        if waiting:
            log.info("%s Deletion of %s waits for brokers %s to come back", self.log_prefix,
                     ", ".join(sorted({tp[0] for _, tp in replicas})), sorted(waiting))

    def _resume_deletions_on(self, brokers, batch) -> None:
        """Brokers came back: their replicas of topics being deleted are deleted now (a
        StopReplica lost when a broker died is sent again), as Kafka's
        resumeDeletionForTopics."""
        for topic, waiting in sorted(self.ctx.deletion_started.items()):
            self._stop_for_deletion(batch, sorted(r for r in waiting if r[0] in brokers))

    async def stop_replica_response(self, broker_id: int, response, deleted=None) -> None:
        """A StopReplica was answered: the deletion of a topic completes when every replica
        has answered one with delete=true (`deleted`: those partitions of the request; Kafka's
        isPartitionDeleted) without error."""
        ctx = self.ctx
        for error in response.partition_errors or []:
            topic = error.topic_name
            waiting = ctx.deletion_started.get(topic)
            if waiting is None:
                continue
            tp = (topic, error.partition_index)
            if deleted is not None and tp not in deleted:
                continue                    # a controlled shutdown's delete=false answer
            if error.error_code == ErrorCode.NONE and response.error_code == ErrorCode.NONE:
                waiting.discard((broker_id, tp))
            if not waiting:
                await self._complete_deletion(topic)

    async def _complete_deletion(self, topic: str) -> None:
        await self.kzk.delete_topic_znodes(topic, self.ctx.epoch_zk_version)
        self.ctx.remove_topic(topic)
        self._forget_watch(self._on_partition_modifications, topic)
        log.info("%s Deletion of topic %s successfully completed", self.log_prefix, topic)

    # -- requests from brokers -----------------------------------------------------------------

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int):
        """(error code, [(topic, partition) with other replicas the broker still leads])."""
        if not self.is_active:
            return ErrorCode.STALE_CONTROLLER_EPOCH, []
        ctx = self.ctx
        if broker_id not in ctx.live_brokers:
            return ErrorCode.BROKER_NOT_AVAILABLE, []
        if broker_epoch != -1 and broker_epoch < ctx.broker_epochs.get(broker_id, -1):
            return ErrorCode.STALE_BROKER_EPOCH, []
        log.info("%s Shutting down broker %d", self.log_prefix, broker_id)
        ctx.shutting_down.add(broker_id)
        batch = self._batch()
        hosted = [tp for tp in ctx.partitions_on_broker(broker_id)
                  if tp[0] not in ctx.topics_to_delete and len(ctx.replicas(tp)) > 1
                  and tp in ctx.states]
        led = [tp for tp in hosted if ctx.states[tp].leader == broker_id]
        followed = [tp for tp in hosted if ctx.states[tp].leader != broker_id]
        if led:
            await self._elect_leaders(led, "controlled_shutdown", batch=batch)
        for tp in followed:
            batch.add_stop_replica(broker_id, tp, delete=False)
        await self._remove_replica_from_isr(broker_id, followed, batch)
        self._send(batch)
        # Kafka's partitionLeadersOnBroker: a partition with one replica, or of a topic being
        # deleted, cannot be moved and does not hold the shutdown up.
        remaining = sorted(tp for tp in ctx.partitions_led_by(broker_id)
                           if tp[0] not in ctx.topics_to_delete and len(ctx.replicas(tp)) > 1)
        return ErrorCode.NONE, remaining

    async def alter_partition(self, broker_id: int, broker_epoch: int, changes: dict):
        """A leader's ISR changes {(topic, p): (leader_epoch, new_isr, recovering,
        partition_epoch)} -> (top-level error, {tp: ErrorCode | LeaderAndIsr})."""
        ctx = self.ctx
        if not self.is_active:
            return ErrorCode.NOT_CONTROLLER, {}
        if broker_id not in ctx.live_or_shutting_down_ids() or \
                ctx.broker_epochs.get(broker_id) != broker_epoch:
            return ErrorCode.STALE_BROKER_EPOCH, {}
        out, writes = {}, {}
        live = ctx.live_ids()
        for tp, (leader_epoch, new_isr, recovering, partition_epoch) in changes.items():
            state = ctx.states.get(tp)
            if tp[0] not in ctx.assignments or state is None:
                out[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif partition_epoch > state.partition_epoch or leader_epoch > state.leader_epoch:
                out[tp] = ErrorCode.NOT_CONTROLLER
            elif leader_epoch < state.leader_epoch:
                out[tp] = ErrorCode.FENCED_LEADER_EPOCH
            elif (state.leader == broker_id and sorted(state.isr) == sorted(new_isr)
                  and state.recovering == recovering):
                out[tp] = state                     # a retry of what is already there
            elif partition_epoch < state.partition_epoch:
                out[tp] = ErrorCode.INVALID_UPDATE_VERSION
            elif recovering and len(new_isr) > 1 or (not state.recovering and recovering):
                out[tp] = ErrorCode.INVALID_REQUEST
            elif any(r not in live for r in new_isr):
                out[tp] = ErrorCode.INELIGIBLE_REPLICA
            else:
                # Written with this controller's epoch, as Kafka's updateLeaderAndIsr.
                writes[tp] = zd.LeaderAndIsr(broker_id, state.leader_epoch, list(new_isr),
                                             ctx.epoch, recovering, state.partition_epoch)
        if writes:
            results = await self.kzk.update_leader_and_isr(writes, ctx.epoch_zk_version)
            batch = self._batch()
            for tp, result in results.items():
                if isinstance(result, BaseException):
                    out[tp] = ErrorCode.INVALID_UPDATE_VERSION
                    continue
                log.info("%s ISR of %s-%d changed to %s by leader %d (partition epoch %d)",
                         self.log_prefix, tp[0], tp[1], result.isr, broker_id,
                         result.partition_epoch)
                ctx.states[tp] = result
                out[tp] = result
                batch.add_update_metadata(ctx.live_or_shutting_down_ids(), [tp])
            self._send(batch)
            # After the answer (the next event): a reassignment whose targets all joined the
            # ISR completes (Kafka's maybeCompleteReassignment).
            done = [tp for tp, r in out.items()
                    if isinstance(r, zd.LeaderAndIsr) and ctx.is_reassigning(tp)]
            if done:
                self.enqueue(self._maybe_complete_reassignments, done)
        return ErrorCode.NONE, out

    # -- reassignment (Kafka's onPartitionReassignment) -----------------------------------------
    #
    # RS = current replicas, ORS = origin, TRS = target, AR = TRS - ORS, RR = ORS - TRS.
    # Start: ZooKeeper and memory get RS = TRS + ORS with AR and RR; the leader epoch is bumped
    # and every replica gets LeaderAndIsr (the new ones as new): they fetch and join the ISR.
    # When TRS is in the ISR (checked after each successful AlterPartition): RS = TRS, the
    # leader moves if it is not in TRS, RR leave the ISR and are deleted (StopReplica), then
    # ZooKeeper gets RS = TRS without AR and RR, and every broker UpdateMetadata.

    async def alter_partition_reassignments(self, requests: dict) -> dict:
        """AlterPartitionReassignments: {tp: target replicas, or None to cancel} ->
        {tp: (error code, message or None)}. An API reassignment of a partition replaces
        its entry in /admin/reassign_partitions."""
        if not self.is_active:
            return {tp: (ErrorCode.NOT_CONTROLLER, None) for tp in requests}
        out, todo = self._build_reassignments(requests)
        await self._remove_from_zk_reassignment(set(todo))
        out.update(await self._trigger_reassignments(todo))
        return out

    def _build_reassignments(self, requests: dict, check_live=True) -> tuple:
        """(results of the refused ones, {tp: target} to start) (Kafka's validateReplicas and
        maybeBuildReassignment; cancelling means going back to the origin replicas)."""
        ctx = self.ctx
        out, todo = {}, {}
        for tp, target in requests.items():
            if target is not None:
                error = self._invalid_replicas(tp, list(target), check_live)
                if error is not None:
                    out[tp] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT, error)
                    continue
            if ctx.is_reassigning(tp):
                todo[tp] = list(target) if target is not None else ctx.origin_replicas(tp)
            elif target is None:
                out[tp] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)
            else:
                todo[tp] = list(target)
        return out, todo

    async def _trigger_reassignments(self, todo: dict) -> dict:
        ctx = self.ctx
        out = {}
        for tp, target in todo.items():
            if tp[0] in ctx.topics_to_delete or not ctx.replicas(tp) or tp not in ctx.states:
                if tp[0] in ctx.topics_to_delete:
                    log.info("%s Skipping reassignment of %s-%d since the topic is currently "
                             "being deleted", self.log_prefix, *tp)
                out[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
                continue
            try:
                await self._on_partition_reassignment(tp, target)
                out[tp] = (ErrorCode.NONE, None)
            except ControllerMovedError:
                raise
            except Exception:
                log.exception("%s Error completing reassignment of partition %s-%d",
                              self.log_prefix, *tp)
                out[tp] = (ErrorCode.UNKNOWN_SERVER_ERROR, None)
        return out

    async def _on_zk_reassignment(self) -> set:
        """/admin/reassign_partitions was created (the pre-KIP-455 tools and scripts write
        it), or this controller took over: start what it asks; entries that fail are logged
        and removed from it, the others are removed as they complete, and the znode goes when
        empty. As Kafka's PartitionReassignmentHandler, only a new znode is acted on: a
        rewrite (the controller's own, as entries complete, or an operator's) is not. Answers
        the partitions started."""
        if not self.is_active:
            return set()
        try:
            found, czxid = await self.kzk.get_reassignment_created(
                watch=self._watch(self._on_zk_reassignment))
        except ZNodeDataError as exc:
            log.error("%s Ignoring %s: %s", self.log_prefix, zd.REASSIGN_PARTITIONS, exc)
            return set()
        if czxid is not None and czxid == self._zk_reassignment_czxid:
            return set()
        self._zk_reassignment_czxid = czxid
        if not found:
            return set()
        # No liveness check here, as Kafka's ZK path: a move to a broker that is down starts
        # and completes when it comes up; malformed replica lists are still refused.
        out, todo = self._build_reassignments(found, check_live=False)
        out.update(await self._trigger_reassignments(todo))
        failed = {tp: r for tp, r in out.items() if r[0] != ErrorCode.NONE}
        if failed:
            log.warning("%s Failed reassignment through zk with the following errors: %s",
                        self.log_prefix, {f"{t}-{p}": ErrorCode(r[0]).name + (f" ({r[1]})" if r[1] else "")
                                          for (t, p), r in failed.items()})
            await self._remove_from_zk_reassignment(set(failed))
        return set(todo) - set(failed)

    async def _on_zk_preferred_election(self) -> None:
        """/admin/preferred_replica_election appeared (written by tools from before Kafka 3.0):
        a preferred election of the partitions it names, as ElectLeaders PREFERRED; then the
        znode is deleted (an unreadable one too), as Kafka's controller does."""
        if not self.is_active:
            return
        watch = self._watch(self._on_zk_preferred_election)
        try:
            partitions = await self.kzk.get_preferred_replica_election(watch=watch)
        except ZNodeDataError as exc:
            log.error("%s Ignoring %s: %s", self.log_prefix, zd.PREFERRED_REPLICA_ELECTION, exc)
            partitions = set()
        else:
            if partitions is None:
                return
        results = await self.elect_leaders(sorted(partitions), PREFERRED, trigger="ZkTriggered")
        failed = {f"{t}-{p}": ErrorCode(r[0]).name for (t, p), r in results.items()
                  if r[0] not in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED)}
        if failed:
            log.warning("%s Preferred replica election through zk failed for %s",
                        self.log_prefix, failed)
        try:
            await self.kzk.delete_preferred_replica_election(self.ctx.epoch_zk_version)
        except ControllerMovedError:
            return
        await self.kzk.get_preferred_replica_election(watch=watch)   # watch the next one

    def list_partition_reassignments(self, partitions=None) -> dict:
        """{tp: (replicas, adding, removing)} of the partitions (default: all) being
        reassigned."""
        ctx = self.ctx
        wanted = ctx.reassigning() if partitions is None else partitions
        return {tp: (ctx.replicas(tp), list(ctx.adding.get(tp, [])),
                     list(ctx.removing.get(tp, [])))
                for tp in wanted if ctx.is_reassigning(tp)}

    def _invalid_replicas(self, tp, replicas: list, check_live=True) -> str | None:
        """A broker in controlled shutdown is not alive here (Kafka's liveBrokerIds)."""
        _, adding, _ = self.ctx.reassign_to(tp, replicas) if replicas else (None, [], None)
        return invalid_replicas(replicas, adding if check_live else [], self.ctx.live_ids())

    async def _on_partition_reassignment(self, tp, target: list) -> None:
        ctx = self.ctx
        full, adding, removing = ctx.reassign_to(tp, target)
        current = (ctx.replicas(tp), ctx.adding.get(tp, []), ctx.removing.get(tp, []))
        if (full, adding, removing) != (current[0], list(current[1]), list(current[2])):
            log.info("%s Reassigning %s-%d: replicas %s, adding %s, removing %s",
                     self.log_prefix, tp[0], tp[1], full, adding, removing)
            ctx.set_assignment(tp, full, adding, removing)
            await self._write_assignment(tp[0])
            unneeded = [r for r in current[0] if r not in full]
            if unneeded:                    # a replaced reassignment's adding replicas
                await self._stop_removed_replicas(tp, unneeded)
        if ctx.is_reassigning(tp) and not await self._reassignment_complete(tp):
            await self._bump_leader_epoch_and_send(tp, new_replicas=adding)
        else:
            await self._complete_reassignment(tp)

    async def _reassignment_complete(self, tp) -> bool:
        """TRS is in the ISR, as ZooKeeper has it now."""
        state = await self._read_state(tp)
        if state is None:
            return False
        self.ctx.states[tp] = state
        return set(self.ctx.target_replicas(tp)) <= set(state.isr)

    async def _maybe_complete_reassignments(self, partitions) -> None:
        for tp in partitions:
            if self.is_active and self.ctx.is_reassigning(tp) \
                    and await self._reassignment_complete(tp):
                await self._complete_reassignment(tp)

    async def _complete_reassignment(self, tp) -> None:
        ctx = self.ctx
        target, removing = ctx.target_replicas(tp), list(ctx.removing.get(tp, []))
        was_reassigning = ctx.is_reassigning(tp)
        ctx.set_assignment(tp, target)                                      # B2
        state = ctx.states.get(tp)
        if state is not None and (state.leader not in target
                                  or state.leader not in ctx.live_ids()):
            result = await self._elect_leaders([tp], "reassign")            # B3
            if not isinstance(result.get(tp), zd.LeaderAndIsr):
                log.error("%s Reassignment of %s-%d: no target replica %s can lead (ISR %s)",
                          self.log_prefix, tp[0], tp[1], target, state.isr)
        elif state is not None:
            await self._bump_leader_epoch_and_send(tp)
        if removing:
            await self._stop_removed_replicas(tp, removing)                 # B4, B5
        if was_reassigning:
            await self._write_assignment(tp[0])                             # B6
        # B7, also for an entry that changed nothing or only the order (Kafka removes every
        # entry that names the final replicas).
        await self._remove_from_zk_reassignment({tp}, only_if=target)
        if was_reassigning:
            log.info("%s Completed reassignment of %s-%d to %s", self.log_prefix, tp[0], tp[1],
                     target)
        batch = self._batch()                                               # B8
        batch.add_update_metadata(ctx.live_or_shutting_down_ids(), [tp])
        self._send(batch)
        if tp[0] in ctx.topics_to_delete:
            await self._resume_deletions()

    async def _bump_leader_epoch_and_send(self, tp, new_replicas=()) -> None:
        ctx = self.ctx

        async def decide(_, state):
            return zd.LeaderAndIsr(state.leader, zd.next_leader_epoch(state.leader_epoch),
                                   list(state.isr), ctx.epoch, state.recovering,
                                   state.partition_epoch)
        result = (await self._update_states([tp], decide)).get(tp)
        if not isinstance(result, zd.LeaderAndIsr):
            log.error("%s Failed to bump the leader epoch of %s-%d: %s", self.log_prefix,
                      tp[0], tp[1], result)
            return
        batch = self._batch()
        replicas = ctx.replicas(tp)
        batch.add_leader_and_isr([r for r in replicas if r not in new_replicas], tp)
        if new_replicas:
            batch.add_leader_and_isr([r for r in replicas if r in new_replicas], tp,
                                     is_new=True)
        self._send(batch)

    async def _stop_removed_replicas(self, tp, removed: list) -> None:
        """Replicas leaving a partition: out of its ISR (LeaderAndIsr to the others), then
        StopReplica with deletion (Kafka's OfflineReplica, ReplicaDeletionStarted)."""
        batch = self._batch()
        for broker in removed:
            await self._remove_replica_from_isr(broker, [tp], batch)
            batch.add_stop_replica(broker, tp, delete=True)
        self._send(batch)

    async def _write_assignment(self, topic: str) -> None:
        ctx = self.ctx
        parts = ctx.assignments.get(topic, {})
        assignment = zd.TopicAssignment(
            dict(parts), topic_id_text(ctx.topic_ids[topic]) if topic in ctx.topic_ids else None,
            {p: list(ctx.adding[(topic, p)]) for p in parts if ctx.adding.get((topic, p))},
            {p: list(ctx.removing[(topic, p)]) for p in parts if ctx.removing.get((topic, p))},
            # not managed, not dropped: a hand-broken partition keeps its data reachable once
            # its replica list is mended (Kafka's controller keeps and writes back even "[]")
            {p: u for p, u in ctx.unreadable.get(topic, {}).items() if p not in parts})
        await self.kzk.set_topic(topic, assignment, -1, ctx.epoch_zk_version)

    async def _resume_reassignments(self, skip=()) -> None:
        """After a failover: every partition ZooKeeper shows being reassigned carries on
        (those in `skip` were just restarted from /admin/reassign_partitions)."""
        for tp in self.ctx.reassigning():
            if tp in skip:
                continue
            log.info("%s Resuming reassignment of %s-%d", self.log_prefix, *tp)
            try:
                await self._on_partition_reassignment(tp, self.ctx.target_replicas(tp))
            except ControllerMovedError:
                raise
            except Exception:
                log.exception("%s Error resuming reassignment of %s-%d", self.log_prefix, *tp)

    async def _remove_from_zk_reassignment(self, partitions: set, only_if=None) -> None:
        """Drop `partitions` from /admin/reassign_partitions (the znode goes when empty);
        with `only_if`, only entries asking for exactly those replicas."""
        if not partitions:
            return
        try:
            found = await self.kzk.get_reassignment()
        except ZNodeDataError:
            found = None
        drop = {tp for tp in partitions & set(found or ())
                if only_if is None or list(found[tp]) == list(only_if)}
        if not drop:
            return
        left = {tp: r for tp, r in found.items() if tp not in drop}
        await self.kzk.set_reassignment(left, self.ctx.epoch_zk_version)

    # -- log dir failures (Kafka's onBrokerLogDirFailure, onReplicasBecomeOffline) --------------

    async def _on_log_dir_event(self) -> None:
        """/log_dir_event_notification got a child: a broker lost a log dir. Its replicas all
        get LeaderAndIsr; those it answers with KAFKA_STORAGE_ERROR go offline
        (`leader_and_isr_response`)."""
        if not self.is_active:
            return
        ctx = self.ctx
        events = await self.kzk.get_log_dir_events(watch=self._watch(self._on_log_dir_event))
        if not events:
            return
        await self.kzk.delete_log_dir_events(list(events), ctx.epoch_zk_version)
        brokers = sorted({b for b in events.values() if b is not None and b in ctx.live_brokers})
        if not brokers:
            return
        log.info("%s Handling log directory failure for brokers %s", self.log_prefix,
                 ",".join(map(str, brokers)))
        batch = self._batch()
        for b in brokers:
            for tp in ctx.partitions_on_broker(b):
                if tp in ctx.states and tp[0] not in ctx.deletion_started:
                    batch.leader_and_isr.setdefault(b, {})[tp] = False
        self._send(batch)

    async def _on_isr_change_notification(self) -> None:
        """/isr_change_notification got children: leaders from before IBP 2.7 changed ISRs in
        ZooKeeper themselves. As Kafka's controller: read those partitions' states again, tell
        every broker (UpdateMetadata), delete the notifications (unreadable ones too)."""
        if not self.is_active:
            return
        ctx = self.ctx
        notes = await self.kzk.get_isr_change_notifications(
            watch=self._watch(self._on_isr_change_notification))
        if not notes:
            return
        await self.kzk.delete_isr_change_notifications(list(notes), ctx.epoch_zk_version)
        changed = sorted({tp for tps in notes.values() if tps for tp in tps
                          if tp in ctx.states})
        if not changed:
            return
        await self._load_partition_states(changed)
        batch = self._batch()
        batch.add_update_metadata(ctx.live_or_shutting_down_ids(), changed)
        self._send(batch)
        # A reassignment whose new replicas joined the ISR this way completes (Kafka does
        # this for clusters part-way through an upgrade).
        await self._maybe_complete_reassignments([tp for tp in changed
                                                  if ctx.is_reassigning(tp)])

    async def leader_and_isr_response(self, broker_id: int, response) -> None:
        """Partitions a broker answered KAFKA_STORAGE_ERROR for are on a failed log dir: they
        become offline replicas (leaders elsewhere, out of the ISR)."""
        ctx = self.ctx
        if not self.is_active or broker_id not in ctx.live_brokers:
            return
        names = {tid: topic for topic, tid in ctx.topic_ids.items()}
        failed = []
        for topic in getattr(response, "topics", None) or []:
            name = names.get(topic.topic_id)
            for error in topic.partition_errors:
                if error.error_code == ErrorCode.KAFKA_STORAGE_ERROR and name is not None:
                    failed.append((name, error.partition_index))
        for error in getattr(response, "partition_errors", None) or []:
            if error.error_code == ErrorCode.KAFKA_STORAGE_ERROR and error.topic_name:
                failed.append((error.topic_name, error.partition_index))
        new = [tp for tp in failed if tp in ctx.states
               and broker_id not in ctx.offline_replicas.get(tp, ())]
        if not new:
            return
        for tp in new:
            ctx.offline_replicas.setdefault(tp, set()).add(broker_id)
        log.info("%s Replicas of broker %d on an offline log dir: %s", self.log_prefix,
                 broker_id, ",".join(f"{t}-{p}" for t, p in sorted(new)))
        batch = self._batch()
        led = [tp for tp in new if ctx.states[tp].leader == broker_id
               and tp[0] not in ctx.topics_to_delete]
        if led:
            await self._elect_leaders(led, "offline", batch=batch)
        await self._remove_replica_from_isr(broker_id, new, batch)
        batch.add_update_metadata(ctx.live_or_shutting_down_ids(), new)
        self._send(batch)

    # -- preferred leaders ----------------------------------------------------------------------

    def _config(self, name: str, default):
        if self.config is None:
            return default
        try:
            value = self.config.get(name)
        except KeyError:
            return default
        return default if value is None else value

    def _schedule_rebalance(self, delay_s: float) -> None:
        self._cancel_rebalance()
        loop = asyncio.get_running_loop()
        self._rebalance_timer = loop.call_later(
            delay_s, lambda: None if self._stopped else self.enqueue(self._auto_rebalance))

    def _cancel_rebalance(self) -> None:
        if self._rebalance_timer is not None:
            self._rebalance_timer.cancel()
            self._rebalance_timer = None

    async def _auto_rebalance(self) -> None:
        """Kafka's checkAndTriggerAutoLeaderRebalance: for each broker, if more than
        leader.imbalance.per.broker.percentage of the partitions preferring it (it is their
        first replica) are led elsewhere, elect it for those where it is live and in the ISR."""
        if not self.is_active:
            return
        try:
            await self.rebalance_preferred_leaders()
        finally:
            if self.is_active:
                self._schedule_rebalance(self._config("leader.imbalance.check.interval.seconds",
                                                      300))

    async def rebalance_preferred_leaders(self) -> dict:
        ctx = self.ctx
        live = ctx.live_ids()
        threshold = self._config("leader.imbalance.per.broker.percentage", 10) / 100
        by_preferred: dict = {}
        for tp in ctx.all_partitions():
            replicas = ctx.replicas(tp)
            if replicas and tp in ctx.states and tp[0] not in ctx.topics_to_delete:
                by_preferred.setdefault(replicas[0], []).append(tp)
        candidates = []
        for broker, partitions in sorted(by_preferred.items()):
            elsewhere = [tp for tp in partitions if ctx.states[tp].leader != broker]
            if not partitions or len(elsewhere) / len(partitions) <= threshold:
                continue
            log.info("%s Leader imbalance ratio for broker %d is %.3f", self.log_prefix, broker,
                     len(elsewhere) / len(partitions))
            if broker not in live:
                continue
            candidates += [tp for tp in elsewhere if broker in ctx.states[tp].isr]
        if not candidates:
            return {}
        log.info("%s Starting replica leader election (PREFERRED) for partitions %s triggered "
                 "by AutoTriggered", self.log_prefix,
                 ",".join(f"{t}-{p}" for t, p in candidates[:50]))
        return await self._elect_leaders(candidates, "preferred")

    async def elect_leaders(self, partitions, election_type: int,
                            trigger: str = "AdminClientTriggered") -> dict:
        """ElectLeaders from an admin client (Kafka's processReplicaLeaderElection):
        {tp: (error code, message or None, elected leader or None)}. PREFERRED (0) elects the
        first replica where it does not lead; UNCLEAN (1) elects where the partition has no
        live leader, allowing an out-of-sync replica whatever the topic's config."""
        ctx = self.ctx
        if not self.is_active:
            return {tp: (ErrorCode.NOT_CONTROLLER, None, None) for tp in partitions}
        known = set(ctx.all_partitions())
        out, electable = {}, []
        live = ctx.live_ids()
        for tp in partitions:
            if tp not in known or tp not in ctx.states:
                log.info("%s Skipping replica leader election (%s) for partition %s-%d by "
                         "%s since it doesn't exist.", self.log_prefix,
                         ELECTION_TYPES[election_type], tp[0], tp[1], trigger)
                out[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                           "The partition does not exist.", None)
            elif tp[0] in ctx.topics_to_delete:
                out[tp] = (ErrorCode.INVALID_TOPIC_EXCEPTION, "The topic is being deleted", None)
            else:
                leader = ctx.states[tp].leader
                needed = (leader != ctx.replicas(tp)[0] if election_type == PREFERRED
                          else leader == NO_LEADER or leader not in live)
                if needed:
                    electable.append(tp)
                else:
                    out[tp] = (ErrorCode.ELECTION_NOT_NEEDED, None, None)
        if electable:
            log.info("%s Starting replica leader election (%s) for partitions %s triggered by "
                     "%s", self.log_prefix, ELECTION_TYPES[election_type],
                     ",".join(f"{t}-{p}" for t, p in electable[:50]), trigger)
            if election_type == PREFERRED:
                results = await self._elect_leaders(electable, "preferred")
                strategy = "PreferredReplicaPartitionLeaderElectionStrategy"
            else:
                results = await self._elect_leaders(electable, "offline", allow_unclean=True)
                strategy = "OfflinePartitionLeaderElectionStrategy(true)"
            for tp in electable:
                result = results.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR)
                if isinstance(result, zd.LeaderAndIsr):
                    out[tp] = (ErrorCode.NONE, None, result.leader)
                elif result in (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                                ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE):
                    out[tp] = (result, f"Failed to elect leader for partition {tp[0]}-{tp[1]} "
                                       f"under strategy {strategy}", None)
                else:
                    out[tp] = (result, None, None)
        return out

    # -- sending -------------------------------------------------------------------------------

    def _batch(self) -> RequestBatch:
        batch = RequestBatch(self.ctx, self.broker_id)
        batch.inter_broker_listener = self.inter_broker_listener
        return batch

    def _send(self, batch: RequestBatch) -> None:
        for broker, api, request, version in batch.requests():
            callback = None
            if api == "StopReplica":
                deleted = {(t.topic_name, ps.partition_index) for t in request.topic_states
                           for ps in t.partition_states if ps.delete_partition}
                callback = self._stop_replica_callback(broker, deleted)
            elif api == "LeaderAndIsr":
                callback = self._leader_and_isr_callback(broker)
            self.sender.send(broker, request, version, callback)

    def _leader_and_isr_callback(self, broker: int):
        def done(response):
            if not self._stopped:
                self.enqueue(self.leader_and_isr_response, broker, response)
        return done

    def _stop_replica_callback(self, broker: int, deleted: set):
        def done(response):
            if not self._stopped:
                self.enqueue(self.stop_replica_response, broker, response, deleted)
        return done


def invalid_replicas(replicas: list, adding: list, live: set) -> str | None:
    """Kafka's validateReplicas for a reassignment's target: the message of its
    INVALID_REPLICA_ASSIGNMENT, or None when it is acceptable."""
    if not replicas:
        return "Empty replica list specified in partition reassignment."
    if len(set(replicas)) != len(replicas):
        return f"Duplicate replica ids in partition reassignment replica list: {replicas}"
    if any(r < 0 for r in replicas):
        return f"Invalid broker id in replica list: {replicas}"
    if not set(adding) <= live:
        return (f"Replica assignment has brokers that are not alive. Replica list: {adding}, "
                f"live broker list: {sorted(live)}")
    return None


async def _noop():
    return None
