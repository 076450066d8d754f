"""Checks every group handler makes before asking the coordinator (broker/handlers/*group*.py).

Kept here, next to the coordinator, so the eleven handler modules stay small and agree:
- the broker may have no coordinator yet (start-up) -> COORDINATOR_NOT_AVAILABLE;
- group ids: JoinGroup, SyncGroup, Heartbeat and LeaveGroup need a non-empty id (Kafka's
  isValidGroupId); every API refuses an id too long for the int16-length string of the
  GroupMetadataKey / OffsetCommitKey records it would be stored under (INVALID_GROUP_ID;
  Kafka itself would fail writing the record);
- the group's `__consumer_offsets` partition must be led and loaded here (NOT_COORDINATOR,
  COORDINATOR_LOAD_IN_PROGRESS).
Duck-typed over the broker object: nothing here imports broker/.
"""
from protocol.errors import ErrorCode

MAX_GROUP_ID_BYTES = 32767


def group_id_error(group_id: str | None, allow_empty: bool = False) -> int:
    if group_id is None:
        return ErrorCode.INVALID_GROUP_ID
    if not group_id and not allow_empty:
        return ErrorCode.INVALID_GROUP_ID
    if len(group_id) * 3 > MAX_GROUP_ID_BYTES and \
            len(group_id.encode("utf-8")) > MAX_GROUP_ID_BYTES:
        return ErrorCode.INVALID_GROUP_ID
    return ErrorCode.NONE


def check_group(broker, group_id: str | None, allow_empty: bool = False):
    """(coordinator, error): error is NONE when the request may proceed."""
    coordinator = getattr(broker, "group_coordinator", None)
    if coordinator is None:
        return None, ErrorCode.COORDINATOR_NOT_AVAILABLE
    error = group_id_error(group_id, allow_empty)
    if error != ErrorCode.NONE:
        return coordinator, error
    return coordinator, coordinator.coordinator_error(group_id)


def client_host(ctx) -> str:
    """Kafka shows a member's host as Java's InetAddress.toString(): "/127.0.0.1"."""
    host = ctx.client_host or ""
    return host if host.startswith("/") else "/" + host


def partition_exists(broker, topic: str, partition: int) -> bool:
    """The partition is in the cluster's metadata (Kafka's metadataCache.getPartitionInfo), not
    necessarily on this broker: a group commits offsets of partitions led anywhere."""
    described = broker.metadata.get_topic(topic)
    return described is not None and partition in described.partitions


def offsets_to_commit(broker, topics, error: int, with_leader_epoch: bool):
    """OffsetCommit and TxnOffsetCommit: ({(topic, partition): error}, offsets to store as
    (topic, partition, offset, leader_epoch, metadata)). A group-level `error` fails every
    partition; otherwise a partition this cluster does not have is UNKNOWN_TOPIC_OR_PARTITION
    and is not stored."""
    errors, offsets = {}, []
    for topic in topics:
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            if error != ErrorCode.NONE:
                errors[tp] = error
            elif not partition_exists(broker, *tp):
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                offsets.append((*tp, p.committed_offset,
                                p.committed_leader_epoch if with_leader_epoch else -1,
                                p.committed_metadata))
    return errors, offsets


def check_transaction(broker, transactional_id: str | None):
    """(transaction coordinator, error) for the transaction APIs: INVALID_REQUEST for a
    missing or empty id (as Kafka's coordinator answers), COORDINATOR_NOT_AVAILABLE before the
    coordinator runs, then NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS for an id whose
    `__transaction_state` partition is not led and loaded here."""
    coordinator = getattr(broker, "txn_coordinator", None)
    if not transactional_id:
        return coordinator, ErrorCode.INVALID_REQUEST
    if coordinator is None:
        return None, ErrorCode.COORDINATOR_NOT_AVAILABLE
    return coordinator, coordinator.coordinator_error(transactional_id)


def fenced_for(version: int, first_fenced_version: int, error: int) -> int:
    """PRODUCER_FENCED as a client of `version` knows it: clients older than the version that
    introduced it (KIP-588) get INVALID_PRODUCER_EPOCH, as KafkaApis maps it."""
    if error == ErrorCode.PRODUCER_FENCED and version < first_fenced_version:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error
