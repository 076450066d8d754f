"""Partition reassignment benchmark: three brokers and ZooKeeper on this machine (`python -m
bench reassign`, or `python -m bench.reassign_bench [--only copy,throttled,latency]`).

The cluster is cluster_bench's: broker/testing/cluster.py's KafkaCluster (ZooKeeper and three
broker processes on free 127.0.0.1 ports, zookeeper.session.timeout.ms=6000) with the shipped
config/server.properties' throughput settings (socket buffers, 1 GiB preallocated segments).
The brokers get roles from the controller C: X, the lowest other broker, leads the partition
throughout; Y is C; Z is the remaining broker.

Setup: a topic of one partition with replicas [X, Y] (RF 2, no min.insync.replicas), filled
with REASSIGN_MIB (1024) MiB of 1 KiB values at acks=1 by two kbroker-loadgen processes
(bench/loadgen.c: librdkafka batches, the broker's fast path; confluent-kafka processes when
the tool cannot be built), until both copies are equal and written back (still cached: the
leader serves the copy from memory, as a leader serving recent data does). The bytes copied
are the leader's log (DescribeLogDirs), about 1.5% more than the values.

Targets (the reassignment issue):
  1 copy       [X, Y] -> [X, Z] without a throttle: AlterPartitionReassignments sent by this
               process to the controller at t0; ZooKeeper polled every 20 ms for Z in the ISR
               and for the reassignment's end (the topic znode back to [X, Z] without adding or
               removing replicas), DescribeLogDirs of Z every 100 ms for its copy's size.
               MB/s = log bytes / (Z in the ISR - t0) (MB = 10^6 bytes); target >= 300 MB/s;
  2 throttled  [X, Z] -> [X, Y] with `kafka-reassign-partitions.sh --execute --throttle
               50000000` (the tool as a subprocess: it sets the topic's leader/follower
               throttled-replicas lists and both rates on X, Y and Z, then sends
               AlterPartitionReassignments), then `--verify` once it is done, which clears the
               throttles. The copy starts when ZooKeeper first shows Y as an adding replica
               (the tool's own start-up, launch to that moment, is shown apart).
               The quota is Kafka's SimpleRate over 11 windows of 1 s (divided by at least
               one window), so about one second's worth may go at full speed at the start;
               the rate counts the bytes sent, and each 1 MiB fetch ends in a part of a
               batch the follower drops and fetches again (as from Kafka): the log grows a
               few percent under the rate. Reported and judged both: (2a) the whole copy,
               bytes / (Y in the ISR - copy start), and (2b) the rate after the first
               10 s: (bytes - bytes copied by start + 10 s) / (Y in the ISR - (start + 10 s)),
               which leaves the start out; targets 50 MB/s +- 10%. The MB the copy moved
               in each second is printed, so its evenness can be seen;
  3 latency    [X, Y] -> [X, Z] without a throttle again (Z's replica was deleted by 2, so a
               full copy), while a confluent-kafka producer (a spawned process) sends 1 KiB
               values at a steady REASSIGN_RATE (10,000) msgs/s, acks=all, librdkafka's
               defaults otherwise (linger.ms=5), to another topic: 6 partitions, RF 3,
               min.insync.replicas=2, warmed up (cluster_bench.warm_up). Latency = produce()
               to delivery report (Message.latency()). REASSIGN_BASELINE_S (4) s of it before
               the reassignment (the first second left out) give the baseline; the figure is
               p99 of the messages sent between t0 and the reassignment's end; target < 50 ms.
               Printed below the row, to find where the time goes: p99/max per 0.5 s of send
               time, p99 by the partition's leader (X's partitions reach Z through the same
               fetch session as the copy), and each broker's event loop's time runnable but
               waiting for a CPU (/proc/<pid>/task/<pid>/schedstat) before and during the copy.

Every figure comes with the CPU of each broker (b0, b1, b2) and of ZooKeeper (zk) over its
window (user+sys seconds per wall second from /proc/<pid>/stat, sampled every 50 ms:
cluster_bench.ClusterCpu), of the load: the loadgen processes for the fill, this process (its
polling of ZooKeeper and DescribeLogDirs) for 1 and 2, the producer process for 3, and "rest":
the machine's busy CPU (/proc/stat, steal included) that none of these used: kernel threads
and every other process (this machine is shared: other tests or benchmarks running at the same
time show up there, and move the figures; more than a few tenths of a core of "rest" means the
run was disturbed). The machine has 2 cores and everything runs on it: indicative.

Sizes, from the environment: REASSIGN_MIB (1024), REASSIGN_THROTTLE (50000000 B/s),
REASSIGN_RATE (10000), REASSIGN_BASELINE_S (4), REASSIGN_ONLY (a comma list of copy,
throttled, latency; --only does the same); for experiments REASSIGN_BROKER_CONFIG (key=value,...
added to every broker's properties, e.g. num.replica.fetchers=4) and REASSIGN_KEEP_LOGS (a
directory the brokers' output is copied to). Each wait is bounded (copy 120 s, throttled 150 s).
Every process started here (ZooKeeper, the brokers, the load) is stopped by its pid before the
benchmark returns, on failure and on SIGTERM too; the temporary directory is removed.
"""
from __future__ import annotations

import array
import asyncio
import bisect
import concurrent.futures
import json
import multiprocessing
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from bench import broker_bench, broker_load, c_load, cluster_bench
from bench.cluster_bench import (ClusterCpu, Load, Probe, Row, _env, _log_sizes, failed,
                                 parse_only, print_table, report, self_cpu)

ROOT = pathlib.Path(__file__).resolve().parent.parent
SESSION_MS = cluster_bench.SESSION_MS
SHIPPED = cluster_bench.SHIPPED
WORKLOADS = ("copy", "throttled", "latency")
LATENCY_PARTITIONS = 6
POLL_S = 0.02
SIZE_EVERY_S = 0.1
TIMELINE_S = 0.5

T_COPY_MBS = 300
T_THROTTLE_TOLERANCE = 0.10
T_P99_MS = 50


# -- the cluster -----------------------------------------------------------------------------

async def _create(probe: Probe, controller: int, topic: str, assignment: dict,
                  configs: dict | None = None) -> None:
    """CreateTopics with an explicit assignment {partition: [brokers]}."""
    from protocol.messages.create_topics import CreateTopicsRequest as T
    request = T(timeout_ms=60000, topics=[T.CreatableTopic(
        name=topic, num_partitions=-1, replication_factor=-1,
        assignments=[T.CreatableReplicaAssignment(partition_index=p, broker_ids=list(b))
                     for p, b in sorted(assignment.items())],
        configs=[T.CreatableTopicConfig(name=k, value=str(v))
                 for k, v in (configs or {}).items()])])
    response = await probe.conns[controller].send(request, timeout=120)
    for r in response.topics:
        if r.error_code and r.error_code != 7:
            raise RuntimeError(f"CreateTopics {topic}: error {r.error_code} {r.error_message}")


def create_assigned(cluster, topic: str, assignment: dict, timeout: float = 60) -> None:
    """Create `topic` with `assignment`, then wait until ZooKeeper shows every partition's
    ISR full and every broker's Metadata a leader for each."""
    async def run():
        async with Probe(cluster) as probe:
            await _create(probe, cluster.controller(), topic, assignment)
            deadline = time.monotonic() + timeout
            while True:
                leaders = [await probe.leaders(b, topic) for b in probe.ids]
                if all(m and len(m) == len(assignment) and min(m.values()) >= 0
                       for m in leaders):
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{topic}: no leader everywhere after {timeout} s")
                await asyncio.sleep(0.1)
    asyncio.run(run())
    cluster_bench.wait_isr_of_replicas(cluster, topic, len(assignment), timeout)


def log_size(cluster, broker_id: int, topic: str) -> int:
    return cluster_bench.log_size(cluster, broker_id, topic, 1)


async def _alter(probe: Probe, controller: int, topic: str, target: list) -> None:
    from protocol.messages.alter_partition_reassignments import \
        AlterPartitionReassignmentsRequest as R
    request = R(timeout_ms=60000, topics=[R.ReassignableTopic(
        name=topic, partitions=[R.ReassignablePartition(partition_index=0,
                                                         replicas=list(target))])])
    response = await probe.conns[controller].send(request, timeout=120)
    errors = [(p.error_code, p.error_message) for t in response.responses
              for p in t.partitions if p.error_code]
    if response.error_code or errors:
        raise RuntimeError(f"AlterPartitionReassignments {topic}-0 -> {target}: "
                           f"{response.error_code} {errors}")


class Watch:
    """What a reassignment of `topic`-0 to `target`, adding broker `new`, did and when
    (time.monotonic()): `started` (ZooKeeper first shows `new` as an adding replica), `in_isr`
    (`new` in the partition's ISR), `done` (the topic znode is `target` again, nothing adding
    or removing), and `sizes` [(t, bytes of `new`'s copy)] sampled every SIZE_EVERY_S until
    it is in the ISR. Poll with `run()` inside an asyncio loop."""

    def __init__(self, cluster, topic: str, target: list, new: int):
        self.cluster, self.topic, self.target, self.new = cluster, topic, list(target), new
        self.started = self.in_isr = self.done = self.answered = None
        self.sizes: list = []

    async def run(self, probe: Probe, zk, deadline: float, t0: float, start=None) -> "Watch":
        """`start`: a coroutine that starts the reassignment (awaited concurrently)."""
        task = None
        if start is not None:
            async def go():
                await start
                self.answered = time.monotonic()
            task = asyncio.ensure_future(go())
        state_path = f"/brokers/topics/{self.topic}/partitions/0/state"
        topic_path = f"/brokers/topics/{self.topic}"
        next_size = t0
        try:
            while True:
                now = time.monotonic()
                if now > deadline:
                    raise TimeoutError(f"reassignment of {self.topic}-0 to {self.target} not "
                                       f"done after {deadline - t0:.0f} s (started "
                                       f"{self.started}, in ISR {self.in_isr})")
                if task is not None and task.done():
                    task.result()                   # raises what the request raised
                if self.in_isr is None and now >= next_size:
                    size = await _log_sizes(probe, self.new, self.topic, 1)
                    self.sizes.append((time.monotonic(), size))
                    next_size = now + SIZE_EVERY_S
                data = zk.get(topic_path)
                if data is not None:
                    value = json.loads(data)
                    adding = value.get("adding_replicas", {}).get("0") or []
                    removing = value.get("removing_replicas", {}).get("0") or []
                    if self.started is None and self.new in adding:
                        self.started = time.monotonic()
                    if self.in_isr is None:
                        state = zk.get(state_path)
                        if state is not None and self.new in json.loads(state)["isr"]:
                            self.in_isr = time.monotonic()
                    if (self.in_isr is not None and not adding and not removing
                            and value["partitions"]["0"] == self.target):
                        self.done = time.monotonic()
                        if self.started is None:    # a poll missed it: no later than t0
                            self.started = t0
                        break
                await asyncio.sleep(POLL_S)
        finally:
            if task is not None:
                if not task.done():
                    await asyncio.wait([task], timeout=60)
                if task.done() and not task.cancelled():
                    task.result()
        return self

    def size_at(self, t: float) -> float:
        """The new copy's bytes at `t`, interpolated between samples."""
        sizes = self.sizes
        i = bisect.bisect_left(sizes, (t, -1))
        if i == 0:
            return 0.0
        if i == len(sizes):
            return float(sizes[-1][1])
        (ta, a), (tb, b) = sizes[i - 1], sizes[i]
        return a + (b - a) * (t - ta) / (tb - ta) if tb > ta else float(b)

    def per_second(self, t_from: float, t_to: float, total: int) -> list:
        """MB the copy moved in each second from `t_from`, up to `t_to` (`total` at `t_to`)."""
        out, prev, s = [], 0.0, 1
        while t_from + s - 1 < t_to:
            t = t_from + s
            now = total if t >= t_to else self.size_at(t)
            out.append(max(0.0, now - prev) / 1e6)
            prev = now
            s += 1
        return out


def reassign_in_process(cluster, topic: str, target: list, new: int, timeout: float):
    """AlterPartitionReassignments from this process; returns (watch, t0, this process's
    CPU cores over the wait)."""
    async def run():
        async with Probe(cluster) as probe:
            with cluster_bench.zookeeper(cluster) as zk:
                controller = cluster.controller()
                watch = Watch(cluster, topic, target, new)
                c0, t0 = self_cpu(), time.monotonic()
                await watch.run(probe, zk, t0 + timeout, t0,
                                start=_alter(probe, controller, topic, target))
                return watch, t0, (self_cpu() - c0) / max(watch.done - t0, 1e-9)
    return asyncio.run(run())


def tool_command(bootstrap: str, *args) -> list:
    return [sys.executable, "-m", "broker.tools.reassign_partitions",
            "--bootstrap-server", bootstrap, *args]


def _tool_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def reassign_with_tool(cluster, workdir: pathlib.Path, topic: str, target: list, new: int,
                       throttle: int, timeout: float) -> dict:
    """kafka-reassign-partitions.sh --execute --throttle as a subprocess, watched from its
    launch; then --verify (clears the throttles)."""
    plan = workdir / f"plan-{topic}-{'-'.join(map(str, target))}.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": list(target)}]}))
    bootstrap = cluster.bootstrap_servers

    async def run():
        async with Probe(cluster) as probe:
            with cluster_bench.zookeeper(cluster) as zk:
                watch = Watch(cluster, topic, target, new)
                c0, t0 = self_cpu(), time.monotonic()
                proc = subprocess.Popen(
                    tool_command(bootstrap, "--execute", "--reassignment-json-file", str(plan),
                                 "--throttle", str(throttle)),
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                    env=_tool_env(), cwd=ROOT)
                try:
                    await watch.run(probe, zk, t0 + timeout, t0)
                finally:
                    try:
                        out, _ = proc.communicate(timeout=60)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        out, _ = proc.communicate()
                if proc.returncode != 0:
                    raise RuntimeError(f"--execute exited {proc.returncode}: {out[-300:]}")
                return watch, t0, (self_cpu() - c0) / max(watch.done - t0, 1e-9), out
    watch, t0, bench_cores, out = asyncio.run(run())
    t_verify = time.monotonic()
    verify = subprocess.run(tool_command(bootstrap, "--verify", "--reassignment-json-file",
                                         str(plan)),
                            capture_output=True, text=True, env=_tool_env(), cwd=ROOT,
                            timeout=120)
    verify_s = time.monotonic() - t_verify
    text = verify.stdout + verify.stderr
    if verify.returncode != 0 or "is completed" not in text or "Clearing" not in text:
        raise RuntimeError(f"--verify did not complete and clear the throttles "
                           f"(exit {verify.returncode}): {text[-400:]}")
    return {"watch": watch, "t0": t0, "bench": bench_cores, "execute_out": out,
            "verify_s": verify_s, "verify_out": text}


# -- the latency producer (a pool worker) ----------------------------------------------------

def steady_latency(bootstrap: str, topic: str, rate: int, size: int, start_at: float,
                   stop_path: str, max_s: float) -> dict:
    """1 KiB values at `rate`/s, acks=all (librdkafka's defaults otherwise), from `start_at`
    until `stop_path` exists (or `max_s`), then flush. Returns every delivered message's send
    time (time.monotonic(), system-wide) and latency (s), and the process's CPU."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "queue.buffering.max.messages": 500_000, "log_level": 3,
                         "client.id": "reassign-bench-latency"})
    values = broker_load.payloads(size, count=64)
    sent_at, latency, partition = array.array("d"), array.array("d"), array.array("h")
    errors: list = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(str(err))
            return
        lat = msg.latency()
        sent_at.append(time.monotonic() - lat)
        latency.append(lat)
        partition.append(msg.partition())

    for i in range(LATENCY_PARTITIONS * 50):        # connections and metadata before the clock
        producer.produce(topic, values[i & 63], on_delivery=None)
    producer.flush(30)
    broker_load._sleep_until(start_at)
    cpu0, t0 = broker_load._cpu(), time.monotonic()
    sent = broker_load.send_paced(
        producer, rate, lambda i: producer.produce(topic, values[i & 63], on_delivery=on_delivery),
        lambda elapsed, _: os.path.exists(stop_path) or elapsed > max_s)
    t_stop = time.monotonic()
    left = producer.flush(60)
    return {"sent_at": sent_at.tobytes(), "latency": latency.tobytes(),
            "partition": partition.tobytes(), "sent": sent,
            "left": left, "failed": len(errors), "errors": errors[:3], "t0": t0,
            "t1": t_stop, "cpu": broker_load._cpu() - cpu0}


def _clock(t_monotonic: float) -> str:
    """The wall-clock time (as the brokers' logs print it) of a time.monotonic() value."""
    wall = time.time() - (time.monotonic() - t_monotonic)
    return time.strftime("%H:%M:%S", time.localtime(wall)) + f".{int(wall % 1 * 1000):03d}"


def timeline(sent_at, latency, t0: float, t_from: float, t_to: float) -> str:
    """p99/max (ms) of the messages sent in each TIMELINE_S bucket of [t_from, t_to], each
    labelled with its start in seconds from t0."""
    buckets: dict = {}
    for s, lat in zip(sent_at, latency):
        if t_from <= s <= t_to:
            buckets.setdefault(int((s - t_from) / TIMELINE_S), []).append(lat)
    out = []
    for i in range(int((t_to - t_from) / TIMELINE_S) + 1):
        v = sorted(buckets.get(i, []))
        out.append(f"{t_from + i * TIMELINE_S - t0:+.1f}:"
                   + (f"{broker_bench._pct(v, 0.99) * 1000:.0f}/{v[-1] * 1000:.0f}" if v else "-"))
    return " ".join(out)


def machine_busy() -> float:
    """CPU seconds all cores spent busy (user, nice, system, irq, softirq, steal) since boot."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields[:3]) + sum(fields[5:8])) / cluster_bench.CLK_TCK


class MachineCpu(ClusterCpu):
    """ClusterCpu plus the whole machine's busy CPU (/proc/stat), so that `window()` can show
    what every other process used ("rest": other tests or benchmarks on this shared machine
    move the figures)."""

    def sample(self) -> None:
        super().sample()
        now, busy = time.monotonic(), machine_busy()
        waits = {}
        for name, pid in self._targets().items():
            if name.startswith("b"):
                try:
                    with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
                        waits[(f"wait:{name}", pid)] = int(f.read().split()[1]) / 1e9
                except (OSError, IndexError, ValueError):
                    pass
        with self._lock:
            self.series.setdefault(("machine", 0), []).append((now, busy))
            for key, value in waits.items():
                self.series.setdefault(key, []).append((now, value))

    def window(self, t0: float, t1: float, *known: float) -> dict:
        """cores() of the brokers and ZooKeeper, and "rest": the machine's busy cores minus
        theirs and minus `known` (the load's cores over the same window)."""
        cores = {k: v for k, v in self.cores(t0, t1).items() if not k.startswith("wait:")}
        machine = cores.pop("machine", 0.0)
        cores["rest"] = max(0.0, machine - sum(cores.values()) - sum(known))
        return cores

    def loop_waits(self, t0: float, t1: float) -> dict:
        """{broker: ms per second its main thread (the event loop) spent runnable, waiting
        for a CPU} over [t0, t1] (/proc/<pid>/task/<pid>/schedstat)."""
        return {k[5:]: v * 1000 for k, v in self.cores(t0, t1).items()
                if k.startswith("wait:")}


def _pcts(values: list) -> dict:
    v = sorted(values)
    return {"n": len(v), "p50": broker_bench._pct(v, 0.5) * 1000 if v else float("nan"),
            "p99": broker_bench._pct(v, 0.99) * 1000 if v else float("nan"),
            "p999": broker_bench._pct(v, 0.999) * 1000 if v else float("nan"),
            "max": v[-1] * 1000 if v else float("nan")}


def _pct_text(p: dict) -> str:
    return (f"p50 {p['p50']:.1f} p99 {p['p99']:.1f} p99.9 {p['p999']:.1f} max {p['max']:.1f} ms"
            f" ({p['n']})")


# -- the benchmark ---------------------------------------------------------------------------

def roles(cluster) -> dict:
    controller = cluster.controller()
    others = sorted(b for b in cluster.brokers if b != controller)
    return {"X": others[0], "Y": controller, "Z": others[1]}


def fill(cluster, cpu, load: Load, topic: str, mib: int, x: int, y: int) -> dict:
    messages = mib * 1024 * 1024 // 1024
    broker_bench._settle_page_cache()
    r = load.produce(cluster.bootstrap_servers, topic, 1024, 1,
                     messages // cluster_bench.PRODUCERS, timeout=300)
    if r["lost"]:
        raise RuntimeError(f"fill: {r['lost']} not delivered ({r['error']})")
    sizes = {}

    def converged():
        sizes.update({b: log_size(cluster, b, topic) for b in (x, y)})
        return len(set(sizes.values())) == 1
    cluster.wait_until(converged, 120, f"the replicas of {topic} do not converge")
    os.sync()                              # written back, still cached
    span = r["t1"] - r["t0"]
    return {"values": r["messages"] * 1024, "log": sizes[x], "span": span,
            "cpu": cpu.window(r["t0"], r["t1"], r["cpu"] / span), "load": r["cpu"] / span}


def run(cluster, cpu, load, pool, workdir, opts, rows) -> None:
    role = roles(cluster)
    x, y, z = role["X"], role["Y"], role["Z"]
    print(f"  roles: X (leader) broker {x}, Y (controller) broker {y}, Z broker {z}",
          flush=True)
    topic = cluster_bench.topic_name("reassign")
    try:
        create_assigned(cluster, topic, {0: [x, y]})
        f = fill(cluster, cpu, load, topic, opts.mib, x, y)
    except Exception as exc:
        failed(rows, "-", f"fill {opts.mib} MiB", "", exc)
        return
    total = f["log"]
    report(rows, Row("-", f"fill {opts.mib} MiB, 1 partition RF 2", (
        f"{f['values'] / f['span'] / 1e6:6.1f} MB/s of values at acks=1 ({f['values'] / 2**20:.0f}"
        f" MiB of values, {total / 2**20:.0f} MiB = {total / 1e6:.0f} MB of log per replica)"),
        "(information)", None, f["cpu"], f["load"], "loadgen",
        short=f"{f['values'] / f['span'] / 1e6:.0f} MB/s, log {total / 1e6:.0f} MB"))
    placement = [x, y]                       # where the partition is now

    if "copy" in opts.only:
        name = f"1 copy {total / 2**20:.0f} MiB to a new replica"
        target = f">= {T_COPY_MBS} MB/s"
        try:
            w, t0, bench_cores = reassign_in_process(cluster, topic, [x, z], z, 120)
            placement = [x, z]
            mbs = total / (w.in_isr - t0) / 1e6
            first = next((t for t, s in w.sizes if s > 0), None)
            text = (f"{mbs:6.1f} MB/s: broker {z} in the ISR {w.in_isr - t0:.2f} s after "
                    f"AlterPartitionReassignments (answered {w.answered - t0:.2f} s, first "
                    f"bytes on {z} by {first - t0 if first else float('nan'):.2f} s, "
                    f"reassignment done {w.done - t0:.2f} s; {total / 1e6:.0f} MB of log)")
            report(rows, Row("1", name, text, target, mbs >= T_COPY_MBS,
                             cpu.window(t0, w.in_isr, bench_cores), bench_cores, "bench",
                             short=f"{mbs:.1f} MB/s (ISR {w.in_isr - t0:.2f} s)"))
        except Exception as exc:
            failed(rows, "1", name, target, exc)

    if "throttled" in opts.only:
        rate_mbs = opts.throttle / 1e6
        lo, hi = rate_mbs * (1 - T_THROTTLE_TOLERANCE), rate_mbs * (1 + T_THROTTLE_TOLERANCE)
        target = f"{lo:.0f}-{hi:.0f} MB/s"
        new = y if z in placement else z
        dest = [x, new]
        try:
            r = reassign_with_tool(cluster, workdir, topic, dest, new, opts.throttle, 150)
            placement = dest
            w, t0 = r["watch"], r["t0"]
            start = w.started
            span = w.in_isr - start
            whole = total / span / 1e6
            t10 = start + 10
            at10 = w.size_at(t10)
            after = (total - at10) / (w.in_isr - t10) / 1e6 if w.in_isr > t10 + 0.5 else None
            profile = " ".join(f"{v:.0f}" for v in w.per_second(start, w.in_isr, total))
            window = cpu.window(start, w.in_isr, r["bench"])
            text = (f"{whole:6.1f} MB/s over the whole copy: broker {new} in the ISR "
                    f"{span:.2f} s after the copy started ({start - t0:.2f} s after --execute "
                    f"was launched; reassignment done {w.done - start:.2f} s; --verify "
                    f"cleared the throttles in {r['verify_s']:.2f} s). MB per second: "
                    f"{profile}")
            report(rows, Row("2a", f"2 throttled copy --throttle {opts.throttle}: whole", text,
                             target, lo <= whole <= hi, window, r["bench"], "bench",
                             short=f"{whole:.1f} MB/s ({span:.1f} s)"))
            if after is None:
                report(rows, Row("2b", "throttled copy: after the first 10 s",
                                 f"copy over {span:.1f} s after its start: no rate after 10 s",
                                 target, False, window))
            else:
                text = (f"{after:6.1f} MB/s from start + 10 s to the ISR ({at10 / 1e6:.0f} MB "
                        f"copied in the first 10 s, {(total - at10) / 1e6:.0f} MB "
                        f"in the {w.in_isr - t10:.1f} s after)")
                report(rows, Row("2b", "throttled copy: after the first 10 s", text, target,
                                 lo <= after <= hi, cpu.window(t10, w.in_isr, r["bench"]),
                                 short=f"{after:.1f} MB/s (first 10 s: {at10 / 1e6:.0f} MB)"))
        except Exception as exc:
            failed(rows, "2", "throttled copy", target, exc)

    if "latency" in opts.only:
        name = f"3 produce p99, {opts.rate // 1000}k msg/s acks=all, during copy"
        target = f"p99 < {T_P99_MS} ms"
        new = y if z in placement else z
        dest = [x, new]
        try:
            lat_topic = cluster_bench.topic_name("latency")
            cluster_bench.create_topic(cluster, lat_topic, LATENCY_PARTITIONS, 3,
                                       {"min.insync.replicas": "2"})
            warm = cluster_bench.warm_up(cluster.bootstrap_servers, lat_topic,
                                         LATENCY_PARTITIONS)
            stop_path = workdir / f"stop-latency-{time.monotonic_ns()}"
            start_at = time.monotonic() + 4
            future = pool.submit(steady_latency, cluster.bootstrap_servers, lat_topic,
                                 opts.rate, 1024, start_at, str(stop_path), 180)
            try:
                broker_load._sleep_until(start_at + opts.baseline_s)
                w, t0, bench_cores = reassign_in_process(cluster, topic, dest, new, 120)
                placement = dest
                time.sleep(2)
            finally:
                stop_path.touch()
                p = future.result(timeout=300)
            sent_at = array.array("d")
            sent_at.frombytes(p["sent_at"])
            latency = array.array("d")
            latency.frombytes(p["latency"])
            partition = array.array("h")
            partition.frombytes(p["partition"])
            leaders = {q: s["leader"] for q, s in cluster_bench.partition_states(
                cluster, lat_topic, range(LATENCY_PARTITIONS)).items()}
            by_leader: dict = {}
            for s, lat, q in zip(sent_at, latency, partition):
                if t0 <= s <= w.done:
                    by_leader.setdefault(leaders.get(q, -1), []).append(lat)
            before_w = cpu.loop_waits(p["t0"] + 1, t0)
            leader_text = ", ".join(f"led by b{b} {_pcts(v)['p99']:.0f}"
                                    for b, v in sorted(by_leader.items()))
            base = [lat for s, lat in zip(sent_at, latency) if p["t0"] + 1 <= s < t0]
            during = [lat for s, lat in zip(sent_at, latency) if t0 <= s <= w.done]
            after = [lat for s, lat in zip(sent_at, latency) if s > w.done]
            pb, pd, pa = _pcts(base), _pcts(during), _pcts(after)
            copy_mbs = total / (w.in_isr - t0) / 1e6
            problems = ""
            if p["failed"] or p["left"]:
                problems = (f"; {p['failed']} FAILED, {p['left']} unflushed"
                            + (f": {p['errors'][0]}" if p["errors"] else ""))
            text = (f"during the copy {_pct_text(pd)}; before it {_pct_text(pb)}; after it "
                    f"{_pct_text(pa)}; copy {copy_mbs:.0f} MB/s, {new} in the ISR "
                    f"{w.in_isr - t0:.2f} s, done {w.done - t0:.2f} s; {p['sent']} sent "
                    f"({p['sent'] / (p['t1'] - p['t0']):.0f}/s){problems}; first record on "
                    f"each new partition acknowledged after {warm:.2f} s")
            met = pd["p99"] < T_P99_MS and not p["failed"] and not p["left"]
            producer = p["cpu"] / (p["t1"] - p["t0"])
            report(rows, Row("3", name, text, target, met,
                             cpu.window(t0, w.done, producer, bench_cores), producer, "producer",
                             short=f"p99 {pd['p99']:.1f} ms (before {pb['p99']:.1f})"))
            print(f"      latency by send time, p99/max ms per {TIMELINE_S} s from t0 - 2 s "
                  f"(t0 = AlterPartitionReassignments at {_clock(t0)}, monotonic {t0:.3f}; "
                  f"{new} in the ISR at +{w.in_isr - t0:.2f} s, done +{w.done - t0:.2f} s):"
                  "\n        "
                  + timeline(sent_at, latency, t0, t0 - 2, w.done + 2)
                  + f"\n      p99 during the copy by the partition's leader: {leader_text} ms; "
                  + "event loops waiting for a CPU (ms/s) before / during the copy: "
                  + ", ".join(f"{b} {before_w.get(b, 0):.0f} / {v:.0f}" for b, v in
                              cpu.loop_waits(t0, w.done).items()),
                  flush=True)
            broker_bench.delete_topic(cluster.bootstrap_servers, lat_topic)
        except Exception as exc:
            failed(rows, "3", name, target, exc)


def print_summary(rows, started) -> bool:
    return print_table(
        rows, started,
        "\nReassignment benchmark: 3 brokers + ZooKeeper on 127.0.0.1 (2-core shared "
        "machine; indicative)",
        "cpu in cores (user+sys s per wall s): b0/b1/b2 brokers, zk ZooKeeper, rest = every "
        "other process on the machine, loadgen = fill load, bench = this process polling, "
        "producer = the latency producer",
        name_w=44, result_w=34, target_w=16, number_w=3)


def parse_args(argv):
    opts = parse_only(argv, "python -m bench.reassign_bench", "REASSIGN_ONLY", WORKLOADS)
    opts.mib = _env("REASSIGN_MIB", 1024)
    opts.throttle = _env("REASSIGN_THROTTLE", 50_000_000)
    opts.rate = _env("REASSIGN_RATE", 10_000)
    opts.baseline_s = float(os.environ.get("REASSIGN_BASELINE_S", 4))
    opts.broker_config = dict(item.split("=", 1) for item in
                              os.environ.get("REASSIGN_BROKER_CONFIG", "").split(",") if item)
    return opts


def main(argv=None) -> int:
    """`argv` None = the defaults and the environment (bench/__main__.py calls main())."""
    from broker.testing.cluster import KafkaCluster
    opts = parse_args(argv or [])
    started = time.monotonic()
    old_term = None
    if threading.current_thread() is threading.main_thread():
        old_term = signal.signal(signal.SIGTERM, cluster_bench._interrupt)
    tool, how = c_load.find()
    print(f"load generator: {how if tool else 'confluent-kafka processes (' + how + ')'}",
          flush=True)
    rows: list = []
    try:
        with tempfile.TemporaryDirectory(prefix="reassign-bench-") as tmp, \
                cluster_bench.bytecode(pathlib.Path(tmp) / "pycache"), \
                concurrent.futures.ProcessPoolExecutor(
                    max_workers=2, mp_context=multiprocessing.get_context("spawn")) as pool:
            workdir = pathlib.Path(tmp)
            list(pool.map(time.sleep, [0] * 2))                 # spawn the workers up front
            load = Load(tool, workdir, pool)
            cluster = KafkaCluster(3, workdir / "cluster", session_timeout_ms=SESSION_MS,
                                   config={**SHIPPED, **opts.broker_config})
            if opts.broker_config:
                print(f"  broker configs added (REASSIGN_BROKER_CONFIG): {opts.broker_config}",
                      flush=True)
            try:
                t0 = time.monotonic()
                cluster.start_all()
                print(f"  cluster of 3 brokers started in {time.monotonic() - t0:.1f} s "
                      f"(controller {cluster.controller()})", flush=True)
                with MachineCpu(cluster) as cpu:
                    run(cluster, cpu, load, pool, workdir, opts, rows)
            finally:
                for broker_id in cluster.brokers:               # data thrown away: SIGKILL
                    cluster.kill(broker_id)
                cluster.close()                                 # ZooKeeper: SIGTERM, by pid
                keep = os.environ.get("REASSIGN_KEEP_LOGS")
                if keep:                                        # the brokers' output, kept
                    os.makedirs(keep, exist_ok=True)
                    for node in cluster.brokers.values():
                        shutil.copy(node.out_path, keep)
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
    ok = print_summary(rows, started)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
