"""ListPartitionReassignments (api key 46), v0: the partitions being reassigned, with their
replicas, adding and removing replicas, as Kafka's controller keeps them
(`kafka-reassign-partitions.sh --list` and `--verify`).

Served by the active controller (another broker answers NOT_CONTROLLER, as Kafka); topics null
means every partition being reassigned, otherwise only the named partitions that are. A single
broker never reassigns: the list is empty.
"""
from protocol.errors import ErrorCode
from protocol.messages.list_partition_reassignments import (
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse)

API_KEY = 46
MIN_VERSION = 0
MAX_VERSION = 0

R = ListPartitionReassignmentsResponse


async def handle(broker, ctx, request: ListPartitionReassignmentsRequest) -> R:
    cluster = getattr(broker, "cluster", None)
    controller = cluster.controller if cluster is not None else None
    if controller is not None and not controller.is_active:
        return R(throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER,
                 error_message="This is not the correct controller for this cluster.",
                 topics=[])
    found = {}
    if controller is not None:
        wanted = None if request.topics is None else [
            (t.name, p) for t in request.topics for p in t.partition_indexes]
        found = await controller.enqueue(_list, controller, wanted)
    by_topic: dict = {}
    for (topic, p), (replicas, adding, removing) in sorted(found.items()):
        by_topic.setdefault(topic, []).append(R.OngoingPartitionReassignment(
            partition_index=p, replicas=replicas, adding_replicas=adding,
            removing_replicas=removing))
    return R(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
             topics=[R.OngoingTopicReassignment(name=t, partitions=ps)
                     for t, ps in by_topic.items()])


async def _list(controller, wanted):
    return controller.list_partition_reassignments(wanted)
