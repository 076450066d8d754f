"""Resuming a move between log dirs after a restart: how much of the future log still holds the
current log's records, judged by leader epochs as a follower's truncation is."""
from broker.log_dir_mover import _agreeing_end

from tests.broker.test_replication_state import no_fsync, open_log, replica_batch

__all__ = ["no_fsync"]          # the autouse fixture, imported to apply here too


def log_of(path, *runs):
    """A log written as a follower: runs of (epoch, batches of 10 records)."""
    log_ = open_log(path)
    for epoch, batches in runs:
        for _ in range(batches):
            log_.append_as_follower(replica_batch(log_.log_end_offset, 10, epoch))
    return log_


def test_a_future_log_that_is_a_prefix_is_kept_whole(tmp_path):
    current = log_of(tmp_path / "c-0", (0, 3), (2, 2))
    future = log_of(tmp_path / "f-0", (0, 3), (2, 1))
    assert _agreeing_end(current, future) == 40
    assert _agreeing_end(current, log_of(tmp_path / "g-0", (0, 2))) == 20


def test_a_current_log_truncated_and_written_again_cuts_the_future_log_back(tmp_path):
    # The future copied epoch 2 up to 50; meanwhile the current log (a follower) was
    # truncated to 35 and a new leader (epoch 3) wrote from there.
    future = log_of(tmp_path / "f-0", (0, 3), (2, 2))
    current = open_log(tmp_path / "c-0")
    for offset in (0, 10, 20):
        current.append_as_follower(replica_batch(offset, 10, 0))
    current.append_as_follower(replica_batch(30, 5, 2))
    current.append_as_follower(replica_batch(35, 10, 3))
    assert _agreeing_end(current, future) == 35
    # A current log that never had the future's epoch: back to where their epochs part.
    other = log_of(tmp_path / "o-0", (0, 2), (4, 3))
    assert _agreeing_end(other, future) == 20


def test_a_future_log_ahead_of_the_current_one_or_with_nothing_in_common_is_copied_again(
        tmp_path):
    current = log_of(tmp_path / "c-0", (0, 2))
    assert _agreeing_end(current, log_of(tmp_path / "f-0", (0, 3))) == 20
    # The current log starts at a later epoch: nothing of the future log is kept.
    assert _agreeing_end(log_of(tmp_path / "e-0", (5, 2)), log_of(tmp_path / "g-0", (1, 1))) \
        == 0
    # A current log emptied (no epochs at all): copied again from its start.
    empty = open_log(tmp_path / "h-0")
    assert _agreeing_end(empty, log_of(tmp_path / "i-0", (1, 1))) == -1


def test_a_copy_follows_the_current_log_through_a_truncation(tmp_path):
    """Mid-move, the current log (a follower's) is truncated and a new leader's records take
    the place of what the future log had copied: the next chunk cuts those back first, so the
    future log ends as a byte-for-byte copy (what the swap relies on)."""
    from broker.log_dir_mover import _copy_chunk
    from tests.broker.test_replication_state import as_bytes
    current = log_of(tmp_path / "c-0", (0, 3), (2, 2))
    future = open_log(tmp_path / "f-0")
    while _copy_chunk(current, future, 1 << 20):
        pass
    assert future.log_end_offset == 50
    current.truncate_to(40)
    current.append_as_follower(replica_batch(40, 10, 3))
    current.append_as_follower(replica_batch(50, 10, 3))
    while _copy_chunk(current, future, 1 << 20):
        pass
    assert future.log_end_offset == current.log_end_offset == 60
    assert future.leader_epoch_cache.entries() == current.leader_epoch_cache.entries()
    assert as_bytes(future.read(0, 1 << 20).records) == as_bytes(current.read(0, 1 << 20).records)
