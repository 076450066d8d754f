"""A Kafka cluster on this machine for tests: ZooKeeper and N broker processes on free
loopback ports, with the faults a cluster meets.

    with KafkaCluster(3) as cluster:
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
        ...
        leader = cluster.leader("orders", 0)
        cluster.kill(leader)                       # SIGKILL: a crash
        cluster.wait_for_leader("orders", 0, not_in={leader})
        cluster.restart(leader)

Faults: `kill(id)` (SIGKILL), `pause(id)` / `resume(id)` (SIGSTOP / SIGCONT: a process that
stalls, as in a long GC pause), `stop(id)` (SIGTERM: a controlled shutdown), `start(id)`,
`restart(id)`; ZooKeeper itself with `cluster.zookeeper.kill()` / `.start()`. Observation
from ZooKeeper, as Kafka's own system tests do: `leader(topic, p)`, `isr(topic, p)`,
`controller()`, `live_brokers()`, and `wait_for_*` helpers.

Every broker gets its own properties file in `base_dir` (`server-N.properties`: broker.id,
listeners on 127.0.0.1, log.dirs, zookeeper.connect, a 6 s ZooKeeper session so failover
tests are quick, and the internal topics replicated over min(3, N) brokers), then `config`
for all brokers and `broker_configs[id]` for one; its output goes to `broker-N.out`.
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from broker.testing.reaper import watch
from broker.testing.zookeeper import ZooKeeperServer, free_port

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0
PACKAGE_ROOT = pathlib.Path(__file__).resolve().parents[2]


class BrokerNode:
    """One broker process of a KafkaCluster."""

    def __init__(self, cluster, broker_id: int, config: dict):
        self.cluster = cluster
        self.id = broker_id
        self.port = free_port()
        self.log_dir = cluster.base_dir / f"kafka-logs-{broker_id}"
        self.properties = cluster.base_dir / f"server-{broker_id}.properties"
        self.out_path = cluster.base_dir / f"broker-{broker_id}.out"
        self.config = config
        self.proc = None
        self.paused = False

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def write_properties(self) -> None:
        values = {
            "broker.id": self.id,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.log_dir),
            "zookeeper.connect": self.cluster.zookeeper.connect_string,
            **self.config,
        }
        self.properties.write_text("".join(f"{k}={v}\n" for k, v in values.items()))

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        self.write_properties()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH")) if p)
        with open(self.out_path, "ab") as out:
            self.proc = subprocess.Popen(
                [self.cluster.python, "-m", "broker", str(self.properties)],
                cwd=self.cluster.base_dir, env=env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL)
        watch(self.proc)
        self.paused = False

    def signal(self, sig) -> None:
        if self.running():
            self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def output(self) -> str:
        try:
            return self.out_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


class KafkaCluster:
    def __init__(self, num_brokers: int = 3, base_dir=None, *, config: dict | None = None,
                 broker_configs: dict | None = None, session_timeout_ms: int = 6000,
                 zookeeper: ZooKeeperServer | None = None, python: str | None = None):
        if type(num_brokers) is not int or num_brokers < 1:
            raise ValueError(f"a cluster has at least 1 broker, not {num_brokers!r}")
        self._temp = None
        if base_dir is None:
            self._temp = tempfile.mkdtemp(prefix="kbroker-cluster-")
            base_dir = self._temp
        self.base_dir = pathlib.Path(base_dir)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.python = python or sys.executable
        self._own_zookeeper = zookeeper is None
        self.zookeeper = zookeeper or ZooKeeperServer(self.base_dir / "zookeeper")
        internal_rf = min(3, num_brokers)
        common = {
            "zookeeper.session.timeout.ms": session_timeout_ms,
            "offsets.topic.replication.factor": internal_rf,
            "transaction.state.log.replication.factor": internal_rf,
            "transaction.state.log.min.isr": min(2, internal_rf),
            "group.initial.rebalance.delay.ms": 0,
            "controlled.shutdown.retry.backoff.ms": 1000,
            **(config or {}),
        }
        self.brokers = {i: BrokerNode(self, i, {**common, **(broker_configs or {}).get(i, {})})
                        for i in range(num_brokers)}

    # -- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> "KafkaCluster":
        return self.start_all()

    def __exit__(self, *exc) -> None:
        self.close()

    def start_all(self, timeout: float = START_TIMEOUT_S) -> "KafkaCluster":
        """Start ZooKeeper and every broker; if any of it fails (a broker exits, a wait times
        out, Ctrl-C), what did start is stopped before the error goes on (a `with` block's
        __exit__ does not run when __enter__ raises)."""
        try:
            if self._own_zookeeper:
                self.zookeeper.start()
            for node in self.brokers.values():
                node.start()
            self.wait_for_brokers(set(self.brokers), timeout)
            self.wait_until(lambda: self.controller() is not None, timeout, "no controller elected")
            # Clients bootstrap from any broker: each must know the controller and every broker.
            for broker_id in self.brokers:
                self.wait_for_metadata(broker_id, set(self.brokers), timeout)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for node in self.brokers.values():
            if node.paused:
                node.signal(signal.SIGCONT)
        for node in self.brokers.values():
            if node.running():
                node.signal(signal.SIGTERM)
        for node in self.brokers.values():
            if node.proc is not None and node.wait(STOP_TIMEOUT_S) is None:
                node.proc.kill()
                node.wait(10)
        if self._own_zookeeper:
            self.zookeeper.stop()
        if self._temp is not None:
            shutil.rmtree(self._temp, ignore_errors=True)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(n.bootstrap for n in self.brokers.values())

    def bootstrap(self, broker_id: int) -> str:
        return self.brokers[broker_id].bootstrap

    # -- faults --------------------------------------------------------------------------------

    def kill(self, broker_id: int) -> None:
        """SIGKILL, as a crash; returns once the process is gone (its ZooKeeper session lives
        until zookeeper.session.timeout.ms passes)."""
        node = self._node(broker_id)
        if node.running():
            node.proc.kill()
            node.wait(10)
        node.paused = False

    def _node(self, broker_id: int) -> BrokerNode:
        node = self.brokers.get(broker_id)
        if node is None:
            raise ValueError(f"no broker {broker_id} in this cluster (brokers "
                             f"{sorted(self.brokers)}; leader() answers -1 when a partition "
                             f"has no leader)")
        return node

    def pause(self, broker_id: int) -> None:
        """SIGSTOP: the process stops without exiting, sockets open (a long stall)."""
        self._node(broker_id).signal(signal.SIGSTOP)
        self.brokers[broker_id].paused = True

    def resume(self, broker_id: int) -> None:
        node = self._node(broker_id)
        node.signal(signal.SIGCONT)
        node.paused = False

    def stop(self, broker_id: int, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM (a controlled shutdown) and wait; returns the exit code."""
        node = self._node(broker_id)
        if node.paused:
            self.resume(broker_id)
        if not node.running():
            return node.proc.returncode if node.proc else None
        node.signal(signal.SIGTERM)
        code = node.wait(timeout)
        if code is None:
            node.proc.kill()
            node.wait(10)
        return code

    def start(self, broker_id: int, timeout: float = START_TIMEOUT_S) -> None:
        """Start a stopped or killed broker again (same id, port and log dir) and wait until
        it is registered."""
        node = self._node(broker_id)
        if node.running():
            return
        # A killed broker's old session may still hold /brokers/ids/N: registering again
        # before it expires is refused (as Kafka's is), so wait for it to go first.
        self.wait_until(lambda: str(broker_id) not in self._children("/brokers/ids"), timeout,
                        f"broker {broker_id}'s previous registration did not expire")
        node.start()
        self.wait_for_brokers({broker_id}, timeout)
        self.wait_for_metadata(broker_id, self.live_brokers(), timeout)

    def restart(self, broker_id: int, timeout: float = START_TIMEOUT_S) -> None:
        self.stop(broker_id)
        self.start(broker_id, timeout)

    # -- observation ---------------------------------------------------------------------------

    def _read(self, path: str):
        from broker.zookeeper import ZkReader
        with ZkReader(self.zookeeper.connect_string) as zk:
            data = zk.get(path)
        return None if data is None else data

    def _children(self, path: str) -> list:
        from broker.zookeeper import ZkReader
        with ZkReader(self.zookeeper.connect_string) as zk:
            return zk.children(path)

    def live_brokers(self) -> set:
        return {int(c) for c in self._children("/brokers/ids")}

    def controller(self) -> int | None:
        data = self._read("/controller")
        return None if data is None else json.loads(data)["brokerid"]

    def partition_state(self, topic: str, partition: int) -> dict | None:
        data = self._read(f"/brokers/topics/{topic}/partitions/{partition}/state")
        return None if data is None else json.loads(data)

    def leader(self, topic: str, partition: int) -> int:
        """The partition's leader as ZooKeeper has it (-1: none, or no such partition)."""
        state = self.partition_state(topic, partition)
        return -1 if state is None else state["leader"]

    def isr(self, topic: str, partition: int) -> list:
        state = self.partition_state(topic, partition)
        return [] if state is None else state["isr"]

    def wait_until(self, predicate, timeout: float = 30.0, message="condition") -> None:
        """`message`: the timeout's text, or a callable giving it (the last state seen)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.1)
        raise TimeoutError(f"{message() if callable(message) else message} (after {timeout} s)")

    def wait_for_brokers(self, broker_ids: set, timeout: float = START_TIMEOUT_S) -> None:
        def registered():
            for broker_id in broker_ids:
                node = self.brokers[broker_id]
                if node.proc is not None and node.proc.poll() is not None:
                    raise RuntimeError(f"broker {broker_id} exited with {node.proc.returncode}:"
                                       f"\n{node.output()[-4000:]}")
            live[:] = sorted(self.live_brokers())
            return broker_ids <= set(live)
        live = []
        self.wait_until(registered, timeout, lambda: f"brokers {sorted(broker_ids)} not "
                                                     f"registered (registered: {live})")

    def metadata(self, broker_id: int) -> tuple:
        """(controller id, {broker ids}) as broker `broker_id` answers Metadata."""
        import asyncio
        from broker.client.connection import BrokerConnection
        from protocol.messages.metadata import MetadataRequest

        async def probe():
            conn = BrokerConnection("127.0.0.1", self.brokers[broker_id].port,
                                    connect_timeout_ms=2000, request_timeout_ms=5000)
            await conn.connect()
            try:
                return await conn.send(MetadataRequest(topics=[]), 1)
            finally:
                await conn.close()
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            response = asyncio.run(probe())
        else:
            # Called from a coroutine (a pytest-asyncio test): asyncio.run cannot nest, so the
            # probe runs on a loop of its own in a helper thread.
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                response = pool.submit(asyncio.run, probe()).result()
        return response.controller_id, {b.node_id for b in response.brokers}

    def wait_for_metadata(self, broker_id: int, brokers: set,
                          timeout: float = START_TIMEOUT_S) -> None:
        """Wait until the broker's metadata names a controller and lists `brokers`."""
        seen = ["no answer yet"]

        def ready():
            try:
                controller, known = self.metadata(broker_id)
            except Exception as exc:                # noqa: BLE001 - not listening yet
                seen[0] = f"Metadata failed: {exc!r}"
                return False
            seen[0] = f"controller {controller}, brokers {sorted(known)}"
            return controller >= 0 and brokers <= known
        self.wait_until(ready, timeout, lambda: f"broker {broker_id}'s metadata is incomplete: "
                                                f"{seen[0]}, wanted brokers {sorted(brokers)}")

    def wait_for_leader(self, topic: str, partition: int, *, not_in=(),
                        timeout: float = 60.0) -> int:
        """Wait until the partition has a leader outside `not_in`; returns it."""
        found = []

        def elected():
            leader = self.leader(topic, partition)
            found.append(leader)
            return leader >= 0 and leader not in not_in
        self.wait_until(elected, timeout, lambda: f"no new leader for {topic}-{partition} (the "
                                                  f"leader is {found[-1] if found else '?'}, "
                                                  f"not wanted: {sorted(not_in)})")
        return found[-1]

    def wait_for_isr(self, topic: str, partition: int, isr, timeout: float = 60.0) -> None:
        want = sorted(isr)
        seen = []

        def reached():
            seen[:] = sorted(self.isr(topic, partition))
            return seen == want
        try:
            self.wait_until(reached, timeout, f"ISR of {topic}-{partition} is not {want}")
        except TimeoutError:
            raise TimeoutError(f"ISR of {topic}-{partition} is {seen}, not {want} (after "
                               f"{timeout} s)") from None

    def output(self, broker_id: int) -> str:
        return self._node(broker_id).output()
