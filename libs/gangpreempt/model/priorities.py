"""Pod and gang priorities at node level, resolved from the cluster state alone: one home
for the rules the node-level index (``placement.cluster.NodeCluster``) and the
legitimacy checks (``planning.legitimacy``) both apply.

- A pod: its ``spec.priority`` when set (admission resolves it from the class), else its
  PriorityClass's value, else the global-default class's, else 0.
- A gang (a PodGroup or a scheduling.k8s.io Workload's group), KEP-5710: scheduling
  priority is its ``spec.priority``, else its class's value, else the lowest of its
  pods'; its preemption priority (the one it is preempted at) is its preemption class's
  value, else the scheduling priority; a preemption priority below the scheduling one is
  refused (two such gangs could preempt each other forever).

An unknown PriorityClass is an error naming the object and the field, as admission would
refuse it."""

from __future__ import annotations

from collections.abc import Iterable

from gangpreempt.errors import InvalidInput
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import Pod, PodGroup


def class_value(state: ClusterState, name: str, owner: str, field: str) -> int:
    """The value of PriorityClass ``name``, which ``owner``'s ``field`` names."""
    pc = state.priority_classes.get(name)
    if pc is None:
        raise InvalidInput(f"{owner}: {field}: PriorityClass {name!r} not found")
    return pc.value


def pod_priority(state: ClusterState, pod: Pod, default: int) -> int:
    """A pod's own priority (``default``: the global-default class's value, or 0)."""
    if pod.priority is not None:
        return pod.priority
    if pod.priority_class_name:
        return class_value(
            state, pod.priority_class_name, f"Pod {pod.key}", "spec.priorityClassName"
        )
    return default


def group_priorities(
    state: ClusterState, group: PodGroup, member_priorities: Iterable[int], default: int
) -> tuple[int, int]:
    """(scheduling, preemption) priority of a gang whose pods have ``member_priorities``."""
    owner = f"{group.source} {group.key}"
    if group.priority is not None:
        sched = group.priority
    elif group.priority_class_name:
        sched = class_value(state, group.priority_class_name, owner, "priorityClassName")
    else:
        sched = min(member_priorities, default=default)
    preempt = sched
    if group.preemption_priority_class_name:
        preempt = class_value(
            state, group.preemption_priority_class_name, owner, "preemptionPriorityClassName"
        )
        if preempt < sched:
            raise InvalidInput(
                f"{owner}: preemptionPriorityClassName "
                f"{group.preemption_priority_class_name!r} ({preempt}) is below the "
                f"scheduling priority ({sched}); a preemption priority must be at least "
                "the scheduling priority, or two such gangs could preempt each other "
                "forever"
            )
    return sched, preempt


__all__ = ["class_value", "group_priorities", "pod_priority"]
