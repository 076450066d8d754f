"""A server that answers a producer at once and keeps nothing: the ceiling of the client side.

`python -m bench.null_broker` listens on 127.0.0.1 (a free port, printed on the first line of
stdout) and serves the requests a transactional or idempotent producer sends, each answered
with success the moment it is decoded: ApiVersions, Metadata (every topic asked for has
`--partitions` partitions led by this server), FindCoordinator (this server), InitProducerId,
AddPartitionsToTxn, Produce (offsets counted, records dropped), EndTxn. Any other request
closes its connection. It stores nothing, writes no log, runs no coordinator and sends no
transaction marker.

bench/txn_bench.py runs its transactional loop against it to show how fast the client can go
with a broker that costs nothing: whatever the broker does, a client cannot commit faster. It
is Python (the project's codecs), so each request still costs it some tens of microseconds;
a server in C would put the ceiling a little higher, never lower.

Not a broker: it answers a write it did not store. Its only test
(tests/integration/test_bench_null_broker.py) checks that a real client runs against it.
"""
from __future__ import annotations

import argparse
import asyncio
import struct
import sys

from protocol.api import API_SPECS, ApiKey
from protocol.headers import encode_response, parse_request_header
from protocol.messages.add_partitions_to_txn import AddPartitionsToTxnResponse
from protocol.messages.api_versions import ApiVersionsResponse
from protocol.messages.end_txn import EndTxnResponse
from protocol.messages.find_coordinator import FindCoordinatorResponse
from protocol.messages.init_producer_id import InitProducerIdResponse
from protocol.messages.metadata import MetadataResponse
from protocol.messages.produce import ProduceResponse
from storage.record_batch import iter_batches

_SIZE = struct.Struct(">i")
NODE_ID = 0
CLUSTER_ID = "null-broker"


class NullBroker:
    def __init__(self, host: str, port: int, partitions: int):
        self.host, self.port, self.partitions = host, port, partitions
        self.next_offset: dict = {}          # (topic, partition) -> next offset
        self.producer_id = 1000
        self.epochs: dict = {}               # transactional id -> epoch
        from broker.handlers import HANDLERS
        self.versions = [
            ApiVersionsResponse.ApiVersion(api_key=key, min_version=module.MIN_VERSION,
                                           max_version=module.MAX_VERSION)
            for key, module in HANDLERS.items() if key in self.ANSWERS]

    ANSWERS = {ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.FIND_COORDINATOR,
               ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.PRODUCE,
               ApiKey.END_TXN}

    def answer(self, api_key: int, version: int, request):
        if api_key == ApiKey.API_VERSIONS:
            return ApiVersionsResponse(api_keys=self.versions)
        if api_key == ApiKey.METADATA:
            return self._metadata(request)
        if api_key == ApiKey.FIND_COORDINATOR:
            if version >= 4:
                return FindCoordinatorResponse(coordinators=[
                    FindCoordinatorResponse.Coordinator(key=key, node_id=NODE_ID,
                                                        host=self.host, port=self.port)
                    for key in request.coordinator_keys])
            return FindCoordinatorResponse(node_id=NODE_ID, host=self.host, port=self.port)
        if api_key == ApiKey.INIT_PRODUCER_ID:
            tid = request.transactional_id
            if tid is None:
                self.producer_id += 1
                return InitProducerIdResponse(producer_id=self.producer_id, producer_epoch=0)
            epoch = self.epochs[tid] = self.epochs.get(tid, -1) + 1
            return InitProducerIdResponse(producer_id=hash(tid) & 0x7FFFFFFF,
                                          producer_epoch=epoch)
        if api_key == ApiKey.ADD_PARTITIONS_TO_TXN:
            R = AddPartitionsToTxnResponse
            if version <= 3:
                return R(results_by_topic_v3_and_below=[
                    R.AddPartitionsToTxnTopicResult(name=t.name, results_by_partition=[
                        R.AddPartitionsToTxnPartitionResult(partition_index=p)
                        for p in t.partitions])
                    for t in request.v3_and_below_topics])
            return R(results_by_transaction=[
                R.AddPartitionsToTxnResult(transactional_id=txn.transactional_id,
                                           topic_results=[
                    R.AddPartitionsToTxnTopicResult(name=t.name, results_by_partition=[
                        R.AddPartitionsToTxnPartitionResult(partition_index=p)
                        for p in t.partitions])
                    for t in txn.topics])
                for txn in request.transactions])
        if api_key == ApiKey.PRODUCE:
            return self._produce(request)
        if api_key == ApiKey.END_TXN:
            return EndTxnResponse()
        return None

    def _metadata(self, request):
        R = MetadataResponse
        names = [t.name for t in request.topics or []]
        topics = [R.MetadataResponseTopic(name=name, partitions=[
            R.MetadataResponsePartition(partition_index=p, leader_id=NODE_ID, leader_epoch=0,
                                        replica_nodes=[NODE_ID], isr_nodes=[NODE_ID])
            for p in range(self.partitions)]) for name in names]
        return R(brokers=[R.MetadataResponseBroker(node_id=NODE_ID, host=self.host,
                                                   port=self.port)],
                 cluster_id=CLUSTER_ID, controller_id=NODE_ID, topics=topics)

    def _produce(self, request):
        R = ProduceResponse
        out = []
        for topic in request.topic_data:
            parts = []
            for p in topic.partition_data:
                key = (topic.name, p.index)
                base = self.next_offset.get(key, 0)
                count = sum(b.next_offset - b.base_offset for b in iter_batches(p.records or b""))
                self.next_offset[key] = base + count
                parts.append(R.PartitionProduceResponse(index=p.index, base_offset=base))
            out.append(R.TopicProduceResponse(name=topic.name, partition_responses=parts))
        return R(responses=out)

    async def serve(self, reader, writer):
        try:
            while True:
                size = _SIZE.unpack(await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                header, offset = parse_request_header(frame)
                request = API_SPECS[header.api_key].request.decode(frame, header.api_version,
                                                                   offset)
                response = self.answer(header.api_key, header.api_version, request)
                if response is None:
                    break
                if header.api_key == ApiKey.PRODUCE and request.acks == 0:
                    continue
                writer.write(b"".join(bytes(p) for p in encode_response(
                    header.correlation_id, header.api_key, header.api_version, response)))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _main(partitions: int) -> None:
    node = NullBroker("127.0.0.1", 0, partitions)
    server = await asyncio.start_server(node.serve, "127.0.0.1", 0)
    node.port = server.sockets[0].getsockname()[1]
    print(node.port, flush=True)
    async with server:
        await server.serve_forever()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.null_broker", description=__doc__)
    parser.add_argument("--partitions", type=int, default=6)
    args = parser.parse_args(argv)
    try:
        import uvloop                       # as the broker runs
        uvloop.install()
    except ImportError:
        pass
    try:
        asyncio.run(_main(args.partitions))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
