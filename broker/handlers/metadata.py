"""Metadata (api key 3), versions 0-12.

Behaviour:
- Brokers: this broker with its advertised endpoint for the listener the request came in on,
  or in a cluster every live broker with that listener (from the controller's UpdateMetadata);
  controller_id (v1+); cluster_id from v2.
- Partitions: in a cluster, the controller's leader, ISR and offline replicas; a leader that is
  not alive or lacks the request's listener is -1 with LEADER_NOT_AVAILABLE (LISTENER_NOT_FOUND
  from v6 for the latter), as Kafka's ZkMetadataCache. On one broker, a partition whose log dir
  failed is offline: leader -1, LEADER_NOT_AVAILABLE, this broker in offline_replicas.
- Topics: v0 with an empty list, or v1+ with a null list, means every topic; v1+ with an empty
  list means none. From v12 a topic may be named by topic_id alone (name null): unknown ids
  answer UNKNOWN_TOPIC_ID; before v12 a null name or a topic id is INVALID_REQUEST, as Kafka.
- A requested topic that does not exist is created when `auto.create.topics.enable` is true and
  the request allows it (allow_auto_topic_creation, v4+; always allowed before v4), with
  num.partitions / default.replication.factor. The answer waits for the new partitions' logs
  and leaders (in a cluster 3 s at most, then LEADER_NOT_AVAILABLE), so it usually carries them
  (Kafka answers LEADER_NOT_AVAILABLE first while its controller elects leaders; clients treat
  both alike). The topics of one request are created together.
  Otherwise UNKNOWN_TOPIC_OR_PARTITION. The internal topics (__consumer_offsets,
  __transaction_state) are created the same way, with their coordinator's settings, as Kafka's
  AutoTopicCreationManager does (INVALID_REPLICATION_FACTOR while too few brokers are alive for
  them); __cluster_metadata (KRaft's metadata log in a data dir written by Kafka in KRaft mode)
  is never a topic.
- Names that Kafka would reject answer INVALID_TOPIC_EXCEPTION.
- Authorized operations (v8+): there is no authorizer, so every operation is allowed: the
  bitfields are Kafka's "all operations of this resource type" when asked for, else the
  "not requested" value INT32_MIN.
- Per-topic response entries are cached and rebuilt only when the metadata store or the set of
  led partitions changes; an all-topics answer is cached encoded, per version and listener
  (the Metadata request is the most frequent admin request: every client polls it).
"""
import asyncio

from protocol.api import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.messages.metadata import MetadataResponse
from protocol.primitives import ZERO_UUID

from broker.handlers.find_coordinator import COORDINATOR_TOPICS, auto_create_internal_topic
from broker.topics import is_cluster_metadata, is_internal, validate_topic_name

API_KEY = ApiKey.METADATA
MIN_VERSION = 0
MAX_VERSION = 12

NOT_REQUESTED = -2147483648
# AclOperation codes: READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8,
# CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12.
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))

Topic = MetadataResponse.MetadataResponseTopic
Partition = MetadataResponse.MetadataResponsePartition


def _topic_entry(broker, topic, listener_name: str, version: int) -> Topic:
    partitions = []
    for index, state in topic.partitions.items():
        replicas = list(state.replicas)
        offline = []
        if state.isr is not None:               # a cluster: the controller's view
            leader, isr, offline = state.leader, list(state.isr), list(state.offline_replicas)
            error = ErrorCode.NONE
            # Kafka's ZkMetadataCache.getPartitionMetadata: a leader that is not alive, or has
            # no endpoint on the request's listener, is no leader to a client (-1), with
            # LISTENER_NOT_FOUND for the latter from v6.
            live = broker.metadata.live_brokers.get(leader) if leader >= 0 else None
            if live is None:
                leader, error = -1, ErrorCode.LEADER_NOT_AVAILABLE
            elif listener_name not in live.endpoints:
                leader = -1
                error = (ErrorCode.LISTENER_NOT_FOUND if version >= 6
                         else ErrorCode.LEADER_NOT_AVAILABLE)
        else:
            rm = broker.replica_manager
            partition = rm.get_partition(topic.name, index)
            if partition is None and (topic.name, index) in rm.offline_partitions:
                # its log dir failed: offline, as Kafka's controller leaves it (no leader, the
                # ISR as it was, this broker's replica offline)
                leader, isr, error = -1, [broker.broker_id], ErrorCode.LEADER_NOT_AVAILABLE
                offline = [broker.broker_id]
            elif partition is None:             # logs still being created: no leader yet
                leader, isr, error = -1, [], ErrorCode.LEADER_NOT_AVAILABLE
            else:
                leader, isr, error = state.leader, sorted(partition.isr), ErrorCode.NONE
        partitions.append(Partition(
            error_code=error, partition_index=index, leader_id=leader,
            leader_epoch=state.leader_epoch, replica_nodes=replicas, isr_nodes=isr,
            offline_replicas=offline))
    return Topic(error_code=ErrorCode.NONE, name=topic.name, topic_id=topic.topic_id,
                 is_internal=is_internal(topic.name), partitions=partitions)


def cached_topics(broker, listener_name: str, version: int) -> dict:
    """name -> MetadataResponseTopic for every topic, as a client on that listener sees it
    (per version: before v6 and from it), rebuilt when the store or the set of led partitions
    changes."""
    store, topics = broker.metadata, broker.topics
    key = (store.version, topics.leadership_version)
    cached = topics.metadata_cache
    if cached is None or cached[0] != key:
        cached = topics.metadata_cache = (key, {})
    shape = (listener_name, version >= 6)
    entries = cached[1].get(shape)
    if entries is None:
        entries = cached[1][shape] = {t.name: _topic_entry(broker, t, listener_name, version)
                                      for t in store.list_topics()}
    return entries


def _with_operations(entry: Topic, operations: int) -> Topic:
    if operations == NOT_REQUESTED:
        return entry
    return Topic(error_code=entry.error_code, name=entry.name, topic_id=entry.topic_id,
                 is_internal=entry.is_internal, partitions=entry.partitions,
                 topic_authorized_operations=operations)


async def _auto_create(broker, name: str):
    """The topic created by auto-creation, None when it is off (or an internal topic that no
    coordinator here owns), or KafkaError."""
    if name in COORDINATOR_TOPICS:
        return await auto_create_internal_topic(broker, name)
    if is_internal(name):
        return None
    try:
        return await broker.topics.maybe_auto_create(name)
    except KafkaError as exc:
        if exc.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
            raise
        return broker.metadata.get_topic(name)


async def _requested(broker, ctx, request, entries: dict) -> list:
    if ctx.api_version < 12:
        # Kafka's handleTopicMetadataRequest: topic ids in requests are served from v12 only
        for wanted in request.topics:
            if wanted.name is None:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"Topic name can not be null for version {ctx.api_version}")
            if wanted.topic_id != ZERO_UUID:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Topic IDs are not supported in "
                                 f"requests for version {ctx.api_version}")
    allow_auto = request.allow_auto_topic_creation if ctx.api_version >= 4 else True
    # Topics to auto-create are created together: in a cluster each waits (a few seconds at
    # most) for its leaders, and one after the other N topics would take N times that.
    creatable = []
    if allow_auto:
        for wanted in request.topics:
            name = wanted.name
            if (name is not None and name not in entries and not is_cluster_metadata(name)
                    and name not in creatable):
                try:
                    validate_topic_name(name)
                except KafkaError:
                    continue
                creatable.append(name)
    created = {}
    if creatable:
        outcomes = await asyncio.gather(*(_auto_create(broker, n) for n in creatable),
                                        return_exceptions=True)
        for name, outcome in zip(creatable, outcomes):
            if isinstance(outcome, BaseException) and not isinstance(outcome, KafkaError):
                raise outcome
            created[name] = outcome
        entries = cached_topics(broker, ctx.listener_name, ctx.api_version)
    out = []
    for wanted in request.topics:
        name = wanted.name
        if name is None:
            topic = broker.metadata.get_topic_by_id(wanted.topic_id)
            if topic is None:
                out.append(Topic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None,
                                 topic_id=wanted.topic_id))
            else:
                out.append(entries[topic.name])
            continue
        entry = entries.get(name)
        if entry is not None:
            out.append(entry)
            continue
        try:
            validate_topic_name(name)
        except KafkaError as exc:
            out.append(Topic(error_code=exc.error_code, name=name))
            continue
        outcome = created.get(name)
        if isinstance(outcome, KafkaError):
            out.append(Topic(error_code=outcome.error_code, name=name, is_internal=is_internal(name)))
        elif outcome is None:
            out.append(Topic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name,
                             is_internal=is_internal(name)))
        else:
            entries = cached_topics(broker, ctx.listener_name, ctx.api_version)
            out.append(entries[name])
    return out


class EncodedResponse:
    """A response already encoded for one version (what the connection's encoder asks for)."""

    __slots__ = ("version", "body")

    def __init__(self, version: int, body: bytes):
        self.version = version
        self.body = body

    def encode_pieces(self, version: int) -> list:
        if version != self.version:
            raise ValueError(f"encoded for v{self.version}, asked for v{version}")
        return [self.body]

    def encode(self, version: int) -> bytes:
        return self.encode_pieces(version)[0]


def _response(broker, ctx, request, topics) -> MetadataResponse:
    if ctx.api_version >= 8 and request.include_topic_authorized_operations:
        topics = [_with_operations(t, TOPIC_OPERATIONS) if t.error_code == ErrorCode.NONE else t
                  for t in topics]
    cluster_operations = NOT_REQUESTED
    if 8 <= ctx.api_version <= 10 and request.include_cluster_authorized_operations:
        cluster_operations = CLUSTER_OPERATIONS
    return MetadataResponse(
        brokers=[MetadataResponse.MetadataResponseBroker(node_id=i, host=h, port=p, rack=r)
                 for i, h, p, r in broker.metadata_brokers(ctx.listener_name)],
        cluster_id=broker.cluster_id, controller_id=broker.controller_id, topics=topics,
        cluster_authorized_operations=cluster_operations)


async def handle(broker, ctx, request):
    entries = cached_topics(broker, ctx.listener_name, ctx.api_version)
    all_topics = request.topics is None or (ctx.api_version == 0 and not request.topics)
    if not all_topics:
        topics = await _requested(broker, ctx, request, entries)
        return _response(broker, ctx, request, topics)
    # Every topic: the encoded answer is cached per request shape until metadata changes
    # (~10 ms to build and encode with 1,000 partitions).
    key = (ctx.api_version, ctx.listener_name,
           ctx.api_version >= 8 and request.include_topic_authorized_operations,
           8 <= ctx.api_version <= 10 and request.include_cluster_authorized_operations)
    cache_key, encoded = broker.topics.metadata_cache[0], broker.topics.encoded_metadata
    if encoded.get("key") != cache_key:
        encoded.clear()
        encoded["key"] = cache_key
    body = encoded.get(key)
    if body is None:
        body = encoded[key] = _response(broker, ctx, request,
                                        list(entries.values())).encode(ctx.api_version)
    return EncodedResponse(ctx.api_version, body)
