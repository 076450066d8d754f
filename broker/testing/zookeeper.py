"""A real ZooKeeper server (Debian's zookeeper package, 3.8) as a subprocess on a free loopback port
(for tests: broker/testing/cluster.py, tests/integration).

    with ZooKeeperServer(tmp_path) as zk:            # starts; stops at exit
        client = KazooClient(hosts=zk.connect_string)
        ...
        zk.kill(); zk.start()                        # SIGKILL, then the same port and data dir

`ZooKeeperServer(base_dir, tick_time=2000, min_session_timeout=None, max_session_timeout=None)`
writes `<base_dir>/zoo.cfg` (data in `<base_dir>/data`, client port on 127.0.0.1, admin server
off, every four-letter word allowed) and runs `java ... ZooKeeperServerMain zoo.cfg` directly, so
`pid` is the JVM's own. ZooKeeper's session timeouts default to 2 and 20 tick times (4 s and
40 s with tickTime=2000); pass min/max_session_timeout (ms) to allow others, e.g. a broker's 6 s
`zookeeper.session.timeout.ms` with tickTime=2000 is already inside the defaults.
`start()` returns once the server answers the `srvr` four-letter word (30 s at most, the log's
tail in the error). The server's output goes to `<base_dir>/zookeeper.log` (`output()` reads
it), appended to across restarts.

Servers run ZooKeeperServerMain, not QuorumPeerMain, so bin/zookeeper-server-stop.sh never
stops one of them.
"""
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import time

from broker.testing.reaper import watch

ZK_JARS = pathlib.Path("/usr/share/java")
ZK_CONF_DIR = pathlib.Path("/etc/zookeeper/conf")
# zookeeper.jar's manifest brings its own dependencies; log4j (through slf4j-log4j12) with
# Debian's log4j.properties, root logger INFO,CONSOLE, writes the log to stdout.
CLASSPATH = os.pathsep.join(str(p) for p in (
    ZK_CONF_DIR, ZK_JARS / "zookeeper.jar", ZK_JARS / "slf4j-log4j12.jar", ZK_JARS / "log4j-1.2.jar"))
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
MISSING_HINT = "install Debian's zookeeper package (run `make system-deps`, as `make test` does)"


class ZooKeeperUnavailable(RuntimeError):
    """Java or Debian's ZooKeeper jars are not installed."""


def java_executable() -> str:
    """JAVA_HOME's java, else the one on PATH; raises ZooKeeperUnavailable when there is none."""
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        raise ZooKeeperUnavailable(f"{java or 'java'} not found: {MISSING_HINT}")
    if not (ZK_JARS / "zookeeper.jar").is_file():
        raise ZooKeeperUnavailable(f"{ZK_JARS / 'zookeeper.jar'} not found: {MISSING_HINT}")
    return java


_GIVEN: set = set()          # ports free_port handed out in this process


def free_port() -> int:
    """A loopback port free now and not handed out before by this process: the OS may give a
    just-closed port twice, and a cluster picks its ZooKeeper's and its brokers' ports before
    any of them binds (CI saw broker 0 get its ZooKeeper's port)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _GIVEN:
            break
    _GIVEN.add(port)
    return port


def four_letter_word(port: int, word: str = "srvr", timeout: float = 2.0,
                     host: str = "127.0.0.1") -> str:
    """Sends a four-letter word (srvr, ruok, mntr, ...) and returns the answer ('' if none)."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word.encode("ascii"))
        chunks = []
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return b"".join(chunks).decode("utf-8", "replace")
            chunks.append(chunk)


class ZooKeeperServer:
    """One standalone ZooKeeper server; `connect_string` is "127.0.0.1:PORT"."""

    def __init__(self, base_dir, tick_time: int = 2000, min_session_timeout: int = None,
                 max_session_timeout: int = None, heap: str = "-Xmx256m"):
        self.base_dir = pathlib.Path(base_dir)
        self.data_dir = self.base_dir / "data"
        self.config_path = self.base_dir / "zoo.cfg"
        self.log_path = self.base_dir / "zookeeper.log"
        self.tick_time = tick_time
        self.min_session_timeout = min_session_timeout
        self.max_session_timeout = max_session_timeout
        self.heap = heap
        self.port = free_port()
        self.proc = None

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def write_config(self) -> None:
        lines = [
            f"tickTime={self.tick_time}",
            f"dataDir={self.data_dir}",
            f"clientPort={self.port}",
            "clientPortAddress=127.0.0.1",
            "admin.enableServer=false",
            "4lw.commands.whitelist=*",
            "maxClientCnxns=0",
        ]
        if self.min_session_timeout is not None:
            lines.append(f"minSessionTimeout={self.min_session_timeout}")
        if self.max_session_timeout is not None:
            lines.append(f"maxSessionTimeout={self.max_session_timeout}")
        self.config_path.write_text("\n".join(lines) + "\n")

    def command(self) -> list:
        return [java_executable(), self.heap, "-Djava.awt.headless=true",
                "-Dzookeeper.root.logger=INFO,CONSOLE", f"-Dzookeeper.log.dir={self.base_dir}",
                "-cp", CLASSPATH, MAIN_CLASS, str(self.config_path)]

    def start(self, timeout: float = START_TIMEOUT_S) -> "ZooKeeperServer":
        """Starts the server (again: same port, same data) and waits until it answers `srvr`."""
        if self.running():
            return self
        command = self.command()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(exist_ok=True)
        self.write_config()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(command, cwd=self.base_dir, stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        watch(self.proc)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}:\n"
                                   f"{self.output_tail()}")
            try:
                if four_letter_word(self.port, "srvr", timeout=1.0).startswith("Zookeeper version"):
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"ZooKeeper did not answer `srvr` on {self.connect_string} within "
                           f"{timeout} s:\n{self.output_tail()}")

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait; SIGKILL if it is still running after `timeout`. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: a crash; ZooKeeper's transaction log keeps every acknowledged write."""
        if self.running():
            self.proc.kill()
            self.proc.wait(10)

    def restart(self) -> "ZooKeeperServer":
        self.stop()
        return self.start()

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def output_tail(self, lines: int = 40) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def __enter__(self) -> "ZooKeeperServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running() else "stopped"
        return f"ZooKeeperServer({self.connect_string}, {state}, {self.base_dir})"
