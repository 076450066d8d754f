"""The two example tests of the README's "Testing with an embedded broker" section, verbatim."""
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer, Producer


@pytest.mark.kafka_broker_config(topics={"orders": 3})
def test_orders_round_trip(kafka_broker):
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    for i in range(3):
        producer.produce("orders", key=f"order-{i}", value=f"{i * 10}")
    assert producer.flush(10) == 0

    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap_servers,
                         "group.id": "billing", "auto.offset.reset": "earliest"})
    consumer.subscribe(["orders"])
    values = []
    while len(values) < 3:
        message = consumer.poll(10)
        assert message is not None and message.error() is None
        values.append(message.value())
    consumer.close()
    assert sorted(values) == [b"0", b"10", b"20"]
    # the broker's own view, through the project's client
    assert sorted(r.value for r in kafka_broker.read_all("orders")) == [b"0", b"10", b"20"]


@pytest.mark.asyncio
async def test_events_round_trip(kafka_broker):
    kafka_broker.create_topic("events")
    producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers)
    await producer.start()
    try:
        await producer.send_and_wait("events", b"hello")
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer("events", bootstrap_servers=kafka_broker.bootstrap_servers,
                                group_id="readers", auto_offset_reset="earliest",
                                enable_auto_commit=False)
    await consumer.start()
    try:
        message = await consumer.getone()
        assert message.value == b"hello"
        await consumer.commit()
        # .aio: the helper awaits without blocking this loop
        assert await kafka_broker.aio.wait_for_committed("readers", "events", 1) == 1
    finally:
        await consumer.stop()
