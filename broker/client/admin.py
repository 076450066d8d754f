"""Admin operations over the cluster client: what kafka-topics/configs/consumer-groups/... need.

Each method sends the request to the broker Kafka's AdminClient would use — the controller for
CreateTopics/DeleteTopics/CreatePartitions, the partition leader for ListOffsets/DeleteRecords/
DescribeProducers/WriteTxnMarkers (abort), the group coordinator for group calls, the transaction
coordinator for DescribeTransactions, every broker for ListGroups/ListTransactions, the named broker
for broker configs and log dirs, any broker otherwise — and returns plain Python values. Per-item
outcomes (one topic of several failed) come back as error codes in the result so a tool can report
each item like Kafka does; a failure of the whole call raises KafkaError / ClientError. Retriable
failures are retried by ``ClusterClient.retry``.
"""
from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from typing import NamedTuple

from protocol.errors import RETRIABLE, ErrorCode, KafkaError
from protocol.messages import (
    CreatePartitionsRequest, CreateTopicsRequest, DeleteGroupsRequest, DeleteRecordsRequest, DeleteTopicsRequest,
    AlterPartitionReassignmentsRequest, AlterReplicaLogDirsRequest, DescribeConfigsRequest, DescribeGroupsRequest,
    ElectLeadersRequest, ListPartitionReassignmentsRequest, DescribeLogDirsRequest, DescribeProducersRequest,
    DescribeTransactionsRequest, IncrementalAlterConfigsRequest, ListGroupsRequest, ListOffsetsRequest,
    ListTransactionsRequest, OffsetCommitRequest, OffsetDeleteRequest, OffsetFetchRequest, WriteTxnMarkersRequest,
)

from broker.client.cluster import is_retriable
from broker.client.errors import ClientError, UnsupportedVersionError
from broker.client.types import TopicPartition

# ListOffsets special timestamps (Kafka's ListOffsetsRequest constants)
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3

# DescribeConfigs/IncrementalAlterConfigs resource types and operations (Kafka's ConfigResource.Type)
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

# FindCoordinator key type of a transactional id (Kafka's FindCoordinatorRequest.CoordinatorType)
COORDINATOR_TRANSACTION = 1

# Request versions this client caps at: newer versions change addressing (topic ids, batched groups).
OFFSET_FETCH_CAP = 7
OFFSET_COMMIT_CAP = 8
LIST_OFFSETS_CAP = 9             # v9: latest-tiered (-5), same shape as v8


class NewTopic(NamedTuple):
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: dict | None = None        # partition -> [broker ids]
    configs: dict | None = None


class ListedOffset(NamedTuple):
    error_code: int
    offset: int
    timestamp: int
    leader_epoch: int


class TransactionListing(NamedTuple):
    transactional_id: str
    producer_id: int
    state: str                  # Kafka's name: Ongoing, PrepareCommit, ...


class TransactionDescription(NamedTuple):
    error_code: int             # per id: TRANSACTIONAL_ID_NOT_FOUND, ...; the fields below are then empty
    coordinator_id: int = -1
    state: str = ""
    producer_id: int = -1
    producer_epoch: int = -1
    transaction_timeout_ms: int = 0
    transaction_start_time_ms: int = -1     # -1: no transaction running
    topic_partitions: tuple = ()            # TopicPartitions, in the response's order


class ProducerState(NamedTuple):
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int                  # -1: no marker written yet
    current_txn_start_offset: int           # -1: no open transaction


class PartitionProducers(NamedTuple):
    error_code: int
    error_message: str | None
    producers: list                         # [ProducerState]


class Admin:
    def __init__(self, cluster):
        self.cluster = cluster

    # --- topics -------------------------------------------------------------------------------

    async def _controller(self) -> int | None:
        await self.cluster.refresh_metadata([])
        return self.cluster.controller_id if self.cluster.controller_id >= 0 else None

    async def create_topics(self, topics: list, *, validate_only: bool = False, timeout_ms: int = 30000) -> dict:
        """-> {name: (error_code, error_message)}."""
        T = CreateTopicsRequest
        request = CreateTopicsRequest(timeout_ms=timeout_ms, validate_only=validate_only, topics=[
            T.CreatableTopic(name=t.name, num_partitions=t.num_partitions, replication_factor=t.replication_factor,
              assignments=[T.CreatableReplicaAssignment(partition_index=p, broker_ids=list(b))
                           for p, b in sorted((t.assignments or {}).items())],
              configs=[T.CreatableTopicConfig(name=k, value=v) for k, v in (t.configs or {}).items()])
            for t in topics])

        async def op():
            response = await self.cluster.send(await self._controller(), request)
            return {r.name: (r.error_code, r.error_message) for r in response.topics}
        return await self.cluster.retry(op)

    async def delete_topics(self, names: list, *, timeout_ms: int = 30000) -> dict:
        """-> {name: (error_code, error_message)}."""
        async def op():
            conn = await self.cluster.connection(await self._controller()) if self.cluster.controller_id >= 0 \
                else await self.cluster.any_connection()
            version = conn.pick_version(DeleteTopicsRequest)
            if version >= 6:
                request = DeleteTopicsRequest(timeout_ms=timeout_ms, topics=[
                    DeleteTopicsRequest.DeleteTopicState(name=n) for n in names])
            else:
                request = DeleteTopicsRequest(timeout_ms=timeout_ms, topic_names=list(names))
            response = await conn.send(request, version)
            return {r.name: (r.error_code, getattr(r, "error_message", None)) for r in response.responses}
        return await self.cluster.retry(op)

    async def create_partitions(self, counts: dict, *, assignments: dict | None = None,
                                validate_only: bool = False, timeout_ms: int = 30000) -> dict:
        """counts: {topic: new total}; assignments: {topic: [[broker ids] per new partition]}
        (an empty list is sent as one, for the broker to refuse, as Kafka's admin does)."""
        T = CreatePartitionsRequest
        request = CreatePartitionsRequest(timeout_ms=timeout_ms, validate_only=validate_only, topics=[
            T.CreatePartitionsTopic(name=name, count=count,
              assignments=None if (assignments or {}).get(name) is None else
              [T.CreatePartitionsAssignment(broker_ids=list(b)) for b in assignments[name]])
            for name, count in counts.items()])

        async def op():
            response = await self.cluster.send(await self._controller(), request)
            return {r.name: (r.error_code, r.error_message) for r in response.results}
        return await self.cluster.retry(op)

    async def elect_leaders(self, election_type: int, partitions=None, *,
                            timeout_ms: int | None = None) -> dict:
        """ElectLeaders at the controller: election_type 0 PREFERRED, 1 UNCLEAN; `partitions`
        [TopicPartition] or None for all. -> {TopicPartition: (error_code, error_message)};
        with None, partitions that needed no election are left out (as Kafka's broker does).
        Retried until `timeout_ms` (default.api.timeout.ms); each request asks the controller
        to wait at most request.timeout.ms or the time left, as Kafka's admin client does."""
        topic_partitions = None
        if partitions is not None:
            grouped = defaultdict(list)
            for tp in partitions:
                grouped[tp.topic].append(tp.partition)
            topic_partitions = [ElectLeadersRequest.TopicPartitions(topic=t, partitions=ps)
                                for t, ps in grouped.items()]
        timeout_ms = timeout_ms or self.cluster.default_api_timeout_ms
        deadline = time.monotonic() + timeout_ms / 1000

        async def op():
            left_ms = max(0, int((deadline - time.monotonic()) * 1000))
            request = ElectLeadersRequest(election_type=election_type,
                                          topic_partitions=topic_partitions,
                                          timeout_ms=min(left_ms, self.cluster.request_timeout_ms))
            response = await self.cluster.send(await self._controller(), request)
            if response.error_code:
                raise KafkaError(response.error_code)
            out = {TopicPartition(r.topic, p.partition_id): (p.error_code, p.error_message)
                   for r in response.replica_election_results for p in r.partition_result}
            if out and all(code == ErrorCode.NOT_CONTROLLER for code, _ in out.values()):
                raise KafkaError(ErrorCode.NOT_CONTROLLER, "the controller moved")
            return out
        return await self.cluster.retry(op, timeout_ms=timeout_ms)

    async def alter_partition_reassignments(self, targets: dict, *,
                                            timeout_ms: int = 30000) -> dict:
        """AlterPartitionReassignments at the controller: {TopicPartition: [broker ids] or None
        to cancel} -> {TopicPartition: (error_code, error_message)}."""
        R = AlterPartitionReassignmentsRequest
        grouped = defaultdict(list)
        for tp, replicas in targets.items():
            grouped[tp.topic].append(R.ReassignablePartition(
                partition_index=tp.partition,
                replicas=None if replicas is None else list(replicas)))
        request = R(timeout_ms=timeout_ms, topics=[R.ReassignableTopic(name=t, partitions=ps)
                                                   for t, ps in grouped.items()])

        async def op():
            response = await self.cluster.send(await self._controller(), request)
            if response.error_code:
                raise KafkaError(response.error_code, response.error_message)
            return {TopicPartition(t.name, p.partition_index): (p.error_code, p.error_message)
                    for t in response.responses for p in t.partitions}
        return await self.cluster.retry(op, timeout_ms=timeout_ms)

    async def list_partition_reassignments(self, partitions=None, *,
                                           timeout_ms: int = 30000) -> dict:
        """ListPartitionReassignments at the controller (`partitions` None: all) ->
        {TopicPartition: (replicas, adding, removing)} of those being reassigned."""
        topics = None
        if partitions is not None:
            grouped = defaultdict(list)
            for tp in partitions:
                grouped[tp.topic].append(tp.partition)
            topics = [ListPartitionReassignmentsRequest.ListPartitionReassignmentsTopics(
                name=t, partition_indexes=ps) for t, ps in grouped.items()]
        request = ListPartitionReassignmentsRequest(timeout_ms=timeout_ms, topics=topics)

        async def op():
            response = await self.cluster.send(await self._controller(), request)
            if response.error_code:
                raise KafkaError(response.error_code, response.error_message)
            return {TopicPartition(t.name, p.partition_index):
                    (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
                    for t in response.topics for p in t.partitions}
        return await self.cluster.retry(op, timeout_ms=timeout_ms)

    async def list_topics(self) -> dict:
        """Every topic's TopicMetadata (including internal ones), freshly fetched."""
        await self.cluster.retry(lambda: self.cluster.refresh_metadata(None))
        return dict(self.cluster.topics)

    # --- configs ------------------------------------------------------------------------------

    async def describe_configs(self, resource_type: int, name: str, *, include_synonyms: bool = False,
                               keys: list | None = None):
        """-> the DescribeConfigsResult for one resource (raises its error)."""
        node = int(name) if resource_type in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER) and name else None
        request = DescribeConfigsRequest(include_synonyms=include_synonyms, resources=[
            DescribeConfigsRequest.DescribeConfigsResource(resource_type=resource_type, resource_name=name,
                                                           configuration_keys=keys)])

        async def op():
            response = await self.cluster.send(node, request)
            return response.results[0]
        result = await self.cluster.retry(op)
        if result.error_code:       # the resource's error: not retried (Kafka's describeConfigs)
            raise KafkaError(result.error_code, result.error_message or ErrorCode(result.error_code).name)
        return result

    async def incremental_alter_configs(self, resource_type: int, name: str, ops: list) -> None:
        """ops: [(config name, OP_SET/OP_DELETE/..., value or None)]."""
        node = int(name) if resource_type in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER) and name else None
        R = IncrementalAlterConfigsRequest
        request = IncrementalAlterConfigsRequest(validate_only=False, resources=[R.AlterConfigsResource(
            resource_type=resource_type, resource_name=name,
            configs=[R.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])])

        async def op():
            response = await self.cluster.send(node, request)
            r = response.responses[0]
            if r.error_code:
                raise KafkaError(r.error_code, r.error_message or ErrorCode(r.error_code).name)
        await self.cluster.retry(op)

    # --- offsets and records ------------------------------------------------------------------

    async def _by_leader(self, tps) -> dict:
        grouped = defaultdict(list)
        for tp in tps:
            grouped[await self.cluster.leader_for(tp.topic, tp.partition)].append(tp)
        return grouped

    async def list_offsets(self, specs: dict, *, isolation_level: int = 0) -> dict:
        """specs: {TopicPartition: timestamp (or LATEST/EARLIEST/MAX_TIMESTAMP)} -> {tp: ListedOffset}."""
        async def op():
            results = {}
            for node, tps in (await self._by_leader(specs)).items():
                by_topic = defaultdict(list)
                for tp in tps:
                    by_topic[tp.topic].append(tp)
                T = ListOffsetsRequest
                request = ListOffsetsRequest(replica_id=-1, isolation_level=isolation_level, topics=[
                    T.ListOffsetsTopic(name=topic, partitions=[T.ListOffsetsPartition(partition_index=tp.partition,
                                                                     timestamp=specs[tp]) for tp in group])
                    for topic, group in by_topic.items()])
                conn = await self.cluster.connection(node)
                version = conn.pick_version(ListOffsetsRequest, LIST_OFFSETS_CAP)
                if specs and min(specs.values()) == MAX_TIMESTAMP and version < 7:
                    raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "The broker does not support max-timestamp")
                response = await conn.send(request, version)
                for t in response.topics:
                    for p in t.partitions:
                        if p.error_code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE):
                            raise KafkaError(p.error_code, f"{t.name}-{p.partition_index}: not the leader")
                        offset = p.offset if version >= 1 else (p.old_style_offsets[0] if p.old_style_offsets else -1)
                        results[TopicPartition(t.name, p.partition_index)] = ListedOffset(
                            p.error_code, offset, getattr(p, "timestamp", -1), getattr(p, "leader_epoch", -1))
            return results
        return await self.cluster.retry(op)

    async def delete_records(self, before: dict, *, timeout_ms: int | None = None) -> dict:
        """before: {TopicPartition: offset} (-1 = high watermark) -> {tp: (error_code,
        low_watermark)}. As Kafka's DeleteRecordsHandler, each partition on its own: one with
        no leader now, or answered with a retriable error (a moved leader, slow followers), is
        asked again after a backoff while the others are done; what is still pending at
        `timeout_ms` (default.api.timeout.ms) gets REQUEST_TIMED_OUT. The request's own
        timeout is the time left, at most request.timeout.ms (as Kafka's admin client: the
        broker's wait and the client's end about together; either way the partition is asked
        again while time is left)."""
        cluster = self.cluster
        deadline = time.monotonic() + (timeout_ms or cluster.default_api_timeout_ms) / 1000
        pending, results, attempt = dict(before), {}, 0
        while pending:
            grouped = defaultdict(list)
            for tp in pending:
                try:
                    grouped[await cluster.leader_for(tp.topic, tp.partition)].append(tp)
                except KafkaError as e:
                    if not is_retriable(e):
                        results[tp] = (int(e.error_code), -1)
            for tp in results:
                pending.pop(tp, None)
            left_ms = min(max(0, int((deadline - time.monotonic()) * 1000)),
                          cluster.request_timeout_ms)
            answers = await asyncio.gather(
                *(self._delete_records_on(node, {tp: pending[tp] for tp in tps}, left_ms)
                  for node, tps in grouped.items()), return_exceptions=True)
            for answer in answers:
                if isinstance(answer, BaseException):
                    if not isinstance(answer, (KafkaError, ClientError)):
                        raise answer
                    continue                    # that broker's partitions are asked again
                for tp, (code, low) in answer.items():
                    if tp in pending and (code == ErrorCode.NONE or code not in RETRIABLE):
                        results[tp] = (code, low)
                        del pending[tp]
            if not pending:
                break
            if time.monotonic() >= deadline:
                results.update((tp, (ErrorCode.REQUEST_TIMED_OUT, -1)) for tp in pending)
                break
            attempt += 1
            await asyncio.sleep(min(cluster.backoff(attempt), max(0.0, deadline - time.monotonic())))
            try:
                await cluster.refresh_metadata(sorted({tp.topic for tp in pending}))
            except (KafkaError, ClientError):
                pass
        return results

    async def _delete_records_on(self, node: int, before: dict, timeout_ms: int) -> dict:
        by_topic = defaultdict(list)
        for tp in before:
            by_topic[tp.topic].append(tp)
        T = DeleteRecordsRequest
        request = DeleteRecordsRequest(timeout_ms=timeout_ms, topics=[
            T.DeleteRecordsTopic(name=topic, partitions=[T.DeleteRecordsPartition(partition_index=tp.partition,
                                                               offset=before[tp]) for tp in group])
            for topic, group in by_topic.items()])
        response = await self.cluster.send(node, request)
        return {TopicPartition(t.name, p.partition_index): (p.error_code, p.low_watermark)
                for t in response.topics for p in t.partitions}

    async def alter_replica_log_dirs(self, broker_id: int, moves: dict) -> dict:
        """AlterReplicaLogDirs on one broker: {TopicPartition: log dir} ->
        {TopicPartition: error_code}."""
        R = AlterReplicaLogDirsRequest
        by_dir = defaultdict(lambda: defaultdict(list))
        for tp, log_dir in moves.items():
            by_dir[log_dir][tp.topic].append(tp.partition)
        request = R(dirs=[R.AlterReplicaLogDir(path=d, topics=[
            R.AlterReplicaLogDirTopic(name=t, partitions=ps) for t, ps in topics.items()])
            for d, topics in by_dir.items()])
        response = await self.cluster.retry(lambda: self.cluster.send(broker_id, request))
        return {TopicPartition(t.topic_name, p.partition_index): p.error_code
                for t in response.results for p in t.partitions}

    async def describe_log_dirs(self, broker_ids: list, topics: dict | None = None) -> dict:
        """-> {broker_id: [DescribeLogDirsResult]}; topics {topic: [partitions]} or None for all."""
        T = DescribeLogDirsRequest.DescribableLogDirTopic
        request = DescribeLogDirsRequest(topics=None if topics is None else [
            T(topic=t, partitions=list(ps)) for t, ps in topics.items()])
        out = {}
        for broker_id in broker_ids:
            response = await self.cluster.retry(lambda b=broker_id: self.cluster.send(b, request))
            if getattr(response, "error_code", 0):
                raise KafkaError(response.error_code, f"DescribeLogDirs on broker {broker_id} failed")
            out[broker_id] = response.results
        return out

    # --- groups -------------------------------------------------------------------------------

    async def list_groups(self, states: list | None = None) -> list:
        """[(group_id, protocol_type, state)] from every broker."""
        await self.cluster.refresh_metadata([])
        groups = {}
        for node in sorted(self.cluster.brokers):
            response = await self.cluster.retry(
                lambda n=node: self.cluster.send(n, ListGroupsRequest(states_filter=list(states or []))))
            if response.error_code:
                raise KafkaError(response.error_code, f"ListGroups on broker {node} failed")
            for g in response.groups:
                groups[g.group_id] = (g.group_id, g.protocol_type, getattr(g, "group_state", ""))
        return sorted(groups.values())

    async def _coordinator_call(self, group_id: str, make_request, check):
        async def op():
            node = await self.cluster.find_coordinator(group_id)
            response = await self.cluster.send(node, make_request())
            check(response)
            return response
        return await self.cluster.retry(op)

    async def describe_group(self, group_id: str):
        """The DescribedGroup for ``group_id`` (group_state "Dead" when it does not exist)."""
        def check(response):
            code = response.groups[0].error_code
            if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
                raise KafkaError(code)
        response = await self._coordinator_call(group_id, lambda: DescribeGroupsRequest(groups=[group_id]), check)
        group = response.groups[0]
        if group.error_code and group.error_code != ErrorCode.GROUP_ID_NOT_FOUND:
            raise KafkaError(group.error_code, f"Describing group '{group_id}' failed: "
                                               f"{ErrorCode(group.error_code).name}")
        return group

    async def fetch_offsets(self, group_id: str, tps: list | None = None) -> dict:
        """Committed offsets: {TopicPartition: (offset, leader_epoch, metadata)}; tps None = all."""
        def make():
            if tps is None:
                return OffsetFetchRequest(group_id=group_id, topics=None)
            by_topic = defaultdict(list)
            for tp in tps:
                by_topic[tp.topic].append(tp.partition)
            return OffsetFetchRequest(group_id=group_id, topics=[
                OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()])

        def check(response):
            if response.error_code:
                raise KafkaError(response.error_code, f"Fetching offsets of group '{group_id}' failed: "
                                                      f"{ErrorCode(response.error_code).name}")

        async def op():
            node = await self.cluster.find_coordinator(group_id)
            conn = await self.cluster.connection(node)
            response = await conn.send(make(), cap=OFFSET_FETCH_CAP)
            check(response)
            return response
        response = await self.cluster.retry(op)
        out = {}
        for t in response.topics:
            for p in t.partitions:
                if p.error_code == 0 and p.committed_offset >= 0:
                    out[TopicPartition(t.name, p.partition_index)] = (
                        p.committed_offset, getattr(p, "committed_leader_epoch", -1), p.metadata)
        return out

    async def commit_offsets(self, group_id: str, offsets: dict) -> dict:
        """Commit {TopicPartition: offset} as an admin (generation -1, no member) -> {tp: error_code}."""
        by_topic = defaultdict(list)
        for tp, offset in offsets.items():
            by_topic[tp.topic].append((tp.partition, offset))
        T = OffsetCommitRequest

        async def op():
            node = await self.cluster.find_coordinator(group_id)
            conn = await self.cluster.connection(node)
            request = OffsetCommitRequest(group_id=group_id, generation_id_or_member_epoch=-1, member_id="",
                                          topics=[T.OffsetCommitRequestTopic(name=t, partitions=[
                                              T.OffsetCommitRequestPartition(partition_index=p, committed_offset=o,
                                                                             committed_metadata="")
                                              for p, o in ps]) for t, ps in by_topic.items()])
            response = await conn.send(request, cap=OFFSET_COMMIT_CAP)
            out = {}
            for t in response.topics:
                for p in t.partitions:
                    if p.error_code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
                        raise KafkaError(p.error_code)
                    out[TopicPartition(t.name, p.partition_index)] = p.error_code
            return out
        return await self.cluster.retry(op)

    async def delete_groups(self, group_ids: list) -> dict:
        """-> {group_id: error_code}."""
        out = {}
        for group_id in group_ids:
            def check(response):
                code = response.results[0].error_code
                if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
                    raise KafkaError(code)
            response = await self._coordinator_call(
                group_id, lambda g=group_id: DeleteGroupsRequest(groups_names=[g]), check)
            out[group_id] = response.results[0].error_code
        return out

    async def delete_offsets(self, group_id: str, tps: list) -> tuple[int, dict]:
        """OffsetDelete -> (group error_code, {tp: error_code})."""
        by_topic = defaultdict(list)
        for tp in tps:
            by_topic[tp.topic].append(tp.partition)
        T = OffsetDeleteRequest

        def make():
            return OffsetDeleteRequest(group_id=group_id, topics=[
                T.OffsetDeleteRequestTopic(name=t, partitions=[T.OffsetDeleteRequestPartition(partition_index=p) for p in ps])
                for t, ps in by_topic.items()])

        def check(response):
            if response.error_code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                       ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
                raise KafkaError(response.error_code)
        response = await self._coordinator_call(group_id, make, check)
        return response.error_code, {TopicPartition(t.name, p.partition_index): p.error_code
                                     for t in response.topics for p in t.partitions}

    # --- transactions -------------------------------------------------------------------------

    async def list_transactions(self, *, producer_ids=(), states=(), duration_filter_ms: int = -1) -> dict:
        """ListTransactions to every broker (each coordinates its own transactional ids) ->
        {broker_id: [TransactionListing]}. A broker that answers an error fails the call, with the
        message Kafka's admin client gives (a coordinator still loading is retried)."""
        await self.cluster.retry(lambda: self.cluster.refresh_metadata([]))
        request = ListTransactionsRequest(state_filters=list(states), producer_id_filters=list(producer_ids),
                                          duration_filter=duration_filter_ms)
        out = {}
        for node in sorted(self.cluster.brokers):
            async def op(node=node):
                conn = await self.cluster.connection(node)
                version = conn.pick_version(ListTransactionsRequest)
                if duration_filter_ms >= 0 and version < 1:
                    raise UnsupportedVersionError(
                        "Duration filter can be set only when using API version 1 or higher. If client is "
                        "connected to an older broker, do not specify duration filter or set duration filter to -1.")
                response = await conn.send(request, version)
                if response.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                    raise KafkaError(response.error_code)
                return response
            response = await self.cluster.retry(op)
            if response.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE:
                raise KafkaError(response.error_code, f"ListTransactions request sent to broker {node} failed "
                                                      "because the coordinator is shutting down")
            if response.error_code:
                raise KafkaError(response.error_code, f"ListTransactions request sent to broker {node} failed "
                                                      "with an unexpected exception")
            out[node] = [TransactionListing(t.transactional_id, t.producer_id, t.transaction_state)
                         for t in response.transaction_states]
        return out

    async def describe_transactions(self, transactional_ids) -> dict:
        """DescribeTransactions to each id's transaction coordinator (FindCoordinator key type 1) ->
        {transactional_id: TransactionDescription}; an id that failed (TRANSACTIONAL_ID_NOT_FOUND, ...)
        has only its error_code. A moved or loading coordinator is looked up again and retried."""
        out = {}
        for tid in transactional_ids:
            async def op(tid=tid):
                node = await self.cluster.find_coordinator(tid, COORDINATOR_TRANSACTION)
                response = await self.cluster.send(node, DescribeTransactionsRequest(transactional_ids=[tid]))
                state = next(s for s in response.transaction_states if s.transactional_id == tid)
                if state.error_code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
                    raise KafkaError(state.error_code, f"DescribeTransactions for '{tid}': "
                                                       f"{ErrorCode(state.error_code).name}")
                return node, state
            node, s = await self.cluster.retry(op)
            if s.error_code:
                out[tid] = TransactionDescription(s.error_code)
                continue
            out[tid] = TransactionDescription(
                0, node, s.transaction_state, s.producer_id, s.producer_epoch, s.transaction_timeout_ms,
                s.transaction_start_time_ms,
                tuple(TopicPartition(t.topic, p) for t in s.topics for p in t.partitions))
        return out

    async def describe_producers(self, tps, *, broker_id: int | None = None) -> dict:
        """DescribeProducers for ``tps`` -> {tp: PartitionProducers}, sent to each partition's leader, or
        to ``broker_id`` (any replica of the partitions) when given. Without ``broker_id`` a leader that
        moved is looked up again and retried; a partition the metadata does not know is
        UNKNOWN_TOPIC_OR_PARTITION without a request."""
        results = {}
        T = DescribeProducersRequest.TopicRequest

        async def op():
            by_node = defaultdict(lambda: defaultdict(list))
            for tp in tps:
                if tp in results:
                    continue
                node = broker_id
                if node is None:
                    try:
                        node = await self.cluster.leader_for(tp.topic, tp.partition)
                    except KafkaError as e:
                        if e.error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                            raise
                        results[tp] = PartitionProducers(e.error_code, e.message, [])
                        continue
                by_node[node][tp.topic].append(tp.partition)
            moved = []
            for node, topics in by_node.items():
                request = DescribeProducersRequest(topics=[T(name=t, partition_indexes=ps) for t, ps in topics.items()])
                response = await self.cluster.send(node, request)
                for t in response.topics:
                    for p in t.partitions:
                        tp = TopicPartition(t.name, p.partition_index)
                        if p.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and broker_id is None:
                            moved.append(str(tp))
                            continue
                        results[tp] = PartitionProducers(p.error_code, p.error_message, [
                            ProducerState(s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp,
                                          s.coordinator_epoch, s.current_txn_start_offset)
                            for s in p.active_producers])
            if moved:
                raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{', '.join(moved)}: not the leader")
        await self.cluster.retry(op)
        return {tp: results[tp] for tp in tps}

    async def abort_transaction(self, tp: TopicPartition, producer_id: int, producer_epoch: int,
                                coordinator_epoch: int) -> int:
        """Kafka's Admin.abortTransaction: an ABORT marker for one partition's open transaction of
        ``producer_id``, written by WriteTxnMarkers to the partition's leader as the coordinator
        would (to end a hanging transaction) -> the partition's error code. A leader that moved is
        looked up again and retried."""
        M = WriteTxnMarkersRequest
        request = M(markers=[M.WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=False,
            coordinator_epoch=coordinator_epoch,
            topics=[M.WritableTxnMarkerTopic(name=tp.topic, partition_indexes=[tp.partition])])])

        async def op():
            response = await self.cluster.send(await self.cluster.leader_for(tp.topic, tp.partition), request)
            codes = [p.error_code for m in response.markers if m.producer_id == producer_id
                     for t in m.topics if t.name == tp.topic for p in t.partitions if p.partition_index == tp.partition]
            if len(codes) != 1:
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"WriteTxnMarkers response included unexpected "
                                                                 f"entries (expected exactly one for {tp})")
            if codes[0] in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REPLICA_NOT_AVAILABLE,
                            ErrorCode.BROKER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                raise KafkaError(codes[0], f"{tp}: {ErrorCode(codes[0]).name}")
            return codes[0]
        return await self.cluster.retry(op)
