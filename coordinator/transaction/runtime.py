"""The transaction coordinator on the event loop: the pure TransactionManager run by the shared
CoordinatorRuntime (coordinator/runtime.py) over `__transaction_state`.

What it adds to the shared runtime:
- loading tells the manager where a partition's load begins (`begin_loading`, with the
  partition's leader epoch as the coordinator epoch) and ends (`finish_loading`, which resumes
  the transactions found in PrepareCommit/PrepareAbort);
- a result's `markers` go to the marker sender (broker/txn_markers.py: WriteTxnMarkers to the
  partitions' leaders); when a MarkerRequest's partitions all have their marker, the manager's
  `on_markers_written` returns the CompleteCommit/CompleteAbort append, applied like any other;
- `__transaction_state` records are partitioned by their transactional id.

Handlers call `execute("init_producer_id", ...)` and the other operations like the group
handlers do, after `coordinator_error(transactional_id)`.
"""
import logging

from coordinator.internal_topics import TRANSACTION_STATE_TOPIC, transaction_state_topic_configs
from coordinator.runtime import CoordinatorRuntime, SystemTime
from coordinator.transaction.manager import TransactionManager
from coordinator.transaction.records import build_batch, iter_log_records
from coordinator.transaction.results import TxnConfig, TxnResult, txn_config_from

log = logging.getLogger(__name__)


class TransactionCoordinator(CoordinatorRuntime):
    topic = TRANSACTION_STATE_TOPIC
    name = "transaction coordinator"
    loaded_words = "transaction metadata"
    key_words = "transactional ids"
    batch_builder = staticmethod(build_batch)

    def __init__(self, replica_manager, *, next_producer_id, marker_sender,
                 config: TxnConfig | None = None, num_partitions: int | None = None,
                 offsets_partition_for=None, time=None, topic_creator=None,
                 partition_count=None, broker_id: int = 0, commit_timeout_ms: int = 30_000):
        config = config or TxnConfig()
        num_partitions = num_partitions or config.transaction_state_log_num_partitions
        if num_partitions != config.transaction_state_log_num_partitions:
            config = TxnConfig(**{**config.__dict__,
                                  "transaction_state_log_num_partitions": num_partitions})
        manager = TransactionManager(config, next_producer_id, offsets_partition_for,
                                     log_ident=f"[TransactionCoordinator id={broker_id}] ")
        super().__init__(replica_manager, manager, num_partitions=num_partitions,
                         time=time or SystemTime(), topic_creator=topic_creator,
                         partition_count=partition_count)
        self.marker_sender = marker_sender
        self.commit_timeout_ms = commit_timeout_ms
        # One partition count for the runtime and the manager (the runtime corrects its own
        # from the topic's metadata, _refresh_partition_count).
        self.manager.partition_for = self.partition_for

    @classmethod
    def for_broker(cls, broker, marker_sender) -> "TransactionCoordinator":
        config = broker.config
        existing = broker.metadata.get_topic(TRANSACTION_STATE_TOPIC) if broker.metadata else None
        num_partitions = len(existing.partitions) if existing is not None \
            else config.get("transaction.state.log.num.partitions")
        producer_ids = broker.replica_manager.producer_ids
        next_id = getattr(producer_ids, "next_id_nowait", None) or producer_ids.next_id
        topics = getattr(broker, "topics", None)

        async def create_topic():
            # As the group coordinator's __consumer_offsets (coordinator/runtime.py): the
            # replication factor is capped at the live brokers, and min.insync.replicas with
            # it, so one broker with Kafka's defaults (3 and 2) can still run transactions.
            replication = min(config.get("transaction.state.log.replication.factor"),
                              max(len(topics.live_brokers()), 1))
            configs = transaction_state_topic_configs(config)
            if int(configs["min.insync.replicas"]) > replication:
                configs["min.insync.replicas"] = str(replication)
            create = getattr(topics, "create_topic_async", None) or topics.create_topic
            outcome = create(TRANSACTION_STATE_TOPIC,
                             config.get("transaction.state.log.num.partitions"), replication,
                             configs=configs)
            if hasattr(outcome, "__await__"):
                await outcome

        def partition_count():
            topic = broker.metadata.get_topic(TRANSACTION_STATE_TOPIC)
            return len(topic.partitions) if topic is not None else None
        group = broker.group_coordinator
        return cls(broker.replica_manager, next_producer_id=next_id, marker_sender=marker_sender,
                   config=txn_config_from(config), num_partitions=num_partitions,
                   offsets_partition_for=group.partition_for if group is not None else None,
                   time=broker.time, topic_creator=create_topic if topics is not None else None,
                   partition_count=partition_count, broker_id=broker.broker_id,
                   commit_timeout_ms=config.get("request.timeout.ms"))

    # -------------------------------------------------------------------------- per coordinator
    def key_of(self, record) -> str:
        return record.key.transactional_id

    def _begin_loading(self, p: int, epoch: int) -> None:
        self.manager.begin_loading(p, epoch)

    def _replay(self, p: int, buf: bytes, now_ms: int) -> set:
        touched = set()
        for record in iter_log_records(buf):
            self.manager.replay(record, p)
            touched.add(record.key.transactional_id)
        return touched

    def _finish_loading(self, p: int, touched: set, epoch: int, now_ms: int):
        return self.manager.finish_loading(p, epoch, now_ms)

    def _unload(self, p: int, now_ms: int):
        gone = sum(1 for t in self.manager.transactions()
                   if self.partition_for(t.transactional_id) == p)
        self.manager.unload(p)
        return TxnResult(), gone

    def _commit_timeout_ms(self) -> int:
        return self.commit_timeout_ms

    def _on_startup(self) -> None:
        self._apply(self.manager.start(self.time.ms()), None)

    def _apply(self, result, future) -> None:
        super()._apply(result, future)
        for marker in getattr(result, "markers", ()):
            self._send_markers(marker)

    def _send_markers(self, marker) -> None:
        p = self.partition_for(marker.transactional_id)

        def written(partitions):
            self._apply(self.manager.on_markers_written(
                marker.transactional_id, marker.producer_id, marker.producer_epoch,
                self.time.ms(), coordinator_epoch=marker.coordinator_epoch,
                partitions=partitions), None)
        self.marker_sender.send(marker, written, still_owner=lambda: p in self._loaded)

    # -------------------------------------------------------------------------- reads
    def describe(self, transactional_ids):
        return self.manager.describe(transactional_ids)

    def list_transactions(self, state_filters, producer_id_filters, duration_filter_ms):
        return self.manager.list_transactions(state_filters, producer_id_filters,
                                              duration_filter_ms, self.time.ms())
