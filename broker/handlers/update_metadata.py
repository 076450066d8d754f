"""UpdateMetadata (api key 6), versions 0-8: the controller's view of the live brokers and of
partition states, which this broker's Metadata, FindCoordinator and DescribeCluster answers
come from (a 3.9 controller sends v8).

A stale broker epoch answers STALE_BROKER_EPOCH, a controller epoch below the highest seen
STALE_CONTROLLER_EPOCH; either way nothing changes. Leader -2 removes a partition whose topic is
being deleted, and the group coordinator drops that partition's offsets from the groups it has
loaded (Kafka's onPartitionsDeleted). A broker not in a cluster answers STALE_CONTROLLER_EPOCH.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.update_metadata import UpdateMetadataRequest, UpdateMetadataResponse

API_KEY = ApiKey.UPDATE_METADATA
MIN_VERSION = 0
MAX_VERSION = 8


def _grouped(request, version):
    """v0-4 list partitions ungrouped: regroup them by topic as v5+ sends them."""
    if version >= 5:
        return request
    by_topic = {}
    for ps in request.ungrouped_partition_states:
        by_topic.setdefault(ps.topic_name, []).append(ps)
    request.topic_states = [UpdateMetadataRequest.UpdateMetadataTopicState(
        topic_name=t, partition_states=p) for t, p in by_topic.items()]
    return request


async def handle(broker, ctx, request):
    cluster = broker.cluster
    if cluster is None:
        return UpdateMetadataResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
    if ctx.api_version >= 5 and request.broker_epoch != -1 and \
            request.broker_epoch < cluster.broker_epoch:
        return UpdateMetadataResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
    store = broker.metadata
    if request.controller_epoch < store.controller_epoch or \
            request.controller_epoch < broker.replica_manager.controller_epoch:
        return UpdateMetadataResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
    # Kafka's maybeUpdateMetadataCache: the one controller epoch LeaderAndIsr and StopReplica
    # are checked against moves too, so an old controller's request queued behind this is
    # refused (a StopReplica with delete at leader epoch -2 would skip every other fence).
    broker.replica_manager.controller_epoch = request.controller_epoch
    deleted = store.apply_update_metadata(_grouped(request, ctx.api_version))
    broker.topics.metadata_changed()
    cluster.metadata_updated()
    coordinator = getattr(broker, "group_coordinator", None)
    if deleted and coordinator is not None:
        coordinator.on_partitions_deleted(deleted)      # Kafka's onPartitionsDeleted
    return UpdateMetadataResponse(error_code=ErrorCode.NONE)
