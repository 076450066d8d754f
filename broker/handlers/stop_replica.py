"""StopReplica (api key 5), versions 0-4: the controller tells this broker to stop a replica
(stop fetching, stop leading), and with delete also to delete its log (a 3.9 controller sends
v4, with a leader epoch and a delete flag per partition).

A stale broker epoch answers STALE_BROKER_EPOCH and a stale controller epoch
STALE_CONTROLLER_EPOCH, changing nothing; per partition a leader epoch below the local one is
FENCED_LEADER_EPOCH (-2, "topic being deleted", and -1 always apply). A broker not in a cluster
answers STALE_CONTROLLER_EPOCH.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.stop_replica import StopReplicaResponse


API_KEY = ApiKey.STOP_REPLICA
MIN_VERSION = 0
MAX_VERSION = 4


def _partitions(request, version):
    """[(topic, partition, leader epoch, delete)] for every version's shape."""
    if version >= 3:
        return [(ts.topic_name, ps.partition_index, ps.leader_epoch, ps.delete_partition)
                for ts in request.topic_states for ps in ts.partition_states]
    if version >= 1:
        return [(t.name, p, -1, request.delete_partitions)
                for t in request.topics for p in t.partition_indexes]
    return [(p.topic_name, p.partition_index, -1, request.delete_partitions)
            for p in request.ungrouped_partitions]


async def handle(broker, ctx, request):
    version = ctx.api_version
    partitions = _partitions(request, version)

    def answer(code, errors=None):
        errors = errors or {}
        return StopReplicaResponse(
            error_code=code if not errors else ErrorCode.NONE,
            partition_errors=[StopReplicaResponse.StopReplicaPartitionError(
                topic_name=t, partition_index=p, error_code=errors.get((t, p), code))
                for t, p, _, _ in partitions])
    cluster = broker.cluster
    if cluster is None:
        return answer(ErrorCode.STALE_CONTROLLER_EPOCH)
    if version >= 1 and request.broker_epoch != -1 and request.broker_epoch < cluster.broker_epoch:
        return answer(ErrorCode.STALE_BROKER_EPOCH)
    error, errors = broker.replica_manager.stop_replicas(request.controller_epoch, partitions)
    if error != ErrorCode.NONE:
        return answer(error)
    for coordinator in broker.coordinators():
        for (topic, p), code in errors.items():
            if topic == coordinator.topic and code == ErrorCode.NONE:
                coordinator.unload_partition(p)
    broker.topics.metadata_changed()
    return answer(ErrorCode.NONE, errors)
