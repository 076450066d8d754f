"""The purgatory: completion on notify, expiry by deadline, cancellation, exactly-once."""
import asyncio

import pytest

from broker.purgatory import Purgatory


class FakeClock:
    def __init__(self):
        self.now = 1_000

    def ms(self):
        return self.now


class ManualTimers:
    """schedule(delay, callback) that fires only when the test says so."""

    def __init__(self):
        self.pending = []

    def __call__(self, delay_s, callback):
        handle = Handle(delay_s, callback)
        self.pending.append(handle)
        return handle

    def fire_all(self):
        for handle in list(self.pending):
            if not handle.cancelled:
                handle.callback()
        self.pending.clear()


class Handle:
    def __init__(self, delay_s, callback):
        self.delay_s, self.callback, self.cancelled = delay_s, callback, False

    def cancel(self):
        self.cancelled = True


async def test_completes_immediately_without_watching():
    purgatory = Purgatory("fetch")
    assert await purgatory.wait([("t", 0)], lambda key: True, 1000) is True
    assert purgatory.watched == 0


async def test_zero_timeout_returns_false_at_once():
    purgatory = Purgatory("fetch")
    assert await purgatory.wait([("t", 0)], lambda key: False, 0) is False
    assert purgatory.watched == 0


async def test_notify_completes_only_the_watchers_of_that_key():
    timers = ManualTimers()
    purgatory = Purgatory("fetch", time=FakeClock(), schedule=timers)
    state = {"a": False, "b": False}
    wait_a = asyncio.ensure_future(purgatory.wait([("t", 0)], lambda key: state["a"], 500))
    wait_b = asyncio.ensure_future(purgatory.wait([("t", 1)], lambda key: state["b"], 500))
    await asyncio.sleep(0)
    assert purgatory.watched == 2
    state["a"] = state["b"] = True
    assert purgatory.notify("t", 0) == 1
    assert await wait_a is True
    assert not wait_b.done()
    assert purgatory.notify("t", 1) == 1
    assert await wait_b is True
    assert purgatory.watched == 0
    assert all(h.cancelled for h in timers.pending)


async def test_notify_without_progress_keeps_waiting_then_expires():
    timers = ManualTimers()
    purgatory = Purgatory("fetch", time=FakeClock(), schedule=timers)
    waiter = asyncio.ensure_future(purgatory.wait([("t", 0)], lambda key: False, 500))
    await asyncio.sleep(0)
    assert purgatory.notify("t", 0) == 0
    assert not waiter.done()
    assert timers.pending[0].delay_s == 0.5
    timers.fire_all()
    assert await waiter is False
    assert purgatory.expired_count == 1
    assert purgatory.watched == 0


async def test_multi_key_operation_completes_once():
    purgatory = Purgatory("fetch", time=FakeClock(), schedule=ManualTimers())
    calls = []

    def check(key):
        calls.append(key)
        return len(calls) >= 3

    waiter = asyncio.ensure_future(purgatory.wait([("t", 0), ("t", 1)], check, 500))
    await asyncio.sleep(0)
    assert purgatory.notify("t", 0) == 1     # third check succeeds
    assert purgatory.notify("t", 1) == 0     # already done: not checked again
    assert len(calls) == 3
    assert await waiter is True


async def test_expire_due_with_injected_clock():
    clock = FakeClock()
    purgatory = Purgatory("produce", time=clock, schedule=ManualTimers())
    early = asyncio.ensure_future(purgatory.wait([("t", 0)], lambda key: False, 100))
    late = asyncio.ensure_future(purgatory.wait([("t", 0)], lambda key: False, 900))
    await asyncio.sleep(0)
    clock.now += 100
    assert purgatory.expire_due() == 1
    assert await early is False
    assert not late.done()
    clock.now += 800
    assert purgatory.expire_due() == 1
    assert await late is False


async def test_expiry_takes_a_last_look():
    state = {"ready": False}
    timers = ManualTimers()
    purgatory = Purgatory("fetch", time=FakeClock(), schedule=timers)
    waiter = asyncio.ensure_future(purgatory.wait([("t", 0)], lambda key: state["ready"], 100))
    await asyncio.sleep(0)
    state["ready"] = True            # changed without a notify (e.g. another key)
    timers.fire_all()
    assert await waiter is True


async def test_cancelled_waiter_stops_watching():
    purgatory = Purgatory("fetch", time=FakeClock(), schedule=ManualTimers())
    waiter = asyncio.ensure_future(purgatory.wait([("t", 0)], lambda key: False, 10_000))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert purgatory.watched == 0
    assert purgatory.notify("t", 0) == 0


async def test_real_timer_expires():
    purgatory = Purgatory("fetch")
    loop = asyncio.get_running_loop()
    start = loop.time()
    assert await purgatory.wait([("t", 0)], lambda key: False, 50) is False
    assert 0.04 <= loop.time() - start < 1.0


async def test_shutdown_releases_everyone():
    purgatory = Purgatory("fetch", time=FakeClock(), schedule=ManualTimers())
    waiters = [asyncio.ensure_future(purgatory.wait([("t", i)], lambda key: False, 10_000))
               for i in range(3)]
    await asyncio.sleep(0)
    purgatory.shutdown()
    assert await asyncio.gather(*waiters) == [False, False, False]


async def test_a_failing_check_completes_its_operation_without_hurting_the_notifier():
    purgatory = Purgatory("fetch", time=FakeClock(), schedule=ManualTimers())
    state = {"armed": False}

    def check(key):
        if state["armed"]:
            raise OSError("disk gone")
        return False

    waiter = asyncio.ensure_future(purgatory.wait([("t", 0)], check, 10_000))
    await asyncio.sleep(0)
    state["armed"] = True
    assert purgatory.notify("t", 0) == 1          # no exception reaches the caller
    assert await waiter is True
