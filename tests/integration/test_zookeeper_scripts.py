"""ZooKeeper as Kafka users run it (bin/zookeeper-*.sh, config/zookeeper.properties) and the
test harness for a real ZooKeeper (broker/testing/zookeeper.py), on Debian's zookeeper package.

Every server here listens on a free loopback port with its data under tmp_path, and only
processes the test started are stopped, by pid or by their own properties file."""
import contextlib
import os
import signal
import subprocess
import time

import pytest

from tests.integration.conftest import ROOT, free_port
from broker.testing.zookeeper import (ZooKeeperServer, ZooKeeperUnavailable, four_letter_word,
                                     java_executable)

pytestmark = pytest.mark.integration

BIN = ROOT / "bin"
COMMAND_TIMEOUT_S = 30


def run(*args, env=None, cwd=ROOT, timeout=COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (a reparented daemon may linger as one)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def java_pids_with_arg(arg: str) -> list:
    """The java processes with `arg` among their arguments (found via /proc)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == b"java" and arg.encode() in argv:
            pids.append(int(entry))
    return pids


def wait_until(predicate, timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def answers_srvr(port: int) -> bool:
    try:
        return four_letter_word(port, "srvr", timeout=1.0).startswith("Zookeeper version")
    except OSError:
        return False


@contextlib.contextmanager
def kazoo_client(server: ZooKeeperServer):
    from kazoo.client import KazooClient
    client = KazooClient(hosts=server.connect_string, timeout=10.0)
    client.start(timeout=15)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@pytest.fixture
def zookeeper_properties(tmp_path):
    """A copy of config/zookeeper.properties on a free loopback port, data under tmp_path."""
    try:
        java_executable()
    except ZooKeeperUnavailable as e:
        pytest.fail(str(e), pytrace=False)
    port = free_port()
    lines = []
    for line in (ROOT / "config" / "zookeeper.properties").read_text().splitlines():
        if line.startswith("dataDir="):
            line = f"dataDir={tmp_path / 'zookeeper-data'}"
        elif line.startswith("clientPort="):
            line = f"clientPort={port}"
        lines.append(line)
    lines.append("clientPortAddress=127.0.0.1")
    path = tmp_path / "zookeeper.properties"
    path.write_text("\n".join(lines) + "\n")
    return path, port


# ---- bin/zookeeper-server-start.sh, zookeeper-shell.sh, zookeeper-server-stop.sh ----

@pytest.mark.timeout(120)
def test_daemon_start_shell_and_stop(tmp_path, zookeeper_properties):
    """-daemon returns at once with the server in the background (output in $LOG_DIR), the shell
    runs single commands against it, and stop given the properties file stops exactly it."""
    properties, port = zookeeper_properties
    log_dir = tmp_path / "logs"
    env = dict(os.environ, LOG_DIR=str(log_dir), KAFKA_HEAP_OPTS="-Xmx256M")
    # a relative path from another directory: the stop script still finds the server by file
    started = run(BIN / "zookeeper-server-start.sh", "-daemon", properties.name, env=env,
                  cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    pids = []
    try:
        out = log_dir / "zookeeper.out"
        up = wait_until(lambda: answers_srvr(port), timeout=30)
        assert up, f"no answer on port {port}:\n{out.read_text() if out.exists() else ''}"
        pids = java_pids_with_arg(str(properties))
        assert len(pids) == 1, pids
        with open(f"/proc/{pids[0]}/cmdline", "rb") as f:
            argv = f.read().decode().split("\0")
        assert "org.apache.zookeeper.server.quorum.QuorumPeerMain" in argv
        assert "-Xmx256M" in argv and "-Xms512M" not in argv
        assert "Mode: standalone" in four_letter_word(port, "srvr")
        text = out.read_text()
        assert "binding to port /127.0.0.1:%d" % port in text and "INFO" in text

        server = f"127.0.0.1:{port}"
        ls = run(BIN / "zookeeper-shell.sh", server, "ls", "/")
        assert ls.returncode == 0, ls.stderr
        assert "[zookeeper]" in ls.stdout.splitlines()
        assert " INFO " not in ls.stdout and " WARN " not in ls.stdout
        assert "Exiting JVM" not in ls.stdout + ls.stderr

        created = run(BIN / "zookeeper-shell.sh", server, "create", "/kbroker-test", "hello")
        assert created.returncode == 0, created.stderr
        assert "Created /kbroker-test" in created.stdout + created.stderr
        got = run(BIN / "zookeeper-shell.sh", server, "get", "/kbroker-test")
        assert got.returncode == 0, got.stderr
        assert got.stdout.splitlines()[-1] == "hello"
        ls = run(BIN / "zookeeper-shell.sh", server + "/", "ls", "/")
        assert "[kbroker-test, zookeeper]" in ls.stdout.splitlines()
        missing = run(BIN / "zookeeper-shell.sh", server, "get", "/no-such-node")
        assert missing.returncode != 0
        assert "Node does not exist: /no-such-node" in missing.stdout + missing.stderr
        deleted = run(BIN / "zookeeper-shell.sh", server, "delete", "/kbroker-test")
        assert deleted.returncode == 0, deleted.stderr
        assert "[zookeeper]" in run(BIN / "zookeeper-shell.sh", server, "ls", "/").stdout

        # another properties file: nothing of ours is touched
        other = tmp_path / "other.properties"
        other.write_text(properties.read_text())
        untouched = run(BIN / "zookeeper-server-stop.sh", other)
        assert (untouched.returncode, untouched.stdout.strip()) == (1, "No zookeeper server to stop")
        assert answers_srvr(port)

        stopped = run(BIN / "zookeeper-server-stop.sh", properties)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert wait_until(lambda: not alive(pids[0]), timeout=15), "ZooKeeper still running"
        assert not answers_srvr(port)
        again = run(BIN / "zookeeper-server-stop.sh", properties)
        assert (again.returncode, again.stdout.strip()) == (1, "No zookeeper server to stop")
    finally:
        for pid in pids or java_pids_with_arg(str(properties)):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(60)
def test_foreground_start_exits_on_sigterm(zookeeper_properties):
    """Without -daemon the script execs the JVM: the pid is ZooKeeper's, logging is on stdout."""
    properties, port = zookeeper_properties
    env = dict(os.environ, KAFKA_HEAP_OPTS="-Xmx256M")
    proc = subprocess.Popen([str(BIN / "zookeeper-server-start.sh"), str(properties)], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: answers_srvr(port) or proc.poll() is not None, timeout=30)
        assert proc.poll() is None
        assert java_pids_with_arg(str(properties)) == [proc.pid]
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
        output = proc.stdout.read().decode(errors="replace")
        assert "Reading configuration from: %s" % properties in output
        assert "/var/log/zookeeper" not in output and "log4j:ERROR" not in output
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()


def test_scripts_print_usage_without_arguments():
    for args in ([], ["-daemon"]):
        r = run(BIN / "zookeeper-server-start.sh", *args)
        assert r.returncode == 1
        assert r.stderr.startswith("USAGE: ") and "[-daemon] zookeeper.properties" in r.stderr
    r = run(BIN / "zookeeper-shell.sh")
    assert r.returncode == 1 and "zookeeper_host:port[/path]" in r.stderr


def test_start_with_missing_properties_file(tmp_path):
    r = run(BIN / "zookeeper-server-start.sh", tmp_path / "nope.properties")
    assert r.returncode == 1 and "no such file" in r.stderr


def test_scripts_without_java_name_make_system_deps(tmp_path):
    env = dict(os.environ, JAVA_HOME=str(tmp_path / "no-jdk"))
    for script, args in (("zookeeper-server-start.sh", [ROOT / "config" / "zookeeper.properties"]),
                         ("zookeeper-shell.sh", ["127.0.0.1:2181", "ls", "/"])):
        r = run(BIN / script, *args, env=env)
        assert r.returncode == 1, script
        assert r.stdout == ""
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and "make system-deps" in lines[0] and "zookeeper" in lines[0]


# ---- the harness ----

def test_session_fixture_answers_four_letter_words(zookeeper):
    srvr = four_letter_word(zookeeper.port, "srvr")
    assert srvr.startswith("Zookeeper version: 3.") and "Mode: standalone" in srvr
    assert four_letter_word(zookeeper.port, "ruok") == "imok"
    assert zookeeper.connect_string == f"127.0.0.1:{zookeeper.port}"
    conf = four_letter_word(zookeeper.port, "conf")
    assert "tickTime=2000" in conf and f"clientPort={zookeeper.port}" in conf


@pytest.mark.timeout(120)
def test_harness_restart_and_kill_keep_znodes(zookeeper_server):
    server = zookeeper_server
    port, first_pid = server.port, server.pid
    with kazoo_client(server) as zk:
        zk.create("/harness/node", b"v1", makepath=True)

    server.stop()
    assert not alive(first_pid) and not answers_srvr(port)
    server.start()
    assert server.port == port and server.pid != first_pid
    with kazoo_client(server) as zk:
        assert zk.get("/harness/node")[0] == b"v1"
        zk.set("/harness/node", b"v2")

    killed_pid = server.pid
    server.kill()  # SIGKILL: no clean shutdown, the transaction log has the write
    assert not alive(killed_pid)
    server.start()
    with kazoo_client(server) as zk:
        assert zk.get("/harness/node")[0] == b"v2"
        assert sorted(zk.get_children("/")) == ["harness", "zookeeper"]


@pytest.mark.timeout(60)
def test_harness_context_manager_and_session_timeouts(tmp_path):
    with ZooKeeperServer(tmp_path, min_session_timeout=1000, max_session_timeout=6000) as server:
        pid = server.pid
        conf = four_letter_word(server.port, "conf")
        assert "minSessionTimeout=1000" in conf and "maxSessionTimeout=6000" in conf
        with kazoo_client(server) as zk:
            assert zk.get_children("/") == ["zookeeper"]
    assert not alive(pid) and not server.running()
    assert (tmp_path / "zoo.cfg").read_text().startswith("tickTime=2000\n")
    assert "binding to port /127.0.0.1:%d" % server.port in server.output()


def test_harness_names_make_system_deps_without_java(monkeypatch, tmp_path):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    with pytest.raises(ZooKeeperUnavailable, match="make system-deps"):
        ZooKeeperServer(tmp_path).start()
