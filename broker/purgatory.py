"""Delayed operations: where long-polling Fetches and acks=-1 Produces wait.

Theory of operation (after Kafka's DelayedOperationPurgatory, shrunk to one event loop):

- A *delayed operation* is a condition (`try_complete(key) -> bool`, cheap, side-effect free apart
  from caching what it found) plus a deadline. `key` is the key whose change triggered the check,
  or None for a full check (on arrival and at expiry), so an operation watching a thousand
  partitions re-examines only the one that changed. The handler awaits `purgatory.wait(keys, try_complete,
  timeout_ms)`; it returns True as soon as the condition holds and False once the deadline passes.
- The condition is checked once when the operation arrives (most fetches already have data). If it
  does not hold, the operation is *watched* under each of its keys - `(topic, partition)` pairs.
- Whoever changes a partition (an append moves the log end offset and, with one replica, the high
  watermark; DeleteRecords moves the log start offset; a leader change) calls `notify(topic,
  partition)`, which re-checks only the operations watching that key. Each operation completes
  exactly once: whichever of notify/expiry gets there first wins; the others find it done.
- Timeouts use one timer per operation, scheduled through an injectable `schedule(delay_s, callback)`
  (`loop.call_later` by default) and measured with an injectable clock (`time.ms()`), so tests drive
  expiry by hand without sleeping.

Concurrency contract: everything here runs on the event loop thread; nothing blocks.
"""
from __future__ import annotations

import asyncio
import logging
import time as _time
from typing import Callable, Hashable, Iterable

log = logging.getLogger(__name__)


class SystemClock:
    """Wall clock in milliseconds: the default `time` object (the broker passes its own)."""

    @staticmethod
    def ms() -> int:
        return int(_time.time() * 1000)


class DelayedOperation:
    """One waiting request. `future` resolves to True (condition met) or False (deadline)."""

    __slots__ = ("try_complete", "deadline_ms", "keys", "future", "timer")

    def __init__(self, try_complete: Callable[[], bool], deadline_ms: int, keys: tuple, future):
        self.try_complete = try_complete
        self.deadline_ms = deadline_ms
        self.keys = keys
        self.future = future
        self.timer = None

    @property
    def done(self) -> bool:
        return self.future.done()


class Purgatory:
    """Operations waiting on partition keys. `name` only labels metrics/log lines."""

    def __init__(self, name: str, *, time=None, schedule: Callable | None = None, loop=None):
        self.name = name
        self.time = time or SystemClock()
        self._loop = loop
        self._schedule = schedule
        self._watchers: dict[Hashable, dict[DelayedOperation, None]] = {}
        self.completed_count = 0
        self.expired_count = 0

    # -- waiting -------------------------------------------------------------------------------

    async def wait(self, keys: Iterable[Hashable], try_complete: Callable[[Hashable], bool],
                   timeout_ms: int) -> bool:
        """Wait until `try_complete()` is true (-> True) or `timeout_ms` elapses (-> False)."""
        if try_complete(None):
            return True
        if timeout_ms <= 0:
            return False
        loop = self._loop or asyncio.get_running_loop()
        op = DelayedOperation(try_complete, self.time.ms() + timeout_ms, tuple(keys),
                              loop.create_future())
        for key in op.keys:
            self._watchers.setdefault(key, {})[op] = None
        # An append may have happened between the first check and the watch: check once more.
        if try_complete(None):
            self._finish(op, True)
        else:
            schedule = self._schedule or loop.call_later
            op.timer = schedule(timeout_ms / 1000.0, lambda: self._expire(op))
        try:
            return await op.future
        finally:
            # Cancelled (the connection closed): stop watching so the keys don't leak.
            if not op.done:
                op.future.cancel()
            self._unwatch(op)

    # -- waking --------------------------------------------------------------------------------

    def notify(self, topic: str, partition: int) -> int:
        """Something changed on (topic, partition): complete the operations now satisfied."""
        return self.notify_key((topic, partition))

    def notify_key(self, key: Hashable) -> int:
        watchers = self._watchers.get(key)
        if not watchers:
            return 0
        completed = 0
        for op in list(watchers):
            if op.done:
                continue
            if self._check(op, key):
                self._finish(op, True)
                completed += 1
        return completed

    def expire_due(self, now_ms: int | None = None) -> int:
        """Expire every watched operation whose deadline has passed (for tests and a slow clock)."""
        now_ms = self.time.ms() if now_ms is None else now_ms
        due = {op for ops in self._watchers.values() for op in ops
               if not op.done and op.deadline_ms <= now_ms}
        for op in due:
            self._expire(op)
        return len(due)

    @property
    def watched(self) -> int:
        """Operations currently waiting (each counted once)."""
        return len({op for ops in self._watchers.values() for op in ops if not op.done})

    def shutdown(self) -> None:
        """Complete every waiting operation as expired (the broker is stopping)."""
        for ops in list(self._watchers.values()):
            for op in list(ops):
                self._expire(op)

    # -- internals -----------------------------------------------------------------------------

    def _check(self, op: DelayedOperation, key) -> bool:
        # A failing check must not break whoever notified (an append of another request):
        # complete the operation, whose handler then reads again and reports the error.
        try:
            return bool(op.try_complete(key))
        except Exception:
            log.exception("%s purgatory: check failed; completing the operation", self.name)
            return True

    def _expire(self, op: DelayedOperation) -> None:
        if op.done:
            return
        # A last look: the data may have arrived without a notify (e.g. on another key).
        result = self._check(op, None)
        if result:
            self.completed_count += 1
        else:
            self.expired_count += 1
        op.future.set_result(result)
        self._unwatch(op)

    def _finish(self, op: DelayedOperation, result: bool) -> None:
        self.completed_count += 1
        if op.timer is not None:
            op.timer.cancel()
        op.future.set_result(result)
        self._unwatch(op)

    def _unwatch(self, op: DelayedOperation) -> None:
        if op.timer is not None:
            op.timer.cancel()
            op.timer = None
        for key in op.keys:
            ops = self._watchers.get(key)
            if ops is not None:
                ops.pop(op, None)
                if not ops:
                    del self._watchers[key]
