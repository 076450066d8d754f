"""AddOffsetsToTxn (api key 25), versions 0-4.

Behaviour: `send_offsets_to_transaction` first asks the transaction coordinator to add the
group's `__consumer_offsets` partition to the transaction (so its offsets commit or abort with
it), then sends TxnOffsetCommit to the group coordinator. Errors as AddPartitionsToTxn's, for
the one partition; PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.add_offsets_to_txn import AddOffsetsToTxnResponse

from coordinator.handler_support import check_transaction, fenced_for

API_KEY = ApiKey.ADD_OFFSETS_TO_TXN
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(broker, ctx, request):
    # No check of the group id here (Kafka has none): the TxnOffsetCommit that follows answers
    # INVALID_GROUP_ID for an empty one.
    coordinator, error = check_transaction(broker, request.transactional_id)
    if error == ErrorCode.NONE:
        error = await coordinator.execute("add_offsets", request.transactional_id,
                                          request.producer_id, request.producer_epoch,
                                          request.group_id, parked=True)
    return AddOffsetsToTxnResponse(throttle_time_ms=0,
                                   error_code=fenced_for(ctx.api_version, 2, error))
