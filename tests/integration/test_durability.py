"""kill -9 of the broker mid-produce loses no acknowledged message.

A producer streams to a 2-partition topic and notes every message the broker acknowledged
(acks=all; with one replica, once it is in the log - page cache, not fsync: a SIGKILL of the
process leaves the page cache intact). The broker is SIGKILLed twice in the middle of the stream
and restarted on the same log dir and port (recovery without the clean-shutdown marker); the
producer reconnects and carries on. Afterwards every acknowledged message must be readable and
each partition must hold contiguous offsets from 0 (recovery cut any torn tail cleanly).
"""
import os
import time

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 2
KILLS = 2
ACKS_BETWEEN_KILLS = 4000
IN_FLIGHT = 2000          # unacknowledged messages the producer may have queued at a time


def create_topic(bootstrap, name):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, PARTITIONS, 1)]).values():
        future.result(timeout=15)


def consume_all(bootstrap, topic):
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check",
                         "enable.auto.commit": False})
    ends = {}
    for p in range(PARTITIONS):
        ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out = []
    deadline = time.monotonic() + 30
    while sum(1 for _ in out) < sum(ends.values()) and time.monotonic() < deadline:
        for msg in consumer.consume(5000, 1.0):
            assert msg.error() is None, msg.error()
            out.append((msg.partition(), msg.offset(), int(msg.value())))
    consumer.close()
    return out, ends


@pytest.mark.parametrize("idempotent,stop", [(False, "kill"), (True, "kill"), (True, "term")],
                         ids=["plain", "idempotent", "idempotent-sigterm"])
def test_sigkill_mid_produce_loses_no_acknowledged_message(broker_process, idempotent, stop):
    """With an idempotent producer, also no duplicates and the order kept: the producer state
    (which batches each producer id already wrote) is rebuilt from the log after the crash.
    The "term" variant stops the broker gracefully instead (SIGTERM with produce requests in
    flight): it must exit 0 with the clean-shutdown marker, and the same guarantees hold."""
    from confluent_kafka import Producer
    broker = broker_process()
    create_topic(broker.bootstrap, "durable")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                         "enable.idempotence": idempotent,
                         "linger.ms": 1, "batch.num.messages": 100,
                         "message.timeout.ms": 60000, "reconnect.backoff.ms": 20,
                         "reconnect.backoff.max.ms": 200})
    acked = []

    def on_delivery(err, msg):
        if err is None:
            acked.append(int(msg.value()))

    sent = 0
    kills = 0
    deadline = time.monotonic() + 90
    target = ACKS_BETWEEN_KILLS
    while time.monotonic() < deadline:
        for _ in range(200 if sent - len(acked) < IN_FLIGHT else 0):
            try:
                producer.produce("durable", b"%d" % sent, partition=sent % PARTITIONS,
                                 on_delivery=on_delivery)
                sent += 1
            except BufferError:
                break
        producer.poll(0.001)
        if len(acked) >= target:
            if kills == KILLS:
                break
            if stop == "kill":
                broker.kill()                          # SIGKILL while batches are in flight
            else:
                assert broker.stop() == 0
                assert os.path.exists(os.path.join(broker.log_dir, ".kafka_cleanshutdown"))
            kills += 1
            for _ in range(20):                        # keep producing into the void a moment
                producer.poll(0.01)
            broker.restart()
            target = len(acked) + ACKS_BETWEEN_KILLS
    assert kills == KILLS, f"only {len(acked)} acks before the deadline"
    producer.flush(60)

    messages, ends = consume_all(broker.bootstrap, "durable")
    stored = {v for _, _, v in messages}
    lost = [v for v in acked if v not in stored]
    assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {lost[:5]}"
    by_partition = {}
    for partition, offset, value in sorted(messages):
        by_partition.setdefault(partition, []).append((offset, value))
    for partition, entries in by_partition.items():
        offsets = [o for o, _ in entries]
        assert offsets == list(range(ends[partition])), f"gap in partition {partition}"
    assert len(acked) >= KILLS * ACKS_BETWEEN_KILLS
    if idempotent:
        values = [v for _, _, v in messages]
        assert len(values) == len(set(values)), "duplicates after the restarts"
        for partition, entries in by_partition.items():
            in_log = [v for _, v in entries]
            assert in_log == sorted(in_log), f"partition {partition} out of order"
