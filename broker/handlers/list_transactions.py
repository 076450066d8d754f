"""ListTransactions (api key 66), versions 0-1: the transactional ids this broker coordinates
(`kafka-transactions.sh list` asks every broker), filtered by state names, producer ids and,
from v1, by running longer than duration_filter ms (KIP-994). Unknown state names are returned
in unknown_state_filters, as Kafka does."""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.list_transactions import ListTransactionsResponse

API_KEY = ApiKey.LIST_TRANSACTIONS
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(broker, ctx, request):
    coordinator = getattr(broker, "txn_coordinator", None)
    if coordinator is None:
        return ListTransactionsResponse(throttle_time_ms=0,
                                        error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                        unknown_state_filters=[], transaction_states=[])
    duration = request.duration_filter if ctx.api_version >= 1 else -1
    listing = coordinator.list_transactions(request.state_filters, request.producer_id_filters,
                                            duration)
    return ListTransactionsResponse(
        throttle_time_ms=0, error_code=int(listing.error),
        unknown_state_filters=listing.unknown_state_filters,
        transaction_states=[ListTransactionsResponse.TransactionState(
            transactional_id=t.transactional_id, producer_id=t.producer_id,
            transaction_state=t.state) for t in listing.transactions])
