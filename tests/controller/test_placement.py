"""Replica placement (broker/controller/placement.py) against Kafka 3.9's AdminUtils and
AdminZkClient.

Expected values come from Kafka's Javadoc, from Kafka's tests (AdminRackAwareTest,
AdminZkClientTest, AddPartitionsTest: their expectations restated here, not their code), and, where
marked "Kafka", from running Kafka 3.9's AdminUtils on the same input.
"""
import random
from collections import Counter

import pytest
from hypothesis import given, strategies as st

from broker.controller.placement import (
    AdminOperationError, BrokerMetadata, BrokerNotAvailableError, InvalidPartitionsError,
    InvalidReplicaAssignmentError, InvalidReplicationFactorError, PlacementError, RackAwareMode,
    assign_replicas_to_brokers, broker_metadatas, new_partitions_assignment,
    rack_alternated_broker_list, replica_index, validate_replica_assignment)
from protocol.errors import ErrorCode, KafkaError


def brokers_of(racks):
    """BrokerMetadata for a {broker id: rack or None} mapping, in id order."""
    return [BrokerMetadata(b, racks[b]) for b in sorted(racks)]


def no_rack(*ids):
    return [BrokerMetadata(b) for b in ids]


class Draws:
    """An rng whose randrange answers a fixed sequence, recording the bounds it was asked for."""

    def __init__(self, *values):
        self.values = list(values)
        self.bounds = []

    def randrange(self, n):
        self.bounds.append(n)
        return self.values.pop(0)


# --- the check Kafka's rack-aware tests share (RackAwareTest.checkReplicaDistribution) -----------


def check_distribution(assignment, racks, n_partitions, rf, *, rack_aware=True,
                       leaders=True, replicas=True):
    n_brokers = len(racks)
    assert len(assignment) == n_partitions
    for brokers in assignment.values():
        assert len(set(brokers)) == len(brokers) == rf
    if rack_aware:  # every replica of a partition on its own rack
        for brokers in assignment.values():
            assert len({racks[b] for b in brokers}) == rf
    if leaders:  # each broker the preferred leader of n/brokers partitions
        counts = Counter(brokers[0] for brokers in assignment.values())
        assert [counts[b] for b in racks] == [n_partitions // n_brokers] * n_brokers
    if replicas:  # each broker holding n*rf/brokers replicas
        counts = Counter(b for brokers in assignment.values() for b in brokers)
        assert [counts[b] for b in racks] == [n_partitions * rf // n_brokers] * n_brokers


SIX_RACKED = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}


# --- Kafka's documented examples -----------------------------------------------------------------


def test_javadoc_rack_unaware_example():
    assert assign_replicas_to_brokers(no_rack(0, 1, 2, 3, 4), 10, 3, 0, -1) == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2]}


def test_javadoc_rack_aware_example():
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_broker_list(racks) == [0, 3, 1, 5, 4, 2]
    racks_without_5 = {b: r for b, r in racks.items() if b != 5}
    assert rack_alternated_broker_list(racks_without_5) == [0, 3, 1, 4, 2]
    assert assign_replicas_to_brokers(brokers_of(racks), 7, 3, 0, 0) == {
        0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2], 4: [4, 2, 0], 5: [2, 0, 3],
        6: [0, 4, 2]}  # not [0, 3, 1] again: the shift grew at the wrap


def test_rack_alternated_list_three_racks_of_three():
    racks = {b: f"rack{b // 3 + 1}" for b in range(9)}
    assert rack_alternated_broker_list(racks) == [0, 3, 6, 1, 4, 7, 2, 5, 8]


def test_rack_alternated_list_ignores_input_order_and_sorts_racks_as_java():
    assert rack_alternated_broker_list({5: "b", 1: "a", 3: "b", 0: "a"}) == [0, 3, 1, 5]
    # Java compares UTF-16 code units: a surrogate pair (U+1F600) sorts before U+E000, unlike
    # Python's code-point order.  Kafka: [3, 1, 0, 2].
    racks = {0: "\ue000", 1: "\U0001f600", 2: "\ue000", 3: "a"}
    assert rack_alternated_broker_list(racks) == [3, 1, 0, 2]
    assert assign_replicas_to_brokers(brokers_of(racks), 4, 2, 0, 0) == {
        0: [3, 1], 1: [1, 0], 2: [0, 3], 3: [2, 3]}


def test_replica_index():
    # Followers sit 1 + (shift + k) mod (n - 1) places after the leader.
    assert [replica_index(0, 0, k, 5) for k in range(4)] == [1, 2, 3, 4]
    assert [replica_index(3, 1, k, 5) for k in range(4)] == [0, 1, 2, 4]
    assert [replica_index(4, 7, k, 5) for k in range(4)] == [3, 0, 1, 2]  # 7 = 3 mod 4


# --- AdminRackAwareTest ---------------------------------------------------------------------------


def test_rack_aware_fixed_start():
    check_distribution(assign_replicas_to_brokers(brokers_of(SIX_RACKED), 6, 3, 2, 0),
                       SIX_RACKED, 6, 3)


@pytest.mark.parametrize("seed", range(20))
def test_rack_aware_random_start(seed):
    rng = random.Random(seed)
    check_distribution(assign_replicas_to_brokers(brokers_of(SIX_RACKED), 6, 3, rng=rng),
                       SIX_RACKED, 6, 3)
    check_distribution(assign_replicas_to_brokers(brokers_of(SIX_RACKED), 12, 2, rng=rng),
                       SIX_RACKED, 12, 2)
    check_distribution(assign_replicas_to_brokers(brokers_of(SIX_RACKED), 6, 2, rng=rng),
                       SIX_RACKED, 6, 2)
    three = {0: "rack1", 1: "rack2", 4: "rack3"}
    check_distribution(assign_replicas_to_brokers(brokers_of(three), 3, 2, rng=rng), three, 3, 2)


def test_rack_aware_uneven_replicas():
    assignment = assign_replicas_to_brokers(brokers_of(SIX_RACKED), 13, 3, 0, 0)
    check_distribution(assignment, SIX_RACKED, 13, 3, leaders=False, replicas=False)
    assert assignment == {  # Kafka
        0: [0, 1, 3], 1: [1, 3, 5], 2: [3, 5, 2], 3: [5, 2, 4], 4: [2, 4, 0], 5: [4, 0, 1],
        6: [0, 2, 4], 7: [1, 4, 0], 8: [3, 0, 1], 9: [5, 1, 3], 10: [2, 3, 5], 11: [4, 5, 2],
        12: [0, 3, 2]}


@pytest.mark.parametrize("seed", range(10))
def test_rack_aware_uneven_racks(seed):
    racks = {0: "rack1", 1: "rack1", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}
    assignment = assign_replicas_to_brokers(brokers_of(racks), 12, 3, rng=random.Random(seed))
    check_distribution(assignment, racks, 12, 3, replicas=False)


def test_rack_aware_uneven_racks_fixed():
    racks = {0: "rack1", 1: "rack1", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}
    assert assign_replicas_to_brokers(brokers_of(racks), 12, 3, 1, 0) == {  # Kafka
        0: [2, 5, 3], 1: [3, 0, 2], 2: [1, 2, 3], 3: [4, 1, 2], 4: [5, 4, 2], 5: [0, 4, 2],
        6: [2, 1, 4], 7: [3, 5, 2], 8: [1, 2, 3], 9: [4, 0, 2], 10: [5, 2, 3], 11: [0, 3, 2]}
    # The lone broker of rack2 holds a replica of every partition: small racks take more.


@pytest.mark.parametrize("seed", range(10))
def test_rack_aware_expansion(seed):
    racks = {6: "rack1", 7: "rack2", 8: "rack2", 9: "rack3", 10: "rack3", 11: "rack1"}
    assignment = assign_replicas_to_brokers(brokers_of(racks), 12, 2, -1, 12,
                                            rng=random.Random(seed))
    assert sorted(assignment) == list(range(12, 24))
    check_distribution(assignment, racks, 12, 2)


def test_rack_aware_expansion_fixed():
    racks = {6: "rack1", 7: "rack2", 8: "rack2", 9: "rack3", 10: "rack3", 11: "rack1"}
    assert assign_replicas_to_brokers(brokers_of(racks), 12, 2, 4, 12) == {  # Kafka
        12: [8, 10], 13: [10, 6], 14: [6, 7], 15: [7, 9], 16: [9, 11], 17: [11, 8],
        18: [8, 9], 19: [10, 11], 20: [6, 8], 21: [7, 10], 22: [9, 6], 23: [11, 7]}


@pytest.mark.parametrize("seed", range(5))
def test_large_number_of_partitions(seed):
    racks = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1",
             6: "rack1", 7: "rack2", 8: "rack2", 9: "rack3", 10: "rack1", 11: "rack3"}
    assignment = assign_replicas_to_brokers(brokers_of(racks), 96, 3, rng=random.Random(seed))
    check_distribution(assignment, racks, 96, 3)


@pytest.mark.parametrize("seed", range(10))
def test_more_replicas_than_racks(seed):
    racks = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack2"}
    assignment = assign_replicas_to_brokers(brokers_of(racks), 6, 5, rng=random.Random(seed))
    assert all(len(set(r)) == 5 for r in assignment.values())
    assert all(len({racks[b] for b in r}) == 3 for r in assignment.values())


def test_more_replicas_than_racks_fixed():
    racks = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack2"}
    assert assign_replicas_to_brokers(brokers_of(racks), 6, 5, 3, -1) == {  # Kafka
        0: [2, 3, 0, 1, 4], 1: [4, 2, 0, 1, 3], 2: [5, 4, 0, 1, 3], 3: [0, 5, 3, 2, 4],
        4: [1, 0, 3, 2, 4], 5: [3, 1, 0, 2, 4]}


@pytest.mark.parametrize("seed", range(10))
def test_fewer_replicas_than_racks(seed):
    racks = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack2"}
    assignment = assign_replicas_to_brokers(brokers_of(racks), 6, 2, rng=random.Random(seed))
    assert all(len({racks[b] for b in r}) == 2 for r in assignment.values())


@pytest.mark.parametrize("seed", range(10))
def test_single_rack(seed):
    racks = dict.fromkeys(range(6), "rack1")
    assignment = assign_replicas_to_brokers(brokers_of(racks), 6, 3, rng=random.Random(seed))
    assert all(len(set(r)) == 3 for r in assignment.values())
    assert Counter(r[0] for r in assignment.values()) == dict.fromkeys(range(6), 1)


def test_skip_broker_with_replica_already_assigned():
    racks = {0: "a", 1: "b", 2: "c", 3: "a", 4: "a"}
    assignment = assign_replicas_to_brokers(brokers_of(racks), 6, 4, 2, -1)
    check_distribution(assignment, racks, 6, 4, rack_aware=False, leaders=False, replicas=False)
    assert assignment == {  # Kafka
        0: [2, 0, 1, 3], 1: [3, 1, 2, 4], 2: [4, 2, 1, 3], 3: [0, 1, 2, 3], 4: [1, 4, 2, 3],
        5: [2, 4, 1, 3]}


def test_replica_assignment_errors_and_result():
    brokers = no_rack(0, 1, 2, 3, 4)
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas_to_brokers(brokers, 10, 0)
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas_to_brokers(brokers, 10, 6)
    assert assign_replicas_to_brokers(brokers, 10, 3, 0, -1)[9] == [4, 1, 2]


def test_invalid_parameters_in_kafka_order():
    brokers = brokers_of({0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: None})
    with pytest.raises(InvalidPartitionsError) as e:
        assign_replicas_to_brokers(brokers, 0, 0, -1, -1)  # the partition count is checked first
    assert e.value.message == "Number of partitions must be larger than 0."
    with pytest.raises(InvalidReplicationFactorError) as e:
        assign_replicas_to_brokers(brokers, 10, 0, -1, -1)
    assert e.value.message == "Replication factor must be larger than 0."
    with pytest.raises(InvalidReplicationFactorError) as e:
        assign_replicas_to_brokers(brokers, 10, 6, -1, -1)
    assert e.value.message == "Replication factor: 6 larger than available brokers: 5."
    with pytest.raises(AdminOperationError) as e:
        assign_replicas_to_brokers(brokers, 10, 5, -1, -1)
    assert e.value.message == ("Not all brokers have rack information for replica rack aware "
                               "assignment.")
    with pytest.raises(InvalidReplicationFactorError) as e:
        assign_replicas_to_brokers([], 1, 1)
    assert e.value.message == "Replication factor: 1 larger than available brokers: 0."


def test_error_codes():
    cases = [(InvalidPartitionsError, ErrorCode.INVALID_PARTITIONS),
             (InvalidReplicationFactorError, ErrorCode.INVALID_REPLICATION_FACTOR),
             (InvalidReplicaAssignmentError, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
             (BrokerNotAvailableError, ErrorCode.BROKER_NOT_AVAILABLE),
             (AdminOperationError, ErrorCode.UNKNOWN_SERVER_ERROR)]
    for cls, code in cases:
        exc = cls("text")
        assert isinstance(exc, PlacementError) and isinstance(exc, KafkaError)
        assert cls.ERROR_CODE is code and exc.error_code is code
        assert exc.message == "text"
        assert cls.KAFKA_EXCEPTION.startswith("org.apache.kafka.")
    # Kafka answers UNKNOWN_SERVER_ERROR with a null message; the others carry theirs.
    assert AdminOperationError("text").response_message is None
    assert InvalidPartitionsError("text").response_message == "text"


def test_duplicate_broker_ids_are_a_caller_bug():
    with pytest.raises(ValueError):
        assign_replicas_to_brokers(no_rack(1, 2, 1), 3, 2)


# --- randomness ---------------------------------------------------------------------------------


def test_start_index_and_shift_are_two_draws():
    rng = Draws(2, 0)  # start index 2, shift 0
    assert assign_replicas_to_brokers(no_rack(0, 1, 2, 3, 4), 2, 3, rng=rng) == {
        0: [2, 3, 4], 1: [3, 4, 0]}
    assert rng.bounds == [5, 5]
    rng = Draws(2, 3)  # same start, another shift: the followers move, the leaders do not
    assert assign_replicas_to_brokers(no_rack(0, 1, 2, 3, 4), 2, 3, rng=rng) == {
        0: [2, 1, 3], 1: [3, 2, 4]}
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    rng = Draws(1, 0)  # indexes into the rack-alternated list [0, 3, 1, 5, 4, 2]
    assert assign_replicas_to_brokers(brokers_of(racks), 1, 3, rng=rng) == {0: [3, 1, 5]}
    assert rng.bounds == [6, 6]


def test_fixed_start_draws_nothing():
    rng = Draws()
    assign_replicas_to_brokers(no_rack(0, 1, 2), 5, 2, 1, rng=rng)
    assign_replicas_to_brokers(brokers_of({0: "a", 1: "b"}), 5, 2, 0, rng=rng)
    assert rng.bounds == []


def test_errors_come_before_any_draw():
    rng = Draws()
    with pytest.raises(AdminOperationError):
        assign_replicas_to_brokers(brokers_of({0: "a", 1: None}), 1, 1, rng=rng)
    assert rng.bounds == []


def test_rack_unaware_uses_the_given_order():
    # Without racks the list order is the round-robin order (Kafka does not sort it).
    assert assign_replicas_to_brokers(no_rack(3, 1, 4, 0, 2), 7, 3, 2, 5) == {  # Kafka
        5: [4, 1, 0], 6: [0, 4, 2], 7: [2, 0, 3], 8: [3, 2, 1], 9: [1, 3, 4], 10: [4, 0, 2],
        11: [0, 2, 3]}


# --- rack-aware modes (AdminZkClientTest.testGetBrokerMetadatas) ---------------------------------


def test_broker_metadatas_modes():
    racks = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack1", 4: None, 5: "rack3"}
    registered = list(reversed(brokers_of(racks)))
    for mode in (RackAwareMode.DISABLED, RackAwareMode.SAFE):
        result = broker_metadatas(registered, mode)
        assert [b.id for b in result] == list(range(6))
        assert [b.rack for b in result] == [None] * 6
    with pytest.raises(AdminOperationError) as e:
        broker_metadatas(registered, RackAwareMode.ENFORCED)
    assert e.value.message == ("Not all brokers have rack information. Add --disable-rack-aware in "
                               "command line to make replica assignment without rack information.")
    assert e.value.response_message is None
    partial = [0, 1, 2, 3, 5]
    result = broker_metadatas(registered, RackAwareMode.ENFORCED, partial)
    assert [b.id for b in result] == partial
    assert [b.rack for b in result] == [racks[b] for b in partial]
    # Safe mode lets a partially racked cluster create topics (without rack awareness).
    placed = assign_replicas_to_brokers(broker_metadatas(registered, RackAwareMode.SAFE), 3, 2)
    assert len(placed) == 3


def test_broker_metadatas_keeps_full_rack_information():
    racks = {2: "b", 0: "a", 1: "a"}
    for mode in (RackAwareMode.ENFORCED, RackAwareMode.SAFE):
        assert broker_metadatas(brokers_of(racks), mode) == [
            BrokerMetadata(0, "a"), BrokerMetadata(1, "a"), BrokerMetadata(2, "b")]
    assert broker_metadatas(no_rack(2, 0), RackAwareMode.ENFORCED) == no_rack(0, 2)
    assert broker_metadatas(brokers_of(racks), RackAwareMode.DISABLED) == no_rack(0, 1, 2)


# --- adding partitions (AddPartitionsTest, AdminZkClient.createNewPartitionsAssignment) ---------


FOUR = no_rack(0, 1, 2, 3)


def test_add_partitions_all_servers():
    # A topic with p0 on [2, 3, 0, 1] grown to 7 partitions on brokers 0..3.
    added = new_partitions_assignment({0: [2, 3, 0, 1]}, FOUR, 6)
    assert {p: (r[0], set(r)) for p, r in added.items()} == {
        1: (3, {3, 2, 0, 1}), 2: (0, {0, 3, 1, 2}), 3: (1, {1, 0, 2, 3}),
        4: (2, {2, 3, 0, 1}), 5: (3, {3, 0, 1, 2}), 6: (0, {0, 1, 2, 3})}


def test_add_partitions_partial_servers():
    # A topic with p0 on [1, 2] grown to 3 partitions.
    added = new_partitions_assignment({0: [1, 2]}, FOUR, 2)
    assert added == {1: [2, 0], 2: [3, 1]}


def test_add_partitions_start_index_is_first_broker_at_or_above_the_leader():
    # Broker 5 is gone: the round robin starts at the next id up, 6 (index 2); its index is
    # also the shift.
    brokers = no_rack(1, 3, 6, 8)
    assert new_partitions_assignment({0: [5, 1], 1: [8, 3]}, brokers, 2) == (
        assign_replicas_to_brokers(brokers, 2, 2, 2, 2))
    # No broker id that high: index 0.
    assert new_partitions_assignment({0: [9, 1]}, brokers, 1) == (
        assign_replicas_to_brokers(brokers, 1, 2, 0, 1))


def test_add_partitions_continues_a_fixed_start_topic_with_fewer_partitions_than_brokers():
    brokers = no_rack(0, 1, 2, 3, 4)
    whole = assign_replicas_to_brokers(brokers, 9, 3, 1, 0)
    existing = {p: whole[p] for p in range(3)}
    assert {**existing, **new_partitions_assignment(existing, brokers, 6)} == whole


def test_add_partitions_does_not_continue_the_shift_past_a_wrap():
    # With 7 existing partitions on 5 brokers the topic's shift had grown once; adding restarts it
    # from the start index, so partition 7 differs from a 10-partition topic's.
    brokers = no_rack(0, 1, 2, 3, 4)
    whole = assign_replicas_to_brokers(brokers, 10, 3, 0, 0)
    existing = {p: whole[p] for p in range(7)}
    added = new_partitions_assignment(existing, brokers, 3)
    assert [added[p][0] for p in (7, 8, 9)] == [whole[p][0] for p in (7, 8, 9)]
    assert added[7] == [2, 3, 4] != whole[7] == [2, 4, 0]


def test_add_partitions_rack_aware():
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    brokers = broker_metadatas(brokers_of(racks), RackAwareMode.ENFORCED)
    # p0's leader 3 is at index 3 of the id-sorted list, so the start index and shift are 3,
    # used on the rack-alternated list [0, 3, 1, 5, 4, 2].
    added = new_partitions_assignment({0: [3, 1, 5]}, brokers, 3)
    assert added == assign_replicas_to_brokers(brokers, 3, 3, 3, 1)
    assert [r[0] for r in added.values()] == [4, 2, 0]
    assert all(len({racks[b] for b in r}) == 3 for r in added.values())


def test_add_partitions_errors():
    with pytest.raises(AdminOperationError) as e:
        new_partitions_assignment({1: [0, 1]}, FOUR, 1, topic="new-topic5",
                                  replica_assignment={1: [0, 1], 2: [0, 1, 2]})
    assert "Unexpected existing replica assignment for topic 'new-topic5', partition id 0 is " \
           "missing" in e.value.message
    with pytest.raises(InvalidPartitionsError) as e:
        new_partitions_assignment({0: [0, 1], 1: [1, 2]}, FOUR, 0, topic="t")
    assert e.value.message == ("The number of partitions for a topic can only be increased. "
                               "Topic t currently has 2 partitions, 2 would not be an increase.")
    with pytest.raises(InvalidReplicationFactorError) as e:
        new_partitions_assignment({0: [0, 1, 2, 3, 4]}, FOUR, 1)
    assert e.value.message == "Replication factor: 5 larger than available brokers: 4."


def test_add_partitions_manual_assignment():
    assert new_partitions_assignment({0: [1, 2]}, FOUR, 2,
                                     replica_assignment={1: [0, 1], 2: [2, 3]}) == {
        1: [0, 1], 2: [2, 3]}
    # AddPartitionsTest.testWrongReplicaCount: a topic of RF 2 given a 3-replica partition.
    with pytest.raises(InvalidReplicaAssignmentError) as e:
        new_partitions_assignment({0: [0, 1]}, FOUR, 1, replica_assignment={1: [0, 1, 2]})
    assert e.value.message == ("Inconsistent replication factor between partitions, partition 0 "
                               "has 2 while partitions [1] have replication factors [3], "
                               "respectively.")


def test_validate_replica_assignment():
    with pytest.raises(InvalidReplicaAssignmentError) as e:
        validate_replica_assignment({3: []}, 2, [0, 1])
    assert e.value.message == "Cannot have replication factor of 0 for partition id 3."
    with pytest.raises(InvalidReplicaAssignmentError) as e:
        validate_replica_assignment({3: [1, 1]}, 2, [0, 1])
    assert e.value.message == ("Duplicate brokers not allowed in replica assignment: 1, 1 for "
                               "partition id 3.")
    with pytest.raises(BrokerNotAvailableError) as e:
        validate_replica_assignment({3: [1, 7]}, 2, [1, 0])
    assert e.value.message == ("Some brokers specified for partition id 3 are not available. "
                               "Specified brokers: 1, 7, available brokers: 0, 1.")
    with pytest.raises(InvalidReplicaAssignmentError) as e:
        validate_replica_assignment({4: [0], 3: [0, 1, 2], 2: [0, 1]}, 2, [0, 1, 2])
    assert e.value.message == ("Inconsistent replication factor between partitions, partition 0 "
                               "has 2 while partitions [3, 4] have replication factors [3, 1], "
                               "respectively.")


# --- properties ---------------------------------------------------------------------------------


@st.composite
def clusters(draw, racked=None, max_brokers=9):
    """(brokers, racks by id): distinct ids in any order, all racked or none (or per `racked`)."""
    ids = draw(st.lists(st.integers(0, 50), min_size=1, max_size=max_brokers, unique=True))
    if racked is None:
        racked = draw(st.booleans())
    names = draw(st.lists(st.sampled_from(["a", "b", "c", "d", "r1", "r10", "r2"]),
                          min_size=len(ids), max_size=len(ids))) if racked else [None] * len(ids)
    brokers = [BrokerMetadata(i, r) for i, r in zip(ids, names)]
    return brokers, {b.id: b.rack for b in brokers}


@st.composite
def placements(draw, racked=None, fixed=None):
    brokers, racks = draw(clusters(racked))
    rf = draw(st.integers(1, len(brokers)))
    n_partitions = draw(st.integers(1, 40))
    start_partition = draw(st.sampled_from([-1, 0]) | st.integers(0, 60))
    if fixed is None:
        fixed = draw(st.booleans())
    start = draw(st.integers(0, 2 * len(brokers))) if fixed else -1
    seed = draw(st.integers(0, 2**32))
    assignment = assign_replicas_to_brokers(brokers, n_partitions, rf, start, start_partition,
                                            rng=random.Random(seed))
    return brokers, racks, rf, n_partitions, start_partition, assignment


@given(placements())
def test_every_partition_gets_rf_distinct_known_brokers(case):
    brokers, racks, rf, n_partitions, start_partition, assignment = case
    first = max(0, start_partition)
    assert list(assignment) == list(range(first, first + n_partitions))
    for replicas in assignment.values():
        assert len(replicas) == len(set(replicas)) == rf
        assert set(replicas) <= set(racks)


@given(placements())
def test_leaders_spread_evenly(case):
    brokers, racks, rf, n_partitions, start_partition, assignment = case
    counts = Counter(replicas[0] for replicas in assignment.values())
    low, high = n_partitions // len(brokers), -(-n_partitions // len(brokers))
    assert all(low <= counts[b] <= high for b in racks)


@given(placements(racked=True))
def test_rack_aware_covers_as_many_racks_as_possible(case):
    brokers, racks, rf, n_partitions, start_partition, assignment = case
    n_racks = len(set(racks.values()))
    for replicas in assignment.values():
        assert len({racks[b] for b in replicas}) == min(n_racks, rf)


@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 3), st.integers(0, 2),
       st.booleans(), st.data())
def test_replicas_balanced_over_whole_rounds(n_racks, per_rack, rounds, first_round, racked, data):
    # Kafka's tests expect exactly n*rf/brokers replicas per broker when the partitions fill whole
    # rounds of the broker list and racks (if any) are the same size.
    n = n_racks * per_rack
    ids = data.draw(st.permutations(range(n)))
    brokers = [BrokerMetadata(b, f"rack{i % n_racks}" if racked else None)
               for i, b in enumerate(ids)]
    rf = data.draw(st.integers(1, n))
    start = data.draw(st.integers(-1, n - 1))
    assignment = assign_replicas_to_brokers(brokers, rounds * n, rf, start, first_round * n,
                                            rng=random.Random(data.draw(st.integers(0, 99))))
    counts = Counter(b for replicas in assignment.values() for b in replicas)
    assert sorted(counts.values()) == [rounds * rf] * n


@given(placements(racked=False))
def test_rack_unaware_replicas_within_two_rounds_of_even(case):
    # Each round of the broker list gives a broker at most one replica per replica slot, and a
    # range of partitions has at most two incomplete rounds.
    brokers, racks, rf, n_partitions, start_partition, assignment = case
    counts = Counter(b for replicas in assignment.values() for b in replicas)
    assert max(counts[b] for b in racks) - min(counts[b] for b in racks) <= 2 * rf


@given(clusters(), st.integers(1, 30), st.integers(-1, 60), st.integers(0, 20), st.data())
def test_fixed_start_ignores_the_rng(cluster, n_partitions, start_partition, start, data):
    brokers, _ = cluster
    rf = data.draw(st.integers(1, len(brokers)))
    rng = Draws()
    assert assign_replicas_to_brokers(brokers, n_partitions, rf, start, start_partition, rng=rng) \
        == assign_replicas_to_brokers(brokers, n_partitions, rf, start, start_partition)
    assert rng.bounds == []


@given(clusters(racked=True), st.integers(1, 30), st.integers(0, 30), st.data())
def test_single_rack_equals_rack_unaware_on_sorted_ids(cluster, n_partitions, start, data):
    brokers, _ = cluster
    one_rack = [BrokerMetadata(b.id, "r") for b in brokers]
    rf = data.draw(st.integers(1, len(brokers)))
    by_id = no_rack(*sorted(b.id for b in brokers))
    assert assign_replicas_to_brokers(one_rack, n_partitions, rf, start) == (
        assign_replicas_to_brokers(by_id, n_partitions, rf, start))


@given(clusters(racked=False), st.integers(1, 30), st.integers(0, 30), st.data())
def test_one_broker_per_rack_equals_rack_unaware_on_rack_order(cluster, n_partitions, start, data):
    brokers, _ = cluster
    own_racks = [BrokerMetadata(b.id, f"rack-{b.id * 7919 % 101:03}") for b in brokers]
    by_rack = [b.id for b in sorted(own_racks, key=lambda b: b.rack)]
    rf = data.draw(st.integers(1, len(brokers)))
    assert assign_replicas_to_brokers(own_racks, n_partitions, rf, start) == (
        assign_replicas_to_brokers(no_rack(*by_rack), n_partitions, rf, start))


@given(clusters(), st.integers(1, 12), st.data())
def test_add_partitions_deterministic_and_continues_leaders(cluster, added, data):
    brokers, racks = cluster
    brokers = broker_metadatas(brokers, RackAwareMode.ENFORCED)
    rf = data.draw(st.integers(1, len(brokers)))
    existing = assign_replicas_to_brokers(brokers, data.draw(st.integers(1, 12)), rf,
                                          rng=random.Random(data.draw(st.integers(0, 99))))
    result = new_partitions_assignment(existing, brokers, added)
    assert result == new_partitions_assignment(existing, brokers, added)
    assert list(result) == list(range(len(existing), len(existing) + added))
    assert all(len(set(r)) == rf for r in result.values())
    if not any(racks.values()):
        # Leaders continue the round robin from partition 0's leader over the id-sorted list.
        ids = [b.id for b in brokers]
        p0 = ids.index(existing[0][0])
        assert [r[0] for r in result.values()] == [ids[(p0 + p) % len(ids)] for p in result]
