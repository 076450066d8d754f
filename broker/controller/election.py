"""Leader election strategies of Kafka's ZooKeeper-mode controller (Election.scala), as pure
functions over the assignment order. Each returns the new (leader, isr), or None when no
replica qualifies; every caller bumps the leader epoch (LeaderAndIsr.new_leader).

| strategy            | leader                                                     | new ISR  |
|---------------------|------------------------------------------------------------|----------|
| new partition       | first live replica                                         | live     |
| offline (clean)     | first replica live and in the ISR                          | ISR∩live |
| offline (unclean)   | none of the above: first live replica                      | [leader] |
| controlled shutdown | first replica in the ISR, live and not shutting down      | ISR−shut |
| preferred           | the first replica, if live and in the ISR                  | ISR      |
| reassign            | first target replica live and in the ISR                   | ISR      |
"""
from __future__ import annotations


def new_partition(assignment: list, live: set):
    replicas = [r for r in assignment if r in live]
    if not replicas:
        return None
    return replicas[0], replicas


def offline_partition(assignment: list, isr: list, live: set, unclean_allowed: bool):
    """(leader, isr, unclean) or None."""
    in_sync = [r for r in isr if r in live]
    leader = next((r for r in assignment if r in live and r in isr), None)
    if leader is not None:
        return leader, [r for r in isr if r in live], False
    if unclean_allowed:
        leader = next((r for r in assignment if r in live), None)
        if leader is not None:
            return leader, [leader], True
    del in_sync
    return None


def controlled_shutdown(assignment: list, isr: list, live: set, shutting_down: set):
    leader = next((r for r in assignment
                   if r in isr and r in live and r not in shutting_down), None)
    if leader is None:
        return None
    return leader, [r for r in isr if r not in shutting_down]


def preferred(assignment: list, isr: list, live: set):
    if assignment and assignment[0] in live and assignment[0] in isr:
        return assignment[0], list(isr)
    return None


def reassign(target: list, isr: list, live: set):
    leader = next((r for r in target if r in live and r in isr), None)
    if leader is None:
        return None
    return leader, list(isr)
