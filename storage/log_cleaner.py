"""`LogCleaner`: the threads that compact logs, as Kafka 3.9's LogCleaner and LogCleanerManager.

Each of log.cleaner.threads threads loops (`run_once`):

1. **Pick the filthiest log** (`grab_filthiest`): among logs whose cleanup.policy includes
   compact, not being cleaned and not marked uncleanable, the one with the highest dirty ratio
   cleanable bytes / (clean bytes + cleanable bytes) above its min.cleanable.dirty.ratio, or
   any with cleanable bytes whose oldest dirty segment passed max.compaction.lag.ms. The
   cleanable range starts at the first dirty offset (the ``cleaner-offset-checkpoint`` entry,
   else the log start offset; reset to the log start offset when out of range or when the log
   was truncated below it) and ends at the first uncleanable offset, the lowest of the last
   stable offset, the active segment and the first segment younger than
   min.compaction.lag.ms, rounded down to a segment boundary (`cleanable_offsets`).
2. **Clean it** (storage/cleaner.py), then move its checkpoint to the end of what was cleaned
   and log Kafka's statistics lines.
3. **Retention of compacted logs**: retention.ms / retention.bytes (with compact,delete) and
   the log start offset delete old segments here, not in the broker's retention task, so a
   segment is never deleted under a clean (Kafka's deletableLogs).
4. Sleep log.cleaner.backoff.ms when there was nothing to clean.

A log whose clean fails (a corrupt batch, an I/O error) is logged and marked uncleanable until
it is deleted or the broker restarts; the other logs carry on. Deleting or truncating a log
during its clean makes the swap refuse (Log.generation); stopping the cleaner aborts a clean
between two batches.

Others pause a log's cleaning (Kafka's LogCleaningPaused): the broker's retention of a
non-compacted log (`try_pause`: skipped while a clean of it, begun before its cleanup.policy
changed, runs), and a move to another log dir (`pause`, from the future log's creation to the
swap: the copy must not hold records a clean then drops from the current log and its
checkpoint counts as clean). A paused log is neither cleaned nor given retention here.

Threads: the cleaner's own (``kafka-log-cleaner-thread-N``); `grab_filthiest` and the
checkpoint writes hold `_lock`; the logs are read without their lock except for the swap.
"""
import dataclasses
import logging
import os
import threading
import time

from storage import checkpoints, files
from storage.cleaner import (Cleaner, Throttler, apply_swaps, clean_in_worker, clean_request,
                             init_worker)
from storage.errors import CleaningAborted

log = logging.getLogger("kbroker.log_cleaner")

INT32_MAX = 2**31 - 1


@dataclasses.dataclass
class CleanerConfig:
    """The broker's log.cleaner.* settings, with Kafka's defaults."""
    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_buffer_size: int = 512 * 1024
    io_buffer_load_factor: float = 0.9
    io_max_bytes_per_second: float = 1.7976931348623157e308
    backoff_ms: int = 15_000
    # Not a Kafka setting: clean in a worker process per thread (storage/cleaner.py explains
    # why); False cleans on the thread itself (tests, tools).
    worker_process: bool = True
    worker_niceness: int = 10

    @classmethod
    def from_broker(cls, config) -> "CleanerConfig":
        return cls(enable=config.get("log.cleaner.enable"),
                   threads=config.get("log.cleaner.threads"),
                   dedupe_buffer_size=config.get("log.cleaner.dedupe.buffer.size"),
                   io_buffer_size=config.get("log.cleaner.io.buffer.size"),
                   io_buffer_load_factor=config.get("log.cleaner.io.buffer.load.factor"),
                   io_max_bytes_per_second=config.get("log.cleaner.io.max.bytes.per.second"),
                   backoff_ms=config.get("log.cleaner.backoff.ms"))


class LogToClean:
    """A candidate: its cleanable range and the bytes on each side (Kafka's LogToClean)."""

    def __init__(self, key, log_, first_dirty: int, first_uncleanable: int,
                 needs_compaction_now: bool):
        self.key, self.log = key, log_
        self.first_dirty = first_dirty
        self.first_uncleanable = first_uncleanable
        self.needs_compaction_now = needs_compaction_now
        segments = log_.segments
        self.clean_bytes = sum(s.size for s in segments if s.base_offset < first_dirty)
        self.cleanable_bytes = sum(
            s.size for i, s in enumerate(segments)
            if s.base_offset < first_uncleanable
            and _next_base(segments, i, log_.log_end_offset) > first_dirty)
        total = self.clean_bytes + self.cleanable_bytes
        self.ratio = self.cleanable_bytes / total if total else 0.0


def _next_base(segments, i, end):
    return segments[i + 1].base_offset if i + 1 < len(segments) else end + 1


def cleanable_offsets(log_, checkpoint: int | None, now_ms: int) -> tuple[int, int, bool, bool]:
    """(first dirty, first uncleanable, checkpoint was reset, needs compaction now) of a log
    (Kafka's LogCleanerManager.cleanableOffsets and maxCompactionDelay)."""
    start, end = log_.log_start_offset, log_.log_end_offset
    reset = False
    if checkpoint is None:
        first_dirty = start
    elif checkpoint < start or checkpoint > end:
        if checkpoint > end or not log_.config.delete:
            log.warning("Resetting first dirty offset of %s-%d to log start offset %d since the "
                        "checkpointed offset %d is invalid.", log_.topic, log_.partition, start,
                        checkpoint)
        first_dirty, reset = start, True
    else:
        first_dirty = checkpoint
    segments = log_.segments
    active = segments[-1]
    bound = min(log_.last_stable_offset, active.base_offset)
    config = log_.config
    dirty_non_active = [s for i, s in enumerate(segments[:-1])
                        if _next_base(segments, i, end) > first_dirty]
    if config.min_compaction_lag_ms > 0:
        for segment in dirty_non_active:
            if segment.largest_timestamp > now_ms - config.min_compaction_lag_ms:
                bound = min(bound, segment.base_offset)
                break
    bound = max(first_dirty, bound)
    first_uncleanable = active.base_offset
    for segment in reversed(segments):              # round down to a segment boundary
        if segment.base_offset <= bound:
            first_uncleanable = segment.base_offset
            break
    needs_now = False
    if config.max_compaction_lag_ms < 2**63 - 1:
        firsts = [t for t in (s.rolling_based_timestamp() for s in dirty_non_active)
                  if t is not None and t > 0]
        needs_now = bool(firsts) and min(firsts) < now_ms - config.max_compaction_lag_ms
    return first_dirty, first_uncleanable, reset, needs_now


class LogCleaner:
    """The cleaner of one LogManager's logs (see the module docstring)."""

    def __init__(self, log_manager, config: CleanerConfig, *, time_ms=None):
        self.log_manager = log_manager
        self.config = config
        self._time_ms = time_ms or (lambda: int(time.time() * 1000))
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._in_progress: set = set()
        self._paused: dict = {}                  # (topic, partition) -> pauses not resumed
        self._uncleanable: set = set()
        self._checkpoints: dict = {}            # (topic, partition) -> first dirty offset
        self.throttler = Throttler(config.io_max_bytes_per_second)
        self.cleans = 0                         # completed cleans (tests, tools)
        self._pools: dict = {}                  # thread name -> worker process pool
        self._worker_abort = None
        self._load_checkpoints()

    # -- life cycle ----------------------------------------------------------------------------

    def startup(self) -> None:
        self._stop.clear()
        for i in range(self.config.threads):
            thread = threading.Thread(target=self._run, args=(i,), daemon=True,
                                      name=f"kafka-log-cleaner-thread-{i}")
            thread.start()
            self._threads.append(thread)
        log.info("Starting the log cleaner (%d thread%s)", self.config.threads,
                 "" if self.config.threads == 1 else "s")

    def shutdown(self) -> None:
        """Stop the threads (a clean in progress aborts at its next batch) and write the
        checkpoints. Blocking."""
        self._stop.set()
        if self._worker_abort is not None:
            self._worker_abort.set()
        for thread in self._threads:
            thread.join()
        self._threads = []
        self._close_pools()
        self.write_checkpoints()

    def reconfigure(self, config: CleanerConfig) -> None:
        """Dynamic log.cleaner.* changes: the threads stop (a clean in progress aborts and is
        picked again) and start again with the new settings, as Kafka's reconfigure.
        Blocking."""
        running = bool(self._threads)
        self._stop.set()
        if self._worker_abort is not None:
            self._worker_abort.set()
        for thread in self._threads:
            thread.join()
        self._threads = []
        self._close_pools()
        self.config = config
        self.throttler.rate = config.io_max_bytes_per_second
        log.info("Log cleaner reconfigured: %s", config)
        if running:
            self.startup()

    def _pool(self, thread: str):
        """The worker process pool of a cleaner thread (created on first use)."""
        if not self.config.worker_process:
            return None
        pool = self._pools.get(thread)
        if pool is None:
            import concurrent.futures
            import multiprocessing
            context = multiprocessing.get_context("spawn")
            if self._worker_abort is None:
                self._worker_abort = context.Event()
            self._worker_abort.clear()
            pool = concurrent.futures.ProcessPoolExecutor(
                1, mp_context=context, initializer=init_worker,
                initargs=(self._worker_abort, self.config.worker_niceness, os.getpid()))
            self._pools[thread] = pool
        return pool

    def _close_pools(self) -> None:
        pools, self._pools = self._pools, {}
        for pool in pools.values():
            pool.shutdown(wait=True, cancel_futures=True)

    def _memory(self) -> int:
        return min(self.config.dedupe_buffer_size // max(self.config.threads, 1), INT32_MAX)

    def _io_buffer(self) -> int:
        return self.config.io_buffer_size // max(self.config.threads, 1) // 2

    def new_cleaner(self) -> Cleaner:
        return Cleaner(dedupe_memory=self._memory(), load_factor=self.config.io_buffer_load_factor,
                       io_buffer_size=self._io_buffer(),
                       throttler=self.throttler, time_ms=self._time_ms,
                       check_abort=self._check_stop)

    def _check_stop(self) -> None:
        if self._stop.is_set():
            raise CleaningAborted("the log cleaner is shutting down")

    def _run(self, index: int) -> None:
        cleaner = self.new_cleaner()
        while not self._stop.is_set():
            try:
                cleaned = self.run_once(cleaner, str(index))
            except Exception:                      # a bug: keep the thread, say it loudly
                log.exception("Log cleaner thread %d failed", index)
                cleaned = False
            if not cleaned:
                self._stop.wait(self.config.backoff_ms / 1000)

    # -- one round -----------------------------------------------------------------------------

    def run_once(self, cleaner: Cleaner | None = None, thread: str = "0") -> bool:
        """Clean the filthiest log (if any), then apply retention to compacted logs. True when
        a log was cleaned. Blocking (tests call it directly)."""
        cleaner = cleaner or self.new_cleaner()
        now_ms = self._time_ms()
        chosen = self.grab_filthiest(now_ms)
        if chosen is not None:
            self._clean(cleaner, chosen, now_ms, thread, self._pool(thread))
        self._delete_old_segments(now_ms)
        return chosen is not None

    def grab_filthiest(self, now_ms: int) -> LogToClean | None:
        with self._lock:
            candidates = []
            for key, log_ in self._compacted_logs():
                if key in self._in_progress or key in self._uncleanable or key in self._paused:
                    continue
                if log_.size_in_bytes == 0:
                    continue
                truncated = log_.take_truncation()
                checkpoint = self._checkpoints.get(key)
                if truncated is not None and checkpoint is not None and checkpoint > truncated:
                    checkpoint = self._checkpoints[key] = truncated      # cleaned past the cut
                try:
                    first_dirty, first_uncleanable, reset, now = cleanable_offsets(
                        log_, checkpoint, now_ms)
                except Exception:
                    log.warning("Unexpected exception thrown when cleaning log %s-%d. Marking "
                                "its partition (%s-%d) as uncleanable", key[0], key[1], *key,
                                exc_info=True)
                    self._uncleanable.add(key)
                    continue
                if reset:
                    self._checkpoints[key] = first_dirty
                    self._write_checkpoint_of(key)
                candidate = LogToClean(key, log_, first_dirty, first_uncleanable, now)
                if (candidate.needs_compaction_now and candidate.cleanable_bytes > 0) \
                        or candidate.ratio > log_.config.min_cleanable_dirty_ratio:
                    candidates.append(candidate)
            if not candidates:
                return None
            chosen = max(candidates, key=lambda c: c.ratio)
            self._in_progress.add(chosen.key)
            return chosen

    def _clean(self, cleaner: Cleaner, chosen: LogToClean, now_ms: int, thread: str,
               pool=None) -> None:
        key, log_ = chosen.key, chosen.log
        name = f"{key[0]}-{key[1]}"
        generation = log_.generation
        try:
            log.info("Beginning cleaning of log %s", name)
            if pool is None:
                stats = cleaner.clean(log_, chosen.first_dirty, chosen.first_uncleanable,
                                      now_ms)
            else:
                request = clean_request(log_, chosen.first_dirty, chosen.first_uncleanable,
                                        now_ms)
                try:
                    stats, swaps = pool.submit(
                        clean_in_worker, request, self._memory(),
                        self.config.io_buffer_load_factor, self._io_buffer(),
                        # Kafka's one throttler is shared: each worker takes its part.
                        self.config.io_max_bytes_per_second / max(self.config.threads, 1)
                        ).result()
                except Exception as exc:
                    if type(exc).__name__ == "BrokenProcessPool":
                        self._pools.pop(thread, None)        # a new worker next time
                    raise
                stats.segments_swapped = apply_swaps(log_, request, swaps)
            with self._lock:
                self._checkpoints[key] = stats.end_offset
                self._write_checkpoint_of(key)
                self.cleans += 1
            log.info("%s", stats.describe(thread, name))
            if stats.invalid_messages:
                log.warning("Found %d invalid messages during compaction.",
                            stats.invalid_messages)
        except CleaningAborted as exc:
            log.info("Cleaning of log %s aborted: %s", name, exc)
        except OSError as exc:
            if log_.generation != generation:      # deleted under the clean: files gone
                log.info("Cleaning of log %s aborted: the log changed while it was being "
                         "cleaned", name)
                return
            # A disk error: the log dir goes offline (Kafka's cleanLog), not just this log.
            log.error("Failed to clean up log for %s in dir %s due to IOException: %s", name,
                      os.path.dirname(log_.dir), exc)
            self.log_manager.report_dir_failure(log_.dir, exc)
        except Exception:
            if log_.generation != generation:      # truncated or deleted under the clean
                log.info("Cleaning of log %s aborted: the log changed while it was being "
                         "cleaned", name)
                return
            log.warning("Unexpected exception thrown when cleaning log %s. Marking its "
                        "partition (%s) as uncleanable", name, name, exc_info=True)
            with self._lock:
                self._uncleanable.add(key)
        finally:
            with self._lock:
                self._in_progress.discard(key)

    def _delete_old_segments(self, now_ms: int) -> None:
        for key, log_ in self._compacted_logs():
            with self._lock:
                if key in self._in_progress or key in self._uncleanable or key in self._paused:
                    continue
                self._in_progress.add(key)
            try:
                log_.delete_old_segments(now_ms)
            except Exception:
                log.warning("Unexpected exception thrown when deleting segments of log %s-%d. "
                            "Marking its partition as uncleanable", *key, exc_info=True)
                with self._lock:
                    self._uncleanable.add(key)
            finally:
                with self._lock:
                    self._in_progress.discard(key)

    def _compacted_logs(self):
        return [((l.topic, l.partition), l) for l in self.log_manager.logs() if l.config.compact]

    # -- state for other components ------------------------------------------------------------

    def is_cleaning(self, topic: str, partition: int) -> bool:
        """Without the lock (a set lookup), so the event loop polling it never waits for a
        scan of every compacted log."""
        return (topic, partition) in self._in_progress

    def pause(self, topic: str, partition: int) -> None:
        """No clean of the partition starts until as many `resume` calls (one in progress
        goes on: see `is_cleaning`)."""
        with self._lock:
            key = (topic, partition)
            self._paused[key] = self._paused.get(key, 0) + 1

    def try_pause(self, topic: str, partition: int) -> bool:
        """`pause` unless a clean of the partition is in progress or it is paused already, by
        a log dir move (then False: Kafka's pauseCleaningForNonCompactedPartitions skips
        both)."""
        with self._lock:
            if (topic, partition) in self._in_progress or (topic, partition) in self._paused:
                return False
            self.pause(topic, partition)
            return True

    def resume(self, topic: str, partition: int) -> None:
        with self._lock:
            key = (topic, partition)
            left = self._paused.get(key, 0) - 1
            if left > 0:
                self._paused[key] = left
            else:
                self._paused.pop(key, None)

    def uncleanable_partitions(self) -> set:
        with self._lock:
            return set(self._uncleanable)

    def forget(self, topic: str, partition: int) -> None:
        """The partition was deleted: drop its checkpoint and uncleanable mark."""
        with self._lock:
            self._checkpoints.pop((topic, partition), None)
            self._uncleanable.discard((topic, partition))

    def checkpoint_of(self, topic: str, partition: int):
        with self._lock:
            return self._checkpoints.get((topic, partition))

    # -- checkpoints ---------------------------------------------------------------------------

    def _load_checkpoints(self) -> None:
        """Each dir's entries for the partitions it holds: one deleted before a crash kept its
        entry, which must not apply to a topic created again under its name."""
        for log_dir in self.log_manager.online_dirs():
            path = os.path.join(log_dir, files.CLEANER_CHECKPOINT)
            try:
                found = checkpoints.read_offsets(path)
            except ValueError as exc:
                log.warning("Ignoring unreadable cleaner checkpoint %s: %s", path, exc)
                continue
            held = self.log_manager.keys_in(log_dir)
            self._checkpoints.update({k: v for k, v in found.items() if k in held})

    def _write_checkpoint_of(self, key) -> None:
        log_dir = self.log_manager.log_dir_of(*key)
        if log_dir is not None:
            self._write_dir(log_dir)

    def _write_dir(self, log_dir: str) -> None:
        """Under the lock: the log manager's checkpoint writes and the cleaner threads' must
        not share the temporary file."""
        with self._lock:
            keys = self.log_manager.keys_in(log_dir)
            offsets = {k: v for k, v in self._checkpoints.items() if k in keys}
            try:
                checkpoints.write_offsets(os.path.join(log_dir, files.CLEANER_CHECKPOINT),
                                          offsets)
            except OSError as exc:             # the dir goes offline, as the other checkpoints'
                log.error("Failed to write the cleaner checkpoint of %s: %s", log_dir, exc)
                self.log_manager.report_dir_failure(log_dir, exc)

    def write_checkpoints(self) -> None:
        for log_dir in self.log_manager.online_dirs():
            self._write_dir(log_dir)
