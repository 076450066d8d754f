"""Group metadata <-> `__consumer_offsets` records: what a generation writes, and the load path.

`group_record` is the GroupMetadataValue Kafka writes when a generation's assignment is stored
(and when a group becomes Empty): the protocol type, generation, selected protocol, leader and
every member with its subscription (the selected protocol's metadata) and assignment.
`replay_group` rebuilds a group from its latest record when `__consumer_offsets` is loaded: a
group with members is Stable, one without is Empty (Kafka's GroupMetadata.loadGroup); a
tombstone removes the group unless offsets remain, which Kafka keeps as a simple Empty group.
"""
from coordinator.group.model import Group, Member
from coordinator.group.state import GroupState
from coordinator.records import GroupKey, GroupValue, MemberRecord, Record

S = GroupState


def group_record(group: Group, now_ms: int, assignments: dict[str, bytes]) -> Record:
    members = [MemberRecord(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                            m.rebalance_timeout_ms, m.session_timeout_ms,
                            m.metadata(group.protocol_name), assignments.get(m.member_id, b""))
               for m in group.members.values()]
    return Record(GroupKey(group.group_id), GroupValue(
        protocol_type=group.protocol_type or "", generation=group.generation_id,
        protocol=group.protocol_name, leader=group.leader_id,
        current_state_timestamp=-1 if group.state_timestamp_ms is None   # Kafka's OrDefault
        else group.state_timestamp_ms, members=members))


def replay_group(groups: dict[str, Group], key: GroupKey, value: GroupValue | None,
                 now_ms: int) -> None:
    """Load path: rebuilds a group from its latest GroupMetadata record (or tombstone)."""
    group = groups.get(key.group)
    if value is None:
        if group is not None:
            if group.offsets or group.pending_offset_commits or group.pending_txn_offsets:
                # Offsets outlive a group tombstone (Kafka loads them as a simple group).
                fresh = Group(key.group, now_ms)
                fresh.offsets = group.offsets
                fresh.offset_order = group.offset_order
                fresh.pending_txn_offsets = group.pending_txn_offsets
                groups[key.group] = fresh
            else:
                del groups[key.group]
        return
    if group is None:
        group = groups[key.group] = Group(key.group, now_ms)
    group.members.clear()
    group.static_members.clear()
    group.pending_members.clear()
    group.num_awaiting_join = 0
    group.protocol_type = value.protocol_type or None
    group.generation_id = value.generation
    group.protocol_name = value.protocol
    group.leader_id = value.leader if value.members else None
    ts = value.current_state_timestamp
    group.state_timestamp_ms = ts if ts >= 0 else None      # None: not in the record (v0/v1)
    for rec in value.members:
        protocols = [(value.protocol, rec.subscription)] if value.protocol else []
        member = Member(rec.member_id, rec.group_instance_id, rec.client_id, rec.client_host,
                        rec.rebalance_timeout_ms if rec.rebalance_timeout_ms >= 0
                        else rec.session_timeout_ms, rec.session_timeout_ms,
                        group.protocol_type or "", protocols)
        member.assignment = rec.assignment
        group.add(member, None)
    group.state = S.STABLE if group.members else S.EMPTY
    group.init_subscribed_topics()
