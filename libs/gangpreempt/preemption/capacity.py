"""scheduler-plugins CapacityScheduling: a lone pod and the ElasticQuota of its namespace
(one per namespace), as the plugin's PreFilter and PostFilter decide.

Quota arithmetic is per namespace: ``used`` is the requests of its pods bound to a node
(terminating ones too). A check "over" is true when used plus the addition exceeds the
bound in any dimension: cpu, memory and ephemeral-storage always, and any other resource
of the addition or the usage. A quota without a ``min`` (or ``max``) list bounds cpu,
memory and ephemeral-storage by 0 (by nothing); a list that leaves one of them out
bounds it by 0; an extended resource it leaves out is bounded by 0 for ``min`` and by
nothing for ``max``.

- The pod fits (PreFilter) when, besides a node, its quota stays within ``max`` and all
  quotas' usage plus its request stays within the sum of all ``min`` (the mins are the
  cluster's shareable capacity).
- Victims on a node (PostFilter), least important first: a pod whose quota would go
  over ``min`` takes only lower-priority pods of its own namespace; a pod within its
  ``min`` reclaims from other namespaces whose quota is over their ``min``, whatever
  their priority, and only while they stay over it; a pod without a quota takes only
  lower-priority pods without one. Then, as kube-scheduler does, the node must fit with
  them all gone (and the quota checks hold), and victims are reprieved, PDB-violating
  first, most important first, while both still hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import ElasticQuota, Pod
from gangpreempt.placement.cluster import NodeCluster, NodeView, add_into
from gangpreempt.placement.fit import fits
from gangpreempt.preemption.single import (
    NodeCandidate,
    best_node,
    candidate_limit,
    free_with_nominated,
    nominated_usage,
)
from gangpreempt.preemption.units import Unit, UnitTable

STANDARD = ("cpu", "memory", "ephemeral-storage")
Usage = dict[str, int]


def _bound(values: Mapping[str, int], res: str, unlisted: float) -> float:
    """``unlisted``: 0 for a min, no bound for a max. A list that is there but leaves out
    cpu, memory or ephemeral-storage bounds it by 0."""
    if res in values:
        return values[res]
    return 0 if values and res in STANDARD else unlisted


def _over(
    used: Mapping[str, int], add: Mapping[str, int], bound: Mapping[str, int], is_min: bool
) -> bool:
    unlisted = 0.0 if is_min else float("inf")
    for res in {*STANDARD, *used, *add}:
        limit = _bound(bound, res, unlisted)
        if used.get(res, 0) + add.get(res, 0) > limit:
            return True
    return False


class CapacityQuotas:
    """Every namespace's ElasticQuota and usage, for one decision (copied per node)."""

    def __init__(self, state: ClusterState) -> None:
        self.by_ns: dict[str, ElasticQuota] = {}
        for eq in sorted(state.elastic_quotas.values(), key=lambda q: q.key):
            self.by_ns.setdefault(eq.namespace, eq)
        self.used: dict[str, Usage] = {ns: {} for ns in self.by_ns}
        for pod in state.pods.values():
            if pod.running and pod.namespace in self.by_ns:
                add_into(self.used[pod.namespace], pod.requests)
        self.sum_min: Usage = {}
        for eq in self.by_ns.values():
            add_into(self.sum_min, eq.min)

    def quota(self, namespace: str) -> ElasticQuota | None:
        return self.by_ns.get(namespace)

    def over_min_with(self, ns: str, add: Mapping[str, int], used: Mapping[str, Usage]) -> bool:
        return _over(used[ns], add, self.by_ns[ns].min, is_min=True)

    def over_min(self, ns: str, used: Mapping[str, Usage]) -> bool:
        return _over(used[ns], {}, self.by_ns[ns].min, is_min=True)

    def over_max_with(self, ns: str, add: Mapping[str, int], used: Mapping[str, Usage]) -> bool:
        return _over(used[ns], add, self.by_ns[ns].max, is_min=False)

    def aggregated_over_min_with(self, add: Mapping[str, int], used: Mapping[str, Usage]) -> bool:
        total: Usage = {}
        for u in used.values():
            add_into(total, u)
        return _over(total, add, self.sum_min, is_min=True)

    def admits(self, pod: Pod, used: Mapping[str, Usage] | None = None) -> str | None:
        """Why the pod's quota refuses it now (PreFilter), or None."""
        used = self.used if used is None else used
        ns = pod.namespace
        if ns not in self.by_ns:
            return None
        if self.over_max_with(ns, pod.requests, used):
            return f"ElasticQuota {self.by_ns[ns].key}: its max would be exceeded"
        if self.aggregated_over_min_with(pod.requests, used):
            return "the ElasticQuotas' usage would exceed the sum of their min"
        return None


def _usage(unit: Unit) -> dict[str, Usage]:
    out: dict[str, Usage] = {}
    for p in unit.pods:
        if p.running:
            add_into(out.setdefault(p.namespace, {}), p.requests)
    return out


def _move(used: dict[str, Usage], usage: Mapping[str, Usage], sign: int) -> None:
    for ns, u in usage.items():
        if ns in used:
            add_into(used[ns], u, sign)


def takes(
    quotas: CapacityQuotas,
    ns: str,
    has_quota: bool,
    borrowing: bool,
    unit: Unit,
    priority: int,
    used: Mapping[str, Usage],
) -> bool:
    """The plugin's namespace rule: may a preemptor of namespace ``ns`` (with a quota or
    not; over its min once it is in, or not) take ``unit``, the quotas' usage being
    ``used``? Over its min: only lower-priority pods of its own namespace. Within its
    min: pods of other namespaces whose quota is over its min, whatever their priority.
    Without a quota: only lower-priority pods without one."""
    theirs = {p.namespace for p in unit.pods}
    if not has_quota:
        return unit.priority < priority and all(quotas.quota(n) is None for n in theirs)
    if borrowing:
        return unit.priority < priority and theirs == {ns}
    return ns not in theirs and all(
        quotas.quota(n) is not None and quotas.over_min(n, used) for n in theirs
    )


def select_on_node(
    quotas: CapacityQuotas,
    pod: Pod,
    priority: int,
    order: int,
    view_name: str,
    demand: dict[str, int],
    free: dict[str, int],
    here: Iterable[tuple[Unit, dict[str, int]]],
    table: UnitTable,
) -> NodeCandidate | None:
    """The plugin's SelectVictimsOnNode on one node; ``here`` are the node's units, most
    important first, with what they take on it."""
    ns = pod.namespace
    has_quota = quotas.quota(ns) is not None
    used = {k: dict(v) for k, v in quotas.used.items()}
    more_than_min = has_quota and quotas.over_min_with(ns, pod.requests, used)
    freed = dict(free)
    potential: list[tuple[Unit, dict[str, int], dict[str, Usage]]] = []
    for unit, mine in reversed(list(here)):  # least important first
        if not takes(quotas, ns, has_quota, more_than_min, unit, priority, used):
            continue
        usage = _usage(unit)
        _move(used, usage, -1)
        for res in freed:
            freed[res] += mine.get(res, 0)
        potential.append((unit, mine, usage))
    if not potential or not fits(demand, freed):
        return None

    def quota_ok() -> bool:
        return not has_quota or (
            not quotas.over_max_with(ns, pod.requests, used)
            and not quotas.aggregated_over_min_with(pod.requests, used)
        )

    if not quota_ok():
        return None
    potential.reverse()  # most important first for the reprieval
    violating = table.pdb_violations([u for u, _m, _u in potential])
    ordered = [c for c in potential if c[0].ref in violating] + [
        c for c in potential if c[0].ref not in violating
    ]
    victims: list[Unit] = []
    n_violating = 0
    for unit, mine, usage in ordered:
        for res in freed:
            freed[res] -= mine.get(res, 0)
        _move(used, usage, 1)
        if fits(demand, freed) and quota_ok():
            continue  # reprieved
        for res in freed:
            freed[res] += mine.get(res, 0)
        _move(used, usage, -1)
        victims.append(unit)
        n_violating += unit.ref in violating
    victims.sort(key=Unit.importance)
    return NodeCandidate(view_name, order, victims, n_violating)


def search_capacity(
    cluster: NodeCluster,
    table: UnitTable,
    quotas: CapacityQuotas,
    pod: Pod,
    priority: int,
    exclude: frozenset[str] | set[str],
) -> tuple[NodeCandidate | None, int]:
    """The best node and its victims (kube-scheduler's choice among the nodes' victim
    sets), and how many nodes were evaluated."""
    demand = cluster.demand(pod)
    nominated = nominated_usage(cluster, pod, priority)
    allowed = cluster.allowed(pod.scheduling)

    def select(order: int, view: NodeView) -> tuple[bool, NodeCandidate | None]:
        here = [c for c in table.on_node.get(view.name, []) if c[0].ref not in exclude]
        if not here:
            return False, None
        free = free_with_nominated(view, demand, nominated)
        found = select_on_node(quotas, pod, priority, order, view.name, demand, free, here, table)
        return True, found

    return best_node(allowed, candidate_limit(len(allowed)), table.now, select)


class GangCapacity:
    """CapacityScheduling's namespace rules for a gang, which the plugin (deciding pod
    by pod) does not have: read at the gang level. The gang's namespace is borrowing
    when the whole gang puts it over its ``min``: it then takes only lower-priority units
    of its own namespace; within its ``min`` it reclaims from other namespaces over
    their ``min``, whatever their priority, only down to it (on each resource they were
    over it, with the victims gone they are still at least at it); a gang without a
    quota takes only lower-priority units without one. ``fits`` is the check the gang
    search runs: the gang's quota within ``max``, all quotas within the sum of ``min``,
    and the reclaim bound."""

    def __init__(
        self, quotas: CapacityQuotas, state: ClusterState, namespace: str, demand: Usage
    ) -> None:
        self.quotas = quotas
        self.ns = namespace
        self.demand = dict(demand)
        self.has_quota = quotas.quota(namespace) is not None
        self.borrowing = self.has_quota and quotas.over_min_with(namespace, demand, quotas.used)
        self.pods = state.pods

    def allows(self, unit: Unit, priority: int) -> bool:
        """Whether the gang may take ``unit`` (the plugin's rule, read per gang)."""
        q = self.quotas
        return takes(q, self.ns, self.has_quota, self.borrowing, unit, priority, q.used)

    def fits(self, removed: Iterable[str] = ()) -> bool:
        q = self.quotas
        used = {n: dict(u) for n, u in q.used.items()}
        touched: set[str] = set()
        for key in removed:
            pod = self.pods.get(key)
            if pod is not None and pod.running and pod.namespace in used:
                add_into(used[pod.namespace], pod.requests, -1)
                touched.add(pod.namespace)
        if not self.has_quota:
            return True
        if q.over_max_with(self.ns, self.demand, used):
            return False
        if q.aggregated_over_min_with(self.demand, used):
            return False
        for n in touched - {self.ns}:
            low = q.by_ns[n].min
            for res, before in q.used[n].items():
                bound = _bound(low, res, 0.0)
                if before > bound and used[n].get(res, 0) < bound:
                    return False
        return True

    def why_not(self) -> str | None:
        """Why the gang does not fit its quota as things are, or None."""
        if not self.has_quota:
            return None
        key = self.quotas.by_ns[self.ns].key
        if self.quotas.over_max_with(self.ns, self.demand, self.quotas.used):
            return f"ElasticQuota {key}: its max would be exceeded"
        if self.quotas.aggregated_over_min_with(self.demand, self.quotas.used):
            return "the ElasticQuotas' usage would exceed the sum of their min"
        return None


__all__ = ["CapacityQuotas", "GangCapacity", "search_capacity", "select_on_node"]
