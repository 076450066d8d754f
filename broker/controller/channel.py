"""The controller's connections to the brokers (Kafka's ControllerChannelManager).

One sender task per live broker, itself included (Kafka's controller also talks to its own
broker over the network), on the inter-broker listener. Each has a queue and one request in
flight at a time, so a broker sees the controller's requests in the order they were decided.
A request that fails (connection refused, reset, timed out) is retried on a new connection
every `RETRY_BACKOFF_S` until it is answered or the broker is removed (it died: its sender
and queue go with it).
"""
from __future__ import annotations

import asyncio
import logging

from broker.client.connection import BrokerConnection
from broker.client.errors import KafkaConnectionError, KafkaTimeoutError

from broker.tasks import cancel_and_wait

log = logging.getLogger(__name__)

RETRY_BACKOFF_S = 0.1


class ControllerChannelManager:
    def __init__(self, controller_id: int, listener: str | None, *,
                 request_timeout_ms: int = 30000, connect_timeout_ms: int = 30000):
        self.controller_id = controller_id
        self.listener = listener
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self._senders: dict[int, _BrokerSender] = {}
        self._closing: set = set()          # connections of removed brokers being closed

    def add_broker(self, info) -> None:
        if info.id in self._senders:
            self._senders[info.id].stop()
        endpoint = (info.endpoint(self.listener) if self.listener else None) or (
            info.endpoints[0] if info.endpoints else None)
        if endpoint is None:
            log.error("[Controller id=%d] Broker %d has no endpoint for listener %s",
                      self.controller_id, info.id, self.listener)
            return
        self._senders[info.id] = _BrokerSender(self, info.id, endpoint.host, endpoint.port)

    def remove_broker(self, broker_id: int) -> None:
        sender = self._senders.pop(broker_id, None)
        if sender is not None:
            sender.stop()

    def send(self, broker_id: int, request, version: int, callback=None) -> None:
        sender = self._senders.get(broker_id)
        if sender is None:
            log.debug("Dropping %s for broker %d: not a live broker", type(request).__name__,
                      broker_id)
            return
        sender.queue.put_nowait((request, version, callback))

    async def close(self) -> None:
        for broker_id in list(self._senders):
            self.remove_broker(broker_id)
        while self._closing:
            await asyncio.gather(*list(self._closing), return_exceptions=True)


class _BrokerSender:
    def __init__(self, manager, broker_id: int, host: str, port: int):
        self.manager = manager
        self.broker_id = broker_id
        self.host = host
        self.port = port
        self.queue: asyncio.Queue = asyncio.Queue()
        self.connection: BrokerConnection | None = None
        self.task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        self.task.cancel()
        connection, self.connection = self.connection, None
        closing = self.manager._closing
        task = asyncio.get_running_loop().create_task(self._finish(connection))
        closing.add(task)
        task.add_done_callback(closing.discard)

    async def _finish(self, connection) -> None:
        await cancel_and_wait(self.task)
        if connection is not None:
            await connection.close()
        elif self.connection is not None:
            await self.connection.close()

    async def _connection(self) -> BrokerConnection:
        if self.connection is None or not self.connection.connected:
            if self.connection is not None:
                await self.connection.close()
            self.connection = None
            conn = BrokerConnection(
                self.host, self.port, node_id=self.broker_id,
                client_id=f"controller-{self.manager.controller_id}",
                request_timeout_ms=self.manager.request_timeout_ms,
                connect_timeout_ms=self.manager.connect_timeout_ms)
            await conn.connect()
            self.connection = conn
        return self.connection

    async def _run(self) -> None:
        warned = False
        while True:
            request, version, callback = await self.queue.get()
            while True:
                try:
                    conn = await self._connection()
                    response = await conn.send(request, version)
                    warned = False
                    break
                except (KafkaConnectionError, KafkaTimeoutError, OSError) as exc:
                    if not warned:
                        log.warning("[Controller id=%d] Failed to send %s to broker %d (%s:%d): "
                                    "%s; retrying", self.manager.controller_id,
                                    type(request).__name__, self.broker_id, self.host,
                                    self.port, exc)
                        warned = True
                    if self.connection is not None:
                        await self.connection.close()
                        self.connection = None
                    await asyncio.sleep(RETRY_BACKOFF_S)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:                # noqa: BLE001 - e.g. it cannot encode
                    # One request that cannot go (a value from a hand-edited znode that does
                    # not fit its field) must not stop this broker's sender: drop it.
                    log.error("[Controller id=%d] Dropping %s to broker %d: %s",
                              self.manager.controller_id, type(request).__name__,
                              self.broker_id, exc)
                    if self.connection is not None:     # in case it broke mid-frame
                        await self.connection.close()
                        self.connection = None
                    response = None
                    break
            if response is None:
                continue
            if callback is not None:
                try:
                    callback(response)
                except Exception:                   # noqa: BLE001
                    log.exception("Controller response callback failed")
