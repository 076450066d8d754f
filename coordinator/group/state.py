"""Group states and the table of legal transitions.

Kafka's classic group protocol moves a group through five states:

    Empty ──join──▶ PreparingRebalance ──all joined / timeout──▶ CompletingRebalance
      ▲                  ▲      │                                      │
      │                  │      └──(no members left)──▶ Empty          │ leader's SyncGroup
      │                  └───── join / leave / expiry ◀── Stable ◀─────┘   written and applied
      └──────────── last member gone (through PreparingRebalance)
    Dead: the group was deleted, expired, or moved away (unloaded). It is terminal.

The table below lists, for every state, the states a group may come FROM. Every transition goes
through `check_transition`, so an impossible move is a bug that raises at once instead of a group
silently drifting into a state Kafka never reaches (the same design as Kafka's GroupState
`validPreviousStates`).
"""
import enum


class GroupState(enum.Enum):
    # The value is the name Kafka shows in DescribeGroups / ListGroups responses.
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    @classmethod
    def parse(cls, name: str) -> "GroupState | None":
        """A state from its Kafka name, case-insensitively (ListGroups' states filter); None if unknown."""
        return _BY_LOWER_NAME.get(name.lower())


_BY_LOWER_NAME = {state.value.lower(): state for state in GroupState}

VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset({GroupState.STABLE, GroupState.PREPARING_REBALANCE,
                                GroupState.COMPLETING_REBALANCE, GroupState.EMPTY,
                                GroupState.DEAD}),
}

# States from which a join, leave or member expiry starts a new rebalance (Kafka's canRebalance).
CAN_REBALANCE = frozenset({GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY})


class IllegalStateTransition(RuntimeError):
    """A transition the table forbids: always a coordinator bug."""


def check_transition(group_id: str, current: GroupState, target: GroupState) -> None:
    if current not in VALID_PREVIOUS_STATES[target]:
        raise IllegalStateTransition(
            f"group {group_id!r} cannot move from {current.value} to {target.value}")
