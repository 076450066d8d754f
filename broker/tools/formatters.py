"""Text forms of __consumer_offsets and __transaction_state records, as Kafka 3.x prints them.

Two tools print these records:
- kafka-dump-log.sh ``--offsets-decoder`` / ``--transaction-log-decoder`` (``dump_*`` functions,
  returning a (key, payload) pair of strings):
    ``offset_commit::group=G,partition=T-P``  ->  ``offset=N`` or ``offset=N,metadata=M``
    ``group_metadata::group=G``               ->  ``{"protocolType":..,"protocol":..,"generationId":..,
                                                    "assignment":"{member=[t-0, t-1]}"}``
    ``transaction_metadata::transactionalId=X`` -> ``producerId:N,producerEpoch:E,state=Ongoing,
                                                    partitions=[t-0],txnLastUpdateTimestamp=..,txnTimeoutMs=..``
  and ``<DELETE>`` for a tombstone.
- kafka-console-consumer.sh ``--formatter`` (one output line each, or None to skip the record):
  - Kafka 3.9's ``org.apache.kafka.tools.consumer.*MessageFormatter`` classes (``json_formatter``,
    Kafka's ApiMessageFormatter): ``{"key":{"version":V,"data":{..}},"value":{"version":V,"data":{..}}}``
    with the record's key and value as Kafka's generated JSON converters write them; ``null`` for a
    null key or value (a tombstone), ``"unknown"`` for data of a version the formatter does not
    know; a record of another type (an offset commit for the group formatter, group metadata for
    the offsets one) is skipped. Kafka 3.9 writes these with no line separator, running the records
    together on one line; here each ends with a newline.
  - the deprecated Scala names (``format_*`` functions, announced with Kafka's WARNING on stderr
    by the console consumer): OffsetsMessageFormatter: ``[group,topic,partition]::OffsetAndMetadata(
    offset=.., leaderEpoch=.., metadata=.., commitTimestamp=.., expireTimestamp=..)``;
    GroupMetadataMessageFormatter: ``group::GroupMetadata(...)``; TransactionLogMessageFormatter:
    ``txnId::TransactionMetadata(...)``; ``NULL`` for tombstones. Java's Optional/Option toString
    forms are reproduced.
"""
from __future__ import annotations

import base64
import json

from protocol.exceptions import ProtocolError
from protocol.internal import (OFFSETS_KEY_VERSIONS, GroupMetadataKey, GroupMetadataValue, OffsetCommitKey,
                               OffsetCommitValue, TransactionLogKey, TransactionLogValue)
from protocol.message import Message
from protocol.messages.consumer_protocol import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from protocol.internal_records import (decode_offsets_key, decode_offsets_value, decode_transaction_key,
                                       decode_transaction_value)

from broker.client.types import TopicPartition
from broker.tools.javautil import java_tp_hash, scala_hash_set_order


TRANSACTION_STATES = {0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort", 4: "CompleteCommit",
                      5: "CompleteAbort", 6: "Dead", 7: "PrepareEpochFence"}

OFFSETS_FORMATTER = "org.apache.kafka.tools.consumer.OffsetsMessageFormatter"
GROUP_FORMATTER = "org.apache.kafka.tools.consumer.GroupMetadataMessageFormatter"
TRANSACTION_FORMATTER = "org.apache.kafka.tools.consumer.TransactionLogMessageFormatter"
# The Scala formatters Kafka 3.9 still runs, with a deprecation warning, and their successors.
LEGACY_FORMATTERS = {
    "kafka.coordinator.group.GroupMetadataManager$OffsetsMessageFormatter": OFFSETS_FORMATTER,
    "kafka.coordinator.group.GroupMetadataManager$GroupMetadataMessageFormatter": GROUP_FORMATTER,
    "kafka.coordinator.transaction.TransactionLog$TransactionLogMessageFormatter": TRANSACTION_FORMATTER,
}


# --- kafka-dump-log.sh decoders ------------------------------------------------------------------

def dump_offsets_record(offset: int, key, value):
    """--offsets-decoder, as Kafka 3.9's OffsetsMessageParser: the key as {"type": its version,
    "data": the record key as JSON}, the value as {"version", "data"} (a consumer group's member
    subscriptions and assignments decoded), or "<DELETE>" for a tombstone."""
    if key is None:
        raise ValueError("Failed to decode message using offset topic decoder (message had a missing key)")
    try:
        key_version = int.from_bytes(bytes(key[:2]), "big", signed=True)
        try:
            k = decode_offsets_key(key)
        except ProtocolError:
            if key_version not in OFFSETS_KEY_VERSIONS:
                return f"Unknown record type {key_version} at offset {offset}, skipping.", None
            raise
        key_json = _compact({"type": str(key_version), "data": message_json(k, key_version)})
        v = decode_offsets_value(k, value)
        if v is None:
            return key_json, "<DELETE>"
        value_version = int.from_bytes(bytes(value[:2]), "big", signed=True)
        data = message_json(v, value_version)
        if isinstance(v, GroupMetadataValue) and v.protocol_type == "consumer":
            for member_json, member in zip(data.get("members", ()), v.members):
                _decode_member_field(member_json, "subscription", member.subscription,
                                     ConsumerProtocolSubscription)
                _decode_member_field(member_json, "assignment", member.assignment,
                                     ConsumerProtocolAssignment)
        return key_json, _compact({"version": str(value_version), "data": data})
    except (ProtocolError, ValueError) as e:
        return f"Error at offset {offset}, skipping. {e}", None


def _compact(doc) -> str:
    """Jackson's ObjectNode.toString: no spaces, UTF-8 as is."""
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def _camel(attr: str) -> str:
    first, *rest = attr.split("_")
    return first + "".join(part.capitalize() for part in rest)


_DEFAULTS: dict = {}


def message_json(message, version: int) -> dict:
    """A generated message as Kafka's generated JsonConverter writes it: the fields of that
    version under their schema names, a tagged field only when it differs from its default,
    bytes in base64, nested structs and arrays as JSON."""
    cls = type(message)
    defaults = _DEFAULTS.get(cls)
    if defaults is None:
        defaults = _DEFAULTS[cls] = cls()
    out = {}
    for attr, _type, _is_array, (lo, hi), _nullable, tag in cls._SCHEMA:
        if not lo <= version <= hi:
            continue
        value = getattr(message, attr)
        if tag is not None and (value is None or value == getattr(defaults, attr)):
            continue
        out[_camel(attr)] = _json_value(value, version)
    return out


def _json_value(value, version):
    if isinstance(value, Message):
        return message_json(value, version)
    if isinstance(value, (list, tuple)):
        return [_json_value(v, version) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode()
    return value


def _decode_member_field(member_json: dict, name: str, data, cls) -> None:
    """Replace a member's subscription or assignment bytes by their decoded JSON when they
    decode (their first int16 is their version); kept as base64 when not, as Kafka does."""
    if data is None or name not in member_json:
        return
    try:
        version = int.from_bytes(bytes(data[:2]), "big", signed=True)
        member_json[name] = message_json(cls.decode(data, version, 2), version)
    except (ProtocolError, ValueError, IndexError):
        pass


def _txn_partitions(v) -> list:
    """The transaction's partitions in the order Kafka prints them: its readTxnRecordValue adds
    each topic's partitions to a Scala mutable.HashSet, which iterates in hash order."""
    if v.transaction_status == 0 or not v.transaction_partitions:
        return []
    groups = [[TopicPartition(p.topic, i) for i in p.partition_ids] for p in v.transaction_partitions]
    return [(tp.topic, tp.partition) for tp in scala_hash_set_order(groups, java_tp_hash)]


def dump_transaction_record(offset: int, key, value):
    try:
        k = decode_transaction_key(key)
        key_text = f"transaction_metadata::transactionalId={k.transactional_id}"
        v = decode_transaction_value(k, value)
        if v is None:
            return key_text, "<DELETE>"
        parts = ",".join(f"{t}-{p}" for t, p in _txn_partitions(v))
        return key_text, (f"producerId:{v.producer_id},producerEpoch:{v.producer_epoch},"
                          f"state={TRANSACTION_STATES.get(v.transaction_status, v.transaction_status)},"
                          f"partitions=[{parts}],txnLastUpdateTimestamp={v.transaction_last_update_timestamp_ms},"
                          f"txnTimeoutMs={v.transaction_timeout_ms}")
    except (ProtocolError, ValueError) as e:
        return f"Error at offset {offset}, skipping. {e}", None


# --- kafka-console-consumer.sh formatters --------------------------------------------------------

def format_offsets(key, value) -> str | None:
    """OffsetsMessageFormatter: only offset-commit records; others are skipped."""
    if key is None:
        return None
    try:
        k = decode_offsets_key(key)
    except ProtocolError:
        return None
    if not isinstance(k, OffsetCommitKey):
        return None
    head = f"[{k.group},{k.topic},{k.partition}]::"
    v = decode_offsets_value(k, value)
    if v is None:
        return head + "NULL"
    epoch = "Optional.empty" if getattr(v, "leader_epoch", -1) < 0 else f"Optional[{v.leader_epoch}]"
    expire = getattr(v, "expire_timestamp", -1)
    expire_text = "None" if expire is None or expire < 0 else f"Some({expire})"
    return (f"{head}OffsetAndMetadata(offset={v.offset}, leaderEpoch={epoch}, metadata={v.metadata}, "
            f"commitTimestamp={v.commit_timestamp}, expireTimestamp={expire_text})")


def _option(value) -> str:
    return "None" if value is None else f"Some({value})"


def format_group_metadata(key, value) -> str | None:
    """GroupMetadataMessageFormatter: only group-metadata records."""
    if key is None:
        return None
    try:
        k = decode_offsets_key(key)
    except ProtocolError:
        return None
    if not isinstance(k, GroupMetadataKey):
        return None
    v = decode_offsets_value(k, value)
    if v is None:
        return f"{k.group}::NULL"
    members = ", ".join(
        f"{m.member_id} -> MemberMetadata(memberId={m.member_id}, groupInstanceId={_option(m.group_instance_id)}, "
        f"clientId={m.client_id}, clientHost={m.client_host}, sessionTimeoutMs={m.session_timeout}, "
        f"rebalanceTimeoutMs={m.rebalance_timeout if m.rebalance_timeout >= 0 else m.session_timeout}, "
        f"supportedProtocols=List({v.protocol}))"
        for m in v.members)
    state = "Stable" if v.members else "Empty"
    protocol_type = None if not v.protocol_type else v.protocol_type
    return (f"{k.group}::GroupMetadata(groupId={k.group}, generation={v.generation}, "
            f"protocolType={_option(protocol_type)}, currentState={state}, members=HashMap({members}))")


def format_transaction_log(key, value) -> str | None:
    """TransactionLogMessageFormatter."""
    if key is None:
        return None
    try:
        k = decode_transaction_key(key)
    except ProtocolError:
        return None
    if not isinstance(k, TransactionLogKey):
        return None
    v = decode_transaction_value(k, value)
    if v is None:
        return f"{k.transactional_id}::NULL"
    partitions = ", ".join(f"{t}-{p}" for t, p in _txn_partitions(v))
    return (f"{k.transactional_id}::TransactionMetadata(transactionalId={k.transactional_id}, "
            f"producerId={v.producer_id}, lastProducerId={v.previous_producer_id}, "
            f"producerEpoch={v.producer_epoch}, lastProducerEpoch=-1, txnTimeoutMs={v.transaction_timeout_ms}, "
            f"state={TRANSACTION_STATES.get(v.transaction_status, v.transaction_status)}, pendingState=None, "
            f"topicPartitions=HashSet({partitions}), txnStartTimestamp={v.transaction_start_timestamp_ms}, "
            f"txnLastUpdateTimestamp={v.transaction_last_update_timestamp_ms})")


_UNKNOWN = "unknown"
_SKIP = object()


def _offsets_key_json(wanted):
    """Key reader of the __consumer_offsets formatters: JSON data of a key of type `wanted`,
    _SKIP for the other type, "unknown" for a version that is neither (Kafka's
    readToGroupMetadataKey + transferKeyMessageToJsonNode)."""
    def read(key, version):
        for cls in (OffsetCommitKey, GroupMetadataKey):
            if cls.MIN_VERSION <= version <= cls.MAX_VERSION:
                return message_json(cls.decode(key, version, 2), version) if cls is wanted else _SKIP
        return _UNKNOWN
    return read


def _reader(cls):
    """Reader of data of message `cls`: its JSON, or "unknown" for a version it does not have."""
    def read(data, version):
        if cls.MIN_VERSION <= version <= cls.MAX_VERSION:
            return message_json(cls.decode(data, version, 2), version)
        return _UNKNOWN
    return read


def json_formatter(read_key, read_value):
    """Kafka 3.9's ApiMessageFormatter: (key, value) -> one line of JSON, or None to skip."""
    def fmt(key, value) -> str | None:
        doc = {}
        for name, data, read in (("key", key, read_key), ("value", value, read_value)):
            if data is None:
                doc[name] = None
                continue
            if len(data) < 2:
                raise ValueError(f"record {name} shorter than its int16 version")
            version = int.from_bytes(bytes(data[:2]), "big", signed=True)
            try:
                json_data = read(data, version)
            except (ProtocolError, IndexError) as e:
                raise ValueError(f"cannot read the record {name} at version {version}: {e}") from None
            if json_data is _SKIP:
                return None
            doc[name] = {"version": version, "data": json_data}
        return _compact(doc)
    return fmt


_JSON_FORMATTERS = {
    OFFSETS_FORMATTER: json_formatter(_offsets_key_json(OffsetCommitKey), _reader(OffsetCommitValue)),
    GROUP_FORMATTER: json_formatter(_offsets_key_json(GroupMetadataKey), _reader(GroupMetadataValue)),
    TRANSACTION_FORMATTER: json_formatter(_reader(TransactionLogKey), _reader(TransactionLogValue)),
}
_LEGACY_FORMATS = {OFFSETS_FORMATTER: format_offsets, GROUP_FORMATTER: format_group_metadata,
                   TRANSACTION_FORMATTER: format_transaction_log}


def internal_formatter(class_name: str):
    """The format function for a --formatter class name, or None when it is not an internal one."""
    if class_name in LEGACY_FORMATTERS:
        return _LEGACY_FORMATS[LEGACY_FORMATTERS[class_name]]
    return _JSON_FORMATTERS.get(class_name)
