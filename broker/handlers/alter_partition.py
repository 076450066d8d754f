"""AlterPartition (api key 56), versions 0-3: a partition leader asks the controller to change
the ISR (followers that fell behind leave it, followers that caught up join it).

Answered by the controller (broker/controller/controller.py `alter_partition`, Kafka's
tryProcessAlterPartition): NOT_CONTROLLER from any other broker; STALE_BROKER_EPOCH for a
leader whose broker epoch is not the registered one; per partition UNKNOWN_TOPIC_ID /
UNKNOWN_TOPIC_OR_PARTITION, FENCED_LEADER_EPOCH for an older leader epoch,
INVALID_UPDATE_VERSION for an older partition epoch, INELIGIBLE_REPLICA (v2+; v0-1:
OPERATION_NOT_ATTEMPTED) for a dead or shutting-down ISR member; otherwise the new state with
its partition epoch.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.alter_partition import AlterPartitionResponse

API_KEY = ApiKey.ALTER_PARTITION
MIN_VERSION = 0
MAX_VERSION = 3

R = AlterPartitionResponse


async def handle(broker, ctx, request):
    version = ctx.api_version
    cluster = broker.cluster
    if cluster is None or not cluster.controller.is_active:
        return R(error_code=ErrorCode.NOT_CONTROLLER)
    controller = cluster.controller
    names = {tid: t for t, tid in controller.ctx.topic_ids.items()}
    changes, unknown = {}, []
    for topic in request.topics:
        name = topic.topic_name if version < 2 else names.get(topic.topic_id)
        for p in topic.partitions:
            if name is None:
                unknown.append((topic, p.partition_index))
                continue
            isr = ([s.broker_id for s in p.new_isr_with_epochs] if version >= 3
                   else list(p.new_isr))
            changes[(name, p.partition_index)] = (p.leader_epoch, isr,
                                                  p.leader_recovery_state == 1,
                                                  p.partition_epoch)
    error, results = await controller.enqueue(controller.alter_partition, request.broker_id,
                                              request.broker_epoch, changes)
    if error != ErrorCode.NONE:
        return R(error_code=error)
    topics = []
    for topic in request.topics:
        name = topic.topic_name if version < 2 else names.get(topic.topic_id)
        parts = []
        for p in topic.partitions:
            result = results.get((name, p.partition_index)) if name is not None else None
            if name is None:
                parts.append(R.PartitionData(partition_index=p.partition_index,
                                             error_code=ErrorCode.UNKNOWN_TOPIC_ID))
            elif isinstance(result, int):
                code = result
                if code == ErrorCode.INELIGIBLE_REPLICA and version < 2:
                    code = ErrorCode.OPERATION_NOT_ATTEMPTED
                parts.append(R.PartitionData(partition_index=p.partition_index, error_code=code))
            else:
                parts.append(R.PartitionData(
                    partition_index=p.partition_index, error_code=ErrorCode.NONE,
                    leader_id=result.leader, leader_epoch=result.leader_epoch,
                    isr=list(result.isr), leader_recovery_state=1 if result.recovering else 0,
                    partition_epoch=result.partition_epoch))
        topics.append(R.TopicData(topic_name=topic.topic_name, topic_id=topic.topic_id,
                                  partitions=parts))
    return R(error_code=ErrorCode.NONE, topics=topics)
