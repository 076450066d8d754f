"""ZkProducerIdManager's synchronous path for the transaction coordinator: ids from the current
block, COORDINATOR_LOAD_IN_PROGRESS (retriable) while the next block is reserved, never a
repeated id; prefetch reserves ahead. ZooKeeper itself is faked (a block counter): the real
znode is covered by the cluster integration tests."""
import asyncio

import pytest

from protocol.errors import ErrorCode, KafkaError

from broker.producer_ids import ZkProducerIdManager


class FakeKafkaZk:
    def __init__(self):
        self.blocks = 0

    async def allocate_producer_id_block(self, broker_id, size):
        await asyncio.sleep(0.01)
        start = self.blocks * size
        self.blocks += 1
        return start, start + size - 1


def test_nowait_ids_come_from_blocks_and_never_repeat():
    async def scenario():
        zk = FakeKafkaZk()
        ids = ZkProducerIdManager(zk, broker_id=0, block_size=3)
        await ids.prefetch()
        got = [ids.next_id_nowait() for _ in range(3)]
        with pytest.raises(KafkaError) as exc:
            ids.next_id_nowait()                      # block used up: the next is fetched
        assert exc.value.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        await asyncio.sleep(0.05)
        got.append(ids.next_id_nowait())
        got.append(await ids.next_id())
        assert got == [0, 1, 2, 3, 4] and zk.blocks == 2
    asyncio.run(scenario())
