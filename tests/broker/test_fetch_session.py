"""KIP-227 fetch sessions: context selection, errors, incremental answers, eviction."""
import random
import uuid

from protocol.errors import ErrorCode

from broker.fetch_session import (FINAL_EPOCH, INITIAL_EPOCH, INT32_MAX, ZERO_UUID,
                                  CachedPartition, FetchSessionCache, next_epoch)
from broker.partition import ReadResult


class Clock:
    def __init__(self):
        self.now = 0

    def ms(self):
        return self.now


def part(topic, index, offset=0, topic_id=ZERO_UUID):
    return CachedPartition(topic_id, topic, index, offset, 1 << 20)


def result(hw, records=b"", error=ErrorCode.NONE, log_start=0):
    return ReadResult(error, hw, hw, log_start, records)


def open_session(cache, parts, hw=10, privileged=False):
    ctx = cache.new_context(0, INITIAL_EPOCH, parts, [], False, privileged=privileged)
    assert ctx.kind == "full"
    keys = ctx.response_keys({p.key: result(hw) for p in parts})
    assert keys == [p.key for p in parts]
    assert ctx.session_id != 0
    return ctx.session_id


def test_next_epoch_wraps_to_one():
    assert next_epoch(0) == 1
    assert next_epoch(INT32_MAX) == 1
    assert next_epoch(-1) == FINAL_EPOCH


def test_sessionless_when_final_epoch_and_no_id():
    cache = FetchSessionCache()
    parts = [part("a", 0), part("a", 1)]
    ctx = cache.new_context(0, FINAL_EPOCH, parts, [], False)
    assert ctx.kind == "sessionless"
    assert ctx.response_keys({p.key: result(0) for p in parts}) == [p.key for p in parts]
    assert ctx.session_id == 0 and len(cache) == 0


def test_incremental_answers_only_changes():
    cache = FetchSessionCache(time=Clock())
    parts = [part("a", 0), part("a", 1), part("b", 0)]
    sid = open_session(cache, parts, hw=10)

    ctx = cache.new_context(sid, 1, [], [], False)
    assert ctx.kind == "incremental"
    assert [p.key for p in ctx.partitions] == [p.key for p in parts]
    unchanged = {p.key: result(10) for p in parts}
    assert ctx.response_keys(unchanged) == []

    ctx = cache.new_context(sid, 2, [], [], False)
    changes = dict(unchanged)
    changes[parts[1].key] = result(12, records=b"x" * 50)     # data and a new HW
    changes[parts[2].key] = result(10, error=ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert ctx.response_keys(changes) == [parts[1].key, parts[2].key]
    # The partition that returned data goes to the end of the order.
    ctx = cache.new_context(sid, 3, [], [], False)
    assert [p.key for p in ctx.partitions] == [parts[0].key, parts[2].key, parts[1].key]


def test_incremental_always_answers_diverging_epochs_preferred_replicas_and_errors():
    """Kafka's CachedPartition.maybeUpdateResponseData: a follower must hear its diverging
    epoch even when nothing else changed (else it never truncates and acks=all writes stall
    until the ISR shrinks), a consumer its preferred read replica, and a partition that had an
    error is answered again once the error is gone."""
    cache = FetchSessionCache(time=Clock())
    parts = [part("a", 0), part("a", 1), part("a", 2)]
    sid = open_session(cache, parts, hw=10)
    unchanged = {p.key: result(10) for p in parts}
    diverging = result(10)
    diverging.diverging_epoch = (3, 10)
    preferred = result(10)
    preferred.preferred_read_replica = 2
    ctx = cache.new_context(sid, 1, [], [], False)
    assert ctx.response_keys({**unchanged, parts[0].key: diverging,
                              parts[1].key: preferred}) == [parts[0].key, parts[1].key]
    ctx = cache.new_context(sid, 2, [], [], False)
    assert ctx.response_keys({**unchanged, parts[2].key: result(
        10, error=ErrorCode.NOT_LEADER_OR_FOLLOWER)}) == [parts[2].key]
    ctx = cache.new_context(sid, 3, [], [], False)
    assert ctx.response_keys(unchanged) == [parts[2].key]      # the error went away
    ctx = cache.new_context(sid, 4, [], [], False)
    assert ctx.response_keys(unchanged) == []


def test_incremental_updates_fetch_offset_and_forgets():
    cache = FetchSessionCache(time=Clock())
    parts = [part("a", 0), part("a", 1)]
    sid = open_session(cache, parts)
    ctx = cache.new_context(sid, 1, [part("a", 0, offset=7), part("c", 0)], [("a", 1)], False)
    assert ctx.kind == "incremental"
    # forgotten keys are given as CachedPartition keys by the handler
    ctx = cache.new_context(sid, 2, [], [("a", 1)], False)
    offsets = {p.key: p.fetch_offset for p in ctx.partitions}
    assert offsets == {("a", 0): 7, ("c", 0): 0}
    # a new partition is always answered the first time (no HW sent yet)
    session = cache.get(sid)
    assert session.partitions[("c", 0)].high_watermark == -1


def test_errors():
    cache = FetchSessionCache(time=Clock())
    sid = open_session(cache, [part("a", 0)])
    assert cache.new_context(sid + 1, 1, [], [], False).error_code == \
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert cache.new_context(sid, 5, [], [], False).error_code == \
        ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert cache.new_context(sid, 1, [], [], True).error_code == \
        ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    # errors do not consume the epoch
    ctx = cache.new_context(sid, 1, [], [], False)
    assert ctx.kind == "incremental"
    assert ctx.response_keys({p.key: result(10) for p in ctx.partitions}) == []
    assert ctx.error_code == ErrorCode.NONE


def test_full_request_closes_old_session():
    cache = FetchSessionCache(time=Clock())
    sid = open_session(cache, [part("a", 0)])
    ctx = cache.new_context(sid, FINAL_EPOCH, [part("a", 0)], [], False)
    assert ctx.kind == "sessionless"
    assert cache.get(sid) is None
    sid2 = open_session(cache, [part("a", 0)])
    ctx = cache.new_context(sid2, INITIAL_EPOCH, [part("a", 0)], [], False)
    ctx.response_keys({("a", 0): result(1)})
    assert cache.get(sid2) is None and len(cache) == 1


def test_forgetting_everything_ends_the_session():
    cache = FetchSessionCache(time=Clock())
    sid = open_session(cache, [part("a", 0)])
    ctx = cache.new_context(sid, 1, [], [("a", 0)], False)
    assert ctx.kind == "sessionless" and ctx.partitions == []
    assert cache.get(sid) is None


def test_topic_id_keys():
    tid = uuid.uuid4()
    cache = FetchSessionCache(time=Clock())
    ctx = cache.new_context(0, INITIAL_EPOCH, [part("a", 0, topic_id=tid)], [], True)
    ctx.response_keys({(tid, 0): result(3)})
    ctx = cache.new_context(ctx.session_id, 1, [], [], True)
    assert ctx.kind == "incremental" and ctx.partitions[0].topic_id == tid


def test_eviction_follows_kafkas_fetch_session_cache():
    """Kafka's FetchSessionCache: a session idle past eviction_ms goes first, whatever it is
    worth; else a consumer's new session may evict only sessions older than eviction_ms, a
    follower's (privileged) any consumer session, and only one worth less (a follower's over a
    consumer's, then the bigger)."""
    clock = Clock()
    cache = FetchSessionCache(max_slots=2, eviction_ms=100, time=clock,
                              rng=random.Random(1))
    a = open_session(cache, [part("a", 0), part("a", 1)])
    clock.now = 10
    b = open_session(cache, [part("b", 0), part("b", 1), part("b", 2)])
    clock.now = 20
    # Full, nothing idle or old: a consumer's new session is not cached, however big.
    for parts in ([part("c", 0)], [part("d", i) for i in range(5)]):
        ctx = cache.new_context(0, INITIAL_EPOCH, parts, [], False)
        ctx.response_keys({p.key: result(0) for p in parts})
        assert ctx.session_id == 0 and len(cache) == 2
    # A follower's session evicts the least valuable consumer session, young as it is.
    f = open_session(cache, [part("f", 0)], privileged=True)
    assert cache.get(a) is None and cache.get(b) is not None and cache.get(f) is not None
    # Older than eviction_ms and in use: a consumer's bigger session evicts the smaller
    # consumer session, never the follower's.
    clock.now = 130
    for sid in (b, f):
        assert cache.new_context(sid, 1, [], [], False).kind == "incremental"
    d = open_session(cache, [part("d", i) for i in range(5)])
    assert cache.get(b) is None and cache.get(f) is not None and cache.get(d) is not None
    # Idle past eviction_ms: the least recently used goes, even a follower's.
    clock.now = 300
    e = open_session(cache, [part("e", 0)])
    assert cache.get(f) is None and cache.get(d) is not None and cache.get(e) is not None


# -- a model client against the cache (hypothesis) ------------------------------------------------

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

UNIVERSE = [("a", 0), ("a", 1), ("b", 0), ("c", 0)]


class SessionModel(RuleBasedStateMachine):
    """A client like Java's FetchSessionHandler: it sends a full fetch to open a session, then
    only added/changed partitions and forgotten ones. After every fetch it must know every
    assigned partition's current high watermark (nothing lost by leaving partitions out), and
    the broker's session must hold exactly the assignment."""

    def __init__(self):
        super().__init__()
        self.cache = FetchSessionCache(time=Clock(), rng=random.Random(0))
        self.hw = {tp: 0 for tp in UNIVERSE}           # the "log"
        self.assigned = {}                             # tp -> client's fetch offset
        self.seen_hw = {}                              # tp -> last HW the client received
        self.session_id = 0
        self.epoch = INITIAL_EPOCH
        self.sent = {}                                 # what the session holds, client's view
        self.fetched = False

    @rule(tp=st.sampled_from(UNIVERSE), count=st.integers(1, 3))
    def append(self, tp, count):
        self.hw[tp] += count

    @rule(tp=st.sampled_from(UNIVERSE))
    def assign(self, tp):
        self.assigned.setdefault(tp, self.hw[tp])      # start at the end, like "latest"

    @rule(tp=st.sampled_from(UNIVERSE))
    def unassign(self, tp):
        self.assigned.pop(tp, None)        # forgotten at the next fetch

    @rule(budget=st.integers(1, 2))
    def fetch(self, budget):
        """`budget`: how many partitions may return records (the response's max_bytes); the
        others are answered without records, so HW changes must be reported on their own."""
        key = lambda tp: (tp[0], tp[1])
        requested = dict(self.assigned)               # the fetch offsets this request carries
        if self.session_id == 0:
            parts = [part(t, p, offset=o) for (t, p), o in self.assigned.items()]
            ctx = self.cache.new_context(0, INITIAL_EPOCH, parts, [], False)
            forgotten = []
        else:
            changed = [part(t, p, offset=o) for (t, p), o in self.assigned.items()
                       if self.sent.get((t, p)) != o]
            forgotten = [key(tp) for tp in self.sent if tp not in self.assigned]
            ctx = self.cache.new_context(self.session_id, self.epoch, changed, forgotten, False)
        assert ctx.error_code == ErrorCode.NONE
        results = {}
        for p in ctx.partitions:
            tp = (p.topic, p.partition)
            size = (self.hw[tp] - p.fetch_offset) * 10 if budget > 0 else 0
            budget -= size > 0
            results[p.key] = result(self.hw[tp], records=b"x" * size)
        keys = ctx.response_keys(results)
        offsets = {p.key: p.fetch_offset for p in ctx.partitions}
        for k in keys:
            tp = (k[0], k[1])
            self.seen_hw[tp] = results[k].high_watermark
            if tp in self.assigned:                    # consumed everything returned
                # the broker reads from where the client is, never re-sends consumed data
                assert offsets[k] == self.assigned[tp], (tp, offsets[k], self.assigned[tp])
                self.assigned[tp] = offsets[k] + results[k].records_size // 10
        self.seen_hw = {tp: hw for tp, hw in self.seen_hw.items() if tp in self.assigned}
        self.sent = requested if ctx.session_id else {}
        if ctx.kind in ("full", "incremental") and ctx.session_id:
            self.session_id = ctx.session_id
            self.epoch = next_epoch(self.epoch)
        else:
            self.session_id, self.epoch = 0, INITIAL_EPOCH
        self.fetched = True

    @invariant()
    def client_knows_every_high_watermark_after_a_fetch(self):
        if not self.fetched:
            return
        for tp in self.assigned:
            assert self.seen_hw.get(tp) == self.hw[tp], (tp, self.seen_hw, self.hw)
        self.fetched = False

    @invariant()
    def session_holds_the_assignment(self):
        if self.session_id:
            session = self.cache.get(self.session_id)
            assert set(session.partitions) == set(self.sent)


TestSessionModel = SessionModel.TestCase
