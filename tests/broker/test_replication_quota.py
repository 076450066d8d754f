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


def test_samples_leave_a_full_span_after_their_last_bytes_as_kafkas_sampled_stat():
    """SampledStat keeps a sample while its last bytes are less than windows x window old
    (one more sample than windows, for the one overlapping the edge), and the rate divides by
    the time since the oldest kept sample began."""
    clock = Clock()
    quota = ReplicationQuota(1, lambda: 1000, lambda topic: "*", clock=clock)
    quota.record(500)                        # sample 1 begins at 0 s
    clock.now += 0.9
    quota.record(500)                        # still sample 1: its last bytes at 0.9 s
    clock.now += 10.5                        # 11.4 s: sample 1's start is 11.4 s old, kept
    assert abs(quota.rate() - 1000 / 11.4) < 1e-9
    clock.now += 0.5                         # 11.9 s: its last bytes are 11 s old
    assert quota.rate() == 0
    start = clock.now
    quota.record(100)                        # a sample from `start`, its last bytes at +0.999
    clock.now = start + 0.999
    quota.record(100)
    for i in range(1, 12):                   # eleven more, one a second: all twelve kept
        clock.now = start + i
        quota.record(100)
    assert len(quota._samples) == 12
    assert abs(quota.rate() - 1300 / 11) < 1e-9


def test_seconds_until_under_is_when_the_rate_falls_to_the_limit():
    clock = Clock()
    limit = [1000]
    quota = ReplicationQuota(1, lambda: limit[0], lambda topic: "*", clock=clock)
    assert quota.seconds_until_under() == 0  # nothing recorded
    quota.record(3000)                       # 3,000 B/s over the first window
    assert abs(quota.seconds_until_under() - 3.001) < 1e-9
    clock.now += 2
    assert abs(quota.seconds_until_under() - 1.001) < 1e-9
    clock.now += 1.001
    assert not quota.is_exceeded() and quota.seconds_until_under() == 0
    quota.record(20_000)                     # over until the sample leaves at 11 s
    assert abs(quota.seconds_until_under() - (11 - 3.001 + 0.001)) < 1e-9
    limit[0] = 0                             # nothing may pass: until the samples leave
    assert abs(quota.seconds_until_under() - (11 - 3.001 + 0.001)) < 1e-9
    limit[0] = LONG_MAX
    assert quota.seconds_until_under() == 0
