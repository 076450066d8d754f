"""OffsetForLeaderEpoch (api key 23), versions 0-4.

Behaviour: for each partition, the end offset of the largest leader epoch <= the requested
leader_epoch, from the partition's leader-epoch cache (leader-epoch-checkpoint): the start offset of
the next epoch, or the log end offset for the current epoch. Consumers use it after a leader change
to detect truncation (KIP-320); followers will use it to truncate. An epoch older than everything
cached -> (-1, -1) with error NONE, as Kafka answers (UNDEFINED_EPOCH / UNDEFINED_EPOCH_OFFSET).
current_leader_epoch (v2+) is checked: FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH. Unknown partition
-> UNKNOWN_TOPIC_OR_PARTITION. Version quirks: leader_epoch in the answer from v1, replica_id v3+.
"""
from protocol.api import ApiKey
from protocol.errors import KafkaError
from protocol.messages.offset_for_leader_epoch import OffsetForLeaderEpochResponse

API_KEY = ApiKey.OFFSET_FOR_LEADER_EPOCH
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(broker, ctx, request):
    replica_manager = broker.replica_manager
    Topic = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
    EpochEndOffset = OffsetForLeaderEpochResponse.EpochEndOffset
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            answer = EpochEndOffset(partition=p.partition, error_code=0, leader_epoch=-1,
                                    end_offset=-1)
            try:
                part = replica_manager.get_partition_or_error(topic.topic, p.partition)
                current = p.current_leader_epoch if ctx.api_version >= 2 else -1
                found = part.last_offset_for_leader_epoch(current, p.leader_epoch)
            except KafkaError as exc:
                answer.error_code = int(exc.error_code)
            else:
                if found is not None:
                    answer.leader_epoch, answer.end_offset = found
            partitions.append(answer)
        topics.append(Topic(topic=topic.topic, partitions=partitions))
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)
