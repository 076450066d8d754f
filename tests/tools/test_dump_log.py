"""kafka-dump-log on segments written by Apache Kafka (offline) and on index files we write by hand."""
import os
import re
import shutil
import struct
import subprocess

import pytest

from broker.tools import dump_log
from storage.record_batch import RecordBatchBuilder, iter_batches

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_tool(capsys, *argv):
    code = dump_log.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def kafka_test_segment(kafka_fixtures, tmp_path):
    src = kafka_fixtures / "kafka-3.4.0" / "test-0"
    dst = tmp_path / "test-0"
    shutil.copytree(src, dst)
    os.chmod(dst, 0o755)
    return dst / "00000000000000000000.log"


def test_batches_of_kafka_segment(kafka_test_segment, capsys):
    code, out, err = run_tool(capsys, "--files", str(kafka_test_segment))
    lines = out.splitlines()
    assert code == 0 and err == ""
    assert lines[0] == f"Dumping {kafka_test_segment}"
    assert lines[1] == "Log starting offset: 0"
    batches = lines[2:]
    assert len(batches) == 28   # the fixture: 97 records in 28 batches
    assert batches[0] == (
        "baseOffset: 0 lastOffset: 0 count: 1 baseSequence: 0 lastSequence: 0 producerId: 0 producerEpoch: 0 "
        "partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty "
        "position: 0 CreateTime: 1679678873608 size: 68 magic: 2 compresscodec: none crc: 898153663 isvalid: true")
    assert sum(int(b.split(" count: ")[1].split()[0]) for b in batches) == 97
    assert all(b.endswith("isvalid: true") for b in batches)


def test_deep_iteration_and_payloads(kafka_test_segment, capsys):
    code, out, _ = run_tool(capsys, "--files", str(kafka_test_segment), "--print-data-log")
    records = [l for l in out.splitlines() if l.startswith("| offset: ")]
    assert len(records) == 97
    assert [int(r.split()[2]) for r in records] == list(range(97))
    assert records[2] == ("| offset: 2 CreateTime: 1679678875991 keySize: -1 valueSize: 1 sequence: 2 "
                          "headerKeys: [] payload: f")


def test_offsets_decoder_on_kafka_consumer_offsets(kafka_fixtures, capsys):
    log = kafka_fixtures / "kafka-3.1.0" / "__consumer_offsets-0" / "00000000000000000000.log"
    code, out, _ = run_tool(capsys, "--files", str(log), "--offsets-decoder")
    records = [l for l in out.splitlines() if l.startswith("| ")]
    # Kafka 3.9's JSON (OffsetsMessageParser): the key's type and data, the value's version and
    # data, a consumer member's subscription and assignment decoded.
    member = "console-consumer-4fcee79b-493d-41c0-b3ea-633d704faf45"
    assert records[0].endswith(
        'key: {"type":"2","data":{"group":"console-consumer-14897"}} payload: {"version":"3","data":'
        '{"protocolType":"consumer","generation":1,"protocol":"range","leader":"' + member + '",'
        '"currentStateTimestamp":1645954314494,"members":[{"memberId":"' + member + '",'
        '"groupInstanceId":null,"clientId":"console-consumer","clientHost":"/192.168.50.45",'
        '"rebalanceTimeout":300000,"sessionTimeout":45000,"subscription":{"topics":["cities"],'
        '"userData":null,"ownedPartitions":[]},"assignment":{"assignedPartitions":[{"topic":"cities",'
        '"partitions":[0]}],"userData":null}}]}}')
    assert records[1].endswith('payload: {"version":"3","data":{"protocolType":"consumer","generation":2,'
                               '"protocol":null,"leader":null,"currentStateTimestamp":1645954316920,'
                               '"members":[]}}')


def test_offsets_and_transaction_decoders_on_our_records(tmp_path, capsys):
    from protocol.internal import OffsetCommitKey, OffsetCommitValue, TransactionLogKey, TransactionLogValue
    from protocol.internal_records import encode_key, encode_value
    b = RecordBatchBuilder()
    key = encode_key(OffsetCommitKey(group="g1", topic="t", partition=3))
    b.append(1, key, encode_value(OffsetCommitValue(offset=42, metadata="", commit_timestamp=5), 3))
    b.append(2, key, encode_value(OffsetCommitValue(offset=43, metadata="m", commit_timestamp=6), 3))
    b.append(3, key, None)
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(b.build())
    code, out, _ = run_tool(capsys, "--files", str(seg), "--offsets-decoder")
    records = [l.split("headerKeys: [] ")[1] for l in out.splitlines() if l.startswith("| ")]
    key_json = '{"type":"1","data":{"group":"g1","topic":"t","partition":3}}'
    assert records == [
        f'key: {key_json} payload: {{"version":"3","data":{{"offset":42,"leaderEpoch":-1,"metadata":"",'
        f'"commitTimestamp":5}}}}',
        f'key: {key_json} payload: {{"version":"3","data":{{"offset":43,"leaderEpoch":-1,"metadata":"m",'
        f'"commitTimestamp":6}}}}',
        f"key: {key_json} payload: <DELETE>"]
    from protocol.internal import GroupMetadataKey, GroupMetadataValue
    M = GroupMetadataValue.MemberMetadata
    b = RecordBatchBuilder()          # bytes that are no consumer protocol stay base64, as Kafka
    b.append(1, encode_key(GroupMetadataKey(group="group")), encode_value(GroupMetadataValue(
        protocol_type="consumer", generation=10, protocol="range", leader="member", members=[M(
            member_id="member", client_id="client", client_host="host", rebalance_timeout=1000,
            session_timeout=100, subscription=b"Subscription", assignment=b"Assignment")]), 3))
    seg.write_bytes(b.build())
    code, out, _ = run_tool(capsys, "--files", str(seg), "--offsets-decoder")
    line = [l for l in out.splitlines() if l.startswith("| ")][0]
    assert '"subscription":"U3Vic2NyaXB0aW9u","assignment":"QXNzaWdubWVudA=="' in line
    b = RecordBatchBuilder()
    b.append(1, b"\x7f\xff\x00", b"x")                      # a record type this version does not know
    seg.write_bytes(b.build())
    code, out, _ = run_tool(capsys, "--files", str(seg), "--offsets-decoder")
    assert [l for l in out.splitlines() if l.startswith("| ")][0].endswith(
        "key: Unknown record type 32767 at offset 0, skipping.")
    P = TransactionLogValue.PartitionsSchema
    b = RecordBatchBuilder()
    b.append(1, encode_key(TransactionLogKey(transactional_id="tx")), encode_value(TransactionLogValue(
        producer_id=9, producer_epoch=2, transaction_timeout_ms=60000, transaction_status=1,
        transaction_partitions=[P(topic="t", partition_ids=[1, 0])], transaction_last_update_timestamp_ms=77,
        transaction_start_timestamp_ms=70), 0))
    seg.write_bytes(b.build())
    code, out, _ = run_tool(capsys, "--files", str(seg), "--transaction-log-decoder")
    line = [l for l in out.splitlines() if l.startswith("| ")][0]
    assert line.endswith("key: transaction_metadata::transactionalId=tx payload: producerId:9,producerEpoch:2,"
                         # Kafka's hash order: t-1 is in bucket 4, t-0 in 5
                         "state=Ongoing,partitions=[t-1,t-0],txnLastUpdateTimestamp=77,txnTimeoutMs=60000")


def test_trailing_garbage_is_reported(kafka_test_segment, capsys):
    with open(kafka_test_segment, "ab") as f:
        f.write(b"\x00" * 7)
    code, out, _ = run_tool(capsys, "--files", str(kafka_test_segment))
    assert out.splitlines()[-1] == "Found 7 invalid bytes at the end of 00000000000000000000.log"


def _write_indexes(segment, every=3, corrupt_first=False):
    data = segment.read_bytes()
    index, timeindex = bytearray(), bytearray()
    for i, batch in enumerate(iter_batches(data)):
        if i % every == 0:
            offset = batch.last_offset + (1 if corrupt_first and i == 0 else 0)
            index += struct.pack(">ii", offset, batch.position)
            timeindex += struct.pack(">qi", max(r.timestamp for r in batch.records()), batch.last_offset)
    index += bytes(8 * 4)          # preallocated tail, as Kafka leaves it after a crash
    segment.with_suffix(".index").write_bytes(index)
    segment.with_suffix(".timeindex").write_bytes(timeindex)


def test_index_and_time_index(kafka_test_segment, capsys):
    _write_indexes(kafka_test_segment)
    index = kafka_test_segment.with_suffix(".index")
    code, out, err = run_tool(capsys, "--files", str(index))
    entries = out.splitlines()[1:]
    assert entries[0] == "offset: 0 position: 0" and len(entries) == 10 and err == ""
    assert all(l.startswith("offset: ") for l in entries)
    code, out, err = run_tool(capsys, "--files", str(kafka_test_segment.with_suffix(".timeindex")))
    assert out.splitlines()[1].startswith("timestamp: 1679678873608 offset: 0") and err == ""
    code, out, err = run_tool(capsys, "--files", str(index), "--index-sanity-check")
    assert out.splitlines()[1] == f"{index} passed sanity check."


def test_verify_index_reports_mismatch(kafka_test_segment, capsys):
    _write_indexes(kafka_test_segment, corrupt_first=True)
    index = kafka_test_segment.with_suffix(".index")
    code, out, err = run_tool(capsys, "--files", str(index), "--verify-index-only")
    assert out.splitlines() == [f"Dumping {index}"]
    assert err.splitlines() == [f"Mismatches in :{index}", "  Index offset: 1, log offset: 0"]


def test_control_and_compressed_batches(tmp_path, capsys):
    from storage.compression import Codec
    from storage.record_batch import build_control_batch, ControlRecordType
    b = RecordBatchBuilder(compression=Codec.GZIP, producer_id=7, producer_epoch=1, base_sequence=0,
                           is_transactional=True)
    b.append(1000, b"k", b"v", [("h1", b"x"), ("h2", None)])
    b.append(1001, None, b"w")
    control = bytearray(build_control_batch(ControlRecordType.COMMIT, 7, 1, 5, 1002))
    struct.pack_into(">q", control, 0, 2)
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(b.build() + bytes(control))
    code, out, _ = run_tool(capsys, "--files", str(seg), "--print-data-log")
    lines = out.splitlines()
    assert "compresscodec: gzip" in lines[2] and "isTransactional: true" in lines[2]
    assert lines[3] == ("| offset: 0 CreateTime: 1000 keySize: 1 valueSize: 1 sequence: 0 headerKeys: [h1,h2] "
                        "key: k payload: v")
    assert lines[4].endswith("sequence: 1 headerKeys: [] payload: w")
    assert "isControl: true" in lines[5]
    assert lines[6].endswith("endTxnMarker: COMMIT coordinatorEpoch: 5")


def test_script_errors_are_one_line(tmp_path):
    script = os.path.join(ROOT, "bin", "kafka-dump-log.sh")
    r = subprocess.run([script, "--files", str(tmp_path / "00000000000000000000.log")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and len(r.stderr.splitlines()) == 1 and "No such file" in r.stderr
    r = subprocess.run([script, "--no-such-flag", "--files", "x"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and len(r.stderr.splitlines()) == 1 and "--no-such-flag" in r.stderr
    r = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    for flag in ("--files", "--print-data-log", "--deep-iteration", "--index-sanity-check",
                 "--verify-index-only", "--offsets-decoder", "--transaction-log-decoder"):
        assert flag in r.stdout


def test_legacy_message_sets(tmp_path, capsys):
    """Magic 0 and 1 segments (what Kafka < 0.11 wrote), plain and gzip-wrapped."""
    from storage.compression import Codec
    from storage.legacy import MAGIC_V0, MAGIC_V1, build_message_set
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(build_message_set([(-1, b"a", b"x"), (-1, None, b"yy")], magic=MAGIC_V0)
                    + build_message_set([(1000, b"k", b"v1"), (1001, None, b"v2")], magic=MAGIC_V1,
                                        codec=Codec.GZIP, base_offset=2))
    code, out, err = run_tool(capsys, "--files", str(seg), "--print-data-log")
    lines = out.splitlines()
    assert code == 0 and err == ""
    assert lines[2].startswith("offset: 0 position: 0 NoTimestampType: -1 size: ")
    assert lines[2].endswith("magic: 0 compresscodec: none crc: " + lines[2].split("crc: ")[1])
    # Kafka's line for a legacy record, its stray "}" included
    assert re.fullmatch(r"\| offset: 0 NoTimestampType: -1 keySize: 1 valueSize: 1 isValid: true "
                        r"crc: \d+\} key: a payload: x", lines[3]), lines[3]
    wrapper = [l for l in lines if l.startswith("offset: 3 ")][0]
    assert "CreateTime: 1001" in wrapper and "magic: 1 compresscodec: gzip" in wrapper
    inner = [l for l in lines if l.startswith("| offset: 2 ") or l.startswith("| offset: 3 ")]
    assert inner[0].startswith("| offset: 2 CreateTime: 1000 keySize: 1 valueSize: 2 isValid: true crc: ")
    assert inner[1].endswith("payload: v2")
    crcs = [re.search(r"crc: (\d+)\}", l).group(1) for l in inner]
    assert crcs[0] != crcs[1] and f"crc: {crcs[0]} " not in wrapper      # each message's own


def test_a_cleaned_segment(tmp_path, capsys):
    """What the log cleaner leaves: offset gaps, a tombstone's batch with its delete horizon
    (negative timestamp deltas), the emptied last batch of a producer; all valid."""
    from storage.cleaner import Cleaner
    from storage.log import Log
    from storage.log_config import LogConfig
    now = 1_700_000_000_000
    log_ = Log(str(tmp_path / "t-0"), LogConfig(cleanup_policy="compact", segment_ms=10**12),
               time_ms=lambda: now)
    for key, value, pid in ((b"a", b"1", 5), (b"a", b"2", -1), (b"b", None, -1)):
        b = RecordBatchBuilder(producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                               base_sequence=0 if pid >= 0 else -1)
        b.append(now - 5000, key, value)
        log_.append_as_leader(b.build(), 0)
    log_.roll()
    log_.update_high_watermark(log_.log_end_offset)
    Cleaner(dedupe_memory=1 << 20).clean(log_, 0, log_.active_segment.base_offset, now)
    segment = log_.segments[0].path
    code, out, _ = run_tool(capsys, "--files", segment, "--deep-iteration", "--print-data-log")
    lines = out.splitlines()
    assert code == 0 and "isvalid: false" not in out
    assert "baseOffset: 0 lastOffset: 0 count: 0 " in lines[2] and "producerId: 5" in lines[2]
    assert lines[3].startswith("baseOffset: 1 lastOffset: 1 count: 1 ")
    assert f"deleteHorizonMs: OptionalLong[{now + 86400000}]" in lines[5]
    assert f"| offset: 2 CreateTime: {now - 5000} keySize: 1 valueSize: -1" in lines[6]


def test_bad_files_are_reported_and_the_others_dumped(tmp_path, capsys):
    # Kafka: an unknown file is "Ignoring unknown file", a corrupt producer snapshot is one
    # line on stderr (its CRC is checked), and the run goes on with exit 0.
    from storage.log import Log
    from storage.log_config import LogConfig
    log_ = Log(str(tmp_path / "t-0"), LogConfig(segment_ms=10**12), time_ms=lambda: 1000)
    builder = RecordBatchBuilder(producer_id=5, producer_epoch=0, base_sequence=0)
    builder.append(1000, None, b"x")
    log_.append_as_leader(builder.build(), 0)
    log_.close()
    snapshot = next(p for p in (tmp_path / "t-0").iterdir() if p.suffix == ".snapshot")
    good = snapshot.read_bytes()
    corrupt = tmp_path / "00000000000000000001.snapshot"
    corrupt.write_bytes(good[:-1] + bytes([good[-1] ^ 0xFF]))
    notes = tmp_path / "notes.txt"
    notes.write_text("not a segment")
    code, out, err = run_tool(capsys, "--files", f"{notes},{corrupt},{snapshot}")
    assert code == 0
    assert f"Ignoring unknown file {notes}" in err
    assert "Snapshot is corrupt (CRC is no longer valid). Stored crc: " in err
    assert [l for l in out.splitlines() if l.startswith("producerId: 5 ")]     # the good one


def test_a_time_index_ending_in_zero_entries_fails_the_sanity_check(tmp_path, capsys):
    # Kafka's TimeIndex.sanityCheck reads the last slot: a crash's zero tail is corrupt.
    path = tmp_path / "00000000000000000000.timeindex"
    path.write_bytes(struct.pack(">qi", 1005, 1) + struct.pack(">qi", 1010, 2) + bytes(12 * 10))
    with pytest.raises(ValueError, match="the last timestamp is 0 which is less than the first "
                                         "timestamp 1005"):
        run_tool(capsys, "--files", str(path), "--index-sanity-check")


def test_non_consecutive_offsets_are_listed_newest_first(tmp_path, capsys):
    # Kafka prepends each pair it finds (a compacted log's gaps), so the last comes first.
    b = RecordBatchBuilder()
    for offset in (0, 2, 5):
        b.append(1, None, b"x", offset=offset)
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(b.build())
    code, out, err = run_tool(capsys, "--files", str(seg), "--deep-iteration")
    assert err.splitlines() == [f"Non-consecutive offsets in {seg}", "  2 is followed by 5",
                                "  0 is followed by 2"]
