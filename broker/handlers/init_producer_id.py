"""InitProducerId (api key 22), versions 0-5.

Behaviour:
- Idempotent producers (transactional_id null): a fresh producer id with epoch 0, from blocks of
  1000 ids reserved durably in the first log dir, or in a cluster in ZooKeeper
  (broker/producer_ids.py), so ids never repeat
  across restarts. As Kafka does for a null transactional_id, the (producer_id, producer_epoch)
  a v3+ client sends to bump its epoch after an error (KIP-360) is ignored: it gets a new id,
  which restarts its sequences just as well.
- Transactional producers (transactional_id given): there is no transaction coordinator yet, so
  we answer TRANSACTIONAL_ID_AUTHORIZATION_FAILED. Both Java (initTransactions() throws
  TransactionalIdAuthorizationException) and librdkafka (a fatal error naming the authorization
  failure) stop at once with that, whereas COORDINATOR_NOT_AVAILABLE would make them retry until
  max.block.ms / transaction.timeout.ms expire.
"""
import inspect

from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.init_producer_id import InitProducerIdResponse

API_KEY = ApiKey.INIT_PRODUCER_ID
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(broker, ctx, request):
    if request.transactional_id is not None:
        return InitProducerIdResponse(throttle_time_ms=0,
                                      error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                      producer_id=-1, producer_epoch=-1)
    producer_id = broker.replica_manager.producer_ids.next_id()
    if inspect.isawaitable(producer_id):          # a cluster's ids come from ZooKeeper
        producer_id = await producer_id
    return InitProducerIdResponse(throttle_time_ms=0, error_code=0,
                                  producer_id=producer_id, producer_epoch=0)
