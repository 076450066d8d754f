"""The processes a test starts (ZooKeeper, brokers) end when the test's process dies without
stopping them (broker/testing/reaper.py)."""
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from broker.testing import reaper

ROOT = pathlib.Path(__file__).resolve().parents[2]


def alive(pid: int) -> bool:
    return reaper.start_time(pid) is not None and _state(pid) != "Z"


def _state(pid: int) -> str | None:
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()[0]


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def run_parent(code: str, tmp_path) -> tuple[subprocess.Popen, list[int]]:
    """A Python process that runs `code` (which starts children and writes their pids, one per
    line, to the file `pids`), then waits to be killed."""
    pids_file = tmp_path / "pids"
    script = textwrap.dedent(code) + textwrap.dedent(f"""
        import pathlib, time
        pathlib.Path({str(pids_file)!r} + ".tmp").write_text(
            "".join(f"{{p}}\\n" for p in pids))
        pathlib.Path({str(pids_file)!r} + ".tmp").rename({str(pids_file)!r})
        time.sleep(120)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 60
    while not pids_file.exists():
        if parent.poll() is not None or time.monotonic() > deadline:
            parent.kill()
            pytest.fail(f"the parent process did not start its children (rc {parent.poll()})")
        time.sleep(0.05)
    return parent, [int(p) for p in pids_file.read_text().split()]


def test_children_are_killed_when_their_parent_is_killed(tmp_path):
    parent, pids = run_parent("""
        import subprocess
        from broker.testing.reaper import watch
        children = [subprocess.Popen(["sleep", "300"]) for _ in range(2)]
        for child in children:
            watch(child)
        pids = [c.pid for c in children]
    """, tmp_path)
    try:
        assert all(alive(pid) for pid in pids)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        for pid in pids:
            assert wait_gone(pid), f"child {pid} outlived its killed parent"
    finally:
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_reused_pid_is_not_killed(tmp_path):
    """A registered child that ended is not killed again: its pid may now be another
    process's (its start time tells them apart)."""
    other = subprocess.Popen(["sleep", "300"])
    try:
        killed = reaper.reap({other.pid: "1"})      # same pid, another start time
        assert killed == [] and alive(other.pid)
        killed = reaper.reap({other.pid: reaper.start_time(other.pid)})
        assert killed == [other.pid]
        other.wait(10)
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()


def test_a_child_the_test_stopped_leaves_the_reaper_quiet(tmp_path):
    """The parent stops one child itself and exits normally: the reaper kills only the one
    left running, and ends."""
    parent, pids = run_parent("""
        import subprocess
        from broker.testing import reaper
        stopped = subprocess.Popen(["sleep", "300"]); reaper.watch(stopped)
        left = subprocess.Popen(["sleep", "300"]); reaper.watch(left)
        stopped.kill(); stopped.wait()
        pids = [left.pid, reaper._reaper.pid]
    """, tmp_path)
    left, reaper_pid = pids
    try:
        parent.terminate()
        parent.wait(10)
        assert wait_gone(left)
        assert wait_gone(reaper_pid)
    finally:
        if alive(left):
            os.kill(left, signal.SIGKILL)


def test_zookeeper_of_a_killed_test_process_ends(tmp_path):
    """The real case: a test process started ZooKeeper (a JVM) and was killed with -9."""
    from broker.testing.zookeeper import ZooKeeperUnavailable, java_executable
    try:
        java_executable()
    except ZooKeeperUnavailable as exc:
        pytest.skip(str(exc))
    parent, pids = run_parent(f"""
        from broker.testing.zookeeper import ZooKeeperServer
        server = ZooKeeperServer({str(tmp_path / "zk")!r}).start()
        pids = [server.proc.pid]
    """, tmp_path)
    (zk_pid,) = pids
    try:
        assert alive(zk_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        assert wait_gone(zk_pid), "ZooKeeper outlived the test process that started it"
    finally:
        if alive(zk_pid):
            os.kill(zk_pid, signal.SIGKILL)
