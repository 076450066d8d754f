"""The built-in producer's order under retries, against a fake broker that fails the first
Produce with a retriable error (a transient ISR shrink)."""
import asyncio
from types import SimpleNamespace as NS

from broker.client.errors import ClientError, KafkaConnectionError, KafkaTimeoutError
from broker.client.producer import Producer
from protocol.errors import ErrorCode, KafkaError
from storage.record_batch import iter_batches


class FlakyBroker:
    """One broker, one partition; Produce number `fail_on` answers NOT_ENOUGH_REPLICAS."""

    def __init__(self, fail_on=(1,)):
        self.log, self.calls, self.fail_on = [], 0, set(fail_on)

    async def topic_metadata(self, topic, auto_create=False):
        return NS(partitions={0: None})

    async def leader_for(self, topic, partition):
        return 0

    async def refresh_metadata(self, topics=None):
        pass

    async def connection(self, node):
        """The producer sends through the leader's connection (ClusterClient.connection)."""
        return NS(send=lambda request, **kwargs: self.send(node, request, **kwargs))

    async def send(self, node, request, **kwargs):
        self.calls += 1
        call = self.calls
        await asyncio.sleep(0.01)
        out = []
        for td in request.topic_data:
            parts = []
            for pd in td.partition_data:
                if call in self.fail_on:
                    parts.append(NS(index=pd.index, error_code=19, error_message=None,
                                    base_offset=-1))
                else:
                    values = [r.value for b in iter_batches(pd.records) for r in b.records()]
                    parts.append(NS(index=pd.index, error_code=0, base_offset=len(self.log),
                                    log_append_time_ms=-1))
                    self.log += values
            out.append(NS(name=td.name, partition_responses=parts))
        return NS(responses=out)


async def produce(broker, count, **settings):
    producer = Producer(broker, batch_size=100, linger_ms=0, retry_backoff_ms=10,
                        enable_idempotence=False, **settings)
    futures = [await producer.send("t", b"m%d" % i, partition=0) for i in range(count)]
    await producer.flush()
    await producer.close()
    return [f.result() for f in futures]


def test_one_in_flight_keeps_the_order_through_a_retry():
    """Java: max.in.flight.requests.per.connection=1 keeps order (the retried batch was sent
    after the ones queued behind it)."""
    broker = FlakyBroker()
    asyncio.run(produce(broker, 4, max_in_flight=1))
    assert broker.log == [b"m0", b"m1", b"m2", b"m3"]


def test_a_batch_in_backoff_holds_its_partitions_later_batches():
    """With more in flight, batches queued after a retried one wait behind it (its partition
    is muted during the backoff, and it goes back at the head of the queue)."""
    broker = FlakyBroker(fail_on=(1,))

    async def go():
        producer = Producer(broker, batch_size=100, linger_ms=0, retry_backoff_ms=50,
                            max_in_flight=5, enable_idempotence=False)
        first = await producer.send("t", b"m0", partition=0)
        while broker.calls < 1:
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.02)                    # m0 failed, in its backoff
        rest = [await producer.send("t", b"m%d" % i, partition=0) for i in (1, 2)]
        await producer.flush()
        await producer.close()
        return [first.result(), *(f.result() for f in rest)]
    asyncio.run(go())
    assert broker.log == [b"m0", b"m1", b"m2"]


def test_a_slow_broker_does_not_hold_up_the_others():
    """Java's Sender sends to the brokers that are ready: with node 0's requests all in flight
    (slow), a record for node 1 goes at once (it waited behind node 0's slot)."""
    class TwoBrokers(FlakyBroker):
        async def topic_metadata(self, topic, auto_create=False):
            return NS(partitions={0: None, 1: None, 2: None})

        async def leader_for(self, topic, partition):
            return partition % 2                  # partitions 0 and 2 on node 0

        async def send(self, node, request, **kwargs):
            if node == 0:
                await asyncio.sleep(0.5)
            return await super().send(node, request, **kwargs)

    async def go():
        broker = TwoBrokers(fail_on=())
        producer = Producer(broker, batch_size=100, linger_ms=0, max_in_flight=1,
                            enable_idempotence=False)
        slow = [await producer.send("t", b"s0", partition=0)]
        await asyncio.sleep(0.05)                 # node 0's one request is in flight
        loop = asyncio.get_running_loop()
        started = loop.time()
        slow.append(await producer.send("t", b"s2", partition=2))     # waits for node 0
        fast = await producer.send("t", b"f", partition=1)
        await asyncio.wait_for(asyncio.shield(fast), 5)
        took = loop.time() - started
        await producer.flush()
        await producer.close()
        assert all(f.result() for f in slow)
        return took
    assert asyncio.run(go()) < 0.3


def test_a_backlog_goes_out_a_few_batches_per_partition_at_a_time():
    """Without idempotence a partition sends at most max.in.flight batches at once (one per
    request, as Java's drain): the sender took a backlog of thousands whole each time and
    spent time quadratic in it (kafka-producer-perf-test.sh with acks=1 ran at 1 MB/s, its
    CPU all in the sender)."""
    class TwoPartitions(FlakyBroker):
        async def topic_metadata(self, topic, auto_create=False):
            return NS(partitions={0: None, 1: None})

    async def go():
        broker = TwoPartitions(fail_on=())
        producer = Producer(broker, batch_size=100, linger_ms=0, max_in_flight=5,
                            enable_idempotence=False)
        taken = []
        dispatch = producer._dispatch

        async def counted(batches):
            taken.append(len(batches))
            return await dispatch(batches)
        producer._dispatch = counted
        futures = [await producer.send("t", b"m%d" % i, partition=i % 2) for i in range(600)]
        await producer.flush()
        await producer.close()
        return broker, taken, [f.result() for f in futures]
    broker, taken, results = asyncio.run(go())
    assert max(taken) <= 5 * 2
    assert sorted(broker.log) == sorted(b"m%d" % i for i in range(600))
    for p in (0, 1):
        mine = [v for v in broker.log if int(v[1:]) % 2 == p]
        assert mine == [b"m%d" % i for i in range(p, 600, 2)]
    assert [r.partition for r in results] == [i % 2 for i in range(600)]


def test_buffer_memory_holds_send_until_the_broker_answers():
    """buffer.memory as Java's BufferPool: send() waits while the records not yet answered
    fill it (the tools' memory grew with their input: 934 MB for 8,000 records of 100 KB),
    sends what is open meanwhile, and gives up after max.block.ms."""
    async def go():
        broker = FlakyBroker(fail_on=())
        producer = Producer(broker, batch_size=100_000, linger_ms=60_000, max_in_flight=5,
                            enable_idempotence=False, buffer_memory=5_000)
        peak = 0
        futures = []
        for i in range(200):
            futures.append(await producer.send("t", b"v" * 200, partition=0))
            peak = max(peak, producer._buffered)
        await producer.flush()
        await producer.close()
        assert producer._buffered == 0
        return peak, [f.result().offset for f in futures]
    peak, offsets = asyncio.run(go())
    assert peak <= 5_000 and offsets == list(range(200))


def test_buffer_memory_full_past_max_block_ms_fails_the_send():
    class Silent(FlakyBroker):
        async def send(self, node, request, **kwargs):
            await asyncio.sleep(30)

    async def go():
        producer = Producer(Silent(), linger_ms=0, enable_idempotence=False,
                            buffer_memory=1_000, max_block_ms=100)
        await producer.send("t", b"v" * 500, partition=0)
        try:
            await producer.send("t", b"v" * 500, partition=0)
        except KafkaTimeoutError as e:
            return str(e)           # asyncio.run cancels the request still waiting
    message = asyncio.run(go())
    assert message.startswith("Failed to allocate 521 bytes within the configured max blocking "
                              "time 100 ms.")


def test_a_record_larger_than_buffer_memory_is_refused():
    async def go():
        producer = Producer(FlakyBroker(), enable_idempotence=False, buffer_memory=1_000)
        try:
            await producer.send("t", b"v" * 2_000, partition=0)
        except KafkaError as e:
            return e
        finally:
            await producer.close()
    error = asyncio.run(go())
    assert error.error_code == ErrorCode.MESSAGE_TOO_LARGE and "buffer.memory" in error.message


def test_senders_waiting_for_buffer_memory_go_in_arrival_order():
    """A record that would fit does not overtake one already waiting for room (Java's
    BufferPool serves its waiters in order)."""
    async def go():
        broker = FlakyBroker(fail_on=())
        producer = Producer(broker, batch_size=100_000, linger_ms=60_000,
                            enable_idempotence=False, buffer_memory=1_000)
        first = await producer.send("t", b"a" * 500, partition=0)
        waiting = asyncio.ensure_future(producer.send("t", b"b" * 500, partition=0))
        await asyncio.sleep(0)                       # it waits for room
        small = asyncio.ensure_future(producer.send("t", b"c", partition=0))
        futures = [first, await waiting, await small]
        await producer.flush()
        await producer.close()
        return [f.result().offset for f in futures]
    assert asyncio.run(go()) == [0, 1, 2]


def test_a_record_of_the_wrong_type_is_refused_by_send():
    async def go():
        producer = Producer(FlakyBroker(), enable_idempotence=False)
        errors = []
        for key, value, headers in ((None, "text", ()), (b"k", 5, ()),
                                    (None, b"v", [(b"bytes-key", b"v")]), (None, b"v", [("h",)])):
            try:
                await producer.send("t", value, key, headers, partition=0)
            except TypeError as e:
                errors.append(str(e))
        await producer.close()
        return errors
    assert asyncio.run(go()) == [
        "a record's value must be bytes or None, not str",
        "a record's value must be bytes or None, not int",
        "a record's headers must be (str, bytes or None) pairs, not (b'bytes-key', b'v')",
        "a record's headers must be (str, bytes or None) pairs, not ('h',)"]


def test_a_failure_inside_the_sender_fails_its_records_instead_of_hanging():
    class Broken(FlakyBroker):
        async def send(self, node, request, **kwargs):
            raise RuntimeError("a bug")

    async def go():
        producer = Producer(Broken(), enable_idempotence=False)
        future = await producer.send("t", b"v", partition=0)
        await asyncio.wait_for(producer.flush(), 5)
        await producer.close()
        return future.exception()
    assert str(asyncio.run(go())) == "a bug"


def test_a_bad_timestamp_is_refused_and_holds_no_memory():
    async def go():
        producer = Producer(FlakyBroker(), enable_idempotence=False)
        for bad in (1.5e12, -1, True):
            try:
                await producer.send("t", b"v", partition=0, timestamp_ms=bad)
            except ValueError as e:
                assert "Invalid timestamp" in str(e)
        await producer.close()
        return producer._buffered
    assert asyncio.run(go()) == 0


def test_an_unknown_error_code_fails_only_its_own_record():
    """Java reads a code it does not know as UNKNOWN_SERVER_ERROR; the other partitions of the
    request are answered as usual (a retriable one retried and written, reported written)."""
    class Odd(FlakyBroker):
        async def topic_metadata(self, topic, auto_create=False):
            return NS(partitions={0: None, 1: None})

        async def send(self, node, request, **kwargs):
            self.calls += 1
            out = []
            for td in request.topic_data:
                parts = []
                for pd in td.partition_data:
                    code = (19 if self.calls == 1 else 0) if pd.index == 0 else 9999
                    parts.append(NS(index=pd.index, error_code=code, error_message=None,
                                    base_offset=0 if code == 0 else -1, log_append_time_ms=-1))
                out.append(NS(name=td.name, partition_responses=parts))
            return NS(responses=out)

    async def go():
        producer = Producer(Odd(), linger_ms=50, retry_backoff_ms=10, enable_idempotence=False)
        a = await producer.send("t", b"a", partition=0)
        b = await producer.send("t", b"b", partition=1)
        await asyncio.wait_for(producer.flush(), 5)
        await producer.close()
        return a, b
    a, b = asyncio.run(go())
    assert a.result().offset == 0
    assert b.exception().error_code == ErrorCode.UNKNOWN_SERVER_ERROR


def test_a_send_waiting_for_memory_learns_that_the_sender_failed():
    class NoLeader(FlakyBroker):
        async def leader_for(self, topic, partition):
            raise RuntimeError("a bug")

    async def go():
        producer = Producer(NoLeader(), linger_ms=0, enable_idempotence=False,
                            buffer_memory=1_000, max_block_ms=10_000)
        first = await producer.send("t", b"v" * 500, partition=0)
        try:
            await producer.send("t", b"v" * 500, partition=0)
        except ClientError as e:
            return first.exception(), e
    first, second = asyncio.run(go())
    assert str(first) == "a bug"
    assert not isinstance(second, KafkaTimeoutError) and "sender failed" in str(second)


def test_a_send_that_waited_for_memory_during_close_is_refused_and_close_ends():
    async def go():
        producer = Producer(FlakyBroker(fail_on=()), batch_size=100_000, linger_ms=60_000,
                            enable_idempotence=False, buffer_memory=1_000)
        first = await producer.send("t", b"a" * 500, partition=0)
        waiting = asyncio.ensure_future(producer.send("t", b"b" * 500, partition=0))
        await asyncio.sleep(0)
        await asyncio.wait_for(producer.close(), 5)
        try:
            await waiting
        except ClientError as e:
            return first.result().offset, str(e)
    assert asyncio.run(go()) == (0, "Cannot send after the producer is closed")


def test_a_batch_not_sent_spends_none_of_its_retries():
    """Java's Sender leaves a batch in the accumulator while its leader is unknown or cannot
    be connected to (a leader just killed): only a request sent counts against `retries`, and
    delivery.timeout.ms bounds the wait. With retries=0 the records wait for the new leader;
    they used to fail at the first refused connection (kafka-console-producer.sh, retries=3,
    lost 403 of 3,000 lines across a kill -9 of a leader)."""
    class Failover(FlakyBroker):
        def __init__(self):
            super().__init__(fail_on=())
            self.no_leader = 3
            self.refused = 3

        async def leader_for(self, topic, partition):
            if self.no_leader:
                self.no_leader -= 1
                raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, "no leader yet")
            return 0

        async def connection(self, node):
            if self.refused:
                self.refused -= 1
                raise KafkaConnectionError("Connection to node 0 could not be established")
            return await super().connection(node)

    async def go(broker, **settings):
        producer = Producer(broker, linger_ms=0, retry_backoff_ms=5, retries=0,
                            enable_idempotence=False, **settings)
        future = await producer.send("t", b"m0", partition=0)
        await asyncio.wait_for(producer.flush(), 5)
        await producer.close()
        return future
    broker = Failover()
    assert asyncio.run(go(broker)).result().offset == 0
    assert (broker.no_leader, broker.refused, broker.log) == (0, 0, [b"m0"])
    # a request that was sent and failed spends a retry: with none, it fails
    broker = FlakyBroker(fail_on=(1,))
    error = asyncio.run(go(broker)).exception()
    assert error.error_code == ErrorCode.NOT_ENOUGH_REPLICAS and broker.log == []
    # and a batch never sent still expires at delivery.timeout.ms
    broker = Failover()
    broker.refused = 10**9
    error = asyncio.run(go(broker, delivery_timeout_ms=100, request_timeout_ms=50)).exception()
    assert isinstance(error, KafkaTimeoutError) and "delivery timeout" in str(error)


def test_abort_fails_a_batch_waiting_to_be_retried():
    """A batch in retry backoff is still in Java's accumulator, so abortTransaction fails it
    with the rest ("Failing batch since transaction was aborted") and the abort ends at once.
    It used to go out again after its backoff, inside the transaction being aborted, and the
    abort waited for it (here for ever: every Produce is answered NOT_ENOUGH_REPLICAS)."""
    from broker.client.transaction_manager import TransactionError

    class Coordinator(FlakyBroker):
        """Also the transaction coordinator: InitProducerId, AddPartitionsToTxn and EndTxn
        succeed; every Produce fails with a retriable error."""
        def __init__(self):
            super().__init__(fail_on=range(1, 10**6))
            self.requests = []

        async def find_coordinator(self, key, key_type=0):
            return 0

        async def send(self, node, request, **kwargs):
            kind = type(request).__name__
            self.requests.append(kind)
            if kind == "InitProducerIdRequest":
                return NS(error_code=0, producer_id=7, producer_epoch=0)
            if kind in ("AddPartitionsToTxnRequest", "EndTxnRequest"):
                return NS(error_code=0, results_by_topic_v3_and_below=[])
            return await super().send(node, request, **kwargs)

    async def go():
        broker = Coordinator()
        producer = Producer(broker, linger_ms=0, retry_backoff_ms=5_000, transactional_id="t")
        await producer.init_transactions()
        producer.begin_transaction()
        record = await producer.send("t", b"never", partition=0)
        while broker.calls < 1:                     # answered NOT_ENOUGH_REPLICAS
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.05)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.wait_for(producer.abort_transaction(), 3)
        took = loop.time() - started
        producer.begin_transaction()                # the producer goes on
        await producer.commit_transaction()
        await producer.close()
        return record.exception(), took, broker
    error, took, broker = asyncio.run(go())
    assert isinstance(error, TransactionError) and "aborted" in str(error), error
    assert took < 1
    # one Produce, then the abort, and (its sequence spent) a new epoch (KIP-360)
    assert broker.requests == ["InitProducerIdRequest", "AddPartitionsToTxnRequest",
                               "ProduceRequest", "EndTxnRequest", "InitProducerIdRequest"]
