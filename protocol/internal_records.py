"""Key/value codecs of Kafka's internal topics: __consumer_offsets and __transaction_state.

Byte layout of one internal record (the Kafka record's key and value):

    key    int16 key version (names the record *type*), then the key struct of that version
    value  int16 value version, then the value struct of that version; a null value is a
           tombstone (the key's state is deleted)

In __consumer_offsets the key version selects the type: 0 and 1 OffsetCommitKey, 2
GroupMetadataKey, 3.. the KIP-848 ConsumerGroup* and share-group records (see
protocol.internal.OFFSETS_KEY_VERSIONS).  In __transaction_state key version 0 is
TransactionLogKey.

Helpers:
    encode_key(key_msg) -> bytes            writes the newest key version of that type
                                            (OffsetCommitKey: 1, as Kafka writes it)
    encode_value(value_msg, version) -> bytes
    decode_offsets_key(data) -> key message            (ProtocolError on unknown version)
    decode_offsets_value(key_msg, data) -> value message or None (tombstone)
    decode_transaction_key(data) / decode_transaction_value(key_msg, data)
"""
import struct

from .exceptions import ProtocolError
from .internal import OFFSETS_KEY_VERSIONS, TRANSACTION_KEY_VERSIONS

_INT16 = struct.Struct(">h")
_VALUE_OF = {key: value for table in (OFFSETS_KEY_VERSIONS, TRANSACTION_KEY_VERSIONS)
             for key, value in table.values()}


def encode_key(key) -> bytes:
    version = key.MAX_VERSION
    return _INT16.pack(version) + key.encode(version)


def encode_value(value, version: int) -> bytes:
    return _INT16.pack(version) + value.encode(version)


def _version(data, what):
    if data is None or len(data) < 2:
        raise ProtocolError(f"{what} shorter than its int16 version", offset=0)
    return _INT16.unpack_from(data, 0)[0]


def _decode_key(data, table, topic):
    version = _version(data, "record key")
    entry = table.get(version)
    if entry is None:
        raise ProtocolError(f"unknown {topic} record key version {version}", offset=0)
    return entry[0].decode(data, version, 2)


def _decode_value(key, data):
    if data is None:
        return None
    value_class = _VALUE_OF.get(type(key))
    if value_class is None:
        raise ProtocolError(f"no value type for key {type(key).__name__}")
    return value_class.decode(data, _version(data, "record value"), 2)


def decode_offsets_key(data):
    return _decode_key(data, OFFSETS_KEY_VERSIONS, "__consumer_offsets")


def decode_offsets_value(key, data):
    return _decode_value(key, data)


def decode_transaction_key(data):
    return _decode_key(data, TRANSACTION_KEY_VERSIONS, "__transaction_state")


def decode_transaction_value(key, data):
    return _decode_value(key, data)
