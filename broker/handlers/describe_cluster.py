"""DescribeCluster (api key 60), versions 0-1.

Behaviour: the cluster id, the controller (this broker: with one broker and no ZooKeeper it is its
own controller; in a cluster the one the controller's UpdateMetadata names) and every live broker with its advertised endpoint for the request's listener.
v1 adds endpoint_type: 1 (brokers) is served; 2 (controllers, KRaft only) answers
UNSUPPORTED_ENDPOINT_TYPE. Authorized operations are not computed (no ACLs): the field keeps
Kafka's "not requested" value.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.describe_cluster import DescribeClusterResponse

API_KEY = ApiKey.DESCRIBE_CLUSTER
MIN_VERSION = 0
MAX_VERSION = 1

_BROKERS = 1


async def handle(broker, ctx, request):
    if ctx.api_version >= 1 and request.endpoint_type != _BROKERS:
        return DescribeClusterResponse(
            error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            error_message="only broker endpoints are described",
            endpoint_type=request.endpoint_type, cluster_id=broker.cluster_id)
    return DescribeClusterResponse(
        endpoint_type=_BROKERS, cluster_id=broker.cluster_id, controller_id=broker.controller_id,
        brokers=[DescribeClusterResponse.DescribeClusterBroker(broker_id=i, host=h, port=p, rack=r)
                 for i, h, p, r in broker.metadata_brokers(ctx.listener_name)])
