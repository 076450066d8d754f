"""ListOffsets (api key 2), versions 0-9.

Behaviour, per partition:
- timestamp -2 (earliest) -> log_start_offset; -1 (latest) -> the visible end: the high watermark
  for read_uncommitted, the last stable offset for read_committed, the log end offset for a replica
  (replica_id >= 0); -3 (max timestamp, v7+) -> the offset of the record with the largest timestamp;
  -4 (earliest local, v8+) -> log_start_offset (no tiered storage); -5 (latest tiered, v9+) -> -1.
- Any other timestamp -> the first offset whose record timestamp is >= it, found through the time
  index; no such record (or only above the visible end) -> offset -1, timestamp -1, error NONE.
- leader_epoch (v4+) is the epoch of the batch found (the current epoch for latest);
  current_leader_epoch is checked (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH).
- Errors: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER (any replica answers the
  debugging replica id -2, from its own log end, as Kafka); from v1 a partition listed twice
  in one request -> INVALID_REQUEST for both, as Kafka does; from v1 a special timestamp the version
  does not know (-3 before v7, -4 before v8, -5 before v9) or any other negative one ->
  UNSUPPORTED_VERSION.
- Version 0 is Kafka's legacy lookup by segment: old_style_offsets holds up to max_num_offsets
  segment start offsets, newest first, of the segments whose files were last modified at or
  before the timestamp, the log end counting as modified now (-1: from the log end, -2: from
  the start); a consumer's are capped at the high watermark; a timestamp below -2 is
  UNSUPPORTED_VERSION. v1 has no isolation level (read_uncommitted).
"""
from broker.partition import (EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP, LATEST_TIERED_TIMESTAMP,
                              LATEST_TIMESTAMP, MAX_TIMESTAMP, checked_isolation_level)
from protocol.api import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.list_offsets import ListOffsetsResponse

API_KEY = ApiKey.LIST_OFFSETS
MIN_VERSION = 0
MAX_VERSION = 9

CONSUMER_REPLICA_ID = -1
# The first version that knows each special timestamp (Kafka's timestampMinSupportedVersion):
# latest, earliest, max timestamp (KIP-734), earliest local and latest tiered (KIP-405).
_SPECIAL_TIMESTAMP_VERSIONS = {LATEST_TIMESTAMP: 1, EARLIEST_TIMESTAMP: 1, MAX_TIMESTAMP: 7,
                               EARLIEST_LOCAL_TIMESTAMP: 8, LATEST_TIERED_TIMESTAMP: 9}
DEBUGGING_REPLICA_ID = -2


async def handle(broker, ctx, request):
    replica_manager = broker.replica_manager
    version = ctx.api_version
    from_replica = request.replica_id >= 0 or request.replica_id == DEBUGGING_REPLICA_ID
    isolation_level = None if from_replica else (
        checked_isolation_level(request.isolation_level) if version >= 2 else 0)
    seen = {}
    for topic in request.topics:
        for p in topic.partitions:
            key = (topic.name, p.partition_index)
            seen[key] = seen.get(key, 0) + 1

    Topic = ListOffsetsResponse.ListOffsetsTopicResponse
    Partition = ListOffsetsResponse.ListOffsetsPartitionResponse
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            answer = Partition(partition_index=p.partition_index, error_code=0,
                               timestamp=-1, offset=-1, leader_epoch=-1, old_style_offsets=[])
            if version == 0:            # Kafka's V0 path answers a repeated partition too
                _legacy_offsets(broker, request, topic.name, p, answer)
            elif seen[(topic.name, p.partition_index)] > 1:
                answer.error_code = ErrorCode.INVALID_REQUEST
            elif version >= 1 and p.timestamp < 0 and \
                    version < _SPECIAL_TIMESTAMP_VERSIONS.get(p.timestamp, MAX_VERSION + 1):
                # A special timestamp this version does not know, or no special timestamp.
                answer.error_code = ErrorCode.UNSUPPORTED_VERSION
            else:
                try:
                    part = replica_manager.get_partition_or_error(topic.name, p.partition_index)
                    found = part.fetch_offset_for_timestamp(
                        p.timestamp, isolation_level,
                        current_leader_epoch=p.current_leader_epoch if version >= 4 else -1,
                        from_follower=request.replica_id >= 0,
                        require_leader=request.replica_id != DEBUGGING_REPLICA_ID)
                except KafkaError as exc:
                    answer.error_code = int(exc.error_code)
                    if answer.error_code == ErrorCode.OFFSET_NOT_AVAILABLE and version < 5:
                        # clients before v5 do not know the code (Kafka's
                        # handleListOffsetRequestV1AndAbove): retriable LEADER_NOT_AVAILABLE
                        answer.error_code = ErrorCode.LEADER_NOT_AVAILABLE
                else:
                    if found is not None:
                        answer.offset, answer.timestamp, answer.leader_epoch = found
            partitions.append(answer)
        topics.append(Topic(name=topic.name, partitions=partitions))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


def _legacy_offsets(broker, request, topic: str, p, answer) -> None:
    """Version 0 (Kafka's handleListOffsetRequestV0): up to max_num_offsets segment start
    offsets, newest first, of the segments last modified at or before the timestamp (-1: from
    the log end, -2: from the start); other negative timestamps are UNSUPPORTED_VERSION."""
    if p.timestamp < EARLIEST_TIMESTAMP:
        answer.error_code = ErrorCode.UNSUPPORTED_VERSION
        return
    try:
        part = broker.replica_manager.get_partition_or_error(topic, p.partition_index)
        answer.old_style_offsets = part.legacy_offsets_for_timestamp(
            p.timestamp, p.max_num_offsets, broker.time.ms(),
            from_consumer=request.replica_id == CONSUMER_REPLICA_ID,
            require_leader=request.replica_id != DEBUGGING_REPLICA_ID)
    except KafkaError as exc:
        answer.error_code = int(exc.error_code)
