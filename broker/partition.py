"""One partition as the replica layer sees it: leader epoch, replicas, ISR, log, high watermark.

Theory of operation (Kafka's Partition, for the leader side):

- The leader appends producer batches to its local `storage.log.Log` with its leader epoch stamped
  into each batch; the log end offset (LEO) moves at once.
- The high watermark (HW) is the offset below which every in-sync replica has the data: the minimum
  LEO over the ISR. With one replica the ISR is just the leader, so HW = LEO right after each append
  (`maybe_increment_high_watermark`). A follower (later) reports its LEO by fetching from us
  (`update_follower_fetch_state`), which may move the HW the same way - nothing else changes.
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


class ReadResult:
    """What one partition contributes to a Fetch response (also `must_respond` input)."""

    __slots__ = ("error_code", "high_watermark", "last_stable_offset", "log_start_offset",
                 "records", "records_size")

    def __init__(self, error_code=ErrorCode.NONE, high_watermark=-1, last_stable_offset=-1,
                 log_start_offset=-1, records=None):
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
        self.replicas: list[int] = []
        self.isr: set[int] = set()
        # LEO of each follower as last reported by its fetches (empty with one replica).
        self.follower_log_end_offsets: dict[int, int] = {}

    def __repr__(self) -> str:
        return (f"Partition({self.topic}-{self.partition} epoch={self.leader_epoch} "
                f"leo={self.log_end_offset} hw={self.high_watermark})")

    # -- leadership ----------------------------------------------------------------------------

    def make_leader(self, leader_epoch: int, replicas: list[int], topic_id=None) -> None:
        """Become leader at `leader_epoch`: the epoch starts at the current LEO."""
        if topic_id is not None:
            self.topic_id = topic_id
        self.leader_id = self.local_broker_id
        self.replicas = list(replicas) or [self.local_broker_id]
        # The ISR starts as the leader alone; followers join once they catch up (later issue).
        self.isr = {self.local_broker_id}
        self.follower_log_end_offsets = {r: -1 for r in self.replicas
                                         if r != self.local_broker_id}
        if leader_epoch > self.leader_epoch or self.leader_epoch < 0:
            self.leader_epoch = leader_epoch
            # Kafka records where the epoch starts when leadership begins. An empty log skips
            # it: its first append records (epoch, 0) anyway, and the checkpoint's fsync
            # (~2 ms) would otherwise be paid per partition by CreateTopics, on the loop.
            if self.log.log_end_offset > 0:
                self.log.leader_epoch_cache.assign(leader_epoch, self.log.log_end_offset)
        self.maybe_increment_high_watermark()

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
        # No transactions yet: nothing is pending, so everything below the HW is stable.
        return self.log.high_watermark

    def maybe_increment_high_watermark(self) -> bool:
        """Move the HW to the smallest LEO in the ISR; True if it moved."""
        new_hw = self.log.log_end_offset
        for replica in self.isr:
            if replica != self.local_broker_id:
                new_hw = min(new_hw, self.follower_log_end_offsets.get(replica, -1))
        if new_hw > self.log.high_watermark:
            self.log.update_high_watermark(new_hw)
            return True
        return False

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int) -> bool:
        """A follower fetched from `fetch_offset`: it holds everything below. True if HW moved."""
        if replica_id not in self.follower_log_end_offsets:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker {replica_id} is not a replica of {self.topic}-{self.partition}")
        self.follower_log_end_offsets[replica_id] = fetch_offset
        return self.maybe_increment_high_watermark()

    # -- append --------------------------------------------------------------------------------

    def append_records_to_leader(self, records, required_acks: int, now_ms: int | None = None,
                                 **validation):
        """Validate and append a producer's records; returns storage's LogAppendInfo.
        `validation` goes to storage (origin, produce_version).

        Raises KafkaError (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, or storage's validation
        and producer-state errors). The HW moves here when the ISR allows it."""
        self._require_leader()
        min_isr = getattr(self.log.config, "min_insync_replicas", 1)
        if required_acks == -1 and len(self.isr) < min_isr:
            raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS,
                             f"{len(self.isr)} in-sync replicas, min.insync.replicas={min_isr}")
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
             current_leader_epoch: int = -1) -> ReadResult:
        """Read for a Fetch. Raises KafkaError (OFFSET_OUT_OF_RANGE, epoch/leader errors)."""
        self._require_leader()
        self.check_current_leader_epoch(current_leader_epoch)
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
        return ReadResult(ErrorCode.NONE, high_watermark, self.last_stable_offset, log_start,
                          records)

    def bytes_available(self, fetch_offset: int, limit: int, isolation_level: int,
                        from_follower: bool) -> int:
        """Roughly how many record bytes a fetch at `fetch_offset` would get now (<= limit,
        but at least one batch). Used by the fetch purgatory's min_bytes check."""
        upper = self.fetch_upper_bound(isolation_level, from_follower)
        if fetch_offset >= upper:
            return 0
        if limit <= 1:
            return 1
        info = self.log.read(fetch_offset, limit, max_offset=upper, min_one_message=True)
        return len(info.records)

    # -- offsets by time / epoch ---------------------------------------------------------------

    def fetch_offset_for_timestamp(self, timestamp: int, isolation_level: int | None,
                                   current_leader_epoch: int = -1, from_follower: bool = False):
        """ListOffsets: (offset, timestamp, leader_epoch) or None when nothing matches."""
        self._require_leader()
        self.check_current_leader_epoch(current_leader_epoch)
        if from_follower or isolation_level is None:
            upper = self.log.log_end_offset
        else:
            upper = self.fetch_upper_bound(isolation_level, False)
        if timestamp == LATEST_TIMESTAMP:
            return (upper, -1, self.leader_epoch)
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            start = self.log.log_start_offset
            return (start, -1, self._epoch_at(start))
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return None                       # no tiered storage: nothing is tiered
        found = self.log.fetch_offset_by_timestamp(timestamp)
        if found is None or found[0] >= upper:
            # Kafka answers "no offset" (-1) for a match at or above the visible end.
            return None
        offset, found_timestamp, epoch = found
        return (offset, found_timestamp, -1 if epoch is None else epoch)

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
        self._require_leader()
        self.check_current_leader_epoch(current_leader_epoch)
        return self.log.leader_epoch_cache.end_offset_for(leader_epoch)

    def delete_records_on_leader(self, offset: int) -> int:
        """DeleteRecords: move log_start_offset up to `offset` (-1 = the HW); returns it."""
        self._require_leader()
        if offset == -1:
            offset = self.log.high_watermark
        if offset < 0 or offset > self.log.high_watermark:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                             f"cannot delete {self.topic}-{self.partition} records before "
                             f"{offset}: high watermark is {self.log.high_watermark}")
        if offset > self.log.log_start_offset:
            self.log.delete_records_before(offset)
        return self.log.log_start_offset
