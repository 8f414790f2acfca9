"""Kueue's topology-aware scheduling in the admission pass: which pod sets ask for a
topology, where their flavors' nodes are, and the assignment Kueue would give them on
the snapshot as it stands (its victims gone, what the pass admitted before counted).

As Kueue's scheduler does (``pkg/scheduler/scheduler.go``, ``flavorassigner``): the
flavors are assigned on quota alone; a pod set that asks for a topology (or any pod set
in a ClusterQueue whose flavors all name one: implied) and whose flavor names a
``Topology`` then needs an assignment (``placement.topology``). The room it is searched
in: the flavor's nodes, less the non-TAS pods bound there, less the assignments of the
admitted workloads that still hold them (a victim the search removed holds none), plus
what the pass already assigned; ``simulate_empty`` (may it ever fit, preemption aside?)
leaves the TAS workloads out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.topology import TopologyAssignment, TopologyRequest
from gangpreempt.model.workloads import PodSet, Workload
from gangpreempt.placement.topology import (
    NotFit,
    Path,
    TopologyNodes,
    domain_pods,
    find_assignment,
)

Usage = dict[str, int]


def pod_set_request(ps: PodSet, implied: bool) -> TopologyRequest | None:
    """What ``ps`` asks of the topology: its own request, else implied, else None."""
    if ps.topology is not None:
        return ps.topology
    return TopologyRequest(implied=True) if implied else None


def tas_flavor(state: ClusterState, flavors: Mapping[str, str]) -> str | None:
    """The first of a pod set's assigned flavors (resource -> flavor) that names a
    Topology the state has, or None."""
    for name in sorted(set(flavors.values())):
        flavor = state.flavors.get(name)
        if flavor is not None and flavor.topology_name in state.topologies:
            return name
    return None


def tas_only(state: ClusterState, flavor_names: Sequence[str]) -> bool:
    """Every flavor names a topology: pod sets without a request are implied TAS."""
    return bool(flavor_names) and all(
        (f := state.flavors.get(n)) is not None and bool(f.topology_name) for n in flavor_names
    )


class TasView:
    """The topology flavors' trees of one snapshot, and the assignments the pass adds."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._trees: dict[str, TopologyNodes] = {}
        # admitted workload key -> flavor -> leaf path -> usage there
        self.holding: dict[str, dict[str, dict[Path, Usage]]] = {}
        # flavor -> leaf path -> usage the pass added
        self.added: dict[str, dict[Path, Usage]] = {}
        self._built = False

    def tree(self, flavor: str) -> TopologyNodes:
        self._build()
        return self._trees[flavor]

    def _build(self) -> None:
        if self._built:
            return
        self._built = True
        st = self.state
        tas_keys: set[str] = set()
        for name, rf in sorted(st.flavors.items()):
            topology = st.topologies.get(rf.topology_name)
            if topology is None:
                continue
            self._trees[name] = TopologyNodes(
                topology, st.nodes.values(), rf.node_labels, rf.tolerations
            )
        for wl in st.workloads.values():
            if not wl.holds_quota or wl.admission is None:
                continue
            sets = {ps.name: ps for ps in wl.pod_sets}
            for psa in wl.admission.pod_set_assignments:
                ta, ps = psa.topology_assignment, sets.get(psa.name)
                flavor = tas_flavor(st, psa.flavors)
                if ta is None or ps is None or flavor is None:
                    continue
                tas_keys.add(wl.key)
                tree = self._trees[flavor]
                tree.add_assignment(ta, ps.requests)
                held = self.holding.setdefault(wl.key, {}).setdefault(flavor, {})
                for path, use in _per_leaf(tree, ta, ps.requests).items():
                    _add(held.setdefault(path, {}), use, 1)
        for pod in st.pods.values():
            if not pod.node_name or pod.finished:
                continue
            if pod.kueue_workload in tas_keys:
                continue  # counted by its workload's assignment
            for tree in self._trees.values():
                tree.add_pod(pod.node_name, pod.requests)

    def assign(
        self,
        wl: Workload,
        requests: Mapping[str, TopologyRequest],
        flavors: Mapping[str, Mapping[str, str]],
        counts: Mapping[str, int],
        gone: frozenset[str] = frozenset(),
        simulate_empty: bool = False,
    ) -> dict[str, TopologyAssignment]:
        """Each TAS pod set's assignment (pod set name -> assignment), in spec order, each
        seeing the ones before it; ``gone``: admitted workloads whose assignments no longer
        hold room (victims). Raises ``NotFit`` with Kueue's message for the first that has
        none."""
        self._build()
        out: dict[str, TopologyAssignment] = {}
        assumed: dict[str, dict[Path, Usage]] = {}
        for ps in wl.pod_sets:
            request = requests.get(ps.name)
            flavor = tas_flavor(self.state, flavors.get(ps.name, {}))
            if request is None or flavor is None:
                continue
            tree = self._trees[flavor]
            extra = assumed.setdefault(flavor, self._assumed(flavor, gone, simulate_empty))
            count = counts.get(ps.name, ps.count)
            try:
                ta = find_assignment(
                    tree,
                    request,
                    count,
                    ps.requests,
                    ps.scheduling,
                    simulate_empty=simulate_empty,
                    assumed=extra,
                )
            except NotFit as exc:
                raise NotFit(f"couldn't assign flavors to pod set {ps.name}: {exc}") from None
            out[ps.name] = ta
            for path, use in _per_leaf(tree, ta, ps.requests).items():
                _add(extra.setdefault(path, {}), use, 1)
        return out

    def domains(
        self,
        ps: PodSet,
        request: TopologyRequest,
        flavor: str,
        count: int,
        gone: frozenset[str] = frozenset(),
        simulate_empty: bool = False,
    ) -> tuple[str, dict[Path, int]]:
        """The requested level of ``ps`` and the pods each of its domains holds there."""
        self._build()
        return domain_pods(
            self._trees[flavor],
            request,
            count,
            ps.requests,
            ps.scheduling,
            simulate_empty=simulate_empty,
            assumed=self._assumed(flavor, gone, simulate_empty),
        )

    def _assumed(self, flavor: str, gone: frozenset[str], empty: bool) -> dict[Path, Usage]:
        out: dict[Path, Usage] = {}
        for path, use in self.added.get(flavor, {}).items():
            _add(out.setdefault(path, {}), use, 1)
        if not empty:
            for key in gone:
                for path, use in self.holding.get(key, {}).get(flavor, {}).items():
                    _add(out.setdefault(path, {}), use, -1)
        return out

    def take(
        self,
        wl: Workload,
        flavors: Mapping[str, Mapping[str, str]],
        assignments: Mapping[str, TopologyAssignment],
        sign: int = 1,
    ) -> None:
        """The pass admitted ``wl`` with ``assignments``: later pod sets of the pass see
        them (``sign`` -1: no longer)."""
        self._build()
        for ps in wl.pod_sets:
            ta = assignments.get(ps.name)
            flavor = tas_flavor(self.state, flavors.get(ps.name, {}))
            if ta is None or flavor is None:
                continue
            added = self.added.setdefault(flavor, {})
            for path, use in _per_leaf(self._trees[flavor], ta, ps.requests).items():
                _add(added.setdefault(path, {}), use, sign)


def _per_leaf(
    tree: TopologyNodes, ta: TopologyAssignment, per_pod: Mapping[str, int]
) -> dict[Path, Usage]:
    out: dict[Path, Usage] = {}
    for d in ta.domains:
        path = tree.path_of(ta.levels, d.values)
        if path is None:
            continue
        use = out.setdefault(path, {})
        for res, q in per_pod.items():
            use[res] = use.get(res, 0) + int(q) * d.count
        use["pods"] = use.get("pods", 0) + d.count
    return out


def _add(into: Usage, use: Mapping[str, int], sign: int) -> None:
    for res, q in use.items():
        into[res] = into.get(res, 0) + sign * q


__all__ = ["TasView", "pod_set_request", "tas_flavor", "tas_only"]
