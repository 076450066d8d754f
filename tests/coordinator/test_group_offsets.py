"""Offsets in the pure group manager: commit, fetch, delete, expiry, groups admin, replay."""
from protocol.errors import ErrorCode as E

from coordinator.group.manager import GroupManager
from coordinator.records import GroupKey, OffsetKey
from group_harness import Harness
from test_group_membership import stable_group

G = "offsets-group"
DAY = 24 * 3600 * 1000


def commit(h, group, offsets, member_id="", generation=-1, instance_id=None, retention=-1):
    return h.answer(h.call("commit_offsets", group, member_id, instance_id, generation,
                           offsets, retention_time_ms=retention))


def fetch(h, group, partitions=None, require_stable=False):
    answer = h.manager.fetch_offsets(group, partitions, require_stable)
    return {(p.topic, p.partition): (p.offset, p.error) for p in answer.partitions}


def test_simple_consumer_commit_creates_group_and_fetch_reads_back():
    h = Harness()
    assert commit(h, G, [("t", 0, 10, 3, "meta"), ("t", 1, 20, -1, None)]) == {
        ("t", 0): E.NONE, ("t", 1): E.NONE}
    assert h.state(G) == "Empty"
    assert fetch(h, G) == {("t", 0): (10, E.NONE), ("t", 1): (20, E.NONE)}
    answer = h.manager.fetch_offsets(G, [("t", 0), ("u", 0)])
    assert [(p.offset, p.leader_epoch, p.metadata) for p in answer.partitions] == [
        (10, 3, "meta"), (-1, -1, "")]
    assert [r.key for r in h.log] == [OffsetKey(G, "t", 0), OffsetKey(G, "t", 1)]
    assert h.log[0].value.commit_timestamp == h.now and h.log[0].value.expire_timestamp == -1


def test_fetch_unknown_group_answers_minus_one():
    h = Harness()
    assert fetch(h, "nope", [("t", 0)]) == {("t", 0): (-1, E.NONE)}
    assert fetch(h, "nope") == {}


def test_metadata_too_large_is_rejected_per_partition():
    h = Harness(offset_metadata_max_bytes=10)
    answer = commit(h, G, [("t", 0, 1, -1, "x" * 11), ("t", 1, 1, -1, "x" * 10)])
    assert answer == {("t", 0): E.OFFSET_METADATA_TOO_LARGE, ("t", 1): E.NONE}
    assert fetch(h, G) == {("t", 1): (1, E.NONE)}
    # Kafka's limit counts Java chars: ten CJK characters (30 UTF-8 bytes) fit, five
    # characters beyond the BMP (two chars each) fit and six do not.
    answer = commit(h, G, [("t", 2, 1, -1, "\u6f22" * 10), ("t", 3, 1, -1, "\U0001f600" * 5),
                           ("t", 4, 1, -1, "\U0001f600" * 6)])
    assert answer == {("t", 2): E.NONE, ("t", 3): E.NONE,
                      ("t", 4): E.OFFSET_METADATA_TOO_LARGE}


def test_member_commits_are_checked_against_generation_and_membership():
    h = Harness()
    ids, gen = stable_group(h, 1, group=G)
    assert commit(h, G, [("t", 0, 5, -1, "")], ids[0], gen) == {("t", 0): E.NONE}
    assert commit(h, G, [("t", 0, 6, -1, "")], ids[0], gen + 1) == {("t", 0): E.ILLEGAL_GENERATION}
    assert commit(h, G, [("t", 0, 6, -1, "")], "ghost", gen) == {("t", 0): E.UNKNOWN_MEMBER_ID}
    # a simple (generation -1) commit into an active group is refused
    assert commit(h, G, [("t", 0, 6, -1, "")]) == {("t", 0): E.UNKNOWN_MEMBER_ID}
    assert commit(h, "other", [("t", 0, 6, -1, "")], "m", 3) == {("t", 0): E.ILLEGAL_GENERATION}
    assert fetch(h, G) == {("t", 0): (5, E.NONE)}


def test_commit_during_rebalance_phases():
    h = Harness()
    ids, gen = stable_group(h, 2, group=G)
    h.join(G, member_id=ids[0], client_id="c0")          # PreparingRebalance
    assert commit(h, G, [("t", 0, 7, -1, "")], ids[1], gen) == {("t", 0): E.NONE}
    h.join(G, member_id=ids[1], client_id="c1")          # CompletingRebalance, gen + 1
    assert commit(h, G, [("t", 0, 8, -1, "")], ids[1], gen + 1) == {
        ("t", 0): E.REBALANCE_IN_PROGRESS}


def test_require_stable_sees_pending_commits():
    h = Harness()
    commit(h, G, [("t", 0, 1, -1, "")])
    h.hold_appends = True
    token = h.call("commit_offsets", G, "", None, -1, [("t", 0, 2, -1, "")])
    assert h.answer(token) is None
    assert fetch(h, G, [("t", 0)], require_stable=True) == {("t", 0): (-1, E.UNSTABLE_OFFSET_COMMIT)}
    assert fetch(h, G, [("t", 0)]) == {("t", 0): (1, E.NONE)}
    h.release()
    assert h.answer(token) == {("t", 0): E.NONE}
    assert fetch(h, G, [("t", 0)], require_stable=True) == {("t", 0): (2, E.NONE)}


def test_failed_commit_write_keeps_the_previous_offset():
    h = Harness()
    commit(h, G, [("t", 0, 1, -1, "")])
    h.append_error = E.NOT_ENOUGH_REPLICAS
    assert commit(h, G, [("t", 0, 2, -1, "")]) == {("t", 0): E.COORDINATOR_NOT_AVAILABLE}
    h.append_error = E.RECORD_LIST_TOO_LARGE
    assert commit(h, G, [("t", 0, 2, -1, "")]) == {("t", 0): E.INVALID_COMMIT_OFFSET_SIZE}
    assert fetch(h, G) == {("t", 0): (1, E.NONE)}


def test_offset_delete():
    h = Harness()
    assert h.answer(h.call("delete_offsets", "nope", [("t", 0)]))[0] == E.GROUP_ID_NOT_FOUND
    commit(h, G, [("t", 0, 1, -1, ""), ("t", 1, 1, -1, "")])
    answer = h.answer(h.call("delete_offsets", G, [("t", 0), ("x", 0)]))
    assert answer == (E.NONE, {("t", 0): E.NONE, ("x", 0): E.NONE})
    assert fetch(h, G) == {("t", 1): (1, E.NONE)}
    assert h.log[-1].key == OffsetKey(G, "t", 0) and h.log[-1].value is None
    # The last offsets of an Empty group: it goes at once, as Kafka's cleanupGroupMetadata
    answer = h.answer(h.call("delete_offsets", G, [("t", 1)]))
    assert answer == (E.NONE, {("t", 1): E.NONE})
    assert h.manager.group(G) is None
    assert [(type(r.key).__name__, r.value) for r in h.log[-2:]] == [("OffsetKey", None),
                                                                     ("GroupKey", None)]
    assert h.answer(h.call("delete_offsets", G, [("t", 1)]))[0] == E.GROUP_ID_NOT_FOUND


def test_offset_delete_refuses_subscribed_topics_of_active_consumer_group():
    subscription = b"\x00\x01" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\xff\xff\xff\xff"
    h = Harness()
    ids, gen = stable_group(h, 1, group=G, protocols=[("range", subscription)])
    commit(h, G, [("t", 0, 1, -1, ""), ("u", 0, 1, -1, "")], ids[0], gen)
    answer = h.answer(h.call("delete_offsets", G, [("t", 0), ("u", 0)]))
    assert answer == (E.NONE, {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): E.NONE})
    assert fetch(h, G) == {("t", 0): (1, E.NONE)}
    # A non-consumer group with members cannot tell: NON_EMPTY_GROUP.
    h2 = Harness()
    stable_group(h2, 1, group=G, protocol_type="connect")
    assert h2.answer(h2.call("delete_offsets", G, [("t", 0)]))[0] == E.NON_EMPTY_GROUP
    # A consumer group whose subscription cannot be read counts as subscribed to everything.
    h3 = Harness()
    ids, gen = stable_group(h3, 1, group=G, protocols=[("range", b"\xff")])
    commit(h3, G, [("u", 0, 1, -1, "")], ids[0], gen)
    answer = h3.answer(h3.call("delete_offsets", G, [("u", 0)]))
    assert answer == (E.NONE, {("u", 0): E.GROUP_SUBSCRIBED_TO_TOPIC})


def subscription(*topics):
    """ConsumerProtocolSubscription v1 of `topics`, no user data."""
    out = b"\x00\x01" + len(topics).to_bytes(4, "big")
    for topic in topics:
        out += len(topic).to_bytes(2, "big") + topic.encode()
    return out + b"\xff\xff\xff\xff"


def test_offset_delete_goes_by_the_topics_of_the_generation_consuming_during_a_rebalance():
    """Kafka's subscribedTopics is set when a generation starts: a member rejoining with a
    new subscription, or a new member, changes it only when the next generation does."""
    h = Harness()
    m0, t0 = h.join_new(G, client_id="c0", protocols=[("range", subscription("t"))])
    m1, t1 = h.join_new(G, client_id="c1", protocols=[("range", subscription("u"))])
    h.advance(2 * h.manager.config.initial_rebalance_delay_ms)
    gen = h.answer(t0).generation_id
    assert h.answer(t1).generation_id == gen
    leader = h.manager.group(G).leader_id
    for mid in (m0, m1):
        assignments = {m0: b"a", m1: b"b"} if mid == leader else {}
        assert h.answer(h.sync(G, gen, mid, assignments)).error == E.NONE
    commit(h, G, [("t", 0, 1, -1, ""), ("u", 0, 1, -1, ""), ("v", 0, 1, -1, "")], m0, gen)

    def delete(*topics):
        return h.answer(h.call("delete_offsets", G, [(t, 0) for t in topics]))[1]
    # m0 now wants u only, and a new member v: the generation consuming still reads t and u
    h.join(G, member_id=m0, client_id="c0", protocols=[("range", subscription("u"))])
    assert h.state(G) == "PreparingRebalance"
    m2, _ = h.join_new(G, client_id="c2", protocols=[("range", subscription("v"))])
    assert delete("t", "v") == {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("v", 0): E.NONE}
    assert fetch(h, G, [("t", 0)]) == {("t", 0): (1, E.NONE)}
    # the next generation (u and v) starts: t can go, v cannot
    commit(h, G, [("v", 0, 2, -1, "")], m0, gen)
    h.join(G, member_id=m1, client_id="c1", protocols=[("range", subscription("u"))])
    assert h.state(G) == "CompletingRebalance"
    assert delete("t", "v") == {("t", 0): E.NONE, ("v", 0): E.GROUP_SUBSCRIBED_TO_TOPIC}


def test_delete_groups():
    h = Harness()
    ids, gen = stable_group(h, 1, group="busy")
    commit(h, G, [("t", 0, 1, -1, "")])
    answer = h.answer(h.call("delete_groups", [G, "busy", "nope"]))
    assert answer == {G: E.NONE, "busy": E.NON_EMPTY_GROUP, "nope": E.GROUP_ID_NOT_FOUND}
    assert h.manager.group(G) is None
    assert [(r.key, r.value) for r in h.log[-2:]] == [(OffsetKey(G, "t", 0), None),
                                                      (GroupKey(G), None)]


def test_a_deleted_topics_offsets_leave_every_group():
    """Kafka's handleDeletedPartitions: tombstones for the deleted partitions' offsets in every
    group, pending transactional ones dropped, and an Empty group left with none is Dead; a
    consumer of a topic created again under the name starts from auto.offset.reset."""
    h = Harness()
    ids, gen = stable_group(h, 1, group="busy")
    commit(h, "busy", [("t", 0, 5, -1, "")], member_id=ids[0], generation=gen)
    commit(h, G, [("t", 0, 10, -1, ""), ("t", 1, 11, -1, ""), ("u", 0, 12, -1, "")])
    commit(h, "only-t", [("t", 1, 13, -1, "")])
    h.call("txn_commit_offsets", "txn", 77, 0, "", None, -1, [("t", 0, 14, -1, "")])
    h.apply(h.manager.remove_offsets_of_deleted({("t", 0), ("t", 1)}, h.now))
    assert fetch(h, G) == {("u", 0): (12, E.NONE)}
    assert fetch(h, "busy", [("t", 0)]) == {("t", 0): (-1, E.NONE)}
    assert h.state("busy") == "Stable"
    assert h.manager.group("only-t") is None and h.manager.group("txn") is None
    h.apply(h.manager.complete_txn_offsets(77, None, True, h.now))
    assert fetch(h, "txn", [("t", 0)]) == {("t", 0): (-1, E.NONE)}
    tombstones = {(type(r.key).__name__, getattr(r.key, "group", None),
                   getattr(r.key, "partition", None)) for r in h.log if r.value is None}
    assert tombstones >= {("OffsetKey", G, 0), ("OffsetKey", G, 1), ("OffsetKey", "busy", 0),
                          ("OffsetKey", "only-t", 1), ("GroupKey", "only-t", None)}
    assert h.manager.remove_offsets_of_deleted({("nope", 0)}, h.now).appends == []


def test_expiry_of_empty_group_counts_from_when_it_became_empty():
    h = Harness(offsets_retention_ms=7 * DAY)
    ids, gen = stable_group(h, 1, group=G)
    commit(h, G, [("t", 0, 5, -1, "")], ids[0], gen)
    h.advance(8 * DAY - 60_000)          # heartbeats stopped: member expired long ago
    emptied_at = h.manager.group(G).state_timestamp_ms
    assert h.state(G) == "Empty"
    h.apply(h.manager.expire_offsets(emptied_at + 7 * DAY - 1))
    assert fetch(h, G) == {("t", 0): (5, E.NONE)}
    h.apply(h.manager.expire_offsets(emptied_at + 7 * DAY))
    assert h.manager.group(G) is None
    assert [(r.key, r.value) for r in h.log[-2:]] == [(OffsetKey(G, "t", 0), None),
                                                      (GroupKey(G), None)]


def test_expiry_of_simple_group_and_explicit_retention():
    h = Harness(offsets_retention_ms=DAY)
    commit(h, G, [("t", 0, 1, -1, "")])
    commit(h, G, [("t", 1, 1, -1, "")], retention=DAY // 2)
    assert h.log[-1].value.expire_timestamp == h.now + DAY // 2
    h.apply(h.manager.expire_offsets(h.now + DAY // 2))
    assert fetch(h, G) == {("t", 0): (1, E.NONE)}
    h.apply(h.manager.expire_offsets(h.now + DAY))
    assert h.manager.group(G) is None


def test_expiry_in_stable_group_only_for_unsubscribed_topics():
    subscription = b"\x00\x01" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\xff\xff\xff\xff"
    h = Harness(offsets_retention_ms=DAY)
    ids, gen = stable_group(h, 1, group=G, protocols=[("range", subscription)],
                            session_timeout_ms=60_000)
    commit(h, G, [("t", 0, 1, -1, ""), ("old", 0, 1, -1, "")], ids[0], gen)
    h.apply(h.manager.expire_offsets(h.now + DAY))
    assert fetch(h, G) == {("t", 0): (1, E.NONE)}


def test_describe_and_list_groups():
    h = Harness()
    ids, gen = stable_group(h, 2, group=G)
    commit(h, "simple", [("t", 0, 1, -1, "")])
    [desc, missing] = h.manager.describe_groups([G, "nope"])
    assert desc.state == "Stable" and desc.protocol_type == "consumer"
    assert desc.protocol_data == "range"
    assert [(m.member_id, m.client_id, m.metadata, m.assignment) for m in desc.members] == [
        (ids[0], "c0", b"sub", ids[0].encode()), (ids[1], "c1", b"sub", ids[1].encode())]
    assert missing.state == "Dead" and missing.error == E.NONE
    listing = {(g.group_id, g.protocol_type, g.state) for g in h.manager.list_groups()}
    assert listing == {(G, "consumer", "Stable"), ("simple", "", "Empty")}
    assert [g.group_id for g in h.manager.list_groups(states=["empty"])] == ["simple"]
    assert h.manager.list_groups(types=["consumer"]) == []
    assert len(h.manager.list_groups(types=["Classic"])) == 2


def test_replaying_the_log_rebuilds_groups_and_offsets():
    h = Harness()
    ids, gen = stable_group(h, 2, group=G)
    commit(h, G, [("t", 0, 5, 1, "m")], ids[0], gen)
    commit(h, "simple", [("t", 0, 1, -1, ""), ("t", 1, 2, -1, "")])
    h.call("delete_offsets", "simple", [("t", 1)])
    commit(h, "gone", [("t", 0, 1, -1, "")])
    h.call("delete_groups", ["gone"])
    fresh = GroupManager()
    for record in h.log:
        fresh.replay(record, h.now)
    assert set(fresh.groups) == {G, "simple"}
    group = fresh.group(G)
    assert group.state.value == "Stable" and group.generation_id == gen
    assert list(group.members) == ids and group.leader_id == ids[0]
    assert group.members[ids[1]].assignment == ids[1].encode()
    assert group.offsets[("t", 0)].offset == 5 and group.offsets[("t", 0)].metadata == "m"
    assert set(fresh.group("simple").offsets) == {("t", 0)}
    timers = fresh.finish_loading([G], h.now).timers
    assert sorted(k[2] for k, _ in timers) == sorted(ids)


def test_group_loaded_over_its_max_size_rebalances():
    """Kafka's onGroupLoaded: a group stored with more members than group.max.size (the limit
    was lowered) rebalances, so the members that rejoin last are refused."""
    h = Harness()
    ids, gen = stable_group(h, 3, group=G)
    fresh = Harness(max_size=2)
    for record in h.log:
        fresh.manager.replay(record, fresh.now)
    fresh.apply(fresh.manager.finish_loading([G], fresh.now))
    assert fresh.state(G) == "PreparingRebalance"
    assert fresh.heartbeat(G, ids[0], gen) == E.REBALANCE_IN_PROGRESS
    tokens = [fresh.join(G, member_id=mid, client_id=f"c{i}") for i, mid in enumerate(ids)]
    assert fresh.answer(tokens[2]).error == E.GROUP_MAX_SIZE_REACHED
    answers = [fresh.answer(t) for t in tokens[:2]]
    assert all(a.error == E.NONE and a.generation_id == gen + 1 for a in answers)
    assert list(fresh.manager.group(G).members) == ids[:2]


def test_failed_group_deletion_leaves_the_group_usable():
    h = Harness()
    commit(h, G, [("t", 0, 1, -1, "")])
    h.append_error = E.NOT_LEADER_OR_FOLLOWER
    assert h.answer(h.call("delete_groups", [G])) == {G: E.NOT_COORDINATOR}
    assert h.state(G) == "Empty" and fetch(h, G) == {("t", 0): (1, E.NONE)}
    h.append_error = 0
    assert h.answer(h.call("delete_groups", [G])) == {G: E.NONE}
    assert h.manager.group(G) is None


def test_txn_commit_of_a_generation_below_zero_on_an_empty_group():
    """Kafka's validateOffsetCommit (transactional too): generation -1 on an Empty group is a
    consumer assigning its own partitions, e.g. the Java consumer's groupMetadata() before any
    rebalance (member "", its group.instance.id): an EOS producer's offsets are stored. On an
    active group the member checks still apply."""
    h = Harness()
    for member, instance in (("", "static-1"), ("someone", None)):
        errors = h.answer(h.call("txn_commit_offsets", f"assigned-{member}", 78, 0, member,
                                 instance, -1, [("t", 0, 20, -1, "")]))
        assert errors == {("t", 0): E.NONE}
    ids, gen = stable_group(h, 1, group="active")
    errors = h.answer(h.call("txn_commit_offsets", "active", 79, 0, "ghost", None, -1,
                             [("t", 0, 21, -1, "")]))
    assert errors == {("t", 0): E.UNKNOWN_MEMBER_ID}


def test_a_failed_expiry_write_keeps_the_groups_retention_clock():
    """Expiry tombstones that could not be written leave the group Empty since the time it was
    Empty before: the next check expires it, not one a whole retention later. A consumer
    group that went Empty counts from that time (a simple group from its commits)."""
    h = Harness(offsets_retention_ms=7 * DAY)
    ids, gen = stable_group(h, 1, group=G)
    commit(h, G, [("t", 0, 5, -1, "")], ids[0], gen)
    h.advance(60_000)                    # heartbeats stopped: the member expired, group Empty
    assert h.state(G) == "Empty"
    emptied_at = h.manager.group(G).state_timestamp_ms
    h.append_error = E.NOT_ENOUGH_REPLICAS
    h.apply(h.manager.expire_offsets(emptied_at + 7 * DAY))
    assert h.state(G) == "Empty" and h.manager.group(G).state_timestamp_ms == emptied_at
    h.append_error = 0
    h.apply(h.manager.expire_offsets(emptied_at + 7 * DAY + 100))
    assert h.manager.group(G) is None


def test_a_failed_expiry_of_a_group_from_an_old_record_keeps_its_offsets_clocks():
    """A group loaded from a GroupMetadataValue v0/v1 (no state time) whose expiry failed
    still counts each offset from its commit, not from the failed attempt."""
    from coordinator.records import GroupValue, OffsetAndMetadata, Record
    h = Harness(offsets_retention_ms=DAY)
    old = h.now - 2 * DAY
    h.manager.replay(Record(GroupKey(G), GroupValue("consumer", 3, None, None, -1, [])), h.now)
    h.manager.replay(Record(OffsetKey(G, "t", 0), OffsetAndMetadata(5, -1, "", old, -1)), h.now)
    h.append_error = E.NOT_ENOUGH_REPLICAS
    h.apply(h.manager.expire_offsets(h.now))
    assert h.state(G) == "Empty" and h.manager.group(G).state_timestamp_ms is None
    h.append_error = 0
    h.apply(h.manager.expire_offsets(h.now + 100))
    assert h.manager.group(G) is None


def test_offset_commit_v1_commit_timestamp_is_stored():
    """Kafka's createOffsetAndMetadata: v1's commit_timestamp unless -1 (then now)."""
    h = Harness()
    h.answer(h.call("commit_offsets", G, "", None, -1, [("t", 0, 1, -1, ""), ("t", 1, 2, -1, "")],
                    commit_timestamps={("t", 0): 12345, ("t", 1): -1}))
    stamps = {r.key.partition: r.value.commit_timestamp for r in h.log}
    assert stamps == {0: 12345, 1: h.now}


def test_a_commit_answered_after_its_group_was_unloaded_does_not_recreate_it():
    """Kafka's putCacheCallback ignores a Dead group: a commit whose write completes after
    the partition was unloaded (leadership moved) leaves no group behind on this broker."""
    h = Harness()
    commit(h, G, [("t", 0, 1, -1, "")])
    h.hold_appends = True
    token = h.call("commit_offsets", G, "", None, -1, [("t", 0, 2, -1, "")])
    h.apply(h.manager.unload([G], h.now))
    h.release()
    assert h.answer(token) == {("t", 0): E.NONE}
    assert h.manager.group(G) is None and h.manager.list_groups() == []


def test_offset_delete_drops_commits_in_flight_and_pending_txn_offsets():
    """Kafka's removeOffsets: a commit in flight or a transaction's pending offset of a deleted
    partition does not bring it back afterwards."""
    h = Harness()
    commit(h, G, [("t", 0, 1, -1, ""), ("t", 1, 1, -1, ""), ("u", 0, 1, -1, "")])
    h.call("txn_commit_offsets", G, 77, 0, "", None, -1, [("t", 0, 5, -1, "")])
    h.hold_appends = True
    token = h.call("commit_offsets", G, "", None, -1, [("t", 1, 9, -1, "")])
    h.hold_appends = False
    answer = h.answer(h.call("delete_offsets", G, [("t", 0), ("t", 1)]))
    assert answer == (E.NONE, {("t", 0): E.NONE, ("t", 1): E.NONE})
    h.release()
    assert h.answer(token) == {("t", 1): E.NONE}
    h.apply(h.manager.complete_txn_offsets(77, None, True, h.now))
    assert fetch(h, G) == {("u", 0): (1, E.NONE)}


def test_a_commit_staged_after_an_offset_delete_is_applied_whatever_the_order_of_answers():
    """Commit A in flight, OffsetDelete, commit C staged, A answered first: A is not applied
    (staged before the deletion), C is; the cache ends as the log does (Kafka keeps the staged
    value per partition in pendingOffsetCommits)."""
    h = Harness()
    commit(h, G, [("u", 0, 7, -1, "")])
    h.hold_appends = True
    a = h.call("commit_offsets", G, "", None, -1, [("t", 0, 2, -1, "")])
    h.hold_appends = False
    assert h.answer(h.call("delete_offsets", G, [("t", 0)]))[0] == E.NONE
    h.hold_appends = True
    c = h.call("commit_offsets", G, "", None, -1, [("t", 0, 3, -1, "")])
    h.release()
    assert h.answer(a) == {("t", 0): E.NONE} and h.answer(c) == {("t", 0): E.NONE}
    assert fetch(h, G) == {("t", 0): (3, E.NONE), ("u", 0): (7, E.NONE)}
    assert h.manager.group(G).pending_offset_commits == {}


def test_a_deleted_topics_commit_in_flight_is_not_applied():
    h = Harness()
    commit(h, G, [("u", 0, 1, -1, "")])
    h.hold_appends = True
    token = h.call("commit_offsets", G, "", None, -1, [("t", 0, 9, -1, "")])
    h.hold_appends = False
    h.apply(h.manager.remove_offsets_of_deleted({("t", 0)}, h.now))
    h.release()
    assert h.answer(token) == {("t", 0): E.NONE}
    assert fetch(h, G) == {("u", 0): (1, E.NONE)}


def test_expiry_log_lines_as_kafka(caplog):
    """"Removed N expired offsets in T milliseconds." only when offsets went; the group's move
    to Dead has its own line."""
    import logging
    h = Harness(offsets_retention_ms=1000)
    commit(h, G, [("t", 0, 1, -1, "")])
    with caplog.at_level(logging.INFO):
        h.apply(h.manager.expire_offsets(h.now + 10))
        assert "expired offsets" not in caplog.text
        h.apply(h.manager.expire_offsets(h.now + 5000))
    assert f"Group {G} transitioned to Dead in generation 0" in caplog.text
    assert "Removed 1 expired offsets in " in caplog.text


def test_a_group_from_an_old_record_expires_each_offset_from_its_commit():
    """GroupMetadataValue v0/v1 (Kafka before 2.1) has no current state timestamp: an Empty
    group's offsets expire each from its commit time (Kafka's removeExpiredOffsets), not from
    the time the log was loaded (which restarted retention at every restart)."""
    from coordinator.records import GroupValue, OffsetAndMetadata, Record
    h = Harness(offsets_retention_ms=DAY)
    old = h.now - 2 * DAY
    h.manager.replay(Record(GroupKey(G), GroupValue("consumer", 3, None, None, -1, [])), h.now)
    h.manager.replay(Record(OffsetKey(G, "t", 0), OffsetAndMetadata(5, -1, "", old, -1)), h.now)
    h.manager.replay(Record(OffsetKey(G, "t", 1), OffsetAndMetadata(6, -1, "", h.now, -1)), h.now)
    assert h.state(G) == "Empty"
    h.apply(h.manager.expire_offsets(h.now))
    assert fetch(h, G) == {("t", 1): (6, E.NONE)}


def test_loading_drops_a_group_whose_only_offsets_were_aborted():
    """A group known only from a transaction's offsets that was aborted does not exist once
    its partition is loaded (Kafka builds groups after reading the whole partition)."""
    from coordinator.records import OffsetAndMetadata, Record
    h = Harness()
    h.manager.replay_txn_offset(77, Record(OffsetKey("txn-only", "t", 0),
                                           OffsetAndMetadata(5, -1, "", h.now, -1)), h.now)
    h.apply(h.manager.complete_txn_offsets(77, None, False, h.now))
    h.apply(h.manager.finish_loading(["txn-only"], h.now))
    assert h.manager.group("txn-only") is None and h.manager.list_groups() == []
