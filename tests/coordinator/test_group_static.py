"""KIP-345 static membership in the pure group state machine."""
from protocol.errors import ErrorCode as E

from group_harness import Harness

G = "static-group"


def static_stable(h: Harness, instances=("i-a", "i-b"), session_timeout_ms=30_000):
    tokens = {i: h.join(G, instance_id=i, client_id=i, session_timeout_ms=session_timeout_ms)
              for i in instances}
    h.advance(6000)
    answers = {i: h.answer(t) for i, t in tokens.items()}
    gen = answers[instances[0]].generation_id
    ids = {i: a.member_id for i, a in answers.items()}
    leader = answers[instances[0]].leader
    for i, mid in ids.items():
        assignment = {m: f"assign-{j}".encode() for j, m in ids.items()} if mid == leader else {}
        assert h.answer(h.sync(G, gen, mid, assignment, instance_id=i)).error == E.NONE
    return ids, gen


def test_static_member_joins_without_member_id_round_trip():
    h = Harness()
    token = h.join(G, instance_id="i-a", client_id="i-a")
    assert h.answer(token) is None           # no MEMBER_ID_REQUIRED for static members
    h.advance(3000)
    assert h.answer(token).error == E.NONE and h.answer(token).member_id == "i-a-1"


def test_static_member_restart_gets_assignment_back_without_rebalance():
    h = Harness()
    ids, gen = static_stable(h)
    old = ids["i-b"]
    answer = h.answer(h.join(G, instance_id="i-b", client_id="i-b", session_timeout_ms=30_000))
    assert answer.error == E.NONE and answer.generation_id == gen
    assert answer.member_id != old and answer.leader == ids["i-a"] and answer.members == []
    assert h.state(G) == "Stable"
    sync = h.answer(h.sync(G, gen, answer.member_id, instance_id="i-b"))
    assert sync.error == E.NONE and sync.assignment == b"assign-i-b"
    # the new member id was persisted
    assert answer.member_id in [m.member_id for m in h.log[-1].value.members]
    # the old incarnation is fenced everywhere
    assert h.heartbeat(G, old, gen, instance_id="i-b") == E.FENCED_INSTANCE_ID
    assert h.answer(h.sync(G, gen, old, instance_id="i-b")).error == E.FENCED_INSTANCE_ID
    assert h.answer(h.join(G, member_id=old, instance_id="i-b")).error == E.FENCED_INSTANCE_ID
    commit = h.answer(h.call("commit_offsets", G, old, "i-b", gen, [("t", 0, 5, -1, "")]))
    assert commit == {("t", 0): E.FENCED_INSTANCE_ID}


def test_restarted_static_leader_keeps_old_leader_id_in_answer():
    h = Harness()
    ids, gen = static_stable(h)
    answer = h.answer(h.join(G, instance_id="i-a", client_id="i-a", session_timeout_ms=30_000))
    assert answer.leader == ids["i-a"] != answer.member_id
    assert h.manager.group(G).leader_id == answer.member_id


def test_static_member_restart_with_new_protocol_triggers_rebalance():
    h = Harness()
    ids, gen = static_stable(h)
    token = h.join(G, instance_id="i-b", client_id="i-b", session_timeout_ms=30_000,
                   protocols=[("roundrobin", b""), ("range", b"")])
    # roundrobin is not supported by i-a: range stays selected, no rebalance
    assert h.answer(token).error == E.NONE and h.state(G) == "Stable"


def test_static_member_expires_after_session_timeout():
    h = Harness()
    ids, gen = static_stable(h, session_timeout_ms=30_000)
    for _ in range(4):
        h.advance(10_000)
        h.heartbeat(G, ids["i-a"], gen, instance_id="i-a")
    group = h.manager.group(G)
    assert ids["i-b"] not in group.members and "i-b" not in group.static_members
    assert h.state(G) == "PreparingRebalance"


def test_static_members_not_rejoining_keep_their_place_through_a_rebalance():
    h = Harness()
    ids, gen = static_stable(h, session_timeout_ms=60_000)
    t = h.join(G, member_id=ids["i-a"], instance_id="i-a", session_timeout_ms=60_000)
    h.advance(30_000)                            # rebalance timeout (30 s default here)
    answer = h.answer(t)
    assert answer.generation_id == gen + 1
    assert ids["i-b"] in h.manager.group(G).members


def test_replacing_static_member_during_rebalance_fences_the_parked_join():
    h = Harness()
    ids, gen = static_stable(h)
    parked = h.join(G, member_id=ids["i-b"], instance_id="i-b", session_timeout_ms=30_000,
                    protocols=[("range", b"changed")])
    assert h.answer(parked) is None and h.state(G) == "PreparingRebalance"
    fresh = h.join(G, instance_id="i-b", client_id="i-b", session_timeout_ms=30_000)
    assert h.answer(parked).error == E.FENCED_INSTANCE_ID
    h.join(G, member_id=ids["i-a"], instance_id="i-a", session_timeout_ms=30_000)
    assert h.answer(fresh).error == E.NONE and h.answer(fresh).generation_id == gen + 1


def test_leave_by_instance_id_and_fenced_leave():
    h = Harness()
    ids, gen = static_stable(h)
    answer = h.answer(h.call("leave_group", G, [("", "i-b"), ("", "i-zzz"),
                                                ("wrong-id", "i-a")]))
    assert answer.members == [("", "i-b", E.NONE), ("", "i-zzz", E.UNKNOWN_MEMBER_ID),
                              ("wrong-id", "i-a", E.FENCED_INSTANCE_ID)]
    assert ids["i-b"] not in h.manager.group(G).members


def test_failed_write_of_replaced_static_member_reverts():
    h = Harness()
    ids, gen = static_stable(h)
    h.append_error = E.NOT_LEADER_OR_FOLLOWER
    answer = h.answer(h.join(G, instance_id="i-b", client_id="i-b", session_timeout_ms=30_000))
    assert answer.error == E.NOT_COORDINATOR
    assert h.manager.group(G).static_members["i-b"] == ids["i-b"]
    h.append_error = 0
    assert h.heartbeat(G, ids["i-b"], gen, instance_id="i-b") == E.NONE


def test_static_member_answered_with_rebalance_in_progress_still_expires():
    h = Harness()
    ids, gen = static_stable(h, instances=("i-a",), session_timeout_ms=6000)
    # a second static member joins: generation + 1; it syncs, the leader never does
    newcomer = h.join(G, instance_id="i-b", client_id="i-b", session_timeout_ms=6000,
                      rebalance_timeout_ms=10_000)
    leader = h.join(G, member_id=ids["i-a"], instance_id="i-a", session_timeout_ms=6000,
                    rebalance_timeout_ms=10_000)
    assert h.answer(leader).generation_id == gen + 1
    parked = h.sync(G, gen + 1, h.answer(newcomer).member_id, instance_id="i-b")
    h.advance(10_000)            # the leader never synced: dropped, rebalance
    assert h.answer(parked).error == E.REBALANCE_IN_PROGRESS
    h.advance(60_000)            # nobody heartbeats: the static member must expire too
    assert h.state(G) == "Empty"


def test_restarted_static_leader_v9_is_told_to_skip_the_assignment():
    h = Harness()
    ids, gen = static_stable(h)
    token = h.call("join_group", G, "", "i-a", "i-a", "/127.0.0.1", 30_000, 30_000, "consumer",
                   [("range", b"sub")], True, supports_skip_assignment=True)
    answer = h.answer(token)
    assert answer.error == E.NONE and answer.generation_id == gen
    assert answer.leader == answer.member_id != ids["i-a"]       # it leads, under its new id
    assert answer.skip_assignment is True
    assert sorted(m[1] for m in answer.members) == ["i-a", "i-b"]
    assert h.state(G) == "Stable"
    follower = h.call("join_group", G, "", "i-b", "i-b", "/127.0.0.1", 30_000, 30_000,
                      "consumer", [("range", b"sub")], True, supports_skip_assignment=True)
    assert h.answer(follower).skip_assignment is False and h.answer(follower).members == []


def test_unknown_instance_id_with_a_known_member_id_is_an_unknown_member():
    """Kafka's validateCurrentMember: a group.instance.id the group does not know is
    UNKNOWN_MEMBER_ID even when the member id itself is a member."""
    h = Harness()
    ids, gen = static_stable(h)
    mid = ids["i-a"]
    assert h.heartbeat(G, mid, gen, instance_id="i-zzz") == E.UNKNOWN_MEMBER_ID
    assert h.answer(h.sync(G, gen, mid, instance_id="i-zzz")).error == E.UNKNOWN_MEMBER_ID
    commit = h.answer(h.call("commit_offsets", G, mid, "i-zzz", gen, [("t", 0, 5, -1, "")]))
    assert commit == {("t", 0): E.UNKNOWN_MEMBER_ID}
    leave = h.answer(h.call("leave_group", G, [(mid, "i-zzz")]))
    assert leave.members == [(mid, "i-zzz", E.UNKNOWN_MEMBER_ID)]
    assert h.state(G) == "Stable"
