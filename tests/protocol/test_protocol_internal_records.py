"""Internal-topic records: the __consumer_offsets records real Kafka 3.1/3.4 brokers wrote
decode with protocol.internal_records and re-encode to the same bytes."""
import pathlib
import struct

import pytest

from protocol.internal import GroupMetadataKey, GroupMetadataValue, OffsetCommitKey, OffsetCommitValue
from protocol.messages import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from protocol.internal_records import (decode_offsets_key, decode_offsets_value, decode_transaction_key,
                                       decode_transaction_value, encode_key, encode_value)
from protocol.primitives import read_varint, read_varlong

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "kafka-data"
# base_offset, batch_length, partition_leader_epoch, magic, crc, attributes, last_offset_delta,
# base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, records_count
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")


def records_of(log_bytes):
    """(key, value) of every record in an uncompressed magic-2 log (minimal reader for the test)."""
    pos = 0
    while pos + 12 <= len(log_bytes):
        fields = BATCH_HEADER.unpack_from(log_bytes, pos)
        batch_length, magic, attributes, count = fields[1], fields[3], fields[5], fields[12]
        assert magic == 2 and attributes & 0x7 == 0          # uncompressed v2 batches
        end = pos + 12 + batch_length
        rpos = pos + BATCH_HEADER.size
        for _ in range(count):
            length, rpos = read_varint(log_bytes, rpos)
            record_end = rpos + length
            rpos += 1                                        # attributes
            _, rpos = read_varlong(log_bytes, rpos)          # timestamp delta
            _, rpos = read_varint(log_bytes, rpos)           # offset delta
            key_length, rpos = read_varint(log_bytes, rpos)
            key = log_bytes[rpos:rpos + key_length] if key_length >= 0 else None
            rpos += max(key_length, 0)
            value_length, rpos = read_varint(log_bytes, rpos)
            value = log_bytes[rpos:rpos + value_length] if value_length >= 0 else None
            rpos = record_end
            if not attributes & 0x20:                        # skip control batches
                yield key, value
        pos = end


def offsets_records():
    if not FIXTURES.is_dir():
        pytest.fail(f"{FIXTURES} is missing")
    found = []
    for log in sorted(FIXTURES.glob("*/__consumer_offsets-*/*.log")):
        data = log.read_bytes()
        if data:
            found.extend((log, k, v) for k, v in records_of(data))
    return found


def test_real_consumer_offsets_records_roundtrip():
    records = offsets_records()
    kinds = set()
    for log, key_bytes, value_bytes in records:
        key = decode_offsets_key(key_bytes)
        assert encode_key(key) == key_bytes, log
        kinds.add(type(key))
        value = decode_offsets_value(key, value_bytes)
        if value is None:
            continue
        version = struct.unpack_from(">h", value_bytes)[0]
        assert encode_value(value, version) == value_bytes, (log, value)
        if isinstance(key, OffsetCommitKey):
            assert isinstance(value, OffsetCommitValue) and value.offset >= 0
            assert key.topic in ("test", "cities")
        if isinstance(key, GroupMetadataKey):
            assert isinstance(value, GroupMetadataValue) and value.protocol_type == "consumer"
            for member in value.members:
                check_embedded(ConsumerProtocolSubscription, member.subscription)
                check_embedded(ConsumerProtocolAssignment, member.assignment)
    # The fixtures hold group metadata (their consumers never committed offsets).
    assert GroupMetadataKey in kinds and len(records) >= 9


def check_embedded(cls, data):
    """Embedded consumer-protocol blobs: int16 version, then the struct of that version."""
    version = struct.unpack_from(">h", data)[0]
    message = cls.decode(data, version, 2)
    assert struct.pack(">h", version) + message.encode(version) == data
    if cls is ConsumerProtocolSubscription:
        assert "test" in message.topics or "cities" in message.topics


def test_transaction_log_roundtrip_and_tombstone():
    from protocol.internal import TransactionLogKey, TransactionLogValue
    key = TransactionLogKey(transactional_id="tx-1")
    value = TransactionLogValue(producer_id=7, producer_epoch=1, transaction_timeout_ms=60000,
                                transaction_status=0, transaction_last_update_timestamp_ms=1,
                                transaction_start_timestamp_ms=1)
    assert decode_transaction_key(encode_key(key)) == key
    assert decode_transaction_value(key, encode_value(value, 1)) == value
    assert decode_transaction_value(key, None) is None
    from protocol.exceptions import ProtocolError
    with pytest.raises(ProtocolError):
        decode_offsets_key(b"\x00\x63abc")
