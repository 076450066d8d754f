"""The replication throttle's bookkeeping (broker/replication_quota.py): which partitions a
throttled-replicas value names for a broker, and Kafka's windowed rate with its initial burst."""
from broker.replication_quota import LONG_MAX, ReplicationQuota, throttled_partitions


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_throttled_partitions_of_a_broker():
    assert throttled_partitions("0:101,1:102,2:101", 101) == {0, 2}
    assert throttled_partitions(["0:101", "1:102"], 102) == {1}
    assert throttled_partitions("*", 7) == "*"
    assert throttled_partitions("", 7) == set() and throttled_partitions(None, 7) == set()


def test_rate_is_measured_over_at_least_one_window_as_kafkas_simple_rate():
    """ReplicationQuotaManager's SimpleRate: divided by the time since the oldest sample began,
    at least one window (not Rate's ten, which let ten times the rate through first)."""
    clock = Clock()
    limit = [1000]
    configs = {"t": "0:1"}
    quota = ReplicationQuota(1, lambda: limit[0], configs.get, clock=clock)
    assert quota.is_throttled("t", 0) and not quota.is_throttled("t", 1)
    assert not quota.is_throttled("u", 0)
    quota.record(900)                        # 900 B/s over the first second
    assert not quota.is_exceeded()
    quota.record(200)
    assert quota.is_exceeded()               # 1,100 B/s
    clock.now += 10                          # 1,100 B over 10 s
    assert quota.rate() == 110 and not quota.is_exceeded()
    clock.now += 2                           # the windows slide out
    assert quota.rate() == 0 and not quota.is_exceeded()
    limit[0] = LONG_MAX
    quota.record(10**9)
    assert not quota.is_exceeded()           # no limit set


async def test_the_replication_quota_window_settings_are_used(start_broker):
    broker = await start_broker(replication_quota_window_num=5,
                                replication_quota_window_size_seconds=2)
    for quota in (broker.replica_manager.leader_quota, broker.replica_manager.follower_quota):
        assert (quota._windows, quota._window_s) == (5, 2)
