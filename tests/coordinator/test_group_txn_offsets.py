"""Transactional offset commits in the pure group manager (TxnOffsetCommit): invisible until the
transaction's marker, committed or dropped by it, the KIP-447 member checks, and the same
outcome when the log is replayed (the load path) with the markers in it."""
from protocol.errors import ErrorCode as E
from storage.record_batch import ControlRecordType, build_control_batch

from coordinator.group.manager import GroupManager
from coordinator.results import GroupConfig
from coordinator.serde import build_batch, replay_buffer
from group_harness import Harness
from test_group_membership import stable_group

G = "txn-group"
PID, EPOCH = 4000, 2


def txn_commit(h, offsets, group=G, pid=PID, member_id="", generation=-1, instance_id=None):
    return h.answer(h.call("txn_commit_offsets", group, pid, EPOCH, member_id, instance_id,
                           generation, offsets))


def fetch(h, require_stable=False, group=G, partitions=None):
    answer = h.manager.fetch_offsets(group, partitions, require_stable)
    return {(p.topic, p.partition): (p.offset, p.error) for p in answer.partitions}


def complete(h, committed, pid=PID, partitions=None):
    h.apply(h.manager.complete_txn_offsets(pid, partitions, committed, h.now))


def test_offsets_of_a_transaction_appear_only_when_it_commits():
    h = Harness()
    assert txn_commit(h, [("t", 0, 10, -1, "m")]) == {("t", 0): E.NONE}
    assert fetch(h, partitions=[("t", 0)]) == {("t", 0): (-1, E.NONE)}
    assert fetch(h, True, partitions=[("t", 0)]) == {("t", 0): (-1, E.UNSTABLE_OFFSET_COMMIT)}
    complete(h, committed=True)
    assert fetch(h, True) == {("t", 0): (10, E.NONE)}


def test_an_aborted_transaction_leaves_the_committed_offsets_alone():
    h = Harness()
    h.call("commit_offsets", G, "", None, -1, [("t", 0, 5, -1, "")])
    txn_commit(h, [("t", 0, 10, -1, "")])
    complete(h, committed=False)
    assert fetch(h, True) == {("t", 0): (5, E.NONE)}


def test_a_later_plain_commit_wins_over_an_older_transaction():
    h = Harness()
    txn_commit(h, [("t", 0, 10, -1, "")])
    h.call("commit_offsets", G, "", None, -1, [("t", 0, 20, -1, "")])
    complete(h, committed=True)
    assert fetch(h) == {("t", 0): (20, E.NONE)}


def test_the_retention_check_keeps_a_group_whose_only_offsets_are_pending():
    """Kafka's hasOffsets counts a transaction's pending offsets: an Empty group holding
    nothing else is not removed before the marker makes them committed (an assign() consumer's
    first transaction would lose its offsets)."""
    h = Harness(offsets_retention_check_interval_ms=600_000)
    h.apply(h.manager.expire_offsets(h.now))
    txn_commit(h, [("t", 0, 42, -1, "")])
    h.advance(600_000)                               # the check runs, the transaction is open
    assert G in h.manager.groups
    complete(h, committed=True)
    assert fetch(h, partitions=[("t", 0)]) == {("t", 0): (42, E.NONE)}


def test_a_reload_keeps_a_group_whose_only_offsets_are_pending():
    """The load path agrees with the live one: the group's last committed offset deleted while
    a transaction's offsets wait for their marker."""
    h = Harness()
    h.call("commit_offsets", G, "", None, -1, [("a", 0, 7, -1, "")])
    txn_commit(h, [("b", 0, 42, -1, "")])
    h.call("delete_offsets", G, [("a", 0)])
    complete(h, committed=True)
    assert fetch(h, partitions=[("b", 0)]) == {("b", 0): (42, E.NONE)}
    loaded = GroupManager()
    for record in h.log:
        if getattr(record.key, "topic", None) == "b":
            loaded.replay_txn_offset(PID, record, 0)
        else:
            loaded.replay(record, 0, loading=True)
    loaded.complete_txn_offsets(PID, None, True, 0)
    assert loaded.fetch_offsets(G, [("b", 0)]).partitions[0].offset == 42


def test_markers_of_other_producers_or_partitions_do_not_complete_it():
    h = Harness()
    h.manager.partition_for = lambda group: 7
    txn_commit(h, [("t", 0, 10, -1, "")])
    complete(h, committed=True, pid=PID + 1)
    complete(h, committed=True, partitions={3})
    assert fetch(h, True, partitions=[("t", 0)]) == {("t", 0): (-1, E.UNSTABLE_OFFSET_COMMIT)}
    complete(h, committed=True, partitions={7})
    assert fetch(h) == {("t", 0): (10, E.NONE)}


def test_kip447_member_checks_apply_when_the_consumer_is_named():
    h = Harness()
    (member,), generation = stable_group(h, 1, group=G)
    assert txn_commit(h, [("t", 0, 1, -1, "")], member_id=member, generation=generation) == \
        {("t", 0): E.NONE}
    assert txn_commit(h, [("t", 0, 2, -1, "")], member_id=member,
                      generation=generation + 1) == {("t", 0): E.ILLEGAL_GENERATION}
    assert txn_commit(h, [("t", 0, 3, -1, "")], member_id="zombie",
                      generation=generation) == {("t", 0): E.UNKNOWN_MEMBER_ID}
    # An old client (v0-2) names nobody: accepted even though the group has members.
    assert txn_commit(h, [("t", 0, 4, -1, "")]) == {("t", 0): E.NONE}


def test_a_failed_append_leaves_nothing_pending():
    h = Harness()
    h.append_error = E.NOT_LEADER_OR_FOLLOWER
    assert txn_commit(h, [("t", 0, 10, -1, "")]) == {("t", 0): E.NOT_COORDINATOR}
    assert fetch(h, True, partitions=[("t", 0)]) == {("t", 0): (-1, E.NONE)}


def test_the_load_path_applies_markers_found_in_the_log():
    """What the runtime appends (a transactional batch per producer, markers from
    WriteTxnMarkers), replayed into a fresh manager: the same offsets."""
    h = Harness()
    txn_commit(h, [("t", 0, 10, -1, "")], pid=PID)
    txn_commit(h, [("t", 1, 11, -1, "")], pid=PID + 1)
    txn_commit(h, [("t", 2, 12, -1, "")], pid=PID + 2)
    records = h.log
    log = (build_batch([records[0]], h.now, PID, EPOCH)
           + build_batch([records[1]], h.now, PID + 1, EPOCH)
           + build_batch([records[2]], h.now, PID + 2, EPOCH)
           + build_control_batch(ControlRecordType.COMMIT, PID, EPOCH, 0, h.now)
           + build_control_batch(ControlRecordType.ABORT, PID + 1, EPOCH, 0, h.now))
    fresh = GroupManager(GroupConfig())
    assert replay_buffer(fresh, log, h.now, 0) == {G}
    answer = {(p.topic, p.partition): (p.offset, p.error)
              for p in fresh.fetch_offsets(G, [("t", 0), ("t", 1), ("t", 2)], True).partitions}
    assert answer == {("t", 0): (10, E.NONE), ("t", 1): (-1, E.NONE),
                      ("t", 2): (-1, E.UNSTABLE_OFFSET_COMMIT)}
