"""FindCoordinator (api key 10), versions 0-6.

Behaviour: a group's coordinator is the leader of partition `abs(hashCode(group)) %
offsets.topic.num.partitions` of `__consumer_offsets`; on a single broker that is always this
broker, once the topic exists; in a cluster it is the leader the controller's metadata names
(COORDINATOR_NOT_AVAILABLE while the partition has none, or while fewer brokers are alive than
offsets.topic.replication.factor needs to create the topic, as Kafka answers). Unlike Kafka, which answers COORDINATOR_NOT_AVAILABLE while it
auto-creates the topic in the background, the topic is created (and its partitions loaded)
before answering, so the client's first lookup succeeds.
Key types: 0 (group) and 1 (transaction: this broker leads every `__transaction_state`
partition, so it is named without creating the topic); anything else is INVALID_REQUEST.
Versions: v0 only groups; v1 adds key_type and error_message; v4+ batch keys in
`coordinator_keys` and answer one Coordinator entry per key (the top-level fields stay default).
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.errors import KafkaError
from protocol.messages.find_coordinator import FindCoordinatorResponse

from coordinator.internal_topics import offsets_topic_configs
from coordinator.partitioning import OFFSETS_TOPIC, partition_for

API_KEY = ApiKey.FIND_COORDINATOR
MIN_VERSION = 0
MAX_VERSION = 6

GROUP, TRANSACTION = 0, 1


async def _lookup(broker, ctx, key_type: int) -> tuple[int, str | None]:
    if key_type == TRANSACTION:
        return ErrorCode.NONE, None
    if key_type != GROUP:
        return ErrorCode.INVALID_REQUEST, f"unsupported coordinator key type {key_type}"
    coordinator = broker.group_coordinator
    if coordinator is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, "the group coordinator is starting"
    error = await coordinator.ensure_offsets_topic()
    if error != ErrorCode.NONE:
        return error, "__consumer_offsets is not available"
    return ErrorCode.NONE, None


async def _ensure_offsets_topic(broker):
    """A cluster: `__consumer_offsets` exists, or is created now (from any broker, as Kafka's
    automatic creation of internal topics), once enough brokers are alive for
    offsets.topic.replication.factor. (error, message)."""
    store, config = broker.metadata, broker.config
    if store.get_topic(OFFSETS_TOPIC) is not None:
        return ErrorCode.NONE, None
    replication = config.get("offsets.topic.replication.factor")
    alive = len(store.live_brokers)
    if alive < replication:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, (
            f"Number of alive brokers '{alive}' does not meet the required replication factor "
            f"'{replication}' for the offsets topic (configured via "
            f"'offsets.topic.replication.factor'). This error can be ignored if the cluster is "
            f"starting up and not all brokers are up yet.")
    try:
        await broker.topics.create_topic_async(
            OFFSETS_TOPIC, config.get("offsets.topic.num.partitions"), replication,
            configs=offsets_topic_configs(config), require_controller=False, wait_s=10.0)
    except KafkaError as exc:
        if exc.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, exc.message
    if store.get_topic(OFFSETS_TOPIC) is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{OFFSETS_TOPIC} is being created"
    return ErrorCode.NONE, None


async def _cluster_node(broker, ctx, key_type: int, key: str):
    """(error, message, (node id, host, port)) in a cluster: a group's coordinator is the
    leader of its `__consumer_offsets` partition, wherever it is."""
    if key_type != GROUP:
        error, message = await _lookup(broker, ctx, key_type)
        return error, message, _local_node(broker, ctx)
    error, message = await _ensure_offsets_topic(broker)
    if error != ErrorCode.NONE:
        return error, message, None
    topic = broker.metadata.get_topic(OFFSETS_TOPIC)
    p = partition_for(key, len(topic.partitions))
    state = topic.partitions.get(p)
    leader = state.leader if state is not None else -1
    for node_id, host, port, _ in broker.metadata_brokers(ctx.listener_name):
        if node_id == leader:
            return ErrorCode.NONE, None, (node_id, host, port)
    return ErrorCode.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.", None


def _local_node(broker, ctx):
    host, port = broker.advertised_endpoint(ctx.listener_name)
    return broker.broker_id, host, port


async def _answer(broker, ctx, key_type: int, key: str):
    if getattr(broker, "cluster", None) is not None:
        error, message, node = await _cluster_node(broker, ctx, key_type, key)
    else:
        error, message = await _lookup(broker, ctx, key_type)
        node = _local_node(broker, ctx)
    if error != ErrorCode.NONE:
        node = (-1, "", -1)
    return error, message, node


async def handle(broker, ctx, request):
    key_type = request.key_type if ctx.api_version >= 1 else GROUP
    if ctx.api_version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            error, message, node = await _answer(broker, ctx, key_type, key)
            coordinators.append(FindCoordinatorResponse.Coordinator(
                key=key, node_id=node[0], host=node[1], port=node[2], error_code=error,
                error_message=message))
        return FindCoordinatorResponse(coordinators=coordinators)
    error, message, node = await _answer(broker, ctx, key_type, request.key)
    return FindCoordinatorResponse(error_code=error, error_message=message, node_id=node[0],
                                   host=node[1], port=node[2])
