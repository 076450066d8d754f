"""Static membership (KIP-345): a known group.instance.id rejoining under a new member id.

`StaticMembership` is mixed into `GroupManager` (coordinator/group/manager.py) and uses its
helpers (`_answer_parked`, `_schedule_heartbeat`, `_prepare_rebalance`, `_try_complete_join`,
`_join_response`). A static member that restarts (JoinGroup with its instance id and no member
id) takes over its old slot: the old incarnation is fenced, and in a Stable group whose selected
protocol would not change the group stays Stable. The new member id is persisted with the
current assignments and the member gets its generation back, so no rebalance happens (Kafka's
updateStaticMemberAndRebalance). If that write fails, or the generation moved meanwhile, the
replacement is undone.
"""
from protocol.errors import ErrorCode

from coordinator.group.model import Group, Member
from coordinator.group.persistence import group_record
from coordinator.group.state import GroupState
from coordinator.offsets import map_append_error
from coordinator.results import Append, JoinResponse, Result

E = ErrorCode
S = GroupState


class StaticMembership:
    """Concurrency: on the loop, as the GroupManager it is part of."""

    def _replace_static_member(self, group, old_id, new_id, protocols, rebalance_timeout_ms,
                               session_timeout_ms, token, now_ms,
                               supports_skip_assignment=False) -> Result:
        """KIP-345: a known group.instance.id joined with an unknown member id (a restart)."""
        current_leader = group.leader_id
        member = group.members[old_id]
        # the replaced incarnation's parked requests: it is a zombie now
        result = self._answer_parked(group, member, E.FENCED_INSTANCE_ID)
        old = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        self._rename_member(group, member, new_id)
        result.timers.append(self._schedule_heartbeat(group, member, now_ms))
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        group.set_join_token(member, token)

        instance = member.group_instance_id
        if group.state is S.STABLE:
            if group.select_protocol() != group.protocol_name:
                return result.absorb(self._prepare_rebalance(
                    group, now_ms, f"Group's selectedProtocol will change because static member "
                                   f"{new_id} with instance id Some({instance}) joined with "
                                   f"change of protocol; client reason: not provided"))
            # Same protocol: no rebalance. Persist the new member id and hand the member its
            # generation back. Before v9 the old leader id is returned, so a restarted leader
            # does not compute an assignment a stable group would not send; v9+ says
            # skip_assignment instead.
            generation = group.generation_id
            assignments = {m.member_id: m.assignment for m in group.members.values()}
            record = group_record(group, now_ms, assignments)

            def on_append(error: int, now: int) -> Result:
                follow = Result()
                if member.join_token is None:        # answered meanwhile (fenced again, removed)
                    return follow
                if error != E.NONE or group.generation_id != generation:
                    member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms = old
                    if group.members.get(new_id) is member:
                        self._rename_member(group, member, old_id)
                        follow.timers.append(self._schedule_heartbeat(group, member, now))
                    token_ = member.join_token
                    group.set_join_token(member, None)
                    code = map_append_error(error) if error != E.NONE else E.REBALANCE_IN_PROGRESS
                    follow.completions.append((token_, JoinResponse(code)))
                    return follow
                token_ = member.join_token
                group.set_join_token(member, None)
                follow.timers.append(self._schedule_heartbeat(group, member, now))
                if supports_skip_assignment:
                    # v9+: the leader learns it leads (and gets the members, to keep watching
                    # metadata) but must not run its assignor (KIP-814's skip_assignment).
                    answer = self._join_response(group, member, with_members=True)
                    answer.skip_assignment = group.is_leader(new_id)
                else:
                    answer = JoinResponse(
                        E.NONE, member_id=new_id, generation_id=generation,
                        protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                        leader=current_leader or "")
                follow.completions.append((token_, answer))
                return follow
            result.appends.append(Append([record], on_append))
            return result
        if group.state is S.COMPLETING_REBALANCE:
            # Its assignment would be computed for the old id: run another rebalance.
            return result.absorb(self._prepare_rebalance(
                group, now_ms, f"Updating metadata for static member {new_id} with instance id "
                               f"Some({instance}); client reason: not provided"))
        if group.state is S.PREPARING_REBALANCE:
            return result.absorb(self._try_complete_join(group, now_ms))
        raise AssertionError(f"static member in a {group.state.value} group {group.group_id}")

    @staticmethod
    def _rename_member(group: Group, member: Member, new_id: str) -> None:
        old_id = member.member_id
        del group.members[old_id]
        member.member_id = new_id
        group.members[new_id] = member
        group.static_members[member.group_instance_id] = new_id
        if group.leader_id == old_id:
            group.leader_id = new_id
        if old_id in group.pending_sync:
            group.pending_sync.discard(old_id)
            group.pending_sync.add(new_id)
