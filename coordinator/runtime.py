"""The thin asyncio runtime around a pure coordinator manager, and the group coordinator.

Theory of operation
-------------------
`CoordinatorRuntime` runs one pure manager over one internal topic: the GroupManager
(coordinator/group/manager.py) over `__consumer_offsets` (`GroupCoordinator` below), and the
transaction coordinator's manager over `__transaction_state`. The manager decides; the runtime
only carries out its `Result`s on the event loop. What differs per coordinator is small and
named by the subclass: the topic, the key a record is partitioned by (`key_of`: a group id, a
transactional id), how a partition's records are replayed, and what loading and unloading a
partition tell the manager. The description below uses the group coordinator's words:

- Requests: `execute(op, *args)` calls the manager with `now_ms` from the broker's clock and a
  future as the request's token, applies the Result, and awaits the future. A parked JoinGroup
  or SyncGroup simply awaits longer; whatever later Result completes its token wakes it.
- Timers: a (key, deadline) is armed with `loop.call_at`, keeping only the EARLIEST deadline per
  key (a heartbeat that pushes a session deadline later arms nothing; the early wake-up makes
  the manager re-arm at the real deadline). So a member costs about one timer per session
  timeout, not one per heartbeat.
- Appends (group commit): an operation's records are queued and written at the end of the
  current loop turn (`call_soon`), together with every other operation's records of that turn:
  one uncompressed v2 batch per `__consumer_offsets` partition
  (`abs(java_hashcode(group)) % offsets.topic.num.partitions`), appended through the broker's
  ReplicaManager with acks=-1. Under load this amortizes the per-batch cost (validation, CRC,
  write, index) over many commits, as Kafka's coordinator runtime batches its writes. Then each
  operation's follow-up (`on_append`: replay, answer) runs in order with the error of the
  partitions it wrote. Meanwhile the manager already counts the writes as pending (OffsetFetch
  with require_stable sees them; a parked SyncGroup keeps waiting), and follow-ups re-check the
  group's generation, so interleaving requests see a consistent group. With one replica the
  high watermark covers an append when it returns; otherwise (followers, later) the follow-ups
  wait in a task for the acks.
- Loading: `load_partition(p)` reads a `__consumer_offsets` partition from its log start and
  replays every record into the manager (the same `replay` the live path uses); requests for
  groups of a partition being loaded get COORDINATOR_LOAD_IN_PROGRESS, for a partition this
  broker does not lead NOT_COORDINATOR. `unload_partition(p)` is the reverse, for a broker that
  stops leading p (its groups are forgotten; parked requests answered NOT_COORDINATOR).

Concurrency contract: every method runs on the event loop thread. Loading reads the log
synchronously on the loop (the internal topic is small and compacted); appends are page-cache
writes.
"""
import asyncio
import logging
import os
import time

from protocol.errors import ErrorCode, KafkaError
from storage.record_batch import iter_batches

from coordinator.group.manager import GroupManager
from coordinator.internal_topics import offsets_topic_configs
from coordinator.partitioning import OFFSETS_TOPIC, partition_for
from coordinator.results import GroupConfig, Result
from coordinator.serde import build_batch, replay_buffer

log = logging.getLogger(__name__)

DEFAULT_MAX_BATCH_BYTES = 1048588      # max.message.bytes default (message.max.bytes)


def group_config_from(config) -> GroupConfig:
    """GroupConfig from the broker's BrokerConfig (Kafka property names)."""
    def get(name, default):
        try:
            value = config.get(name)
        except Exception:           # a property the broker's table does not declare
            return default
        return default if value is None else value
    return GroupConfig(
        min_session_timeout_ms=get("group.min.session.timeout.ms", 6000),
        max_session_timeout_ms=get("group.max.session.timeout.ms", 1800000),
        initial_rebalance_delay_ms=get("group.initial.rebalance.delay.ms", 3000),
        max_size=get("group.max.size", 2**31 - 1),
        offset_metadata_max_bytes=get("offset.metadata.max.bytes", 4096),
        offsets_retention_ms=get("offsets.retention.minutes", 10080) * 60_000,
        offsets_retention_check_interval_ms=get("offsets.retention.check.interval.ms", 600_000),
        offsets_commit_timeout_ms=get("offsets.commit.timeout.ms", 5000),
        offsets_load_buffer_size=get("offsets.load.buffer.size", 5 * 1024 * 1024),
    )


class SystemTime:
    def ms(self) -> int:
        return int(time.time() * 1000)


class CoordinatorRuntime:
    """Loads, serves and writes one internal topic for one pure manager (module docstring).
    Subclasses set `topic` and `name` and implement `key_of`, `_replay`, `_finish_loading`,
    `_unload` and `_commit_timeout_ms`."""

    topic = ""
    name = "coordinator"            # for log lines: "group coordinator", ...
    loaded_words = "metadata"       # "Finished loading <loaded_words> from <topic>-<p> ..."
    key_words = "keys"              # "(12 groups)"

    def __init__(self, replica_manager, manager, *, num_partitions: int, time=None,
                 topic_creator=None, partition_count=None, load_buffer_size: int = 5 << 20):
        self.replica_manager = replica_manager
        self.num_partitions = num_partitions
        # callable -> the existing topic's partition count or None (the broker's metadata):
        # keys hash over the real count, even if the topic was created with another one.
        self._partition_count = partition_count
        self.manager = manager
        self.load_buffer_size = load_buffer_size
        self.time = time or SystemTime()
        # async callable creating the topic (the broker's TopicManager); None in tests
        self._topic_creator = topic_creator
        self._timers: dict[tuple, tuple[int, asyncio.TimerHandle]] = {}
        self._loaded: set[int] = set()
        self._loading: set[int] = set()
        self._tasks: set[asyncio.Task] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running = False
        self._partition_cache: dict[str, int] = {}
        self._pending_appends: list = []
        self._creating: asyncio.Future | None = None     # set while the topic is being made

    # -------------------------------------------------------------------------- per coordinator
    def key_of(self, record) -> str:
        """The key whose hash picks the partition a record is written to."""
        raise NotImplementedError

    def _replay(self, p: int, buf: bytes, now_ms: int) -> set:
        """Replays a chunk of partition p's log into the manager; returns the keys touched."""
        raise NotImplementedError

    def _finish_loading(self, p: int, touched: set, epoch: int, now_ms: int) -> Result:
        raise NotImplementedError

    def _unload(self, p: int, now_ms: int) -> tuple[Result, int]:
        """The manager forgets partition p: (its Result, how many keys went)."""
        raise NotImplementedError

    def _commit_timeout_ms(self) -> int:
        raise NotImplementedError

    def _on_startup(self) -> None:
        """After the partitions led here are loaded (timers of the coordinator)."""

    def _begin_loading(self, p: int, epoch: int) -> None:
        """Before partition p's records are replayed (at its leader epoch)."""

    def _fail_parked(self) -> Result:
        """At shutdown: the answers of requests the manager holds parked (none by default)."""
        return Result()

    # The batch of the topic's records: serde.build_batch(records, now_ms[, producer id, epoch])
    batch_builder = staticmethod(build_batch)

    def _build(self, records, now_ms: int, producer=(-1, -1)) -> bytes:
        if producer[0] < 0:
            return self.batch_builder(records, now_ms)
        return self.batch_builder(records, now_ms, *producer)

    # -------------------------------------------------------------------------- lifecycle
    async def startup(self) -> None:
        """Loads every local partition of the topic and starts the coordinator's timers."""
        self._loop = asyncio.get_running_loop()
        self._running = True
        self._refresh_partition_count()
        for p in range(self.num_partitions):
            if self._leads(p):
                self.load_partition(p)
        self._on_startup()

    def shutdown(self) -> None:
        """Writes what is queued, answers parked joins/syncs with NOT_COORDINATOR (so draining
        connections need not wait for them), and stops the timers. On the loop."""
        if self._pending_appends:
            self._flush_appends()
        self._apply(self._fail_parked(), None)
        self._running = False
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        for task in self._tasks:
            task.cancel()

    def load_partition(self, p: int) -> int:
        """Replays partition p of the topic into the manager (the broker became its leader).

        Returns the number of keys touched. On the loop; reads the log synchronously."""
        part = self.replica_manager.get_partition(self.topic, p)
        if part is None:
            return 0
        # The topic may have another partition count than the config (an existing topic; a
        # cluster's metadata was empty when this coordinator was built): keys hash over it.
        self._refresh_partition_count()
        self._loading.add(p)
        ident = self.manager.log_ident
        epoch = part.leader_epoch
        log.info("%sElected as the %s for partition %d in epoch %d", ident, self.name, p, epoch)
        started = time.monotonic()
        try:
            self._begin_loading(p, epoch)
            touched = set()
            now = self.time.ms()
            try:
                for buf in _read_log(part.log, self.load_buffer_size):
                    touched |= self._replay(p, buf, now)
            except Exception:                   # noqa: BLE001 - as Kafka: serve what loaded
                # Kafka's loaders log a failed read or replay and own the partition with what
                # they loaded; left half-loaded, every request (and ListTransactions for the
                # whole broker) would answer COORDINATOR_LOAD_IN_PROGRESS for ever.
                log.exception("%sError loading %s from %s-%d", ident, self.loaded_words,
                              self.topic, p)
            self._apply(self._finish_loading(p, touched, epoch, now), None)
            self._loaded.add(p)
            log.info("%sFinished loading %s from %s-%d in %d milliseconds for epoch %d "
                     "(%d %s)", ident, self.loaded_words, self.topic, p,
                     (time.monotonic() - started) * 1000, epoch, len(touched), self.key_words)
            return len(touched)
        finally:
            self._loading.discard(p)

    def unload_partition(self, p: int) -> int:
        """The broker is no longer the leader of partition p (Kafka's onResignation): its keys
        are dropped from memory and their requests answered NOT_COORDINATOR. Returns how many
        were unloaded. On the loop."""
        self._loaded.discard(p)
        ident = self.manager.log_ident
        log.info("%sResigned as the %s for partition %d", ident, self.name, p)
        result, gone = self._unload(p, self.time.ms())
        self._apply(result, None)
        log.info("%sFinished unloading %s-%d. Removed %d cached %s.", ident, self.topic, p,
                 gone, self.key_words)
        return gone

    # -------------------------------------------------------------------------- lookups
    def partition_for(self, key: str) -> int:
        p = self._partition_cache.get(key)
        if p is None:
            if len(self._partition_cache) > 100_000:
                self._partition_cache.clear()
            p = self._partition_cache[key] = partition_for(key, self.num_partitions)
        return p

    def coordinator_error(self, key: str) -> int:
        """NONE if this broker coordinates the key now, else the error to answer with."""
        p = self.partition_for(key)
        if p in self._loaded:
            return ErrorCode.NONE
        if p in self._loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        part = self.replica_manager.get_partition(self.topic, p)
        if part is None and self._refresh_partition_count():
            return self.coordinator_error(key)
        if part is None:
            # Kafka: a partition this broker does not own is NOT_COORDINATOR, also while
            # the topic is being created (a client told of the new leader by another
            # broker's metadata before this one's LeaderAndIsr arrived looks it up again).
            return ErrorCode.NOT_COORDINATOR
        if not getattr(part, "is_leader", True):
            return ErrorCode.NOT_COORDINATOR         # a follower replica (or unloaded)
        # Became leader after start-up (the topic was just created): load now.
        self.load_partition(p)
        return ErrorCode.NONE if p in self._loaded else ErrorCode.COORDINATOR_LOAD_IN_PROGRESS

    def _refresh_partition_count(self) -> bool:
        """True if the topic's real partition count differs from the one in use (now fixed)."""
        count = self._partition_count() if self._partition_count else None
        if not count or count == self.num_partitions:
            return False
        log.info("%s has %d partitions (not %d): keys hash over %d", self.topic, count,
                 self.num_partitions, count)
        self.num_partitions = count
        self._partition_cache.clear()
        return True

    def _leads(self, p: int) -> bool:
        part = self.replica_manager.get_partition(self.topic, p)
        return part is not None and getattr(part, "is_leader", True)

    def topic_exists(self) -> bool:
        return any(self.replica_manager.get_partition(self.topic, p) is not None
                   for p in range(self.num_partitions))

    async def ensure_topic(self) -> int:
        """FindCoordinator: creates the topic on first use. Returns an error code."""
        if self.topic_exists():
            return ErrorCode.NONE
        if self._topic_creator is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self._creating is not None:          # another FindCoordinator is creating it
            await asyncio.shield(self._creating)
            return ErrorCode.NONE if self.topic_exists() else \
                ErrorCode.COORDINATOR_NOT_AVAILABLE
        started = time.monotonic()
        self._creating = asyncio.get_running_loop().create_future()
        try:
            await self._topic_creator()
        except Exception:
            log.exception("Could not create %s", self.topic)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        finally:
            self._creating.set_result(None)
            self._creating = None
        log.info("Created %s in %.0f ms", self.topic, (time.monotonic() - started) * 1000)
        self._refresh_partition_count()
        for p in range(self.num_partitions):
            if p not in self._loaded:
                self.load_partition(p)
        if self.topic_exists():
            return ErrorCode.NONE
        return ErrorCode.COORDINATOR_NOT_AVAILABLE

    # -------------------------------------------------------------------------- requests
    async def execute(self, op: str, *args, parked: bool = False, **kwargs):
        """Runs `manager.<op>(*args, now_ms=...)` and returns its (possibly deferred) response.

        `parked=True` passes a future as `token=` (JoinGroup, SyncGroup)."""
        loop = self._loop or asyncio.get_running_loop()
        self._loop = loop
        future = loop.create_future()
        if parked:
            kwargs["token"] = future
        result = getattr(self.manager, op)(*args, now_ms=self.time.ms(), **kwargs)
        self._apply(result, future)
        return await future

    def _apply(self, result: Result, future) -> None:
        for key, deadline in result.timers:
            self._arm(key, deadline)
        for token, response in result.completions:
            if not token.done():
                token.set_result(response)
        if result.response is not None and future is not None and not future.done():
            future.set_result(result.response)
        for append in result.appends:
            self._append(append, future)

    def _append(self, append, future) -> None:
        self._pending_appends.append((append, future))
        if len(self._pending_appends) == 1:
            (self._loop or asyncio.get_running_loop()).call_soon(self._flush_appends)

    def _flush_appends(self) -> None:
        pending, self._pending_appends = self._pending_appends, []
        if not pending:
            return
        now = self.time.ms()
        # partition -> producer (a transaction's offsets: its own batch; else (-1, -1)) ->
        # [(index of the append in `pending`, its records for that partition)]
        by_partition: dict[int, dict[tuple, list[tuple[int, list]]]] = {}
        # An append carrying a verification guard goes alone: if a marker ended its
        # transaction meanwhile, its refusal must not fail the appends batched with it.
        verified = []
        for i, (append, _) in enumerate(pending):
            per: dict[int, list] = {}
            for record in append.records:
                per.setdefault(self.partition_for(self.key_of(record)), []).append(record)
            producer = (append.producer_id, append.producer_epoch)
            for p, records in per.items():
                if append.verification is not None:
                    verified.append((i, p, producer, records, append.verification))
                else:
                    by_partition.setdefault(p, {}).setdefault(producer, []).append((i, records))
        errors = [ErrorCode.NONE] * len(pending)
        acked: dict = {}                   # (topic, p) -> the last successful AppendResult
        entries, members, overflow = {}, {}, []
        for p, by_producer in by_partition.items():
            batches, indices = [], []
            for producer, items in by_producer.items():
                batch = self._build([r for _, records in items for r in records], now, producer)
                if len(batch) <= self._max_batch_bytes(p):
                    batches.append(batch)
                    indices += [i for i, _ in items]
                else:
                    overflow.extend(((self.topic, p), chunk)
                                    for chunk in self._chunks(p, items, now, producer))
            if batches:                    # one append of this partition's batches
                entries[(self.topic, p)] = b"".join(batches)
                members[(self.topic, p)] = indices
        calls = [(entries, members, None)] if entries else []
        calls += [({key: batch}, {key: indices}, None) for key, (indices, batch) in overflow]
        for i, p, producer, records, guard in verified:
            key = (self.topic, p)
            calls.append(({key: self._build(records, now, producer)}, {key: [i]},
                          {key: {producer[0]: guard}}))
        for call_entries, call_members, verification in calls:
            results = self.replica_manager.append_records(call_entries, -1, now,
                                                          verification=verification)
            for key, r in results.items():
                if r.error_code != ErrorCode.NONE:
                    log.warning("Appending to %s-%d failed: %s", key[0], key[1],
                                ErrorCode(r.error_code).name)
                    for i in call_members[key]:
                        if errors[i] == ErrorCode.NONE:
                            errors[i] = r.error_code
                elif key not in acked or acked[key].last_offset < r.last_offset:
                    acked[key] = r
        if not self._acked(acked):
            task = asyncio.ensure_future(self._follow_up_after_acks(pending, errors, acked))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        self._follow_up(pending, errors)

    def _max_batch_bytes(self, p: int) -> int:
        """The partition's max.message.bytes: a bigger batch would be refused whole."""
        part = self.replica_manager.get_partition(self.topic, p)
        config = getattr(getattr(part, "log", None), "config", None)
        return getattr(config, "max_message_bytes", DEFAULT_MAX_BATCH_BYTES)

    def _chunks(self, p: int, items, now: int, producer=(-1, -1)):
        """Splits one partition's writes into batches under max.message.bytes, never splitting
        one operation's records: many commits of one loop turn (large metadata) then still
        succeed, and an operation too large on its own fails alone, not with its neighbours.
        Yields (append indices, batch bytes)."""
        limit = self._max_batch_bytes(p)
        indices, records, size = [], [], 0
        for i, own in items:
            own_size = len(self._build(own, now, producer))
            if records and size + own_size > limit:
                yield indices, self._build(records, now, producer)
                indices, records, size = [], [], 0
            indices.append(i)
            records.extend(own)
            size += own_size
        if records:
            yield indices, self._build(records, now, producer)

    def _follow_up(self, pending, errors) -> None:
        now = self.time.ms()
        for (append, future), error in zip(pending, errors):
            try:
                self._apply(append.on_append(error, now), future)
            except Exception as exc:        # a bug: fail this request, keep the others going
                log.exception("%s follow-up failed", self.name)
                if future is not None and not future.done():
                    future.set_exception(exc)

    def _acked(self, results) -> bool:
        for (topic, p), r in results.items():
            part = self.replica_manager.get_partition(topic, p)
            if part is None or part.high_watermark <= r.last_offset:
                return False
        return True

    async def _follow_up_after_acks(self, pending, errors, acked) -> None:
        timeout = self._commit_timeout_ms()
        await self.replica_manager.wait_for_acks(acked, -1, timeout)
        for key, r in acked.items():       # wait_for_acks marks a timed-out result's error
            if r.error_code != ErrorCode.NONE:
                for i, (append, _) in enumerate(pending):
                    if errors[i] == ErrorCode.NONE and any(
                            self.partition_for(self.key_of(rec)) == key[1]
                            for rec in append.records):
                        errors[i] = r.error_code
        self._follow_up(pending, errors)

    # -------------------------------------------------------------------------- timers
    def _arm(self, key: tuple, deadline_ms: int) -> None:
        current = self._timers.get(key)
        if current is not None:
            if current[0] <= deadline_ms:
                return
            current[1].cancel()
        loop = self._loop or asyncio.get_running_loop()
        self._loop = loop
        delay = max(deadline_ms - self.time.ms(), 0) / 1000.0
        handle = loop.call_at(loop.time() + delay, self._fire, key, deadline_ms)
        self._timers[key] = (deadline_ms, handle)

    def _fire(self, key: tuple, deadline_ms: int) -> None:
        current = self._timers.get(key)
        if current is None or current[0] != deadline_ms:
            return
        del self._timers[key]
        try:
            # A timer may fire a hair early by the loop's clock: never before its deadline.
            now = max(self.time.ms(), deadline_ms)
            self._apply(self.manager.on_timer(key, now), None)
        except Exception:
            log.exception("%s timer %r failed", self.name, key)


class GroupCoordinator(CoordinatorRuntime):
    """The broker's `group_coordinator` over `__consumer_offsets`. Handlers call `execute`
    and the lookup helpers."""

    topic = OFFSETS_TOPIC
    name = "group coordinator"
    loaded_words = "offsets and group metadata"
    key_words = "groups"

    def __init__(self, replica_manager, *, num_partitions: int = 50,
                 config: GroupConfig | None = None, time=None, topic_creator=None,
                 manager: GroupManager | None = None, partition_count=None, broker_id: int = 0):
        manager = manager or GroupManager(config)
        super().__init__(replica_manager, manager, num_partitions=num_partitions, time=time,
                         topic_creator=topic_creator, partition_count=partition_count,
                         load_buffer_size=manager.config.offsets_load_buffer_size)
        # Log lines read as Kafka's: "[GroupCoordinator 0]: ... (__consumer_offsets-7) ..."
        self.manager.log_ident = f"[GroupCoordinator {broker_id}]: "
        self.manager.partition_for = self.partition_for

    @classmethod
    def for_broker(cls, broker) -> "GroupCoordinator":
        """The coordinator of a running Broker (broker/server.py calls this, then startup()).

        `__consumer_offsets` logs found on disk but unknown to the metadata store (a data dir
        written by Apache Kafka) were registered by the TopicManager's start-up, so their
        groups load. The partition count used for hashing is the topic's actual count, as in
        Kafka."""
        config = broker.config
        topics = getattr(broker, "topics", None)
        num_partitions = config.get("offsets.topic.num.partitions")
        existing = broker.metadata.get_topic(OFFSETS_TOPIC) if broker.metadata else None
        if existing is not None:
            num_partitions = len(existing.partitions)

        async def create_offsets_topic():
            await _create_offsets_topic(broker, topics)

        def partition_count():
            topic = broker.metadata.get_topic(OFFSETS_TOPIC)
            return len(topic.partitions) if topic is not None else None
        return cls(broker.replica_manager, num_partitions=num_partitions,
                   config=group_config_from(config), time=broker.time,
                   topic_creator=create_offsets_topic if topics is not None else None,
                   partition_count=partition_count, broker_id=broker.broker_id)

    def key_of(self, record) -> str:
        return record.key.group

    def _replay(self, p: int, buf: bytes, now_ms: int) -> set:
        return replay_buffer(self.manager, buf, now_ms, p)

    def on_transaction_completed(self, producer_id: int, partitions, committed: bool) -> None:
        """WriteTxnMarkers wrote a transaction's marker to these partitions of the topic."""
        self._apply(self.manager.complete_txn_offsets(producer_id, set(partitions), committed,
                                                      self.time.ms()), None)

    def on_partitions_deleted(self, partitions) -> None:
        """A topic was deleted (UpdateMetadata's leader -2 in a cluster, DeleteTopics on one
        broker): the groups loaded here forget its offsets."""
        self._apply(self.manager.remove_offsets_of_deleted(set(partitions), self.time.ms()),
                    None)

    def _finish_loading(self, p: int, touched: set, epoch: int, now_ms: int) -> Result:
        return self.manager.finish_loading(touched, now_ms)

    def _unload(self, p: int, now_ms: int) -> tuple[Result, int]:
        gone = [g for g in self.manager.groups if self.partition_for(g) == p]
        return self.manager.unload(gone, now_ms), len(gone)

    def _commit_timeout_ms(self) -> int:
        return self.manager.config.offsets_commit_timeout_ms

    def _fail_parked(self) -> Result:
        return self.manager.fail_parked(ErrorCode.NOT_COORDINATOR)

    def _on_startup(self) -> None:
        interval = self.manager.config.offsets_retention_check_interval_ms
        self._arm(("expire-offsets",), self.time.ms() + interval)

    # The names the group handlers and tests use.
    def offsets_topic_exists(self) -> bool:
        return self.topic_exists()

    async def ensure_offsets_topic(self) -> int:
        return await self.ensure_topic()


def _read_log(log_, read_bytes: int) -> "iter[bytes]":
    """Yields the log's bytes from log_start_offset to log_end_offset, in chunks of batches."""
    offset = log_.log_start_offset
    end = log_.log_end_offset
    for _ in range(1_000_000):
        if offset >= end:
            return
        info = log_.read(offset, read_bytes, max_offset=end, min_one_message=True)
        buf = _bytes_of(info.records)
        if not buf:
            return
        last_next = offset
        for batch in iter_batches(buf):
            last_next = batch.next_offset
        yield buf
        if last_next <= offset:
            return
        offset = last_next


def _bytes_of(records) -> bytes:
    if records is None:
        return b""
    if isinstance(records, (bytes, bytearray, memoryview)):
        return bytes(records)
    # A FileRegion (file, position, length): read it without moving any shared file position.
    return os.pread(records.file.fileno(), records.length, records.position)


async def _create_offsets_topic(broker, topics) -> None:
    """Asks the TopicManager for `__consumer_offsets` with Kafka's internal-topic settings:
    offsets.topic.num.partitions, offsets.topic.replication.factor (capped at the live brokers,
    as Kafka does for this topic), cleanup.policy=compact, offsets.topic.segment.bytes."""
    config = broker.config
    replication = min(config.get("offsets.topic.replication.factor"),
                      max(len(topics.live_brokers()), 1))
    configs = offsets_topic_configs(config)
    # The async variant creates the 50 logs in an executor instead of stalling the loop.
    create = getattr(topics, "create_topic_async", None) or topics.create_topic
    try:
        outcome = create(OFFSETS_TOPIC, config.get("offsets.topic.num.partitions"), replication,
                         configs=configs)
        if asyncio.iscoroutine(outcome):
            await outcome
    except KafkaError as exc:
        if exc.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
            raise
