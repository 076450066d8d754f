"""__consumer_offsets records: bytes round trips, and replaying logs written by Apache Kafka."""
import pathlib

from protocol.internal_records import decode_offsets_key
from protocol.internal import OffsetCommitKey

from coordinator.group.manager import GroupManager
from coordinator.group.model import OffsetAndMetadata
from coordinator.records import GroupKey, GroupValue, MemberRecord, OffsetKey, Record
from coordinator.serde import (build_batch, decode_record, encode_record, iter_log_records,
                               replay_buffer)
from coordinator.partitioning import java_string_hashcode, partition_for


def test_offset_record_round_trip_and_versions():
    record = Record(OffsetKey("g", "t", 3), OffsetAndMetadata(42, 7, "meta", 1000, -1))
    key, value = encode_record(record)
    assert key[:2] == b"\x00\x01" and value[:2] == b"\x00\x03"       # key v1, value v3
    assert isinstance(decode_offsets_key(key), OffsetCommitKey)
    assert decode_record(key, value) == record
    expiring = Record(OffsetKey("g", "t", 3), OffsetAndMetadata(42, -1, "", 1000, 5000))
    key, value = encode_record(expiring)
    assert value[:2] == b"\x00\x01" and decode_record(key, value) == expiring
    # the fast path writes exactly what the generated codec writes
    from protocol.internal_records import encode_value
    from protocol.internal import OffsetCommitValue
    for metadata in ("", "meta", "é" * 100):
        fast = encode_record(Record(OffsetKey("g", "t", 3),
                                    OffsetAndMetadata(2**40, 5, metadata, 2**41, -1)))[1]
        assert fast == encode_value(OffsetCommitValue(offset=2**40, leader_epoch=5,
                                                      metadata=metadata,
                                                      commit_timestamp=2**41), 3)
    tombstone = Record(OffsetKey("g", "t", 3), None)
    assert encode_record(tombstone)[1] is None and decode_record(*encode_record(tombstone)) == tombstone


def test_group_record_round_trip():
    record = Record(GroupKey("g"), GroupValue("consumer", 4, "range", "m1", 123, [
        MemberRecord("m1", "inst", "client", "/1.2.3.4", 300000, 45000, b"sub", b"asg"),
        MemberRecord("m2", None, "client", "/1.2.3.4", 300000, 45000, b"", b"")]))
    key, value = encode_record(record)
    assert key[:2] == b"\x00\x02" and value[:2] == b"\x00\x03"
    assert decode_record(key, value) == record
    empty = Record(GroupKey("g"), GroupValue("consumer", 5, None, None, 124, []))
    assert decode_record(*encode_record(empty)) == empty


def test_batches_replay_into_a_manager():
    records = [Record(OffsetKey("g", "t", 0), OffsetAndMetadata(1, -1, "", 10, -1)),
               Record(OffsetKey("g", "t", 0), OffsetAndMetadata(2, -1, "", 11, -1)),
               Record(OffsetKey("g", "t", 1), OffsetAndMetadata(3, -1, "", 11, -1)),
               Record(OffsetKey("g", "t", 1), None)]
    buf = build_batch(records[:2], 10) + build_batch(records[2:], 11)
    assert list(iter_log_records(buf)) == records
    manager = GroupManager()
    assert replay_buffer(manager, buf + buf[:30], 0) == {"g"}       # a torn tail is ignored
    assert {tp: o.offset for tp, o in manager.group("g").offsets.items()} == {("t", 0): 2}


def test_partition_for_uses_java_string_hashcode():
    assert partition_for("test", 50) == 48
    assert partition_for("console-consumer-73122", 50) == 36
    assert partition_for("console-consumer-14897", 50) == 0
    assert partition_for("", 50) == 0
    # negative hashes use Math.abs (not the partitioner's & 0x7fffffff)
    assert java_string_hashcode("my-group") == -1906497762 and partition_for("my-group", 50) == 12
    # the famous string whose hashCode is Integer.MIN_VALUE: Kafka's Utils.abs gives 0
    assert java_string_hashcode("polygenelubricants") == -2**31
    assert partition_for("polygenelubricants", 50) == 0
    assert 0 <= partition_for("é😀 long group name" * 20, 50) < 50


def _replay_dir(folder: pathlib.Path) -> GroupManager:
    manager = GroupManager()
    for log in sorted(folder.glob("__consumer_offsets-*/*.log")):
        groups = replay_buffer(manager, log.read_bytes(), 0)
        for group in groups:
            assert partition_for(group, 50) == int(log.parent.name.rsplit("-", 1)[1])
    return manager


def test_groups_stored_by_kafka_3_4_0(kafka_fixtures):
    manager = _replay_dir(kafka_fixtures / "kafka-3.4.0")
    [listing] = manager.list_groups()
    assert (listing.group_id, listing.protocol_type, listing.state) == (
        "console-consumer-73122", "consumer", "Stable")
    [desc] = manager.describe_groups(["console-consumer-73122"])
    assert desc.protocol_data == "range"
    [member] = desc.members
    assert member.client_id == "console-consumer" and member.client_host == "/192.168.56.1"
    assert member.member_id == "console-consumer-f7c6c48f-55ba-4363-ae07-2d54283cf322"
    assert b"test" in member.assignment
    group = manager.group("console-consumer-73122")
    assert group.generation_id == 1 and group.members[member.member_id].session_timeout_ms == 45000


def test_groups_stored_by_kafka_3_1_0(kafka_fixtures):
    manager = _replay_dir(kafka_fixtures / "kafka-3.1.0")
    listing = {(g.group_id, g.state) for g in manager.list_groups()}
    assert listing == {("console-consumer-14897", "Empty"), ("console-consumer-2399", "Empty"),
                       ("console-consumer-89616", "Empty"), ("console-consumer-76901", "Empty")}
    group = manager.group("console-consumer-2399")
    assert group.generation_id == 2 and group.protocol_type == "consumer"
    assert group.state_timestamp_ms == 1645954662700     # offsets expiry counts from here
