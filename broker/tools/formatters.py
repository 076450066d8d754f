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
- kafka-console-consumer.sh ``--formatter`` (``format_*`` functions, one output line or None to skip):
    OffsetsMessageFormatter: ``[group,topic,partition]::OffsetAndMetadata(offset=.., leaderEpoch=..,
    metadata=.., commitTimestamp=.., expireTimestamp=..)``; GroupMetadataMessageFormatter:
    ``group::GroupMetadata(...)``; TransactionLogMessageFormatter: ``txnId::TransactionMetadata(...)``;
    ``NULL`` for tombstones. Java's Optional/Option toString forms are reproduced.
"""
from __future__ import annotations

import json

from protocol.exceptions import ProtocolError
from protocol.internal import GroupMetadataKey, OffsetCommitKey, TransactionLogKey
from protocol.internal_records import (decode_offsets_key, decode_offsets_value, decode_transaction_key,
                                       decode_transaction_value)

from broker.client.consumer_protocol import decode_assignment

TRANSACTION_STATES = {0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort", 4: "CompleteCommit",
                      5: "CompleteAbort", 6: "Dead", 7: "PrepareEpochFence"}

OFFSETS_FORMATTERS = ("kafka.coordinator.group.GroupMetadataManager$OffsetsMessageFormatter",
                      "org.apache.kafka.tools.consumer.OffsetsMessageFormatter")
GROUP_FORMATTERS = ("kafka.coordinator.group.GroupMetadataManager$GroupMetadataMessageFormatter",
                    "org.apache.kafka.tools.consumer.GroupMetadataMessageFormatter")
TRANSACTION_FORMATTERS = ("kafka.coordinator.transaction.TransactionLog$TransactionLogMessageFormatter",
                          "org.apache.kafka.tools.consumer.TransactionLogMessageFormatter")


def _hex(data) -> str:
    """Scala's "%X".format(BigInt(1, bytes)): no leading zeros, "" for empty."""
    if not data:
        return ""
    return format(int.from_bytes(bytes(data), "big"), "X")


def _tp_list(tps) -> str:
    return "[" + ", ".join(f"{t}-{p}" for t, p in tps) + "]"


# --- kafka-dump-log.sh decoders ------------------------------------------------------------------

def dump_offsets_record(offset: int, key, value):
    if key is None:
        raise ValueError("Failed to decode message using offset topic decoder (message had a missing key)")
    try:
        k = decode_offsets_key(key)
        if isinstance(k, OffsetCommitKey):
            key_text = f"offset_commit::group={k.group},partition={k.topic}-{k.partition}"
            v = decode_offsets_value(k, value)
            if v is None:
                return key_text, "<DELETE>"
            return key_text, f"offset={v.offset}" + (f",metadata={v.metadata}" if v.metadata else "")
        if isinstance(k, GroupMetadataKey):
            key_text = f"group_metadata::group={k.group}"
            v = decode_offsets_value(k, value)
            if v is None:
                return key_text, "<DELETE>"
            return key_text, _group_metadata_json(v)
        return f"Unknown record type at offset {offset}, skipping.", None
    except (ProtocolError, ValueError) as e:
        return f"Error at offset {offset}, skipping. {e}", None


def _group_metadata_json(v) -> str:
    protocol_type = v.protocol_type or ""
    members = []
    for m in v.members:
        if protocol_type == "consumer":
            try:
                tps, user_data = decode_assignment(m.assignment)
                text = f"{m.member_id}={_tp_list(tps)}"
                members.append(text + (f":{_hex(user_data)}" if user_data else ""))
                continue
            except ProtocolError:
                pass
        members.append(f"{m.member_id}={_hex(m.assignment)}")
    return json.dumps({"protocolType": protocol_type, "protocol": v.protocol, "generationId": v.generation,
                       "assignment": "{" + ",".join(members) + "}"}, separators=(",", ":"))


def _txn_partitions(v) -> list:
    if v.transaction_status == 0 or not v.transaction_partitions:
        return []
    return sorted((p.topic, i) for p in v.transaction_partitions for i in p.partition_ids)


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


def internal_formatter(class_name: str):
    """The format function for a --formatter class name, or None when it is not an internal one."""
    if class_name in OFFSETS_FORMATTERS:
        return format_offsets
    if class_name in GROUP_FORMATTERS:
        return format_group_metadata
    if class_name in TRANSACTION_FORMATTERS:
        return format_transaction_log
    return None
