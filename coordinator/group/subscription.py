"""Reading the topic list out of a consumer-protocol subscription (member metadata).

Layout (ConsumerProtocolSubscription, every version, never flexible):
    version  int16
    topics   int32 count, then count x (int16 length + UTF-8)
    ...      user_data, owned_partitions (v1+), generation_id (v2+), rack_id (v3+): not needed here

Only the topics matter to the coordinator (OffsetDelete's GROUP_SUBSCRIBED_TO_TOPIC and offset
expiry of unsubscribed topics, KIP-496), so only that prefix is read. Malformed metadata yields
None ("subscription unknown"), never an exception: it is client data.
"""
import struct

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def parse_subscription_topics(metadata: bytes) -> list[str] | None:
    try:
        (version,) = _INT16.unpack_from(metadata, 0)
        if version < 0:
            return None
        (count,) = _INT32.unpack_from(metadata, 2)
        if count < 0 or count > len(metadata):
            return None
        pos = 6
        topics = []
        for _ in range(count):
            (length,) = _INT16.unpack_from(metadata, pos)
            pos += 2
            if length < 0 or pos + length > len(metadata):
                return None
            topics.append(bytes(metadata[pos:pos + length]).decode("utf-8"))
            pos += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
