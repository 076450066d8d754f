"""DeleteRecords (api key 21), versions 0-2.

Behaviour, as Kafka's ReplicaManager.deleteRecords: for each partition, move the log start
offset up to `offset` (-1 means the high watermark); records below it become unreadable at once
and their segments are deleted by retention once wholly below it. The answer waits up to
timeout_ms until every live follower's log start has followed (Kafka's DelayedDeleteRecords);
low_watermark is then the smallest log start of the leader and its live followers, and a
partition still short of the offset at the timeout is REQUEST_TIMED_OUT. offset above the high
watermark (or below -1) -> OFFSET_OUT_OF_RANGE; an internal topic -> INVALID_TOPIC_EXCEPTION; not the
leader -> NOT_LEADER_OR_FOLLOWER, before a compacted topic (cleanup.policy without
"delete") -> POLICY_VIOLATION, as Kafka; unknown partition -> UNKNOWN_TOPIC_OR_PARTITION. Waiting
fetches are woken: an offset below the new start is now out of range.
"""
from protocol.api import ApiKey
from protocol.messages.delete_records import DeleteRecordsResponse

API_KEY = ApiKey.DELETE_RECORDS
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(broker, ctx, request):
    Topic = DeleteRecordsResponse.DeleteRecordsTopicResult
    Partition = DeleteRecordsResponse.DeleteRecordsPartitionResult
    offsets = {(t.name, p.partition_index): p.offset for t in request.topics for p in t.partitions}
    results = await broker.replica_manager.delete_records(offsets, request.timeout_ms)
    return DeleteRecordsResponse(throttle_time_ms=0, topics=[
        Topic(name=t.name, partitions=[
            Partition(partition_index=p.partition_index,
                      low_watermark=results[(t.name, p.partition_index)][1],
                      error_code=int(results[(t.name, p.partition_index)][0]))
            for p in t.partitions])
        for t in request.topics])
