"""Ends the processes a test started (ZooKeeper, brokers) when the test's own process dies
without stopping them: `kill -9` of pytest, a CI job's timeout, an interpreter crash. Without it
they would run on, holding their ports, data dirs and CPU, until someone finds their pids.

    from broker.testing.reaper import watch
    proc = subprocess.Popen([...])
    watch(proc)

The first `watch` in a process starts `python -m broker.testing.reaper` with a pipe on its
stdin and sends it one line per child, "PID START_TIME" (the start time from /proc/PID/stat,
so a pid the kernel has handed to another process since is never killed). The reaper reads
until end of file, which comes when every copy of the pipe's write end is closed: when this
process exits, however it exits. It then sends SIGKILL to every child still alive. A child a
test stopped itself is already gone; one it left running is a leak either way. Unlike the
kernel's parent-death signal, this does not depend on which thread started the child.

Linux only (it reads /proc; elsewhere `watch` does nothing). A child this process made with
os.fork() and no exec (multiprocessing's fork start method) holds the pipe too: the reaper
then acts once that one exits as well.

The reaper ignores SIGINT and SIGHUP (Ctrl-C or a closed terminal reaches the whole foreground
process group; the test's own finalizers stop the children, and the reaper must outlive them to
catch what they miss).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

_lock = threading.Lock()
_reaper: subprocess.Popen | None = None
_reaper_owner: int | None = None        # the pid that started it (a fork does not inherit it)


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or None
    when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces or parentheses
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None


def watch(proc: subprocess.Popen) -> None:
    """Has `proc` killed when this process dies. Best effort: a failure to start the reaper is
    not the test's failure (the child is only left behind, as without a reaper)."""
    global _reaper, _reaper_owner
    started = start_time(proc.pid)
    if started is None:
        return
    with _lock:
        try:
            if _reaper is None or _reaper_owner != os.getpid() or _reaper.poll() is not None:
                _reaper = subprocess.Popen(
                    [sys.executable, "-m", "broker.testing.reaper"], stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL, close_fds=True,
                    env={**os.environ, "PYTHONPATH": os.pathsep.join(
                        p for p in (_package_root(), os.environ.get("PYTHONPATH")) if p)})
                _reaper_owner = os.getpid()
            _reaper.stdin.write(f"{proc.pid} {started}\n".encode())
            _reaper.stdin.flush()
        except OSError:
            pass


def _package_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def reap(children: dict[int, str]) -> list[int]:
    """SIGKILLs each child whose start time is still the one registered; returns their pids."""
    killed = []
    for pid, started in children.items():
        if start_time(pid) == started:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except OSError:
                pass
    return killed


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    children: dict[int, str] = {}
    for line in sys.stdin.buffer:
        try:
            pid, started = line.split()
            children[int(pid)] = started.decode()
        except ValueError:
            continue
    reap(children)


if __name__ == "__main__":
    main()
