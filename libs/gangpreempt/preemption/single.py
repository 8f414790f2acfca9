"""A single pod that belongs to no gang: kube-scheduler's DefaultPreemption, node by node.

Per node: every lower-priority unit on it is a potential victim; the node is out when
the pod does not fit even without them; then potential victims are reprieved, the
PDB-violating ones first, most important first, as long as the pod still fits. Nodes are
compared by fewest PDB violations, lowest highest-victim priority, smallest priority sum,
fewest victims, latest start of the highest-priority victims, then node name.

As kube-scheduler does, the dry run stops once it holds ``max(100, 10% of nodes)``
candidates (at least one without PDB violations); it walks the nodes in name order
instead of from a random offset, so the answer is reproducible.

With a victim cost (``--victim-cost lost-gpu-hours``) the same units may be taken, but
the dearest are reprieved first (after the PDB-violating ones), every node is evaluated,
and nodes are compared by the victims' cost right after their PDB violations."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

from gangpreempt.model.pods import Pod
from gangpreempt.placement.cluster import NodeCluster, NodeView, add_into
from gangpreempt.placement.fit import fits
from gangpreempt.preemption.dryrun import dry_run
from gangpreempt.preemption.units import Unit, UnitTable

MIN_CANDIDATES_ABSOLUTE = 100
MIN_CANDIDATES_PERCENT = 10
INT32_SHIFT = 2**31


class NodeCandidate:
    """One node where the pod fits after evicting ``victims``."""

    __slots__ = ("node", "order", "victims", "violations")

    def __init__(self, node: str, order: int, victims: list[Unit], violations: int) -> None:
        self.node = node
        self.order = order
        self.victims = victims
        self.violations = violations

    def score(
        self, now: datetime, cost: Callable[[Unit], float] | None = None
    ) -> tuple[float, ...]:
        """Lower is better (pickOneNodeForPreemption's criteria in order; with ``cost``,
        the victims' cost right after their PDB violations)."""
        score = victim_score(self.victims, self.violations, now)
        if cost is None:
            return (*score, self.order)
        spent = round(sum(cost(u) for u in self.victims), 6)
        return (score[0], spent, *score[1:], self.order)


def victim_score(
    victims: list[Unit], violations: int, now: datetime
) -> tuple[int, int, int, int, float]:
    """pickOneNodeForPreemption's criteria, lower is better: PDB violations, highest
    victim priority, sum over victim pods of (priority + 2^31), victim pods, and the
    latest start of the highest-priority victims (negated)."""
    if not victims:
        return (0, -(2**40), 0, 0, 0.0)
    highest = max(u.priority for u in victims)
    n_pods = sum(len(u.pods) for u in victims)
    total = sum((u.priority + INT32_SHIFT) * len(u.pods) for u in victims)
    earliest = min(u.start for u in victims if u.priority == highest)
    return (violations, highest, total, n_pods, -earliest.timestamp())


def candidate_limit(n_nodes: int) -> int:
    n = n_nodes * MIN_CANDIDATES_PERCENT // 100
    return min(max(n, MIN_CANDIDATES_ABSOLUTE), n_nodes)


def nominated_usage(
    cluster: NodeCluster, preemptor: Pod | Iterable[Pod], priority: int
) -> dict[str, dict[str, int]]:
    """Pending pods nominated to a node with priority >= the preemptor's keep their room
    there (kube-scheduler filters with nominated pods added); the preemptor's own pods
    do not."""
    own = {preemptor.key} if isinstance(preemptor, Pod) else {p.key for p in preemptor}
    out: dict[str, dict[str, int]] = {}
    for pod in cluster.nominated.values():
        if pod.key not in own and cluster.scheduling_priority(pod) >= priority:
            add_into(out.setdefault(pod.nominated_node, {}), cluster.demand(pod))
    return out


def free_with_nominated(
    view: NodeView, demand: dict[str, int], nominated: dict[str, dict[str, int]]
) -> dict[str, int]:
    avail = view.avail
    free = {res: avail.get(res, 0) for res in demand}
    taken = nominated.get(view.name)
    if taken:
        for res, v in taken.items():
            if res in free:
                free[res] -= v
    return free


def fits_now(cluster: NodeCluster, pod: Pod, priority: int) -> str | None:
    """The first node (name order) where the pod fits without preemption, or None."""
    demand = cluster.demand(pod)
    nominated = nominated_usage(cluster, pod, priority)
    allowed = cluster.allowed_names(pod.scheduling)
    for i in cluster.with_room(demand):  # name order, only nodes with the room
        view = cluster.nodes[i]
        if view.name not in allowed:
            continue
        if not nominated or fits(demand, free_with_nominated(view, demand, nominated)):
            return view.name
    return None


def select_on_node(
    view: NodeView,
    order: int,
    demand: dict[str, int],
    free: dict[str, int],
    candidates: list[tuple[Unit, dict[str, int]]],
    table: UnitTable,
    cost: Callable[[Unit], float] | None = None,
) -> NodeCandidate | None:
    """kube-scheduler's selectVictimsOnNode for one node; ``candidates`` are the units
    with pods on it (most important first) and what those pods take there. With
    ``cost``, they are reprieved dearest first."""
    freed = dict(free)
    for _unit, mine in candidates:
        for res in freed:
            freed[res] += mine.get(res, 0)
    if not fits(demand, freed):
        return None
    violating = table.pdb_violations([u for u, _ in candidates])
    if cost is not None:
        candidates = sorted(candidates, key=lambda c: -cost(c[0]))
    if violating:
        ordered = [c for c in candidates if c[0].ref in violating] + [
            c for c in candidates if c[0].ref not in violating
        ]
    else:
        ordered = candidates
    victims: list[Unit] = []
    n_violating = 0
    for unit, mine in ordered:
        for res in freed:
            freed[res] -= mine.get(res, 0)
        if fits(demand, freed):
            continue  # reprieved
        for res in freed:
            freed[res] += mine.get(res, 0)
        victims.append(unit)
        if unit.ref in violating:
            n_violating += 1
    if violating:
        victims.sort(key=Unit.importance)
    return NodeCandidate(view.name, order, victims, n_violating)


def search_single(
    cluster: NodeCluster,
    table: UnitTable,
    pod: Pod,
    priority: int,
    exclude: frozenset[str] | set[str],
    vectorized: bool = True,
    cost: Callable[[Unit], float] | None = None,
) -> tuple[NodeCandidate | None, int]:
    """The best node and its victims for a lone pod (None when no node helps), and how
    many nodes the dry run evaluated. ``exclude``: units that are not candidates. Without
    PDBs or nominated pods in the way, all nodes are evaluated at once (``dryrun``);
    ``vectorized=False`` forces the node-by-node walk (the reference). ``cost``: the
    victims' cost decides among the units allowed (see the module)."""
    demand = cluster.demand(pod)
    nominated = nominated_usage(cluster, pod, priority)
    allowed = cluster.allowed(pod.scheduling)
    limit = candidate_limit(len(allowed)) if cost is None else len(allowed)
    if vectorized and not table.covering and not nominated and cost is None:
        found_at, looked = dry_run(cluster, table, pod, priority, exclude, limit)
        if found_at is None:
            return None, looked
        position, victims = found_at
        return NodeCandidate(cluster.nodes[position].name, position, victims, 0), looked
    eligible = table.eligible(priority)

    def select(order: int, view: NodeView) -> tuple[bool, NodeCandidate | None]:
        here = table.on_node.get(view.name)
        units = [c for c in here or () if c[0].ref in eligible and c[0].ref not in exclude]
        if not units:
            return False, None
        free = free_with_nominated(view, demand, nominated)
        return True, select_on_node(view, order, demand, free, units, table, cost)

    return best_node(allowed, limit, table.now, select, cost)


def best_node(
    nodes: Iterable[NodeView],
    limit: int,
    now: datetime,
    select: Callable[[int, NodeView], tuple[bool, NodeCandidate | None]],
    cost: Callable[[Unit], float] | None = None,
) -> tuple[NodeCandidate | None, int]:
    """kube-scheduler's dry run over ``nodes`` in order: ``select`` says whether a node
    has candidates at all (it is then evaluated) and its victims; the walk stops once it
    holds ``limit`` candidates, one without PDB violations among them. The best by
    pickOneNodeForPreemption's criteria, and how many nodes were evaluated."""
    found: list[NodeCandidate] = []
    clean = 0
    evaluated = 0
    for order, view in enumerate(nodes):
        looked, cand = select(order, view)
        evaluated += looked
        if cand is None:
            continue
        found.append(cand)
        clean += cand.violations == 0
        if clean > 0 and len(found) >= limit:
            break
    if not found:
        return None, evaluated
    return min(found, key=lambda c: c.score(now, cost)), evaluated


__all__ = [
    "NodeCandidate",
    "best_node",
    "candidate_limit",
    "fits_now",
    "free_with_nominated",
    "nominated_usage",
    "search_single",
    "select_on_node",
    "victim_score",
]
