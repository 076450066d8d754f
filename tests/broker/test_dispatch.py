"""dispatch: request decoding decisions and error responses shaped after the request."""
import struct
import uuid

import pytest

from protocol.api import API_SPECS, ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.headers import RequestHeader
from protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from protocol.messages.create_acls import CreateAclsRequest
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.delete_acls import DeleteAclsRequest
from protocol.messages.delete_groups import DeleteGroupsRequest
from protocol.messages.delete_topics import DeleteTopicsRequest
from protocol.messages.describe_groups import DescribeGroupsRequest
from protocol.messages.elect_leaders import ElectLeadersRequest
from protocol.messages.fetch import FetchRequest
from protocol.messages.find_coordinator import FindCoordinatorRequest
from protocol.messages.list_offsets import ListOffsetsRequest
from protocol.messages.metadata import MetadataRequest
from protocol.messages.offset_fetch import OffsetFetchRequest
from protocol.messages.produce import ProduceRequest
from protocol.messages.alter_replica_log_dirs import AlterReplicaLogDirsRequest as ARLD
from protocol.messages.describe_producers import DescribeProducersRequest as DP
from protocol.messages.describe_transactions import DescribeTransactionsRequest
from protocol.messages.txn_offset_commit import TxnOffsetCommitRequest as TOC
from protocol.messages.write_txn_markers import WriteTxnMarkersRequest as WTM

from broker.context import RequestContext
from broker.dispatch import (_BUILDERS, BadRequest, UnsupportedApiVersions, decode_request,
                             error_response, run_handler)
from broker.handlers import HANDLERS


def request_frame(message, api_key, version, correlation_id=5) -> memoryview:
    header = RequestHeader(api_key, version, correlation_id, "t")
    return memoryview(header.encode() + message.encode(version))


def test_decode_request_happy_path():
    frame = request_frame(MetadataRequest(topics=None), ApiKey.METADATA, 9)
    header, module, request = decode_request(frame)
    assert (header.api_key, header.api_version, header.correlation_id) == (3, 9, 5)
    assert module is HANDLERS[ApiKey.METADATA] and request.topics is None


@pytest.mark.parametrize("frame,reason", [
    (struct.pack(">hh", 3, 1), "header"),
    (struct.pack(">hhih", 4242, 0, 1, -1), "unknown"),
    (struct.pack(">hhih", ApiKey.METADATA, 50, 1, -1), "unsupported version"),
    (struct.pack(">hhih", ApiKey.METADATA, 1, 1, -1) + b"\x00\x00\x00\x09", "invalid"),
])
def test_decode_request_refusals(frame, reason):
    with pytest.raises(BadRequest, match=reason):
        decode_request(memoryview(frame))


def test_api_versions_unsupported_version_is_special():
    with pytest.raises(UnsupportedApiVersions) as info:
        decode_request(memoryview(struct.pack(">hhih", ApiKey.API_VERSIONS, 100, 9, -1)))
    assert info.value.header.correlation_id == 9


def _sample_requests():
    P = ProduceRequest
    F = FetchRequest
    L = ListOffsetsRequest
    return {
        ApiKey.PRODUCE: (P(acks=1, topic_data=[P.TopicProduceData(name="t", partition_data=[
            P.PartitionProduceData(index=0), P.PartitionProduceData(index=3)])]), 9),
        ApiKey.FETCH: (F(topics=[F.FetchTopic(topic="t", topic_id=uuid.uuid4(), partitions=[
            F.FetchPartition(partition=2)])]), 12),
        ApiKey.LIST_OFFSETS: (L(topics=[L.ListOffsetsTopic(name="t", partitions=[
            L.ListOffsetsPartition(partition_index=1)])]), 7),
        ApiKey.METADATA: (MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
            name="t")]), 12),
        ApiKey.CREATE_TOPICS: (CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name="t", num_partitions=1, replication_factor=1)]), 7),
        ApiKey.DELETE_TOPICS: (DeleteTopicsRequest(topic_names=["t"]), 5),
        ApiKey.DESCRIBE_GROUPS: (DescribeGroupsRequest(groups=["g"]), 5),
        ApiKey.DELETE_GROUPS: (DeleteGroupsRequest(groups_names=["g"]), 2),
        ApiKey.FIND_COORDINATOR: (FindCoordinatorRequest(key_type=0, coordinator_keys=["g"]), 4),
        ApiKey.OFFSET_FETCH: (OffsetFetchRequest(group_id="g", topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0])]), 7),
        ApiKey.WRITE_TXN_MARKERS: (WTM(markers=[WTM.WritableTxnMarker(
            producer_id=1, producer_epoch=0, transaction_result=True, coordinator_epoch=0,
            topics=[WTM.WritableTxnMarkerTopic(name="t", partition_indexes=[0, 1])])]), 1),
        ApiKey.TXN_OFFSET_COMMIT: (TOC(transactional_id="x", group_id="g", topics=[
            TOC.TxnOffsetCommitRequestTopic(name="t", partitions=[
                TOC.TxnOffsetCommitRequestPartition(partition_index=0)])]), 3),
        ApiKey.ALTER_REPLICA_LOG_DIRS: (ARLD(dirs=[ARLD.AlterReplicaLogDir(path="/d", topics=[
            ARLD.AlterReplicaLogDirTopic(name="t", partitions=[0, 2])])]), 2),
        ApiKey.DESCRIBE_PRODUCERS: (DP(topics=[DP.TopicRequest(name="t",
                                                               partition_indexes=[0])]), 0),
        ApiKey.DESCRIBE_TRANSACTIONS: (DescribeTransactionsRequest(
            transactional_ids=["x"]), 0),
        # versions whose responses have no top-level error (Kafka's getErrorResponse)
        ApiKey.ADD_PARTITIONS_TO_TXN: (AddPartitionsToTxnRequest(
            v3_and_below_transactional_id="x", v3_and_below_topics=[
                AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="t", partitions=[0, 1])]), 3),
        ApiKey.ELECT_LEADERS: (ElectLeadersRequest(topic_partitions=[
            ElectLeadersRequest.TopicPartitions(topic="t", partitions=[0])]), 0),
        ApiKey.CREATE_ACLS: (CreateAclsRequest(creations=[CreateAclsRequest.AclCreation()] * 2), 3),
        ApiKey.DELETE_ACLS: (DeleteAclsRequest(filters=[DeleteAclsRequest.DeleteAclsFilter()]), 3),
    }


def test_every_served_api_has_an_error_response():
    # Kafka answers any failure with the request's getErrorResponse; an API without one here
    # would close the client's connection instead.
    for api_key in HANDLERS:
        if api_key == ApiKey.API_VERSIONS:
            continue
        spec = API_SPECS[api_key]
        assert error_response(api_key, spec.max_version, spec.request(),
                              ErrorCode.UNKNOWN_SERVER_ERROR) is not None, api_key


@pytest.mark.parametrize("api_key", list(_sample_requests()))
def test_error_response_marks_every_partition(api_key):
    request, version = _sample_requests()[api_key]
    response = error_response(api_key, version, request, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    data = response.encode(version)                            # encodable at that version
    decoded = API_SPECS[api_key].response.decode(data, version)
    codes = []

    def collect(obj):
        for name in getattr(obj, "__slots__", ()):
            value = getattr(obj, name, None)
            if name.endswith("error_code"):
                codes.append(value)
            elif isinstance(value, list):
                for item in value:
                    collect(item)
    collect(decoded)
    assert codes and all(c in (ErrorCode.NOT_LEADER_OR_FOLLOWER, 0) for c in codes)
    assert codes.count(ErrorCode.NOT_LEADER_OR_FOLLOWER) >= 1


def test_every_builder_encodes_for_an_empty_request():
    for api_key, builder in _BUILDERS.items():
        spec = API_SPECS[api_key]
        request = spec.request()
        response = error_response(api_key, spec.max_version, request,
                                  ErrorCode.UNKNOWN_SERVER_ERROR)
        assert response.encode(spec.max_version)


def test_top_level_error_code_fallback_and_none():
    spec = API_SPECS[ApiKey.INIT_PRODUCER_ID]
    response = error_response(ApiKey.INIT_PRODUCER_ID, 4, spec.request(), 7)
    assert response.error_code == 7
    assert error_response(ApiKey.SASL_HANDSHAKE, 1, API_SPECS[ApiKey.SASL_HANDSHAKE].request(),
                          1).error_code == 1


async def test_run_handler_maps_exceptions():
    class Module:
        @staticmethod
        async def handle(broker, ctx, request):
            raise KafkaError(ErrorCode.POLICY_VIOLATION, "no")

    class Broker:
        broker_id = 0
    request = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(name="x")])
    ctx = RequestContext(ApiKey.CREATE_TOPICS, 7, 1)
    response = await run_handler(Broker(), ctx, Module, request)
    assert [t.error_code for t in response.topics] == [ErrorCode.POLICY_VIOLATION]

    class Buggy:
        @staticmethod
        async def handle(broker, ctx, request):
            return 1 / 0
    response = await run_handler(Broker(), ctx, Buggy, request)
    assert [t.error_code for t in response.topics] == [ErrorCode.UNKNOWN_SERVER_ERROR]
