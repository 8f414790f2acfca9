"""The work a victim loses, in GPU-seconds: the one cost model of ``--victim-cost
lost-gpu-hours``, at quota level (``AdmittedWorkload.lost_work``) and on the nodes
(``unit_cost``: a lone pod, a gang, a Kueue Workload's pods).

The formula is ``model.lostwork``'s. Pods report checkpoints through their Kueue
Workload: a lone pod or a PodGroup outside Kueue loses its whole run."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.lostwork import gpus_of, lost_gpu_seconds, workload_lost_work
from gangpreempt.preemption.units import Unit


def unit_gpus(unit: Unit) -> int:
    """The GPUs a unit's pods request."""
    return sum(gpus_of(pod.requests) for pod in unit.pods)


def unit_cost(state: ClusterState, now: datetime) -> Callable[[Unit], float]:
    """A unit's lost work at ``now`` (GPU-seconds), remembered per unit: a Kueue
    Workload's from its admission and its annotations, other units' from their first
    pod's start."""
    now_ts = now.timestamp()
    seen: dict[str, float] = {}

    def cost(unit: Unit) -> float:
        known = seen.get(unit.ref)
        if known is not None:
            return known
        gpus = unit_gpus(unit)
        started = unit.start.timestamp()
        wl = None
        if unit.ref.startswith("Workload/"):
            wl = state.workloads.get(unit.ref.removeprefix("Workload/"))
        elif unit.pods and unit.pods[0].kueue_workload:
            wl = state.workloads.get(unit.pods[0].kueue_workload)
        if wl is not None:
            reserved = wl.quota_reserved_at
            if reserved is not None:
                started = reserved.timestamp()
            value = workload_lost_work(wl, started, gpus, now_ts)
        else:
            value = lost_gpu_seconds(started, now_ts, gpus)
        seen[unit.ref] = value
        return value

    return cost


__all__ = ["unit_cost", "unit_gpus"]
