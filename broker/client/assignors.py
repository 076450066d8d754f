"""Consumer partition assignors: range, roundrobin, sticky, cooperative-sticky (pure functions).

In the classic group protocol the broker does not assign partitions: the group leader (a consumer)
receives every member's subscription in its JoinGroup response, runs the assignor all members agreed on
(the first protocol name they have in common) and sends the result in SyncGroup. So these functions
must give the same answer Kafka's Java assignors give for the same input, or a mixed group would thrash.

Input: ``partitions_per_topic`` (topic -> partition count, from Metadata) and a list of
``MemberSubscription`` (member id, subscribed topics, the partitions it owned, its generation).
Output: member id -> sorted list of TopicPartition, every member present (possibly empty).

- **range** (``RangeAssignor``): per topic, the subscribed members in sorted order each get a
  contiguous range; the first ``n % m`` members get one extra partition.
- **roundrobin** (``RoundRobinAssignor``): all partitions sorted by (topic, partition) are dealt to the
  sorted members in a circle, skipping members not subscribed to the partition's topic.
- **sticky** (``StickyAssignor``): keep every partition a member already owns (when it is still
  subscribed and no one with a newer generation claims it), give unowned partitions to the eligible
  member with the fewest partitions (ties: smallest member id; partitions with fewer eligible members
  first), then move partitions one at a time from a member to an eligible member with at least two
  fewer (most loaded donor first) until no such move exists. With equal subscriptions the counts end within one of each other;
  only the moves needed for balance happen. This reproduces the examples in the StickyAssignor docs.
  Previous ownership travels in the subscription's user data (eager protocol: members revoke
  everything before joining), encoded like Kafka's ``StickyAssignorUserData`` v1.
- **cooperative-sticky**: the sticky assignment, minus every partition that moves from one member to
  another; those are revoked by their owner first and assigned in the follow-up rebalance (KIP-429).
  Ownership travels in the subscription's ``owned_partitions``; user data is the generation (int32).
"""
from __future__ import annotations

import struct
from collections import defaultdict
from typing import NamedTuple

from broker.client.types import TopicPartition

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class MemberSubscription(NamedTuple):
    member_id: str
    topics: tuple
    owned_partitions: tuple = ()      # TopicPartition
    generation: int = -1
    group_instance_id: str | None = None


def _member_order(members):
    """Kafka's MemberInfo order: by group.instance.id when both have one, else by member id."""
    return sorted(members, key=lambda m: (m.group_instance_id is None, m.group_instance_id or "", m.member_id))


def _empty(members):
    return {m.member_id: [] for m in members}


def range_assign(partitions_per_topic: dict, members: list) -> dict:
    result = _empty(members)
    ordered = _member_order(members)
    for topic in sorted({t for m in members for t in m.topics}):
        n = partitions_per_topic.get(topic)
        if n is None:
            continue
        subscribed = [m.member_id for m in ordered if topic in m.topics]
        per, extra = divmod(n, len(subscribed))
        for i, member_id in enumerate(subscribed):
            start = per * i + min(i, extra)
            length = per + (1 if i < extra else 0)
            result[member_id].extend(TopicPartition(topic, p) for p in range(start, start + length))
    return result


def roundrobin_assign(partitions_per_topic: dict, members: list) -> dict:
    result = _empty(members)
    ordered = _member_order(members)
    if not ordered:
        return result
    topics = sorted({t for m in members for t in m.topics if t in partitions_per_topic})
    i = 0
    for topic in topics:
        for p in range(partitions_per_topic[topic]):
            # bounded: some member is subscribed to ``topic`` since it came from the subscriptions
            for _ in range(len(ordered)):
                member = ordered[i % len(ordered)]
                i += 1
                if topic in member.topics:
                    result[member.member_id].append(TopicPartition(topic, p))
                    break
    return result


def _previous_owners(partitions_per_topic, members) -> dict:
    """tp -> member id that owns it now; a partition claimed twice goes to the newer generation."""
    owner: dict = {}
    generation: dict = {}
    subscribed = {m.member_id: set(m.topics) for m in members}
    for m in sorted(members, key=lambda m: m.member_id):
        for tp in m.owned_partitions:
            tp = TopicPartition(*tp)
            if tp.topic not in subscribed[m.member_id] or tp.partition >= partitions_per_topic.get(tp.topic, 0):
                continue
            if tp not in owner or m.generation > generation[tp]:
                owner[tp] = m.member_id
                generation[tp] = m.generation
    return owner


def sticky_assign(partitions_per_topic: dict, members: list) -> dict:
    ids = sorted(m.member_id for m in members)
    eligible: dict = {}
    for topic, n in partitions_per_topic.items():
        subs = sorted(m.member_id for m in members if topic in m.topics)
        if subs:
            for p in range(n):
                eligible[TopicPartition(topic, p)] = subs
    # partitions with fewer candidate members are placed first (they have the least freedom)
    order = sorted(eligible, key=lambda tp: (len(eligible[tp]), tp))
    assignment = {i: [] for i in ids}
    owner = {tp: o for tp, o in _previous_owners(partitions_per_topic, members).items() if tp in eligible}
    for tp in order:
        if tp in owner:
            assignment[owner[tp]].append(tp)
    for tp in order:
        if tp not in owner:
            best = min(eligible[tp], key=lambda i: (len(assignment[i]), i))
            assignment[best].append(tp)
            owner[tp] = best
    # balance: one move at a time, always from the most loaded donor to its least loaded eligible
    # receiver (taking from a less loaded member first could force a second move later). Each move
    # lowers the sum of squared counts by at least 2, so the loop ends.
    for _ in range(len(order) ** 2 + 1):
        move = None
        for tp in order:
            current = owner[tp]
            candidates = [i for i in eligible[tp] if i != current]
            if not candidates:
                continue
            best = min(candidates, key=lambda i: (len(assignment[i]), i))
            if len(assignment[best]) < len(assignment[current]) - 1:
                key = (-len(assignment[current]), len(assignment[best]))
                if move is None or key < move[0]:
                    move = (key, tp, current, best)
        if move is None:
            break
        _, tp, current, best = move
        assignment[current].remove(tp)
        assignment[best].append(tp)
        owner[tp] = best
    return assignment


def cooperative_sticky_assign(partitions_per_topic: dict, members: list) -> dict:
    assignment = sticky_assign(partitions_per_topic, members)
    previous = _previous_owners(partitions_per_topic, members)
    for member_id, tps in assignment.items():
        assignment[member_id] = [tp for tp in tps if previous.get(tp, member_id) == member_id]
    return assignment


# --- user data (what each member puts in its subscription) ---

def encode_sticky_user_data(owned: list, generation: int) -> bytes:
    """Kafka's StickyAssignorUserData v1: [topic string, partitions [int32]] then generation int32."""
    by_topic = defaultdict(list)
    for tp in owned:
        by_topic[tp[0]].append(tp[1])
    out = [_I32.pack(len(by_topic))]
    for topic in sorted(by_topic):
        raw = topic.encode()
        out += [_I16.pack(len(raw)), raw, _I32.pack(len(by_topic[topic]))]
        out += [_I32.pack(p) for p in sorted(by_topic[topic])]
    out.append(_I32.pack(generation))
    return b"".join(out)


def decode_sticky_user_data(data: bytes) -> tuple:
    """-> (owned TopicPartitions, generation or -1). Malformed data means no previous assignment."""
    try:
        pos = 4
        (count,) = _I32.unpack_from(data, 0)
        owned = []
        for _ in range(count):
            (n,) = _I16.unpack_from(data, pos)
            topic = bytes(data[pos + 2:pos + 2 + n]).decode()
            pos += 2 + n
            (k,) = _I32.unpack_from(data, pos)
            pos += 4
            for j in range(k):
                owned.append(TopicPartition(topic, _I32.unpack_from(data, pos + 4 * j)[0]))
            pos += 4 * k
        generation = _I32.unpack_from(data, pos)[0] if len(data) >= pos + 4 else -1
        return owned, generation
    except (struct.error, UnicodeDecodeError):
        return [], -1


class Assignor(NamedTuple):
    name: str
    assign: object           # (partitions_per_topic, members) -> dict
    cooperative: bool


ASSIGNORS = {
    "range": Assignor("range", range_assign, False),
    "roundrobin": Assignor("roundrobin", roundrobin_assign, False),
    "sticky": Assignor("sticky", sticky_assign, False),
    "cooperative-sticky": Assignor("cooperative-sticky", cooperative_sticky_assign, True),
}

# Kafka's class names map to the protocol names (partition.assignment.strategy accepts both).
CLASS_NAMES = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.StickyAssignor": "sticky",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}


def user_data_for(name: str, owned: list, generation: int) -> bytes | None:
    if name == "sticky":
        return encode_sticky_user_data(owned, generation)
    if name == "cooperative-sticky":
        return _I32.pack(generation)
    return None


def member_from_subscription(member_id, name, topics, user_data, owned_partitions=(), generation=-1,
                             group_instance_id=None) -> MemberSubscription:
    """Build the assignor input for one member from its decoded ConsumerProtocolSubscription."""
    if name == "sticky" and user_data:
        owned, generation = decode_sticky_user_data(user_data)
        owned_partitions = owned
    elif name == "cooperative-sticky" and user_data and len(user_data) >= 4 and generation < 0:
        generation = _I32.unpack_from(user_data, 0)[0]
    return MemberSubscription(member_id, tuple(topics), tuple(TopicPartition(*tp) for tp in owned_partitions),
                              generation, group_instance_id)
