"""Replication throttles (Kafka's ReplicationQuotaManager), one per direction.

An operator (or `kafka-reassign-partitions.sh --throttle`) names the throttled replicas in a
topic's `leader.replication.throttled.replicas` / `follower.replication.throttled.replicas`
("partition:broker,..." or "*") and sets the rate on the brokers with the dynamic configs
`leader.replication.throttled.rate` / `follower.replication.throttled.rate` (bytes/s).

- The **leader** quota counts the bytes this broker sends in follower Fetch responses for the
  partitions throttled here ("p:<this broker>" in the leader list); while the measured rate is
  above the limit, a follower that is *not in the ISR* gets no records for those partitions
  (broker/replica_manager.py). In-sync followers are never throttled.
- The **follower** quota counts the bytes this broker fetches for the partitions throttled
  here ("p:<this broker>" in the follower list); while it is above the limit, the fetcher
  leaves out those partitions it has not caught up on (broker/replica_fetcher.py).

The rate is Kafka's (its SimpleRate): bytes over the last `replication.quota.window.num`
windows of `replication.quota.window.size.seconds`, divided by the time since the oldest of
them began, at least one window: a new throttle bites after about one second's worth.
"""
import collections
import time

LONG_MAX = 2**63 - 1
WINDOWS = 11
WINDOW_S = 1.0


def throttled_partitions(value, broker_id: int):
    """The partitions a throttled-replicas value names for `broker_id`: a set, or "*"."""
    if value is None:
        return set()
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    items = [str(i).strip() for i in items if str(i).strip()]
    if "*" in items:
        return "*"
    out = set()
    for item in items:
        partition, _, broker = item.partition(":")
        try:
            if int(broker) == broker_id:
                out.add(int(partition))
        except ValueError:
            continue                    # the config's validator refuses these anyway
    return out


class ReplicationQuota:
    """One direction's throttle. `rate_of()` gives the current limit (bytes/s; LONG_MAX or
    less than 0 means none) and `replicas_of(topic)` the topic's throttled-replicas value;
    both are read on each call, so dynamic config changes apply at once."""

    def __init__(self, broker_id: int, rate_of, replicas_of, *, clock=time.monotonic,
                 windows: int = WINDOWS, window_s: float = WINDOW_S):
        self.broker_id = broker_id
        self._rate_of = rate_of
        self._replicas_of = replicas_of
        self._clock = clock
        self._windows = windows
        self._window_s = window_s
        self._samples: collections.deque = collections.deque()      # [window start, bytes]

    def is_throttled(self, topic: str, partition: int) -> bool:
        found = throttled_partitions(self._replicas_of(topic), self.broker_id)
        return found == "*" or partition in found

    def _trim(self, now: float) -> None:
        samples = self._samples
        while samples and samples[0][0] <= now - self._windows * self._window_s:
            samples.popleft()

    def record(self, size: int) -> None:
        if size <= 0:
            return
        now = self._clock()
        self._trim(now)
        samples = self._samples
        if samples and now - samples[-1][0] < self._window_s:
            samples[-1][1] += size
        else:
            samples.append([now, size])

    def rate(self) -> float:
        """Bytes per second measured as Kafka's SimpleRate (ReplicationQuotaManager's sensor):
        not its Rate's floor of (windows - 1) windows, which client quotas use."""
        now = self._clock()
        self._trim(now)
        if not self._samples:
            return 0.0
        elapsed = max(now - self._samples[0][0], self._window_s)
        return sum(size for _, size in self._samples) / elapsed

    def is_exceeded(self) -> bool:
        limit = self._rate_of()
        if limit is None or limit < 0 or limit >= LONG_MAX:
            return False
        return self.rate() > limit
