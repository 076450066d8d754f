"""A consume-transform-produce worker in its own process, for tests that SIGKILL it mid-flight.

    python tests/integration/txn_worker.py BOOTSTRAP TRANSACTIONAL_ID GROUP IN_TOPIC OUT_TOPIC

With confluent-kafka: a read_committed consumer of IN_TOPIC in GROUP and a transactional
producer; each batch of up to 50 messages is copied to OUT_TOPIC (value upper-cased) and the
consumer's positions are committed in the same transaction (send_offsets_to_transaction), so a
copy exists exactly once whatever moment the process dies at. Prints one JSON line per committed
transaction: {"committed": n_messages}. Runs until SIGTERM or --max-s.
"""
import argparse
import json
import signal
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "transactional_id", "group", "in_topic", "out_topic"):
        parser.add_argument(name)
    parser.add_argument("--max-s", type=float, default=120)
    args = parser.parse_args()
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))

    from confluent_kafka import Consumer, Producer
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 500})
    producer = Producer({"bootstrap.servers": args.bootstrap,
                         "transactional.id": args.transactional_id,
                         "transaction.timeout.ms": 10000})
    producer.init_transactions(30)
    consumer.subscribe([args.in_topic])
    deadline = time.monotonic() + args.max_s
    while not stopping and time.monotonic() < deadline:
        messages = [m for m in consumer.consume(50, 0.5) if not m.error()]
        if not messages:
            continue
        producer.begin_transaction()
        for m in messages:
            producer.produce(args.out_topic, key=m.key(), value=m.value().upper())
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        sys.stdout.write(json.dumps({"committed": len(messages)}) + "\n")
        sys.stdout.flush()
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
