"""Start-to-ready and stop times of the embedded broker (issue 8 targets).

1. sync start: `EmbeddedBroker().start()` until an ApiVersions request on a new connection is
   answered (the broker is ready for a client), 20 runs in one process after one warm-up run.
   Target: median < 200 ms.
2. sync stop: `stop()` (graceful shutdown, executor and loop thread joined, dir removed).
   Target: median < 200 ms, max < 1 s.
3. the same two for `AsyncEmbeddedBroker` on the caller's loop, and for a sync broker that
   creates 3 topics up front.
4. cold start: a fresh interpreter from `import broker.embedded` to ready, imports included
   (median of 3). Informational: with PYTHONDONTWRITEBYTECODE=1 (set on this machine) every run
   compiles the generated protocol codecs from source, which dominates; the second cold figure
   has .pyc files (kept in a temporary PYTHONPYCACHEPREFIX), as after a normal install.

Run: `python -m bench.embedded_bench` (or `python -m bench embedded`). Times on a shared,
busy machine are indicative.
"""
import asyncio
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

RUNS = 20
COLD_RUNS = 3
TARGET_READY_MS = 200.0
TARGET_STOP_MS = 200.0
TARGET_STOP_MAX_MS = 1000.0

# ApiVersions v0: header v1 (api_key 18, version 0, correlation id 1, client id "bench"), no body
_API_VERSIONS = struct.pack(">hhih", 18, 0, 1, 5) + b"bench"
_API_VERSIONS = struct.pack(">i", len(_API_VERSIONS)) + _API_VERSIONS


def answer_api_versions(port: int) -> None:
    """One ApiVersions round trip on a new connection; raises unless error_code is 0."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(_API_VERSIONS)
        head = b""
        while len(head) < 10:
            chunk = s.recv(10 - len(head))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            head += chunk
        _, correlation_id, error_code = struct.unpack(">iih", head)
        if correlation_id != 1 or error_code != 0:
            raise RuntimeError(f"ApiVersions answered {correlation_id=} {error_code=}")


def sync_runs(topics=None) -> tuple:
    from broker.embedded import EmbeddedBroker
    ready, stop = [], []
    for i in range(RUNS + 1):
        started = time.perf_counter()
        broker = EmbeddedBroker(topics=topics).start()
        answer_api_versions(broker.port)
        up = time.perf_counter()
        broker.stop()
        down = time.perf_counter()
        if i:                                   # run 0 is the warm-up
            ready.append((up - started) * 1000)
            stop.append((down - up) * 1000)
    return ready, stop


def async_runs() -> tuple:
    from broker.embedded import AsyncEmbeddedBroker
    ready, stop = [], []

    async def run():
        loop = asyncio.get_running_loop()
        for i in range(RUNS + 1):
            started = time.perf_counter()
            broker = await AsyncEmbeddedBroker().start()
            await loop.run_in_executor(None, answer_api_versions, broker.port)
            up = time.perf_counter()
            await broker.stop()
            down = time.perf_counter()
            if i:
                ready.append((up - started) * 1000)
                stop.append((down - up) * 1000)
    import uvloop
    uvloop.run(run())
    return ready, stop


_COLD = """
import time
started = time.perf_counter()
from broker.embedded import EmbeddedBroker
from bench.embedded_bench import answer_api_versions
broker = EmbeddedBroker().start()
answer_api_versions(broker.port)
print((time.perf_counter() - started) * 1000)
broker.stop()
"""


def cold_runs(bytecode_dir: str | None = None) -> list:
    """Fresh interpreters; with `bytecode_dir`, .pyc files are written and read there (as after
    a normal `pip install`, which compiles them), after one run that fills it."""
    env = dict(os.environ)
    if bytecode_dir is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = bytecode_dir
    out = []
    for i in range(COLD_RUNS + (bytecode_dir is not None)):
        result = subprocess.run([sys.executable, "-c", _COLD], capture_output=True, text=True,
                                timeout=60, check=True, env=env)
        if bytecode_dir is None or i:
            out.append(float(result.stdout.strip().splitlines()[-1]))
    return out


def row(name: str, values: list, target: float | None, use_max: bool = False) -> bool:
    median, worst = statistics.median(values), max(values)
    figure = worst if use_max else median
    met = target is None or figure < target
    verdict = "(info)" if target is None else (
        f"target {'max' if use_max else 'median'} < {target:.0f} ms: {'met' if met else 'NOT met'}")
    print(f"{name:<34}{median:>9.1f}{worst:>9.1f}  {verdict}", flush=True)
    return met


def main() -> None:
    print(f"{'':<34}{'median':>9}{'max':>9}  (ms, {RUNS} runs; busy shared machine: indicative)")
    ok = []
    ready, stop = sync_runs()
    ok.append(row("EmbeddedBroker start-to-ready", ready, TARGET_READY_MS))
    ok.append(row("EmbeddedBroker stop", stop, TARGET_STOP_MS))
    ok.append(row("EmbeddedBroker stop (worst)", stop, TARGET_STOP_MAX_MS, use_max=True))
    ready, stop = async_runs()
    ok.append(row("AsyncEmbeddedBroker start-to-ready", ready, TARGET_READY_MS))
    ok.append(row("AsyncEmbeddedBroker stop", stop, TARGET_STOP_MS))
    ready, stop = sync_runs(topics={"a": 1, "b": 1, "c": 3})
    row("  with 3 topics (5 partitions) ready", ready, None)
    row("  with 3 topics (5 partitions) stop", stop, None)
    row("cold: new interpreter, imports incl.", cold_runs(), None)
    with tempfile.TemporaryDirectory(prefix="kbroker-pyc-") as bytecode_dir:
        row("cold, with .pyc files", cold_runs(bytecode_dir), None)
    print(f"embedded targets: {sum(ok)}/{len(ok)} met")


if __name__ == "__main__":
    main()
