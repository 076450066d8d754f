"""Log semantics: append, roll, read bounds, truncation, retention, flush, recovery."""
import os

import pytest

from protocol.errors import ErrorCode, KafkaError
from storage import files
from storage.errors import CorruptRecord, OffsetOutOfRange
from storage.log import Log
from storage.log_config import LogConfig
from storage.record_batch import RecordBatchBuilder, RecordBatchView

from tests.storage.log_checks import check_log, make_batch

NOW = 1_700_000_000_000


class Clock:
    def __init__(self, ms=NOW):
        self.ms = ms

    def __call__(self):
        return self.ms


def producer_batch(values, timestamp=NOW, key=b"k"):
    """What a producer sends: base offset 0, no leader epoch."""
    builder = RecordBatchBuilder()
    for i, value in enumerate(values):
        builder.append(timestamp + i, key, value)
    return builder.build()


def open_log(path, clock=None, *, had_clean_shutdown=False, recovery_point=0, **config):
    config.setdefault("segment_ms", 10**12)
    return Log(str(path), LogConfig(**config), time_ms=clock or Clock(),
               had_clean_shutdown=had_clean_shutdown, recovery_point=recovery_point)


def test_append_as_leader_assigns_offsets_and_epoch(tmp_path):
    log_ = open_log(tmp_path / "t-0")
    first = log_.append_as_leader(producer_batch([b"a", b"b"]), leader_epoch=3)
    second = log_.append_as_leader(producer_batch([b"c"]), leader_epoch=3)
    assert (first.first_offset, first.last_offset, second.first_offset) == (0, 1, 2)
    assert log_.log_end_offset == 3 and log_.high_watermark == 0
    views = check_log(log_)
    assert [v.partition_leader_epoch for v in views] == [3, 3]
    assert log_.leader_epoch_cache.entries() == [(3, 0)]
    assert log_.update_high_watermark(10) == 3


def test_append_rejects_bad_batches_with_kafka_codes(tmp_path):
    log_ = open_log(tmp_path / "t-0", max_message_bytes=200)
    corrupt = bytearray(producer_batch([b"x"]))
    corrupt[-1] ^= 0xFF
    with pytest.raises(KafkaError) as exc:
        log_.append_as_leader(bytes(corrupt), 0)
    assert exc.value.error_code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(KafkaError) as exc:
        log_.append_as_leader(producer_batch([b"x" * 500]), 0)
    assert exc.value.error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert log_.log_end_offset == 0 and log_.size_in_bytes == 0


def test_roll_on_segment_bytes_and_index_interval(tmp_path):
    log_ = open_log(tmp_path / "t-0", segment_bytes=1000, index_interval_bytes=100)
    for i in range(40):
        log_.append_as_leader(producer_batch([b"v%03d" % i] * 3), 0)
    assert len(log_.segments) > 3
    for segment in log_.segments:
        assert segment.size <= 1000
    views = check_log(log_)
    assert sum(v.records_count for v in views) == 120
    names = sorted(os.listdir(log_.dir))
    assert files.file_name_prefix(log_.segments[1].base_offset) + ".log" in names
    # Rolled segments' indexes were trimmed; the active one is preallocated.
    assert os.path.getsize(log_.segments[0].index_path) == 8 * log_.segments[0].offset_index.entries
    assert os.path.getsize(log_.active_segment.index_path) == LogConfig().segment_index_bytes


def test_roll_on_segment_ms_and_full_index(tmp_path):
    clock = Clock()
    log_ = open_log(tmp_path / "t-0", clock, segment_ms=1000)
    log_.append_as_leader(producer_batch([b"a"], timestamp=NOW), 0)
    log_.append_as_leader(producer_batch([b"b"], timestamp=NOW + 500), 0)
    assert len(log_.segments) == 1
    log_.append_as_leader(producer_batch([b"c"], timestamp=NOW + 1001), 0)
    assert [s.base_offset for s in log_.segments] == [0, 2]
    small = open_log(tmp_path / "u-0", segment_index_bytes=24, index_interval_bytes=0)
    for i in range(10):
        small.append_as_leader(producer_batch([b"x"]), 0)
    assert len(small.segments) >= 3                   # 3 offset-index entries per segment
    check_log(small)



def test_an_append_of_many_batches_stops_indexing_when_the_index_fills(tmp_path):
    """A follower's append of many batches, each worth an index entry, into a segment whose
    index fills part way: the rest of it goes unindexed and the next append rolls (the index
    overflowed and the partition refused every append after)."""
    follower = open_log(tmp_path / "t-0", segment_index_bytes=24, index_interval_bytes=0)
    offset = 0
    for _ in range(6):
        follower.append_as_follower(b"".join(
            make_batch(offset + i, [b"v%d" % (offset + i)], timestamp=NOW + offset + i)
            for i in range(7)))
        offset += 7
    assert follower.log_end_offset == 42
    assert len(follower.segments) == 6                # one per append: each filled its index
    check_log(follower)
    follower.close()
    reopened = open_log(tmp_path / "t-0", segment_index_bytes=24, index_interval_bytes=0)
    assert reopened.log_end_offset == 42
    check_log(reopened)


def test_a_clean_reopen_opens_only_the_indexes_it_reads(tmp_path):
    """After a clean shutdown the producer state comes from the snapshot at the log end: the
    older segments' indexes stay closed until a read needs them (they were all mapped at
    start-up, two maps per segment, against vm.max_map_count)."""
    log_ = open_log(tmp_path / "t-0", segment_bytes=200)
    for i in range(20):
        log_.append_as_leader(producer_batch([b"v%d" % i]), 0)
    assert len(log_.segments) >= 10
    log_.close()
    reopened = open_log(tmp_path / "t-0", segment_bytes=200, had_clean_shutdown=True,
                        recovery_point=20)
    assert reopened.log_end_offset == 20
    opened = [s.base_offset for s in reopened.segments
              if s._offset_index is not None or s._time_index is not None]
    assert opened == [reopened.segments[-1].base_offset]
    assert reopened.read(0, 1000).records                 # opened when read
    check_log(reopened)


def test_roll_on_segment_jitter(tmp_path):
    clock = Clock()
    log_ = open_log(tmp_path / "t-0", clock, segment_ms=1000, segment_jitter_ms=400)
    jitter = log_.active_segment.roll_jitter_ms
    assert 0 <= jitter < 400
    log_.append_as_leader(producer_batch([b"a"], timestamp=NOW), 0)
    log_.append_as_leader(producer_batch([b"b"], timestamp=NOW + 1000 - jitter), 0)
    assert len(log_.segments) == 1
    log_.append_as_leader(producer_batch([b"c"], timestamp=NOW + 1001 - jitter), 0)
    assert [s.base_offset for s in log_.segments] == [0, 2]
    assert 0 <= log_.active_segment.roll_jitter_ms < 400     # drawn again for each segment


def test_roll_when_a_relative_offset_would_overflow_the_index(tmp_path):
    """A follower copying a compacted log can jump past base_offset + 2**31 - 1: the index's
    int32 relative offset cannot hold that, so the log rolls at the batch (as Kafka does)."""
    log_ = open_log(tmp_path / "t-0")
    log_.append_as_follower(make_batch(0, [b"a", b"b"]))
    far = 2**31 + 10
    log_.append_as_follower(make_batch(far, [b"c"]))
    assert [s.base_offset for s in log_.segments] == [0, far]
    assert log_.log_end_offset == far + 1
    assert log_.read(2, 10_000).first_offset == far          # the gap reads as the next batch
    assert log_.read(far, 1).records.read_bytes() == make_batch(far, [b"c"])
    assert all(segment.index_sanity_errors() == [] for segment in log_.segments)

def test_a_follower_log_starting_inside_a_batch_starts_again_at_the_batch(tmp_path):
    """DeleteRecords put the leader's log start at 15, inside its batch 10-19; a new replica
    starts its log at 15 and is sent that batch whole. Kafka's Partition.
    appendRecordsToFollowerOrFutureReplica starts the empty log at the batch's base offset;
    a log that holds records refuses the overlap as before."""
    log_ = open_log(tmp_path / "t-0")
    log_.truncate_fully_and_start_at(15)
    records = make_batch(10, [b"%d" % i for i in range(10)]) + make_batch(20, [b"x"])
    assert log_.append_as_follower(records).first_offset == 10
    assert (log_.log_start_offset, log_.log_end_offset) == (10, 21)
    assert log_.read(15, 10_000).records.read_bytes() == records
    with pytest.raises(CorruptRecord):
        log_.append_as_follower(make_batch(20, [b"y"]))
    other = open_log(tmp_path / "u-0")
    other.truncate_fully_and_start_at(25)           # the batch ends before the log start
    with pytest.raises(CorruptRecord):
        other.append_as_follower(make_batch(10, [b"%d" % i for i in range(10)]))
    assert (other.log_start_offset, other.log_end_offset) == (25, 25)


def test_read_bounds(tmp_path):
    log_ = open_log(tmp_path / "t-0")
    sizes = []
    for i in range(5):
        batch = producer_batch([b"x" * 100] * 2)
        sizes.append(len(batch))
        log_.append_as_leader(batch, 0)
    # Offsets 0..9 in five batches of two.
    whole = log_.read(0, 10**6)
    assert len(whole.records) == sum(sizes) and whole.first_offset == 0
    mid = log_.read(3, 10**6)
    assert mid.first_offset == 2 and len(mid.records) == sum(sizes[1:])
    partial = log_.read(0, sizes[0] + 10)          # Kafka may cut inside the next batch
    assert len(partial.records) == sizes[0] + 10
    assert len(log_.read(0, 1).records) == sizes[0]                  # min_one_message
    # Without min_one_message a first batch that does not fit is no records (Kafka's
    # readFromLog drops such an incomplete first entry); a later one may be cut.
    assert log_.read(0, 1, min_one_message=False).records == b""
    assert len(log_.read(0, sizes[0] + 10, min_one_message=False).records) == sizes[0] + 10
    assert log_.read(0, 0, min_one_message=False).records == b""
    bounded = log_.read(0, 10**6, max_offset=6)                      # e.g. the high watermark
    assert len(bounded.records) == sum(sizes[:3])
    assert log_.read(6, 10**6, max_offset=6).records == b""
    assert log_.read(10, 100).records == b""
    with pytest.raises(OffsetOutOfRange):
        log_.read(11, 100)
    region = log_.read(4, 10**6, max_offset=8).records
    data = region.read_bytes()
    assert RecordBatchView(data, 0).base_offset == 4 and len(data) == sum(sizes[2:4])


def test_reads_across_segments_and_gaps(tmp_path):
    log_ = open_log(tmp_path / "t-0", segment_bytes=300)
    log_.append_as_follower(make_batch(0, [b"a" * 50] * 3))
    log_.append_as_follower(make_batch(10, [b"b" * 50] * 3))      # a gap, as after compaction
    log_.append_as_follower(make_batch(20, [b"c" * 50] * 3))
    info = log_.read(5, 10**6)
    assert info.first_offset == 10
    assert log_.read(21, 1).first_offset == 20
    assert [v.base_offset for v in log_.read_batches()] == [0, 10, 20]


def test_truncate_to_drops_segments_batches_indexes_and_epochs(tmp_path):
    log_ = open_log(tmp_path / "t-0", segment_bytes=400, index_interval_bytes=50)
    for epoch in range(6):
        log_.append_as_leader(producer_batch([b"z" * 40] * 2), epoch)
    log_.update_high_watermark(12)
    assert len(log_.segments) > 2
    assert log_.truncate_to(5)
    assert log_.log_end_offset == 4 and log_.high_watermark == 4   # 4..5 was one batch
    assert log_.leader_epoch_cache.entries() == [(0, 0), (1, 2)]
    check_log(log_)
    log_.append_as_leader(producer_batch([b"new"]), 7)
    assert log_.log_end_offset == 5
    check_log(log_)
    assert not log_.truncate_to(100)
    log_.truncate_fully_and_start_at(50)
    assert (log_.log_start_offset, log_.log_end_offset) == (50, 50)
    assert log_.append_as_leader(producer_batch([b"x"]), 8).first_offset == 50
    check_log(log_)


def test_retention_by_bytes_time_and_log_start(tmp_path, caplog):
    caplog.set_level("INFO", logger="storage.log")
    clock = Clock()
    log_ = open_log(tmp_path / "t-0", clock, segment_bytes=300, retention_ms=60_000,
                    file_delete_delay_ms=1000)
    for i in range(12):
        log_.append_as_leader(producer_batch([b"r" * 60], timestamp=NOW + i * 10_000), 0)
    count = len(log_.segments)
    assert count >= 4
    assert log_.delete_old_segments(NOW + 30_000) == 0       # nothing below the high watermark
    log_.update_high_watermark(log_.log_end_offset)
    deleted = log_.delete_old_segments(NOW + 130_000)        # records older than 70_000 expire
    assert deleted >= 1
    assert log_.log_start_offset == log_.segments[0].base_offset > 0
    # Kafka's lines, for an operator's grep
    ident = f"[UnifiedLog partition=t-0, dir={tmp_path}] "
    assert f"{ident}Deleting segment LogSegment(baseOffset=0, size=" in caplog.text
    assert "due to log retention time 60000ms breach based on the largest record timestamp " \
           "in the segment" in caplog.text
    assert f"{ident}Incremented log start offset to {log_.log_start_offset} due to " \
           "SegmentDeletion" in caplog.text
    assert f"{ident}Rolled new log segment at offset " in caplog.text
    assert all(s.max_timestamp >= NOW + 70_000 for s in log_.segments[:-1])
    log_.config.retention_bytes = log_.active_segment.size
    log_.config.retention_ms = -1
    log_.delete_old_segments(NOW + 130_000)
    assert len(log_.segments) == 1
    check_log(log_)
    # DeleteRecords moves the log start offset inside a segment; reads below it fail.
    end = log_.log_end_offset
    log_.delete_records_before(end - 1)
    with pytest.raises(OffsetOutOfRange):
        log_.read(end - 2, 100)
    with pytest.raises(OffsetOutOfRange):
        log_.delete_records_before(end + 1)


def test_a_timestamp_search_goes_on_past_a_batch_with_no_record_to_give(tmp_path):
    """Kafka's searchForTimestamp walks on through the segment: the first batch whose max
    timestamp reaches the target may hold no record at or after both the target and the log
    start offset (moved into it by DeleteRecords); the answer is in a later batch (the search
    gave up on the segment and answered nothing)."""
    log_ = open_log(tmp_path / "t-0")
    builder = RecordBatchBuilder()
    for ts in (NOW + 2000, NOW + 1000, NOW + 1000, NOW + 1000, NOW + 1000):
        builder.append(ts, b"k", b"v")
    log_.append_as_leader(builder.build(), 0)                       # offsets 0-4
    log_.append_as_leader(producer_batch([b"v"] * 5, timestamp=NOW + 1500), 0)   # 5-9
    log_.update_high_watermark(log_.log_end_offset)
    assert log_.fetch_offset_by_timestamp(NOW + 1500)[:2] == (0, NOW + 2000)
    log_.delete_records_before(1)
    assert log_.fetch_offset_by_timestamp(NOW + 1500)[:2] == (5, NOW + 1500)


def test_max_timestamp_of_a_log_without_timestamps_is_its_first_record(tmp_path):
    """ListOffsets -3 where every record's timestamp is -1 (upconverted v0 data, clients that
    send none): Kafka answers the first record of the first segment, timestamp -1 (this
    answered nothing); the time index gets no entry for -1."""
    log_ = open_log(tmp_path / "t-0", index_interval_bytes=0)
    for _ in range(3):
        builder = RecordBatchBuilder()
        builder.append(-1, b"k", b"v")
        builder.append(-1, b"k", b"w")
        log_.append_as_leader(builder.build(), 0)
    log_.update_high_watermark(log_.log_end_offset)
    assert log_.fetch_offset_by_timestamp(-3)[:2] == (0, -1)
    assert log_.active_segment.time_index.entries == 0
    log_.delete_records_before(1)
    assert log_.fetch_offset_by_timestamp(-3)[:2] == (1, -1)
    rolled = open_log(tmp_path / "v-0", segment_bytes=100)      # one batch per segment
    for _ in range(3):
        builder = RecordBatchBuilder()
        builder.append(-1, b"k", b"v")
        rolled.append_as_leader(builder.build(), 0)
    assert len(rolled.segments) == 3
    rolled.update_high_watermark(rolled.log_end_offset)
    rolled.delete_records_before(2)                 # past the first two segments
    assert rolled.fetch_offset_by_timestamp(-3)[:2] == (2, -1)
    empty = open_log(tmp_path / "u-0")
    assert empty.fetch_offset_by_timestamp(-3) is None


def test_deleted_segment_stays_readable_until_the_delay(tmp_path):
    clock = Clock()
    log_ = open_log(tmp_path / "t-0", clock, segment_bytes=200, retention_bytes=0,
                    file_delete_delay_ms=5000)
    for i in range(4):
        log_.append_as_leader(producer_batch([b"q" * 100]), 0)
    log_.update_high_watermark(4)
    region = log_.read(0, 10**6).records
    log_.delete_old_segments()
    assert log_.log_start_offset == 4 and log_.size_in_bytes == 0
    assert any(n.endswith(".deleted") for n in os.listdir(log_.dir))
    assert RecordBatchView(region.read_bytes(), 0).base_offset == 0   # still sendable
    assert log_.delete_expired_files(clock.ms + 4000) == 0
    assert log_.delete_expired_files(clock.ms + 5000) == 4
    assert not any(n.endswith(".deleted") for n in os.listdir(log_.dir))
    assert log_.append_as_leader(producer_batch([b"after"]), 0).first_offset == 4


def test_flush_moves_recovery_point_and_needs_flush(tmp_path):
    clock = Clock()
    log_ = open_log(tmp_path / "t-0", clock, flush_messages=3, segment_bytes=400)
    info = log_.append_as_leader(producer_batch([b"a"]), 0)
    assert not info.flush_needed and log_.recovery_point == 0
    info = log_.append_as_leader(producer_batch([b"b", b"c"]), 0)
    assert info.flush_needed
    log_.flush()
    assert log_.recovery_point == 3 and not log_.needs_flush()
    log_.config.flush_messages = 10**9
    log_.append_as_leader(producer_batch([b"d" * 200]), 0)        # rolls
    log_.append_as_leader(producer_batch([b"e" * 200]), 0)
    assert log_.needs_flush()                                      # a rolled segment is unflushed
    log_.flush(up_to=log_.active_segment.base_offset)
    assert log_.recovery_point == log_.active_segment.base_offset


def test_recovery_truncates_a_torn_tail_and_rebuilds_indexes(tmp_path):
    path = tmp_path / "t-0"
    log_ = open_log(path, index_interval_bytes=60)
    for i in range(20):
        log_.append_as_leader(producer_batch([b"v%02d" % i]), 0)
    segment_path = log_.active_segment.path
    size = log_.active_segment.size
    log_.flush()
    log_.active_segment.offset_index.flush()
    # A crash: indexes stay preallocated, and half a batch reached the disk.
    for s in log_.segments:
        s.offset_index.close(trim=False)
        s.time_index.close(trim=False)
        s.log_file.close()
    with open(segment_path, "ab") as fh:
        fh.write(producer_batch([b"torn"])[:30])
    reopened = open_log(path, index_interval_bytes=60)
    assert reopened.log_end_offset == 20 and reopened.active_segment.size == size
    check_log(reopened)
    assert reopened.append_as_leader(producer_batch([b"next"]), 0).first_offset == 20


def test_recovery_truncates_at_a_corrupt_batch(tmp_path):
    path = tmp_path / "t-0"
    log_ = open_log(path, segment_bytes=500)
    for i in range(12):
        log_.append_as_leader(producer_batch([b"w" * 40]), 0)
    segments = log_.segments
    assert len(segments) >= 3
    victim = segments[1]
    batches = list(victim.batches())
    log_.close()
    with open(victim.path, "r+b") as fh:                   # flip a byte in its 2nd batch
        fh.seek(batches[1].position + 70)
        byte = fh.read(1)
        fh.seek(batches[1].position + 70)
        fh.write(bytes([byte[0] ^ 0x55]))
    reopened = open_log(path, segment_bytes=500)           # recovery point 0: unclean
    assert reopened.log_end_offset == batches[1].base_offset
    assert len(reopened.segments) == 2                     # later segments are gone
    check_log(reopened)


def test_clean_reopen_rebuilds_a_missing_or_corrupt_index(tmp_path):
    path = tmp_path / "t-0"
    log_ = open_log(path, segment_bytes=500, index_interval_bytes=50)
    for i in range(12):
        log_.append_as_leader(producer_batch([b"w" * 40]), 0)
    first, active = log_.segments[0], log_.segments[-1]
    log_.close()
    os.remove(first.index_path)
    with open(active.index_path, "wb") as fh:
        fh.write(b"\x00" * 13)                             # not a multiple of 8
    reopened = open_log(path, segment_bytes=500, index_interval_bytes=50)
    assert reopened.log_end_offset == 12
    check_log(reopened)
    assert reopened.segments[0].offset_index.entries > 0


def idempotent_batch(producer_id, epoch, sequence, values):
    builder = RecordBatchBuilder(producer_id=producer_id, producer_epoch=epoch,
                                 base_sequence=sequence)
    for value in values:
        builder.append(NOW, None, value)
    return builder.build()


@pytest.mark.parametrize("clean", [True, False])
def test_idempotent_retries_are_answered_with_the_original_offsets(tmp_path, clean):
    path = tmp_path / "t-0"
    log_ = open_log(path, segment_bytes=300)
    log_.append_as_leader(producer_batch([b"x" * 100]), 0)
    first = log_.append_as_leader(idempotent_batch(7, 0, 0, [b"a", b"b"]), 0)
    assert log_.append_as_leader(idempotent_batch(7, 0, 0, [b"a", b"b"]), 0).first_offset == \
        first.first_offset
    for i in range(4):                                  # roll past it a few times
        log_.append_as_leader(producer_batch([b"y" * 100]), 0)
    second = log_.append_as_leader(idempotent_batch(7, 0, 2, [b"c"]), 0)
    retry = log_.append_as_leader(idempotent_batch(7, 0, 2, [b"c"]), 0)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (second.first_offset,
                                                                            second.last_offset)
    end = log_.log_end_offset
    if clean:
        log_.close()
    else:
        log_.flush()
        for segment in log_.segments:
            segment.log_file.close()
    reopened = open_log(path, segment_bytes=300)
    assert reopened.log_end_offset == end
    # Snapshots keep each producer's last batch (as Kafka's do): its retry is still caught.
    again = reopened.append_as_leader(idempotent_batch(7, 0, 2, [b"c"]), 0)
    assert again.duplicate and again.first_offset == second.first_offset
    with pytest.raises(KafkaError) as exc:
        reopened.append_as_leader(idempotent_batch(7, 0, 9, [b"gap"]), 0)
    assert exc.value.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert reopened.append_as_leader(idempotent_batch(7, 0, 3, [b"d"]), 0).first_offset == end
    reopened.truncate_to(second.first_offset)           # the retried batch is gone again
    assert not reopened.append_as_leader(idempotent_batch(7, 0, 2, [b"c"]), 0).duplicate
    check_log(reopened)


def test_preallocate_sizes_the_active_segment_and_trims_on_roll_close_and_crash(tmp_path):
    """preallocate=true (Kafka's file.preallocate): the active segment's file is set to
    segment.bytes ahead of its data; a roll and a clean close cut it back; after a crash,
    recovery truncates the zeros and the log goes on."""
    path = tmp_path / "t-0"
    segment_bytes = 64 * 1024
    log_ = open_log(path, preallocate=True, segment_bytes=segment_bytes, index_interval_bytes=100)
    for i in range(10):
        log_.append_as_leader(producer_batch([b"v%02d" % i]), 0)
    active = log_.active_segment
    assert os.path.getsize(active.path) == segment_bytes > active.size
    assert [b.base_offset for b in active.batches()] == list(range(10))
    assert log_.read(5, 10_000).records                 # reads stop at the data, not the file
    check_log(log_)
    first_path = active.path
    log_.roll()
    assert os.path.getsize(first_path) == active.size                   # trimmed on roll
    assert os.path.getsize(log_.active_segment.path) == 0               # allocated on write
    log_.append_as_leader(producer_batch([b"second"]), 0)
    assert os.path.getsize(log_.active_segment.path) == segment_bytes
    check_log(log_)
    log_.close()
    assert os.path.getsize(log_.active_segment.path) == log_.active_segment.size    # clean close

    reopened = open_log(path, preallocate=True, segment_bytes=segment_bytes)
    reopened.append_as_leader(producer_batch([b"after reopen"]), 0)
    segment_path, size = reopened.active_segment.path, reopened.active_segment.size
    reopened.flush()
    for s in reopened.segments:                         # a crash: nothing is trimmed
        s.offset_index.close(trim=False)
        s.time_index.close(trim=False)
        s.log_file.close()
    assert os.path.getsize(segment_path) == segment_bytes
    recovered = open_log(path, preallocate=True, segment_bytes=segment_bytes)
    assert recovered.log_end_offset == 12 and recovered.active_segment.size == size
    check_log(recovered)
    assert recovered.append_as_leader(producer_batch([b"next"]), 0).first_offset == 12
    check_log(recovered)
    recovered.close()


def test_iter_batches_stops_at_a_preallocated_zero_tail():
    from storage.record_batch import iter_batches
    batch = producer_batch([b"a", b"b"])
    assert len(list(iter_batches(batch + bytes(4096)))) == 1


def test_a_log_start_above_the_recovered_end_starts_an_empty_log_there(tmp_path):
    # DeleteRecords up to the end (10), then a crash loses the unflushed tail: Kafka's
    # LogLoader deletes the segments and starts empty at 10; no offset below is given again.
    log_ = open_log(tmp_path / "t-0")
    for i in range(10):
        log_.append_as_leader(producer_batch([b"v%d" % i]), 0)
    log_.update_high_watermark(10)
    log_.delete_records_before(10)
    assert log_.log_start_offset == 10
    log_.close_files()                                  # a crash: no clean-shutdown marker
    segment = tmp_path / "t-0" / "00000000000000000000.log"
    os.truncate(segment, os.path.getsize(segment) // 2)  # the tail never reached the disk
    again = Log(str(tmp_path / "t-0"), LogConfig(segment_ms=10**12), time_ms=Clock(),
                recovery_point=0, log_start_offset=10, high_watermark=10,
                had_clean_shutdown=False)
    assert (again.log_start_offset, again.log_end_offset) == (10, 10)
    assert [s.base_offset for s in again.segments] == [10]
    assert not segment.exists()
    assert again.append_as_leader(producer_batch([b"new"]), 1).first_offset == 10
