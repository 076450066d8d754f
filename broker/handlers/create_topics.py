"""CreateTopics (api key 19), versions 0-7.

Behaviour (Kafka's ZkAdminManager.createTopics, for one broker):
- Each topic is validated and created independently; its result carries its own error:
  INVALID_TOPIC_EXCEPTION (name), TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS,
  INVALID_REPLICATION_FACTOR (more than the live brokers), INVALID_REPLICA_ASSIGNMENT,
  INVALID_CONFIG (unknown topic config or bad value), INVALID_REQUEST (both counts and an
  explicit assignment, or the same name twice in one request). More than 10,000 partitions in
  the whole request -> POLICY_VIOLATION for every topic in it, as Kafka's controller.
- num_partitions / replication_factor -1 take num.partitions / default.replication.factor (v4+).
- validate_only (v1+) runs every check and creates nothing.
- v5+ results carry the topic's partitions, replication factor and every effective config (as
  DescribeConfigs would list them); v7+ the topic id. A failed topic has no configs.
- timeout_ms: on one broker creation completes before the answer. In a cluster the request
  waits, at most timeout_ms for all its topics together, until every partition of a created
  topic has a leader; a topic still without one (every replica of a partition down, say) is
  answered REQUEST_TIMED_OUT, created all the same, as Kafka's DelayedCreatePartitions.
- Internal topics (__consumer_offsets, __transaction_state) may be created here, as Kafka
  allows; the group coordinator creates __consumer_offsets through the same TopicManager.
"""
import asyncio

from protocol.api import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.create_topics import CreateTopicsResponse

from broker.handlers.describe_configs import topic_entries
from broker.topics import MAX_PARTITIONS_PER_REQUEST, TOO_MANY_PARTITIONS

API_KEY = ApiKey.CREATE_TOPICS
MIN_VERSION = 0
MAX_VERSION = 7

R = CreateTopicsResponse


async def handle(broker, ctx, request):
    version = ctx.api_version
    validate_only = version >= 1 and request.validate_only
    names = [t.name for t in request.topics]
    duplicates = {n for n in names if names.count(n) > 1}
    too_many = _requested_partitions(broker, request.topics) > MAX_PARTITIONS_PER_REQUEST
    in_cluster = getattr(broker, "cluster", None) is not None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(request.timeout_ms, 0) / 1000
    results = []
    for topic in request.topics:
        result = R.CreatableTopicResult(name=topic.name)
        results.append(result)
        if too_many:
            result.error_code = ErrorCode.POLICY_VIOLATION
            result.error_message = TOO_MANY_PARTITIONS
            continue
        if topic.name in duplicates:
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = "Found multiple entries for this topic."      # Kafka's
            continue
        assignments = {a.partition_index: list(a.broker_ids) for a in topic.assignments}
        configs = {c.name: c.value for c in topic.configs}
        wait = {"wait_s": max(0.0, deadline - loop.time())} if in_cluster else {}
        try:
            created = await broker.topics.create_topic_async(
                topic.name, topic.num_partitions, topic.replication_factor,
                assignments=assignments or None, configs=configs, validate_only=validate_only,
                **wait)
        except KafkaError as exc:
            result.error_code = exc.error_code
            result.error_message = exc.message
            continue
        if in_cluster and not validate_only and (
                created is None or not broker.metadata.has_leaders(topic.name)):
            result.error_code = ErrorCode.REQUEST_TIMED_OUT
            result.error_message = (f"Topic {topic.name} was created but not all its "
                                    f"partitions have a leader within the request's timeout")
            continue
        if version >= 5:
            if created is not None:
                result.topic_id = created.topic_id
                result.num_partitions = len(created.partitions)
                result.replication_factor = created.replication_factor
            else:                                  # validate_only: what would be created
                result.num_partitions = len(assignments) if assignments else (
                    topic.num_partitions if topic.num_partitions != -1
                    else broker.config.get("num.partitions"))
                result.replication_factor = (
                    len(next(iter(assignments.values()))) if assignments
                    else topic.replication_factor if topic.replication_factor != -1
                    else broker.config.get("default.replication.factor"))
            result.configs = [
                R.CreatableTopicConfigs(name=e.name, value=e.value, read_only=e.read_only,
                                        config_source=e.source, is_sensitive=e.sensitive)
                for e in _entries(broker, topic.name, configs, created)]
    return CreateTopicsResponse(topics=results)


def _requested_partitions(broker, topics) -> int:
    """Partitions the whole request would create (Kafka checks the sum before anything)."""
    total = 0
    for topic in topics:
        if topic.assignments:
            total += len(topic.assignments)
        elif topic.num_partitions == -1:
            total += broker.config.get("num.partitions")
        elif topic.num_partitions > 0:
            total += topic.num_partitions
    return total


def _entries(broker, name, configs, created):
    if created is not None:
        return topic_entries(broker, name)
    # validate_only: describe as if the overrides were stored.
    from broker.handlers.describe_configs import ConfigEntry
    from broker.config import TOPIC_CONFIGS, format_value
    out = []
    for definition in TOPIC_CONFIGS:
        value, source, synonyms = broker.config.topic_value(definition.name, configs)
        out.append(ConfigEntry(definition.name, format_value(value), source, False, False,
                               synonyms, definition.type, definition.doc))
    return out
