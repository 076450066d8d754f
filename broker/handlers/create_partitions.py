"""CreatePartitions (api key 37), versions 0-3.

Behaviour: grows each topic to `count` partitions, placing the new ones by the explicit
assignments when given (one broker list per new partition) or round robin over the live brokers.
Per-topic errors: UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS (count not larger than now),
INVALID_REPLICA_ASSIGNMENT (wrong number of assignments, unknown or duplicate brokers, a
replication factor different from the topic's), INVALID_REQUEST (a topic listed twice),
POLICY_VIOLATION (more than 10,000 new partitions at once, as Kafka's controller).
validate_only runs the checks without changing anything. One broker leads the new partitions
before the answer; a cluster waits up to timeout_ms for their leaders, REQUEST_TIMED_OUT then
(at once for 0), as Kafka's DelayedCreatePartitions.
"""
import asyncio

from protocol.api import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.create_partitions import CreatePartitionsResponse

API_KEY = ApiKey.CREATE_PARTITIONS
MIN_VERSION = 0
MAX_VERSION = 3

R = CreatePartitionsResponse


async def handle(broker, ctx, request):
    names = [t.name for t in request.topics]

    async def create(topic):
        result = R.CreatePartitionsTopicResult(name=topic.name)
        try:
            if names.count(topic.name) > 1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Duplicate topic in request.")
            assignments = None if topic.assignments is None else [
                list(a.broker_ids) for a in topic.assignments]
            await broker.topics.create_partitions_async(topic.name, topic.count, assignments,
                                                        validate_only=request.validate_only,
                                                        timeout_ms=request.timeout_ms)
        except KafkaError as exc:
            result.error_code = exc.error_code
            result.error_message = exc.message
        return result
    # The topics together: in a cluster each waits up to timeout_ms for its new leaders.
    return CreatePartitionsResponse(results=list(await asyncio.gather(
        *(create(t) for t in request.topics))))
