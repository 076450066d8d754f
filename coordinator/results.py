"""What the pure group manager returns, and its configuration.

Every operation of `GroupManager` takes its arguments plus `now_ms` and returns a `Result`:

    appends     `Append(records, on_append)` items: `__consumer_offsets` records to write, in
                order (coordinator.records.Record), and the follow-up to call as
                `on_append(error_code, now_ms)` once they were appended or failed; it replays
                them and returns the follow-up Result. When a follow-up's `response` is set, it
                answers THIS request (only the operation's own append ever sets one).
    response    the answer to THIS request, or None when the request is parked (a JoinGroup
                waiting for the rebalance, a SyncGroup waiting for the leader's assignment)
    completions (token, response) pairs answering requests parked earlier
    timers      (key, deadline_ms) wake-ups: the runtime calls `manager.on_timer(key, now_ms)`
                at (or after) the deadline. A wake-up may be early or stale; the manager checks
                the real deadline it keeps, so the runtime may coalesce or keep the earliest.

Responses are coordinator-level dataclasses, independent of wire versions: the handlers in
broker/handlers/ turn them into JoinGroupResponse etc. for the request's version.
"""
from dataclasses import dataclass, field
from typing import Callable

from coordinator.records import Record

NO_GENERATION = -1
UNKNOWN_MEMBER_ID = ""


@dataclass(frozen=True)
class GroupConfig:
    """Kafka's group settings (property names in comments; defaults are Kafka 3.x's)."""
    min_session_timeout_ms: int = 6000            # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1800000         # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3000        # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1                     # group.max.size
    offset_metadata_max_bytes: int = 4096         # offset.metadata.max.bytes
    offsets_retention_ms: int = 10080 * 60_000    # offsets.retention.minutes (7 days)
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    offsets_commit_timeout_ms: int = 5000         # offsets.commit.timeout.ms (acks wait)
    offsets_load_buffer_size: int = 5 * 1024 * 1024  # offsets.load.buffer.size
    # Kafka's GroupCoordinator.NewMemberJoinTimeoutMs: a new member that never completes its
    # first join (its client went away mid-rebalance) is dropped after this long.
    new_member_join_timeout_ms: int = 300_000


@dataclass
class Append:
    records: list[Record]
    on_append: Callable[[int, int], "Result"]
    # A transaction's offset commits (TxnOffsetCommit): written as a transactional batch of
    # this producer, so its COMMIT or ABORT marker decides them.
    producer_id: int = -1
    producer_epoch: int = -1
    # Its verification guard when the broker verified the transaction first (TxnOffsetCommit,
    # KIP-890; broker/txn_verification.py): the append is refused if a marker ended the
    # transaction meanwhile.
    verification: object = None


@dataclass
class Result:
    response: object = None
    completions: list[tuple[object, object]] = field(default_factory=list)
    timers: list[tuple[tuple, int]] = field(default_factory=list)
    appends: list[Append] = field(default_factory=list)

    @property
    def records(self) -> list[Record]:
        return [record for append in self.appends for record in append.records]

    def absorb(self, other: "Result") -> "Result":
        """Adds another result's side effects (not its response) to this one."""
        self.appends.extend(other.appends)
        self.completions.extend(other.completions)
        self.timers.extend(other.timers)
        return self


@dataclass
class JoinResponse:
    error: int
    member_id: str = UNKNOWN_MEMBER_ID
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    # For the leader only: (member_id, group_instance_id, metadata of the chosen protocol)
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass
class SyncResponse:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass
class LeaveResponse:
    error: int
    members: list[tuple[str, str | None, int]] = field(default_factory=list)


@dataclass
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass
class GroupDescription:
    group_id: str
    error: int
    state: str
    protocol_type: str = ""
    protocol_data: str = ""
    members: list[MemberDescription] = field(default_factory=list)


@dataclass
class GroupListing:
    group_id: str
    protocol_type: str
    state: str


@dataclass
class PartitionOffset:
    topic: str
    partition: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str = ""
    error: int = 0


@dataclass
class GroupOffsets:
    """OffsetFetch's answer for one group: a group-level error or per-partition offsets."""
    group_id: str
    error: int = 0
    partitions: list[PartitionOffset] = field(default_factory=list)
