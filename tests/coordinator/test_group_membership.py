"""The pure group state machine: joins, rebalances, syncs, heartbeats, leaves and timeouts."""
import pytest

from protocol.errors import ErrorCode as E

from coordinator.group.model import Group
from coordinator.group.state import GroupState, IllegalStateTransition, VALID_PREVIOUS_STATES
from coordinator.records import GroupKey
from group_harness import Harness

G = "group-a"


def stable_group(h: Harness, n: int = 1, group=G, **join_kwargs):
    """n dynamic members joined, leader synced: returns (member ids, generation)."""
    ids, tokens = [], []
    for i in range(n):
        mid, tok = h.join_new(group, client_id=f"c{i}", **join_kwargs)
        ids.append(mid)
        tokens.append(tok)
    # Members joining during the initial delay extend it once (group.initial.rebalance.delay.ms).
    h.advance(2 * h.manager.config.initial_rebalance_delay_ms)
    answers = [h.answer(t) for t in tokens]
    assert all(a is not None and a.error == E.NONE for a in answers), answers
    generation = answers[0].generation_id
    leader = answers[0].leader
    syncs = [h.sync(group, generation, mid, {m: m.encode() for m in ids} if mid == leader else {})
             for mid in ids]
    assert all(h.answer(t).error == E.NONE for t in syncs)
    assert h.state(group) == "Stable"
    return ids, generation


# ---------------------------------------------------------------------------- state table
def test_transition_table_rejects_impossible_moves():
    group = Group("g", 0)
    with pytest.raises(IllegalStateTransition):
        group.transition_to(GroupState.STABLE, 1)
    with pytest.raises(IllegalStateTransition):
        group.transition_to(GroupState.COMPLETING_REBALANCE, 1)
    group.transition_to(GroupState.PREPARING_REBALANCE, 5)
    assert group.state is GroupState.PREPARING_REBALANCE and group.state_timestamp_ms == 5
    group.transition_to(GroupState.DEAD, 6)
    with pytest.raises(IllegalStateTransition):
        group.transition_to(GroupState.EMPTY, 7)


def test_every_state_has_a_row_and_dead_is_terminal():
    assert set(VALID_PREVIOUS_STATES) == set(GroupState)
    for target, previous in VALID_PREVIOUS_STATES.items():
        if target is not GroupState.DEAD:
            assert GroupState.DEAD not in previous
    assert GroupState.parse("stable") is GroupState.STABLE
    assert GroupState.parse("nope") is None


# ------------------------------------------------------------------------------ JoinGroup
def test_kip394_member_id_required_then_join_after_initial_delay():
    h = Harness()
    first = h.answer(h.join(G, client_id="app"))
    assert first.error == E.MEMBER_ID_REQUIRED and first.member_id == "app-1"
    assert h.state(G) == "Empty"            # a pending member does not start a rebalance
    token = h.join(G, member_id="app-1", client_id="app")
    assert h.answer(token) is None and h.state(G) == "PreparingRebalance"
    h.advance(2999)
    assert h.answer(token) is None
    h.advance(1)
    answer = h.answer(token)
    assert answer.error == E.NONE and answer.generation_id == 1
    assert answer.leader == "app-1" and answer.protocol_name == "range"
    assert answer.members == [("app-1", None, b"sub")]
    assert h.state(G) == "CompletingRebalance"


def test_old_join_versions_get_a_member_id_at_once():
    h = Harness()
    token = h.join(G, require_known_member_id=False)
    h.advance(3000)
    assert h.answer(token).error == E.NONE and h.answer(token).member_id == "client-1"


def test_unknown_member_id_and_unknown_group():
    h = Harness()
    assert h.answer(h.join(G, member_id="ghost")).error == E.UNKNOWN_MEMBER_ID
    assert h.manager.group(G) is None
    stable_group(h)
    assert h.answer(h.join(G, member_id="ghost")).error == E.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("timeout", [5999, 1800001])
def test_session_timeout_bounds(timeout):
    h = Harness()
    assert h.answer(h.join(G, session_timeout_ms=timeout)).error == E.INVALID_SESSION_TIMEOUT


def test_empty_group_id_is_invalid():
    h = Harness()
    assert h.answer(h.join("")).error == E.INVALID_GROUP_ID
    assert h.heartbeat("", "m", 1) == E.INVALID_GROUP_ID


def test_inconsistent_protocols():
    h = Harness()
    assert h.answer(h.join(G, protocols=())).error == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.answer(h.join(G, protocol_type="")).error == E.INCONSISTENT_GROUP_PROTOCOL
    stable_group(h)
    assert h.answer(h.join(G, protocol_type="connect")).error == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.answer(h.join(G, protocols=[("roundrobin", b"")])).error == \
        E.INCONSISTENT_GROUP_PROTOCOL


def test_a_rejoining_members_own_protocols_count_as_kafka_counts_them():
    """Kafka's supportsProtocols counts every member's current protocols, the rejoining
    member's own included: A, which offered only range, cannot rejoin offering only
    roundrobin even though B supports it."""
    h = Harness(initial_rebalance_delay_ms=0)
    a, first = h.join_new(G, protocols=(("range", b"a"),))
    b, _ = h.join_new(G, protocols=(("range", b"b"), ("roundrobin", b"b")))
    h.advance(0)
    generation = h.answer(first).generation_id
    h.sync(G, generation, a, {a: b"x", b: b"y"})
    h.sync(G, generation, b)
    assert h.state(G) == "Stable"
    answer = h.answer(h.join(G, member_id=a, protocols=(("roundrobin", b"a"),)))
    assert answer.error == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.state(G) == "Stable"


def test_protocol_selected_by_votes_among_common_protocols():
    h = Harness()
    prefs = [[("range", b"a"), ("roundrobin", b"a"), ("sticky", b"a")],
             [("roundrobin", b"b"), ("range", b"b")],
             [("roundrobin", b"c"), ("sticky", b"c"), ("range", b"c")]]
    tokens = [h.join_new(G, client_id=f"c{i}", protocols=p)[1] for i, p in enumerate(prefs)]
    h.advance(6000)
    answers = [h.answer(t) for t in tokens]
    # sticky is not common; range gets 1 vote, roundrobin 2.
    assert {a.protocol_name for a in answers} == {"roundrobin"}
    leader = [a for a in answers if a.members][0]
    assert leader.member_id == "c0-1"
    assert dict((m, meta) for m, _, meta in leader.members) == {
        "c0-1": b"a", "c1-2": b"b", "c2-3": b"c"}
    assert all(a.members == [] for a in answers if a is not leader)


def test_initial_rebalance_delay_extends_while_members_arrive():
    h = Harness(initial_rebalance_delay_ms=3000)
    _, t1 = h.join_new(G, client_id="a", rebalance_timeout_ms=10_000)
    h.advance(2000)
    _, t2 = h.join_new(G, client_id="b", rebalance_timeout_ms=10_000)
    h.advance(1000)                  # first delay over, but a member arrived: wait again
    assert h.answer(t1) is None
    h.advance(2999)
    assert h.answer(t1) is None
    h.advance(1)
    assert h.answer(t1).generation_id == h.answer(t2).generation_id == 1


def test_rejoin_of_all_members_completes_without_waiting():
    h = Harness()
    ids, gen = stable_group(h, 2)
    t0 = h.join(G, member_id=ids[0], client_id="c0")       # the leader rejoins: rebalance
    assert h.state(G) == "PreparingRebalance"
    assert h.heartbeat(G, ids[1], gen) == E.REBALANCE_IN_PROGRESS
    t1 = h.join(G, member_id=ids[1], client_id="c1")
    assert h.answer(t0).generation_id == h.answer(t1).generation_id == gen + 1
    assert h.state(G) == "CompletingRebalance"


def test_follower_rejoin_with_same_metadata_in_stable_group_gets_current_generation():
    h = Harness()
    ids, gen = stable_group(h, 2)
    answer = h.answer(h.join(G, member_id=ids[1], client_id="c1"))
    assert answer.error == E.NONE and answer.generation_id == gen and answer.members == []
    assert h.state(G) == "Stable"
    # changed metadata forces a rebalance
    token = h.join(G, member_id=ids[1], client_id="c1", protocols=[("range", b"new")])
    assert h.answer(token) is None and h.state(G) == "PreparingRebalance"


def test_member_that_does_not_rejoin_is_dropped_at_rebalance_timeout():
    h = Harness()
    ids, gen = stable_group(h, 2, rebalance_timeout_ms=20_000, session_timeout_ms=60_000)
    token = h.join(G, member_id=ids[0], client_id="c0", rebalance_timeout_ms=20_000,
                   session_timeout_ms=60_000)
    h.advance(19_999)
    assert h.answer(token) is None
    h.advance(1)
    answer = h.answer(token)
    assert answer.generation_id == gen + 1 and [m for m, _, _ in answer.members] == [ids[0]]
    assert list(h.manager.group(G).members) == [ids[0]]


def test_group_max_size():
    h = Harness(max_size=2)
    stable_group(h, 2)
    assert h.answer(h.join(G, client_id="third")).error == E.GROUP_MAX_SIZE_REACHED


def test_rejoin_during_completing_rebalance_returns_same_generation_to_leader():
    h = Harness()
    mid, tok = h.join_new(G)
    h.advance(3000)
    gen = h.answer(tok).generation_id
    again = h.answer(h.join(G, member_id=mid))
    assert again.generation_id == gen and again.members == [(mid, None, b"sub")]


# ------------------------------------------------------------------------------ SyncGroup
def test_follower_sync_waits_for_leader_assignment_which_is_written():
    h = Harness()
    (a, ta), (b, tb) = h.join_new(G, client_id="a"), h.join_new(G, client_id="b")
    h.advance(6000)
    gen = h.answer(ta).generation_id
    follower = h.sync(G, gen, b)
    assert h.answer(follower) is None
    assert h.heartbeat(G, b, gen) == E.NONE          # heartbeats allowed while completing
    leader = h.sync(G, gen, a, {a: b"A", b: b"B"})
    assert h.answer(leader).assignment == b"A" and h.answer(follower).assignment == b"B"
    assert h.state(G) == "Stable"
    record = h.log[-1]
    assert record.key == GroupKey(G) and record.value.generation == gen
    assert [(m.member_id, m.assignment) for m in record.value.members] == [(a, b"A"), (b, b"B")]
    # A later sync in Stable state just returns the stored assignment.
    assert h.answer(h.sync(G, gen, b)).assignment == b"B"


def test_sync_errors():
    h = Harness()
    assert h.answer(h.sync(G, 1, "x")).error == E.UNKNOWN_MEMBER_ID
    ids, gen = stable_group(h, 1)
    assert h.answer(h.sync(G, gen + 1, ids[0])).error == E.ILLEGAL_GENERATION
    assert h.answer(h.sync(G, gen, "x")).error == E.UNKNOWN_MEMBER_ID
    assert h.answer(h.sync(G, gen, ids[0], protocol_type="connect")).error == \
        E.INCONSISTENT_GROUP_PROTOCOL
    assert h.answer(h.sync(G, gen, ids[0], protocol_name="roundrobin")).error == \
        E.INCONSISTENT_GROUP_PROTOCOL
    assert h.answer(h.sync(G, gen, ids[0], protocol_type="consumer",
                           protocol_name="range")).error == E.NONE
    h.join(G, member_id=ids[0])                  # leader rejoin: new generation at once
    assert h.state(G) == "CompletingRebalance"
    h2 = Harness()
    ids2, gen2 = stable_group(h2, 2)
    h2.join(G, member_id=ids2[0], client_id="c0")
    assert h2.answer(h2.sync(G, gen2, ids2[1])).error == E.REBALANCE_IN_PROGRESS


def test_rebalance_during_completing_answers_parked_syncs_with_rebalance_in_progress():
    h = Harness()
    (a, ta), (b, tb) = h.join_new(G, client_id="a"), h.join_new(G, client_id="b")
    h.advance(6000)
    gen = h.answer(ta).generation_id
    follower = h.sync(G, gen, b)
    h.join(G, member_id=b, client_id="b", protocols=[("range", b"changed")])
    assert h.answer(follower).error == E.REBALANCE_IN_PROGRESS
    assert h.state(G) == "PreparingRebalance"


def test_failed_assignment_write_fails_the_syncs_and_rebalances():
    h = Harness()
    (a, ta), (b, tb) = h.join_new(G, client_id="a"), h.join_new(G, client_id="b")
    h.advance(6000)
    gen = h.answer(ta).generation_id
    follower = h.sync(G, gen, b)
    h.append_error = E.NOT_LEADER_OR_FOLLOWER
    leader = h.sync(G, gen, a, {a: b"A", b: b"B"})
    assert h.answer(leader).error == E.NOT_COORDINATOR
    assert h.answer(follower).error == E.NOT_COORDINATOR
    assert h.state(G) == "PreparingRebalance"


def test_member_that_never_syncs_is_removed_after_rebalance_timeout():
    h = Harness()
    kwargs = dict(rebalance_timeout_ms=20_000, session_timeout_ms=60_000)
    (a, ta), (b, tb) = h.join_new(G, client_id="a", **kwargs), h.join_new(G, client_id="b", **kwargs)
    h.advance(6000)
    gen = h.answer(ta).generation_id
    assert h.answer(h.sync(G, gen, a, {a: b"A", b: b"B"})).error == E.NONE
    h.advance(20_000)
    group = h.manager.group(G)
    assert list(group.members) == [a] and h.state(G) == "PreparingRebalance"


# ------------------------------------------------------------------------------ Heartbeat
def test_heartbeat_errors_and_session_expiry():
    h = Harness()
    assert h.heartbeat(G, "x", 1) == E.UNKNOWN_MEMBER_ID
    ids, gen = stable_group(h, 2, session_timeout_ms=10_000)
    assert h.heartbeat(G, ids[0], gen) == E.NONE
    assert h.heartbeat(G, ids[0], gen + 1) == E.ILLEGAL_GENERATION
    assert h.heartbeat(G, "x", gen) == E.UNKNOWN_MEMBER_ID
    h.advance(6000)
    assert h.heartbeat(G, ids[0], gen) == E.NONE
    assert h.heartbeat(G, ids[1], gen) == E.NONE
    h.advance(6000)                          # a live member keeps its place
    assert h.heartbeat(G, ids[0], gen) == E.NONE
    h.advance(6000)
    # ids[1] last heartbeated 12 s ago (session 10 s): removed, and a rebalance started.
    assert ids[1] not in h.manager.group(G).members
    assert h.heartbeat(G, ids[0], gen) == E.REBALANCE_IN_PROGRESS
    token = h.join(G, member_id=ids[0], client_id="c0")
    answer = h.answer(token)
    assert answer.generation_id == gen + 1 and answer.leader == ids[0]


def test_leader_expiry_elects_a_new_leader():
    h = Harness()
    ids, gen = stable_group(h, 3, session_timeout_ms=10_000)
    assert h.manager.group(G).leader_id == ids[0]
    h.advance(6000)
    for mid in ids[1:]:
        h.heartbeat(G, mid, gen)
    h.advance(5000)                      # leader expired
    assert h.manager.group(G).leader_id == ids[1]
    tokens = [h.join(G, member_id=m, client_id=f"c{i + 1}") for i, m in enumerate(ids[1:])]
    assert h.answer(tokens[0]).leader == ids[1] and len(h.answer(tokens[0]).members) == 2


def test_all_members_gone_makes_the_group_empty_and_writes_it():
    h = Harness()
    ids, gen = stable_group(h, 1, session_timeout_ms=10_000)
    h.advance(10_000)
    assert h.state(G) == "Empty"
    group = h.manager.group(G)
    assert group.generation_id == gen + 1 and group.protocol_name is None
    last = h.log[-1]
    assert last.value.members == [] and last.value.generation == gen + 1


def test_pending_member_that_never_returns_expires():
    h = Harness()
    ids, gen = stable_group(h, 1, session_timeout_ms=10_000)
    pending = h.answer(h.join(G, client_id="late", session_timeout_ms=10_000)).member_id
    token = h.join(G, member_id=ids[0], client_id="c0")        # leader rejoins
    assert h.answer(token) is None                  # waits for the pending member
    h.advance(10_000)
    assert h.answer(token).generation_id == gen + 1
    assert pending not in h.manager.group(G).pending_members


def test_new_member_that_never_completes_its_join_is_dropped():
    h = Harness(new_member_join_timeout_ms=300_000)
    ids, gen = stable_group(h, 1, session_timeout_ms=10_000, rebalance_timeout_ms=600_000)
    late, _ = h.join_new(G, client_id="late", rebalance_timeout_ms=600_000)
    h.advance(300_000)
    assert late not in h.manager.group(G).members


# ----------------------------------------------------------------------------- LeaveGroup
def test_leave_group_batched_with_errors_and_rebalance():
    h = Harness()
    ids, gen = stable_group(h, 3)
    result = h.answer(h.call("leave_group", G, [(ids[0], None), ("ghost", None)]))
    assert result.error == E.NONE
    assert result.members == [(ids[0], None, E.NONE), ("ghost", None, E.UNKNOWN_MEMBER_ID)]
    group = h.manager.group(G)
    assert ids[0] not in group.members and group.leader_id == ids[1]
    assert h.state(G) == "PreparingRebalance"
    unknown = h.answer(h.call("leave_group", "nope", [("m", None)]))
    assert unknown.members == [("m", None, E.UNKNOWN_MEMBER_ID)]


def test_leave_of_parked_joiner_answers_its_join():
    h = Harness()
    ids, gen = stable_group(h, 2)
    token = h.join(G, member_id=ids[1], client_id="c1", protocols=[("range", b"v2")])
    assert h.answer(token) is None
    h.call("leave_group", G, [(ids[1], None)])
    assert h.answer(token).error == E.UNKNOWN_MEMBER_ID


def test_last_member_leaving_empties_group():
    h = Harness()
    ids, gen = stable_group(h, 1)
    h.call("leave_group", G, [(ids[0], None)])
    assert h.state(G) == "Empty" and h.manager.group(G).generation_id == gen + 1


def test_group_max_size_during_a_rebalance_counts_awaiting_members():
    h = Harness(max_size=2)
    ids, gen = stable_group(h, 2, rebalance_timeout_ms=20_000, session_timeout_ms=60_000)
    t0 = h.join(G, member_id=ids[0], client_id="c0", protocols=[("range", b"v2")],
                rebalance_timeout_ms=20_000, session_timeout_ms=60_000)
    assert h.state(G) == "PreparingRebalance"
    # one member awaiting: a newcomer still fits (awaiting members are counted, not members)
    late, t_late = h.join_new(G, client_id="late", rebalance_timeout_ms=20_000,
                              session_timeout_ms=60_000)
    assert h.answer(t_late) is None
    # now two are awaiting: the old member that has not rejoined yet is turned away
    refused = h.answer(h.join(G, member_id=ids[1], client_id="c1", rebalance_timeout_ms=20_000,
                              session_timeout_ms=60_000))
    assert refused.error == E.GROUP_MAX_SIZE_REACHED
    assert ids[1] not in h.manager.group(G).members
    # the rebalance completes with the two that fit
    assert h.answer(t0).generation_id == gen + 1
    assert {m for m, _, _ in h.answer(t0).members} == {ids[0], late}


# -------------------------------------------------------------------------------- logging
def test_group_life_is_logged_in_kafkas_words(caplog):
    """A user whose group is stuck waiting for a dead member must see it in the log: the join,
    the rebalance and why, the generation, the session expiry, the group going empty."""
    h = Harness()
    h.manager.log_ident = "[GroupCoordinator 0]: "
    h.manager.partition_for = lambda group_id: 7
    caplog.set_level("INFO", logger="coordinator.group.manager")
    (a, b), generation = stable_group(h, 2)
    h.advance(11_000)                           # neither heartbeats: both sessions expire
    lines = [r.getMessage() for r in caplog.records]

    def has(text):
        assert any(text in line for line in lines), f"{text!r} not in:\n" + "\n".join(lines)
    assert all(line.startswith("[GroupCoordinator 0]: ") for line in lines)
    has(f"Dynamic member with unknown member id joins group {G} in Empty state. Created a new "
        f"member id {a} and request the member to rejoin with this id.")
    has(f"Preparing to rebalance group {G} in state PreparingRebalance with old generation 0 "
        f"(__consumer_offsets-7) (reason: Adding new member {a} with group instance id None; "
        f"client reason: not provided)")
    has(f"Stabilized group {G} generation {generation} (__consumer_offsets-7) with 2 members")
    has(f"Assignment received from leader {a} for group {G} for generation {generation}. "
        f"The group has 2 members, 0 of which are static.")
    has(f"Member {a} in group {G} has failed, removing it from the group")
    has(f"(reason: removing member {a} on heartbeat expiration)")
    has(f"Group {G} with generation {generation + 1} is now empty (__consumer_offsets-7)")


def test_leave_and_unload_are_logged(caplog):
    h = Harness()
    caplog.set_level("INFO", logger="coordinator.group.manager")
    (a,), generation = stable_group(h, 1)
    h.call("leave_group", G, [(a, None)])
    h.apply(h.manager.unload([G], h.now))
    lines = "\n".join(r.getMessage() for r in caplog.records)
    assert (f"Member MemberMetadata(memberId={a}, groupInstanceId=None, clientId=c0, "
            f"clientHost=/127.0.0.1, sessionTimeoutMs=10000, rebalanceTimeoutMs=30000, "
            f"supportedProtocols=List(range)) has left group {G} through explicit `LeaveGroup`; "
            f"client reason: not provided") in lines
    assert f"Unloading group metadata for {G} with generation {generation + 1}" in lines
