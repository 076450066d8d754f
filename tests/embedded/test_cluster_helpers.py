"""broker/testing/cluster.py's helpers that need no processes."""
import pytest


def test_cluster_timeouts_say_what_was_seen_last(tmp_path):
    """A wait that times out names the state it last saw, so a failing test says why."""
    from broker.testing.cluster import KafkaCluster
    cluster = KafkaCluster.__new__(KafkaCluster)
    states = iter([5, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7])
    cluster.leader = lambda topic, partition: next(states, 7)
    with pytest.raises(TimeoutError, match=r"^no new leader for t-0 \(the leader is 7, not "
                                           r"wanted: \[5, 7\]\) \(after 0.3 s\)$"):
        cluster.wait_for_leader("t", 0, not_in={5, 7}, timeout=0.3)


def test_an_unknown_broker_id_is_a_clear_error_for_every_helper(tmp_path):
    """resume() and output() as kill() and pause(): a ValueError naming the brokers, not a
    bare KeyError."""
    from broker.testing.cluster import KafkaCluster
    cluster = KafkaCluster.__new__(KafkaCluster)
    cluster.brokers = {0: None, 1: None}
    for helper in (cluster.resume, cluster.output, cluster.pause, cluster.kill):
        with pytest.raises(ValueError, match=r"no broker 99 in this cluster \(brokers \[0, 1\]"):
            helper(99)
