"""DescribeProducers (api key 61), version 0: the active producers of partitions this broker
holds a replica of, leader or follower, as Kafka answers (`kafka-transactions.sh
describe-producers`, `find-hanging --broker-id`), from each partition's producer state:
producer id and epoch, last sequence and timestamp, the coordinator epoch of its last marker,
and the first offset of its open transaction (-1 when none). A partition without a replica here
is NOT_LEADER_OR_FOLLOWER (UNKNOWN_TOPIC_OR_PARTITION when the cluster lacks it)."""
from protocol.api import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.describe_producers import DescribeProducersResponse

API_KEY = ApiKey.DESCRIBE_PRODUCERS
MIN_VERSION = 0
MAX_VERSION = 0

TopicResponse = DescribeProducersResponse.TopicResponse
PartitionResponse = DescribeProducersResponse.PartitionResponse
ProducerState = DescribeProducersResponse.ProducerState


async def handle(broker, ctx, request):
    rm = broker.replica_manager
    topics = []
    for topic in request.topics:
        partitions = []
        for index in topic.partition_indexes:
            answer = PartitionResponse(partition_index=index, error_code=0, active_producers=[])
            try:
                part = rm.get_partition_or_error(topic.name, index)
                state = part.log.producer_state
                entries = state.manager.producers.values() if state is not None else ()
                answer.active_producers = [ProducerState(
                    producer_id=e.producer_id, producer_epoch=e.producer_epoch,
                    last_sequence=e.last_seq, last_timestamp=e.last_timestamp,
                    coordinator_epoch=e.coordinator_epoch,
                    current_txn_start_offset=-1 if e.current_txn_first_offset is None
                    else e.current_txn_first_offset) for e in entries]
            except KafkaError as exc:
                answer.error_code = int(exc.error_code)
                answer.error_message = exc.message
            partitions.append(answer)
        topics.append(TopicResponse(name=topic.name, partitions=partitions))
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)
