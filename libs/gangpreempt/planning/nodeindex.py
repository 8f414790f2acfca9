"""A service's node-level index (``NodeCluster`` and ``UnitTable``), kept current change
by change instead of rebuilt for every decision.

``changed(kind, old, new)`` is called after the state took in each change. A pod touches
its node's room and columns and the units of its gang; a PodGroup or a Kueue Workload
the units of its pods; a node's labels, taints or allocatable its row. Changes that move
priorities or rows everywhere (a PriorityClass, a WorkloadPriorityClass, Kueue's
Configuration with its PriorityBoost gate, a node added or removed) mark the index
stale, and the next ``planner`` builds it again; so does a
change that cannot be taken in (a pod whose PriorityClass is unknown), which raises
there as it would in a full build. A PodDisruptionBudget recomputes which budgets cover
each unit. The ElasticQuota view (``QuotaView``) takes each pod in too; an ElasticQuota
or a Node change builds it again. ``planner`` hands out a ``NodePlanner`` on a fork: its
holds copy only the nodes they touch, and it is valid until the next change."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gangpreempt.collecting import paused
from gangpreempt.errors import InvalidInput
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import Node, Pod
from gangpreempt.placement.cluster import NodeCluster
from gangpreempt.planning.nodeplan import NodePlanner
from gangpreempt.preemption.jobquota import QuotaView
from gangpreempt.preemption.units import UnitTable

REBUILD_KINDS = frozenset({"PriorityClass", "WorkloadPriorityClass", "KueueConfiguration"})


class NodeIndex:
    def __init__(self, state: ClusterState, victim_cost: str = "") -> None:
        """``victim_cost``: its planners' (``NodePlanner.victim_cost``)."""
        self.state = state
        self.victim_cost = victim_cost
        self.cluster: NodeCluster | None = None
        self.table: UnitTable | None = None
        self.quotas: QuotaView | None = None  # built on first use, then pod by pod
        self.builds = 0  # full builds so far (the first one included)
        self.stale_reason = "not built yet"

    @property
    def stale(self) -> bool:
        return self.cluster is None or self.table is None

    def _drop(self, reason: str) -> None:
        self.cluster = self.table = None
        self.quotas = None
        self.stale_reason = reason

    def build(self, now: datetime) -> None:
        """Build from the whole state (raises ``InvalidInput`` as ``NodeCluster`` does)."""
        self._drop("building")
        with paused():
            cluster = NodeCluster(self.state)
            table = UnitTable(cluster, now)
            table.warm()
            cluster.warm()
        self.cluster, self.table = cluster, table
        self.builds += 1

    def planner(self, now: datetime, priority_search: bool = True) -> NodePlanner:
        """A planner for decisions at ``now`` on the current state."""
        if self.cluster is None or self.table is None:
            self.build(now)
        assert self.cluster is not None
        assert self.table is not None
        self.table.set_now(now)
        cluster = self.cluster.fork()
        if self.quotas is None:
            self.quotas = QuotaView(self.state)
        planner = NodePlanner(
            self.state,
            now,
            priority_search,
            index=(cluster, self.table.fork(cluster)),
            quotas=self.quotas,
        )
        planner.victim_cost = self.victim_cost
        return planner

    def changed(self, kind: str, old: Any, new: Any) -> None:
        if self.cluster is None or self.table is None:
            return
        if kind in ("ElasticQuota", "Node"):
            self.quotas = None  # the quotas' tree or the cluster's total changed
        elif kind == "Pod" and self.quotas is not None:
            self.quotas.pod_changed(old, new)
        try:
            if kind == "Pod":
                self._pod(old, new)
            elif kind == "Node":
                self._node(old, new)
            elif kind == "PodGroup":
                key = (new or old).key
                self.cluster.group_changed(key)
                members = [p.key for p in self.cluster.members.get(key, [])]
                self.table.refresh(self.table.rehome(members))
            elif kind == "Workload":
                keys = self.cluster.kueue_pods.get((new or old).key, set())
                self.table.refresh(self.table.rehome(list(keys)))
            elif kind == "PodDisruptionBudget":
                self.table.recover()
            elif kind in REBUILD_KINDS:
                self._drop(f"a {kind} changed")
        except InvalidInput as exc:
            self._drop(str(exc))

    def _pod(self, old: Pod | None, new: Pod | None) -> None:
        assert self.cluster is not None
        assert self.table is not None
        cluster, table = self.cluster, self.table
        groups = {p.group for p in (old, new) if p is not None and p.group}
        before = {g: cluster.group_priority.get(g) for g in groups}
        cluster.pod_changed(old, new)
        refs = table.pod_changed(old, new)
        for g in groups:
            if cluster.group_priority.get(g) != before[g]:
                refs |= table.refs_of(p.key for p in cluster.members.get(g, []))
        table.refresh(refs)

    def _node(self, old: Node | None, new: Node | None) -> None:
        assert self.cluster is not None
        if old is not None and new is not None and new.name in self.cluster.by_name:
            self.cluster.node_updated(new)
        else:
            self._drop("a node was added or removed")


__all__ = ["NodeIndex"]
