"""ClusterClient.retry as Kafka's AdminClient retries a call: bounded by the call's timeout, not by
a small count, with a backoff that doubles from retry.backoff.ms up to retry.backoff.max.ms."""
import asyncio

import pytest

from broker.client.cluster import ClusterClient
from broker.client.errors import KafkaConnectionError
from protocol.errors import ErrorCode, KafkaError


def run(coro):
    return asyncio.run(coro)


def test_a_call_outlives_a_failover(monkeypatch):
    # A controller killed with kill -9 refuses connections until ZooKeeper expires its session
    # (6-18 s); the call keeps trying with the metadata refreshed and succeeds once it moved.
    sleeps = []

    async def sleep(seconds):
        sleeps.append(seconds)
    monkeypatch.setattr(asyncio, "sleep", sleep)
    cluster = ClusterClient("127.0.0.1:1", default_api_timeout_ms=60_000)
    attempts = []

    async def op():
        attempts.append(1)
        if len(attempts) <= 25:
            raise KafkaConnectionError("Connection to node 2 (127.0.0.1:1) could not be established")
        return "done"
    assert run(cluster.retry(op, refresh=False)) == "done"
    assert sleeps[:5] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0])
    assert max(sleeps) == 1.0


def test_the_timeout_ends_it_not_a_count(monkeypatch):
    cluster = ClusterClient("127.0.0.1:1", retry_backoff_ms=10, retry_backoff_max_ms=20)
    attempts = []

    async def op():
        attempts.append(1)
        raise KafkaError(ErrorCode.NOT_CONTROLLER, "moved")
    with pytest.raises(KafkaError):
        run(cluster.retry(op, timeout_ms=600, refresh=False))
    assert len(attempts) > 15           # ~30 in 600 ms of 20 ms backoffs (10 retries before)


def test_retries_setting_bounds_the_count():
    cluster = ClusterClient("127.0.0.1:1", retries=2, retry_backoff_ms=1)
    attempts = []

    async def op():
        attempts.append(1)
        raise KafkaConnectionError("refused")
    with pytest.raises(KafkaConnectionError):
        run(cluster.retry(op, refresh=False))
    assert len(attempts) == 3


def test_a_non_retriable_error_is_not_retried():
    cluster = ClusterClient("127.0.0.1:1")
    attempts = []

    async def op():
        attempts.append(1)
        raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "no")
    with pytest.raises(KafkaError):
        run(cluster.retry(op, refresh=False))
    assert len(attempts) == 1


def test_a_bootstrap_never_reached_is_reported_at_once():
    cluster = ClusterClient("127.0.0.1:1", connect_timeout_ms=1000)
    with pytest.raises(KafkaConnectionError, match="Could not connect to any bootstrap server"):
        run(cluster.retry(lambda: cluster.refresh_metadata([])))


def test_what_the_metadata_lacks_is_asked_about_a_bounded_number_of_times(monkeypatch):
    # a deleted topic or a leaderless partition: a few seconds, not default.api.timeout.ms;
    # a lost connection or a moving controller still gets the whole timeout
    async def sleep(seconds):
        pass
    monkeypatch.setattr(asyncio, "sleep", sleep)
    cluster = ClusterClient("127.0.0.1:1")
    attempts = []

    async def op():
        attempts.append(1)
        raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, "no leader")
    with pytest.raises(KafkaError):
        run(cluster.retry(op, refresh=False))
    assert len(attempts) == ClusterClient.METADATA_ERROR_ATTEMPTS + 1


def test_an_election_asks_the_controller_to_wait_at_most_the_request_timeout():
    """Kafka's admin client: each ElectLeaders request carries min(request.timeout.ms, time
    left of default.api.timeout.ms), so the controller's wait ends within the call's time (it
    carried a fixed 30 s, however short the call's timeout)."""
    from broker.client.admin import Admin
    from broker.client.types import TopicPartition
    from protocol.messages import ElectLeadersResponse
    sent = []

    async def controller():
        return 1

    async def send(node, request, **kwargs):
        sent.append(request.timeout_ms)
        return ElectLeadersResponse(throttle_time_ms=0, error_code=0,
                                    replica_election_results=[])
    for request_timeout, api_timeout, most in ((15_000, 30_000, 15_000), (15_000, 5_000, 5_000)):
        cluster = ClusterClient("127.0.0.1:1", request_timeout_ms=request_timeout,
                                default_api_timeout_ms=api_timeout)
        admin = Admin(cluster)
        admin._controller = controller
        cluster.send = send
        sent.clear()
        assert run(admin.elect_leaders(0, [TopicPartition("t", 0)])) == {}
        assert len(sent) == 1 and most - 1000 < sent[0] <= most


def run_election_tool(monkeypatch, capsys, answer):
    """kafka-leader-election.sh --all-topic-partitions with no broker: the call returns
    `answer` ({TopicPartition: (code, message)}) or raises it. -> (status, out, err)."""
    from broker.client.admin import Admin
    from broker.tools import leader_election
    from broker.tools.common import run as run_tool

    async def elect_leaders(self, *args, **kwargs):
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def start(self):
        pass
    monkeypatch.setattr(Admin, "elect_leaders", elect_leaders)
    monkeypatch.setattr(ClusterClient, "start", start)
    code = run_tool(leader_election.main, ["--bootstrap-server", "127.0.0.1:1", "--election-type",
                                           "preferred", "--all-topic-partitions"], "")
    out, err = capsys.readouterr()
    return code, out, err


def test_the_election_tool_reports_a_call_that_timed_out(monkeypatch, capsys):
    """LeaderElectionCommand: "Timeout waiting for election results" on stdout, the same as
    the error, exit status 1."""
    from broker.client.errors import KafkaTimeoutError
    assert run_election_tool(monkeypatch, capsys,
                             KafkaTimeoutError("Timed out waiting for ElectLeaders")) == \
        (1, "Timeout waiting for election results\n", "Timeout waiting for election results\n")


def test_the_election_tool_lists_partitions_in_kafkas_hash_set_order(monkeypatch, capsys):
    from broker.client.types import TopicPartition
    answer = {TopicPartition("t", p): (ErrorCode.NONE, None) for p in range(3)}
    answer.update({TopicPartition("u", p): (ErrorCode.ELECTION_NOT_NEEDED, None) for p in (0, 1)})
    code, out, _ = run_election_tool(monkeypatch, capsys, answer)
    assert (code, out) == (0, "Successfully completed leader election (PREFERRED) for partitions "
                              "t-2, t-1, t-0\nValid replica already elected for partitions "
                              "u-1, u-0\n")


def test_each_list_of_the_election_tool_has_its_own_hash_set_order(monkeypatch, capsys):
    """Kafka fills a HashSet per outcome, each sized by its own count: ordered over all the
    results together, lists of more than 12 partitions came out in another order."""
    from broker.client.types import TopicPartition
    from broker.tools.javautil import java_hash_order, java_tp_hash
    answer = {TopicPartition(t, p): (ErrorCode.NONE, None)
              for t in ("orders", "payments", "users") for p in range(5)}
    for tp in (TopicPartition("users", 3), TopicPartition("users", 4), TopicPartition("orders", 4)):
        answer[tp] = (ErrorCode.ELECTION_NOT_NEEDED, None)
    code, out, _ = run_election_tool(monkeypatch, capsys, answer)
    succeeded = java_hash_order([tp for tp, (c, _) in answer.items() if c == ErrorCode.NONE],
                                java_tp_hash)
    assert out.splitlines()[0] == ("Successfully completed leader election (PREFERRED) for "
                                   "partitions " + ", ".join(map(str, succeeded)))
    assert succeeded != [tp for tp in java_hash_order(list(answer), java_tp_hash)
                         if answer[tp][0] == ErrorCode.NONE]


def test_the_election_tool_reports_a_call_whose_time_ran_out_on_any_retriable_error(
        monkeypatch, capsys):
    from protocol.errors import KafkaError
    assert run_election_tool(monkeypatch, capsys,
                             KafkaError(ErrorCode.NOT_CONTROLLER, "moved"))[:2] == \
        (1, "Timeout waiting for election results\n")
