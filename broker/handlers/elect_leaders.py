"""ElectLeaders (api key 43), v0-2: an admin moves leaderships back to the preferred replicas
(`kafka-leader-election.sh --election-type preferred`) or elects a leader for a partition that
has none, accepting data loss (`--election-type unclean`), as Kafka's KafkaApis
handleElectLeaders / ReplicaManager.electLeaders in ZooKeeper mode.

- In a cluster the request must reach the active controller (the admin client sends it to the
  controller Metadata names); elsewhere every partition is NOT_CONTROLLER. The controller
  decides (broker/controller/controller.py `elect_leaders`): UNKNOWN_TOPIC_OR_PARTITION,
  INVALID_TOPIC_EXCEPTION for a topic being deleted, ELECTION_NOT_NEEDED where the preferred
  replica already leads (PREFERRED) or a live leader exists (UNCLEAN), else an election whose
  failure is PREFERRED_LEADER_NOT_AVAILABLE / ELIGIBLE_LEADERS_NOT_AVAILABLE.
- The answer waits, up to timeout_ms, until this broker's metadata shows each elected leader
  (Kafka's DelayedElectLeader); a partition still waiting then is REQUEST_TIMED_OUT.
- topic_partitions null means every partition this broker knows; the answer then leaves out
  the ELECTION_NOT_NEEDED ones, as Kafka does.
- A single broker (no ZooKeeper) leads every partition with its only replica: every known
  partition is ELECTION_NOT_NEEDED.
- v0 has no election type (PREFERRED) and no top-level error code.
"""
import asyncio
import time

from protocol.errors import ErrorCode
from protocol.messages.elect_leaders import ElectLeadersRequest, ElectLeadersResponse

API_KEY = 43
MIN_VERSION = 0
MAX_VERSION = 2

PREFERRED, UNCLEAN = 0, 1
WAIT_STEP_S = 0.01


def _all_partitions(metadata) -> list:
    return [(topic.name, p) for topic in metadata.list_topics() for p in sorted(topic.partitions)]


def _leader_in_metadata(metadata, tp):
    topic = metadata.get_topic(tp[0])
    state = topic.partitions.get(tp[1]) if topic is not None else None
    return state.leader if state is not None else None


async def elect(broker, partitions: list, election_type: int, timeout_ms: int) -> dict:
    """{tp: (error code, message)} for an election over `partitions`."""
    cluster = getattr(broker, "cluster", None)
    controller = cluster.controller if cluster is not None else None
    if controller is None:
        return {tp: ((ErrorCode.ELECTION_NOT_NEEDED, None)
                     if _leader_in_metadata(broker.metadata, tp) is not None
                     else (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                           "The partition does not exist."))
                for tp in partitions}
    if not controller.is_active:
        return {tp: (ErrorCode.NOT_CONTROLLER, None) for tp in partitions}
    decided = await controller.enqueue(controller.elect_leaders, partitions, election_type)
    out = {tp: (code, message) for tp, (code, message, _) in decided.items()}
    waiting = {tp: leader for tp, (code, _, leader) in decided.items()
               if code == ErrorCode.NONE and leader is not None}
    deadline = time.monotonic() + max(timeout_ms, 0) / 1000
    while waiting:
        waiting = {tp: leader for tp, leader in waiting.items()
                   if _leader_in_metadata(broker.metadata, tp) != leader}
        if not waiting or time.monotonic() >= deadline:
            break
        await asyncio.sleep(WAIT_STEP_S)
    for tp in waiting:
        out[tp] = (ErrorCode.REQUEST_TIMED_OUT, None)
    return out


async def handle(broker, ctx, request: ElectLeadersRequest) -> ElectLeadersResponse:
    election_type = request.election_type if ctx.api_version >= 1 else PREFERRED
    if election_type not in (PREFERRED, UNCLEAN):
        error = ErrorCode.INVALID_REQUEST
        return ElectLeadersResponse(throttle_time_ms=0, error_code=error,
                                    replica_election_results=[])
    everything = request.topic_partitions is None
    if everything:
        partitions = _all_partitions(broker.metadata)
    else:
        partitions = list(dict.fromkeys((t.topic, p) for t in request.topic_partitions
                                        for p in t.partitions))
    results = await elect(broker, partitions, election_type, request.timeout_ms)
    by_topic: dict = {}
    for (topic, partition), (code, message) in results.items():
        if everything and code == ErrorCode.ELECTION_NOT_NEEDED:
            continue
        by_topic.setdefault(topic, []).append(ElectLeadersResponse.PartitionResult(
            partition_id=partition, error_code=code, error_message=message))
    return ElectLeadersResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE,
        replica_election_results=[
            ElectLeadersResponse.ReplicaElectionResult(topic=topic, partition_result=results_)
            for topic, results_ in by_topic.items()])
