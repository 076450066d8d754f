"""The replica manager: the broker's partitions, and the append/read paths every handler uses.

Theory of operation (Kafka's ReplicaManager):

- On a single broker the TopicManager tells us which partitions we lead: `become_leader(...)`
  opens or creates the partition's log through the LogManager and makes a `Partition`;
  `stop_replica(...)` forgets it (and deletes its log for DeleteTopics). In a cluster the
  controller does, with LeaderAndIsr (`become_leader_or_follower`: fenced by controller and
  leader epochs, followers handed to the fetchers) and StopReplica (`stop_replicas`).
- Produce: `append_records(...)` appends to each partition's leader log (validation, offsets and
  producer-state duplicate detection happen in storage) and returns one `AppendResult` per
  partition; errors are per partition. Every append wakes the fetch purgatory for that partition
  (the LEO moved; with one replica the HW too). acks=-1 then awaits `wait_for_acks(...)`: the
  produce purgatory completes when the HW covers each partition's last offset (immediately with
  one replica) or answers REQUEST_TIMED_OUT at timeout_ms. The group coordinator appends to
  __consumer_offsets the same way; appends to the internal topics (which the Produce handler
  refuses to clients) are validated as coordinator appends. An I/O error fails its partition
  only (KAFKA_STORAGE_ERROR).
- Fetch: `read(...)` reads partitions in order within the request's max_bytes, with Kafka's rule
  that the first partition with data returns at least one whole batch even past the limits;
  `wait_for_fetch(...)` parks a fetch in the fetch purgatory until min_bytes are available or
  max_wait_ms passes. A fetch from a replica (replica_id >= 0) reads up to the LEO and reports the
  follower's LEO (`Partition.update_follower_fetch_state`), which may move the HW and wake
  waiting produces - the path followers will use.
- Fetch sessions (KIP-227) live in `fetch_sessions`; producer ids for InitProducerId come from
  `producer_ids` (blocks persisted in the first log dir).

Concurrency contract: everything runs on the event loop thread. Appends and reads touch the page
cache only; fsync happens in the LogManager's flush, off the loop.
"""
from __future__ import annotations

import asyncio

import logging
import os
import uuid

from protocol.errors import ErrorCode, KafkaError
from storage.errors import StorageError
from storage.log_config import LONG_MAX
from storage.validation import ORIGIN_CLIENT, ORIGIN_COORDINATOR

from coordinator.internal_topics import INTERNAL_TOPICS

from broker.fetch_session import FetchSessionCache
from broker.partition import READ_UNCOMMITTED, Partition, ReadResult
from broker.producer_ids import FileBlockStore, ProducerIdManager
from broker.purgatory import Purgatory, SystemClock

log = logging.getLogger(__name__)
ZERO_UUID = uuid.UUID(int=0)


class AppendResult:
    """Per-partition outcome of a produce append (what ProduceResponse reports)."""

    __slots__ = ("error_code", "error_message", "base_offset", "last_offset", "log_append_time",
                 "log_start_offset", "record_errors")

    def __init__(self, error_code=ErrorCode.NONE, error_message=None, base_offset=-1,
                 last_offset=-1, log_append_time=-1, log_start_offset=-1, record_errors=()):
        self.error_code = error_code
        self.error_message = error_message
        self.base_offset = base_offset
        self.last_offset = last_offset
        self.log_append_time = log_append_time
        self.log_start_offset = log_start_offset
        self.record_errors = record_errors          # [(batch_index, message)]

    def __repr__(self) -> str:
        return (f"AppendResult(error={self.error_code!r}, base_offset={self.base_offset}, "
                f"last_offset={self.last_offset})")


class FetchRequestPartition:
    """One partition of a Fetch as the read path needs it (fetch_session.CachedPartition fits)."""

    __slots__ = ("topic", "partition", "fetch_offset", "partition_max_bytes",
                 "current_leader_epoch")

    def __init__(self, topic, partition, fetch_offset, partition_max_bytes,
                 current_leader_epoch=-1):
        self.topic = topic
        self.partition = partition
        self.fetch_offset = fetch_offset
        self.partition_max_bytes = partition_max_bytes
        self.current_leader_epoch = current_leader_epoch


def _error_code_of(exc: KafkaError) -> int:
    return int(getattr(exc, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR))


class ReplicaManager:
    def __init__(self, log_manager, *, broker_id: int = 0, time=None, config=None,
                 fetch_session_slots: int | None = None, producer_id_dir: str | None = None):
        self.log_manager = log_manager
        self.broker_id = broker_id
        self.time = time or SystemClock()
        self.config = config
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._topic_names: dict[uuid.UUID, str] = {}
        self._topic_ids: dict[str, uuid.UUID] = {}
        self.fetch_purgatory = Purgatory("Fetch", time=self.time)
        self.produce_purgatory = Purgatory("Produce", time=self.time)
        slots = fetch_session_slots
        if slots is None:
            slots = _config_int(config, "max.incremental.fetch.session.cache.slots", 1000)
        eviction_ms = _config_int(config, "min.incremental.fetch.session.eviction.ms", 120_000)
        self.fetch_sessions = FetchSessionCache(max_slots=slots, eviction_ms=eviction_ms,
                                                time=self.time)
        if producer_id_dir is None:
            dirs = getattr(log_manager, "log_dirs", None) or ["."]
            producer_id_dir = os.fspath(dirs[0])
        self.producer_ids = ProducerIdManager(FileBlockStore(producer_id_dir), broker_id)
        # Replication throttles (broker/replication_quota.py), set by the broker in a cluster.
        self.leader_quota = None
        self.follower_quota = None
        # Partitions whose log dir failed (fail_log_dir): key -> dir; they answer
        # KAFKA_STORAGE_ERROR until the broker restarts. `on_log_dir_failure(dir)` tells the
        # broker (the controller learns it through /log_dir_event_notification).
        self.offline_partitions: dict[tuple, str] = {}
        self.on_log_dir_failure = None
        from broker.log_dir_mover import LogDirMover
        self.log_dir_mover = LogDirMover(self)           # AlterReplicaLogDirs
        # A cluster: the highest controller epoch seen (older controllers are refused) and the
        # follower fetchers (broker/replica_fetcher.py); neither is used on a single broker.
        self.controller_epoch = -1
        self.fetchers = None
        # Set when the broker begins its shutdown, before the controlled shutdown: the
        # partitions it gives up it follows without fetching (Kafka's isShuttingDown in
        # makeFollowers), or the new leaders would count it caught up and hold their high
        # watermarks at its last offset once it stops.
        self.shutting_down = False
        self.isr_changes = None             # broker/alter_partition_manager.py
        # A cluster's metadata cache: a partition it knows but this broker does not host is
        # NOT_LEADER_OR_FOLLOWER (the client looks for its leader), as in Kafka.
        self.metadata_cache = None

    # -- partitions ----------------------------------------------------------------------------

    def become_leader(self, topic: str, partition: int, topic_id, leader_epoch: int,
                      replicas, log_config, is_new: bool = True) -> Partition | None:
        """Lead (topic, partition) at `leader_epoch`, opening or creating its log. A replica
        hosted before (`is_new` false) whose log cannot be found while a log dir is offline
        is offline (KAFKA_STORAGE_ERROR): None."""
        key = (topic, partition)
        part = self._partitions.get(key)
        if part is None:
            try:
                log_ = self.log_manager.get_or_create_log(topic, partition, log_config,
                                                          topic_id, is_new=is_new)
            except StorageError as exc:
                log.error("[ReplicaManager broker=%d] %s", self.broker_id, exc)
                self.offline_partitions[key] = None
                return None
            part = self._new_partition(topic, partition, log_)
        elif log_config is not None:
            part.log.config = log_config
        part.make_leader(leader_epoch, list(replicas or [self.broker_id]), topic_id)
        if topic_id is not None and topic_id != ZERO_UUID:
            self._topic_names[topic_id] = topic
            self._topic_ids[topic] = topic_id
        # Waiting fetches re-check: they may now get data or an error.
        self.fetch_purgatory.notify(topic, partition)
        return part

    # -- cluster: the controller's LeaderAndIsr and StopReplica ---------------------------------

    async def become_leader_or_follower(self, controller_epoch: int, partition_states,
                                        log_config_for, live_broker_ids) -> tuple:
        """Apply a LeaderAndIsr (Kafka's ReplicaManager.becomeLeaderOrFollower).

        `partition_states`: [(topic, topic_id, LeaderAndIsrPartitionState)];
        `log_config_for(topic)`: awaitable LogConfig for logs created here;
        `live_broker_ids`: brokers in this broker's metadata cache (a follower of a leader it
        does not know only creates its log). Returns (error, {(topic, p): error},
        [partitions led now and not before], [partitions now followed])."""
        if controller_epoch < self.controller_epoch:
            return ErrorCode.STALE_CONTROLLER_EPOCH, {}, [], []
        self.controller_epoch = controller_epoch
        errors, accepted = {}, []
        for topic, topic_id, ps in partition_states:
            key = (topic, ps.partition_index)
            part = self._partitions.get(key)
            local_epoch = part.leader_epoch if part is not None else -1
            known_id = part.topic_id if part is not None else None
            if known_id in (None, ZERO_UUID) and self.log_manager is not None:
                # as Kafka's Partition.topicId: else the id in the log on disk (a log left from
                # an older topic of the same name is refused, not taken over)
                on_disk = self.log_manager.get_log(topic, ps.partition_index)
                known_id = on_disk.topic_id if on_disk is not None else None
            if key in self.offline_partitions:
                errors[key] = ErrorCode.KAFKA_STORAGE_ERROR     # its log dir failed
            elif (topic_id not in (None, ZERO_UUID) and known_id not in (None, ZERO_UUID)
                    and known_id != topic_id):
                log.error("[ReplicaManager broker=%d] Topic Id in memory: %s does not match the "
                          "topic Id for partition %s-%d provided in the request: %s.",
                          self.broker_id, known_id, topic, ps.partition_index, topic_id)
                errors[key] = ErrorCode.INCONSISTENT_TOPIC_ID
            elif self.broker_id not in ps.replicas:
                errors[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif ps.leader_epoch > local_epoch or part is None:
                accepted.append((topic, topic_id, ps))
                errors[key] = ErrorCode.NONE
            else:
                # An epoch this broker already has (a resent or an older request).
                log.info("[ReplicaManager broker=%d] Ignoring the LeaderAndIsr request for "
                         "partition %s-%d with leader epoch %d: the current leader epoch %d is "
                         "not lower", self.broker_id, topic, ps.partition_index,
                         ps.leader_epoch, local_epoch)
                errors[key] = ErrorCode.STALE_CONTROLLER_EPOCH
        missing = [(t, tid, ps) for t, tid, ps in accepted
                   if (t, ps.partition_index) not in self._partitions]
        if missing:
            configs = {}
            for topic, _, _ in missing:
                if topic not in configs:
                    configs[topic] = await log_config_for(topic)
            log_manager = self.log_manager

            def open_logs():
                out = {}
                for t, tid, ps in missing:
                    try:
                        out[(t, ps.partition_index)] = log_manager.get_or_create_log(
                            t, ps.partition_index, configs[t], tid, is_new=ps.is_new)
                    except (OSError, KafkaError) as exc:     # no dir left, or it failed now
                        out[(t, ps.partition_index)] = exc
                return out
            opened = await asyncio.get_running_loop().run_in_executor(None, open_logs)
            for (topic, p), log_ in opened.items():
                if isinstance(log_, BaseException):
                    log.error("[ReplicaManager broker=%d] Cannot create the log of %s-%d: %s",
                              self.broker_id, topic, p, log_)
                    errors[(topic, p)] = ErrorCode.KAFKA_STORAGE_ERROR
                    self.offline_partitions[(topic, p)] = None     # Kafka's markPartitionOffline
                elif (topic, p) not in self._partitions:
                    self._new_partition(topic, p, log_)
            accepted = [a for a in accepted if (a[0], a[2].partition_index) in self._partitions]
        leaders, followers = [], []
        for topic, topic_id, ps in accepted:
            key = (topic, ps.partition_index)
            part = self._partitions[key]
            if ps.partition_epoch < part.partition_epoch:
                continue                            # a stale state: keep the newer one
            tid = topic_id if topic_id not in (None, ZERO_UUID) else None
            if ps.leader == self.broker_id:
                was_leader = part.is_leader
                part.make_leader(ps.leader_epoch, ps.replicas, tid, isr=ps.isr,
                                 partition_epoch=ps.partition_epoch)
                if not was_leader:
                    # Kafka's makeLeaders keeps only the new leaderships (isNewLeader): an epoch
                    # bump of a partition already led here (an ISR shrink) reloads no
                    # coordinator state
                    leaders.append(key)
                if self.fetchers is not None:
                    self.fetchers.remove_partition(key)
            else:
                changed = part.make_follower(ps.leader, ps.leader_epoch, ps.replicas,
                                             ps.partition_epoch, tid)
                followers.append(key)
                if self.fetchers is not None:
                    if ps.leader in live_broker_ids and not self.shutting_down:
                        if changed or not self.fetchers.has_partition(key):
                            self._start_without_epochs_at_the_high_watermark(part)
                            self.fetchers.add_partition(
                                key, ps.leader, ps.leader_epoch,
                                catch_up=self.broker_id not in ps.isr)
                    else:
                        self.fetchers.remove_partition(key)
            if tid is not None:
                self._topic_names[tid] = topic
                self._topic_ids[topic] = tid
            # Parked fetches and produces re-check: they may now get data or an error.
            self.fetch_purgatory.notify(*key)
            self.produce_purgatory.notify(*key)
        if leaders or followers:
            log.info("[ReplicaManager broker=%d] Handled LeaderAndIsr of controller epoch %d: "
                     "leading %d, following %d partitions", self.broker_id, controller_epoch,
                     len(leaders), len(followers))
        return ErrorCode.NONE, errors, leaders, followers

    def stop_replicas(self, controller_epoch: int, partitions) -> tuple:
        """Apply a StopReplica: [(topic, partition, leader_epoch, delete)] -> (error,
        {(topic, p): error}). Epoch -2 (topic being deleted) and -1 always apply; otherwise
        an epoch below the local one is FENCED_LEADER_EPOCH; a replica on a failed log dir is
        KAFKA_STORAGE_ERROR."""
        if controller_epoch < self.controller_epoch:
            return ErrorCode.STALE_CONTROLLER_EPOCH, {}
        self.controller_epoch = controller_epoch
        errors = {}
        for topic, p, leader_epoch, delete in partitions:
            key = (topic, p)
            if key in self.offline_partitions:
                # its log dir failed: nothing can be stopped or deleted there (Kafka's
                # HostedPartition.Offline); a deletion waits for the broker to come back
                errors[key] = ErrorCode.KAFKA_STORAGE_ERROR
                continue
            part = self._partitions.get(key)
            if part is not None and leader_epoch >= 0 and leader_epoch < part.leader_epoch:
                errors[key] = ErrorCode.FENCED_LEADER_EPOCH
                continue
            if self.fetchers is not None:
                self.fetchers.remove_partition(key)
            if part is not None or delete:
                self.stop_replica(topic, p, delete=delete)
            errors[key] = ErrorCode.NONE
        return ErrorCode.NONE, errors

    def stop_replica(self, topic: str, partition: int, delete: bool = False) -> None:
        part = self._partitions.pop((topic, partition), None)
        if (topic, partition) in self.log_dir_mover.moving():
            if delete:
                self.log_dir_mover.cancel((topic, partition))
            else:           # kept for when the partition comes back, as Kafka keeps it
                self.log_dir_mover.pause((topic, partition))
        if not any(t == topic for t, _ in self._partitions):
            topic_id = self._topic_ids.pop(topic, None)
            if topic_id is not None:
                self._topic_names.pop(topic_id, None)
        if delete:
            self.log_manager.delete_log(topic, partition)
        # Waiting requests find the partition gone and answer with an error.
        self.fetch_purgatory.notify(topic, partition)
        self.produce_purgatory.notify(topic, partition)
        if part is not None:
            log.info("Stopped replica %s-%d%s", topic, partition, " (deleted)" if delete else "")

    def get_partition(self, topic: str, partition: int) -> Partition | None:
        return self._partitions.get((topic, partition))

    def get_partition_or_error(self, topic: str, partition: int) -> Partition:
        part = self._partitions.get((topic, partition))
        if part is None:
            raise KafkaError(self.missing_partition_error(topic, partition),
                             f"this broker has no partition {topic}-{partition}")
        return part

    def partitions(self) -> list[Partition]:
        return list(self._partitions.values())

    def topic_name(self, topic_id) -> str | None:
        name = self._topic_names.get(topic_id)
        if name is None and self.metadata_cache is not None:
            topic = self.metadata_cache.get_topic_by_id(topic_id)
            name = topic.name if topic is not None else None
        return name

    def topic_id(self, topic: str):
        return self._topic_ids.get(topic)

    # -- produce -------------------------------------------------------------------------------

    def append_records(self, entries, required_acks: int, now_ms: int | None = None, *,
                       produce_version: int | None = None, origin: str | None = None,
                       verification: dict | None = None) -> dict:
        """Append `{(topic, partition): records}`; returns `{(topic, partition): AppendResult}`.

        Never raises for Kafka errors: each lands in its partition's result. `produce_version`
        (from the Produce handler) lets validation apply per-version rules. `origin`
        "coordinator" for the transaction coordinator's markers (internal topics always are).
        `verification`: {(topic, partition): guard} of the transactional writes the Produce
        handler verified (Log.append_as_leader)."""
        if now_ms is None:
            now_ms = self.time.ms()
        guards = verification or {}
        results = {}
        for key, records in entries.items():
            results[key] = self._append_one(key, records, required_acks, now_ms,
                                            produce_version, origin, guards.get(key))
        return results

    def rack_aware_reads(self) -> bool:
        """replica.selector.class is Kafka's RackAwareReplicaSelector (a cluster only)."""
        if self.metadata_cache is None or self.config is None:
            return False
        return bool(self.config.get("replica.selector.class"))

    def rack_of(self, broker_id: int, listener: str | None = None):
        """A live broker's rack; None when it is not live or, given the consumer's `listener`,
        has no endpoint there (Kafka's getPartitionReplicaEndpoints gives such a replica no
        node, so the selector never sends a consumer to a broker it cannot reach)."""
        broker = self.metadata_cache.live_brokers.get(broker_id) if self.metadata_cache else None
        if broker is None or (listener is not None and listener not in broker.endpoints):
            return None
        return broker.rack

    def _start_without_epochs_at_the_high_watermark(self, part) -> None:
        """Kafka's initialFetchOffset: a follower whose log has no leader epochs (message
        formats before 0.11 only) cannot find where it diverges from the leader, so it drops
        what is above its high watermark and fetches from there."""
        log_ = part.log
        if log_.leader_epoch_cache.latest_epoch is None and \
                log_.log_end_offset > log_.high_watermark:
            log.info("[ReplicaManager broker=%d] Truncating %s-%d to its high watermark %d: "
                     "its log has no leader epochs to compare with the leader's",
                     self.broker_id, part.topic, part.partition, log_.high_watermark)
            log_.truncate_to(log_.high_watermark)

    def _new_partition(self, topic: str, partition: int, log_) -> Partition:
        part = Partition(topic, partition, self.broker_id, log_)
        part.clock = self.time
        part.replica_lag_time_max_ms = _config_int(self.config, "replica.lag.time.max.ms", 30000)
        if self.metadata_cache is not None:
            part.is_alive = self._is_alive
        self._partitions[(topic, partition)] = part
        if (topic, partition) in getattr(self.log_manager, "future_logs", {}):
            self.log_dir_mover.resume((topic, partition))      # a restart interrupted it
        return part

    def _is_alive(self, broker_id: int) -> bool:
        return broker_id in self.metadata_cache.live_brokers

    def fail_log_dir(self, log_dir: str, exc: BaseException | None = None) -> None:
        """A log dir failed (Kafka's handleLogDirFailure): its partitions stop being served
        (KAFKA_STORAGE_ERROR, fetchers stopped), its logs are closed unwritten, and the broker
        is told (it notifies the controller, or stops when no dir is left). Loop."""
        log_manager = self.log_manager
        if log_dir in getattr(log_manager, "offline_dirs", ()):
            return
        log.error("[ReplicaManager broker=%d] Error while writing to or reading from log dir "
                  "%s: %s. Stopping serving replicas in dir %s", self.broker_id, log_dir, exc,
                  log_dir)
        keys = log_manager.mark_dir_offline(log_dir)
        for key in keys:
            self._partitions.pop(key, None)
            self.offline_partitions[key] = log_dir
            if self.fetchers is not None:
                self.fetchers.remove_partition(key)
            self.fetch_purgatory.notify(*key)
            self.produce_purgatory.notify(*key)
        log.error("[ReplicaManager broker=%d] Partitions %s are offline due to failure on log "
                  "directory %s", self.broker_id,
                  ",".join(f"{t}-{p}" for t, p in sorted(keys)), log_dir)
        if self.on_log_dir_failure is not None:
            self.on_log_dir_failure(log_dir)

    def alter_replica_log_dirs(self, partition_dirs: dict) -> dict:
        """AlterReplicaLogDirs (Kafka's ReplicaManager.alterReplicaLogDirs): {(topic, p):
        log dir} -> {(topic, p): error}. A hosted replica in another dir starts moving there
        (broker/log_dir_mover.py); one not hosted yet is created there when it arrives
        (REPLICA_NOT_AVAILABLE now, as Kafka answers). Loop."""
        lm = self.log_manager
        out = {}
        for tp, raw_dir in partition_dirs.items():
            target = os.path.abspath(raw_dir)
            if len(f"{tp[0]}-{tp[1]}.{'0' * 32}-future") > 255:
                # Its "-future" folder's name would be too long (Kafka: KAFKA-4893).
                out[tp] = ErrorCode.INVALID_TOPIC_EXCEPTION
            elif target not in lm.log_dirs:
                out[tp] = ErrorCode.LOG_DIR_NOT_FOUND
            elif target in lm.offline_dirs or tp in self.offline_partitions:
                out[tp] = ErrorCode.KAFKA_STORAGE_ERROR
            elif tp not in self._partitions:
                lm.preferred_dirs[tp] = target
                out[tp] = ErrorCode.REPLICA_NOT_AVAILABLE
            elif lm.log_dir_of(*tp) == target:
                self.log_dir_mover.cancel(tp)              # already there: stop any other move
                out[tp] = ErrorCode.NONE
            elif lm.offline_dirs:
                # No future log while a dir is offline (Kafka's getOrCreateLog): it could
                # end up in two dirs.
                out[tp] = ErrorCode.KAFKA_STORAGE_ERROR
            else:
                try:
                    self.log_dir_mover.move(tp, target)
                    out[tp] = ErrorCode.NONE
                except OSError as exc:                     # a disk error in the target
                    out[tp] = ErrorCode.KAFKA_STORAGE_ERROR
                    lm.report_dir_failure(target, exc)
        return out

    def _storage_failure(self, part, exc: OSError, log_=None) -> None:
        """A disk error writing `log_` (default: the partition's log): its dir goes offline."""
        log_ = part.log if log_ is None else log_
        log_dir = self.log_manager.dir_of_path(log_.dir) \
            if hasattr(self.log_manager, "dir_of_path") else None
        if log_dir is not None:
            self.fail_log_dir(log_dir, exc)

    def missing_partition_error(self, topic: str, partition: int) -> int:
        """The error for a partition this broker does not host (Kafka's getPartitionOrError)."""
        if (topic, partition) in self.offline_partitions:
            return ErrorCode.KAFKA_STORAGE_ERROR
        cache = self.metadata_cache
        if cache is not None:
            known = cache.get_topic(topic)
            if known is not None and partition in known.partitions:
                return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    def _append_one(self, key, records, required_acks, now_ms, produce_version,
                    origin=None, verification=None) -> AppendResult:
        part = self._partitions.get(key)
        if part is None:
            return AppendResult(self.missing_partition_error(*key))
        # Internal topics are written only by the coordinators (the Produce handler refuses them
        # to clients): validated as a coordinator append (control batches, several batches).
        if origin is None:
            origin = ORIGIN_COORDINATOR if key[0] in INTERNAL_TOPICS else ORIGIN_CLIENT
        try:
            info = part.append_records_to_leader(records, required_acks, now_ms,
                                                 origin=origin, produce_version=produce_version,
                                                 verification=verification)
        except KafkaError as exc:
            return AppendResult(_error_code_of(exc), exc.message,
                                record_errors=getattr(exc, "record_errors", ()) or ())
        except OSError as exc:
            # Disk full, I/O error: the log dir goes offline (its partitions with it), the
            # other dirs and the broker go on, as Kafka's LogDirFailureChannel.
            log.error("Error appending to %s-%d: %s", key[0], key[1], exc)
            self._storage_failure(part, exc)
            return AppendResult(ErrorCode.KAFKA_STORAGE_ERROR, f"log append failed: {exc}")
        self.fetch_purgatory.notify(*key)
        return AppendResult(ErrorCode.NONE, None, info.first_offset, info.last_offset,
                            getattr(info, "log_append_time", -1), part.log_start_offset)

    async def flush_if_due(self, results: dict) -> None:
        """Kafka's `flush.messages` / `flush.ms` (log.flush.interval.*): when an append takes a
        log past either threshold, fsync it before the produce is answered, as Kafka's append
        does. The defaults leave flushing to the OS and cost nothing here; the fsync runs in an
        executor so the event loop keeps serving other connections."""
        due = []
        for key, result in results.items():
            if result.error_code != ErrorCode.NONE:
                continue
            part = self._partitions.get(key)
            log_ = getattr(part, "log", None)
            if log_ is None:
                continue
            cfg = log_.config
            if cfg.flush_messages == LONG_MAX and cfg.flush_ms == LONG_MAX:
                continue
            if log_.needs_flush():
                due.append(log_)
        if not due:
            return
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(None, log_.flush) for log_ in due))

    async def wait_for_acks(self, results: dict, required_acks: int, timeout_ms: int) -> None:
        """acks=-1: wait until the HW covers every successful append, else REQUEST_TIMED_OUT."""
        if required_acks != -1:
            return
        pending = {key: r for key, r in results.items() if r.error_code == ErrorCode.NONE}
        if not pending:
            return

        # The answer of a partition is decided when its wait ends, as Kafka's DelayedProduce
        # decides it: a write the high watermark covered is acknowledged even if this broker
        # stops leading before the response goes out (an error then would make a producer
        # without idempotence send it again: a duplicate).
        decided: dict = {}

        def covered(key) -> bool:
            part = self._partitions.get(key)
            if part is None:
                # Kafka's DelayedProduce: getPartitionOrError (offline: KAFKA_STORAGE_ERROR;
                # deleted: UNKNOWN_TOPIC_OR_PARTITION; moved: NOT_LEADER_OR_FOLLOWER).
                decided[key] = self.missing_partition_error(*key)
                return True
            if not part.is_leader:
                decided[key] = ErrorCode.NOT_LEADER_OR_FOLLOWER
                return True
            if part.high_watermark > pending[key].last_offset:
                # Kafka's checkEnoughReplicasReachOffset: the ISR shrank under
                # min.insync.replicas after the append (retriable for the producer).
                decided[key] = ErrorCode.NONE \
                    if len(part.maximal_isr) >= part.effective_min_isr() \
                    else ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
                return True
            return False

        waiting = set(pending)

        def acked(key) -> bool:
            # Only the notified partition can have changed; recheck everything otherwise.
            for k in ([key] if key in waiting else list(waiting) if key is None else []):
                if covered(k):
                    waiting.discard(k)
            return not waiting

        await self.produce_purgatory.wait(pending.keys(), acked, timeout_ms)
        for key, result in pending.items():
            if key not in decided:              # timed out: as it stands now
                covered(key)
            result.error_code = decided.get(key, ErrorCode.REQUEST_TIMED_OUT)

    async def delete_records(self, offsets: dict, timeout_ms: int) -> dict:
        """DeleteRecords, as Kafka's ReplicaManager.deleteRecords: {(topic, partition): offset}
        -> {(topic, partition): (error, low watermark)}. The leaders' log starts move at once;
        the answer waits up to `timeout_ms` until every live follower's log start has followed
        (Kafka's DelayedDeleteRecords): a partition still short of it then is REQUEST_TIMED_OUT."""
        results, required, low_at_start = {}, {}, {}
        is_alive = self._is_alive if self.metadata_cache is not None else None
        for key, offset in offsets.items():
            try:
                if key[0] in INTERNAL_TOPICS:            # Kafka's deleteRecordsOnLocalLog
                    raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                     f"Cannot delete records of internal topic {key[0]}")
                part = self.get_partition_or_error(*key)
                required[key] = part.delete_records_on_leader(offset)
                low_at_start[key] = part.low_watermark_if_leader(is_alive)
                self.fetch_purgatory.notify(*key)   # an offset below the new start: out of range
            except KafkaError as exc:
                results[key] = (exc.error_code, -1)

        def settled(key) -> bool:
            if key in results:
                return True
            part = self._partitions.get(key)
            if part is None:
                results[key] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)
                return True
            try:
                low = part.low_watermark_if_leader(is_alive)
            except KafkaError as exc:
                results[key] = (exc.error_code, -1)
                return True
            if low >= required[key]:
                results[key] = (ErrorCode.NONE, low)
                return True
            return False

        def done(key) -> bool:
            for k in ([key] if key in required else list(required) if key is None else []):
                settled(k)
            return all(k in results for k in required)
        await self.produce_purgatory.wait(list(required), done, timeout_ms)
        for key in required:        # timed out: Kafka answers the low watermark it started from
            results.setdefault(key, (ErrorCode.REQUEST_TIMED_OUT, low_at_start[key]))
        return results

    async def append_and_wait(self, entries, required_acks: int = -1,
                              timeout_ms: int = 30_000) -> dict:
        """Append and wait for the acks (for internal writers such as the group coordinator)."""
        results = self.append_records(entries, required_acks)
        await self.wait_for_acks(results, required_acks, timeout_ms)
        return results

    # -- fetch ---------------------------------------------------------------------------------

    def read(self, partitions, *, max_bytes: int, isolation_level: int = READ_UNCOMMITTED,
             replica_id: int = -1, hard_max_bytes_limit: bool = False,
             client_rack: str | None = None, client_metadata: bool = False,
             update_fetch_state: bool = True, listener: str | None = None) -> dict:
        """Read `partitions` (objects with topic, partition, fetch_offset, partition_max_bytes,
        current_leader_epoch) in order; returns `{(topic, partition): ReadResult}`.
        `client_metadata`: a consumer's Fetch v11+, which a follower serves too (up to its high
        watermark), as Kafka's FetchParams.fetchOnlyLeader; `client_rack`: its rack, with which
        a leader that has replica.selector.class set may point it at a replica in its rack
        (KIP-392) that has the consumer's `listener`. `update_fetch_state=False`: the read again after a delayed fetch's wait
        (Kafka's readFromPurgatory), which does not move the follower's state a second time."""
        from_follower = replica_id >= 0
        follower_may_serve = client_metadata and not from_follower and \
            self.metadata_cache is not None
        if from_follower or not self.rack_aware_reads():
            client_rack = None
        limit_bytes = max_bytes
        min_one_message = not hard_max_bytes_limit
        results = {}
        for fp in partitions:
            key = (fp.topic, fp.partition)
            result = self._read_one(fp, min(fp.partition_max_bytes, limit_bytes),
                                    isolation_level, from_follower, replica_id,
                                    min_one_message, client_rack, follower_may_serve,
                                    update_fetch_state, listener)
            results[key] = result
            if result.records_size > 0:
                min_one_message = False
                limit_bytes = max(0, limit_bytes - result.records_size)
        return results

    def _read_one(self, fp, max_bytes, isolation_level, from_follower, replica_id,
                  min_one_message, client_rack=None, follower_may_serve=False,
                  update_fetch_state=True, listener=None) -> ReadResult:
        if fp.topic is None:
            return ReadResult(ErrorCode.UNKNOWN_TOPIC_ID)
        part = self._partitions.get((fp.topic, fp.partition))
        if part is None:
            return ReadResult(self.missing_partition_error(fp.topic, fp.partition))
        try:
            last_fetched_epoch = getattr(fp, "last_fetched_epoch", -1)
            if last_fetched_epoch >= 0 and part.is_leader:
                part.check_current_leader_epoch(fp.current_leader_epoch)
                diverging = part.diverging_epoch(fp.fetch_offset, last_fetched_epoch)
                if diverging is not None:
                    # The fetcher's log has records this leader does not: it truncates first.
                    return ReadResult(ErrorCode.NONE, part.high_watermark,
                                      part.last_stable_offset, part.log_start_offset, b"",
                                      diverging_epoch=diverging)
            if from_follower and part.is_leader and \
                    replica_id not in part.follower_log_end_offsets:
                # Kafka's followerReplicaOrThrow: with a leader epoch the (replica, epoch) pair
                # is not known yet (the follower retries), without one it is not a replica.
                raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH if fp.current_leader_epoch >= 0
                                 else ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                 f"broker {replica_id} is not a replica of "
                                 f"{fp.topic}-{fp.partition}")
            rack = client_rack
            if rack is not None and part.is_leader:
                preferred = part.preferred_read_replica(
                    fp.fetch_offset, rack, lambda broker_id: self.rack_of(broker_id, listener),
                    self.time.ms())
                if preferred >= 0:
                    # a stale or newer leader epoch is told first (Kafka takes the redirect's
                    # offsets from fetchOffsetSnapshot(currentLeaderEpoch))
                    part.check_current_leader_epoch(fp.current_leader_epoch)
                    # The consumer is told where to read; this answer carries no records.
                    result = ReadResult(ErrorCode.NONE, part.high_watermark,
                                        part.last_stable_offset, part.log_start_offset, b"")
                    result.preferred_read_replica = preferred
                    return result
            result = part.read(fp.fetch_offset, max_bytes, isolation_level=isolation_level,
                               from_follower=from_follower, min_one_message=min_one_message,
                               current_leader_epoch=fp.current_leader_epoch,
                               follower_may_serve=follower_may_serve)
            if from_follower:
                if update_fetch_state:
                    # Only a fetch that read (its offset is in range) says where the follower
                    # is; the read again after a wait does not (readFromPurgatory).
                    self._follower_fetched(part, replica_id, fp.fetch_offset,
                                           getattr(fp, "log_start_offset", -1))
                if result.records_size and self._leader_throttles(part, replica_id):
                    # Kafka's shouldLeaderThrottle, on every read: an out-of-sync replica of a
                    # throttled partition gets no records while the leader's quota is used up.
                    result = ReadResult(ErrorCode.NONE, result.high_watermark,
                                        result.last_stable_offset, result.log_start_offset, b"")
            return result
        except KafkaError as exc:
            if not from_follower:
                # Kafka's createLogReadResult(e): no offsets with an error. (librdkafka, told
                # OFFSET_OUT_OF_RANGE by a follower, asks the leader only when its offset is
                # above the high watermark given: -1 always is.) A follower here gets the
                # leader's log start with OFFSET_OUT_OF_RANGE, to restart its log there.
                return ReadResult(_error_code_of(exc))
            return ReadResult(_error_code_of(exc), part.high_watermark, part.last_stable_offset,
                              part.log_start_offset)
        except OSError as exc:
            log.error("Error reading %s-%d: %s", fp.topic, fp.partition, exc)
            self._storage_failure(part, exc)
            return ReadResult(ErrorCode.KAFKA_STORAGE_ERROR)

    def _follower_fetched(self, part, replica_id: int, fetch_offset: int,
                          log_start_offset: int = -1) -> None:
        """Leader bookkeeping for a follower's fetch: its LEO and caught-up time, the HW (which
        may complete waiting acks=all produces), its log start (which may complete a waiting
        DeleteRecords), and an ISR expansion once it caught up."""
        if not part.is_leader:
            return
        start_before = part.follower_log_start_offsets.get(replica_id)
        if part.update_follower_fetch_state(replica_id, fetch_offset, self.time.ms(),
                                            log_start_offset):
            self.produce_purgatory.notify(part.topic, part.partition)
            self.fetch_purgatory.notify(part.topic, part.partition)
        elif part.follower_log_start_offsets.get(replica_id) != start_before:
            self.produce_purgatory.notify(part.topic, part.partition)
        if self.isr_changes is not None and part.isr_expansion_candidate(
                replica_id, self.isr_changes.alive_brokers()):
            self.isr_changes.submit(part, part.isr | {replica_id})

    def maybe_shrink_isrs(self) -> int:
        """Kafka's isr-expiration task (every replica.lag.time.max.ms / 2): followers that have
        not caught up for replica.lag.time.max.ms leave the ISR through AlterPartition.
        Returns how many partitions asked."""
        if self.isr_changes is None:
            return 0
        lag_ms = _config_int(self.config, "replica.lag.time.max.ms", 30000)
        now = self.time.ms()
        asked = 0
        for part in self._partitions.values():
            if not part.is_leader or part.pending_isr is not None or len(part.isr) <= 1:
                continue
            out = part.out_of_sync_replicas(now, lag_ms)
            if out:
                log.info("[Partition %s-%d broker=%d] Shrinking ISR from %s to %s: out of sync "
                         "replicas %s (not caught up for %d ms)", part.topic, part.partition,
                         self.broker_id, sorted(part.isr), sorted(part.isr - out), sorted(out),
                         lag_ms)
                self.isr_changes.submit(part, part.isr - out)
                asked += 1
        return asked

    def _leader_throttles(self, part, replica_id: int) -> bool:
        quota = self.leader_quota
        return quota is not None and replica_id not in part.isr \
            and quota.is_throttled(part.topic, part.partition) and quota.is_exceeded()

    def partition_bytes_available(self, fp, min_bytes: int, isolation_level: int,
                                  replica_id: int, client_metadata: bool = False,
                                  throttled: set | None = None) -> int:
        """For the purgatory: bytes `fp` could read now (capped near `min_bytes`). A partition
        that would answer with an error counts as `min_bytes`: the fetch answers at once. One
        the leader throttles counts 0, its key added to `throttled`."""
        if fp.topic is None:
            return 0
        part = self._partitions.get((fp.topic, fp.partition))
        if part is None:
            return min_bytes
        if not part.is_leader and (replica_id >= 0 or not client_metadata
                                   or self.metadata_cache is None):
            return min_bytes                    # answered NOT_LEADER_OR_FOLLOWER at once
        epoch = getattr(fp, "current_leader_epoch", -1)
        if epoch >= 0 and epoch != part.leader_epoch:
            return min_bytes                    # FENCED / UNKNOWN_LEADER_EPOCH at once
        try:
            if fp.fetch_offset < part.log_start_offset or fp.fetch_offset > part.log_end_offset:
                return min_bytes                # out of range now: answer with the error
            if replica_id < 0 and part.behind_readable_segment(fp.fetch_offset, isolation_level):
                return min_bytes                # DelayedFetch case F: at once
            if replica_id >= 0 and self._leader_throttles(part, replica_id):
                if throttled is not None:
                    throttled.add((fp.topic, fp.partition))
                return 0                        # DelayedFetch: a throttled partition's bytes
                                                # do not count (its answer would be empty)
            # at most the partition's own limit counts (DelayedFetch case G)
            limit = min(min_bytes, getattr(fp, "partition_max_bytes", min_bytes))
            return part.bytes_available(fp.fetch_offset, limit, isolation_level,
                                        replica_id >= 0)
        except KafkaError:
            return min_bytes

    async def wait_for_fetch(self, partitions, *, min_bytes: int, max_wait_ms: int,
                             isolation_level: int, replica_id: int = -1,
                             client_metadata: bool = False) -> bool:
        """Park until `min_bytes` are readable or `max_wait_ms` passes; True if satisfied.

        Bytes available are remembered per partition, so a notify re-reads only the partition
        that changed (a fetch over a thousand partitions costs one lookup per append).

        A follower's partition that the leader throttles counts nothing, as in Kafka's
        DelayedFetch; unlike Kafka, the wait is looked at again as soon as the leader's quota
        frees (Kafka waits out max_wait_ms, which left the link idle half a second at a time
        and a throttled copy about a tenth under its rate)."""
        by_key = {(fp.topic, fp.partition): fp for fp in partitions if fp.topic is not None}
        need = max(1, min_bytes)
        available = {}
        throttled = set()
        timer = None

        def wake() -> None:
            # One throttled partition looked at again is enough: its bytes now count (a
            # follower's fetch waits for one byte), or the quota is used up again and ready()
            # sets the timer anew; not every partition of a large reassignment each time.
            nonlocal timer
            timer = None
            if throttled:
                self.fetch_purgatory.notify_key(next(iter(throttled)))

        def ready(key) -> bool:
            nonlocal timer
            for k in (by_key if key is None else (key,) if key in by_key else ()):
                throttled.discard(k)
                available[k] = self.partition_bytes_available(by_key[k], need, isolation_level,
                                                              replica_id, client_metadata,
                                                              throttled)
            if sum(available.values()) >= need:
                return True
            if throttled and timer is None:
                timer = asyncio.get_running_loop().call_later(
                    self.leader_quota.seconds_until_under(), wake)
            return False

        try:
            return await self.fetch_purgatory.wait(list(by_key), ready, max_wait_ms)
        finally:
            if timer is not None:
                timer.cancel()

    # -- lifecycle -----------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Release every waiting request (they answer with what they have); moves between
        log dirs stop, their future logs kept for the restart to resume."""
        self.log_dir_mover.stop()
        self.fetch_purgatory.shutdown()
        self.produce_purgatory.shutdown()


def _config_int(config, name: str, default: int) -> int:
    if config is None:
        return default
    try:
        value = config.get(name)
    except Exception:          # an unknown name in the broker's table
        return default
    return default if value is None else int(value)
