"""DeleteTopics (api key 20), versions 0-6.

Behaviour:
- v0-5 name topics in topic_names; v6 in topics, each by name or by topic_id (KIP-516). A v6
  entry with both or neither -> INVALID_REQUEST; an unknown id -> UNKNOWN_TOPIC_ID; an unknown
  name -> UNKNOWN_TOPIC_OR_PARTITION; the same topic twice -> INVALID_REQUEST for it.
- `delete.topic.enable=false` -> TOPIC_DELETION_DISABLED for every topic (INVALID_REQUEST before v3,
  as Kafka answers clients that do not know the code).
- Deletion completes before the answer: the store forgets the topic, the replica manager stops
  its partitions and the log manager renames their dirs to `*-delete` (removed after
  file.delete.delay.ms). Results carry the topic id from v6.
"""
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
    names = [r[2] for r in resolved if r[2] is not None]
    results = []
    for name, topic_id, resolved_name, error in resolved:
        result = R.DeletableTopicResult(name=name if name is not None else resolved_name,
                                        topic_id=topic_id)
        results.append(result)
        if error is None and names.count(resolved_name) > 1:
            error = KafkaError(ErrorCode.INVALID_REQUEST,
                               "Duplicate topic in the DeleteTopics request")
        if error is None:
            try:
                topic = await broker.topics.delete_topic_async(resolved_name)
                result.topic_id = topic.topic_id
            except KafkaError as exc:
                error = exc
        if error is not None:
            result.error_code = error.error_code
            result.error_message = error.message
    return DeleteTopicsResponse(responses=results)
