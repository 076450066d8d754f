"""The follower fetcher's early next request: a replica catching up appends a large answer
while its next Fetch is already out, and only where no leader decision rests on it."""
import types

from protocol.errors import ErrorCode

from broker.replica_fetcher import DEFER_APPEND_BYTES, FetchSession, FetchState, ReplicaFetcher

from tests.broker.test_replication_state import (Clock, append, leader_partition, no_fsync,
                                                 open_log, replica_batch)

__all__ = ["no_fsync"]          # the autouse fixture, imported to apply here too


def records_of(base_offset, batches, per_batch, epoch=3):
    """Leader-written batches from `base_offset`: (bytes, end offset)."""
    out, offset = [], base_offset
    for _ in range(batches):
        out.append(replica_batch(offset, per_batch, epoch))
        offset += per_batch
    return b"".join(out), offset


def answer(records, high_watermark, error=ErrorCode.NONE, diverging=None):
    return types.SimpleNamespace(error_code=error, records=records, log_start_offset=0,
                                 high_watermark=high_watermark, diverging_epoch=diverging)


def follower(tmp_path, leo=0):
    log_ = open_log(tmp_path / "f-0", Clock())
    if leo:
        log_.append_as_follower(records_of(0, 1, leo)[0])
    return types.SimpleNamespace(log=log_, topic="t", partition=0)


def big(base_offset):
    """An answer's records larger than DEFER_APPEND_BYTES (values of about 1 KiB each)."""
    per_batch = 100
    size = len(replica_batch(base_offset, per_batch, 3))
    return records_of(base_offset, DEFER_APPEND_BYTES // size + 2, per_batch)


def test_a_large_answer_below_the_high_watermark_is_appended_after_the_next_request(tmp_path):
    part = follower(tmp_path)
    records, end = big(0)
    assert len(records) >= DEFER_APPEND_BYTES
    assert ReplicaFetcher._deferrable(part, answer(records, end + 1)) == (end, 3)


def test_answers_appended_before_the_next_request(tmp_path):
    part = follower(tmp_path, leo=5)
    records, end = big(5)
    # Reaching the high watermark: the leader may take the replica into the ISR (or count it
    # for the high watermark) from the next request's offset, so it must be written first.
    assert ReplicaFetcher._deferrable(part, answer(records, end)) is None
    assert ReplicaFetcher._deferrable(part, answer(records, end - 1)) is None
    # Small answers: nothing to overlap.
    small, small_end = records_of(5, 1, 3)
    assert ReplicaFetcher._deferrable(part, answer(small, small_end + 100)) is None
    # Errors, diverging epochs, no records, and records not at this log's end.
    assert ReplicaFetcher._deferrable(part, answer(records, end + 1,
                                                   ErrorCode.NOT_LEADER_OR_FOLLOWER)) is None
    diverging = types.SimpleNamespace(epoch=2, end_offset=3)
    assert ReplicaFetcher._deferrable(part, answer(records, end + 1, diverging=diverging)) is None
    assert ReplicaFetcher._deferrable(part, answer(None, end + 1)) is None
    elsewhere, elsewhere_end = big(50)
    assert ReplicaFetcher._deferrable(part, answer(elsewhere, elsewhere_end + 1)) is None


def test_the_leader_takes_no_decision_on_an_offset_below_its_high_watermark(tmp_path):
    """What makes the early request safe, on the leader's side: an out-of-ISR replica that
    reports an offset below the high watermark moves neither the high watermark nor the ISR."""
    leader = leader_partition(tmp_path, replicas=(0, 1, 2), isr=(0, 1))
    append(leader, 10)
    leader.update_follower_fetch_state(1, 10)
    assert leader.high_watermark == 10
    assert not leader.update_follower_fetch_state(2, 9)
    assert leader.high_watermark == 10 and leader.isr == {0, 1}
    assert not leader.isr_expansion_candidate(2, {0, 1, 2})


def fetcher_of(parts):
    rm = types.SimpleNamespace(get_partition=lambda topic, p: parts.get((topic, p)))
    return types.SimpleNamespace(broker=types.SimpleNamespace(replica_manager=rm),
                                 session=FetchSession())


def test_an_append_that_failed_after_the_early_request_is_not_built_on(tmp_path):
    part = follower(tmp_path, leo=5)
    ok, failed = FetchState(1), FetchState(1)
    ok.ahead = (5, 3)                      # the append went through: the log is there
    failed.ahead = (900, 3)                # the log stayed at 5
    other = follower(tmp_path / "other", leo=0)
    fetcher = fetcher_of({("t", 0): part, ("t", 1): other})
    stale = ReplicaFetcher._settle_ahead(fetcher, {("t", 0): ok, ("t", 1): failed})
    assert stale == {("t", 1)}
    assert ok.ahead is None and failed.ahead is None


class Config(dict):
    def get(self, key, default=None):
        return super().get(key, default)


def test_a_replica_out_of_the_isr_fetches_apart_until_it_caught_up():
    """Catching up (a reassignment's new replica, a restarted broker) goes through a fetcher of
    its own, so the large answers it gets do not hold up the fetches of replicas in sync (whose
    leader waits for them to acknowledge acks=all writes); once at the leader's high watermark
    the partition moves to its leader's regular fetcher."""
    import asyncio

    from broker.replica_fetcher import ReplicaFetcherManager

    async def scenario():
        broker = types.SimpleNamespace(config=Config({
            "num.replica.fetchers": 1, "replica.fetch.backoff.ms": 60_000}),
            replica_manager=types.SimpleNamespace(get_partition=lambda topic, p: None))
        manager = ReplicaFetcherManager(broker)
        try:
            manager.add_partition(("t", 0), 1, 7, catch_up=True)
            manager.add_partition(("t", 1), 1, 7)
            catching_up = manager._fetchers[(1, 0, True)]
            assert set(catching_up.partitions) == {("t", 0)}
            assert set(manager._fetchers[(1, 0, False)].partitions) == {("t", 1)}
            assert catching_up.name.endswith("-catch-up")
            closed = []

            class Connection:
                async def close(self):
                    closed.append(True)
            catching_up._connection = Connection()
            manager.caught_up(("t", 0), catching_up)
            assert set(manager._fetchers) == {(1, 0, False)}
            for _ in range(3):
                await asyncio.sleep(0)
            assert closed == [True], "the emptied fetcher's connection stayed open"
            regular = manager._fetchers[(1, 0, False)]
            assert set(regular.partitions) == {("t", 0), ("t", 1)}
            assert regular.partitions[("t", 0)].leader_epoch == 7
            # A late word from a fetcher that no longer has the partition changes nothing.
            manager.caught_up(("t", 0), catching_up)
            assert manager._assigned[("t", 0)] == (1, 0, False)
        finally:
            await manager.shutdown()
    asyncio.run(scenario())


def test_session_errors_and_a_closed_session_as_kafkas_fetch_session_handler():
    """A session error closes the old session with the next full request (unless the leader
    lost it: FETCH_SESSION_ID_NOT_FOUND), and an incremental answer with session id 0 (the
    leader closed it) makes the next request full."""
    from types import SimpleNamespace
    from protocol.errors import ErrorCode
    from broker.fetch_session import INITIAL_EPOCH, INVALID_SESSION_ID

    def answered(code, session_id=5):
        session = FetchSession()
        session.session_id, session.epoch = 5, 3
        session.pending = (False, {}, [], {}, True)
        ReplicaFetcher._session_answered(SimpleNamespace(session=session), SimpleNamespace(
            error_code=code, session_id=session_id))
        return session
    assert answered(ErrorCode.INVALID_FETCH_SESSION_EPOCH).closing_id == 5
    assert answered(ErrorCode.FETCH_SESSION_ID_NOT_FOUND).closing_id == INVALID_SESSION_ID
    closed = answered(ErrorCode.NONE, session_id=0)
    assert (closed.session_id, closed.epoch) == (INVALID_SESSION_ID, INITIAL_EPOCH)
    kept = answered(ErrorCode.NONE)
    assert (kept.session_id, kept.epoch) == (5, 4)


def catching_up_fetcher(tp=("t", 0), **replica_manager):
    """A catching-up ReplicaFetcher of leader 1 holding `tp` (no connection, no task), over a
    replica manager of `replica_manager`'s attributes: (fetcher, the partition's FetchState)."""
    state = FetchState(3)
    fetcher = ReplicaFetcher.__new__(ReplicaFetcher)
    fetcher.name, fetcher._executor, fetcher.catch_up = "ReplicaFetcherThread-0-1-catch-up", None, True
    fetcher.partitions, fetcher.lag = {tp: state}, {}
    fetcher.broker = types.SimpleNamespace(replica_manager=types.SimpleNamespace(**{
        "follower_quota": None, "fetch_purgatory": types.SimpleNamespace(notify=lambda *tp: None),
        **replica_manager}))
    return fetcher, state


def test_a_deferred_append_runs_in_the_fetchers_thread_and_a_fence_drops_it(tmp_path):
    """A catching-up replica's large append is written by its fetcher's thread while the
    loop reads the next answer; a role change, the end of the partition's fetching or the
    log's closing in the meantime (`fence_appends`) drops an append not begun: nothing is
    written, no error, and the high watermark stays where the log is. The same for one a
    throttled fetcher runs on the loop after an await."""
    import asyncio
    import threading

    part = follower(tmp_path, leo=5)
    log_ = part.log
    threads = []
    append_as_follower = log_.append_as_follower

    def recording(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return append_as_follower(*args, **kwargs)
    log_.append_as_follower = recording
    fetcher, state = catching_up_fetcher()

    async def scenario():
        records, end = big(5)
        await fetcher._process_one(part, state, answer(records, end + 10), 0.1,
                                   (log_, log_.append_fence))
        assert log_.log_end_offset == end and log_.high_watermark == end
        assert threads == ["ReplicaFetcherThread-0-1-catch-up-append_0"], threads
        more, more_end = big(end)
        for in_thread in (True, False):
            fence = (log_, log_.append_fence)
            log_.fence_appends()            # e.g. make_follower of a new leader meanwhile
            await fetcher._process_one(part, state, answer(more, more_end + 10), 0.1, fence,
                                       in_thread=in_thread)
            assert log_.log_end_offset == end and log_.high_watermark == end
            assert not state.failed and fetcher.lag[("t", 0)] == 10
        fence = (log_, log_.append_fence)
        log_.close_files()
        await fetcher._process_one(part, state, answer(more, more_end + 10), 0.1, fence)
        assert log_.log_end_offset == end
        await asyncio.get_running_loop().run_in_executor(None, fetcher._executor.shutdown)
    asyncio.run(scenario())


def test_a_fence_waits_for_an_append_under_way(tmp_path):
    """Kafka's fetcher thread holds its partition lock while it appends: a role change waits.
    Here the log's lock: fence_appends returns only once the thread's append is written."""
    import threading

    log_ = follower(tmp_path, leo=5).log
    inside, release = threading.Event(), threading.Event()
    write = log_._append

    def slow(*args):
        inside.set()
        release.wait(10)
        return write(*args)
    log_._append = slow
    records, end = big(5)
    appending = threading.Thread(target=log_.append_as_follower, args=(records,),
                                 kwargs={"fence": log_.append_fence})
    appending.start()
    assert inside.wait(10)
    fenced = threading.Event()
    fencing = threading.Thread(target=lambda: (log_.fence_appends(), fenced.set()))
    fencing.start()
    assert not fenced.wait(0.3)
    release.set()
    appending.join(10)
    fencing.join(10)
    assert fenced.is_set() and log_.log_end_offset == end


def test_role_changes_and_the_end_of_fetching_fence_appends(tmp_path):
    """Every place that changes what a follower's log may receive fences the appends decided
    before: make_leader, make_follower, ReplicaFetcherManager.remove_partition."""
    import asyncio

    from broker.replica_fetcher import ReplicaFetcherManager

    part = leader_partition(tmp_path, replicas=(0, 1))
    log_ = part.log
    before = log_.append_fence
    part.make_follower(1, 2, [0, 1], partition_epoch=1)
    assert log_.append_fence > before
    before = log_.append_fence
    part.make_leader(3, [0, 1], isr=[0, 1], partition_epoch=2)
    assert log_.append_fence > before

    async def scenario():
        broker = types.SimpleNamespace(config=Config({
            "num.replica.fetchers": 1, "replica.fetch.backoff.ms": 60_000}),
            replica_manager=types.SimpleNamespace(get_partition=lambda topic, p: part))
        manager = ReplicaFetcherManager(broker)
        manager.add_partition(("t", 0), 1, 4, catch_up=True)
        fence = log_.append_fence
        manager.remove_partition(("t", 0))
        assert log_.append_fence > fence
        await manager.shutdown()
    asyncio.run(scenario())


def test_a_disk_error_in_the_append_thread_reaches_the_log_dir_even_after_a_stop(tmp_path):
    """The append thread fails with an OSError while the fetcher is being stopped (its task
    cancelled as it waits): the error still takes the dir of the log written offline, that
    log's and not whatever the partition holds by then."""
    import asyncio
    import threading

    part = follower(tmp_path, leo=5)
    log_ = part.log
    started, release = threading.Event(), threading.Event()

    def failing(*args, **kwargs):
        started.set()
        release.wait(10)
        raise OSError(28, "No space left on device")
    log_.append_as_follower = failing
    failures = []
    fetcher, state = catching_up_fetcher(_storage_failure=lambda p, exc, written: failures.append(
        (p, exc.errno, written)))
    records, end = big(5)

    async def scenario():
        task = asyncio.get_running_loop().create_task(fetcher._process_one(
            part, state, answer(records, end + 10), 0.1, (log_, log_.append_fence)))
        while not started.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        part.log = object()                 # e.g. a log dir move swapped it meanwhile
        release.set()
        try:
            await task
        except asyncio.CancelledError:
            pass
        for _ in range(100):
            if failures:
                break
            await asyncio.sleep(0.01)
        await asyncio.get_running_loop().run_in_executor(None, fetcher._executor.shutdown)
    asyncio.run(scenario())
    assert failures == [(part, 28, log_)]


def test_a_partition_not_fetched_yet_is_held_only_by_a_catching_up_fetcher():
    """The follower quota holds throttled partitions this replica is behind on. One not
    fetched yet: in sync in a regular fetcher (the controller put this replica in its ISR; a
    topic created and throttled while a move kept the quota exceeded was never fetched, and
    left the ISR after 30 s), behind in a catching-up one."""
    quota = types.SimpleNamespace(is_throttled=lambda topic, p: True, is_exceeded=lambda: True)
    for catch_up, held in ((False, set()), (True, {("t", 0)})):
        fetcher, state = catching_up_fetcher(follower_quota=quota)
        fetcher.catch_up = catch_up
        assert fetcher._throttled({("t", 0): state}) == held
        fetcher.lag[("t", 0)] = 5           # behind, as an answer showed: held in both
        assert fetcher._throttled({("t", 0): state}) == {("t", 0)}
