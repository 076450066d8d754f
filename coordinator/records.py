"""The records the group coordinator writes to (and replays from) `__consumer_offsets`.

Kafka's schemas (internal-records/ in the protocol reference): a record's KEY starts with an int16
version that says what it is, its VALUE with an int16 value-schema version; a null value is a
tombstone (the offset or group was deleted; log compaction eventually drops both).

    key version 0/1  OffsetCommitKey   (group, topic, partition)  -> OffsetCommitValue v0-v4
    key version 2    GroupMetadataKey  (group)                    -> GroupMetadataValue v0-v4
    key version 3+   consumer-group (KIP-848) records: not served by this broker; skipped on load

The coordinator's pure state machine speaks in the dataclasses below; `coordinator.serde` turns
them into the bytes above and back. What we write is what Apache Kafka 3.x writes:
OffsetCommitKey v1 + OffsetCommitValue v3 (v1 when an expire timestamp is set),
GroupMetadataKey v2 + GroupMetadataValue v3.
"""
from dataclasses import dataclass, field
from typing import NamedTuple

from coordinator.group.model import OffsetAndMetadata


# Keys are NamedTuples: created and hashed on every commit, they are about twice as fast as
# frozen dataclasses (isinstance still tells the two kinds apart).
class OffsetKey(NamedTuple):
    group: str
    topic: str
    partition: int


class GroupKey(NamedTuple):
    group: str


@dataclass(slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: list[MemberRecord] = field(default_factory=list)


@dataclass(slots=True)
class Record:
    """One `__consumer_offsets` record: value None is a tombstone."""
    key: OffsetKey | GroupKey
    value: OffsetAndMetadata | GroupValue | None

    @property
    def is_tombstone(self) -> bool:
        return self.value is None
