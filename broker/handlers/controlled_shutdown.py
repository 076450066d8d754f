"""ControlledShutdown (api key 7), versions 1-3 (v0 had a request header of its own): a broker
about to stop asks the controller to move its leaderships away (a 3.9 broker sends v3 with its
broker epoch).

Answered by the controller (broker/controller/controller.py `controlled_shutdown`): NONE with
the partitions the broker still leads (those with one replica, or no other ISR member);
STALE_BROKER_EPOCH for an epoch older than the registration's; BROKER_NOT_AVAILABLE for an
unknown broker; STALE_CONTROLLER_EPOCH from a broker that is not the controller (Kafka's
ControllerMovedException code), and from a broker not in a cluster.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.controlled_shutdown import ControlledShutdownResponse

API_KEY = ApiKey.CONTROLLED_SHUTDOWN
MIN_VERSION = 1
MAX_VERSION = 3


async def handle(broker, ctx, request):
    cluster = broker.cluster
    if cluster is None or not cluster.controller.is_active:
        return ControlledShutdownResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
    epoch = request.broker_epoch if ctx.api_version >= 2 else -1
    controller = cluster.controller
    error, remaining = await controller.enqueue(controller.controlled_shutdown,
                                                request.broker_id, epoch)
    return ControlledShutdownResponse(error_code=error, remaining_partitions=[
        ControlledShutdownResponse.RemainingPartition(topic_name=t, partition_index=p)
        for t, p in remaining])
