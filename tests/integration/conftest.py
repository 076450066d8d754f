"""Integration fixtures: a broker SUBPROCESS on a free loopback port, driven by real clients.

    def test_something(broker_process):
        broker = broker_process(num_partitions=3)     # overrides: dots or underscores
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        ...
        broker.kill(); broker.restart()               # SIGKILL, then start on the same dir/port

`broker_process([base_dir], **overrides)` starts `python -m broker config/server.properties`
with `--override`s for listeners (127.0.0.1, a free port), log.dirs (under base_dir, default
the test's tmp_path) and anything given; it returns once the port answers. Every broker started
by a test is stopped (SIGTERM, then SIGKILL) at teardown. The broker's output goes to
`<base_dir>/broker-<n>.out` (`broker.output()` reads it).

ZooKeeper (Debian's zookeeper package; see broker/testing/zookeeper.py):

    def test_zk_mode(zookeeper, broker_process):      # one server for the whole session
        broker = broker_process(zookeeper_connect=zookeeper.connect_string + "/test-zk-mode")

    def test_zk_restart(zookeeper_server):            # a server of the test's own
        zookeeper_server.kill(); zookeeper_server.start()   # same port, same data

Use a chroot (or unique paths) per test with the shared `zookeeper`. Both fixtures fail, naming
`make system-deps`, when Java or Debian's ZooKeeper is missing.
"""
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import pytest

from broker.testing.zookeeper import ZooKeeperServer, ZooKeeperUnavailable, java_executable

ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVER_PROPERTIES = ROOT / "config" / "server.properties"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class BrokerProcess:
    """One broker subprocess; `bootstrap` is "127.0.0.1:PORT"."""

    def __init__(self, base_dir, overrides: dict, index: int = 0):
        self.base_dir = pathlib.Path(base_dir)
        self.port = free_port()
        self.log_dir = str(self.base_dir / f"kafka-logs-{index}")
        self.out_path = self.base_dir / f"broker-{index}.out"
        self.overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
                          "log.dirs": self.log_dir}
        self.overrides.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
        self.log_dir = self.overrides["log.dirs"].split(",")[0].strip()
        self.proc = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list:
        cmd = [sys.executable, "-m", "broker", str(SERVER_PROPERTIES)]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def start(self) -> "BrokerProcess":
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        out = open(self.out_path, "ab")
        self.proc = subprocess.Popen(self.command(), cwd=ROOT, env=env, stdout=out,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        out.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.output()}")
            if _port_open(self.port):
                return self
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker did not listen within {START_TIMEOUT_S} s:\n{self.output()}")

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait; returns the exit code (SIGKILL if it does not exit in time)."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self) -> "BrokerProcess":
        if self.proc is not None and self.proc.poll() is None:
            self.stop()
        return self.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        try:
            return self.out_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


@pytest.fixture
def broker_process(tmp_path):
    started = []

    def start(base_dir=None, **overrides) -> BrokerProcess:
        broker = BrokerProcess(base_dir or tmp_path, overrides, index=len(started))
        started.append(broker)
        return broker.start()

    yield start
    for broker in started:
        try:
            broker.stop()
        except subprocess.TimeoutExpired:
            pass


@pytest.fixture
def kafka_broker(broker_process) -> BrokerProcess:
    """A broker with the default configuration (auto-create on, one partition per topic)."""
    return broker_process()


# ---- ZooKeeper ----

def _require_zookeeper() -> None:
    try:
        java_executable()
    except ZooKeeperUnavailable as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    """A ZooKeeper server shared by the session's tests (do not stop or restart it)."""
    _require_zookeeper()
    with ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")) as server:
        yield server


@pytest.fixture
def zookeeper_server(tmp_path):
    """A ZooKeeper server of the test's own, free to stop, kill and restart; stopped at teardown."""
    _require_zookeeper()
    with ZooKeeperServer(tmp_path / "zookeeper") as server:
        yield server
