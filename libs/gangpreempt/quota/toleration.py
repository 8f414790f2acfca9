"""A minimum runtime for Kueue Workloads: scheduler-plugins' Preemption Toleration, read
for a Workload as for a pod.

The policy is the Workload's priority class's (a WorkloadPriorityClass, or the
PriorityClass it names with ``priorityClassSource: scheduling.k8s.io/priorityclass``),
when that class carries the annotations
``preemption-toleration.scheduling.x-k8s.io/minimum-preemptable-priority`` and
``.../toleration-seconds``; else the same annotations on the ClusterQueue it is admitted
to (a default for its workloads). As the plugin reads them: the minimum defaults to the
class's value plus one (for a ClusterQueue's default, to the workload's priority plus
one); the seconds default to 0, which tolerates nothing; a negative value tolerates for
good. The window starts when the workload's quota was reserved (its ``QuotaReserved``
condition; when that is not known, at the decision). Inside it, the workload is no
candidate for a preemptor whose priority is below the minimum, whatever the
ClusterQueue's preemption policy says (``withinClusterQueue``, ``reclaimWithinCohort``
``Any`` included), in classical preemption and fair sharing alike.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.workloads import PRIORITY_CLASS, WORKLOAD_PRIORITY_CLASS, Workload

# (minimum preemptable priority, the end of the window in epoch seconds; inf: never)
Tolerance = tuple[int, float]


def tolerance(
    state: ClusterState, wl: Workload, cq: str, priority: int, reserved_ts: float
) -> Tolerance | None:
    """The workload's minimum runtime when it holds quota in ``cq`` (``priority`` its
    priority, ``reserved_ts`` when its quota was reserved), or None when it has none."""
    minimum, seconds, value = _policy(state, wl, cq, priority)
    if not seconds:
        return None
    if minimum is None:
        minimum = value + 1
    return minimum, math.inf if seconds < 0 else reserved_ts + seconds


def _policy(
    state: ClusterState, wl: Workload, cq: str, priority: int
) -> tuple[int | None, int | None, int]:
    """(minimum, seconds, the value the minimum defaults above) of the first source
    that has a policy: the workload's class, else its ClusterQueue."""
    ref = wl.priority_class
    if ref is not None:
        cls = (
            state.workload_priority_classes.get(ref.name)
            if ref.kind == WORKLOAD_PRIORITY_CLASS
            else state.priority_classes.get(ref.name)
            if ref.kind == PRIORITY_CLASS
            else None
        )
        if cls is not None and (
            cls.minimum_preemptable_priority is not None or cls.toleration_seconds is not None
        ):
            return cls.minimum_preemptable_priority, cls.toleration_seconds, cls.value
    queue = state.cluster_queues.get(cq)
    if queue is not None and (
        queue.minimum_preemptable_priority is not None or queue.toleration_seconds is not None
    ):
        return queue.minimum_preemptable_priority, queue.toleration_seconds, priority
    return None, None, priority


def any_policy(state: ClusterState) -> bool:
    """Does any class or ClusterQueue of ``state`` give a minimum runtime? (They are few:
    a look before going over every workload.)"""
    return any(
        obj.toleration_seconds
        for objs in (
            state.workload_priority_classes,
            state.priority_classes,
            state.cluster_queues,
        )
        for obj in objs.values()
    )


def tolerates(tol: Tolerance | None, preemptor_priority: int, now_ts: float) -> bool:
    """Is a workload of this tolerance spared by that preemptor at ``now_ts``?"""
    return tol is not None and preemptor_priority < tol[0] and now_ts < tol[1]


def describe(tol: Tolerance) -> str:
    """The tolerance in words, for an explanation."""
    end = tol[1]
    until = (
        "for good"
        if math.isinf(end)
        else "until " + datetime.fromtimestamp(end, UTC).isoformat().replace("+00:00", "Z")
    )
    return f"inside its minimum runtime: it tolerates preemptors below priority {tol[0]} {until}"


__all__ = ["Tolerance", "any_policy", "describe", "tolerance", "tolerates"]
