"""A consume load that costs the load generator almost nothing: batches are counted, not parsed.

    python -m bench.fetch_load -b HOST:PORT -t TOPIC -g GROUP -n SHARE -s SIZE
                               [-B DIR -m MEMBERS] [-T SECONDS]

Joins GROUP subscribed to TOPIC and waits until it holds SHARE partitions (so a member that
joins first does not read the others' share). With -B, it then also waits until MEMBERS
processes have reached that point (each leaves a file in DIR), so that the members start
reading together even when the coordinator answers one SyncGroup later than another (Tansu
did, by up to a second, which counted against it). Then it reads each partition from its
committed offset (the earliest offset for a new group) until it has caught up with the high
watermark. Prints one JSON line shaped like kbroker-loadgen's consume summary.

Why it exists: a librdkafka consumer keeps one Fetch in flight per broker and turns every record
of a response into a message object before it asks for the next. Against kbroker, the two
benchmark consumers spent about 3 ms per 3 MB response doing so while the broker waited for
them, so the consume figure measured the clients (issue 9 rules that out). The same broker
served this tool 1.8x faster (1,733 against 955 MB/s, medians of three rounds).

What it does the way Kafka's consumers do: group membership is the project's client
(broker/client: JoinGroup with the range assignor, SyncGroup, heartbeats in the background,
OffsetFetch, ListOffsets to reset, LeaveGroup at the end), with a 6 s session (Kafka's
group.min.session.timeout.ms) and heartbeats every 0.5 s: Tansu completes a JoinGroup only
after half the session timeout, 22.5 s with the 45 s default. The Fetch requests are the ones
librdkafka 2.16 sends with its default settings: v16 (topics by id, no fetch session), one in
flight per broker, max_wait 500 ms, min_bytes 1, max_bytes 50 MiB, 1 MiB per partition,
read_uncommitted; a response is read whole before the next request is sent. What it skips is
the per-record work: it walks each partition's record batch headers (magic, length, last offset
delta, record count, the control flag) to count records and find the next offset, and leaves
the records alone. A partial batch at the end of a response (Kafka
slices at the byte limit) is fetched again, as clients do. Values are counted as SIZE bytes each
(the benchmark's topics hold values of one size; it checks the record count against what
its producers had acknowledged).

The fetch loop is a blocking socket in a worker thread, so the group's heartbeats go on in the
event loop meanwhile. A member that has finished leaves the group, which makes the coordinator
rebalance the others; they go on reading what they were assigned (`rebalanced` in the summary
says that happened). Records read twice would show in the caller's count.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import struct
import sys
import time

from protocol.headers import RequestHeader, decode_response, encode_request
from protocol.messages.fetch import FetchRequest
from storage.record_batch import RecordBatchView, iter_batches

API_FETCH, FETCH_VERSION = 1, 16        # what librdkafka 2.16 sends to both brokers
MAX_WAIT_MS, MIN_BYTES = 500, 1
MAX_BYTES, PARTITION_MAX_BYTES = 52_428_800, 1_048_576
_I32 = struct.Struct(">i")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def walk_batches(records, offset: int) -> tuple[int, int]:
    """(records counted, next fetch offset) over the whole v2 batches of a partition's record
    data (storage's header-only batch views); a partial last batch is left for the next fetch.
    Batches before `offset` (a fetch may start at the batch holding it) count only their records
    from `offset` on; control batches count none. Raises ValueError for a batch that is not v2
    or whose length is impossible."""
    count = 0
    for batch in iter_batches(records):
        if type(batch) is not RecordBatchView:
            raise ValueError(f"record batch at offset {batch.base_offset} has magic "
                             f"{batch.magic}, not 2")
        last = batch.last_offset
        if last >= offset:
            if not batch.is_control:
                n = batch.records_count
                # Without compaction a batch's offsets are dense: skip those already read.
                count += n - max(0, offset - batch.base_offset) \
                    if n == batch.last_offset_delta + 1 else n
            offset = last + 1
    return count, offset


class Fetcher:
    """One connection to a partition leader, one Fetch in flight, responses read whole."""

    def __init__(self, host: str, port: int, topic: str, topic_id, positions: dict,
                 deadline: float):
        # Each recv waits at most 5 s, so the deadline is overrun by no more than that.
        self.sock = socket.create_connection((host, port), timeout=min(5.0, max(
            1.0, deadline - time.monotonic())))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.topic = topic
        self.topic_id = topic_id                       # Fetch v13+ names topics by id
        self.positions = dict(positions)               # partition -> next offset
        self.deadline = deadline
        self.buf = bytearray(8 << 20)
        self.correlation = 0

    def _read_frame(self) -> memoryview:
        view = memoryview(self.buf)
        got = 0
        while got < 4:
            n = self.sock.recv_into(view[got:4])
            if not n:
                raise ConnectionError("broker closed the connection")
            got += n
        size = _I32.unpack_from(self.buf, 0)[0]
        if size > len(self.buf):
            self.buf = bytearray(size)
            view = memoryview(self.buf)
        got = 0
        while got < size:
            n = self.sock.recv_into(view[got:size])
            if not n:
                raise ConnectionError("broker closed the connection")
            got += n
        return view[:size]

    def fetch(self, partitions: list) -> tuple[int, dict]:
        """One Fetch for `partitions`: (records counted, high watermark per partition)."""
        self.correlation += 1
        request = FetchRequest(max_wait_ms=MAX_WAIT_MS, min_bytes=MIN_BYTES, max_bytes=MAX_BYTES,
                               isolation_level=0, session_id=0, session_epoch=-1,
                               topics=[FetchRequest.FetchTopic(
                                   topic_id=self.topic_id, partitions=[
                                       FetchRequest.FetchPartition(
                                           partition=p, fetch_offset=self.positions[p],
                                           partition_max_bytes=PARTITION_MAX_BYTES)
                                       for p in partitions])])
        self.sock.sendall(encode_request(
            RequestHeader(API_FETCH, FETCH_VERSION, self.correlation, "bench-fetch"), request))
        correlation, response = decode_response(self._read_frame(), API_FETCH, FETCH_VERSION)
        if correlation != self.correlation:
            raise ConnectionError(f"response {correlation} to request {self.correlation}")
        if response.error_code:
            raise RuntimeError(f"Fetch error code {response.error_code}")
        counted, watermarks = 0, {}
        for topic in response.responses:
            for part in topic.partitions:
                if part.error_code:
                    raise RuntimeError(f"Fetch of {self.topic}-{part.partition_index}: "
                                       f"error code {part.error_code}")
                if part.records is not None:
                    n, self.positions[part.partition_index] = walk_batches(
                        part.records, self.positions[part.partition_index])
                    counted += n
                watermarks[part.partition_index] = part.high_watermark
        return counted, watermarks

    def run(self) -> dict:
        """Fetch until every partition has caught up with its high watermark (or the deadline)."""
        messages, t0, t1, cpu0, cpu1 = 0, 0.0, 0.0, 0.0, 0.0
        pending = sorted(self.positions)
        try:
            while pending and time.monotonic() < self.deadline:
                counted, watermarks = self.fetch(pending)
                if counted:
                    # As kbroker-loadgen does: the clock starts when the first records are in,
                    # so the first response's bytes count and its transfer time does not
                    # (under 1% of a 1 GiB run, on both brokers alike).
                    messages += counted
                    t1, cpu1 = time.monotonic(), _cpu()
                    if not t0:
                        t0, cpu0 = t1, cpu1
                pending = [p for p in pending if self.positions[p] < watermarks.get(p, 1 << 62)]
            error = f"{len(pending)} partitions not caught up by the deadline" if pending else ""
        finally:
            self.sock.close()
        return {"messages": messages, "at_end": len(self.positions) - len(pending),
                "t0": t0, "t1": t1, "cpu": cpu1 - cpu0, "error": error}


async def _barrier(directory: str, members: int, deadline: float) -> bool:
    """Leave our mark in `directory`, then wait (heartbeats going on) until `members` have."""
    open(os.path.join(directory, f"member-{os.getpid()}"), "w").close()
    while time.monotonic() < deadline:
        if len(os.listdir(directory)) >= members:
            return True
        await asyncio.sleep(0.001)
    return False


async def consume(bootstrap: str, topic: str, group: str, share: int, size: int,
                  seconds: float, barrier: str | None = None, members: int = 1) -> dict:
    from broker.client.cluster import ClusterClient
    from broker.client.consumer import Consumer

    deadline = time.monotonic() + seconds
    summary = {"messages": 0, "bytes": 0, "partitions": 0, "at_end": 0, "t0": 0.0, "t1": 0.0,
               "cpu": 0.0, "rebalanced": False, "error": ""}
    cluster = ClusterClient(bootstrap, client_id="bench-fetch")
    consumer = Consumer(cluster, group_id=group, auto_offset_reset="earliest",
                        enable_auto_commit=False, assignors=("range",),
                        session_timeout_ms=6000, heartbeat_interval_ms=500)
    try:
        await cluster.start()
        consumer.subscribe([topic])
        membership = consumer.membership
        while time.monotonic() < deadline:
            joined = await membership.ensure_active(max(0.0, deadline - time.monotonic()))
            if joined and not membership.needs_rejoin and len(consumer.assignment()) == share:
                break
            await asyncio.sleep(0.05)
        assigned = sorted(consumer.assignment())
        summary["partitions"] = len(assigned)
        if len(assigned) != share:
            summary["error"] = f"holds {len(assigned)} partitions, not {share}, at the deadline"
            return summary
        generation = membership.generation
        positions = {tp.partition: await consumer.position(tp) for tp in assigned}
        leaders = {await cluster.leader_for(topic, p) for p in positions}
        if len(leaders) != 1:
            summary["error"] = "the partitions have several leaders: one connection per leader " \
                               "is not built"
            return summary
        broker = cluster.brokers[leaders.pop()]
        if barrier and not await _barrier(barrier, members, deadline):
            summary["error"] = f"fewer than {members} members were ready by the deadline"
            return summary
        topic_id = (await cluster.topic_metadata(topic)).topic_id
        fetcher = Fetcher(broker.host, broker.port, topic, topic_id, positions, deadline)
        result = await asyncio.get_running_loop().run_in_executor(None, fetcher.run)
        summary.update(result, bytes=result["messages"] * size,
                       rebalanced=membership.needs_rejoin or membership.generation != generation)
    except Exception as exc:                     # reported in the summary, like loadgen's errors
        summary["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        try:
            await consumer.membership.leave()
        finally:
            await cluster.close()
    return summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fetch_load")
    p.add_argument("-b", dest="bootstrap", required=True)
    p.add_argument("-t", dest="topic", required=True)
    p.add_argument("-g", dest="group", required=True)
    p.add_argument("-n", dest="share", type=int, required=True, help="partitions to wait for")
    p.add_argument("-s", dest="size", type=int, required=True, help="value size, for bytes")
    p.add_argument("-B", dest="barrier", help="a directory shared by the members: start together")
    p.add_argument("-m", dest="members", type=int, default=1, help="members to wait for (-B)")
    p.add_argument("-T", dest="seconds", type=float, default=60, help="give up after this long")
    opts = p.parse_args(argv)
    summary = asyncio.run(consume(opts.bootstrap, opts.topic, opts.group, opts.share, opts.size,
                                  opts.seconds, opts.barrier, opts.members))
    print(json.dumps(summary), flush=True)
    return 1 if summary["error"] else 0


if __name__ == "__main__":
    sys.exit(main())
