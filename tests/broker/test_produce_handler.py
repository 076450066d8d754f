"""Produce and InitProducerId handlers, driven with encoded requests over a real Log."""
import types
import uuid

import pytest

from protocol.errors import ErrorCode
from protocol.messages.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from protocol.messages.produce import ProduceRequest, ProduceResponse
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.record_batch import RecordBatchBuilder, iter_batches

from broker.context import RequestContext
from broker.handlers import init_producer_id, produce
from broker.replica_manager import ReplicaManager


@pytest.fixture
def broker(tmp_path):
    log_manager = LogManager([str(tmp_path / "logs")], LogConfig())
    log_manager.startup("cluster", 0)
    rm = ReplicaManager(log_manager, broker_id=0)
    for p in range(2):
        rm.become_leader("t", p, uuid.uuid4(), 0, [0], LogConfig(max_message_bytes=10_000))
    yield types.SimpleNamespace(replica_manager=rm, log_manager=log_manager, broker_id=0)
    rm.shutdown()
    log_manager.shutdown()


def batch(count=2, value=b"v", transactional=False, **kw):
    builder = RecordBatchBuilder(is_transactional=transactional, **kw)
    for i in range(count):
        builder.append(1_700_000_000_000 + i, b"k", value)
    return builder.build()


def roundtrip_request(cls, message, version):
    """Encode then decode, so the handler sees what a connection hands it (memoryviews)."""
    return cls.decode(memoryview(message.encode(version)), version)


async def call(module, broker, request, version, request_cls, response_cls):
    ctx = RequestContext(module.API_KEY, version, 1, "test")
    response = await module.handle(broker, ctx, roundtrip_request(request_cls, request, version))
    if response is None:
        return None
    return response_cls.decode(memoryview(response.encode(version)), version)


def produce_request(partitions, acks=1, timeout_ms=1000, transactional_id=None):
    topics = {}
    for (topic, index), records in partitions.items():
        topics.setdefault(topic, []).append(
            ProduceRequest.PartitionProduceData(index=index, records=records))
    return ProduceRequest(transactional_id=transactional_id, acks=acks, timeout_ms=timeout_ms,
                          topic_data=[ProduceRequest.TopicProduceData(name=t, partition_data=p)
                                      for t, p in topics.items()])


def answers(response):
    return {(t.name, p.index): p for t in response.responses for p in t.partition_responses}


@pytest.mark.parametrize("version", [3, 7, 9, 11])
async def test_produce_several_partitions_and_an_unknown_one(broker, version):
    request = produce_request({("t", 0): batch(3), ("t", 1): batch(2), ("nope", 0): batch(1)})
    response = await call(produce, broker, request, version, ProduceRequest, ProduceResponse)
    got = answers(response)
    assert got[("t", 0)].error_code == 0 and got[("t", 0)].base_offset == 0
    assert got[("t", 1)].error_code == 0 and got[("t", 1)].base_offset == 0
    assert got[("nope", 0)].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    response = await call(produce, broker, produce_request({("t", 0): batch(1)}), version,
                          ProduceRequest, ProduceResponse)
    assert answers(response)[("t", 0)].base_offset == 3
    if version >= 5:
        assert answers(response)[("t", 0)].log_start_offset == 0


async def test_acks_zero_sends_nothing_but_appends(broker):
    response = await call(produce, broker, produce_request({("t", 0): batch(4)}, acks=0), 9,
                          ProduceRequest, ProduceResponse)
    assert response is None
    assert broker.replica_manager.get_partition("t", 0).log_end_offset == 4


async def test_acks_all_with_one_replica(broker):
    response = await call(produce, broker, produce_request({("t", 0): batch(2)}, acks=-1), 9,
                          ProduceRequest, ProduceResponse)
    assert answers(response)[("t", 0)].error_code == 0


async def test_invalid_acks(broker):
    response = await call(produce, broker, produce_request({("t", 0): batch(2)}, acks=2), 9,
                          ProduceRequest, ProduceResponse)
    assert answers(response)[("t", 0)].error_code == ErrorCode.INVALID_REQUIRED_ACKS
    assert broker.replica_manager.get_partition("t", 0).log_end_offset == 0


async def test_corrupt_and_too_large_batches_are_per_partition(broker):
    corrupt = bytearray(batch(2))
    corrupt[-1] ^= 1
    big = batch(1, value=b"x" * 20_000)
    response = await call(produce, broker,
                          produce_request({("t", 0): bytes(corrupt), ("t", 1): big}), 9,
                          ProduceRequest, ProduceResponse)
    got = answers(response)
    assert got[("t", 0)].error_code == ErrorCode.CORRUPT_MESSAGE
    assert got[("t", 1)].error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert got[("t", 0)].base_offset == -1
    # no error_message: Kafka gives one only with record errors or a failed verification
    assert got[("t", 0)].error_message is None and got[("t", 1)].error_message is None
    assert all(broker.replica_manager.get_partition("t", p).log_end_offset == 0 for p in (0, 1))


async def test_transactional_batches_without_a_transactional_id_are_refused(broker):
    records = batch(1, transactional=True, producer_id=5, producer_epoch=0, base_sequence=0)
    response = await call(produce, broker, produce_request({("t", 0): records}), 9,
                          ProduceRequest, ProduceResponse)
    assert answers(response)[("t", 0)].error_code == \
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert broker.replica_manager.get_partition("t", 0).log_end_offset == 0


async def test_transactional_batches_open_a_transaction_in_the_partition(broker):
    records = batch(2, transactional=True, producer_id=5, producer_epoch=0, base_sequence=0)
    response = await call(produce, broker, produce_request({("t", 0): records},
                                                           transactional_id="tx"), 9,
                          ProduceRequest, ProduceResponse)
    assert answers(response)[("t", 0)].error_code == ErrorCode.NONE
    part = broker.replica_manager.get_partition("t", 0)
    assert (part.high_watermark, part.last_stable_offset) == (2, 0)


async def test_records_reach_the_log_byte_for_byte(broker):
    records = batch(3, value=b"hello")
    await call(produce, broker, produce_request({("t", 1): records}), 9, ProduceRequest,
               ProduceResponse)
    log = broker.replica_manager.get_partition("t", 1).log
    [view] = list(log.read_batches())
    assert [r.value for r in view.records()] == [b"hello"] * 3
    assert view.is_valid()


@pytest.mark.parametrize("version", [0, 2, 3, 4, 5])
async def test_init_producer_id_hands_out_unique_ids(broker, version):
    request = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000)
    first = await call(init_producer_id, broker, request, version, InitProducerIdRequest,
                       InitProducerIdResponse)
    second = await call(init_producer_id, broker, request, version, InitProducerIdRequest,
                        InitProducerIdResponse)
    assert first.error_code == 0 and second.error_code == 0
    assert second.producer_id == first.producer_id + 1
    assert first.producer_epoch == 0


async def test_init_producer_id_with_transactional_id_needs_the_coordinator(broker):
    """Without a transaction coordinator (this fixture has none): COORDINATOR_NOT_AVAILABLE,
    which clients retry; an empty id is INVALID_REQUEST, as Kafka's coordinator answers."""
    for tid, code in (("tx", ErrorCode.COORDINATOR_NOT_AVAILABLE),
                      ("", ErrorCode.INVALID_REQUEST)):
        request = InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60000)
        response = await call(init_producer_id, broker, request, 4, InitProducerIdRequest,
                              InitProducerIdResponse)
        assert (response.error_code, response.producer_id) == (code, -1)


@pytest.mark.parametrize("magic,codec", [(0, 0), (1, 0), (1, 1)])
async def test_produce_v2_legacy_message_sets_are_stored_as_v2(broker, magic, codec):
    from storage.legacy import build_message_set
    records = build_message_set([(1_700_000_000_000 + i, b"k%d" % i, b"v%d" % i)
                                 for i in range(3)], magic=magic, codec=codec)
    response = await call(produce, broker, produce_request({("t", 0): records}), 2,
                          ProduceRequest, ProduceResponse)
    assert answers(response)[("t", 0)].error_code == 0
    [view] = list(broker.replica_manager.get_partition("t", 0).log.read_batches())
    assert view.magic == 2
    assert [(r.offset, r.key, r.value) for r in view.records()] == \
        [(i, b"k%d" % i, b"v%d" % i) for i in range(3)]


async def test_produce_v3_refuses_legacy_message_sets(broker):
    from storage.legacy import build_message_set
    records = build_message_set([(1, b"k", b"v")], magic=1)
    response = await call(produce, broker, produce_request({("t", 0): records}), 3,
                          ProduceRequest, ProduceResponse)
    assert answers(response)[("t", 0)].error_code != 0
    assert broker.replica_manager.get_partition("t", 0).log_end_offset == 0


async def test_clients_may_not_write_internal_topics(broker):
    response = await call(produce, broker,
                          produce_request({("__consumer_offsets", 0): batch(1)}), 9,
                          ProduceRequest, ProduceResponse)
    assert answers(response)[("__consumer_offsets", 0)].error_code == \
        ErrorCode.INVALID_TOPIC_EXCEPTION


@pytest.mark.parametrize("version", [7, 8, 11])
async def test_invalid_records_carry_record_errors_from_v8(broker, version):
    broker.replica_manager.become_leader("compacted", 0, uuid.uuid4(), 0, [0],
                                         LogConfig(cleanup_policy="compact"))
    builder = RecordBatchBuilder()
    builder.append(1_700_000_000_000, b"k", b"v")
    builder.append(1_700_000_000_001, None, b"no key")
    response = await call(produce, broker, produce_request({("compacted", 0): builder.build()}),
                          version, ProduceRequest, ProduceResponse)
    answer = answers(response)[("compacted", 0)]
    assert answer.error_code == ErrorCode.INVALID_RECORD
    if version >= 8:
        assert [e.batch_index for e in answer.record_errors] == [1]
        assert answer.error_message
    assert broker.replica_manager.get_partition("compacted", 0).log_end_offset == 0


@pytest.mark.parametrize("acks", [0, 1, -1])
async def test_flush_messages_fsyncs_before_the_answer(tmp_path, acks):
    """flush.messages=1 (log.flush.interval.messages): the batch is on disk (recovery point moved)
    by the time the produce is answered, as Kafka's append flushes before responding."""
    log_manager = LogManager([str(tmp_path / "logs")], LogConfig())
    log_manager.startup("cluster", 0)
    rm = ReplicaManager(log_manager, broker_id=0)
    rm.become_leader("f", 0, uuid.uuid4(), 0, [0], LogConfig(flush_messages=1))
    rm.become_leader("n", 0, uuid.uuid4(), 0, [0], LogConfig())
    b = types.SimpleNamespace(replica_manager=rm, log_manager=log_manager, broker_id=0)
    try:
        await call(produce, b, produce_request({("f", 0): batch(3), ("n", 0): batch(3)}, acks=acks),
                   9, ProduceRequest, ProduceResponse)
        flushed = rm.get_partition("f", 0).log
        assert flushed.log_end_offset == 3 and flushed.recovery_point == 3
        # the default leaves flushing to the OS: nothing fsynced on the produce path
        assert rm.get_partition("n", 0).log.recovery_point == 0
    finally:
        rm.shutdown()
        log_manager.shutdown()
