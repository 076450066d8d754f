"""DescribeTransactions (api key 65), version 0: the state of transactional ids this broker
coordinates (`kafka-transactions.sh describe`): state as Kafka names it (Empty, Ongoing,
PrepareCommit, ...), producer id and epoch, timeout, start time and the partitions in the
transaction. Per id: NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS when not coordinated here,
TRANSACTIONAL_ID_NOT_FOUND when unknown."""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.describe_transactions import DescribeTransactionsResponse

API_KEY = ApiKey.DESCRIBE_TRANSACTIONS
MIN_VERSION = 0
MAX_VERSION = 0

State = DescribeTransactionsResponse.TransactionState
Topic = DescribeTransactionsResponse.TopicData


async def handle(broker, ctx, request):
    coordinator = getattr(broker, "txn_coordinator", None)
    states = []
    if coordinator is None:
        states = [State(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, transactional_id=tid,
                        transaction_state="", topics=[])
                  for tid in request.transactional_ids]
    else:
        for d in coordinator.describe(request.transactional_ids):
            states.append(State(
                error_code=int(d.error), transactional_id=d.transactional_id,
                transaction_state=d.state, transaction_timeout_ms=d.transaction_timeout_ms,
                transaction_start_time_ms=d.transaction_start_time_ms,
                producer_id=d.producer_id, producer_epoch=d.producer_epoch,
                topics=[Topic(topic=t, partitions=ps) for t, ps in d.topics]))
    return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=states)
