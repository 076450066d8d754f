"""AddPartitionsToTxn (api key 24), versions 0-5.

Behaviour (Kafka's handleAddPartitionsToTxnRequest): v0-3 come from a transactional producer
before its first write to each partition of a transaction: the coordinator adds them to the
transaction (an Ongoing record in `__transaction_state`) and answers per partition. A partition
this cluster does not have is UNKNOWN_TOPIC_OR_PARTITION and then nothing is added: every other
partition answers OPERATION_NOT_ATTEMPTED; an internal topic (`__consumer_offsets`, added only
through AddOffsetsToTxn) is TOPIC_AUTHORIZATION_FAILED the same way. Errors: INVALID_PRODUCER_ID_MAPPING,
PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v2), CONCURRENT_TRANSACTIONS while the previous
transaction's markers are written, INVALID_TXN_STATE, NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS. v4+ batch several transactions (Kafka's brokers use it to verify
a partition is in a transaction, `verify_only`, KIP-890): each is answered on its own.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.add_partitions_to_txn import AddPartitionsToTxnResponse

from coordinator.handler_support import check_transaction, fenced_for
from coordinator.transaction.results import not_attempted

from broker.topics import is_internal

API_KEY = ApiKey.ADD_PARTITIONS_TO_TXN
MIN_VERSION = 0
MAX_VERSION = 5

TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
PartitionResult = AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult
TxnResult = AddPartitionsToTxnResponse.AddPartitionsToTxnResult


async def handle(broker, ctx, request):
    version = ctx.api_version
    if version < 4:
        errors = await _add(broker, version, request.v3_and_below_transactional_id,
                            request.v3_and_below_producer_id,
                            request.v3_and_below_producer_epoch, request.v3_and_below_topics,
                            False)
        return AddPartitionsToTxnResponse(throttle_time_ms=0,
                                          results_by_topic_v3_and_below=_topics(errors))
    results = []
    for txn in request.transactions:
        errors = await _add(broker, version, txn.transactional_id, txn.producer_id,
                            txn.producer_epoch, txn.topics, txn.verify_only)
        results.append(TxnResult(transactional_id=txn.transactional_id,
                                 topic_results=_topics(errors)))
    return AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=0,
                                      results_by_transaction=results)


async def _add(broker, version, transactional_id, producer_id, producer_epoch, topics,
               verify_only) -> dict:
    partitions = [(t.name, p) for t in topics for p in t.partitions]
    # KafkaApis checks the partitions before the coordinator is asked anything. A client's
    # (before v4) internal topics are left out of its write authorization: refused whatever
    # the authorizer (a transaction cannot write __consumer_offsets by itself).
    failed = {}
    for tp in partitions:
        if version < 4 and is_internal(tp[0]):
            failed[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif not _exists(broker, *tp):
            failed[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if failed:
        return not_attempted(partitions, failed)
    coordinator, error = check_transaction(broker, transactional_id)
    if error != ErrorCode.NONE:
        return {tp: error for tp in partitions}
    answer = await coordinator.execute("add_partitions", transactional_id, producer_id,
                                       producer_epoch, partitions, verify_only, parked=True)
    return {tp: fenced_for(version, 2, code) for tp, code in answer.items()}


def _exists(broker, topic: str, partition: int) -> bool:
    known = broker.metadata.get_topic(topic) if broker.metadata is not None else None
    if known is not None:
        return partition in known.partitions
    return broker.replica_manager.get_partition(topic, partition) is not None


def _topics(errors: dict) -> list:
    by_topic: dict[str, list] = {}
    for (topic, p), code in errors.items():
        by_topic.setdefault(topic, []).append(
            PartitionResult(partition_index=p, partition_error_code=int(code)))
    return [TopicResult(name=t, results_by_partition=ps) for t, ps in by_topic.items()]
