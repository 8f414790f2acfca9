"""The node-level view of a ``ClusterState``: nodes with what their running pods use,
pods by node and by gang, and every pod's scheduling and preemption priority resolved
(PriorityClass, ``globalDefault``, gang priorities).

Built once, then kept current change by change (``pod_changed``, ``node_updated``,
``group_changed``: each touches the nodes and gangs of the change). A decision works on a
``fork``: it shares everything and copies a node's room only when it holds room there
(copy on write); a fork is valid until the next change to its base."""

from __future__ import annotations

from bisect import insort
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import msgspec
import numpy as np

from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import NEVER, PODS, Node, Pod, PodGroup
from gangpreempt.model.priorities import group_priorities, pod_priority
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
        self.on_change: Callable[[str], None] | None = None

    def copy(self) -> NodeView:
        """The same node with its own room (its pods list is shared: a fork never
        changes which pods run)."""
        view = NodeView(self.node)
        view.used = dict(self.used)
        view.pods = self.pods
        return view

    def use(self, demand: Mapping[str, int], sign: int = 1) -> None:
        """Take ``demand`` on this node (``sign`` -1: give it back)."""
        add_into(self.used, demand, sign)
        self._avail = None
        if self.on_change is not None:
            self.on_change(self.name)

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
    """Nodes, pods and gangs of one state, with priorities resolved."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.base: NodeCluster | None = None  # the cluster this one is a fork of
        self.nodes: list[NodeView] = [NodeView(n) for _, n in sorted(state.nodes.items())]
        self.by_name: dict[str, NodeView] = {v.name: v for v in self.nodes}
        self.row: dict[str, int] = {v.name: i for i, v in enumerate(self.nodes)}
        self.members: dict[str, list[Pod]] = {}  # gang key -> its pods, by key
        self.pod_priority: dict[str, int] = {}
        self.unbound: dict[str, Pod] = {}  # running on a node that is not in the state
        self.kueue_pods: dict[str, set[str]] = {}  # Kueue Workload -> its pods' keys
        self._demand: dict[str, dict[str, int]] = {}
        self._allowed: dict[bytes, list[NodeView]] = {}
        self._allowed_names: dict[bytes, frozenset[str]] = {}
        self.nominated: dict[str, Pod] = {}  # pending pods nominated to a node, by key
        self.pending: dict[str, Pod] = {}  # pending pods by key
        default = state.global_default_priority()
        for key, pod in sorted(state.pods.items()):
            self.pod_priority[key] = self._pod_priority(pod, default)
            self._index(pod)
        # free room as arrays per resource set (rows: nodes in name order), kept current
        self.free_rows: dict[tuple[str, ...], Any] = {}
        self._own_rows: set[tuple[str, ...]] = set()  # arrays a fork has copied
        self._owned: set[str] | None = None  # a fork: the nodes whose room it copied
        self._shares_nodes = False  # a fork: ``nodes``, ``by_name`` still its base's
        self.allowed_rows: dict[bytes, Any] = {}  # per scheduling constraints
        for view in self.nodes:
            view.on_change = self._changed
        self.group_priority: dict[str, tuple[int, int]] = {
            key: self._group_priorities(group, default)
            for key, group in sorted(state.pod_groups.items())
        }

    # -- incremental updates ----------------------------------------------------------------

    def _index(self, pod: Pod) -> None:
        """Account for a pod (its priority is resolved already)."""
        key = pod.key
        if pod.group:
            _insort_key(self.members.setdefault(pod.group, []), pod, key)
        if pod.kueue_workload:
            self.kueue_pods.setdefault(pod.kueue_workload, set()).add(key)
        if pod.finished:
            return
        if not pod.node_name:
            if not pod.terminating:  # pending
                self.pending[key] = pod
                if pod.nominated_node:
                    self.nominated[key] = pod
            return
        view = self.by_name.get(pod.node_name)
        if view is None:
            self.unbound[key] = pod
            return
        _insort_key(view.pods, pod, key)
        view.use(self.demand(pod, key))

    def _unindex(self, pod: Pod) -> None:
        if pod.group:
            members = self.members.get(pod.group, [])
            members.remove(pod)
            if not members:
                self.members.pop(pod.group, None)
        if pod.kueue_workload:
            keys = self.kueue_pods.get(pod.kueue_workload, set())
            keys.discard(pod.key)
            if not keys:
                self.kueue_pods.pop(pod.kueue_workload, None)
        self.nominated.pop(pod.key, None)
        self.pending.pop(pod.key, None)
        if pod.running:
            view = self.by_name.get(pod.node_name)
            if view is None:
                self.unbound.pop(pod.key, None)
            else:
                view.pods.remove(pod)
                view.use(pod_demand(pod), -1)
        self._demand.pop(pod.key, None)

    def pod_changed(self, old: Pod | None, new: Pod | None) -> None:
        """A pod was added, changed or deleted (the state holds ``new`` already). Raises
        ``InvalidInput`` when its PriorityClass is unknown (the caller rebuilds later)."""
        if old is not None:
            self._unindex(old)
            self.pod_priority.pop(old.key, None)
        if new is not None:
            self.pod_priority[new.key] = self._pod_priority(
                new, self.state.global_default_priority()
            )
            self._index(new)
        for group in {p.group for p in (old, new) if p is not None and p.group}:
            self.group_changed(group)

    def group_changed(self, key: str) -> None:
        """A gang's PodGroup or one of its pods changed: its priorities again."""
        group = self.state.pod_groups.get(key)
        if group is None:
            self.group_priority.pop(key, None)
        else:
            self.group_priority[key] = self._group_priorities(
                group, self.state.global_default_priority()
            )

    def node_updated(self, node: Node) -> None:
        """A node already indexed changed (labels, taints, cordon, allocatable)."""
        view = self.by_name[node.name]
        view.node = node
        view.alloc = node.allocatable
        view._avail = None
        self._allowed.clear()
        self._allowed_names.clear()
        self.allowed_rows.clear()
        self._changed(node.name)

    # -- forks ------------------------------------------------------------------------------

    def fork(self) -> NodeCluster:
        """A view for one decision (or one pass of them): everything shared, a node's
        room copied only when the fork takes or gives room there (``use``)."""
        fork = NodeCluster.__new__(NodeCluster)
        fork.__dict__.update(self.__dict__)
        fork.base = self
        if self._owned:  # a fork that replaced nodes in its lists: the child copies them
            fork.nodes = list(self.nodes)
            fork.by_name = dict(self.by_name)
        # else ``nodes`` and ``by_name`` are shared until the first ``use`` (the cluster
        # forked never replaces an entry: it changes its views in place)
        fork._shares_nodes = not self._owned
        fork.nominated = dict(self.nominated)
        fork.free_rows = dict(self.free_rows)
        fork._own_rows = set()
        fork._owned = set()
        return fork

    def use(self, name: str, demand: Mapping[str, int], sign: int = 1) -> None:
        """Take ``demand`` on node ``name`` (``sign`` -1: give it back); a fork copies
        the node first."""
        view = self.by_name.get(name)
        if view is None:
            return
        if self._owned is not None and name not in self._owned:
            if self._shares_nodes:
                self.nodes = list(self.nodes)
                self.by_name = dict(self.by_name)
                self._shares_nodes = False
            view = view.copy()
            view.on_change = self._changed
            self.nodes[self.row[name]] = self.by_name[name] = view
            self._owned.add(name)
        view.use(demand, sign)

    def _changed(self, name: str) -> None:
        row = self.row.get(name)
        if row is None:
            return
        avail = self.by_name[name].avail
        for resources, rows in self.free_rows.items():
            if self.base is not None and resources not in self._own_rows:
                rows = self.free_rows[resources] = rows.copy()
                self._own_rows.add(resources)
            rows[row] = [avail.get(r, 0) for r in resources]

    def warm(self) -> None:
        """Every node's free room, once: the first search's free rows are then cut from
        it (at 20,000 nodes it took that search about 0.35 s)."""
        for view in self.nodes:
            view.avail  # noqa: B018 (computed and kept)

    def free_rows_of(self, resources: tuple[str, ...]) -> Any:
        """Free room of every node (rows in name order) in ``resources``: an int64 array
        kept current (callers must not change it)."""
        rows = self.free_rows.get(resources)
        if rows is None:
            if self.base is not None:
                rows = self.base.free_rows_of(resources)
                if self._owned:
                    rows = rows.copy()
                    self._own_rows.add(resources)
                    for name in self._owned:
                        avail = self.by_name[name].avail
                        rows[self.row[name]] = [avail.get(r, 0) for r in resources]
            else:
                rows = np.array(
                    [[v.avail.get(r, 0) for r in resources] for v in self.nodes], dtype=np.int64
                ).reshape(len(self.nodes), len(resources))
            self.free_rows[resources] = rows
        return rows

    # -- lookups ----------------------------------------------------------------------------

    def demand(self, pod: Pod, key: str | None = None) -> dict[str, int]:
        """``pod_demand``, computed once per pod (``key``: ``pod.key``, when known)."""
        key = key or pod.key
        d = self._demand.get(key)
        if d is None:
            d = self._demand[key] = pod_demand(pod)
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

    def with_room(self, demand: Mapping[str, int]) -> list[int]:
        """Positions (in ``nodes``) of the nodes with at least ``demand`` free, ascending
        (on the free-room arrays)."""
        resources = tuple(sorted(r for r, v in demand.items() if v > 0))
        if not resources:
            return list(range(len(self.nodes)))
        need = np.array([demand[r] for r in resources], dtype=np.int64)
        rows = self.free_rows_of(resources)
        room = rows[:, 0] >= need[0]
        for k in range(1, len(resources)):  # column by column: cheaper than .all(axis=1)
            room &= rows[:, k] >= need[k]
        found: list[int] = np.flatnonzero(room).tolist()
        return found

    # -- priorities ---------------------------------------------------------------------

    def _pod_priority(self, pod: Pod, default: int) -> int:
        return pod_priority(self.state, pod, default)

    def _group_priorities(self, group: PodGroup, default: int) -> tuple[int, int]:
        """(scheduling, preemption) priority of a gang (``model.priorities``)."""
        members = (self.pod_priority[p.key] for p in self.members.get(group.key, []))
        return group_priorities(self.state, group, members, default)

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


def _pod_key(pod: Pod) -> str:
    return pod.key


def _insort_key(pods: list[Pod], pod: Pod, key: str) -> None:
    """``insort(pods, pod, key=_pod_key)``, ``key`` being ``pod.key``: appended when it
    goes last (pods indexed in key order, as the first build does), without a search."""
    if not pods or pods[-1].key <= key:
        pods.append(pod)
    else:
        insort(pods, pod, key=_pod_key)


__all__ = ["NodeCluster", "NodeView", "add_into", "pod_demand"]
