"""TopicManager: create, delete, grow and reconfigure topics (Kafka's AdminManager + ZkAdminManager).

Every operation validates first, then persists the change in the MetadataStore, then tells the
ReplicaManager (become_leader / stop_replica) and the live logs. Validation follows Kafka:

- names: 1-249 chars of [a-zA-Z0-9._-], not "." or "..", and not colliding with an existing
  topic once '.' and '_' are treated alike ("a.b" vs "a_b") -> INVALID_TOPIC_EXCEPTION;
- partitions: num_partitions >= 1 (or -1: num.partitions) -> INVALID_PARTITIONS; more than
  MAX_PARTITIONS_PER_REQUEST new partitions in one request -> POLICY_VIOLATION;
- replication factor: >= 1 (or -1: default.replication.factor), at most the live brokers
  -> INVALID_REPLICATION_FACTOR;
- explicit assignments (CreateTopics/CreatePartitions): partitions numbered 0..n-1, every replica
  list non-empty, no duplicate ids, only live brokers -> INVALID_REPLICA_ASSIGNMENT;
- configs: names and values checked against broker.config.TOPIC_CONFIGS -> INVALID_CONFIG.

Errors are raised as `KafkaError(code, message)`; handlers put them in their per-topic results.

Replica placement with one broker is trivial; `assign_replicas` already spreads leaders round
robin over the live broker list (Kafka's rack-unaware assignment without the random start) so a
cluster slots in.

Concurrency contract: on the event loop thread; the local store's fsync'ed write runs inline (an
admin operation, rare).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import re
import uuid

from protocol.errors import ErrorCode, KafkaError
from storage.checkpoints import topic_id_to_str

from coordinator.internal_topics import (CLUSTER_METADATA_TOPIC, INTERNAL_TOPICS,
                                         internal_topic_configs)

from broker.config import ConfigError, deprecation_warnings, validate_topic_configs

log = logging.getLogger(__name__)

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
# Most partitions one CreateTopics/CreatePartitions request may add (Kafka's controller caps a
# request at 10,000 partitions, POLICY_VIOLATION): a typo like 100000000 must not make the broker
# try to create a hundred million directories.
MAX_PARTITIONS_PER_REQUEST = 10_000
TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."
ZERO_UUID = uuid.UUID(int=0)
STARTUP_THREADS = 8         # parallel checkpoint writes at start-up (fsyncs overlap well)


def validate_topic_name(name) -> None:
    """Kafka 3.9's Topic.validate, its messages."""
    reason = None
    if not name:
        reason = "the empty string is not allowed"
    elif name in (".", ".."):
        reason = f"'{name}' is not allowed"
    elif len(name) > MAX_NAME_LENGTH:
        reason = f"the length of '{name}' is longer than the max allowed length {MAX_NAME_LENGTH}"
    elif not _LEGAL.match(name):
        reason = f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    if reason is not None:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic name is invalid: {reason}")


def partitions_to_add(current: int, count: int, assignments, known_brokers=None) -> int:
    """CreatePartitions' checks of the new count, then of the assignments (brokers among
    `known_brokers` when given, then their number), in Kafka's order: how many partitions to
    add. Raises KafkaError as Kafka answers."""
    if count < current:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                         f"Topic currently has {current} partitions, which is higher than "
                         f"the requested {count}.")
    if count == current:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                         f"Topic already has {current} partitions.")
    added = count - current
    if added > MAX_PARTITIONS_PER_REQUEST:
        raise KafkaError(ErrorCode.POLICY_VIOLATION, TOO_MANY_PARTITIONS)
    if assignments is not None and known_brokers is not None:
        unknown = sorted({b for replicas in assignments for b in replicas} - set(known_brokers))
        if unknown:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"Unknown broker(s) in replica assignment: "
                             f"{', '.join(map(str, unknown))}.")
    if assignments is not None and len(assignments) != added:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         f"Increasing the number of partitions by {added} but "
                         f"{len(assignments)} assignments provided.")
    return added


def is_internal(name: str) -> bool:
    return name in INTERNAL_TOPICS


def is_cluster_metadata(name: str) -> bool:
    """KRaft's metadata log (in data dirs written by Kafka in KRaft mode): never a topic."""
    return name == CLUSTER_METADATA_TOPIC


def _epoch_above_history(log_) -> int:
    """The leader epoch a new leader of this log takes: one above the last in its history."""
    latest = log_.leader_epoch_cache.latest_epoch
    return 0 if latest is None else latest + 1


class TopicManager:
    def __init__(self, broker):
        self.broker = broker
        # Bumped whenever partitions start or stop being led here: with the store's version
        # it tells the Metadata cache when to rebuild.
        self.leadership_version = 0
        self.metadata_cache = None          # (key, entries): owned by handlers/metadata.py
        self.encoded_metadata: dict = {}    # all-topics answers by shape: handlers/metadata.py

    @property
    def store(self):
        return self.broker.metadata

    def metadata_changed(self) -> None:
        """Leaders, ISR or led partitions changed outside the store: Metadata rebuilds its
        cached answers. (The replica layer calls this when followers join or leave the ISR.)"""
        self.leadership_version += 1

    def live_brokers(self) -> list:
        return [self.broker.broker_id]

    # -- start-up

    async def startup(self) -> None:
        """Lead every partition assigned to this broker (after the store and logs loaded).

        Becoming leader records each partition's epoch start in its leader-epoch checkpoint
        (an fsync'ed file); with many partitions those writes run first on a few threads."""
        if self.store.get_topic(CLUSTER_METADATA_TOPIC) is not None:
            # Registered by a kbroker before it knew KRaft's metadata log is not a topic: drop
            # the registration (the files stay as they are, never opened).
            log.warning("Removing %s from the topics: it is KRaft's metadata log, not a topic",
                        CLUSTER_METADATA_TOPIC)
            self.store.delete_topic(CLUSTER_METADATA_TOPIC)
        self.adopt_logs_found_on_disk()
        assigned = []
        for topic in self.store.list_topics():
            for index, state in topic.partitions.items():
                if self.broker.broker_id in state.replicas:
                    assigned.append((topic, index, state))
        log_manager = self.broker.log_manager
        self._lead_above_epoch_history(assigned)

        def record_epoch(item):
            topic, index, state = item
            log_ = log_manager.get_log(topic.name, index)
            if log_ is not None:
                log_.leader_epoch_cache.assign(state.leader_epoch, log_.log_end_offset)
        if assigned:
            loop = asyncio.get_running_loop()
            with concurrent.futures.ThreadPoolExecutor(STARTUP_THREADS) as pool:
                await asyncio.gather(*(loop.run_in_executor(pool, record_epoch, item)
                                       for item in assigned))
        configs = {}
        for topic in self.store.list_topics():
            self.warn_deprecated(topic.name, topic.configs)
        for topic, index, state in assigned:
            if topic.name not in configs:
                configs[topic.name] = self.log_config(topic.name)
            self.broker.replica_manager.become_leader(
                topic.name, index, topic.topic_id, state.leader_epoch, state.replicas,
                configs[topic.name], is_new=False)
        self.metadata_changed()
        log.info("Loaded %d topics, leading %d partitions", len(self.store.list_topics()),
                 len(assigned))

    def adopt_logs_found_on_disk(self) -> None:
        """Register topics whose logs are on disk but unknown to the store.

        A log dir written by Apache Kafka keeps its topic list in ZooKeeper (or KRaft's
        metadata log), not beside the logs: when such a dir is opened here, each topic with
        partitions 0..n-1 on disk is registered with its topic id from partition.metadata.
        Its config overrides were kept with the topic list and are lost, except that the
        internal topics (__consumer_offsets, __transaction_state) get the configs Kafka creates
        them with. Each partition is led at an epoch above the last one in its
        leader-epoch-checkpoint, as Kafka's controller would have bumped it, so the epoch
        history stays whole and OffsetForLeaderEpoch answers from it."""
        found: dict = {}
        for log_ in self.broker.log_manager.logs():
            if self.store.get_topic(log_.topic) is None:
                found.setdefault(log_.topic, {})[log_.partition] = log_
        for name, logs in sorted(found.items()):
            if sorted(logs) != list(range(len(logs))):
                log.warning("Not registering topic %s found on disk: partitions %s are not "
                            "0..n-1", name, sorted(logs))
                continue
            topic_ids = {l.topic_id for l in logs.values() if l.topic_id not in (None, ZERO_UUID)}
            topic_id = topic_ids.pop() if len(topic_ids) == 1 else uuid.uuid4()
            assignments = {p: [self.broker.broker_id] for p in logs}
            configs = internal_topic_configs(name, self.broker.config) or {}
            epochs = {p: _epoch_above_history(l) for p, l in logs.items()}
            self.store.create_topic(name, topic_id, assignments, configs, leader_epochs=epochs)
            log.info("Registered topic %s found on disk (%d partitions, topic id %s, leader "
                     "epoch %d)", name, len(logs), topic_id_to_str(topic_id),
                     max(epochs.values()))

    def _lead_above_epoch_history(self, assigned) -> None:
        """A log whose epoch history runs ahead of the store's leader epoch (the store was
        restored from an older copy, or the log copied in from elsewhere) is led at an epoch
        above it: a leader never writes an epoch below one already in its log."""
        bumps = {}
        for topic, index, state in assigned:
            log_ = self.broker.log_manager.get_log(topic.name, index)
            latest = log_.leader_epoch_cache.latest_epoch if log_ is not None else None
            if latest is not None and latest > state.leader_epoch:
                bumps[(topic.name, index)] = latest + 1
        if bumps:
            log.warning("Leader epoch history of %d partitions is ahead of the metadata; "
                        "leading them at an epoch above it", len(bumps))
            self.store.set_leader_epochs(bumps)

    def log_config(self, name: str):
        return self.broker.config.topic_config(self.store.topic_config(name))

    # -- validation

    def _resolve_counts(self, num_partitions: int, replication_factor: int) -> tuple:
        config = self.broker.config
        if num_partitions == -1:
            num_partitions = config.get("num.partitions")
        if replication_factor == -1:
            replication_factor = config.get("default.replication.factor")
        if num_partitions <= 0:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                             "Number of partitions must be larger than 0.")
        if replication_factor <= 0:
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             "Replication factor must be larger than 0.")
        brokers = len(self.live_brokers())
        if replication_factor > brokers:
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"Replication factor: {replication_factor} larger than available "
                             f"brokers: {brokers}.")
        return num_partitions, replication_factor

    def assign_replicas(self, num_partitions: int, replication_factor: int,
                        first_partition: int = 0) -> dict:
        brokers = self.live_brokers()
        out = {}
        for p in range(first_partition, first_partition + num_partitions):
            out[p] = [brokers[(p + r) % len(brokers)] for r in range(replication_factor)]
        return out

    # Kafka in ZooKeeper mode creates a topic whose manual assignment names brokers that are not
    # alive (one restarting, say), as its TopicCommand always did; CreatePartitions checks them.
    # On a single broker no other broker can ever come: refused.
    creation_needs_live_brokers = True

    def _check_assignments(self, assignments: dict, first_partition: int = 0,
                           creating: bool = False) -> None:
        live = set(self.live_brokers())
        expected = list(range(first_partition, first_partition + len(assignments)))
        if sorted(assignments) != expected:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             "partitions should be a consecutive 0-based integer sequence")
        sizes = set()
        for partition, replicas in assignments.items():
            if not replicas:
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Replica assignment of partition {partition} is empty")
            if len(set(replicas)) != len(replicas):
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Duplicate brokers in the assignment of partition {partition}")
            unknown = set(replicas) - live
            if unknown and (not creating or self.creation_needs_live_brokers):
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Unknown broker(s) {sorted(unknown)} in the assignment of "
                                 f"partition {partition}")
            sizes.add(len(replicas))
        if len(sizes) > 1:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             "All partitions should have the same number of replicas")

    def _check_collision(self, name: str) -> None:
        """Kafka's rule: '.' and '_' may collide in metric names, so "a.b" and "a_b" cannot
        both exist."""
        if "." not in name and "_" not in name:
            return
        key = name.replace(".", "_")
        clashes = [t.name for t in self.store.list_topics() if t.name.replace(".", "_") == key]
        if clashes:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                             f"Topic '{name}' collides with existing topics: "
                             f"{', '.join(clashes)}")

    @staticmethod
    def check_configs(configs: dict) -> None:
        try:
            validate_topic_configs(configs)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None

    # -- operations

    def plan_topic(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                   assignments: dict | None = None, configs: dict | None = None) -> tuple:
        """Validate a new topic as Kafka does and place its replicas: (assignments, configs).
        Raises KafkaError."""
        validate_topic_name(name)
        if is_cluster_metadata(name):
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited.")
        if self.store.get_topic(name) is not None:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        self._check_collision(name)
        configs = dict(configs or {})
        self.check_configs(configs)
        if assignments:
            if num_partitions != -1 or replication_factor != -1:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 "Both numPartitions or replicationFactor and replicasAssignments "
                                 "were set. Both cannot be used at the same time.")
            assignments = {int(p): list(r) for p, r in assignments.items()}
            self._check_assignments(assignments, creating=True)
        else:
            num_partitions, replication_factor = self._resolve_counts(num_partitions,
                                                                      replication_factor)
            assignments = self.assign_replicas(num_partitions, replication_factor)
        return assignments, configs

    def create_topic(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                     assignments: dict | None = None, configs: dict | None = None,
                     validate_only: bool = False, topic_id: uuid.UUID | None = None,
                     lead: bool = True):
        """Create a topic (or only validate the request); returns its TopicMetadata (or None).

        Synchronous: the partitions' logs are created on the calling (loop) thread. Handlers use
        `create_topic_async`, which creates them in an executor."""
        assignments, configs = self.plan_topic(name, num_partitions, replication_factor,
                                               assignments, configs)
        if validate_only:
            return None
        topic = self.store.create_topic(name, topic_id or uuid.uuid4(), assignments, configs)
        self.warn_deprecated(name, configs)
        log.info("Created topic %s with topic id %s, %d partitions, configs %s", name,
                 topic_id_to_str(topic.topic_id), len(assignments), configs)
        if lead:
            self._lead(topic, topic.partitions)
        return topic

    async def create_topic_async(self, name: str, num_partitions: int = -1,
                                 replication_factor: int = -1, assignments: dict | None = None,
                                 configs: dict | None = None, validate_only: bool = False,
                                 topic_id: uuid.UUID | None = None):
        """`create_topic`, with the new logs created in an executor (creating a log writes and
        fsyncs a few files: ~20 ms each, so 1,000 partitions would stall the loop for seconds).
        The topic is in the store at once; its partitions are led once their logs exist
        (Metadata answers LEADER_NOT_AVAILABLE meanwhile, as Kafka does)."""
        topic = self.create_topic(name, num_partitions, replication_factor, assignments,
                                  configs, validate_only, topic_id, lead=False)
        if topic is not None:
            await self._lead_async(topic, list(topic.partitions))
        return topic

    async def _lead_async(self, topic, partitions) -> None:
        log_config = self.log_config(topic.name)
        log_manager = self.broker.log_manager
        mine = [p for p in sorted(partitions)
                if self.broker.broker_id in topic.partitions[p].replicas]

        def create_logs():                       # blocking: LogManager locks its own tables
            for p in mine:
                log_ = log_manager.get_or_create_log(topic.name, p, log_config, topic.topic_id)
                # Becoming leader records the epoch's start offset (an fsync'ed checkpoint);
                # doing it here keeps that off the loop: make_leader then finds it recorded.
                log_.leader_epoch_cache.assign(topic.partitions[p].leader_epoch,
                                               log_.log_end_offset)
        await asyncio.get_running_loop().run_in_executor(None, create_logs)
        if self.store.get_topic(topic.name) is not topic:
            # Deleted (or deleted and re-created) while the logs were being made.
            for p in mine:
                if self.broker.replica_manager.get_partition(topic.name, p) is None:
                    log_manager.delete_log(topic.name, p)
            return
        self._lead(topic, [p for p in partitions if p in topic.partitions])

    def _lead(self, topic, partitions) -> None:
        self.metadata_changed()
        log_config = self.log_config(topic.name)
        for index in sorted(partitions):
            state = topic.partitions[index]
            if self.broker.broker_id in state.replicas:
                self.broker.replica_manager.become_leader(topic.name, index, topic.topic_id,
                                                          state.leader_epoch, state.replicas,
                                                          log_config)

    async def maybe_auto_create(self, name: str):
        """Metadata's auto-creation: the new topic, or None when auto-creation is off."""
        if not self.broker.config.get("auto.create.topics.enable"):
            return None
        return await self.create_topic_async(name)

    async def delete_topic_async(self, name: str, timeout_ms: int | None = None):
        """(`timeout_ms`: one broker deletes before answering, so it has nothing to wait for.)"""
        return self.delete_topic(name)

    async def set_topic_configs_async(self, name: str, configs: dict,
                                      validate_only: bool = False) -> None:
        self.set_topic_configs(name, configs, validate_only)

    def topic_to_delete(self, name: str):
        """DeleteTopics' checks: the topic, or KafkaError (deletion disabled, unknown topic)."""
        if not self.broker.config.get("delete.topic.enable"):
            raise KafkaError(ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled.")
        topic = self.store.get_topic(name)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             "This server does not host this topic-partition.")
        return topic

    def delete_topic(self, name: str):
        topic = self.topic_to_delete(name)
        self.store.delete_topic(name)
        self.metadata_changed()
        for index, state in topic.partitions.items():
            if self.broker.broker_id in state.replicas:
                self.broker.replica_manager.stop_replica(name, index, delete=True)
        coordinator = getattr(self.broker, "group_coordinator", None)
        if coordinator is not None:               # the groups forget the topic's offsets
            coordinator.on_partitions_deleted([(name, i) for i in topic.partitions])
        log.info("Deleted topic %s (topic id %s)", name, topic_id_to_str(topic.topic_id))
        return topic

    async def create_partitions_async(self, name: str, count: int,
                                      assignments: list | None = None,
                                      validate_only: bool = False, timeout_ms: int | None = None):
        """`create_partitions` with the new logs created in an executor (see create_topic_async);
        they are led before the answer, so `timeout_ms` has nothing to wait for."""
        before = set(self.store.get_topic(name).partitions) if self.store.get_topic(name) else set()
        topic = self.create_partitions(name, count, assignments, validate_only, lead=False)
        if not validate_only:
            await self._lead_async(topic, [p for p in topic.partitions if p not in before])
        return topic

    def create_partitions(self, name: str, count: int, assignments: list | None = None,
                          validate_only: bool = False, lead: bool = True):
        topic = self.store.get_topic(name)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"The topic '{name}' does not exist.")
        current = len(topic.partitions)
        added = partitions_to_add(current, count, assignments)
        if assignments is not None:
            new = {current + i: list(r) for i, r in enumerate(assignments)}
            self._check_assignments(new, first_partition=current)
            if len(new[current]) != topic.replication_factor:
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 "Inconsistent replication factor between partitions")
        else:
            new = self.assign_replicas(added, topic.replication_factor, first_partition=current)
        if validate_only:
            return topic
        self.store.add_partitions(name, new)
        log.info("Added %d partitions to topic %s (now %d)", added, name, count)
        if lead:
            self._lead(topic, new)
        return topic

    def set_topic_configs(self, name: str, configs: dict, validate_only: bool = False) -> None:
        """Replace the topic's overrides (validated) and apply them to its live logs."""
        if self.store.get_topic(name) is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"The topic '{name}' does not exist.")
        self.check_configs(configs)
        if validate_only:
            return
        self.store.set_topic_config(name, configs)
        log.info("Updated configs of topic %s: %s", name, configs)
        self.warn_deprecated(name, configs)
        self.apply_log_configs([name])

    def warn_deprecated(self, name: str, configs: dict) -> None:
        """Log Kafka's warnings for deprecated configs (accepted, ignored or honoured)."""
        ibp = self.broker.config.get("inter.broker.protocol.version")
        for warning in deprecation_warnings(configs, ibp, topic=name):
            log.warning(warning)

    def apply_log_configs(self, names=None) -> None:
        """Push the current effective LogConfig to every live log of these topics (all: None:
        the broker's defaults changed, which the log manager reads too)."""
        replica_manager = self.broker.replica_manager
        log_manager = getattr(self.broker, "log_manager", None)
        if names is None and log_manager is not None:
            log_manager.default_config = self.broker.config.topic_config()
        topics = self.store.list_topics() if names is None else [
            t for t in (self.store.get_topic(n) for n in names) if t is not None]
        for topic in topics:
            try:
                log_config = self.log_config(topic.name)
            except ConfigError as exc:          # a hand-edited config: that topic keeps its own
                log.error("Keeping the log config of topic %s: %s", topic.name, exc)
                continue
            for index in topic.partitions:
                partition = replica_manager.get_partition(topic.name, index)
                if partition is not None and partition.log is not None:
                    partition.log.config = log_config


class ClusterTopicManager(TopicManager):
    """Topics in a ZooKeeper-mode cluster (Kafka's ZkAdminManager + AdminZkClient).

    The same validation as on one broker; then the change is written to ZooKeeper (a topic's
    config first, then /brokers/topics/T; partitions added by rewriting that znode; deletion
    by /admin/delete_topics/T), the controller acts on it, and the request waits until this
    broker's metadata (the controller's UpdateMetadata) shows the result, or its timeout.
    CreateTopics, CreatePartitions and DeleteTopics must reach the controller (other brokers
    answer NOT_CONTROLLER and clients retry there, as with Kafka's ZooKeeper mode); automatic
    creation writes ZooKeeper from whichever broker got the Metadata request.

    Replica placement is Kafka's (broker/controller/placement.py): over the live brokers from
    the metadata cache, sorted by id, rack-aware when they set broker.rack."""

    creation_needs_live_brokers = False

    WAIT_S = 30.0

    @property
    def kzk(self):
        return self.broker.cluster.kzk

    def live_brokers(self) -> list:
        return sorted(self.store.live_brokers)

    def _broker_metadata(self) -> list:
        from broker.controller.placement import BrokerMetadata
        return [BrokerMetadata(b.id, b.rack)
                for _, b in sorted(self.store.live_brokers.items())]

    def assign_replicas(self, num_partitions: int, replication_factor: int,
                        first_partition: int = 0) -> dict:
        from broker.controller.placement import assign_replicas_to_brokers
        return assign_replicas_to_brokers(self._broker_metadata(), num_partitions,
                                          replication_factor,
                                          start_partition_id=first_partition)

    async def startup(self) -> None:
        """Nothing to lead yet: leadership arrives with the controller's LeaderAndIsr."""

    def _require_controller(self) -> None:
        controller = self.broker.cluster.controller
        if controller is None or not controller.is_active:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "This is not the correct controller for "
                             "this cluster.")

    def create_topic(self, *args, **kwargs):
        raise KafkaError(ErrorCode.NOT_CONTROLLER, "use create_topic_async in a cluster")

    async def create_topic_async(self, name: str, num_partitions: int = -1,
                                 replication_factor: int = -1, assignments: dict | None = None,
                                 configs: dict | None = None, validate_only: bool = False,
                                 topic_id: uuid.UUID | None = None, *,
                                 require_controller: bool = True, wait_s: float | None = None):
        if require_controller:
            self._require_controller()
        from broker.controller.controller import topic_id_text
        from broker.kafka_zk import TopicExistsError
        from broker.zk_data import TopicAssignment
        assignments, configs = self.plan_topic(name, num_partitions, replication_factor,
                                               assignments, configs)
        # Kafka's AdminZkClient.validateTopicCreate, validate_only too
        if await self.kzk.is_marked_for_deletion(name):
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS,
                             f"Topic '{name}' is marked for deletion.")
        if validate_only:
            return None
        if await self.kzk.topic_exists(name):     # a hand-broken znode counts too, as Kafka's
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        topic_id = topic_id or uuid.uuid4()
        try:
            await self.kzk.create_topic(name, TopicAssignment(assignments,
                                                              topic_id_text(topic_id)), configs)
        except TopicExistsError as exc:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, str(exc)) from None
        self.warn_deprecated(name, configs)
        log.info("Creating topic %s with configuration %s and initial partition assignment %s",
                 name, configs, assignments)
        await self.store.wait_until(lambda: self.store.has_leaders(name, assignments),
                                    self.WAIT_S if wait_s is None else wait_s)
        return self.store.get_topic(name)

    async def maybe_auto_create(self, name: str):
        if not self.broker.config.get("auto.create.topics.enable"):
            return None
        if not self.store.live_brokers:
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, "no live brokers known yet")
        try:
            await self.create_topic_async(name, require_controller=False, wait_s=3.0)
        except KafkaError as exc:
            if exc.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
        if not self.store.has_leaders(name):
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{name} is being created")
        return self.store.get_topic(name)

    async def create_partitions_async(self, name: str, count: int,
                                      assignments: list | None = None,
                                      validate_only: bool = False, timeout_ms: int | None = None):
        """Kafka's ZkAdminManager.createPartitions: the new assignment goes to ZooKeeper, then
        the answer waits up to `timeout_ms` for the new partitions' leaders
        (DelayedCreatePartitions): REQUEST_TIMED_OUT then, or at once when it is 0."""
        self._require_controller()
        from broker.controller.placement import (RackAwareMode, broker_metadatas,
                                                 new_partitions_assignment)
        from broker.zk_data import ZNodeDataError
        if await self.kzk.is_marked_for_deletion(name):
            # Kafka's handleCreatePartitionsRequest, before the admin manager
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "The topic is queued for deletion.")
        topic = self.store.get_topic(name)
        try:
            found = await self.kzk.get_topic(name)
        except ZNodeDataError as exc:
            # Kafka reads a znode it cannot parse as no assignment: the topic does not exist
            log.error("Cannot add partitions to %s: %s", name, exc)
            found = None
        if topic is None or found is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"The topic '{name}' does not exist.")
        assignment, version = found
        if assignment.adding or assignment.removing:
            # ZkAdminManager.createPartitions: not while the controller moves replicas
            raise KafkaError(ErrorCode.REASSIGNMENT_IN_PROGRESS,
                             f"A partition reassignment is in progress for the topic '{name}'.")
        current = assignment.partition_count
        added = partitions_to_add(current, count, assignments, self.store.live_brokers)
        manual = None
        if assignments is not None:
            manual = {current + i: list(r) for i, r in enumerate(assignments)}
        brokers = broker_metadatas(self._broker_metadata(), RackAwareMode.ENFORCED)
        new = new_partitions_assignment(assignment.partitions, brokers, added, topic=name,
                                        replica_assignment=manual)
        if validate_only:
            return topic
        assignment.partitions = {**assignment.partitions, **new}
        from broker.zk_data import BadVersionError
        try:
            await self.kzk.set_topic(name, assignment, version)
        except BadVersionError:
            raise KafkaError(ErrorCode.REASSIGNMENT_IN_PROGRESS,
                             f"Topic {name} changed while adding partitions; retry") from None
        log.info("Creating %d partitions for '%s' with the following replica assignment: %s",
                 added, name, new)
        await self._wait_or_time_out(lambda: self.store.has_leaders(name, new), timeout_ms,
                                     f"Partitions of '{name}' are being created")
        return self.store.get_topic(name)

    async def _wait_or_time_out(self, predicate, timeout_ms: int | None, what: str) -> None:
        """Wait up to `timeout_ms` (None: WAIT_S) for `predicate`; REQUEST_TIMED_OUT if it
        stays false (at once for a timeout of 0 or less), as Kafka's delayed admin operations."""
        timeout_s = self.WAIT_S if timeout_ms is None else timeout_ms / 1000
        if predicate():
            return
        if timeout_s <= 0 or not await self.store.wait_until(predicate, timeout_s):
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"{what}: not done within the timeout")

    def delete_topic(self, name: str):
        raise KafkaError(ErrorCode.NOT_CONTROLLER, "use delete_topic_async in a cluster")

    async def delete_topic_async(self, name: str, timeout_ms: int | None = None):
        """Kafka's ZkAdminManager.deleteTopics: marked for deletion in ZooKeeper, then the answer
        waits up to `timeout_ms` for the topic to be gone (DelayedDeleteTopics): REQUEST_TIMED_OUT
        then (a replica's broker down, a reassignment in progress), or at once when it is 0."""
        self._require_controller()
        topic = self.topic_to_delete(name)
        await self.kzk.mark_topic_for_deletion(name)
        log.info("Topic %s marked for deletion", name)
        await self._wait_or_time_out(lambda: self.store.get_topic(name) is None, timeout_ms,
                                     f"Topic '{name}' is being deleted")
        return topic

    async def set_topic_configs_async(self, name: str, configs: dict,
                                      validate_only: bool = False) -> None:
        if self.store.get_topic(name) is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"The topic '{name}' does not exist.")
        self.check_configs(configs)
        if validate_only:
            return
        await self.kzk.set_entity_config("topics", name, configs)
        self.store.set_cached_topic_config(name, configs)
        log.info("Updated configs of topic %s: %s", name, configs)
        self.warn_deprecated(name, configs)
        self.apply_log_configs([name])
