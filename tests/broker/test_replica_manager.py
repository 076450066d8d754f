"""ReplicaManager + Partition over a real storage Log: HW, reads, acks, long polls, epochs."""
import asyncio
import time
import os
import uuid

import pytest

from protocol.errors import ErrorCode, KafkaError
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.record_batch import RecordBatchBuilder, iter_batches

from broker.partition import (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP,
                              READ_COMMITTED)
from broker.replica_manager import FetchRequestPartition, ReplicaManager

TOPIC_ID = uuid.uuid4()


class Clock:
    def __init__(self):
        self.now = 1_700_000_000_000

    def ms(self):
        return self.now


def batch(count=3, ts=1_700_000_000_000, value_size=10, producer_id=-1, producer_epoch=-1,
          base_sequence=-1):
    builder = RecordBatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch,
                                 base_sequence=base_sequence)
    for i in range(count):
        builder.append(ts + i, b"k%d" % i, b"v" * value_size)
    return memoryview(bytearray(builder.build()))


def region_bytes(records) -> bytes:
    """The bytes a FileRegion (or bytes) stands for."""
    if isinstance(records, (bytes, bytearray, memoryview)):
        return bytes(records)
    import os
    return os.pread(records.file.fileno(), records.length, records.position)


@pytest.fixture
def manager(tmp_path):
    clock = Clock()
    log_manager = LogManager([str(tmp_path / "logs")], LogConfig(), time_ms=clock.ms)
    log_manager.startup("cluster", 0)
    rm = ReplicaManager(log_manager, broker_id=0, time=clock)
    rm.become_leader("t", 0, TOPIC_ID, 0, [0], LogConfig())
    rm.become_leader("t", 1, TOPIC_ID, 0, [0], LogConfig())
    yield rm
    rm.shutdown()
    log_manager.shutdown()


def fetch(topic="t", partition=0, offset=0, max_bytes=1 << 20, epoch=-1):
    return FetchRequestPartition(topic, partition, offset, max_bytes, epoch)


def test_append_moves_leo_and_hw_with_one_replica(manager):
    results = manager.append_records({("t", 0): batch(3), ("t", 1): batch(2)}, 1)
    assert results[("t", 0)].error_code == ErrorCode.NONE
    assert (results[("t", 0)].base_offset, results[("t", 0)].last_offset) == (0, 2)
    assert (results[("t", 1)].base_offset, results[("t", 1)].last_offset) == (0, 1)
    results = manager.append_records({("t", 0): batch(4)}, -1)
    assert (results[("t", 0)].base_offset, results[("t", 0)].last_offset) == (3, 6)
    part = manager.get_partition("t", 0)
    assert part.log_end_offset == 7 and part.high_watermark == 7
    assert part.leader_epoch == 0


def test_unknown_partition_is_a_per_partition_error(manager):
    results = manager.append_records({("nope", 0): batch(1), ("t", 0): batch(1)}, 1)
    assert results[("nope", 0)].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert results[("t", 0)].error_code == ErrorCode.NONE
    read = manager.read([fetch("nope")], max_bytes=1000)
    assert read[("nope", 0)].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_corrupt_batch_rejected_and_nothing_appended(manager):
    bad = batch(2)
    bad[-1] ^= 0xFF                       # breaks the CRC
    result = manager.append_records({("t", 0): bad}, 1)[("t", 0)]
    assert result.error_code == ErrorCode.CORRUPT_MESSAGE
    assert manager.get_partition("t", 0).log_end_offset == 0


def test_read_returns_batches_with_offsets_and_hw(manager):
    manager.append_records({("t", 0): batch(3)}, 1)
    manager.append_records({("t", 0): batch(2)}, 1)
    result = manager.read([fetch(offset=0)], max_bytes=1 << 20)[("t", 0)]
    assert result.error_code == ErrorCode.NONE
    assert result.high_watermark == 5 and result.log_start_offset == 0
    views = list(iter_batches(region_bytes(result.records)))
    assert [(v.base_offset, v.last_offset) for v in views] == [(0, 2), (3, 4)]
    assert all(v.is_valid() for v in views)
    # a fetch at the end gets nothing; past the end is out of range
    assert manager.read([fetch(offset=5)], max_bytes=100)[("t", 0)].records_size == 0
    assert manager.read([fetch(offset=6)], max_bytes=100)[("t", 0)].error_code == \
        ErrorCode.OFFSET_OUT_OF_RANGE


def test_first_partition_with_data_gets_a_whole_batch_past_the_limits(manager):
    manager.append_records({("t", 0): batch(5, value_size=200)}, 1)
    manager.append_records({("t", 1): batch(5, value_size=200)}, 1)
    results = manager.read([fetch(partition=0, max_bytes=10), fetch(partition=1, max_bytes=10)],
                           max_bytes=10)
    first, second = results[("t", 0)], results[("t", 1)]
    assert first.records_size > 1000      # one whole batch despite max_bytes=10
    assert second.records_size == 0       # limit used up, and min-one-message only once


def test_response_max_bytes_is_shared_between_partitions(manager):
    for _ in range(3):
        manager.append_records({("t", 0): batch(1, value_size=100)}, 1)
        manager.append_records({("t", 1): batch(1, value_size=100)}, 1)
    one = manager.read([fetch(partition=0)], max_bytes=1 << 20)[("t", 0)].records_size // 3
    results = manager.read([fetch(partition=0), fetch(partition=1)], max_bytes=one * 4)
    assert results[("t", 0)].records_size == one * 3
    assert results[("t", 1)].records_size == one


def test_leader_epoch_fencing(manager):
    manager.become_leader("t", 0, TOPIC_ID, 3, [0], None)
    part = manager.get_partition("t", 0)
    assert part.leader_epoch == 3
    assert manager.read([fetch(epoch=2)], max_bytes=100)[("t", 0)].error_code == \
        ErrorCode.FENCED_LEADER_EPOCH
    assert manager.read([fetch(epoch=4)], max_bytes=100)[("t", 0)].error_code == \
        ErrorCode.UNKNOWN_LEADER_EPOCH
    assert manager.read([fetch(epoch=3)], max_bytes=100)[("t", 0)].error_code == ErrorCode.NONE
    result = manager.append_records({("t", 0): batch(2)}, 1)[("t", 0)]
    records = manager.read([fetch()], max_bytes=1 << 20)[("t", 0)].records
    assert next(iter_batches(region_bytes(records))).partition_leader_epoch == 3
    assert result.error_code == ErrorCode.NONE


def test_offsets_by_timestamp(manager):
    manager.append_records({("t", 0): batch(3, ts=1000)}, 1)     # 1000, 1001, 1002
    manager.append_records({("t", 0): batch(3, ts=5000)}, 1)     # 5000, 5001, 5002
    part = manager.get_partition("t", 0)
    assert part.fetch_offset_for_timestamp(EARLIEST_TIMESTAMP, 0)[0] == 0
    assert part.fetch_offset_for_timestamp(LATEST_TIMESTAMP, 0)[0] == 6
    assert part.fetch_offset_for_timestamp(1001, 0)[:2] == (1, 1001)
    assert part.fetch_offset_for_timestamp(2000, 0)[:2] == (3, 5000)
    assert part.fetch_offset_for_timestamp(9000, 0) is None
    assert part.fetch_offset_for_timestamp(MAX_TIMESTAMP, 0)[:2] == (5, 5002)
    assert part.fetch_offset_for_timestamp(LATEST_TIMESTAMP, READ_COMMITTED)[0] == 6


def test_delete_records_moves_log_start(manager):
    manager.append_records({("t", 0): batch(5)}, 1)
    part = manager.get_partition("t", 0)
    assert part.delete_records_on_leader(3) == 3
    assert part.log_start_offset == 3
    assert manager.read([fetch(offset=1)], max_bytes=100)[("t", 0)].error_code == \
        ErrorCode.OFFSET_OUT_OF_RANGE
    with pytest.raises(KafkaError) as info:
        part.delete_records_on_leader(99)
    assert info.value.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert part.delete_records_on_leader(-1) == 5


def test_idempotent_duplicate_answers_original_offsets(manager):
    first = manager.append_records({("t", 0): batch(3, producer_id=7, producer_epoch=0,
                                                    base_sequence=0)}, -1)[("t", 0)]
    again = manager.append_records({("t", 0): batch(3, producer_id=7, producer_epoch=0,
                                                    base_sequence=0)}, -1)[("t", 0)]
    assert again.error_code == ErrorCode.NONE
    assert (again.base_offset, again.last_offset) == (first.base_offset, first.last_offset)
    assert manager.get_partition("t", 0).log_end_offset == 3
    gap = manager.append_records({("t", 0): batch(1, producer_id=7, producer_epoch=0,
                                                  base_sequence=9)}, -1)[("t", 0)]
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


async def test_long_poll_wakes_on_append(manager):
    waiter = asyncio.ensure_future(manager.wait_for_fetch(
        [fetch()], min_bytes=1, max_wait_ms=5000, isolation_level=0))
    await asyncio.sleep(0.01)
    assert not waiter.done()
    manager.append_records({("t", 0): batch(1)}, 1)
    assert await asyncio.wait_for(waiter, 1) is True


async def test_long_poll_min_bytes_and_timeout(manager):
    manager.append_records({("t", 0): batch(1)}, 1)
    loop = asyncio.get_running_loop()
    start = loop.time()
    ok = await manager.wait_for_fetch([fetch()], min_bytes=1 << 20, max_wait_ms=100,
                                      isolation_level=0)
    assert ok is False and loop.time() - start >= 0.09


async def test_a_consumer_behind_the_active_segment_is_answered_at_once(manager):
    """Kafka's DelayedFetch case F: a consumer catching up in an older segment than the one the
    readable end is in gets its answer at once, not after max_wait at every segment boundary;
    a partition's bytes count up to its own limit only (case G)."""
    manager.append_records({("t", 0): batch(1)}, 1)
    manager.get_partition("t", 0).log.roll()
    for _ in range(20):
        manager.append_records({("t", 0): batch(5, value_size=200)}, 1)
    waiter = asyncio.ensure_future(manager.wait_for_fetch(
        [fetch(offset=0)], min_bytes=10_000, max_wait_ms=5000, isolation_level=0))
    assert await asyncio.wait_for(waiter, 1) is True
    # whatever the partition's limit: case F completes the fetch
    waiter = asyncio.ensure_future(manager.wait_for_fetch(
        [fetch(offset=0, max_bytes=100)], min_bytes=10_000, max_wait_ms=5000, isolation_level=0))
    assert await asyncio.wait_for(waiter, 1) is True
    # in the active segment, the partition's limit below min_bytes: the wait runs its course
    ok = await manager.wait_for_fetch([fetch(offset=1, max_bytes=100)], min_bytes=1000,
                                      max_wait_ms=50, isolation_level=0)
    assert ok is False


async def test_acks_all_is_immediate_with_one_replica(manager):
    results = await manager.append_and_wait({("t", 0): batch(2)}, -1, timeout_ms=1000)
    assert results[("t", 0)].error_code == ErrorCode.NONE
    assert manager.produce_purgatory.watched == 0


async def test_acks_all_waits_for_a_follower_then_times_out(manager):
    # Design check for replication: a second replica in the ISR holds the HW back.
    part = manager.get_partition("t", 0)
    part.make_leader(1, [0, 1])
    part.isr.add(1)
    results = manager.append_records({("t", 0): batch(2)}, -1)
    assert part.high_watermark == 0 and part.log_end_offset == 2
    waiting = asyncio.ensure_future(manager.wait_for_acks(results, -1, 5000))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    # the follower fetches from offset 2: it has everything, the HW moves, the produce completes
    manager.read([fetch(offset=2)], max_bytes=1000, replica_id=1)
    await asyncio.wait_for(waiting, 1)
    assert results[("t", 0)].error_code == ErrorCode.NONE and part.high_watermark == 2
    more = manager.append_records({("t", 0): batch(1)}, -1)
    await manager.wait_for_acks(more, -1, 50)
    assert more[("t", 0)].error_code == ErrorCode.REQUEST_TIMED_OUT


async def test_a_write_the_high_watermark_covered_stays_acknowledged_after_leadership_moves(
        manager):
    """Kafka's DelayedProduce decides each partition's answer when its wait completes: a
    leadership change before the response goes out does not turn a committed write into
    NOT_LEADER_OR_FOLLOWER (a producer without idempotence would write it again). One that
    was still waiting when leadership moved is refused."""
    part = manager.get_partition("t", 0)
    part.make_leader(1, [0, 1])
    part.isr.add(1)
    results = manager.append_records({("t", 0): batch(2)}, -1)
    waiting = asyncio.ensure_future(manager.wait_for_acks(results, -1, 5000))
    await asyncio.sleep(0.01)
    manager.read([fetch(offset=2)], max_bytes=1000, replica_id=1)    # HW 2: committed
    part.make_follower(1, 2, [0, 1])                                  # before the answer
    await asyncio.wait_for(waiting, 1)
    assert results[("t", 0)].error_code == ErrorCode.NONE
    part.make_leader(3, [0, 1])
    part.isr.add(1)
    more = manager.append_records({("t", 0): batch(1)}, -1)
    waiting = asyncio.ensure_future(manager.wait_for_acks(more, -1, 5000))
    await asyncio.sleep(0.01)
    part.make_follower(1, 4, [0, 1])
    manager.produce_purgatory.notify("t", 0)
    await asyncio.wait_for(waiting, 1)
    assert more[("t", 0)].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_an_isr_shrunk_under_min_isr_after_the_append_is_not_enough_replicas_after_append(
        manager):
    """Kafka's checkEnoughReplicasReachOffset: the high watermark covers the write but the
    ISR is now smaller than min.insync.replicas."""
    part = manager.become_leader("t", 0, TOPIC_ID, 1, [0, 1], LogConfig(min_insync_replicas=2))
    part.isr.add(1)
    results = manager.append_records({("t", 0): batch(2)}, -1)
    manager.read([fetch(offset=2)], max_bytes=1000, replica_id=1)    # HW 2
    part.isr.discard(1)
    await manager.wait_for_acks(results, -1, 1000)
    assert results[("t", 0)].error_code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_not_enough_replicas(manager):
    manager.become_leader("t", 0, TOPIC_ID, 1, [0, 1], LogConfig(min_insync_replicas=2))
    result = manager.append_records({("t", 0): batch(1)}, -1)[("t", 0)]
    assert result.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert manager.append_records({("t", 0): batch(1)}, 1)[("t", 0)].error_code == \
        ErrorCode.NONE


def test_stop_replica_with_delete(manager, tmp_path):
    manager.append_records({("t", 1): batch(1)}, 1)
    manager.stop_replica("t", 1, delete=True)
    assert manager.get_partition("t", 1) is None
    assert manager.topic_name(TOPIC_ID) == "t"        # partition 0 still there
    manager.stop_replica("t", 0, delete=True)
    assert manager.topic_name(TOPIC_ID) is None


async def test_notify_rechecks_only_the_partition_that_changed(manager, monkeypatch):
    checked = []
    original = manager.partition_bytes_available

    def counting(fp, *args):
        checked.append(fp.partition)
        return original(fp, *args)

    monkeypatch.setattr(manager, "partition_bytes_available", counting)
    waiter = asyncio.ensure_future(manager.wait_for_fetch(
        [fetch(partition=0), fetch(partition=1)], min_bytes=1, max_wait_ms=5000,
        isolation_level=0))
    await asyncio.sleep(0.01)
    checked.clear()
    manager.append_records({("t", 1): batch(1)}, 1)
    assert await asyncio.wait_for(waiter, 1) is True
    assert checked == [1]


def test_fenced_producer_epoch(manager):
    newer = manager.append_records({("t", 0): batch(2, producer_id=9, producer_epoch=3,
                                                    base_sequence=0)}, -1)[("t", 0)]
    assert newer.error_code == ErrorCode.NONE
    older = manager.append_records({("t", 0): batch(1, producer_id=9, producer_epoch=2,
                                                    base_sequence=2)}, -1)[("t", 0)]
    assert older.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert older.base_offset == -1
    assert manager.get_partition("t", 0).log_end_offset == 2


def test_an_io_error_takes_its_log_dir_offline_and_only_it(tmp_path, monkeypatch):
    """Kafka's log dir failure: every partition of the failed dir answers KAFKA_STORAGE_ERROR
    (and LeaderAndIsr for it too), the other dir serves on, no log is created there again."""
    clock = Clock()
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    log_manager = LogManager(dirs, LogConfig(), time_ms=clock.ms)
    log_manager.startup("cluster", 0)
    rm = ReplicaManager(log_manager, broker_id=0, time=clock)
    failures = []
    rm.on_log_dir_failure = failures.append
    for p in range(3):
        rm.become_leader("t", p, TOPIC_ID, 0, [0], LogConfig())
    assert [log_manager.log_dir_of("t", p) for p in range(3)] == [dirs[0], dirs[1], dirs[0]]
    rm.append_records({("t", 0): batch(1), ("t", 1): batch(1)}, 1)

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(rm.get_partition("t", 0).log, "append_as_leader", broken)
    results = rm.append_records({("t", 0): batch(1), ("t", 1): batch(1)}, 1)
    assert results[("t", 0)].error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert results[("t", 1)].error_code == ErrorCode.NONE
    assert failures == [dirs[0]] and log_manager.offline_dirs == {dirs[0]}
    assert rm.append_records({("t", 2): batch(1)}, 1)[("t", 2)].error_code == \
        ErrorCode.KAFKA_STORAGE_ERROR                       # same dir: offline too
    reads = rm.read([fetch(partition=0), fetch(partition=1)], max_bytes=1 << 20)
    assert reads[("t", 0)].error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert reads[("t", 1)].records_size > 0
    rm.become_leader("u", 0, TOPIC_ID, 0, [0], LogConfig())
    assert log_manager.log_dir_of("u", 0) == dirs[1]       # new logs avoid the failed dir
    # StopReplica (a topic deletion) cannot delete what is on the failed dir: Kafka's
    # HostedPartition.Offline answer, so the deletion waits for the broker's return
    assert rm.stop_replicas(1, [("t", 0, -2, True), ("t", 1, -2, True)]) == (
        ErrorCode.NONE, {("t", 0): ErrorCode.KAFKA_STORAGE_ERROR, ("t", 1): ErrorCode.NONE})
    rm.shutdown()
    log_manager.shutdown()
    assert not os.path.exists(os.path.join(dirs[0], ".kafka_cleanshutdown"))
    assert os.path.exists(os.path.join(dirs[1], ".kafka_cleanshutdown"))


def test_a_follower_serves_a_fetch_v11_consumer_whatever_its_own_selector(manager):
    """Kafka's FetchParams.fetchOnlyLeader: a consumer's Fetch v11+ carries client metadata, and
    any replica serves it (up to its high watermark) whether or not this broker has
    replica.selector.class set: a leader that has one may send consumers to a follower that
    has not (a rolling config change). Older fetches still need the leader."""
    import types
    manager.append_records({("t", 0): batch(3)}, 1)
    part = manager.get_partition("t", 0)
    part.make_follower(1, 1, [0, 1], partition_epoch=1)
    manager.metadata_cache = types.SimpleNamespace(live_brokers={0: None, 1: None})   # a cluster
    assert not manager.rack_aware_reads()
    served = manager.read([fetch()], max_bytes=1 << 20, client_metadata=True)[("t", 0)]
    assert served.error_code == ErrorCode.NONE and served.records_size > 0
    refused = manager.read([fetch()], max_bytes=1 << 20)[("t", 0)]
    assert refused.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_an_error_carries_no_offsets_to_a_consumer(manager):
    """Kafka's createLogReadResult(e): high watermark, last stable offset and log start -1 with
    an error (librdkafka reading from a follower decides on OFFSET_OUT_OF_RANGE by them)."""
    manager.append_records({("t", 0): batch(3)}, 1)
    result = manager.read([fetch(offset=99)], max_bytes=1 << 20)[("t", 0)]
    assert (result.error_code, result.high_watermark, result.last_stable_offset,
            result.log_start_offset) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1, -1, -1)


def test_a_redirect_to_a_preferred_replica_checks_the_leader_epoch_first(manager):
    """Kafka takes the redirect's offsets from fetchOffsetSnapshot(currentLeaderEpoch): a
    consumer with a stale or newer leader epoch is told so instead of being redirected."""
    import types
    from broker.config import RACK_AWARE_REPLICA_SELECTOR
    manager.append_records({("t", 0): batch(3)}, 1)
    part = manager.get_partition("t", 0)
    part.make_leader(2, [0, 1], isr=[0, 1], partition_epoch=1)
    part.update_follower_fetch_state(1, 3, now_ms=manager.time.ms())
    manager.metadata_cache = types.SimpleNamespace(live_brokers={
        0: types.SimpleNamespace(rack="a"), 1: types.SimpleNamespace(rack="b")})
    manager.config = types.SimpleNamespace(
        get=lambda name: RACK_AWARE_REPLICA_SELECTOR if name == "replica.selector.class" else None)

    def read(epoch):
        return manager.read([fetch(epoch=epoch)], max_bytes=1 << 20, client_rack="b",
                            client_metadata=True)[("t", 0)]
    assert read(2).preferred_read_replica == 1
    assert read(1).error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert read(3).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH


def test_a_consumer_is_sent_only_to_a_replica_on_its_listener(manager):
    """Kafka's findPreferredReadReplica offers the selector only replicas with an endpoint on the
    consumer's listener (getPartitionReplicaEndpoints): a follower without it (a rolling
    restart adding a listener) was chosen, and the consumer, which cannot see that broker in
    its metadata, went back to the leader and was sent there again, for ever."""
    import types
    from broker.config import RACK_AWARE_REPLICA_SELECTOR
    manager.append_records({("t", 0): batch(3)}, 1)
    part = manager.get_partition("t", 0)
    part.make_leader(2, [0, 1], isr=[0, 1], partition_epoch=1)
    part.update_follower_fetch_state(1, 3, now_ms=manager.time.ms())
    both = {"CLIENT": ("h", 1), "INTERNAL": ("h", 2)}
    manager.metadata_cache = types.SimpleNamespace(live_brokers={
        0: types.SimpleNamespace(rack="a", endpoints=both),
        1: types.SimpleNamespace(rack="b", endpoints={"INTERNAL": ("h", 3)})})
    manager.config = types.SimpleNamespace(
        get=lambda name: RACK_AWARE_REPLICA_SELECTOR if name == "replica.selector.class" else None)

    def read(listener):
        return manager.read([fetch(epoch=2)], max_bytes=1 << 20, client_rack="b",
                            client_metadata=True, listener=listener)[("t", 0)]
    served = read("CLIENT")
    assert served.preferred_read_replica == -1 and served.records_size > 0
    assert read("INTERNAL").preferred_read_replica == 1


async def test_delete_records_waits_for_the_followers_log_start(manager):
    """Kafka's DelayedDeleteRecords: the answer comes once every live follower's log start has
    followed (low watermark = the smallest), or REQUEST_TIMED_OUT at timeout_ms."""
    import types
    manager.append_records({("t", 0): batch(10)}, 1)
    part = manager.get_partition("t", 0)
    part.make_leader(1, [0, 1], isr=[0, 1], partition_epoch=1)
    manager._follower_fetched(part, 1, 10, log_start_offset=0)        # HW 10, follower start 0

    def follower_fetch(log_start):
        fp = types.SimpleNamespace(topic="t", partition=0, fetch_offset=10, partition_max_bytes=1 << 20,
                                   current_leader_epoch=1, log_start_offset=log_start)
        manager.read([fp], max_bytes=1 << 20, replica_id=1)
    waiter = asyncio.ensure_future(manager.delete_records({("t", 0): 4, ("t", 1): 0}, 5000))
    await asyncio.sleep(0.01)
    assert not waiter.done() and part.log_start_offset == 4
    follower_fetch(2)                       # not there yet
    await asyncio.sleep(0.01)
    assert not waiter.done()
    follower_fetch(4)
    assert await asyncio.wait_for(waiter, 1) == {("t", 0): (ErrorCode.NONE, 4),
                                                 ("t", 1): (ErrorCode.NONE, 0)}
    # a follower that does not follow: the timeout, with the low watermark it started from
    assert await manager.delete_records({("t", 0): 6}, 50) == {
        ("t", 0): (ErrorCode.REQUEST_TIMED_OUT, 4)}
    assert await manager.delete_records({("t", 0): 99}, 50) == {
        ("t", 0): (ErrorCode.OFFSET_OUT_OF_RANGE, -1)}


async def test_a_waiting_acks_all_write_whose_partition_goes_gets_kafkas_error(manager):
    """Kafka's DelayedProduce asks getPartitionOrError: a partition deleted while the write
    waits is UNKNOWN_TOPIC_OR_PARTITION, one on a failed log dir KAFKA_STORAGE_ERROR (not
    NOT_LEADER_OR_FOLLOWER, which sends the producer looking for a leader that is not
    there)."""
    for p in (0, 1):
        manager.get_partition("t", p).make_leader(1, [0, 1])
        manager.get_partition("t", p).isr.add(1)
    results = manager.append_records({("t", 0): batch(2), ("t", 1): batch(2)}, -1)
    waiting = asyncio.ensure_future(manager.wait_for_acks(results, -1, 5000))
    await asyncio.sleep(0.01)
    manager.stop_replica("t", 0, delete=True)
    manager.offline_partitions[("t", 1)] = None
    manager._partitions.pop(("t", 1))
    manager.produce_purgatory.notify("t", 1)
    await asyncio.wait_for(waiting, 1)
    assert results[("t", 0)].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert results[("t", 1)].error_code == ErrorCode.KAFKA_STORAGE_ERROR


async def test_the_leader_throttle_holds_after_a_follower_fetch_waits(manager):
    """Kafka's shouldLeaderThrottle applies on every read, the one after a wait too, and
    DelayedFetch does not count a throttled partition's bytes: a throttled, out-of-sync
    follower gets nothing and waits max_wait_ms, as from Kafka (the wait ended at once and the
    read after it sent the records: a leader-side throttle held nothing back)."""
    from broker.replication_quota import ReplicationQuota
    part = manager.get_partition("t", 0)
    part.make_leader(1, [0, 1])                        # follower 1 is not in the ISR
    manager.append_records({("t", 0): batch(2)}, 1)
    quota = ReplicationQuota(0, lambda: 1, lambda topic: "*")
    quota.record(10_000)                               # used up
    manager.leader_quota = quota
    request = fetch(offset=0)
    assert manager.partition_bytes_available(request, 1, 0, replica_id=1) == 0
    for update in (True, False):
        read = manager.read([request], max_bytes=1000, replica_id=1,
                            update_fetch_state=update)[("t", 0)]
        assert read.error_code == ErrorCode.NONE and read.records_size == 0


async def test_a_throttled_follower_fetch_answers_once_the_leader_quota_frees(manager):
    """The wait of a follower fetch the leader throttles ends when the leader's quota is under
    its rate again, and the read after it sends the records (it ended only at max_wait_ms:
    a throttled copy idled half a second at a time and ran about a tenth under its rate)."""
    from broker.replication_quota import ReplicationQuota
    part = manager.get_partition("t", 0)
    part.make_leader(1, [0, 1])                        # follower 1 is not in the ISR
    manager.append_records({("t", 0): batch(2)}, 1)
    quota = ReplicationQuota(0, lambda: 100_000, lambda topic: "*", window_s=0.05)
    quota.record(10_000)                               # 200,000 B/s: used up for 0.1 s
    manager.leader_quota = quota
    request = fetch(offset=0)
    assert manager.partition_bytes_available(request, 1, 0, replica_id=1) == 0
    began = time.monotonic()
    assert await manager.wait_for_fetch([request], min_bytes=1, max_wait_ms=30_000,
                                        isolation_level=0, replica_id=1)
    assert time.monotonic() - began < 15                # not the 30 s of max_wait_ms
    read = manager.read([request], max_bytes=1000, replica_id=1)[("t", 0)]
    assert read.error_code == ErrorCode.NONE and read.records_size > 0
