"""AlterPartitionReassignments (api key 45), v0: move a partition's replicas to other brokers,
or cancel a move (replicas null), as Kafka's KafkaApis / KafkaController in ZooKeeper mode
(KIP-455; `kafka-reassign-partitions.sh --execute` and `--cancel`).

The active controller decides (broker/controller/controller.py, "reassignment"): per partition
INVALID_REPLICA_ASSIGNMENT (empty, duplicated, negative or not-alive brokers, with Kafka's
messages), NO_REASSIGNMENT_IN_PROGRESS for a cancel with nothing to cancel,
UNKNOWN_TOPIC_OR_PARTITION, or NONE once the reassignment has started (it completes later,
when the new replicas have caught up). Another broker answers NOT_CONTROLLER for the whole
request, as Kafka does. A single broker (no ZooKeeper) has one replica per partition on itself:
a target of exactly that replica is accepted (nothing to move), any other broker is not alive.
"""
from protocol.errors import ErrorCode
from protocol.messages.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse)

from broker.controller.controller import invalid_replicas

API_KEY = 45
MIN_VERSION = 0
MAX_VERSION = 0

R = AlterPartitionReassignmentsResponse


def _single_broker(broker, requests: dict) -> dict:
    out = {}
    for (topic, p), target in requests.items():
        meta = broker.metadata.get_topic(topic)
        current = meta.partitions[p].replicas if meta is not None and p in meta.partitions \
            else None
        if target is None:
            out[(topic, p)] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)
            continue
        error = invalid_replicas(target, [r for r in target if r not in (current or [])],
                                 {broker.broker_id})
        if error is not None:
            out[(topic, p)] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT, error)
        elif current is None:
            out[(topic, p)] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                               "The partition does not exist.")
        else:
            out[(topic, p)] = (ErrorCode.NONE, None)
    return out


async def handle(broker, ctx, request: AlterPartitionReassignmentsRequest) -> R:
    requests = {(t.name, p.partition_index): (None if p.replicas is None else list(p.replicas))
                for t in request.topics for p in t.partitions}
    cluster = getattr(broker, "cluster", None)
    controller = cluster.controller if cluster is not None else None
    if controller is None:
        results = _single_broker(broker, requests)
    elif not controller.is_active:
        return R(throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER,
                 error_message="This is not the correct controller for this cluster.",
                 responses=[])
    else:
        results = await controller.enqueue(controller.alter_partition_reassignments, requests)
    by_topic: dict = {}
    for (topic, p), (code, message) in results.items():
        by_topic.setdefault(topic, []).append(R.ReassignablePartitionResponse(
            partition_index=p, error_code=code, error_message=message))
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
             responses=[R.ReassignableTopicResponse(name=t, partitions=ps)
                        for t, ps in by_topic.items()])
