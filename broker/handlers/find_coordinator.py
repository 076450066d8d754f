"""FindCoordinator (api key 10), versions 0-6.

Behaviour: a group's coordinator is the leader of partition `abs(hashCode(group)) %
offsets.topic.num.partitions` of `__consumer_offsets`; on a single broker that is always this
broker, once the topic exists; in a cluster it is the leader the controller's metadata names
(COORDINATOR_NOT_AVAILABLE while the partition has none, or while fewer brokers are alive than
offsets.topic.replication.factor needs to create the topic, as Kafka answers). As Kafka, a
cluster answers COORDINATOR_NOT_AVAILABLE to the lookup that creates the topic: the client asks
again after its backoff, when the new leaders have had their LeaderAndIsr (naming a leader at
once let a client reach it before that, and get NOT_COORDINATOR, which kafkajs's
sendOffsetsToTransaction does not retry). A single broker creates the topic and loads its
partitions before answering, so the first lookup succeeds there.
Key types: 0 (group) and 1 (transaction: the leader of the transactional id's partition of
`__transaction_state`, created the same way with transaction.state.log.num.partitions and
transaction.state.log.replication.factor); anything else is INVALID_REQUEST.
Versions: v0 only groups; v1 adds key_type and error_message; v4+ batch keys in
`coordinator_keys` and answer one Coordinator entry per key (the top-level fields stay default).
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.errors import KafkaError
from protocol.messages.find_coordinator import FindCoordinatorResponse

from coordinator.internal_topics import (TRANSACTION_STATE_TOPIC, offsets_topic_configs,
                                         transaction_state_topic_configs)
from coordinator.partitioning import OFFSETS_TOPIC, partition_for

API_KEY = ApiKey.FIND_COORDINATOR
MIN_VERSION = 0
MAX_VERSION = 6

GROUP, TRANSACTION = 0, 1
# key type -> (topic, partitions property, replication property, its name in Kafka's message,
# topic configs)
_TOPICS = {
    GROUP: (OFFSETS_TOPIC, "offsets.topic.num.partitions", "offsets.topic.replication.factor",
            "offsets topic", offsets_topic_configs),
    TRANSACTION: (TRANSACTION_STATE_TOPIC, "transaction.state.log.num.partitions",
                  "transaction.state.log.replication.factor", "transactions state topic",
                  transaction_state_topic_configs),
}


COORDINATOR_TOPICS = frozenset(t[0] for t in _TOPICS.values())


async def _lookup(broker, ctx, key_type: int) -> tuple[int, str | None]:
    if key_type not in _TOPICS:
        return ErrorCode.INVALID_REQUEST, f"unsupported coordinator key type {key_type}"
    coordinator = broker.group_coordinator if key_type == GROUP else \
        getattr(broker, "txn_coordinator", None)
    if coordinator is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, "the coordinator is starting"
    error = await coordinator.ensure_topic()
    if error != ErrorCode.NONE:
        return error, f"{coordinator.topic} is not available"
    return ErrorCode.NONE, None


async def _ensure_topic(broker, key_type: int, wait_s: float = 10.0):
    """A cluster: the coordinator's internal topic exists, or is created now (from any broker,
    as Kafka's automatic creation of internal topics), once enough brokers are alive for its
    replication factor. (error, message)."""
    store, config = broker.metadata, broker.config
    name, partitions_prop, replication_prop, words, configs = _TOPICS[key_type]
    if store.get_topic(name) is not None:
        return ErrorCode.NONE, None
    replication = config.get(replication_prop)
    alive = len(store.live_brokers)
    if alive < replication:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, (
            f"Number of alive brokers '{alive}' does not meet the required replication factor "
            f"'{replication}' for the {words} (configured via "
            f"'{replication_prop}'). This error can be ignored if the cluster is "
            f"starting up and not all brokers are up yet.")
    try:
        await broker.topics.create_topic_async(
            name, config.get(partitions_prop), replication,
            configs=configs(config), require_controller=False, wait_s=wait_s)
    except KafkaError as exc:
        if exc.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, exc.message
    return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{name} is being created"  # (docstring)


async def auto_create_internal_topic(broker, name: str):
    """Metadata's auto-creation of __consumer_offsets or __transaction_state: created with the
    coordinator's settings, as Kafka's AutoTopicCreationManager.creatableTopic does (and as
    FindCoordinator creates them), or INVALID_REPLICATION_FACTOR while too few brokers are alive
    for it (Kafka's AdminUtils message); LEADER_NOT_AVAILABLE while its leaders are elected."""
    if not broker.config.get("auto.create.topics.enable"):
        return None
    key_type = GROUP if name == OFFSETS_TOPIC else TRANSACTION
    if getattr(broker, "cluster", None) is not None:
        replication = broker.config.get(_TOPICS[key_type][2])
        alive = len(broker.metadata.live_brokers)
        if alive < replication:
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"Replication factor: {replication} larger than available brokers: "
                             f"{alive}.")
        error, _ = await _ensure_topic(broker, key_type, wait_s=3.0)     # as other topics
    else:
        coordinator = broker.group_coordinator if key_type == GROUP else \
            getattr(broker, "txn_coordinator", None)
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE if coordinator is None else \
            await coordinator.ensure_topic()
    topic = broker.metadata.get_topic(name)
    if error != ErrorCode.NONE or topic is None:
        raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{name} is being created")
    return topic


async def _cluster_node(broker, ctx, key_type: int, key: str):
    """(error, message, (node id, host, port)) in a cluster: a group's (transactional id's)
    coordinator is the leader of its `__consumer_offsets` (`__transaction_state`) partition,
    wherever it is."""
    if key_type not in _TOPICS:
        error, message = await _lookup(broker, ctx, key_type)
        return error, message, _local_node(broker, ctx)
    error, message = await _ensure_topic(broker, key_type)
    if error != ErrorCode.NONE:
        return error, message, None
    topic = broker.metadata.get_topic(_TOPICS[key_type][0])
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
