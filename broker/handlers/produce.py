"""Produce (api key 0), versions 0-11.

Behaviour:
- acks 0 / 1 / -1. acks=0 appends and sends nothing back (the client does not read a response);
  if any partition failed, the connection is closed instead, as Kafka does.
  acks=-1 appends, then waits in the produce purgatory until the high watermark covers every
  partition's append (immediate with one replica) or timeout_ms passes -> REQUEST_TIMED_OUT for
  the partitions not covered. Any other acks value -> INVALID_REQUIRED_ACKS for every partition.
- Several topics and partitions per request; errors are per partition: UNKNOWN_TOPIC_OR_PARTITION,
  INVALID_TOPIC_EXCEPTION (clients may not write the internal topics __consumer_offsets and
  __transaction_state, as Kafka),
  NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS (acks=-1 with fewer in-sync replicas than
  min.insync.replicas), and storage's validation errors (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE,
  INVALID_RECORD with record_errors on v8+, INVALID_TIMESTAMP, ...) and idempotent producer errors
  (OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH). From v3, records with no complete
  batch (empty, or a torn batch) -> INVALID_RECORD, as Kafka's request validation. A duplicate
  batch of an idempotent producer is answered with the offsets it got the first time, without
  appending again.
- Records stay the request's memoryview all the way to the segment file: storage patches offsets
  in place, no per-record Python work here.
- Transactions: a transactional producer's batches (after InitProducerId and AddPartitionsToTxn
  with the transaction coordinator) are appended like idempotent ones and open a transaction in
  the partition's producer state; its records are hidden from read_committed consumers until the
  coordinator's marker (WriteTxnMarkers) ends it. Transactional batches in a request without a
  transactional_id are answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition, as
  Kafka answers them (no authorized transactional id). A producer's first transactional write
  to a partition in a transaction is verified with the coordinator first
  (transaction.partition.verification.enable, broker/txn_verification.py): INVALID_TXN_STATE
  when the partition is not in its transaction, NOT_ENOUGH_REPLICAS (retried) when the
  coordinator cannot tell yet, and INVALID_TXN_STATE too when a marker ended the transaction
  between the coordinator's answer and the append (the verification guard).
- Client quotas: the request's size counts against the producer_byte_rate quota of its (user,
  client id) (broker/quotas.py); over it, throttle_time_ms says how long the client must wait and
  the connection reads nothing more meanwhile (also with acks=0, which has no response), for
  every version as Kafka 3.9 (broker/connection.py).
- Version quirks: v0-v2 carry message format v0/v1 batches, which storage converts to v2;
  log_append_time_ms from v2, log_start_offset from v5, record_errors/error_message from v8.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.produce import ProduceResponse
from storage.producer_state import NOT_VERIFYING

from coordinator.internal_topics import INTERNAL_TOPICS

from broker.context import CloseConnection
from broker.replica_manager import AppendResult
from broker.txn_verification import (enabled, produce_error, producer_of, sequence_of,
                                     start_verification, verify)

API_KEY = ApiKey.PRODUCE
MIN_VERSION = 0
MAX_VERSION = 11

_MAGIC_POS = 16           # RecordBatch v2: magic int8 at byte 16, attributes int16 at byte 21
_ATTRIBUTES_POS = 21
_TRANSACTIONAL_BIT = 0x10


def _has_transactional_batch(records) -> bool:
    """Peek the first batch's attributes (a producer never mixes kinds in one partition)."""
    if records is None or len(records) < _ATTRIBUTES_POS + 2:
        return False
    view = memoryview(records)
    return view[_MAGIC_POS] >= 2 and bool(view[_ATTRIBUTES_POS + 1] & _TRANSACTIONAL_BIT)


async def handle(broker, ctx, request):
    replica_manager = broker.replica_manager
    acks = request.acks
    forced_error = None
    if acks not in (0, 1, -1):
        forced_error = ErrorCode.INVALID_REQUIRED_ACKS
    elif request.transactional_id is None and any(
            _has_transactional_batch(p.records)
            for t in request.topic_data for p in t.partition_data):
        forced_error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    entries = {}
    early = {}
    if forced_error is None:
        for topic_data in request.topic_data:
            for partition_data in topic_data.partition_data:
                key = (topic_data.name, partition_data.index)
                if topic_data.name in INTERNAL_TOPICS:
                    early[key] = ErrorCode.INVALID_TOPIC_EXCEPTION
                elif partition_data.records is None:
                    early[key] = ErrorCode.CORRUPT_MESSAGE
                else:
                    entries[key] = partition_data.records
    unverified, guards = {}, {}
    if entries and request.transactional_id is not None:
        unverified, guards = await _verify(broker, request.transactional_id, entries,
                                           ctx.api_version)
        for key in unverified:
            del entries[key]
    results = (replica_manager.append_records(entries, acks, produce_version=ctx.api_version,
                                              verification=guards)
               if entries else {})
    for key, (code, message) in unverified.items():
        results[key] = AppendResult(code, message)
    await replica_manager.flush_if_due(results)
    quotas = getattr(broker, "quotas", None)      # (handler tests pass a bare namespace)
    if quotas is not None and quotas.produce.overrides:
        ctx.throttle_time_ms = quotas.produce_throttle(ctx, broker.time.ms())
    if acks == 0:
        _close_if_failed(ctx.api_version, results, early, forced_error)
        return None
    await replica_manager.wait_for_acks(results, acks, request.timeout_ms)
    response = _response(request, ctx.api_version, results, early, forced_error, set(unverified))
    response.throttle_time_ms = ctx.throttle_time_ms
    if ctx.api_version >= 10:
        _add_leader_hints(broker, ctx, response)
    return response


async def _verify(broker, transactional_id, entries, version) -> tuple[dict, dict]:
    """({key: (code, message)} of the transactional partitions that failed verification,
    {key: guard} for the appends of the others: broker/txn_verification.py)."""
    if not enabled(broker):
        return {}, {}
    guards = {}
    by_producer: dict[tuple, list] = {}
    for key, records in entries.items():
        if not _has_transactional_batch(records):
            continue
        producer_id, epoch = producer_of(records)
        guard = start_verification(broker.replica_manager.get_partition(*key), producer_id,
                                   sequence_of(records), epoch)
        if guard is None:
            continue
        guards[key] = guard
        if guard is not NOT_VERIFYING:
            by_producer.setdefault((producer_id, epoch), []).append(key)
    failed = {}
    for (producer_id, epoch), keys in by_producer.items():
        answers = await verify(broker, transactional_id, producer_id, epoch, keys,
                               version >= 11)
        failed.update((key, produce_error(code)) for key, code in answers.items())
    return failed, guards


def _add_leader_hints(broker, ctx, response) -> None:
    """KIP-951 (v10+): a partition answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH
    carries the leader this broker knows, and the response that leader's endpoint, so the
    client retries there without a Metadata round trip."""
    hint_for = getattr(broker, "leader_hint", None)
    if hint_for is None:
        return
    endpoints = {}
    for topic in response.responses:
        for p in topic.partition_responses:
            if p.error_code not in (ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                    ErrorCode.FENCED_LEADER_EPOCH):
                continue
            hint = hint_for(topic.name, p.index, ctx.listener_name)
            if hint is None:
                continue
            leader, epoch, (host, port, rack) = hint
            p.current_leader = ProduceResponse.LeaderIdAndEpoch(leader_id=leader,
                                                                leader_epoch=epoch)
            endpoints[leader] = ProduceResponse.NodeEndpoint(node_id=leader, host=host,
                                                             port=port, rack=rack)
    response.node_endpoints = [endpoints[k] for k in sorted(endpoints)]


# Kafka checks each partition's records before the log sees them (ProduceRequest.validateRecords):
# from v3 they must hold a complete batch. Storage trims a torn tail silently (as the log does),
# so an append that wrote nothing is this refusal.
_NO_BATCH = AppendResult(ErrorCode.INVALID_RECORD,
                         "Produce requests from version 3 must have at least one complete record "
                         "batch per partition")


def _close_if_failed(version, results, early, forced_error) -> None:
    """acks=0 has no answer to carry an error: like Kafka, close the connection so the client
    notices (it reconnects and refreshes its metadata)."""
    codes = {key: _final(r, version).error_code for key, r in results.items()}
    codes.update(early)
    failed = [f"{t}-{p}: {ErrorCode(code).name}" for (t, p), code in codes.items()
              if code != ErrorCode.NONE]
    if forced_error is not None:
        failed.append(f"every partition: {forced_error.name}")
    if failed:
        raise CloseConnection("error during produce request with acks=0: "
                              + ", ".join(failed[:5]))


def _final(result, version):
    """The result to report: an append that wrote nothing is INVALID_RECORD from v3."""
    if result.error_code == ErrorCode.NONE and result.base_offset < 0 and version >= 3:
        return _NO_BATCH
    return result


def _response(request, version, results, early, forced_error, verification_failed=()) -> ProduceResponse:
    """error_message (v8+) only where Kafka gives one (LogAppendResult.hasCustomErrorMessage):
    with record_errors, and for a failed transaction verification."""
    Topic = ProduceResponse.TopicProduceResponse
    Partition = ProduceResponse.PartitionProduceResponse
    Batch = ProduceResponse.BatchIndexAndErrorMessage
    responses = []
    for topic_data in request.topic_data:
        partitions = []
        for partition_data in topic_data.partition_data:
            key = (topic_data.name, partition_data.index)
            result = results.get(key)
            if result is None:
                code = forced_error if forced_error is not None else early.get(
                    key, ErrorCode.UNKNOWN_SERVER_ERROR)
                partitions.append(Partition(index=partition_data.index, error_code=code,
                                            base_offset=-1, log_append_time_ms=-1,
                                            log_start_offset=-1))
                continue
            result = _final(result, version)
            failed = result.error_code != ErrorCode.NONE
            partitions.append(Partition(
                index=partition_data.index,
                error_code=int(result.error_code),
                base_offset=-1 if failed else result.base_offset,
                log_append_time_ms=-1 if failed else result.log_append_time,
                log_start_offset=result.log_start_offset,
                record_errors=[Batch(batch_index=i, batch_index_error_message=m)
                               for i, m in result.record_errors],
                error_message=result.error_message if failed and version >= 8 and (
                    result.record_errors or key in verification_failed) else None))
        responses.append(Topic(name=topic_data.name, partition_responses=partitions))
    return ProduceResponse(responses=responses, throttle_time_ms=0)
