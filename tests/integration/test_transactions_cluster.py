"""Transactions in a three-broker cluster (issue 18): the coordinator of a transactional id is the
leader of its `__transaction_state` partition, replicated like any other; kill -9 of that broker
in the middle of a transaction moves the coordinator, the new one reloads the state and the
transaction still commits whole; markers reach partitions led by other brokers."""
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from coordinator.partitioning import partition_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TXN_PARTITIONS = 5
CONFIG = dict(transaction_state_log_num_partitions=TXN_PARTITIONS,
              offsets_topic_num_partitions=5)


def read_committed(bootstrap, topic, expect, timeout=60.0) -> list:
    """Values of every partition from the start, assigned (not subscribed): with a broker down
    before `__consumer_offsets` exists, a group could not be coordinated (fewer live brokers
    than offsets.topic.replication.factor, as in Kafka)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rc-{time.time_ns()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(3)])
    got, deadline = [], time.monotonic() + timeout
    try:
        while len(got) < expect and time.monotonic() < deadline:
            message = consumer.poll(0.3)
            if message is not None and not message.error():
                got.append(message.value().decode())
    finally:
        consumer.close()
    return got


@pytest.mark.kafka_cluster_config(**CONFIG)
def test_kill_9_of_the_coordinators_broker_mid_transaction(kafka_cluster):
    cluster = kafka_cluster
    bootstrap = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic("ctx", 3, 3, config={
            "min.insync.replicas": "2"})]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "cluster-tx",
                         "transaction.timeout.ms": 60000, "request.timeout.ms": 10000})
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(30):
        producer.produce("ctx", key=str(i).encode(), value=f"one-{i}".encode())
    producer.commit_transaction(60)

    state_partition = partition_for("cluster-tx", TXN_PARTITIONS)
    coordinator = cluster.leader("__transaction_state", state_partition)
    assert coordinator in cluster.brokers
    producer.begin_transaction()
    for i in range(30):
        producer.produce("ctx", key=str(i).encode(), value=f"two-{i}".encode())
    producer.flush(30)
    cluster.kill(coordinator)
    cluster.wait_for_leader("__transaction_state", state_partition, not_in=(coordinator,))
    producer.commit_transaction(90)          # found again, reloaded, markers written
    got = read_committed(bootstrap, "ctx", 60)
    assert sorted(got) == sorted([f"one-{i}" for i in range(30)] +
                                 [f"two-{i}" for i in range(30)])

    # The restarted broker catches up; a third transaction aborted through the new coordinator
    # leaves read_committed readers where they were.
    cluster.start(coordinator)
    producer.begin_transaction()
    for i in range(10):
        producer.produce("ctx", value=f"three-{i}".encode())
    producer.flush(30)
    producer.abort_transaction(60)
    producer.begin_transaction()
    producer.produce("ctx", value=b"four")
    producer.commit_transaction(60)
    got = read_committed(bootstrap, "ctx", 61)
    assert "four" in got and not any(v.startswith("three-") for v in got)
    assert len(got) == 61


@pytest.mark.kafka_cluster_config(**CONFIG)
def test_kill_9_of_a_partition_leader_mid_transaction(kafka_cluster):
    """The leader of one of the transaction's partitions (not the coordinator) dies after the
    transaction's records were acknowledged (acks=all, min.insync.replicas=2): the commit's
    marker for that partition waits for the new leader, which has every acknowledged record,
    and read_committed readers see the whole transaction."""
    cluster = kafka_cluster
    bootstrap = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic("ptx", 3, 3, config={
            "min.insync.replicas": "2"})]).values():
        future.result(30)
    coordinator = None
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "leader-tx",
                         "transaction.timeout.ms": 60000, "request.timeout.ms": 10000})
    producer.init_transactions(60)
    coordinator = cluster.leader("__transaction_state", partition_for("leader-tx", TXN_PARTITIONS))
    victim_partition = next(p for p in range(3) if cluster.leader("ptx", p) != coordinator)
    victim = cluster.leader("ptx", victim_partition)
    producer.begin_transaction()
    for i in range(60):
        producer.produce("ptx", partition=i % 3, value=f"v{i}".encode())
    producer.flush(30)
    cluster.kill(victim)
    cluster.wait_for_leader("ptx", victim_partition, not_in=(victim,))
    producer.commit_transaction(90)
    got = read_committed(bootstrap, "ptx", 60)
    assert sorted(got) == sorted(f"v{i}" for i in range(60))


@pytest.mark.kafka_cluster_config(**CONFIG)
def test_kafkajs_transactions_across_the_cluster(kafka_cluster):
    """kafkajs commits and aborts over partitions led by three brokers and sends a group's
    offsets: the markers go between brokers, and the first writes and the TxnOffsetCommit are
    verified with a coordinator that may be another broker (AddPartitionsToTxn v4)."""
    from tests.integration.test_transactions import (KAFKAJS_COMMITTED, kafkajs_group_offset,
                                                     run_kafkajs_transactions)
    bootstrap = kafka_cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic("js-ctx", 3, 3, config={
            "min.insync.replicas": "2"})]).values():
        future.result(30)
    assert len({kafka_cluster.leader("js-ctx", p) for p in range(3)}) > 1
    run_kafkajs_transactions(bootstrap, "js-ctx")
    assert sorted(read_committed(bootstrap, "js-ctx", expect=len(KAFKAJS_COMMITTED) + 1,
                                 timeout=10)) == KAFKAJS_COMMITTED
    assert kafkajs_group_offset(bootstrap, "js-ctx") == 5
    bad_requests_at_a_broker_that_does_not_coordinate(kafka_cluster, "js-ctx")


def bad_requests_at_a_broker_that_does_not_coordinate(cluster, topic) -> None:
    """Kafka checks a request's own errors before whether the broker coordinates its id: a
    client told NOT_COORDINATOR would only meet the real error after finding the coordinator."""
    import asyncio
    from protocol.errors import ErrorCode as E
    from protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
    from protocol.messages.init_producer_id import InitProducerIdRequest
    from broker.client.connection import BrokerConnection
    tid = "not-here"
    coordinator = cluster.leader("__transaction_state", partition_for(tid, TXN_PARTITIONS))
    other = next(b for b in sorted(cluster.live_brokers()) if b != coordinator)

    async def scenario():
        host, port = cluster.bootstrap(other).split(":")
        conn = await BrokerConnection(host, int(port)).connect()
        try:
            init = await conn.send(InitProducerIdRequest(transactional_id=tid,
                                                         transaction_timeout_ms=60000), 4)
            assert init.error_code == E.NOT_COORDINATOR
            too_long = await conn.send(InitProducerIdRequest(
                transactional_id=tid, transaction_timeout_ms=10**9), 4)
            assert too_long.error_code == E.INVALID_TRANSACTION_TIMEOUT
            add = await conn.send(AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=tid, v3_and_below_producer_id=1,
                v3_and_below_producer_epoch=0,
                v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
                    name=n, partitions=[0]) for n in ("nope", topic)]), 3)
            assert {(t.name, p.partition_error_code) for t in add.results_by_topic_v3_and_below
                    for p in t.results_by_partition} == {
                ("nope", E.UNKNOWN_TOPIC_OR_PARTITION), (topic, E.OPERATION_NOT_ATTEMPTED)}
        finally:
            await conn.close()
    asyncio.run(scenario())
