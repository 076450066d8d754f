"""Real clients through a leader failover, as an application developer meets one: three brokers
and ZooKeeper (the kafka_cluster fixture), a topic with 3 partitions, replication factor 3 and
min.insync.replicas=2, and for each client (confluent-kafka, kafka-python, aiokafka, kafkajs and
kcat) an acks=all producer, idempotent where the client has it, sending RECORDS keyed records at
RATE_PER_S; once KILL_AFTER of them are acknowledged, the leader of partition 0 gets `kill -9`.

The producers keep their default retries and timeouts: Kafka's clients ride out such a failover
(a new leader is elected once the dead broker's ZooKeeper session expires, about 6 s here), so
every record must be acknowledged and none may fail. Then the killed broker is restarted and a
consumer group of the same client reads the topic from the earliest offset, committing as it
goes; once it has read a third of the records, the broker of the group's coordinator gets
`kill -9` too: the consumer finds the new coordinator, joins again and fetches from the
partitions' new leaders. kcat's consumer reads too fast for that, so its coordinator dies just
before it starts; kafkajs rides out neither a coordinator's death nor a dead leader's in time,
by limitations of its own (see its test), so its group reads while the killed broker is
restarted, and only the sends its producer gives up on ECONNREFUSED are tolerated.

What is checked: every acknowledged record is in the log (at the offset its acknowledgement
named, where the client tells it), none is there twice, the consumer read them all and its
group's committed offsets are the partitions' ends. `-s` shows the timeline."""
import asyncio
import json
import os
import pathlib
import queue
import subprocess
import threading
import time

import pytest
from confluent_kafka import OFFSET_INVALID, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from coordinator.partitioning import partition_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 3
RECORDS = 300
RATE_PER_S = 40
KILL_AFTER = 80                         # acknowledgements before partition 0's leader dies
CONSUMER_FAULT_AFTER = RECORDS // 3     # records read before the consumer's fault
OFFSETS_PARTITIONS = 5
PRODUCE_TIMEOUT_S = 60                  # bounds on each phase, failover included
CONSUME_TIMEOUT_S = 60
PROCESS_S = 0.005                       # the consumer's "work" per record: reading spans the kill
CONFIG = dict(offsets_topic_num_partitions=OFFSETS_PARTITIONS)
JS_DIR = pathlib.Path(__file__).resolve().parents[1] / "js"
KCAT = "/usr/bin/kcat"


class Failover:
    """One client's run: its topic and group, the faults, and what the client reported."""

    def __init__(self, cluster, client: str):
        self.cluster = cluster
        self.client = client
        self.bootstrap = cluster.bootstrap_servers
        self.topic = f"failover-{client}"
        self.group = f"failover-{client}-readers"
        self.started = time.monotonic()
        self.events = []
        self.lock = threading.Lock()
        self.acked = []              # (partition, offset, value): None, None where not told
        self.failed = []             # (value, error)
        self.read = {}               # (partition, offset) -> value, as the consumer got them
        self.deliveries = 0          # records the consumer got, re-deliveries included
        self.committed_at_fault = None
        self.rewinds = []            # (partition, offset) got again after the fault, below that commit
        self.consumer_errors = []
        self.ack_times = []
        self.killed_at = None
        self.restarted = False
        self.coordinator = None
        self.consumer_fault = None
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        admin.create_topics([NewTopic(self.topic, PARTITIONS, 3, config={
            "min.insync.replicas": "2"})])[self.topic].result(60)
        for p in range(PARTITIONS):
            cluster.wait_for_isr(self.topic, p, [0, 1, 2], timeout=30)
        self.victim = cluster.leader(self.topic, 0)
        # The group's offsets partition is made now, with all three brokers up (as in Kafka,
        # __consumer_offsets is not created while fewer brokers live than its replicas).
        assert self.committed() == {p: OFFSET_INVALID for p in range(PARTITIONS)}
        self.log(f"{self.topic} leaders {[cluster.leader(self.topic, p) for p in range(3)]}")

    def log(self, text: str) -> None:
        line = f"{time.monotonic() - self.started:6.2f}s {self.client}: {text}"
        self.events.append(line)
        print(f"[failover] {line}", flush=True)

    def value(self, i: int) -> str:
        return f"{self.client}-{i:06d}"

    @staticmethod
    def key(i: int) -> str:
        return f"k{i % 16}"

    def sends(self):
        """(i, key, value) at RATE_PER_S, as a generator that sleeps between records."""
        start = time.monotonic()
        for i in range(RECORDS):
            delay = start + i / RATE_PER_S - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            yield i, self.key(i), self.value(i)

    def ack(self, partition, offset, value, timed=True) -> None:
        with self.lock:
            self.acked.append((partition, offset, value))
            if timed:
                self.ack_times.append(time.monotonic())

    def fail(self, value, error) -> None:
        with self.lock:
            self.failed.append((value, str(error)))
        if len(self.failed) <= 3:
            self.log(f"delivery of {value} failed: {error}")

    def maybe_kill_leader(self, progress=None) -> None:
        """kill -9 of partition 0's leader once KILL_AFTER records are acknowledged (or sent,
        for a client that does not tell: `progress`)."""
        done = len(self.acked) if progress is None else progress
        if self.killed_at is None and done >= KILL_AFTER:
            self.cluster.kill(self.victim)
            self.killed_at = time.monotonic()
            self.log(f"kill -9 broker {self.victim} (leader of {self.topic}-0) after {done}")

    def produced(self, restart: bool = True) -> None:
        """The producer is done: partition 0 has a new leader, and unless `restart` is false the
        killed broker comes back before the consumer starts."""
        times = sorted(self.ack_times)
        gap = max((b - a for a, b in zip(times, times[1:])), default=None)
        self.log(f"producer done: {len(self.acked)} acknowledged, {len(self.failed)} failed"
                 + ("" if gap is None else f", at most {gap:.1f} s without an acknowledgement"))
        assert self.killed_at is not None, "the producer finished before the kill"
        leader = self.cluster.wait_for_leader(self.topic, 0, not_in={self.victim})
        self.log(f"{self.topic}-0 is led by broker {leader}")
        if restart:
            self.restart_victim()
        self.ends = self.watermarks()
        self.total = sum(self.ends.values())
        self.log(f"log ends {self.ends}")

    def restart_victim(self) -> None:
        self.log(f"restarting broker {self.victim}")
        self.cluster.start(self.victim)
        self.restarted = True
        self.log(f"broker {self.victim} is back")

    def maybe_restart_victim(self) -> None:
        """The consumer's fault for a client that cannot ride out a coordinator's death in
        time: the killed broker comes back once a third of the records are read."""
        if not self.restarted and len(self.read) >= CONSUMER_FAULT_AFTER:
            self.consumer_faulted(f"restart of broker {self.victim} while the group reads")
            self.restart_victim()

    def watermarks(self) -> dict:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"{self.group}-x"})
        try:
            return {p: consumer.get_watermark_offsets(TopicPartition(self.topic, p),
                                                      timeout=30)[1] for p in range(PARTITIONS)}
        finally:
            consumer.close()

    def got(self, partition, offset, value) -> None:
        self.deliveries += 1
        # A rewind is a record delivered again from below what the group had committed. One
        # seen here for the first time may be below that commit: a child process's lines (kafkajs,
        # kcat) reach this test after the commit they preceded has reached the broker.
        again = (partition, offset) in self.read
        if again and self.committed_at_fault and offset < self.committed_at_fault[partition]:
            self.rewinds.append((partition, offset))
        self.read[(partition, offset)] = value if isinstance(value, str) else value.decode()

    def consumer_faulted(self, fault: str) -> None:
        """Before the consumer's fault: what the group has committed by then is durable (the
        offsets topic is written with acks=all), so no record below it may come again."""
        self.committed_at_fault = self.committed()
        self.consumer_fault = fault
        self.log(f"{fault} ({len(self.read)} records read, committed {self.committed_at_fault})")

    def consumed_all(self) -> bool:
        return len(self.read) >= self.total

    def coordinator_broker(self) -> int:
        return self.cluster.leader("__consumer_offsets", partition_for(self.group,
                                                                       OFFSETS_PARTITIONS))

    def maybe_kill_coordinator(self, now=False) -> None:
        """kill -9 of the group coordinator's broker once a third of the records are read."""
        if self.coordinator is None and (now or len(self.read) >= CONSUMER_FAULT_AFTER):
            self.coordinator = self.coordinator_broker()
            assert self.coordinator in self.cluster.brokers, self.coordinator
            self.consumer_faulted(f"kill -9 broker {self.coordinator} (the group's coordinator)")
            self.cluster.kill(self.coordinator)

    def check(self, tolerate=None, at_most: int = 0) -> None:
        """What the client was told is in the log, once, and the group has committed it all.
        `tolerate(error)`: failed sends of a known client limitation, at most `at_most`."""
        self.log(f"consumer done: {len(self.read)} of {self.total} records read "
                 f"({self.deliveries - len(self.read)} again), {len(self.consumer_errors)} "
                 f"errors seen {self.consumer_errors[:3]}")
        timeline = "\n".join(self.events)
        assert self.consumer_fault is not None, f"the consumer read too little:\n{timeline}"
        tolerated = [f for f in self.failed if tolerate is not None and tolerate(f[1])]
        failed = [f for f in self.failed if f not in tolerated]
        assert not failed, (f"{len(failed)} of {RECORDS} sends failed, e.g. {failed[:3]}"
                            f"\n{timeline}")
        assert len(tolerated) <= at_most, f"{len(tolerated)} sends failed\n{timeline}"
        assert len(self.acked) + len(tolerated) == RECORDS, (
            f"{RECORDS - len(self.acked) - len(tolerated)} sends neither acknowledged nor "
            f"failed\n{timeline}")
        assert len(self.read) == self.total, (f"read {len(self.read)} of {self.total} "
                                              f"records\n{timeline}")
        stored = set(self.read.values())
        missing = [a for a in self.acked if a[2] not in stored]
        assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:5]}"
        moved = [a for a in self.acked if a[0] is not None and
                 self.read.get((a[0], a[1])) != a[2]]
        assert not moved, f"{len(moved)} records not where acknowledged, e.g. {moved[:5]}"
        assert len(stored) == len(self.read), "duplicated records in the log"
        assert stored <= {self.value(i) for i in range(RECORDS)}, "records never sent"
        assert not self.rewinds, (f"{len(self.rewinds)} records read again from below the "
                                  f"group's committed offsets, e.g. {self.rewinds[:5]}\n{timeline}")
        committed = self.committed()
        assert committed == self.ends, f"{self.group} committed {committed}, ends {self.ends}"

    def committed(self) -> dict:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group})
        try:
            found = consumer.committed([TopicPartition(self.topic, p)
                                        for p in range(PARTITIONS)], timeout=30)
            return {tp.partition: tp.offset for tp in found}
        finally:
            consumer.close()


def wait_for(predicate, timeout):
    """A bounded polling loop: yields until `predicate()` holds or `timeout` (s) passes."""
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        yield


async def stop_aiokafka_consumer(consumer) -> None:
    """`consumer.stop()`, where aiokafka's own CancelledError is not the test's failure: its
    Fetcher.close() cancels the fetches still pending and awaits them unguarded, so a fetch in
    retry backoff towards a dead broker (the coordinator killed here, a partition's leader before
    the controller moves it) makes stop() raise CancelledError (aiokafka issue #647, open) before
    it closes the other fetches and the connections, which is done here. A cancellation of this
    test's own task is still raised."""
    try:
        await consumer.stop()
    except asyncio.CancelledError:
        if asyncio.current_task().cancelling():
            raise
        pending = list(consumer._fetcher._pending_tasks)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await consumer._client.close()


# -- confluent-kafka ------------------------------------------------------------------------------

@pytest.mark.kafka_cluster_config(**CONFIG)
def test_confluent_kafka_through_leader_and_coordinator_failover(kafka_cluster):
    run = Failover(kafka_cluster, "confluent")
    producer = Producer({"bootstrap.servers": run.bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})

    def on_delivery(err, msg):
        if err is None:
            run.ack(msg.partition(), msg.offset(), msg.value().decode())
        else:
            run.fail(msg.value().decode(), err)
    for _, key, value in run.sends():
        producer.produce(run.topic, value.encode(), key.encode(), on_delivery=on_delivery)
        producer.poll(0)
        run.maybe_kill_leader()
    for _ in wait_for(lambda: len(producer) == 0, PRODUCE_TIMEOUT_S):
        producer.poll(0.2)
        run.maybe_kill_leader()
    run.produced()

    consumer = Consumer({"bootstrap.servers": run.bootstrap, "group.id": run.group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "max.partition.fetch.bytes": 1024, "queued.min.messages": 10})
    consumer.subscribe([run.topic])
    try:
        for _ in wait_for(run.consumed_all, CONSUME_TIMEOUT_S):
            messages = consumer.consume(20, 0.5)
            for msg in messages:
                if msg.error():
                    run.consumer_errors.append(str(msg.error()))
                else:
                    run.got(msg.partition(), msg.offset(), msg.value())
            if messages:
                time.sleep(PROCESS_S * len(messages))
                consumer.commit(asynchronous=True)
            run.maybe_kill_coordinator()
        commit_until_done(lambda: consumer.commit(asynchronous=False), run)
    finally:
        consumer.close()
    run.check()


def commit_until_done(commit, run, timeout=30.0) -> None:
    """A final synchronous commit, tried again while the group settles (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            commit()
            return
        except Exception as exc:                        # noqa: BLE001 - recorded, then again
            run.consumer_errors.append(f"commit: {exc!r}")
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


# -- kafka-python ---------------------------------------------------------------------------------

@pytest.mark.kafka_cluster_config(**CONFIG)
def test_kafka_python_through_leader_and_coordinator_failover(kafka_cluster):
    from kafka import KafkaConsumer, KafkaProducer
    run = Failover(kafka_cluster, "kafka-python")
    producer = KafkaProducer(bootstrap_servers=run.bootstrap, acks="all",
                             enable_idempotence=True, linger_ms=5)
    futures = []
    try:
        for _, key, value in run.sends():
            future = producer.send(run.topic, value.encode(), key.encode())
            future.add_callback(lambda md, v=value: run.ack(md.partition, md.offset, v))
            future.add_errback(lambda exc, v=value: run.fail(v, exc))
            futures.append(future)
            run.maybe_kill_leader()
        for _ in wait_for(lambda: all(f.is_done for f in futures), PRODUCE_TIMEOUT_S):
            time.sleep(0.2)
            run.maybe_kill_leader()
    finally:
        producer.close(timeout=5)
    run.produced()

    def on_commit(offsets, result):
        if isinstance(result, Exception):
            run.consumer_errors.append(f"commit: {result!r}")

    consumer = KafkaConsumer(run.topic, bootstrap_servers=run.bootstrap, group_id=run.group,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             max_partition_fetch_bytes=1024)
    try:
        for _ in wait_for(run.consumed_all, CONSUME_TIMEOUT_S):
            batches = consumer.poll(timeout_ms=500, max_records=20)
            records = [r for rs in batches.values() for r in rs]
            for r in records:
                run.got(r.partition, r.offset, r.value)
            if records:
                time.sleep(PROCESS_S * len(records))
                consumer.commit_async(callback=on_commit)
            run.maybe_kill_coordinator()
        commit_until_done(lambda: consumer.commit(timeout_ms=10000), run)
    finally:
        consumer.close(autocommit=False)
    run.check()


# -- aiokafka -------------------------------------------------------------------------------------

@pytest.mark.kafka_cluster_config(**CONFIG)
def test_aiokafka_through_leader_and_coordinator_failover(kafka_cluster):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    run = Failover(kafka_cluster, "aiokafka")

    def delivered(value):
        def done(future):
            if future.cancelled():
                run.fail(value, "cancelled")
            elif future.exception() is not None:
                run.fail(value, future.exception())
            else:
                md = future.result()
                run.ack(md.partition, md.offset, value)
        return done

    async def produce():
        producer = AIOKafkaProducer(bootstrap_servers=run.bootstrap, acks="all",
                                    enable_idempotence=True, linger_ms=5)
        await producer.start()
        futures = []
        try:
            start = time.monotonic()
            for i in range(RECORDS):
                await asyncio.sleep(max(0.0, start + i / RATE_PER_S - time.monotonic()))
                future = await producer.send(run.topic, run.value(i).encode(),
                                             run.key(i).encode())
                future.add_done_callback(delivered(run.value(i)))
                futures.append(future)
                run.maybe_kill_leader()
            deadline = time.monotonic() + PRODUCE_TIMEOUT_S
            while not all(f.done() for f in futures) and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                run.maybe_kill_leader()
        finally:
            await producer.stop()

    async def consume():
        consumer = AIOKafkaConsumer(run.topic, bootstrap_servers=run.bootstrap,
                                    group_id=run.group, auto_offset_reset="earliest",
                                    enable_auto_commit=False, max_partition_fetch_bytes=1024)
        await consumer.start()
        try:
            deadline = time.monotonic() + CONSUME_TIMEOUT_S
            while not run.consumed_all() and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500, max_records=20)
                records = [r for rs in batches.values() for r in rs]
                for r in records:
                    run.got(r.partition, r.offset, r.value)
                if records:
                    await asyncio.sleep(PROCESS_S * len(records))
                    try:
                        await asyncio.wait_for(consumer.commit(), 10)
                    except Exception as exc:            # noqa: BLE001 - the group moves
                        run.consumer_errors.append(f"commit: {exc!r}")
                run.maybe_kill_coordinator()
            for _ in range(30):                         # a final commit, bounded
                try:
                    await asyncio.wait_for(consumer.commit(), 10)
                    break
                except Exception as exc:                # noqa: BLE001
                    run.consumer_errors.append(f"commit: {exc!r}")
                    await asyncio.sleep(0.5)
        finally:
            await stop_aiokafka_consumer(consumer)

    asyncio.run(produce())
    run.produced()
    asyncio.run(consume())
    run.check()


# -- kafkajs (Node.js) ----------------------------------------------------------------------------

# An idempotent producer as kafkajs's documentation shows one, awaiting each send() of a few keyed
# messages at the rate given, then a consumer group (eachMessage, auto-commit after each batch):
# one JSON line per acknowledged, failed or read message.
# Usage: node failover.js produce BOOTSTRAP TOPIC COUNT RATE | consume BOOTSTRAP TOPIC GROUP TOTAL
KAFKAJS_SCRIPT = r"""
const { Kafka, logLevel, Partitioners } = require('kafkajs');
const [mode, bootstrap, topic, arg1, arg2] = process.argv.slice(2);
const kafka = new Kafka({ clientId: 'failover', brokers: bootstrap.split(','),
                          logLevel: logLevel.NOTHING });
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function produce(count, rate) {
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1,
                                    createPartitioner: Partitioners.DefaultPartitioner });
  await producer.connect();
  const start = Date.now();
  const batch = 4;
  for (let i = 0; i < count; i += batch) {
    const wait = start + (i * 1000) / rate - Date.now();
    if (wait > 0) await sleep(wait);
    const messages = [];
    for (let j = i; j < Math.min(i + batch, count); j++) {
      messages.push({ key: `k${j % 16}`, value: `kafkajs-${String(j).padStart(6, '0')}` });
    }
    try {
      await producer.send({ topic, acks: -1, messages });
      for (const m of messages) out({ ack: m.value });
    } catch (e) {
      for (const m of messages) out({ failed: m.value, error: `${e.name}: ${e.message}` });
    }
  }
  await producer.disconnect();
}

async function consume(group, total) {
  const consumer = kafka.consumer({ groupId: group, maxBytesPerPartition: 1024 });
  const seen = new Set();
  let finish;
  const finished = new Promise((r) => { finish = r; });
  consumer.on(consumer.events.CRASH, (e) => out({ error: `crash: ${e.payload.error}` }));
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      out({ p: partition, o: Number(message.offset), v: message.value.toString() });
      seen.add(`${partition}/${message.offset}`);
      await sleep(10);
      if (seen.size >= total) finish();
    },
  });
  await finished;
  await sleep(500);              // the last batch's offsets are committed after it
  await consumer.disconnect();
}

const main = mode === 'produce' ? produce(Number(arg1), Number(arg2)) : consume(arg1, Number(arg2));
main.then(() => { out({ done: true }); process.exit(0); },
          (e) => { console.error(e); process.exit(1); });
"""


def run_node(script, args, on_line, timeout) -> None:
    """Runs the kafkajs script, handing each JSON line to `on_line` as it comes (and None every
    0.2 s: the faults are set off from there); the process is killed if it outlives `timeout`."""
    if not (JS_DIR / "node_modules" / "kafkajs").is_dir():
        pytest.fail("kafkajs is not installed: run `make test` (or `make js-deps`)")
    env = dict(os.environ, NODE_PATH=str(JS_DIR / "node_modules"))
    err_path = script.parent / f"kafkajs-{args[0]}.err"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(["node", str(script), *args], stdout=subprocess.PIPE,
                                stderr=err, text=True, env=env, cwd=script.parent)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout] + [lines.put(None)],
                     daemon=True).start()
    deadline = time.monotonic() + timeout
    done = False
    try:
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                on_line(None)
                continue
            if line is None:
                break
            try:
                message = json.loads(line)
            except ValueError:
                continue
            done = done or message.get("done", False)
            on_line(message)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
    assert done and proc.returncode == 0, (f"kafkajs {args[0]} did not finish in {timeout} s "
                                           f"(exit {proc.returncode}): "
                                           f"{err_path.read_text()[-2000:]}")


@pytest.mark.kafka_cluster_config(**CONFIG)
def test_kafkajs_through_leader_failover_and_a_restart(kafka_cluster, tmp_path):
    """Two limitations of kafkajs 2.2.4 itself shape this case (against Apache Kafka alike):

    - Its idempotent producer is documented to retry without end, but Kafka.producer() always
      hands createProducer a `retry` object (src/index.js: `{...clusterRetry, ...retry}`), so
      the `retry || {retries: MAX_SAFE_INTEGER}` default in src/producer/index.js never applies:
      5 retries, about 10 s. A send() whose leader died can run out of them before the new
      leader is known (the dead broker's ZooKeeper session lasts 6 s here, 18 s by Kafka's
      default), failing with KafkaJSNumberOfRetriesExceeded on ECONNREFUSED from the killed
      broker: those failures, and only those, are tolerated (at most two sends' worth).
    - Its consumer does not find a group coordinator again when that broker dies
      (OffsetManager.getCoordinator reconnects to the same node id), nor refresh metadata on
      ECONNREFUSED from a fetch (ConsumerGroup.recoverFromFetch): it crashes and restarts after
      its retries, ~45 s later. So here the group reads with the killed broker still down, and
      that broker is restarted while it reads."""
    run = Failover(kafka_cluster, "kafkajs")
    script = tmp_path / "failover.js"
    script.write_text(KAFKAJS_SCRIPT)

    def on_produced(message):
        if message and "ack" in message:
            run.ack(None, None, message["ack"])
        elif message and "failed" in message:
            run.fail(message["failed"], message["error"])
        run.maybe_kill_leader()
    run_node(script, ["produce", run.bootstrap, run.topic, str(RECORDS), str(RATE_PER_S)],
             on_produced, PRODUCE_TIMEOUT_S)
    run.produced(restart=False)

    def on_read(message):
        if message and "v" in message:
            run.got(message["p"], message["o"], message["v"])
        elif message and "error" in message:
            run.consumer_errors.append(message["error"])
        run.maybe_restart_victim()
    run_node(script, ["consume", run.bootstrap, run.topic, run.group, str(run.total)], on_read,
             CONSUME_TIMEOUT_S)
    refused = f"ECONNREFUSED {run.cluster.bootstrap(run.victim)}"
    run.check(tolerate=lambda error: error.startswith("KafkaJSNumberOfRetriesExceeded")
              and error.endswith(refused), at_most=8)


# -- kcat -----------------------------------------------------------------------------------------

@pytest.mark.kafka_cluster_config(**CONFIG)
def test_kcat_through_leader_and_coordinator_failover(kafka_cluster, tmp_path):
    """kcat reports only failed deliveries (`-v -v` adds a line per delivered one): every line
    written is acknowledged when none failed and kcat exits 0. Its consumer (-G, -e) reads at
    full speed, so here the coordinator's broker dies just before it starts: it has to find the
    new coordinator to join at all."""
    run = Failover(kafka_cluster, "kcat")
    err_path = tmp_path / "kcat-producer.err"
    with open(err_path, "w") as err_file:
        producer = subprocess.Popen(
            [KCAT, "-P", "-b", run.bootstrap, "-t", run.topic, "-K", ":", "-v", "-v",
             "-X", "acks=all", "-X", "enable.idempotence=true", "-X", "linger.ms=5"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err_file, text=True)
    try:
        for i, key, value in run.sends():
            producer.stdin.write(f"{key}:{value}\n")
            producer.stdin.flush()
            run.maybe_kill_leader(progress=i + 1)
        producer.stdin.close()                  # kcat waits for every delivery report, then exits
        producer.wait(PRODUCE_TIMEOUT_S)
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait(10)
    err = err_path.read_text()
    delivered = err.count("Message delivered to partition")
    failures = [line for line in err.splitlines() if "Delivery failed" in line]
    for line in failures:
        run.fail(None, line)
    if delivered == RECORDS and not failures and producer.returncode == 0:
        for i in range(RECORDS):
            run.ack(None, None, run.value(i), timed=False)
    run.log(f"kcat producer exit {producer.returncode}, {delivered} delivered")
    run.produced()

    run.maybe_kill_coordinator(now=True)
    done = subprocess.run(
        [KCAT, "-b", run.bootstrap, "-G", run.group, "-X", "auto.offset.reset=earliest",
         "-e", "-q", "-f", "%p %o %s\\n", run.topic],
        capture_output=True, text=True, timeout=CONSUME_TIMEOUT_S)
    for line in done.stdout.splitlines():
        partition, offset, value = line.split(" ", 2)
        run.got(int(partition), int(offset), value)
    assert done.returncode == 0, done.stderr[-2000:]
    run.check()
