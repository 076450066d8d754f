"""Random request sequences against the pure state machine: invariants after every step, and
no request left hanging once time runs on (every parked JoinGroup/SyncGroup gets its answer)."""
from hypothesis import event, example, given, settings, strategies as st

from group_harness import Harness

G = "random-group"
CLIENTS = 4

join = st.tuples(st.just("join"), st.integers(0, CLIENTS - 1), st.booleans(), st.booleans())
sync = st.tuples(st.just("sync"), st.integers(0, CLIENTS - 1))
op = st.one_of(
    join, join, join, sync, sync, sync,
    st.tuples(st.just("heartbeat"), st.integers(0, CLIENTS - 1)),
    st.tuples(st.just("leave"), st.integers(0, CLIENTS - 1)),
    st.tuples(st.just("commit"), st.integers(0, CLIENTS - 1)),
    st.tuples(st.just("leave_static"), st.integers(0, CLIENTS - 1)),
    st.tuples(st.just("delete"), st.just(0)),
    st.tuples(st.just("reload"), st.just(0)),
    st.tuples(st.just("advance"), st.sampled_from([1, 1, 500, 3000, 7000, 20_000])),
)


def check_invariants(h: Harness):
    group = h.manager.group(G)
    if group is None:
        return
    members = group.members
    assert group.num_awaiting_join == sum(m.join_token is not None for m in members.values())
    assert (group.leader_id in members) if members else group.leader_id is None
    assert group.pending_sync <= set(members)
    for instance, member_id in group.static_members.items():
        assert members[member_id].group_instance_id == instance
    state = group.state.value
    if state == "Empty":
        assert not members
    if state in ("Stable", "CompletingRebalance"):
        assert members and group.protocol_name is not None
        assert all(m.join_token is None for m in members.values())
    if state != "CompletingRebalance":
        assert all(m.sync_token is None for m in members.values())


@settings(max_examples=300, deadline=None)
# Found by this test: a static member whose parked SyncGroup was answered with
# REBALANCE_IN_PROGRESS was never given a new session deadline and kept the group waiting forever.
@example(ops=[("join", 0, False, False), ("join", 2, True, False), ("leave", 1), ("sync", 2)],
         delay=0, start_stable=True)
@given(st.lists(op, max_size=60), st.sampled_from([0, 0, 3000]), st.booleans())
def test_random_sequences_keep_invariants_and_answer_everything(ops, delay, start_stable):
    h = Harness(initial_rebalance_delay_ms=delay)
    member_ids = [""] * CLIENTS          # what each client believes its member id is
    generations = [-1] * CLIENTS
    parked = []
    if start_stable:                     # begin from a Stable group of clients 0 and 1
        tokens = []
        for client in (0, 1):
            first = h.answer(h.join(G, client_id=f"c{client}", session_timeout_ms=6000,
                                    rebalance_timeout_ms=10_000, protocols=[("range", b"v1")]))
            member_ids[client] = first.member_id
            tokens.append(h.join(G, member_id=first.member_id, client_id=f"c{client}",
                                 session_timeout_ms=6000, rebalance_timeout_ms=10_000,
                                 protocols=[("range", b"v1")]))
        h.advance(2 * delay + 1)
        for client, token in zip((0, 1), tokens):
            generations[client] = h.answer(token).generation_id
        for client in (0, 1):
            h.sync(G, generations[client], member_ids[client], {m: b"x" for m in member_ids if m})
        assert h.state(G) == "Stable"
    for step in ops:
        kind, arg = step[0], step[1]
        if kind == "join":
            static, change = step[2], step[3]
            instance = f"inst-{arg}" if static else None
            protocols = [("range", b"v2" if change else b"v1")]
            token = h.join(G, member_id=member_ids[arg], instance_id=instance,
                           client_id=f"c{arg}", session_timeout_ms=6000,
                           rebalance_timeout_ms=10_000, protocols=protocols)
            answer = h.answer(token)
            if answer is None:
                parked.append((token, arg))
            elif answer.member_id:
                member_ids[arg] = answer.member_id
                generations[arg] = answer.generation_id
        elif kind == "sync":
            token = h.sync(G, generations[arg], member_ids[arg],
                           {m: b"x" for m in member_ids if m})
            if h.answer(token) is None:
                parked.append((token, arg))
        elif kind == "heartbeat":
            h.heartbeat(G, member_ids[arg], generations[arg])
        elif kind == "leave":
            h.call("leave_group", G, [(member_ids[arg], None)])
        elif kind == "leave_static":         # admin removal by group.instance.id
            h.call("leave_group", G, [("", f"inst-{arg}")])
        elif kind == "delete":
            h.call("delete_groups", [G])
        elif kind == "reload":               # the partition moves away and back (unload, load)
            h.apply(h.manager.unload([G], h.now))
            for record in h.log:
                h.manager.replay(record, h.now, loading=True)
            h.apply(h.manager.finish_loading([G], h.now))
        elif kind == "commit":
            h.call("commit_offsets", G, member_ids[arg], None, generations[arg],
                   [("t", arg, 1, -1, "")])
        else:
            h.advance(arg)
        for token, client in parked:           # learn ids/generations from answered joins
            answer = h.answer(token)
            if answer is not None and hasattr(answer, "generation_id") and answer.member_id:
                member_ids[client] = answer.member_id
                generations[client] = answer.generation_id
        check_invariants(h)
        group = h.manager.group(G)
        event(f"state {group.state.value if group else None}")
    # Time runs on with nobody heartbeating: every parked request is answered, the group empties.
    for _ in range(10):
        h.advance(60_000)
    for token, _ in parked:
        assert h.answer(token) is not None, f"request {token} never answered"
    group = h.manager.group(G)
    assert group is None or group.state.value in ("Empty", "Dead")
    check_invariants(h)


offset_op = st.one_of(
    st.tuples(st.just("commit"), st.sampled_from(["a", "b"]), st.integers(0, 3),
              st.integers(0, 100), st.sampled_from([-1, 5000])),
    st.tuples(st.just("delete_offsets"), st.sampled_from(["a", "b"]), st.integers(0, 3)),
    st.tuples(st.just("delete_group"), st.sampled_from(["a", "b"])),
    st.tuples(st.just("expire"), st.sampled_from([1000, 10_000, 100_000])),
    st.tuples(st.just("fail_next"), st.booleans()),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(offset_op, max_size=40))
def test_replaying_the_log_gives_the_live_state(ops):
    """The design's promise: what the manager holds equals what a replay of its log builds."""
    from coordinator.group.manager import GroupManager
    h = Harness(offsets_retention_ms=50_000)
    for step in ops:
        kind = step[0]
        if kind == "commit":
            _, group, partition, offset, retention = step
            h.call("commit_offsets", group, "", None, -1, [("t", partition, offset, -1, "m")],
                   retention_time_ms=retention)
        elif kind == "delete_offsets":
            h.call("delete_offsets", step[1], [("t", step[2])])
        elif kind == "delete_group":
            h.call("delete_groups", [step[1]])
        elif kind == "expire":
            h.now += step[1]
            h.apply(h.manager.expire_offsets(h.now))
        else:
            h.append_error = 7 if step[1] else 0          # REQUEST_TIMED_OUT on writes
        if kind != "fail_next":
            h.append_error = 0
    fresh = GroupManager()
    for record in h.log:
        fresh.replay(record, h.now, loading=True)

    def offsets(manager):
        return {gid: {tp: (o.offset, o.metadata) for tp, o in g.offsets.items()}
                for gid, g in manager.groups.items() if g.offsets}
    assert offsets(fresh) == offsets(h.manager)
