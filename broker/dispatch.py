"""Dispatch: decode a request frame, run its handler, and turn escaped exceptions into answers.

`decode_request(frame)` -> (header, handler module, request) or raises `BadRequest` with the
reason the connection must close (undecodable header or body, unknown api key, a version this
broker does not serve) - except ApiVersions at an unsupported version, which Kafka answers at v0
with UNSUPPORTED_VERSION and its list of versions (`UnsupportedApiVersions`).

`run_handler(broker, ctx, module, request)` awaits the handler. A `KafkaError` escaping it is an
expected refusal: every topic/partition of the answer gets its code. A `CloseConnection`
becomes `BadRequest`: the handler asks for the connection to be closed (Produce with acks=0 that
failed). Any other exception is a bug: logged with its traceback, answered with
UNKNOWN_SERVER_ERROR. A Produce with acks=0 has no answer to carry either: the connection
closes (Kafka's sendErrorOrCloseConnection).

`error_response(api_key, version, request, code)` is Kafka's AbstractRequest.getErrorResponse:
the response shaped after the request with the code in every error field. APIs with
per-topic/partition errors have a builder in `_BUILDERS`; others get the code in their top-level
`error_code` field. An API with neither cannot be answered: the caller closes the connection.
"""
from __future__ import annotations

import logging

from protocol.api import API_SPECS, ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.exceptions import ProtocolError
from protocol.headers import parse_request_header

from broker.context import CloseConnection
from broker.handlers import HANDLERS

log = logging.getLogger(__name__)


class BadRequest(Exception):
    """The request cannot be answered; the connection closes (message says why)."""


class UnsupportedApiVersions(Exception):
    """An ApiVersions request at a version we do not serve: answer v0 with the list."""

    def __init__(self, header):
        super().__init__(header.api_version)
        self.header = header


def decode_request(frame):
    try:
        header, offset = parse_request_header(frame)
    except ProtocolError as exc:
        raise BadRequest(f"invalid request header: {exc}") from None
    module = HANDLERS.get(header.api_key)
    if module is None:
        raise BadRequest(f"unknown or unsupported api key {header.api_key}")
    if not module.MIN_VERSION <= header.api_version <= module.MAX_VERSION:
        if header.api_key == ApiKey.API_VERSIONS:
            raise UnsupportedApiVersions(header)
        raise BadRequest(f"unsupported version {header.api_version} of "
                         f"{API_SPECS[header.api_key].name} (serving {module.MIN_VERSION}-"
                         f"{module.MAX_VERSION})")
    try:
        request = API_SPECS[header.api_key].request.decode(frame, header.api_version, offset)
    except ProtocolError as exc:
        raise BadRequest(f"invalid {API_SPECS[header.api_key].name} v{header.api_version} "
                         f"request: {exc}") from None
    return header, module, request


async def run_handler(broker, ctx, module, request):
    try:
        return await module.handle(broker, ctx, request)
    except CloseConnection as exc:
        raise BadRequest(str(exc)) from None
    except KafkaError as exc:
        code = exc.error_code
        log.debug("%s answered %s: %s", API_SPECS[ctx.api_key].name, code.name, exc.message)
    except Exception:
        code = ErrorCode.UNKNOWN_SERVER_ERROR
        log.exception("[KafkaApi-%s] Unexpected error handling %s v%d (correlation id %d) from %s",
                      broker.broker_id, API_SPECS[ctx.api_key].name, ctx.api_version,
                      ctx.correlation_id, ctx.connection_id)
    if ctx.api_key == ApiKey.PRODUCE and request.acks == 0:
        # no response to carry the error: Kafka closes the connection (sendErrorOrCloseConnection)
        raise BadRequest(f"Produce with acks=0 failed with {code.name}")
    response = error_response(ctx.api_key, ctx.api_version, request, code)
    if response is None:
        raise BadRequest(f"no error response shape for api key {ctx.api_key}")
    return response


# -- error responses shaped after the request -------------------------------------------------

def _topics_partitions(resp_cls, topic_cls, part_cls, req_topics, req_parts, req_index,
                       resp_topics, resp_parts, resp_index, topic_name="name"):
    """Builder for the common topics[].partitions[] shape."""
    def build(request, code):
        topics = []
        for t in getattr(request, req_topics) or []:
            parts = [part_cls(**{resp_index: getattr(p, req_index), "error_code": code})
                     for p in getattr(t, req_parts) or []]
            topics.append(topic_cls(**{topic_name: getattr(t, topic_name), resp_parts: parts}))
        return resp_cls(**{resp_topics: topics})
    return build


def _produce(request, code):
    from protocol.messages.produce import ProduceResponse as R
    return R(responses=[R.TopicProduceResponse(
        name=t.name, partition_responses=[
            R.PartitionProduceResponse(index=p.index, error_code=code)
            for p in t.partition_data]) for t in request.topic_data])


def _fetch(request, code):
    from protocol.messages.fetch import FetchResponse as R
    return R(error_code=code, responses=[R.FetchableTopicResponse(
        topic=t.topic, topic_id=t.topic_id, partitions=[
            R.PartitionData(partition_index=p.partition, error_code=code, high_watermark=-1)
            for p in t.partitions]) for t in request.topics])


def _list_offsets(request, code):
    from protocol.messages.list_offsets import ListOffsetsResponse as R
    return _topics_partitions(R, R.ListOffsetsTopicResponse, R.ListOffsetsPartitionResponse,
                              "topics", "partitions", "partition_index", "topics", "partitions",
                              "partition_index")(request, code)


def _offset_for_leader_epoch(request, code):
    from protocol.messages.offset_for_leader_epoch import OffsetForLeaderEpochResponse as R
    return _topics_partitions(R, R.OffsetForLeaderTopicResult, R.EpochEndOffset, "topics",
                              "partitions", "partition", "topics", "partitions", "partition",
                              topic_name="topic")(request, code)


def _delete_records(request, code):
    from protocol.messages.delete_records import DeleteRecordsResponse as R
    return _topics_partitions(R, R.DeleteRecordsTopicResult, R.DeleteRecordsPartitionResult,
                              "topics", "partitions", "partition_index", "topics", "partitions",
                              "partition_index")(request, code)


def _offset_commit(request, code):
    from protocol.messages.offset_commit import OffsetCommitResponse as R
    return _topics_partitions(R, R.OffsetCommitResponseTopic, R.OffsetCommitResponsePartition,
                              "topics", "partitions", "partition_index", "topics", "partitions",
                              "partition_index")(request, code)


def _metadata(request, code):
    from protocol.messages.metadata import MetadataResponse as R
    # Kafka's MetadataRequest.getErrorResponse: a null name (a topic asked by id) is ""
    return R(topics=[R.MetadataResponseTopic(
        error_code=code, name="" if t.name is None else t.name, topic_id=t.topic_id)
        for t in request.topics or []])


def _create_topics(request, code):
    from protocol.messages.create_topics import CreateTopicsResponse as R
    return R(topics=[R.CreatableTopicResult(name=t.name, error_code=code)
                     for t in request.topics])


def _delete_topics(request, code):
    from protocol.messages.delete_topics import DeleteTopicsResponse as R
    results = [R.DeletableTopicResult(name=name, error_code=code)
               for name in request.topic_names or []]
    results += [R.DeletableTopicResult(name=t.name, topic_id=t.topic_id, error_code=code)
                for t in request.topics or []]
    return R(responses=results)


def _create_partitions(request, code):
    from protocol.messages.create_partitions import CreatePartitionsResponse as R
    return R(results=[R.CreatePartitionsTopicResult(name=t.name, error_code=code)
                      for t in request.topics])


def _describe_configs(request, code):
    from protocol.messages.describe_configs import DescribeConfigsResponse as R
    return R(results=[R.DescribeConfigsResult(error_code=code, resource_type=r.resource_type,
                                              resource_name=r.resource_name)
                      for r in request.resources])


def _alter_configs(request, code):
    from protocol.messages.alter_configs import AlterConfigsResponse as R
    return R(responses=[R.AlterConfigsResourceResponse(
        error_code=code, resource_type=r.resource_type, resource_name=r.resource_name)
        for r in request.resources])


def _incremental_alter_configs(request, code):
    from protocol.messages.incremental_alter_configs import IncrementalAlterConfigsResponse as R
    return R(responses=[R.AlterConfigsResourceResponse(
        error_code=code, resource_type=r.resource_type, resource_name=r.resource_name)
        for r in request.resources])


def _describe_groups(request, code):
    from protocol.messages.describe_groups import DescribeGroupsResponse as R
    return R(groups=[R.DescribedGroup(error_code=code, group_id=g) for g in request.groups])


def _delete_groups(request, code):
    from protocol.messages.delete_groups import DeleteGroupsResponse as R
    return R(results=[R.DeletableGroupResult(group_id=g, error_code=code)
                      for g in request.groups_names])


def _find_coordinator(request, code):
    from protocol.messages.find_coordinator import FindCoordinatorResponse as R
    return R(error_code=code, node_id=-1, host="", port=-1,
             coordinators=[R.Coordinator(key=k, node_id=-1, host="", port=-1, error_code=code)
                           for k in request.coordinator_keys or []])


def _offset_fetch(request, code):
    """v0-7: top-level error code (v2+) and per partition; v8+: per group."""
    from protocol.messages.offset_fetch import OffsetFetchResponse as R
    topics = [R.OffsetFetchResponseTopic(name=t.name, partitions=[
        R.OffsetFetchResponsePartition(partition_index=p, committed_offset=-1, error_code=code)
        for p in t.partition_indexes]) for t in request.topics or []]
    groups = [R.OffsetFetchResponseGroup(group_id=g.group_id, error_code=code)
              for g in request.groups or []]
    return R(error_code=code, topics=topics, groups=groups)


def _alter_client_quotas(request, code):
    from protocol.messages.alter_client_quotas import AlterClientQuotasResponse as R
    return R(entries=[R.EntryData(error_code=code, entity=[
        R.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity])
        for entry in request.entries])


def _write_txn_markers(request, code):
    from protocol.messages.write_txn_markers import WriteTxnMarkersResponse as R
    return R(markers=[R.WritableTxnMarkerResult(producer_id=m.producer_id, topics=[
        R.WritableTxnMarkerTopicResult(name=t.name, partitions=[
            R.WritableTxnMarkerPartitionResult(partition_index=p, error_code=code)
            for p in t.partition_indexes]) for t in m.topics]) for m in request.markers])


def _txn_offset_commit(request, code):
    from protocol.messages.txn_offset_commit import TxnOffsetCommitResponse as R
    return R(topics=[R.TxnOffsetCommitResponseTopic(name=t.name, partitions=[
        R.TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
        for p in t.partitions]) for t in request.topics])


def _alter_replica_log_dirs(request, code):
    from protocol.messages.alter_replica_log_dirs import AlterReplicaLogDirsResponse as R
    return R(results=[R.AlterReplicaLogDirTopicResult(topic_name=t.name, partitions=[
        R.AlterReplicaLogDirPartitionResult(partition_index=p, error_code=code)
        for p in t.partitions]) for d in request.dirs for t in d.topics])


def _describe_producers(request, code):
    from protocol.messages.describe_producers import DescribeProducersResponse as R
    return R(topics=[R.TopicResponse(name=t.name, partitions=[
        R.PartitionResponse(partition_index=p, error_code=code, active_producers=[])
        for p in t.partition_indexes]) for t in request.topics])


def _describe_transactions(request, code):
    from protocol.messages.describe_transactions import DescribeTransactionsResponse as R
    return R(transaction_states=[R.TransactionState(
        error_code=code, transactional_id=t, transaction_state="", transaction_timeout_ms=0,
        transaction_start_time_ms=-1, producer_id=-1, producer_epoch=-1, topics=[])
        for t in request.transactional_ids])


def _add_partitions_to_txn(request, code):
    """Kafka's getErrorResponse: v4+ a top-level error, v0-3 one per partition (the response has
    no top-level error there); both are filled, each version encodes its own."""
    from protocol.messages.add_partitions_to_txn import AddPartitionsToTxnResponse as R
    return R(error_code=code, results_by_topic_v3_and_below=[
        R.AddPartitionsToTxnTopicResult(name=t.name, results_by_partition=[
            R.AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=code)
            for p in t.partitions]) for t in request.v3_and_below_topics or []])


def _elect_leaders(request, code):
    """Kafka's getErrorResponse: every partition named (v0 has no top-level error)."""
    from protocol.messages.elect_leaders import ElectLeadersResponse as R
    return R(error_code=code, replica_election_results=[
        R.ReplicaElectionResult(topic=t.topic, partition_result=[
            R.PartitionResult(partition_id=p, error_code=code) for p in t.partitions])
        for t in request.topic_partitions or []])


def _create_acls(request, code):
    """Kafka's getErrorResponse: the code for every creation."""
    from protocol.messages.create_acls import CreateAclsResponse as R
    return R(results=[R.AclCreationResult(error_code=code) for _ in request.creations or []])


def _delete_acls(request, code):
    """Kafka's getErrorResponse: the code for every filter, nothing matched."""
    from protocol.messages.delete_acls import DeleteAclsResponse as R
    return R(filter_results=[R.DeleteAclsFilterResult(error_code=code, matching_acls=[])
                             for _ in request.filters or []])


_BUILDERS = {
    ApiKey.PRODUCE: _produce,
    ApiKey.FETCH: _fetch,
    ApiKey.LIST_OFFSETS: _list_offsets,
    ApiKey.METADATA: _metadata,
    ApiKey.OFFSET_COMMIT: _offset_commit,
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.DELETE_RECORDS: _delete_records,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _offset_for_leader_epoch,
    ApiKey.DESCRIBE_CONFIGS: _describe_configs,
    ApiKey.ALTER_CONFIGS: _alter_configs,
    ApiKey.CREATE_PARTITIONS: _create_partitions,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _incremental_alter_configs,
    ApiKey.DESCRIBE_GROUPS: _describe_groups,
    ApiKey.DELETE_GROUPS: _delete_groups,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.ALTER_CLIENT_QUOTAS: _alter_client_quotas,
    ApiKey.WRITE_TXN_MARKERS: _write_txn_markers,
    ApiKey.TXN_OFFSET_COMMIT: _txn_offset_commit,
    ApiKey.ALTER_REPLICA_LOG_DIRS: _alter_replica_log_dirs,
    ApiKey.DESCRIBE_PRODUCERS: _describe_producers,
    ApiKey.DESCRIBE_TRANSACTIONS: _describe_transactions,
    ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions_to_txn,
    ApiKey.ELECT_LEADERS: _elect_leaders,
    ApiKey.CREATE_ACLS: _create_acls,
    ApiKey.DELETE_ACLS: _delete_acls,
}


def error_response(api_key: int, version: int, request, code: int):
    """The response to `request` with `code` everywhere, or None if it has no error field."""
    code = int(code)
    builder = _BUILDERS.get(api_key)
    if builder is not None:
        return builder(request, code)
    response_cls = API_SPECS[api_key].response
    if "error_code" in response_cls.__slots__:
        return response_cls(error_code=code)
    return None
