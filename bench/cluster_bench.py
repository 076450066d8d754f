"""Cluster benchmark: three brokers and ZooKeeper on this machine (`python -m bench cluster`, or
`python -m bench.cluster_bench [--only produce,latency,...]`).

The cluster is broker/testing/cluster.py's KafkaCluster: ZooKeeper and three broker processes on
free 127.0.0.1 ports, zookeeper.session.timeout.ms=6000, and the shipped
config/server.properties' throughput settings (socket buffers, 1 GiB preallocated segments), so
that its brokers write as the single broker of bench/broker_bench.py does. Load comes from the
same generators as broker_bench: kbroker-loadgen (bench/loadgen.c, via bench/c_load.py) for
produce, bench/broker_load.py's latency producer and consumer, and a paced idempotent
confluent-kafka producer for the failover gaps. Every new RF 3 topic gets one acknowledged
record per partition before it is measured (`warm_up`): a partition's first append writes its
leader-epoch checkpoint with an fsync on every replica, a one-off stall reported beside the
latency figure rather than mixed into it.

Replication (issue 17):
  produce    1 KiB values, 6 partitions, RF 3 with min.insync.replicas=2, acks=all and acks=1,
             2 loadgen processes: MB/s of values, first message to last acknowledgement. The
             single-broker acks=1 figure is measured in the same run with the same load
             (broker_bench.bench_produce_c on a broker_bench.KBroker) before the cluster starts;
             target: acks=all >= 0.35x of it;
  latency    1 KiB at 10,000 msgs/s to an RF 3 topic (min.insync.replicas=2; producer defaults:
             acks=all, linger.ms=5; consumer default fetch.wait.max.ms), receive - send:
             p50/p99/p99.9, target p99 < 15 ms;
  failover   an idempotent acks=all producer at 2,000 msgs/s (keys spread over 3 partitions,
             RF 3, min.insync.replicas=2) while the leader of the first partition not led by the
             controller gets kill -9 (target: longest gap between acknowledgements < 9 s), then,
             once it is back in the ISR, the same with SIGTERM (target < 1 s). The gap is taken
             per partition over the partitions the victim led (the figure), and over all;
  catchup    a follower catching up: SIGTERM one broker (not the controller), produce 1 GiB of
             1 KiB values with acks=1 to a 6-partition RF 3 topic, wait until the two live
             copies are equal, start it again and time from its process start until it is in
             the ISR of every partition (ZooKeeper); also when its copy (DescribeLogDirs) has
             reached a leader's size. MB/s = 1 GiB of values / time to the ISR, target >= 300.
Cluster (issue 16):
  create     a 1,000-partition topic with RF 3 (and, for information, RF 1): from CreateTopics
             sent to the controller until every broker's Metadata shows every partition with a
             leader; target < 10 s;
  controller kill -9 of the controller while the cluster holds the 1,000-partition RF 3 topic:
             time until (a) ZooKeeper names a new controller, (b) every partition the dead
             broker led has a new leader in ZooKeeper, (c) both surviving brokers' Metadata show
             those leaders (they learn them only from the new controller's LeaderAndIsr and
             UpdateMetadata). The figure is (c); target: session timeout + 2 s = 8 s;
  metadata   topics of 1,000 partitions (RF 3) added until the cluster holds 10,000 partitions;
             then a Metadata v12 request for all topics, sent again and again to each broker
             over a raw socket (frame written to whole response read, so the client's decoding
             is not counted), p50/p99, target p99 < 20 ms; and each broker's VmRSS, target
             < 200 MiB. The idle cluster's CPU is shown first.

Processes started by the benchmark keep .pyc files in its temporary directory (see `bytecode`).

Every figure comes with the CPU of each broker (b0, b1, b2), of ZooKeeper (zk) and of the load
(the load generator processes, or this process where it is the client): user+sys seconds per
wall second from /proc/<pid>/stat (a broker restarted within the window adds its new process),
so the bottleneck is visible. The machine has 2 cores and everything runs on it: indicative.

Sizes, from the environment (defaults are the targets' sizes): CLUSTER_PRODUCE_SECONDS (3),
CLUSTER_LATENCY_SECONDS (8), CLUSTER_LATENCY_RATE (10000), CLUSTER_GAP_RATE (2000),
CLUSTER_CATCHUP_MIB (1024), CLUSTER_CATCHUP_PARTITIONS (6), CLUSTER_CREATE_PARTITIONS (1000),
CLUSTER_CREATE_RF1 (1: also time an RF 1 topic), CLUSTER_PARTITIONS (10000),
CLUSTER_PARTITIONS_RF (3), CLUSTER_METADATA_REQUESTS (300, spread over the brokers),
CLUSTER_GROW_SECONDS (480: growing to CLUSTER_PARTITIONS stops there and measures what it has),
CLUSTER_ONLY (a comma list of the workloads above; --only does the same). Growing to 10,000
partitions takes most of the run: the controller creates partitions one ZooKeeper write after
another.

Every process started here (the single broker, ZooKeeper, the brokers, the load processes) is
stopped by its pid before the benchmark returns, on failure and on SIGTERM too. The brokers are
stopped with SIGKILL: their data is thrown away, and a controlled shutdown of 10,000
leaderships would only add minutes.
"""
from __future__ import annotations

import argparse
import asyncio
import bisect
import concurrent.futures
import contextlib
import json
import multiprocessing
import os
import pathlib
import resource
import signal
import socket
import struct
import sys
import tempfile
import threading
import time

from bench import broker_bench, broker_load, c_load

CLK_TCK = os.sysconf("SC_CLK_TCK")
SESSION_MS = 6000
PRODUCE_PARTITIONS = 6
GAP_PARTITIONS = 3
GAP_KEYS = 64
PRODUCERS = broker_bench.PRODUCERS
WORKLOADS = ("produce", "latency", "failover", "catchup", "create", "controller", "metadata")
# The shipped config/server.properties' settings that change how fast a broker writes and
# serves (the single broker of the baseline runs with that file).
SHIPPED = {"socket.send.buffer.bytes": -1, "socket.receive.buffer.bytes": -1,
           "socket.request.max.bytes": 104857600, "log.segment.bytes": 1073741824,
           "log.preallocate": "true"}
REPLICATED = {"min.insync.replicas": "2"}

# Targets: issue 17 (replication) and issue 16 (cluster).
T17_ACKS_ALL_RATIO = 0.35
T17_P99_MS = 15
T17_KILL_GAP_S = 9
T17_TERM_GAP_S = 1
T17_CATCHUP_MBS = 300
T16_FAILOVER_S = SESSION_MS / 1000 + 2
T16_CREATE_S = 10
T16_METADATA_P99_MS = 20
T16_RSS_MIB = 200


def _env(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


# -- CPU -------------------------------------------------------------------------------------

def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of `pid` (/proc/<pid>/stat), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class ClusterCpu:
    """The CPU seconds of every broker (b0, b1, ...) and of ZooKeeper (zk), sampled by a thread
    every 50 ms, so the cores each used over any span known afterwards can be read back
    (`cores(t0, t1)`). A broker killed within the span counts up to its last sample; one
    (re)started within it counts from zero, as a new pid."""

    def __init__(self, cluster, interval: float = 0.05):
        self.cluster = cluster
        self.interval = interval
        self.series: dict[tuple, list] = {}            # (name, pid) -> [(t, cpu seconds)]
        self.born: set = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _targets(self) -> dict:
        out = {f"b{i}": node.proc.pid for i, node in self.cluster.brokers.items()
               if node.proc is not None}
        if self.cluster.zookeeper.pid is not None:
            out["zk"] = self.cluster.zookeeper.pid
        return out

    def sample(self) -> None:
        now = time.monotonic()
        for name, pid in self._targets().items():
            try:
                cpu = proc_cpu_seconds(pid)
            except (OSError, IndexError, ValueError):
                continue
            with self._lock:
                series = self.series.setdefault((name, pid), [])
                if not series and self._thread.is_alive():
                    self.born.add((name, pid))
                series.append((now, cpu))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> "ClusterCpu":
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _at(self, key, t: float) -> float:
        """CPU seconds of `key` at time `t`, interpolated between the samples around it."""
        series = self.series[key]
        i = bisect.bisect_left(series, (t, -1.0))
        if i == 0:
            return 0.0 if key in self.born else series[0][1]
        if i == len(series):
            return series[-1][1]
        (ta, ca), (tb, cb) = series[i - 1], series[i]
        return ca + (cb - ca) * (t - ta) / (tb - ta) if tb > ta else cb

    def cores(self, t0: float, t1: float) -> dict:
        """{name: CPU seconds / wall second over [t0, t1]}."""
        self.sample()
        out = {}
        with self._lock:
            for key in self.series:
                out[key[0]] = out.get(key[0], 0.0) + self._at(key, t1) - self._at(key, t0)
        span = max(t1 - t0, 1e-9)
        return {name: value / span for name, value in sorted(out.items())}


# -- results ---------------------------------------------------------------------------------

class Row:
    """One reported figure: what, the result, the target and whether it was met (None: for
    information), and the CPU of each process over its window."""

    def __init__(self, number: str, name: str, text: str, target: str = "",
                 met: bool | None = None, cpu: dict | None = None, load: float | None = None,
                 load_what: str = "load", short: str | None = None):
        self.number, self.name, self.text, self.target, self.met = number, name, text, target, met
        self.cpu, self.load, self.load_what = cpu or {}, load, load_what
        self.short = short if short is not None else text.split(";")[0].split("(")[0].strip()

    def cpu_text(self) -> str:
        parts = [f"{k} {v:.2f}" for k, v in self.cpu.items()]
        if self.load is not None:
            parts.append(f"{self.load_what} {self.load:.2f}")
        return "cpu " + " ".join(parts) if parts else ""

    def verdict(self) -> str:
        return "" if self.met is None else ("PASS" if self.met else "MISS")


def report(rows: list, row: Row) -> Row:
    rows.append(row)
    mark = f"  {row.verdict()}" if row.met is not None else ""
    target = f"  [target {row.target}{mark}]" if row.target else ""
    print(f"  {row.number:3s} {row.name:40s} {row.text}{target}\n      {row.cpu_text()}",
          flush=True)
    return row


def failed(rows: list, number: str, name: str, target: str, exc: BaseException) -> None:
    report(rows, Row(number, name, f"FAILED: {exc!r}"[:300], target, False))


# -- the cluster -----------------------------------------------------------------------------

class Probe:
    """A connection (the project's BrokerConnection) to each broker, for CreateTopics and
    Metadata; use within one asyncio.run."""

    def __init__(self, cluster, broker_ids=None):
        self.cluster = cluster
        self.ids = sorted(broker_ids if broker_ids is not None else cluster.brokers)
        self.conns = {}

    async def __aenter__(self) -> "Probe":
        from broker.client.connection import BrokerConnection
        for i in self.ids:
            conn = BrokerConnection("127.0.0.1", self.cluster.brokers[i].port,
                                    client_id="cluster-bench", request_timeout_ms=60000)
            self.conns[i] = await conn.connect()
        return self

    async def __aexit__(self, *exc) -> None:
        for conn in self.conns.values():
            await conn.close()

    async def leaders(self, broker_id: int, topic: str) -> dict | None:
        """{partition: leader} of `topic` in broker `broker_id`'s Metadata, None if unknown."""
        from protocol.messages.metadata import MetadataRequest
        request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                  allow_auto_topic_creation=False)
        response = await self.conns[broker_id].send(request)
        for t in response.topics:
            if t.name == topic and t.error_code == 0:
                return {p.partition_index: p.leader_id for p in t.partitions}
        return None

    async def create(self, controller: int, topic: str, partitions: int, rf: int,
                     configs: dict | None = None) -> None:
        from protocol.messages.create_topics import CreateTopicsRequest as T
        request = T(timeout_ms=60000, topics=[T.CreatableTopic(
            name=topic, num_partitions=partitions, replication_factor=rf, assignments=[],
            configs=[T.CreatableTopicConfig(name=k, value=str(v))
                     for k, v in (configs or {}).items()])])
        response = await self.conns[controller].send(request, timeout=120)
        for r in response.topics:
            # REQUEST_TIMED_OUT: accepted, still being created (the caller waits for it)
            if r.error_code and r.error_code != 7:
                raise RuntimeError(f"CreateTopics {topic}: error {r.error_code} "
                                   f"{r.error_message}")


async def _create_and_wait(cluster, topic, partitions, rf, configs, timeout) -> dict:
    async with Probe(cluster) as probe:
        controller = cluster.controller()
        t0 = time.monotonic()
        await probe.create(controller, topic, partitions, rf, configs)
        answered = time.monotonic() - t0
        seen = {}
        deadline = t0 + timeout
        while len(seen) < len(probe.ids):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: brokers {sorted(set(probe.ids) - set(seen))} "
                                   f"do not show a leader for every partition after {timeout} s")
            for b in probe.ids:
                if b in seen:
                    continue
                leaders = await probe.leaders(b, topic)
                if leaders and len(leaders) == partitions and min(leaders.values()) >= 0:
                    seen[b] = time.monotonic() - t0
            if len(seen) < len(probe.ids):
                await asyncio.sleep(0.1)
    return {"answered": answered, "seen": seen, "all": max(seen.values()), "t0": t0}


def create_topic(cluster, topic: str, partitions: int, rf: int, configs: dict | None = None,
                 timeout: float = 180) -> dict:
    """CreateTopics to the controller, then wait until every broker's Metadata shows a leader
    for every partition. Returns the times (s after sending): {"answered", "seen": {broker:
    s}, "all", "t0"}."""
    return asyncio.run(_create_and_wait(cluster, topic, partitions, rf, configs, timeout))


def zookeeper(cluster):
    """A blocking ZooKeeper reader (broker/zookeeper.py's), one session for many reads: a
    poll that opened a session each time would load ZooKeeper with session writes."""
    from broker.zookeeper import ZkReader
    return ZkReader(cluster.zookeeper.connect_string)


def partition_states(cluster, topic: str, partitions, zk=None) -> dict:
    """{partition: {"leader", "isr", ...}} from ZooKeeper (`zk`, or a session of its own)."""
    if zk is None:
        with zookeeper(cluster) as zk:
            return partition_states(cluster, topic, partitions, zk)
    out = {}
    for p in partitions:
        data = zk.get(f"/brokers/topics/{topic}/partitions/{p}/state")
        if data is not None:
            out[p] = json.loads(data)
    return out


def wait_isr_of_replicas(cluster, topic: str, partitions: int, timeout: float = 120) -> None:
    """Wait until every partition's ISR holds all its replicas."""
    with zookeeper(cluster) as zk:
        def full():
            data = zk.get(f"/brokers/topics/{topic}")
            if data is None:
                return False
            assignment = json.loads(data)["partitions"]
            states = partition_states(cluster, topic, range(partitions), zk)
            return len(states) == partitions and all(
                set(states[p]["isr"]) == set(assignment[str(p)]) for p in states)
        cluster.wait_until(full, timeout, f"ISR of {topic} not full")


def wait_out_of_isr(cluster, topic: str, partitions: int, broker_id: int,
                    timeout: float = 60) -> None:
    with zookeeper(cluster) as zk:
        cluster.wait_until(lambda: all(
            broker_id not in s["isr"]
            for s in partition_states(cluster, topic, range(partitions), zk).values()),
            timeout, f"broker {broker_id} still in an ISR of {topic}")


def ensure_running(cluster) -> None:
    """Bring back any broker a failed step left stopped, so the next step has all three."""
    for broker_id, node in cluster.brokers.items():
        if node.paused:
            cluster.resume(broker_id)
        if not node.running():
            print(f"  (starting broker {broker_id} again)", flush=True)
            cluster.start(broker_id)


def topic_name(prefix: str) -> str:
    return f"{prefix}-{int(time.time() * 1000) % 10**8}"


def warm_up(bootstrap: str, topic: str, partitions: int) -> float:
    """One acks=all record to each partition, acknowledged; returns how long that took. A new
    partition's first append writes the leader-epoch checkpoint (an fsync, on the leader and
    on each follower, on their event loops), which stalls acks=all for a while: warmed up,
    the figures measure the steady state, and this time is reported beside them."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                         "log_level": 3})
    t0 = time.monotonic()
    for p in range(partitions):     # a zero send time: broker_load's latency consumer skips it
        producer.produce(topic, struct.pack(">q", 0) + b"warm-up", partition=p)
    if producer.flush(60):
        raise RuntimeError(f"warm-up of {topic} not acknowledged within 60 s")
    return time.monotonic() - t0


# -- load ------------------------------------------------------------------------------------

class Load:
    """The produce load: kbroker-loadgen processes when the tool is available, else
    confluent-kafka processes (broker_load.produce) in the pool, as broker_bench falls back."""

    def __init__(self, tool, workdir, pool):
        self.tool, self.workdir, self.pool = tool, workdir, pool

    def produce(self, bootstrap, topic, size, acks, per_process, timeout) -> dict:
        """PRODUCERS processes of `per_process` messages; returns {"messages", "lost",
        "t0", "t1" (first message, last acknowledgement), "cpu" (their CPU seconds),
        "error"}."""
        if self.tool:
            payloads = c_load.payload_file(self.workdir, size)
            args = c_load.producer_args(bootstrap, topic, size, acks, "none", per_process,
                                        payloads)
            cpu0 = c_load.children_cpu()
            runs = [c_load.Run(self.tool, args, timeout=timeout) for _ in range(PRODUCERS)]
            got = [run.wait() for run in runs]
            cpu = c_load.children_cpu() - cpu0
            if None in got:
                raise RuntimeError("load failed: " + runs[got.index(None)].error())
            return {"messages": sum(x["delivered"] for x in got),
                    "lost": sum(x["failed"] + x["queued"] for x in got),
                    "t0": min(x["t0"] for x in got), "t1": max(x["t1"] for x in got),
                    "cpu": cpu, "error": next((x["error"] for x in got if x["error"]), "")}
        start_at = time.monotonic() + 3
        futures = [self.pool.submit(broker_load.produce, bootstrap, topic, size, {"acks": acks},
                                    start_at, timeout, per_process) for _ in range(PRODUCERS)]
        got = [f.result(timeout=timeout + 120) for f in futures]
        errors = [e for x in got for e in x["errors"]]
        return {"messages": sum(x["messages"] for x in got),
                "lost": PRODUCERS * per_process - sum(x["messages"] for x in got),
                "t0": min(x["t0"] for x in got), "t1": max(x["t1"] for x in got),
                "cpu": sum(x["cpu"] for x in got), "error": errors[0] if errors else ""}


def steady_producer(bootstrap: str, topic: str, rate: int, size: int, start_at: float,
                    stop_path: str, max_s: float) -> dict:
    """An idempotent acks=all producer (a pool worker) sending `rate` messages a second, keyed
    over GAP_KEYS keys, from `start_at` until `stop_path` exists (or `max_s`), then flushing.
    Returns every acknowledgement's time (time.monotonic(), system-wide) by partition."""
    from confluent_kafka import Producer
    acks: dict = {}
    errors: list = []

    def on_delivery(err, msg):
        if err is None:
            acks.setdefault(msg.partition(), []).append(time.monotonic())
        else:
            errors.append(str(err))
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5,
                         "message.timeout.ms": 120000, "client.id": "cluster-bench-steady",
                         "log_level": 2})          # its refused connections are the fault
    values = broker_load.payloads(size, count=64)
    keys = [str(k).encode() for k in range(GAP_KEYS)]
    for k in keys:                               # metadata and connections before the clock
        producer.produce(topic, values[0], key=k)
    producer.flush(30)
    acks.clear()
    broker_load._sleep_until(start_at)
    cpu0, t0 = broker_load._cpu(), time.monotonic()
    sent = broker_load.send_paced(
        producer, rate, lambda i: producer.produce(topic, values[i & 63], key=keys[i % GAP_KEYS],
                                                   on_delivery=on_delivery),
        lambda elapsed, _: os.path.exists(stop_path) or elapsed > max_s)
    t_stop = time.monotonic()
    left = producer.flush(60)
    return {"acks": acks, "sent": sent, "left": left, "errors": errors[:3],
            "failed": len(errors), "cpu": broker_load._cpu() - cpu0, "t0": t0, "t1": t_stop}


# -- replication (issue 17) ------------------------------------------------------------------

def bench_single_broker(load: Load, workdir, seconds) -> tuple:
    """broker_bench's produce 1 KiB acks=1 case on one broker (its KBroker, shipped config),
    with the same load as the cluster cases: (MB/s, broker cores, load cores)."""
    broker = broker_bench.KBroker(workdir).start()
    try:
        if load.tool:
            r = broker_bench.bench_produce_c(broker, load.tool, workdir, 1024, 1, "none",
                                             seconds)
        else:
            r = broker_bench.bench_produce(load.pool, broker, 1024, 1, "none", seconds)
    finally:
        broker.stop()
    if r.value is None:
        raise RuntimeError(r.text)
    return r.value, r.broker_cores, r.load_cores


def bench_cluster_produce(cluster, cpu, load, acks, seconds) -> tuple:
    """1 KiB values to a 6-partition RF 3 topic (min.insync.replicas=2), sized as broker_bench
    sizes its runs (about `seconds` at 350 MB/s). Returns (MB/s, text, cpu, load cores)."""
    size = 1024
    topic = topic_name(f"repl-{acks}")
    create_topic(cluster, topic, PRODUCE_PARTITIONS, 3, REPLICATED)
    warm_up(cluster.bootstrap_servers, topic, PRODUCE_PARTITIONS)
    per_process = int(350e6 * seconds / PRODUCERS / size)
    broker_bench._settle_page_cache()
    try:
        r = load.produce(cluster.bootstrap_servers, topic, size, acks, per_process,
                         timeout=seconds * 15)
    finally:
        broker_bench.delete_topic(cluster.bootstrap_servers, topic)
    span = r["t1"] - r["t0"]
    mbs = r["messages"] * size / span / 1e6
    text = f"{mbs:7.1f} MB/s {r['messages'] / span / 1000:6.1f} k msg/s"
    if r["lost"]:
        text += f"; {r['lost']} NOT DELIVERED ({r['error']})"
        mbs = None
    return mbs, text, cpu.cores(r["t0"], r["t1"]), r["cpu"] / span


class _NoCpu:
    """broker_bench._run_workers wants a broker to read CPU from; ClusterCpu does that here."""

    @staticmethod
    def cpu_seconds() -> float:
        return 0.0


def bench_cluster_latency(cluster, cpu, pool, seconds, rate) -> tuple:
    """broker_bench's latency workload (its producer and consumer, 1 KiB at `rate` msgs/s,
    producer defaults acks=all and linger.ms=5, consumer default fetch wait) on an RF 3
    topic with min.insync.replicas=2."""
    topic = topic_name("latency")
    create_topic(cluster, topic, PRODUCE_PARTITIONS, 3, REPLICATED)
    bootstrap = cluster.bootstrap_servers
    warm = warm_up(bootstrap, topic, PRODUCE_PARTITIONS)
    calls = [(broker_load.latency_consumer, (bootstrap, topic, PRODUCE_PARTITIONS, {},
                                             (seconds, 1.0))),
             (broker_load.latency_producer, (bootstrap, topic, 1024, rate, {}, (seconds,)))]
    try:
        (cons, prod), _, wall = broker_bench._run_workers(pool, _NoCpu, calls, settle=3.0)
    finally:
        broker_bench.delete_topic(bootstrap, topic)
    t1 = time.monotonic()
    samples = sorted(cons["samples_ns"])
    p50, p99, p999 = (broker_bench._pct(samples, q) / 1e6 for q in (0.5, 0.99, 0.999))
    text = (f"p50 {p50:.2f}  p99 {p99:.2f}  p99.9 {p999:.2f} ms ({len(samples)} samples, "
            f"{prod['messages'] / seconds:.0f}/s sent; first record on each new partition "
            f"acknowledged after {warm:.2f} s)")
    return p99, text, cpu.cores(t1 - wall, t1), (cons["cpu"] + prod["cpu"]) / wall


def _gaps(times: list, t_fault: float) -> float:
    """The longest interval between consecutive acknowledgements that ends after `t_fault`
    (the one spanning the fault included)."""
    longest = 0.0
    for a, b in zip(times, times[1:]):
        if b >= t_fault:
            longest = max(longest, b - a)
    return longest


def bench_gap(cluster, cpu, pool, workdir, topic, fault: str, rate: int) -> dict:
    """Run steady_producer on `topic`; 3 s in, `fault` ("kill": SIGKILL, "term": SIGTERM) the
    leader of the first partition not led by the controller (a controller's own failover is
    workload "controller"); once every partition it led has a new leader and it is out of every
    ISR, 3 s more, then stop. Returns the gaps and when things happened (s after the fault)."""
    controller = cluster.controller()
    before = partition_states(cluster, topic, range(GAP_PARTITIONS))
    victim = next(s["leader"] for p, s in sorted(before.items()) if s["leader"] != controller)
    led = [p for p, s in before.items() if s["leader"] == victim]
    stop_path = pathlib.Path(workdir) / f"stop-{fault}-{time.monotonic_ns()}"
    start_at = time.monotonic() + 4
    future = pool.submit(steady_producer, cluster.bootstrap_servers, topic, rate, 1024,
                         start_at, str(stop_path), 120)
    events = {}
    try:
        broker_load._sleep_until(start_at + 3)
        t_fault = time.monotonic()
        if fault == "kill":
            cluster.kill(victim)
        else:
            code = cluster.stop(victim)
            events["exited"] = time.monotonic() - t_fault
            events["exit code"] = code
        for p in led:
            cluster.wait_for_leader(topic, p, not_in={victim}, timeout=60)
        events["new leaders in zk"] = time.monotonic() - t_fault
        wait_out_of_isr(cluster, topic, GAP_PARTITIONS, victim)
        events["out of every isr"] = time.monotonic() - t_fault
        time.sleep(3)
    finally:
        stop_path.touch()
        r = future.result(timeout=240)
    acks = {p: sorted(ts) for p, ts in r["acks"].items()}
    led_gap = max((_gaps(acks.get(p, []), t_fault) for p in led), default=float("nan"))
    every = sorted(t for ts in acks.values() for t in ts)
    last_acks = [acks[p][-1] if acks.get(p) else r["t0"] for p in led]
    silent = [p for p, last in zip(led, last_acks) if last < t_fault]
    if silent:                                   # no acknowledgement after the fault at all
        led_gap = max(led_gap, r["t1"] - min(last_acks))
    return {"victim": victim, "led": led, "gap": led_gap, "gap_any": _gaps(every, t_fault),
            "silent": silent, "events": events, "sent": r["sent"], "left": r["left"],
            "failed": r["failed"], "errors": r["errors"],
            "cpu": cpu.cores(r["t0"], r["t1"]), "load": r["cpu"] / (r["t1"] - r["t0"])}


def _gap_row(number, fault, g, target_s) -> Row:
    what = "kill -9" if fault == "kill" else "SIGTERM"
    ev = ", ".join(f"{k} {v:.2f} s" if isinstance(v, float) else f"{k} {v}"
                   for k, v in g["events"].items())
    text = (f"{g['gap']:6.2f} s longest gap on partition(s) {g['led']} of broker "
            f"{g['victim']}; {g['gap_any']:.2f} s with no ack at all ({ev} after the fault; "
            f"{g['sent']} sent, {g['failed']} failed"
            + (f": {g['errors'][0]}" if g["errors"] else "")
            + (f", {g['left']} unflushed" if g["left"] else "")
            + (f"; partitions {g['silent']} never acknowledged again" if g["silent"] else "")
            + ")")
    return Row(number, f"longest ack gap, {what} of a leader", text, f"< {target_s} s",
               g["gap"] < target_s and not g["silent"] and not g["failed"], g["cpu"],
               g["load"], "producer", short=f"{g['gap']:.2f} s (any ack: {g['gap_any']:.2f} s)")


async def _log_sizes(probe, broker_id: int, topic: str, partitions: int) -> int:
    """The topic's bytes in broker `broker_id`'s log dirs, as DescribeLogDirs reports them."""
    from protocol.messages.describe_log_dirs import DescribeLogDirsRequest as D
    request = D(topics=[D.DescribableLogDirTopic(topic=topic,
                                                 partitions=list(range(partitions)))])
    response = await probe.conns[broker_id].send(request)
    return sum(p.partition_size for r in response.results for t in r.topics if t.name == topic
               for p in t.partitions)


def log_size(cluster, broker_id: int, topic: str, partitions: int) -> int:
    async def ask():
        async with Probe(cluster, [broker_id]) as probe:
            return await _log_sizes(probe, broker_id, topic, partitions)
    return asyncio.run(ask())


def bench_catchup(cluster, cpu, load, mib: int, partitions: int) -> dict:
    """Stop a follower (SIGTERM; not the controller), fill an RF 3 topic with `mib` MiB of 1 KiB
    values at acks=1, start the follower again and poll, from its process start: ZooKeeper for
    the partitions' ISR, and DescribeLogDirs for its copy's size."""
    topic = topic_name("catchup")
    create_topic(cluster, topic, partitions, 3)
    controller = cluster.controller()
    victim = next(b for b in sorted(cluster.brokers) if b != controller)
    cluster.stop(victim)
    wait_out_of_isr(cluster, topic, partitions, victim)
    messages = mib * 1024 * 1024 // 1024
    broker_bench._settle_page_cache()
    fill = load.produce(cluster.bootstrap_servers, topic, 1024, 1, messages // PRODUCERS,
                        timeout=300)
    if fill["lost"]:
        raise RuntimeError(f"fill: {fill['lost']} not delivered ({fill['error']})")
    values = fill["messages"] * 1024
    # acks=1: the other live replica may still be copying; start from two complete copies.
    live = [b for b in sorted(cluster.brokers) if b != victim]
    sizes = {}

    def converged():
        sizes.update({b: log_size(cluster, b, topic, partitions) for b in live})
        return len(set(sizes.values())) == 1
    cluster.wait_until(converged, 120, f"the live replicas of {topic} do not converge")
    on_leader = sizes[live[0]]                                       # RF 3: a whole copy
    os.sync()                  # written back, still cached: the leaders read from memory
    t0 = time.monotonic()
    cluster.start(victim)      # returns once registered and serving Metadata
    registered = time.monotonic() - t0

    async def poll():
        copied = back = None
        follower = 0
        async with Probe(cluster, [victim]) as probe:
            with zookeeper(cluster) as zk:
                while time.monotonic() < t0 + 600 and back is None:
                    if copied is None:
                        follower = await _log_sizes(probe, victim, topic, partitions)
                        if follower >= on_leader:
                            copied = time.monotonic() - t0
                    states = partition_states(cluster, topic, range(partitions), zk)
                    if len(states) == partitions and all(victim in s["isr"]
                                                         for s in states.values()):
                        back = time.monotonic() - t0
                    await asyncio.sleep(0.05)
            if copied is None:
                follower = await _log_sizes(probe, victim, topic, partitions)
        return copied, back, follower
    try:
        copied, back, follower = asyncio.run(poll())
    finally:
        t1 = time.monotonic()
        broker_bench.delete_topic(cluster.bootstrap_servers, topic)
    if back is None:
        raise TimeoutError(f"broker {victim} not back in every ISR of {topic} after 600 s")
    return {"victim": victim, "values": values, "on_leader": on_leader, "follower": follower,
            "fill_mbs": values / (fill["t1"] - fill["t0"]) / 1e6, "registered": registered,
            "copied": copied, "back": back, "mbs": values / back / 1e6,
            "cpu": cpu.cores(t0, t1)}


# -- cluster (issue 16) ----------------------------------------------------------------------

def bench_controller_failover(cluster, cpu, topic: str, partitions: int) -> dict:
    """kill -9 of the controller; then poll, until all three are seen: /controller (a new
    broker), the dead broker's former partitions' state znodes (a new live leader), and each
    surviving broker's Metadata for the topic (the same leaders)."""
    dead = cluster.controller()
    states = partition_states(cluster, topic, range(partitions))
    led = sorted(p for p, s in states.items() if s["leader"] == dead)
    survivors = sorted(b for b in cluster.brokers if b != dead)
    seen: dict = {}
    stop = threading.Event()

    def zookeeper_side(t_kill):
        pending = set(led)
        with zookeeper(cluster) as zk:
            while not stop.is_set() and "zk leaders" not in seen:
                if "controller" not in seen:
                    data = zk.get("/controller")
                    if data is not None and json.loads(data)["brokerid"] != dead:
                        seen["controller"] = time.monotonic() - t_kill
                        seen["new controller"] = json.loads(data)["brokerid"]
                    time.sleep(0.02)
                    continue
                for p in sorted(pending):
                    data = zk.get(f"/brokers/topics/{topic}/partitions/{p}/state")
                    if data is not None and json.loads(data)["leader"] not in (-1, dead):
                        pending.discard(p)
                if not pending:
                    seen["zk leaders"] = time.monotonic() - t_kill
                time.sleep(0.25)    # a round reads every pending state: keep ZooKeeper's load low

    async def metadata_side(t_kill, deadline):
        async with Probe(cluster, survivors) as probe:
            pending = set(survivors)
            while pending and time.monotonic() < deadline:
                if "controller" not in seen:          # no new leader before a new controller
                    await asyncio.sleep(0.02)
                    continue
                for b in sorted(pending):
                    leaders = await probe.leaders(b, topic) or {}
                    if all(leaders.get(p, -1) not in (-1, dead) for p in led):
                        seen[f"b{b} metadata"] = time.monotonic() - t_kill
                        pending.discard(b)
                await asyncio.sleep(0.1)

    t_kill = time.monotonic()
    cluster.kill(dead)
    watcher = threading.Thread(target=zookeeper_side, args=(t_kill,), daemon=True)
    watcher.start()
    try:
        asyncio.run(metadata_side(t_kill, t_kill + SESSION_MS / 1000 + 60))
        watcher.join(60)
    finally:
        stop.set()
        watcher.join(10)
    t1 = time.monotonic()
    md = [seen.get(f"b{b} metadata") for b in survivors]
    figure = None if None in md else max(md)
    window = cpu.cores(t_kill, t1)
    # Back to three brokers, the killed one in every ISR again, for what follows.
    cluster.start(dead)
    wait_isr_of_replicas(cluster, topic, partitions, timeout=180)
    return {"dead": dead, "led": len(led), "seen": seen, "figure": figure, "cpu": window}


def cluster_partitions(cluster) -> dict:
    """{topic: partition count} in the cluster (ZooKeeper)."""
    out = {}
    with zookeeper(cluster) as zk:
        for topic in zk.children("/brokers/topics"):
            data = zk.get(f"/brokers/topics/{topic}")
            if data is not None:
                out[topic] = len(json.loads(data)["partitions"])
    return out


def metadata_frame(correlation_id: int) -> bytes:
    """Metadata v12 (librdkafka 2.x's version) for every topic, as one request frame."""
    from protocol.headers import RequestHeader, encode_request
    from protocol.messages.metadata import MetadataRequest
    header = RequestHeader(3, 12, correlation_id, "cluster-bench-metadata")
    return encode_request(header, MetadataRequest(topics=None, allow_auto_topic_creation=False))


def _read_frame(sock) -> bytes:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            raise ConnectionError("closed")
        head += chunk
    size = struct.unpack(">i", head)[0]
    buf = bytearray(size)
    view, got = memoryview(buf), 0
    while got < size:
        n = sock.recv_into(view[got:], size - got)
        if not n:
            raise ConnectionError("closed mid-response")
        got += n
    return bytes(buf)


def bench_metadata(cluster, requests: int) -> dict:
    """`requests` all-topics Metadata requests, round robin over the brokers, one at a time,
    each timed from its first byte written to its last byte read."""
    from protocol.headers import decode_response
    socks = {b: socket.create_connection(("127.0.0.1", n.port), timeout=30)
             for b, n in cluster.brokers.items()}
    times = {b: [] for b in socks}
    size = 0
    partitions = 0
    try:
        for b, s in socks.items():                        # warm: connection and caches
            s.sendall(metadata_frame(0))
            frame = _read_frame(s)
            _, response = decode_response(memoryview(frame), 3, 12)
            partitions = max(partitions, sum(len(t.partitions) for t in response.topics))
            size = len(frame)
        for i in range(requests):
            b = i % len(socks)
            frame_out = metadata_frame(i + 1)
            t0 = time.perf_counter()
            socks[b].sendall(frame_out)
            _read_frame(socks[b])
            times[b].append(time.perf_counter() - t0)
    finally:
        for s in socks.values():
            s.close()
    every = sorted(t for ts in times.values() for t in ts)
    pct = {q: broker_bench._pct(every, q) * 1000 for q in (0.5, 0.99)}
    per_broker = {b: broker_bench._pct(sorted(ts), 0.99) * 1000 for b, ts in times.items()}
    return {"p50": pct[0.5], "p99": pct[0.99], "max": every[-1] * 1000, "bytes": size,
            "partitions": partitions, "per_broker_p99": per_broker, "n": len(every)}


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


# -- the run ---------------------------------------------------------------------------------

def _cpu_cores(fn):
    """(fn(), cores of this process while it ran)."""
    c0, t0 = self_cpu(), time.monotonic()
    out = fn()
    return out, (self_cpu() - c0) / max(time.monotonic() - t0, 1e-9)


def run_replication(cluster, cpu, load, pool, workdir, opts, rows, single) -> None:
    if "produce" in opts.only:
        for acks in ("all", 1):
            name = f"produce 1 KiB, RF 3, acks={acks}"
            target = (f">= {T17_ACKS_ALL_RATIO}x single-broker acks=1" if acks == "all"
                      else "")
            try:
                mbs, text, window, load_cores = bench_cluster_produce(
                    cluster, cpu, load, acks, opts.produce_seconds)
                met = None
                short = f"{mbs:.1f} MB/s" if mbs else "FAILED"
                if single and mbs:
                    text += f" = {mbs / single:.2f}x single-broker acks=1 ({single:.0f} MB/s)"
                    short += f" = {mbs / single:.2f}x single"
                if acks == "all":
                    met = bool(mbs and single and mbs >= T17_ACKS_ALL_RATIO * single)
                report(rows, Row("1", name, text, target, met, window, load_cores,
                                 short=short))
            except Exception as exc:
                failed(rows, "1", name, target, exc)
            ensure_running(cluster)
    if "latency" in opts.only:
        name = f"latency RF 3 acks=all {opts.latency_rate // 1000}k msg/s"
        try:
            p99, text, window, load_cores = bench_cluster_latency(
                cluster, cpu, pool, opts.latency_seconds, opts.latency_rate)
            report(rows, Row("2", name, text, f"p99 < {T17_P99_MS} ms", p99 < T17_P99_MS,
                             window, load_cores, short=text.split(" (")[0]))
        except Exception as exc:
            failed(rows, "2", name, f"p99 < {T17_P99_MS} ms", exc)
        ensure_running(cluster)
    if "failover" in opts.only:
        topic = topic_name("failover")
        try:
            create_topic(cluster, topic, GAP_PARTITIONS, 3, REPLICATED)
        except Exception as exc:
            failed(rows, "3", "failover topic", "", exc)
            topic = None
        for fault, target_s in (("kill", T17_KILL_GAP_S), ("term", T17_TERM_GAP_S)):
            if topic is None:
                break
            try:
                g = bench_gap(cluster, cpu, pool, workdir, topic, fault, opts.gap_rate)
                report(rows, _gap_row("3", fault, g, target_s))
            except Exception as exc:
                failed(rows, "3", f"longest ack gap, {fault}", f"< {target_s} s", exc)
            try:
                ensure_running(cluster)
                wait_isr_of_replicas(cluster, topic, GAP_PARTITIONS)
            except Exception as exc:
                print(f"  (failover topic not back to full ISR: {exc})", flush=True)
        if topic:
            broker_bench.delete_topic(cluster.bootstrap_servers, topic)
    if "catchup" in opts.only:
        name = f"follower catch-up {opts.catchup_mib} MiB"
        target = f">= {T17_CATCHUP_MBS} MB/s"
        try:
            c = bench_catchup(cluster, cpu, load, opts.catchup_mib, opts.catchup_partitions)
            copied = "never" if c["copied"] is None else f"{c['copied']:.2f} s"
            text = (f"{c['mbs']:6.1f} MB/s: broker {c['victim']} in every ISR {c['back']:.2f} s "
                    f"after its start (registered {c['registered']:.2f} s, its copy as large "
                    f"as a leader's {copied}; {c['values'] / 2**20:.0f} MiB of values, "
                    f"{c['on_leader'] / 2**20:.0f} MiB of log per replica); the fill with it "
                    f"down ran at {c['fill_mbs']:.0f} MB/s")
            report(rows, Row("4", name, text, target, c["mbs"] >= T17_CATCHUP_MBS, c["cpu"],
                             short=f"{c['mbs']:.1f} MB/s (in ISR at {c['back']:.1f} s)"))
        except Exception as exc:
            failed(rows, "4", name, target, exc)
        ensure_running(cluster)


def run_cluster(cluster, cpu, opts, rows) -> None:
    n = opts.create_partitions
    rf3_topic = f"create-rf3-{n}"
    if "create" in opts.only:
        for rf in ((3, 1) if opts.create_rf1 else (3,)):
            topic = f"create-rf{rf}-{n}"
            name = f"create topic, {n} partitions, RF {rf}"
            target = f"< {T16_CREATE_S} s" if rf == 3 else "(information)"
            try:
                t_win0 = time.monotonic()
                c, load_cores = _cpu_cores(lambda: create_topic(cluster, topic, n, rf))
                seen = ", ".join(f"b{b} {s:.2f}" for b, s in sorted(c["seen"].items()))
                text = (f"{c['all']:6.2f} s until every broker's Metadata has every leader "
                        f"(CreateTopics answered at {c['answered']:.2f} s; {seen} s)")
                report(rows, Row("6", name, text, target,
                                 c["all"] < T16_CREATE_S if rf == 3 else None,
                                 cpu.cores(t_win0, time.monotonic()), load_cores, "client",
                                 short=f"{c['all']:.2f} s"))
                if rf == 1:
                    t_del = time.monotonic()
                    broker_bench.delete_topic(cluster.bootstrap_servers, topic)
                    cluster.wait_until(lambda: topic not in cluster_partitions(cluster), 120,
                                       f"{topic} not deleted")
                    print(f"      (deleted {topic} in {time.monotonic() - t_del:.1f} s)",
                          flush=True)
            except Exception as exc:
                failed(rows, "6", name, target, exc)
            ensure_running(cluster)
    if "controller" in opts.only:
        name = f"controller kill -9, {n} partitions RF 3"
        target = f"<= {T16_FAILOVER_S:.0f} s (session {SESSION_MS / 1000:.0f} s + 2 s)"
        try:
            if rf3_topic not in cluster_partitions(cluster):
                create_topic(cluster, rf3_topic, n, 3)
            wait_isr_of_replicas(cluster, rf3_topic, n)
            f = bench_controller_failover(cluster, cpu, rf3_topic, n)
            seen = f["seen"]
            parts = [f"{k} {v:.2f} s" for k, v in seen.items() if k != "new controller"]
            text = ((f"{f['figure']:6.2f} s" if f["figure"] is not None else "  none  ")
                    + f" until both survivors' Metadata show new leaders for the {f['led']} "
                    f"partitions broker {f['dead']} led (new controller "
                    f"{seen.get('new controller', '?')}; {', '.join(parts)})")
            met = f["figure"] is not None and f["figure"] <= T16_FAILOVER_S
            short = "none" if f["figure"] is None else f"{f['figure']:.2f} s"
            if "controller" in seen:
                short += f" (new controller at {seen['controller']:.1f} s)"
            report(rows, Row("5", name, text, target, met, f["cpu"], short=short))
        except Exception as exc:
            failed(rows, "5", name, target, exc)
        ensure_running(cluster)
    if "metadata" in opts.only:
        run_big(cluster, cpu, opts, rows)


def run_big(cluster, cpu, opts, rows) -> None:
    """Grow the cluster to opts.partitions partitions, then Metadata p99 and RSS."""
    target_total = opts.partitions
    rf = opts.partitions_rf
    try:
        have = sum(cluster_partitions(cluster).values())
        k = 0
        t_grow = time.monotonic()
        while have < target_total:
            if time.monotonic() - t_grow > opts.grow_seconds:
                print(f"      stopped growing after {opts.grow_seconds:.0f} s "
                      f"(CLUSTER_GROW_SECONDS): measuring at {have} partitions", flush=True)
                break
            size = min(1000, target_total - have)
            topic = f"big-{k}-rf{rf}"
            k += 1
            c = create_topic(cluster, topic, size, rf, timeout=300)
            have += size
            print(f"      created {topic} ({size} partitions, RF {rf}) in {c['all']:.2f} s; "
                  f"cluster now {have} partitions", flush=True)
        grow = time.monotonic() - t_grow
        if k:
            print(f"      grown to {have} partitions in {grow:.1f} s", flush=True)
        time.sleep(2)
        t0 = time.monotonic()
        time.sleep(3)
        idle = cpu.cores(t0, time.monotonic())
        report(rows, Row("-", f"idle, {have} partitions", "CPU of an idle cluster (follower "
                         "fetches of every partition, timers)", "(information)", None, idle,
                         short="(cpu only)"))
    except Exception as exc:
        failed(rows, "7", f"grow to {target_total} partitions", "", exc)
        return
    name = f"Metadata all topics, {have} partitions"
    target = f"p99 < {T16_METADATA_P99_MS} ms"
    try:
        t0 = time.monotonic()
        m, load_cores = _cpu_cores(lambda: bench_metadata(cluster, opts.metadata_requests))
        per = ", ".join(f"b{b} {v:.1f}" for b, v in m["per_broker_p99"].items())
        text = (f"p50 {m['p50']:.2f}  p99 {m['p99']:.2f}  max {m['max']:.2f} ms ({m['n']} "
                f"requests, {m['bytes'] / 1e6:.2f} MB, {m['partitions']} partitions each; "
                f"p99 per broker {per} ms)")
        report(rows, Row("7", name, text, target, m["p99"] < T16_METADATA_P99_MS,
                         cpu.cores(t0, time.monotonic()), load_cores, "client",
                         short=f"p99 {m['p99']:.2f} ms (p50 {m['p50']:.2f})"))
    except Exception as exc:
        failed(rows, "7", name, target, exc)
    name = f"broker RSS, {have} partitions"
    target = f"< {T16_RSS_MIB} MiB"
    try:
        rss = {f"b{b}": rss_mib(n.proc.pid) for b, n in cluster.brokers.items()}
        text = "  ".join(f"{b} {v:.0f} MiB" for b, v in rss.items())
        report(rows, Row("8", name, text, target, max(rss.values()) < T16_RSS_MIB,
                         short=f"max {max(rss.values()):.0f} MiB"))
    except Exception as exc:
        failed(rows, "8", name, target, exc)


def print_table(rows, started, heading: str, cpu_note: str, name_w: int = 40,
                result_w: int = 36, target_w: int = 36, number_w: int = 2) -> bool:
    """The summary table of a cluster benchmark (also bench.reassign_bench's); True if no
    target was missed."""
    print(heading)
    print(cpu_note)
    print(f"{'#':{number_w}s} {'measurement':{name_w}s} {'result':{result_w}s} "
          f"{'target':{target_w}s} {'':4s}  cpu")
    print("-" * 140)
    ok = True
    for r in rows:
        ok &= r.met is not False
        print(f"{r.number:{number_w}s} {r.name[:name_w]:{name_w}s} {r.short[:result_w]:{result_w}s} "
              f"{r.target[:target_w]:{target_w}s} {r.verdict():4s}  {r.cpu_text()[4:]}")
    print(f"total {time.monotonic() - started:.0f} s")
    return ok


def print_summary(rows, opts, started, single_note) -> bool:
    return print_table(
        rows, started,
        f"\nCluster benchmark: 3 brokers + ZooKeeper on 127.0.0.1, "
        f"zookeeper.session.timeout.ms={SESSION_MS} (2-core shared machine; indicative). "
        f"{single_note}",
        "cpu in cores (user+sys s per wall s): b0/b1/b2 brokers, zk ZooKeeper, "
        "load = load generator or this process as client")


def parse_only(argv, prog: str, env: str, workloads) -> argparse.Namespace:
    """The benchmark's flags: --only (or $`env`), a comma list of `workloads`."""
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--only", default=os.environ.get(env, ",".join(workloads)),
                   help=f"comma list of {','.join(workloads)}")
    opts = p.parse_args(argv)
    opts.only = set(filter(None, opts.only.split(",")))
    unknown = opts.only - set(workloads)
    if unknown:
        p.error(f"unknown workload(s) {','.join(sorted(unknown))}")
    return opts


def parse_args(argv):
    opts = parse_only(argv, "python -m bench.cluster_bench", "CLUSTER_ONLY", WORKLOADS)
    opts.produce_seconds = float(os.environ.get("CLUSTER_PRODUCE_SECONDS", 3))
    opts.latency_seconds = float(os.environ.get("CLUSTER_LATENCY_SECONDS", 8))
    opts.latency_rate = _env("CLUSTER_LATENCY_RATE", 10_000)
    opts.gap_rate = _env("CLUSTER_GAP_RATE", 2000)
    opts.catchup_mib = _env("CLUSTER_CATCHUP_MIB", 1024)
    opts.catchup_partitions = _env("CLUSTER_CATCHUP_PARTITIONS", 6)
    opts.create_partitions = _env("CLUSTER_CREATE_PARTITIONS", 1000)
    opts.create_rf1 = bool(_env("CLUSTER_CREATE_RF1", 1))
    opts.partitions = _env("CLUSTER_PARTITIONS", 10_000)
    opts.partitions_rf = _env("CLUSTER_PARTITIONS_RF", 3)
    opts.metadata_requests = _env("CLUSTER_METADATA_REQUESTS", 300)
    opts.grow_seconds = float(os.environ.get("CLUSTER_GROW_SECONDS", 480))
    return opts


@contextlib.contextmanager
def bytecode(directory):
    """Within: the processes started (brokers, load) write and read .pyc files in `directory`,
    as an installed package has them. This machine sets PYTHONDONTWRITEBYTECODE=1, so without
    it every broker start compiles the generated protocol codecs from source, about 0.6 s that
    a broker restart (the catch-up figure counts from it) would not spend elsewhere."""
    saved = {k: os.environ.get(k) for k in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(directory)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None) -> int:
    """`argv` None = the defaults and the environment (bench/__main__.py calls main())."""
    from broker.testing.cluster import KafkaCluster
    opts = parse_args(argv or [])
    started = time.monotonic()
    old_term = None
    if threading.current_thread() is threading.main_thread():
        old_term = signal.signal(signal.SIGTERM, _interrupt)   # cleanup runs on SIGTERM too
    tool = None
    if opts.only & {"produce", "catchup"}:
        tool, how = c_load.find()
        print(f"load generator: {how if tool else 'confluent-kafka processes (' + how + ')'}",
              flush=True)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 65536:               # 10,000 partitions hold at least as many files per broker
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
    rows: list = []
    single_note = ""
    try:
        with tempfile.TemporaryDirectory(prefix="cluster-bench-") as tmp, \
                bytecode(pathlib.Path(tmp) / "pycache"), \
                concurrent.futures.ProcessPoolExecutor(
                    max_workers=3, mp_context=multiprocessing.get_context("spawn")) as pool:
            workdir = pathlib.Path(tmp)
            list(pool.map(time.sleep, [0] * 3))                 # spawn the workers up front
            load = Load(tool, workdir, pool)
            single = None
            if "produce" in opts.only:
                warm, cold = broker_bench.page_cache_write_rates(workdir)
                single_note = (f"Page-cache writes on this machine: {warm:.0f} MB/s per core "
                               f"into memory just freed, {cold:.0f} into memory free for 5 s. ")
                print(f"  {single_note.strip()}", flush=True)
                try:
                    single, b_cores, l_cores = bench_single_broker(load, workdir,
                                                                   opts.produce_seconds)
                    single_note += (f"Single broker (same run, same load): produce 1 KiB "
                                    f"acks=1 {single:.0f} MB/s, cpu broker {b_cores:.2f} load "
                                    f"{l_cores:.2f}.")
                    print(f"  single broker, produce 1 KiB acks=1: {single:.1f} MB/s "
                          f"[cpu broker {b_cores:.2f}, load {l_cores:.2f}]", flush=True)
                except Exception as exc:
                    failure = f"Single broker FAILED: {exc!r}"[:200]
                    single_note += failure
                    print(f"  {failure}", flush=True)
            cluster = KafkaCluster(3, workdir / "cluster", session_timeout_ms=SESSION_MS,
                                   config=dict(SHIPPED))
            try:
                t0 = time.monotonic()
                cluster.start_all()
                print(f"  cluster of 3 brokers started in {time.monotonic() - t0:.1f} s "
                      f"(controller {cluster.controller()})", flush=True)
                with ClusterCpu(cluster) as cpu:
                    run_replication(cluster, cpu, load, pool, workdir, opts, rows, single)
                    run_cluster(cluster, cpu, opts, rows)
            finally:
                for broker_id in cluster.brokers:               # data thrown away: SIGKILL
                    cluster.kill(broker_id)
                cluster.close()                                 # ZooKeeper: SIGTERM, by pid
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
    ok = print_summary(rows, opts, started, single_note)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
