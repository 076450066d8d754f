"""Kafka's internal topics, and the configs Kafka creates them with.

- `__consumer_offsets`: the group coordinator's log (GroupMetadataManager's topic configs).
- `__transaction_state`: the transaction coordinator's log (TransactionStateManager's).
- `__share_group_state`: Kafka 4's share coordinator's log; internal, not served here.
- `__cluster_metadata`: KRaft's metadata log, found in data dirs written by Apache Kafka in KRaft
  mode. It is not a topic: Kafka never shows it to clients, refuses to create it ("Creation of
  internal topic __cluster_metadata is prohibited.") and its LogManager never loads it; the
  broker and the log manager here do the same, and leave its files untouched.

`broker_config` arguments are the broker's `BrokerConfig` (anything with `get(name)`).
"""
from storage.files import CLUSTER_METADATA_TOPIC

from coordinator.partitioning import OFFSETS_TOPIC

TRANSACTION_STATE_TOPIC = "__transaction_state"
SHARE_GROUP_STATE_TOPIC = "__share_group_state"     # KIP-932 share groups (Kafka 4.x)
# Kafka 3.9's Topic.INTERNAL_TOPICS: shown with is_internal, never written by clients.
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_GROUP_STATE_TOPIC})


def offsets_topic_configs(broker_config) -> dict:
    return {"cleanup.policy": "compact",
            "segment.bytes": str(broker_config.get("offsets.topic.segment.bytes")),
            "compression.type": "producer"}


def transaction_state_topic_configs(broker_config) -> dict:
    return {"cleanup.policy": "compact",
            "min.insync.replicas": str(broker_config.get("transaction.state.log.min.isr")),
            "unclean.leader.election.enable": "false",
            "compression.type": "uncompressed",
            "segment.bytes": str(broker_config.get("transaction.state.log.segment.bytes"))}


def internal_topic_configs(name: str, broker_config) -> dict | None:
    """The configs Kafka gives internal topic `name`, or None if it is not one."""
    if name == OFFSETS_TOPIC:
        return offsets_topic_configs(broker_config)
    if name == TRANSACTION_STATE_TOPIC:
        return transaction_state_topic_configs(broker_config)
    return None
