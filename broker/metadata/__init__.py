"""Cluster metadata: topics, topic ids, partition assignments, topic and dynamic broker configs.

`store.MetadataStore` is the one interface; `local.LocalMetadataStore` keeps it in a JSON file in
the first log dir (single broker, no zookeeper.connect). `open_store(config)` picks the backend.
"""
from broker.metadata.store import MetadataStore, PartitionState, TopicMetadata


def open_store(config, cluster_id: str | None = None):
    """The metadata backend for this broker's configuration; `cluster_id`: the one the log
    dirs' meta.properties name, used when the store has none yet."""
    if config.get("zookeeper.connect"):
        from broker.config import ConfigError
        raise ConfigError("zookeeper.connect", config.get("zookeeper.connect"),
                          "the ZooKeeper metadata backend is not built yet; remove "
                          "zookeeper.connect to keep the metadata in the first log dir")
    from broker.metadata.local import LocalMetadataStore
    return LocalMetadataStore(config.log_dirs[0],
                              cluster_id=cluster_id or config.get("cluster.id"))


__all__ = ["MetadataStore", "PartitionState", "TopicMetadata", "open_store"]
