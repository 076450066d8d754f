"""Replica placement for new topics and partitions, as a Kafka 3.9 ZooKeeper-mode cluster does it.

The functions here are pure: they take broker descriptions and counts and return
``{partition_id: [broker_id, ...]}``.  The first broker of each list is the partition's preferred
leader.  The results match Kafka's ``AdminUtils`` replica assignment (server-common) and
``AdminZkClient.createNewPartitionsAssignment`` (core) replica for replica, given the same broker
order and the same start index and shift.

Two strategies, picked by the brokers' racks:

* **No broker has a rack**: leaders go round robin over the broker list from a start index, and the
  followers of a partition follow its leader at a distance set by a *shift*.  The shift grows by one
  each time the partition id wraps around the broker count, so later rounds do not repeat the same
  leader/follower pairs.
* **Every broker has a rack**: the brokers are first interleaved by rack (see
  `rack_alternated_broker_list`); leaders go round robin over that list as above.  Followers are
  picked along the same shifted walk, passing over any broker whose rack already holds a replica
  while some rack holds none, and any broker already holding one while some broker holds none.  Each
  partition therefore spans ``min(#racks, replication factor)`` racks.
* **Some, not all**: `AdminOperationError`.

Randomness: unless a start index is fixed, the start index and the initial shift are drawn
*independently*, each uniform in ``[0, #brokers)``, start index first.  A fixed start index fixes
the shift to the same value.

Which brokers and which rack mode a caller passes (what Kafka 3.9 does in ZooKeeper mode):

* **CreateTopics, including automatic topic creation**: the live brokers of the receiving broker's
  metadata cache, each with its rack, passed to `assign_replicas_to_brokers` directly: no
  `RackAwareMode` is applied.  A cluster where only some brokers have a rack therefore fails that
  topic with `AdminOperationError`, which Kafka answers as UNKNOWN_SERVER_ERROR with no message.
  (Kafka iterates a hash map there, so its broker order is not sorted; sort by id for a
  deterministic order.)
* **CreatePartitions**: every registered broker (``/brokers/ids``) through
  ``broker_metadatas(brokers, RackAwareMode.ENFORCED)`` (sorted by id), then
  `new_partitions_assignment`.  Kafka computes that broker list once, before looking at any topic,
  so with partial rack information the *whole request* fails: every topic in the response gets
  UNKNOWN_SERVER_ERROR with no message.
* **Admin tools** (TopicCommand-like paths through AdminZkClient, ``kafka-reassign-partitions
  --generate``): ``RackAwareMode.ENFORCED``, or ``RackAwareMode.DISABLED`` for
  ``--disable-rack-aware``.  ``RackAwareMode.SAFE`` exists in Kafka but no 3.9 server path uses it.

Error codes: every error here is a `protocol.errors.KafkaError` whose ``error_code`` is what Kafka's
``ApiError.fromThrowable`` would answer.  Use ``exc.response_message`` for the response's
``error_message``: it is ``None`` where Kafka sends null (UNKNOWN_SERVER_ERROR).
"""
from __future__ import annotations

import enum
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from protocol.errors import ErrorCode, KafkaError

__all__ = [
    "BrokerMetadata",
    "RackAwareMode",
    "PlacementError",
    "InvalidPartitionsError",
    "InvalidReplicationFactorError",
    "InvalidReplicaAssignmentError",
    "BrokerNotAvailableError",
    "AdminOperationError",
    "assign_replicas_to_brokers",
    "rack_alternated_broker_list",
    "replica_index",
    "broker_metadatas",
    "new_partitions_assignment",
    "validate_replica_assignment",
]


@dataclass(frozen=True, slots=True)
class BrokerMetadata:
    """A broker as placement sees it: its id and its rack (``None`` when ``broker.rack`` is unset).

    An empty string is a rack like any other, as in Kafka (only a missing rack counts as none).
    """

    id: int
    rack: str | None = None


class RackAwareMode(enum.Enum):
    """How rack information is treated before placement (Kafka's ``kafka.admin.RackAwareMode``).

    * ``ENFORCED``: keep the racks; if some brokers have one and others do not, refuse
      (`AdminOperationError`).  Kafka's default for AdminZkClient and its tools.
    * ``SAFE``: keep the racks only when every broker has one; otherwise drop them all.
    * ``DISABLED``: drop every rack (``--disable-rack-aware``).
    """

    ENFORCED = "enforced"
    SAFE = "safe"
    DISABLED = "disabled"


# --- errors -------------------------------------------------------------------------------------


class PlacementError(KafkaError):
    """Base of the placement errors.

    ``ERROR_CODE`` is the Kafka error code the failure maps to in a response and ``KAFKA_EXCEPTION``
    the Java exception Kafka throws for it.  ``message`` is Kafka's exception message;
    ``response_message`` is what Kafka writes in the response's ``error_message`` (``None`` = null).
    """

    ERROR_CODE: ClassVar[ErrorCode] = ErrorCode.UNKNOWN_SERVER_ERROR
    KAFKA_EXCEPTION: ClassVar[str] = ""

    def __init__(self, message: str):
        super().__init__(self.ERROR_CODE, message)

    @property
    def response_message(self) -> str | None:
        # Kafka's ApiError.fromThrowable drops the text of whatever maps to UNKNOWN_SERVER_ERROR.
        return None if self.error_code == ErrorCode.UNKNOWN_SERVER_ERROR else self.message


class InvalidPartitionsError(PlacementError):
    """A partition count that is not positive, or that would not grow a topic."""

    ERROR_CODE = ErrorCode.INVALID_PARTITIONS
    KAFKA_EXCEPTION = "org.apache.kafka.common.errors.InvalidPartitionsException"


class InvalidReplicationFactorError(PlacementError):
    """A replication factor that is not positive or exceeds the number of brokers."""

    ERROR_CODE = ErrorCode.INVALID_REPLICATION_FACTOR
    KAFKA_EXCEPTION = "org.apache.kafka.common.errors.InvalidReplicationFactorException"


class InvalidReplicaAssignmentError(PlacementError):
    """A manual assignment with an empty or duplicated replica list, or an inconsistent size."""

    ERROR_CODE = ErrorCode.INVALID_REPLICA_ASSIGNMENT
    KAFKA_EXCEPTION = "org.apache.kafka.common.errors.InvalidReplicaAssignmentException"


class BrokerNotAvailableError(PlacementError):
    """A manual assignment naming a broker that is not registered."""

    ERROR_CODE = ErrorCode.BROKER_NOT_AVAILABLE
    KAFKA_EXCEPTION = "org.apache.kafka.common.errors.BrokerNotAvailableException"


class AdminOperationError(PlacementError):
    """Rack information on some brokers but not all (or a topic without partition 0).

    Kafka's ``AdminOperationException`` is not an ``ApiException`` and has no registered error code,
    so the response says UNKNOWN_SERVER_ERROR and carries no message.
    """

    ERROR_CODE = ErrorCode.UNKNOWN_SERVER_ERROR
    KAFKA_EXCEPTION = "org.apache.kafka.server.common.AdminOperationException"


# Kafka's messages, verbatim: clients and tools show them.
MIXED_RACKS_MESSAGE = "Not all brokers have rack information for replica rack aware assignment."
ENFORCED_MIXED_RACKS_MESSAGE = (
    "Not all brokers have rack information. Add --disable-rack-aware in command line to make "
    "replica assignment without rack information.")


# --- the algorithm ------------------------------------------------------------------------------


def replica_index(first_index: int, shift: int, k: int, n_brokers: int) -> int:
    """Position in the broker list of the ``k``-th follower candidate of a partition.

    The candidate sits ``1 + (shift + k) mod (n_brokers - 1)`` places after the leader's position
    ``first_index``, wrapping around; so it is never the leader itself, and ``k = 0 .. n_brokers-2``
    visits every other position exactly once.  Needs ``n_brokers >= 2``.
    """
    distance = 1 + (shift + k) % (n_brokers - 1)
    return (first_index + distance) % n_brokers


def _java_string_order(s: str) -> bytes:
    # Java sorts strings by UTF-16 code units; Python by code points.  They differ only when a rack
    # name mixes characters above U+FFFF with ones in U+E000..U+FFFF, but the order is Kafka's.
    return s.encode("utf-16-be", "surrogatepass")


def rack_alternated_broker_list(broker_racks: Mapping[int, str]) -> list[int]:
    """Broker ids interleaved by rack: one from each rack in turn, until none is left.

    Racks are taken in name order, and within a rack brokers in ascending id order; a rack that runs
    out is skipped.  ``{0: "r1", 1: "r3", 2: "r3", 3: "r2", 4: "r2", 5: "r1"}`` gives
    ``[0, 3, 1, 5, 4, 2]``.  The result depends only on the mapping, not on its order.
    """
    by_rack: dict[str, list[int]] = {}
    for broker_id, rack in broker_racks.items():
        by_rack.setdefault(rack, []).append(broker_id)
    queues = [sorted(by_rack[rack]) for rack in sorted(by_rack, key=_java_string_order)]
    result: list[int] = []
    depth = 0
    while len(result) < len(broker_racks):
        for queue in queues:
            if depth < len(queue):
                result.append(queue[depth])
        depth += 1
    return result


def _start_and_shift(n_brokers: int, fixed_start_index: int, rng) -> tuple[int, int]:
    # Two separate draws, start index first, as Kafka does; a fixed start index is also the shift.
    if fixed_start_index >= 0:
        return fixed_start_index, fixed_start_index
    start = rng.randrange(n_brokers)
    shift = rng.randrange(n_brokers)
    return start, shift


def _assign_rack_unaware(broker_ids: list[int], n_partitions: int, replication_factor: int,
                         fixed_start_index: int, start_partition_id: int,
                         rng) -> dict[int, list[int]]:
    n = len(broker_ids)
    start, shift = _start_and_shift(n, fixed_start_index, rng)
    result: dict[int, list[int]] = {}
    first_partition = max(0, start_partition_id)
    for partition in range(first_partition, first_partition + n_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        replicas = [broker_ids[first]]
        replicas.extend(broker_ids[replica_index(first, shift, k, n)]
                        for k in range(replication_factor - 1))
        result[partition] = replicas
    return result


def _assign_rack_aware(brokers: list[BrokerMetadata], n_partitions: int, replication_factor: int,
                       fixed_start_index: int, start_partition_id: int,
                       rng) -> dict[int, list[int]]:
    rack_of: dict[int, str] = {}
    for broker in brokers:
        if broker.rack is None:
            raise AdminOperationError(MIXED_RACKS_MESSAGE)
        rack_of[broker.id] = broker.rack
    n_racks = len(set(rack_of.values()))
    arranged = rack_alternated_broker_list(rack_of)
    n = len(arranged)
    start, shift = _start_and_shift(n, fixed_start_index, rng)
    result: dict[int, list[int]] = {}
    first_partition = max(0, start_partition_id)
    for partition in range(first_partition, first_partition + n_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        leader = arranged[first]
        replicas = [leader]
        racks_used = {rack_of[leader]}
        brokers_used = {leader}
        k = 0  # one walk per partition, continued from one follower to the next
        for _ in range(replication_factor - 1):
            while True:
                candidate = arranged[replica_index(first, shift * n_racks, k, n)]
                rack = rack_of[candidate]
                k += 1
                if rack in racks_used and len(racks_used) < n_racks:
                    continue  # another rack still has no replica of this partition
                if candidate in brokers_used and len(brokers_used) < n:
                    continue  # another broker still has no replica of this partition
                replicas.append(candidate)
                racks_used.add(rack)
                brokers_used.add(candidate)
                break
        result[partition] = replicas
    return result


def assign_replicas_to_brokers(brokers: Iterable[BrokerMetadata], n_partitions: int,
                               replication_factor: int, fixed_start_index: int = -1,
                               start_partition_id: int = -1, rng=random) -> dict[int, list[int]]:
    """Place ``n_partitions`` partitions of ``replication_factor`` replicas each on ``brokers``.

    Returns ``{partition_id: [broker_id, ...]}`` for partition ids ``max(0, start_partition_id)``
    onward, the preferred leader first.  The broker *order* matters when no broker has a rack (it is
    the round-robin order); with racks the order is derived from ids and rack names alone.

    ``fixed_start_index`` < 0 draws the start index and then the initial shift from
    ``rng.randrange(#brokers)``; otherwise both equal ``fixed_start_index``.
    ``start_partition_id`` places partitions as if that many came before (used when adding
    partitions); the shift only grows at the wraps crossed from there on.

    Raises `InvalidPartitionsError` (``n_partitions <= 0``), `InvalidReplicationFactorError`
    (``replication_factor <= 0`` or more than the brokers given) and `AdminOperationError` (racks
    on some brokers only), checked in that order as Kafka does; `ValueError` for a broker id given
    twice (a caller bug).
    """
    brokers = list(brokers)
    if len({broker.id for broker in brokers}) != len(brokers):
        # Kafka never gets one (its lists come from maps keyed by id); it would misplace replicas.
        raise ValueError(f"Duplicate broker ids in {brokers!r}")
    if n_partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{len(brokers)}.")
    if all(broker.rack is None for broker in brokers):
        return _assign_rack_unaware([broker.id for broker in brokers], n_partitions,
                                    replication_factor, fixed_start_index, start_partition_id, rng)
    return _assign_rack_aware(brokers, n_partitions, replication_factor, fixed_start_index,
                              start_partition_id, rng)


# --- callers' helpers ---------------------------------------------------------------------------


def broker_metadatas(brokers: Iterable[BrokerMetadata],
                     rack_aware_mode: RackAwareMode = RackAwareMode.ENFORCED,
                     broker_ids: Iterable[int] | None = None) -> list[BrokerMetadata]:
    """The broker list AdminZkClient places on: ``brokers`` under ``rack_aware_mode``, sorted by id.

    ``brokers`` are the registered brokers (``/brokers/ids``); ``broker_ids``, if given, keeps only
    those (unknown ids are ignored).  ``ENFORCED`` raises `AdminOperationError` when some kept
    brokers have a rack and some do not; ``SAFE`` then drops every rack; ``DISABLED`` always does.
    """
    brokers = list(brokers)
    if broker_ids is not None:
        wanted = set(broker_ids)
        brokers = [b for b in brokers if b.id in wanted]
    with_rack = sum(1 for b in brokers if b.rack is not None)
    partial = 0 < with_rack < len(brokers)
    if rack_aware_mode is RackAwareMode.ENFORCED and partial:
        raise AdminOperationError(ENFORCED_MIXED_RACKS_MESSAGE)
    if rack_aware_mode is RackAwareMode.DISABLED or (rack_aware_mode is RackAwareMode.SAFE
                                                     and with_rack < len(brokers)):
        brokers = [BrokerMetadata(b.id, None) for b in brokers]
    return sorted(brokers, key=lambda b: b.id)


def validate_replica_assignment(assignment: Mapping[int, Sequence[int]],
                                expected_replication_factor: int,
                                available_broker_ids: Iterable[int]) -> None:
    """Check a manual assignment of new partitions as AdminZkClient does before adding them.

    Per partition (in id order): a non-empty list (`InvalidReplicaAssignmentError`), no broker twice
    (`InvalidReplicaAssignmentError`), only known brokers (`BrokerNotAvailableError`); then every
    list must have ``expected_replication_factor`` replicas (`InvalidReplicaAssignmentError`).
    Kafka prints broker-id sets in Scala hash-set order; here they are printed sorted.
    """
    available = set(available_broker_ids)
    for partition in sorted(assignment):
        replicas = list(assignment[partition])
        if not replicas:
            raise InvalidReplicaAssignmentError(
                f"Cannot have replication factor of 0 for partition id {partition}.")
        listed = ", ".join(str(r) for r in replicas)
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(
                f"Duplicate brokers not allowed in replica assignment: {listed} "
                f"for partition id {partition}.")
        if not set(replicas) <= available:
            raise BrokerNotAvailableError(
                f"Some brokers specified for partition id {partition} are not available. "
                f"Specified brokers: {listed}, "
                f"available brokers: {', '.join(str(b) for b in sorted(available))}.")
    bad = [(p, len(assignment[p])) for p in sorted(assignment)
           if len(assignment[p]) != expected_replication_factor]
    if bad:
        raise InvalidReplicaAssignmentError(
            "Inconsistent replication factor between partitions, partition 0 has "
            f"{expected_replication_factor} while partitions [{', '.join(str(p) for p, _ in bad)}] "
            f"have replication factors [{', '.join(str(rf) for _, rf in bad)}], respectively.")


def new_partitions_assignment(existing_assignment: Mapping[int, Sequence[int]],
                              brokers: Sequence[BrokerMetadata], added: int, *, topic: str = "",
                              replica_assignment: Mapping[int, Sequence[int]] | None = None,
                              ) -> dict[int, list[int]]:
    """Placement of ``added`` new partitions for a topic now placed as ``existing_assignment``.

    Mirrors AdminZkClient's add-partitions path.  ``brokers`` should be
    ``broker_metadatas(registered, RackAwareMode.ENFORCED)``: sorted by id, racks kept (so the
    placement is rack aware exactly when every broker has a rack).  With ``replica_assignment``
    (``{partition_id: replicas}`` for the new ids) that assignment is validated and returned as is.
    Otherwise the new partitions get ids ``len(existing_assignment)`` onward, and:

    * the replication factor is the length of partition 0's replica list;
    * the start index is the position in ``brokers`` of the first broker whose id is at least
      partition 0's leader (0 if there is none), so leaders continue the round robin; the initial
      shift equals that index too, so the result is deterministic.

    Raises `AdminOperationError` if partition 0 is missing, `InvalidPartitionsError` if ``added``
    is not positive, the `validate_replica_assignment` errors, and those of
    `assign_replicas_to_brokers` (e.g. a replication factor above the broker count).
    """
    brokers = list(brokers)
    if 0 not in existing_assignment:
        raise AdminOperationError(
            f"Unexpected existing replica assignment for topic '{topic}', partition id 0 is "
            f"missing. Assignment: {dict(existing_assignment)}")
    partition0 = list(existing_assignment[0])
    current = len(existing_assignment)
    if added <= 0:
        raise InvalidPartitionsError(
            "The number of partitions for a topic can only be increased. "
            f"Topic {topic} currently has {current} partitions, "
            f"{current + added} would not be an increase.")
    if replica_assignment is not None:
        validate_replica_assignment(replica_assignment, len(partition0), (b.id for b in brokers))
        return {p: list(r) for p, r in replica_assignment.items()}
    if not partition0:  # Kafka fails too (head of an empty list), unmapped: UNKNOWN_SERVER_ERROR
        raise AdminOperationError(f"Partition 0 of topic '{topic}' has no replicas.")
    start_index = next((i for i, b in enumerate(brokers) if b.id >= partition0[0]), 0)
    return assign_replicas_to_brokers(brokers, added, len(partition0),
                                      fixed_start_index=start_index, start_partition_id=current)
