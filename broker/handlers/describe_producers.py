"""DescribeProducers (api key 61), version 0: the active producers of partitions this broker
holds a replica of, leader or follower, as Kafka answers (`kafka-transactions.sh
describe-producers`, `find-hanging --broker-id`), from each partition's producer state:
producer id and epoch, last sequence and timestamp, the coordinator epoch of its last marker,
and the first offset of its open transaction (-1 when none). A partition without a replica here
is NOT_LEADER_OR_FOLLOWER (UNKNOWN_TOPIC_OR_PARTITION when the cluster lacks it), with no
message; a topic name that is not legal is INVALID_TOPIC_EXCEPTION and one the metadata does not
have UNKNOWN_TOPIC_OR_PARTITION, both with Kafka's message, for every partition asked."""
from protocol.api import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.describe_producers import DescribeProducersResponse

from broker.topics import validate_topic_name

API_KEY = ApiKey.DESCRIBE_PRODUCERS
MIN_VERSION = 0
MAX_VERSION = 0

TopicResponse = DescribeProducersResponse.TopicResponse
PartitionResponse = DescribeProducersResponse.PartitionResponse
ProducerState = DescribeProducersResponse.ProducerState
UNKNOWN_MESSAGE = "This server does not host this topic-partition."   # Kafka's default


def _topic_error(broker, name):
    """Kafka's checks before any partition: a name that is not legal, then a topic the
    metadata does not have, each with a message; None when the topic may be looked at."""
    try:
        validate_topic_name(name)
    except KafkaError as exc:
        return exc.error_code, exc.message
    known = broker.metadata.get_topic(name) if broker.metadata is not None else None
    if known is None and not any(p.topic == name for p in broker.replica_manager.partitions()):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_MESSAGE
    return None


async def handle(broker, ctx, request):
    rm = broker.replica_manager
    topics = []
    for topic in request.topics:
        partitions = []
        topic_error = _topic_error(broker, topic.name)
        for index in topic.partition_indexes:
            answer = PartitionResponse(partition_index=index, error_code=0, active_producers=[])
            if topic_error is not None:
                answer.error_code, answer.error_message = int(topic_error[0]), topic_error[1]
                partitions.append(answer)
                continue
            try:
                part = rm.get_partition_or_error(topic.name, index)
                answer.active_producers = [ProducerState(
                    producer_id=pid, producer_epoch=epoch, last_sequence=last_seq,
                    last_timestamp=last_timestamp, coordinator_epoch=coordinator_epoch,
                    current_txn_start_offset=txn_start)
                    for pid, epoch, last_seq, last_timestamp, coordinator_epoch, txn_start
                    in part.log.active_producers()]
            except KafkaError as exc:
                answer.error_code = int(exc.error_code)     # no message, as Kafka's
            partitions.append(answer)
        topics.append(TopicResponse(name=topic.name, partitions=partitions))
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)
