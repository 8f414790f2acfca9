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

from gangpreempt.model.quantity import add_into
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

    __slots__ = (
        "asks",
        "assigned",
        "counts",
        "flavors",
        "mode",
        "reason",
        "reserved",
        "snapshot",
        "wl",
    )

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
        # the room ``reserve`` held for it in the pass (flavor -> leaf -> usage)
        self.reserved: dict[str, dict[tuple[str, ...], dict[str, int]]] = {}
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

    def domain_lines(self, victims: frozenset[str]) -> list[str]:
        """Why each domain of a required or preferred level was or was not chosen: the
        pods it holds now, with the decision's victims gone, and with every TAS workload
        gone (``explain``)."""
        view = self.snapshot.tas()
        state = self.snapshot.state
        now_gone = self.snapshot.tas_gone()
        lines: list[str] = []
        for ps in self.wl.pod_sets:
            request = self.asks.get(ps.name)
            flavor = tas_flavor(state, self.flavors.get(ps.name, {}))
            if request is None or flavor is None or not request.level:
                continue
            count = self.counts.get(ps.name, ps.count)
            own = self.wl.key
            key, now = view.domains(ps, request, flavor, count, now_gone, owner=own)
            _, freed = view.domains(ps, request, flavor, count, now_gone | victims, owner=own)
            _, empty = view.domains(ps, request, flavor, count, simulate_empty=True, owner=own)
            chosen = self._chosen(ps.name, flavor, len(next(iter(now), ())))
            kind = "required" if request.required else "preferred"
            for path in now:
                where = f"pod set {ps.name}, {key}={path[-1]}"
                if path in chosen:
                    why = f"chosen: room for {freed[path]} pods (it needs {count})" + (
                        " once the victims are gone" if victims else ""
                    )
                elif empty[path] < count:
                    why = (
                        f"holds {now[path]} of the {count} pods, {empty[path]} even with every "
                        "topology-aware workload gone: it can never hold them all"
                    )
                elif freed[path] >= count:
                    why = (
                        f"holds {freed[path]} of the {count} pods too; Kueue's BestFit takes "
                        "the domain that holds them with the least room to spare"
                    )
                else:
                    why = (
                        f"holds {freed[path]} of the {count} pods with the victims gone, "
                        f"{empty[path]} with every topology-aware workload gone: Kueue's "
                        "victim order made room elsewhere first"
                    )
                lines.append(f"{where} ({kind}): {why}")
        return lines

    def _chosen(self, ps: str, flavor: str, depth: int) -> set[tuple[str, ...]]:
        """The domains (paths ``depth`` long) the pod set's assignment lies in."""
        ta = self.assigned.get(ps)
        if ta is None:
            return set()
        tree = self.snapshot.tas().tree(flavor)
        out: set[tuple[str, ...]] = set()
        for d in ta.domains:
            path = tree.path_of(ta.levels, d.values)
            if path is not None:
                out.add(path[:depth])
        return out

    def suggestion(self) -> str:
        """Beyond Kueue: when no domain of a required level can hold a pod set, whether
        moving one running TAS workload out of a domain (to room it has elsewhere) would
        free that domain for it; "" when none would. A suggestion, never an action."""
        view = self.snapshot.tas()
        state = self.snapshot.state
        gone = self.snapshot.tas_gone()
        for ps in self.wl.pod_sets:
            request = self.asks.get(ps.name)
            flavor = tas_flavor(state, self.flavors.get(ps.name, {}))
            if request is None or flavor is None or not request.required:
                continue
            tree = view.tree(flavor)
            depth = tree.topology.levels.index(request.required) + 1
            holders = sorted(
                (key for key, by_tree in view.holding.items() if flavor in by_tree),
                key=lambda k: (self._priority(k), k),
            )
            for key in holders:
                if key in gone:
                    continue
                move = self._move(key, flavor, depth, gone)
                if move is None:
                    continue
                domain, target, placed = move
                for name, per_leaf in self.reserved.items():  # its own held room is its
                    into = placed.setdefault(name, {})
                    for path, use in per_leaf.items():
                        add_into(into.setdefault(path, {}), use, -1)
                try:
                    self.snapshot.tas().assign(
                        self.wl, self.asks, self.flavors, self.counts, gone | {key}, extra=placed
                    )
                except NotFit:
                    continue
                return (
                    f"moving Workload/{key} from {request.required}={domain} to {target} "
                    f"would free {request.required}={domain} for it (a suggestion: "
                    "gangpreempt never moves a running workload)"
                )
        return ""

    def _priority(self, key: str) -> int:
        wl = self.snapshot.state.workloads.get(key)
        return self.snapshot.state.priority_of(wl) if wl is not None else 0

    def _move(
        self, key: str, flavor: str, depth: int, gone: frozenset[str]
    ) -> tuple[str, str, dict[str, dict[tuple[str, ...], dict[str, int]]]] | None:
        """Workload ``key``, placed again out of the domains (paths ``depth`` long) it holds
        now: (the domain it leaves, where it goes, its new usage), or None."""
        view = self.snapshot.tas()
        state = self.snapshot.state
        wl = state.workloads.get(key)
        if wl is None or wl.admission is None:
            return None
        held = view.holding[key][flavor]
        domains = {path[:depth] for path in held}
        if len(domains) != 1:
            return None
        (domain,) = domains
        block = {
            path: {res: 2**62 for res in (*leaf.free, "pods")}
            for path, leaf in view.tree(flavor).leaves.items()
            if path[:depth] == domain
        }
        names = (
            [
                f.name
                for g in self.snapshot.cqs[wl.admission.cluster_queue].spec.resource_groups
                for f in g.flavors
            ]
            if wl.admission.cluster_queue in self.snapshot.cqs
            else []
        )
        implied = tas_only(state, names)
        asks = {ps.name: r for ps in wl.pod_sets if (r := pod_set_request(ps, implied)) is not None}
        flavors = {psa.name: dict(psa.flavors) for psa in wl.admission.pod_set_assignments}
        counts = {psa.name: psa.count for psa in wl.admission.pod_set_assignments}
        try:
            placed = view.assign(wl, asks, flavors, counts, gone | {key}, extra={flavor: block})
        except NotFit:
            return None
        usage = view.usage_of(wl, flavors, placed)
        targets = {path[depth - 1] for path in usage.get(flavor, {})}
        return domain[-1], ", ".join(sorted(targets)), usage

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

    def reserve(self) -> bool:
        """The assignment with every TAS workload gone (Kueue's placement for a
        preemptor without victims, whose room lower-priority heads may not take in the
        cycle), kept; False when there is none."""
        try:
            self.assigned = self._assign(frozenset(), simulate_empty=True)
        except NotFit:
            return False
        self.reserved = self.snapshot.tas().usage_of(self.wl, self.flavors, self.assigned)
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
