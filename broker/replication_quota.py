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

The rate is Kafka's (its SimpleRate over a SampledStat): the bytes of the samples whose last
bytes are less than `replication.quota.window.num` windows old (a sample is one
`replication.quota.window.size.seconds` window from its first bytes; one more is kept for the
window that overlaps the edge), divided by the time since the oldest of them began, at least
one window: a new throttle bites after about one second's worth. `seconds_until_under()`
says when a used-up quota frees again, so a throttled copy resumes then (not after a fixed
wait, which left the link idle and the copy well under the rate).
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
        self._samples: collections.deque = collections.deque()   # [start, last bytes at, bytes]

    def is_throttled(self, topic: str, partition: int) -> bool:
        found = throttled_partitions(self._replicas_of(topic), self.broker_id)
        return found == "*" or partition in found

    def _purge(self, now: float) -> None:
        # Kafka's purgeObsoleteSamples: a sample goes when its last bytes are a full span old.
        samples = self._samples
        while samples and now - samples[0][1] >= self._windows * self._window_s:
            samples.popleft()

    def record(self, size: int) -> None:
        if size <= 0:
            return
        now = self._clock()
        self._purge(now)
        samples = self._samples
        if samples and now - samples[-1][0] < self._window_s:
            samples[-1][1] = now
            samples[-1][2] += size
        else:
            samples.append([now, now, size])        # [start, last bytes, bytes]
            if len(samples) > self._windows + 1:
                samples.popleft()

    def rate(self) -> float:
        """Bytes per second measured as Kafka's SimpleRate (ReplicationQuotaManager's sensor):
        not its Rate's floor of (windows - 1) windows, which client quotas use."""
        now = self._clock()
        self._purge(now)
        if not self._samples:
            return 0.0
        elapsed = max(now - self._samples[0][0], self._window_s)
        return sum(sample[2] for sample in self._samples) / elapsed

    def _limit(self):
        limit = self._rate_of()
        if limit is None or limit < 0 or limit >= LONG_MAX:
            return None
        return limit

    def is_exceeded(self) -> bool:
        limit = self._limit()
        return limit is not None and self.rate() > limit

    def seconds_until_under(self) -> float:
        """0 when the quota is not used up; otherwise how long until it is not (with no more
        bytes recorded): when the rate falls to the limit, or the oldest sample leaves,
        whichever comes first (then the caller looks again)."""
        limit = self._limit()
        if limit is None or self.rate() <= limit:
            return 0.0
        now = self._clock()
        oldest = self._samples[0]
        leaves = oldest[1] + self._windows * self._window_s
        if limit > 0:
            leaves = min(leaves, oldest[0] + sum(sample[2] for sample in self._samples) / limit)
        return max(0.0, leaves - now) + 0.001       # a hair past: the rate is then <= limit
