"""The broker as a process: start, graceful stop, bad configuration, bad input from the network."""
import os
import signal
import socket
import struct
import subprocess
import sys
import time

import pytest

from tests.integration.conftest import ROOT, SERVER_PROPERTIES, free_port

pytestmark = pytest.mark.integration


def api_versions_frame(correlation_id=1, version=0) -> bytes:
    body = struct.pack(">hhih", 18, version, correlation_id, 4) + b"test"
    return struct.pack(">i", len(body)) + body


def read_frame(sock) -> bytes:
    def exactly(n):
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data
    size = struct.unpack(">i", exactly(4))[0]
    return exactly(size)


def api_versions_works(port) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(api_versions_frame(7))
        body = read_frame(s)
        return struct.unpack(">ih", body[:6]) == (7, 0)


def wait_until_serving(port, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if api_versions_works(port):
                return
        except OSError:
            time.sleep(0.1)
    assert api_versions_works(port)


def closed_by_broker(sock, timeout=5.0) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def _checkpoint(log_dir, name) -> dict:
    lines = open(os.path.join(log_dir, name)).read().split("\n")
    assert lines[0] == "0" and int(lines[1]) == len([x for x in lines[2:] if x])
    return {(t, int(p)): int(o) for t, p, o in (x.split() for x in lines[2:] if x)}


def test_sigterm_is_graceful(broker_process):
    """Stored data, a consumer parked in a long poll and an idle connection: SIGTERM answers
    the poll, writes the checkpoints and the clean-shutdown marker, exits 0 within 10 s."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    broker = broker_process()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic("kept", 2, 1)]).values():
        future.result(timeout=15)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(300):
        producer.produce("kept", b"%d" % i, partition=i % 2)
    assert producer.flush(15) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x",
                         "fetch.wait.max.ms": 5000, "enable.auto.commit": False})
    consumer.assign([TopicPartition("kept", 0, 150)])        # at the end: parks in a long poll
    assert consumer.consume(10, 1.0) == []
    conn = socket.create_connection(("127.0.0.1", broker.port))

    start = time.monotonic()
    assert broker.stop() == 0
    assert time.monotonic() - start < 10
    assert os.path.exists(os.path.join(broker.log_dir, ".kafka_cleanshutdown"))
    expected = {("kept", 0): 150, ("kept", 1): 150}
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
        offsets = _checkpoint(broker.log_dir, name)
        assert {k: v for k, v in offsets.items() if k[0] == "kept"} == expected, name
    assert {k: v for k, v in _checkpoint(broker.log_dir, "log-start-offset-checkpoint").items()
            if k[0] == "kept"} in ({}, {("kept", 0): 0, ("kept", 1): 0})
    assert closed_by_broker(conn)
    output = broker.output()
    assert "shut down completed" in output and "Error while" not in output
    assert "[" in output.splitlines()[0] and "] INFO " in output      # Kafka-like log lines
    conn.close()
    consumer.close()

    broker.restart()                                  # clean restart: everything still there
    low_high = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "y"})
    assert low_high.get_watermark_offsets(TopicPartition("kept", 1), timeout=10) == (0, 150)
    low_high.close()


def test_sigint_is_graceful_and_restart_keeps_cluster_id(broker_process):
    broker = broker_process()
    broker.proc.send_signal(signal.SIGINT)
    assert broker.proc.wait(10) == 0
    meta = open(os.path.join(broker.log_dir, "meta.properties")).read()
    broker.restart()
    assert api_versions_works(broker.port)
    assert open(os.path.join(broker.log_dir, "meta.properties")).read() == meta


def test_sighup_is_graceful_and_sigquit_dumps_stacks(broker_process):
    """As Kafka's (a JVM): SIGQUIT prints every thread's stack and the broker goes on; SIGHUP
    (the terminal closed) shuts down cleanly, exit 0, the clean-shutdown marker written."""
    broker = broker_process()
    broker.proc.send_signal(signal.SIGQUIT)
    deadline = time.monotonic() + 10
    while "most recent call first" not in broker.output() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "most recent call first" in broker.output()
    assert broker.proc.poll() is None and api_versions_works(broker.port)
    broker.proc.send_signal(signal.SIGHUP)
    assert broker.proc.wait(10) == 0
    assert os.path.exists(os.path.join(broker.log_dir, ".kafka_cleanshutdown"))


def test_command_line_errors_exit_1_and_version(tmp_path):
    python = [sys.executable, "-m", "broker"]
    r = subprocess.run(python + ["x.properties", "--no-such-flag"], capture_output=True, text=True,
                       cwd=ROOT)
    assert r.returncode == 1 and "--no-such-flag" in r.stderr
    r = subprocess.run(python + ["--version"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.strip()
    # log levels as Kafka names them: TRACE and OFF too (they crashed start-up)
    r = subprocess.run(python + [str(tmp_path / "missing.properties")], capture_output=True,
                       text=True, cwd=ROOT, env=dict(os.environ, KBROKER_LOG_LEVEL="TRACE"))
    assert r.returncode == 1 and "Traceback" not in r.stderr and "missing.properties" in r.stderr


def test_sigterm_during_startup_is_graceful(tmp_path):
    """A signal as soon as start-up begins (log recovery would be running) still ends in a clean
    shutdown with exit status 0, not a killed process."""
    log_dir = tmp_path / "logs"
    cmd = [sys.executable, "-m", "broker", str(SERVER_PROPERTIES), "--override",
           f"listeners=PLAINTEXT://127.0.0.1:{free_port()}", "--override", f"log.dirs={log_dir}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        for line in proc.stderr:
            if "starting" in line:
                break
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    assert os.path.exists(log_dir / ".kafka_cleanshutdown")


@pytest.mark.parametrize("setting", [
    "num.partitions=zero",
    "zookeeper.connect=localhost:abc",            # a kazoo traceback before
    "replica.lag.time.max.ms=0",                  # a broker spinning a core before
    "broker.id=5000",
    "listeners=",                                 # a broker listening nowhere before
])
def test_invalid_config_stops_startup_with_one_line(tmp_path, setting):
    cmd = [sys.executable, "-m", "broker", str(SERVER_PROPERTIES), "--override",
           setting, "--override", f"log.dirs={tmp_path}"]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kbroker: ") and "configuration" in lines[0]
    assert os.listdir(tmp_path) == []


def test_zookeeper_connect_is_refused_until_the_backend_exists(tmp_path):
    cmd = [sys.executable, "-m", "broker", str(SERVER_PROPERTIES), "--override",
           "zookeeper.connect=127.0.0.1:2181", "--override", f"log.dirs={tmp_path}",
           "--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}"]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    [line] = [x for x in result.stderr.splitlines() if x.startswith("kbroker:")]
    assert "zookeeper.connect" in line and "Traceback" not in result.stderr


def test_unknown_config_is_a_warning(broker_process):
    broker = broker_process(**{"made.up.setting": "1"})
    assert api_versions_works(broker.port)
    assert "made.up.setting" in broker.output() and "WARN" in broker.output()


def test_bad_input_never_crashes_the_broker(broker_process):
    broker = broker_process(socket_request_max_bytes=10000)
    bystander = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
    bystander.sendall(api_versions_frame(1))
    read_frame(bystander)
    attacks = [
        b"\x00\x00\x00\x08" + os.urandom(8),                          # garbage frame
        struct.pack(">i", 20000) + b"\x00" * 100,                     # oversized frame
        b"\xff\xff\xff\xff",                                          # negative size
        struct.pack(">i", 10) + struct.pack(">hhih", 12345, 0, 1, 0),  # unknown api key
        struct.pack(">i", 10) + struct.pack(">hhih", 3, 99, 1, 0),     # unknown version
    ]
    for attack in attacks:
        s = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
        s.sendall(attack)
        assert closed_by_broker(s), attack
        s.close()
    bystander.sendall(api_versions_frame(2))
    assert struct.unpack(">i", read_frame(bystander)[:4])[0] == 2
    assert api_versions_works(broker.port)
    assert broker.proc.poll() is None
    assert "larger than socket.request.max.bytes" in broker.output()
    bystander.close()


def test_unsupported_api_versions_version_gets_v0_answer(broker_process):
    broker = broker_process()
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as s:
        s.sendall(api_versions_frame(3, version=77))
        body = read_frame(s)
        correlation_id, error_code = struct.unpack(">ih", body[:6])
        assert (correlation_id, error_code) == (3, 35)             # UNSUPPORTED_VERSION
        assert struct.unpack(">i", body[6:10])[0] >= 10            # the list of APIs follows


def test_bin_scripts_start_and_stop(tmp_path):
    """As Kafka's scripts: the log lines on stdout and in $LOG_DIR/server.log (the log cleaner's
    in log-cleaner.log only); kafka-server-stop.sh finds the broker by its command line."""
    from broker.tools.server_stop import running_brokers
    port = free_port()
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    start = subprocess.Popen(
        [str(ROOT / "bin" / "kafka-server-start.sh"), str(SERVER_PROPERTIES), "--override",
         f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={tmp_path}/logs"],
        stdout=open(out, "wb"), stderr=open(err, "wb"),
        env=dict(os.environ, KBROKER_PYTHON=sys.executable, LOG_DIR=str(tmp_path / "applogs")))
    try:
        wait_until_serving(port)
        # kafka-server-stop.sh would signal every broker: other tests' brokers may be running,
        # so check it finds ours, and signal only ours
        assert start.pid in [pid for pid, _, _ in running_brokers()]
        os.kill(start.pid, signal.SIGTERM)
        assert start.wait(10) == 0
    finally:
        if start.poll() is None:
            start.kill()
            start.wait(5)
    server_log = (tmp_path / "applogs" / "server.log").read_text()
    assert "started (broker.server)" in server_log and "shut down completed" in server_log
    assert "no zookeeper.connect: running as a single broker" in server_log
    assert "KafkaConfig values: \n\tadvertised.listeners = null\n" in server_log
    assert f"\tlisteners = PLAINTEXT://127.0.0.1:{port}\n" in server_log     # a STRING in Kafka
    assert "] INFO " in out.read_text() and err.read_text() == ""
    assert (tmp_path / "applogs" / "log-cleaner.log").exists()
    assert "kbroker.log_cleaner" not in server_log          # Kafka's additivity=false


def test_stop_script_with_node_id_stops_only_that_broker(tmp_path):
    """kafka-server-stop.sh --node-id=N (Kafka 3.9's option): only the broker whose node.id /
    broker.id is N, read from its properties file (relative to its working directory) or an
    --override, gets the signal; the README's brokers on one machine are stopped one by one.
    Unusual ids: the test must not stop anyone else's broker."""
    props = tmp_path / "mine.properties"
    props.write_text(SERVER_PROPERTIES.read_text() + "\nbroker.id=901\n")
    starts = []
    try:
        for i, extra in enumerate(([], ["--override", "broker.id=902"])):
            port = free_port()
            starts.append((port, subprocess.Popen(
                [str(ROOT / "bin" / "kafka-server-start.sh"), "mine.properties", "--override",
                 f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override",
                 f"log.dirs={tmp_path}/logs-{i}", *extra], cwd=tmp_path,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env=dict(os.environ, KBROKER_PYTHON=sys.executable,
                         LOG_DIR=str(tmp_path / f"applogs-{i}")))))
        for port, _ in starts:
            wait_until_serving(port)
        r = subprocess.run([str(ROOT / "bin" / "kafka-server-stop.sh"), "--node-id=902"],
                           capture_output=True, text=True, timeout=30)
        assert (r.returncode, r.stdout) == (0, ""), r
        assert starts[1][1].wait(20) == 0
        assert starts[0][1].poll() is None and api_versions_works(starts[0][0])
        r = subprocess.run([str(ROOT / "bin" / "kafka-server-stop.sh"), "--node-id=901",
                            "--process-role=broker"], capture_output=True, text=True,
                           timeout=30, env=dict(os.environ, SIGNAL="INT"))
        assert r.stdout == ("When both node-id and process-role are provided, the value for "
                            "node-id will take precedence\n")
        assert starts[0][1].wait(20) == 0
    finally:
        for _, proc in starts:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)


def test_stop_script_reads_each_brokers_settings():
    from broker.tools.server_stop import setting
    assert setting(["a.properties", "--override", "broker.id=3"], "/nonexistent", "broker.id") == "3"
    assert setting(["--override=node.id=4", "x"], "/nonexistent", "node.id") == "4"
    assert setting(["missing.properties"], "/nonexistent", "broker.id") is None
    assert setting([str(SERVER_PROPERTIES)], "/", "broker.id") == "0"
