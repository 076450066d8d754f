"""The ISR-change channel to the controller (broker/alter_partition_manager.py) against a
controller on a real socket that misbehaves: a request that times out closes its connection
and is sent again on a new one (Kafka's NetworkClient), after controller.socket.timeout.ms;
an answer with an error code this broker does not know is retried, not fatal."""
import asyncio
import struct
import uuid
from types import SimpleNamespace

from protocol.api import ApiKey
from protocol.headers import encode_response, parse_request_header
from protocol.messages import ApiVersionsResponse
from protocol.messages.alter_partition import AlterPartitionRequest, AlterPartitionResponse

from broker.alter_partition_manager import AlterPartitionManager


class Controller:
    """Answers ApiVersions; AlterPartition as `answer(connection number, attempt)` says:
    None = never, else an error code (the new ISR with NONE)."""

    def __init__(self, answer):
        self.answer = answer
        self.connections = 0
        self.attempts = []                    # the connection of each AlterPartition
        self.isrs = []                        # the ISR each asked for

    async def serve(self, reader, writer):
        self.connections += 1
        number = self.connections
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                header, pos = parse_request_header(frame)
                if header.api_key == ApiKey.API_VERSIONS:
                    response = ApiVersionsResponse(error_code=0, api_keys=[
                        ApiVersionsResponse.ApiVersion(api_key=k, min_version=0, max_version=3)
                        for k in (ApiKey.API_VERSIONS, ApiKey.ALTER_PARTITION)])
                else:
                    request = AlterPartitionRequest.decode(frame[pos:], header.api_version)
                    self.attempts.append(number)
                    self.isrs.append([s.broker_id for s in
                                      request.topics[0].partitions[0].new_isr_with_epochs])
                    code = self.answer(number, len(self.attempts))
                    if code is None:
                        continue
                    topic = request.topics[0]
                    p = topic.partitions[0]
                    response = AlterPartitionResponse(error_code=0, topics=[
                        AlterPartitionResponse.TopicData(topic_id=topic.topic_id, partitions=[
                            AlterPartitionResponse.PartitionData(
                                partition_index=p.partition_index, error_code=code, leader_id=1,
                                leader_epoch=p.leader_epoch,
                                isr=[s.broker_id for s in p.new_isr_with_epochs],
                                partition_epoch=p.partition_epoch + 1)])])
                for piece in encode_response(header.correlation_id, header.api_key,
                                             header.api_version, response):
                    writer.write(piece)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass


async def change_isr(controller: Controller, timeout_ms: int = 300, isr_order=(1,),
                     new_isr=(1, 2)):
    server = await asyncio.start_server(controller.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    topic_id = uuid.uuid4()
    part = SimpleNamespace(topic="t", partition=0, topic_id=topic_id, pending_isr=None,
                           leader_epoch=1, partition_epoch=1, isr=set(isr_order),
                           isr_order=list(isr_order),
                           maybe_increment_high_watermark=lambda: False)
    part.set_isr = lambda members: vars(part).update(isr=set(members), isr_order=list(members))
    endpoints = {"PLAINTEXT": ("127.0.0.1", port)}
    broker = SimpleNamespace(
        broker_id=1, config={"controller.socket.timeout.ms": timeout_ms},
        metadata=SimpleNamespace(controller_id=0, live_brokers={
            0: SimpleNamespace(endpoints=endpoints), 1: SimpleNamespace(endpoints=endpoints)}),
        cluster=SimpleNamespace(inter_broker_listener="PLAINTEXT", broker_epoch=5),
        replica_manager=SimpleNamespace(topic_name=lambda tid: "t",
                                        get_partition=lambda topic, p: part))
    manager = AlterPartitionManager(broker)
    manager.submit(part, set(new_isr))
    try:
        async with asyncio.timeout(20):
            while part.pending_isr is not None:
                await asyncio.sleep(0.01)
    finally:
        await manager.shutdown()
        server.close()
    return part


def test_a_timed_out_request_is_sent_again_on_a_new_connection():
    # the first connection swallows AlterPartition (dropped on the way): it was retried on
    # it for ever, each attempt waiting out the timeout
    controller = Controller(lambda connection, attempt: None if connection == 1 else 0)
    part = asyncio.run(change_isr(controller))
    assert part.isr == {1, 2} and part.partition_epoch == 2
    assert controller.attempts == [1, 2]


def test_an_unknown_error_code_is_retried():
    controller = Controller(lambda connection, attempt: 9999 if attempt == 1 else 0)
    part = asyncio.run(change_isr(controller))
    assert part.isr == {1, 2}
    assert len(controller.attempts) == 2


def test_the_new_isr_keeps_the_current_order_and_a_rejoining_replica_goes_last():
    """Kafka's leader sends isr + replica (isr -- outOfSync): describe shows "Isr: 1,2,0" after
    broker 0 rejoined (this sent them sorted: "0,1,2")."""
    controller = Controller(lambda connection, attempt: 0)
    part = asyncio.run(change_isr(controller, isr_order=(2, 1), new_isr=(0, 1, 2)))
    assert controller.isrs == [[2, 1, 0]]
    assert part.isr_order == [2, 1, 0]
    controller = Controller(lambda connection, attempt: 0)
    asyncio.run(change_isr(controller, isr_order=(2, 0, 1), new_isr=(2, 1)))
    assert controller.isrs == [[2, 1]]
