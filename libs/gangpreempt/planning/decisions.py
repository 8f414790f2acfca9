"""The decision a plan reports for each pending workload, in the documented JSON shape."""

from __future__ import annotations

import msgspec

from gangpreempt.model.topology import TopologyAssignment

ADMIT = "Admit"
PREEMPT = "Preempt"
PENDING = "Pending"


class Victim(msgspec.Struct):
    object: str
    reason: str
    pods: list[str] = msgspec.field(default_factory=list)
    queue: str = ""
    priority: int = 0
    evicting: bool = False


class Decision(msgspec.Struct, omit_defaults=True):
    preemptor: str
    queue: str
    mode: str
    outcome: str
    flavors: dict[str, dict[str, str]]
    borrowing: int
    victims: list[Victim]
    placement: dict[str, str]
    message: str
    # For a Workload derived from what a user submitted (a Job, a plain Pod, ...): that
    # object (``Job/ns/name``); empty otherwise.
    owner: str = ""
    # Kueue's topology-aware scheduling: each such pod set's topology assignment
    topology: dict[str, TopologyAssignment] = msgspec.field(default_factory=dict)


class Plan(msgspec.Struct):
    now: str
    decisions: list[Decision]


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


__all__ = ["ADMIT", "PENDING", "PREEMPT", "Decision", "Plan", "Victim", "plural"]
