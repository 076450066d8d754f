"""DescribeCluster (api key 60), versions 0-1.

Behaviour: the cluster id, the controller (this broker: with one broker and no ZooKeeper it is its
own controller; in a cluster the one the controller's UpdateMetadata names; -1 when it is not
among the live brokers listed, as Kafka answers) and every live broker with its advertised
endpoint for the request's listener. v1 adds endpoint_type, as Kafka's AuthHelper answers a
broker: 1 (brokers) is served, 2 (controllers, KRaft only) is MISMATCHED_ENDPOINT_TYPE, any other
value UNSUPPORTED_ENDPOINT_TYPE. With include_cluster_authorized_operations every cluster
operation is authorized (there is no authorizer, as Kafka without one answers).
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.describe_cluster import DescribeClusterResponse

from broker.handlers.metadata import CLUSTER_OPERATIONS

API_KEY = ApiKey.DESCRIBE_CLUSTER
MIN_VERSION = 0
MAX_VERSION = 1

_BROKERS, _CONTROLLERS = 1, 2
_NOT_REQUESTED = -2**31                   # the schema's default for authorized operations


async def handle(broker, ctx, request):
    endpoint_type = request.endpoint_type if ctx.api_version >= 1 else _BROKERS
    if endpoint_type != _BROKERS:
        mismatched = endpoint_type == _CONTROLLERS
        return DescribeClusterResponse(
            error_code=(ErrorCode.MISMATCHED_ENDPOINT_TYPE if mismatched
                        else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE),
            error_message=("The request was sent to an endpoint of type BROKER, but we wanted "
                           "an endpoint of type CONTROLLER" if mismatched
                           else f"Unsupported endpoint type {endpoint_type}"),
            endpoint_type=endpoint_type, cluster_id=broker.cluster_id)
    nodes = [DescribeClusterResponse.DescribeClusterBroker(broker_id=i, host=h, port=p, rack=r)
             for i, h, p, r in broker.metadata_brokers(ctx.listener_name)]
    controller_id = broker.controller_id
    if controller_id not in {n.broker_id for n in nodes}:
        controller_id = -1
    return DescribeClusterResponse(
        endpoint_type=_BROKERS, cluster_id=broker.cluster_id, controller_id=controller_id,
        cluster_authorized_operations=(CLUSTER_OPERATIONS
                                       if request.include_cluster_authorized_operations
                                       else _NOT_REQUESTED),
        brokers=nodes)
