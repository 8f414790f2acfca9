"""A single pod that belongs to no gang: kube-scheduler's DefaultPreemption, node by node.

Per node: every lower-priority unit on it is a potential victim; the node is out when
the pod does not fit even without them; then potential victims are reprieved, the
PDB-violating ones first, most important first, as long as the pod still fits. Nodes are
compared by fewest PDB violations, lowest highest-victim priority, smallest priority sum,
fewest victims, latest start of the highest-priority victims, then node name.

As kube-scheduler does, the dry run stops once it holds ``max(100, 10% of nodes)``
candidates (at least one without PDB violations); it walks the nodes in name order
instead of from a random offset, so the answer is reproducible."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from gangpreempt.model.pods import Pod
from gangpreempt.placement.cluster import NodeCluster, NodeView, add_into, pod_demand
from gangpreempt.placement.fit import fits, unresolvable
from gangpreempt.preemption.units import Unit, UnitTable, pdb_violations

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

    def score(self, now: datetime) -> tuple[int, int, int, int, float, int]:
        """Lower is better (pickOneNodeForPreemption's criteria in order)."""
        if not self.victims:
            return (0, -(2**40), 0, 0, 0.0, self.order)
        highest = max(u.priority for u in self.victims)
        pods = [(u.priority, p) for u in self.victims for p in u.pods]
        total = sum(prio + INT32_SHIFT for prio, _ in pods)
        earliest = min((p.start_time or now) for prio, p in pods if prio == highest)
        return (self.violations, highest, total, len(pods), -earliest.timestamp(), self.order)


def candidate_limit(n_nodes: int) -> int:
    n = n_nodes * MIN_CANDIDATES_PERCENT // 100
    return min(max(n, MIN_CANDIDATES_ABSOLUTE), n_nodes)


def nominated_usage(
    cluster: NodeCluster, preemptor: Pod, priority: int
) -> dict[str, dict[str, int]]:
    """Pending pods nominated to a node with priority >= the preemptor's keep their room
    there (kube-scheduler filters with nominated pods added)."""
    out: dict[str, dict[str, int]] = {}
    for pod in cluster.state.pods.values():
        if (
            pod.pending
            and pod.nominated_node
            and pod.key != preemptor.key
            and cluster.scheduling_priority(pod) >= priority
        ):
            add_into(out.setdefault(pod.nominated_node, {}), pod_demand(pod))
    return out


def _free(
    view: NodeView, demand: dict[str, int], nominated: dict[str, dict[str, int]]
) -> dict[str, int]:
    free = view.free(demand)
    for res, v in nominated.get(view.name, {}).items():
        if res in free:
            free[res] -= v
    return free


def fits_now(
    cluster: NodeCluster, pod: Pod, priority: int, nodes: Sequence[NodeView] | None = None
) -> str | None:
    """The first node (name order) where the pod fits without preemption, or None."""
    demand = pod_demand(pod)
    nominated = nominated_usage(cluster, pod, priority)
    for view in nodes if nodes is not None else cluster.nodes:
        if unresolvable(pod.scheduling, view.node) is None and fits(
            demand, _free(view, demand, nominated)
        ):
            return view.name
    return None


def select_on_node(
    view: NodeView,
    order: int,
    demand: dict[str, int],
    free: dict[str, int],
    candidates: list[Unit],
    table: UnitTable,
) -> NodeCandidate | None:
    """kube-scheduler's selectVictimsOnNode for one node; ``candidates`` are the units with
    pods on it, most important first."""
    if not candidates:
        return None
    freed = dict(free)
    on_node: dict[str, dict[str, int]] = {}
    for unit in candidates:
        mine: dict[str, int] = {}
        for p in unit.pods:
            if p.node_name == view.name:
                add_into(mine, pod_demand(p))
        on_node[unit.ref] = mine
        for res, v in mine.items():
            if res in freed:
                freed[res] += v
    if not fits(demand, freed):
        return None
    violating = pdb_violations(candidates, table.cluster)
    ordered = [u for u in candidates if u.ref in violating] + [
        u for u in candidates if u.ref not in violating
    ]
    victims: list[Unit] = []
    n_violating = 0
    for unit in ordered:
        mine = on_node[unit.ref]
        for res, v in mine.items():
            if res in freed:
                freed[res] -= v
        if fits(demand, freed):
            continue  # reprieved
        for res, v in mine.items():
            if res in freed:
                freed[res] += v
        victims.append(unit)
        if unit.ref in violating:
            n_violating += 1
    victims.sort(key=Unit.importance)
    return NodeCandidate(view.name, order, victims, n_violating)


def search_single(
    cluster: NodeCluster,
    table: UnitTable,
    pod: Pod,
    priority: int,
    candidates: list[Unit],
) -> tuple[NodeCandidate | None, int]:
    """The best node and its victims for a lone pod (None when no node helps), and how
    many nodes the dry run evaluated."""
    demand = pod_demand(pod)
    nominated = nominated_usage(cluster, pod, priority)
    by_node: dict[str, list[Unit]] = {}
    for unit in candidates:  # most important first; keep that order per node
        seen: set[str] = set()
        for p in unit.pods:
            if p.node_name not in seen:
                seen.add(p.node_name)
                by_node.setdefault(p.node_name, []).append(unit)
    limit = candidate_limit(len(cluster.nodes))
    found: list[NodeCandidate] = []
    clean = 0
    evaluated = 0
    for order, view in enumerate(cluster.nodes):
        units = by_node.get(view.name)
        if not units or unresolvable(pod.scheduling, view.node) is not None:
            continue
        evaluated += 1
        cand = select_on_node(view, order, demand, _free(view, demand, nominated), units, table)
        if cand is None:
            continue
        found.append(cand)
        clean += cand.violations == 0
        if clean > 0 and len(found) >= limit:
            break
    if not found:
        return None, evaluated
    now = table.now
    return min(found, key=lambda c: c.score(now)), evaluated


__all__ = [
    "NodeCandidate",
    "candidate_limit",
    "fits_now",
    "nominated_usage",
    "search_single",
    "select_on_node",
]
