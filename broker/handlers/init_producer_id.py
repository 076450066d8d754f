"""InitProducerId (api key 22), versions 0-5.

Behaviour:
- Idempotent producers (transactional_id null): a fresh producer id with epoch 0, from blocks of
  1000 ids reserved durably in the first log dir, or in a cluster in ZooKeeper
  (broker/producer_ids.py), so ids never repeat
  across restarts. As Kafka does for a null transactional_id, the (producer_id, producer_epoch)
  a v3+ client sends to bump its epoch after an error (KIP-360) is ignored: it gets a new id,
  which restarts its sequences just as well.
- Transactional producers: sent to the transactional id's coordinator (FindCoordinator key type
  1), which bumps the epoch of the id's producer (fencing any older instance), aborts a
  transaction the previous instance left open (the client is answered CONCURRENT_TRANSACTIONS
  and retries), or hands out a new producer id on first use or epoch exhaustion; v3+ clients
  recover with their current (producer_id, producer_epoch) after an abortable error (KIP-360).
  A transaction_timeout_ms over transaction.max.timeout.ms is INVALID_TRANSACTION_TIMEOUT;
  PRODUCER_FENCED is INVALID_PRODUCER_EPOCH for clients before v4.
  coordinator/transaction/manager.py has the rules.
"""
import inspect

from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.init_producer_id import InitProducerIdResponse

from coordinator.handler_support import check_transaction, fenced_for

API_KEY = ApiKey.INIT_PRODUCER_ID
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(broker, ctx, request):
    if ctx.api_version >= 3 and (request.producer_id == -1) != (request.producer_epoch == -1):
        return _error(ErrorCode.INVALID_REQUEST)     # KafkaApis' check, before anything else
    if request.transactional_id is not None:
        return await _transactional(broker, ctx, request)
    producer_id = broker.replica_manager.producer_ids.next_id()
    if inspect.isawaitable(producer_id):          # a cluster's ids come from ZooKeeper
        producer_id = await producer_id
    return InitProducerIdResponse(throttle_time_ms=0, error_code=0,
                                  producer_id=producer_id, producer_epoch=0)


def _error(code) -> InitProducerIdResponse:
    return InitProducerIdResponse(throttle_time_ms=0, error_code=code, producer_id=-1,
                                  producer_epoch=-1)


async def _transactional(broker, ctx, request):
    # Kafka's TransactionCoordinator.handleInitProducerId: the id and the timeout are checked
    # before whether this broker coordinates the id.
    if not request.transactional_id:
        return _error(ErrorCode.INVALID_REQUEST)
    config = getattr(broker, "config", None)      # (handler tests pass a bare namespace)
    if config is not None and \
            not 0 < request.transaction_timeout_ms <= config.get("transaction.max.timeout.ms"):
        return _error(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
    coordinator, error = check_transaction(broker, request.transactional_id)
    if error != ErrorCode.NONE:
        return _error(error)
    expected_id, expected_epoch = -1, -1
    if ctx.api_version >= 3:
        expected_id, expected_epoch = request.producer_id, request.producer_epoch
    answer = await coordinator.execute("init_producer_id", request.transactional_id,
                                       request.transaction_timeout_ms, expected_id,
                                       expected_epoch)
    return InitProducerIdResponse(throttle_time_ms=0,
                                  error_code=fenced_for(ctx.api_version, 4, answer.error),
                                  producer_id=answer.producer_id,
                                  producer_epoch=answer.producer_epoch)
