"""Resuming a move between log dirs after a restart: how much of the future log still holds the
current log's records, judged by leader epochs as a follower's truncation is."""
import os

from broker.log_dir_mover import _agreeing_end

from tests.broker.test_replication_state import T0, no_fsync, open_log, replica_batch

__all__ = ["no_fsync"]          # the autouse fixture, imported to apply here too


def log_of(path, *runs):
    """A log written as a follower: runs of (epoch, batches of 10 records)."""
    log_ = open_log(path)
    for epoch, batches in runs:
        for _ in range(batches):
            log_.append_as_follower(replica_batch(log_.log_end_offset, 10, epoch))
    return log_


def test_a_future_log_that_is_a_prefix_is_kept_whole(tmp_path):
    current = log_of(tmp_path / "c-0", (0, 3), (2, 2))
    future = log_of(tmp_path / "f-0", (0, 3), (2, 1))
    assert _agreeing_end(current, future) == 40
    assert _agreeing_end(current, log_of(tmp_path / "g-0", (0, 2))) == 20


def test_a_current_log_truncated_and_written_again_cuts_the_future_log_back(tmp_path):
    # The future copied epoch 2 up to 50; meanwhile the current log (a follower) was
    # truncated to 35 and a new leader (epoch 3) wrote from there.
    future = log_of(tmp_path / "f-0", (0, 3), (2, 2))
    current = open_log(tmp_path / "c-0")
    for offset in (0, 10, 20):
        current.append_as_follower(replica_batch(offset, 10, 0))
    current.append_as_follower(replica_batch(30, 5, 2))
    current.append_as_follower(replica_batch(35, 10, 3))
    assert _agreeing_end(current, future) == 35
    # A current log that never had the future's epoch: back to where their epochs part.
    other = log_of(tmp_path / "o-0", (0, 2), (4, 3))
    assert _agreeing_end(other, future) == 20


def test_a_future_log_ahead_of_the_current_one_or_with_nothing_in_common_is_copied_again(
        tmp_path):
    current = log_of(tmp_path / "c-0", (0, 2))
    assert _agreeing_end(current, log_of(tmp_path / "f-0", (0, 3))) == 20
    # No epoch in common: copied again.
    assert _agreeing_end(log_of(tmp_path / "e-0", (5, 2)), log_of(tmp_path / "g-0", (1, 1))) \
        == -1
    # A current log emptied (no epochs at all): copied again from its start.
    empty = open_log(tmp_path / "h-0")
    assert _agreeing_end(empty, log_of(tmp_path / "i-0", (1, 1))) == -1


def test_a_copy_follows_the_current_log_through_a_truncation(tmp_path):
    """Mid-move, the current log (a follower's) is truncated and a new leader's records take
    the place of what the future log had copied: the next chunk cuts those back first, so the
    future log ends as a byte-for-byte copy (what the swap relies on)."""
    from broker.log_dir_mover import _copy_chunk
    from tests.broker.test_replication_state import as_bytes
    current = log_of(tmp_path / "c-0", (0, 3), (2, 2))
    future = open_log(tmp_path / "f-0")
    while _copy_chunk(current, future, 1 << 20):
        pass
    assert future.log_end_offset == 50
    current.truncate_to(40)
    current.append_as_follower(replica_batch(40, 10, 3))
    current.append_as_follower(replica_batch(50, 10, 3))
    while _copy_chunk(current, future, 1 << 20):
        pass
    assert future.log_end_offset == current.log_end_offset == 60
    assert future.leader_epoch_cache.entries() == current.leader_epoch_cache.entries()
    assert as_bytes(future.read(0, 1 << 20).records) == as_bytes(current.read(0, 1 << 20).records)


def test_a_current_log_truncated_below_the_copys_last_epoch_keeps_the_copy_below_it(tmp_path):
    """A leader change truncates the current log to the start of epoch 2, which the copy had
    reached, before the new leader writes anything: the copy keeps epoch 0 (not copied again
    from scratch, as an unknown epoch would have it)."""
    future = log_of(tmp_path / "f-0", (0, 30), (2, 2))
    current = log_of(tmp_path / "c-0", (0, 30), (2, 3))
    current.truncate_to(300)
    assert current.leader_epoch_cache.entries() == [(0, 0)]
    assert _agreeing_end(current, future) == 300


def test_an_epoch_written_again_elsewhere_ends_the_agreement_at_its_first_start(tmp_path):
    """The copy read epoch 3's first batch at 50 while the current log had been truncated to
    40 and epoch 3 started there: records 40-49 differ, whatever the shared latest epoch."""
    future = log_of(tmp_path / "f-0", (0, 3), (2, 2))
    future.append_as_follower(replica_batch(50, 10, 3))
    current = log_of(tmp_path / "c-0", (0, 3), (2, 1), (3, 3))
    assert current.leader_epoch_cache.entries() == [(0, 0), (2, 30), (3, 40)]
    assert _agreeing_end(current, future) == 40


def test_epochs_that_began_before_the_copy_count_from_its_first_offset(tmp_path):
    """Retention moved the current log's start to 100 before the move: the copy starts there,
    its epoch 0 recorded at 100, the current log's at 0. Still the same epoch."""
    from broker.log_dir_mover import _copy_chunk
    current = log_of(tmp_path / "c-0", (0, 20))
    current.update_high_watermark(200)
    current.delete_records_before(100)
    future = open_log(tmp_path / "f-0")
    future.truncate_fully_and_start_at(current.log_start_offset)
    assert _copy_chunk(current, future, 600) > 0
    assert future.leader_epoch_cache.entries()[0][1] >= 100
    copied = future.log_end_offset
    assert 100 < copied < 200 and _agreeing_end(current, future) == copied


def test_a_copy_from_a_log_start_inside_a_batch_ends(tmp_path):
    """DeleteRecords put the log start (15) inside the batch 10-19: the future log, created at
    15, starts again at 10 with that batch (as a follower's does). Its epoch then starts at 10
    where the current log's starts at 15; both count from the copy's first offset, so the
    copy goes on instead of starting over at every round (it looped on the event loop)."""
    from broker.log_dir_mover import CHUNK_BYTES, _copy_chunk
    current = open_log(tmp_path / "c-0")
    for offset in range(0, 100, 10):
        current.append_as_follower(replica_batch(offset, 10, 0))
    current.update_high_watermark(100)
    current.delete_records_before(15)
    future = open_log(tmp_path / "f-0")
    future.truncate_fully_and_start_at(15)
    for _ in range(100):
        if _copy_chunk(current, future, CHUNK_BYTES) == 0:
            break
    else:
        raise AssertionError("the copy never ends")
    assert future.log_end_offset == current.log_end_offset == 100
    assert future.read(15, 1 << 20).records.read_bytes() == \
        current.read(15, 1 << 20).records.read_bytes()


def _two_dir_broker(tmp_path, rate=1):
    """A ReplicaManager over two log dirs with t-0 in the first, holding 200 records, and
    moves throttled to `rate` bytes/s (one chunk, then a long sleep)."""
    from broker.replica_manager import ReplicaManager
    from storage.log_config import LogConfig
    from storage.log_manager import LogManager
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    lm = LogManager(dirs, LogConfig(segment_ms=10**12))
    lm.startup("cluster", 0)
    rm = ReplicaManager(lm, broker_id=0)
    rm.config = {"replica.alter.log.dirs.io.max.bytes.per.second": rate}
    lm.preferred_dirs[("t", 0)] = dirs[0]
    part = rm.become_leader("t", 0, None, 0, [0], LogConfig(segment_ms=10**12))
    for offset in range(0, 200, 10):
        part.log.append_as_follower(replica_batch(offset, 10, 0))
    return rm, lm, dirs


def test_a_move_paused_by_stop_replica_keeps_its_future_log_and_resumes(tmp_path,
                                                                        monkeypatch):
    """StopReplica without delete (a controlled shutdown's, for a followed partition) stops
    the copy but keeps the future log, as Kafka does; hosting the partition again resumes it.
    A failed dir drops the future logs moving into it."""
    import asyncio

    from broker import log_dir_mover
    monkeypatch.setattr(log_dir_mover, "CHUNK_BYTES", 300)     # one batch a chunk
    monkeypatch.setattr(log_dir_mover, "FINAL_BYTES", 2000)

    async def scenario():
        rm, lm, dirs = _two_dir_broker(tmp_path)
        rm.alter_replica_log_dirs({("t", 0): dirs[1]})
        for _ in range(20):
            await asyncio.sleep(0.01)
        _, future = lm.future_logs[("t", 0)]
        assert future.log_end_offset == 10                 # one chunk, then throttled
        rm.stop_replica("t", 0, delete=False)
        for _ in range(5):
            await asyncio.sleep(0)
        assert lm.future_logs[("t", 0)][1] is future and os.path.isdir(future.dir)
        assert rm.log_dir_mover.moving() == {}
        rm.become_leader("t", 0, None, 1, [0], None)        # hosted again: resumed
        assert rm.log_dir_mover.moving() == {("t", 0): dirs[1]}
        lm.mark_dir_offline(dirs[1])
        assert lm.future_logs == {} and os.path.isdir(future.dir)     # dropped, not deleted
        rm.shutdown()
        await rm.log_dir_mover.drain()
        lm.shutdown()
    asyncio.run(scenario())


def test_alter_replica_log_dirs_answers_each_partition_as_kafka(tmp_path):
    """A topic name too long for a "-future" folder is INVALID_TOPIC_EXCEPTION (the request
    failed whole and the connection closed); no future log is made while a dir is offline."""
    import asyncio

    from protocol.errors import ErrorCode
    from storage.log_config import LogConfig

    async def scenario():
        rm, lm, dirs = _two_dir_broker(tmp_path)
        long_name = "x" * 220
        lm.preferred_dirs[(long_name, 0)] = dirs[0]
        rm.become_leader(long_name, 0, None, 0, [0], LogConfig(segment_ms=10**12))
        got = rm.alter_replica_log_dirs({(long_name, 0): dirs[1], ("t", 0): dirs[0],
                                         ("nope", 0): dirs[1], ("t", 1): "/not/a/log/dir"})
        assert got == {(long_name, 0): ErrorCode.INVALID_TOPIC_EXCEPTION,
                       ("t", 0): ErrorCode.NONE,             # already there
                       ("nope", 0): ErrorCode.REPLICA_NOT_AVAILABLE,
                       ("t", 1): ErrorCode.LOG_DIR_NOT_FOUND}
        assert lm.future_logs == {}
        third = str(tmp_path / "c")
        lm.log_dirs.append(third)
        lm.offline_dirs.add(third)
        assert rm.alter_replica_log_dirs({("t", 0): dirs[1]}) == {
            ("t", 0): ErrorCode.KAFKA_STORAGE_ERROR}
        assert lm.future_logs == {}
        rm.shutdown()
        await rm.log_dir_mover.drain()
        lm.shutdown()
    asyncio.run(scenario())


def test_a_throttled_move_speeds_up_as_soon_as_the_rate_is_raised(tmp_path, monkeypatch):
    """Kafka's alter-log-dirs quota is looked at before every fetch: raising or removing
    replica.alter.log.dirs.io.max.bytes.per.second (kafka-reassign-partitions.sh --verify
    removes it) applies at once (a move here slept copied/rate, minutes at a low rate)."""
    import asyncio

    from broker import log_dir_mover
    monkeypatch.setattr(log_dir_mover, "CHUNK_BYTES", 300)
    monkeypatch.setattr(log_dir_mover, "FINAL_BYTES", 2000)

    async def scenario():
        rm, lm, dirs = _two_dir_broker(tmp_path)
        rm.alter_replica_log_dirs({("t", 0): dirs[1]})
        for _ in range(20):
            await asyncio.sleep(0.01)
        _, future = lm.future_logs[("t", 0)]
        assert future.log_end_offset == 10                 # one chunk, then throttled
        del rm.config["replica.alter.log.dirs.io.max.bytes.per.second"]
        for _ in range(100):
            if ("t", 0) not in lm.future_logs:
                break
            await asyncio.sleep(0.02)
        part = rm.get_partition("t", 0)
        moved = os.path.dirname(part.log.dir) == dirs[1] and part.log.log_end_offset == 200
        rm.shutdown()
        await rm.log_dir_mover.drain()
        lm.shutdown()
        return moved
    assert asyncio.run(scenario())


def test_a_move_pauses_the_cleaning_of_its_log(tmp_path, monkeypatch):
    """Kafka's abortAndPauseCleaning for a future replica: no clean of the current log while
    it is copied (the copy would keep records the clean drops, in a range the cleaner's
    checkpoint then calls clean, never compacted again); a clean under way ends before the
    copy begins; cleaning resumes after the swap."""
    import asyncio
    import time

    from broker import log_dir_mover
    from broker.replica_manager import ReplicaManager
    from storage.log_cleaner import CleanerConfig
    from storage.log_config import LogConfig
    from storage.log_manager import LogManager
    monkeypatch.setattr(log_dir_mover, "CHUNK_BYTES", 300)     # one batch a chunk
    monkeypatch.setattr(log_dir_mover, "FINAL_BYTES", 200)
    monkeypatch.setattr(log_dir_mover, "CLEAN_WAIT_S", 0.005)
    config = LogConfig(segment_bytes=1000, segment_ms=10**12, cleanup_policy="compact")

    def fill(log_, batches):
        for _ in range(batches):
            log_.append_as_follower(replica_batch(log_.log_end_offset, 10, 0))
        log_.update_high_watermark(log_.log_end_offset)

    async def settle(rounds=20):
        for _ in range(rounds):
            await asyncio.sleep(0.01)

    async def scenario():
        dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
        lm = LogManager(dirs, config)
        lm.startup("cluster", 0)
        lm.start_cleaner(CleanerConfig(threads=0, worker_process=False))
        cleaner = lm.cleaner
        rm = ReplicaManager(lm, broker_id=0)
        rm.config = {"replica.alter.log.dirs.io.max.bytes.per.second": 1}
        lm.preferred_dirs[("t", 0)] = dirs[0]
        part = rm.become_leader("t", 0, None, 0, [0], config)
        fill(part.log, 20)
        now = int(time.time() * 1000)
        under_way = cleaner.grab_filthiest(now)
        assert under_way.key == ("t", 0)
        rm.alter_replica_log_dirs({("t", 0): dirs[1]})
        await settle()
        _, future = lm.future_logs[("t", 0)]
        assert future.log_end_offset == 0                   # waiting for the clean
        cleaner._clean(cleaner.new_cleaner(), under_way, now, "0")
        await settle()
        assert future.log_end_offset > 0                    # copying, throttled
        fill(part.log, 20)
        assert cleaner.grab_filthiest(now) is None          # paused while copied
        rm.config = {"replica.alter.log.dirs.io.max.bytes.per.second": 10**9}
        for _ in range(200):
            if not rm.log_dir_mover.moving():
                break
            await asyncio.sleep(0.01)
        assert lm.log_dir_of("t", 0) == dirs[1]
        assert cleaner.grab_filthiest(now).key == ("t", 0)  # resumed after the swap
        rm.shutdown()
        await rm.log_dir_mover.drain()
        lm.shutdown()
    asyncio.run(scenario())


def test_a_copy_of_a_compacted_log_agrees_across_what_cleaning_removed(tmp_path):
    """Cleaning emptied the current log's first segments: the copy's epoch 0 begins at its
    first batch, the current log's at 0, with no record between. The same epoch: the copy
    goes on (it was started again for ever, on the event loop thread once near the end)."""
    from broker.log_dir_mover import _copy_chunk
    from storage.cleaner import Cleaner
    config = dict(segment_bytes=1000, cleanup_policy="compact")
    current = open_log(tmp_path / "c-0", **config)
    for offset in range(0, 200, 10):
        current.append_as_follower(replica_batch(offset, 10, 0))   # every record key b"k"
    current.update_high_watermark(200)
    Cleaner(dedupe_memory=1 << 20).clean(current, 0, current.segments[-1].base_offset, T0)
    first = current.read(0, 1).records.read_bytes()
    assert int.from_bytes(first[:8], "big") > 0           # the first records are gone
    future = open_log(tmp_path / "f-0", **config)
    for _ in range(50):
        if _copy_chunk(current, future, 300) == 0:
            break
    assert future.log_end_offset == current.log_end_offset == 200
    assert _agreeing_end(current, future) == 200
