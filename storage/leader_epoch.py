"""The leader epoch cache: which leader epoch started at which offset (KIP-101, KIP-279).

Entries are (leader_epoch, start_offset), both strictly increasing.  A leader assigns its epoch
at the offset of its first append; a follower assigns the epochs found in the batches it copies.
`end_offset_for(epoch)` answers OffsetForLeaderEpoch: the offset where `epoch` ended, i.e. the
start offset of the next larger epoch (or the log end offset for the latest epoch).  Truncation
of the log truncates the cache from the end; moving the log start offset truncates it from the
start (keeping the epoch that covers the new start).

Persisted after every change to `leader-epoch-checkpoint` (format in checkpoints.py), written
atomically.  Concurrency: called on the loop with the log's lock held by its caller.
"""
import bisect
import os

from storage import checkpoints, files

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, directory: str, log_end_offset, *, persist: bool = True,
                 exists: bool = True):
        """`log_end_offset` is a callable returning the log's current end offset; `exists`
        False skips reading a checkpoint the caller knows is absent."""
        self.path = os.path.join(directory, files.LEADER_EPOCH_CHECKPOINT)
        self._log_end_offset = log_end_offset
        self._persist = persist
        self._unwritten = False
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        for epoch, offset in checkpoints.read_checkpoint(self.path, 2) if exists else ():
            self._epochs.append(int(epoch))
            self._offsets.append(int(offset))

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._offsets))

    @property
    def latest_epoch(self):
        return self._epochs[-1] if self._epochs else None

    def assign(self, epoch: int, start_offset: int, *, write: bool = True) -> None:
        """Record that `epoch` starts at `start_offset`.

        As Kafka: nothing changes if `epoch` is already the latest at or below `start_offset`;
        otherwise entries that would break monotonicity (epoch >= `epoch` or start offset >=
        `start_offset`) are dropped first. `write=False` keeps the change in memory until the
        next assign writes the checkpoint (a leader of an empty log: its first append does)."""
        if epoch < 0 or start_offset < 0:
            return
        if self._epochs and epoch == self._epochs[-1] and start_offset >= self._offsets[-1]:
            if self._unwritten and write:
                self._flush(durable=False)
            return
        keep = [(e, o) for e, o in zip(self._epochs, self._offsets)
                if e < epoch and o < start_offset]
        self._epochs = [e for e, _ in keep] + [epoch]
        self._offsets = [o for _, o in keep] + [start_offset]
        if write:
            self._flush(durable=False)
        else:
            self._unwritten = True

    def assign_all(self, entries) -> None:
        """`assign` each (epoch, start_offset) in order, writing the checkpoint once."""
        persist, self._persist = self._persist, False
        try:
            for epoch, start_offset in entries:
                self.assign(epoch, start_offset)
        finally:
            self._persist = persist
        self._flush()

    def epoch_for_offset(self, offset: int):
        """The epoch of the leader that wrote `offset`, or None if unknown."""
        i = bisect.bisect_right(self._offsets, offset)
        return self._epochs[i - 1] if i else None

    def end_offset_for(self, requested_epoch: int) -> tuple[int, int]:
        """(largest epoch <= requested, its end offset), Kafka's `endOffsetFor`."""
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._epochs[-1]:
            return requested_epoch, self._log_end_offset()
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._offsets[0]
        return self._epochs[higher - 1], self._offsets[higher]

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after `end_offset` (the log was truncated there)."""
        if self._offsets and self._offsets[-1] >= end_offset:
            keep = bisect.bisect_left(self._offsets, end_offset)
            del self._epochs[keep:], self._offsets[keep:]
            self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: keep the epoch covering it, moved up to it."""
        i = bisect.bisect_right(self._offsets, start_offset)
        if i == 0 or (i == 1 and self._offsets[0] == start_offset):
            return
        del self._epochs[:i - 1], self._offsets[:i - 1]
        self._offsets[0] = start_offset
        self._flush()

    def clear(self) -> None:
        self._epochs.clear()
        self._offsets.clear()
        self._flush()

    def _flush(self, durable: bool = True) -> None:
        """Write the checkpoint. A new epoch (on the append path, leader or follower) is
        written without fsync, as Kafka 3.7+ does (KAFKA-15046): a process crash keeps the page
        cache, and after a power cut recovery rebuilds the epochs above the file's last from
        the batch headers. Truncations are written durably."""
        self._unwritten = False
        if self._persist:
            checkpoints.write_checkpoint(self.path, self.entries(), durable=durable)
