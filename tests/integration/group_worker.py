"""A consumer-group member in its own process, for tests that SIGKILL or restart consumers.

    python tests/integration/group_worker.py CLIENT BOOTSTRAP GROUP TOPIC [options]
    CLIENT: confluent | kafka-python | aiokafka

It subscribes, and for every message commits offset+1 synchronously BEFORE reporting it, so a
reported message is a committed one. It prints JSON lines on stdout (flushed):
    {"event": "assigned", "partitions": [0, 3]}     after every assignment change
    {"event": "msg", "partition": 0, "offset": 5, "value": "..."}
    {"event": "revoked", "partitions": [...]}       (confluent/kafka-python listeners)
It exits on SIGTERM (closing the consumer: dynamic members leave the group) or after --max-s.
"""
import argparse
import json
import signal
import sys
import time


def emit(**event):
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def run_confluent(args, stop):
    from confluent_kafka import Consumer, TopicPartition
    conf = {"bootstrap.servers": args.bootstrap, "group.id": args.group,
            "session.timeout.ms": args.session_ms, "heartbeat.interval.ms": 500,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "partition.assignment.strategy": args.assignor}
    if args.instance_id:
        conf["group.instance.id"] = args.instance_id
    consumer = Consumer(conf)
    owned = set()

    def on_assign(c, partitions):
        owned.update(p.partition for p in partitions)
        if args.assignor == "cooperative-sticky":
            c.incremental_assign(partitions)
        emit(event="assigned", partitions=sorted(owned), added=sorted(p.partition for p in partitions))

    def on_revoke(c, partitions):
        owned.difference_update(p.partition for p in partitions)
        if args.assignor == "cooperative-sticky":
            c.incremental_unassign(partitions)
        emit(event="revoked", partitions=sorted(p.partition for p in partitions))

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
    while not stop():
        msg = consumer.poll(0.2)
        if msg is None or msg.error():
            continue
        consumer.commit(offsets=[TopicPartition(msg.topic(), msg.partition(), msg.offset() + 1)],
                        asynchronous=False)
        emit(event="msg", partition=msg.partition(), offset=msg.offset(),
             value=msg.value().decode())
    consumer.close()


def run_kafka_python(args, stop):
    from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    from kafka.structs import OffsetAndMetadata
    assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
                "sticky": StickyPartitionAssignor}[args.assignor]
    consumer = KafkaConsumer(bootstrap_servers=args.bootstrap, group_id=args.group,
                             session_timeout_ms=args.session_ms, heartbeat_interval_ms=500,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             partition_assignment_strategy=[assignor],
                             group_instance_id=args.instance_id)

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            emit(event="revoked", partitions=sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned):
            emit(event="assigned", partitions=sorted(tp.partition for tp in assigned))

    consumer.subscribe([args.topic], listener=Listener())
    while not stop():
        # Not shorter: in kafka-python 3.0.12 a poll whose timeout runs out after the SyncGroup
        # response has arrived but before the assignment is applied leaves the member with no
        # partitions and heartbeats off for good (seen as a consumer that never reads, then
        # UNKNOWN_MEMBER_ID on LeaveGroup). A first join that also creates __consumer_offsets
        # and rejoins once for topic metadata could take ~200 ms.
        batches = consumer.poll(timeout_ms=1000)
        for tp, messages in batches.items():
            for msg in messages:
                consumer.commit({TopicPartition(tp.topic, tp.partition):
                                 OffsetAndMetadata(msg.offset + 1, "", -1)})
                emit(event="msg", partition=tp.partition, offset=msg.offset,
                     value=msg.value.decode())
    consumer.close()


def run_aiokafka(args, stop):
    import asyncio
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
    from aiokafka.structs import OffsetAndMetadata
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
                "sticky": StickyPartitionAssignor}[args.assignor]

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            emit(event="revoked", partitions=sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned):
            emit(event="assigned", partitions=sorted(tp.partition for tp in assigned))

    async def main():
        consumer = AIOKafkaConsumer(bootstrap_servers=args.bootstrap, group_id=args.group,
                                    session_timeout_ms=args.session_ms,
                                    heartbeat_interval_ms=500, auto_offset_reset="earliest",
                                    enable_auto_commit=False,
                                    partition_assignment_strategy=[assignor],
                                    group_instance_id=args.instance_id)
        await consumer.start()
        consumer.subscribe([args.topic], listener=Listener())
        try:
            while not stop():
                batches = await consumer.getmany(timeout_ms=200)
                for tp, messages in batches.items():
                    for msg in messages:
                        await consumer.commit({TopicPartition(tp.topic, tp.partition):
                                               OffsetAndMetadata(msg.offset + 1, "")})
                        emit(event="msg", partition=tp.partition, offset=msg.offset,
                             value=msg.value.decode())
        finally:
            await consumer.stop()
    asyncio.run(main())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("client", choices=["confluent", "kafka-python", "aiokafka"])
    parser.add_argument("bootstrap")
    parser.add_argument("group")
    parser.add_argument("topic")
    parser.add_argument("--session-ms", type=int, default=6000)
    parser.add_argument("--assignor", default="range")
    parser.add_argument("--instance-id")
    parser.add_argument("--max-s", type=float, default=120)
    args = parser.parse_args()
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    deadline = time.monotonic() + args.max_s

    def stop():
        return bool(stopping) or time.monotonic() > deadline
    {"confluent": run_confluent, "kafka-python": run_kafka_python,
     "aiokafka": run_aiokafka}[args.client](args, stop)


if __name__ == "__main__":
    main()
