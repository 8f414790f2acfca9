"""One evaluation's topology-aware scheduling, as Kueue's scheduler runs it for a head
(``pkg/scheduler/scheduler.go`` with ``flavorassigner``; Kueue 0.19/0.20 defaults):

- quota Fit: the pod sets that ask for a topology are searched on the snapshot; when
  one has no assignment the workload needs preemption instead (the topology's message
  says why), over every resource of those pod sets' flavors;
- needing preemption (by quota or by topology): if even with every TAS workload gone
  (``simulate_empty``: non-TAS pods stay) a pod set has no assignment, it can never fit
  by preemption: NoFit, with the topology's message;
- the victim search (``preemption.classical``) removes candidates in Kueue's order and
  asks the topology again after each removal (``fits``); the victims' assignments then
  hold no room and the assignment is searched once more with them gone (``settle``).

A pod set that asks for a topology must be assigned a flavor that names one (Kueue skips
other flavors for it; the flavor assigner here does not know topologies, so such a pod
set is NoFit, said so)."""

from __future__ import annotations

from collections.abc import Mapping

from gangpreempt.model.topology import TopologyAssignment, TopologyRequest
from gangpreempt.placement.topology import NotFit
from gangpreempt.quota.assignment import Assignment
from gangpreempt.quota.modes import Mode
from gangpreempt.quota.pending import PendingWorkload
from gangpreempt.quota.snapshot import ClusterQueueState, Snapshot
from gangpreempt.quota.tas import pod_set_request, tas_flavor, tas_only
from gangpreempt.quota.tree import FR


def topology_requests(
    snapshot: Snapshot, cq: ClusterQueueState, pending: PendingWorkload
) -> dict[str, TopologyRequest]:
    """Pod set name -> what it asks of the topology (empty: nothing, the usual case)."""
    state = snapshot.state
    if not state.topologies:
        return {}
    names = [f.name for g in cq.spec.resource_groups for f in g.flavors]
    implied = tas_only(state, names)
    out: dict[str, TopologyRequest] = {}
    for ps in pending.pod_sets:
        request = pod_set_request(ps, implied)
        if request is not None:
            out[ps.name] = request
    return out


class Topology:
    """The topology side of one pending workload's evaluation: its assignments (pod set
    -> assignment, once it may be admitted or preempt), the mode it forces (None: the
    quota's) and why."""

    __slots__ = ("asks", "assigned", "counts", "flavors", "mode", "reason", "snapshot", "wl")

    def __init__(
        self,
        snapshot: Snapshot,
        pending: PendingWorkload,
        asks: Mapping[str, TopologyRequest],
        assignment: Assignment,
    ) -> None:
        self.snapshot = snapshot
        self.wl = pending.workload
        self.asks = dict(asks)
        self.flavors = assignment.flavors()
        self.counts = {ps.name: ps.count for ps in assignment.pod_sets}
        self.assigned: dict[str, TopologyAssignment] = {}
        self.reason = ""
        self.mode: Mode | None = None
        state = snapshot.state
        for name in self.asks:
            if tas_flavor(state, self.flavors.get(name, {})) is None:
                chosen = ", ".join(sorted(set(self.flavors.get(name, {}).values())))
                self.reason = (
                    f"couldn't assign flavors to pod set {name}: it asks for a topology, "
                    f"and flavor {chosen or '(none)'} names no Topology"
                )
                self.mode = Mode.NoFit
                return
        if assignment.mode is Mode.Fit:
            try:
                self.assigned = self._assign(snapshot.tas_gone())
                return
            except NotFit as exc:
                self.reason = str(exc)
                self.mode = Mode.Preempt
        try:
            self._assign(frozenset(), simulate_empty=True)
        except NotFit as exc:
            self.reason = str(exc)
            self.mode = Mode.NoFit

    def _assign(
        self, gone: frozenset[str], simulate_empty: bool = False
    ) -> dict[str, TopologyAssignment]:
        return self.snapshot.tas().assign(
            self.wl, self.asks, self.flavors, self.counts, gone, simulate_empty
        )

    def describe(self) -> str:
        """``workers: kubernetes.io/hostname a1 1, a2 1`` per assigned pod set."""
        parts = []
        for name, ta in self.assigned.items():
            where = ", ".join(f"{'/'.join(d.values)} {d.count}" for d in ta.domains)
            parts.append(f"{name}: {'/'.join(ta.levels)} {where}")
        return "; ".join(parts)

    def resources(self) -> frozenset[FR]:
        """Every flavor-resource of the pod sets that ask for a topology (Kueue marks them
        all as needing preemption when the topology forces it)."""
        return frozenset(
            (flavor, res)
            for name in self.asks
            for res, flavor in self.flavors.get(name, {}).items()
        )

    def fits(self) -> bool:
        """An assignment for every pod set on the snapshot as the search left it."""
        try:
            self._assign(self.snapshot.tas_gone())
        except NotFit:
            return False
        return True

    def settle(self, victims: set[str] | frozenset[str] = frozenset()) -> bool:
        """The assignments with ``victims`` gone (and what the pass took), kept; False
        (and none kept) when there are none."""
        try:
            self.assigned = self._assign(self.snapshot.tas_gone() | frozenset(victims))
        except NotFit as exc:
            self.assigned, self.reason = {}, str(exc)
            return False
        return True


__all__ = ["Topology", "topology_requests"]
