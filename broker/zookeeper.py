"""The ZooKeeper connection: the one module that imports kazoo.

`ZkClient` wraps a `KazooClient` with coroutines: each call is started with kazoo's `*_async`
variant and its result reaches the event loop through `call_soon_threadsafe`, so the loop never
blocks on ZooKeeper. Watch callbacks (one-shot, as in ZooKeeper) and session state changes
reach the loop the same way. Errors come back as broker.zk_data's ZkError subclasses, results
as its Stat, so everything above this module (broker/kafka_zk.py, the controller) runs
unchanged over the in-memory fake the unit tests use.

Connection loss: an operation that fails with a connection loss is retried once the session
is connected again (Kafka's retryRequestsUntilConnected); a session that expires fails the
operation with SessionExpiredError and calls the session listener with "expired". kazoo then
opens a new session by itself and the listener hears "connected" (the owner re-registers its
ephemeral znodes and watches, as Kafka's broker does after a session expiry).

`connect` may end with a chroot (`host:port,host:port/kafka`): it is created first if missing,
as Kafka does.
"""
from __future__ import annotations

import asyncio
import logging

from kazoo import exceptions as kz
from kazoo.client import KazooClient, KazooState
from kazoo.protocol.states import EventType

from broker.zk_data import (BadVersionError, CheckOp, CreateOp, DeleteOp, NodeExistsError,
                            NoNodeError, NotEmptyError, SessionExpiredError, SetDataOp, Stat,
                            WatchEvent, ZkError, ZkTimeoutError)

log = logging.getLogger(__name__)

# kazoo's reconnection: attempts about a second apart (up to 1.4 s with kazoo's jitter), for
# ever, as the Java client's (under a second between attempts). kazoo's default backs off to an hour: after a 30 s
# ZooKeeper restart it came back 50 s later, every session expired, every broker out.
RECONNECT = {"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 1.0}

_EVENT_TYPES = {EventType.CREATED: "CREATED", EventType.DELETED: "DELETED",
                EventType.CHANGED: "CHANGED", EventType.CHILD: "CHILD"}


def _error(exc: BaseException) -> BaseException:
    if isinstance(exc, kz.NoNodeError):
        return NoNodeError(str(exc) or "no node")
    if isinstance(exc, kz.NodeExistsError):
        return NodeExistsError(str(exc) or "node exists")
    if isinstance(exc, kz.BadVersionError):
        return BadVersionError(str(exc) or "bad version")
    if isinstance(exc, kz.NotEmptyError):
        return NotEmptyError(str(exc) or "not empty")
    if isinstance(exc, kz.SessionExpiredError):
        return SessionExpiredError("ZooKeeper session expired")
    if isinstance(exc, kz.ZookeeperError):
        return ZkError(f"{type(exc).__name__}: {exc}")
    return exc


def _stat(stat) -> Stat | None:
    if stat is None:
        return None
    return Stat(stat.version, stat.czxid, stat.ephemeralOwner, stat.ctime)


def split_chroot(connect: str) -> tuple:
    """("h1:2181,h2:2181", "/kafka") or (connect, "")."""
    hosts, slash, chroot = connect.partition("/")
    return hosts, (slash + chroot).rstrip("/") if slash else ""


class ZkClient:
    def __init__(self, connect: str, *, session_timeout_ms: int = 18000,
                 connection_timeout_ms: int | None = None):
        self.connect_string = connect
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        self._client: KazooClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listeners: list = []
        self._connected = asyncio.Event()
        self._lost = False
        self._sessions = 0          # sessions that expired: an operation is tied to its own
        self._closing = False
        self._pending_watches: dict = {}

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect within zookeeper.connection.timeout.ms, creating the chroot if needed."""
        self._loop = asyncio.get_running_loop()
        hosts, chroot = split_chroot(self.connect_string)
        timeout = self.connection_timeout_ms / 1000
        if chroot:
            bare = KazooClient(hosts=hosts, timeout=self.session_timeout_ms / 1000,
                               connection_retry=dict(RECONNECT))
            try:
                await self._loop.run_in_executor(None, self._start_client, bare, timeout)
                await self._loop.run_in_executor(None, bare.ensure_path, chroot)
            finally:
                await self._loop.run_in_executor(None, self._stop_client, bare)
        client = KazooClient(hosts=self.connect_string, timeout=self.session_timeout_ms / 1000,
                             connection_retry=dict(RECONNECT))
        client.add_listener(self._state_changed)
        await self._loop.run_in_executor(None, self._start_client, client, timeout)
        self._client = client
        self._connected.set()
        log.info("[ZooKeeperClient Kafka server] Connected to %s (session 0x%x)",
                 self.connect_string, self.session_id)

    @staticmethod
    def _start_client(client, timeout: float) -> None:
        try:
            client.start(timeout=timeout)
        except Exception:
            ZkClient._stop_client(client)
            raise ZkTimeoutError(
                "Timed out waiting for connection while in state: CONNECTING") from None

    @staticmethod
    def _stop_client(client) -> None:
        try:
            client.stop()
            client.close()
        except Exception:           # already stopped
            pass

    async def close(self) -> None:
        """Close the session: this broker's ephemeral znodes vanish at once."""
        self._closing = True
        client, self._client = self._client, None
        if client is not None:
            await self._loop.run_in_executor(None, self._stop_client, client)

    @property
    def session_id(self) -> int:
        client = self._client
        if client is None or client.client_id is None:
            return 0
        return client.client_id[0]

    def add_session_listener(self, fn) -> None:
        """`fn(state)` on the loop, state "expired" (the session is gone with its ephemeral
        znodes and watches), "connected" (a new session after an expiry), "suspended" (the
        connection is lost) or "resumed" (back in the same session)."""
        self._listeners.append(fn)

    def _state_changed(self, state) -> None:          # kazoo's thread
        if self._closing or self._loop is None:
            return
        if state == KazooState.LOST:
            self._lost = True
            self._loop.call_soon_threadsafe(self._notify, "expired")
        elif state == KazooState.SUSPENDED:
            self._loop.call_soon_threadsafe(self._notify, "suspended")
        elif state == KazooState.CONNECTED:
            renewed, self._lost = self._lost, False
            self._loop.call_soon_threadsafe(self._notify, "connected" if renewed else "resumed")

    def _notify(self, state: str) -> None:
        if state == "expired":
            self._sessions += 1
        if state in ("expired", "suspended"):
            self._connected.clear()
        else:
            self._connected.set()
        if state == "expired":
            self._pending_watches.clear()       # the owners re-read after re-registering
        elif state == "resumed":
            self._refire_watches()
        for fn in list(self._listeners):
            try:
                fn(state)
            except Exception:
                log.exception("ZooKeeper session listener failed")

    # -- calls ---------------------------------------------------------------------------------

    def _watcher(self, fn, path: str, kind: str = "data"):
        """A kazoo watcher delivering to `fn` on the loop, remembered until it fires: a
        ZooKeeper server forgets a connection's watches when the connection ends, and kazoo
        does not set them again on reconnect (the Java client's SetWatches), so after a
        reconnect every pending watch fires once with type RECONNECTED and its owner reads
        (and watches) again."""
        if fn is None:
            return None
        # The same `fn` watching the same path again before it fired gets the same kazoo
        # watcher (kazoo keeps a set of them per path), so it fires once, not once per read.
        token = (fn, path, kind)
        pending = self._pending_watches.get(token)
        if pending is not None:
            return pending[2]
        loop = self._loop

        def deliver(event):                         # kazoo's thread
            if event.type in _EVENT_TYPES:
                loop.call_soon_threadsafe(self._fire_watch, token, deliver,
                                          _EVENT_TYPES[event.type], event.path)
        self._pending_watches[token] = (fn, path, deliver)
        return deliver

    def _fire_watch(self, token, deliver, event_type: str, path: str) -> None:
        entry = self._pending_watches.get(token)
        if entry is not None and entry[2] is deliver:
            del self._pending_watches[token]
            entry[0](WatchEvent(event_type, path))

    def _refire_watches(self) -> None:
        pending, self._pending_watches = self._pending_watches, {}
        for fn, path, _ in pending.values():
            try:
                fn(WatchEvent("RECONNECTED", path))
            except Exception:
                log.exception("ZooKeeper watch callback failed")

    async def _call(self, start):
        """Run `start(client)` (a kazoo *_async call) and await its result; retried after a
        connection loss once connected again, in the same session (SessionExpiredError
        once it expired)."""
        session = self._sessions
        while True:
            client = self._client
            if client is None:
                raise ZkError("ZooKeeper client is closed")
            if self._sessions != session:
                # Kafka's ZooKeeperClientExpiredException: an operation of a session that
                # expired is not run again on the next one (a deposed controller's event
                # would finish there, unfenced).
                raise SessionExpiredError("ZooKeeper session expired")
            future = self._loop.create_future()
            loop = self._loop

            def done(result, future=future):
                try:
                    value = result.get_nowait()
                except BaseException as exc:        # noqa: BLE001 - handed to the loop
                    loop.call_soon_threadsafe(_settle, future, None, exc)
                else:
                    loop.call_soon_threadsafe(_settle, future, value, None)
            try:
                start(client).rawlink(done)
            except kz.ZookeeperError as exc:
                raise _error(exc) from None
            try:
                return await future
            except (kz.ConnectionLoss, kz.ConnectionClosedError, kz.OperationTimeoutError):
                if self._closing:
                    raise ZkError("ZooKeeper client is closed") from None
                await self._connected.wait()
            except (kz.ZookeeperError, kz.SessionExpiredError) as exc:
                raise _error(exc) from None

    async def get(self, path: str, watch=None):
        """(data, Stat), or None when the znode does not exist (a watch is then set on
        nothing: use `exists` to watch for creation)."""
        try:
            data, stat = await self._call(
                lambda c: c.get_async(path, self._watcher(watch, path)))
        except NoNodeError:
            return None
        return data, _stat(stat)

    async def exists(self, path: str, watch=None) -> Stat | None:
        return _stat(await self._call(
            lambda c: c.exists_async(path, self._watcher(watch, path))))

    async def children(self, path: str, watch=None) -> list | None:
        try:
            return sorted(await self._call(
                lambda c: c.get_children_async(path, self._watcher(watch, path, "child"))))
        except NoNodeError:
            return None

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False,
                     sequence: bool = False, makepath: bool = False) -> str:
        return await self._call(lambda c: c.create_async(path, data, ephemeral=ephemeral,
                                                         sequence=sequence,
                                                         makepath=makepath))

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        return _stat(await self._call(lambda c: c.set_async(path, data, version)))

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        if recursive:
            for child in await self.children(path) or []:
                await self.delete(f"{path.rstrip('/')}/{child}", recursive=True)
        try:
            await self._call(lambda c: c.delete_async(path, version))
        except NoNodeError:
            if version != -1:
                raise

    async def ensure_path(self, path: str) -> None:
        try:
            await self.create(path, b"", makepath=True)
        except NodeExistsError:
            pass

    async def multi(self, ops: list) -> list:
        """Run `ops` atomically. Returns one result per op: a path (create), a Stat (set), True
        (delete, check), or, when the multi failed, the ZkError of the op that failed (the
        others get ZkError("rolled back"))."""
        def start(client):
            txn = client.transaction()
            for op in ops:
                if isinstance(op, CreateOp):
                    txn.create(op.path, op.data, ephemeral=op.ephemeral, sequence=op.sequence)
                elif isinstance(op, SetDataOp):
                    txn.set_data(op.path, op.data, op.version)
                elif isinstance(op, DeleteOp):
                    txn.delete(op.path, op.version)
                elif isinstance(op, CheckOp):
                    txn.check(op.path, op.version)
                else:
                    raise TypeError(f"not a ZooKeeper op: {op!r}")
            return txn.commit_async()
        results = await self._call(start)
        out = []
        for result in results:
            if isinstance(result, kz.RolledBackError):
                out.append(ZkError("rolled back"))
            elif isinstance(result, BaseException):
                out.append(_error(result))
            elif hasattr(result, "czxid"):
                out.append(_stat(result))
            else:
                out.append(result)
        return out


def _settle(future, value, exc) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(value)


class ZkReader:
    """A blocking reader of znodes for tools and test harnesses (not the broker):
    `with ZkReader("127.0.0.1:2181") as zk: zk.get("/controller")`."""

    def __init__(self, connect: str, timeout_s: float = 10.0):
        self._client = KazooClient(hosts=connect, timeout=timeout_s,
                                   connection_retry=dict(RECONNECT))
        self._timeout = timeout_s

    def __enter__(self) -> "ZkReader":
        self._client.start(timeout=self._timeout)
        return self

    def __exit__(self, *exc) -> None:
        ZkClient._stop_client(self._client)

    def get(self, path: str) -> bytes | None:
        try:
            data, _ = self._client.get(path)
            return data
        except kz.NoNodeError:
            return None

    def children(self, path: str) -> list:
        try:
            return sorted(self._client.get_children(path))
        except kz.NoNodeError:
            return []
