"""Incremental fetch sessions (KIP-227): the broker remembers what a fetcher asked for last time.

Theory of operation. A fetcher following many partitions would resend all of them on every Fetch;
with a session it sends only what changed and the broker answers only what changed.

Request metadata (session_id, session_epoch) selects one of four contexts, as Kafka does:

    session_id  epoch        meaning                                       context
    0           -1 (FINAL)   no session wanted                             sessionless (full)
    any         0 (INITIAL)  open a new session (closing session_id)       full, creates a session
    != 0        -1 (FINAL)   close session_id, answer without a session    sessionless (full)
    != 0        > 0          incremental: epoch must be the session's next incremental
                                                                           (or an error context)

Errors are top-level: FETCH_SESSION_ID_NOT_FOUND (unknown or evicted id), INVALID_FETCH_SESSION_EPOCH
(epoch is not the one expected), FETCH_SESSION_TOPIC_ID_ERROR (a session opened with topic ids,
v13+, used without them or the reverse). Epochs count 1, 2, ... and wrap from int32 max to 1.

A session holds, per partition, what the fetcher last asked (fetch_offset, partition_max_bytes, ...)
and what the broker last answered (high_watermark, last_stable_offset, log_start_offset). An
incremental request adds/updates the partitions it names and removes its forgotten topics; the
response includes a partition only when it has records, an error, or one of those three values
changed. Partitions that returned data move to the end of the session's order, so when max_bytes
cuts a response short the other partitions go first next time (Kafka's round-robin).

Partitions are keyed by `(topic_id, partition)` from v13 and `(topic, partition)` before (Kafka's
CachedPartition identity); from v13 the handler resolves each id to a name on every request
(None when unknown, answered UNKNOWN_TOPIC_ID), so an id that becomes known is read, and an id
whose topic was deleted and created again is not read under the new topic's name.

The cache holds at most `max_slots` sessions (max.incremental.fetch.session.cache.slots, Kafka's
default 1000). When full, a new session evicts the least recently used one idle longer than
`eviction_ms` (min.incremental.fetch.session.eviction.ms, default 120000); else, as Kafka's
FetchSessionCache, the least valuable session that may be evicted, if it is worth less than the
new one (a follower's session is worth more than a consumer's, then the bigger one): a
consumer's new session may evict only sessions older than `eviction_ms`, a follower's any
consumer session and followers' sessions older than that. Otherwise it is not cached and the
response carries session id 0 (the fetcher falls back to full fetches, which Kafka clients
handle).

Concurrency contract: on the event loop thread; pure bookkeeping, no I/O.
"""
from __future__ import annotations

import random
import uuid
from collections import OrderedDict

from protocol.errors import ErrorCode

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
ZERO_UUID = uuid.UUID(int=0)
INT32_MAX = 2**31 - 1

# Kafka's defaults for max.incremental.fetch.session.cache.slots and
# min.incremental.fetch.session.eviction.ms.
DEFAULT_MAX_SLOTS = 1000
DEFAULT_EVICTION_MS = 120_000


def next_epoch(epoch: int) -> int:
    """The epoch following `epoch` (Kafka's FetchMetadata.nextEpoch)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == INT32_MAX else epoch + 1


class CachedPartition:
    """One partition of a fetch: the request's fields and the last answer sent about it."""

    __slots__ = ("topic_id", "topic", "partition", "fetch_offset", "partition_max_bytes",
                 "current_leader_epoch", "last_fetched_epoch", "log_start_offset",
                 "high_watermark", "last_stable_offset", "leader_log_start_offset")

    def __init__(self, topic_id, topic, partition, fetch_offset, partition_max_bytes,
                 current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1):
        self.topic_id = topic_id
        self.topic = topic
        self.partition = partition
        self.fetch_offset = fetch_offset
        self.partition_max_bytes = partition_max_bytes
        self.current_leader_epoch = current_leader_epoch
        self.last_fetched_epoch = last_fetched_epoch
        self.log_start_offset = log_start_offset   # the fetcher's (followers only)
        self.high_watermark = -1                   # last values answered
        self.last_stable_offset = -1
        self.leader_log_start_offset = -1

    @property
    def key(self) -> tuple:
        """(topic id, partition) from v13, else (topic name, partition), as Kafka's
        CachedPartition compares them: the name a topic id resolves to may change."""
        if self.topic_id != ZERO_UUID:
            return (self.topic_id, self.partition)
        return (self.topic, self.partition)

    def update_request(self, other: "CachedPartition") -> None:
        self.fetch_offset = other.fetch_offset
        self.partition_max_bytes = other.partition_max_bytes
        self.current_leader_epoch = other.current_leader_epoch
        self.last_fetched_epoch = other.last_fetched_epoch
        self.log_start_offset = other.log_start_offset

    def must_respond(self, result, update: bool) -> bool:
        """Does the response have news about this partition? Records the values sent if `update`.

        `result` has error_code, high_watermark, last_stable_offset, log_start_offset and
        records_size (Kafka's CachedPartition.maybeUpdateResponseData)."""
        # Always answered: new data, a preferred read replica, a diverging epoch (the follower
        # must truncate) and an error.
        respond = (result.records_size > 0 or result.preferred_read_replica >= 0
                   or result.diverging_epoch is not None)
        if result.high_watermark != self.high_watermark:
            respond = True
            if update:
                self.high_watermark = result.high_watermark
        if result.log_start_offset != self.leader_log_start_offset:
            respond = True
            if update:
                self.leader_log_start_offset = result.log_start_offset
        if result.last_stable_offset >= 0 and result.last_stable_offset != self.last_stable_offset:
            respond = True
            if update:
                self.last_stable_offset = result.last_stable_offset
        if result.error_code != ErrorCode.NONE:
            respond = True
            if update:
                self.high_watermark = -1            # re-sent once the error goes away
        return respond


class FetchSession:
    __slots__ = ("session_id", "uses_topic_ids", "partitions", "epoch", "last_used_ms",
                 "created_ms", "privileged")

    def __init__(self, session_id: int, uses_topic_ids: bool, partitions, now_ms: int,
                 privileged: bool = False):
        self.session_id = session_id
        self.uses_topic_ids = uses_topic_ids
        self.privileged = privileged            # a follower's (Kafka's privileged session)
        self.partitions: OrderedDict[tuple, CachedPartition] = partitions
        self.epoch = next_epoch(INITIAL_EPOCH)     # the epoch the next request must carry
        self.last_used_ms = now_ms
        self.created_ms = now_ms

    def __len__(self) -> int:
        return len(self.partitions)

    def update(self, fetch_partitions, forgotten_keys) -> None:
        for part in fetch_partitions:
            cached = self.partitions.get(part.key)
            if cached is None:
                self.partitions[part.key] = part
            else:
                cached.update_request(part)
        for key in forgotten_keys:
            self.partitions.pop(key, None)


class FetchContext:
    """What one Fetch request reads and which partitions its response carries.

    kind is "sessionless", "full", "incremental" or "error"."""

    def __init__(self, cache: "FetchSessionCache", kind: str, partitions, *,
                 error_code: int = ErrorCode.NONE, session: FetchSession | None = None,
                 uses_topic_ids: bool = False, privileged: bool = False):
        self.cache = cache
        self.kind = kind
        self.privileged = privileged
        self.partitions: list[CachedPartition] = partitions   # to read, in this order
        self.error_code = error_code
        self.session = session
        self.uses_topic_ids = uses_topic_ids
        self.session_id = session.session_id if session is not None else INVALID_SESSION_ID

    def response_keys(self, results: dict) -> list:
        """Keys of the partitions to put in the response, in order; updates the session.

        `results` maps every key of `self.partitions` to its read result. For a full context
        this is also where the new session is created (so the values sent are its baseline)."""
        if self.kind == "error":
            return []
        if self.kind == "sessionless":
            return [p.key for p in self.partitions]
        if self.kind == "full":
            for part in self.partitions:
                part.must_respond(results[part.key], update=True)
            session = self.cache.maybe_create(self.uses_topic_ids, self.partitions,
                                              self.privileged)
            self.session = session
            self.session_id = session.session_id if session is not None else INVALID_SESSION_ID
            return [p.key for p in self.partitions]
        keys = []
        moved = []
        for part in self.partitions:
            result = results[part.key]
            if part.must_respond(result, update=True):
                keys.append(part.key)
                if result.records_size > 0:
                    moved.append(part.key)
        for key in moved:
            self.session.partitions.move_to_end(key)
        return keys


class FetchSessionCache:
    """Sessions by id, least recently used first."""

    def __init__(self, *, max_slots: int = DEFAULT_MAX_SLOTS,
                 eviction_ms: int = DEFAULT_EVICTION_MS, time=None, rng=None):
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self.time = time
        self._rng = rng or random.Random()
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        return self._sessions.pop(session_id, None)

    def _now(self) -> int:
        return self.time.ms() if self.time is not None else 0

    def new_context(self, session_id: int, epoch: int, fetch_partitions: list,
                    forgotten_keys: list, uses_topic_ids: bool,
                    privileged: bool = False) -> FetchContext:
        """Choose the context for one request (the table in the module docstring).
        `privileged`: the fetcher is a follower."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)
            unique = list(OrderedDict((p.key, p) for p in fetch_partitions).values())
            kind = "sessionless" if epoch == FINAL_EPOCH else "full"
            return FetchContext(self, kind, unique, uses_topic_ids=uses_topic_ids,
                                privileged=privileged)
        session = self._sessions.get(session_id)
        if session is None:
            return FetchContext(self, "error", [],
                                error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext(self, "error", [],
                                error_code=ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            return FetchContext(self, "error", [],
                                error_code=ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        session.update(fetch_partitions, forgotten_keys)
        if not session.partitions:
            self.remove(session_id)
            return FetchContext(self, "sessionless", [], uses_topic_ids=uses_topic_ids)
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = self._now()
        self._sessions.move_to_end(session_id)
        return FetchContext(self, "incremental", list(session.partitions.values()),
                            session=session, uses_topic_ids=uses_topic_ids)

    def maybe_create(self, uses_topic_ids: bool, partitions: list,
                     privileged: bool = False) -> FetchSession | None:
        """Cache a new session holding `partitions`, evicting one if full; None if no room."""
        if self.max_slots <= 0:
            return None
        now = self._now()
        if len(self._sessions) >= self.max_slots and \
                not self._evict_one(now, len(partitions), privileged):
            return None
        session_id = self._new_session_id()
        session = FetchSession(session_id, uses_topic_ids,
                               OrderedDict((p.key, p) for p in partitions), now, privileged)
        self._sessions[session_id] = session
        return session

    def _evict_one(self, now: int, new_size: int, privileged: bool = False) -> bool:
        # Least recently used first: a session idle past eviction_ms goes whatever its size.
        oldest_id, oldest = next(iter(self._sessions.items()))
        if now - oldest.last_used_ms >= self.eviction_ms:
            del self._sessions[oldest_id]
            self.evictions += 1
            return True
        # Otherwise the least valuable session this one may evict (Kafka's evictableByAll and
        # evictableByPrivileged), if it is worth less than the new one.
        def evictable(session) -> bool:
            old_enough = now - session.created_ms > self.eviction_ms
            return old_enough or (privileged and not session.privileged)
        candidates = [s for s in self._sessions.values() if evictable(s)]
        if not candidates:
            return False
        least = min(candidates, key=lambda s: (s.privileged, len(s)))
        if (least.privileged, len(least)) >= (privileged, new_size):
            return False
        del self._sessions[least.session_id]
        self.evictions += 1
        return True

    def _new_session_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, INT32_MAX)
            if session_id not in self._sessions:
                return session_id
