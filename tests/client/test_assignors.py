"""The assignors reproduce the examples in Kafka's documentation (issue 6) and keep their invariants."""
import random

from broker.client.assignors import (
    MemberSubscription as M, cooperative_sticky_assign, decode_sticky_user_data,
    encode_sticky_user_data, member_from_subscription, range_assign, roundrobin_assign, sticky_assign,
)
from broker.client.types import TopicPartition


def tps(*names):
    """'t0p1' -> TopicPartition('t0', 1)."""
    out = []
    for n in names:
        topic, p = n.rsplit("p", 1)
        out.append(TopicPartition(topic, int(p)))
    return out


def as_sets(assignment):
    return {m: set(v) for m, v in assignment.items()}


TWO_TOPICS = {"t0": 3, "t1": 3}
C0_C1_BOTH = [M("C0", ("t0", "t1")), M("C1", ("t0", "t1"))]


def test_range_example():
    a = range_assign(TWO_TOPICS, C0_C1_BOTH)
    assert a == {"C0": tps("t0p0", "t0p1", "t1p0", "t1p1"), "C1": tps("t0p2", "t1p2")}


def test_roundrobin_example():
    a = roundrobin_assign(TWO_TOPICS, C0_C1_BOTH)
    assert a == {"C0": tps("t0p0", "t0p2", "t1p1"), "C1": tps("t0p1", "t1p0", "t1p2")}


UNEQUAL = {"t0": 1, "t1": 2, "t2": 3}
UNEQUAL_MEMBERS = [M("C0", ("t0",)), M("C1", ("t0", "t1")), M("C2", ("t0", "t1", "t2"))]


def test_roundrobin_unequal_subscriptions_example():
    a = roundrobin_assign(UNEQUAL, UNEQUAL_MEMBERS)
    assert a == {"C0": tps("t0p0"), "C1": tps("t1p0"), "C2": tps("t1p1", "t2p0", "t2p1", "t2p2")}


def test_sticky_unequal_subscriptions_example_and_member_leaving():
    a = sticky_assign(UNEQUAL, UNEQUAL_MEMBERS)
    assert as_sets(a) == as_sets({"C0": tps("t0p0"), "C1": tps("t1p0", "t1p1"),
                                  "C2": tps("t2p0", "t2p1", "t2p2")})
    # C0 leaves: sticky keeps all 5 partitions where they were (roundrobin would move some)
    after = sticky_assign(UNEQUAL, [M("C1", ("t0", "t1"), tuple(a["C1"]), 1),
                                    M("C2", ("t0", "t1", "t2"), tuple(a["C2"]), 1)])
    assert as_sets(after) == as_sets({"C1": tps("t1p0", "t1p1", "t0p0"), "C2": tps("t2p0", "t2p1", "t2p2")})


FOUR_TOPICS = {"t0": 2, "t1": 2, "t2": 2, "t3": 2}


def test_sticky_equal_subscriptions_example():
    members = [M(c, ("t0", "t1", "t2", "t3")) for c in ("C0", "C1", "C2")]
    a = sticky_assign(FOUR_TOPICS, members)
    assert a == {"C0": tps("t0p0", "t1p1", "t3p0"), "C1": tps("t0p1", "t2p0", "t3p1"),
                 "C2": tps("t1p0", "t2p1")}
    # C1 leaves: its three partitions are spread, nothing else moves
    after = sticky_assign(FOUR_TOPICS, [M("C0", ("t0", "t1", "t2", "t3"), tuple(a["C0"]), 1),
                                        M("C2", ("t0", "t1", "t2", "t3"), tuple(a["C2"]), 1)])
    assert as_sets(after) == as_sets({"C0": tps("t0p0", "t1p1", "t3p0", "t2p0"),
                                      "C2": tps("t1p0", "t2p1", "t0p1", "t3p1")})


def _check_valid(partitions, members, a):
    seen = [tp for v in a.values() for tp in v]
    assert len(seen) == len(set(seen))
    subs = {m.member_id: set(m.topics) for m in members}
    for member, v in a.items():
        assert all(tp.topic in subs[member] for tp in v)


def test_sticky_randomized_balance_and_stickiness():
    rng = random.Random(7)
    topics = {f"t{i}": rng.randint(1, 6) for i in range(5)}
    members = {f"C{i}": None for i in range(4)}
    current = {}
    for round_ in range(30):
        if rng.random() < 0.5 and len(members) > 1:
            members.pop(rng.choice(sorted(members)))
        else:
            members[f"C{10 + round_}"] = None
        subs = [M(m, tuple(topics), tuple(current.get(m, ())), round_) for m in sorted(members)]
        a = sticky_assign(topics, subs)
        _check_valid(topics, subs, a)
        total = sum(topics.values())
        counts = [len(v) for v in a.values()]
        assert sum(counts) == total and max(counts) - min(counts) <= 1
        # every partition whose owner survived and that did not have to move for balance stays
        kept = sum(len(set(a[m]) & set(current.get(m, ()))) for m in a)
        owned_before = sum(len(current.get(m, ())) for m in a)
        q, r = divmod(total, len(a))
        owned = [len(current.get(m, ())) for m in a]
        must_move = sum(max(0, o - (q + 1)) for o in owned) + max(0, sum(o >= q + 1 for o in owned) - r)
        assert kept == owned_before - must_move
        current = a


def test_cooperative_sticky_withholds_moving_partitions():
    members = [M("C0", ("t0",), tuple(tps("t0p0", "t0p1", "t0p2", "t0p3")), 3), M("C1", ("t0",), (), -1)]
    a = cooperative_sticky_assign({"t0": 4}, members)
    # two partitions must move to C1: C0 keeps two, the other two are revoked first (assigned to nobody)
    assert len(a["C0"]) == 2 and a["C1"] == []
    # next round, C0 owns only its two: C1 now gets the free ones
    members = [M("C0", ("t0",), tuple(a["C0"]), 4), M("C1", ("t0",), (), 4)]
    b = cooperative_sticky_assign({"t0": 4}, members)
    assert b["C0"] == a["C0"] and len(b["C1"]) == 2


def test_sticky_user_data_round_trip_and_member_from_subscription():
    owned = tps("ap0", "ap2", "bp1")
    data = encode_sticky_user_data(owned, 5)
    assert decode_sticky_user_data(data) == (sorted(owned), 5)
    m = member_from_subscription("m", "sticky", ["a", "b"], data)
    assert set(m.owned_partitions) == set(owned) and m.generation == 5
    assert decode_sticky_user_data(b"\x00\x00") == ([], -1)


def test_duplicate_claims_go_to_newer_generation():
    members = [M("A", ("t",), tuple(tps("tp0")), 1), M("B", ("t",), tuple(tps("tp0")), 2)]
    a = sticky_assign({"t": 2}, members)
    assert TopicPartition("t", 0) in a["B"]


class FakeCoordinatorCluster:
    """Just enough of a ClusterClient for a GroupMembership's join: `answer(request)` is what
    the coordinator does with each JoinGroup/SyncGroup."""

    retry_backoff = 0.001
    topics: dict = {}

    def __init__(self, answer):
        self.answer = answer

    async def retry(self, op):
        return 1

    async def refresh_metadata(self, topics=None, **kwargs):
        pass

    async def send(self, node, request, **kwargs):
        return self.answer(request)


def test_the_eager_sticky_member_advertises_its_previous_assignment():
    """Java's StickyAssignor.subscriptionUserData: the previous assignment, though an eager
    member revoked it before joining (it advertised none, so the assignor was never sticky)."""
    import asyncio

    from broker.client.assignors import decode_sticky_user_data
    from broker.client.consumer_protocol import decode_subscription
    from broker.client.group import GroupMembership

    class Stop(Exception):
        pass

    seen = {}

    def answer(request):
        for p in request.protocols:
            _, sub = decode_subscription(p.metadata)
            seen[p.name] = decode_sticky_user_data(sub.user_data)
        raise Stop

    async def go():
        m = GroupMembership(FakeCoordinatorCluster(answer), "g", assignor_names=("sticky",))
        m.protocol, m.generation, m.member_id = "sticky", 4, "m1"
        m.assignment = {TopicPartition("t", 0), TopicPartition("t", 1)}
        m.subscribe(["t"])
        try:
            await m._join_and_sync()
        except Stop:
            pass
    asyncio.run(go())
    owned, generation = seen["sticky"]
    assert sorted(TopicPartition(*tp) for tp in owned) == [TopicPartition("t", 0),
                                                          TopicPartition("t", 1)]
    assert generation == 4


def test_a_join_error_that_is_not_retriable_is_raised():
    """Retriable join errors are retried as long as it takes; others (an authorization
    failure) come out of poll() as in Java's consumer, not retried for ever."""
    import asyncio

    import pytest

    from broker.client.group import GroupMembership
    from protocol.errors import ErrorCode, KafkaError

    def refuse(request):
        raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED, "not allowed")

    async def go():
        m = GroupMembership(FakeCoordinatorCluster(refuse), "g")
        m.subscribe(["t"])
        with pytest.raises(KafkaError) as info:
            await m.ensure_active(5)
        assert info.value.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    asyncio.run(go())
