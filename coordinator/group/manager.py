"""The pure group manager: Kafka's classic group protocol as a state machine without I/O.

Theory of operation
-------------------
Every public method takes the request's arguments plus `now_ms` and returns a
`coordinator.results.Result` (this request's response or None when it is parked, completions
of requests parked earlier, timers to arm, and appends: records plus their `on_append`
follow-up, which replays them and may carry the deferred response).
There are no sockets, tasks or clocks in here: the runtime (coordinator/runtime.py) owns
futures, timers and the log; tests drive this class directly with a fake `now_ms`.

Parked requests are identified by an opaque `token` the caller passes in (the runtime uses a
future). A JoinGroup is parked until the rebalance's join phase completes; a SyncGroup from a
follower until the leader's assignment is written. Every token is eventually answered: by the
rebalance, by a fencing/removal error, or by a later request replacing it.

Timers are keys with deadlines. The manager keeps the authoritative deadline on the group or
member and re-checks it when `on_timer(key, now_ms)` is called, so a runtime may fire early,
late or twice without harm:
    ("heartbeat", group_id, member_id)  session timeout (or new-member join timeout)
    ("pending", group_id, member_id)    KIP-394: a member id handed out but never used
    ("join", group_id)                  end of the join phase (rebalance timeout, or
                                        group.initial.rebalance.delay.ms for an empty group)
    ("sync", group_id)                  members that never sent SyncGroup are dropped
    ("expire-offsets",)                 offsets.retention.check.interval.ms (see offsets.py)

What is persisted and how
-------------------------
Offsets change ONLY by replaying records (`replay`): a commit returns OffsetCommit records, and
when the runtime reports them appended, `on_append` replays them; loading `__consumer_offsets`
at start-up replays the same records through the same function. Group metadata is written when
a generation's assignment is stored (leader's SyncGroup), when a group becomes Empty, and as a
tombstone when it is deleted; `replay` rebuilds a group from it on load (members of a loaded
group are Stable and get a fresh session timeout, like Kafka's onGroupLoaded; see
group/persistence.py). Live, the generation's state is applied by the write's follow-up, after
the record is in the log. The transient rebalance state (who has rejoined, parked requests)
lives only in memory, as in Kafka.

Behaviour follows Apache Kafka 3.x's GroupCoordinator (classic protocol) step for step; where it
differs it says so (ties in protocol votes, answering replaced parked requests). It logs at INFO
what Kafka's logs (a member joining, a rebalance starting and why, a generation stabilizing, a
member's session expiring or its LeaveGroup, groups loaded and unloaded), in Kafka's words so
that a search for Kafka's log line finds kbroker's too. Logging is the one side effect here; it
changes nothing. The offset
operations are in coordinator/offsets.py and a static member's restart in group/static.py, both
mixed into GroupManager.
"""
import logging
import uuid

from protocol.errors import ErrorCode

from coordinator.group.model import Group, Member
from coordinator.group.persistence import group_record, replay_group
from coordinator.group.state import CAN_REBALANCE, GroupState
from coordinator.group.static import StaticMembership
from coordinator.offsets import OffsetOperations, is_bare_simple_group, map_append_error
from coordinator.results import (UNKNOWN_MEMBER_ID, Append, GroupConfig, JoinResponse,
                                 LeaveResponse, Result, SyncResponse)

E = ErrorCode
S = GroupState
log = logging.getLogger(__name__)
NO_CLIENT_REASON = "not provided"    # Kafka's text when a request carries no reason (KIP-800)


def _option(value) -> str:
    """A nullable value as Kafka's Scala code prints an Option."""
    return "None" if value is None else f"Some({value})"


def describe_member(member: Member) -> str:
    """A member as Kafka prints a MemberMetadata in its log lines."""
    return (f"MemberMetadata(memberId={member.member_id}, groupInstanceId="
            f"{_option(member.group_instance_id)}, clientId={member.client_id}, clientHost="
            f"{member.client_host}, sessionTimeoutMs={member.session_timeout_ms}, "
            f"rebalanceTimeoutMs={member.rebalance_timeout_ms}, supportedProtocols="
            f"List({', '.join(member.protocol_names())}))")


def default_member_id(prefix: str) -> str:
    """Kafka's member id: client id (or group.instance.id) + "-" + a random UUID."""
    return f"{prefix}-{uuid.uuid4()}"


class GroupManager(StaticMembership, OffsetOperations):
    """All groups of this coordinator. Concurrency: on the loop (single-threaded)."""

    def __init__(self, config: GroupConfig | None = None, member_id_factory=default_member_id,
                 *, log_ident: str = "[GroupCoordinator]: ", partition_for=None):
        """`log_ident` starts every log line (the runtime names the broker, as Kafka's
        "[GroupCoordinator 0]: "); `partition_for(group_id)` -> the group's __consumer_offsets
        partition, for the log lines that name it."""
        self.config = config or GroupConfig()
        self.groups: dict[str, Group] = {}
        self._new_member_id = member_id_factory
        self.log_ident = log_ident
        self.partition_for = partition_for
        self._offset_seq = 0            # the log order of offset commits (coordinator/offsets.py)

    def _info(self, message: str) -> None:
        log.info("%s%s", self.log_ident, message)

    def _partition_text(self, group: Group) -> str:
        p = self.partition_for(group.group_id) if self.partition_for is not None else None
        return "" if p is None else f" (__consumer_offsets-{p})"

    def group(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    # ------------------------------------------------------------------------------ JoinGroup
    def join_group(self, group_id: str, member_id: str, group_instance_id: str | None,
                   client_id: str, client_host: str, session_timeout_ms: int,
                   rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member_id: bool,
                   token, now_ms: int, supports_skip_assignment: bool = False) -> Result:
        """JoinGroup (all versions). `require_known_member_id` is True from v4 (KIP-394);
        `supports_skip_assignment` from v9 (a restarted static leader of a Stable group is
        told it leads, with skip_assignment set, instead of being given the old leader id)."""
        def fail(error, mid=UNKNOWN_MEMBER_ID):
            return Result(response=JoinResponse(error, member_id=mid))

        if not group_id:
            return fail(E.INVALID_GROUP_ID, member_id)
        cfg = self.config
        if not cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms:
            return fail(E.INVALID_SESSION_TIMEOUT, member_id)
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        group = self.groups.get(group_id)
        if group is None:
            if not is_unknown:
                return fail(E.UNKNOWN_MEMBER_ID, member_id)
            group = self.groups[group_id] = Group(group_id, now_ms)
        if not self._accept_joining_member(group, member_id):
            result = Result(response=JoinResponse(E.GROUP_MAX_SIZE_REACHED))
            member = group.members.get(member_id)
            if member is not None:
                result.absorb(self._remove_member_and_update_group(
                    group, member, now_ms, f"Removing member {member_id} since the group is at "
                                           f"group.max.size ({self.config.max_size})"))
            group.pending_members.pop(member_id, None)
            return result
        names = [name for name, _ in protocols]
        if group.state is S.DEAD:
            return fail(E.COORDINATOR_NOT_AVAILABLE, member_id)
        if not group.supports_protocols(protocol_type, names):
            return fail(E.INCONSISTENT_GROUP_PROTOCOL, member_id)
        args = (group_instance_id, client_id, client_host, rebalance_timeout_ms,
                session_timeout_ms, protocol_type, protocols, token, now_ms)
        if is_unknown:
            return self._join_new_member(group, require_known_member_id, *args,
                                         supports_skip_assignment=supports_skip_assignment)
        return self._join_known_member(group, member_id, *args)

    def _accept_joining_member(self, group: Group, member_id: str) -> bool:
        """group.max.size, counted the way Kafka counts it (see acceptJoiningMember)."""
        if group.state in (S.EMPTY, S.DEAD):
            return True
        member = group.members.get(member_id)
        if group.state is S.PREPARING_REBALANCE:
            # Awaiting members, not all members: a shrunk max size kicks out the last rejoiners.
            return (member is not None and member.awaiting_join) or \
                group.num_awaiting_join < self.config.max_size
        return member is not None or len(group.members) < self.config.max_size

    def _join_new_member(self, group, require_known_member_id, group_instance_id, client_id,
                         client_host, rebalance_timeout_ms, session_timeout_ms, protocol_type,
                         protocols, token, now_ms, supports_skip_assignment=False) -> Result:
        new_id = self._new_member_id(group_instance_id or client_id)
        state = group.state.value
        if group_instance_id is not None:
            old_id = group.static_member_id(group_instance_id)
            if old_id is not None:
                self._info(f"Static member with groupInstanceId={group_instance_id} and unknown "
                           f"member id joins group {group.group_id} in {state} state. Replacing "
                           f"previously mapped member {old_id} with this groupInstanceId.")
                return self._replace_static_member(group, old_id, new_id, protocols,
                                                   rebalance_timeout_ms, session_timeout_ms,
                                                   token, now_ms, supports_skip_assignment)
            self._info(f"Static member with groupInstanceId={group_instance_id} and unknown "
                       f"member id joins group {group.group_id} in {state} state. Created a new "
                       f"member id {new_id} for this member and add to the group.")
        elif require_known_member_id:
            # KIP-394: hand out the id and wait for the member to come back with it; until then
            # the rebalance waits for it (bounded by the session timeout).
            self._info(f"Dynamic member with unknown member id joins group {group.group_id} in "
                       f"{state} state. Created a new member id {new_id} and request the member "
                       f"to rejoin with this id.")
            deadline = now_ms + session_timeout_ms
            group.pending_members[new_id] = deadline
            return Result(response=JoinResponse(E.MEMBER_ID_REQUIRED, member_id=new_id),
                          timers=[(("pending", group.group_id, new_id), deadline)])
        else:
            self._info(f"Dynamic Member with unknown member id joins group {group.group_id} in "
                       f"{state} state. Created a new member id {new_id} for this member and "
                       f"add to the group.")
        return self._add_member_and_rebalance(group, new_id, group_instance_id, client_id,
                                              client_host, rebalance_timeout_ms,
                                              session_timeout_ms, protocol_type, protocols,
                                              token, now_ms)

    def _join_known_member(self, group, member_id, group_instance_id, client_id, client_host,
                           rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                           token, now_ms) -> Result:
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            return self._add_member_and_rebalance(group, member_id, group_instance_id,
                                                  client_id, client_host, rebalance_timeout_ms,
                                                  session_timeout_ms, protocol_type, protocols,
                                                  token, now_ms)
        error = group.member_error(member_id, group_instance_id)
        if error == E.NONE and group.state in (S.EMPTY, S.DEAD):
            error = E.UNKNOWN_MEMBER_ID
        if error != E.NONE:
            return Result(response=JoinResponse(error, member_id=member_id))
        member = group.members[member_id]
        if group.state is S.COMPLETING_REBALANCE and member.matches(protocols):
            # It missed the JoinGroup response: answer again with this generation.
            return Result(response=self._join_response(group, member, with_members=True))
        if group.state is S.STABLE and not group.is_leader(member_id) and member.matches(protocols):
            # A follower with unchanged metadata: no rebalance, just the current generation.
            return Result(response=self._join_response(group, member, with_members=False))
        # PreparingRebalance, changed metadata, or the leader asking for a new assignment.
        return self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                                 session_timeout_ms, token, now_ms)

    def _join_response(self, group: Group, member: Member, with_members: bool) -> JoinResponse:
        members = []
        if with_members and group.is_leader(member.member_id):
            members = [(m.member_id, m.group_instance_id, m.metadata(group.protocol_name))
                       for m in group.members.values()]
        return JoinResponse(E.NONE, member_id=member.member_id, generation_id=group.generation_id,
                            protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                            leader=group.leader_id or "", members=members)

    def _add_member_and_rebalance(self, group, member_id, group_instance_id, client_id,
                                  client_host, rebalance_timeout_ms, session_timeout_ms,
                                  protocol_type, protocols, token, now_ms) -> Result:
        member = Member(member_id, group_instance_id, client_id, client_host,
                        rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols)
        member.is_new = True
        if group.state is S.PREPARING_REBALANCE and group.generation_id == 0:
            group.new_member_added = True       # lets the initial delay extend once more
        group.add(member, token)
        # A new member cannot heartbeat yet; it is dropped if its first join never completes.
        result = Result(timers=[self._schedule_heartbeat(
            group, member, now_ms, self.config.new_member_join_timeout_ms)])
        reason = (f"Adding new member {member_id} with group instance id "
                  f"{_option(group_instance_id)}; client reason: {NO_CLIENT_REASON}")
        return result.absorb(self._rebalance_or_try_complete(group, now_ms, reason))

    def _update_member_and_rebalance(self, group, member, protocols, rebalance_timeout_ms,
                                     session_timeout_ms, token, now_ms) -> Result:
        result = Result()
        if member.join_token is not None and member.join_token is not token:
            # A second JoinGroup while the first is parked: Kafka drops the first silently; we
            # answer it so no request hangs.
            result.completions.append(
                (member.join_token, JoinResponse(E.REBALANCE_IN_PROGRESS, member.member_id)))
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        reason = (f"Updating metadata for member {member.member_id} during {group.state.value}; "
                  f"client reason: {NO_CLIENT_REASON}")
        group.set_join_token(member, token)
        return result.absorb(self._rebalance_or_try_complete(group, now_ms, reason))

    def _rebalance_or_try_complete(self, group: Group, now_ms: int, reason: str) -> Result:
        if group.state in CAN_REBALANCE:
            return self._prepare_rebalance(group, now_ms, reason)
        if group.state is S.PREPARING_REBALANCE:
            return self._try_complete_join(group, now_ms)
        return Result()

    @staticmethod
    def _answer_parked(group: Group, member: Member, error: int) -> Result:
        """Answers the member's parked JoinGroup/SyncGroup (if any) with `error`."""
        result = Result()
        if member.join_token is not None:
            result.completions.append(
                (member.join_token, JoinResponse(error, member.member_id)))
            group.set_join_token(member, None)
        if member.sync_token is not None:
            result.completions.append((member.sync_token, SyncResponse(error)))
            member.sync_token = None
        return result

    # ---------------------------------------------------------------------------- rebalancing
    def _prepare_rebalance(self, group: Group, now_ms: int, reason: str) -> Result:
        """Kafka's prepareRebalance; `reason` is logged, in Kafka's words."""
        result = Result()
        if group.state is S.COMPLETING_REBALANCE:
            result.absorb(self._propagate_assignment_error(group, E.REBALANCE_IN_PROGRESS,
                                                           now_ms))
        group.pending_sync.clear()
        group.sync_deadline_ms = None
        was_empty = group.state is S.EMPTY
        group.transition_to(S.PREPARING_REBALANCE, now_ms)
        self._info(f"Preparing to rebalance group {group.group_id} in state "
                   f"{group.state.value} with old generation {group.generation_id}"
                   f"{self._partition_text(group)} (reason: {reason})")
        if was_empty:
            # Kafka's InitialDelayedJoin: wait group.initial.rebalance.delay.ms for more members,
            # extending while new ones keep arriving, up to the rebalance timeout.
            delay = self.config.initial_rebalance_delay_ms
            group.join_is_initial = True
            group.initial_delay_ms = delay
            group.initial_remaining_ms = max(group.rebalance_timeout_ms() - delay, 0)
            group.new_member_added = False
        else:
            delay = group.rebalance_timeout_ms()
            group.join_is_initial = False
        group.join_deadline_ms = now_ms + delay
        result.timers.append((("join", group.group_id), group.join_deadline_ms))
        if not was_empty:
            result.absorb(self._try_complete_join(group, now_ms))
        return result

    def _try_complete_join(self, group: Group, now_ms: int) -> Result:
        if (group.state is S.PREPARING_REBALANCE and not group.join_is_initial
                and group.has_all_members_joined()):
            return self._complete_join(group, now_ms)
        return Result()

    def _on_join_timer(self, group: Group, now_ms: int) -> Result:
        if group.state is not S.PREPARING_REBALANCE or group.join_deadline_ms is None:
            return Result()
        if now_ms < group.join_deadline_ms:
            return Result(timers=[(("join", group.group_id), group.join_deadline_ms)])
        if group.join_is_initial and group.new_member_added and group.initial_remaining_ms > 0:
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, group.initial_remaining_ms)
            group.initial_remaining_ms = max(group.initial_remaining_ms - group.initial_delay_ms, 0)
            group.initial_delay_ms = delay
            group.join_deadline_ms = now_ms + delay
            return Result(timers=[(("join", group.group_id), group.join_deadline_ms)])
        return self._complete_join(group, now_ms)

    def _complete_join(self, group: Group, now_ms: int) -> Result:
        """End of the join phase (Kafka's onCompleteJoin)."""
        result = Result()
        dropped = [m for m in group.not_yet_rejoined() if not m.is_static]
        if dropped:             # static members keep their place until they expire
            self._info(f"Group {group.group_id} removed dynamic members who haven't joined: "
                       f"Set({', '.join(m.member_id for m in dropped)})")
        for member in dropped:
            result.absorb(self._drop_member(group, member))
        group.join_deadline_ms = None
        group.join_is_initial = False
        if not self._elect_joined_leader(group) and group.members:
            # Only static members that have not rejoined are left: wait another round.
            group.join_deadline_ms = now_ms + group.rebalance_timeout_ms()
            result.timers.append((("join", group.group_id), group.join_deadline_ms))
            return result
        group.generation_id += 1
        if not group.members:
            self._info(f"Group {group.group_id} with generation {group.generation_id} is now "
                       f"empty{self._partition_text(group)}")
            group.protocol_name = None
            group.init_subscribed_topics()
            group.transition_to(S.EMPTY, now_ms)
            result.appends.append(Append([group_record(group, now_ms, {})], _ignore_append))
            return result
        group.protocol_name = group.select_protocol()
        group.init_subscribed_topics()
        group.transition_to(S.COMPLETING_REBALANCE, now_ms)
        self._info(f"Stabilized group {group.group_id} generation {group.generation_id}"
                   f"{self._partition_text(group)} with {len(group.members)} members")
        for member in group.members.values():
            if member.join_token is not None:
                response = self._join_response(group, member, with_members=True)
                result.completions.append((member.join_token, response))
                group.set_join_token(member, None)
            result.timers.append(self._schedule_heartbeat(group, member, now_ms))
            member.is_new = False
        # Members that never send SyncGroup are dropped after the rebalance timeout.
        group.pending_sync = set(group.members)
        group.sync_deadline_ms = now_ms + group.rebalance_timeout_ms()
        result.timers.append((("sync", group.group_id), group.sync_deadline_ms))
        return result

    @staticmethod
    def _elect_joined_leader(group: Group) -> bool:
        """Keeps the leader if it rejoined, else picks any rejoined member; False if none."""
        if group.leader_id is None:
            return False
        if group.members[group.leader_id].awaiting_join:
            return True
        for member in group.members.values():
            if member.awaiting_join:
                group.leader_id = member.member_id
                return True
        return False

    def _on_sync_timer(self, group: Group, now_ms: int) -> Result:
        if group.sync_deadline_ms is None or group.state not in (S.COMPLETING_REBALANCE, S.STABLE):
            return Result()
        if now_ms < group.sync_deadline_ms:
            return Result(timers=[(("sync", group.group_id), group.sync_deadline_ms)])
        group.sync_deadline_ms = None
        if not group.pending_sync:
            return Result()
        result = Result()
        expired = sorted(group.pending_sync)
        for member_id in expired:
            member = group.members.get(member_id)
            if member is not None:
                result.absorb(self._drop_member(group, member))
        group.pending_sync.clear()
        reason = f"Removing Set({', '.join(expired)}) on pending sync request expiration"
        return result.absorb(self._prepare_rebalance(group, now_ms, reason))

    # ------------------------------------------------------------------------------ SyncGroup
    def sync_group(self, group_id: str, generation_id: int, member_id: str,
                   group_instance_id: str | None, protocol_type: str | None,
                   protocol_name: str | None, assignments: dict[str, bytes], token,
                   now_ms: int) -> Result:
        def fail(error):
            return Result(response=SyncResponse(error))
        if not group_id:
            return fail(E.INVALID_GROUP_ID)
        group = self.groups.get(group_id)
        if group is None:
            return fail(E.UNKNOWN_MEMBER_ID)
        if group.state is S.DEAD:
            return fail(E.COORDINATOR_NOT_AVAILABLE)
        error = group.member_error(member_id, group_instance_id)
        if error != E.NONE:
            return fail(error)
        member = group.members[member_id]
        if generation_id != group.generation_id:
            return fail(E.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            return fail(E.INCONSISTENT_GROUP_PROTOCOL)
        if group.state is S.EMPTY:
            return fail(E.UNKNOWN_MEMBER_ID)
        if group.state is S.PREPARING_REBALANCE:
            return fail(E.REBALANCE_IN_PROGRESS)
        group.pending_sync.discard(member_id)
        if group.state is S.STABLE:
            return Result(response=self._sync_response(group, member),
                          timers=[self._schedule_heartbeat(group, member, now_ms)])
        # CompletingRebalance: park until the leader's assignment is stored.
        result = Result()
        if member.sync_token is not None and member.sync_token is not token:
            result.completions.append((member.sync_token, SyncResponse(E.REBALANCE_IN_PROGRESS)))
        member.sync_token = token
        if not group.is_leader(member_id):
            return result
        static = sum(1 for m in group.members.values() if m.is_static)
        self._info(f"Assignment received from leader {member_id} for group {group.group_id} for "
                   f"generation {group.generation_id}. The group has {len(group.members)} "
                   f"members, {static} of which are static.")
        full = {mid: assignments.get(mid, b"") for mid in group.members}
        generation = group.generation_id
        record = group_record(group, now_ms, full)

        def on_append(error: int, now: int) -> Result:
            if group.state is not S.COMPLETING_REBALANCE or group.generation_id != generation:
                return Result()       # a newer rebalance already answered the parked syncs
            if error != E.NONE:
                code = map_append_error(error)
                follow = self._propagate_assignment_error(group, code, now)
                reason = (f"Error {E(code).name} when storing group assignment during SyncGroup "
                          f"(member: {member_id})")
                return follow.absorb(self._prepare_rebalance(group, now, reason))
            for m in group.members.values():
                m.assignment = full.get(m.member_id, b"")
            follow = self._propagate_assignment(group, now)
            group.transition_to(S.STABLE, now)
            return follow
        result.appends.append(Append([record], on_append))
        return result

    @staticmethod
    def _sync_response(group: Group, member: Member) -> SyncResponse:
        return SyncResponse(E.NONE, protocol_type=group.protocol_type,
                            protocol_name=group.protocol_name, assignment=member.assignment)

    def _propagate_assignment(self, group: Group, now_ms: int) -> Result:
        result = Result()
        for member in group.members.values():
            if member.sync_token is not None:
                result.completions.append((member.sync_token, self._sync_response(group, member)))
                member.sync_token = None
            result.timers.append(self._schedule_heartbeat(group, member, now_ms))
        return result

    def _propagate_assignment_error(self, group: Group, error: int, now_ms: int) -> Result:
        result = Result()
        for member in group.members.values():
            member.assignment = b""
            if member.sync_token is not None:
                result.completions.append((member.sync_token, SyncResponse(error)))
                member.sync_token = None
                # Its session may have lapsed while it waited (waiting members are not expired):
                # from this answer on it must heartbeat again, as in Kafka's propagateAssignment.
                result.timers.append(self._schedule_heartbeat(group, member, now_ms))
        return result

    # ------------------------------------------------------------------------------ Heartbeat
    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None,
                  generation_id: int, now_ms: int) -> Result:
        """Heartbeat: the answer is an error code."""
        if not group_id:
            return Result(response=E.INVALID_GROUP_ID)
        group = self.groups.get(group_id)
        if group is None:
            return Result(response=E.UNKNOWN_MEMBER_ID)
        if group.state is S.DEAD:
            return Result(response=E.COORDINATOR_NOT_AVAILABLE)
        error = group.member_error(member_id, group_instance_id)
        if error != E.NONE:
            return Result(response=error)
        member = group.members[member_id]
        if generation_id != group.generation_id:
            return Result(response=E.ILLEGAL_GENERATION)
        if group.state is S.EMPTY:
            return Result(response=E.UNKNOWN_MEMBER_ID)
        timers = [self._schedule_heartbeat(group, member, now_ms)]
        if group.state is S.PREPARING_REBALANCE:
            return Result(response=E.REBALANCE_IN_PROGRESS, timers=timers)
        return Result(response=E.NONE, timers=timers)

    def _schedule_heartbeat(self, group: Group, member: Member, now_ms: int,
                            timeout_ms: int | None = None) -> tuple:
        if timeout_ms is None:
            timeout_ms = member.session_timeout_ms
        member.heartbeat_deadline_ms = now_ms + timeout_ms
        return (("heartbeat", group.group_id, member.member_id), member.heartbeat_deadline_ms)

    def _on_heartbeat_timer(self, group: Group, member_id: str, now_ms: int) -> Result:
        member = group.members.get(member_id)
        if member is None or member.heartbeat_deadline_ms is None:
            return Result()
        if now_ms < member.heartbeat_deadline_ms:
            return Result(timers=[(("heartbeat", group.group_id, member_id),
                                   member.heartbeat_deadline_ms)])
        member.heartbeat_deadline_ms = None
        if not member.is_new and (member.awaiting_join or member.awaiting_sync):
            # Kafka: members waiting on a rebalance satisfy their heartbeat; the rebalance's
            # completion schedules the next deadline.
            return Result()
        self._info(f"Member {member_id} in group {group.group_id} has failed, removing it from "
                   f"the group")
        return self._remove_member_and_update_group(
            group, member, now_ms, f"removing member {member_id} on heartbeat expiration")

    def _on_pending_timer(self, group: Group, member_id: str, now_ms: int) -> Result:
        deadline = group.pending_members.get(member_id)
        if deadline is None:
            return Result()
        if now_ms < deadline:
            return Result(timers=[(("pending", group.group_id, member_id), deadline)])
        self._info(f"Pending member {member_id} in group {group.group_id} has been removed after "
                   f"session timeout expiration.")
        del group.pending_members[member_id]
        return self._try_complete_join(group, now_ms)

    # ----------------------------------------------------------------------------- LeaveGroup
    def leave_group(self, group_id: str, leaving: list[tuple[str, str | None]],
                    now_ms: int) -> Result:
        """LeaveGroup: `leaving` is [(member_id, group_instance_id)] (one entry before v3)."""
        if not group_id:
            return Result(response=LeaveResponse(E.INVALID_GROUP_ID))
        group = self.groups.get(group_id)
        if group is None:
            return Result(response=LeaveResponse(
                E.NONE, [(mid, iid, E.UNKNOWN_MEMBER_ID) for mid, iid in leaving]))
        if group.state is S.DEAD:
            return Result(response=LeaveResponse(E.COORDINATOR_NOT_AVAILABLE))
        result = Result()
        errors = []
        for member_id, instance_id in leaving:
            if member_id == UNKNOWN_MEMBER_ID:
                # Administrative removal by group.instance.id (KIP-345).
                current = group.static_member_id(instance_id)
                if current is None:
                    errors.append((member_id, instance_id, E.UNKNOWN_MEMBER_ID))
                    continue
                result.absorb(self._leave(group, group.members[current], now_ms))
            elif member_id in group.pending_members:
                self._info(f"Pending member with memberId={member_id} has left group "
                           f"{group.group_id} through explicit `LeaveGroup` request; client "
                           f"reason: {NO_CLIENT_REASON}")
                del group.pending_members[member_id]
                result.absorb(self._try_complete_join(group, now_ms))
            elif (error := group.member_error(member_id, instance_id)) != E.NONE:
                errors.append((member_id, instance_id, error))
                continue
            else:
                result.absorb(self._leave(group, group.members[member_id], now_ms))
            errors.append((member_id, instance_id, E.NONE))
        result.response = LeaveResponse(E.NONE, errors)
        return result

    def _leave(self, group: Group, member: Member, now_ms: int) -> Result:
        self._info(f"Member {describe_member(member)} has left group {group.group_id} through "
                   f"explicit `LeaveGroup`; client reason: {NO_CLIENT_REASON}")
        return self._remove_member_and_update_group(
            group, member, now_ms, f"Removing member {member.member_id} on LeaveGroup; client "
                                   f"reason: {NO_CLIENT_REASON}")

    def _drop_member(self, group: Group, member: Member) -> Result:
        """Removes a member, answering any parked request of it with UNKNOWN_MEMBER_ID."""
        result = self._answer_parked(group, member, E.UNKNOWN_MEMBER_ID)
        group.remove(member.member_id)
        member.heartbeat_deadline_ms = None
        return result

    def _remove_member_and_update_group(self, group: Group, member: Member, now_ms: int,
                                        reason: str) -> Result:
        result = self._drop_member(group, member)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            result.absorb(self._prepare_rebalance(group, now_ms, reason))
        elif group.state is S.PREPARING_REBALANCE:
            result.absorb(self._try_complete_join(group, now_ms))
        return result

    # ---------------------------------------------------------------------------------- timers
    def on_timer(self, key: tuple, now_ms: int) -> Result:
        kind = key[0]
        if kind == "expire-offsets":
            return self.expire_offsets(now_ms)
        group = self.groups.get(key[1])
        if group is None:
            return Result()
        if kind == "heartbeat":
            return self._on_heartbeat_timer(group, key[2], now_ms)
        if kind == "join":
            return self._on_join_timer(group, now_ms)
        if kind == "sync":
            return self._on_sync_timer(group, now_ms)
        if kind == "pending":
            return self._on_pending_timer(group, key[2], now_ms)
        raise ValueError(f"unknown timer {key!r}")

    def fail_parked(self, error: int) -> Result:
        """Answers every parked JoinGroup/SyncGroup with `error` (the coordinator is going
        away: clients then look for the coordinator again, as after Kafka's unload)."""
        result = Result()
        for group in self.groups.values():
            for member in group.members.values():
                result.absorb(self._answer_parked(group, member, error))
        return result

    def unload(self, group_ids, now_ms: int) -> Result:
        """The broker stopped leading these groups' partition (Kafka's onGroupUnloaded): each
        goes Dead and is forgotten; parked JoinGroup/SyncGroup requests are answered with
        NOT_COORDINATOR so their clients look for the new coordinator. Their timers find no
        group and do nothing; loading the partition again rebuilds them from the log."""
        result = Result()
        for group_id in group_ids:
            group = self.groups.pop(group_id, None)
            if group is None:
                continue
            self._info(f"Unloading group metadata for {group_id} with generation "
                       f"{group.generation_id}")
            for member in group.members.values():
                result.absorb(self._answer_parked(group, member, E.NOT_COORDINATOR))
            group.transition_to(S.DEAD, now_ms)
        return result

    def _replay_group(self, key, value, now_ms: int) -> None:
        replay_group(self.groups, key, value, now_ms)

    def finish_loading(self, group_ids, now_ms: int) -> Result:
        """After a partition's records were replayed (Kafka's onGroupLoaded): a group loaded
        with more members than group.max.size rebalances (the last rejoiners are refused), and
        members get a fresh session timeout. A group left with nothing is dropped."""
        result = Result()
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is not None and is_bare_simple_group(group):
                # only offsets of a transaction that was aborted: Kafka builds the groups after
                # the whole partition is read, and this one never exists
                del self.groups[group_id]
                continue
            if group is not None:
                self._info(f"Loading group metadata for {group_id} with generation "
                           f"{group.generation_id}")
                if group.state is S.STABLE and len(group.members) > self.config.max_size:
                    reason = (f"Freshly-loaded group is over capacity ({self.config.max_size}). "
                              f"Rebalancing in order to give a chance for consumers to commit "
                              f"offsets")
                    result.absorb(self._prepare_rebalance(group, now_ms, reason))
                for member in group.members.values():
                    result.timers.append(self._schedule_heartbeat(group, member, now_ms))
        return result


def _ignore_append(error: int, now_ms: int) -> Result:
    # Writing an Empty group's new generation failed: nothing waits on it (Kafka logs it too).
    return Result()
