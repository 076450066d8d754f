"""Producer id allocation for InitProducerId: ids never repeat, even across restarts.

Kafka hands out producer ids in blocks of 1000 (ProducerIdManager; with ZooKeeper the latest block
lives in /latest_producer_id_block). We do the same with a local block store: before the first id
of a block is handed out, the block's end is persisted durably (write to a temporary file, fsync,
rename, fsync the directory: storage.files.fs.write_atomically, the seam the crash tests fail
on purpose), so after a crash or restart allocation resumes at the next unused
block - a few ids may be skipped, none is ever given twice.

File `producer-id-block` in the first log dir (JSON):
    {"version": 1, "broker": 0, "block_start": 4000, "block_end": 4999}
`block_end` is the last id of the newest reserved block; the next block starts at block_end + 1.

The store is behind two methods (`load() -> dict | None`, `save(dict)`). In a cluster the brokers
share one sequence: `ZkProducerIdManager` reserves blocks in ZooKeeper's
/latest_producer_id_block with a conditional write, so two brokers never hand out the same id (a
3.x Kafka broker asks the controller, which writes that same znode).

Concurrency contract: `next_id()` is called on the event loop; it performs a blocking fsync once
per 1000 ids (well under a millisecond on ext4), which is acceptable there.
"""
from __future__ import annotations

import json
import logging
import os

from storage import files

log = logging.getLogger(__name__)

BLOCK_SIZE = 1000          # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
FILE_NAME = "producer-id-block"
INT64_MAX = 2**63 - 1


class FileBlockStore:
    """The newest reserved block as a small JSON file, replaced atomically."""

    def __init__(self, directory: str):
        self.directory = directory
        self.path = os.path.join(directory, FILE_NAME)

    def load(self) -> dict | None:
        try:
            with open(self.path, "rb") as f:
                return json.loads(f.read())
        except FileNotFoundError:
            return None

    def save(self, block: dict) -> None:
        os.makedirs(self.directory, exist_ok=True)
        files.fs.write_atomically(self.path, json.dumps(block).encode())


class ProducerIdManager:
    """Hands out producer ids from durably reserved blocks."""

    def __init__(self, store, broker_id: int = 0, block_size: int = BLOCK_SIZE):
        self.store = store
        self.broker_id = broker_id
        self.block_size = block_size
        self._next = 0
        self._block_end = -1          # nothing reserved by this process yet

    def next_id(self) -> int:
        if self._next > self._block_end:
            self._reserve_block()
        producer_id = self._next
        self._next += 1
        return producer_id

    def _reserve_block(self) -> None:
        latest = self.store.load()
        start = 0 if latest is None else int(latest["block_end"]) + 1
        end = start + self.block_size - 1
        if end > INT64_MAX:
            raise RuntimeError("producer id space exhausted")
        self.store.save({"version": 1, "broker": self.broker_id,
                         "block_start": start, "block_end": end})
        self._next, self._block_end = start, end


class ZkProducerIdManager:
    """A cluster's producer ids: blocks reserved in /latest_producer_id_block (broker/kafka_zk.py);
    `next_id()` is a coroutine (it awaits ZooKeeper once per block)."""

    def __init__(self, kzk, broker_id: int, block_size: int = BLOCK_SIZE):
        import asyncio
        self.kzk = kzk
        self.broker_id = broker_id
        self.block_size = block_size
        self._next = 0
        self._block_end = -1
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        """The next id; KafkaError COORDINATOR_LOAD_IN_PROGRESS (retriable, as Kafka's
        RPCProducerIdManager answers without a block) when no block can be reserved, e.g.
        /latest_producer_id_block holds what Kafka would not write there."""
        from broker.zk_data import ZkError
        from protocol.errors import ErrorCode, KafkaError
        async with self._lock:
            if self._next > self._block_end:
                try:
                    self._next, self._block_end = await self.kzk.allocate_producer_id_block(
                        self.broker_id, self.block_size)
                except ZkError as exc:
                    log.error("Could not reserve a producer id block: %s", exc)
                    raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                     "no producer id block") from None
            producer_id = self._next
            self._next += 1
            return producer_id

    def next_id_nowait(self) -> int:
        """For the transaction coordinator's synchronous state machine: an id of the current
        block, or KafkaError COORDINATOR_LOAD_IN_PROGRESS while the next block is fetched from
        ZooKeeper (the client retries), as Kafka's RPCProducerIdManager answers."""
        if self._next <= self._block_end and not self._lock.locked():
            producer_id = self._next
            self._next += 1
            return producer_id
        if not self._lock.locked():
            import asyncio
            task = asyncio.get_running_loop().create_task(self.prefetch())
            self._refill_task = task                  # keep a reference until it is done
        from protocol.errors import ErrorCode, KafkaError
        raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                         "the next producer id block is being allocated")

    async def prefetch(self) -> None:
        """Reserves the next block now if the current one is used up (at start-up, so the
        transaction coordinator's first InitProducerId finds ids ready, as Kafka's ZooKeeper
        mode reserves its first block when the broker starts). A ZooKeeper error is logged;
        the next call tries again."""
        async with self._lock:
            if self._next > self._block_end:
                try:
                    self._next, self._block_end = await self.kzk.allocate_producer_id_block(
                        self.broker_id, self.block_size)
                except Exception as exc:            # noqa: BLE001 - retried on demand
                    log.warning("Could not reserve a producer id block: %s", exc)
