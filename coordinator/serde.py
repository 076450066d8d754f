"""`__consumer_offsets` records <-> bytes, and replaying a partition's log into a GroupManager.

Keys and values use Kafka's internal-record schemas through the generated codecs
(protocol.internal, protocol.internal_records). Versions written, as Apache Kafka 3.x writes them:

    OffsetCommitKey    v1          OffsetCommitValue   v3, or v1 when an expire timestamp is set
    GroupMetadataKey   v2          GroupMetadataValue  v3
    (tombstone: the key with a null value)

Reading accepts every version (OffsetCommitValue v0-v4, GroupMetadataValue v0-v4). Records of
other types (KIP-848 consumer groups, share groups: key versions 3+) are skipped, like a
classic-only broker would. Control batches (transaction markers) carry no group state.

Batches are built with storage.record_batch (uncompressed, CreateTime = the operation's now).

Speed: offset commits are the hot path (thousands per second), so the OffsetCommit key bytes are
cached per (group, topic, partition) and OffsetCommitValue v3 is packed with one precompiled
struct instead of going through the generated class; tests/coordinator/test_serde.py checks the
bytes are identical to the generated codec's.
"""
import functools
import struct
from protocol.internal import (GroupMetadataKey, GroupMetadataValue, OffsetCommitKey,
                               OffsetCommitValue)
from protocol.internal_records import (decode_offsets_key, decode_offsets_value, encode_key,
                                       encode_value)
from storage.record_batch import (ControlRecordType, RecordBatchBuilder, RecordBatchView,
                                  iter_batches)

from coordinator.group.model import OffsetAndMetadata
from coordinator.records import GroupKey, GroupValue, MemberRecord, OffsetKey, Record

OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_VALUE_VERSION = 3


# OffsetCommitValue v3: version int16, offset int64, leader_epoch int32, metadata (int16 length +
# UTF-8), commit_timestamp int64.
_OFFSET_V3_HEAD = struct.Struct(">hqih")
_INT64 = struct.Struct(">q")


@functools.lru_cache(maxsize=65536)
def _offset_key_bytes(key: OffsetKey) -> bytes:
    return encode_key(OffsetCommitKey(key.group, key.topic, key.partition))


def encode_record(record: Record) -> tuple[bytes, bytes | None]:
    key, value = record.key, record.value
    if isinstance(key, OffsetKey):
        key_bytes = _offset_key_bytes(key)
        if value is None:
            return key_bytes, None
        if value.expire_timestamp < 0:
            metadata = value.metadata.encode("utf-8")
            return key_bytes, b"".join((
                _OFFSET_V3_HEAD.pack(OFFSET_VALUE_VERSION, value.offset, value.leader_epoch,
                                     len(metadata)),
                metadata, _INT64.pack(value.commit_timestamp)))
        return key_bytes, encode_value(OffsetCommitValue(
            offset=value.offset, leader_epoch=value.leader_epoch, metadata=value.metadata,
            commit_timestamp=value.commit_timestamp, expire_timestamp=value.expire_timestamp),
            OFFSET_VALUE_VERSION_WITH_EXPIRY)
    key_bytes = encode_key(GroupMetadataKey(key.group))
    if value is None:
        return key_bytes, None
    members = [GroupMetadataValue.MemberMetadata(
        member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
        client_host=m.client_host, rebalance_timeout=m.rebalance_timeout_ms,
        session_timeout=m.session_timeout_ms, subscription=m.subscription,
        assignment=m.assignment) for m in value.members]
    return key_bytes, encode_value(GroupMetadataValue(
        protocol_type=value.protocol_type, generation=value.generation, protocol=value.protocol,
        leader=value.leader, current_state_timestamp=value.current_state_timestamp,
        members=members), GROUP_VALUE_VERSION)


def decode_record(key_bytes, value_bytes) -> Record | None:
    """A Record, or None for record types the classic coordinator does not use."""
    key = decode_offsets_key(bytes(key_bytes))
    if not isinstance(key, (OffsetCommitKey, GroupMetadataKey)):
        return None
    value = decode_offsets_value(key, None if value_bytes is None else bytes(value_bytes))
    if isinstance(key, OffsetCommitKey):
        our_key = OffsetKey(key.group, key.topic, key.partition)
        if value is None:
            return Record(our_key, None)
        return Record(our_key, OffsetAndMetadata(value.offset, value.leader_epoch, value.metadata,
                                                 value.commit_timestamp, value.expire_timestamp))
    our_key = GroupKey(key.group)
    if value is None:
        return Record(our_key, None)
    members = [MemberRecord(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                            m.rebalance_timeout, m.session_timeout, bytes(m.subscription),
                            bytes(m.assignment)) for m in value.members]
    return Record(our_key, GroupValue(value.protocol_type, value.generation, value.protocol,
                                      value.leader, value.current_state_timestamp, members))


def build_batch(records: list[Record], now_ms: int, producer_id: int = -1,
                producer_epoch: int = -1) -> bytes:
    """One uncompressed v2 batch holding the records (base offset 0: the log assigns offsets);
    with a producer id, a transactional batch of that producer (TxnOffsetCommit), sequence 0
    as Kafka writes it (coordinator appends are not sequence-checked)."""
    if producer_id >= 0:
        builder = RecordBatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch,
                                     base_sequence=0, is_transactional=True)
    else:
        builder = RecordBatchBuilder()
    for record in records:
        key, value = encode_record(record)
        builder.append(now_ms, key, value)
    return builder.build()


def iter_log_records(buf, decode=None):
    """Yields the group Records in a buffer of batches (a segment file's bytes), in order.

    Skips control batches, keyless records and what `decode` (default: this module's
    decode_record, offsets and group metadata; the transaction coordinator passes its own)
    returns None for; stops at a torn tail (storage.record_batch.iter_batches)."""
    decode = decode or decode_record
    for batch in iter_batches(buf):
        if not isinstance(batch, RecordBatchView) or batch.is_control:
            continue
        for rec in batch.records():
            if rec.key is None:
                continue
            record = decode(rec.key, rec.value)
            if record is not None:
                yield record


def replay_buffer(manager, buf, now_ms: int, partition: int | None = None) -> set[str]:
    """Replays every record in `buf` (of `__consumer_offsets`-`partition`) into the manager;
    returns the group ids touched. A transaction's offset commits wait for its marker: COMMIT
    applies them, ABORT drops them (for the groups of this partition)."""
    touched = set()
    for batch in iter_batches(buf):
        if not isinstance(batch, RecordBatchView):
            continue
        if batch.is_control:
            if batch.producer_id >= 0 and batch.records_count > 0:   # not a cleaned marker
                manager.complete_txn_offsets(
                    batch.producer_id, None if partition is None else [partition],
                    batch.control_record_type() == ControlRecordType.COMMIT, now_ms)
            continue
        transactional = batch.is_transactional and batch.producer_id >= 0
        for rec in batch.records():
            if rec.key is None:
                continue
            record = decode_record(rec.key, rec.value)
            if record is None:
                continue
            if transactional:
                manager.replay_txn_offset(batch.producer_id, record, now_ms)
            else:
                manager.replay(record, now_ms, loading=True)
            touched.add(record.key.group)
    return touched
