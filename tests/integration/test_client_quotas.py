"""Client quotas with a real client: a producer_byte_rate quota set with bin/kafka-configs.sh makes a
confluent-kafka producer's produce responses carry throttle_time (librdkafka's throttle_cb), while
another client id is not throttled."""
import pathlib
import subprocess
import time

import pytest

pytestmark = pytest.mark.integration

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEADLINE_S = 20.0


def kafka_configs(bootstrap, *argv) -> str:
    result = subprocess.run([str(ROOT / "bin" / "kafka-configs.sh"), "--bootstrap-server", bootstrap, *argv],
                            capture_output=True, timeout=60, text=True)
    assert result.returncode == 0, result
    return result.stdout


def produce_and_watch_throttle(bootstrap, client_id, count) -> tuple[list, int]:
    """Produce `count` 1000-byte messages; -> (throttle times > 0 reported, messages delivered)."""
    from confluent_kafka import Producer
    throttles, delivered = [], []
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 0,
                         "batch.num.messages": 1,
                         "throttle_cb": lambda event: event.throttle_time > 0 and throttles.append(
                             event.throttle_time)})
    for _ in range(count):
        producer.produce("quota-topic", b"x" * 1000, partition=0,
                         on_delivery=lambda err, msg: err is None and delivered.append(msg.offset()))
        producer.poll(0)
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline and not throttles and len(delivered) < count:
        producer.poll(0.1)
    producer.purge()
    producer.flush(1)
    return throttles, len(delivered)


def test_producer_byte_rate_throttles_a_confluent_producer(broker_process):
    from confluent_kafka.admin import AdminClient, NewTopic
    broker = broker_process()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic("quota-topic", 1, 1)]).values():
        future.result(timeout=15)
    assert kafka_configs(broker.bootstrap, "--alter", "--entity-type", "clients", "--entity-name", "throttled",
                         "--add-config", "producer_byte_rate=1024") == \
        "Completed updating config for client throttled.\n"
    # ~15 KB at once against 1024 B/s over the 10 s minimum window: a few seconds of throttle
    throttles, _ = produce_and_watch_throttle(broker.bootstrap, "throttled", 15)
    assert throttles and all(t > 0 for t in throttles)
    # no quota for another client id: everything is delivered, nothing throttled
    throttles, delivered = produce_and_watch_throttle(broker.bootstrap, "free", 15)
    assert (throttles, delivered) == ([], 15)
