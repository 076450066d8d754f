"""FindCoordinator (api key 10), versions 0-6.

Behaviour: a group's coordinator is the leader of partition `abs(hashCode(group)) %
offsets.topic.num.partitions` of `__consumer_offsets`; on this single broker that is always this
broker, once the topic exists. Unlike Kafka, which answers COORDINATOR_NOT_AVAILABLE while it
auto-creates the topic in the background, the topic is created (and its partitions loaded)
before answering, so the client's first lookup succeeds.
Key types: 0 (group) and 1 (transaction: this broker leads every `__transaction_state`
partition, so it is named without creating the topic); anything else is INVALID_REQUEST.
Versions: v0 only groups; v1 adds key_type and error_message; v4+ batch keys in
`coordinator_keys` and answer one Coordinator entry per key (the top-level fields stay default).
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.find_coordinator import FindCoordinatorResponse

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


async def handle(broker, ctx, request):
    key_type = request.key_type if ctx.api_version >= 1 else GROUP
    error, message = await _lookup(broker, ctx, key_type)
    host, port = broker.advertised_endpoint(ctx.listener_name)
    node = (broker.broker_id, host, port) if error == ErrorCode.NONE else (-1, "", -1)
    if ctx.api_version >= 4:
        return FindCoordinatorResponse(coordinators=[
            FindCoordinatorResponse.Coordinator(
                key=key, node_id=node[0], host=node[1], port=node[2], error_code=error,
                error_message=message)
            for key in request.coordinator_keys])
    return FindCoordinatorResponse(error_code=error, error_message=message, node_id=node[0],
                                   host=node[1], port=node[2])
