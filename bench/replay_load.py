"""A produce load that costs the load generator almost nothing: pre-built batches, replayed.

    prepare(path, topic, partitions, size, acks, codec)    # once per workload, in the benchmark
    python -m bench.replay_load -b HOST:PORT -f FRAMES -s SIZE -c REQUESTS [-T SECONDS]

Sends for at most SECONDS (then collects the responses still due) and at most REQUESTS requests.

Why it exists: with lz4, librdkafka compresses every batch it sends, and on this 2-core machine
the two kbroker-loadgen producers spent 1.4-1.7 cores doing so. The load generator was then the
bottleneck, which issue 9 rules out, and the ratio measured how the CPU was split, not the brokers.

So this tool compresses once. `prepare` builds a few distinct Produce requests, each holding one
RecordBatch v2 per partition, as full as librdkafka makes them under load (batch.size 1,000,000
bytes, at most 10,000 records). The batches come from kafka-python's record builder (a real
client's encoder, not this project's), with the benchmark's JSON-like values. Each process then
sends those requests over and over on one connection, five in flight (the Java producer's
default), patching only the correlation id. That is valid Kafka: without a producer id a batch
has no sequence to repeat, and the broker assigns the offsets.

Every response is read and every partition's error code is checked. The tool prints one JSON line
shaped like kbroker-loadgen's produce summary, with CLOCK_MONOTONIC times of the first request
sent and the last response received.
"""
from __future__ import annotations

import argparse
import collections
import json
import socket
import struct
import sys
import time

from bench import broker_load
from protocol.headers import RequestHeader, decode_response, encode_request
from protocol.messages.produce import ProduceRequest

API_PRODUCE, VERSION = 0, 7            # Produce v7: the last non-flexible version; both brokers serve it
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
IN_FLIGHT = 5
VARIANTS = 4                           # distinct requests cycled through
_I32 = struct.Struct(">i")


def build_batch(values: list[bytes], codec: str) -> bytes:
    from kafka.record.memory_records import MemoryRecordsBuilder
    builder = MemoryRecordsBuilder(magic=2, compression_type=CODECS[codec],
                                   batch_size=sum(len(v) for v in values) * 2 + 4096)
    now_ms = int(time.time() * 1000)
    for value in values:
        if builder.append(now_ms, None, value, []) is None:
            raise RuntimeError("batch full: raise batch_size")
    builder.close()
    return bytes(builder.buffer())


def build_request(topic: str, partitions: int, acks: int, batches: list[bytes]) -> bytearray:
    """A whole Produce v7 frame (size prefix included) with correlation id 0."""
    request = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=30_000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=p, records=batches[p])
            for p in range(partitions)])])
    return bytearray(encode_request(RequestHeader(API_PRODUCE, VERSION, 0, "bench-replay"),
                                    request))


CORRELATION_AT = 8                     # size(4) api_key(2) api_version(2)


def _read_exact(sock, n: int) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            raise ConnectionError("broker closed the connection")
        got += k
    return bytes(buf)


def parse_response(frame: bytes) -> tuple[int, list[int]]:
    """(correlation id, error codes of every partition) of a Produce v7 response."""
    correlation, response = decode_response(frame, API_PRODUCE, VERSION)
    return correlation, [p.error_code for topic in response.responses
                         for p in topic.partition_responses]


def records_per_batch(size: int) -> int:
    """What librdkafka puts in a batch when the producer is saturated: batch.size (1,000,000
    bytes, before compression) or batch.num.messages (10,000), whichever is reached first."""
    return max(1, min(10_000, 1_000_000 // (size + 12)))


def prepare(path, topic: str, partitions: int, size: int, acks: int, codec: str,
            records: int | None = None) -> str:
    """Write the records each request carries (int32), then VARIANTS Produce frames (each
    size-prefixed, as sent), to `path`; returns it."""
    records = records or records_per_batch(size)
    values = broker_load.payloads(size)
    with open(path, "wb") as out:
        out.write(_I32.pack(partitions * records))
        for v in range(VARIANTS):
            batches = []
            for p in range(partitions):
                start = (v * partitions + p) * records
                batches.append(build_batch(
                    [values[(start + i) % len(values)] for i in range(records)], codec))
            out.write(build_request(topic, partitions, acks, batches))
    return str(path)


def load_frames(path) -> tuple[list[bytearray], int]:
    """The frames of a prepare()d file, and the records each carries."""
    data = open(path, "rb").read()
    per_request, pos = _I32.unpack_from(data, 0)[0], 4
    frames = []
    while pos < len(data):
        size = _I32.unpack_from(data, pos)[0]
        frames.append(bytearray(data[pos:pos + 4 + size]))
        pos += 4 + size
    return frames, per_request


def run(bootstrap: str, frames_path: str, size: int, requests: int, seconds: float) -> dict:
    """Send up to `requests` requests for at most `seconds`, then wait (at most 30 s more) for
    the responses still due."""
    frames, per_request = load_frames(frames_path)
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sent = delivered = failed = 0
    error = ""
    pending = collections.deque()                        # correlation ids in flight, in order
    t0 = t1 = time.monotonic()
    send_until, deadline = t0 + seconds, t0 + seconds + 30
    try:
        while time.monotonic() < deadline:
            sending = sent < requests and time.monotonic() < send_until
            if not sending and not pending:
                break
            if sending and len(pending) < IN_FLIGHT:
                frame = frames[sent % len(frames)]
                _I32.pack_into(frame, CORRELATION_AT, sent)
                sock.sendall(frame)
                pending.append(sent)
                sent += 1
                continue
            size_prefix = _I32.unpack(_read_exact(sock, 4))[0]
            correlation, errors = parse_response(_read_exact(sock, size_prefix))
            if correlation != pending[0]:
                raise ConnectionError(f"response {correlation} out of order, "
                                      f"expected {pending[0]}")
            pending.popleft()
            bad = [e for e in errors if e]
            if bad:
                failed += per_request
                error = f"error code {bad[0]}"
            else:
                delivered += per_request
            t1 = time.monotonic()
    except (OSError, ConnectionError) as exc:
        error = str(exc) or type(exc).__name__
    finally:
        sock.close()
    return {"messages": sent * per_request, "delivered": delivered, "failed": failed,
            "queued": len(pending) * per_request, "bytes": delivered * size,
            "t0": t0, "t1": t1, "error": error}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.replay_load")
    p.add_argument("-b", dest="bootstrap", required=True)
    p.add_argument("-f", dest="frames", required=True, help="a file written by prepare()")
    p.add_argument("-s", dest="size", type=int, required=True, help="value size, for bytes")
    p.add_argument("-c", dest="requests", type=int, required=True, help="at most this many")
    p.add_argument("-T", dest="seconds", type=float, default=10, help="send for at most this long")
    opts = p.parse_args(argv)
    summary = run(opts.bootstrap, opts.frames, opts.size, opts.requests, opts.seconds)
    print(json.dumps(summary), flush=True)
    return 1 if summary["error"] or summary["failed"] or summary["queued"] else 0


if __name__ == "__main__":
    sys.exit(main())
