"""Idempotent producers whose connections are cut mid-stream: no duplicates, no gaps, in order.

The broker advertises a loopback TCP proxy (advertised.listeners), so after bootstrap every
client connection runs through it. While the producer streams, the proxy keeps cutting its
connections at the worst moment: it reads a chunk of the broker's answer (typically a Produce
response - the batch IS appended), throws it away and closes both sides. The producer never
learns its batch was written, reconnects and retries it with the same producer id and sequence;
the broker must answer the retry with the original offsets instead of appending it again
(storage's producer state), and keep the order. At the end every message must be in the log
exactly once, in the order sent within its partition.
"""
import socket
import threading
import time

import pytest

from tests.integration.conftest import free_port

pytestmark = pytest.mark.integration

COUNT = 20_000
PARTITIONS = 2


class CuttingProxy:
    """Forwards 127.0.0.1:port -> target; `cut_every` broker->client chunks, drop one and cut."""

    def __init__(self, port: int, target_port: int):
        self.port = port
        self.target_port = target_port
        self.cut_every = 0            # 0 = never cut
        self.cuts = 0
        self._lock = threading.Lock()
        self._chunks = 0
        self._closed = False
        self._pairs = []
        self._listener = socket.create_server(("127.0.0.1", port))
        self._listener.settimeout(0.2)
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self):
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except (socket.timeout, OSError):
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            pair = (client, upstream)
            with self._lock:
                self._pairs.append(pair)
            threading.Thread(target=self._pump, args=(client, upstream, pair, False),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, pair, True),
                             daemon=True).start()

    def _pump(self, src, dst, pair, from_broker):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if from_broker and self._should_cut():
                    self.cuts += 1
                    break                    # the answer is lost; both sides are closed
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in pair:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def _should_cut(self) -> bool:
        with self._lock:
            if not self.cut_every:
                return False
            self._chunks += 1
            return self._chunks % self.cut_every == 0

    def close(self):
        self._closed = True
        self._listener.close()
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for s in pair:
                s.close()
        self._thread.join(2)


@pytest.fixture
def proxied_broker(broker_process):
    port = free_port()
    broker = broker_process(advertised_listeners=f"PLAINTEXT://127.0.0.1:{port}")
    proxy = CuttingProxy(port, broker.port)
    yield broker, proxy
    proxy.close()


def create_topic(bootstrap, name):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, PARTITIONS, 1)]).values():
        future.result(timeout=15)


def consume_all(bootstrap, topic, expected):
    """Everything in `topic` (the proxy no longer cuts; clients reach the broker through it)."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        msgs = consumer.consume(5000, 1.0)
        for msg in msgs:
            assert msg.error() is None, msg.error()
            out.append((msg.partition(), msg.offset(), int(msg.value())))
        if not msgs and len(out) >= expected:
            break
    consumer.close()
    return out


def check_exactly_once_in_order(messages):
    values = [v for _, _, v in messages]
    duplicates = len(values) - len(set(values))
    assert duplicates == 0, f"{duplicates} duplicated messages"
    missing = set(range(COUNT)) - set(values)
    assert not missing, f"{len(missing)} messages missing, e.g. {sorted(missing)[:5]}"
    by_partition = {}
    for partition, offset, value in sorted(messages):
        by_partition.setdefault(partition, []).append(value)
    for partition, seq in by_partition.items():
        assert seq == sorted(seq), f"partition {partition} out of order"


def test_confluent_idempotent_producer_survives_cut_connections(proxied_broker):
    from confluent_kafka import Producer
    broker, proxy = proxied_broker
    bootstrap = f"127.0.0.1:{proxy.port}"
    create_topic(bootstrap, "idem")
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 2, "batch.num.messages": 200,
                         "max.in.flight.requests.per.connection": 5,
                         "retry.backoff.ms": 20, "reconnect.backoff.ms": 10,
                         "reconnect.backoff.max.ms": 100, "message.timeout.ms": 60000})
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)

    proxy.cut_every = 7
    for i in range(COUNT):
        while True:
            try:
                producer.produce("idem", b"%d" % i, partition=i % PARTITIONS,
                                 on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(60)
    proxy.cut_every = 0
    assert remaining == 0 and not errors, (remaining, errors[:3])
    assert proxy.cuts >= 5, "the proxy never cut a connection: the test proves nothing"
    check_exactly_once_in_order(consume_all(f"127.0.0.1:{broker.port}", "idem", COUNT))


def test_kafka_python_idempotent_producer_survives_cut_connections(proxied_broker):
    from kafka import KafkaProducer
    broker, proxy = proxied_broker
    bootstrap = f"127.0.0.1:{proxy.port}"
    create_topic(bootstrap, "idem-kp")
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all",
                             linger_ms=2, batch_size=4096, retries=1000,
                             retry_backoff_ms=20, reconnect_backoff_ms=10,
                             reconnect_backoff_max_ms=100, delivery_timeout_ms=60000,
                             request_timeout_ms=5000)
    proxy.cut_every = 5
    futures = [producer.send("idem-kp", b"%d" % i, partition=i % PARTITIONS)
               for i in range(COUNT)]
    producer.flush(60)
    proxy.cut_every = 0
    failed = [f.exception for f in futures if f.failed()]
    producer.close()
    assert not failed, failed[:3]
    assert proxy.cuts >= 3, "the proxy never cut a connection: the test proves nothing"
    messages = consume_all(f"127.0.0.1:{broker.port}", "idem-kp", COUNT)
    check_exactly_once_in_order(messages)


def test_aiokafka_idempotent_producer_survives_cut_connections(proxied_broker):
    import asyncio

    from aiokafka import AIOKafkaProducer
    broker, proxy = proxied_broker
    bootstrap = f"127.0.0.1:{proxy.port}"
    create_topic(bootstrap, "idem-aio")

    async def produce():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True,
                                    acks="all", linger_ms=2, max_batch_size=4096,
                                    retry_backoff_ms=20, request_timeout_ms=5000)
        await producer.start()
        try:
            proxy.cut_every = 5
            futures = [await producer.send("idem-aio", b"%d" % i, partition=i % PARTITIONS)
                       for i in range(COUNT)]
            results = await asyncio.wait_for(
                asyncio.gather(*futures, return_exceptions=True), 90)
        finally:
            proxy.cut_every = 0
            await producer.stop()
        return [r for r in results if isinstance(r, BaseException)]

    failed = asyncio.run(produce())
    assert not failed, failed[:3]
    assert proxy.cuts >= 3, "the proxy never cut a connection: the test proves nothing"
    check_exactly_once_in_order(consume_all(f"127.0.0.1:{broker.port}", "idem-aio", COUNT))
