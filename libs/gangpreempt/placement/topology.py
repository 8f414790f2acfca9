"""Kueue's topology-aware domain search for one pod set, as Kueue's scheduler runs it
(``pkg/cache/scheduler/tas_flavor_snapshot.go``, ``findTopologyAssignment``, with the
default feature gates of Kueue 0.19/0.20: ``TASProfileMixed`` on, balanced placement and
preferred node affinity off).

The tree. Every node of the flavor (all its ``nodeLabels``, every level's label) is a
leaf at the path of its level values; with ``kubernetes.io/hostname`` as the last level
each node is its own leaf, otherwise nodes with one path are pooled (their allocatable
summed). A leaf's room is its allocatable less what non-TAS pods bound there request
(one ``pods`` each) less what admitted TAS pod sets' assignments put there
(``requests x count``, ``pods: count``) less what this search already placed
(``assumed``); ``simulate_empty`` leaves the TAS usage out (Kueue's check whether the
pod set could ever fit, preemption aside).

The counts. A leaf holds ``min_r floor(room_r / request_r)`` pods (requests with one pod
counted); with a hostname level, leaves whose taints the pod set does not tolerate (the
flavor's tolerations added) or whose labels miss its nodeSelector or required affinity
hold none and are counted as excluded. A domain holds the sum of its children. A
*slice* is ``slice_size`` pods that must share a domain of ``slice_level``; without
slices a slice is one pod at the lowest level. Slices are counted at that level and
summed above it; below it none.

The search. ``required`` and ``preferred`` use BestFit, ``unconstrained`` (and implied,
and a slice-only request, at the highest level) LeastFreeCapacity:

1. At the requested level, domains sorted (BestFit: most slices first; LFC: fewest),
   then fewest pods, then by path. BestFit takes the domain with the fewest slices that
   still holds them all ("the tightest"); LFC the first that holds them all.
2. When none holds them all: required fails (``topology "T" doesn't allow to fit any
   of N pod(s)`` / ``allows to fit only K out of N``); preferred climbs one level and
   tries again; at the top (or for unconstrained, at its level) domains are taken in
   the sorted order until the slices are placed, BestFit replacing the last with the
   tightest that holds the rest.
3. Down the tree: above the slice level the children of all chosen domains are pooled
   and taken the same way for the total; at and below it each chosen domain's pods are
   spread over its own children.
4. The assignment: the leaves with pods, sorted by path; levels all the topology's
   levels, or only the hostname with a hostname level."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gangpreempt.model.pods import Node
from gangpreempt.model.quantity import add_into
from gangpreempt.model.scheduling import SchedulingConstraints, Taint, Toleration
from gangpreempt.model.topology import (
    Topology,
    TopologyAssignment,
    TopologyDomain,
    TopologyRequest,
)

PODS = "pods"
Path = tuple[str, ...]
_BIG = 2**31 - 1
_NO_CONSTRAINTS = SchedulingConstraints()


class _Domain:
    __slots__ = ("children", "pods", "slices", "values")

    def __init__(self, values: Path) -> None:
        self.values = values
        self.children: list[_Domain] = []
        self.pods = 0
        self.slices = 0


@dataclass
class _Leaf:
    values: Path
    nodes: list[Node] = field(default_factory=list)
    free: dict[str, int] = field(default_factory=dict)  # allocatable less non-TAS pods
    tas: dict[str, int] = field(default_factory=dict)  # admitted TAS assignments' usage


def taint_text(taint: Taint) -> str:
    """Kubernetes' ``Taint.ToString``: ``key=value:Effect`` (``key:Effect`` without a value)."""
    value = f"={taint.value}" if taint.value else ""
    return f"{taint.key}{value}:{taint.effect}"


class TopologyNodes:
    """One topology flavor's leaves: its nodes by path, their room (``add_pod`` for each
    non-TAS pod bound there, ``add_assignment`` for each admitted TAS pod set)."""

    def __init__(
        self,
        topology: Topology,
        nodes: Iterable[Node],
        flavor_labels: Mapping[str, str] | None = None,
        flavor_tolerations: tuple[Toleration, ...] = (),
    ) -> None:
        self.topology = topology
        self.flavor_tolerations = flavor_tolerations
        labels = dict(flavor_labels or {})
        levels = topology.levels
        self.leaves: dict[Path, _Leaf] = {}
        self.leaf_of_node: dict[str, Path] = {}
        for node in sorted(nodes, key=lambda n: n.name):
            if node.unschedulable:
                continue
            if any(node.labels.get(k) != v for k, v in labels.items()):
                continue
            if any(level not in node.labels for level in levels):
                continue
            path = tuple(node.labels[level] for level in levels)
            leaf = self.leaves.get(path)
            if leaf is None:
                leaf = self.leaves[path] = _Leaf(path)
            leaf.nodes.append(node)
            for res, q in node.allocatable.items():
                leaf.free[res] = leaf.free.get(res, 0) + int(q)
            self.leaf_of_node[node.name] = path

    def add_pod(self, node_name: str, requests: Mapping[str, int]) -> None:
        """A non-TAS pod bound to the node (not terminated): its requests and one pod."""
        path = self.leaf_of_node.get(node_name)
        if path is not None:
            add_into(self.leaves[path].free, {**requests, PODS: requests.get(PODS, 0) + 1}, -1)

    def usage_of(
        self, assignment: TopologyAssignment, per_pod: Mapping[str, int]
    ) -> dict[Path, dict[str, int]]:
        """What a pod set of ``per_pod`` requests takes at ``assignment``, per leaf: the
        requests times each domain's count, and its pods. A domain no leaf has (a node
        gone) is skipped, as Kueue does."""
        out: dict[Path, dict[str, int]] = {}
        for d in assignment.domains:
            path = self.path_of(assignment.levels, d.values)
            if path is None:
                continue
            use = out.setdefault(path, {})
            add_into(use, {res: int(q) * d.count for res, q in per_pod.items()})
            use[PODS] = use.get(PODS, 0) + d.count
        return out

    def add_assignment(self, assignment: TopologyAssignment, per_pod: Mapping[str, int]) -> None:
        """An admitted TAS pod set (``usage_of``) held on its leaves."""
        for path, use in self.usage_of(assignment, per_pod).items():
            add_into(self.leaves[path].tas, use)

    def path_of(self, levels: tuple[str, ...], values: tuple[str, ...]) -> Path | None:
        if tuple(levels) == self.topology.levels:
            return values if values in self.leaves else None
        if self.topology.hostname_leaves and len(values) == 1:
            return self.leaf_of_node.get(values[0])
        return None


class NotFit(Exception):
    """The pod set has no assignment: Kueue's message."""


@dataclass
class _Exclusions:
    total: int = 0
    node_selector: int = 0
    affinity: int = 0
    taints: dict[str, int] = field(default_factory=dict)
    resources: dict[str, int] = field(default_factory=dict)

    def text(self) -> str:
        reasons: list[str] = []
        if self.node_selector:
            reasons.append(f"nodeSelector: {self.node_selector}")
        if self.affinity:
            reasons.append(f"affinity: {self.affinity}")
        reasons += [f'taint "{t}": {n}' for t, n in self.taints.items()]
        reasons += [f'resource "{r}": {n}' for r, n in self.resources.items()]
        if not reasons:
            return ""
        return f". Total nodes: {self.total}; excluded: {', '.join(sorted(reasons))}"


class _Search:
    def __init__(
        self,
        nodes: TopologyNodes,
        request: TopologyRequest,
        count: int,
        per_pod: Mapping[str, int],
        scheduling: SchedulingConstraints,
        simulate_empty: bool,
        assumed: Mapping[Path, Mapping[str, int]],
    ) -> None:
        self.nodes = nodes
        self.topology = nodes.topology
        levels = self.topology.levels
        self.count = count
        self.requests = {**{r: int(q) for r, q in per_pod.items()}, PODS: 1}
        if PODS in per_pod:
            self.requests[PODS] = int(per_pod[PODS]) + 1
        self.unconstrained = (
            request.unconstrained
            or request.implied
            or (bool(request.slice_level) and not request.level)
        )
        self.required = bool(request.required)
        self.slice_size = 1
        if request.slice_level:
            if request.slice_size <= 0:
                raise NotFit("slice topology requested, but slice size not provided")
            self.slice_size = request.slice_size
        if request.level:
            key = request.level
        elif request.slice_level:
            key = levels[0]  # a slice-only request: the highest level
        elif self.unconstrained:
            key = levels[-1]
        else:
            raise NotFit("topology level not specified")
        if key not in levels:
            raise NotFit(f"no requested topology level: {key}")
        self.level = levels.index(key)
        slice_key = request.slice_level or levels[-1]
        if slice_key not in levels:
            raise NotFit(f"no requested topology level for slices: {slice_key}")
        self.slice_level = levels.index(slice_key)
        if self.level > self.slice_level:
            raise NotFit(f"podset slice topology {slice_key} is above the podset topology {key}")
        self.stats = _Exclusions()
        self.by_level: list[dict[Path, _Domain]] = [{} for _ in levels]
        self.roots: list[_Domain] = []
        self._build(scheduling, simulate_empty, assumed)

    # -- counts --------------------------------------------------------------------------------
    def _build(
        self,
        scheduling: SchedulingConstraints,
        simulate_empty: bool,
        assumed: Mapping[Path, Mapping[str, int]],
    ) -> None:
        hostname = self.topology.hostname_leaves
        tolerations = tuple(self.nodes.flavor_tolerations)
        depth = len(self.topology.levels)
        self.stats.total = len(self.nodes.leaves)
        for path in sorted(self.nodes.leaves):
            leaf = self.nodes.leaves[path]
            domain = _Domain(path)
            self._attach(domain, depth - 1)
            if hostname and not self._feasible(leaf.nodes[0], scheduling, tolerations):
                continue  # in the tree, holding nothing
            room = dict(leaf.free)
            if not simulate_empty:
                for res, q in leaf.tas.items():
                    room[res] = room.get(res, 0) - q
            for res, q in assumed.get(path, {}).items():
                room[res] = room.get(res, 0) - q
            domain.pods = self._fits(room)
        for root in self.roots:
            self._sum(root, 0)

    def _feasible(
        self, node: Node, scheduling: SchedulingConstraints, tolerations: tuple[Toleration, ...]
    ) -> bool:
        taint = scheduling.first_untolerated(node.taints, tolerations)
        if taint is not None:
            text = taint_text(taint)
            self.stats.taints[text] = self.stats.taints.get(text, 0) + 1
            return False
        if any(node.labels.get(k) != v for k, v in scheduling.node_selector.items()):
            self.stats.node_selector += 1
            return False
        if scheduling.affinity_terms is not None and not scheduling.matches_labels(node.labels):
            self.stats.affinity += 1
            return False
        return True

    def _fits(self, room: Mapping[str, int]) -> int:
        found: int | None = None
        limiting = ""
        for res in sorted(self.requests):
            want = self.requests[res]
            n = _BIG if want == 0 else max(0, min(room.get(res, 0) // want, _BIG))
            if found is None or n < found:
                found, limiting = n, res
        if found == 0 and limiting:
            self.stats.resources[limiting] = self.stats.resources.get(limiting, 0) + 1
        return found or 0

    def _attach(self, leaf: _Domain, depth: int) -> None:
        self.by_level[depth][leaf.values] = leaf
        child = leaf
        for level in range(depth - 1, -1, -1):
            key = leaf.values[: level + 1]
            parent = self.by_level[level].get(key)
            known = parent is not None
            if parent is None:
                parent = self.by_level[level][key] = _Domain(key)
            parent.children.append(child)
            if known:
                return
            child = parent
        self.roots.append(child)

    def _sum(self, domain: _Domain, level: int) -> None:
        if not domain.children:
            domain.slices = domain.pods // self.slice_size if level == self.slice_level else 0
            return
        for child in domain.children:
            self._sum(child, level + 1)
        domain.pods = sum(c.pods for c in domain.children)
        domain.slices = sum(c.slices for c in domain.children)
        if level == self.slice_level:
            domain.slices = domain.pods // self.slice_size

    # -- choosing ------------------------------------------------------------------------------
    def _sorted(self, domains: Iterable[_Domain]) -> list[_Domain]:
        if self.unconstrained:
            return sorted(domains, key=lambda d: (d.slices, d.pods, d.values))
        return sorted(domains, key=lambda d: (-d.slices, d.pods, d.values))

    @staticmethod
    def _tightest(domains: list[_Domain], needed: int, slices: bool) -> _Domain:
        """The first domain holding the fewest units at least ``needed`` (else the first)."""
        best, best_n = domains[0], _BIG + 1
        for d in domains:
            n = d.slices if slices else d.pods
            if needed <= n < best_n:
                best, best_n = d, n
        return best

    def _not_fit(self, fit: int, wanted: int) -> NotFit:
        unit = "pod" if self.slice_size == 1 else "slice"
        name = self.topology.name
        if fit == 0:
            text = f'topology "{name}" doesn\'t allow to fit any of {wanted} {unit}(s)'
        else:
            text = f'topology "{name}" allows to fit only {fit} out of {wanted} {unit}(s)'
        return NotFit(text + self.stats.text())

    def _fit_level(self, level: int) -> tuple[int, list[_Domain]]:
        domains = list(self.by_level[level].values())
        if not domains:
            raise NotFit(f"no topology domains at level: {self.topology.levels[level]}")
        ordered = self._sorted(domains)
        top = ordered[0]
        needed = self.count // self.slice_size
        if not self.unconstrained and top.slices >= needed:
            top = self._tightest(ordered, needed, slices=True)
        if self.unconstrained:
            for d in ordered:
                if d.slices >= needed:
                    return level, [d]
        if top.slices < needed:
            if self.required:
                raise self._not_fit(top.slices, needed)
            if level > 0 and not self.unconstrained:
                return self._fit_level(level - 1)
            taken: list[_Domain] = []
            left = needed
            for i, d in enumerate(ordered):
                if left <= 0:
                    break
                if not self.unconstrained and d.slices >= left:
                    d = self._tightest(ordered[i:], left, slices=True)
                taken.append(d)
                left -= d.slices
            if left > 0:
                raise self._not_fit(needed - left, needed)
            return level, taken
        return level, [top]

    def _trim(self, domains: list[_Domain], count: int, size: int, slices: bool) -> list[_Domain]:
        """Kueue's ``updateCountsToMinimumGeneric`` without leaders: take the domains in
        order, each whole until the rest fits (BestFit: then the tightest that holds it)."""
        out: list[_Domain] = []
        left = count // size if slices else count
        for i, d in enumerate(domains):
            have = d.slices if slices else d.pods
            if not self.unconstrained and have >= left:
                d = self._tightest(domains[i:], left, slices)
                have = d.slices if slices else d.pods
            if have >= left:
                if slices:
                    d.pods, d.slices = left * size, left
                else:
                    d.pods = left
                out.append(d)
                return out
            if slices:
                d.pods = d.slices * size
            left -= have
            out.append(d)
        raise NotFit(f"internal: {left} left unplaced")  # the counts promised room

    def run(self) -> TopologyAssignment:
        fit_level, chosen = self._fit_level(self.level)
        chosen = self._trim(chosen, self.count, self.slice_size, slices=True)
        depth = len(self.topology.levels)
        level = fit_level
        while level < min(depth - 1, self.slice_level):
            pool = self._sorted(c for d in chosen for c in d.children)
            chosen = self._trim(pool, self.count, self.slice_size, slices=True)
            level += 1
        while level < depth - 1:
            below: list[_Domain] = []
            for d in chosen:
                below += self._trim(self._sorted(d.children), d.pods, 1, slices=False)
            chosen = below
            level += 1
        leaves = sorted((d for d in chosen if d.pods > 0), key=lambda d: d.values)
        if self.topology.hostname_leaves:
            return TopologyAssignment(
                (self.topology.levels[-1],),
                tuple(TopologyDomain((d.values[-1],), d.pods) for d in leaves),
            )
        return TopologyAssignment(
            self.topology.levels, tuple(TopologyDomain(d.values, d.pods) for d in leaves)
        )


def domain_pods(
    nodes: TopologyNodes,
    request: TopologyRequest,
    count: int,
    per_pod: Mapping[str, int],
    scheduling: SchedulingConstraints = _NO_CONSTRAINTS,
    *,
    simulate_empty: bool = False,
    assumed: Mapping[Path, Mapping[str, int]] | None = None,
) -> tuple[str, dict[Path, int]]:
    """The requested level and how many of the pod set's pods each of its domains holds
    (in whole slices), on the room the search would see: what ``explain`` shows."""
    search = _Search(nodes, request, count, per_pod, scheduling, simulate_empty, assumed or {})
    level = search.level
    size = search.slice_size
    return nodes.topology.levels[level], {
        path: d.slices * size if level <= search.slice_level else d.pods
        for path, d in sorted(search.by_level[level].items())
    }


def find_assignment(
    nodes: TopologyNodes,
    request: TopologyRequest,
    count: int,
    per_pod: Mapping[str, int],
    scheduling: SchedulingConstraints = _NO_CONSTRAINTS,
    *,
    simulate_empty: bool = False,
    assumed: Mapping[Path, Mapping[str, int]] | None = None,
) -> TopologyAssignment:
    """Kueue's assignment of ``count`` pods of ``per_pod`` requests under ``request``, or
    ``NotFit`` with Kueue's message."""
    if count <= 0:
        return TopologyAssignment(nodes.topology.levels, ())
    return _Search(nodes, request, count, per_pod, scheduling, simulate_empty, assumed or {}).run()


__all__ = ["NotFit", "TopologyNodes", "domain_pods", "find_assignment", "taint_text"]
