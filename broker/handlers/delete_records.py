"""DeleteRecords (api key 21), versions 0-2.

Behaviour: for each partition, move the log start offset up to `offset` (-1 means the high
watermark); records below it become unreadable at once and their segments are deleted by retention
once wholly below it. Answers low_watermark = the new log start offset. offset above the high
watermark (or below -1) -> OFFSET_OUT_OF_RANGE; a compacted topic (cleanup.policy without "delete")
-> POLICY_VIOLATION, as Kafka; unknown partition -> UNKNOWN_TOPIC_OR_PARTITION. Kafka waits up to
timeout_ms for every replica's low watermark to follow; with one replica that is immediate (the
wait will go through the produce purgatory when followers exist). Waiting fetches are woken: an
offset below the new start is now out of range.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.delete_records import DeleteRecordsResponse

API_KEY = ApiKey.DELETE_RECORDS
MIN_VERSION = 0
MAX_VERSION = 2


def _allows_delete(log_config) -> bool:
    policy = getattr(log_config, "cleanup_policy", "delete")
    if isinstance(policy, str):
        policy = [p.strip() for p in policy.split(",")]
    return "delete" in policy


async def handle(broker, ctx, request):
    replica_manager = broker.replica_manager
    Topic = DeleteRecordsResponse.DeleteRecordsTopicResult
    Partition = DeleteRecordsResponse.DeleteRecordsPartitionResult
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            answer = Partition(partition_index=p.partition_index, low_watermark=-1, error_code=0)
            try:
                part = replica_manager.get_partition_or_error(topic.name, p.partition_index)
                if not _allows_delete(part.log.config):
                    raise KafkaError(ErrorCode.POLICY_VIOLATION,
                                     "records cannot be deleted from a compacted topic")
                answer.low_watermark = part.delete_records_on_leader(p.offset)
            except KafkaError as exc:
                answer.error_code = int(exc.error_code)
            else:
                replica_manager.fetch_purgatory.notify(topic.name, p.partition_index)
            partitions.append(answer)
        topics.append(Topic(name=topic.name, partitions=partitions))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)
