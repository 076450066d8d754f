"""LeaderAndIsr (api key 4), versions 0-7: the controller tells this broker which replicas it
leads and follows (a 3.9 controller sends v7).

Behaviour (Kafka's KafkaApis.handleLeaderAndIsrRequest, ReplicaManager.becomeLeaderOrFollower):
- a broker epoch below this broker's (the request was meant for an earlier incarnation of it):
  STALE_BROKER_EPOCH, nothing applied;
- a controller epoch below the highest seen: STALE_CONTROLLER_EPOCH, nothing applied;
- per partition: a leader epoch above the local one is applied (the broker must be in the
  replica list, else UNKNOWN_TOPIC_OR_PARTITION); an equal or lower one is ignored with
  STALE_CONTROLLER_EPOCH (Kafka's per-partition code for it); a topic id other than the local
  log's is INCONSISTENT_TOPIC_ID;
- then the group coordinator loads the `__consumer_offsets` partitions this broker now leads
  and unloads those it now follows.
A broker not in a cluster (no zookeeper.connect) takes no controller's orders:
STALE_CONTROLLER_EPOCH.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.leader_and_isr import LeaderAndIsrResponse


API_KEY = ApiKey.LEADER_AND_ISR
MIN_VERSION = 0
MAX_VERSION = 7


def _states(request, version):
    if version < 2:
        return [(ps.topic_name, None, ps) for ps in request.ungrouped_partition_states]
    return [(ts.topic_name, ts.topic_id if version >= 5 else None, ps)
            for ts in request.topic_states for ps in ts.partition_states]


def _response(version, states, code, errors=None):
    errors = errors or {}

    def error_of(topic, p):
        return errors.get((topic, p), code)
    if version < 5:
        return LeaderAndIsrResponse(error_code=code if not errors else ErrorCode.NONE,
                                    partition_errors=[
            LeaderAndIsrResponse.LeaderAndIsrPartitionError(
                topic_name=t, partition_index=ps.partition_index,
                error_code=error_of(t, ps.partition_index)) for t, _, ps in states])
    by_topic = {}
    for topic, topic_id, ps in states:
        by_topic.setdefault((topic, topic_id), []).append(
            LeaderAndIsrResponse.LeaderAndIsrPartitionError(
                partition_index=ps.partition_index, error_code=error_of(topic, ps.partition_index)))
    return LeaderAndIsrResponse(
        error_code=code if not errors else ErrorCode.NONE,
        topics=[LeaderAndIsrResponse.LeaderAndIsrTopicError(topic_id=tid, partition_errors=pe)
                for (_, tid), pe in by_topic.items()])


async def handle(broker, ctx, request):
    version = ctx.api_version
    states = _states(request, version)
    cluster = broker.cluster
    if cluster is None:
        return _response(version, states, ErrorCode.STALE_CONTROLLER_EPOCH)
    if version >= 2 and request.broker_epoch != -1 and request.broker_epoch < cluster.broker_epoch:
        return _response(version, states, ErrorCode.STALE_BROKER_EPOCH)
    error, errors, leaders, followers = await broker.replica_manager.become_leader_or_follower(
        request.controller_epoch, states, cluster.log_config_for,
        set(broker.metadata.live_brokers))
    if error != ErrorCode.NONE:
        return _response(version, states, error)
    broker.topics.metadata_changed()
    for coordinator in broker.coordinators():
        for topic, p in followers:
            if topic == coordinator.topic:
                coordinator.unload_partition(p)
        for topic, p in leaders:
            if topic == coordinator.topic:
                coordinator.load_partition(p)
    return _response(version, states, ErrorCode.NONE, errors)
