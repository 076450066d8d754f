"""An asyncio consumer: manual assignment or group subscription, fetch, positions, commits.

Theory of operation. The consumer keeps a *position* (next offset to return) per assigned partition.
A partition without one is resolved before fetching: the group's committed offset if there is a
group and one exists, else ``auto.offset.reset`` (earliest/latest through ListOffsets; "none"
raises). ``poll()`` sends one Fetch per partition leader (all of that leader's partitions in one
request, no fetch session: every fetch is a full one), reads the returned batch headers with
storage's RecordBatchView, skips control batches and, under read_committed, batches of aborted
transactions (the response's aborted_transactions list: a producer's batches are aborted from its
first_offset up to its ABORT marker), and advances the position past them all. The batches kept
wait in the buffer, one `_Fetched` per partition and response, and are decoded (decompressing,
dropping records below the position: a compressed batch comes back whole) a batch at a time as
``poll()`` takes their records; a partition is fetched again only once its buffer is used up.
OFFSET_OUT_OF_RANGE resets the position by policy; leadership errors refresh metadata.

With ``subscribe()`` a GroupMembership (group.py) decides the assignment; partitions being revoked
get their positions committed first when auto-commit is on; partitions lost (this member was
expelled) are dropped without a commit. Auto-commit runs inside ``poll()`` every
``auto.commit.interval.ms`` and on ``close()``. What is committed (and ``position()``) is the
*consumed* position: the offset after the last record ``poll()`` returned (the fetch position once
the partition's buffer is used up), which is behind the fetch position while fetched records wait.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections import defaultdict
from typing import NamedTuple

from protocol.errors import ErrorCode, KafkaError
from protocol.messages import FetchRequest, OffsetCommitRequest
from storage.record_batch import MAGIC_V2, ControlRecordType, iter_batches

from broker.client.admin import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, OFFSET_COMMIT_CAP, Admin
from broker.client.errors import ClientError
from broker.client.group import GroupMembership
from broker.client.types import TopicPartition

log = logging.getLogger(__name__)
FETCH_CAP = 12                 # Fetch v13+ names topics by id
ISOLATION = {"read_uncommitted": 0, "read_committed": 1}


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int        # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: list
    leader_epoch: int


class _Fetched:
    """One partition's records from one fetch response, decoded a batch at a time as poll()
    takes them (Java's CompletedFetch): memory stays about the response's size, and taking
    `n` records costs `n`. `batches` are the data batches of the response that poll() may
    return (control batches and aborted transactions already left out); records below `start`
    (the fetch position: a compressed batch comes back whole) are skipped. `next_offset` is the
    consumed position: the offset after the last record taken, `start` before any."""

    __slots__ = ("tp", "batches", "start", "records", "index", "next_offset")

    def __init__(self, tp: TopicPartition, batches: list, start: int):
        self.tp = tp
        self.batches = collections.deque(batches)
        self.start = start
        self.records: list = []
        self.index = 0
        self.next_offset = start

    def _fill(self) -> bool:
        """Some record is ready at `index`; False once every batch is used up."""
        while self.index >= len(self.records):
            if not self.batches:
                return False
            batch = self.batches[0]
            tp, start = self.tp, self.start
            ts_type, epoch = batch.timestamp_type, batch.partition_leader_epoch
            # a batch that does not decode stays: every poll raises, as Java's does, until the
            # application seeks past it
            self.records = [ConsumerRecord(tp.topic, tp.partition, r.offset, r.timestamp, ts_type,
                                           r.key, r.value, r.headers, epoch)
                            for r in batch.records() if r.offset >= start]
            self.batches.popleft()
            self.index = 0
        return True

    def take(self, n: int) -> list:
        """Up to `n` records; a batch that does not decode raises, once the records before it
        are taken."""
        out = []
        try:
            while len(out) < n and self._fill():
                end = min(len(self.records), self.index + n - len(out))
                out.extend(self.records[self.index:end])
                self.index = end
        except Exception:
            if not out:
                raise
        if out:
            self.next_offset = out[-1].offset + 1
        return out

    @property
    def exhausted(self) -> bool:
        return self.index >= len(self.records) and not self.batches


class NoOffsetForPartitionError(ClientError):
    pass


class Consumer:
    def __init__(self, cluster, *, group_id: str | None = None, group_instance_id: str | None = None,
                 auto_offset_reset: str = "latest", enable_auto_commit: bool = True,
                 auto_commit_interval_ms: int = 5000, isolation_level: str = "read_uncommitted",
                 fetch_min_bytes: int = 1, fetch_max_wait_ms: int = 500, fetch_max_bytes: int = 52428800,
                 max_partition_fetch_bytes: int = 1048576, max_poll_records: int = 500,
                 session_timeout_ms: int = 45000, heartbeat_interval_ms: int = 3000,
                 max_poll_interval_ms: int = 300000, assignors=("range", "cooperative-sticky"),
                 exclude_internal_topics: bool = True, metadata_max_age_ms: int = 300000):
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError(f"Invalid value {auto_offset_reset} for configuration auto.offset.reset: "
                             "String must be one of: latest, earliest, none")
        if isolation_level not in ISOLATION:
            raise ValueError(f"Invalid value {isolation_level} for configuration isolation.level: "
                             "String must be one of: read_committed, read_uncommitted")
        self.cluster = cluster
        self.admin = Admin(cluster)
        self.group_id = group_id
        self.auto_offset_reset = auto_offset_reset
        self.enable_auto_commit = enable_auto_commit and group_id is not None
        self.auto_commit_interval = auto_commit_interval_ms / 1000
        self.isolation_level = ISOLATION[isolation_level]
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_poll_records = max_poll_records
        self.exclude_internal_topics = exclude_internal_topics
        self.positions: dict[TopicPartition, int] = {}
        self.high_watermarks: dict[TopicPartition, int] = {}
        self._assigned: set = set()
        self._buffer: collections.deque[_Fetched] = collections.deque()  # fetched, not polled
        self._last_commit = time.monotonic()
        self._committed_positions: dict = {}
        self._leaderless_refresh_at = 0.0      # when a leaderless partition may ask again
        self.membership: GroupMembership | None = None
        if group_id is not None:
            self.membership = GroupMembership(
                cluster, group_id, assignor_names=assignors, session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=max_poll_interval_ms, heartbeat_interval_ms=heartbeat_interval_ms,
                group_instance_id=group_instance_id, on_assign=self._on_assign, on_revoke=self._on_revoke,
                on_lost=self._on_lost, metadata_max_age_ms=metadata_max_age_ms)
        self._subscribed = False

    # --- assignment ---------------------------------------------------------------------------

    def assign(self, partitions) -> None:
        self._subscribed = False
        self._assigned = {TopicPartition(*tp) for tp in partitions}
        self.positions = {tp: o for tp, o in self.positions.items() if tp in self._assigned}
        self._keep_buffered(lambda tp: tp in self._assigned)

    def subscribe(self, topics=None, pattern: str | None = None) -> None:
        if self.membership is None:
            raise ClientError("To use group management a group.id must be set (subscribe needs a group)")
        self._subscribed = True
        self.membership.subscribe(topics, pattern)

    def assignment(self) -> set:
        return set(self._assigned)

    async def _on_assign(self, partitions) -> None:
        # each newly assigned partition starts fresh (its committed offset, else the reset
        # policy), as Java's: a position left from before (a lookup that finished after the
        # partition was lost) is not reused
        for tp in partitions:
            if tp not in self._assigned:
                self.positions.pop(tp, None)
        self._assigned |= set(partitions)
        self._keep_buffered(lambda tp: tp in self._assigned)

    async def _on_revoke(self, partitions) -> None:
        if self.enable_auto_commit:
            offsets = self._consumed_positions(partitions)
            if offsets:
                try:
                    await self.commit(offsets)
                except (KafkaError, ClientError) as e:
                    log.warning("Commit before revocation failed: %s", e)
        await self._on_lost(partitions)

    async def _on_lost(self, partitions) -> None:
        """Partitions this member no longer owns, dropped without a commit (after a revocation's
        commit, or lost: expelled from the group)."""
        for tp in partitions:
            self._assigned.discard(tp)
            self.positions.pop(tp, None)
        self._keep_buffered(lambda tp: tp in self._assigned)

    def _keep_buffered(self, keep) -> None:
        """Drop the fetched records of the partitions `keep(tp)` refuses."""
        self._buffer = collections.deque(f for f in self._buffer if keep(f.tp))

    def _consumed_positions(self, only=None) -> dict:
        """Per assigned partition (of `only`, when given), the consumed position: the offset
        after the last record poll() returned from the partition's buffer, else the fetch
        position. Commits and position() use it, as Java's consumer (whose position moves only
        as records are returned)."""
        wanted = self._assigned if only is None else self._assigned & set(only)
        first: dict = {}
        for fetched in self._buffer:
            if fetched.tp in wanted and fetched.tp not in first:
                first[fetched.tp] = fetched.next_offset
        return {tp: first.get(tp, o) for tp, o in self.positions.items() if tp in wanted}

    # --- positions ----------------------------------------------------------------------------

    def seek(self, tp, offset: int) -> None:
        tp = TopicPartition(*tp)
        self.positions[tp] = offset
        self._keep_buffered(lambda other: other != tp)

    def rewind_unconsumed(self, records=()) -> None:
        """Move each partition back to its first record fetched but not consumed: those in
        the buffer and `records` (returned by poll but not used), so a commit at close does
        not skip them (Kafka's ConsoleConsumer resetUnconsumedOffsets)."""
        first: dict = {}
        for fetched in self._buffer:
            if fetched.tp not in first:
                first[fetched.tp] = fetched.next_offset
        for r in records:
            tp = TopicPartition(r.topic, r.partition)
            first[tp] = min(first.get(tp, r.offset), r.offset)
        for tp, offset in first.items():
            self.seek(tp, offset)

    async def seek_to_beginning(self, partitions=None) -> None:
        await self._reset(list(partitions or self._assigned), EARLIEST_TIMESTAMP)

    async def seek_to_end(self, partitions=None) -> None:
        await self._reset(list(partitions or self._assigned), LATEST_TIMESTAMP)

    async def _reset(self, partitions, timestamp) -> None:
        if not partitions:
            return
        listed = await self.admin.list_offsets({TopicPartition(*tp): timestamp for tp in partitions},
                                               isolation_level=self.isolation_level)
        for tp, r in listed.items():
            if r.error_code:
                raise KafkaError(r.error_code, f"Resetting the offset of {tp} failed: {ErrorCode(r.error_code).name}")
            self.seek(tp, r.offset)

    async def position(self, tp) -> int:
        tp = TopicPartition(*tp)
        if tp not in self.positions:
            await self._resolve_positions([tp])
            if tp not in self.positions:
                raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE,
                                 f"No position for {tp}: the partition has no leader")
        return self._consumed_positions([tp]).get(tp, self.positions[tp])

    async def _resolve_positions(self, partitions) -> None:
        missing = [tp for tp in partitions if tp not in self.positions]
        if not missing:
            return
        if self.group_id is not None:
            committed = await self.admin.fetch_offsets(self.group_id, missing)
            for tp, (offset, _, _) in committed.items():
                if tp in missing and tp in self._assigned:     # not lost meanwhile
                    self.positions[tp] = offset
            missing = [tp for tp in missing if tp not in self.positions]
        if not missing:
            return
        if self.auto_offset_reset == "none":
            raise NoOffsetForPartitionError(f"Undefined offset with no reset policy for partitions: "
                                            f"{', '.join(map(str, missing))}")
        # A partition without a leader now is reset later, the others are consumed meanwhile
        # (Java's OffsetFetcher retries the leaderless ones on their own)
        led = [tp for tp in missing if self._has_leader(tp)]
        if len(led) < len(missing) and time.monotonic() >= self._leaderless_refresh_at:
            # asked again after retry.backoff.ms, not on every poll (Java's metadata backoff)
            self._leaderless_refresh_at = time.monotonic() + self.cluster.retry_backoff
            await self._refresh_quietly()
            led = [tp for tp in missing if self._has_leader(tp)]
        await self._reset(led, EARLIEST_TIMESTAMP if self.auto_offset_reset == "earliest" else LATEST_TIMESTAMP)

    def _has_leader(self, tp) -> bool:
        meta = self.cluster.topics.get(tp.topic)
        info = meta.partitions.get(tp.partition) if meta is not None else None
        return info is not None and info.leader >= 0

    # --- poll ---------------------------------------------------------------------------------

    async def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list:
        """Records from the assigned partitions (possibly none when the timeout passes)."""
        max_records = max_records or self.max_poll_records
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            if self._subscribed:
                joined = await self.membership.ensure_active(max(0.0, deadline - time.monotonic()))
                if not joined:
                    return []
            await self._maybe_auto_commit()
            out = self._take(max_records)
            if out:
                return out
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            if not self._assigned:
                await asyncio.sleep(min(remaining, 0.1))
                continue
            await self._resolve_positions(sorted(self._assigned))
            await self._fetch_once(max(0, min(self.fetch_max_wait_ms, int(remaining * 1000))))

    def _take(self, max_records: int) -> list:
        """Up to `max_records` fetched records, partition after partition in fetch order."""
        out = []
        buffer = self._buffer
        while buffer and len(out) < max_records:
            fetched = buffer[0]
            try:
                taken = fetched.take(max_records - len(out))
            except Exception:
                if out:             # what came before the bad batch first; it raises next time
                    return out
                raise
            out.extend(taken)
            if fetched.exhausted:
                buffer.popleft()
        return out

    async def _fetch_once(self, max_wait_ms: int) -> None:
        by_node = defaultdict(list)
        for tp in sorted(self._assigned):
            if tp not in self.positions:
                continue
            try:
                by_node[await self.cluster.leader_for(tp.topic, tp.partition)].append(tp)
            except (KafkaError, ClientError) as e:
                log.debug("No leader for %s: %s", tp, e)
        if not by_node:
            await asyncio.sleep(self.cluster.retry_backoff)
            await self._refresh_quietly()
            return
        results = await asyncio.gather(*(self._fetch_from(node, tps, max_wait_ms) for node, tps in by_node.items()),
                                       return_exceptions=True)
        for r in results:
            if isinstance(r, NoOffsetForPartitionError):
                raise r          # auto.offset.reset=none: the application's to handle (Java)
            if isinstance(r, (KafkaError, ClientError)):
                log.debug("Fetch failed: %s", r)
                await asyncio.sleep(self.cluster.retry_backoff)
                await self._refresh_quietly()
            elif isinstance(r, BaseException):
                raise r

    async def _refresh_quietly(self) -> None:
        try:
            await self.cluster.refresh_metadata(sorted({tp.topic for tp in self._assigned}))
        except (KafkaError, ClientError):
            pass

    async def _fetch_from(self, node: int, tps: list, max_wait_ms: int) -> None:
        F = FetchRequest
        by_topic = defaultdict(list)
        for tp in tps:
            by_topic[tp.topic].append(tp)
        request = F(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=self.fetch_min_bytes,
                    max_bytes=self.fetch_max_bytes, isolation_level=self.isolation_level,
                    session_id=0, session_epoch=-1, topics=[
                        F.FetchTopic(topic=topic, partitions=[
                            F.FetchPartition(partition=tp.partition, fetch_offset=self.positions[tp],
                                             partition_max_bytes=self.max_partition_fetch_bytes)
                            for tp in group])
                        for topic, group in by_topic.items()])
        conn = await self.cluster.connection(node)
        response = await conn.send(request, cap=FETCH_CAP, timeout=max_wait_ms / 1000 + conn.request_timeout)
        if getattr(response, "error_code", 0):
            raise KafkaError(response.error_code, f"Fetch failed: {ErrorCode(response.error_code).name}")
        refresh = False
        for t in response.responses:
            for p in t.partitions:
                tp = TopicPartition(t.topic, p.partition_index)
                if tp not in self._assigned or tp not in self.positions:
                    continue
                if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    if self.auto_offset_reset == "none":
                        raise NoOffsetForPartitionError(f"Fetch position {self.positions[tp]} is out of range "
                                                        f"for partition {tp}")
                    self.positions.pop(tp, None)
                    await self._resolve_positions([tp]) if self.group_id is None else \
                        await self._reset([tp], EARLIEST_TIMESTAMP if self.auto_offset_reset == "earliest"
                                          else LATEST_TIMESTAMP)
                    continue
                if p.error_code:
                    refresh = True
                    continue
                self.high_watermarks[tp] = p.high_watermark
                if p.records:
                    self._parse(tp, p.records, p.aborted_transactions if self.isolation_level else None)
        if refresh:
            await self._refresh_quietly()

    def _parse(self, tp: TopicPartition, records, aborted) -> None:
        position = self.positions[tp]
        aborted = sorted(aborted or (), key=lambda a: a.first_offset)
        aborted_pids: set = set()
        start, batches = position, []
        for batch in iter_batches(records):
            if batch.next_offset <= position:
                continue
            if batch.magic < MAGIC_V2:
                position = batch.next_offset   # legacy message sets are not produced by this broker
                continue
            while aborted and aborted[0].first_offset <= batch.last_offset:
                aborted_pids.add(aborted.pop(0).producer_id)
            if batch.is_control:
                if batch.producer_id in aborted_pids:
                    try:
                        if batch.control_record_type() == ControlRecordType.ABORT:
                            aborted_pids.discard(batch.producer_id)
                    except ValueError:
                        pass
                position = batch.next_offset
                continue
            if batch.is_transactional and batch.producer_id in aborted_pids:
                position = batch.next_offset
                continue
            batches.append(batch)
            position = batch.next_offset
        self.positions[tp] = position
        if batches:
            self._buffer.append(_Fetched(tp, batches, start))

    # --- commits ------------------------------------------------------------------------------

    async def _maybe_auto_commit(self) -> None:
        if self.enable_auto_commit and time.monotonic() - self._last_commit >= self.auto_commit_interval:
            self._last_commit = time.monotonic()
            try:
                await self.commit()
            except (KafkaError, ClientError) as e:
                log.warning("Auto offset commit failed for group %s: %s", self.group_id, e)

    async def commit(self, offsets: dict | None = None) -> None:
        """Commit ``offsets`` ({tp: next offset to read}); default: every current position."""
        if self.group_id is None:
            raise ClientError("Committing offsets needs a group.id")
        if offsets is None:           # what poll() returned, not what is fetched and buffered
            offsets = {tp: o for tp, o in self._consumed_positions().items()
                       if self._committed_positions.get(tp) != o}
        if not offsets:
            return
        m = self.membership
        generation = m.generation if self._subscribed and m is not None else -1
        member_id = m.member_id if self._subscribed and m is not None else ""
        by_topic = defaultdict(list)
        for tp, offset in offsets.items():
            by_topic[tp.topic].append((tp.partition, offset))
        R = OffsetCommitRequest
        request = R(group_id=self.group_id, generation_id_or_member_epoch=generation, member_id=member_id,
                    group_instance_id=m.group_instance_id if m is not None else None, topics=[
                        R.OffsetCommitRequestTopic(name=t, partitions=[
                            R.OffsetCommitRequestPartition(partition_index=p, committed_offset=o,
                                                           committed_metadata="") for p, o in ps])
                        for t, ps in by_topic.items()])

        async def op():
            node = await self.cluster.find_coordinator(self.group_id)
            conn = await self.cluster.connection(node)
            response = await conn.send(request, cap=OFFSET_COMMIT_CAP)
            for t in response.topics:
                for p in t.partitions:
                    if p.error_code:
                        if p.error_code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.UNKNOWN_MEMBER_ID,
                                            ErrorCode.ILLEGAL_GENERATION) and m is not None:
                            m.needs_rejoin = True
                        raise KafkaError(p.error_code, f"Offset commit for {t.name}-{p.partition_index} failed: "
                                                       f"{ErrorCode(p.error_code).name}")
        await self.cluster.retry(op)
        self._committed_positions.update(offsets)

    async def committed(self, partitions) -> dict:
        return await self.admin.fetch_offsets(self.group_id, [TopicPartition(*tp) for tp in partitions])

    async def close(self) -> None:
        if self.enable_auto_commit:
            try:
                await self.commit()
            except (KafkaError, ClientError) as e:
                log.warning("Final offset commit failed: %s", e)
        if self.membership is not None and self._subscribed:
            await self.membership.leave()
