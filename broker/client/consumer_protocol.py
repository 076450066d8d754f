"""The consumer embedded protocol: what consumers put in JoinGroup metadata and SyncGroup assignments.

Both blobs are an int16 version followed by the struct of that version (ConsumerProtocolSubscription,
ConsumerProtocolAssignment, generated in protocol/messages). A reader that meets a newer version
than it knows decodes it with its own newest version: later versions only append fields, so the
known prefix is still right (that is how Kafka's ConsumerProtocol reads them too).
"""
from __future__ import annotations

import struct
from collections import defaultdict

from protocol.messages import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from broker.client.types import TopicPartition

PROTOCOL_TYPE = "consumer"
_I16 = struct.Struct(">h")


def _group(tps) -> dict:
    by_topic = defaultdict(list)
    for tp in tps:
        by_topic[tp[0]].append(tp[1])
    return {t: sorted(ps) for t, ps in sorted(by_topic.items())}


def encode_subscription(topics, user_data: bytes | None = None, owned_partitions=(), generation_id: int = -1,
                        rack_id: str | None = None, version: int = 3) -> bytes:
    TP = ConsumerProtocolSubscription.TopicPartition
    msg = ConsumerProtocolSubscription(
        topics=sorted(topics), user_data=user_data,
        owned_partitions=[TP(topic=t, partitions=ps) for t, ps in _group(owned_partitions).items()],
        generation_id=generation_id, rack_id=rack_id)
    return _I16.pack(version) + msg.encode(version)


def decode_subscription(data) -> tuple[int, object]:
    """-> (version, ConsumerProtocolSubscription)."""
    version = _I16.unpack_from(data, 0)[0]
    msg = ConsumerProtocolSubscription.decode(data, min(version, ConsumerProtocolSubscription.MAX_VERSION), 2)
    return version, msg


def owned_partitions(subscription) -> list:
    return [TopicPartition(t.topic, p) for t in subscription.owned_partitions for p in t.partitions]


def encode_assignment(partitions, user_data: bytes | None = None, version: int = 3) -> bytes:
    TP = ConsumerProtocolAssignment.TopicPartition
    msg = ConsumerProtocolAssignment(
        assigned_partitions=[TP(topic=t, partitions=ps) for t, ps in _group(partitions).items()],
        user_data=user_data)
    return _I16.pack(version) + msg.encode(version)


def decode_assignment(data) -> tuple[list, bytes | None]:
    """-> (assigned TopicPartitions, user_data). Empty data (a member given nothing) -> ([], None)."""
    if data is None or len(data) < 2:
        return [], None
    version = _I16.unpack_from(data, 0)[0]
    msg = ConsumerProtocolAssignment.decode(data, min(version, ConsumerProtocolAssignment.MAX_VERSION), 2)
    tps = [TopicPartition(t.topic, p) for t in msg.assigned_partitions for p in t.partitions]
    return tps, msg.user_data
