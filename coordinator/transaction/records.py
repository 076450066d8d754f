"""`__transaction_state` records <-> bytes, and replaying a partition's log into the manager.

One record per transactional id and change (Kafka's TransactionLog), compacted by key:

    key    int16 0, TransactionLogKey v0     transactional_id (string)
    value  int16 0, TransactionLogValue v0   producer_id int64, producer_epoch int16,
                                             transaction_timeout_ms int32,
                                             transaction_status int8 (TxnState id),
                                             transaction_partitions [topic, [int32]] (null
                                               when Empty), transaction_last_update_timestamp_ms
                                             int64, transaction_start_timestamp_ms int64
           null: a tombstone (the transactional id expired)

Kafka 3.9 writes value version 0 unless the transaction.version feature is enabled (a KIP-890
part 2 cluster), when it writes the flexible v1 (the same fields, plus tagged previous/next
producer ids and client transaction version that 3.9 leaves unset). We write v0; reading takes
v0 and v1. What is written is the prepared `TxnTransit`, so a value says where the transition
went, and replaying the latest value of each id rebuilds its metadata (Kafka's
readTxnRecordValue: the last producer id and epoch are not stored, so they come back as -1).

Partitions are written grouped by topic, topics and partitions sorted (Kafka iterates a hash
set; the order carries no meaning). A record whose key version is not 0 is skipped on load, as
Kafka does ("It could be a left over from an aborted upgrade"); an unknown value version or
state id raises ProtocolError / ValueError (Kafka: IllegalStateException, which ends the load).

Records reuse coordinator.records.Record (key, value; value None = tombstone) with the key and
value types below, as the group coordinator's `__consumer_offsets` records do; batches are built
with storage.record_batch, uncompressed (Kafka enforces compression none on this topic).
"""
import struct
from dataclasses import dataclass
from typing import NamedTuple

from protocol.exceptions import ProtocolError
from protocol.internal import TransactionLogKey, TransactionLogValue
from protocol.internal_records import decode_transaction_value, encode_key, encode_value
from storage.record_batch import RecordBatchBuilder

from coordinator import serde
from coordinator.records import Record
from coordinator.transaction.state import (NO_PRODUCER_EPOCH, NO_PRODUCER_ID,
                                           TransactionMetadata, TxnState, TxnTransit)

KEY_VERSION = 0
VALUE_VERSION = 0                 # what Kafka 3.9 writes without transaction.version >= 1
_INT16 = struct.Struct(">h")


class TxnKey(NamedTuple):
    transactional_id: str


@dataclass(slots=True, frozen=True)
class TxnValue:
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]]
    txn_last_update_timestamp: int
    txn_start_timestamp: int


def transit_record(transactional_id: str, transit: TxnTransit) -> Record:
    """The record of a prepared transition (Kafka's valueToBytes of a TxnTransitMetadata)."""
    if transit.state is TxnState.EMPTY and transit.partitions:
        raise ValueError(f"Transaction is not expected to have any partitions since its state "
                         f"is Empty: {transit}")
    return Record(TxnKey(transactional_id), TxnValue(
        transit.producer_id, transit.producer_epoch, transit.txn_timeout_ms, transit.state,
        transit.partitions, transit.txn_last_update_timestamp, transit.txn_start_timestamp))


def tombstone(transactional_id: str) -> Record:
    return Record(TxnKey(transactional_id), None)


def metadata_from_value(transactional_id: str, value: TxnValue) -> TransactionMetadata:
    """Load path: the metadata a record describes (Kafka's readTxnRecordValue)."""
    partitions = set() if value.state is TxnState.EMPTY else set(value.partitions)
    return TransactionMetadata(transactional_id, value.producer_id, NO_PRODUCER_ID,
                               value.producer_epoch, NO_PRODUCER_EPOCH, value.txn_timeout_ms,
                               value.state, partitions, value.txn_start_timestamp,
                               value.txn_last_update_timestamp)


# ------------------------------------------------------------------------------------- bytes
def encode_record(record: Record) -> tuple[bytes, bytes | None]:
    key_bytes = encode_key(TransactionLogKey(record.key.transactional_id))
    value = record.value
    if value is None:
        return key_bytes, None
    if value.state is TxnState.EMPTY:
        partitions = None
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(value.partitions):
            by_topic.setdefault(topic, []).append(partition)
        partitions = [TransactionLogValue.PartitionsSchema(topic=topic, partition_ids=ids)
                      for topic, ids in by_topic.items()]
    return key_bytes, encode_value(TransactionLogValue(
        producer_id=value.producer_id, producer_epoch=value.producer_epoch,
        transaction_timeout_ms=value.txn_timeout_ms, transaction_status=int(value.state),
        transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=value.txn_last_update_timestamp,
        transaction_start_timestamp_ms=value.txn_start_timestamp), VALUE_VERSION)


def decode_record(key_bytes, value_bytes) -> Record | None:
    """A Record, or None for a key version other than 0 (skipped, as Kafka skips it)."""
    key_bytes = bytes(key_bytes)
    if len(key_bytes) < 2:
        raise ProtocolError("record key shorter than its int16 version", offset=0)
    if _INT16.unpack_from(key_bytes, 0)[0] != KEY_VERSION:
        return None
    key = TransactionLogKey.decode(key_bytes, KEY_VERSION, 2)
    our_key = TxnKey(key.transactional_id)
    if value_bytes is None:
        return Record(our_key, None)
    value_bytes = bytes(value_bytes)
    if len(value_bytes) >= 2:
        version = _INT16.unpack_from(value_bytes, 0)[0]
        if not TransactionLogValue.MIN_VERSION <= version <= TransactionLogValue.MAX_VERSION:
            raise ProtocolError(f"Unknown version {version} from the transaction log message "
                                f"value", offset=0)
    value = decode_transaction_value(key, value_bytes)
    state = TxnState.from_id(value.transaction_status)
    partitions = frozenset()
    if state is not TxnState.EMPTY and value.transaction_partitions:
        partitions = frozenset((p.topic, pid) for p in value.transaction_partitions
                               for pid in p.partition_ids)
    return Record(our_key, TxnValue(value.producer_id, value.producer_epoch,
                                    value.transaction_timeout_ms, state, partitions,
                                    value.transaction_last_update_timestamp_ms,
                                    value.transaction_start_timestamp_ms))


def build_batch(records: list[Record], now_ms: int) -> bytes:
    """One uncompressed v2 batch holding the records (base offset 0: the log assigns offsets)."""
    builder = RecordBatchBuilder()
    for record in records:
        key, value = encode_record(record)
        builder.append(now_ms, key, value)
    return builder.build()


def iter_log_records(buf):
    """Yields the transaction Records in a buffer of batches (a segment file's bytes), in order.
    Skips control batches, keyless records and unknown key versions; stops at a torn tail."""
    return serde.iter_log_records(buf, decode_record)


def replay_buffer(manager, buf, partition: int) -> int:
    """Replays every record in `buf` into the manager's load of `partition` (begun with
    `manager.begin_loading`); returns how many records were replayed."""
    count = 0
    for record in iter_log_records(buf):
        manager.replay(record, partition)
        count += 1
    return count
