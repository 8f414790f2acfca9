"""The node-level view of a ``ClusterState``, indexed once per snapshot: nodes with what
their running pods use, pods by node and by gang, and every pod's scheduling and
preemption priority resolved (PriorityClass, ``globalDefault``, gang priorities)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import msgspec

from gangpreempt.errors import InvalidInput
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import NEVER, PODS, Node, Pod, PodGroup
from gangpreempt.model.quantity import add_into
from gangpreempt.model.queues import PriorityClass
from gangpreempt.model.scheduling import SchedulingConstraints
from gangpreempt.placement.fit import unresolvable


def pod_demand(pod: Pod) -> dict[str, int]:
    """What a pod takes from its node: its requests plus one pod slot."""
    demand = dict(pod.requests)
    demand[PODS] = demand.get(PODS, 0) + 1
    return demand


UNLIMITED = 1 << 40


class NodeView:
    """One node: allocatable, what is in use, and the pods holding it."""

    __slots__ = ("_avail", "alloc", "name", "node", "on_change", "pods", "used")

    def __init__(self, node: Node) -> None:
        self.node = node
        self.name = node.name
        self.alloc = node.allocatable
        self.used: dict[str, int] = {}
        self.pods: list[Pod] = []
        self._avail: dict[str, int] | None = None
        self.on_change: Callable[[], None] | None = None

    def use(self, demand: Mapping[str, int], sign: int = 1) -> None:
        """Take ``demand`` on this node (``sign`` -1: give it back)."""
        add_into(self.used, demand, sign)
        self._avail = None
        if self.on_change is not None:
            self.on_change()

    @property
    def avail(self) -> dict[str, int]:
        """Free amount of every resource the node declares (``pods`` unlimited when it
        declares none); a resource it does not declare is absent (0)."""
        if self._avail is None:
            avail = {res: v - self.used.get(res, 0) for res, v in self.alloc.items()}
            if PODS not in avail:
                avail[PODS] = UNLIMITED - self.used.get(PODS, 0)
            self._avail = avail
        return self._avail

    def free(self, resources: Iterable[str]) -> dict[str, int]:
        """Free amount of each of ``resources`` (0 for one the node does not declare)."""
        avail = self.avail
        return {res: avail.get(res, 0) for res in resources}


class NodeCluster:
    """Nodes, pods and gangs of one snapshot, with priorities resolved."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.nodes: list[NodeView] = [NodeView(n) for _, n in sorted(state.nodes.items())]
        self.by_name: dict[str, NodeView] = {v.name: v for v in self.nodes}
        self.row: dict[str, int] = {v.name: i for i, v in enumerate(self.nodes)}
        self.members: dict[str, list[Pod]] = {}
        self.pod_priority: dict[str, int] = {}
        self.unbound: list[Pod] = []  # running on a node that is not in the snapshot
        self._demand: dict[str, dict[str, int]] = {}
        self._allowed: dict[bytes, list[NodeView]] = {}
        self._allowed_names: dict[bytes, frozenset[str]] = {}
        self.nominated: list[Pod] = [
            p for p in state.pods.values() if p.pending and p.nominated_node
        ]
        default = state.global_default_priority()
        for key, pod in sorted(state.pods.items()):
            self.pod_priority[key] = self._pod_priority(pod, default)
            if pod.group:
                self.members.setdefault(pod.group, []).append(pod)
            if not pod.running:
                continue
            view = self.by_name.get(pod.node_name)
            if view is None:
                self.unbound.append(pod)
                continue
            view.pods.append(pod)
            view.use(self.demand(pod))
        self._by_free: dict[str, tuple[list[int], list[int]]] = {}
        # free room as arrays per resource set (preemption.dryrun), dropped on a change
        self.free_rows: dict[tuple[str, ...], Any] = {}
        self.allowed_rows: dict[bytes, Any] = {}  # per scheduling constraints
        for view in self.nodes:
            view.on_change = self._changed
        self.group_priority: dict[str, tuple[int, int]] = {
            key: self._group_priorities(group, default)
            for key, group in sorted(state.pod_groups.items())
        }

    def demand(self, pod: Pod) -> dict[str, int]:
        """``pod_demand``, computed once per pod."""
        d = self._demand.get(pod.key)
        if d is None:
            d = self._demand[pod.key] = pod_demand(pod)
        return d

    def allowed_names(self, constraints: SchedulingConstraints) -> frozenset[str]:
        key = msgspec.json.encode(constraints)
        names = self._allowed_names.get(key)
        if names is None:
            names = self._allowed_names[key] = frozenset(v.name for v in self.allowed(constraints))
        return names

    def allowed(self, constraints: SchedulingConstraints) -> list[NodeView]:
        """Nodes whose selectors, affinity, taints and cordon admit pods with these
        constraints, in name order (computed once per distinct constraints)."""
        key = msgspec.json.encode(constraints)
        nodes = self._allowed.get(key)
        if nodes is None:
            nodes = self._allowed[key] = [
                v for v in self.nodes if unresolvable(constraints, v.node) is None
            ]
        return nodes

    def _changed(self) -> None:
        self._by_free.clear()
        self.free_rows.clear()

    def with_room(self, demand: Mapping[str, int]) -> list[int]:
        """Positions (in ``nodes``) of the nodes with at least ``demand`` free, ascending.
        Each resource keeps its nodes sorted by free amount (rebuilt after a node's use
        changes), so only the nodes with room for the scarcest requested resource are
        looked at, not every node."""
        best: list[int] | None = None
        for res, amount in demand.items():
            if amount <= 0:
                continue
            index = self._by_free.get(res)
            if index is None:
                ranked = sorted((v.avail.get(res, 0), i) for i, v in enumerate(self.nodes))
                index = self._by_free[res] = ([a for a, _ in ranked], [i for _, i in ranked])
            amounts, positions = index
            start = bisect_left(amounts, amount)
            if best is None or len(positions) - start < len(best):
                best = positions[start:]
        if best is None:
            return list(range(len(self.nodes)))
        nodes = self.nodes
        return sorted(
            i
            for i in best
            if all(a <= 0 or nodes[i].avail.get(r, 0) >= a for r, a in demand.items())
        )

    # -- priorities ---------------------------------------------------------------------

    def _class(self, name: str, owner: str, field: str) -> PriorityClass:
        pc = self.state.priority_classes.get(name)
        if pc is None:
            raise InvalidInput(f"{owner}: {field}: PriorityClass {name!r} not found")
        return pc

    def _pod_priority(self, pod: Pod, default: int) -> int:
        if pod.priority is not None:
            return pod.priority
        if pod.priority_class_name:
            return self._class(
                pod.priority_class_name, f"Pod {pod.key}", "spec.priorityClassName"
            ).value
        return default

    def _group_priorities(self, group: PodGroup, default: int) -> tuple[int, int]:
        """(scheduling, preemption) priority of a gang. Scheduling: its priority class,
        else the lowest of its pods'. Preemption: its preemption priority class, else the
        scheduling priority; below the scheduling priority is refused (KEP-5710's rule
        that rules out preemption cycles)."""
        owner = f"{group.source} {group.key}"
        if group.priority_class_name:
            sched = self._class(group.priority_class_name, owner, "priorityClassName").value
        else:
            pods = self.members.get(group.key, [])
            sched = min((self.pod_priority[p.key] for p in pods), default=default)
        preempt = sched
        if group.preemption_priority_class_name:
            preempt = self._class(
                group.preemption_priority_class_name, owner, "preemptionPriorityClassName"
            ).value
            if preempt < sched:
                raise InvalidInput(
                    f"{owner}: preemptionPriorityClassName "
                    f"{group.preemption_priority_class_name!r} ({preempt}) is below the "
                    f"scheduling priority ({sched}); a preemption priority must be at least "
                    "the scheduling priority, or two such gangs could preempt each other "
                    "forever"
                )
        return sched, preempt

    def kueue_priority(self, pod: Pod) -> int | None:
        """The priority of the Kueue Workload running the pod, if it is one's."""
        wl = self.state.workloads.get(pod.kueue_workload) if pod.kueue_workload else None
        return self.state.priority_of(wl) if wl is not None else None

    def scheduling_priority(self, pod: Pod) -> int:
        """The priority a pod is scheduled with: its Kueue Workload's or its gang's when
        it has one, else its own."""
        kueue = self.kueue_priority(pod)
        if kueue is not None:
            return kueue
        if pod.group and pod.group in self.group_priority:
            return self.group_priority[pod.group][0]
        return self.pod_priority[pod.key]

    def preemption_priority(self, pod: Pod) -> int:
        """The priority a pod is preempted at: its Kueue Workload's, or its gang's
        preemption priority, else its own."""
        kueue = self.kueue_priority(pod)
        if kueue is not None:
            return kueue
        if pod.group and pod.group in self.group_priority:
            return self.group_priority[pod.group][1]
        return self.pod_priority[pod.key]

    def priority_class_of(self, pod: Pod) -> PriorityClass | None:
        """The class whose toleration policy protects the pod as a victim: the gang's
        preemption (or scheduling) class, else the pod's own."""
        group = self.state.pod_groups.get(pod.group) if pod.group else None
        name = ""
        if group is not None:
            name = group.preemption_priority_class_name or group.priority_class_name
        name = name or pod.priority_class_name
        return self.state.priority_classes.get(name) if name else None

    def preemption_policy(self, pod: Pod) -> str:
        """``spec.preemptionPolicy``, else its PriorityClass's (what admission copies)."""
        if pod.preemption_policy:
            return pod.preemption_policy
        group = self.state.pod_groups.get(pod.group) if pod.group else None
        for name in (group.priority_class_name if group else "", pod.priority_class_name):
            pc = self.state.priority_classes.get(name) if name else None
            if pc is not None:
                return pc.preemption_policy
        return "PreemptLowerPriority"

    def never_preempts(self, pods: Iterable[Pod]) -> bool:
        return any(self.preemption_policy(p) == NEVER for p in pods)


__all__ = ["NodeCluster", "NodeView", "add_into", "pod_demand"]
