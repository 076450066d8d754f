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
