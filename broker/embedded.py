"""An embedded broker for tests: the real server, started inside the calling process.

    from broker.embedded import EmbeddedBroker

    with EmbeddedBroker(topics={"orders": 3}, config={"auto.create.topics.enable": False}) as kafka:
        producer = confluent_kafka.Producer({"bootstrap.servers": kafka.bootstrap_servers})
        ...
        assert [r.value for r in kafka.read_all("orders")] == [b"a", b"b"]

    async with AsyncEmbeddedBroker() as kafka:        # on the caller's running loop
        await kafka.produce("events", [b"x", (b"key", b"y")])

Theory of operation. `AsyncEmbeddedBroker` builds a `BrokerConfig` the way
`python -m broker` does (the table's defaults, then the test defaults below, then the caller's
overrides), forces one PLAINTEXT listener on 127.0.0.1 port 0 and a log dir, and starts the
same `broker.server.Broker` the daemon runs — nothing is mocked or forked. `start()` returns
when the socket is bound, so `bootstrap_servers` answers at once. `stop()` is the daemon's
graceful shutdown, after which a temporary data dir (one the broker made itself) is removed.

`EmbeddedBroker` is the synchronous form for plain tests (confluent-kafka, kafka-python): it
runs its own uvloop event loop in a daemon thread, submits start/stop and the helpers to it,
and at stop shuts the loop's executor down and joins the thread, so nothing outlives it.
Several brokers can run in one process, each on its own port, dir and thread.

Test defaults (each overridable through `config`), chosen so a test does not wait on settings
meant for production: `group.initial.rebalance.delay.ms=0` (Kafka's 3 s delay before the first
rebalance), and one partition for `__consumer_offsets` and `__transaction_state` (50 logs, each
several fsync'ed files, would make the first commit of a test slow).

Helpers (each a method, async on `AsyncEmbeddedBroker`, blocking on `EmbeddedBroker`, whose
`aio` attribute offers the awaitable forms for async tests running on another loop):
`create_topic`, `produce`, `read_all`, `wait_for_committed`. They talk to the broker through
the project's own client (broker/client/), as an application would.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
import tempfile
import threading
import time
from typing import NamedTuple

TEST_DEFAULTS = {
    "broker.id": "0",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",
}
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0      # the daemon's shutdown is bounded at ~10 s (server.DRAIN_TIMEOUT_S)


class Topic(NamedTuple):
    """A topic to create: `Topic("orders", 3, {"cleanup.policy": "compact"})`."""
    name: str
    partitions: int = -1        # -1: the broker's num.partitions
    config: dict | None = None


def _topic_specs(topics) -> list:
    """None | iterable of names or Topic | {name: partitions} -> [Topic]."""
    if not topics:
        return []
    if isinstance(topics, dict):
        return [Topic(name, int(partitions)) for name, partitions in topics.items()]
    if isinstance(topics, (str, Topic)):
        topics = [topics]
    return [Topic(t) if isinstance(t, str) else Topic(*t) for t in topics]


def _property_text(value) -> str:
    """A Python value -> server.properties text, so overrides parse exactly like the file."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def _record(item) -> tuple:
    """A value, or (key, value), or (key, value, headers) -> (key, value, headers), as bytes."""
    def as_bytes(x):
        return x.encode() if isinstance(x, str) else x
    if isinstance(item, tuple):
        key, value, *rest = item
        headers = [(k, as_bytes(v)) for k, v in (rest[0] if rest else ())]
        return as_bytes(key), as_bytes(value), headers
    return None, as_bytes(item), []


class AsyncEmbeddedBroker:
    """The broker on the caller's running event loop (`async with`, or `await start()`/`stop()`).

    `config`: broker properties overriding the defaults (Kafka names, Python or string values);
    `topics`: created before `start()` returns, unless they exist already (see `Topic`);
    `data_dir`: the log dir to use, kept at stop (default: `log.dirs` or `log.dir` of `config`,
    also kept, else a new temporary dir, removed at stop). A stopped broker may be started
    again: it reopens the same dirs (all of them)."""

    def __init__(self, config: dict | None = None, *, topics=None, data_dir=None):
        self.overrides = {k: _property_text(v) for k, v in (config or {}).items()}
        self.topics = _topic_specs(topics)
        self.data_dir = os.fspath(data_dir) if data_dir is not None else None
        # The log.dirs the broker runs on: the caller's (kept), or a temporary dir (removed).
        self._log_dirs = self.data_dir if self.data_dir is not None else (
            self.overrides.get("log.dirs") or self.overrides.get("log.dir"))
        self._owns_dir = False
        self.broker = None               # the broker.server.Broker once started

    # -- lifecycle

    async def start(self) -> "AsyncEmbeddedBroker":
        if self.broker is not None:
            raise RuntimeError("this embedded broker is already started")
        from broker.config import BrokerConfig
        from broker.server import Broker
        props = dict(TEST_DEFAULTS)
        props.update(self.overrides)
        props["listeners"] = "PLAINTEXT://127.0.0.1:0"
        props.pop("advertised.listeners", None)
        props.pop("log.dir", None)
        if self._log_dirs is None:
            self._log_dirs = tempfile.mkdtemp(prefix="kbroker-")
            self._owns_dir = True
        props["log.dirs"] = self._log_dirs
        self.data_dir = self._log_dirs.split(",")[0].strip()
        try:
            self.broker = Broker(BrokerConfig(props))
            await self.broker.start()
            for topic in self.topics:
                if self.broker.metadata.get_topic(topic.name) is None:    # a reopened dir
                    await self.create_topic(topic.name, topic.partitions, topic.config)
        except BaseException:
            await self.stop()
            raise
        return self

    async def stop(self) -> None:
        """The daemon's graceful shutdown, then the temporary dir goes. Safe to call twice."""
        broker, self.broker = self.broker, None
        try:
            if broker is not None:
                await broker.shutdown()
        finally:
            if self._owns_dir and self._log_dirs is not None:
                shutil.rmtree(self._log_dirs, ignore_errors=True)
                self._log_dirs, self._owns_dir = None, False     # a new one if started again

    async def __aenter__(self) -> "AsyncEmbeddedBroker":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    # -- where it is

    @property
    def port(self) -> int:
        if self.broker is None:
            raise RuntimeError("the embedded broker is not running")
        return self.broker.port

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __repr__(self) -> str:
        state = self.bootstrap_servers if self.broker is not None else "stopped"
        return f"<{type(self).__name__} {state} {self.data_dir}>"

    # -- helpers

    async def create_topic(self, name: str, partitions: int = -1, config: dict | None = None):
        """Create a topic through the TopicManager (CreateTopics' own path; partitions -1 means
        num.partitions) and return once its partitions are led here. Raises protocol.errors.KafkaError (e.g. TOPIC_ALREADY_EXISTS)."""
        configs = {k: _property_text(v) for k, v in (config or {}).items()}
        return await self.broker.topics.create_topic_async(name, partitions, configs=configs)

    def _client(self):
        from broker.client.cluster import ClusterClient
        return ClusterClient(self.bootstrap_servers, client_id="kbroker-embedded",
                             default_api_timeout_ms=10000)

    async def produce(self, topic: str, records, *, partition: int | None = None) -> list:
        """Produce values, (key, value) or (key, value, headers) tuples (str or bytes) in order;
        -> [RecordMetadata] once every record is acknowledged (acks=all)."""
        from broker.client.producer import Producer, _check_types
        if isinstance(records, (str, bytes, bytearray, dict)):
            # each character, byte or key would be a record of its own
            raise TypeError(f"records must be a list of values or (key, value[, headers]) "
                            f"tuples, not {type(records).__name__}")
        records = [_record(item) for item in records]
        for key, value, headers in records:     # all checked before any is sent
            _check_types(key, value, headers)
        async with self._client() as cluster:
            producer = Producer(cluster, linger_ms=0)
            try:
                futures = [await producer.send(topic, value, key, headers, partition)
                           for key, value, headers in records]
                await producer.flush()
                return [f.result() for f in futures]
            finally:
                await producer.close()

    async def read_all(self, topic: str, *, timeout: float = 10.0) -> list:
        """Every record in `topic` up to the current high watermark of each partition, ordered by
        partition then offset -> [broker.client.consumer.ConsumerRecord]."""
        from broker.client.admin import Admin, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
        from broker.client.consumer import Consumer
        from broker.client.types import TopicPartition
        async with self._client() as cluster:
            metadata = await cluster.topic_metadata(topic, refresh=True)
            tps = [TopicPartition(topic, p) for p in sorted(metadata.partitions)]
            admin = Admin(cluster)
            ends = {tp: r.offset for tp, r in
                    (await admin.list_offsets(dict.fromkeys(tps, LATEST_TIMESTAMP))).items()}
            starts = await admin.list_offsets(dict.fromkeys(tps, EARLIEST_TIMESTAMP))
            consumer = Consumer(cluster, auto_offset_reset="earliest", fetch_max_wait_ms=100)
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, starts[tp].offset)
            out = {tp: [] for tp in tps}
            deadline = time.monotonic() + timeout
            async def behind() -> bool:
                # the consumer's position (its next record not yet returned), not the fetch
                # position: a poll returns at most max.poll.records of what was fetched, and
                # stopping at the fetch position lost the rest (a partition with more than
                # 500 records came back short)
                for tp in tps:
                    if await consumer.position(tp) < ends[tp]:
                        return True
                return False
            try:
                while await behind():
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"read_all({topic!r}): the records below the high "
                                           f"watermarks {ends} did not arrive in {timeout} s")
                    for record in await consumer.poll(timeout_ms=200):
                        tp = TopicPartition(record.topic, record.partition)
                        if record.offset < ends[tp]:
                            out[tp].append(record)
            finally:
                await consumer.close()
            return [record for tp in tps for record in out[tp]]

    async def wait_for_committed(self, group_id: str, topic: str, offset: int, *,
                                 partition: int = 0, timeout: float = 10.0) -> int:
        """Wait until `group_id` has committed at least `offset` for topic-partition; -> the
        committed offset. Raises TimeoutError (with the last committed offset) otherwise."""
        from broker.client.admin import Admin
        from broker.client.types import TopicPartition
        tp = TopicPartition(topic, partition)
        committed = None
        deadline = time.monotonic() + timeout
        async with self._client() as cluster:
            admin = Admin(cluster)
            while True:
                found = await admin.fetch_offsets(group_id, [tp])
                committed = found[tp][0] if tp in found else None
                if committed is not None and committed >= offset:
                    return committed
                if time.monotonic() > deadline:
                    raise TimeoutError(f"group {group_id!r} committed {committed} for {tp}, "
                                       f"not {offset}, within {timeout} s")
                await asyncio.sleep(0.02)


class EmbeddedBroker:
    """The broker on its own event loop in a background thread: `with EmbeddedBroker() as b:`.

    Same arguments and helpers as `AsyncEmbeddedBroker`; the helpers block the caller. In an
    async test running on another loop, await `b.aio.<helper>(...)` instead."""

    def __init__(self, config: dict | None = None, *, topics=None, data_dir=None):
        self._async = AsyncEmbeddedBroker(config, topics=topics, data_dir=data_dir)
        self._loop = None
        self._thread = None
        self.aio = _Awaitables(self)

    def _submit(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _call(self, coro, timeout: float | None = None):
        if self._loop is None or threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("the embedded broker is not running" if self._loop is None else
                               "blocking helper called on the broker's own loop thread")
        return self._submit(coro).result(timeout)

    # -- lifecycle

    def start(self) -> "EmbeddedBroker":
        if self._thread is not None:
            raise RuntimeError("this embedded broker is already started")
        import uvloop
        self._loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="kbroker-embedded")
        self._thread.start()
        task = asyncio.run_coroutine_threadsafe(self._start_task(), self._loop).result()
        started = asyncio.run_coroutine_threadsafe(self._await(task), self._loop)
        try:
            started.result(START_TIMEOUT_S)
        except BaseException as exc:
            # A timeout or Ctrl-C: the start is cancelled, and its own clean-up (a stop: the
            # log dir lock, a temporary dir) has finished before the loop goes.
            try:
                asyncio.run_coroutine_threadsafe(self._cancel(task), self._loop).result(
                    STOP_TIMEOUT_S)
            except BaseException:      # noqa: BLE001 - the original error is what matters
                pass
            self._stop_loop()
            if isinstance(exc, concurrent.futures.TimeoutError):
                raise TimeoutError(f"the embedded broker did not start within "
                                   f"{START_TIMEOUT_S} s") from None
            raise
        return self

    async def _start_task(self):
        return asyncio.ensure_future(self._async.start())

    @staticmethod
    async def _await(task):
        return await asyncio.shield(task)

    async def _cancel(self, task) -> None:
        """Cancel the start and wait for it (it stops what it opened), then stop whatever is
        left (a start that had just finished)."""
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await self._async.stop()

    def stop(self) -> None:
        """Shut the broker down, then the loop and its thread. Safe to call twice."""
        if self._loop is None:
            return
        try:
            self._call(self._async.stop(), STOP_TIMEOUT_S)
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        try:
            asyncio.run_coroutine_threadsafe(loop.shutdown_default_executor(),
                                             loop).result(STOP_TIMEOUT_S)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(STOP_TIMEOUT_S)
            if not thread.is_alive():
                loop.close()

    def __enter__(self) -> "EmbeddedBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- where it is

    @property
    def broker(self):
        """The running broker.server.Broker (its loop is not the caller's: look, don't call)."""
        return self._async.broker

    @property
    def data_dir(self) -> str | None:
        return self._async.data_dir

    @property
    def port(self) -> int:
        return self._async.port

    @property
    def bootstrap_servers(self) -> str:
        return self._async.bootstrap_servers

    def __repr__(self) -> str:
        return repr(self._async).replace("AsyncEmbeddedBroker", "EmbeddedBroker", 1)

    # -- helpers (blocking)

    def create_topic(self, name: str, partitions: int = -1, config: dict | None = None):
        return self._call(self._async.create_topic(name, partitions, config))

    def produce(self, topic: str, records, *, partition: int | None = None) -> list:
        return self._call(self._async.produce(topic, records, partition=partition))

    def read_all(self, topic: str, *, timeout: float = 10.0) -> list:
        return self._call(self._async.read_all(topic, timeout=timeout))

    def wait_for_committed(self, group_id: str, topic: str, offset: int, *, partition: int = 0,
                           timeout: float = 10.0) -> int:
        return self._call(self._async.wait_for_committed(
            group_id, topic, offset, partition=partition, timeout=timeout))


class _Awaitables:
    """`EmbeddedBroker.aio`: the helpers as awaitables on the caller's loop (they run on the
    broker's loop; the caller's loop stays free, e.g. for an aiokafka consumer to commit)."""

    def __init__(self, owner: EmbeddedBroker):
        self._owner = owner

    def _run(self, coro):
        if self._owner._loop is None:
            coro.close()
            raise RuntimeError("the embedded broker is not running")
        return asyncio.wrap_future(self._owner._submit(coro))

    def create_topic(self, name: str, partitions: int = -1, config: dict | None = None):
        return self._run(self._owner._async.create_topic(name, partitions, config))

    def produce(self, topic: str, records, *, partition: int | None = None):
        return self._run(self._owner._async.produce(topic, records, partition=partition))

    def read_all(self, topic: str, *, timeout: float = 10.0):
        return self._run(self._owner._async.read_all(topic, timeout=timeout))

    def wait_for_committed(self, group_id: str, topic: str, offset: int, *, partition: int = 0,
                           timeout: float = 10.0):
        return self._run(self._owner._async.wait_for_committed(
            group_id, topic, offset, partition=partition, timeout=timeout))
