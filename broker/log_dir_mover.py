"""Moving a replica between the log dirs of one broker (AlterReplicaLogDirs), as Kafka's
ReplicaAlterLogDirsThread does it.

`LogDirMover.move(tp, dir)` creates the partition's *future* log in the target dir
(``<topic>-<partition>.<uuid>-future``, storage/log_manager.py) and copies the current log into
it batch by batch, byte for byte (`append_as_follower`), in an executor of its own, all moves
together at most `replica.alter.log.dirs.io.max.bytes.per.second`. The partition stays served
from its current log meanwhile, and its cleaning is paused (a clean under way ends first).
When the future log is within FINAL_BYTES of the end, the last batches are copied and the logs
swapped on the event loop thread, where appends run, so none can slip in between (a catching-up
follower's append in its fetcher's thread is fenced first: it ends before, or never runs); the
old log is then deleted as a deleted partition's is.

Before each chunk the future log is cut back to where it still agrees with the current log,
judged by leader epochs as a follower truncates against its leader (`_align`): a current log
(a follower's) truncated, and maybe written again by a new leader, since the last chunk. Its
retention moving the log start past the copy makes the copy start again. The partition
deleted, its dir failing or a new move to another dir abandon the future log. A restart does
not, as in Kafka, nor does StopReplica without delete (`pause`): the broker stops copying and
keeps the future log (closed with the others on a clean shutdown), loads it again at start-up
(storage/log_manager.py) and resumes the move when the partition is hosted again (`resume`),
from where the copy got to.
"""
import asyncio
import concurrent.futures
import logging
import os

from storage.errors import OffsetOutOfRange

log = logging.getLogger(__name__)

CHUNK_BYTES = 4 * 1024 * 1024        # copied per executor call
FINAL_BYTES = 1024 * 1024            # what is left for the loop thread to copy before the swap
LONG_MAX = 2**63 - 1
RETRY = -1                           # _copy_chunk: nothing copied, try again
THROTTLE_CHECK_S = 0.1               # a throttled move looks again at the latest after this
CLEAN_WAIT_S = 0.1                   # how often a move looks whether a clean of its log ended


def _copy_chunk(current, future, max_bytes: int) -> int:
    """Append to `future` the current log's batches from its end, up to about `max_bytes`.
    Returns the bytes copied (0: caught up; RETRY: the current log was truncated while its
    bytes were read, nothing appended). First cuts `future` back to what the current log still
    holds (`_align`). Blocking: an executor thread, or the loop for the last chunks."""
    generation = current.generation
    _align(current, future)
    end = future.log_end_offset
    if end >= current.log_end_offset:
        return 0
    info = current.read(end, max_bytes)
    region = info.records
    if not len(region):
        return 0
    data = os.pread(region.file.fileno(), region.length, region.position)
    if current.generation != generation:
        return RETRY            # truncated on the loop meanwhile: the bytes may be another's
    complete = _complete_prefix(data)
    if complete == 0:
        return 0
    future.append_as_follower(memoryview(data)[:complete])
    return complete


def _complete_prefix(data: bytes) -> int:
    pos = 0
    while pos + 12 <= len(data):
        size = int.from_bytes(data[pos + 8:pos + 12], "big", signed=True) + 12
        if size <= 12 or pos + size > len(data):
            break
        pos += size
    return pos


def _align(current, future) -> None:
    """Cut `future` back to where it agrees with the current log, or start it again at the
    current log's start when nothing of it is left there (retention moved past it)."""
    end = _agreeing_end(current, future)
    if end < max(current.log_start_offset, future.log_start_offset):
        future.truncate_fully_and_start_at(current.log_start_offset)
    elif end < future.log_end_offset:
        future.truncate_to(end)


def _agreeing_end(current, future) -> int:
    """How far `future` holds the current log's records, by their leader epochs (both came
    from the same leaders, so an epoch that starts at the same offset in both holds the same
    records as far as both reach): the end of the latest such epoch, else -1 (copy again from
    the current log's start). An epoch may start later in the copy than in the current log,
    inside the current log's range of it: the records between are gone (compacted away, or
    below the copy's first offset). An epoch the current log no longer has (truncated away),
    or one that starts outside that range (truncated and written again), ends the agreement at
    its start. Records without epochs (old message formats): the future log's end, if the
    current log reaches it."""
    end = future.log_end_offset
    f_entries = future.leader_epoch_cache.entries()
    if not f_entries:
        return end if end <= current.log_end_offset else -1
    c_entries = current.leader_epoch_cache.entries()
    c_index = {epoch: i for i, (epoch, _) in enumerate(c_entries)}
    # The copy's first offset: a future log that began inside a batch starts at the batch's
    # base (Log.append_as_follower), below the current log's start.
    first = max(future.log_start_offset, current.log_start_offset)
    cap = end
    for i in range(len(f_entries) - 1, -1, -1):
        epoch, f_start = f_entries[i]
        j = c_index.get(epoch)
        c_start = c_entries[j][1] if j is not None else None
        c_end = (c_entries[j + 1][1] if j + 1 < len(c_entries) else current.log_end_offset) \
            if j is not None else None
        if j is None or not _same_start(current, max(c_start, first), max(f_start, first),
                                        max(c_end, first)):
            cap = min(cap, max(f_start, first), max(c_start, first) if j is not None else cap)
            continue
        f_end = f_entries[i + 1][1] if i + 1 < len(f_entries) else end
        return min(cap, f_end, c_end)
    return -1


def _same_start(current, c_start: int, f_start: int, c_end: int) -> bool:
    """An epoch recorded at `c_start` in the current log and at `f_start` in the copy began
    with the same records: the same offset, or a later one in the copy with no record of the
    current log in between (compacted away), inside the current log's range of the epoch."""
    if f_start == c_start:
        return True
    if not c_start < f_start < c_end:
        return False
    try:
        info = current.read(c_start, 1)
    except OffsetOutOfRange:
        return False
    region = info.records
    if not len(region):
        return False
    base = int.from_bytes(os.pread(region.file.fileno(), 8, region.position), "big", signed=True)
    return base >= f_start


class LogDirMover:
    def __init__(self, replica_manager):
        self.rm = replica_manager
        self._tasks: dict = {}                   # (topic, partition) -> (dir, task)
        self._stopping = False                   # shutting down: future logs are kept
        self._keep: set = set()                  # paused moves: their future logs are kept
        self._running: set = set()               # chunks being copied (concurrent futures)
        self._executor = None
        self._quota = None                       # the broker's alter-log-dirs quota

    def moving(self) -> dict:
        return {tp: d for tp, (d, _) in self._tasks.items()}

    def move(self, tp, log_dir: str) -> None:
        """Start moving `tp` to `log_dir` (a move to another dir is dropped first). The future
        log exists when this returns, as Kafka's maybeCreateFutureReplica does before the
        broker answers, so DescribeLogDirs shows it at once and a cancel finds it."""
        found = self._tasks.get(tp)
        if found is not None:
            if found[0] == log_dir:
                return
            self.cancel(tp)
        part = self.rm.get_partition(*tp)
        if part is None or self._stopping:
            return
        current = part.log
        future = self.rm.log_manager.create_future_log(
            tp[0], tp[1], log_dir, current.config, current.log_start_offset, part.topic_id)
        task = asyncio.get_running_loop().create_task(self._run(tp, log_dir, current, future))
        self._tasks[tp] = (log_dir, task)

    def resume(self, tp) -> None:
        """Go on with a move a restart interrupted: the future log loaded at start-up is
        copied into from its end, once cut back to where it agrees with the current log. A
        future log in the current log's own dir, or in a dir that failed, is dropped."""
        lm = self.rm.log_manager
        found = lm.future_logs.get(tp)
        part = self.rm.get_partition(*tp)
        if found is None or part is None or tp in self._tasks or self._stopping:
            return
        log_dir, future = found
        current = part.log
        if log_dir == lm.log_dir_of(*tp) or log_dir in lm.offline_dirs:
            lm.abandon_future_log(tp)
            return
        if future.topic_id is not None and current.topic_id is not None \
                and future.topic_id != current.topic_id:
            log.warning("Dropping %s: a move of an earlier topic named %s", future.dir, tp[0])
            lm.abandon_future_log(tp)
            return
        try:
            _align(current, future)
        except Exception:                                       # noqa: BLE001
            log.exception("Cannot resume the move of %s-%d to %s", tp[0], tp[1], log_dir)
            lm.abandon_future_log(tp)
            return
        log.info("Resuming the move of %s-%d to log dir %s from offset %d", tp[0], tp[1],
                 log_dir, future.log_end_offset)
        task = asyncio.get_running_loop().create_task(self._run(tp, log_dir, current, future))
        self._tasks[tp] = (log_dir, task)

    def stop(self) -> None:
        """The broker shuts down: the copying stops, the future logs stay for the restart
        (the log manager closes them with the others)."""
        self._stopping = True
        for tp in list(self._tasks):
            _, task = self._tasks.pop(tp)
            task.cancel()

    def pause(self, tp) -> None:
        """The broker stops hosting the partition without deleting it (StopReplica with
        delete=false, as in a controlled shutdown): the copying stops and the future log stays,
        to resume if the partition comes back (Kafka keeps it too)."""
        found = self._tasks.pop(tp, None)
        if found is not None:
            self._keep.add(tp)
            found[1].cancel()

    def cancel(self, tp) -> None:
        found = self._tasks.pop(tp, None)
        if found is not None:
            found[1].cancel()
        self.rm.log_manager.abandon_future_log(tp)

    async def drain(self, timeout: float = 30.0) -> None:
        """After `stop()`: wait for the chunks still being copied in the executor, so the log
        manager closes no future log under them."""
        pending = [f for f in self._running if not f.done()]
        if pending:
            await asyncio.get_running_loop().run_in_executor(
                None, concurrent.futures.wait, pending, timeout)
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None

    async def _copy_in_executor(self, current, future) -> int:
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                2, thread_name_prefix="log-dir-mover")
        chunk = self._executor.submit(_copy_chunk, current, future, CHUNK_BYTES)
        self._running.add(chunk)
        chunk.add_done_callback(self._running.discard)
        return await asyncio.wrap_future(chunk)

    async def _run(self, tp, log_dir: str, current, future) -> None:
        rm = self.rm
        lm = rm.log_manager
        # As Kafka's abortAndPauseCleaning for a future replica, no clean of the current log
        # while it is copied (the copy would keep records a clean drops, in a range its
        # checkpoint then calls clean, so never cleaned again); where Kafka aborts a clean
        # under way, the move waits for it to end.
        cleaner = lm.cleaner
        if cleaner is not None:
            cleaner.pause(*tp)
        try:
            while cleaner is not None and cleaner.is_cleaning(*tp):
                await asyncio.sleep(CLEAN_WAIT_S)
            log.info("Moving %s-%d to log dir %s", tp[0], tp[1], log_dir)
            while True:
                while True:
                    part = rm.get_partition(*tp)
                    if part is None or part.log is not current or log_dir in lm.offline_dirs:
                        raise asyncio.CancelledError
                    copied = await self._copy_in_executor(current, future)
                    if copied == RETRY:
                        continue
                    if copied == 0 or \
                            current.size_in_bytes - future.size_in_bytes < FINAL_BYTES:
                        break
                    await self._throttle(copied)
                # The last batches and the swap, on the loop thread with no await between
                # them: no append or truncation can run meanwhile (a catching-up follower's
                # append in its fetcher's thread is fenced first: it ends before, or never
                # runs). Unless the alignment cut the copy back by more than that (a
                # truncation just now): executor again.
                current.fence_appends()
                _align(current, future)
                if current.size_in_bytes - future.size_in_bytes < FINAL_BYTES:
                    break
            while _copy_chunk(current, future, CHUNK_BYTES) > 0:
                pass
            part.log = lm.replace_with_future(tp)
            rm.fetch_purgatory.notify(*tp)
            log.info("The replica of %s-%d is now in log dir %s", tp[0], tp[1], log_dir)
        except asyncio.CancelledError:
            if not self._stopping and tp not in self._keep:
                lm.abandon_future_log(tp, only=future)
            raise
        except Exception:
            if self._stopping:
                return
            log.exception("Moving %s-%d to %s failed", tp[0], tp[1], log_dir)
            lm.abandon_future_log(tp, only=future)
        finally:
            if cleaner is not None:
                cleaner.resume(*tp)
            self._keep.discard(tp)
            found = self._tasks.get(tp)
            if found is not None and found[1] is asyncio.current_task():
                del self._tasks[tp]

    async def _throttle(self, copied: int) -> None:
        """Kafka's alter-log-dirs quota: one for the broker, shared by every move, the bytes
        copied recorded and the next chunk held while the rate is above
        replica.alter.log.dirs.io.max.bytes.per.second (read each time: a change applies
        within THROTTLE_CHECK_S; the next chunk goes as soon as the rate allows)."""
        if self._quota is None:
            from broker.replication_quota import ReplicationQuota

            def rate():
                config = self.rm.config
                value = config.get("replica.alter.log.dirs.io.max.bytes.per.second") \
                    if config is not None else LONG_MAX
                return value if value and value > 0 else LONG_MAX
            self._quota = ReplicationQuota(-1, rate, lambda topic: "*")
        self._quota.record(copied)
        while not self._stopping and self._quota.is_exceeded():
            await asyncio.sleep(min(THROTTLE_CHECK_S, self._quota.seconds_until_under()))
