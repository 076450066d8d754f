"""The marker sender's per-partition outcomes (broker/txn_markers.py), as Kafka's
TransactionMarkerRequestCompletionHandler: which answers end a partition's delivery, which are
retried, and that the coordinator hears "written" only when every partition has its marker.
The leaders' answers are scripted; the writing itself is tested over a real log in
test_txn_markers_handler.py."""
import asyncio
from types import SimpleNamespace

import pytest

from protocol.errors import ErrorCode
from coordinator.transaction.results import MarkerRequest

from broker import txn_markers
from broker.txn_markers import TxnMarkerSender

E = ErrorCode


def cluster_broker(partitions):
    """This is broker 1 of a cluster whose metadata has topic t with `partitions`
    {partition: leader}; the dict may be changed while markers are being sent."""
    def get_topic(name):
        if name != "t":
            return None
        return SimpleNamespace(partitions={p: SimpleNamespace(leader=leader)
                                           for p, leader in partitions.items()})
    return SimpleNamespace(broker_id=1, cluster=object(),
                           metadata=SimpleNamespace(get_topic=get_topic))


async def deliver(sender, partitions, answers, timeout=2.0):
    """Sends one COMMIT marker for `partitions`; `answers(round, leader, tps)` scripts each
    WriteTxnMarkers answer. Returns (written, rounds): whether on_written was called, and the
    (leader, partitions) of every write."""
    rounds = []

    async def write(leader, marker, tps):
        rounds.append((leader, sorted(tps)))
        return answers(len(rounds), leader, tps)

    sender._write = write
    written = asyncio.Event()
    reported = []

    def on_written(done):
        assert not set(done) & set(reported), "a partition reported twice"
        reported.extend(done)
        if set(reported) == set(partitions):
            written.set()
    sender.send(MarkerRequest("tid", 1000, 0, 0, True, list(partitions)), on_written)
    try:
        await asyncio.wait_for(written.wait(), timeout)
    except asyncio.TimeoutError:
        pass
    await sender.close()
    return written.is_set(), rounds


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    monkeypatch.setattr(txn_markers, "RETRY_BACKOFF_S", 0.001)


@pytest.mark.parametrize("retriable", [
    E.UNKNOWN_TOPIC_OR_PARTITION,          # the leader's metadata lags behind the coordinator's
    E.NOT_LEADER_OR_FOLLOWER, E.NOT_ENOUGH_REPLICAS, E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    E.REQUEST_TIMED_OUT, E.KAFKA_STORAGE_ERROR])
async def test_a_retriable_answer_is_sent_again_until_the_marker_is_written(retriable):
    sender = TxnMarkerSender(cluster_broker({0: 2, 1: 2}))
    written, rounds = await deliver(
        sender, [("t", 0), ("t", 1)],
        lambda n, leader, tps: {tp: (retriable if n < 3 and tp == ("t", 0) else E.NONE)
                                for tp in tps})
    assert written
    assert rounds == [(2, [("t", 0), ("t", 1)]), (2, [("t", 0)]), (2, [("t", 0)])]


async def test_unknown_partition_is_never_taken_as_written():
    """Kafka retries UNKNOWN_TOPIC_OR_PARTITION: CompleteCommit without the marker would leave
    the partition's transaction open for good."""
    sender = TxnMarkerSender(cluster_broker({0: 2}))
    written, rounds = await deliver(sender, [("t", 0)],
                                    lambda n, leader, tps: {tp: E.UNKNOWN_TOPIC_OR_PARTITION
                                                            for tp in tps}, timeout=0.3)
    assert not written
    assert len(rounds) > 3


async def test_a_partition_gone_from_this_brokers_metadata_needs_no_marker():
    partitions = {0: 2, 1: 2}
    sender = TxnMarkerSender(cluster_broker(partitions))

    def answers(n, leader, tps):
        partitions.pop(1, None)            # the topic shrank (deleted and re-created) meanwhile
        return {tp: (E.UNKNOWN_TOPIC_OR_PARTITION if tp == ("t", 1) else E.NONE) for tp in tps}

    written, rounds = await deliver(sender, [("t", 0), ("t", 1)], answers)
    assert written
    assert rounds == [(2, [("t", 0), ("t", 1)])]


@pytest.mark.parametrize("code", [E.UNSUPPORTED_FOR_MESSAGE_FORMAT, E.UNSUPPORTED_VERSION])
async def test_a_format_the_producer_could_not_have_written_either_ends_delivery(code):
    sender = TxnMarkerSender(cluster_broker({0: 2}))
    written, rounds = await deliver(sender, [("t", 0)],
                                    lambda n, leader, tps: {tp: code for tp in tps})
    assert written and len(rounds) == 1


@pytest.mark.parametrize("code", [E.INVALID_PRODUCER_EPOCH, E.TRANSACTION_COORDINATOR_FENCED])
async def test_a_newer_producer_or_coordinator_stops_delivery_without_completing(code):
    sender = TxnMarkerSender(cluster_broker({0: 2, 1: 3}))
    written, rounds = await deliver(
        sender, [("t", 0), ("t", 1)],
        lambda n, leader, tps: {tp: (code if leader == 2 else E.NONE) for tp in tps},
        timeout=0.3)
    assert not written
    assert sorted(rounds) == [(2, [("t", 0)]), (3, [("t", 1)])]


async def test_each_rounds_written_partitions_are_reported_at_once():
    """Kafka's completion handler removes each partition from the transaction as its marker is
    written, so DescribeTransactions of a transaction stuck in PrepareCommit names only the
    partitions still waiting."""
    sender = TxnMarkerSender(cluster_broker({0: 2, 1: 3}))
    reported = []
    sender._write = lambda leader, marker, tps: _answer(
        {tp: (E.NONE if leader == 2 else E.NOT_LEADER_OR_FOLLOWER) for tp in tps})
    sender.send(MarkerRequest("tid", 1000, 0, 0, True, [("t", 0), ("t", 1)]), reported.append)
    await asyncio.sleep(0.1)
    await sender.close()
    assert reported == [[("t", 0)]]


async def _answer(codes):
    return codes


async def test_on_one_broker_a_partition_on_a_failed_log_dir_waits_for_its_marker():
    """Offline is not deleted: CompleteCommit without the marker would leave the partition's
    transaction hanging once the disk is back (Kafka queues it for an unknown leader)."""
    rm = SimpleNamespace(get_partition=lambda topic, p: None,
                         offline_partitions={("t", 0): None, ("gone", 0): None})
    topics = {"t": SimpleNamespace(partitions={0: None, 1: None})}
    metadata = SimpleNamespace(get_topic=topics.get)
    sender = TxnMarkerSender(SimpleNamespace(broker_id=0, cluster=None, replica_manager=rm,
                                             metadata=metadata))
    written, rounds = await deliver(sender, [("t", 0), ("t", 1)],
                                    lambda n, leader, tps: {tp: E.NONE for tp in tps},
                                    timeout=0.3)
    assert not written and rounds == []
    # A topic deleted since its dir failed needs no marker (Kafka's metadata has no such
    # partition): the transaction completes.
    sender = TxnMarkerSender(SimpleNamespace(broker_id=0, cluster=None, replica_manager=rm,
                                             metadata=metadata))
    written, rounds = await deliver(sender, [("gone", 0)],
                                    lambda n, leader, tps: {tp: E.NONE for tp in tps})
    assert written and rounds == []


class SlowLeader:
    """A leader's connection: records each WriteTxnMarkers (the producer ids it carries) and
    answers NONE for all once `release` is set."""

    def __init__(self):
        self.requests = []
        self.release = asyncio.Event()

    async def send(self, request, version):
        self.requests.append([m.producer_id for m in request.markers])
        await self.release.wait()
        from protocol.messages.write_txn_markers import WriteTxnMarkersResponse as R
        return R(markers=[R.WritableTxnMarkerResult(producer_id=m.producer_id, topics=[
            R.WritableTxnMarkerTopicResult(name=t.name, partitions=[
                R.WritableTxnMarkerPartitionResult(partition_index=p, error_code=0)
                for p in t.partition_indexes]) for t in m.topics]) for m in request.markers])


async def test_markers_queued_for_a_busy_leader_go_in_one_request():
    """Kafka's channel manager: one WriteTxnMarkers in flight per broker, carrying every
    marker queued meanwhile (each transaction sent its own, pipelined on one connection: a
    slow leader's N commits waited N rounds, and one timeout failed them all)."""
    leader = SlowLeader()
    sender = TxnMarkerSender(cluster_broker({0: 2, 1: 2}))

    async def connection(broker_id, pool="markers"):
        assert (broker_id, pool) == (2, "markers")
        return leader
    sender.connection = connection
    written = []
    for pid in (1000, 1001, 1002):
        sender.send(MarkerRequest(f"tid{pid}", pid, 0, 0, True, [("t", 0), ("t", 1)]),
                    lambda done, pid=pid: written.append((pid, sorted(done))))
        await asyncio.sleep(0.01)
    assert leader.requests == [[1000]]           # the others wait for it
    leader.release.set()
    for _ in range(100):
        if len(written) == 3:
            break
        await asyncio.sleep(0.01)
    await sender.close()
    assert leader.requests == [[1000], [1001, 1002]]
    assert sorted(written) == [(pid, [("t", 0), ("t", 1)]) for pid in (1000, 1001, 1002)]


async def test_one_connection_per_broker_that_closes_when_a_request_times_out(monkeypatch):
    """Concurrent callers share one new connection (each opened its own, all but one leaked),
    and it is made to close when a request times out: a connection dropped silently on the
    way is not used again (verification kept failing on it until TCP gave up)."""
    import broker.client.connection as client_connection
    made = []

    class Connection:
        connected = True

        def __init__(self, host, port, **kwargs):
            made.append(kwargs)

        async def connect(self):
            await asyncio.sleep(0.01)

    monkeypatch.setattr(client_connection, "BrokerConnection", Connection)
    broker = cluster_broker({0: 2})
    broker.config = {"request.timeout.ms": 30000}
    broker.cluster = SimpleNamespace(inter_broker_listener="PLAINTEXT")
    broker.metadata.live_brokers = {2: SimpleNamespace(endpoints={"PLAINTEXT": ("h", 1)})}
    sender = TxnMarkerSender(broker)
    first, second = await asyncio.gather(sender.connection(2, "verification"),
                                         sender.connection(2, "verification"))
    assert first is second and len(made) == 1 and made[0]["close_on_timeout"]
    assert await sender.connection(2) is not first        # markers have their own


async def test_a_failure_sending_markers_hands_every_queued_delivery_back():
    """A bug while sending (not a connection error): the deliveries waiting in the queue are
    answered too, and retried; they waited for ever when no later marker to that broker came
    (here the failed one's partition is deleted meanwhile: it is not sent again)."""
    partitions = {0: 2, 1: 2}
    sender = TxnMarkerSender(cluster_broker(partitions))
    calls = []

    async def send_markers(leader, entries):
        calls.append([m.producer_id for m, _ in entries])
        if len(calls) == 1:
            await asyncio.sleep(0.05)              # the others queue meanwhile
            partitions.pop(0)
            raise RuntimeError("unexpected answer")
        return [{tp: E.NONE for tp in tps} for _, tps in entries]
    sender._send_markers = send_markers
    written = []
    for pid, partition in ((1000, 0), (1001, 1), (1002, 1)):
        sender.send(MarkerRequest(f"tid{pid}", pid, 0, 0, True, [("t", partition)]),
                    lambda done, pid=pid: written.append(pid))
        await asyncio.sleep(0.001)
    for _ in range(200):
        if len(written) == 3:
            break
        await asyncio.sleep(0.01)
    await sender.close()
    assert sorted(written) == [1000, 1001, 1002]
