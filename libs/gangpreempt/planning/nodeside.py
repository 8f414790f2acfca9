"""The nodes as the quota search asks them under ``--victim-cost lost-gpu-hours``
(``preemption.cheapest.NodeSide``): what the victims the nodes would add cost, and where
the cheapest room for a Workload's pods is.

It reads the planner as the pass found it (the plans in flight held, the room of the
preemptors whose victims have just left reserved); the decisions of the pass are placed
on it afterwards (``with_nodes``), so an answer is an estimate that composing then makes
exact: the victims it adds there are counted in the plan."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from gangpreempt.planning.nodeplan import NodePlanner
from gangpreempt.preemption.units import Unit


class PlannerSide:
    """``NodeSide`` on a ``NodePlanner`` (read only: nothing is committed)."""

    def __init__(self, planner: NodePlanner) -> None:
        self.planner = planner

    def _units(self, refs: Collection[str]) -> list[Unit]:
        units = self.planner.table.units
        return [units[r] for r in refs if r in units]

    def extras(self, workload: str, queue: str, victims: Sequence[str]) -> float | None:
        planner = self.planner
        wl = planner.state.workloads.get(workload)
        pods = planner.kueue_pods(workload)
        cost = planner.cost()
        if wl is None or not pods or cost is None:
            return 0.0
        forced = self._units(victims)
        search, cluster = planner.kueue_search(pods, forced)
        if search.fits_without_preemption(cluster) is not None:
            return 0.0
        exclude = {u.ref for u in forced} | planner.promised | {f"Workload/{workload}"}
        priority = planner.state.priority_of(wl)
        search.candidates = planner.kueue_node_candidates(priority, queue, exclude)
        found = search.run(cluster)
        if found is None:
            return None
        return sum(cost(u) for u in found.victims[len(forced) :])

    def first(self, workload: str, queue: str, allowed: Collection[str]) -> list[str] | None:
        planner = self.planner
        wl = planner.state.workloads.get(workload)
        pods = planner.kueue_pods(workload)
        if wl is None or not pods or planner.cost() is None:
            return None
        search, cluster = planner.kueue_search(pods, [])
        if search.fits_without_preemption(cluster) is not None:
            return []
        own = f"Workload/{workload}"
        exclude = planner.promised | {own}
        priority = planner.state.priority_of(wl)
        below = planner.kueue_node_candidates(priority, queue, exclude)
        listed = {u.ref for u in below}
        quota = [u for u in self._units(allowed) if u.ref not in listed and u.ref not in exclude]
        # the quota's candidates may be above the priority ceiling the nodes keep to
        search.priority_search = False
        search.candidates = sorted([*below, *quota], key=Unit.importance)
        found = search.run(cluster)
        return None if found is None else [u.ref for u in found.victims]


__all__ = ["PlannerSide"]
