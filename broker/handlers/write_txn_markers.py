"""WriteTxnMarkers (api key 27), versions 0-1: the transaction coordinator ends a transaction.

Behaviour (Kafka's KafkaApis.handleWriteTxnMarkersRequest): for each marker, a COMMIT or ABORT
control batch (producer id and epoch, coordinator epoch in its value) is appended to each named
partition this broker leads, as a coordinator append (storage checks the marker against the
partition's producer state first: INVALID_PRODUCER_EPOCH for an older producer epoch,
TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch), and the answer waits until the
ISR has it (acks=all, up to request.timeout.ms). A partition this broker does not host gets
UNKNOWN_TOPIC_OR_PARTITION or NOT_LEADER_OR_FOLLOWER, per partition; the others are written.
Markers written to `__consumer_offsets` partitions are handed to the group coordinator, which
makes the transaction's offset commits visible or drops them.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.write_txn_markers import WriteTxnMarkersResponse
from storage.record_batch import ControlRecordType, build_control_batch
from storage.validation import ORIGIN_COORDINATOR

from coordinator.partitioning import OFFSETS_TOPIC

API_KEY = ApiKey.WRITE_TXN_MARKERS
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(broker, ctx, request):
    Marker = WriteTxnMarkersResponse.WritableTxnMarkerResult
    Topic = WriteTxnMarkersResponse.WritableTxnMarkerTopicResult
    Partition = WriteTxnMarkersResponse.WritableTxnMarkerPartitionResult
    answers = []
    for marker in request.markers:
        partitions = [(topic.name, index) for topic in marker.topics
                      for index in topic.partition_indexes]
        codes = await write_markers(broker, marker.producer_id, marker.producer_epoch,
                                    bool(marker.transaction_result), marker.coordinator_epoch,
                                    partitions)
        answers.append(Marker(producer_id=marker.producer_id, topics=[
            Topic(name=topic.name, partitions=[
                Partition(partition_index=index, error_code=int(codes[(topic.name, index)]))
                for index in topic.partition_indexes])
            for topic in marker.topics]))
    return WriteTxnMarkersResponse(markers=answers)


async def write_markers(broker, producer_id: int, producer_epoch: int, committed: bool,
                        coordinator_epoch: int, partitions) -> dict:
    """Appends one marker to each (topic, partition) led here and waits for the ISR:
    {(topic, partition): error code}. Also the transaction coordinator's path to the
    partitions this broker leads itself (broker/txn_markers.py)."""
    replica_manager = broker.replica_manager
    kind = ControlRecordType.COMMIT if committed else ControlRecordType.ABORT
    now_ms = broker.time.ms()
    entries = {tp: build_control_batch(kind, producer_id, producer_epoch, coordinator_epoch,
                                       now_ms)
               for tp in partitions}
    results = replica_manager.append_records(entries, -1, now_ms, origin=ORIGIN_COORDINATOR)
    await replica_manager.wait_for_acks(results, -1, _request_timeout_ms(broker))
    offsets_partitions = [p for (t, p), r in results.items()
                          if t == OFFSETS_TOPIC and r.error_code == ErrorCode.NONE]
    if offsets_partitions:
        _complete_offsets(broker, producer_id, offsets_partitions, committed)
    return {tp: r.error_code for tp, r in results.items()}


def _complete_offsets(broker, producer_id, partitions, committed) -> None:
    coordinator = getattr(broker, "group_coordinator", None)
    hook = getattr(coordinator, "on_transaction_completed", None)
    if hook is not None:
        hook(producer_id, partitions, committed)


def _request_timeout_ms(broker) -> int:
    try:
        return int(broker.config.get("request.timeout.ms"))
    except Exception:                                    # noqa: BLE001 - not declared
        return 30_000
