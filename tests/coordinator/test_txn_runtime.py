"""The transaction coordinator's runtime over the real ReplicaManager and storage Log: a
transaction's records in __transaction_state, its markers handed to the sender and the
Complete* record once they are written, a reload from the log, and shutdown."""
import asyncio

import pytest

from protocol.errors import ErrorCode as E

from broker.replica_manager import ReplicaManager
from coordinator.transaction.runtime import TransactionCoordinator
from storage.log_config import LogConfig
from storage.log_manager import LogManager

STATE = "__transaction_state"


class Sender:
    """Records the MarkerRequests; `deliver()` reports them written."""

    def __init__(self):
        self.sent = []

    def send(self, marker, on_written, still_owner=lambda: True):
        self.sent.append((marker, on_written))

    def deliver(self):
        sent, self.sent = self.sent, []
        for marker, on_written in sent:
            on_written(list(marker.partitions))
        return [m for m, _ in sent]


@pytest.fixture
def stack(tmp_path):
    log_manager = LogManager([str(tmp_path)], LogConfig())
    log_manager.startup("txn-tests", 0)
    rm = ReplicaManager(log_manager, broker_id=0, producer_id_dir=str(tmp_path))
    for p in range(5):
        rm.become_leader(STATE, p, None, 0, [0], LogConfig())
    ids = iter(range(1000, 2000))
    yield rm, lambda sender, **kw: TransactionCoordinator(
        rm, next_producer_id=lambda: next(ids), marker_sender=sender,
        **{"num_partitions": 5, **kw})
    rm.shutdown()
    log_manager.shutdown()


def test_a_transaction_through_the_runtime_and_a_reload(stack):
    rm, make = stack

    async def scenario():
        sender = Sender()
        c = make(sender)
        await c.startup()
        init = await c.execute("init_producer_id", "tx", 60000, -1, -1)
        assert init.error == E.NONE
        pid, epoch = init.producer_id, init.producer_epoch
        added = await c.execute("add_partitions", "tx", pid, epoch, [("t", 0), ("t", 1)], False)
        assert added == {("t", 0): E.NONE, ("t", 1): E.NONE}
        assert await c.execute("end_txn", "tx", pid, epoch, True) == E.NONE
        await asyncio.sleep(0)
        [marker] = [m for m, _ in sender.sent]
        assert (marker.committed, sorted(marker.partitions)) == (True, [("t", 0), ("t", 1)])
        assert c.describe(["tx"])[0].state == "PrepareCommit"
        sender.deliver()
        for _ in range(5):
            await asyncio.sleep(0.01)
        assert c.describe(["tx"])[0].state == "CompleteCommit"
        # A second transaction left in PrepareAbort: a coordinator loading the log resumes it.
        added = await c.execute("add_partitions", "tx", pid, epoch, [("t", 2)], False)
        assert await c.execute("end_txn", "tx", pid, epoch, False) == E.NONE
        c.shutdown()
        again_sender = Sender()
        again = make(again_sender)
        await again.startup()
        assert again.describe(["tx"])[0].state == "PrepareAbort"
        [resumed] = [m for m, _ in again_sender.sent]
        assert (resumed.committed, resumed.partitions) == (False, [("t", 2)])
        again_sender.deliver()
        for _ in range(5):
            await asyncio.sleep(0.01)
        assert again.describe(["tx"])[0].state == "CompleteAbort"
        again.shutdown()
    asyncio.run(asyncio.wait_for(scenario(), 20))


@pytest.mark.parametrize("configured", [50, 3])
def test_transactional_ids_hash_over_the_topics_real_partition_count(stack, configured):
    """__transaction_state exists with 5 partitions while transaction.state.log.num.partitions
    says otherwise (an existing topic; a cluster's metadata was empty at start): the runtime and
    the manager both hash over 5 (the manager hashed over the config: every request of an id
    was NOT_COORDINATOR, initTransactions() looping until max.block.ms)."""
    from coordinator.partitioning import partition_for
    rm, make = stack
    # An id whose partition differs between the two counts.
    tid = next(f"tx-{i}" for i in range(1000)
               if partition_for(f"tx-{i}", 5) != partition_for(f"tx-{i}", configured))

    async def scenario():
        c = make(Sender(), num_partitions=configured, partition_count=lambda: 5)
        await c.startup()
        init = await c.execute("init_producer_id", tid, 60000, -1, -1)
        c.shutdown()
        return c, init
    c, init = asyncio.run(scenario())
    assert init.error == E.NONE
    assert c.partition_for(tid) == c.manager.partition_for(tid) == partition_for(tid, 5)


def test_a_partition_that_fails_to_load_is_served_with_what_loaded(stack, caplog):
    """Kafka's loadTransactionMetadata logs a read or replay error and owns the partition with
    what it loaded; left half-loaded, every request of its ids and ListTransactions for the
    whole broker answered COORDINATOR_LOAD_IN_PROGRESS for ever."""
    rm, make = stack

    async def scenario():
        c = make(Sender())
        await c.startup()
        init = await c.execute("init_producer_id", "tx", 60000, -1, -1)
        c.shutdown()
        p = c.partition_for("tx")
        log_ = rm.get_partition(STATE, p).log

        def broken(*args, **kwargs):
            raise OSError("Input/output error")
        log_.read = broken
        again = make(Sender())
        await again.startup()
        listing = again.list_transactions([], [], -1)
        retry = await again.execute("init_producer_id", "tx", 60000, -1, -1)
        again.shutdown()
        return init, listing, retry, again.coordinator_error("tx")
    init, listing, retry, error = asyncio.run(scenario())
    assert init.error == E.NONE and listing.error == E.NONE
    assert error == E.NONE and retry.error == E.NONE
    assert "Error loading transaction metadata from __transaction_state" in caplog.text
