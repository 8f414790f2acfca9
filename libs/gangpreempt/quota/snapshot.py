"""The quota ledger: the cohort tree with the usage of every workload holding quota, and
per-queue candidate indexes kept sorted in Kueue's victim order.

A ``Snapshot`` is built once from a ``ClusterState`` and mutated in two ways:

- permanently, with ``admit`` / ``release`` (membership, indexes and usage);
- temporarily, inside a search, with ``take_usage`` / ``give_usage`` (usage only), always
  restored before the search returns.
"""

from __future__ import annotations

import bisect
import contextlib
import math
from collections.abc import Callable, Iterable, Iterator, KeysView, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.lostwork import workload_lost_work
from gangpreempt.model.queues import ClusterQueue, ResourceFlavor
from gangpreempt.model.topology import TopologyAssignment
from gangpreempt.model.workloads import Workload
from gangpreempt.quota.tas import TasView
from gangpreempt.quota.toleration import Tolerance, any_policy, tolerance
from gangpreempt.quota.tree import (
    FR,
    Node,
    Quantities,
    accumulate,
    add_usage,
    quotas_of,
    remove_usage,
)

if TYPE_CHECKING:
    from gangpreempt.preemption.cheapest import NodeSide

STOPPED_POLICIES = frozenset({"Hold", "HoldAndDrain"})


def _ts(value: datetime | None, default: datetime) -> float:
    return (value or default).timestamp()


class AdmittedWorkload:
    """A workload holding quota in a ClusterQueue, as the preemption search sees it."""

    __slots__ = (
        "_shape",
        "cq",
        "evicting",
        "frs",
        "holds_quota",
        "key",
        "order_key",
        "preempted_ts",
        "priority",
        "queue_order_ts",
        "ref",
        "reserved_ts",
        "tolerance",
        "uid",
        "usage",
        "workload",
    )

    def __init__(
        self, workload: Workload, cq: str, priority: int, usage: Quantities, now: datetime
    ) -> None:
        self.workload = workload
        self.key = workload.key
        self.ref = workload.ref
        self.cq = cq
        self.priority = priority
        self.usage = usage
        self.frs = frozenset(fr for fr, v in usage.items() if v)
        self.evicting = workload.is_evicting
        self.uid = workload.uid or workload.key
        self.reserved_ts = _ts(workload.quota_reserved_at, now)
        self.queue_order_ts = _ts(workload.queue_order_time(), now)
        self.preempted_ts = workload.preempted_ts
        # Kueue's candidate order inside one queue: lower priority first, then the most
        # recently admitted, then uid.
        self.order_key = (priority, -self.reserved_ts, self.uid)
        self._shape: tuple[tuple[FR, int], ...] | None = None
        # Set by ``Snapshot.admit_workload``: ``workload`` (immutable) holds quota, so it
        # is not pending.
        self.holds_quota = False
        # Its minimum runtime (``quota.toleration``), set by ``Snapshot.admit_workload``.
        self.tolerance: Tolerance | None = None

    def shape(self) -> tuple[tuple[FR, int], ...]:
        """Its usage as a sorted tuple (workloads of one shape weigh alike in a search)."""
        shape = self._shape
        if shape is None:
            shape = self._shape = tuple(sorted(self.usage.items()))
        return shape

    def lost_work(self, now_ts: float) -> float:
        """GPU-seconds (seconds for a workload without GPUs) it would lose if evicted at
        ``now_ts``: its run since its last checkpoint (the ``last-checkpoint`` annotation,
        or every ``checkpoint-interval-seconds`` from its admission; its whole run when
        neither is known)."""
        gpus = sum(v for (_flavor, res), v in self.usage.items() if res.endswith("gpu"))
        return workload_lost_work(self.workload, self.reserved_ts, gpus, now_ts)

    def __repr__(self) -> str:
        return f"<AdmittedWorkload {self.ref} p={self.priority}>"


class ClusterQueueState:
    """A ClusterQueue in the snapshot: its spec, its tree node, who holds its quota."""

    __slots__ = ("_index", "_shapes", "_sums", "inactive_reason", "node", "spec", "workloads")

    def __init__(self, spec: ClusterQueue, node: Node) -> None:
        self.spec = spec
        self.node = node
        self.workloads: dict[str, AdmittedWorkload] = {}
        self.inactive_reason: str | None = None
        # (fr, evicting) -> workloads using fr, sorted by order_key
        self._index: dict[tuple[FR, bool], list[AdmittedWorkload]] = {}
        # (fr, evicting) -> priority -> [total fr usage, count] of the workloads in that
        # index list with that priority, kept with the index
        self._sums: dict[tuple[FR, bool], dict[int, list[int]]] = {}
        # shape -> how many of ``workloads`` have it (``AdmittedWorkload.shape``), counted
        # once asked, then kept with ``workloads``
        self._shapes: dict[tuple[tuple[FR, int], ...], int] | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    def shapes(self) -> KeysView[tuple[tuple[FR, int], ...]]:
        """Every shape among the workloads holding quota here (pinned ones too); a live
        view: copy it to keep it."""
        found = self._shapes
        if found is None:
            found = {}
            for aw in self.workloads.values():
                shape = aw.shape()
                found[shape] = found.get(shape, 0) + 1
            self._shapes = found
        return found.keys()

    def _add_shape(self, aw: AdmittedWorkload) -> None:
        found = self._shapes
        if found is not None:
            shape = aw.shape()
            found[shape] = found.get(shape, 0) + 1

    def _drop_shape(self, aw: AdmittedWorkload) -> None:
        found = self._shapes
        if found is not None:
            shape = aw.shape()
            if found[shape] == 1:
                del found[shape]
            else:
                found[shape] -= 1

    def covers(self, resource: str) -> bool:
        return any(resource in g.covered_resources for g in self.spec.resource_groups)

    def _insert(self, aw: AdmittedWorkload) -> None:
        for fr in aw.frs:
            key = (fr, aw.evicting)
            lst = self._index.get(key)
            if lst is None:
                lst = self._index[key] = []
                self._sums[key] = {}
            bisect.insort(lst, aw, key=_order)
            sums = self._sums[key]
            entry = sums.get(aw.priority)
            if entry is None:
                sums[aw.priority] = [aw.usage[fr], 1]
            else:
                entry[0] += aw.usage[fr]
                entry[1] += 1

    def _delete(self, aw: AdmittedWorkload) -> None:
        for fr in aw.frs:
            key = (fr, aw.evicting)
            lst = self._index[key]
            i = bisect.bisect_left(lst, aw.order_key, key=_order)
            while lst[i] is not aw:
                i += 1
            del lst[i]
            sums = self._sums[key]
            entry = sums[aw.priority]
            if entry[1] == 1:
                del sums[aw.priority]
            else:
                entry[0] -= aw.usage[fr]
                entry[1] -= 1

    def using(self, frs: Iterable[FR], evicting: bool) -> list[list[AdmittedWorkload]]:
        """The sorted index lists of workloads that use any of ``frs``."""
        out = []
        for fr in frs:
            lst = self._index.get((fr, evicting))
            if lst:
                out.append(lst)
        return out

    def usage_below(self, fr: FR, evicting: bool, bound: int | None) -> int:
        """Total ``fr`` usage of the workloads using ``fr`` whose priority is below
        ``bound`` (all of them when ``bound`` is None)."""
        return _sum_below(self._sums.get((fr, evicting)), bound)

    def freeable(self, fr: FR, bound: int | None) -> int:
        """``usage_below`` of evicting and running workloads together."""
        sums = self._sums
        return _sum_below(sums.get((fr, True)), bound) + _sum_below(sums.get((fr, False)), bound)

    def min_priority(self, frs: Iterable[FR]) -> int | None:
        """The lowest priority among workloads using ``frs`` (KEP-83's fast-path test)."""
        best: int | None = None
        for evicting in (True, False):
            for lst in self.using(frs, evicting):
                p = lst[0].priority
                best = p if best is None else min(best, p)
        return best


def _sum_below(sums: dict[int, list[int]] | None, bound: int | None) -> int:
    """The usage of the priorities of ``sums`` below ``bound`` (all when None)."""
    total = 0
    if sums:
        for priority, entry in sums.items():
            if bound is None or priority < bound:
                total += entry[0]
    return total


def _name(node: Node) -> str:
    return node.name


def _order(aw: AdmittedWorkload) -> tuple[int, float, str]:
    return aw.order_key


# A plan in flight's topology room: its preemptor, flavors, assignments and victims' keys.
TopologyHold = tuple[
    Workload, dict[str, dict[str, str]], dict[str, TopologyAssignment], frozenset[str]
]


class Snapshot:
    """Quota state for one decision or one admission cycle."""

    def __init__(
        self,
        state: ClusterState,
        now: datetime,
        cqs: dict[str, ClusterQueueState],
        cohorts: dict[str, Node],
    ) -> None:
        self.state = state
        self.now = now
        self.cqs = cqs
        self.cohorts = cohorts
        self.flavors: dict[str, ResourceFlavor] = state.flavors
        config = state.kueue_configuration()
        # Kueue's fair sharing (its manager Configuration): victims and the admission
        # order by dominant resource share.
        self.fair_sharing = config.fair_sharing
        self.fair_strategies = config.preemption_strategies
        # "" (Kueue's victim order), or "lost-gpu-hours": among candidates of one
        # priority, those losing the least work since their last checkpoint first
        self.victim_cost = ""
        # The nodes, asked under the cost setting while a pass composes with them
        self.node_side: NodeSide | None = None
        self.admitted: dict[str, AdmittedWorkload] = {}
        self.pinned: set[str] = set()  # hold quota but may not be preempted
        # root cohort -> the ClusterQueues of its tree (``tree_cluster_queues``)
        self._trees: dict[str, list[ClusterQueueState]] = {}
        # cohort -> its children by name (``children_by_name``)
        self._by_name: dict[str, tuple[list[Node], list[Node]]] = {}
        # cohort -> its child ClusterQueues (``child_cluster_queues``)
        self._children: dict[str, list[tuple[Node, ClusterQueueState]]] = {}
        # While a scratch section is open: how to undo each permanent change, in order.
        self._journal: list[Callable[[], None]] | None = None
        # Kueue's topology-aware scheduling (``quota.tas``): built when first asked, and
        # from then the workloads a search has removed (their assignments hold no room)
        self._tas: TasView | None = None
        self.removed: set[str] | None = None
        # plans in flight with a topology assignment (``hold_topology``), kept across
        # passes until the owner clears them
        self.topology_holds: list[
            tuple[
                Workload, dict[str, dict[str, str]], dict[str, TopologyAssignment], frozenset[str]
            ]
        ] = []
        # ``plan`` and ``explain``: a topology-aware workload left Pending is told which
        # running workload, moved, would free a domain (not the services' cycles)
        self.suggest_moves = False

    @contextlib.contextmanager
    def scratch(self) -> Iterator[Snapshot]:
        """Make changes (a whole admission pass, plans in flight, pins) and have them all
        undone on exit, exactly, so one long-lived snapshot serves every computation."""
        if self._journal is not None:
            yield self
            return
        journal: list[Callable[[], None]] = []
        self._journal = journal
        try:
            yield self
        finally:
            self._journal = None
            for undo in reversed(journal):
                undo()

    def _record(self, undo: Callable[[], None]) -> None:
        if self._journal is not None:
            self._journal.append(undo)

    # -- building ------------------------------------------------------------------
    @classmethod
    def build(cls, state: ClusterState, now: datetime) -> Snapshot:
        cohorts: dict[str, Node] = {}

        def cohort_node(name: str) -> Node:
            node = cohorts.get(name)
            if node is None:
                spec = state.cohorts.get(name)
                quotas = quotas_of(spec.resource_groups) if spec else {}
                weight = spec.fair_weight if spec else 1.0
                node = Node(name, is_cohort=True, quotas=quotas, weight=weight)
                cohorts[name] = node
            return node

        for name in state.cohorts:
            cohort_node(name)
        cyclic: set[str] = set()
        for name, cohort_spec in state.cohorts.items():
            if cohort_spec.parent:
                if _has_cycle(state, name):
                    cyclic.add(name)
                    continue
                child, parent = cohort_node(name), cohort_node(cohort_spec.parent)
                child.parent = parent
                parent.child_cohorts.append(child)

        cqs: dict[str, ClusterQueueState] = {}
        for name, spec in state.cluster_queues.items():
            node = Node(
                name,
                is_cohort=False,
                quotas=quotas_of(spec.resource_groups),
                weight=spec.fair_weight,
            )
            cqs[name] = cq = ClusterQueueState(spec, node)
            if spec.cohort:
                if spec.cohort in cyclic:
                    cq.inactive_reason = f"cohort {spec.cohort} is part of a cycle"
                else:
                    parent = cohort_node(spec.cohort)
                    node.parent = parent
                    parent.child_cqs.append(node)
            missing = sorted(
                {
                    f.name
                    for g in spec.resource_groups
                    for f in g.flavors
                    if f.name not in state.flavors
                }
            )
            if missing:
                cq.inactive_reason = f"ResourceFlavor {', '.join(missing)} not found"
            elif spec.stop_policy in STOPPED_POLICIES:
                cq.inactive_reason = f"stopPolicy is {spec.stop_policy}"

        for node in cohorts.values():
            if node.parent is None:
                accumulate(node)

        snap = cls(state, now, cqs, cohorts)
        for wl in sorted(state.workloads.values(), key=lambda w: w.key):
            snap.admit_workload(wl)
        return snap

    # -- permanent changes ---------------------------------------------------------
    def admit_workload(self, wl: Workload) -> None:
        """Count ``wl`` if it holds quota in a known ClusterQueue (one that is not is
        reported by ``planning.state_warnings``)."""
        if not wl.holds_quota or wl.admission is None:
            return
        cq = wl.admission.cluster_queue
        if cq in self.cqs:
            aw = AdmittedWorkload(wl, cq, self.state.priority_of(wl), admitted_usage(wl), self.now)
            aw.holds_quota = True
            aw.tolerance = tolerance(self.state, wl, cq, aw.priority, aw.reserved_ts)
            self.admit(aw)

    def next_tolerance_end(self, now_ts: float) -> float | None:
        """The earliest end of an admitted workload's minimum runtime after ``now_ts``
        (``quota.toleration``; windows for good never end), or None: when a preemptor it
        spared may take it, which no state change announces."""
        if not any_policy(self.state):
            return None  # the usual case: no workload to look at
        ends = [
            end
            for aw in self.admitted.values()
            if aw.tolerance is not None and now_ts < (end := aw.tolerance[1]) < math.inf
        ]
        return min(ends, default=None)

    def pending_workloads(self) -> list[Workload]:
        """The pending workloads of the state (``Workload.is_pending``), in the state's
        order. A workload counted here by ``admit_workload`` is the very object that held
        quota then (Workloads are immutable): it is not asked again."""
        admitted = self.admitted
        found = []
        for key, wl in self.state.workloads.items():
            aw = admitted.get(key)
            if aw is not None and aw.workload is wl and aw.holds_quota:
                continue
            if wl.is_pending:
                found.append(wl)
        return found

    def admit(self, aw: AdmittedWorkload, pinned: bool = False) -> None:
        cq = self.cqs[aw.cq]
        cq.workloads[aw.key] = aw
        cq._add_shape(aw)
        if pinned:
            self.pinned.add(aw.key)
        else:
            cq._insert(aw)
        self.admitted[aw.key] = aw
        _take(cq.node, aw.usage)
        self._record(lambda: self.release(aw))

    def release(self, aw: AdmittedWorkload) -> None:
        cq = self.cqs[aw.cq]
        del cq.workloads[aw.key]
        cq._drop_shape(aw)
        was_pinned = aw.key in self.pinned
        if was_pinned:
            self.pinned.discard(aw.key)
        else:
            cq._delete(aw)
        del self.admitted[aw.key]
        _give(cq.node, aw.usage)
        self._record(lambda: self.admit(aw, pinned=was_pinned))

    def pin(self, key: str) -> None:
        """Keep the workload's usage but take it out of every candidate index (it is
        promised to another preemptor already)."""
        aw = self.admitted.get(key)
        if aw is None or key in self.pinned:
            return
        self.cqs[aw.cq]._delete(aw)
        self.pinned.add(key)
        self._record(lambda: self._unpin(aw))

    def _unpin(self, aw: AdmittedWorkload) -> None:
        self.pinned.discard(aw.key)
        self.cqs[aw.cq]._insert(aw)

    def take_usage(self, node: Node, usage: Quantities) -> None:
        """Usage that belongs to no admitted workload (an assumed admission, capacity held
        back): undone by a scratch section."""
        _take(node, usage)
        self._record(lambda: _give(node, usage))

    def give_usage(self, node: Node, usage: Quantities) -> None:
        _give(node, usage)
        self._record(lambda: _take(node, usage))

    # -- temporary changes (a search undoes them itself) ---------------------------
    @staticmethod
    def withdraw(node: Node, usage: Quantities) -> None:
        _give(node, usage)

    @staticmethod
    def put_back(node: Node, usage: Quantities) -> None:
        _take(node, usage)

    def remove(self, aw: AdmittedWorkload) -> None:
        _give(self.cqs[aw.cq].node, aw.usage)
        if self.removed is not None:
            self.removed.add(aw.key)

    def restore(self, aw: AdmittedWorkload) -> None:
        _take(self.cqs[aw.cq].node, aw.usage)
        if self.removed is not None:
            self.removed.discard(aw.key)

    # -- topology-aware scheduling ---------------------------------------------------
    def tas(self) -> TasView:
        """The topology flavors' view of this snapshot (``quota.tas``)."""
        if self._tas is None:
            self._tas = TasView(self.state)
            self.removed = set()
            for wl, flavors, assignments, victims in self.topology_holds:
                self._tas.hold(wl, flavors, assignments, victims)
        return self._tas

    def forget_topology(self) -> None:
        """Build the topology view again when next asked (the state moved on)."""
        self._tas, self.removed = None, None

    def take_topology(
        self,
        wl: Workload,
        flavors: Mapping[str, Mapping[str, str]],
        assignments: Mapping[str, TopologyAssignment],
    ) -> None:
        """The pass placed ``wl`` there: later searches of the pass see it (undone by a
        scratch section)."""
        view = self.tas()
        view.take(wl, flavors, assignments)
        self._record(lambda: view.take(wl, flavors, assignments, sign=-1))

    def tas_gone(self) -> frozenset[str]:
        """The TAS workloads whose assignments hold no room now: removed by a search, or
        released (preempted) by the pass."""
        view = self.tas()
        removed = self.removed or set()
        return frozenset(k for k in view.holding if k in removed or k not in self.admitted)

    # -- queries -------------------------------------------------------------------
    def cluster_queues_in_tree(self, cq: ClusterQueueState) -> Iterator[ClusterQueueState]:
        """Every ClusterQueue of ``cq``'s cohort tree (``cq`` alone outside any cohort),
        in ``Node.subtree_cluster_queues`` order."""
        if cq.node.parent is None:
            return iter((cq,))
        return iter(self.tree_cluster_queues(cq.node.root()))

    def child_cluster_queues(self, cohort: Node) -> list[tuple[Node, ClusterQueueState]]:
        """The ClusterQueues right under ``cohort``, in ``child_cqs`` order, with their
        nodes (kept: the tree is fixed once built; callers must not change the list)."""
        found = self._children.get(cohort.name)
        if found is None:
            found = self._children[cohort.name] = [
                (node, self.cqs[node.name]) for node in cohort.child_cqs
            ]
        return found

    def children_by_name(self, cohort: Node) -> tuple[list[Node], list[Node]]:
        """(child ClusterQueues, child cohorts) of ``cohort``, each by name (kept: callers
        must not change the lists)."""
        found = self._by_name.get(cohort.name)
        if found is None:
            found = self._by_name[cohort.name] = (
                sorted(cohort.child_cqs, key=_name),
                sorted(cohort.child_cohorts, key=_name),
            )
        return found

    def tree_cluster_queues(self, root: Node) -> list[ClusterQueueState]:
        """The ClusterQueues under ``root`` (kept: the tree is fixed once built; callers
        must not change the list)."""
        found = self._trees.get(root.name)
        if found is None:
            found = self._trees[root.name] = [
                self.cqs[node.name] for node in root.subtree_cluster_queues()
            ]
        return found


def _take(node: Node, usage: Quantities) -> None:
    for fr, v in usage.items():
        add_usage(node, fr, v)


def _give(node: Node, usage: Quantities) -> None:
    for fr, v in usage.items():
        remove_usage(node, fr, v)


def _has_cycle(state: ClusterState, start: str) -> bool:
    seen = {start}
    spec = state.cohorts.get(start)
    while spec is not None and spec.parent:
        if spec.parent in seen:
            return True
        seen.add(spec.parent)
        spec = state.cohorts.get(spec.parent)
    return False


def admitted_usage(wl: Workload) -> Quantities:
    """Per flavor-resource usage recorded in a workload's admission."""
    usage: Quantities = {}
    if wl.admission is None:
        return usage
    pod_sets = {ps.name: ps for ps in wl.pod_sets}
    for psa in wl.admission.pod_set_assignments:
        ps = pod_sets.get(psa.name)
        # Kueue's count after reclaim: the pod set's count less its reclaimable pods;
        # below the admission's count, the recorded usage is scaled down to it
        total = ps.count if ps is not None else psa.count
        count = min(psa.count, max(0, total - wl.reclaimable_pods.get(psa.name, 0)))
        for res, flavor in psa.flavors.items():
            if res in psa.resource_usage:
                v = psa.resource_usage[res]
                if count != psa.count and psa.count:
                    # Kueue scales the recorded usage down to the pods still running.
                    v = v // psa.count * count
            elif res == "pods":
                v = count
            elif ps is not None:
                v = ps.requests.get(res, 0) * count
            else:
                v = 0
            if v:
                usage[(flavor, res)] = usage.get((flavor, res), 0) + v
    return usage


__all__ = ["AdmittedWorkload", "ClusterQueueState", "Snapshot", "admitted_usage"]
