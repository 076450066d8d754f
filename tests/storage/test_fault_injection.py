"""Failures injected through the filesystem seam (`storage.files.fs`): a failed checkpoint
write leaves the previous checkpoint readable, and a failed fsync never advances the recovery
point (so the data is validated again after a restart)."""
import pytest

from storage import checkpoints, files
from storage.log import Log
from storage.log_config import LogConfig

from tests.storage.log_checks import check_log, make_batch


class FailingFS(files.FileSystem):
    """Fails the `fail_at`-th call of the named operation with EIO."""

    def __init__(self, operation, fail_at=1):
        self.operation = operation
        self.remaining = fail_at

    def _maybe_fail(self, operation):
        if operation == self.operation:
            self.remaining -= 1
            if self.remaining == 0:
                raise OSError(5, f"injected {operation} failure")

    def rename(self, src, dst):
        self._maybe_fail("rename")
        super().rename(src, dst)

    def fsync(self, fd):
        self._maybe_fail("fsync")
        super().fsync(fd)


@pytest.fixture
def inject(monkeypatch):
    def install(operation, fail_at=1):
        monkeypatch.setattr(files, "fs", FailingFS(operation, fail_at))
    return install


def test_failed_checkpoint_rename_keeps_the_old_checkpoint(tmp_path, inject):
    path = str(tmp_path / "replication-offset-checkpoint")
    checkpoints.write_offsets(path, {("t", 0): 5})
    inject("rename")
    with pytest.raises(OSError):
        checkpoints.write_offsets(path, {("t", 0): 9})
    assert checkpoints.read_offsets(path) == {("t", 0): 5}
    checkpoints.write_offsets(path, {("t", 0): 9})        # the next attempt replaces the tmp
    assert checkpoints.read_offsets(path) == {("t", 0): 9}


def test_failed_fsync_does_not_advance_the_recovery_point(tmp_path, inject):
    log_ = Log(str(tmp_path / "t-0"), LogConfig(segment_ms=10**12))
    log_.append_as_follower(make_batch(0, [b"a", b"b"]))
    inject("fsync")
    with pytest.raises(OSError):
        log_.flush()
    assert log_.recovery_point == 0
    log_.flush()                                           # the disk recovered
    assert log_.recovery_point == 2
    check_log(log_)


def test_failed_write_of_a_leader_epoch_checkpoint_surfaces(tmp_path, inject):
    # A new epoch's checkpoint is written without fsync on the append path (as Kafka 3.7+),
    # but a failed write still fails the append before anything is appended.
    log_ = Log(str(tmp_path / "t-0"), LogConfig(segment_ms=10**12))
    inject("rename")
    with pytest.raises(OSError):
        log_.append_as_follower(make_batch(0, [b"a"], epoch=4))
    assert log_.log_end_offset == 0                      # nothing was appended
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint.tmp").exists()
    # The checkpoint was never replaced; a reopened log removes the leftover temporary file.
    reopened = Log(str(tmp_path / "t-0"), LogConfig(segment_ms=10**12))
    assert reopened.leader_epoch_cache.entries() == [] and reopened.log_end_offset == 0
    assert not (tmp_path / "t-0" / "leader-epoch-checkpoint.tmp").exists()


def test_failed_metadata_store_write_keeps_the_old_state(tmp_path, inject):
    """The broker's metadata file goes through the same seam: a failed rename or fsync leaves
    the previous state, and the next load reads it."""
    import uuid
    from broker.metadata.local import LocalMetadataStore
    store = LocalMetadataStore(str(tmp_path), cluster_id="c")
    store.load()
    store.create_topic("kept", uuid.uuid4(), {0: [0]}, {})
    for operation in ("rename", "fsync"):
        inject(operation)
        with pytest.raises(OSError):
            store.create_topic(f"lost-{operation}", uuid.uuid4(), {0: [0]}, {})
        again = LocalMetadataStore(str(tmp_path))
        again.load()
        assert [t.name for t in again.list_topics()] == ["kept"]


def test_failed_producer_id_block_write_hands_out_no_id(tmp_path, inject):
    """An id is handed out only after its block is durable: a failed write gives none, and a
    restart never repeats an id given before."""
    from broker.producer_ids import FileBlockStore, ProducerIdManager
    first = ProducerIdManager(FileBlockStore(str(tmp_path)), block_size=10)
    given = [first.next_id() for _ in range(10)]
    inject("fsync")
    with pytest.raises(OSError):
        first.next_id()                          # the next block could not be reserved
    restarted = ProducerIdManager(FileBlockStore(str(tmp_path)), block_size=10)
    assert restarted.next_id() not in given
