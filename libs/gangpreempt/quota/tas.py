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
from gangpreempt.model.quantity import add_into
from gangpreempt.model.queues import ResourceFlavor
from gangpreempt.model.topology import HOSTNAME_LABEL as HOSTNAME
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


def flavor_mismatch(
    state: ClusterState,
    implied: bool,
    ps: PodSet,
    flavor: ResourceFlavor,
    covered: Sequence[str],
) -> str | None:
    """Kueue's ``checkPodSetAndFlavorMatchForTAS``: why ``flavor`` (of a resource group
    covering ``covered``) may not serve ``ps``, or None. A pod set asking for a topology
    takes only topology flavors that have its levels (a flavor without one is fine if it
    covers none of its resources); one asking for none takes no topology flavor, unless
    every flavor of its ClusterQueue names one (``implied``: ``tas_only``)."""
    request = ps.topology
    if request is None and not implied:
        if flavor.topology_name:
            return f'Flavor "{flavor.name}" supports only TopologyAwareScheduling'
        return None
    if request is None:
        return None  # implied: every flavor of the queue is a topology flavor
    if not flavor.topology_name:
        if not any(r in covered for r, q in ps.requests.items() if q):
            return None
        return f'Flavor "{flavor.name}" does not support TopologyAwareScheduling'
    topology = state.topologies.get(flavor.topology_name)
    if topology is None:
        return f'Flavor "{flavor.name}" information missing in TAS cache'
    levels = topology.levels
    main = request.level or (levels[0] if request.slice_level else "")
    if not main and request.unconstrained:
        main = levels[-1]
    if main not in levels or (request.slice_level or levels[-1]) not in levels:
        return f'Flavor "{flavor.name}" does not contain the requested level'
    return None


class TasView:
    """The topology flavors' trees of one snapshot, and the assignments the pass adds."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._trees: dict[str, TopologyNodes] = {}
        # admitted workload key -> flavor (of a tree) -> leaf path -> usage there
        self.holding: dict[str, dict[str, dict[Path, Usage]]] = {}
        # flavor (of a tree) -> leaf path -> usage the pass added
        self.added: dict[str, dict[Path, Usage]] = {}
        # plans in flight: preemptor key -> (tree flavor -> leaf -> the room it is to
        # take, its victims); the pass's admission of it replaces its hold
        self.holds: dict[str, tuple[dict[str, dict[Path, Usage]], frozenset[str]]] = {}
        self._stashed: dict[str, tuple[dict[str, dict[Path, Usage]], frozenset[str]]] = {}
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
                for name, per_leaf in self.spread(flavor, ta, ps.requests).items():
                    tree = self._trees[name]
                    held = self.holding.setdefault(wl.key, {}).setdefault(name, {})
                    for path, use in per_leaf.items():
                        add_into(tree.leaves[path].tas, use, 1)
                        add_into(held.setdefault(path, {}), use, 1)
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
        extra: Mapping[str, Mapping[Path, Usage]] | None = None,
    ) -> dict[str, TopologyAssignment]:
        """Each TAS pod set's assignment (pod set name -> assignment), in spec order, each
        seeing the ones before it; ``gone``: admitted workloads whose assignments no longer
        hold room (victims); ``extra``: more usage (flavor -> leaf -> usage) taken as
        held. Raises ``NotFit`` with Kueue's message for the first that has none."""
        self._build()
        out: dict[str, TopologyAssignment] = {}
        assumed: dict[str, dict[Path, Usage]] = {}

        def seed(name: str) -> dict[Path, Usage]:
            found = self._assumed(name, gone, simulate_empty, wl.key)
            for path, use in (extra or {}).get(name, {}).items():
                add_into(found.setdefault(path, {}), use, 1)
            return found

        for ps in wl.pod_sets:
            request = requests.get(ps.name)
            flavor = tas_flavor(self.state, flavors.get(ps.name, {}))
            if request is None or flavor is None:
                continue
            tree = self._trees[flavor]
            if flavor not in assumed:
                assumed[flavor] = seed(flavor)
            count = counts.get(ps.name, ps.count)
            if count <= 0:
                continue  # Kueue gives an empty pod set no assignment
            try:
                ta = find_assignment(
                    tree,
                    request,
                    count,
                    ps.requests,
                    ps.scheduling,
                    simulate_empty=simulate_empty,
                    assumed=assumed[flavor],
                )
            except NotFit as exc:
                raise NotFit(f"couldn't assign flavors to pod set {ps.name}: {exc}") from None
            out[ps.name] = ta
            for name, per_leaf in self.spread(flavor, ta, ps.requests).items():
                if name not in assumed:
                    assumed[name] = seed(name)
                for path, use in per_leaf.items():
                    add_into(assumed[name].setdefault(path, {}), use, 1)
        return out

    def spread(
        self, flavor: str, ta: TopologyAssignment, per_pod: Mapping[str, int]
    ) -> dict[str, dict[Path, Usage]]:
        """The usage of an assignment in ``flavor``, per tree and leaf: its own tree; and
        with a hostname level, every hostname-level flavor's tree holding those nodes
        (Kueue's ``TASHandleOverlappingFlavors``, on by default: flavors sharing nodes
        share their room)."""
        own = self._trees[flavor]
        out = {flavor: own.usage_of(ta, per_pod)}
        if not own.topology.hostname_leaves or not ta.levels or ta.levels[-1] != HOSTNAME:
            return out
        for name, tree in self._trees.items():
            if name == flavor or not tree.topology.hostname_leaves:
                continue
            found = tree.usage_of(TopologyAssignment((HOSTNAME,), ta.domains), per_pod)
            if found:
                out[name] = found
        return out

    def domains(
        self,
        ps: PodSet,
        request: TopologyRequest,
        flavor: str,
        count: int,
        gone: frozenset[str] = frozenset(),
        simulate_empty: bool = False,
        owner: str = "",
    ) -> tuple[str, dict[Path, int]]:
        """The requested level of ``ps`` (of workload ``owner``) and the pods each of its
        domains holds there."""
        self._build()
        return domain_pods(
            self._trees[flavor],
            request,
            count,
            ps.requests,
            ps.scheduling,
            simulate_empty=simulate_empty,
            assumed=self._assumed(flavor, gone, simulate_empty, owner),
        )

    def hold(
        self,
        wl: Workload,
        flavors: Mapping[str, Mapping[str, str]],
        assignments: Mapping[str, TopologyAssignment],
        victims: frozenset[str],
    ) -> None:
        """A plan in flight: its preemptor is to take ``assignments`` once ``victims``
        (workload keys) are gone; both are counted so for everyone else."""
        self.holds[wl.key] = (self.usage_of(wl, flavors, assignments), victims)

    def _assumed(
        self, flavor: str, gone: frozenset[str], empty: bool, own: str = ""
    ) -> dict[Path, Usage]:
        out: dict[Path, Usage] = {}
        for path, use in self.added.get(flavor, {}).items():
            add_into(out.setdefault(path, {}), use, 1)
        if empty:
            return out
        leaving = set(gone)
        for key, (room, victims) in self.holds.items():
            if key == own:
                continue
            leaving |= victims
            for path, use in room.get(flavor, {}).items():
                add_into(out.setdefault(path, {}), use, 1)
        for key in leaving:
            for path, use in self.holding.get(key, {}).get(flavor, {}).items():
                add_into(out.setdefault(path, {}), use, -1)
        return out

    def usage_of(
        self,
        wl: Workload,
        flavors: Mapping[str, Mapping[str, str]],
        assignments: Mapping[str, TopologyAssignment],
    ) -> dict[str, dict[Path, Usage]]:
        """What ``wl``'s pod sets take at ``assignments``, per tree (flavor) and leaf."""
        self._build()
        out: dict[str, dict[Path, Usage]] = {}
        for ps in wl.pod_sets:
            ta = assignments.get(ps.name)
            flavor = tas_flavor(self.state, flavors.get(ps.name, {}))
            if ta is None or flavor is None:
                continue
            for name, per_leaf in self.spread(flavor, ta, ps.requests).items():
                into = out.setdefault(name, {})
                for path, use in per_leaf.items():
                    add_into(into.setdefault(path, {}), use, 1)
        return out

    def take(
        self,
        wl: Workload,
        flavors: Mapping[str, Mapping[str, str]],
        assignments: Mapping[str, TopologyAssignment],
        sign: int = 1,
    ) -> None:
        """The pass admitted ``wl`` with ``assignments``: later pod sets of the pass see
        them, in place of its hold if it had one (``sign`` -1: no longer)."""
        if sign > 0 and wl.key in self.holds:
            self._stashed[wl.key] = self.holds.pop(wl.key)
        elif sign < 0 and wl.key in self._stashed:
            self.holds[wl.key] = self._stashed.pop(wl.key)
        for name, per_leaf in self.usage_of(wl, flavors, assignments).items():
            added = self.added.setdefault(name, {})
            for path, use in per_leaf.items():
                add_into(added.setdefault(path, {}), use, sign)


__all__ = [
    "TasView",
    "flavor_mismatch",
    "pod_set_request",
    "tas_flavor",
    "tas_only",
]
