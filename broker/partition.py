"""One partition as the replica layer sees it: leader epoch, replicas, ISR, log, high watermark.

Theory of operation (Kafka's Partition):

- The leader appends producer batches to its local `storage.log.Log` with its leader epoch stamped
  into each batch; the log end offset (LEO) moves at once.
- The high watermark (HW) is the offset below which every in-sync replica has the data: the minimum
  LEO over the (maximal) ISR. With one replica the ISR is just the leader, so HW = LEO right after
  each append (`maybe_increment_high_watermark`). In a cluster each follower reports its LEO by
  fetching from the leader (`update_follower_fetch_state`, with Kafka's last-caught-up rule),
  which may move the HW; the replica manager turns followers that caught up or fell behind into
  ISR changes through the controller (broker/alter_partition_manager.py).
- A follower (`make_follower`) holds the leader's batches, appended by broker/replica_fetcher.py,
  and its own HW learnt from the leader; it serves consumers only with replica.selector.class
  (KIP-392), up to that HW.
- Consumers read below the HW (read_uncommitted) or below the last stable offset (read_committed;
  equal to the HW until transactions exist); followers read up to the LEO.
- acks=-1 is satisfied when the HW covers the append; `min.insync.replicas` is checked against the
  ISR size before appending (NOT_ENOUGH_REPLICAS), as Kafka does.
- Requests may carry the leader epoch the client believes current: older -> FENCED_LEADER_EPOCH,
  newer -> UNKNOWN_LEADER_EPOCH, -1 -> not checked.

Errors reach responses as `protocol.errors.KafkaError` raised from here or from storage.

Concurrency contract: on the event loop thread. Appends and reads are plain page-cache file I/O
(storage writes without fsync), which Kafka also does on its request threads.
"""
from __future__ import annotations

from protocol.errors import ErrorCode, KafkaError

# ListOffsets special timestamps (Kafka's ListOffsetsRequest constants).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4   # KIP-405: no tiered storage here, so the same as earliest
LATEST_TIERED_TIMESTAMP = -5    # KIP-1005

READ_UNCOMMITTED = 0
READ_COMMITTED = 1


def checked_isolation_level(level: int) -> int:
    """Kafka's IsolationLevel.forId: a request with another level fails as a whole, with the
    UNKNOWN_SERVER_ERROR its IllegalArgumentException becomes."""
    if level not in (READ_UNCOMMITTED, READ_COMMITTED):
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"Unknown isolation level {level}")
    return level


class ReadResult:
    """What one partition contributes to a Fetch response (also `must_respond` input)."""

    __slots__ = ("error_code", "high_watermark", "last_stable_offset", "log_start_offset",
                 "records", "records_size", "diverging_epoch", "preferred_read_replica",
                 "aborted_transactions")

    def __init__(self, error_code=ErrorCode.NONE, high_watermark=-1, last_stable_offset=-1,
                 log_start_offset=-1, records=None, diverging_epoch=None):
        self.diverging_epoch = diverging_epoch      # (epoch, end offset): Fetch v12+
        self.preferred_read_replica = -1            # KIP-392: Fetch v11+
        self.aborted_transactions = None            # read_committed: [(producer_id, first)]
        self.error_code = error_code
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        self.records = records
        self.records_size = len(records) if records is not None else 0


class Partition:
    def __init__(self, topic: str, partition: int, local_broker_id: int, log):
        self.topic = topic
        self.partition = partition
        self.local_broker_id = local_broker_id
        self.log = log
        self.topic_id = log.topic_id if log is not None else None
        self.leader_id = -1
        self.leader_epoch = -1
        # Where this leader's epoch began (the LEO when it became leader; Kafka's
        # leaderEpochStartOffsetOpt), None when not leader: a follower joins the ISR only from
        # there, and a high watermark still below it answers ListOffsets OFFSET_NOT_AVAILABLE.
        self.leader_epoch_start_offset: int | None = None
        self.replicas: list[int] = []
        self.isr: set[int] = set()
        self.isr_order: list[int] = []       # the same, in the controller's order (set_isr)
        # LEO of each follower as last reported by its fetches (empty with one replica), when
        # each last caught up with this leader, and this leader's LEO at its previous fetch
        # (Kafka's Replica state: what ISR shrink and expand decide on).
        self.follower_log_end_offsets: dict[int, int] = {}
        self.follower_caught_up_ms: dict[int, int] = {}
        self.follower_last_fetch_leo: dict[int, int] = {}
        self.follower_last_fetch_ms: dict[int, int] = {}
        self.follower_log_start_offsets: dict[int, int] = {}     # as each follower reports it
        self.partition_epoch = -1           # the state znode's version (a cluster)
        self.pending_isr = None             # an ISR change sent to the controller, unanswered
        self.clock = None                   # .ms(): set by the replica manager
        # A cluster (set by the replica manager): replica.lag.time.max.ms, and whether a broker
        # is alive (a caught-up follower outside the ISR holds the HW back until it joins).
        self.replica_lag_time_max_ms = 30000
        self.is_alive = None

    def __repr__(self) -> str:
        return (f"Partition({self.topic}-{self.partition} epoch={self.leader_epoch} "
                f"leo={self.log_end_offset} hw={self.high_watermark})")

    # -- leadership ----------------------------------------------------------------------------

    def set_isr(self, members) -> None:
        """The ISR as the controller states it: `isr` for membership, `isr_order` for its order
        (Kafka's ISR is a list: describe shows "Isr: 1,2,0" after broker 0 rejoined)."""
        self.isr_order = list(dict.fromkeys(members))
        self.isr = set(self.isr_order)

    def make_leader(self, leader_epoch: int, replicas: list[int], topic_id=None,
                    isr=None, partition_epoch: int = -1) -> bool:
        """Become leader at `leader_epoch`: the epoch starts at the current LEO. `isr`: the
        controller's ISR (a cluster); None on a single broker, where the ISR starts as the
        leader alone. Returns True if this is a new leadership (epoch or leader changed)."""
        self.log.fence_appends()        # a follower append in its fetcher's thread ends first
        if topic_id is not None:
            self.topic_id = topic_id
        was_leader = self.is_leader
        new_leadership = not was_leader or leader_epoch != self.leader_epoch
        self.leader_id = self.local_broker_id
        self.replicas = list(replicas) or [self.local_broker_id]
        self.set_isr(list(isr or ()) + [self.local_broker_id])
        self.partition_epoch = partition_epoch
        self.pending_isr = None
        if new_leadership and not was_leader:
            # Kafka's resetReplicaState for a new leader: each follower's LEO is unknown until
            # it fetches from this leader.
            self.follower_log_end_offsets = {r: -1 for r in self.replicas
                                             if r != self.local_broker_id}
            now = self._now_ms()
            self.follower_caught_up_ms = {r: (now if r in self.isr else 0)
                                          for r in self.follower_log_end_offsets}
            self.follower_last_fetch_leo = {r: -1 for r in self.follower_log_end_offsets}
            self.follower_last_fetch_ms = {r: 0 for r in self.follower_log_end_offsets}
            self.follower_log_start_offsets = {}
        elif new_leadership:
            # Leader again at a new epoch (the controller bumps it when it changes the ISR):
            # what the followers fetched stays known, as Kafka's resetReplicaState with
            # isNewLeader false, so the high watermark need not wait for their next fetch.
            now = self._now_ms()
            followers = [r for r in self.replicas if r != self.local_broker_id]
            known = self.follower_log_end_offsets
            self.follower_log_end_offsets = {r: known.get(r, -1) for r in followers}
            self.follower_caught_up_ms = {r: (now if r in self.isr else 0) for r in followers}
            self.follower_last_fetch_leo = {r: self.log.log_end_offset for r in followers}
            self.follower_last_fetch_ms = {r: (now if r in self.isr else 0) for r in followers}
            self.follower_log_start_offsets = {r: v for r, v in
                                               self.follower_log_start_offsets.items()
                                               if r in followers}
        else:
            for r in self.replicas:
                if r != self.local_broker_id and r not in self.follower_log_end_offsets:
                    self.follower_log_end_offsets[r] = -1
                    self.follower_caught_up_ms[r] = 0
                    self.follower_last_fetch_leo[r] = -1
        if leader_epoch > self.leader_epoch or self.leader_epoch < 0:
            self.leader_epoch = leader_epoch
            # Kafka records where the epoch starts when leadership begins (a follower that
            # fetches with an older epoch learns where it diverges, even from an empty log).
            # For an empty log the checkpoint is written with the first append: its fsync
            # (~2 ms) would otherwise be paid per partition by CreateTopics, on the loop.
            end = self.log.log_end_offset
            self.log.leader_epoch_cache.assign(leader_epoch, end, write=end > 0)
            self.leader_epoch_start_offset = end
        elif self.leader_epoch_start_offset is None:
            # Leader at an epoch it followed (no controller does that): from here.
            self.leader_epoch_start_offset = self.log.log_end_offset
        self.maybe_increment_high_watermark()
        return new_leadership

    def make_follower(self, leader_id: int, leader_epoch: int, replicas: list[int],
                      partition_epoch: int = -1, topic_id=None) -> bool:
        """Follow `leader_id` at `leader_epoch` (-1: no leader). Returns True if the leader or
        its epoch changed (the fetcher restarts from this replica's LEO)."""
        self.log.fence_appends()        # as make_leader: the log is this role's from here
        if topic_id is not None:
            self.topic_id = topic_id
        changed = leader_id != self.leader_id or leader_epoch != self.leader_epoch
        self.leader_id = leader_id
        self.leader_epoch = max(self.leader_epoch, leader_epoch)
        self.replicas = list(replicas)
        self.set_isr(())
        self.partition_epoch = partition_epoch
        self.pending_isr = None
        self.leader_epoch_start_offset = None
        self.follower_log_end_offsets = {}
        self.follower_caught_up_ms = {}
        self.follower_last_fetch_leo = {}
        self.follower_last_fetch_ms = {}
        self.follower_log_start_offsets = {}
        return changed

    def _now_ms(self) -> int:
        clock = self.clock
        return clock.ms() if clock is not None else 0

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    def check_current_leader_epoch(self, current_leader_epoch: int) -> None:
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH,
                             f"leader epoch {current_leader_epoch} < {self.leader_epoch}")
        if current_leader_epoch > self.leader_epoch:
            raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH,
                             f"leader epoch {current_leader_epoch} > {self.leader_epoch}")

    def _require_leader(self) -> None:
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker {self.local_broker_id} does not lead "
                             f"{self.topic}-{self.partition}")

    # -- offsets -------------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    @property
    def maximal_isr(self) -> set:
        """The ISR the high watermark counts: the committed one plus a pending expansion (a
        pending shrink still counts the members it would remove), as Kafka's."""
        if self.pending_isr is None:
            return self.isr
        return self.isr | self.pending_isr

    def effective_min_isr(self) -> int:
        """min(min.insync.replicas, replication factor), Kafka's effectiveMinIsr."""
        min_isr = getattr(self.log.config, "min_insync_replicas", 1)
        return min(min_isr, max(len(self.replicas), 1))

    def maybe_increment_high_watermark(self) -> bool:
        """Move the HW to the smallest LEO in the maximal ISR, and of any caught-up live
        follower about to join it (Kafka's shouldWaitForReplicaToJoinIsr: otherwise a follower
        one fetch behind under steady produce would never reach the HW and never rejoin);
        True if it moved. As in Kafka 3.7+, it does not move while the committed ISR is
        smaller than the effective min.insync.replicas, so an acks=all write is never
        acknowledged by fewer."""
        if len(self.isr) < self.effective_min_isr():
            return False
        isr = self.maximal_isr
        leo = self.log.log_end_offset
        new_hw = leo
        now = None
        for replica, replica_leo in self.follower_log_end_offsets.items():
            if replica_leo >= new_hw:
                continue
            if replica not in isr:
                if self.is_alive is not None and not self.is_alive(replica):
                    continue
                if now is None:
                    now = self._now_ms()
                if replica_leo != leo and now - self.follower_caught_up_ms.get(replica, 0) > \
                        self.replica_lag_time_max_ms:
                    continue
            new_hw = replica_leo
        if new_hw > self.log.high_watermark:
            self.log.update_high_watermark(new_hw)
            return True
        return False

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int,
                                    now_ms: int | None = None,
                                    log_start_offset: int = -1) -> bool:
        """A follower fetched from `fetch_offset`: it holds everything below (and from
        `log_start_offset`, its own, when the fetch says). Records when it last caught up
        (Kafka's rule: at this fetch if it asked for the leader's LEO, else at its previous
        fetch if it asked for the LEO the leader had then). True if HW moved."""
        if replica_id not in self.follower_log_end_offsets:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker {replica_id} is not a replica of "
                             f"{self.topic}-{self.partition}")
        now = self._now_ms() if now_ms is None else now_ms
        leo = self.log.log_end_offset
        if fetch_offset >= leo:
            self.follower_caught_up_ms[replica_id] = now
        elif fetch_offset >= self.follower_last_fetch_leo.get(replica_id, -1) >= 0:
            self.follower_caught_up_ms[replica_id] = self.follower_last_fetch_ms.get(
                replica_id, 0)
        self.follower_last_fetch_leo[replica_id] = leo
        self.follower_last_fetch_ms[replica_id] = now
        self.follower_log_end_offsets[replica_id] = fetch_offset
        if log_start_offset >= 0:
            self.follower_log_start_offsets[replica_id] = log_start_offset
        return self.maybe_increment_high_watermark()

    def isr_expansion_candidate(self, replica_id: int, alive) -> bool:
        """Kafka's maybeExpandIsr condition: not in the ISR, no change pending, alive, caught up
        to the high watermark and into the current leader epoch."""
        if replica_id in self.isr or self.pending_isr is not None or not self.is_leader:
            return False
        if alive is not None and replica_id not in alive:
            return False
        leo = self.follower_log_end_offsets.get(replica_id, -1)
        if leo < self.log.high_watermark:
            return False
        epoch_start = self.leader_epoch_start_offset
        return epoch_start is not None and leo >= epoch_start

    def out_of_sync_replicas(self, now_ms: int, lag_ms: int) -> set:
        """ISR followers that have not caught up for `lag_ms` (Kafka's getOutOfSyncReplicas)."""
        leo = self.log.log_end_offset
        out = set()
        for replica in self.isr:
            if replica == self.local_broker_id:
                continue
            if self.follower_log_end_offsets.get(replica, -1) != leo and \
                    now_ms - self.follower_caught_up_ms.get(replica, 0) > lag_ms:
                out.add(replica)
        return out

    def preferred_read_replica(self, fetch_offset: int, client_rack: str, rack_of,
                               now_ms: int | None = None) -> int:
        """KIP-392's RackAwareReplicaSelector over the replicas Kafka's
        findPreferredReadReplica offers it: this leader, else the most caught-up in-sync
        follower in the consumer's rack (largest log end, then the most recently caught up,
        then the highest id: ReplicaView's comparator) whose own log holds `fetch_offset`; -1
        when the leader should serve it. `rack_of(broker)` is None for a broker the consumer
        cannot reach."""
        if not client_rack or rack_of(self.local_broker_id) == client_rack:
            return -1
        now = self._now_ms() if now_ms is None else now_ms
        best, best_key = -1, None
        for replica in self.isr:
            if replica == self.local_broker_id or rack_of(replica) != client_rack:
                continue
            leo = self.follower_log_end_offsets.get(replica, -1)
            start = self.follower_log_start_offsets.get(replica, -1)
            if not start <= fetch_offset <= leo:
                continue
            key = (leo, -(now - self.follower_caught_up_ms.get(replica, 0)), replica)
            if best_key is None or key > best_key:
                best, best_key = replica, key
        return best

    def diverging_epoch(self, fetch_offset: int, last_fetched_epoch: int):
        """Fetch v12+ (KIP-320/595): (epoch, end offset) when the fetcher's log diverges from
        this leader's at `last_fetched_epoch`, else None."""
        if last_fetched_epoch < 0:
            return None
        epoch, end_offset = self.log.leader_epoch_cache.end_offset_for(last_fetched_epoch)
        if epoch < 0 or end_offset < 0:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"Could not determine the end offset of the last fetched epoch "
                             f"{last_fetched_epoch} of {self.topic}-{self.partition}")
        if fetch_offset < self.log.log_start_offset:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"fetch offset {fetch_offset} is below the log start offset "
                             f"{self.log.log_start_offset} of {self.topic}-{self.partition}")
        if epoch < last_fetched_epoch or end_offset < fetch_offset:
            return epoch, end_offset
        return None

    # -- append --------------------------------------------------------------------------------

    def append_records_to_leader(self, records, required_acks: int, now_ms: int | None = None,
                                 **validation):
        """Validate and append a producer's records; returns storage's LogAppendInfo.
        `validation` goes to storage (origin, produce_version, verification).

        Raises KafkaError (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, or storage's validation
        and producer-state errors). The HW moves here when the ISR allows it."""
        self._require_leader()
        min_isr = self.effective_min_isr()
        if required_acks == -1 and len(self.isr) < min_isr:
            raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS,
                             f"The size of the current ISR {sorted(self.isr)} is insufficient "
                             f"to satisfy the min.isr requirement of {min_isr} for partition "
                             f"{self.topic}-{self.partition}")
        info = self.log.append_as_leader(records, self.leader_epoch, now_ms, **validation)
        self.maybe_increment_high_watermark()
        return info

    # -- read ----------------------------------------------------------------------------------

    def fetch_upper_bound(self, isolation_level: int, from_follower: bool) -> int:
        """Exclusive upper offset a fetcher may read (Kafka's FetchIsolation)."""
        if from_follower:
            return self.log.log_end_offset
        if isolation_level == READ_COMMITTED:
            return self.last_stable_offset
        return self.log.high_watermark

    def read(self, fetch_offset: int, max_bytes: int, *, isolation_level: int = READ_UNCOMMITTED,
             from_follower: bool = False, min_one_message: bool = True,
             current_leader_epoch: int = -1, follower_may_serve: bool = False) -> ReadResult:
        """Read for a Fetch. Raises KafkaError (OFFSET_OUT_OF_RANGE, epoch/leader errors).
        `follower_may_serve`: a consumer fetch (KIP-392) that a follower answers, up to its own
        high watermark."""
        # The epoch first, then leadership, as Kafka's Partition.getLocalLog.
        self.check_current_leader_epoch(current_leader_epoch)
        if not (follower_may_serve and self.leader_epoch >= 0 and self.replicas):
            self._require_leader()
        log = self.log
        # Sample the offsets before reading so the answer never claims less than it returns.
        high_watermark = log.high_watermark
        upper = self.fetch_upper_bound(isolation_level, from_follower)
        log_start = log.log_start_offset
        log_end = log.log_end_offset
        if fetch_offset < log_start or fetch_offset > log_end:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"fetch offset {fetch_offset} outside [{log_start}, {log_end}] "
                             f"of {self.topic}-{self.partition}")
        records = b""
        if fetch_offset < upper and (max_bytes > 0 or min_one_message):
            info = log.read(fetch_offset, max_bytes, max_offset=upper,
                            min_one_message=min_one_message)
            records = info.records
        result = ReadResult(ErrorCode.NONE, high_watermark, self.last_stable_offset, log_start,
                            records)
        if isolation_level == READ_COMMITTED and not from_follower:
            # The aborts overlapping the records returned, so the client can drop them: up to
            # an offset past their end, as Kafka bounds them (not up to the last stable offset:
            # every fetch of a long log then listed every abort after it, and the client
            # worked through all of them each time).
            result.aborted_transactions = log.collect_aborted_transactions(
                fetch_offset, min(upper, log.fetch_upper_bound_offset(info))) \
                if len(records) else []
        return result

    def bytes_available(self, fetch_offset: int, limit: int, isolation_level: int,
                        from_follower: bool) -> int:
        """Roughly how many record bytes a fetch at `fetch_offset` would get now, at most
        `limit`. Used by the fetch purgatory's min_bytes check."""
        upper = self.fetch_upper_bound(isolation_level, from_follower)
        if fetch_offset >= upper:
            return 0
        if limit <= 1:
            return 1
        info = self.log.read(fetch_offset, limit, max_offset=upper, min_one_message=True)
        return min(len(info.records), limit)

    def behind_readable_segment(self, fetch_offset: int, isolation_level: int) -> bool:
        """A consumer's fetch offset lies in an older segment than the readable end (Kafka's
        DelayedFetch case F: the fetch answers at once, whatever min_bytes)."""
        upper = self.fetch_upper_bound(isolation_level, False)
        return fetch_offset < upper and self.log.on_older_segment(fetch_offset, upper)

    # -- offsets by time / epoch ---------------------------------------------------------------

    def legacy_offsets_for_timestamp(self, timestamp: int, max_num_offsets: int, now_ms: int,
                                     from_consumer: bool, require_leader: bool = True) -> list:
        """ListOffsets v0 (Kafka's legacyFetchOffsetsForTimestamp): see
        Log.legacy_offsets_before; a consumer never gets an offset above the high watermark
        (the high watermark stands in for them)."""
        if require_leader:
            self._require_leader()
        offsets = self.log.legacy_offsets_before(timestamp, max_num_offsets, now_ms)
        if not from_consumer:
            return offsets
        hw = self.log.high_watermark
        if any(o > hw for o in offsets):
            return [hw] + [o for o in offsets if o <= hw]
        return offsets

    def fetch_offset_for_timestamp(self, timestamp: int, isolation_level: int | None,
                                   current_leader_epoch: int = -1, from_follower: bool = False,
                                   require_leader: bool = True):
        """ListOffsets: (offset, timestamp, leader_epoch) or None when nothing matches.
        `require_leader=False`: the debugging replica id (-2), which any replica answers from
        its own log (Kafka's fetchOnlyFromLeader)."""
        self.check_current_leader_epoch(current_leader_epoch)
        if require_leader:
            self._require_leader()
        if from_follower or isolation_level is None:
            upper = self.log.log_end_offset
        else:
            upper = self.fetch_upper_bound(isolation_level, False)
        # A new leader whose high watermark has not reached its epoch's start yet cannot say
        # where a client's "latest" is (Kafka's fetchOffsetForTimestamp): retriable.
        lagging = not from_follower and isolation_level is not None and \
            self.leader_epoch_start_offset is not None and \
            self.leader_epoch_start_offset > self.log.high_watermark
        if timestamp == LATEST_TIMESTAMP:
            if lagging:
                raise self._lagging_high_watermark()
            return (upper, -1, self.leader_epoch)
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            start = self.log.log_start_offset
            return (start, -1, self._epoch_at(start))
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return None                       # no tiered storage: nothing is tiered
        found = self.log.fetch_offset_by_timestamp(timestamp)
        if found is None or found[0] >= upper:
            if lagging:
                raise self._lagging_high_watermark()
            # Kafka answers "no offset" (-1) for a match at or above the visible end.
            return None
        offset, found_timestamp, epoch = found
        return (offset, found_timestamp, -1 if epoch is None else epoch)

    def _lagging_high_watermark(self) -> KafkaError:
        return KafkaError(ErrorCode.OFFSET_NOT_AVAILABLE,
                          f"Failed to fetch offsets for partition {self.topic}-{self.partition} "
                          f"with leader epoch {self.leader_epoch} as this partition's high "
                          f"watermark ({self.log.high_watermark}) is lagging behind the start "
                          f"offset from the beginning of this epoch "
                          f"({self.leader_epoch_start_offset})")

    def _epoch_at(self, offset: int) -> int:
        """The leader epoch of the batch at `offset` (the current epoch at the log end)."""
        cache = self.log.leader_epoch_cache
        epoch_for = getattr(cache, "epoch_for_offset", None)
        if epoch_for is not None:
            epoch = epoch_for(offset)
            if epoch is not None and epoch >= 0:
                return epoch
        return self.leader_epoch

    def last_offset_for_leader_epoch(self, current_leader_epoch: int, leader_epoch: int):
        """OffsetForLeaderEpoch: (epoch, end_offset) of the largest epoch <= `leader_epoch`."""
        self.check_current_leader_epoch(current_leader_epoch)
        self._require_leader()
        return self.log.leader_epoch_cache.end_offset_for(leader_epoch)

    def low_watermark_if_leader(self, is_alive=None) -> int:
        """Kafka's lowWatermarkIfLeader: the smallest log start offset of this leader and its
        live followers (one that never reported counts as -1); NOT_LEADER_OR_FOLLOWER if this
        broker does not lead. `is_alive(broker_id)`: None on a single broker."""
        self._require_leader()
        low = self.log.log_start_offset
        for replica in self.replicas:
            if replica == self.local_broker_id or (is_alive is not None and not is_alive(replica)):
                continue
            low = min(low, self.follower_log_start_offsets.get(replica, -1))
        return low

    def delete_records_on_leader(self, offset: int) -> int:
        """DeleteRecords: move log_start_offset up to `offset` (-1 = the HW); returns the
        offset asked for, -1 resolved (the followers' log starts follow through their
        fetches; `low_watermark_if_leader` tells when they have)."""
        self._require_leader()
        policy = getattr(self.log.config, "cleanup_policy", "delete")
        if isinstance(policy, str):
            policy = [p.strip() for p in policy.split(",")]
        if "delete" not in policy:
            raise KafkaError(ErrorCode.POLICY_VIOLATION,
                             f"Records of partition {self.topic}-{self.partition} can not be "
                             f"deleted due to the configured policy")
        if offset == -1:
            offset = self.log.high_watermark
        if offset < 0 or offset > self.log.high_watermark:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"cannot delete {self.topic}-{self.partition} records before "
                             f"{offset}: high watermark is {self.log.high_watermark}")
        if offset > self.log.log_start_offset:
            self.log.delete_records_before(offset)
        return offset
