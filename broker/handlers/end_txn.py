"""EndTxn (api key 26), versions 0-4 (Kafka 3.9's).

Behaviour: commit or abort the producer's transaction. The coordinator writes PrepareCommit or
PrepareAbort to `__transaction_state` and answers; the markers then go to every partition of
the transaction (broker/txn_markers.py) and CompleteCommit/CompleteAbort is written once all
have them. A repeat of the same outcome is answered NONE once complete (CONCURRENT_TRANSACTIONS
until then); the other outcome INVALID_TXN_STATE. PRODUCER_FENCED is INVALID_PRODUCER_EPOCH
before v2.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.end_txn import EndTxnResponse

from coordinator.handler_support import check_transaction, fenced_for

API_KEY = ApiKey.END_TXN
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(broker, ctx, request):
    coordinator, error = check_transaction(broker, request.transactional_id)
    if error == ErrorCode.NONE:
        error = await coordinator.execute("end_txn", request.transactional_id,
                                          request.producer_id, request.producer_epoch,
                                          bool(request.committed))
    return EndTxnResponse(throttle_time_ms=0, error_code=fenced_for(ctx.api_version, 2, error))
