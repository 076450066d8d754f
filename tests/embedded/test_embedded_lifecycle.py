"""EmbeddedBroker / AsyncEmbeddedBroker lifecycle: ports, dirs, threads, fds and memory come back."""
import gc
import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading

import pytest

from broker.config import ConfigError
from broker.embedded import AsyncEmbeddedBroker, EmbeddedBroker
from protocol.errors import KafkaError
from storage.file_lock import DirLockedError


def port_is_closed(port: int) -> bool:
    """Nothing accepts on 127.0.0.1:port, and the port can be bound again."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
        return False
    except ConnectionRefusedError:
        pass
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
    return True


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_two_brokers_in_one_process():
    with EmbeddedBroker() as first, EmbeddedBroker() as second:
        assert first.port != second.port
        assert first.data_dir != second.data_dir
        first.produce("t", [b"one"])
        second.produce("t", [b"two", b"three"])
        assert [r.value for r in first.read_all("t")] == [b"one"]
        assert [r.value for r in second.read_all("t")] == [b"two", b"three"]
        assert first.broker.cluster_id != second.broker.cluster_id


def test_exception_inside_the_block_releases_port_and_dir():
    with pytest.raises(ZeroDivisionError):
        with EmbeddedBroker(topics=["t"]) as broker:
            port, data_dir = broker.port, broker.data_dir
            1 / 0
    assert port_is_closed(port)
    assert not os.path.exists(data_dir)


def test_failing_test_releases_port_and_dir(tmp_path):
    """A test using the plugin's fixture fails mid-way in a separate pytest run (in a bare dir:
    the fixture and the marker come from the entry point alone); afterwards its broker's port
    is closed and its temporary dir is gone."""
    record = tmp_path / "seen.json"
    (tmp_path / "test_fails.py").write_text(textwrap.dedent(f"""
        import json
        import pytest

        @pytest.mark.kafka_broker_config(num_partitions=2)
        def test_fails_mid_way(kafka_broker):
            kafka_broker.produce("t", [b"x"])
            assert kafka_broker.broker.config.get("num.partitions") == 2
            with open({str(record)!r}, "w") as f:
                json.dump({{"port": kafka_broker.port, "dir": kafka_broker.data_dir}}, f)
            assert False, "failing on purpose"
        """))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--strict-markers",
         "test_fails.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "failing on purpose" in result.stdout
    seen = json.loads(record.read_text())
    assert port_is_closed(seen["port"])
    assert not os.path.exists(seen["dir"])


def embedded_threads() -> list:
    return [t for t in threading.enumerate() if t.name == "kbroker-embedded"]


def test_invalid_config_raises_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))    # where the broker's dir goes
    threads = embedded_threads()
    with pytest.raises(ConfigError, match="num.partitions"):
        EmbeddedBroker({"num.partitions": 0}).start()
    with pytest.raises(KafkaError):
        EmbeddedBroker(topics=["bad name!"]).start()
    assert embedded_threads() == threads
    assert os.listdir(tmp_path) == []


def test_caller_data_dir_is_kept_and_reopened(tmp_path):
    data_dir = tmp_path / "kafka-data"
    with EmbeddedBroker(data_dir=data_dir, topics={"kept": 2}) as broker:
        broker.produce("kept", [(b"k", b"v1"), (b"k", b"v2")])
        first_port = broker.port
    assert (data_dir / "kbroker-metadata.json").exists()
    assert port_is_closed(first_port)
    with EmbeddedBroker(data_dir=data_dir) as broker:      # a restart on the same dir
        assert [r.value for r in broker.read_all("kept")] == [b"v1", b"v2"]


def test_reopening_with_the_same_topics_and_restarting_on_several_dirs(tmp_path):
    # topics= is created only when missing (a reopened dir has it); a broker stopped and
    # started again keeps all its log.dirs, not only the first (the rest came back empty).
    dirs = f"{tmp_path / 'a'},{tmp_path / 'b'}"
    broker = EmbeddedBroker({"log.dirs": dirs}, topics={"spread": 4}).start()
    broker.produce("spread", [(b"k%d" % i, b"v%d" % i) for i in range(8)])
    broker.stop()
    broker.start()
    try:
        assert len(broker.read_all("spread")) == 8
    finally:
        broker.stop()
    assert os.listdir(tmp_path / "b")                       # the caller's dirs are kept
    with EmbeddedBroker(data_dir=tmp_path / "c", topics={"t": 1}) as first:
        first.produce("t", [b"x"])
    with EmbeddedBroker(data_dir=tmp_path / "c", topics={"t": 1}) as again:
        assert [r.value for r in again.read_all("t")] == [b"x"]


def test_log_dir_is_used_and_kept_as_kafka_reads_it(tmp_path):
    # Kafka uses log.dir when log.dirs is not set.
    with EmbeddedBroker({"log.dir": str(tmp_path / "single")}, topics={"t": 1}) as broker:
        broker.produce("t", [b"x"])
        assert broker.data_dir == str(tmp_path / "single")
    assert (tmp_path / "single" / "t-0").is_dir()


def test_a_second_broker_on_a_live_data_dir_is_refused(tmp_path):
    """Two embedded brokers in one process on one dir: the second fails with Kafka's message
    before it touches anything, and the first keeps serving."""
    data_dir = tmp_path / "kafka-data"
    with EmbeddedBroker(data_dir=data_dir, topics={"t": 1}) as first:
        first.produce("t", [b"a"])
        with pytest.raises(DirLockedError, match="Failed to acquire lock on file .lock in "
                                                 f"{data_dir}. A Kafka instance"):
            EmbeddedBroker(data_dir=data_dir).start()
        assert not (data_dir / ".kafka_cleanshutdown").exists()
        first.produce("t", [b"b"])
        assert [r.value for r in first.read_all("t")] == [b"a", b"b"]
    with EmbeddedBroker(data_dir=data_dir) as again:
        assert [r.value for r in again.read_all("t")] == [b"a", b"b"]


def test_stop_twice_and_helpers_after_stop():
    broker = EmbeddedBroker().start()
    broker.stop()
    broker.stop()
    with pytest.raises(RuntimeError, match="not running"):
        broker.produce("t", [b"x"])
    with pytest.raises(RuntimeError, match="not running"):       # the awaitable form too
        broker.aio.produce("t", [b"x"])


async def test_async_form_on_the_callers_loop(tmp_path):
    async with AsyncEmbeddedBroker({"num.partitions": 2}, topics=["a"]) as broker:
        port, data_dir = broker.port, broker.data_dir
        await broker.produce("a", [b"1", b"2", b"3"], partition=1)
        assert [(r.partition, r.value) for r in await broker.read_all("a")] == [
            (1, b"1"), (1, b"2"), (1, b"3")]
    assert port_is_closed(port)
    assert not os.path.exists(data_dir)


def test_twenty_brokers_in_a_row_leak_nothing():
    def cycle():
        with EmbeddedBroker(topics=["t"]) as broker:
            broker.produce("t", [b"x"])
    cycle()                                  # warm-up: imports, caches, first allocations
    gc.collect()
    threads, fds, rss = threading.active_count(), open_fds(), rss_bytes()
    ours = embedded_threads()                # e.g. a session broker started by another test
    for _ in range(20):
        cycle()
    gc.collect()
    assert threading.active_count() <= threads    # other tests' client threads may end meanwhile
    assert embedded_threads() == ours
    assert open_fds() <= fds + 2             # tolerance for unrelated lazily opened files
    # 20 brokers with a topic each; a leak of a broker's state (logs, indexes, maps) would
    # show as several MB per cycle; measured growth over 20 cycles is ~0.5 MB.
    assert rss_bytes() - rss < 10 * 1024 * 1024


def test_a_start_that_times_out_has_closed_what_it_opened(monkeypatch):
    # The start is cancelled and its clean-up (a full shutdown) finishes before start() raises:
    # the log dir lock must not outlive it (a retry on the same dir would be refused).
    import asyncio

    import broker.embedded as embedded
    events = []

    class SlowShutdown:
        async def shutdown(self):
            await asyncio.sleep(0.5)
            events.append("shut down")

    class SlowStart(AsyncEmbeddedBroker):
        async def start(self):
            self.broker = SlowShutdown()
            try:
                await asyncio.sleep(60)          # a long log recovery
            except BaseException:
                await self.stop()
                raise
    monkeypatch.setattr(embedded, "START_TIMEOUT_S", 0.3)
    broker = EmbeddedBroker()
    broker._async = SlowStart()
    with pytest.raises(TimeoutError, match="did not start within 0.3 s"):
        broker.start()
    assert events == ["shut down"]


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_deleted_topics_files_go_after_file_delete_delay_ms_not_the_retention_interval(
        dynamic):
    """Kafka schedules each deletion file.delete.delay.ms ahead; ours waited for the next
    retention pass (log.retention.check.interval.ms, 5 minutes by default) on top."""
    import asyncio
    import time
    # `dynamic`: the delay set as a dynamic cluster default (Kafka's
    # reconfigureDefaultLogConfig), over a static one of 10 minutes
    delay = {"log.segment.delete.delay.ms": 600000 if dynamic else 100}
    with EmbeddedBroker(config={**delay, "log.retention.check.interval.ms": 300000},
                        topics={"doomed": 1}) as kafka:
        kafka.produce("doomed", [b"x"])

        async def delete():
            from broker.client.admin import OP_SET, RESOURCE_BROKER, Admin
            from broker.client.cluster import ClusterClient
            async with ClusterClient(kafka.bootstrap_servers) as cluster:
                admin = Admin(cluster)
                if dynamic:
                    await admin.incremental_alter_configs(
                        RESOURCE_BROKER, "", [("log.segment.delete.delay.ms", OP_SET, "100")])
                await admin.delete_topics(["doomed"])
        asyncio.run(delete())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(
                n.startswith("doomed-0") for n in os.listdir(kafka.data_dir)):
            time.sleep(0.1)
        assert not [n for n in os.listdir(kafka.data_dir) if n.startswith("doomed-0")]
