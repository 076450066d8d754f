"""kafka-dump-log.sh: print the contents of log segments and index files, offline.

Reads files written by this broker or by Apache Kafka (same formats) without a running broker:
- ``.log``: one line per batch (``baseOffset: .. lastOffset: .. count: .. position: .. CreateTime: ..
  size: .. magic: 2 compresscodec: none crc: .. isvalid: true``); with ``--deep-iteration`` one
  ``| offset: ..`` line per record; with ``--print-data-log`` also ``key:``/``payload:`` as UTF-8 text,
  or decoded ``__consumer_offsets`` / ``__transaction_state`` records with ``--offsets-decoder`` /
  ``--transaction-log-decoder``. Bytes after the last complete batch are reported as invalid.
- ``.index`` (8-byte entries: relative offset int32, position int32) and ``.timeindex`` (12-byte
  entries: timestamp int64, relative offset int32): ``offset: .. position: ..`` /
  ``timestamp: .. offset: ..`` per entry, checked against the log (mismatches go to stderr);
  ``--index-sanity-check`` runs only the start-up sanity check; ``--verify-index-only`` prints
  nothing but the mismatches. A preallocated index is read up to its first zero entry, like Kafka.
- ``.txnindex`` (34-byte aborted-transaction entries) and ``.snapshot`` (producer state) files.
Line formats follow Kafka 3.x's DumpLogSegments so scripts that parse its output parse this one.
"""
from __future__ import annotations

import bisect
import mmap
import os
import struct
import sys

import crc32c

from storage.compression import CorruptRecordError
from storage.legacy import iter_messages
from storage.record_batch import MAGIC_V2, ControlRecordType, iter_batches

from broker.tools import formatters
from broker.tools.common import ToolParser, main_entry

_INDEX_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_TXN_ENTRY = struct.Struct(">hqqqq")
_CONTROL_KEY = struct.Struct(">hh")
_TXN_MARKER_VALUE = struct.Struct(">hi")
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def build_parser() -> ToolParser:
    p = ToolParser("kafka-dump-log.sh", "This tool helps to parse a log file and dump its contents to the "
                   "console, useful for debugging a seemingly corrupt log segment.")
    p.add_argument("--files", required=True, metavar="<String: file1, file2, ...>",
                   help="REQUIRED: The comma separated list of data and index log files to be dumped.")
    p.add_argument("--print-data-log", action="store_true",
                   help="If set, printing the messages content when dumping data logs. Automatically set if "
                        "any decoder option is specified.")
    p.add_argument("--deep-iteration", action="store_true",
                   help="If set, uses deep instead of shallow iteration. Automatically set if print-data-log "
                        "is enabled.")
    p.add_argument("--verify-index-only", action="store_true",
                   help="If set, just verify the index log without printing its content.")
    p.add_argument("--index-sanity-check", action="store_true",
                   help="If set, just checks the index sanity without printing its content.")
    p.add_argument("--max-message-size", type=int, default=5 * 1024 * 1024, metavar="<Integer: size>",
                   help="Size of largest message. (default: 5242880)")
    p.add_argument("--max-bytes", type=int, default=2**31 - 1, metavar="<Integer: size>",
                   help="Limit the amount of total batches read in bytes avoiding reading the whole .log "
                        "file(s). (default: 2147483647)")
    p.add_argument("--offsets-decoder", action="store_true",
                   help="If set, log data will be parsed as offset data from the __consumer_offsets topic.")
    p.add_argument("--transaction-log-decoder", action="store_true",
                   help="If set, log data will be parsed as transaction metadata from the "
                        "__transaction_state topic.")
    p.add_argument("--key-decoder-class", nargs="?", const="org.apache.kafka.tools.api.StringDecoder",
                   metavar="[String]", help="Accepted for compatibility; keys print as UTF-8 text.")
    p.add_argument("--value-decoder-class", nargs="?", const="org.apache.kafka.tools.api.StringDecoder",
                   metavar="[String]", help="Accepted for compatibility; values print as UTF-8 text.")
    p.add_argument("--skip-record-metadata", action="store_true",
                   help="Whether to skip printing metadata for each record.")
    return p


def _text(data) -> str:
    return bytes(data).decode("utf-8", errors="replace")


def _map(path: str):
    """The file's bytes, mapped read-only (a 1 GiB segment was read into memory whole, and its
    zero-filled preallocated tail with it); b"" for an empty file (mmap refuses those). A file
    a running broker shortens while it is dumped (a truncation) ends the tool with SIGBUS."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


class Dumper:
    def __init__(self, opts, out=None, err=None):
        self.opts = opts
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.print_data = (opts.print_data_log or opts.offsets_decoder or opts.transaction_log_decoder
                           or opts.key_decoder_class is not None or opts.value_decoder_class is not None)
        self.deep = opts.deep_iteration or self.print_data
        self.index_mismatches: dict[str, list] = {}
        self.time_errors: dict[str, list] = {}
        self.non_consecutive: dict[str, list] = {}
        self.failed = False

    def p(self, line: str = "") -> None:
        self.out.write(line + "\n")

    # --- dispatch ---------------------------------------------------------------------------------

    def dump(self, path: str) -> None:
        self.p(f"Dumping {path}")
        if not os.path.isfile(path):
            raise FileNotFoundError(2, "No such file or directory", path)
        suffix = os.path.splitext(path)[1]
        handler = {".log": self.dump_log, ".index": self.dump_index, ".timeindex": self.dump_time_index,
                   ".txnindex": self.dump_txn_index, ".snapshot": self.dump_producer_snapshot}.get(suffix)
        if handler is None:                     # Kafka goes on with the other files
            self.err.write(f"Ignoring unknown file {path}\n")
            return
        if not os.path.basename(path).split(".")[0].isdigit():
            raise ValueError(f"{path}: a segment file name starts with its 20-digit base offset")
        handler(path)

    def report(self) -> None:
        """Kafka's summary on stderr: each kind of problem with one header per file; offset
        index mismatches and non-consecutive offsets newest first, as Kafka prepends them."""
        for name, pairs in self.index_mismatches.items():
            self.err.write(f"Mismatches in :{name}\n")
            for index_offset, log_offset in reversed(pairs):
                self.err.write(f"  Index offset: {index_offset}, log offset: {log_offset}\n")
        headers = {"mismatch": "Found timestamp mismatch in :{name}",
                   "order": "Found out of order timestamp in :{name}",
                   "notfound": "The following indexed offsets are not found in the log."}
        lines = {"mismatch": "  Index timestamp: {a}, log timestamp: {b}",
                 "order": "  Index timestamp: {a}, Previously indexed timestamp: {b}",
                 "notfound": "Indexed offset: {a}, found log offset: {b}"}
        for kind in ("mismatch", "order", "notfound"):
            for name, entries in self.time_errors.items():
                found = [(a, b) for k, a, b in entries if k == kind]
                if found:
                    self.err.write(headers[kind].format(name=name) + "\n")
                    for a, b in found:
                        self.err.write(lines[kind].format(a=a, b=b) + "\n")
        for name, pairs in self.non_consecutive.items():
            self.err.write(f"Non-consecutive offsets in {name}\n")
            for first, second in reversed(pairs):
                self.err.write(f"  {first} is followed by {second}\n")

    # --- .log -------------------------------------------------------------------------------------

    def dump_log(self, path: str) -> None:
        base = int(os.path.basename(path).split(".")[0])
        self.p(f"Log starting offset: {base}")
        data = _map(path)
        limit = min(len(data), self.opts.max_bytes)
        valid_bytes = 0
        last_offset = -1
        try:
            for batch in iter_batches(data, 0, limit):
                self.print_batch(batch, valid_bytes)
                if self.deep:
                    last_offset = self.print_records(path, batch, last_offset)
                valid_bytes += batch.size_in_bytes
        except CorruptRecordError as e:
            self.err.write(f"Error: {e}\n")
            self.failed = True
        trailing = len(data) - valid_bytes
        if trailing > 0 and self.opts.max_bytes == 2**31 - 1:
            self.p(f"Found {trailing} invalid bytes at the end of {os.path.basename(path)}")

    def print_batch(self, batch, position: int) -> None:
        if batch.magic >= MAGIC_V2:
            horizon = (f"OptionalLong[{batch.delete_horizon_ms}]" if batch.has_delete_horizon
                       else "OptionalLong.empty")
            head = (f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} count: {batch.records_count} "
                    f"baseSequence: {batch.base_sequence} lastSequence: {batch.last_sequence} "
                    f"producerId: {batch.producer_id} producerEpoch: {batch.producer_epoch} "
                    f"partitionLeaderEpoch: {batch.partition_leader_epoch} "
                    f"isTransactional: {str(batch.is_transactional).lower()} "
                    f"isControl: {str(batch.is_control).lower()} deleteHorizonMs: {horizon}")
            ts_type = "LogAppendTime" if batch.timestamp_type else "CreateTime"
            max_ts = batch.max_timestamp
        else:
            head = f"offset: {batch.last_offset}"
            ts_type, max_ts = _legacy_timestamp(batch)
        self.p(f"{head} position: {position} {ts_type}: {max_ts} size: {batch.size_in_bytes} "
               f"magic: {batch.magic} compresscodec: {CODEC_NAMES.get(int(batch.compression), 'unknown')} "
               f"crc: {batch.crc} isvalid: {str(batch.is_valid()).lower()}")

    def print_records(self, path: str, batch, last_offset: int) -> int:
        if batch.magic < MAGIC_V2:
            return self.print_legacy_records(path, batch, last_offset)
        ts_type = "LogAppendTime" if batch.timestamp_type else "CreateTime"
        for record in batch.records():
            if last_offset != -1 and record.offset != last_offset + 1:
                self.non_consecutive.setdefault(os.path.abspath(path), []).append((last_offset, record.offset))
            last_offset = record.offset
            line, prefix = "", "| "
            if not self.opts.skip_record_metadata:
                key_size = -1 if record.key is None else len(record.key)
                value_size = -1 if record.value is None else len(record.value)
                header_keys = ",".join(k for k, _ in record.headers)
                line += (f"{prefix}offset: {record.offset} {ts_type}: {record.timestamp} keySize: {key_size} "
                         f"valueSize: {value_size} sequence: {record.sequence} headerKeys: [{header_keys}]")
                prefix = " "
                if batch.is_control:
                    line += " " + _control_description(record)
            if self.print_data and not batch.is_control:
                key, payload = self.parse_record(record)
                if key is not None:
                    line += f"{prefix}key: {key}"
                    prefix = " "
                if payload is not None:
                    line += f" payload: {payload}"
            self.p(line)
        return last_offset

    def print_legacy_records(self, path: str, entry, last_offset: int) -> int:
        """Magic 0/1 messages (a compressed wrapper is unpacked): Kafka 3.x prints ``crc`` and
        ``isvalid`` instead of sequence/headers. The crc shown is the entry's (the wrapper's for
        compressed messages)."""
        valid = str(entry.is_valid()).lower()
        for record in iter_messages(entry.buffer, entry.position, entry.position + entry.size_in_bytes):
            if last_offset != -1 and record.offset != last_offset + 1:
                self.non_consecutive.setdefault(os.path.abspath(path), []).append((last_offset, record.offset))
            last_offset = record.offset
            ts_type = "NoTimestampType" if record.magic == 0 else (
                "LogAppendTime" if record.timestamp_type else "CreateTime")
            line, prefix = "", "| "
            if not self.opts.skip_record_metadata:
                key_size = -1 if record.key is None else len(record.key)
                value_size = -1 if record.value is None else len(record.value)
                # Kafka's line, its stray "}" included; each message's own CRC (an inner
                # message's, not its wrapper's)
                line += (f"{prefix}offset: {record.offset} {ts_type}: {record.timestamp} keySize: {key_size} "
                         f"valueSize: {value_size} isValid: {valid} crc: {record.crc}}}")
                prefix = " "
            if self.print_data:
                key, payload = self.parse_record(record)
                if key is not None:
                    line += f"{prefix}key: {key}"
                if payload is not None:
                    line += f" payload: {payload}"
            self.p(line)
        return last_offset

    def parse_record(self, record):
        if self.opts.offsets_decoder:
            return formatters.dump_offsets_record(record.offset, record.key, record.value)
        if self.opts.transaction_log_decoder:
            return formatters.dump_transaction_record(record.offset, record.key, record.value)
        return (None if record.key is None else _text(record.key),
                None if record.value is None else _text(record.value))

    # --- indexes ----------------------------------------------------------------------------------

    def _log_path(self, path: str) -> str:
        return os.path.join(os.path.dirname(path), os.path.basename(path).split(".")[0] + ".log")

    def _read_entries(self, path: str, entry: struct.Struct) -> tuple[int, list]:
        base = int(os.path.basename(path).split(".")[0])
        with open(path, "rb") as f:
            raw = f.read()
        usable = len(raw) - len(raw) % entry.size
        return base, [entry.unpack_from(raw, i) for i in range(0, usable, entry.size)], len(raw)

    def dump_index(self, path: str) -> None:
        base, entries, size = self._read_entries(path, _INDEX_ENTRY)
        if not entries:
            self.p(f"{path} is empty.")
            return
        if self.opts.index_sanity_check:
            last = entries[-1][0] + base
            if size % _INDEX_ENTRY.size:
                raise ValueError(f"Index file {os.path.abspath(path)} is corrupt, found {size} bytes which is "
                                 f"neither positive nor a multiple of {_INDEX_ENTRY.size}.")
            if last < base:
                raise ValueError(f"Corrupt index found, index file ({os.path.abspath(path)}) has non-zero size "
                                 f"but the last offset is {last} which is less than the base offset {base}.")
            self.p(f"{path} passed sanity check.")
            return
        log = _map(self._log_path(path))
        for i, (relative, position) in enumerate(entries):
            offset = base + relative
            if relative == 0 and i > 0:
                return  # a preallocated index: the rest is zeros
            end = min(len(log), position + self.opts.max_message_size)
            batch = next(iter_batches(log, position, end), None) if position < end else None
            found = batch.last_offset if batch is not None else -1
            if found != offset:
                self.index_mismatches.setdefault(os.path.abspath(path), []).append((offset, found))
            if not self.opts.verify_index_only:
                self.p(f"offset: {offset} position: {position}")

    def dump_time_index(self, path: str) -> None:
        base, entries, size = self._read_entries(path, _TIME_ENTRY)
        name = os.path.abspath(path)
        if self.opts.index_sanity_check:
            if entries:
                if size % _TIME_ENTRY.size:
                    raise ValueError(f"Time index file {name} is corrupt, found {size} bytes which is neither "
                                     f"positive nor a multiple of {_TIME_ENTRY.size}.")
                last_ts, last_rel = entries[-1]        # Kafka reads the last slot, zeros or not
                if last_ts < entries[0][0]:
                    raise ValueError(f"Corrupt time index found, time index file ({name}) has non-zero size but "
                                     f"the last timestamp is {last_ts} which is less than the first timestamp "
                                     f"{entries[0][0]}")
                if last_rel + base < base:
                    raise ValueError(f"Corrupt time index found, time index file ({name}) has non-zero size but "
                                     f"the last offset is {last_rel + base} which is less than the first offset "
                                     f"{base}")
            self.p(f"{path} passed sanity check.")
            return
        log = _map(self._log_path(path))
        offset_index = []
        index_path = path[: -len(".timeindex")] + ".index"
        if os.path.exists(index_path):
            _, offset_index, _ = self._read_entries(index_path, _INDEX_ENTRY)
        # the offset index's entries up to its first unused (zero) slot, searched by bisection
        used = next((j for j, (rel, _) in enumerate(offset_index) if rel == 0 and j > 0),
                    len(offset_index))
        relatives = [rel for rel, _ in offset_index[:used]]
        prev_ts = -1
        for i, (timestamp, relative) in enumerate(entries):
            offset = base + relative
            if relative == 0 and i > 0:
                return
            j = bisect.bisect_right(relatives, relative) - 1
            position = offset_index[j][1] if j >= 0 else 0
            batch = next((b for b in iter_batches(log, position) if b.last_offset >= offset), None)
            if batch is None:
                self.time_errors.setdefault(name, []).append(("notfound", offset, -1))
            elif batch.last_offset != offset:
                self.time_errors.setdefault(name, []).append(("notfound", offset, batch.last_offset))
            else:
                max_ts = max((r.timestamp for r in batch.records()), default=-1) if batch.magic >= MAGIC_V2 else -1
                if max_ts != timestamp:
                    self.time_errors.setdefault(name, []).append(("mismatch", timestamp, max_ts))
                if prev_ts >= timestamp:
                    self.time_errors.setdefault(name, []).append(("order", timestamp, prev_ts))
            if not self.opts.verify_index_only:
                self.p(f"timestamp: {timestamp} offset: {offset}")
            prev_ts = timestamp

    def dump_txn_index(self, path: str) -> None:
        with open(path, "rb") as f:
            raw = f.read()
        for pos in range(0, len(raw) - len(raw) % _TXN_ENTRY.size, _TXN_ENTRY.size):
            version, producer_id, first, last, lso = _TXN_ENTRY.unpack_from(raw, pos)
            self.p(f"version: {version} producerId: {producer_id} firstOffset: {first} "
                   f"lastOffset: {last} lastStableOffset: {lso}")

    def dump_producer_snapshot(self, path: str) -> None:
        """Kafka's producer snapshot v1: version int16, crc32c uint32, count int32, then entries of
        producer_id int64, epoch int16, last_sequence int32, last_offset int64, offset_delta int32,
        timestamp int64, coordinator_epoch int32, current_txn_first_offset int64."""
        with open(path, "rb") as f:
            raw = f.read()
        entry = struct.Struct(">qhiqiqiq")
        # As Kafka's readSnapshot: the whole file is checked before anything is printed; a bad
        # one is a line on stderr and the other files are still dumped.
        try:
            version, stored_crc, count = struct.unpack_from(">hIi", raw, 0)
            if version != 1:
                raise ValueError(f"Snapshot contained an unknown file version {version}")
            computed = crc32c.crc32c(raw[6:])
            if stored_crc != computed:
                raise ValueError(f"Snapshot is corrupt (CRC is no longer valid). Stored crc: "
                                 f"{stored_crc}. Computed crc: {computed}")
            rows = [entry.unpack_from(raw, 10 + i * entry.size) for i in range(count)]
        except struct.error:
            self.err.write("Snapshot failed schema validation: Error reading field "
                           "'producer_entries': the file is truncated\n")
            return
        except ValueError as exc:
            self.err.write(f"{exc}\n")
            return
        for pid, epoch, last_seq, last_offset, delta, ts, coord_epoch, txn_first in rows:
            first_seq = last_seq - delta if last_seq - delta >= 0 else last_seq - delta + 2**31
            txn = "OptionalLong.empty" if txn_first < 0 else f"OptionalLong[{txn_first}]"
            line = (f"producerId: {pid} producerEpoch: {epoch} coordinatorEpoch: {coord_epoch} "
                    f"currentTxnFirstOffset: {txn} lastTimestamp: {ts} ")
            if last_offset >= 0:
                line += (f"firstSequence: {first_seq} lastSequence: {last_seq} lastOffset: {last_offset} "
                         f"offsetDelta: {delta} timestamp: {ts}")
            self.p(line)


def _legacy_timestamp(entry) -> tuple[str, int]:
    if entry.magic == 0:
        return "NoTimestampType", -1
    (ts,) = struct.unpack_from(">q", entry.buffer, entry.position + 18)
    return ("LogAppendTime" if entry.attributes & 0x08 else "CreateTime"), ts


def _control_description(record) -> str:
    try:
        _, type_id = _CONTROL_KEY.unpack_from(record.key, 0)
    except (struct.error, TypeError):
        return "controlType: UNKNOWN(-1)"
    if type_id in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        name = "ABORT" if type_id == ControlRecordType.ABORT else "COMMIT"
        try:
            _, coordinator_epoch = _TXN_MARKER_VALUE.unpack_from(record.value, 0)
        except (struct.error, TypeError):
            coordinator_epoch = -1
        return f"endTxnMarker: {name} coordinatorEpoch: {coordinator_epoch}"
    # Kafka's ControlRecordType ids (KRaft's metadata log): LEADER_CHANGE 2, then 3-6, which
    # Kafka prints as JSON of their records (not decoded here).
    names = {2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER", 5: "KRAFT_VERSION",
             6: "KRAFT_VOTERS"}
    return f"controlType: {names.get(type_id, 'UNKNOWN')}({type_id})"


def main(argv=None) -> int:
    opts = build_parser().parse_args(argv)
    dumper = Dumper(opts)
    for path in opts.files.split(","):
        dumper.dump(path.strip())
    dumper.report()
    return 1 if dumper.failed else 0


if __name__ == "__main__":
    main_entry(main)
