"""Replication state on the leader and the follower, pinned against Apache Kafka 3.9.

Pure and fast: real storage Logs in tmp_path (fsync skipped), injected clocks, no sockets, no
tasks. What Kafka does is taken from 3.9's Partition.scala, Replica.scala, ReplicaManager.scala,
AbstractFetcherThread.scala, UnifiedLog.scala and LeaderEpochFileCache.java.

- Partition, leader side: makeLeader, updateFollowerFetchState / Replica.updateFetchStateOrThrow
  (lastCaughtUpTimeMs), maybeIncrementLeaderHW (maximal ISR, never backwards, held under the
  effective min ISR), maybeExpandIsr, getOutOfSyncReplicas, appendRecordsToLeader's
  NOT_ENOUGH_REPLICAS, readRecords' diverging epoch, makeFollower.
- ReplicaManager: becomeLeaderOrFollower's fencing, stopReplicas, the follower read path, ISR
  expansion on fetch and the isr-expiration task.
- The follower: AbstractFetcherThread.getOffsetTruncationState as
  ReplicaFetcher._truncate_to_diverging, and whole fetch loops between two brokers' replica
  managers (`fetch_round`), the way ReplicaFetcher._process_partition handles each answer.

Five of these found bugs when written (a follower wedged by an epoch started at its end, an
out-of-range fetch counted as the follower's position, no epoch start for a leader of an empty
log, a follower outside the ISR never rejoining under steady produce, a pending expansion
lifting the min-ISR hold); each test says what Kafka does.
"""
import types
import uuid

import pytest

from protocol.errors import ErrorCode, KafkaError
from protocol.messages.leader_and_isr import LeaderAndIsrRequest
from storage import files
from storage.log import Log
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.record_batch import RecordBatchBuilder, iter_batches

from broker.fetch_session import CachedPartition
from broker.partition import Partition
from broker.replica_fetcher import ReplicaFetcher
from broker.replica_manager import ReplicaManager

from tests.storage.log_checks import NoSync

T0 = 1_700_000_000_000
LAG_MS = 30_000
TOPIC_ID = uuid.UUID(int=0x1234)


@pytest.fixture(autouse=True)
def no_fsync(monkeypatch):
    monkeypatch.setattr(files, "fs", NoSync())


class Clock:
    def __init__(self, now=T0):
        self.now = now

    def ms(self):
        return self.now


LATEST, EARLIEST = -1, -2           # ListOffsets' special timestamps


def producer_batch(count=1, ts=T0):
    builder = RecordBatchBuilder()
    for i in range(count):
        builder.append(ts + i, b"k", b"v%d" % i)
    return builder.build()


def replica_batch(base_offset, count, epoch, ts=T0):
    """A batch as a leader wrote it: its offsets and partition leader epoch set."""
    builder = RecordBatchBuilder(base_offset=base_offset, partition_leader_epoch=epoch)
    for i in range(count):
        builder.append(ts + i, b"k", b"e%d-%d" % (epoch, base_offset + i))
    return builder.build()


def as_bytes(records) -> bytes:
    if isinstance(records, (bytes, bytearray, memoryview)):
        return bytes(records)
    return records.read_bytes()


def log_records(log_):
    """[(offset, epoch, value)] of everything in `log_`."""
    return [(r.offset, view.partition_leader_epoch, r.value)
            for view in log_.read_batches() for r in view.records()]


def open_log(path, clock=None, **config):
    config.setdefault("segment_ms", 10**12)
    clock = clock or Clock()
    return Log(str(path), LogConfig(**config), time_ms=clock.ms)


def leader_partition(tmp_path, replicas=(0, 1, 2), isr=None, epoch=1, clock=None,
                     min_isr=1, name="t-0"):
    """Broker 0 leading t-0 at `epoch` (ISR from the controller: all replicas by default)."""
    clock = clock or Clock()
    part = Partition("t", 0, 0, open_log(tmp_path / name, clock, min_insync_replicas=min_isr))
    part.clock = clock
    part.make_leader(epoch, list(replicas), isr=list(replicas if isr is None else isr),
                     partition_epoch=0)
    return part


def append(part, count, acks=1):
    return part.append_records_to_leader(producer_batch(count), acks)


# =============================================================================================
# Partition, leader side
# =============================================================================================

def test_make_leader_takes_the_controllers_isr_and_starts_the_epoch_at_the_leo(tmp_path):
    clock = Clock()
    part = leader_partition(tmp_path, isr=[0, 1], clock=clock)
    assert part.is_leader and part.leader_epoch == 1 and part.partition_epoch == 0
    assert part.isr == {0, 1}
    append(part, 5)
    clock.now += 1000
    assert part.make_leader(4, [0, 1, 2], isr=[0, 2], partition_epoch=3) is True
    assert part.isr == {0, 2} and part.partition_epoch == 3 and part.leader_epoch == 4
    # Kafka: maybeAssignEpochStartOffset(leaderEpoch, logEndOffset).
    assert part.log.leader_epoch_cache.entries() == [(1, 0), (4, 5)]
    assert part.leader_epoch_start_offset == 5
    # Replica.resetReplicaState, leader again at a new epoch: followers in the ISR caught up
    # now, the others at 0; the log end offsets they fetched stay known (none yet here).
    assert part.follower_log_end_offsets == {1: -1, 2: -1}
    assert part.follower_caught_up_ms == {1: 0, 2: clock.now}
    assert part.follower_last_fetch_leo == {1: 5, 2: 5}
    # With no ISR from the controller (a single broker) the ISR is the leader alone.
    single = Partition("u", 0, 0, open_log(tmp_path / "u-0"))
    single.make_leader(0, [0])
    assert single.isr == {0} and single.follower_log_end_offsets == {}


def test_a_leader_at_a_new_epoch_keeps_what_its_followers_fetched(tmp_path):
    """Kafka's resetReplicaState with isNewLeader false: the controller bumped the leader
    epoch (it changed the ISR), the leader stays: the followers' log end offsets stay known
    and the high watermark does not wait for their next fetch. A leader that was a follower
    knows nothing of them."""
    clock = Clock()
    part = leader_partition(tmp_path, replicas=(0, 1, 2), isr=[0, 1, 2], clock=clock)
    append(part, 5)
    part.update_follower_fetch_state(1, 5, now_ms=T0)
    part.update_follower_fetch_state(2, 3, now_ms=T0)
    assert part.high_watermark == 3
    append(part, 2)                                            # LEO 7
    part.make_leader(2, [0, 1, 2], isr=[0, 1], partition_epoch=1)   # 2 left the ISR
    assert part.follower_log_end_offsets == {1: 5, 2: 3}
    assert part.high_watermark == 5                            # 0 and 1 have 0-4
    part.make_follower(1, 3, [0, 1, 2], partition_epoch=2)
    part.make_leader(4, [0, 1, 2], isr=[0, 1], partition_epoch=3)
    assert part.follower_log_end_offsets == {1: -1, 2: -1}


def test_last_caught_up_time_follows_kafkas_rule(tmp_path):
    """Replica.updateFetchStateOrThrow: a fetch at >= the leader's LEO caught up now; else one
    at >= the leader's LEO at the previous fetch caught up at the previous fetch's time;
    otherwise lastCaughtUpTimeMs stays."""
    clock = Clock()
    part = leader_partition(tmp_path, replicas=(0, 1), clock=clock)
    append(part, 10)
    assert part.follower_caught_up_ms[1] == T0              # in the ISR at makeLeader

    part.update_follower_fetch_state(1, 4, now_ms=T0 + 1000)     # behind: unchanged
    assert part.follower_caught_up_ms[1] == T0
    assert part.follower_last_fetch_leo[1] == 10
    assert part.follower_last_fetch_ms[1] == T0 + 1000

    part.update_follower_fetch_state(1, 10, now_ms=T0 + 2000)    # at the LEO: now
    assert part.follower_caught_up_ms[1] == T0 + 2000

    append(part, 5)                                              # leader LEO 15
    part.update_follower_fetch_state(1, 12, now_ms=T0 + 3000)    # >= 10, the LEO at T0+2000
    assert part.follower_caught_up_ms[1] == T0 + 2000
    part.update_follower_fetch_state(1, 14, now_ms=T0 + 4000)    # < 15, the LEO at T0+3000
    assert part.follower_caught_up_ms[1] == T0 + 2000
    part.update_follower_fetch_state(1, 15, now_ms=T0 + 5000)    # caught up again
    assert part.follower_caught_up_ms[1] == T0 + 5000
    assert part.follower_log_end_offsets[1] == 15

    # The first fetch after a new leadership has no previous leader LEO to compare with.
    clock.now = T0 + 6000
    part.make_leader(2, [0, 1], isr=[0], partition_epoch=1)
    assert part.follower_caught_up_ms[1] == 0
    part.update_follower_fetch_state(1, 3, now_ms=T0 + 7000)
    assert part.follower_caught_up_ms[1] == 0
    part.update_follower_fetch_state(1, 15, now_ms=T0 + 8000)
    assert part.follower_caught_up_ms[1] == T0 + 8000


def test_a_fetch_from_a_non_replica_is_refused(tmp_path):
    part = leader_partition(tmp_path, replicas=(0, 1))
    with pytest.raises(KafkaError) as info:
        part.update_follower_fetch_state(7, 0, now_ms=T0)
    assert info.value.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_high_watermark_is_the_min_leo_of_the_isr_and_never_moves_back(tmp_path):
    part = leader_partition(tmp_path, replicas=(0, 1, 2), isr=[0, 1, 2])
    append(part, 10)
    assert part.high_watermark == 0                     # followers' LEOs unknown
    assert part.update_follower_fetch_state(1, 6, now_ms=T0) is False   # 2 still unknown
    assert part.high_watermark == 0
    assert part.update_follower_fetch_state(2, 8, now_ms=T0) is True
    assert part.high_watermark == 6
    assert part.update_follower_fetch_state(1, 10, now_ms=T0) is True
    assert part.high_watermark == 8
    # A follower that fetches from further back (it truncated) does not move the HW back.
    assert part.update_follower_fetch_state(2, 3, now_ms=T0) is False
    assert part.high_watermark == 8
    assert part.update_follower_fetch_state(2, 10, now_ms=T0) is True
    assert part.high_watermark == 10
    # A replica outside the ISR does not count.
    other = leader_partition(tmp_path, replicas=(0, 1, 2), isr=[0, 1], name="u-0")
    append(other, 4)
    other.update_follower_fetch_state(1, 4, now_ms=T0)
    assert other.high_watermark == 4 and other.follower_log_end_offsets[2] == -1


def test_high_watermark_counts_the_maximal_isr(tmp_path):
    """KIP-497: a pending expansion counts at once; a pending shrink still counts the replicas
    it would remove."""
    part = leader_partition(tmp_path, replicas=(0, 1, 2), isr=[0, 1])
    append(part, 10)
    part.update_follower_fetch_state(2, 4, now_ms=T0)
    part.pending_isr = {0, 1, 2}                         # expansion sent, unanswered
    part.update_follower_fetch_state(1, 10, now_ms=T0)
    assert part.maximal_isr == {0, 1, 2}
    assert part.high_watermark == 4
    part.isr, part.pending_isr = {0, 1, 2}, {0, 1}       # now a shrink of 2 is pending
    assert part.maximal_isr == {0, 1, 2}
    append(part, 2)
    part.update_follower_fetch_state(1, 12, now_ms=T0)
    assert part.high_watermark == 4
    part.isr, part.pending_isr = {0, 1}, None            # the controller committed it
    assert part.maybe_increment_high_watermark() is True
    assert part.high_watermark == 12


def test_high_watermark_is_held_under_the_effective_min_isr(tmp_path):
    """Kafka 3.7+ (KAFKA-15583): no HW progress while ISR < min(min.insync.replicas, RF)."""
    part = leader_partition(tmp_path, replicas=(0, 1, 2), isr=[0], min_isr=2)
    assert part.effective_min_isr() == 2
    append(part, 5)
    assert part.high_watermark == 0
    part.update_follower_fetch_state(1, 5, now_ms=T0)    # caught up, but not in the ISR
    assert part.high_watermark == 0
    part.isr = {0, 1}                                     # the controller added it
    assert part.maybe_increment_high_watermark() is True
    assert part.high_watermark == 5
    # min.insync.replicas above the replication factor: the RF is the effective minimum.
    small = leader_partition(tmp_path, replicas=(0,), min_isr=3, name="u-0")
    assert small.effective_min_isr() == 1
    append(small, 3, acks=-1)
    assert small.high_watermark == 3
    pair = leader_partition(tmp_path, replicas=(0, 1), isr=[0], min_isr=3, name="v-0")
    assert pair.effective_min_isr() == 2


def test_a_pending_expansion_does_not_lift_the_min_isr_hold(tmp_path):
    """Kafka: maybeIncrementLeaderHW returns at once if isUnderMinIsr, which is
    `partitionState.isr.size < effectiveMinIsr`, and PendingExpandIsr.isr is the last committed
    ISR. Only the min LEO is taken over the maximal ISR."""
    part = leader_partition(tmp_path, replicas=(0, 1, 2), isr=[0], min_isr=2)
    append(part, 5)
    part.pending_isr = {0, 1}                  # AlterPartition sent, the controller may refuse
    part.update_follower_fetch_state(1, 5, now_ms=T0)
    assert part.high_watermark == 0


def test_a_caught_up_follower_outside_the_isr_is_waited_for(tmp_path):
    """Kafka (maybeIncrementLeaderHW): a follower not in the (maximal) ISR that is caught up
    (Replica.isCaughtUp: at the leader's LEO, or caught up within replica.lag.time.max.ms) and
    ISR-eligible (alive) holds the HW at its LEO, so that it can reach the HW and join."""
    part = leader_partition(tmp_path, replicas=(0, 1, 2), isr=[0])
    append(part, 10)
    assert part.high_watermark == 10
    part.update_follower_fetch_state(2, 10, now_ms=T0)
    part.pending_isr = {0, 2}                 # 2 is joining; 1 must wait for the answer
    part.update_follower_fetch_state(1, 10, now_ms=T0)
    assert part.follower_caught_up_ms[1] == T0
    append(part, 5)
    part.update_follower_fetch_state(2, 15, now_ms=T0 + 10)
    assert part.high_watermark == 10          # Kafka: held by 1, caught up 10 ms ago


def test_isr_expansion_candidate(tmp_path):
    """maybeExpandIsr: not in the ISR, nothing in flight, alive, LEO >= HW and LEO >= the
    start offset of the leader's current epoch."""
    part = leader_partition(tmp_path, replicas=(0, 1, 2), isr=[0, 2])
    append(part, 10)
    part.update_follower_fetch_state(2, 4, now_ms=T0)          # HW 4
    part.make_leader(2, [0, 1, 2], isr=[0, 2], partition_epoch=1)   # epoch 2 starts at 10
    part.update_follower_fetch_state(2, 4, now_ms=T0)
    assert part.high_watermark == 4 and part.leader_epoch_start_offset == 10
    alive = {0, 1, 2}
    part.update_follower_fetch_state(1, 3, now_ms=T0)
    assert not part.isr_expansion_candidate(1, alive)          # below the HW
    part.update_follower_fetch_state(1, 6, now_ms=T0)
    assert not part.isr_expansion_candidate(1, alive)          # not into epoch 2 yet
    part.update_follower_fetch_state(1, 10, now_ms=T0)
    assert part.isr_expansion_candidate(1, alive)
    assert part.isr_expansion_candidate(1, None)               # no liveness information
    assert not part.isr_expansion_candidate(1, {0, 2})         # not alive
    assert not part.isr_expansion_candidate(2, alive)          # already in the ISR
    part.pending_isr = {0, 2}
    assert not part.isr_expansion_candidate(1, alive)          # a change in flight
    part.pending_isr = None
    part.make_follower(1, 3, [0, 1, 2], partition_epoch=2)
    assert not part.isr_expansion_candidate(1, alive)          # not the leader


def test_the_epoch_start_is_the_leaders_own_not_the_epoch_caches(tmp_path):
    """Kafka's leaderEpochStartOffsetOpt: kept by the partition from makeLeader, None as a
    follower. A log whose epoch cache lost the current epoch (a log moved between log dirs
    and reopened from its copy) does not let a lagging follower into the ISR."""
    part = leader_partition(tmp_path, replicas=(0, 1), isr=[0])
    append(part, 4)
    part.make_leader(2, [0, 1], isr=[0], partition_epoch=1)    # epoch 2 starts at 4
    part.log.leader_epoch_cache.truncate_from_end(0)
    part.update_follower_fetch_state(1, 4, now_ms=T0)
    assert part.leader_epoch_start_offset == 4
    assert part.isr_expansion_candidate(1, {0, 1})
    part.make_follower(1, 3, [0, 1], partition_epoch=2)
    assert part.leader_epoch_start_offset is None


def test_list_offsets_while_the_new_leaders_high_watermark_lags_its_epoch_start(tmp_path):
    """Kafka's fetchOffsetForTimestamp: a client asking for "latest", or for a timestamp past
    what it may read, gets OFFSET_NOT_AVAILABLE (retriable) until the high watermark reaches
    the start of the leader's epoch; earliest, matches below, and followers are answered."""
    part = leader_partition(tmp_path, replicas=(0, 1), isr=[0, 1])
    append(part, 6)                                            # LEO 6, HW 0: 1 has nothing
    part.make_leader(2, [0, 1], isr=[0, 1], partition_epoch=1)  # epoch 2 starts at 6
    part.update_follower_fetch_state(1, 3, now_ms=T0)          # HW 3
    assert part.high_watermark == 3
    for isolation in (0, 1):
        with pytest.raises(KafkaError) as caught:
            part.fetch_offset_for_timestamp(LATEST, isolation)
        assert caught.value.error_code == ErrorCode.OFFSET_NOT_AVAILABLE
        with pytest.raises(KafkaError) as caught:
            part.fetch_offset_for_timestamp(T0 + 10_000, isolation)
        assert caught.value.error_code == ErrorCode.OFFSET_NOT_AVAILABLE
    assert part.fetch_offset_for_timestamp(T0, 0)[0] == 0      # a match below the HW
    assert part.fetch_offset_for_timestamp(EARLIEST, 0)[0] == 0
    assert part.fetch_offset_for_timestamp(LATEST, None, from_follower=True)[0] == 6
    part.update_follower_fetch_state(1, 6, now_ms=T0)          # HW 6: caught up
    assert part.fetch_offset_for_timestamp(LATEST, 0) == (6, -1, 2)


def test_preferred_read_replica_is_kafkas_rack_aware_selector(tmp_path):
    """KIP-392 as Kafka's findPreferredReadReplica and RackAwareReplicaSelector: the leader
    when it is in the consumer's rack or nobody in sync there holds the offset; else, of the
    in-sync followers in that rack whose own log (its start as the follower reports it) holds
    the offset, the one with the largest log end, then the most recently caught up, then the
    highest id."""
    clock = Clock()
    part = leader_partition(tmp_path, replicas=(0, 1, 2, 3), isr=[0, 1, 2], clock=clock)
    append(part, 20)
    racks = {0: "a", 1: "b", 2: "b", 3: "b"}
    pick = lambda offset, rack="b": part.preferred_read_replica(offset, rack, racks.get)
    part.update_follower_fetch_state(1, 15, now_ms=T0, log_start_offset=0)
    part.update_follower_fetch_state(2, 18, now_ms=T0, log_start_offset=8)
    part.update_follower_fetch_state(3, 20, now_ms=T0, log_start_offset=0)   # not in the ISR
    assert pick(10) == 2                     # the most caught up
    assert pick(5) == 1                      # 2 deleted offset 5 already (retention)
    assert pick(19) == -1                    # nobody in sync in rack b holds it: the leader
    assert pick(10, rack="a") == -1          # the leader is in the consumer's rack
    assert pick(10, rack="c") == -1 and pick(10, rack=None) == -1
    clock.now = T0 + 1000
    part.update_follower_fetch_state(1, 18, now_ms=T0 + 1000, log_start_offset=0)
    part.update_follower_fetch_state(2, 18, now_ms=T0 + 1000, log_start_offset=8)
    part.append_records_to_leader(producer_batch(1), 1)                   # LEO 21
    part.update_follower_fetch_state(1, 21, now_ms=T0 + 2000, log_start_offset=0)
    part.update_follower_fetch_state(2, 20, now_ms=T0 + 2000, log_start_offset=8)
    assert pick(10) == 1                   # now the largest log end
    part.update_follower_fetch_state(2, 21, now_ms=T0 + 2000, log_start_offset=8)
    assert pick(10) == 2                   # a tie: the highest id (ReplicaView's comparator)


@pytest.mark.parametrize("client_epoch,code", [
    (1, ErrorCode.FENCED_LEADER_EPOCH), (3, ErrorCode.UNKNOWN_LEADER_EPOCH),
    (2, ErrorCode.NOT_LEADER_OR_FOLLOWER), (-1, ErrorCode.NOT_LEADER_OR_FOLLOWER)])
def test_a_follower_checks_the_clients_leader_epoch_before_leadership(tmp_path, client_epoch,
                                                                     code):
    """Kafka's Partition.getLocalLog: a client with a stale or newer leader epoch learns
    that (it refreshes its metadata accordingly) rather than NOT_LEADER_OR_FOLLOWER."""
    part = leader_partition(tmp_path, replicas=(0, 1), isr=[0, 1])
    part.make_follower(1, 2, [0, 1], partition_epoch=1)
    for call in (lambda: part.read(0, 100, current_leader_epoch=client_epoch),
                 lambda: part.fetch_offset_for_timestamp(LATEST, 0, client_epoch),
                 lambda: part.last_offset_for_leader_epoch(client_epoch, 1)):
        with pytest.raises(KafkaError) as caught:
            call()
        assert caught.value.error_code == code


def test_isr_expansion_on_an_empty_leader_log(tmp_path):
    """Kafka records (epoch, 0) at makeLeader on an empty log: a follower at 0 may join."""
    part = leader_partition(tmp_path, replicas=(0, 1), isr=[0], epoch=3)
    part.update_follower_fetch_state(1, 0, now_ms=T0)
    assert part.isr_expansion_candidate(1, {0, 1})


def test_out_of_sync_replicas_after_replica_lag_time_max(tmp_path):
    """getOutOfSyncReplicas: an ISR follower whose LEO differs from the leader's and that has
    not caught up for more than replica.lag.time.max.ms."""
    clock = Clock()
    part = leader_partition(tmp_path, replicas=(0, 1, 2), isr=[0, 1, 2], clock=clock)
    append(part, 10)
    part.update_follower_fetch_state(1, 10, now_ms=T0 + 100)       # caught up at T0+100
    part.update_follower_fetch_state(2, 4, now_ms=T0 + 100)        # caught up at T0 (ISR)
    assert part.out_of_sync_replicas(T0 + LAG_MS, LAG_MS) == set()
    assert part.out_of_sync_replicas(T0 + LAG_MS + 1, LAG_MS) == {2}
    # Follower 1 has the leader's LEO: never out of sync, however long ago it fetched.
    assert part.out_of_sync_replicas(T0 + 10 * LAG_MS, LAG_MS) == {2}
    append(part, 1)
    assert part.out_of_sync_replicas(T0 + 100 + LAG_MS, LAG_MS) == {2}
    assert part.out_of_sync_replicas(T0 + 101 + LAG_MS, LAG_MS) == {1, 2}
    # An ISR member that is not even a replica (never fetched) is out of sync.
    part.isr.add(9)
    assert 9 in part.out_of_sync_replicas(T0 + 1, LAG_MS)


def test_acks_all_below_the_effective_min_isr_appends_nothing(tmp_path):
    part = leader_partition(tmp_path, replicas=(0, 1, 2), isr=[0], min_isr=2)
    with pytest.raises(KafkaError) as info:
        append(part, 3, acks=-1)
    assert info.value.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert part.log_end_offset == 0 and log_records(part.log) == []
    append(part, 3, acks=1)                            # acks=1 and 0 are not checked
    append(part, 1, acks=0)
    assert part.log_end_offset == 4
    # Kafka checks the committed ISR: a pending expansion does not count.
    part.pending_isr = {0, 1}
    with pytest.raises(KafkaError) as info:
        append(part, 1, acks=-1)
    assert info.value.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    part.isr, part.pending_isr = {0, 1}, None
    assert append(part, 1, acks=-1).first_offset == 4
    # min.insync.replicas above the replication factor is capped by it.
    alone = leader_partition(tmp_path, replicas=(0,), min_isr=2, name="u-0")
    assert append(alone, 2, acks=-1).last_offset == 1


def test_diverging_epoch_cases(tmp_path):
    """Partition.readRecords (KIP-320/595): the end offset of the largest leader epoch <= the
    fetcher's last fetched epoch; diverging if that epoch is smaller or ends before the fetch
    offset."""
    part = leader_partition(tmp_path, replicas=(0,), epoch=1)
    append(part, 10)                                   # epoch 1: 0..9
    part.make_leader(3, [0])
    append(part, 10)                                   # epoch 3: 10..19
    part.make_leader(5, [0])
    append(part, 5)                                    # epoch 5: 20..24
    assert part.log.leader_epoch_cache.entries() == [(1, 0), (3, 10), (5, 20)]
    d = part.diverging_epoch
    assert d(25, -1) is None                           # no last fetched epoch: not checked
    # The leader's current epoch ends at its LEO.
    assert d(25, 5) is None and d(22, 5) is None
    assert d(26, 5) == (5, 25)
    # An older epoch the leader has: fine up to its end offset.
    assert d(20, 3) is None and d(15, 3) is None
    assert d(21, 3) == (3, 20)
    assert d(10, 1) is None and d(11, 1) == (1, 10)
    # An epoch the leader never had: the largest smaller one, whatever the fetch offset.
    assert d(20, 4) == (3, 20)
    assert d(12, 4) == (3, 20)
    assert d(10, 2) == (1, 10)
    # Below the leader's first epoch: that epoch "ends" where the first one starts.
    assert d(0, 0) is None
    # Above every epoch the leader has, or below its log start: OFFSET_OUT_OF_RANGE, as
    # Kafka's readRecords answers (the fetcher then asks for the leader's offsets).
    with pytest.raises(KafkaError) as raised:
        d(25, 9)
    assert raised.value.error_code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_make_follower_resets_the_leader_state(tmp_path):
    part = leader_partition(tmp_path, replicas=(0, 1, 2), isr=[0, 1])
    append(part, 4)
    part.update_follower_fetch_state(1, 4, now_ms=T0)
    part.pending_isr = {0, 1, 2}
    assert part.make_follower(1, 2, [0, 1, 2], partition_epoch=5) is True
    assert not part.is_leader and part.leader_id == 1 and part.leader_epoch == 2
    assert part.isr == set() and part.pending_isr is None and part.partition_epoch == 5
    assert part.follower_log_end_offsets == {} and part.follower_caught_up_ms == {}
    assert part.follower_last_fetch_leo == {} and part.follower_last_fetch_ms == {}
    assert part.high_watermark == 4 and part.log_end_offset == 4      # the log stays
    assert part.make_follower(1, 2, [0, 1, 2], partition_epoch=5) is False
    for call in (lambda: append(part, 1), lambda: part.read(0, 100)):
        with pytest.raises(KafkaError) as info:
            call()
        assert info.value.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(KafkaError):
        part.update_follower_fetch_state(2, 4, now_ms=T0)
    # Leading again at a later epoch starts from the LEO with fresh follower state.
    part.make_leader(3, [0, 1, 2], isr=[0, 1, 2], partition_epoch=6)
    assert part.follower_log_end_offsets == {1: -1, 2: -1}
    assert part.log.leader_epoch_cache.entries() == [(1, 0), (3, 4)]


# =============================================================================================
# ReplicaManager
# =============================================================================================

class FakeFetchers:
    def __init__(self):
        self.calls = []
        self.assigned = {}

    def has_partition(self, tp):
        return tp in self.assigned

    def add_partition(self, tp, leader_id, leader_epoch, catch_up=False):
        self.calls.append(("add", tp, leader_id, leader_epoch))
        self.assigned[tp] = (leader_id, leader_epoch)

    def remove_partition(self, tp):
        self.calls.append(("remove", tp))
        self.assigned.pop(tp, None)


class FakeIsrChanges:
    """AlterPartitionManager's face to the replica manager: submit marks the change pending."""

    def __init__(self, alive=(0, 1, 2)):
        self.alive = set(alive)
        self.submitted = []

    def alive_brokers(self):
        return set(self.alive)

    def submit(self, part, new_isr):
        if part.pending_isr is not None:
            return
        part.pending_isr = set(new_isr)
        self.submitted.append(((part.topic, part.partition), set(new_isr)))


def state(partition=0, leader=0, epoch=1, isr=(0, 1), replicas=(0, 1), partition_epoch=0):
    return LeaderAndIsrRequest.LeaderAndIsrPartitionState(
        topic_name="t", partition_index=partition, controller_epoch=1, leader=leader,
        leader_epoch=epoch, isr=list(isr), partition_epoch=partition_epoch,
        replicas=list(replicas))


async def log_config_for(topic):
    return LogConfig(segment_ms=10**12, min_insync_replicas=1)


class Broker:
    """One broker's replica manager over a real LogManager, with fake fetchers and ISR
    changes."""

    def __init__(self, path, broker_id, clock):
        self.log_manager = LogManager([str(path)], LogConfig(), time_ms=clock.ms)
        self.log_manager.startup("cluster", broker_id)
        self.rm = ReplicaManager(self.log_manager, broker_id=broker_id, time=clock,
                                 config={"replica.lag.time.max.ms": LAG_MS})
        self.rm.fetchers = FakeFetchers()
        self.rm.isr_changes = FakeIsrChanges()
        self.id = broker_id

    async def lisr(self, *states, controller_epoch=1, live=(0, 1, 2)):
        return await self.rm.become_leader_or_follower(
            controller_epoch, [("t", TOPIC_ID, ps) for ps in states], log_config_for,
            set(live))

    def part(self, partition=0):
        return self.rm.get_partition("t", partition)

    def close(self):
        self.rm.shutdown()
        self.log_manager.shutdown()


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def brokers(tmp_path, clock):
    made = {}

    def get(broker_id):
        if broker_id not in made:
            made[broker_id] = Broker(tmp_path / f"b{broker_id}", broker_id, clock)
        return made[broker_id]
    yield get
    for b in made.values():
        b.close()


def fetch_request(fetch_offset, current_epoch=-1, last_fetched_epoch=-1, partition=0):
    return CachedPartition(TOPIC_ID, "t", partition, fetch_offset, 1 << 20,
                           current_epoch, last_fetched_epoch)


def fetch_round(leader, follower):
    """One follower fetch of t-0 answered by `leader` and handled by `follower` as
    ReplicaFetcher._process_partition does. Returns the ReadResult."""
    part = follower.part()
    log_ = part.log
    latest = log_.leader_epoch_cache.latest_epoch
    request = fetch_request(log_.log_end_offset, part.leader_epoch,
                            -1 if latest is None else latest)
    result = leader.rm.read([request], max_bytes=1 << 20, replica_id=follower.id)[("t", 0)]
    if result.error_code != ErrorCode.NONE:
        return result
    if result.diverging_epoch is not None:
        stub = types.SimpleNamespace(name="fetcher-under-test")
        ReplicaFetcher._truncate_to_diverging(stub, part, *result.diverging_epoch)
        return result
    if result.records_size:
        log_.append_as_follower(as_bytes(result.records))
    log_.update_high_watermark(min(result.high_watermark, log_.log_end_offset))
    return result


def sync(leader, follower, rounds=6):
    """Fetch until an answer changes nothing at the follower and it knows the leader's HW
    (Kafka answers the HW from before the fetch's own update); returns how many rounds that
    took."""
    def follower_state():
        log_ = follower.part().log
        return log_.log_end_offset, log_.high_watermark, log_.leader_epoch_cache.entries()

    for i in range(rounds):
        before = follower_state()
        result = fetch_round(leader, follower)
        after = follower_state()
        leader_hw = leader.part().high_watermark
        if result.error_code == ErrorCode.NONE and result.diverging_epoch is None and \
                before == after and after[1] == min(leader_hw, after[0]):
            return i + 1
    raise AssertionError(f"follower {follower.id} still not in sync after {rounds} fetches: "
                         f"last answer diverging={result.diverging_epoch} "
                         f"error={result.error_code!r}, follower log "
                         f"{log_records(follower.part().log)}")


async def test_stale_controller_epoch_changes_nothing(brokers):
    b0 = brokers(0)
    error, errors, leaders, followers = await b0.lisr(state(epoch=3), controller_epoch=5)
    assert (error, errors, leaders, followers) == \
        (ErrorCode.NONE, {("t", 0): ErrorCode.NONE}, [("t", 0)], [])
    b0.rm.fetchers.calls.clear()
    result = await b0.lisr(state(leader=1, epoch=4), controller_epoch=4)
    assert result == (ErrorCode.STALE_CONTROLLER_EPOCH, {}, [], [])
    assert b0.part().is_leader and b0.part().leader_epoch == 3
    assert b0.rm.controller_epoch == 5 and b0.rm.fetchers.calls == []
    assert b0.rm.stop_replicas(4, [("t", 0, 3, True)]) == (ErrorCode.STALE_CONTROLLER_EPOCH, {})
    assert b0.part() is not None
    # The same controller epoch is fine.
    error, errors, _, followers = await b0.lisr(state(leader=1, epoch=4), controller_epoch=5)
    assert error == ErrorCode.NONE and followers == [("t", 0)]


async def test_leader_epoch_not_above_the_local_one_is_stale(brokers):
    b0 = brokers(0)
    await b0.lisr(state(epoch=3, isr=(0, 1)))
    part = b0.part()
    append(part, 2)
    b0.rm.fetchers.calls.clear()
    # Same and older epochs: ignored per partition with STALE_CONTROLLER_EPOCH (not
    # FENCED_LEADER_EPOCH); a newer partition in the same request is applied.
    for epoch in (3, 2):
        error, errors, leaders, followers = await b0.lisr(
            state(leader=1, epoch=epoch, isr=(1,)), state(partition=1, epoch=1))
        assert error == ErrorCode.NONE
        assert errors[("t", 0)] == ErrorCode.STALE_CONTROLLER_EPOCH
        assert errors[("t", 1)] in (ErrorCode.NONE, ErrorCode.STALE_CONTROLLER_EPOCH)
        assert ("t", 0) not in leaders + followers
        assert part.is_leader and part.leader_epoch == 3 and part.isr == {0, 1}
    assert b0.part(1).is_leader
    assert all(call[1] != ("t", 0) for call in b0.rm.fetchers.calls)


async def test_a_broker_not_in_the_replicas_is_unknown_topic_or_partition(brokers):
    b0 = brokers(0)
    error, errors, leaders, followers = await b0.lisr(
        state(leader=1, epoch=1, isr=(1, 2), replicas=(1, 2)))
    assert error == ErrorCode.NONE
    assert errors == {("t", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert (leaders, followers) == ([], [])
    assert b0.part() is None and b0.log_manager.get_log("t", 0) is None


async def test_an_older_partition_epoch_is_ignored(brokers):
    b0 = brokers(0)
    await b0.lisr(state(epoch=1, isr=(0, 1), partition_epoch=7))
    part = b0.part()
    assert part.partition_epoch == 7
    error, errors, leaders, followers = await b0.lisr(
        state(leader=1, epoch=2, isr=(1,), partition_epoch=6))
    assert error == ErrorCode.NONE and errors[("t", 0)] == ErrorCode.NONE
    assert (leaders, followers) == ([], [])
    assert part.is_leader and part.leader_epoch == 1 and part.isr == {0, 1}
    assert part.partition_epoch == 7
    # An equal partition epoch (AlterPartition told us it already) is applied.
    await b0.lisr(state(leader=1, epoch=2, isr=(1,), partition_epoch=7))
    assert not part.is_leader and part.leader_epoch == 2


async def test_followers_start_and_stop_fetching(brokers):
    b0 = brokers(0)
    calls = b0.rm.fetchers.calls
    _, _, leaders, followers = await b0.lisr(state(leader=1, epoch=1, isr=(0, 1)))
    assert followers == [("t", 0)] and leaders == []
    part = b0.part()
    assert not part.is_leader and part.leader_id == 1 and part.isr == set()
    assert calls == [("add", ("t", 0), 1, 1)]
    # A new epoch restarts the fetcher; a leader that is not alive stops it.
    await b0.lisr(state(leader=1, epoch=2, isr=(0, 1)))
    assert calls[-1] == ("add", ("t", 0), 1, 2)
    await b0.lisr(state(leader=2, epoch=3, isr=(0, 2), replicas=(0, 1, 2)), live=(0, 1))
    assert calls[-1] == ("remove", ("t", 0)) and part.leader_id == 2
    # Becoming leader stops fetching.
    _, _, leaders, _ = await b0.lisr(state(leader=0, epoch=4, isr=(0,)))
    assert leaders == [("t", 0)] and calls[-1] == ("remove", ("t", 0))
    assert part.is_leader and part.isr == {0}


async def test_stop_replicas_fencing_and_delete(brokers):
    b0 = brokers(0)
    await b0.lisr(*(state(partition=p, epoch=5) for p in range(4)))
    b0.rm.fetchers.calls.clear()
    errors = b0.rm.stop_replicas(1, [("t", 0, 4, False), ("t", 1, -1, False),
                                     ("t", 2, -2, True), ("t", 3, 5, True)])
    assert errors == (ErrorCode.NONE, {("t", 0): ErrorCode.FENCED_LEADER_EPOCH,
                                       ("t", 1): ErrorCode.NONE, ("t", 2): ErrorCode.NONE,
                                       ("t", 3): ErrorCode.NONE})
    assert b0.part(0) is not None and b0.part(0).is_leader
    assert b0.part(1) is None and b0.log_manager.get_log("t", 1) is not None   # kept
    for p in (2, 3):
        assert b0.part(p) is None and b0.log_manager.get_log("t", p) is None   # deleted
    assert ("remove", ("t", 1)) in b0.rm.fetchers.calls
    assert ("remove", ("t", 0)) not in b0.rm.fetchers.calls
    # A higher epoch applies; a partition this broker does not have is fine either way.
    assert b0.rm.stop_replicas(1, [("t", 0, 6, True), ("t", 9, 1, True)]) == \
        (ErrorCode.NONE, {("t", 0): ErrorCode.NONE, ("t", 9): ErrorCode.NONE})
    assert b0.log_manager.get_log("t", 0) is None


async def test_a_follower_fetch_updates_the_leaders_view_and_the_hw(brokers, clock):
    b0 = brokers(0)
    await b0.lisr(state(epoch=1, isr=(0, 1)))
    part = b0.part()
    append(part, 6)
    assert part.high_watermark == 0
    clock.now += 500
    result = b0.rm.read([fetch_request(4, 1, 1)], max_bytes=1 << 20, replica_id=1)[("t", 0)]
    assert result.error_code == ErrorCode.NONE and result.diverging_epoch is None
    assert part.follower_log_end_offsets[1] == 4 and part.high_watermark == 4
    assert part.follower_last_fetch_ms[1] == clock.now
    # Followers read up to the LEO, consumers up to the HW.
    assert [v.base_offset for v in iter_batches(as_bytes(result.records))] == [0]
    consumer = b0.rm.read([fetch_request(4, 1)], max_bytes=1 << 20)[("t", 0)]
    assert consumer.records_size == 0 and consumer.high_watermark == 4
    assert part.follower_log_end_offsets[1] == 4      # a consumer is not a follower
    b0.rm.read([fetch_request(6, 1, 1)], max_bytes=1 << 20, replica_id=1)
    assert part.high_watermark == 6


async def test_the_read_after_a_delayed_follower_fetch_does_not_move_its_state_again(
        brokers, clock):
    """Kafka's readFromPurgatory: a follower fetch that waited is read again without updating
    the follower's state; its catch-up fetcher's old request completing after a newer fetch
    from its in-sync fetcher set the follower's end back to the old offset."""
    b0 = brokers(0)
    await b0.lisr(state(epoch=1, isr=(0, 1)))
    part = b0.part()
    append(part, 6)
    b0.rm.read([fetch_request(4, 1, 1)], max_bytes=1 << 20, replica_id=1)   # waits
    clock.now += 100
    b0.rm.read([fetch_request(6, 1, 1)], max_bytes=1 << 20, replica_id=1)   # the other fetcher
    assert part.follower_log_end_offsets[1] == 6
    clock.now += 100
    b0.rm.read([fetch_request(4, 1, 1)], max_bytes=1 << 20, replica_id=1,
               update_fetch_state=False)                                   # the wait ends
    assert part.follower_log_end_offsets[1] == 6
    assert part.follower_last_fetch_ms[1] == clock.now - 100


async def test_a_diverging_fetch_returns_the_epoch_and_no_records(brokers):
    b0 = brokers(0)
    await b0.lisr(state(epoch=1, isr=(0, 1)))
    part = b0.part()
    append(part, 5)
    await b0.lisr(state(epoch=3, isr=(0, 1)))
    append(part, 5)                                   # epoch 1: 0..4, epoch 3: 5..9
    # A follower that wrote 0..7 at epoch 2 (as a leader that lost its writes).
    result = b0.rm.read([fetch_request(8, 3, 2)], max_bytes=1 << 20, replica_id=1)[("t", 0)]
    assert result.error_code == ErrorCode.NONE
    assert result.diverging_epoch == (1, 5)
    assert result.records_size == 0 and result.high_watermark == part.high_watermark
    assert part.follower_log_end_offsets[1] == -1    # Kafka: no fetch state update
    assert b0.rm.isr_changes.submitted == []
    # A consumer (KIP-320) gets the same answer.
    consumer = b0.rm.read([fetch_request(8, 3, 2)], max_bytes=1 << 20)[("t", 0)]
    assert consumer.diverging_epoch == (1, 5) and consumer.records_size == 0
    # The epoch check comes first: a stale fetcher is fenced rather than told to truncate.
    fenced = b0.rm.read([fetch_request(8, 1, 2)], max_bytes=1 << 20, replica_id=1)[("t", 0)]
    assert fenced.error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert fenced.diverging_epoch is None
    # Without divergence the read goes on.
    fine = b0.rm.read([fetch_request(5, 3, 1)], max_bytes=1 << 20, replica_id=1)[("t", 0)]
    assert fine.diverging_epoch is None and fine.records_size > 0
    assert part.follower_log_end_offsets[1] == 5


async def test_isr_expansion_is_submitted_once_the_follower_caught_up(brokers):
    b0 = brokers(0)
    await b0.lisr(state(epoch=1, isr=(0,), replicas=(0, 1, 2)))
    part = b0.part()
    append(part, 10)
    submitted = b0.rm.isr_changes.submitted
    b0.rm.read([fetch_request(0, 1)], max_bytes=1 << 20, replica_id=1)
    assert submitted == []
    b0.rm.isr_changes.alive = {0, 2}                  # not alive in the metadata cache
    b0.rm.read([fetch_request(10, 1)], max_bytes=1 << 20, replica_id=1)
    assert submitted == []
    b0.rm.isr_changes.alive = {0, 1, 2}
    b0.rm.read([fetch_request(10, 1)], max_bytes=1 << 20, replica_id=1)
    assert submitted == [(("t", 0), {0, 1})] and part.pending_isr == {0, 1}
    # One change at a time: follower 2 must wait for the answer.
    b0.rm.read([fetch_request(10, 1)], max_bytes=1 << 20, replica_id=2)
    b0.rm.read([fetch_request(10, 1)], max_bytes=1 << 20, replica_id=1)
    assert len(submitted) == 1
    # The pending member already counts for the HW.
    append(part, 2)
    assert part.high_watermark == 10


async def test_isr_shrinks_after_replica_lag_time_max(brokers, clock):
    b0 = brokers(0)
    await b0.lisr(state(epoch=1, isr=(0, 1, 2), replicas=(0, 1, 2)))
    part = b0.part()
    append(part, 5)
    submitted = b0.rm.isr_changes.submitted
    b0.rm.read([fetch_request(5, 1)], max_bytes=1 << 20, replica_id=1)   # caught up at T0
    clock.now += LAG_MS // 2
    b0.rm.read([fetch_request(5, 1)], max_bytes=1 << 20, replica_id=2)   # at T0 + LAG/2
    assert part.high_watermark == 5
    clock.now = T0 + LAG_MS + 1
    assert b0.rm.maybe_shrink_isrs() == 0            # both have the leader's LEO
    append(part, 1)
    clock.now = T0 + LAG_MS
    assert b0.rm.maybe_shrink_isrs() == 0            # lagging, but not for longer than LAG
    clock.now = T0 + LAG_MS + 1
    assert b0.rm.maybe_shrink_isrs() == 1
    assert submitted == [(("t", 0), {0, 2})]
    assert part.pending_isr == {0, 2} and part.isr == {0, 1, 2}
    clock.now += LAG_MS
    assert b0.rm.maybe_shrink_isrs() == 0            # in flight: nothing more
    # The pending shrink still counts 1 for the HW.
    b0.rm.read([fetch_request(6, 1)], max_bytes=1 << 20, replica_id=2)
    assert part.high_watermark == 5


async def test_a_follower_keeps_the_isr_by_fetching(brokers, clock):
    b0 = brokers(0)
    await b0.lisr(state(epoch=1, isr=(0, 1), replicas=(0, 1)))
    part = b0.part()
    for _ in range(10):                               # a producer, and a follower that
        append(part, 1)                               # is always one append behind
        clock.now += LAG_MS // 4
        b0.rm.read([fetch_request(part.log_end_offset - 1, 1)], max_bytes=1 << 20,
                   replica_id=1)
        assert b0.rm.maybe_shrink_isrs() == 0
    clock.now += LAG_MS + 1                           # then it stops fetching
    assert b0.rm.maybe_shrink_isrs() == 1


async def test_a_follower_outside_the_isr_rejoins_under_steady_load(brokers, clock):
    """ISR = {leader}: the HW is the leader's LEO right after every append. A follower one
    append behind fetches at its previous LEO each time, which is always below the HW, so
    `isr_expansion_candidate` (LEO >= HW) is never true. Kafka holds the HW at the LEO of a
    caught-up (Replica.isCaughtUp), ISR-eligible follower, so the follower reaches the HW on its
    next fetch and is added."""
    b0 = brokers(0)
    await b0.lisr(state(epoch=1, isr=(0,), replicas=(0, 1)))
    part = b0.part()
    append(part, 5)
    for _ in range(20):
        fetch_offset = part.log_end_offset           # what the follower has
        append(part, 1)                              # a produce between its fetches
        clock.now += 100
        b0.rm.read([fetch_request(fetch_offset, 1)], max_bytes=1 << 20, replica_id=1)
    assert b0.rm.isr_changes.submitted == [(("t", 0), {0, 1})]


async def test_an_out_of_range_follower_fetch_leaves_the_followers_state_alone(brokers):
    """Kafka (Partition.fetchRecords) updates the follower's state only after readRecords
    succeeded: OFFSET_OUT_OF_RANGE changes nothing. Here a follower with a longer, divergent
    log (no epoch to compare, or see the next test) is taken to have the leader's records:
    it enters the ISR and the HW moves past records it does not have."""
    b0 = brokers(0)
    await b0.lisr(state(epoch=2, isr=(0,), replicas=(0, 1)))
    part = b0.part()
    append(part, 5)
    result = b0.rm.read([fetch_request(50, 2)], max_bytes=1 << 20, replica_id=1)[("t", 0)]
    assert result.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert b0.rm.isr_changes.submitted == []
    assert part.follower_log_end_offsets[1] == -1


async def test_a_new_replica_catches_up_from_a_log_start_inside_a_batch(brokers):
    """DeleteRecords (Kafka Streams purging a repartition topic) moved the leader's log start
    to 15, inside its batch 10-19. A new replica fetching 0 is told OFFSET_OUT_OF_RANGE and
    starts its log at 15; the batch it is then sent begins at 10. It used to be refused as
    below the log end, which stopped that partition's fetching for good."""
    b0, b1 = brokers(0), brokers(1)
    await b0.lisr(state(epoch=1, isr=(0,), replicas=(0, 1)))
    leader = b0.part()
    for _ in range(3):
        leader.append_records_to_leader(producer_batch(10), 1)      # 0-9, 10-19, 20-29
    assert leader.delete_records_on_leader(15) == 15
    await b1.lisr(state(epoch=1, isr=(0,), replicas=(0, 1)))
    assert fetch_round(b0, b1).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    b1.part().log.truncate_fully_and_start_at(15)   # the fetcher's answer to that
    sync(b0, b1)
    follower = b1.part().log
    assert follower.log_end_offset == 30
    assert log_records(follower)[-20:] == log_records(leader.log)[-20:]
    assert leader.follower_log_end_offsets[1] == 30


async def test_a_follower_without_leader_epochs_restarts_from_its_high_watermark(brokers):
    """Records of message formats before 0.11 carry no leader epoch, so a follower holding
    only those cannot learn where it diverges: Kafka (initialFetchOffset) truncates it to its
    high watermark before it fetches. It kept 5-9 of the old leader, which the new leader
    never had, beside the new leader's records."""
    from storage.legacy import build_message_set
    b0, b1 = brokers(0), brokers(1)
    for b in (b0, b1):
        await b.lisr(state(leader=2, epoch=1, isr=(0, 1, 2), replicas=(0, 1, 2)))
    old = [(0, b"k", b"old-%d" % i) for i in range(10)]
    b1.part().log.append_as_follower(build_message_set(old, base_offset=0))      # 0-9
    b0.part().log.append_as_follower(build_message_set(old[:5], base_offset=0))  # 0-4
    for b in (b0, b1):
        b.part().log.update_high_watermark(5)
    await b0.lisr(state(leader=0, epoch=2, isr=(0,), replicas=(0, 1)))
    append(b0.part(), 5)                                                          # 5-9
    await b1.lisr(state(leader=0, epoch=2, isr=(0,), replicas=(0, 1)))
    assert b1.part().log.log_end_offset == 5
    sync(b0, b1)
    follower, leader = b1.part().log, b0.part().log
    assert follower.log_end_offset == leader.log_end_offset == 10
    assert as_bytes(follower.read(0, 1 << 20).records) == \
        as_bytes(leader.read(0, 1 << 20).records)


async def test_a_leader_elected_on_an_empty_log_still_detects_divergence(brokers):
    """Kafka's makeLeader always records (leaderEpoch, LEO) - (2, 0) here - so a former
    leader with records at epoch 1 fetching at 8 is told DivergingEpoch(1, 0) and truncates.
    Here the empty cache answers nothing; with the bug above the follower's state is then
    updated from offset 8, it joins the ISR, and acks=all writes are acknowledged that it
    never copied."""
    b0 = brokers(0)
    await b0.lisr(state(epoch=2, isr=(0,), replicas=(0, 1)))
    result = b0.rm.read([fetch_request(8, 2, 1)], max_bytes=1 << 20, replica_id=1)[("t", 0)]
    assert result.diverging_epoch == (1, 0)
    assert b0.part().follower_log_end_offsets[1] == -1


# =============================================================================================
# Follower truncation (ReplicaFetcher._truncate_to_diverging)
# =============================================================================================

def follower_log(tmp_path, layout, name="f-0"):
    """A follower Log that copied batches [(epoch, count)] from offset 0."""
    log_ = open_log(tmp_path / name)
    offset = 0
    for epoch, count in layout:
        log_.append_as_follower(replica_batch(offset, count, epoch))
        offset += count
    log_.update_high_watermark(log_.log_end_offset)
    return log_


def truncate(log_, epoch, end_offset):
    part = types.SimpleNamespace(log=log_, topic="t", partition=0)
    ReplicaFetcher._truncate_to_diverging(types.SimpleNamespace(name="fetcher-under-test"),
                                          part, epoch, end_offset)
    return log_.log_end_offset


# Epoch 1: 0..9, epoch 3: 10..19, epoch 5: 20..24 (batches of five).
LAYOUT = [(1, 5), (1, 5), (3, 5), (3, 5), (5, 5)]


@pytest.mark.parametrize("leader_epoch, leader_end, expected", [
    # The follower has the leader's epoch: min(leader's end, its own end for that epoch).
    (3, 15, 15),
    (3, 25, 20),
    (1, 5, 5),
    (5, 30, 25),              # the leader has more of it: nothing to truncate
    (5, 20, 20),
    # The follower lacks that epoch: its own end of the largest smaller epoch (the leader's
    # end offset is not used: the next fetch asks again).
    (4, 22, 20),
    (2, 7, 10),
    # Below the follower's first epoch: that epoch ends where the follower's first starts.
    (0, 0, 0),
])
def test_follower_truncation_offset(tmp_path, leader_epoch, leader_end, expected):
    log_ = follower_log(tmp_path, LAYOUT)
    assert log_.leader_epoch_cache.entries() == [(1, 0), (3, 10), (5, 20)]
    assert truncate(log_, leader_epoch, leader_end) == expected
    assert log_.high_watermark == min(25, expected)
    assert log_.leader_epoch_cache.entries() == \
        [e for e in [(1, 0), (3, 10), (5, 20)] if e[1] < expected]
    assert [r[0] for r in log_records(log_)] == list(range(expected))


def test_follower_without_epochs_truncates_to_the_leaders_end(tmp_path):
    """getOffsetTruncationState, case None: min(leader's end offset, own LEO)."""
    log_ = follower_log(tmp_path, LAYOUT)
    log_.leader_epoch_cache.clear()
    assert truncate(log_, 3, 15) == 15
    assert truncate(log_, 3, 40) == 15
    empty = open_log(tmp_path / "g-0")
    assert truncate(empty, 3, 15) == 0


def test_follower_truncation_cuts_at_a_batch_boundary(tmp_path):
    log_ = follower_log(tmp_path, LAYOUT)
    assert truncate(log_, 3, 13) == 10              # the batch 10..14 goes whole
    assert log_.leader_epoch_cache.entries() == [(1, 0)]


async def test_a_deposed_leader_truncates_its_unreplicated_writes(brokers):
    """Broker 0 leads at epoch 1 and writes 10..14 that broker 1 never copies; broker 1 leads
    at epoch 2 and writes 10..12; broker 0 comes back as its follower, is told
    DivergingEpoch(1, 10), truncates to 10 and copies broker 1's log."""
    b0, b1 = brokers(0), brokers(1)
    for b in (b0, b1):
        await b.lisr(state(leader=0, epoch=1, isr=(0, 1)))
    append(b0.part(), 5)
    append(b0.part(), 5)
    sync(b0, b1)
    assert b0.part().high_watermark == 10 and b1.part().high_watermark == 10
    append(b0.part(), 5)                               # acks=1, never replicated
    await b1.lisr(state(leader=1, epoch=2, isr=(1,)))
    append(b1.part(), 3)
    await b0.lisr(state(leader=1, epoch=2, isr=(1,)))
    first = fetch_round(b1, b0)
    assert first.diverging_epoch == (1, 10)
    assert b0.part().log.log_end_offset == 10
    sync(b1, b0)
    assert log_records(b0.part().log) == log_records(b1.part().log)
    assert b0.part().log.leader_epoch_cache.entries() == [(1, 0), (2, 10)]
    assert b1.part().log.leader_epoch_cache.entries() == [(1, 0), (2, 10)]
    assert b1.rm.isr_changes.submitted == [(("t", 0), {0, 1})]


async def test_truncation_in_two_steps_when_the_follower_lacks_the_leaders_epoch(brokers):
    """The follower wrote epoch 3 as a leader; the leader has epochs 1, 2, 4: it answers
    (2, 15), the follower lacks 2 and truncates to the end of its epoch 1 (10), then the next
    fetch (last fetched epoch 1) agrees and it copies from there."""
    b0, b1 = brokers(0), brokers(1)
    for b in (b0, b1):
        await b.lisr(state(leader=0, epoch=1, isr=(0, 1)))
    append(b0.part(), 10)
    sync(b0, b1)
    await b1.lisr(state(leader=1, epoch=2, isr=(1,)))
    append(b1.part(), 5)                               # epoch 2: 10..14 on broker 1 only
    await b0.lisr(state(leader=0, epoch=3, isr=(0,)))  # (as if 1 were unreachable)
    append(b0.part(), 10)                              # epoch 3: 10..19 on broker 0 only
    await b1.lisr(state(leader=1, epoch=4, isr=(1,)))
    append(b1.part(), 2)                               # epoch 4: 15..16
    await b0.lisr(state(leader=1, epoch=4, isr=(1,)))
    assert fetch_round(b1, b0).diverging_epoch == (2, 15)
    assert b0.part().log.log_end_offset == 10
    sync(b1, b0)
    assert log_records(b0.part().log) == log_records(b1.part().log)
    assert b0.part().log.leader_epoch_cache.entries() == [(1, 0), (2, 10), (4, 15)]


async def test_a_leadership_without_appends_does_not_wedge_the_follower(brokers):
    """Broker 1 leads epoch 2 with LEO 10 and appends nothing: its cache gets (2, 10). Broker 0
    leads again at epoch 3. Broker 1, now its follower, fetches with last fetched epoch 2; the
    leader answers DivergingEpoch(1, 10); the truncation target is its LEO, 10, and nothing is
    removed - nor the (2, 10) entry - so every later fetch gets the same answer: the follower
    never copies another record (and spins on an immediate answer). Kafka's UnifiedLog.truncateTo
    truncates the epoch cache at the LEO even when the log is not truncated, for exactly this
    case ("a conflicting epoch entry at the end of the log ... if this broker was a leader and
    inserted the first start offset entry, but then failed to append any entries")."""
    b0, b1 = brokers(0), brokers(1)
    for b in (b0, b1):
        await b.lisr(state(leader=0, epoch=1, isr=(0, 1)))
    append(b0.part(), 10)
    sync(b0, b1)
    # A preferred-leader round trip: 1 leads epoch 2 (no produce meanwhile), then 0 again.
    for b in (b0, b1):
        await b.lisr(state(leader=1, epoch=2, isr=(0, 1)))
    sync(b1, b0)
    for b in (b0, b1):
        await b.lisr(state(leader=0, epoch=3, isr=(0, 1)))
    assert b1.part().log.leader_epoch_cache.entries() == [(1, 0), (2, 10)]
    append(b0.part(), 5)
    sync(b0, b1)
    assert log_records(b1.part().log) == log_records(b0.part().log)


async def test_only_a_new_leadership_counts_as_led_now(brokers):
    """Kafka's makeLeaders keeps the partitions whose makeLeader returned isNewLeader: an epoch
    bump of a partition already led here (the controller shrinking its ISR) is no new
    leadership, so the coordinators do not reload their state (the group rebalances in flight,
    a transaction in the middle) on every broker failure."""
    b0 = brokers(0)
    _, _, leaders, _ = await b0.lisr(state(epoch=1, isr=(0, 1)))
    assert leaders == [("t", 0)]
    _, _, leaders, _ = await b0.lisr(state(epoch=2, isr=(0,), partition_epoch=1))
    assert leaders == [] and b0.part().leader_epoch == 2 and b0.part().isr == {0}
    _, _, _, followers = await b0.lisr(state(leader=1, epoch=3, partition_epoch=2))
    assert followers == [("t", 0)]
    _, _, leaders, _ = await b0.lisr(state(epoch=4, partition_epoch=3))
    assert leaders == [("t", 0)]                               # led again: reload


async def test_a_broker_shutting_down_follows_the_partitions_it_gave_up_without_fetching(brokers):
    """Kafka's makeFollowers skips the fetchers once the broker is shutting down: a fetch from
    it would make the new leader count it caught up and hold the high watermark at its last
    offset once it stops (acks=all stalled for replica.lag.time.max.ms on every partition
    moved by a rolling restart)."""
    b = brokers(1)
    await b.lisr(state(leader=1, epoch=1, isr=(1, 0)))
    b.rm.shutting_down = True
    error, errors, _, followers = await b.lisr(state(leader=0, epoch=2, isr=(0,)))
    assert error == ErrorCode.NONE and errors[("t", 0)] == ErrorCode.NONE
    assert followers == [("t", 0)] and not b.part().is_leader
    assert ("t", 0) not in b.rm.fetchers.assigned
    assert b.rm.fetchers.calls[-1] == ("remove", ("t", 0))


async def test_a_log_left_by_an_older_topic_of_the_same_name_is_refused(tmp_path, clock):
    """Kafka's Partition.topicId looks at the log on disk too: a LeaderAndIsr naming another
    topic id than the log's (an older topic of the same name) is INCONSISTENT_TOPIC_ID, and
    the old data is neither served as the new topic's nor its id rewritten."""
    first = Broker(tmp_path / "b0", 0, clock)
    await first.lisr(state(leader=0, isr=(0,), replicas=(0,)))
    first.part().append_records_to_leader(producer_batch(1), 1)
    first.close()
    again = Broker(tmp_path / "b0", 0, clock)
    try:
        other = uuid.uuid4()
        error, errors, led, _ = await again.rm.become_leader_or_follower(
            1, [("t", other, state(leader=0, isr=(0,), replicas=(0,)))], log_config_for, {0})
        assert errors[("t", 0)] == ErrorCode.INCONSISTENT_TOPIC_ID and led == []
        assert again.rm.get_partition("t", 0) is None
        assert again.log_manager.get_log("t", 0).topic_id == TOPIC_ID
    finally:
        again.close()
