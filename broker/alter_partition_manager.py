"""ISR changes from a partition leader to the controller (Kafka's DefaultAlterPartitionManager).

A leader that wants a follower in or out of the ISR `submit`s the new ISR: the partition
records it as pending (the high watermark counts the larger of the two ISRs meanwhile, and no
other change starts until it is answered). Pending changes are batched into one AlterPartition
request (v3: topic ids, ISR members with broker epoch -1 as in ZooKeeper mode) to the
controller the metadata cache names, one request in flight at a time; a failed send is retried
after 50 ms, as Kafka's.

Answers, per partition (Kafka's Partition.handleAlterPartitionError):
- the new state: applied if the partition is still in the state the change was made from
  (same leader epoch, same pending ISR); a LeaderAndIsr that arrived meanwhile wins;
- INELIGIBLE_REPLICA / OPERATION_NOT_ATTEMPTED: the change is dropped, the ISR stays as it was;
- FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, UNKNOWN_*: the change stays pending until new
  metadata (LeaderAndIsr) arrives: a deposed leader stops changing its ISR, and, with its HW
  unable to move past what the new leader's followers never fetched from it, stops
  acknowledging acks=all writes;
- anything else: sent again.
"""
from __future__ import annotations

import asyncio
import logging

from protocol.errors import ErrorCode
from protocol.messages.alter_partition import AlterPartitionRequest

from broker.tasks import cancel_and_wait

log = logging.getLogger(__name__)

RETRY_BACKOFF_S = 0.05
CONNECT_TIMEOUT_MS = 10000          # Kafka's socket.connection.setup.timeout.ms
ALTER_PARTITION_VERSION = 3

_ROLL_BACK = {ErrorCode.INELIGIBLE_REPLICA, ErrorCode.OPERATION_NOT_ATTEMPTED}
_WAIT_FOR_METADATA = {ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.INVALID_UPDATE_VERSION,
                      ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID,
                      ErrorCode.INVALID_REQUEST, ErrorCode.NEW_LEADER_ELECTED}


class AlterPartitionManager:
    def __init__(self, broker):
        self.broker = broker
        self._pending: dict = {}            # (topic, p) -> (partition, new isr, leader epoch)
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())
        self._connection = None
        self._connection_to = None

    def alive_brokers(self) -> set:
        return set(self.broker.metadata.live_brokers)

    def submit(self, part, new_isr: set) -> None:
        if part.pending_isr is not None:
            return
        part.pending_isr = set(new_isr)
        self._pending[(part.topic, part.partition)] = (part, set(new_isr), part.leader_epoch,
                                                       part.partition_epoch)
        self._wake.set()

    async def shutdown(self) -> None:
        await cancel_and_wait(self._task)
        if self._connection is not None:
            await self._connection.close()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._pending:
                continue
            batch, self._pending = self._pending, {}
            try:
                response = await self._send(batch)
            except Exception as exc:            # noqa: BLE001 - retried
                log.debug("AlterPartition failed: %s; retrying", exc)
                for key, item in batch.items():
                    self._pending.setdefault(key, item)
                await asyncio.sleep(RETRY_BACKOFF_S)
                self._wake.set()
                continue
            try:
                self._handle(batch, response)
            except Exception:                   # noqa: BLE001 - the manager must go on
                log.exception("Handling the AlterPartition answer failed; the changes stay "
                              "pending until new metadata arrives")

    async def _controller_connection(self):
        from broker.client.connection import BrokerConnection
        store = self.broker.metadata
        controller_id = store.controller_id
        info = store.live_brokers.get(controller_id)
        if info is None:
            raise ConnectionError("no controller known")
        listener = self.broker.cluster.inter_broker_listener
        host, port = info.endpoints.get(listener) or next(iter(info.endpoints.values()))
        if self._connection is not None and (self._connection_to != (controller_id, host, port)
                                             or not self._connection.connected):
            await self._connection.close()
            self._connection = None
        if self._connection is None:
            # Kafka's NodeToControllerChannelManager: requests time out after
            # controller.socket.timeout.ms, and a request that timed out closes its connection
            # (a connection dropped silently on the way, by a firewall say, is not used again).
            timeout_ms = self.broker.config.get("controller.socket.timeout.ms")
            conn = BrokerConnection(host, port, node_id=controller_id,
                                    client_id=f"broker-{self.broker.broker_id}-alter-partition",
                                    request_timeout_ms=timeout_ms,
                                    connect_timeout_ms=min(timeout_ms, CONNECT_TIMEOUT_MS),
                                    close_on_timeout=True)
            await conn.connect()
            self._connection, self._connection_to = conn, (controller_id, host, port)
        return self._connection

    async def _send(self, batch: dict):
        by_topic: dict = {}
        for (topic, p), (part, isr, leader_epoch, partition_epoch) in batch.items():
            by_topic.setdefault((topic, part.topic_id), []).append(
                AlterPartitionRequest.PartitionData(
                    partition_index=p, leader_epoch=leader_epoch,
                    new_isr_with_epochs=[AlterPartitionRequest.BrokerState(
                        broker_id=b, broker_epoch=-1) for b in _in_order(part, isr)],
                    leader_recovery_state=0, partition_epoch=partition_epoch))
        request = AlterPartitionRequest(
            broker_id=self.broker.broker_id, broker_epoch=self.broker.cluster.broker_epoch,
            topics=[AlterPartitionRequest.TopicData(topic_name=topic, topic_id=topic_id,
                                                    partitions=parts)
                    for (topic, topic_id), parts in by_topic.items()])
        conn = await self._controller_connection()
        response = await conn.send(request, ALTER_PARTITION_VERSION)
        if response.error_code != ErrorCode.NONE:
            raise RuntimeError(f"AlterPartition answered {ErrorCode(response.error_code).name}")
        return response

    def _handle(self, batch: dict, response) -> None:
        rm = self.broker.replica_manager
        by_id = {}
        for topic in response.topics:
            name = rm.topic_name(topic.topic_id) or topic.topic_name
            for p in topic.partitions:
                by_id[(name, p.partition_index)] = p
        for key, (part, isr, leader_epoch, partition_epoch) in batch.items():
            answer = by_id.get(key)
            if rm.get_partition(*key) is not part or part.pending_isr != isr or \
                    part.leader_epoch != leader_epoch:
                continue                        # the partition moved on meanwhile
            if answer is None:
                self._pending.setdefault(key, (part, isr, leader_epoch, partition_epoch))
                self._wake.set()
                continue
            try:
                code = ErrorCode(answer.error_code)
            except ValueError:                  # Errors.forCode: sent again, as any other
                code = ErrorCode.UNKNOWN_SERVER_ERROR
            if code == ErrorCode.NONE:
                if answer.leader_epoch != part.leader_epoch or \
                        answer.partition_epoch < part.partition_epoch:
                    continue
                part.set_isr(answer.isr)
                part.partition_epoch = answer.partition_epoch
                part.pending_isr = None
                log.info("[Partition %s-%d broker=%d] ISR updated to %s and version updated to "
                         "%d", key[0], key[1], self.broker.broker_id, sorted(part.isr),
                         part.partition_epoch)
                if part.maybe_increment_high_watermark():
                    rm.produce_purgatory.notify(*key)
                    rm.fetch_purgatory.notify(*key)
            elif code in _ROLL_BACK:
                log.info("[Partition %s-%d] Failed to alter the ISR to %s: %s; keeping %s",
                         key[0], key[1], sorted(isr), code.name, sorted(part.isr))
                part.pending_isr = None
            elif code in _WAIT_FOR_METADATA:
                log.info("[Partition %s-%d] Failed to alter the ISR to %s: %s; waiting for "
                         "the controller's next LeaderAndIsr", key[0], key[1], sorted(isr),
                         code.name)
            else:
                self._pending.setdefault(key, (part, isr, leader_epoch, partition_epoch))
                self._wake.set()


def _in_order(part, isr: set) -> list:
    """The new ISR as Kafka's leader sends it: the current one's order, a member removed where it
    was, one that rejoins at the end (Partition's isr + replica, isr -- outOfSync)."""
    order = part.isr_order
    return [b for b in order if b in isr] + sorted(isr - set(order))
