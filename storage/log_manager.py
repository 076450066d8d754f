"""`LogManager`: every partition log in every log directory of one broker.

Start-up (`startup`, blocking):
  0. each log dir is locked (``.lock``, see file_lock.py) before anything in it is read or
     written; a dir another broker holds stops start-up with Kafka's message (`lock_log_dirs`
     may be called earlier, before other components touch the first dir);
  1. every log dir's ``meta.properties`` is checked first (one naming another cluster or
     broker is refused, as Kafka refuses it; a KRaft dir's version 1 file, with node.id, is
     checked the same way and kept as version 1); then each dir gets one if it has none
     (cluster.id, broker.id, version 0), or the keys its file lacks;
  2. the ``.kafka_cleanshutdown`` marker says whether the last stop was clean; it is removed at
     once, so a crash from here on is seen as unclean next time;
  3. the dir's checkpoints give each partition its recovery point, high watermark and
     log_start_offset;
  4. each ``<topic>-<partition>`` folder is opened as a `Log` (after an unclean shutdown, the
     segments above the recovery point are validated and their indexes rebuilt; see log.py),
     on `recovery_threads` threads; ``*-delete`` folders left by a crash are queued for removal;
     KRaft's ``__cluster_metadata-0`` is skipped, as Kafka's LogManager skips it.

Deleting a partition renames its folder to ``<topic>-<partition>.<uuid hex>-delete`` at once
(so a new partition of the same name can be created) and removes it after
file.delete.delay.ms, in `cleanup_deleted()`.

Shutdown (`shutdown`) flushes, checkpoints and writes the clean-shutdown marker only if this
manager locked and loaded the dirs; otherwise it only releases whatever locks it took. A broker
that fails to start never trims, checkpoints or marks a dir it did not load.

Concurrency contract, per method: "loop" methods are cheap and run on the broker's event loop
thread; "blocking" methods fsync or read whole files and must run in an executor.  No method
is re-entrant from two threads at once except that a blocking `flush_dirty` may overlap loop
methods (Log's own locking covers that).
"""
import concurrent.futures
import logging
import os
import shutil
import threading
import time
import uuid

from storage import checkpoints, files
from storage.errors import LogDirUnusable, StorageError
from storage.file_lock import lock_dir
from storage.log import Log
from storage.log_config import LogConfig

log = logging.getLogger(__name__)


class InvalidMetaProperties(LogDirUnusable):
    """meta.properties of a log dir names another cluster or broker, or is not valid (or
    log.dirs names one dir twice)."""


class LogManager:
    def __init__(self, log_dirs: list[str], default_config: LogConfig, *, time_ms=None,
                 recovery_threads: int = 1):
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.default_config = default_config
        self._time_ms = time_ms if time_ms is not None else lambda: int(time.time() * 1000)
        self.recovery_threads = max(1, recovery_threads)
        self._logs: dict[tuple[str, int], Log] = {}
        self._log_dir_of: dict[tuple[str, int], str] = {}
        self._pending_dir_deletes: list[tuple[int, str, Log | None]] = []
        self._lock = threading.RLock()
        # One checkpoint write at a time (Kafka's CheckpointFile lock): the flush task and the
        # checkpoint task both write recovery points, through the same .tmp file.
        self._checkpoint_lock = threading.Lock()
        # Dirs whose checkpoint files still name a partition deleted since they were written:
        # rewritten before a log is created there (see delete_log).
        self._stale_checkpoint_dirs: set[str] = set()
        self._dir_locks: list = []          # storage.file_lock.FileLock, one per log dir
        self.loaded = False                 # startup() completed: shutdown() may write
        self.had_clean_shutdown: dict[str, bool] = {}
        self.cleaner = None                 # storage.log_cleaner.LogCleaner once started
        self.offline_dirs: set[str] = set()  # dirs that failed (mark_dir_offline)
        self.future_logs: dict = {}         # (topic, partition) -> (log dir, Log) being moved in
        self.preferred_dirs: dict = {}      # (topic, partition) -> log dir (AlterReplicaLogDirs)
        self.on_dir_failure = None          # called (dir, exc) from any thread when one fails

    # -- start-up ------------------------------------------------------------------------------

    def lock_log_dirs(self) -> None:
        """Create each log dir if missing and lock it.  Raises
        `storage.file_lock.DirLockedError` (Kafka's message, nothing kept locked) when another
        broker holds one.  A dir that cannot be created or locked (a disk error) goes offline,
        as in Kafka's lockLogDirs; with none left, start-up stops (LogDirUnusable).
        Idempotent.  Blocking (cheap: no fsync)."""
        if self._dir_locks:
            return
        real = [os.path.realpath(d) for d in self.log_dirs]
        if len(set(real)) != len(real):
            raise InvalidMetaProperties(
                f"Duplicate log directory found: {', '.join(self.log_dirs)}")
        taken = []
        try:
            for log_dir in self.log_dirs:
                try:
                    os.makedirs(log_dir, exist_ok=True)
                    taken.append(lock_dir(log_dir))
                except OSError as exc:
                    self._dir_failed_at_startup(log_dir, "Disk error while locking directory",
                                                exc)
            self._require_an_online_dir(
                f"none of the specified log dirs from {', '.join(self.log_dirs)} can be "
                f"created or validated")
        except BaseException:
            for lock in taken:
                lock.release()
            raise
        self._dir_locks = taken

    def _dir_failed_at_startup(self, log_dir: str, what: str, exc: BaseException) -> None:
        """Kafka's maybeAddOfflineLogDir during start-up: the dir is left out from then on."""
        if log_dir not in self.offline_dirs:
            log.error("%s %s: %s", what, log_dir, exc)
            self.offline_dirs.add(log_dir)

    def _require_an_online_dir(self, why: str) -> None:
        if not self.online_dirs():
            raise LogDirUnusable(f"Shutdown broker because {why}")

    def release_locks(self) -> None:
        """Drop the log dir locks without shutting down (a test simulating a crash; the
        process's exit does the same).  Loop."""
        for lock in self._dir_locks:
            lock.release()
        self._dir_locks = []

    def startup(self, cluster_id: str | None = None, broker_id: int | None = None,
                config_for=None) -> None:
        """Load every partition in every log dir.  Blocking: executor.

        `config_for(topic) -> LogConfig` gives a topic's config (default: `default_config`)."""
        config_for = config_for or (lambda topic: self.default_config)
        self.lock_log_dirs()
        self.verify_meta_properties(cluster_id, broker_id)     # every dir, before any write
        self._write_meta_properties(cluster_id, broker_id)
        jobs, futures = [], []
        for log_dir in self.online_dirs():
            try:
                found = self._partition_dirs_in(log_dir)
            except OSError as exc:
                self._dir_failed_at_startup(log_dir, "Error while loading log dir", exc)
                continue
            jobs += found[0]
            futures += found[1]

        def load(job):
            log_dir, key, path, kwargs = job
            try:
                return log_dir, key, Log(path, config_for(key[0]), time_ms=self._time_ms,
                                         **kwargs)
            except (OSError, ValueError) as exc:
                # A disk error, or a checkpoint file that is not one (Kafka's
                # CheckpointFile raises an IOException): the dir goes offline, not the broker.
                return log_dir, key, exc
        if self.recovery_threads > 1 and len(jobs) + len(futures) > 1:
            with concurrent.futures.ThreadPoolExecutor(self.recovery_threads) as pool:
                loaded = list(pool.map(load, jobs))
                loaded_futures = list(pool.map(load, futures))
        else:
            loaded = [load(job) for job in jobs]
            loaded_futures = [load(job) for job in futures]
        for log_dir, key, result in loaded + loaded_futures:
            if isinstance(result, BaseException):
                self._dir_failed_at_startup(
                    log_dir, f"Error while loading {key[0]}-{key[1]} in log dir", result)
        for log_dir, key, result in loaded + loaded_futures:
            if log_dir in self.offline_dirs and not isinstance(result, BaseException):
                result.close_files()
        loaded = [item for item in loaded if item[0] not in self.offline_dirs]
        loaded_futures = [item for item in loaded_futures if item[0] not in self.offline_dirs]
        self._require_an_online_dir(f"all log dirs in {', '.join(self.log_dirs)} have failed")
        with self._lock:
            for log_dir, key, log_ in loaded:
                if key in self._logs:
                    raise StorageError(f"duplicate log directories for {key[0]}-{key[1]}: "
                                       f"{self._log_dir_of[key]} and {log_dir}")
                self._logs[key] = log_
                self._log_dir_of[key] = log_dir
            for log_dir, key, future in loaded_futures:
                self._adopt_future_log(log_dir, key, future)
        for log_dir in self.online_dirs():
            marker = os.path.join(log_dir, files.CLEAN_SHUTDOWN_FILE)
            if os.path.exists(marker):
                files.fs.remove(marker)
                files.fs.fsync_dir(log_dir)
        self.loaded = True
        log.info("Loaded %d logs from %s", len(loaded), ", ".join(self.online_dirs()))

    def _partition_dirs_in(self, log_dir: str) -> tuple:
        """([load job of each partition folder], [load job of each -future folder]) of a log
        dir, with its checkpoints read; ``-delete`` folders are queued for removal."""
        jobs, futures = [], []
        marker = os.path.join(log_dir, files.CLEAN_SHUTDOWN_FILE)
        clean = os.path.exists(marker)
        self.had_clean_shutdown[log_dir] = clean
        recovery_points = _read_offsets(log_dir, files.RECOVERY_POINT_CHECKPOINT)
        high_watermarks = _read_offsets(log_dir, files.REPLICATION_CHECKPOINT)
        start_offsets = _read_offsets(log_dir, files.LOG_START_OFFSET_CHECKPOINT)
        for name in sorted(os.listdir(log_dir)):
            path = os.path.join(log_dir, name)
            if not os.path.isdir(path):
                continue
            if files.parse_delete_dir(name):
                self._pending_dir_deletes.append((0, path, None))
                continue
            future_key = files.parse_future_dir(name)
            if future_key:
                # A move between log dirs that a restart interrupted: loaded, and resumed
                # once the partition is hosted (broker/log_dir_mover.py).
                futures.append((log_dir, tuple(future_key[:2]), path, dict(
                    recovery_point=recovery_points.get(tuple(future_key[:2]), 0),
                    had_clean_shutdown=clean)))
                continue
            key = files.parse_partition_dir(name)
            if key is None:
                continue
            if key[0] == files.CLUSTER_METADATA_TOPIC:
                log.info("Leaving %s alone: KRaft's metadata log, not a partition", path)
                continue
            jobs.append((log_dir, key, path, dict(
                recovery_point=recovery_points.get(key, 0),
                high_watermark=high_watermarks.get(key, 0),
                log_start_offset=start_offsets.get(key, 0),
                had_clean_shutdown=clean)))
        named = set(recovery_points) | set(high_watermarks) | set(start_offsets)
        if named - {job[1] for job in jobs} - {f[1] for f in futures}:
            # Entries of a partition deleted before a crash: written away before a log is
            # created here (see delete_log), across this restart too.
            with self._lock:
                self._stale_checkpoint_dirs.add(log_dir)
        return jobs, futures

    def verify_meta_properties(self, cluster_id: str | None = None,
                               broker_id: int | None = None) -> tuple:
        """Kafka's meta.properties checks (MetaPropertiesEnsemble.verify), over every log dir
        and before anything is written: a file naming another cluster or another broker, or
        one that is not valid, stops start-up with one line (`InvalidMetaProperties`).

        Version 0 (ZooKeeper mode) may hold cluster.id and broker.id; version 1 (KRaft mode)
        must hold cluster.id and node.id, and node.id is this broker's id as broker.id is.
        Every file that names a cluster must name the same one.  Returns (cluster id, broker
        id) the files name, each None if none does.  Blocking (reads small files)."""
        for log_dir in self.online_dirs():
            path = os.path.join(log_dir, files.META_PROPERTIES)
            try:
                props = checkpoints.read_properties(path)
            except OSError as exc:
                self._dir_failed_at_startup(log_dir, "Failed to read meta.properties of", exc)
                continue
            if props is None:
                continue
            stored_cluster, stored_id, id_key = _parse_meta_properties(path, props)
            if cluster_id is not None and stored_cluster not in (None, cluster_id):
                raise InvalidMetaProperties(f"Invalid cluster.id in: {path}. Expected "
                                            f"{cluster_id}, but read {stored_cluster}")
            if broker_id is not None and stored_id not in (None, broker_id):
                raise InvalidMetaProperties(
                    f"Configured broker.id {broker_id} doesn't match stored {id_key} "
                    f"Some({stored_id}) in meta.properties. If you moved your data, make sure "
                    f"your configured broker.id matches. If you intend to create a new broker, "
                    f"you should remove all data in your data directories (log.dirs).")
            cluster_id = cluster_id if stored_cluster is None else stored_cluster
            broker_id = broker_id if stored_id is None else stored_id
        return cluster_id, broker_id

    def _write_meta_properties(self, cluster_id, broker_id) -> None:
        """After `verify_meta_properties`: a missing file is written as version 0; an existing
        one is rewritten only to add what it lacks (cluster.id, its broker id), keeping its
        version and every other key (directory.id...), so Apache Kafka can take the dir back."""
        for log_dir in self.online_dirs():
            try:
                self._write_meta_properties_of(log_dir, cluster_id, broker_id)
            except OSError as exc:
                self._dir_failed_at_startup(log_dir, "Failed to write meta.properties in", exc)

    def _write_meta_properties_of(self, log_dir: str, cluster_id, broker_id) -> None:
        path = os.path.join(log_dir, files.META_PROPERTIES)
        props = checkpoints.read_properties(path)
        if props is None:
            if cluster_id is None and broker_id is None:
                return
            props, id_key = {"version": "0"}, "broker.id"
            stored_cluster = stored_id = None
        else:
            stored_cluster, stored_id, id_key = _parse_meta_properties(path, props)
        missing = {}
        if stored_id is None and broker_id is not None:
            missing[id_key] = str(broker_id)
        if stored_cluster is None and cluster_id is not None:
            missing["cluster.id"] = cluster_id
        if missing:
            if len(props) > 1:
                log.info("Rewriting %s (adding %s)", path, ", ".join(missing))
            checkpoints.write_properties(path, {**props, **missing})

    def meta_properties(self, log_dir: str | None = None):
        """The meta.properties of a log dir as a dict (None if absent).  Loop."""
        path = os.path.join(log_dir or self.log_dirs[0], files.META_PROPERTIES)
        return checkpoints.read_properties(path)

    # -- partitions ----------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        """Loop."""
        return self._logs.get((topic, partition))

    def logs(self) -> list[Log]:
        """Loop."""
        return list(self._logs.values())

    def online_dirs(self) -> list:
        return [d for d in self.log_dirs if d not in self.offline_dirs]

    def dir_of_path(self, path: str) -> str | None:
        """The log dir a partition folder (or file in one) lives in."""
        path = os.path.abspath(path)
        for d in self.log_dirs:
            if path == d or path.startswith(d + os.sep):
                return d
        return None

    def mark_dir_offline(self, log_dir: str) -> list:
        """A log dir failed (an I/O error, a full disk), as Kafka's LogDirFailureChannel:
        its logs are closed without writing anything and forgotten, no log is created there
        again, and it is left out of checkpoints and the clean-shutdown marker. Returns the
        (topic, partition) keys it held. Loop."""
        with self._lock:
            if log_dir in self.offline_dirs:
                return []
            self.offline_dirs.add(log_dir)
            keys = [k for k, d in self._log_dir_of.items() if d == log_dir]
            doomed = [self._logs.pop(k) for k in keys]
            for k in keys:
                self._log_dir_of.pop(k, None)
            # Moves into the dir stop with it (their folders stay, as the dir's logs do).
            for k, (d, future) in list(self.future_logs.items()):
                if d == log_dir:
                    del self.future_logs[k]
                    doomed.append(future)
        for log_ in doomed:
            log_.mark_deleted()                      # a clean in progress must not swap
            try:
                log_.close_files()
            except (OSError, ValueError):
                pass
        return keys

    # -- moving a replica between log dirs (AlterReplicaLogDirs) ---------------------------------

    def create_future_log(self, topic: str, partition: int, log_dir: str, config=None,
                          start_offset: int = 0, topic_id=None) -> Log:
        """An empty ``<topic>-<partition>.<uuid>-future`` log in `log_dir`, starting at
        `start_offset`, that a move copies the current log into (Kafka's future replica).
        Replaces one being built elsewhere. Blocking (creates files)."""
        key = (topic, partition)
        self.abandon_future_log(key)
        path = os.path.join(log_dir, f"{files.partition_dir_name(topic, partition)}."
                                     f"{uuid.uuid4().hex}{files.FUTURE_DIR_SUFFIX}")
        future = Log(path, config or self.default_config, topic_id=topic_id,
                     had_clean_shutdown=True, log_start_offset=start_offset,
                     time_ms=self._time_ms)
        if future.log_end_offset != start_offset:
            future.truncate_fully_and_start_at(start_offset)
        with self._lock:
            self.future_logs[key] = (log_dir, future)
        return future

    def _adopt_future_log(self, log_dir: str, key, future: Log) -> None:
        """Start-up, under the lock: a future log found on disk becomes the partition's move
        in progress, unless there is nothing to move (no current log, or one in that same
        dir) or the partition has one already; those are removed."""
        why = None
        if key not in self._logs:
            why = "the partition has no log on this broker"
        elif self._log_dir_of[key] == log_dir:
            why = "the partition's log is in that dir already"
        elif key in self.future_logs:
            why = f"a second one ({self.future_logs[key][1].dir} is kept)"
        if why is None:
            self.future_logs[key] = (log_dir, future)
            log.info("Loaded %s, a move of %s-%d to %s that a restart interrupted (at offset "
                     "%d): it resumes once the partition is hosted", future.dir, key[0],
                     key[1], log_dir, future.log_end_offset)
            return
        log.warning("Removing %s, a move between log dirs that a restart interrupted: %s",
                    future.dir, why)
        future.mark_deleted()
        future.close_files()
        self._pending_dir_deletes.append((0, future.dir, None))

    @staticmethod
    def _closed_quietly(future, flush: bool = False) -> bool:
        """Shutdown: flush (or close) a future log; a failure loses only the copy made so
        far (the move starts again or is dropped at restart) and stops nothing else."""
        try:
            if flush:
                future.flush()
            else:
                future.close()
            return True
        except (OSError, ValueError) as exc:
            log.warning("Could not %s %s: %s", "flush" if flush else "close", future.dir, exc)
            return False

    def abandon_future_log(self, key, only=None) -> None:
        """Drop a move in progress: its future log's folder goes (with `only`, just when that
        Log is still the partition's future log)."""
        with self._lock:
            found = self.future_logs.get(key)
            if found is None or (only is not None and found[1] is not only):
                return
            del self.future_logs[key]
        if found is not None:
            _, future = found
            future.mark_deleted()
            future.close_files()
            shutil.rmtree(future.dir, ignore_errors=True)

    def replace_with_future(self, key) -> Log:
        """The move is complete (the future log has every record of the current one): the
        future log takes the partition's name in its dir and is reopened as the log, the
        current one is deleted as a deleted partition is (renamed ``-delete``, removed after
        file.delete.delay.ms). Returns the new log. Blocking (a few fsyncs)."""
        with self._lock:
            log_dir, future = self.future_logs.pop(key)
            current = self._logs[key]
            old_dir = self._log_dir_of[key]
        start, hw = current.log_start_offset, current.high_watermark
        future.close()
        recovery = future.recovery_point      # what it flushed: a crash recovers the rest
        final = os.path.join(log_dir, files.partition_dir_name(*key))
        files.fs.rename(future.dir, final)
        files.fs.fsync_dir(log_dir)
        new = Log(final, current.config, recovery_point=recovery, log_start_offset=start,
                  high_watermark=hw, had_clean_shutdown=True, time_ms=self._time_ms)
        current.mark_deleted()
        target = os.path.join(old_dir, files.delete_dir_name(*key))
        files.fs.rename(current.dir, target)
        deadline = self._time_ms() + self.default_config.file_delete_delay_ms
        with self._lock:
            self._logs[key] = new
            self._log_dir_of[key] = log_dir
            self._pending_dir_deletes.append((deadline, target, current))
            self._stale_checkpoint_dirs.add(old_dir)      # as delete_log
        log.info("Moved %s-%d from %s to %s", key[0], key[1], old_dir, log_dir)
        return new

    def report_dir_failure(self, path: str, exc: BaseException) -> None:
        """An I/O error on `path` (a log's folder or file): tell `on_dir_failure`."""
        log_dir = self.dir_of_path(path)
        if log_dir is not None and log_dir not in self.offline_dirs \
                and self.on_dir_failure is not None:
            self.on_dir_failure(log_dir, exc)

    def log_dir_of(self, topic: str, partition: int) -> str | None:
        with self._lock:
            return self._log_dir_of.get((topic, partition))

    def keys_in(self, log_dir: str) -> set:
        """(topic, partition) of every log in `log_dir`."""
        with self._lock:
            return {key for key, d in self._log_dir_of.items() if d == log_dir}

    # -- compaction ----------------------------------------------------------------------------

    def start_cleaner(self, config) -> None:
        """Start the log cleaner (storage/log_cleaner.py) with a CleanerConfig, after
        `startup`; from then on the cleaner, not `run_retention`, deletes old segments of
        compacted logs.  Blocking (reads the cleaner checkpoints)."""
        from storage.log_cleaner import LogCleaner
        if not config.enable or self.cleaner is not None:
            return
        self.cleaner = LogCleaner(self, config, time_ms=self._time_ms)
        self.cleaner.startup()

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig | None = None,
                          topic_id=None, is_new: bool = True) -> Log:
        """The partition's log, created in the log dir holding the fewest partitions.

        A replica that should exist already (`is_new` false: LeaderAndIsr's isNew, or a
        topic this broker hosted before) is not created empty while a log dir is offline, as
        Kafka's getOrCreateLog: its data may be on that dir (StorageError).

        Loop (creating a log creates a folder and two empty files; no fsync), unless a
        partition was deleted in its dir since the checkpoints were written: they are
        rewritten first (fsync; see delete_log)."""
        key = (topic, partition)
        if self._stale_checkpoint_dirs and key not in self._logs:
            self.write_checkpoints()         # outside self._lock: it takes the checkpoint lock
        with self._lock:
            existing = self._logs.get(key)
            if existing is not None:
                if config is not None:
                    existing.config = config
                existing.assign_topic_id(topic_id)
                return existing
            if not is_new and self.offline_dirs:
                raise StorageError(f"Can not create log for {topic}-{partition} because log "
                                   f"directories {','.join(sorted(self.offline_dirs))} are "
                                   f"offline")
            online = self.online_dirs()
            if not online:
                raise StorageError(f"no log dir is online to create {topic}-{partition}: "
                                   f"{', '.join(sorted(self.offline_dirs))} failed")
            preferred = self.preferred_dirs.pop(key, None)
            if preferred in online:
                log_dir = preferred
            elif len(online) == 1:
                log_dir = online[0]
            else:
                counts = {d: 0 for d in online}
                for d in self._log_dir_of.values():
                    if d in counts:
                        counts[d] += 1
                log_dir = min(online, key=lambda d: (counts[d], online.index(d)))
            path = os.path.join(log_dir, files.partition_dir_name(topic, partition))
            new = Log(path, config or self.default_config, topic_id=topic_id,
                      had_clean_shutdown=True, time_ms=self._time_ms)
            self._logs[key] = new
            self._log_dir_of[key] = log_dir
            return new

    def delete_log(self, topic: str, partition: int) -> bool:
        """Rename the log's folder to ``...-delete``; its files are closed and removed in
        `cleanup_deleted` after file.delete.delay.ms, so a fetch response already holding one
        of its FileRegions can still be sent.  Loop.  False if there was no log."""
        key = (topic, partition)
        self.abandon_future_log(key)             # a move to another dir goes with it
        with self._lock:
            doomed = self._logs.pop(key, None)
            log_dir = self._log_dir_of.pop(key, None)
        if doomed is None:
            return False
        doomed.mark_deleted()                    # a clean in progress must not swap now
        if self.cleaner is not None:
            self.cleaner.forget(topic, partition)
        target = os.path.join(log_dir, files.delete_dir_name(topic, partition))
        files.fs.rename(doomed.dir, target)
        log.info("Log for partition %s-%d is renamed to %s and is scheduled for deletion",
                 topic, partition, target)
        # The broker's log.segment.delete.delay.ms, not the topic's (Kafka's deleteLogs)
        deadline = self._time_ms() + self.default_config.file_delete_delay_ms
        with self._lock:
            self._pending_dir_deletes.append((deadline, target, doomed))
        # Kafka's asyncDelete rewrites the dir's checkpoints at once: their entries for this
        # partition would be applied to a log created again under its name (a re-created
        # topic) at the next start after a crash (its recovery skipped; an old log start
        # above its end deleting every segment). Rewritten here before the next log is
        # created in the dir, so deleting many partitions writes them once.
        with self._lock:
            self._stale_checkpoint_dirs.add(log_dir)
        return True

    def cleanup_deleted(self, now_ms: int | None = None) -> int:
        """Remove ``-delete`` folders and ``.deleted`` segments whose delay has passed.
        Blocking.  Returns how many folders and segments went."""
        now_ms = self._time_ms() if now_ms is None else now_ms
        with self._lock:         # delete_log appends on the loop; flush and retention run this
            due = [(p, l) for d, p, l in self._pending_dir_deletes if d <= now_ms]
            self._pending_dir_deletes = [e for e in self._pending_dir_deletes
                                         if e[0] > now_ms]
        for path, deleted_log in due:
            if deleted_log is not None:
                deleted_log.close_files()
            shutil.rmtree(path, ignore_errors=True)
            if deleted_log is not None:
                log.info("Deleted log for partition %s-%d in %s.", deleted_log.topic,
                         deleted_log.partition, path)
        removed = len(due)
        for log_ in self.logs():
            removed += log_.delete_expired_files(now_ms)
        return removed

    # -- retention and flushing ----------------------------------------------------------------

    def run_retention(self, now_ms: int | None = None) -> int:
        """Apply retention.ms / retention.bytes / log start offsets to every log but the
        compacted ones (Kafka's cleanupLogs): the cleaner does theirs, and with
        log.cleaner.enable=false nothing does, as in Kafka (such topics only grow).  Loop
        (only renames; the files go in `cleanup_deleted`).  Returns the number of segments
        deleted."""
        now_ms = self._time_ms() if now_ms is None else now_ms
        deleted = 0
        cleaner = self.cleaner
        for log_ in self.logs():
            if log_.config.compact:
                continue
            # Kafka's pauseCleaningForNonCompactedPartitions: a log still being cleaned (its
            # policy changed from compact meanwhile) waits for the next pass.
            if cleaner is not None and not cleaner.try_pause(log_.topic, log_.partition):
                continue
            try:
                deleted += log_.delete_old_segments(now_ms)
            except OSError as exc:
                # Kafka's maybeHandleIOException: the dir goes offline and the other logs
                # still get their retention (the same log failed first every pass).
                self.report_dir_failure(log_.dir, exc)
            finally:
                if cleaner is not None:
                    cleaner.resume(log_.topic, log_.partition)
        return deleted

    def remove_expired_producers(self, expiration_ms: int, now_ms: int | None = None) -> int:
        """producer.id.expiration.ms over every log.  Blocking (each log's lock)."""
        now_ms = self._time_ms() if now_ms is None else now_ms
        return sum(log_.remove_expired_producers(now_ms, expiration_ms) for log_ in self.logs())

    def flush_dirty(self, now_ms: int | None = None) -> int:
        """fsync every log that `needs_flush` (flush.messages, flush.ms, rolled segments),
        then checkpoint recovery points.  Blocking.  Returns how many logs were flushed."""
        now_ms = self._time_ms() if now_ms is None else now_ms
        flushed = 0
        for log_ in self.logs():
            if log_.needs_flush(now_ms):
                try:
                    log_.flush()
                except OSError as exc:
                    self.report_dir_failure(log_.dir, exc)
                    continue
                flushed += 1
        if flushed:
            self.checkpoint_recovery_points()
        return flushed

    # -- checkpoints ---------------------------------------------------------------------------

    def _write_checkpoint(self, name: str, value_of, futures: bool = False) -> None:
        """With `futures`, the future logs too, in their own dirs' files (Kafka's
        recovery-point checkpoint has them: a partition is only once in a dir). `value_of`
        None for a log leaves it out."""
        with self._checkpoint_lock:
            with self._lock:
                items = [(key, self._log_dir_of[key], l) for key, l in self._logs.items()]
                if futures:
                    items += [(key, d, l) for key, (d, l) in self.future_logs.items()]
            for log_dir in self.online_dirs():
                offsets = {key: value for key, d, l in items
                           if d == log_dir and (value := value_of(l)) is not None}
                try:
                    checkpoints.write_offsets(os.path.join(log_dir, name), offsets)
                except OSError as exc:
                    self.report_dir_failure(log_dir, exc)

    def write_checkpoints(self) -> None:
        """Every checkpoint file of every online dir, now. Blocking (fsync)."""
        with self._lock:
            self._stale_checkpoint_dirs.clear()
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        self.checkpoint_high_watermarks()
        if self.cleaner is not None:
            self.cleaner.write_checkpoints()

    def checkpoint_recovery_points(self) -> None:
        """Blocking (fsync)."""
        self._write_checkpoint(files.RECOVERY_POINT_CHECKPOINT, lambda l: l.recovery_point,
                               futures=True)

    def checkpoint_high_watermarks(self) -> None:
        """Blocking (fsync)."""
        self._write_checkpoint(files.REPLICATION_CHECKPOINT, lambda l: l.high_watermark)

    def checkpoint_log_start_offsets(self) -> None:
        """Only log starts above the first segment's base, as Kafka's
        checkpointLogStartOffsetsInDir (the others are where loading puts them). Blocking."""
        self._write_checkpoint(files.LOG_START_OFFSET_CHECKPOINT,
                               lambda l: l.log_start_offset
                               if l.log_start_offset > l.first_segment_base else None)

    # -- shutdown ------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Flush and close every log, write every checkpoint, then the clean-shutdown marker
        in each log dir, then release the dir locks.  Only the locks are released when
        `startup` did not complete: the dirs may belong to another broker, or hold logs this
        one never recovered.  Blocking."""
        if not self.loaded:
            self.release_locks()
            return
        try:
            if self.cleaner is not None:
                self.cleaner.shutdown()          # aborts a clean; writes its checkpoints
                self.cleaner = None
            with self._lock:
                moving = [future for _, future in self.future_logs.values()]
            for log_ in self.logs():
                log_.flush()
            moving = [f for f in moving if self._closed_quietly(f, flush=True)]
            self.checkpoint_recovery_points()
            self.checkpoint_high_watermarks()
            self.checkpoint_log_start_offsets()
            for log_ in self.logs():
                log_.close()
            for future in moving:                   # resumed at restart
                self._closed_quietly(future)
            for _, _, deleted_log in self._pending_dir_deletes:
                if deleted_log is not None:
                    deleted_log.close_files()
            for log_dir in self.online_dirs():
                cleaner = os.path.join(log_dir, files.CLEANER_CHECKPOINT)
                if not os.path.exists(cleaner):
                    checkpoints.write_offsets(cleaner, {})
                files.fs.write_atomically(os.path.join(log_dir, files.CLEAN_SHUTDOWN_FILE), b"")
            with self._lock:
                self._logs.clear()
                self._log_dir_of.clear()
                self.future_logs.clear()
            self.loaded = False
        finally:
            # Also after a failed step (no marker then: the next start recovers): a broker
            # that stopped must not keep the dirs from the next one in this process.
            self.release_locks()


def _parse_meta_properties(path: str, props: dict) -> tuple:
    """(cluster id or None, broker id or None, the id's key) of a meta.properties file;
    `InvalidMetaProperties` if it is not one Kafka would accept."""
    version = props.get("version", "0")
    if version not in ("0", "1"):
        raise InvalidMetaProperties(f"Unknown meta.properties version {version} in {path}")
    id_key = "node.id" if version == "1" else "broker.id"
    stored_cluster, stored_id = props.get("cluster.id"), props.get(id_key)
    if version == "1" and stored_cluster is None:
        raise InvalidMetaProperties(f"cluster.id was not specified in the v1 file: {path}")
    if version == "1" and stored_id is None:
        raise InvalidMetaProperties(f"node.id was not specified in {path}")
    if stored_id is not None:
        try:
            stored_id = int(stored_id)
        except ValueError:
            raise InvalidMetaProperties(f"Invalid {id_key} {stored_id!r} in {path}") from None
    return stored_cluster, stored_id, id_key


def _read_offsets(log_dir: str, name: str) -> dict:
    path = os.path.join(log_dir, name)
    try:
        return checkpoints.read_offsets(path)
    except ValueError as exc:
        log.warning("Ignoring unreadable checkpoint %s: %s", path, exc)
        return {}
