"""An in-memory ZooKeeper with broker/zookeeper.ZkClient's interface, for unit tests of the
controller and of broker/kafka_zk.py (integration tests use a real ZooKeeper).

What it models: a tree of znodes with data, data version, czxid (a global zxid counter),
ephemeral owners per session, sequential names, one-shot data/exists/child watches delivered
through the event loop, and all-or-nothing multis. Several clients share one `FakeZooKeeper`
(one per broker), each with its own session; `expire(client)` ends a session as a real server
would: its ephemeral znodes go and their watches fire.
"""
from __future__ import annotations

import asyncio
import itertools

from broker.zk_data import (BadVersionError, CheckOp, CreateOp, DeleteOp, NodeExistsError,
                            NoNodeError, NotEmptyError, SetDataOp, Stat, WatchEvent, ZkError)


class _Node:
    __slots__ = ("data", "version", "czxid", "owner", "cversion", "ctime")

    def __init__(self, data, czxid, owner, ctime=0):
        self.data = data
        self.version = 0
        self.czxid = czxid
        self.owner = owner
        self.cversion = 0
        self.ctime = ctime

    def stat(self):
        return Stat(self.version, self.czxid, self.owner, self.ctime)


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


class FakeZooKeeper:
    def __init__(self):
        self.nodes = {"/": _Node(b"", 0, 0)}
        self.zxid = itertools.count(1)
        self.sessions = itertools.count(0x100)
        self.data_watches: dict[str, list] = {}
        self.child_watches: dict[str, list] = {}
        self.writes = 0
        self.now_ms = lambda: 0             # the creation time znodes get (ctime)

    def client(self) -> "FakeZkClient":
        return FakeZkClient(self, next(self.sessions))

    # -- watches
    def _fire(self, table, path, type_):
        for fn in table.pop(path, []):
            asyncio.get_running_loop().call_soon(fn, WatchEvent(type_, path))

    def _changed(self, path, type_):
        self._fire(self.data_watches, path, type_)

    def _children_changed(self, path):
        self._fire(self.child_watches, path, "CHILD")

    # -- operations (synchronous: applied at once, as one server would)
    def _check(self, op):
        node = self.nodes.get(op.path)
        if node is None:
            return NoNodeError(op.path)
        if op.version != -1 and node.version != op.version:
            return BadVersionError(op.path)
        return None

    def apply(self, session, op, dry: dict | None = None):
        """Apply one op; returns its result or raises the ZkError. `dry`: a copy of the
        tree to try a multi on first."""
        nodes = self.nodes if dry is None else dry
        if isinstance(op, CreateOp):
            path = op.path
            parent = _parent(path)
            if parent not in nodes:
                raise NoNodeError(parent)
            if op.sequence:
                pnode = nodes[parent]
                path = f"{path}{pnode.cversion:010d}"
                if dry is None:
                    pnode.cversion += 1
            if path in nodes:
                raise NodeExistsError(path)
            if dry is None:
                nodes[path] = _Node(op.data, next(self.zxid), session if op.ephemeral else 0,
                                    self.now_ms())
                nodes[parent].cversion += 1 if not op.sequence else 0
                self.writes += 1
                self._changed(path, "CREATED")
                self._children_changed(parent)
            else:
                nodes[path] = _Node(op.data, 0, 0)
            return path
        if isinstance(op, SetDataOp):
            node = nodes.get(op.path)
            if node is None:
                raise NoNodeError(op.path)
            if op.version != -1 and node.version != op.version:
                raise BadVersionError(op.path)
            if dry is None:
                node.data = op.data
                node.version += 1
                self.writes += 1
                self._changed(op.path, "CHANGED")
                return node.stat()
            return None
        if isinstance(op, DeleteOp):
            node = nodes.get(op.path)
            if node is None:
                raise NoNodeError(op.path)
            if op.version != -1 and node.version != op.version:
                raise BadVersionError(op.path)
            if any(_parent(p) == op.path for p in nodes if p != op.path):
                raise NotEmptyError(op.path)
            del nodes[op.path]
            if dry is None:
                self.writes += 1
                self._changed(op.path, "DELETED")
                self._children_changed(_parent(op.path))
            return True
        if isinstance(op, CheckOp):
            node = nodes.get(op.path)
            if node is None:
                raise NoNodeError(op.path)
            if op.version != -1 and node.version != op.version:
                raise BadVersionError(op.path)
            return True
        raise TypeError(op)

    def expire(self, client: "FakeZkClient") -> None:
        """End `client`'s session: its ephemeral znodes vanish (watches fire)."""
        for path in [p for p, n in self.nodes.items() if n.owner == client.session_id]:
            del self.nodes[path]
            self._changed(path, "DELETED")
            self._children_changed(_parent(path))
        client.expired = True


class FakeZkClient:
    def __init__(self, server: FakeZooKeeper, session_id: int):
        self.server = server
        self.session_id = session_id
        self.expired = False

    def _live(self):
        if self.expired:
            from broker.zk_data import SessionExpiredError
            raise SessionExpiredError("session expired")
        return self.server

    async def get(self, path, watch=None):
        server = self._live()
        node = server.nodes.get(path)
        if node is None:
            return None
        if watch is not None:
            _add_watch(server.data_watches, path, watch)
        return node.data, node.stat()

    async def exists(self, path, watch=None):
        server = self._live()
        if watch is not None:
            _add_watch(server.data_watches, path, watch)
        node = server.nodes.get(path)
        return None if node is None else node.stat()

    async def children(self, path, watch=None):
        server = self._live()
        if path not in server.nodes:
            return None
        if watch is not None:
            _add_watch(server.child_watches, path, watch)
        prefix = path.rstrip("/") + "/"
        return sorted(p[len(prefix):] for p in server.nodes
                      if p.startswith(prefix) and "/" not in p[len(prefix):])

    async def create(self, path, data=b"", *, ephemeral=False, sequence=False, makepath=False):
        server = self._live()
        if makepath:
            parts = path.strip("/").split("/")[:-1]
            for i in range(1, len(parts) + 1):
                p = "/" + "/".join(parts[:i])
                if p not in server.nodes:
                    server.apply(0, CreateOp(p))
        return server.apply(self.session_id, CreateOp(path, data, ephemeral, sequence))

    async def set(self, path, data, version=-1):
        return self._live().apply(self.session_id, SetDataOp(path, data, version))

    async def delete(self, path, version=-1, *, recursive=False):
        server = self._live()
        if recursive:
            for child in await self.children(path) or []:
                await self.delete(f"{path.rstrip('/')}/{child}", recursive=True)
        try:
            server.apply(self.session_id, DeleteOp(path, version))
        except NoNodeError:
            if version != -1:
                raise

    async def ensure_path(self, path):
        try:
            await self.create(path, makepath=True)
        except NodeExistsError:
            pass

    async def multi(self, ops):
        server = self._live()
        trial = {p: _copy(n) for p, n in server.nodes.items()}
        failed_at, error = None, None
        for i, op in enumerate(ops):
            try:
                server.apply(self.session_id, op, dry=trial)
            except ZkError as exc:
                failed_at, error = i, exc
                break
        if failed_at is not None:
            return [error if i == failed_at else ZkError("rolled back") for i in range(len(ops))]
        return [server.apply(self.session_id, op) for op in ops]


def _add_watch(table, path, watch):
    """As kazoo and ZooKeeper: one watcher object is registered once per path and fires once."""
    watches = table.setdefault(path, [])
    if watch not in watches:
        watches.append(watch)


def _copy(node):
    out = _Node(node.data, node.czxid, node.owner)
    out.version = node.version
    out.cversion = node.cversion
    return out
