"""What the pure transaction manager returns, and its configuration.

Every operation of `TransactionManager` takes its arguments plus `now_ms` and returns a
`TxnResult`, the group coordinator's `coordinator.results.Result` plus one field:

    response    the answer to THIS request, or None when it comes with the follow-up of the
                operation's own append (a follow-up's `response`, when set, answers THIS request)
    appends     `Append(records, on_append)`: `__transaction_state` records to write to
                partition `manager.partition_for(transactional_id)` (acks=all, as Kafka's
                TransactionLog.EnforcedRequiredAcks), then `on_append(error_code, now_ms)` with
                the append's error; it returns the follow-up TxnResult
    timers      (key, deadline_ms): call `manager.on_timer(key, now_ms)` at (or after) the
                deadline; a wake-up may be early, late or stale (the manager re-checks)
    markers     MarkerRequests to deliver with WriteTxnMarkers to the partitions' leaders;
                when every partition has its marker (or no longer exists), call
                `manager.on_markers_written(...)`, which returns the CompleteCommit /
                CompleteAbort append
    completions (token, response): answers to AddPartitionsToTxn / AddOffsetsToTxn requests that
                waited for their transaction to settle (the runtime's `parked=True`)

Responses are coordinator-level dataclasses (or a bare error code / error map), independent
of wire versions: the handlers map PRODUCER_FENCED to INVALID_PRODUCER_EPOCH for old request
versions (InitProducerId < 4, AddPartitionsToTxn / AddOffsetsToTxn / EndTxn < 2), as KafkaApis
does.
"""
from dataclasses import dataclass, field

from protocol.errors import ErrorCode

from coordinator.results import Result

E = ErrorCode


@dataclass(frozen=True)
class TxnConfig:
    """Kafka's transaction coordinator settings (property names in comments; Kafka 3.9's
    defaults, from TransactionStateManagerConfigs and TransactionLogConfigs)."""
    transaction_max_timeout_ms: int = 900_000        # transaction.max.timeout.ms (15 min)
    transactional_id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms (7 days)
    # transaction.abort.timed.out.transaction.cleanup.interval.ms
    abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    # transaction.remove.expired.transaction.cleanup.interval.ms
    remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    transaction_state_log_num_partitions: int = 50   # transaction.state.log.num.partitions
    # Not a Kafka setting: how long a CompleteCommit/CompleteAbort append that failed with
    # COORDINATOR_NOT_AVAILABLE waits before it is tried again. Kafka's marker sender thread
    # retries it on its next loop; a pure state machine needs a deadline instead.
    complete_retry_backoff_ms: int = 100
    # Not a Kafka setting: how long AddPartitionsToTxn / AddOffsetsToTxn may wait for a
    # transaction to settle before answering CONCURRENT_TRANSACTIONS (manager docstring): the
    # clients' retry backoff for that error, so a request that waits in vain is answered no
    # later than the client's retry would have been.
    concurrent_wait_ms: int = 20


_PROPERTIES = {
    "transaction_max_timeout_ms": "transaction.max.timeout.ms",
    "transactional_id_expiration_ms": "transactional.id.expiration.ms",
    "abort_timed_out_transaction_cleanup_interval_ms":
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
    "remove_expired_transaction_cleanup_interval_ms":
        "transaction.remove.expired.transaction.cleanup.interval.ms",
    "transaction_state_log_num_partitions": "transaction.state.log.num.partitions",
}


def txn_config_from(broker_config) -> TxnConfig:
    """TxnConfig from the broker's BrokerConfig (anything with `get(name)`); a property its
    table does not declare keeps Kafka's default."""
    values = {}
    for attr, name in _PROPERTIES.items():
        try:
            value = broker_config.get(name)
        except KeyError:
            continue
        if value is not None:
            values[attr] = int(value)
    return TxnConfig(**values)


@dataclass(frozen=True)
class MarkerRequest:
    """One transaction's markers to write (a WriteTxnMarkers entry, before it is split by
    partition leader): COMMIT when `committed`, else ABORT."""
    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    committed: bool
    partitions: list[tuple[str, int]]


@dataclass
class TxnResult(Result):
    markers: list[MarkerRequest] = field(default_factory=list)

    def absorb(self, other: "TxnResult") -> "TxnResult":
        """Adds another result's side effects (not its response) to this one."""
        super().absorb(other)
        self.markers.extend(other.markers)
        return self


@dataclass
class InitProducerIdResponse:
    error: int
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass
class TransactionDescription:
    """One DescribeTransactions entry. On error the other fields keep the wire defaults."""
    transactional_id: str
    error: int
    state: str = ""
    producer_id: int = 0
    producer_epoch: int = 0
    transaction_timeout_ms: int = 0
    transaction_start_time_ms: int = 0
    # (topic, [partitions]) of the partitions still waiting for their markers, sorted
    topics: list[tuple[str, list[int]]] = field(default_factory=list)


@dataclass
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str


@dataclass
class TransactionListing:
    """ListTransactions' answer."""
    error: int
    unknown_state_filters: list[str] = field(default_factory=list)
    transactions: list[ListedTransaction] = field(default_factory=list)


def not_attempted(partitions, failed: dict) -> dict:
    """AddPartitionsToTxn when some partitions fail the handler's checks (unknown topic,
    authorization): those keep their error, every other partition gets OPERATION_NOT_ATTEMPTED
    and nothing is added (KafkaApis.handleAddPartitionsToTxnRequest)."""
    errors = {tp: E.OPERATION_NOT_ATTEMPTED for tp in partitions}
    errors.update(failed)
    return errors


# appendTransactionToLog: the error a client sees when writing to __transaction_state failed.
_TO_COORDINATOR_NOT_AVAILABLE = frozenset({
    E.UNKNOWN_TOPIC_OR_PARTITION, E.NOT_ENOUGH_REPLICAS, E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    E.REQUEST_TIMED_OUT})
_TO_NOT_COORDINATOR = frozenset({E.NOT_LEADER_OR_FOLLOWER, E.KAFKA_STORAGE_ERROR})
_TO_UNKNOWN_SERVER_ERROR = frozenset({E.MESSAGE_TOO_LARGE, E.RECORD_LIST_TOO_LARGE})


def map_append_error(error: int) -> int:
    """Kafka's TransactionStateManager.appendTransactionToLog mapping of a log append error:
    a timeout or missing replicas let the client retry (COORDINATOR_NOT_AVAILABLE), a lost
    leadership sends it to the new coordinator (NOT_COORDINATOR)."""
    if error in _TO_COORDINATOR_NOT_AVAILABLE:
        return E.COORDINATOR_NOT_AVAILABLE
    if error in _TO_NOT_COORDINATOR:
        return E.NOT_COORDINATOR
    if error in _TO_UNKNOWN_SERVER_ERROR:
        return E.UNKNOWN_SERVER_ERROR
    return error
