"""Transactions benchmark (issue 18): `python -m bench transactions` (or `python -m
bench.txn_bench`). One kbroker (bench/broker_bench.py's KBroker, the shipped
config/server.properties) and confluent-kafka clients in this process.

  produce   one producer writes 1 KiB values to a 6-partition topic (keys spread them), first
            idempotent without transactions, then transactional: transactions of 100 messages
            committed back to back (begin, produce 100, commit_transaction). MB/s of values,
            first message to last acknowledgement or commit. Target: transactional >= 0.5x the
            idempotent MB/s of the same run; then the same transactions against
            bench/null_broker.py, a server that answers every request at once and stores
            nothing: the client's own ceiling, whatever the broker (librdkafka's transaction
            manager waits for its 1 ms timer before it registers a transaction's partitions);
  commit    the time each commit_transaction() call took in that run (it flushes the
            transaction's messages, then EndTxn; the coordinator writes PrepareCommit, the
            markers to the 6 partitions and CompleteCommit), p50/p99/max. Target p99 < 20 ms;
  consume   the transactional topic, plus a tenth of its transactions written again and aborted,
            read from the start by one consumer with isolation.level=read_committed, then one
            with read_uncommitted (which also gets the aborted values), twice in turn, the better
            of each pair kept (a read of one second is noisy, and the first one was up to a
            sixth slower whichever level it used): MB/s of values delivered to the
            application. Target: read_committed >= 0.9x read_uncommitted.

Every figure comes with the broker's CPU and this process's (the clients) in cores, from
/proc/<pid>/stat and os.times, so the bottleneck is visible. Sizes from the environment:
TXN_MESSAGES (200,000 per produce run), TXN_SIZE (100 messages per transaction).
"""
from __future__ import annotations

import os
import pathlib
import statistics
import sys
import tempfile
import time

from bench import broker_bench

CLK_TCK = os.sysconf("SC_CLK_TCK")
PARTITIONS = 6
VALUE = 1024


def _env(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def self_cpu() -> float:
    t = os.times()
    return t.user + t.system


class Cpu:
    """Cores used by the broker and by this process between `start()` and `stop()`."""

    def __init__(self, broker):
        self.pid = broker.proc.pid

    def __enter__(self):
        self.t0, self.b0, self.s0 = time.monotonic(), proc_cpu(self.pid), self_cpu()
        return self

    def __exit__(self, *exc):
        wall = time.monotonic() - self.t0
        self.broker = (proc_cpu(self.pid) - self.b0) / wall
        self.clients = (self_cpu() - self.s0) / wall

    def text(self) -> str:
        return f"cpu broker {self.broker:.2f} clients {self.clients:.2f}"


def create_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, PARTITIONS, 1)]).values():
        future.result(30)


def produce_idempotent(bootstrap: str, topic: str, count: int) -> float:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    value = b"x" * VALUE
    failed = []
    t0 = time.monotonic()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value, key=b"%d" % (i % 64),
                                 on_delivery=lambda err, msg: err and failed.append(err))
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    elapsed = time.monotonic() - t0
    if failed:
        raise RuntimeError(f"{len(failed)} not delivered: {failed[0]}")
    return count * VALUE / elapsed / 1e6


def produce_transactional(bootstrap: str, topic: str, count: int, size: int,
                          abort_every: int = 0, tid: str = "bench-tx") -> tuple:
    """(MB/s, commit latencies in ms)."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                         "linger.ms": 5})
    producer.init_transactions(30)
    value = b"x" * VALUE
    latencies = []
    t0 = time.monotonic()
    for n in range(count // size):
        producer.begin_transaction()
        for i in range(size):
            producer.produce(topic, value, key=b"%d" % (i % 64))
        if abort_every and n % abort_every == 0:
            producer.flush(30)             # in the log first: abort purges what is queued
            producer.abort_transaction(30)
            continue
        c0 = time.perf_counter()
        producer.commit_transaction(30)
        latencies.append((time.perf_counter() - c0) * 1000)
    elapsed = time.monotonic() - t0
    return count * VALUE / elapsed / 1e6, latencies


def client_ceiling(count: int, size: int) -> tuple:
    """(MB/s, this process's cores, the server's cores) of produce_transactional against
    bench/null_broker.py."""
    import subprocess
    server = subprocess.Popen([sys.executable, "-m", "bench.null_broker",
                               "--partitions", str(PARTITIONS)],
                              stdout=subprocess.PIPE, text=True,
                              cwd=pathlib.Path(__file__).resolve().parent.parent)
    try:
        port = int(server.stdout.readline())
        c0, s0, t0 = self_cpu(), proc_cpu(server.pid), time.monotonic()
        mbs, _ = produce_transactional(f"127.0.0.1:{port}", "txn", count, size,
                                       tid="bench-ceiling")
        wall = time.monotonic() - t0
        return mbs, (self_cpu() - c0) / wall, (proc_cpu(server.pid) - s0) / wall
    finally:
        server.terminate()
        server.wait(10)


def consume(bootstrap: str, topic: str, isolation: str, expect: int) -> tuple:
    """(MB/s of values delivered, messages) reading from the start until `expect` messages
    or 5 s without news."""
    from confluent_kafka import Consumer
    consumer = Consumer({"bootstrap.servers": bootstrap,
                         "group.id": f"bench-{isolation}-{time.monotonic()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": isolation, "fetch.max.bytes": 52428800})
    consumer.subscribe([topic])
    got = size = 0
    first = last = None
    quiet = time.monotonic()
    while got < expect and time.monotonic() - quiet < 5:
        for message in consumer.consume(10000, 0.5):
            if message.error():
                continue
            if first is None:
                first = time.monotonic()
            got += 1
            size += len(message.value())
            last = quiet = time.monotonic()
    consumer.close()
    if first is None or last == first:
        return 0.0, got
    return size / (last - first) / 1e6, got


def pct(values, p) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def main(argv=None) -> int:
    count = _env("TXN_MESSAGES", 200_000)
    size = _env("TXN_SIZE", 100)
    ok = True
    with tempfile.TemporaryDirectory(prefix="txn-bench-") as tmp:
        broker = broker_bench.KBroker(pathlib.Path(tmp)).start()
        try:
            bootstrap = broker.bootstrap
            create_topic(bootstrap, "idem")
            create_topic(bootstrap, "txn")
            produce_transactional(bootstrap, "txn", size * 10, size, tid="warm-up")
            broker_bench._settle_page_cache()
            with Cpu(broker) as idem_cpu:
                idem = produce_idempotent(bootstrap, "idem", count)
            print(f"  idempotent produce 1 KiB: {idem:.1f} MB/s  [{idem_cpu.text()}]",
                  flush=True)
            broker_bench._settle_page_cache()
            with Cpu(broker) as txn_cpu:
                txn, latencies = produce_transactional(bootstrap, "txn", count, size)
            ratio = txn / idem if idem else 0
            met = ratio >= 0.5
            ok &= met
            print(f"1 transactional produce ({size} x 1 KiB per transaction, "
                  f"{len(latencies)} commits): {txn:.1f} MB/s = {ratio:.2f}x idempotent "
                  f"[target >= 0.5x {'PASS' if met else 'MISS'}]  [{txn_cpu.text()}]",
                  flush=True)
            ceiling, ceiling_cpu, server_cpu = client_ceiling(count, size)
            print(f"  the same transactions against bench/null_broker.py (answers at once, "
                  f"stores nothing): {ceiling:.1f} MB/s = {ceiling / idem if idem else 0:.2f}x "
                  f"idempotent, this client's ceiling with any broker (less the server's own "
                  f"{server_cpu * size * VALUE / ceiling:.0f} us of CPU per transaction)  "
                  f"[cpu server {server_cpu:.2f} clients {ceiling_cpu:.2f}]", flush=True)
            p99 = pct(latencies, 0.99)
            met = p99 < 20
            ok &= met
            print(f"2 commit_transaction latency: p50 {statistics.median(latencies):.2f} "
                  f"p99 {p99:.2f} max {max(latencies):.2f} ms "
                  f"[target p99 < 20 ms {'PASS' if met else 'MISS'}]", flush=True)
            aborted_count = count // 10
            produce_transactional(bootstrap, "txn", aborted_count, size, abort_every=1,
                                  tid="bench-aborts")
            committed = size * 10 + len(latencies) * size
            broker_bench._settle_page_cache(drop=False)
            reads = {"read_committed": [], "read_uncommitted": []}
            for _ in range(2):
                for isolation, expect in (("read_committed", committed),
                                          ("read_uncommitted", committed + aborted_count)):
                    with Cpu(broker) as cpu:
                        mbs, got = consume(bootstrap, "txn", isolation, expect)
                    reads[isolation].append((mbs, got, cpu))
            (rc, rc_got, rc_cpu), (ru, ru_got, ru_cpu) = (
                max(reads[level], key=lambda r: r[0])
                for level in ("read_committed", "read_uncommitted"))
            ratio = rc / ru if ru else 0
            met = ratio >= 0.9 and all(got == committed for _, got, _ in reads["read_committed"])
            ok &= met
            print(f"3 consume read_committed {rc:.1f} MB/s ({rc_got} messages) "
                  f"[{rc_cpu.text()}]; read_uncommitted {ru:.1f} MB/s ({ru_got} messages, "
                  f"{aborted_count} of them aborted) [{ru_cpu.text()}]: {ratio:.2f}x "
                  f"[target >= 0.9x {'PASS' if met else 'MISS'}] (each read, in turn: "
                  + ", ".join(f"{level[5:]} {r[0]:.0f}" for pair in zip(*reads.values())
                              for level, r in zip(reads, pair)) + ")", flush=True)
        finally:
            broker.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
