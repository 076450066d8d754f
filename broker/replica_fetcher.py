"""Follower fetchers: how a follower replica copies its leader's log (Kafka's
ReplicaFetcherManager, AbstractFetcherThread, ReplicaFetcherThread).

`num.replica.fetchers` fetchers per source broker, each one asyncio task with one connection
on the inter-broker listener; a partition goes to fetcher `hash(topic, partition) %
num.replica.fetchers` of its leader. A partition this replica follows from outside the ISR (a
reassignment's new replica, a broker back from a restart) goes to a catching-up twin of that
fetcher (its own connection) until it reaches the leader's high watermark, then moves over:
Kafka shares one fetcher thread, but there an in-sync partition's next fetch does not wait for
the append of a 1 MB answer; here, sharing one request loop, acks=all writes to the partitions
in sync backed up for seconds behind a large copy (p99 0.2-6 s during a 1 GiB reassignment on
2 cores; 30-40 ms apart). A fetcher sends Kafka's follower Fetch (v17 when the
leader speaks it and topic ids are known; its replica id in ReplicaState from v15, in
replica_id before) in an incremental fetch session (KIP-227: after the first, full, request
only the partitions whose state changed are named, and the leader answers only those with
news), for every partition it holds that is not backing off:

  FetchOffset = this replica's log end offset, CurrentLeaderEpoch = the LeaderAndIsr epoch,
  LastFetchedEpoch = the latest epoch in this replica's leader-epoch cache,
  LogStartOffset = this replica's log start, replica.fetch.max.bytes per partition,
  replica.fetch.wait.max.ms / replica.fetch.min.bytes / replica.fetch.response.max.bytes.

Per partition of the answer:
- records: appended byte for byte at the leader's offsets (`Log.append_as_follower`: CRC
  check, no re-compression, the leader-epoch cache and producer state updated from the
  batches); the follower's high watermark becomes min(leader HW, its LEO); the log start moves
  up with the leader's;
- a diverging epoch (Fetch v12+): the log is truncated to where it agrees with the leader (the
  end of the largest epoch both have, and no further than the leader's end of it), then
  fetching resumes from there (Kafka's truncateOnFetchResponse, KIP-320/595);
- OFFSET_OUT_OF_RANGE: below the leader's log start, the log restarts empty there; above the
  leader's end, it is truncated to the leader's end (asked with ListOffsets as a replica);
- NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_*: the partition backs off
  replica.fetch.backoff.ms and waits for the controller's next LeaderAndIsr;
- a corrupt batch: logged, nothing stored, and that partition's fetching stops (the others go
  on) until a LeaderAndIsr restarts it.
A connection error backs the whole fetcher off replica.fetch.backoff.ms, then it reconnects.

One departure in timing from Kafka's fetcher thread, which appends a whole response before it
builds the next request: a replica catching up (an answer of at least DEFER_APPEND_BYTES that
leaves it below the leader's high watermark) sends the next request first, naming that
partition at the end of the data just received, and appends while the leader serves it. The
leader takes that offset for this replica's end, but a replica below the high watermark is out
of the ISR and cannot join it from there, so no high watermark, acknowledgement or ISR change
rests on records not yet written; if the append fails, the answer to the early request is
dropped for that partition and the next request names its real end. Still one request in
flight per fetcher. A 1 GiB copy went from 280-390 to 440-520 MB/s on the 2-core machine, the
day it was made (this VM's speed varies from day to day: README, Performance).
Those deferred appends (unless the follower is throttled, then they run on the loop, one step
at a time) run in the fetcher's own thread (`_appender`), one at a time, while the loop reads
the next answer; whatever changes the partition's role, ends its fetching or swaps its log
fences them first (`Log.fence_appends`: an append under way ends before it, one not begun
writes nothing, and the next answer or `_settle_ahead` asks again from the log's real end).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
import uuid

from protocol.errors import ErrorCode
from protocol.messages.fetch import FetchRequest
from protocol.messages.list_offsets import ListOffsetsRequest
from storage.errors import CorruptRecord, StaleAppend
from storage.log import parse_batches
from storage.record_batch import MAGIC_V2, RecordBatchView

from broker.client.connection import BrokerConnection
from broker.fetch_session import INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch

from broker.tasks import cancel_and_wait

log = logging.getLogger(__name__)

ZERO_UUID = uuid.UUID(int=0)
FETCH_VERSION = 17
NAMES_FETCH_VERSION = 12          # the last version naming topics (no topic ids)
LIST_OFFSETS_VERSION = 9
# Answers at least this large, for a replica catching up, are appended while the next Fetch is
# out (ReplicaFetcher._deferrable).
DEFER_APPEND_BYTES = 256 * 1024
THROTTLE_CHECK_S = 0.1            # a fully throttled fetcher looks again when its quota frees,
                                  # at the latest after this (a raised rate applies then)
_SESSION_ERRORS = {ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                   ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR}
_RETRY_LATER = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH,
                ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.KAFKA_STORAGE_ERROR,
                ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.LEADER_NOT_AVAILABLE,
                ErrorCode.INCONSISTENT_TOPIC_ID, ErrorCode.OFFSET_NOT_AVAILABLE}


def fetcher_index(topic: str, partition: int, num_fetchers: int) -> int:
    """Kafka's AbstractFetcherManager.getFetcherId: abs(31 * topic.hashCode + partition) %
    num.replica.fetchers, with Java's String.hashCode."""
    h = 0
    for ch in topic:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    value = (31 * h + partition) & 0xFFFFFFFF
    if value >= 0x80000000:
        value -= 0x100000000
    return abs(value) % num_fetchers


class FetchSession:
    """The follower's side of an incremental fetch session with its leader. A partition that
    answers an error starts the session over (the next request is full): the leader then
    sees its current state again, e.g. a topic it did not know yet when the session began."""

    def __init__(self):
        self.session_id = INVALID_SESSION_ID
        self.closing_id = INVALID_SESSION_ID
        self.reset()

    def reset(self, close: bool = False) -> None:
        """Start over with a full request; `close`: that request also closes this session on
        the leader (its id with the initial epoch), instead of leaving it to be evicted."""
        if not close:
            self.closing_id = INVALID_SESSION_ID
        elif self.session_id != INVALID_SESSION_ID:
            self.closing_id = self.session_id
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.sent: dict = {}             # (topic, p) -> (offset, epoch, last epoch, log start)
        self.topic_ids: dict = {}
        self.uses_topic_ids = False
        self.pending = (True, {}, [], {}, False)


class FetchState:
    __slots__ = ("leader_epoch", "delayed_until", "failed", "ahead")

    def __init__(self, leader_epoch: int):
        self.leader_epoch = leader_epoch
        self.delayed_until = 0.0
        self.failed = False
        self.ahead = None       # (offset, epoch) the fetch in flight gave before its append


class ReplicaFetcherManager:
    def __init__(self, broker):
        self.broker = broker
        self._fetchers: dict[tuple, ReplicaFetcher] = {}
        self._assigned: dict[tuple, tuple] = {}

    def has_partition(self, tp) -> bool:
        return tp in self._assigned

    def add_partition(self, tp, leader_id: int, leader_epoch: int,
                      catch_up: bool = False) -> None:
        """Fetch `tp` from `leader_id` from this replica's log end (a restart of its
        fetching if it was fetching already). `catch_up`: this replica is out of the ISR, and
        fetches with a fetcher of its own until it has caught up (see `caught_up`)."""
        self.remove_partition(tp)
        config = self.broker.config
        index = fetcher_index(tp[0], tp[1], config.get("num.replica.fetchers"))
        key = (leader_id, index, catch_up)
        fetcher = self._fetchers.get(key)
        if fetcher is None:
            fetcher = self._fetchers[key] = ReplicaFetcher(self.broker, leader_id, index,
                                                           catch_up)
        fetcher.add(tp, FetchState(leader_epoch))
        self._assigned[tp] = key
        log.debug("Follower of %s-%d fetching from broker %d at epoch %d", tp[0], tp[1],
                  leader_id, leader_epoch)

    def caught_up(self, tp, fetcher: "ReplicaFetcher") -> None:
        """A partition of a catching-up fetcher reached the leader's high watermark: it moves
        to its leader's fetcher of replicas in sync."""
        key = self._assigned.get(tp)
        state = fetcher.partitions.get(tp)
        if key is None or self._fetchers.get(key) is not fetcher or state is None:
            return
        self.add_partition(tp, fetcher.leader_id, state.leader_epoch)

    def remove_partition(self, tp) -> None:
        key = self._assigned.pop(tp, None)
        if key is None:
            return
        part = self.broker.replica_manager.get_partition(*tp)
        if part is not None and part.log is not None:
            part.log.fence_appends()    # an append in the fetcher's thread: ends first, or never
        fetcher = self._fetchers.get(key)
        if fetcher is not None:
            fetcher.remove(tp)
            if not fetcher.partitions:
                fetcher.stop()
                del self._fetchers[key]

    def lag(self) -> dict:
        """{(topic, p): leader HW last seen - this replica's LEO} (tools and tests)."""
        out = {}
        for fetcher in self._fetchers.values():
            out.update(fetcher.lag)
        return out

    async def shutdown(self) -> None:
        # Until none is left: a LeaderAndIsr handled during an await may have added one.
        while self._fetchers:
            fetchers = list(self._fetchers.values())
            self._fetchers.clear()
            self._assigned.clear()
            for fetcher in fetchers:
                fetcher.stop()
                await fetcher.wait_stopped()


class ReplicaFetcher:
    def __init__(self, broker, leader_id: int, index: int, catch_up: bool = False):
        self.broker = broker
        self.leader_id = leader_id
        self.index = index
        self.catch_up = catch_up
        self.name = f"ReplicaFetcherThread-{index}-{leader_id}" + ("-catch-up" if catch_up
                                                                  else "")
        self.partitions: dict[tuple, FetchState] = {}
        self.lag: dict[tuple, int] = {}
        self._wake = asyncio.Event()
        self._connection: BrokerConnection | None = None
        self._closing = None
        self._executor = None           # the append thread (see _appender)
        self.session = FetchSession()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def add(self, tp, state: FetchState) -> None:
        self.partitions[tp] = state
        self._wake.set()

    def remove(self, tp) -> None:
        self.partitions.pop(tp, None)
        self.lag.pop(tp, None)

    def stop(self) -> None:
        self._task.cancel()
        self._task.add_done_callback(self._stopped)

    def _appender(self) -> concurrent.futures.ThreadPoolExecutor:
        """The thread a catching-up replica's large appends run in, one after the other, so
        their page-cache writes (most of a copy's CPU) go on beside the loop's reading of the
        next answer: a 1 GiB copy went from 289-313 to 343-373 MB/s on the 2-core machine the
        same day, whose page-cache writes into memory not touched lately run at 450-800 MB/s
        a thread."""
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix=f"{self.name}-append")
        return self._executor

    def _append_in_thread(self, part, log_, records, fence: int) -> asyncio.Future:
        """`log_.append_as_follower(records, fence=fence)` in the append thread. A disk error
        there takes the log's dir offline even when this fetcher was stopped meanwhile (its
        task cancelled while it waited: the error would reach no one)."""
        loop = asyncio.get_running_loop()
        done = self._appender().submit(log_.append_as_follower, records, fence=fence)

        def failed(future) -> None:
            error = None if future.cancelled() else future.exception()
            if isinstance(error, OSError):
                try:
                    loop.call_soon_threadsafe(self._append_failed, part, error, log_)
                except RuntimeError:
                    pass                # the loop is closed: the broker is gone
        done.add_done_callback(failed)
        return asyncio.wrap_future(done)

    def _append_failed(self, part, error: OSError, log_) -> None:
        """A disk error appending to `log_`: its dir goes offline (Kafka's handling of a
        KafkaStorageException in the fetcher thread)."""
        log.error("[%s] Error appending to %s-%d: %s", self.name, part.topic, part.partition,
                  error)
        self.broker.replica_manager._storage_failure(part, error, log_)

    def _stopped(self, _task) -> None:
        # A fetcher left without partitions is dropped unawaited: its connection goes with it,
        # and its append thread once the append under way (if any) ends.
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        conn, self._connection = self._connection, None
        if conn is not None:
            self._closing = asyncio.get_running_loop().create_task(conn.close())

    async def wait_stopped(self) -> None:
        await cancel_and_wait(self._task)
        if self._executor is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown)
        if self._closing is not None:
            await self._closing
        if self._connection is not None:
            await self._connection.close()
            self._connection = None

    # -- the loop ------------------------------------------------------------------------------

    async def _run(self) -> None:
        config = self.broker.config
        backoff_s = config.get("replica.fetch.backoff.ms") / 1000
        while True:
            now = time.monotonic()
            ready = {tp: st for tp, st in self.partitions.items()
                     if not st.failed and st.delayed_until <= now}
            throttled = self._throttled(ready)
            if throttled:
                # Kafka's shouldFollowerThrottle: a partition this broker has not caught up on,
                # throttled here, waits while the follower quota is used up.
                ready = {tp: st for tp, st in ready.items() if tp not in throttled}
                if not ready:
                    quota = self.broker.replica_manager.follower_quota
                    await asyncio.sleep(min(backoff_s, THROTTLE_CHECK_S,
                                            quota.seconds_until_under()))
                    continue
            if not ready:
                delays = [st.delayed_until - now for st in self.partitions.values()
                          if not st.failed]
                self._wake.clear()
                try:
                    async with asyncio.timeout(min(delays) if delays else None):
                        await self._wake.wait()     # not wait_for: see BrokerConnection.send
                except asyncio.TimeoutError:
                    pass
                continue
            timeout = (config.get("replica.socket.timeout.ms")
                       + config.get("replica.fetch.wait.max.ms")) / 1000
            try:
                conn = await self._connect()
                request, version, by_id = self._request(ready)
                response = await conn.send(request, version, timeout=timeout)
                while True:
                    early = await self._answered(ready, response, by_id, backoff_s, conn,
                                                 timeout)
                    if early is None:
                        break
                    ready, response, by_id = early
            except asyncio.CancelledError:
                raise
            except Exception as exc:                # noqa: BLE001 - connection trouble
                log.warning("[%s] Error sending fetch request to broker %d: %s",
                            self.name, self.leader_id, exc)
                self.session.reset(close=True)      # Kafka's handleError: close, start anew
                for state in self.partitions.values():
                    state.ahead = None
                await self._close()
                await asyncio.sleep(backoff_s)

    async def _answered(self, ready: dict, response, by_id: dict, backoff_s: float, conn,
                        timeout: float):
        """Process one Fetch response. Returns None, or, when the next request went out
        before this one's large appends were done, (ready, its response, by_id)."""
        stale = self._settle_ahead(ready)
        if not self._session_answered(response):
            return None                             # the leader lost the session: full again
        for tp in stale:
            # Asked from past an append that then failed: the answer is not this log's next
            # records. The next request names the partition at its real end.
            self.session.sent.pop(tp, None)
        if response.error_code != ErrorCode.NONE:
            log.warning("[%s] Fetch from broker %d failed: %s", self.name, self.leader_id,
                        ErrorCode(response.error_code).name)
            await asyncio.sleep(backoff_s)
            return None
        deferred = await self._process(ready, response, by_id, backoff_s, stale)
        if not deferred:
            return None
        # Catching up: the next Fetch goes out now, the deferred partitions at the end of the
        # data just received, and is served by the leader while those large appends run.
        now = time.monotonic()
        next_ready = {tp: st for tp, st in self.partitions.items()
                      if not st.failed and st.delayed_until <= now}
        if self._throttled(next_ready):
            for part, state, data, fence in deferred:   # throttled: one step at a time
                state.ahead = None
                await self._process_one(part, state, data, backoff_s, fence, in_thread=False)
            return None
        request, version, next_by_id = self._request(next_ready)
        sent = asyncio.get_running_loop().create_task(conn.send(request, version,
                                                                timeout=timeout))
        try:
            for part, state, data, fence in deferred:
                await self._process_one(part, state, data, backoff_s, fence)
        except BaseException:
            sent.cancel()
            raise
        return next_ready, await sent, next_by_id

    def _throttled(self, ready: dict) -> set:
        """The partitions of `ready` the follower quota holds back now: throttled ones this
        replica has not caught up on (Kafka's shouldFollowerThrottle). One not fetched yet
        counts as caught up in a regular fetcher (the controller put this replica in its ISR)
        and as behind in a catching-up one; Kafka counts every new one as behind, so a
        partition added to an in-sync fetcher while a move kept the quota exceeded could wait
        until the ISR dropped it (seen: 30 s, then held at the move's rate)."""
        quota = self.broker.replica_manager.follower_quota
        if quota is None:
            return set()
        unknown = 1 if self.catch_up else 0
        candidates = [tp for tp in ready
                      if self.lag.get(tp, unknown) > 0 and quota.is_throttled(*tp)]
        if not candidates or not quota.is_exceeded():
            return set()
        return set(candidates)

    async def _connect(self) -> BrokerConnection:
        if self._connection is not None and self._connection.connected:
            return self._connection
        await self._close()
        info = self.broker.metadata.live_brokers.get(self.leader_id)
        if info is None:
            raise ConnectionError(f"broker {self.leader_id} is not in the metadata cache")
        listener = self.broker.cluster.inter_broker_listener
        host, port = info.endpoints.get(listener) or next(iter(info.endpoints.values()))
        config = self.broker.config
        conn = BrokerConnection(host, port, node_id=self.leader_id,
                                client_id=f"broker-{self.broker.broker_id}-fetcher-{self.index}",
                                request_timeout_ms=config.get("replica.socket.timeout.ms"),
                                connect_timeout_ms=config.get("replica.socket.timeout.ms"))
        await conn.connect()
        buffer = config.get("replica.socket.receive.buffer.bytes")
        sock = conn.socket
        if sock is not None and buffer and buffer > 0:
            import socket
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer)
            except OSError:
                pass
        self._connection = conn
        return conn

    async def _close(self) -> None:
        if self._connection is not None:
            await self._connection.close()
            self._connection = None

    def _request(self, ready: dict):
        """The next Fetch: a full one that opens an incremental fetch session (KIP-227), then
        incremental ones naming only the partitions whose fetch state changed (and forgetting
        those no longer fetched), as Kafka's FetchSessionHandler does: an idle partition costs
        neither request nor response bytes."""
        rm = self.broker.replica_manager
        config = self.broker.config
        conn = self._connection
        version = min(FETCH_VERSION, conn.api_versions.get(FetchRequest.API_KEY, (0, 12))[1])
        parts = {tp: rm.get_partition(*tp) for tp in ready}
        if any(p is None or p.topic_id in (None, ZERO_UUID) for p in parts.values()):
            version = min(version, NAMES_FETCH_VERSION)
        session = self.session
        if session.session_id and session.uses_topic_ids != (version >= 13):
            session.reset()                     # a session keeps one way of naming topics
        wanted = {}
        topic_ids = {}
        for tp, state in ready.items():
            part = parts[tp]
            if part is None:
                continue
            log_ = part.log
            if state.ahead is not None:
                end, latest = state.ahead
            else:
                end, latest = log_.log_end_offset, log_.leader_epoch_cache.latest_epoch
            wanted[tp] = (end, state.leader_epoch, -1 if latest is None else latest,
                          log_.log_start_offset)
            topic_ids[tp[0]] = part.topic_id or ZERO_UUID
        full = session.session_id == 0
        send = wanted if full else {tp: w for tp, w in wanted.items()
                                    if session.sent.get(tp) != w}
        forgotten = [] if full else [tp for tp in session.sent if tp not in wanted]
        max_bytes = config.get("replica.fetch.max.bytes")
        by_topic: dict = {}
        for (topic, p), (offset, epoch, last_epoch, start) in send.items():
            by_topic.setdefault(topic, []).append(FetchRequest.FetchPartition(
                partition=p, current_leader_epoch=epoch, fetch_offset=offset,
                last_fetched_epoch=last_epoch, log_start_offset=start,
                partition_max_bytes=max_bytes))
        forgotten_by_topic: dict = {}
        for topic, p in forgotten:
            forgotten_by_topic.setdefault(topic, []).append(p)
        by_id = {topic_id: topic for topic, topic_id in
                 {**session.topic_ids, **topic_ids}.items()}
        broker_id = self.broker.broker_id
        request = FetchRequest(
            replica_id=broker_id if version < 15 else -1,
            replica_state=FetchRequest.ReplicaState(
                replica_id=broker_id, replica_epoch=self.broker.cluster.broker_epoch)
            if version >= 15 else None,
            max_wait_ms=config.get("replica.fetch.wait.max.ms"),
            min_bytes=config.get("replica.fetch.min.bytes"),
            max_bytes=config.get("replica.fetch.response.max.bytes"),
            isolation_level=0, session_id=session.closing_id if full else session.session_id,
            session_epoch=INITIAL_EPOCH if full else session.epoch,
            topics=[FetchRequest.FetchTopic(topic=name, topic_id=topic_ids[name],
                                            partitions=partitions)
                    for name, partitions in by_topic.items()],
            forgotten_topics_data=[FetchRequest.ForgottenTopic(
                topic=name, topic_id=session.topic_ids.get(name, ZERO_UUID), partitions=ps)
                for name, ps in forgotten_by_topic.items()],
            rack_id="")
        session.pending = (full, send, forgotten, topic_ids, version >= 13)
        return request, version, by_id

    def _session_answered(self, response) -> bool:
        """Update the session from a response; False when the leader lost it (the next
        request is a full one)."""
        session = self.session
        full, sent, forgotten, topic_ids, uses_ids = session.pending
        if response.error_code in _SESSION_ERRORS:
            # Kafka's FetchSessionHandler: the next full request also closes the old session
            # on the leader, unless the leader does not have it any more.
            session.reset(close=response.error_code != ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
            return False
        if full:
            session.reset()
            if response.session_id:
                session.session_id = response.session_id
                session.epoch = next_epoch(INITIAL_EPOCH)
                session.sent = dict(sent)
                session.topic_ids = dict(topic_ids)
                session.uses_topic_ids = uses_ids
        elif response.session_id == INVALID_SESSION_ID:
            session.reset()                     # the leader closed the session: full again
        else:
            session.sent.update(sent)
            for tp in forgotten:
                session.sent.pop(tp, None)
            session.topic_ids.update(topic_ids)
            session.epoch = next_epoch(session.epoch)
        return True

    def _settle_ahead(self, ready: dict) -> set:
        """Once the answer to a request sent ahead of appends is in: the partitions whose log
        did not reach the offset that request gave (their append failed)."""
        rm = self.broker.replica_manager
        stale = set()
        for tp, state in ready.items():
            if state.ahead is not None:
                part = rm.get_partition(*tp)
                if part is None or part.log is None or \
                        part.log.log_end_offset != state.ahead[0]:
                    stale.add(tp)
                state.ahead = None
        return stale

    async def _process(self, ready: dict, response, by_id: dict, backoff_s: float,
                       stale=frozenset()) -> list:
        """Process a response's partitions; returns [(partition, state, data)] of those left
        for after the next request is sent (see _deferrable), their `ahead` set."""
        rm = self.broker.replica_manager
        deferred = []
        for topic in response.responses:
            name = topic.topic or by_id.get(topic.topic_id)
            for data in topic.partitions:
                tp = (name, data.partition_index)
                state = ready.get(tp)
                if state is None or self.partitions.get(tp) is not state or state.failed \
                        or tp in stale:
                    continue                    # removed or restarted meanwhile
                part = rm.get_partition(*tp)
                if part is None or part.is_leader:
                    continue
                ahead = self._deferrable(part, data)
                if ahead is not None:
                    state.ahead = ahead
                    deferred.append((part, state, data, (part.log, part.log.append_fence)))
                    continue
                await self._process_one(part, state, data, backoff_s)
        return deferred

    @staticmethod
    def _deferrable(part, data):
        """(end offset, epoch) of the data when its append may run while the next request is
        out: a large answer, with no error or diverging epoch, that leaves this replica below
        the leader's high watermark. The leader takes that end offset for this replica's, which
        is then out of the ISR (an ISR member's end is at least the high watermark) and cannot
        join it (that needs the high watermark), so no high watermark, acknowledgement or
        ISR change rests on records not yet written here."""
        records = data.records
        if (data.error_code != ErrorCode.NONE or records is None
                or len(records) < DEFER_APPEND_BYTES
                or (data.diverging_epoch is not None and data.diverging_epoch.epoch >= 0)):
            return None
        try:
            batches = parse_batches(records)
        except CorruptRecord:
            return None                         # reported by the append itself
        if not batches or batches[-1].magic != MAGIC_V2:
            return None
        end = batches[-1].last_offset + 1
        if batches[0].base_offset != part.log.log_end_offset or end >= data.high_watermark:
            return None
        epoch = RecordBatchView(records, batches[-1].position).partition_leader_epoch
        return end, epoch

    async def _process_one(self, part, state, data, backoff_s: float, fence=None,
                           in_thread: bool = True) -> None:
        tp = (part.topic, part.partition)
        try:
            await self._process_partition(part, state, data, backoff_s, fence, in_thread)
        except StaleAppend:
            pass        # fenced meanwhile: dropped (the module docstring)
        except CorruptRecord as exc:
            log.error("[%s] Found invalid records in %s-%d from broker %d, fetching of "
                      "this partition stops until its next LeaderAndIsr: %s",
                      self.name, tp[0], tp[1], self.leader_id, exc)
            state.failed = True
        except OSError as exc:
            state.delayed_until = time.monotonic() + backoff_s
            self._append_failed(part, exc, part.log)

    async def _process_partition(self, part, state, data, backoff_s: float,
                                 fence=None, in_thread: bool = True) -> None:
        """`fence`: (log, its append_fence) of a deferred append, decided before an await:
        fenced since, it is dropped (StaleAppend). `in_thread`: it runs in this fetcher's
        thread while the loop reads the next answer."""
        log_ = part.log if fence is None else fence[0]
        code = ErrorCode(data.error_code)
        tp = (part.topic, part.partition)
        if code == ErrorCode.NONE:
            diverging = data.diverging_epoch
            if diverging is not None and diverging.epoch >= 0:
                self._truncate_to_diverging(part, diverging.epoch, diverging.end_offset)
                return
            records = data.records
            if records is not None and len(records) and not _has_complete_batch(records):
                # A partition after the first in a response may end inside its first batch
                # (partition max bytes): nothing to append this time, as Kafka's follower.
                records = None
            if records is not None and len(records):
                if fence is None or not in_thread:
                    log_.append_as_follower(records, fence=None if fence is None else fence[1])
                else:
                    try:
                        await self._append_in_thread(part, log_, records, fence[1])
                    except OSError:
                        state.delayed_until = time.monotonic() + backoff_s
                        return          # its dir is taken offline by _append_in_thread
                    if self.partitions.get(tp) is not state or part.log is not log_:
                        return          # removed, restarted or moved while it ran
                quota = self.broker.replica_manager.follower_quota
                if quota is not None and quota.is_throttled(*tp):
                    quota.record(len(records))
            log_.update_high_watermark(min(data.high_watermark, log_.log_end_offset))
            if 0 <= data.log_start_offset <= log_.high_watermark and \
                    data.log_start_offset > log_.log_start_offset:
                log_.delete_records_before(data.log_start_offset)
            self.lag[tp] = max(0, data.high_watermark - log_.log_end_offset)
            if self.catch_up and self.lag[tp] == 0 and state.ahead is None:
                asyncio.get_running_loop().call_soon(
                    self.broker.replica_manager.fetchers.caught_up, tp, self)
            rm = self.broker.replica_manager
            rm.fetch_purgatory.notify(*tp)
        elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
            self.session.reset(close=True)
            await self._handle_out_of_range(part, data)
        elif code in _RETRY_LATER:
            self.session.reset(close=True)
            state.delayed_until = time.monotonic() + backoff_s
        else:
            self.session.reset(close=True)
            log.warning("[%s] Error fetching %s-%d from broker %d: %s", self.name, tp[0], tp[1],
                        self.leader_id, code.name)
            state.delayed_until = time.monotonic() + backoff_s

    def _truncate_to_diverging(self, part, leader_epoch: int, leader_end_offset: int) -> None:
        log_ = part.log
        epoch, end = log_.leader_epoch_cache.end_offset_for(leader_epoch)
        if epoch < 0:
            target = min(leader_end_offset, log_.log_end_offset)
        elif epoch != leader_epoch:
            target = min(end, log_.log_end_offset)
        else:
            target = min(end, leader_end_offset, log_.log_end_offset)
        if log_.truncate_to(max(target, 0)):
            log.info("[%s] Truncating %s-%d to offset %d (diverging epoch %d ends at %d on the "
                     "leader)", self.name, part.topic, part.partition, target, leader_epoch,
                     leader_end_offset)

    async def _handle_out_of_range(self, part, data) -> None:
        log_ = part.log
        leader_start = data.log_start_offset
        if 0 <= leader_start and log_.log_end_offset < leader_start:
            log.info("[%s] %s-%d: offset %d is below the leader's log start %d; restarting the "
                     "log there", self.name, part.topic, part.partition, log_.log_end_offset,
                     leader_start)
            log_.truncate_fully_and_start_at(leader_start)
            return
        leader_end = await self._leader_end_offset(part)
        if leader_end is not None and leader_end < log_.log_end_offset:
            log.info("[%s] %s-%d: truncating to the leader's end offset %d", self.name,
                     part.topic, part.partition, leader_end)
            log_.truncate_to(leader_end)

    async def _leader_end_offset(self, part):
        request = ListOffsetsRequest(
            replica_id=self.broker.broker_id, isolation_level=0,
            topics=[ListOffsetsRequest.ListOffsetsTopic(name=part.topic, partitions=[
                ListOffsetsRequest.ListOffsetsPartition(
                    partition_index=part.partition, current_leader_epoch=part.leader_epoch,
                    timestamp=-1)])])
        try:
            response = await self._connection.send(request, LIST_OFFSETS_VERSION)
        except Exception:                           # noqa: BLE001
            return None
        for topic in response.topics:
            for p in topic.partitions:
                if p.error_code == ErrorCode.NONE:
                    return p.offset
        return None


def _has_complete_batch(records) -> bool:
    """True when `records` (a Fetch response's bytes) holds at least one whole batch."""
    if len(records) < 12:
        return False
    return int.from_bytes(bytes(records[8:12]), "big", signed=True) + 12 <= len(records)
