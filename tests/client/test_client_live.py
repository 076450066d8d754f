"""The project's client against a live broker: negotiation, pipelining, partitioning, compression,
groups with the assignors, and interop with kafka-python / confluent-kafka."""
import asyncio
import itertools
import time

import confluent_kafka
import kafka
import pytest

from broker.client.admin import Admin, NewTopic
from broker.client.cluster import ClusterClient
from broker.client.connection import BrokerConnection
from broker.client.consumer import Consumer
from broker.client.errors import KafkaConnectionError
from broker.client.partitioner import partition_for_key
from broker.client.producer import Producer
from broker.client.types import TopicPartition
from protocol.errors import ErrorCode, KafkaError
from protocol.messages import MetadataRequest


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def create(cluster, name, partitions):
    result = await Admin(cluster).create_topics([NewTopic(name, partitions, 1)])
    assert result[name][0] in (0, ErrorCode.TOPIC_ALREADY_EXISTS)


def test_versions_negotiated_and_requests_pipelined(client_broker):
    async def go():
        host, port = client_broker.bootstrap.split(":")
        conn = await BrokerConnection(host, int(port)).connect()
        assert conn.api_versions[18][1] >= 3        # ApiVersions
        version = conn.pick_version(MetadataRequest)
        assert version == min(MetadataRequest.MAX_VERSION, conn.api_versions[3][1])
        # 50 requests in flight on one connection, answered and matched by correlation id
        responses = await asyncio.gather(*(conn.send(MetadataRequest(topics=[])) for _ in range(50)))
        assert all(r.brokers for r in responses)
        await conn.close()
        with pytest.raises(KafkaConnectionError):
            await conn.send(MetadataRequest(topics=[]))
    run(go())


def test_keyed_records_follow_default_partitioner_and_compression(client_broker):
    async def go():
        async with ClusterClient(client_broker.bootstrap) as cluster:
            await create(cluster, "keyed", 4)
            for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
                producer = Producer(cluster, compression_type=codec, linger_ms=5)
                futures = [await producer.send("keyed", b"%s-%d" % (codec.encode(), i), key=b"key-%d" % i,
                                               headers=[("codec", codec.encode())]) for i in range(40)]
                await producer.flush()
                metas = [f.result() for f in futures]
                for i, meta in enumerate(metas):
                    assert meta.partition == partition_for_key(b"key-%d" % i, 4)
                await producer.close()
            consumer = Consumer(cluster, auto_offset_reset="earliest")
            consumer.assign([TopicPartition("keyed", p) for p in range(4)])
            records = []
            for _ in range(50):
                records += await consumer.poll(200)
                if len(records) >= 200:
                    break
            assert len(records) == 200
            for r in records:
                assert r.partition == partition_for_key(r.key, 4)
                codec = dict(r.headers)["codec"]
                assert r.value.startswith(codec + b"-")
    run(go())


def test_null_keys_stick_to_one_partition_per_batch(client_broker):
    async def go():
        async with ClusterClient(client_broker.bootstrap) as cluster:
            await create(cluster, "sticky", 3)
            producer = Producer(cluster, linger_ms=1000, batch_size=10**6)
            futures = [await producer.send("sticky", b"x") for _ in range(20)]
            await producer.flush()
            assert len({f.result().partition for f in futures}) == 1     # one open batch: one partition
            await producer.close()
    run(go())


def test_unknown_topic_and_partition_errors(client_broker):
    async def go():
        async with ClusterClient(client_broker.bootstrap) as cluster:
            with pytest.raises(KafkaError) as e:
                await cluster.topic_metadata("does-not-exist")
            assert e.value.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            await create(cluster, "two", 2)
            producer = Producer(cluster)
            with pytest.raises(KafkaError):
                await producer.send("two", b"x", partition=5)
            await producer.close()
    run(go())


def _group_run(bootstrap, topic, group, assignors, n_members, n_records):
    """n_members consumers in one group; returns {member index: set of partitions} once stable and
    the union of consumed values."""
    async def go():
        clusters = [await ClusterClient(bootstrap, client_id=f"m{i}").__aenter__() for i in range(n_members)]
        consumers = [Consumer(c, group_id=group, auto_offset_reset="earliest", assignors=assignors,
                              heartbeat_interval_ms=200) for c in clusters]
        for c in consumers:
            c.subscribe([topic])
        seen = []

        async def pump(c):
            for _ in range(100):
                seen.extend(await c.poll(100))
                if len(seen) >= n_records and not c.membership.needs_rejoin:
                    return
        await asyncio.gather(*(pump(c) for c in consumers))
        # let every member settle on the last generation
        for _ in range(30):
            await asyncio.gather(*(c.poll(50) for c in consumers))
            gens = {c.membership.generation for c in consumers}
            if len(gens) == 1 and not any(c.membership.needs_rejoin for c in consumers):
                break
        assignment = {i: c.assignment() for i, c in enumerate(consumers)}
        for c in consumers:
            await c.close()
        for cl in clusters:
            await cl.close()
        return assignment, seen
    return asyncio.run(asyncio.wait_for(go(), 90))


@pytest.mark.parametrize("assignor", ["range", "roundrobin", "sticky", "cooperative-sticky"])
def test_group_splits_partitions(client_broker, assignor):
    topic = f"grp-{assignor}"

    async def setup():
        async with ClusterClient(client_broker.bootstrap) as cluster:
            await create(cluster, topic, 4)
            producer = Producer(cluster)
            for i in range(40):
                await producer.send(topic, b"%d" % i, partition=i % 4)
            await producer.close()
    run(setup())
    assignment, seen = _group_run(client_broker.bootstrap, topic, f"g-{assignor}", [assignor], 2, 40)
    parts = [a for a in assignment.values()]
    assert parts[0].isdisjoint(parts[1])
    assert parts[0] | parts[1] == {TopicPartition(topic, p) for p in range(4)}
    assert sorted(len(p) for p in parts) == [2, 2]
    assert {int(r.value) for r in seen} == set(range(40))


def test_interop_with_kafka_python_and_confluent(client_broker):
    confluent = confluent_kafka
    b = client_broker.bootstrap

    async def setup():
        async with ClusterClient(b) as cluster:
            await create(cluster, "interop", 3)
    run(setup())
    # kafka-python's default partitioner is Java's murmur2: the same key lands where ours puts it
    producer = kafka.KafkaProducer(bootstrap_servers=b)
    for i in range(30):
        producer.send("interop", key=b"k%d" % i, value=b"kp-%d" % i)
    producer.flush()
    producer.close()

    async def produce_ours():
        async with ClusterClient(b) as cluster:
            p = Producer(cluster, compression_type="lz4")
            for i in range(30):
                await p.send("interop", b"ours-%d" % i, key=b"k%d" % i)
            await p.close()
    run(produce_ours())
    c = confluent.Consumer({"bootstrap.servers": b, "group.id": "interop-check", "auto.offset.reset": "earliest"})
    c.subscribe(["interop"])
    got = []
    for _ in range(100):
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m)
        if len(got) >= 60:
            break
    c.close()
    assert len(got) == 60
    for m in got:
        assert m.partition() == partition_for_key(m.key(), 3)
    assert {m.value() for m in got} == {b"kp-%d" % i for i in range(30)} | {b"ours-%d" % i for i in range(30)}


def test_cooperative_sticky_moves_only_what_it_must(client_broker):
    """A second member joins a one-member cooperative-sticky group: the first keeps two partitions the
    whole time (no stop-the-world revocation) and hands over the other two after a follow-up rebalance."""
    async def go():
        async with ClusterClient(client_broker.bootstrap) as setup:
            await create(setup, "coop", 4)
        c1 = await ClusterClient(client_broker.bootstrap, client_id="a").__aenter__()
        c2 = await ClusterClient(client_broker.bootstrap, client_id="b").__aenter__()
        first = Consumer(c1, group_id="coop-g", assignors=["cooperative-sticky"], heartbeat_interval_ms=100)
        first.subscribe(["coop"])
        await first.poll(500)
        assert len(first.assignment()) == 4
        history = []
        second = Consumer(c2, group_id="coop-g", assignors=["cooperative-sticky"], heartbeat_interval_ms=100)
        second.subscribe(["coop"])
        for _ in range(60):
            await asyncio.gather(first.poll(100), second.poll(100))
            history.append(set(first.assignment()))
            if len(first.assignment()) == 2 and len(second.assignment()) == 2:
                break
        assert len(first.assignment()) == 2 and len(second.assignment()) == 2
        assert first.assignment().isdisjoint(second.assignment())
        kept = first.assignment()
        assert all(kept <= h for h in history)          # the kept partitions were never revoked
        for c in (first, second):
            await c.close()
        await c1.close()
        await c2.close()
    run(go())


def test_commits_cover_only_what_poll_returned(client_broker):
    """Java's allConsumed: records fetched but still buffered are not committed, whether by
    commit(), the commit at close() or before a revocation (it committed the whole fetch, and
    the rest of it was never delivered to anyone)."""
    async def go():
        async with ClusterClient(client_broker.bootstrap) as cluster:
            await create(cluster, "consumed", 1)
            producer = Producer(cluster)
            for i in range(100):
                await producer.send("consumed", b"%d" % i, partition=0)
            await producer.close()
            consumer = Consumer(cluster, group_id="g-consumed", auto_offset_reset="earliest",
                                enable_auto_commit=True)
            consumer.subscribe(["consumed"])
            got = []
            while not got:
                got = await consumer.poll(2000, max_records=10)
            tp = TopicPartition("consumed", 0)
            assert len(got) == 10 and await consumer.position(tp) == 10
            await consumer.commit()
            assert (await consumer.committed([tp]))[tp][0] == 10
            got = await consumer.poll(2000, max_records=5)
            await consumer.close()                       # commits what was returned: 15
            check = Consumer(cluster, group_id="g-consumed")
            assert (await check.committed([tp]))[tp][0] == 15
    run(go())


def test_poll_decodes_a_fetch_a_batch_at_a_time(client_broker, monkeypatch):
    """A fetch's batches are decoded as poll() takes their records (Java's CompletedFetch): a
    fetch of 30 batches decoded all at once took 634 MB for a 24 MB topic of tiny records, and
    every poll copied the rest of the buffer (3M records: 45 s). Every record still comes once,
    in order, with position() after the last one returned."""
    from storage.record_batch import RecordBatchView
    decoded = []
    records = RecordBatchView.records

    def counted(self):
        decoded.append(self.base_offset)
        return records(self)
    monkeypatch.setattr(RecordBatchView, "records", counted)

    async def go():
        async with ClusterClient(client_broker.bootstrap) as cluster:
            await create(cluster, "lazy", 1)
            producer = Producer(cluster)
            for b in range(30):                      # 30 batches of 100
                for i in range(100):
                    await producer.send("lazy", b"%d" % (b * 100 + i), partition=0)
                await producer.flush()
            await producer.close()
            consumer = Consumer(cluster, auto_offset_reset="earliest")
            tp = TopicPartition("lazy", 0)
            consumer.assign([tp])
            decoded.clear()
            got = []
            while not got:
                got = await consumer.poll(2000, max_records=150)
            assert [r.offset for r in got] == list(range(150))
            assert consumer.positions[tp] == 3000          # the whole log was fetched...
            assert decoded == [0, 100]                     # ...and two batches decoded
            assert await consumer.position(tp) == 150
            while len(got) < 3000:
                more = await consumer.poll(2000, max_records=7)
                assert more, "records missing"
                got += more
                assert await consumer.position(tp) == got[-1].offset + 1
            assert [int(r.value) for r in got] == list(range(3000))
            assert decoded == list(range(0, 3000, 100))    # each batch once
    run(go())


def test_an_expelled_member_drops_its_partitions(client_broker):
    """UNKNOWN_MEMBER_ID in a heartbeat: the partitions are lost (another member may own them
    now), dropped without a commit before rejoining (Java's onPartitionsLost)."""
    async def go():
        async with ClusterClient(client_broker.bootstrap) as cluster:
            await create(cluster, "expelled", 2)
            consumer = Consumer(cluster, group_id="g-expelled", auto_offset_reset="earliest",
                                heartbeat_interval_ms=100)
            consumer.subscribe(["expelled"])
            while not consumer.assignment():
                await consumer.poll(500)
            membership = consumer.membership
            commits = []
            real_commit = consumer.commit

            async def record_commit(offsets=None):
                commits.append(offsets)
                await real_commit(offsets)
            consumer.commit = record_commit
            membership.member_id = "someone-else"        # the coordinator no longer knows it
            for _ in range(50):
                await asyncio.sleep(0.1)
                if not membership.assignment:
                    break
            assert membership.assignment == set() and consumer.assignment() == set()
            assert consumer.positions == {} and commits == []
            consumer.commit = real_commit
            await consumer.close()
    run(go())


def test_a_fenced_static_member_stops(client_broker):
    """FENCED_INSTANCE_ID is fatal, as in Java's client: the older of two consumers with one
    group.instance.id gets it from poll() (they replaced each other in turn before)."""
    async def go():
        clusters = [ClusterClient(client_broker.bootstrap) for _ in range(2)]
        for cl in clusters:
            await cl.start()
        try:
            await create(clusters[0], "fenced", 1)
            first, second = (Consumer(cl, group_id="g-fenced", group_instance_id="instance-1",
                                      heartbeat_interval_ms=100) for cl in clusters)
            first.subscribe(["fenced"])
            while not first.assignment():
                await first.poll(500)
            second.subscribe(["fenced"])
            while not second.assignment():
                await second.poll(500)
            with pytest.raises(KafkaError) as info:
                for _ in range(50):
                    await first.poll(100)
            assert info.value.error_code == ErrorCode.FENCED_INSTANCE_ID
            await second.close()
        finally:
            for cl in clusters:
                await cl.close()
    run(go())


def test_a_group_rebalances_when_its_topic_grows(client_broker):
    """Java's consumer rejoins on a new metadata snapshot (metadata.max.age.ms): partitions
    added to a subscribed topic are assigned and consumed (they never were here)."""
    async def go():
        async with ClusterClient(client_broker.bootstrap) as cluster:
            await create(cluster, "grows", 1)
            consumer = Consumer(cluster, group_id="g-grows", auto_offset_reset="earliest",
                                metadata_max_age_ms=500)
            consumer.subscribe(["grows"])
            while not consumer.assignment():
                await consumer.poll(500)
            assert consumer.assignment() == {TopicPartition("grows", 0)}
            await Admin(cluster).create_partitions({"grows": 2})
            await cluster.refresh_metadata(["grows"])
            producer = Producer(cluster)
            await (await producer.send("grows", b"new", partition=1))
            await producer.close()
            got = []
            for _ in range(40):
                got += await consumer.poll(250)
                if got:
                    break
            assert [(r.partition, r.value) for r in got] == [(1, b"new")]
            await consumer.close()
    run(go())


def test_a_request_that_times_out_takes_its_connection_down(client_broker):
    """Java's NetworkClient.handleTimedOutRequests: the connection of a timed-out request is
    closed, so the next request does not queue behind a hung broker on it."""
    from broker.client.errors import KafkaTimeoutError
    from protocol.messages import FetchRequest as F

    async def go():
        async with ClusterClient(client_broker.bootstrap) as cluster:
            await create(cluster, "hangs", 1)
            node = await cluster.leader_for("hangs", 0)
            conn = await cluster.connection(node)
            slow = F(replica_id=-1, max_wait_ms=3000, min_bytes=1 << 20, max_bytes=1 << 20,
                     isolation_level=0, topics=[F.FetchTopic(topic="hangs", partitions=[
                         F.FetchPartition(partition=0, fetch_offset=0,
                                          partition_max_bytes=1 << 20)])])
            with pytest.raises(KafkaTimeoutError):
                await conn.send(slow, 12, timeout=0.2)
            assert not conn.connected
            again = await cluster.connection(node)          # a new one, working
            assert again is not conn and (await again.send(MetadataRequest(topics=[]))).brokers
    run(go())


def test_out_of_range_with_no_reset_policy_raises(client_broker):
    """auto.offset.reset=none and a position out of range: poll() raises, as Java's
    OffsetOutOfRangeException (it retried silently for ever)."""
    from broker.client.consumer import NoOffsetForPartitionError

    async def go():
        async with ClusterClient(client_broker.bootstrap) as cluster:
            await create(cluster, "oor", 1)
            consumer = Consumer(cluster, auto_offset_reset="none")
            consumer.assign([TopicPartition("oor", 0)])
            consumer.seek(TopicPartition("oor", 0), 1000)
            with pytest.raises(NoOffsetForPartitionError):
                for _ in range(10):
                    await consumer.poll(300)
            await consumer.close()
    run(go())


def leaderless(cluster, topic, partition, calls=None):
    """Make `partition` of `topic` leaderless in every metadata answer `cluster` gets (each
    refresh's time appended to `calls`); returns the real refresh_metadata."""
    real_refresh = cluster.refresh_metadata

    async def refresh_without_leader(*args, **kwargs):
        if calls is not None:
            calls.append(time.monotonic())
        response = await real_refresh(*args, **kwargs)
        meta = cluster.topics.get(topic)
        if meta is not None and partition in meta.partitions:
            meta.partitions[partition] = meta.partitions[partition]._replace(leader=-1)
        return response
    cluster.refresh_metadata = refresh_without_leader
    return real_refresh


def test_a_partition_without_a_leader_does_not_stop_the_others(client_broker):
    """A partition with no leader (its broker down) waits for its offset reset; poll() goes on
    with the others (it raised LEADER_NOT_AVAILABLE for all of them)."""
    async def go():
        async with ClusterClient(client_broker.bootstrap) as cluster:
            await create(cluster, "half", 2)
            producer = Producer(cluster)
            await (await producer.send("half", b"p0", partition=0))
            await producer.close()
            real_refresh = leaderless(cluster, "half", 1)
            await cluster.refresh_metadata(["half"])
            consumer = Consumer(cluster, auto_offset_reset="earliest")
            consumer.assign([TopicPartition("half", 0), TopicPartition("half", 1)])
            got = []
            for _ in range(20):
                got += await consumer.poll(200)
                if got:
                    break
            assert [(r.partition, r.value) for r in got] == [(0, b"p0")]
            assert TopicPartition("half", 1) not in consumer.positions
            cluster.refresh_metadata = real_refresh
            await consumer.close()
    run(go())


def test_a_leaderless_partition_asks_for_metadata_after_the_backoff(client_broker):
    """While a partition has no leader and the others deliver, the consumer asks for
    metadata once per retry.backoff.ms (it asked on every poll)."""
    async def go():
        async with ClusterClient(client_broker.bootstrap, retry_backoff_ms=200) as cluster:
            await create(cluster, "busy", 2)
            producer = Producer(cluster)
            refreshes = []
            real_refresh = leaderless(cluster, "busy", 1, refreshes)
            await cluster.refresh_metadata(["busy"])
            consumer = Consumer(cluster, auto_offset_reset="earliest")
            consumer.assign([TopicPartition("busy", 0), TopicPartition("busy", 1)])
            began, got = time.monotonic(), 0
            refreshes.clear()
            for i in range(30):
                await (await producer.send("busy", b"%d" % i, partition=0))
                got += len(await consumer.poll(2000))
            took = time.monotonic() - began
            assert got == 30
            assert len(refreshes) <= took / 0.2 + 2, (len(refreshes), took)
            cluster.refresh_metadata = real_refresh
            await producer.close()
            await consumer.close()
    run(go())


def test_delete_records_goes_on_with_the_partitions_that_have_a_leader(client_broker):
    """DeleteRecords with one partition leaderless: the others are deleted, the leaderless one
    is asked again until the timeout and then reported timed out, as Kafka's
    DeleteRecordsHandler (it failed the whole call: nothing was deleted)."""
    async def go():
        async with ClusterClient(client_broker.bootstrap) as cluster:
            await create(cluster, "trim", 2)
            producer = Producer(cluster)
            for p in (0, 1):
                for i in range(5):
                    await (await producer.send("trim", b"%d" % i, partition=p))
            await producer.close()
            real_refresh = leaderless(cluster, "trim", 1)
            await cluster.refresh_metadata(["trim"])
            admin = Admin(cluster)
            results = await admin.delete_records({TopicPartition("trim", 0): 3,
                                                  TopicPartition("trim", 1): 3}, timeout_ms=1500)
            assert results == {TopicPartition("trim", 0): (ErrorCode.NONE, 3),
                               TopicPartition("trim", 1): (ErrorCode.REQUEST_TIMED_OUT, -1)}
            cluster.refresh_metadata = real_refresh
            await cluster.refresh_metadata(["trim"])
            results = await admin.delete_records({TopicPartition("trim", 1): 2})
            assert results == {TopicPartition("trim", 1): (ErrorCode.NONE, 2)}
    run(go())


def test_null_keys_spread_after_batch_size_bytes(client_broker):
    """Records sent one at a time (each batch closed by linger.ms) still move to another
    partition every batch.size bytes (KIP-794): they all went to one partition."""
    async def go():
        async with ClusterClient(client_broker.bootstrap) as cluster:
            await create(cluster, "spread", 3)
            producer = Producer(cluster, linger_ms=0, batch_size=4096)
            partitions = []
            for _ in range(60):
                partitions.append((await (await producer.send("spread", b"x" * 1000))).partition)
            await producer.close()
            assert len(set(partitions)) > 1
            runs = [len(list(g)) for _, g in itertools.groupby(partitions)]
            assert max(runs) <= 5                      # about 4 KiB per partition in turn
    run(go())


def test_a_batch_that_does_not_decode_comes_after_the_records_before_it():
    """Java's fetch collector: the records before a bad batch are returned, then every poll
    raises at it (the application seeks past it), and the consumed position stays before it."""
    from broker.client.consumer import _Fetched
    from storage.compression import CorruptRecordError

    class Batch:                                # a storage batch view's face, as _Fetched reads it
        timestamp_type, partition_leader_epoch = 0, 0

        def __init__(self, offsets):
            self.offsets = offsets

        def records(self):
            if self.offsets is None:
                raise CorruptRecordError("bad lz4 frame")
            return [type("R", (), dict(offset=o, timestamp=0, key=None, value=b"v", headers=[]))
                    for o in self.offsets]

    tp = TopicPartition("t", 0)
    fetched = _Fetched(tp, [Batch([5, 6, 7]), Batch(None), Batch([9])], start=6)
    assert [r.offset for r in fetched.take(10)] == [6, 7]   # below the start skipped
    assert fetched.next_offset == 8 and not fetched.exhausted
    for _ in range(2):
        with pytest.raises(CorruptRecordError):
            fetched.take(10)
    assert fetched.next_offset == 8
