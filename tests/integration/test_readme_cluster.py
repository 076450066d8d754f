"""The README's three-broker cluster, step by step with the bin/ scripts (Kafka's tutorial step
6): ZooKeeper first, server.properties copied for brokers 0, 1 and 2 with the README's edits, a
topic with replication factor 3, describe, produce, consume, kill -9 of the leader, describe
again from all three bootstrap servers (a new leader, the ISR without it), consume everything,
restart it, and it rejoins the ISR.

Ports and directories are the test's own (free loopback ports, tmp_path), and the ZooKeeper
session is 6 s instead of 18 s so the failover takes seconds; everything else is as written."""
import json
import os
import re
import signal
import subprocess
import time

import pytest

from broker.testing.zookeeper import ZooKeeperServer, free_port

from tests.integration.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BIN = ROOT / "bin"


def run(*args, input=None, timeout=60, check=True):
    result = subprocess.run([str(BIN / args[0]), *args[1:]], input=input, capture_output=True,
                            text=True, timeout=timeout, cwd=ROOT)
    if check:
        assert result.returncode == 0, result.stderr
    return result.stdout


def describe(bootstrap):
    out = run("kafka-topics.sh", "--bootstrap-server", bootstrap, "--describe", "--topic",
              "my-replicated-topic")
    line = [l for l in out.splitlines() if "Partition: 0" in l][0]
    fields = dict(re.findall(r"(\w+): ([\d,]+|none)", line))
    return int(fields["Leader"]), fields["Replicas"], fields["Isr"]


def test_tutorial_step_6_on_three_brokers(tmp_path):
    zk = ZooKeeperServer(tmp_path / "zookeeper").start()
    ports = [free_port() for _ in range(3)]
    procs = {}
    config = tmp_path / "config"
    config.mkdir()
    base = (ROOT / "config" / "server.properties").read_text()

    def properties(broker_id):
        text = base.replace("#zookeeper.connect=localhost:2181",
                            f"zookeeper.connect={zk.connect_string}")
        text = text.replace("broker.id=0", f"broker.id={broker_id}")
        text = text.replace("127.0.0.1:9092", f"127.0.0.1:{ports[broker_id]}")
        text = re.sub(r"(?m)^log.dirs=.*$", f"log.dirs={tmp_path}/kafka-logs-{broker_id}", text)
        for key, value in (("offsets.topic.replication.factor", 3),
                           ("transaction.state.log.replication.factor", 3),
                           ("transaction.state.log.min.isr", 2)):
            text, n = re.subn(rf"(?m)^{re.escape(key)}=1$", f"{key}={value}", text)
            assert n == 1, key                  # the README's sed finds it
        name = f"server-{broker_id}.properties"
        (config / name).write_text(text)
        return config / name

    def start(broker_id):
        env = dict(os.environ, LOG_DIR=str(tmp_path / f"logs-{broker_id}"))
        procs[broker_id] = subprocess.Popen(
            [str(BIN / "kafka-server-start.sh"), str(properties(broker_id)),
             "--override", "zookeeper.session.timeout.ms=6000",
             "--override", "controlled.shutdown.retry.backoff.ms=500"],
            cwd=ROOT, env=env, stdout=open(tmp_path / f"broker-{broker_id}.out", "ab"),
            stderr=subprocess.STDOUT)

    def registered():
        out = run("zookeeper-shell.sh", zk.connect_string, "ls", "/brokers/ids", check=False)
        last = out.strip().splitlines()[-1] if out.strip() else ""
        if not last.startswith("["):
            return set()                    # no /brokers/ids yet
        return {int(x) for x in re.findall(r"\d+", last)}

    try:
        for broker_id in range(3):
            start(broker_id)
        deadline = time.monotonic() + 60
        while registered() != {0, 1, 2}:
            assert time.monotonic() < deadline, "brokers did not register"
            time.sleep(0.5)
        bootstrap = f"127.0.0.1:{ports[0]}"
        run("kafka-topics.sh", "--bootstrap-server", bootstrap, "--create", "--topic",
            "my-replicated-topic", "--partitions", "1", "--replication-factor", "3")
        leader, replicas, isr = describe(bootstrap)
        assert sorted(map(int, replicas.split(","))) == [0, 1, 2]
        assert isr.split(",") == replicas.split(",") and leader == int(replicas.split(",")[0])
        run("kafka-console-producer.sh", "--bootstrap-server", bootstrap, "--topic",
            "my-replicated-topic", input="my test message 1\nmy test message 2\n")
        out = run("kafka-console-consumer.sh", "--bootstrap-server", bootstrap,
                  "--from-beginning", "--topic", "my-replicated-topic", "--max-messages", "2",
                  timeout=90)
        assert out.splitlines() == ["my test message 1", "my test message 2"]
        procs[leader].send_signal(signal.SIGKILL)
        procs[leader].wait(10)
        bootstrap = ",".join(f"127.0.0.1:{port}" for port in ports)      # as the README
        deadline = time.monotonic() + 30
        while True:
            new_leader, _, new_isr = describe(bootstrap)
            if new_leader not in (leader, -1) and str(leader) not in new_isr.split(","):
                break
            assert time.monotonic() < deadline, "no new leader after kill -9"
            time.sleep(0.5)
        assert sorted(map(int, new_isr.split(","))) == sorted(set(range(3)) - {leader})
        # The describe filters see it too: under-replicated, not unavailable.
        out = run("kafka-topics.sh", "--bootstrap-server", bootstrap, "--describe",
                  "--under-replicated-partitions")
        assert "my-replicated-topic\tPartition: 0" in out
        out = run("kafka-topics.sh", "--bootstrap-server", bootstrap, "--describe",
                  "--unavailable-partitions")
        assert "my-replicated-topic" not in out
        out = run("kafka-console-consumer.sh", "--bootstrap-server", bootstrap,
                  "--from-beginning", "--topic", "my-replicated-topic", "--max-messages", "2",
                  timeout=90)
        assert out.splitlines() == ["my test message 1", "my test message 2"]
        # The killed broker comes back (once its old session is gone) and rejoins the ISR.
        while leader in registered():
            assert time.monotonic() < deadline + 30, "the dead broker's session did not expire"
            time.sleep(0.5)
        start(leader)
        deadline = time.monotonic() + 60
        while sorted(describe(bootstrap)[2].split(",")) != ["0", "1", "2"]:
            assert time.monotonic() < deadline, "the restarted broker did not rejoin the ISR"
            time.sleep(0.5)
        state = json.loads(run("zookeeper-shell.sh", zk.connect_string, "get",
                               "/brokers/topics/my-replicated-topic/partitions/0/state"
                               ).splitlines()[-1])
        assert sorted(state["isr"]) == [0, 1, 2] and state["leader_epoch"] >= 1
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        zk.stop()
