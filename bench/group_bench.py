"""Group coordinator benchmark: `python -m bench.group_bench`.

Drives the coordinator runtime (coordinator/runtime.py: state machine + asyncio glue) over a
REAL ReplicaManager and storage Log in a temporary directory, so every commit and assignment is
encoded, appended to `__consumer_offsets` and replayed, exactly as in the broker. The network
and the request codecs are not included (protocol/ has its own benchmark).

Measures, in one run:
  1. a group of 100 members: the initial rebalance (all join within a few ms, with
     group.initial.rebalance.delay.ms = 100), then a full rebalance where every member rejoins;
     reported as the time from the LAST join to the last SyncGroup answer. Target: < 2 s.
  2. heartbeats from 100 members, 16 concurrent callers: rate and p50/p99 latency.
     Target: >= 10,000/s, p99 < 10 ms.
  3. offset commits (one request = the member's 6 partitions, one batch of 6 records), 16
     concurrent callers: rate and p50/p99 latency. Target: >= 5,000/s, p99 < 10 ms.
  4. for information, 2 and 3 again through the wire codecs and the handlers (request bytes
     decoded, handler, response encoded): everything but the socket.
  5. for information, the whole stack: a broker subprocess on loopback, 8 pipelined
     connections each driving one single-member group (heartbeats, then 6-partition commits).
     A broker serves one request per connection at a time (Kafka's ordering), so a loop turn
     groups at most 8 commits; the load generator shares the machine's cores.
Commits from concurrent callers are written together (the runtime's group commit), so the
latency of one commit is the time of one such round.
Prints one line per figure and returns non-zero if a target is missed (`main()` -> int).
"""
import asyncio
import os
import statistics
import sys
import tempfile
import time

MEMBERS = 100
PARTITIONS = 600
HEARTBEATS = 40_000
COMMITS = 20_000
CONCURRENCY = 16


def _setup(tmp):
    from broker.replica_manager import ReplicaManager
    from coordinator.results import GroupConfig
    from coordinator.runtime import GroupCoordinator
    from storage.log_config import LogConfig
    from storage.log_manager import LogManager

    log_manager = LogManager([tmp], LogConfig())
    log_manager.startup("bench-cluster", 0)
    rm = ReplicaManager(log_manager, broker_id=0, producer_id_dir=tmp)
    for p in range(50):
        rm.become_leader("__consumer_offsets", p, None, 0, [0], LogConfig())
    config = GroupConfig(initial_rebalance_delay_ms=100, min_session_timeout_ms=1000)
    return log_manager, rm, GroupCoordinator(rm, num_partitions=50, config=config)


def _assign(member_ids):
    """Round robin of PARTITIONS partitions over the members (what a leader's assignor does)."""
    out = {m: [] for m in member_ids}
    for p in range(PARTITIONS):
        out[member_ids[p % len(member_ids)]].append(p)
    return {m: ",".join(map(str, ps)).encode() for m, ps in out.items()}


async def _join_and_sync(c, group, member_id, stamps, client):
    answer = await c.execute("join_group", group, member_id, None, client, "/127.0.0.1", 30_000,
                             60_000, "consumer", [("range", b"sub")], True, parked=True)
    if answer.error == 79:                              # MEMBER_ID_REQUIRED
        stamps.append(time.perf_counter())
        answer = await c.execute("join_group", group, answer.member_id, None, client,
                                 "/127.0.0.1", 30_000, 60_000, "consumer", [("range", b"sub")],
                                 True, parked=True)
    else:
        stamps.append(time.perf_counter())
    assert answer.error == 0, answer
    assignments = _assign([m for m, _, _ in answer.members]) if answer.members else {}
    sync = await c.execute("sync_group", group, answer.generation_id, answer.member_id, None,
                           None, None, assignments, parked=True)
    assert sync.error == 0, sync
    return answer.member_id, answer.generation_id, time.perf_counter()


async def _rebalance(c, group):
    stamps = []
    results = await asyncio.gather(*(_join_and_sync(c, group, "", stamps, f"client-{i}")
                                     for i in range(MEMBERS)))
    initial = max(r[2] for r in results) - max(stamps)
    # Every member rejoins with its id (what a metadata change or a new subscription causes).
    stamps = []
    results = await asyncio.gather(*(_join_and_sync(c, group, mid, stamps, "client")
                                     for mid, _, _ in results))
    rejoin = max(r[2] for r in results) - max(stamps)
    return initial, rejoin, [(mid, gen) for mid, gen, _ in results]


async def _load(total, make_call):
    latencies = []
    per_worker = total // CONCURRENCY

    async def worker(w):
        for i in range(per_worker):
            started = time.perf_counter()
            await make_call(w, i)
            latencies.append(time.perf_counter() - started)
    started = time.perf_counter()
    cpu_started = time.process_time()
    await asyncio.gather(*(worker(w) for w in range(CONCURRENCY)))
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    latencies.sort()
    # (rate, p50 ms, p99 ms, rate per CPU second: what one core sustains, whatever the load)
    return (len(latencies) / elapsed, statistics.median(latencies) * 1000,
            latencies[int(len(latencies) * 0.99)] * 1000, len(latencies) / max(cpu, 1e-9))


async def _run(tmp):
    log_manager, rm, c = _setup(tmp)
    await c.startup()
    group = "bench-group"
    initial, rejoin, members = await _rebalance(c, group)

    async def heartbeat(w, i):
        mid, gen = members[(w * 7 + i) % MEMBERS]
        assert await c.execute("heartbeat", group, mid, None, gen) == 0

    async def commit(w, i):
        k = (w * 7 + i) % MEMBERS
        mid, gen = members[k]
        offsets = [("events", p, i, 0, "") for p in range(k * 6, k * 6 + 6)]
        answer = await c.execute("commit_offsets", group, mid, None, gen, offsets)
        assert all(e == 0 for e in answer.values()), answer

    hb = await _load(HEARTBEATS, heartbeat)
    commits = await _load(COMMITS, commit)
    wire = await _through_handlers(c, rm, group, members)
    c.shutdown()
    rm.shutdown()
    log_manager.shutdown()
    return initial, rejoin, hb, commits, wire


async def _through_handlers(c, rm, group, members):
    """The same heartbeats and commits as request bytes -> decode -> handler -> encode (all but
    the socket), at the versions librdkafka 2.x uses (Heartbeat v4, OffsetCommit v8)."""
    from types import SimpleNamespace

    from protocol.messages.heartbeat import HeartbeatRequest
    from protocol.messages.offset_commit import OffsetCommitRequest
    from storage.log_config import LogConfig

    from broker.context import RequestContext
    from broker.handlers import heartbeat as heartbeat_handler
    from broker.handlers import offset_commit as commit_handler

    for p in range(6):
        rm.become_leader("events", p, None, 0, [0], LogConfig())
    broker = SimpleNamespace(group_coordinator=c, replica_manager=rm)
    heartbeats = [HeartbeatRequest(group_id=group, generation_id=gen, member_id=mid).encode(4)
                  for mid, gen in members]
    P = OffsetCommitRequest.OffsetCommitRequestPartition
    commits = [OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=gen, member_id=mid, topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(name="events", partitions=[
                P(partition_index=p, committed_offset=i) for p in range(6)])]).encode(8)
        for i, (mid, gen) in enumerate(members)]
    hb_ctx = RequestContext(12, 4, 1, "bench", "127.0.0.1", 1)
    commit_ctx = RequestContext(8, 8, 1, "bench", "127.0.0.1", 1)

    async def heartbeat(w, i):
        request = HeartbeatRequest.decode(heartbeats[(w * 7 + i) % MEMBERS], 4)
        response = await heartbeat_handler.handle(broker, hb_ctx, request)
        assert response.error_code == 0
        response.encode(4)

    async def commit(w, i):
        request = OffsetCommitRequest.decode(commits[(w * 7 + i) % MEMBERS], 8)
        response = await commit_handler.handle(broker, commit_ctx, request)
        assert response.topics[0].partitions[0].error_code == 0
        response.encode(8)
    return await _load(HEARTBEATS // 2, heartbeat), await _load(COMMITS // 2, commit)


# ---------------------------------------------------------------------------- over TCP
TCP_CONNECTIONS = 8
TCP_WINDOW = 4                       # requests in flight per connection (pipelined)
TCP_SECONDS = 3.0


class _Wire:
    """One pipelined connection speaking raw Kafka frames (the project's codecs)."""

    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer
        self.correlation = 0

    async def call(self, request, version):
        from protocol.headers import RequestHeader, decode_response, encode_request
        self.correlation += 1
        header = RequestHeader(request.API_KEY, version, self.correlation, "group-bench")
        self.writer.write(encode_request(header, request))
        body = await self.read_frame()
        return decode_response(body, request.API_KEY, version)[1]

    async def read_frame(self) -> bytes:
        size = int.from_bytes(await self.reader.readexactly(4), "big")
        return await self.reader.readexactly(size)


def _frame(request, version, correlation=1) -> bytes:
    from protocol.headers import RequestHeader, encode_request
    return encode_request(RequestHeader(request.API_KEY, version, correlation, "group-bench"),
                          request)


async def _pipelined(wires, frames, check):
    """Each connection keeps TCP_WINDOW requests in flight for TCP_SECONDS; answers arrive in
    order per connection. Returns (rate, p50 ms, p99 ms)."""
    latencies = []
    stop_at = time.perf_counter() + TCP_SECONDS

    async def drive(i, wire):
        frame = frames[i % len(frames)]
        sent = []
        for _ in range(TCP_WINDOW):
            sent.append(time.perf_counter())
            wire.writer.write(frame)
        for _ in range(10_000_000):                 # bounded; ends at stop_at
            body = await wire.read_frame()
            latencies.append(time.perf_counter() - sent.pop(0))
            check(body)
            if time.perf_counter() < stop_at:
                sent.append(time.perf_counter())
                wire.writer.write(frame)
            elif not sent:
                return
    started = time.perf_counter()
    await asyncio.gather(*(drive(i, w) for i, w in enumerate(wires)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    return (len(latencies) / elapsed, statistics.median(latencies) * 1000,
            latencies[int(len(latencies) * 0.99)] * 1000)


def _broker_cpu(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _tcp_load(port, pid):
    from protocol.messages.create_topics import CreateTopicsRequest
    from protocol.messages.find_coordinator import FindCoordinatorRequest
    from protocol.messages.heartbeat import HeartbeatRequest
    from protocol.messages.join_group import JoinGroupRequest
    from protocol.messages.offset_commit import OffsetCommitRequest
    from protocol.messages.sync_group import SyncGroupRequest

    wires = []
    for _ in range(TCP_CONNECTIONS):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        wires.append(_Wire(reader, writer))
    first = wires[0]
    topic = CreateTopicsRequest.CreatableTopic(name="events", num_partitions=6,
                                               replication_factor=1)
    await first.call(CreateTopicsRequest(topics=[topic], timeout_ms=30_000), 4)
    found = await first.call(FindCoordinatorRequest(key="bench-0"), 3)
    assert found.error_code == 0, found
    # One single-member group per connection (JoinGroup v3: no member-id round trip).
    members = []
    for i, wire in enumerate(wires):
        group = f"bench-{i}"
        join = await wire.call(JoinGroupRequest(
            group_id=group, session_timeout_ms=30_000, rebalance_timeout_ms=30_000,
            protocol_type="consumer", protocols=[JoinGroupRequest.JoinGroupRequestProtocol(
                name="range", metadata=b"sub")]), 3)
        assert join.error_code == 0, join
        sync = await wire.call(SyncGroupRequest(
            group_id=group, generation_id=join.generation_id, member_id=join.member_id,
            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
                member_id=join.member_id, assignment=b"all")]), 3)
        assert sync.error_code == 0, sync
        members.append((group, join.member_id, join.generation_id))
    heartbeats = [_frame(HeartbeatRequest(group_id=g, generation_id=gen, member_id=m), 4)
                  for g, m, gen in members]
    P = OffsetCommitRequest.OffsetCommitRequestPartition
    commits = [_frame(OffsetCommitRequest(
        group_id=g, generation_id_or_member_epoch=gen, member_id=m, topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(name="events", partitions=[
                P(partition_index=p, committed_offset=1000 + p) for p in range(6)])]), 8)
        for g, m, gen in members]

    def heartbeat_ok(body):
        # response header v1 (correlation id, empty tags), throttle_time_ms, error_code
        assert body[9:11] == b"\x00\x00", body

    def commit_ok(body):
        assert body.count(b"\x00\x00") >= 6, body
    cpu = _broker_cpu(pid)
    hb = await _pipelined(wires, heartbeats, heartbeat_ok)
    hb_cpu = _broker_cpu(pid) - cpu
    cpu = _broker_cpu(pid)
    commit = await _pipelined(wires, commits, commit_ok)
    commit_cpu = _broker_cpu(pid) - cpu
    for wire in wires:
        wire.writer.close()
    return (*hb, hb[0] * TCP_SECONDS / max(hb_cpu, 1e-9)), \
        (*commit, commit[0] * TCP_SECONDS / max(commit_cpu, 1e-9))


def _over_tcp(tmp):
    """Heartbeats and commits through a broker subprocess over loopback TCP, the whole stack.
    (The load generator runs on the same cores: on 2 cores it takes a good share of them.)"""
    import pathlib
    import socket
    import subprocess
    root = pathlib.Path(__file__).resolve().parents[1]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{port}", "log.dirs": f"{tmp}/tcp-logs",
                 "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "50"}
    cmd = [sys.executable, "-m", "broker", str(root / "config" / "server.properties")]
    for key, value in overrides.items():
        cmd += ["--override", f"{key}={value}"]
    out = open(f"{tmp}/broker.out", "wb")
    proc = subprocess.Popen(cmd, cwd=root, stdout=out, stderr=subprocess.STDOUT,
                            env=dict(os.environ, PYTHONPATH=str(root)))
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None:
                raise RuntimeError(open(f"{tmp}/broker.out").read())
            time.sleep(0.05)
        return asyncio.run(asyncio.wait_for(_tcp_load(port, proc.pid), 60))
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        out.close()


def main() -> int:
    import logging
    import os
    logging.getLogger("storage").setLevel(logging.ERROR)     # index rebuild notices at setup
    with tempfile.TemporaryDirectory(prefix="group-bench-") as tmp:
        initial, rejoin, hb, commits, (wire_hb, wire_commits) = asyncio.run(_run(tmp))
        tcp_hb, tcp_commits = _over_tcp(tmp)
    # Latency percentiles on a shared machine depend on its load: print it with the figures.
    print(f"group coordinator (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")

    def rate(r, cpu_label="CPU-s"):
        return (f"{r[0]:,.0f}/s  p50 {r[1]:.3f} ms  p99 {r[2]:.3f} ms  "
                f"({r[3]:,.0f}/{cpu_label})")
    # (figure, measured, target, met: True/False, or None for figures given for information)
    rows = [
        (f"rebalance, {MEMBERS} members, initial (delay 100 ms)",
         f"{initial * 1000:.0f} ms after last join", "< 2 s", initial < 2.0),
        (f"rebalance, {MEMBERS} members, all rejoin", f"{rejoin * 1000:.0f} ms after last join",
         "< 2 s", rejoin < 2.0),
        ("heartbeats (coordinator + log)", rate(hb), ">= 10,000/s, p99 < 10 ms",
         hb[0] >= 10_000 and hb[2] < 10),
        ("offset commits, 6 partitions (coordinator + log)", rate(commits),
         ">= 5,000/s, p99 < 10 ms", commits[0] >= 5_000 and commits[2] < 10),
        ("heartbeats, decode + handler + encode", rate(wire_hb), "(information)", None),
        ("commits, decode + handler + encode", rate(wire_commits), "(information)", None),
        (f"heartbeats over TCP ({TCP_CONNECTIONS} conn x {TCP_WINDOW})",
         rate(tcp_hb, "broker CPU-s"), "(information)", None),
        (f"commits over TCP ({TCP_CONNECTIONS} conn x {TCP_WINDOW})",
         rate(tcp_commits, "broker CPU-s"), "(information)", None),
    ]
    width = max(len(r[0]) for r in rows)
    measured_width = max(len(r[1]) for r in rows)
    failed = 0
    for figure, measured, target, ok in rows:
        mark = "    " if ok is None else ("ok  " if ok else "MISS")
        print(f"{mark} {figure:<{width}}  {measured:<{measured_width}}  target {target}")
        failed += ok is False
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
