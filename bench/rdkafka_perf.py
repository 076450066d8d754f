"""librdkafka's C load tool, rdkafka_performance, as the broker benchmark's load generator.

A Python producer loop spends about a microsecond of interpreter time per message, so on this
2-core machine the confluent-kafka load processes took 0.9-1.8 cores away from the broker they
were measuring. rdkafka_performance produces from one preallocated buffer and consumes without
touching the payloads, in C: at 1 KiB it uses about a third of a core.

`find()` returns the tool's path: $RDKAFKA_PERFORMANCE, else .tools/rdkafka_performance, else
what bench/build_rdkafka_performance.sh builds (Debian's librdkafka source package, linked
against the librdkafka bundled with confluent-kafka). Each run is one subprocess bounded by a
message count and a timeout; its CPU is read from the kernel when it is reaped.
"""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = ROOT / "bench" / "build_rdkafka_performance.sh"

_PRODUCED = re.compile(r"% (\d+) messages produced \((\d+) bytes\), (\d+) delivered "
                       r"\(offset -?\d+, (\d+) failed\) in (\d+)ms")
_CONSUMED = re.compile(r"% (\d+) messages \((\d+) bytes\) consumed in (\d+)ms")


def find() -> tuple[str | None, str]:
    """(path, how) or (None, why not)."""
    env = os.environ.get("RDKAFKA_PERFORMANCE")
    if env:
        return (env, "$RDKAFKA_PERFORMANCE") if os.access(env, os.X_OK) else \
            (None, f"$RDKAFKA_PERFORMANCE={env} is not executable")
    try:
        out = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=600,
                             env=dict(os.environ, PYTHON=os.environ.get("PYTHON", "") or
                                      str(ROOT / ".venv" / "bin" / "python")))
    except subprocess.TimeoutExpired:
        return None, "building rdkafka_performance timed out"
    path = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    if out.returncode == 0 and os.access(path, os.X_OK):
        return path, "librdkafka's rdkafka_performance (C)"
    return None, (out.stderr.strip().splitlines() or ["build failed"])[-1][:200]


class Run:
    """One rdkafka_performance process; `wait()` fills in its summary and CPU seconds."""

    def __init__(self, tool: str, args: list[str], timeout: float):
        self.args = args
        self.deadline = time.monotonic() + timeout
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen([tool, *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.cpu = None
        self.wall = None
        self.stdout = self.stderr = ""

    def wait(self) -> "Run":
        try:
            self.stdout, self.stderr = self.proc.communicate(
                timeout=max(0.1, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.stdout, self.stderr = self.proc.communicate()
        self.wall = time.monotonic() - self.t0
        # The child is reaped by communicate(); its rusage went to RUSAGE_CHILDREN, which the
        # caller reads around the whole run (wait4 on a reaped pid is not possible).
        return self

    def produced(self) -> dict | None:
        m = None
        for m in _PRODUCED.finditer(self.stdout):
            pass
        if m is None:
            return None
        msgs, nbytes, delivered, failed, ms = map(int, m.groups())
        return {"messages": msgs, "bytes": nbytes, "delivered": delivered, "failed": failed,
                "seconds": ms / 1000}

    def consumed(self) -> dict | None:
        m = None
        for m in _CONSUMED.finditer(self.stdout):
            pass
        if m is None:
            return None
        msgs, nbytes, ms = map(int, m.groups())
        return {"messages": msgs, "bytes": nbytes, "seconds": ms / 1000}

    def error(self) -> str:
        lines = [line for line in (self.stderr + self.stdout).splitlines()
                 if "CONFWARN" not in line and line.strip()]
        return (lines[-1] if lines else f"exit {self.proc.returncode}")[:120]


def children_cpu() -> float:
    import resource
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def producer_args(bootstrap, topic, size, acks, compression, count) -> list[str]:
    acks = "-1" if acks == "all" else str(acks)
    return ["-P", "-t", topic, "-b", bootstrap, "-s", str(size), "-c", str(count), "-a", acks,
            "-X", f"compression.type={compression}", "-q",
            "-X", "queue.buffering.max.messages=500000",
            "-X", "queue.buffering.max.kbytes=1048576",
            # A partition per message: the tool outruns the first metadata response, and the
            # sticky partitioner would put that whole backlog (and ~90% of a short run) on one
            # partition of the six.
            "-X", "sticky.partitioning.linger.ms=0"]


def consumer_args(bootstrap, topic, group, count) -> list[str]:
    return ["-G", group, "-t", topic, "-b", bootstrap, "-c", str(count), "-e", "-q",
            "-X", "auto.offset.reset=earliest",
            "-X", f"max.partition.fetch.bytes={os.environ.get('BENCH_PARTITION_FETCH', 1048576)}"]
