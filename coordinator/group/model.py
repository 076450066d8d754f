"""The in-memory model of one classic group: its members, generation, protocol and offsets.

Plain data plus the small queries Kafka's GroupMetadata answers (protocol candidates, votes,
static-member lookup). Nothing here schedules, appends or answers requests: the GroupManager does
that. All methods run on the event loop (the manager is single-threaded by construction).

A member's `protocols` keeps the client's order: that order is its preference when voting.
`join_token` / `sync_token` hold the opaque token of a parked JoinGroup / SyncGroup request
(the runtime's future); the manager hands them back in completions.
"""
from dataclasses import dataclass

from protocol.errors import ErrorCode

from coordinator.group.state import GroupState, check_transition


@dataclass(slots=True)
class OffsetAndMetadata:
    """One committed offset, as stored in an OffsetCommitValue record."""
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1       # only set by OffsetCommit v2-v4 with retention_time_ms != -1


class Member:
    __slots__ = ("member_id", "group_instance_id", "client_id", "client_host",
                 "rebalance_timeout_ms", "session_timeout_ms", "protocol_type", "protocols",
                 "assignment", "join_token", "sync_token", "heartbeat_deadline_ms", "is_new")

    def __init__(self, member_id: str, group_instance_id: str | None, client_id: str,
                 client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
                 protocol_type: str, protocols: list[tuple[str, bytes]]):
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols
        self.assignment = b""
        self.join_token = None
        self.sync_token = None
        self.heartbeat_deadline_ms: int | None = None
        self.is_new = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def awaiting_join(self) -> bool:
        return self.join_token is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_token is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol_name: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols, same metadata, same order (Kafka's MemberMetadata.matches)."""
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among the candidates."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def __repr__(self):
        return f"Member({self.member_id!r}, instance={self.group_instance_id!r})"


class Group:
    """One group's state. Offsets live here too: a group is also the unit of offset storage."""

    def __init__(self, group_id: str, now_ms: int, state: GroupState = GroupState.EMPTY):
        self.group_id = group_id
        self.state = state
        # Kafka's currentStateTimestamp (None for a group loaded from a record without it)
        self.state_timestamp_ms: int | None = now_ms
        # while Dead awaiting its tombstones: (the state timestamp it had), for `_revive`
        self.empty_since: tuple | None = None
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}      # insertion order: the next leader is the oldest
        self.pending_members: dict[str, int] = {}  # KIP-394: member id -> join deadline (ms)
        self.static_members: dict[str, str] = {}   # group.instance.id -> member id
        self.pending_sync: set[str] = set()        # members expected to SyncGroup this generation
        self.num_awaiting_join = 0
        # Rebalance timers: the current join/sync deadline; the initial-delay bookkeeping of
        # Kafka's InitialDelayedJoin (group.initial.rebalance.delay.ms, extended per new member).
        self.join_deadline_ms: int | None = None
        self.join_is_initial = False
        self.initial_delay_ms = 0
        self.initial_remaining_ms = 0
        self.new_member_added = False
        self.sync_deadline_ms: int | None = None
        self.offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        # Offsets written but not yet appended (their commit response is still waiting).
        self.pending_offset_commits: dict[tuple[str, int], int] = {}
        # How many times a partition's offsets were deleted (OffsetDelete, topic deletion)
        # with commits in flight: a commit staged before such a deletion is not applied.
        self.offset_deletions: dict[tuple[str, int], int] = {}
        # Transactions' offsets (TxnOffsetCommit): producer id -> {tp: (offset, order)}, kept
        # out of `offsets` until the transaction's COMMIT marker (dropped on ABORT). `order`
        # places each offset in the log's order (a later plain commit wins over them).
        self.pending_txn_offsets: dict[int, dict[tuple[str, int], tuple]] = {}
        self.offset_order: dict[tuple[str, int], int] = {}
        self._subscribed_topics: set[str] | None = None     # see subscribed_topics()

    # -- state -------------------------------------------------------------------------------
    def transition_to(self, target: GroupState, now_ms: int) -> None:
        check_transition(self.group_id, self.state, target)
        self.state = target
        self.state_timestamp_ms = now_ms

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    # -- membership ----------------------------------------------------------------------------
    def add(self, member: Member, join_token) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        if member.is_static:
            self.static_members[member.group_instance_id] = member.member_id
        if join_token is not None:
            member.join_token = join_token
            self.num_awaiting_join += 1

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.awaiting_join:
            self.num_awaiting_join -= 1
            member.join_token = None
        if member.is_static and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def set_join_token(self, member: Member, token) -> None:
        if member.join_token is None and token is not None:
            self.num_awaiting_join += 1
        elif member.join_token is not None and token is None:
            self.num_awaiting_join -= 1
        member.join_token = token

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_members

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def static_member_id(self, group_instance_id: str | None) -> str | None:
        if group_instance_id is None:
            return None
        return self.static_members.get(group_instance_id)

    def member_error(self, member_id: str, group_instance_id: str | None) -> int:
        """Is the caller a current member (Kafka's validateCurrentMember)? An error code or 0.

        With a group.instance.id: FENCED_INSTANCE_ID if the instance maps to ANOTHER member id
        (the caller is a zombie, KIP-345), UNKNOWN_MEMBER_ID if the instance is unknown. Then
        the member id must be in the group (UNKNOWN_MEMBER_ID)."""
        if group_instance_id is not None:
            current = self.static_members.get(group_instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        return ErrorCode.NONE if member_id in self.members else ErrorCode.UNKNOWN_MEMBER_ID

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocol selection -------------------------------------------------------------------
    def candidate_protocols(self) -> set[str]:
        """Protocols every current member supports."""
        members = iter(self.members.values())
        first = next(members, None)
        if first is None:
            return set()
        candidates = set(first.protocol_names())
        for member in members:
            candidates.intersection_update(member.protocol_names())
        return candidates

    def supports_protocols(self, protocol_type: str, protocol_names: list[str]) -> bool:
        """Could a member with these protocols join (Kafka's GroupMetadata.supportsProtocols)?

        An empty group takes any non-empty type and list. Otherwise the type must match and at
        least one of the protocols must be supported by every member, a rejoining member's own
        current protocols included, as Kafka counts them (its supportedProtocols)."""
        if self.state is GroupState.EMPTY or not self.members:
            return bool(protocol_type) and bool(protocol_names)
        if protocol_type != self.protocol_type:
            return False
        candidates = set(protocol_names)
        for member in self.members.values():
            candidates.intersection_update(member.protocol_names())
            if not candidates:
                return False
        return bool(candidates)

    def select_protocol(self) -> str:
        """Each member votes for its first supported candidate; the most votes wins.

        Kafka breaks a tie by hash-map order; we break it by the leader's preference (then the
        name) so the choice is deterministic."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        leader = self.members.get(self.leader_id) if self.leader_id else None
        preference = leader.protocol_names() if leader else []

        def rank(name):
            order = preference.index(name) if name in preference else len(preference)
            return (-votes[name], order, name)
        return min(votes, key=rank)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members of the current generation subscribe to (consumer protocol); None
        when unknown. Kafka's subscribedTopics: set when a generation starts and when the group
        is loaded, so a rebalance in progress does not change it (OffsetDelete and offset
        expiry go by the generation that is consuming)."""
        return self._subscribed_topics

    def init_subscribed_topics(self) -> None:
        """Kafka's computeSubscribedTopics, at a new generation or a load: the union of the
        members' subscriptions, the empty set for a consumer group without members, None when
        the protocol type is not "consumer", no protocol is chosen, or a subscription does not
        parse."""
        self._subscribed_topics = None
        if self.protocol_type != "consumer":
            return
        if not self.members:
            self._subscribed_topics = set()
            return
        if self.protocol_name is None:
            return
        from coordinator.group.subscription import parse_subscription_topics
        topics: set[str] = set()
        for member in self.members.values():
            parsed = parse_subscription_topics(member.metadata(self.protocol_name))
            if parsed is None:
                return
            topics.update(parsed)
        self._subscribed_topics = topics

    def __repr__(self):
        return (f"Group({self.group_id!r}, {self.state.value}, generation={self.generation_id}, "
                f"members={list(self.members)})")
