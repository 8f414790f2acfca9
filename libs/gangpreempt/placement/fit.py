"""Does a pod fit a node: the filters preemption cannot change (selectors, affinity,
taints, cordon) and the one it can (free resources)."""

from __future__ import annotations

from collections.abc import Mapping

from gangpreempt.model.pods import Node
from gangpreempt.model.scheduling import SchedulingConstraints, Taint

UNSCHEDULABLE_TAINT = Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule")


def unresolvable(constraints: SchedulingConstraints, node: Node) -> str | None:
    """Why the pod can never run on ``node`` whatever is preempted, or None."""
    if node.unschedulable and constraints.first_untolerated((UNSCHEDULABLE_TAINT,)):
        return "node is cordoned (spec.unschedulable)"
    if not constraints.matches_labels(node.labels):
        return "node selector or affinity does not match"
    taint = constraints.first_untolerated(node.taints)
    if taint is not None:
        return f"untolerated taint {taint}"
    return None


def fits(demand: Mapping[str, int], free: Mapping[str, int]) -> bool:
    return all(amount <= 0 or free.get(res, 0) >= amount for res, amount in demand.items())


def take(free: dict[str, int], demand: Mapping[str, int], sign: int = -1) -> None:
    for res, amount in demand.items():
        if res in free:
            free[res] += sign * amount


__all__ = ["UNSCHEDULABLE_TAINT", "fits", "take", "unresolvable"]
