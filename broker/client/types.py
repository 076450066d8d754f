"""Small value types shared by the client, the assignors and the tools."""
from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:  # Kafka prints "topic-partition"
        return f"{self.topic}-{self.partition}"


class OffsetAndMetadata(NamedTuple):
    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class PartitionInfo(NamedTuple):
    """One partition as the last Metadata response described it."""
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple
    isr: tuple
    offline_replicas: tuple
    error_code: int = 0


class BrokerInfo(NamedTuple):
    node_id: int
    host: str
    port: int
    rack: str | None = None
