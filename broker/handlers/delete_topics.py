"""DeleteTopics (api key 20), versions 0-6.

Behaviour:
- v0-5 name topics in topic_names; v6 in topics, each by name or by topic_id (KIP-516). A v6
  entry with both or neither -> INVALID_REQUEST; an unknown id -> UNKNOWN_TOPIC_ID; an unknown
  name -> UNKNOWN_TOPIC_OR_PARTITION; a topic named twice is deleted once and answered in its
  first entry (Kafka's result collection), the other entry left NONE.
- `delete.topic.enable=false` -> TOPIC_DELETION_DISABLED for every topic (INVALID_REQUEST before v3,
  as Kafka answers clients that do not know the code).
- One broker deletes before the answer: the store forgets the topic, the replica manager stops
  its partitions and the log manager renames their dirs to `*-delete` (removed after
  file.delete.delay.ms). In a cluster the topics are marked for deletion in ZooKeeper and the
  answer waits up to timeout_ms for all of them to be gone: REQUEST_TIMED_OUT for the others
  (at once for 0), as Kafka's DelayedDeleteTopics. Results carry the topic id from v6.
"""
import asyncio
import uuid

from protocol.api import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.delete_topics import DeleteTopicsResponse

API_KEY = ApiKey.DELETE_TOPICS
MIN_VERSION = 0
MAX_VERSION = 6

ZERO_UUID = uuid.UUID(int=0)
R = DeleteTopicsResponse


def _resolve(broker, name, topic_id) -> str:
    if name is not None and topic_id != ZERO_UUID:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Topic name and topic id both given")
    if name is None:
        if topic_id == ZERO_UUID:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Neither topic name nor id given")
        topic = broker.metadata.get_topic_by_id(topic_id)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID, f"Topic id {topic_id} does not exist")
        return topic.name
    return name


async def handle(broker, ctx, request):
    version = ctx.api_version
    if version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, ZERO_UUID) for name in request.topic_names]
    resolved = []
    for name, topic_id in wanted:
        try:
            resolved.append((name, topic_id, _resolve(broker, name, topic_id), None))
        except KafkaError as exc:
            resolved.append((name, topic_id, None, exc))
    if not broker.config.get("delete.topic.enable"):
        # Kafka's handleDeleteTopicsRequest, before anything else: clients before v3 do not
        # know TOPIC_DELETION_DISABLED.
        code = ErrorCode.TOPIC_DELETION_DISABLED if version >= 3 else ErrorCode.INVALID_REQUEST
        return DeleteTopicsResponse(responses=[
            R.DeletableTopicResult(name=name if name is not None else resolved_name,
                                   topic_id=topic_id, error_code=code,
                                   error_message="Topic deletion is disabled.")
            for name, topic_id, resolved_name, _ in resolved])
    # Each topic once, together (Kafka deletes a Set and waits for all of them up to
    # timeout_ms; a topic named twice is answered in its first entry, the other left as is).
    to_delete = list(dict.fromkeys(r[2] for r in resolved if r[2] is not None and r[3] is None))

    async def delete(name):
        try:
            return await broker.topics.delete_topic_async(name, timeout_ms=request.timeout_ms)
        except KafkaError as exc:
            return exc
    outcomes = dict(zip(to_delete, await asyncio.gather(*(delete(n) for n in to_delete))))
    results = []
    for name, topic_id, resolved_name, error in resolved:
        result = R.DeletableTopicResult(name=name if name is not None else resolved_name,
                                        topic_id=topic_id)
        results.append(result)
        if error is None:
            outcome = outcomes.pop(resolved_name, None)
            if isinstance(outcome, KafkaError):
                error = outcome
            elif outcome is not None:
                result.topic_id = outcome.topic_id
        if error is not None:
            result.error_code = error.error_code
            result.error_message = error.message
    return DeleteTopicsResponse(responses=results)
