"""An asyncio producer: Kafka's default partitioner, batching per partition, compression, acks.

Theory of operation. ``send()`` picks the partition (explicit, else murmur2 of the key, else the
topic's sticky partition, which moves on after ``batch.size`` bytes, to one with a leader,
KIP-794) and appends the record to that partition's open batch (a storage
``RecordBatchBuilder``: records are encoded on append, so the batch size is exact). A batch is
*ready* when it reaches ``batch.size`` bytes, when ``linger.ms`` has passed since its first
record, or when ``flush()`` asks.

A single sender task wakes on readiness, groups ready batches by partition leader and sends one
Produce request per broker (at most ``max.in.flight.requests.per.connection`` at once per broker;
requests are pipelined on the connection). Each record's future resolves to its RecordMetadata
(offset = base_offset + index in batch). A retriable error (NOT_LEADER_OR_FOLLOWER, ...) refreshes
metadata and re-queues the batch until ``delivery.timeout.ms`` (a request sent and failed spends
one of ``retries``; a batch whose leader is unknown or unreachable spends none, as Java's waits
in the accumulator); any other error fails the futures.
With ``acks=0`` nothing comes back and offsets are reported as -1, like Kafka.

Without idempotence (``enable.idempotence=false``, or acks other than all: Java's rule) the
batches carry no producer id or sequences and retries may duplicate. A batch to retry goes back
at the head of the queue and its partition's later batches wait behind it; with
``max.in.flight.requests.per.connection=1`` a partition has one batch in flight at a time, so,
as with Java's producer, order is kept (with more in flight, a retry may land after later
batches).

With idempotence (Java's default) or a ``transactional.id``
(broker/client/transaction_manager.py), each batch carries the producer id, epoch and its partition's next sequence, and a partition has one
batch in flight at a time (batches of other partitions go meanwhile), so a retry is never
written twice and never overtaken. A transactional producer also registers each partition with
the transaction coordinator before its first batch of the transaction goes out, and
``commit_transaction()`` flushes, then ends the transaction (Java's ``KafkaProducer`` calls).
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict, deque
from typing import NamedTuple

from protocol.errors import RETRIABLE, ErrorCode, KafkaError
from protocol.messages import ProduceRequest
from storage.compression import Codec
from storage.record_batch import RecordBatchBuilder

from broker.client.errors import ClientError, KafkaTimeoutError
from broker.client.partitioner import StickyPartitionCache, partition_for_key
from broker.client.transaction_manager import TransactionError, TransactionManager
from broker.client.types import TopicPartition

log = logging.getLogger(__name__)

CODECS = {"none": Codec.NONE, "gzip": Codec.GZIP, "snappy": Codec.SNAPPY, "lz4": Codec.LZ4, "zstd": Codec.ZSTD}
RECORD_HEADER = 21             # a worst-case record header: what a record costs beyond its bytes
RECORD_OVERHEAD = 61 + RECORD_HEADER   # with the batch header, for the size checks


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int
    serialized_value_size: int


def _idempotence(asked: bool | None, transactional_id, acks: int, max_in_flight: int,
                 retries: int = 2**31 - 1) -> bool:
    """enable.idempotence as Java's producer settles it (ProducerConfig, Kafka 3.9): on unless
    set false; when not set, off with retries 0, acks other than all or more than 5 in flight;
    set true with one of those, a config error; off with a transactional.id, a config error."""
    conflict = None
    if asked is not False:
        if retries == 0:
            conflict = "Must set retries to non-zero when using the idempotent producer."
        elif acks != -1:
            conflict = ("Must set acks to all in order to use the idempotent producer. "
                        "Otherwise we cannot guarantee idempotence.")
        elif max_in_flight > 5:
            conflict = ("Must set max.in.flight.requests.per.connection to at most 5 to use the "
                        "idempotent producer.")
        if conflict is not None and asked:
            raise ValueError(conflict)
    enabled = asked is not False and conflict is None
    if not enabled and transactional_id is not None:
        raise ValueError("Cannot set a transactional.id without also enabling idempotence.")
    return enabled


_BYTES = (bytes, bytearray, memoryview)


def _check_types(key, value, headers, timestamp_ms=None) -> None:
    """A record's key and value are bytes (or None), its headers (str, bytes or None) pairs, its
    timestamp a non-negative int (or None): a value of another type failed only when its batch
    was encoded, in the sender, and every record of that batch waited for ever."""
    if timestamp_ms is not None and (type(timestamp_ms) is not int or timestamp_ms < 0):
        raise ValueError(f"Invalid timestamp: {timestamp_ms}. Timestamp should always be "
                         f"non-negative or null.")
    for name, item in (("key", key), ("value", value)):
        if item is not None and not isinstance(item, _BYTES):
            raise TypeError(f"a record's {name} must be bytes or None, not "
                            f"{type(item).__name__}")
    for header in headers:
        if not (isinstance(header, tuple) and len(header) == 2 and isinstance(header[0], str)
                and (header[1] is None or isinstance(header[1], _BYTES))):
            raise TypeError(f"a record's headers must be (str, bytes or None) pairs, not "
                            f"{header!r:.80}")


class _Batch:
    __slots__ = ("tp", "builder", "futures", "created", "attempts", "turns", "sizes", "encoded",
                 "held")

    def __init__(self, tp, compression):
        self.tp = tp
        self.builder = RecordBatchBuilder(compression=compression)
        self.futures = []
        self.sizes = []
        self.created = time.monotonic()
        self.attempts = 0       # sends that failed and were retried (counted against retries)
        self.turns = 0          # times set for another go, sent or not
        self.encoded = None     # the bytes sent, kept for retries (an idempotent batch's sequence)
        self.held = 0           # bytes of buffer.memory its records hold until it is answered


class Producer:
    def __init__(self, cluster, *, acks: int = -1, linger_ms: int = 5, batch_size: int = 16384,
                 compression_type: str = "none", max_request_size: int = 1048576,
                 request_timeout_ms: int = 30000, delivery_timeout_ms: int = 120000,
                 max_in_flight: int = 5, retry_backoff_ms: int = 100, auto_create_topics: bool = True,
                 retries: int = 2**31 - 1,
                 enable_idempotence: bool | None = None, transactional_id: str | None = None,
                 transaction_timeout_ms: int = 60000, max_block_ms: int = 60000,
                 buffer_memory: int = 33554432):
        if compression_type not in CODECS:
            raise ValueError(f"Invalid value {compression_type} for configuration compression.type: "
                             f"String must be one of: {', '.join(CODECS)}")
        if acks not in (-1, 0, 1):
            raise ValueError(f"Invalid value {acks} for configuration acks: String must be one of: all, -1, 0, 1")
        enable_idempotence = _idempotence(enable_idempotence, transactional_id, acks, max_in_flight,
                                          retries)
        self.retries = retries
        self.cluster = cluster
        self.acks = acks
        self.linger = linger_ms / 1000
        self.batch_size = batch_size
        self.codec = CODECS[compression_type]
        self.max_request_size = max_request_size
        self.request_timeout_ms = request_timeout_ms
        self.delivery_timeout = delivery_timeout_ms / 1000
        self.retry_backoff = retry_backoff_ms / 1000
        self.auto_create_topics = auto_create_topics
        self.buffer_memory = buffer_memory
        self.max_block = max_block_ms / 1000
        self._buffered = 0                  # bytes of the records not answered yet
        self._freed = asyncio.Event()
        self._reserve_lock = asyncio.Lock()     # senders waiting for room, first come first served
        self._reserve_waiting = 0               # ... and how many (none may overtake them)
        self._sticky = StickyPartitionCache()
        self._open: dict[TopicPartition, _Batch] = {}
        # closed batches waiting to be sent, per partition in order (Java's accumulator
        # deques): a sender turn looks at each partition's head, not at the whole backlog
        self._ready: dict[TopicPartition, deque] = {}
        self._in_flight: set[asyncio.Task] = set()
        self._backoff: dict[_Batch, asyncio.Task] = {}      # batches waiting to go again
        self._node_slots: dict[int, asyncio.Semaphore] = defaultdict(lambda: asyncio.Semaphore(max_in_flight))
        self._max_in_flight = max_in_flight
        self._txn = (TransactionManager(cluster, transactional_id,
                                        transaction_timeout_ms=transaction_timeout_ms,
                                        request_timeout_ms=request_timeout_ms,
                                        retry_backoff_ms=retry_backoff_ms, max_block_ms=max_block_ms)
                     if enable_idempotence else None)
        # Partitions whose next batch must wait (Java's Sender muting): one with a batch in
        # retry backoff (so later batches do not overtake it), and, with
        # max.in.flight.requests.per.connection=1 or idempotence, one with a batch in flight.
        self._one_per_partition = max_in_flight == 1 or self._txn is not None
        self._muted: dict[TopicPartition, int] = defaultdict(int)
        self._wakeup = asyncio.Event()
        self._sender: asyncio.Task | None = None
        self._closed = False
        self._closing = False       # close() has begun: no new record (Java's accumulator.close)
        self._sender_error: Exception | None = None
        self._outstanding: set[asyncio.Future] = set()
        self._dispatching: list = []            # taken from the queues, being handed out

    # --- public API ---------------------------------------------------------------------------

    async def send(self, topic: str, value: bytes | None, key: bytes | None = None, headers=(),
                   partition: int | None = None, timestamp_ms: int | None = None) -> asyncio.Future:
        """Queue one record; returns a future resolving to RecordMetadata (or raising KafkaError)."""
        self._check_open()
        _check_types(key, value, headers, timestamp_ms)
        if self._sender is None:
            self._sender = asyncio.get_running_loop().create_task(self._run())
        meta = await self.cluster.topic_metadata(topic, auto_create=self.auto_create_topics)
        count = len(meta.partitions)
        sticky = partition is None and key is None
        available = None
        if sticky:
            available = {p for p, info in meta.partitions.items()
                         if info is not None and getattr(info, "leader", 0) >= 0} or None
            partition = self._sticky.partition(topic, count, available)
        elif partition is None:
            partition = partition_for_key(key, count)
        elif not 0 <= partition < count:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"Partition {partition} of topic {topic} with partition count {count} is not present "
                             "in metadata")
        size = (len(key) if key else 0) + (len(value) if value else 0) + \
            sum(len(k) + (len(v) if v else 0) for k, v in headers)
        if size + RECORD_OVERHEAD > self.max_request_size:
            raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                             f"The message is {size + RECORD_OVERHEAD} bytes when serialized which is larger than "
                             f"{self.max_request_size}, which is the value of the max.request.size configuration.")
        if size + RECORD_OVERHEAD > self.buffer_memory:
            raise KafkaError(ErrorCode.MESSAGE_TOO_LARGE,
                             f"The message is {size + RECORD_OVERHEAD} bytes when serialized which is larger than "
                             f"the total memory buffer you have configured with the buffer.memory configuration.")
        held = size + RECORD_HEADER
        if await self._reserve(held):
            try:                    # it waited: closed, failed or committing meanwhile?
                self._check_open()
            except BaseException:
                self._unreserve(held)
                raise
        tp = TopicPartition(topic, partition)
        batch = self._open.get(tp)
        if batch is not None and batch.builder.size_in_bytes + held > self.batch_size and len(batch.builder):
            self._close_batch(batch)
            batch = None
        if batch is None:
            batch = self._open[tp] = _Batch(tp, self.codec)
        timestamp = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        try:
            batch.builder.append(timestamp, key, value, headers)
        except BaseException:
            self._unreserve(held)
            raise
        batch.held += held
        future = asyncio.get_running_loop().create_future()
        self._outstanding.add(future)
        future.add_done_callback(self._outstanding.discard)
        batch.futures.append((future, timestamp))
        batch.sizes.append((len(key) if key is not None else -1, len(value) if value is not None else -1))
        if sticky:
            self._sticky.record(topic, count, partition, held, self.batch_size, available)
        if batch.builder.size_in_bytes >= self.batch_size:
            self._close_batch(batch)
        elif len(batch.builder) == 1:
            self._wakeup.set()  # the sender must start the linger clock
        return future

    def _check_open(self) -> None:
        if self._closed or self._closing:
            raise ClientError("Cannot send after the producer is closed")
        if self._sender_error is not None:
            raise ClientError(f"The producer's sender failed: {self._sender_error!r}")
        if self._txn is not None:
            self._txn.check_send()

    async def send_and_wait(self, topic, value, key=None, headers=(), partition=None, timestamp_ms=None):
        return await (await self.send(topic, value, key, headers, partition, timestamp_ms))

    # --- transactions (Java's KafkaProducer calls) ---------------------------------------------

    async def init_transactions(self) -> None:
        """Get the producer id and epoch from the transaction coordinator, fencing an older
        producer with the same transactional.id and ending what it left open."""
        if self._txn is None or not self._txn.transactional:
            raise TransactionError("Cannot use initTransactions without a transactional.id")
        await self._txn.init()

    def begin_transaction(self) -> None:
        self._require_transactional().begin()

    async def commit_transaction(self) -> None:
        """Send what is queued, then commit; raises the first failure of the transaction's
        records instead (then only abort_transaction() may follow)."""
        txn = self._require_transactional()
        txn.begin_completing(commit=True)           # no send from here on
        await self.flush()
        await txn.end(commit=True)

    async def abort_transaction(self) -> None:
        """Drop what is not sent yet (its records fail), wait for what is in flight, abort."""
        txn = self._require_transactional()
        txn.begin_completing(commit=False)          # no send from here on
        self._fail_unsent(TransactionError("Failing batch since transaction was aborted"))
        while self._outstanding and self._sender_error is None:
            await asyncio.wait(list(self._outstanding))
        await txn.end(commit=False)

    def _fail_unsent(self, error: Exception) -> None:
        """Every batch not sent yet fails with `error` (Java's abortUndrainedBatches)."""
        for batch in self._queued():
            self._fail(batch, error, aborted=True)
        self._ready.clear()
        self._open.clear()
        for task in self._backoff.values():
            task.cancel()

    def _require_transactional(self) -> TransactionManager:
        if self._txn is None or not self._txn.transactional:
            raise TransactionError("Cannot use transactional methods without enabling "
                                   "transactions by setting the transactional.id")
        return self._txn

    async def flush(self) -> None:
        """Send everything queued and wait for every answer (errors stay in the record futures)."""
        # every record future not yet resolved, wherever its batch is (ready, being dispatched, in flight,
        # waiting for a retry); each one resolves or fails, so this ends. A record added meanwhile (a
        # send() that waited for buffer.memory) goes too, without waiting for linger.ms (Java's flush
        # makes every batch ready while it lasts)
        while True:
            for batch in list(self._open.values()):
                self._close_batch(batch)
            self._wakeup.set()
            if not self._outstanding or self._sender_error is not None:
                return
            await asyncio.wait(list(self._outstanding))

    async def close(self) -> None:
        if self._closed:
            return
        self._closing = True
        try:
            await self.flush()
            if self._txn is not None and self._txn.open:
                # Java's Sender on a graceful close: "Aborting incomplete transaction due to
                # shutdown", so read_committed consumers need not wait for its timeout
                log.info("Aborting incomplete transaction due to shutdown")
                try:
                    await self.abort_transaction()
                except (KafkaError, ClientError) as e:
                    # the coordinator aborts it when transaction.timeout.ms passes
                    log.warning("Aborting the incomplete transaction failed: %s", e)
        finally:
            self._closed = True
            if self._sender is not None:
                self._sender.cancel()
                try:
                    await self._sender
                except (asyncio.CancelledError, Exception):
                    pass

    # --- buffer.memory ------------------------------------------------------------------------

    async def _reserve(self, nbytes: int) -> bool:
        """Wait, up to max.block.ms, until `nbytes` more fit in buffer.memory (Java's BufferPool
        blocks send() the same way, its waiters served in arrival order); the bytes are counted
        as the record is added to a batch and given back when the batch is answered. Meanwhile
        every open batch is sent, as Java's accumulator drains batches at once when the pool is
        exhausted. True when it had to wait."""
        if not self._reserve_waiting and (
                self._buffered + nbytes <= self.buffer_memory or not self._buffered):
            self._buffered += nbytes
            return False
        self._reserve_waiting += 1
        try:
            async with asyncio.timeout(self.max_block), self._reserve_lock:
                while self._buffered + nbytes > self.buffer_memory and self._buffered:
                    for batch in list(self._open.values()):
                        self._close_batch(batch)
                    self._freed.clear()
                    await self._freed.wait()
                    if self._sender_error is not None:
                        raise ClientError(f"The producer's sender failed: {self._sender_error!r}")
                self._buffered += nbytes
                return True
        except TimeoutError:
            raise KafkaTimeoutError(
                f"Failed to allocate {nbytes} bytes within the configured max blocking time "
                f"{self.max_block * 1000:.0f} ms. Total memory: {self.buffer_memory} bytes. "
                f"Available memory: {max(self.buffer_memory - self._buffered, 0)} bytes.") from None
        finally:
            self._reserve_waiting -= 1

    def _unreserve(self, nbytes: int) -> None:
        self._buffered -= nbytes
        self._freed.set()

    def _release(self, batch: _Batch) -> None:
        if batch.held:
            self._unreserve(batch.held)
            batch.held = 0

    # --- batching -----------------------------------------------------------------------------

    def _close_batch(self, batch: _Batch) -> None:
        if self._open.get(batch.tp) is batch:
            del self._open[batch.tp]
        if not len(batch.builder):
            return
        self._enqueue(batch)
        self._wakeup.set()

    def _enqueue(self, batch: _Batch, first: bool = False) -> None:
        """Into its partition's ready queue: at the tail, or at the head (`first`) when it was
        taken from there and goes back."""
        queue = self._ready.setdefault(batch.tp, deque())
        if first:
            queue.appendleft(batch)
        else:
            queue.append(batch)

    def _queued(self) -> list:
        """Every batch not sent yet: ready ones, then open ones, and those in retry backoff
        (Java's accumulator holds them too: abortTransaction fails them with the rest)."""
        return ([b for queue in self._ready.values() for b in queue] + list(self._open.values())
                + list(self._backoff))

    async def _run(self) -> None:
        try:
            await self._sender_loop()
        except asyncio.CancelledError:
            raise
        except Exception as e:   # a bug: fail every waiting record instead of leaving flush() hanging
            self._sender_error = e
            for batch in self._queued() + self._dispatching:
                self._fail(batch, e)
            self._ready.clear()
            self._freed.set()    # a send() waiting for room sees the failure
            self._open.clear()
            raise

    async def _sender_loop(self) -> None:
        while True:
            # cleared first: what happens from here on (a batch closed, a slot or a partition
            # freed) wakes the wait below
            self._wakeup.clear()
            now = time.monotonic()
            timeout = None
            for batch in list(self._open.values()):
                due = batch.created + self.linger
                if due <= now:
                    self._close_batch(batch)
                else:
                    timeout = due - now if timeout is None else min(timeout, due - now)
            ready = self._sendable()
            self._dispatching = ready
            sent = bool(ready) and await self._dispatch(ready)
            self._dispatching = []
            if sent:
                continue
            try:
                async with asyncio.timeout(timeout):      # not wait_for: it can swallow a cancel
                    await self._wakeup.wait()
            except asyncio.TimeoutError:
                pass

    def _sendable(self) -> list:
        """The ready batches that may go now, each partition's oldest first; the others stay
        queued: a muted partition's, and those past what could be in flight. A request carries
        one batch of a partition and a broker takes max.in.flight requests, so a partition
        sends at most that many batches at once (one with idempotence), as Java's drain takes
        a partition's first batch for each request. A turn costs the number of partitions,
        whatever the backlog (one queue of all batches, scanned and sorted at every turn, made
        a long run quadratic)."""
        out = []
        limit = 1 if self._one_per_partition else self._max_in_flight
        for tp in list(self._ready):
            if tp in self._muted:
                continue
            queue = self._ready[tp]
            for _ in range(min(limit, len(queue))):
                out.append(queue.popleft())
            if not queue:
                del self._ready[tp]
        return out

    def _mute(self, tp) -> None:
        self._muted[tp] += 1

    def _unmute(self, tp) -> None:
        self._muted[tp] -= 1
        if self._muted[tp] <= 0:
            del self._muted[tp]
        self._wakeup.set()

    async def _dispatch(self, batches: list) -> int:
        """Sends what it can; returns the number of requests sent. A broker whose in-flight
        requests are at max.in.flight keeps its batches queued while the others' go (Java's
        Sender sends to the nodes that are ready): one slow broker does not hold up all."""
        sent = 0
        held = []
        by_node = defaultdict(list)
        for batch in batches:
            try:
                node = await self.cluster.leader_for(batch.tp.topic, batch.tp.partition)
            except (KafkaError, ClientError) as e:
                self._retry_or_fail(batch, e, sent=False)       # no leader known: not sent
                continue
            by_node[node].append(batch)
        for node, group in by_node.items():
            # A Produce request carries at most one batch per partition (Kafka rejects more), so batches
            # of the same partition go in successive requests, in order.
            rounds: list[list] = []
            depth: dict = defaultdict(int)
            for batch in group:                 # a partition's k-th batch goes in request k
                k = depth[batch.tp]
                depth[batch.tp] = k + 1
                if k == len(rounds):
                    rounds.append([])
                rounds[k].append(batch)
            for i, requests_batches in enumerate(rounds):
                slots = self._node_slots[node]
                if slots.locked():
                    held.extend(b for r in rounds[i:] for b in r)
                    break
                await slots.acquire()
                sent += 1
                if self._one_per_partition:
                    for batch in requests_batches:
                        self._mute(batch.tp)
                task = asyncio.get_running_loop().create_task(self._send(node, requests_batches))
                self._in_flight.add(task)
                turns = [b.turns for b in requests_batches]
                task.add_done_callback(lambda t, s=slots, b=requests_batches, n=turns:
                                       self._sent(t, s, b, n))
        for batch in reversed(held):
            # back at the head of its partition's queue, in their order
            self._enqueue(batch, first=True)
        return sent

    def _sent(self, task, slots, batches, turns) -> None:
        self._in_flight.discard(task)
        slots.release()
        self._wakeup.set()
        if self._one_per_partition:
            for batch in batches:
                self._unmute(batch.tp)
        if not task.cancelled() and task.exception() is not None:
            # a bug: its records fail with it rather than leave flush() waiting for ever (those
            # answered or set for a retry before it are left as they are)
            log.error("Sending %d batch(es) failed", len(batches), exc_info=task.exception())
            for batch, before in zip(batches, turns):
                answered = all(future.done() for future, _ in batch.futures)
                if not answered and batch.turns == before:
                    self._fail(batch, task.exception())

    async def _send(self, node: int, batches: list) -> None:
        if self._txn is not None and self._txn.failed is not None:
            # the transaction can only abort now: what was not sent fails with its error
            # (Java's abortUndrainedBatches), not as later sequences the broker refuses
            error = TransactionError(f"Failing batch since transaction was aborted: "
                                     f"{self._txn.failed}")
            for batch in batches:
                self._fail(batch, error, aborted=True)
            self._fail_unsent(error)
            return
        if self._txn is not None:
            try:
                await self._txn.ensure_producer_id()
                await self._txn.add_partitions([b.tp for b in batches])
            except (KafkaError, ClientError) as e:
                for batch in batches:
                    self._retry_or_fail(batch, e, sent=False)
                return
        try:
            conn = await self.cluster.connection(node)
        except (KafkaError, ClientError) as e:
            for batch in batches:                   # the leader cannot be reached: not sent
                self._retry_or_fail(batch, e, sent=False)
            return
        by_topic = defaultdict(list)
        for batch in batches:
            by_topic[batch.tp.topic].append(batch)
        R = ProduceRequest
        request = R(acks=self.acks, timeout_ms=self.request_timeout_ms,
                    transactional_id=self._txn.transactional_id if self._txn else None, topic_data=[
            R.TopicProduceData(name=topic, partition_data=[
                R.PartitionProduceData(index=b.tp.partition, records=self._encoded(b)) for b in group])
            for topic, group in by_topic.items()])
        try:
            response = await conn.send(request, expect_response=self.acks != 0,
                                       timeout=self.request_timeout_ms / 1000 + 5)
        except (KafkaError, ClientError) as e:
            for batch in batches:
                self._retry_or_fail(batch, e)
            return
        if response is None:  # acks=0
            for batch in batches:
                self._complete(batch, -1, -1)
            return
        results = {(t.name, p.index): p for t in response.responses for p in t.partition_responses}
        for batch in batches:
            p = results.get(batch.tp)
            if p is None:
                self._fail(batch, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no answer for {batch.tp}"))
            elif p.error_code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER and self._txn is not None:
                # written before (a retry of a batch whose answer was lost): Java's success
                self._complete(batch, p.base_offset, getattr(p, "log_append_time_ms", -1))
            elif p.error_code:
                # a code this client does not know is UNKNOWN_SERVER_ERROR, as Java's Errors
                try:
                    code = ErrorCode(p.error_code)
                    fallback = code.name
                except ValueError:
                    code = ErrorCode.UNKNOWN_SERVER_ERROR
                    fallback = f"unknown error code {p.error_code}"
                message = getattr(p, "error_message", None) or fallback
                self._retry_or_fail(batch, KafkaError(code, message))
            else:
                self._complete(batch, p.base_offset, getattr(p, "log_append_time_ms", -1))

    def _complete(self, batch: _Batch, base_offset: int, log_append_time: int) -> None:
        self._release(batch)
        for i, ((future, timestamp), (ks, vs)) in enumerate(zip(batch.futures, batch.sizes)):
            if not future.done():
                ts = log_append_time if log_append_time is not None and log_append_time >= 0 else timestamp
                future.set_result(RecordMetadata(batch.tp.topic, batch.tp.partition,
                                                 base_offset + i if base_offset >= 0 else -1, ts, ks, vs))

    def _encoded(self, batch: _Batch) -> bytes:
        """The batch's bytes, made on its first send and sent as they are on a retry: an
        idempotent batch gets the producer id, epoch and its partition's next sequence then."""
        if batch.encoded is None:
            builder = batch.builder
            txn = self._txn
            if txn is not None:
                txn.maybe_bump_epoch()
                builder.producer_id, builder.producer_epoch = txn.producer_id, txn.epoch
                builder.base_sequence = txn.next_sequence(batch.tp, len(builder))
                builder.is_transactional = txn.transactional
            batch.encoded = builder.build()
        return batch.encoded

    def _fail(self, batch: _Batch, error: Exception, *, aborted: bool = False) -> None:
        self._release(batch)
        for future, _ in batch.futures:
            if not future.done():
                future.set_exception(error)
        if self._txn is not None:
            self._txn.batch_failed(error, sequenced=batch.encoded is not None, aborted=aborted)

    def _retry_or_fail(self, batch: _Batch, error: Exception, sent: bool = True) -> None:
        """After a retriable `error`, the batch goes again after a backoff, until
        delivery.timeout.ms; else its records fail. Only a batch that was `sent` spends one of
        its `retries`: one whose leader is unknown or cannot be connected to waits for a new
        leader, as Java's Sender leaves it in the accumulator while the node is not ready."""
        retriable = (isinstance(error, KafkaError) and int(error.error_code) in RETRIABLE) or \
                    (isinstance(error, ClientError) and error.retriable)
        if not retriable or time.monotonic() - batch.created > self.delivery_timeout \
                or (sent and batch.attempts >= self.retries):
            if retriable and (not sent or batch.attempts < self.retries):
                error = KafkaTimeoutError(f"Expiring {len(batch.builder)} record(s) for {batch.tp}: "
                                          f"delivery timeout elapsed ({error})")
            self._fail(batch, error)
            return
        if sent:
            batch.attempts += 1
        batch.turns += 1
        self._mute(batch.tp)          # later batches of the partition wait behind it (Java)

        async def later():
            try:
                await asyncio.sleep(self.retry_backoff * min(max(batch.attempts, 1), 10))
                try:
                    await self.cluster.refresh_metadata([batch.tp.topic])
                except (KafkaError, ClientError):
                    pass
            finally:
                self._backoff.pop(batch, None)
                if not all(future.done() for future, _ in batch.futures):     # not failed meanwhile
                    # back at the head of its partition's queue, as Java's reenqueue
                    self._enqueue(batch, first=True)
                self._unmute(batch.tp)
        task = asyncio.get_running_loop().create_task(later())
        self._backoff[batch] = task
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)
