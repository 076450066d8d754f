"""Delivers the transaction coordinator's COMMIT/ABORT markers to the partitions' leaders.

Kafka's TransactionMarkerChannelManager, reduced to what it guarantees: once a transaction is
in PrepareCommit or PrepareAbort, the coordinator hands `send(marker, on_written)` a
MarkerRequest (producer id and epoch, coordinator epoch, outcome, partitions); this writes a
marker to every partition and calls `on_written(partitions)` with the partitions of each round
that have theirs (DescribeTransactions then lists only those still waiting, as Kafka's
removePartition on each answer); the coordinator writes CompleteCommit/CompleteAbort once none
waits. Partitions led by this broker are written directly (the
WriteTxnMarkers handler's `write_markers`); the others get a WriteTxnMarkers request (v1) to
their leader over the inter-broker listener, one per leader and round.

Per partition, as Kafka's TransactionMarkerRequestCompletionHandler:
- NONE: done. A topic or partition that no longer exists in this broker's metadata: done too
  (deleted; nothing to mark). UNSUPPORTED_FOR_MESSAGE_FORMAT, UNSUPPORTED_VERSION: done (the
  producer could not have written there either).
- UNKNOWN_TOPIC_OR_PARTITION from the leader (its metadata may lag behind ours),
  NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS*, REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR, any
  other error, an unknown leader (on one broker: a partition on a failed log dir) or a
  broken connection: retried after a backoff, with the current leader. A marker is never taken as written when it was not: CompleteCommit without
  it would leave the partition's transaction open for good (a hanging transaction).
- INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED: this coordinator is stale (a newer
  one took the transactional id over); delivery stops, that round is not reported, and the
  transaction is never completed here.
Delivery also stops when the coordinator no longer owns the transaction (`still_owner()` false:
its `__transaction_state` partition moved) or the broker shuts down.

Concurrency: every method runs on the event loop; each MarkerRequest is one task. As Kafka's
channel manager, each other broker has one queue and one WriteTxnMarkers in flight at a time,
carrying every transaction's markers queued for it meanwhile (a slow leader's N commits wait
one round, not N one after the other, and a request that fails or times out costs only its
own connection). Verification (broker/txn_verification.py) has connections of its own.
"""
import asyncio
import logging

from protocol.errors import ErrorCode
from protocol.messages.write_txn_markers import WriteTxnMarkersRequest

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS_VERSION = 1
RETRY_BACKOFF_S = 0.1
_DONE = frozenset({ErrorCode.NONE, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                   ErrorCode.UNSUPPORTED_VERSION})
_FENCED = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED})


class TxnMarkerSender:
    def __init__(self, broker):
        self.broker = broker
        self._tasks: set[asyncio.Task] = set()
        # pool -> broker id -> connection: "markers" here, "verification" for
        # broker/txn_verification.py (Kafka's AddPartitionsToTxnManager has its own client)
        self._connections: dict[str, dict[int, object]] = {"markers": {}, "verification": {}}
        self._queues: dict[int, list] = {}      # broker id -> [(marker, partitions, future)]
        self._drainers: dict[int, asyncio.Task] = {}
        self._connecting: dict[tuple, asyncio.Lock] = {}
        self._closed = False

    def send(self, marker, on_written, still_owner=lambda: True) -> None:
        if self._closed:
            return
        task = asyncio.get_running_loop().create_task(
            self._deliver(marker, on_written, still_owner))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            try:
                await task
            except (asyncio.CancelledError, Exception):     # noqa: BLE001 - shutting down
                pass
        for pool in self._connections.values():
            for conn in pool.values():
                await conn.close()
            pool.clear()

    async def _deliver(self, marker, on_written, still_owner) -> None:
        pending = set(marker.partitions)
        what = (f"{'COMMIT' if marker.committed else 'ABORT'} markers of producer "
                f"{marker.producer_id} epoch {marker.producer_epoch} ({marker.transactional_id})")
        reported = False
        while pending:
            if self._closed or not still_owner():
                log.info("Stopped sending %s: no longer its coordinator", what)
                return
            done, by_leader = [], {}
            for tp in list(pending):
                leader = self._leader(tp)
                if leader is None:
                    log.info("Not sending %s to %s-%d: the partition no longer exists", what, *tp)
                    pending.discard(tp)
                    done.append(tp)
                elif leader >= 0:
                    by_leader.setdefault(leader, []).append(tp)
            rounds = await asyncio.gather(*(self._write(leader, marker, tps)
                                            for leader, tps in by_leader.items()))
            fenced = None
            for codes in rounds:
                for tp, code in codes.items():
                    if code in _FENCED:
                        fenced = fenced or (tp, code)
                    elif code in _DONE:
                        pending.discard(tp)
                        done.append(tp)
            if done and fenced is None:
                on_written(done)
                reported = True
            if fenced is not None:
                (topic, p), code = fenced
                log.warning("Stopped sending %s: %s-%d answered %s (a newer coordinator took "
                            "over)", what, topic, p, ErrorCode(code).name)
                return
            if pending:
                await asyncio.sleep(RETRY_BACKOFF_S)
        if not reported:
            on_written([])

    def _leader(self, tp):
        """The partition's leader id, -1 while unknown, None when the topic or partition is
        gone."""
        broker = self.broker
        if broker.cluster is None:
            rm = broker.replica_manager
            if rm.get_partition(*tp) is not None:
                return broker.broker_id
            # On a failed log dir the partition still exists: retried (Kafka's unknown-broker
            # queue), or CompleteCommit would go without its marker, a hanging transaction;
            # unless its topic was deleted since.
            if tp not in rm.offline_partitions:
                return None
            metadata = getattr(broker, "metadata", None)
            topic = metadata.get_topic(tp[0]) if metadata is not None else None
            return -1 if topic is not None and tp[1] in topic.partitions else None
        topic = broker.metadata.get_topic(tp[0])
        if topic is None or tp[1] not in topic.partitions:
            return None
        leader = topic.partitions[tp[1]].leader
        return leader if leader is not None and leader >= 0 else -1

    async def _write(self, leader: int, marker, partitions) -> dict:
        """One round of `marker` to `leader`: {partition: error code}, {} when the request
        failed (all retried)."""
        from broker.handlers.write_txn_markers import write_markers
        if leader == self.broker.broker_id:
            return await write_markers(self.broker, marker.producer_id, marker.producer_epoch,
                                       marker.committed, marker.coordinator_epoch, partitions)
        future = asyncio.get_running_loop().create_future()
        self._queues.setdefault(leader, []).append((marker, partitions, future))
        if leader not in self._drainers:
            task = asyncio.get_running_loop().create_task(self._drain(leader))
            self._drainers[leader] = task
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await future

    async def _drain(self, leader: int) -> None:
        """Kafka's RequestSendThread for one broker: while markers wait for it, one request
        with all of them (one producer's at most once: its next waits for the next request)."""
        queue = self._queues[leader]
        batch = []
        try:
            while True:
                batch, held, producers = [], [], set()
                for entry in queue:
                    if entry[2].done():
                        continue                # its delivery was cancelled
                    if entry[0].producer_id in producers:
                        held.append(entry)
                    else:
                        producers.add(entry[0].producer_id)
                        batch.append(entry)
                queue[:] = held
                if not batch:
                    return
                results = await self._send_markers(leader, [(m, tps) for m, tps, _ in batch])
                for (_, _, future), result in zip(batch, results):
                    if not future.done():
                        future.set_result(result)
        except Exception:                       # noqa: BLE001 - a bug: everyone retries
            log.exception("Sending transaction markers to broker %d failed", leader)
            batch, queue[:] = batch + queue, []
        finally:
            for _, _, future in batch:
                if not future.done():
                    future.set_result({})       # retried by its delivery
            if self._drainers.get(leader) is asyncio.current_task():
                del self._drainers[leader]
                if not queue:
                    self._queues.pop(leader, None)

    async def _send_markers(self, leader: int, entries: list) -> list:
        """One WriteTxnMarkers with a marker per (marker, partitions) entry: each entry's
        {partition: error code}, all {} when the request failed."""
        writable = []
        for marker, partitions in entries:
            topics: dict[str, list] = {}
            for topic, p in partitions:
                topics.setdefault(topic, []).append(p)
            writable.append(WriteTxnMarkersRequest.WritableTxnMarker(
                producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
                transaction_result=marker.committed, coordinator_epoch=marker.coordinator_epoch,
                topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                        for t, ps in topics.items()]))
        try:
            conn = await self.connection(leader)
            response = await conn.send(WriteTxnMarkersRequest(markers=writable),
                                       WRITE_TXN_MARKERS_VERSION)
        except asyncio.CancelledError:
            raise
        except Exception as exc:                     # noqa: BLE001 - retried
            log.info("WriteTxnMarkers to broker %d failed: %s; retrying", leader, exc)
            stale = self._connections["markers"].pop(leader, None)
            if stale is not None:
                await stale.close()
            return [{} for _ in entries]
        by_producer = {m.producer_id: {(t.name, p.partition_index): p.error_code
                                       for t in m.topics for p in t.partitions}
                       for m in response.markers}
        return [by_producer.get(marker.producer_id, {}) for marker, _ in entries]

    async def connection(self, broker_id: int, pool: str = "markers"):
        """A connection to `broker_id` on the inter-broker listener, kept in `pool`
        ("markers", or "verification" for broker/txn_verification.py)."""
        from broker.client.connection import BrokerConnection
        connections = self._connections[pool]
        lock = self._connecting.setdefault((pool, broker_id), asyncio.Lock())
        async with lock:                        # one connection per broker, not one per caller
            conn = connections.get(broker_id)
            if conn is not None and conn.connected:
                return conn
            info = self.broker.metadata.live_brokers.get(broker_id)
            if info is None:
                raise ConnectionError(f"broker {broker_id} is not alive")
            listener = self.broker.cluster.inter_broker_listener
            host, port = info.endpoints.get(listener) or next(iter(info.endpoints.values()))
            # a request that times out closes its connection (a dead one is not used again)
            conn = BrokerConnection(host, port, node_id=broker_id,
                                    client_id=f"broker-{self.broker.broker_id}-txn-{pool}",
                                    request_timeout_ms=self.broker.config.get("request.timeout.ms"),
                                    close_on_timeout=True)
            await conn.connect()
            connections[broker_id] = conn
            return conn
