"""The broker benchmark's C load generator (bench/loadgen.c, on librdkafka) from Python.

A Python producer loop spends about a microsecond of interpreter time per message, so on this
2-core machine the confluent-kafka load processes took 0.9-1.8 cores away from the broker they
were measuring. kbroker-loadgen produces from preallocated values without copying them and
consumes in batches, in C: two producers at 1 KiB use about one core between them.

librdkafka's own rdkafka_performance was tried first: its values are one repeated 31-byte
pattern, which lz4 shrinks about a hundredfold (both brokers then idle at 0.1 core while the
clients compress), and its group consumer polls one message at a time (0.9 core at 750k msgs/s).
kbroker-loadgen sends the JSON-like values of bench/broker_load.py instead, which compress 2-3x
like application data, and reads with rd_kafka_consume_batch_queue.

`find()` builds it on first use (bench/build_loadgen.sh) into .tools/. Each run is one
subprocess bounded by a message count and a timeout; it prints one JSON line with its counts
and the CLOCK_MONOTONIC times of its first and last message (shared by every process on
Linux), so several processes are timed together.
"""
from __future__ import annotations

import json
import os
import pathlib
import resource
import subprocess
import time

from bench import broker_load

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = ROOT / "bench" / "build_loadgen.sh"


def find() -> tuple[str | None, str]:
    """(path, how) or (None, why not)."""
    try:
        out = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return None, "building kbroker-loadgen timed out"
    path = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    if out.returncode == 0 and os.access(path, os.X_OK):
        return path, "kbroker-loadgen (C, librdkafka)"
    return None, (out.stderr.strip().splitlines() or ["build failed"])[-1][:200]


def payload_file(workdir: pathlib.Path, size: int) -> str:
    """broker_load.payloads(size) concatenated: the values the C producer cycles through."""
    path = workdir / f"payloads-{size}.bin"
    if not path.exists():
        path.write_bytes(b"".join(broker_load.payloads(size)))
    return str(path)


def children_cpu() -> float:
    """CPU seconds of reaped child processes (the load generators, once waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Run:
    """One load process (kbroker-loadgen, or bench/replay_load.py: a command list) given `-T
    SECONDS` (its own bound, `timeout` unless said otherwise); `wait()` returns its JSON
    summary, or None, killing it if it outlives `timeout` by 15 s."""

    def __init__(self, tool: str | list, args: list[str], timeout: float,
                 seconds: float | None = None):
        self.deadline = time.monotonic() + timeout
        command = [tool] if isinstance(tool, str) else list(tool)
        self.proc = subprocess.Popen([*command, *args, "-T", str(seconds or timeout)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     cwd=ROOT)
        self.stdout = self.stderr = ""

    def wait(self) -> dict | None:
        try:
            self.stdout, self.stderr = self.proc.communicate(
                timeout=max(1.0, self.deadline - time.monotonic() + 15))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.stdout, self.stderr = self.proc.communicate()
        for line in reversed(self.stdout.splitlines()):
            if line.startswith("{"):
                return json.loads(line)
        return None

    def error(self) -> str:
        lines = [line for line in (self.stderr + self.stdout).splitlines() if line.strip()]
        return (lines[-1] if lines else f"exit {self.proc.returncode}")[:120]


def producer_args(bootstrap, topic, size, acks, compression, count, payloads) -> list[str]:
    return ["produce", "-b", bootstrap, "-t", topic, "-s", str(size), "-c", str(count),
            "-f", payloads, "-X", f"acks={acks}", "-X", f"compression.type={compression}",
            "-X", "queue.buffering.max.messages=500000",
            "-X", "queue.buffering.max.kbytes=1048576",
            # A partition per message: the tool outruns the first metadata response, and the
            # sticky partitioner put that whole backlog (and ~90% of a short run) on one
            # partition of the six.
            "-X", "sticky.partitioning.linger.ms=0"]


def consumer_args(bootstrap, topic, group, share) -> list[str]:
    return ["consume", "-b", bootstrap, "-t", topic, "-g", group, "-n", str(share),
            "-X", "auto.offset.reset=earliest", "-X", "enable.auto.commit=false"]
