"""What the controller knows of the cluster (Kafka's ControllerContext), and the batch of
requests one decision sends (Kafka's ControllerBrokerRequestBatch).

The context is loaded from ZooKeeper when a broker becomes controller and kept current by the
controller's own writes and its watches; nothing here does I/O.

A batch collects, per broker, the partitions whose LeaderAndIsr it must get, the partitions
every broker must learn through UpdateMetadata, and the StopReplica entries; `requests()` turns
it into Kafka's request messages (LeaderAndIsr v7, UpdateMetadata v8, StopReplica v4, the
versions a 3.9 controller sends), in Kafka's order per broker: LeaderAndIsr, UpdateMetadata,
StopReplica.
"""
from __future__ import annotations

import uuid

from protocol.messages.leader_and_isr import LeaderAndIsrRequest
from protocol.messages.stop_replica import StopReplicaRequest
from protocol.messages.update_metadata import UpdateMetadataRequest

from broker import zk_data as zd

LEADER_AND_ISR_VERSION = 7
UPDATE_METADATA_VERSION = 8
STOP_REPLICA_VERSION = 4

LEADER_DURING_DELETE = -2       # UpdateMetadata leader of a topic queued for deletion
EPOCH_DURING_DELETE = -2        # StopReplica leader epoch of a topic queued for deletion
NO_LEADER = -1


class ControllerContext:
    def __init__(self):
        self.epoch = 0
        self.epoch_zk_version = -1
        self.live_brokers: dict[int, zd.BrokerInfo] = {}
        self.broker_epochs: dict[int, int] = {}
        self.shutting_down: set[int] = set()
        self.assignments: dict[str, dict[int, list]] = {}    # topic -> partition -> replicas
        self.topic_ids: dict[str, uuid.UUID] = {}
        # Partitions of replica lists Kafka would not have written (zd.TopicAssignment's
        # unreadable): not managed, but written back as found with their topic's assignment.
        self.unreadable: dict[str, dict] = {}                # topic -> {partition: (raw, why)}
        self.ignored_topics: set[str] = set()                # topic znodes that cannot be read
        self.states: dict[tuple, zd.LeaderAndIsr] = {}       # (topic, partition) -> state
        self.topics_to_delete: set[str] = set()
        self.deletion_started: dict[str, set] = {}           # topic -> {(broker, partition)}
        # Partitions being reassigned: their adding and removing replicas (Kafka's
        # ReplicaAssignment). `assignments` then holds the full set RS = target + origin.
        self.adding: dict[tuple, list] = {}
        self.removing: dict[tuple, list] = {}
        # Replicas on a failed log dir of a live broker (Kafka's replicasOnOfflineDirs):
        # (topic, partition) -> {broker}; cleared when the broker restarts.
        self.offline_replicas: dict[tuple, set] = {}

    def reset(self) -> None:
        self.__init__()

    # -- brokers
    def live_ids(self) -> set:
        """Brokers that may lead or join an ISR (not those in controlled shutdown)."""
        return set(self.live_brokers) - self.shutting_down

    def live_or_shutting_down_ids(self) -> set:
        return set(self.live_brokers)

    def live_replica_ids(self, tp) -> set:
        """Brokers that may lead or join the ISR of `tp`: live, not shutting down, and not
        holding it on a failed log dir."""
        return self.live_ids() - self.offline_replicas.get(tp, set())

    def forget_offline_replicas(self, brokers) -> None:
        for tp in list(self.offline_replicas):
            self.offline_replicas[tp] -= set(brokers)
            if not self.offline_replicas[tp]:
                del self.offline_replicas[tp]

    # -- partitions
    def all_partitions(self):
        for topic, parts in self.assignments.items():
            for p in parts:
                yield topic, p

    def replicas(self, tp) -> list:
        return self.assignments.get(tp[0], {}).get(tp[1], [])

    def is_reassigning(self, tp) -> bool:
        return bool(self.adding.get(tp) or self.removing.get(tp))

    def reassigning(self) -> list:
        return sorted(tp for tp in set(self.adding) | set(self.removing)
                      if self.is_reassigning(tp))

    def origin_replicas(self, tp) -> list:
        adding = self.adding.get(tp, [])
        return [r for r in self.replicas(tp) if r not in adding]

    def target_replicas(self, tp) -> list:
        removing = self.removing.get(tp, [])
        return [r for r in self.replicas(tp) if r not in removing]

    def reassign_to(self, tp, target: list) -> tuple:
        """(full replica set, adding, removing) of a reassignment of `tp` to `target`, as
        Kafka's ReplicaAssignment.reassignTo: target first, then the origin replicas."""
        origin = self.origin_replicas(tp)
        full = list(dict.fromkeys(list(target) + origin))
        return full, [r for r in full if r not in origin], [r for r in full if r not in target]

    def set_assignment(self, tp, replicas: list, adding=(), removing=()) -> None:
        self.assignments.setdefault(tp[0], {})[tp[1]] = list(replicas)
        if adding or removing:
            self.adding[tp], self.removing[tp] = list(adding), list(removing)
        else:
            self.adding.pop(tp, None)
            self.removing.pop(tp, None)

    def set_unreadable(self, topic: str, unreadable: dict) -> None:
        """The partitions of `topic` whose replica lists could not be read ({} when none)."""
        if unreadable:
            self.unreadable[topic] = dict(unreadable)
        else:
            self.unreadable.pop(topic, None)

    def partitions_on_broker(self, broker_id: int) -> list:
        return [tp for tp in self.all_partitions() if broker_id in self.replicas(tp)]

    def partitions_led_by(self, broker_id: int) -> list:
        return [tp for tp, s in self.states.items() if s.leader == broker_id]

    def remove_topic(self, topic: str) -> None:
        for p in self.assignments.pop(topic, {}):
            self.states.pop((topic, p), None)
            self.adding.pop((topic, p), None)
            self.removing.pop((topic, p), None)
            self.offline_replicas.pop((topic, p), None)
        self.topic_ids.pop(topic, None)
        self.unreadable.pop(topic, None)
        self.topics_to_delete.discard(topic)
        self.deletion_started.pop(topic, None)


class RequestBatch:
    """The requests one controller decision sends (see the module docstring)."""

    def __init__(self, ctx: ControllerContext, controller_id: int):
        self.ctx = ctx
        self.controller_id = controller_id
        self.leader_and_isr: dict[int, dict] = {}      # broker -> {tp: is_new}
        self.update_metadata_brokers: set[int] = set()
        self.update_metadata_partitions: set = set()
        self.update_metadata_all_partitions = False
        self.stop_replica: dict[int, dict] = {}        # broker -> {tp: delete}

    def __bool__(self) -> bool:
        return bool(self.leader_and_isr or self.update_metadata_brokers or self.stop_replica)

    def add_leader_and_isr(self, brokers, tp, is_new: bool = False) -> None:
        for broker in brokers:
            if broker in self.ctx.live_brokers:
                self.leader_and_isr.setdefault(broker, {})[tp] = is_new
        # As Kafka: every LeaderAndIsr comes with UpdateMetadata of the partition to all.
        self.add_update_metadata(self.ctx.live_or_shutting_down_ids(), [tp])

    def add_update_metadata(self, brokers, partitions=()) -> None:
        self.update_metadata_brokers.update(b for b in brokers if b in self.ctx.live_brokers)
        self.update_metadata_partitions.update(partitions)

    def add_stop_replica(self, broker: int, tp, delete: bool) -> None:
        if broker in self.ctx.live_brokers:
            current = self.stop_replica.setdefault(broker, {})
            current[tp] = current.get(tp, False) or delete

    # -- building the messages

    def requests(self) -> list:
        """[(broker, api name, request, version)] in sending order."""
        out = []
        brokers = sorted(set(self.leader_and_isr) | self.update_metadata_brokers
                         | set(self.stop_replica))
        for broker in brokers:
            if broker in self.leader_and_isr:
                out.append((broker, "LeaderAndIsr", self._leader_and_isr(broker),
                            LEADER_AND_ISR_VERSION))
            if broker in self.update_metadata_brokers:
                out.append((broker, "UpdateMetadata", self._update_metadata(broker),
                            UPDATE_METADATA_VERSION))
            if broker in self.stop_replica:
                out.append((broker, "StopReplica", self._stop_replica(broker),
                            STOP_REPLICA_VERSION))
        return out

    def _leader_and_isr(self, broker: int) -> LeaderAndIsrRequest:
        ctx = self.ctx
        by_topic: dict[str, list] = {}
        leaders = set()
        for (topic, p), is_new in sorted(self.leader_and_isr[broker].items()):
            state = ctx.states.get((topic, p))
            if state is None:
                continue
            replicas = ctx.replicas((topic, p))
            by_topic.setdefault(topic, []).append(LeaderAndIsrRequest.LeaderAndIsrPartitionState(
                topic_name=topic, partition_index=p, controller_epoch=state.controller_epoch,
                leader=state.leader, leader_epoch=state.leader_epoch, isr=list(state.isr),
                partition_epoch=state.partition_epoch, replicas=list(replicas),
                adding_replicas=list(ctx.adding.get((topic, p), [])),
                removing_replicas=list(ctx.removing.get((topic, p), [])), is_new=is_new,
                leader_recovery_state=1 if state.recovering else 0))
            if state.leader >= 0:
                leaders.add(state.leader)
        live_leaders = []
        for leader in sorted(leaders):
            info = ctx.live_brokers.get(leader)
            ep = self._inter_broker_endpoint(info)
            if ep is not None:
                live_leaders.append(LeaderAndIsrRequest.LeaderAndIsrLiveLeader(
                    broker_id=leader, host_name=ep.host, port=ep.port))
        return LeaderAndIsrRequest(
            controller_id=self.controller_id, is_k_raft_controller=False,
            controller_epoch=ctx.epoch, broker_epoch=ctx.broker_epochs.get(broker, -1), type=0,
            topic_states=[LeaderAndIsrRequest.LeaderAndIsrTopicState(
                topic_name=topic, topic_id=ctx.topic_ids.get(topic, uuid.UUID(int=0)),
                partition_states=states) for topic, states in by_topic.items()],
            live_leaders=live_leaders)

    inter_broker_listener: str | None = None

    def _inter_broker_endpoint(self, info):
        if info is None:
            return None
        if self.inter_broker_listener:
            ep = info.endpoint(self.inter_broker_listener)
            if ep is not None:
                return ep
        return info.endpoints[0] if info.endpoints else None

    def _update_metadata(self, broker: int) -> UpdateMetadataRequest:
        ctx = self.ctx
        partitions = (list(ctx.all_partitions()) if self.update_metadata_all_partitions
                      else sorted(self.update_metadata_partitions))
        live = ctx.live_or_shutting_down_ids()
        online = ctx.live_ids()          # Kafka's isReplicaOnline: shutting down is offline
        by_topic: dict[str, list] = {}
        for topic, p in partitions:
            state = ctx.states.get((topic, p))
            if state is None:
                continue
            replicas = ctx.replicas((topic, p))
            deleting = topic in ctx.topics_to_delete
            by_topic.setdefault(topic, []).append(
                UpdateMetadataRequest.UpdateMetadataPartitionState(
                    topic_name=topic, partition_index=p, controller_epoch=state.controller_epoch,
                    leader=LEADER_DURING_DELETE if deleting else state.leader,
                    leader_epoch=state.leader_epoch, isr=list(state.isr),
                    zk_version=state.partition_epoch, replicas=list(replicas),
                    offline_replicas=[r for r in replicas if r not in online
                                      or r in ctx.offline_replicas.get((topic, p), ())]))
        return UpdateMetadataRequest(
            controller_id=self.controller_id, is_k_raft_controller=False, type=0,
            controller_epoch=ctx.epoch, broker_epoch=ctx.broker_epochs.get(broker, -1),
            topic_states=[UpdateMetadataRequest.UpdateMetadataTopicState(
                topic_name=topic, topic_id=ctx.topic_ids.get(topic, uuid.UUID(int=0)),
                partition_states=states) for topic, states in by_topic.items()],
            live_brokers=[_live_broker(ctx.live_brokers[b]) for b in sorted(live)])

    def _stop_replica(self, broker: int) -> StopReplicaRequest:
        ctx = self.ctx
        by_topic: dict[str, list] = {}
        for (topic, p), delete in sorted(self.stop_replica[broker].items()):
            state = ctx.states.get((topic, p))
            epoch = (EPOCH_DURING_DELETE if topic in ctx.topics_to_delete
                     else state.leader_epoch if state is not None else -1)
            by_topic.setdefault(topic, []).append(StopReplicaRequest.StopReplicaPartitionState(
                partition_index=p, leader_epoch=epoch, delete_partition=delete))
        return StopReplicaRequest(
            controller_id=self.controller_id, is_k_raft_controller=False,
            controller_epoch=ctx.epoch, broker_epoch=ctx.broker_epochs.get(broker, -1),
            topic_states=[StopReplicaRequest.StopReplicaTopicState(
                topic_name=topic, partition_states=states) for topic, states in by_topic.items()])


def _live_broker(info: zd.BrokerInfo) -> UpdateMetadataRequest.UpdateMetadataBroker:
    return UpdateMetadataRequest.UpdateMetadataBroker(
        id=info.id, endpoints=[UpdateMetadataRequest.UpdateMetadataEndpoint(
            port=ep.port, host=ep.host, listener=ep.listener,
            security_protocol=zd.security_protocol_id(ep.security_protocol))
            for ep in info.endpoints], rack=info.rack)
