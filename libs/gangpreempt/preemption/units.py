"""Preemption units (KEP-5710): a whole gang in ``PodGroup`` mode, else a single pod; which
of them a preemptor may take (priority, non-preemptible label, preemption toleration),
their importance order, and the PodDisruptionBudgets they would violate."""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import PODS, PREEMPTIBLE_LABEL, UNIT_GROUP, Pod
from gangpreempt.model.queues import PriorityClass
from gangpreempt.placement.cluster import NodeCluster, add_into
from gangpreempt.preemption.columns import NodeColumns, SlotData
from gangpreempt.quota import toleration
from gangpreempt.quota.toleration import Tolerance

NON_PREEMPTIBLE = "false"


class Unit:
    """What is evicted together: its pods bound to nodes. ``evicting`` when all of them
    are already terminating (choosing it again costs nothing new, as in kube-scheduler,
    which keeps terminating pods among the potential victims)."""

    __slots__ = ("_importance", "evicting", "is_group", "pods", "priority", "ref", "start")

    def __init__(
        self, ref: str, pods: list[Pod], priority: int, is_group: bool, now: datetime
    ) -> None:
        self.ref = ref
        self.pods = pods
        self.priority = priority
        self.is_group = is_group
        self._importance: tuple[int, int, int, datetime, str] | None = None
        if len(pods) == 1:
            self.start = pods[0].start_time or now
            self.evicting = pods[0].terminating
            return
        starts = [p.start_time or now for p in pods]
        self.start = min(starts) if starts else now
        self.evicting = all(p.terminating for p in pods)

    def importance(self) -> tuple[int, int, int, datetime, str]:
        """Sort key, most important first: higher priority; a unit of a pod group (a
        whole gang, or a pod that belongs to one) before a lone pod; between group units
        the one with more pods; then the longest running (kube-scheduler's
        MoreImportantPod and MoreImportantVictim). Found once (a unit is not changed
        once made: a change makes a new one)."""
        key = self._importance
        if key is None:
            key = self._importance = importance_of(self)
        return key

    def __repr__(self) -> str:
        return f"Unit({self.ref}, priority={self.priority}, pods={len(self.pods)})"


def importance_of(unit: Unit) -> tuple[int, int, int, datetime, str]:
    """``Unit.importance``, found from the unit as it is."""
    grouped = unit.is_group or bool(unit.pods and unit.pods[0].group)
    size = -len(unit.pods) if grouped else 0
    return (-unit.priority, 0 if grouped else 1, size, unit.start, unit.ref)


def workload_tolerance(state: ClusterState, pod: Pod, now: datetime) -> Tolerance | None:
    """The minimum runtime of the Kueue Workload that runs ``pod`` (``quota.toleration``:
    its class's, else its ClusterQueue's), or None (no Workload, not admitted, no
    policy). A Workload's pods are spared on the nodes as the Workload is at quota level
    (issue 27); their own PriorityClass's toleration still applies beside it."""
    wl = state.workloads.get(pod.kueue_workload) if pod.kueue_workload else None
    if wl is None or wl.admission is None:
        return None
    reserved = wl.quota_reserved_at or now
    return toleration.tolerance(
        state, wl, wl.admission.cluster_queue, state.priority_of(wl), reserved.timestamp()
    )


def tolerates(pc: PriorityClass | None, preemptor_priority: int, pod: Pod, now: datetime) -> bool:
    """The scheduler-plugins preemption toleration: the victim's PriorityClass exempts it
    from preemptors below ``minimum-preemptable-priority`` (default: its value + 1) for
    ``toleration-seconds`` after it was scheduled (0 = not at all, negative = forever)."""
    if pc is None or (pc.minimum_preemptable_priority is None and pc.toleration_seconds is None):
        return False
    minimum = pc.minimum_preemptable_priority
    if minimum is None:
        minimum = pc.value + 1
    if preemptor_priority >= minimum:
        return False
    if pod.scheduled_at is None:
        return True  # not known to be scheduled: the toleration has not started to run out
    seconds = pc.toleration_seconds or 0
    if seconds < 0:
        return True
    return now < pod.scheduled_at + timedelta(seconds=seconds)


class StaleRows:
    """Column rows (node rows) to rewrite before the columns are read, and the widest
    any of them was when it changed."""

    __slots__ = ("rows", "width")

    def __init__(self) -> None:
        self.rows: set[int] = set()
        self.width = 0


class UnitTable:
    """Every running unit of a ``NodeCluster``; ``candidates`` filters per preemptor.

    Built once, then kept current (``pod_changed``, ``rehome``, ``refresh``): a change
    rebuilds only the units it touches and the rows of their nodes. Each unit has a slot
    (a stable number, reused once free) that the column arrays of ``preemption.dryrun``
    refer to. A ``fork`` shares everything with its base but its cluster."""

    def __init__(self, cluster: NodeCluster, now: datetime) -> None:
        self.cluster = cluster
        self.now = now
        self.base: UnitTable | None = None  # the table this one is a fork of
        self._pods_of: dict[str, dict[str, Pod]] = {}  # unit ref -> its pods by key
        self._ref_of_pod: dict[str, str] = {}
        self._whole: dict[str, bool] = {}
        for view in cluster.nodes:
            for pod in view.pods:
                self._join(pod)
        for pod in sorted(cluster.unbound.values(), key=_by_key):  # a unit goes whole
            self._join(pod)
        self.units: dict[str, Unit] = {ref: self._unit(ref) for ref in self._pods_of}
        self.of_pod: dict[str, Unit] = {}
        self.ordered = sorted(self.units.values(), key=Unit.importance)
        # node -> (unit, what the unit's pods there take), most important unit first
        self.on_node: dict[str, list[tuple[Unit, dict[str, int]]]] = {}
        # unit -> (node, what its pods take there)
        self.nodes_of: dict[str, list[tuple[str, dict[str, int]]]] = {}
        self._eligible: dict[int, set[str]] = {}
        self.slot_data = SlotData()
        self.node_columns: dict[tuple[str, ...], NodeColumns] = {}  # per resource set
        self.eligible_masks: dict[int, Any] = {}  # per priority, over the slots
        self.derived: dict[Any, Any] = {}  # caches over the columns, dropped on a change
        # the column rows changed since they were last read (shared with the forks)
        self._stale_rows = StaleRows()
        # unit -> PDB keys covering each of its pods (kube-scheduler's matching rule)
        self.covering: dict[str, list[list[str]]] = {}
        self._free_slots: list[int] = []
        # units whose start or toleration depends on the clock -> from when they must be
        # rebuilt (-inf: at every move of the clock; a window's end: once it is over)
        self.timed: dict[str, float] = {}
        self.all_resources: tuple[str, ...] = ()  # the resources of ``warm``
        # Slots in importance order, their arrays filled at once.
        self.slots: list[Unit | None] = list(self.ordered)
        self.slot_of: dict[str, int] = {u.ref: i for i, u in enumerate(self.ordered)}
        guarded = [self._index(unit) for unit in self.ordered]
        self.slot_data.fill(self.ordered, guarded)
        on_node, nodes_of = self.on_node, self.nodes_of
        for unit in self.ordered:
            for node, demand in nodes_of[unit.ref]:
                row = on_node.get(node)
                if row is None:
                    on_node[node] = [(unit, demand)]
                else:
                    row.append((unit, demand))

    # -- membership ---------------------------------------------------------------------------

    def ref_of(self, pod: Pod) -> tuple[str, bool]:
        """The unit a running pod belongs to, and whether the unit goes whole."""
        state = self.cluster.state
        if pod.kueue_workload in state.workloads:
            return f"Workload/{pod.kueue_workload}", True  # Kueue evicts it whole
        group = state.pod_groups.get(pod.group) if pod.group else None
        if group is not None and group.preemption_mode == UNIT_GROUP:
            return group.ref, True
        return pod.ref, False

    def _join(self, pod: Pod) -> str:
        ref, whole = self.ref_of(pod)
        key = pod.key
        pods = self._pods_of.get(ref)
        if pods is None:
            pods = self._pods_of[ref] = {}
        pods[key] = pod
        self._ref_of_pod[key] = ref
        self._whole[ref] = whole
        return ref

    def _leave(self, key: str) -> str | None:
        ref = self._ref_of_pod.pop(key, None)
        if ref is not None:
            pods = self._pods_of.get(ref, {})
            pods.pop(key, None)
            if not pods:
                self._pods_of.pop(ref, None)
                self._whole.pop(ref, None)
        return ref

    def pod_changed(self, old: Pod | None, new: Pod | None) -> set[str]:
        """A pod changed (the cluster has taken it in): the refs of the units to refresh."""
        refs: set[str] = set()
        if old is not None:
            refs.add(self._leave(old.key) or "")
        if new is not None and new.running:
            refs.add(self._join(new))
        refs.discard("")
        return refs

    def rehome(self, keys: Iterable[str]) -> set[str]:
        """Pods whose unit may have changed (their PodGroup or Kueue Workload changed):
        the refs of the units to refresh, before and after."""
        refs: set[str] = set()
        pods = self.cluster.state.pods
        for key in keys:
            old = self._leave(key)
            if old is not None:
                refs.add(old)
            pod = pods.get(key)
            if pod is not None and pod.running:
                refs.add(self._join(pod))
        return refs

    def refs_of(self, keys: Iterable[str]) -> set[str]:
        return {ref for key in keys if (ref := self._ref_of_pod.get(key)) is not None}

    # -- units ----------------------------------------------------------------------------------

    def _unit(self, ref: str) -> Unit:
        members = self._pods_of[ref]
        if len(members) == 1:
            pods = list(members.values())
        else:
            pods = sorted(members.values(), key=self._pod_order)
        prio = self.cluster.preemption_priority(pods[0])
        return Unit(ref, pods, prio, self._whole[ref], self.now)

    def _pod_order(self, pod: Pod) -> tuple[int, int, str]:
        """Pods of a unit: by node (name order), then by key; off the state last."""
        row = self.cluster.row.get(pod.node_name)
        return (0, row, pod.key) if row is not None else (1, 0, pod.key)

    def _place(self, unit: Unit) -> None:
        """Index a unit that is in ``units`` and ``ordered``: its nodes, pods, slot."""
        slot = self._free_slots.pop() if self._free_slots else len(self.slots)
        if slot == len(self.slots):
            self.slots.append(unit)
        else:
            self.slots[slot] = unit
        self.slot_of[unit.ref] = slot
        self.slot_data.set(slot, unit, self._index(unit))

    def _index(self, unit: Unit) -> bool:
        """Index a unit's nodes, pods, eligibility, budgets and clock; whether it is
        guarded (``_guards``)."""
        demand = self.cluster.demand
        if len(unit.pods) == 1:  # most units: the pod's demand is what it takes there
            p = unit.pods[0]
            self.of_pod[p.key] = unit
            self.nodes_of[unit.ref] = [(p.node_name, demand(p))]
        else:
            here: dict[str, dict[str, int]] = {}
            for p in unit.pods:
                on = here.get(p.node_name)
                if on is None:
                    on = here[p.node_name] = {}
                add_into(on, demand(p))
                self.of_pod[p.key] = unit
            self.nodes_of[unit.ref] = list(here.items())
        guarded, due = self._guards(unit)
        if self._eligible:
            for priority, refs in self._eligible.items():
                if self.refusal(unit, priority) is None:  # it checks the priority first
                    refs.add(unit.ref)
        pdbs = self.cluster.state.pdbs
        if pdbs:
            self.covering[unit.ref] = [
                [b.key for b in pdbs.values() if b.covers(p) and p.name not in b.disrupted_pods]
                for p in unit.pods
            ]
        if due != math.inf:
            self.timed[unit.ref] = due
        return guarded

    def _guards(self, unit: Unit) -> tuple[bool, float]:
        """(guarded, due): whether anything but its priority may refuse the unit to a
        preemptor (a non-preemptible label, a PriorityClass with a toleration policy),
        and from when it must be built again because the clock moved: -inf when its
        start or toleration follows the clock (a pod without a start time, a Workload
        without its reservation time), the end of a toleration window still open, else
        inf (nothing changes with the clock)."""
        guarded = False
        due = math.inf
        state = self.cluster.state
        classes = state.priority_classes
        now_ts = self.now.timestamp()
        for pod in unit.pods:
            if pod.start_time is None:
                due = -math.inf
            if pod.labels.get(PREEMPTIBLE_LABEL) == NON_PREEMPTIBLE:
                guarded = True
            if pod.kueue_workload:
                tol = workload_tolerance(state, pod, self.now)
                if tol is not None:
                    guarded = True
                    wl = state.workloads.get(pod.kueue_workload)
                    if wl is not None and wl.quota_reserved_at is None:
                        due = -math.inf  # its window starts at the clock
                    elif now_ts < tol[1]:
                        due = min(due, tol[1])
            if not classes:
                continue
            pc = self.cluster.priority_class_of(pod)
            if pc is not None and (
                pc.minimum_preemptable_priority is not None or pc.toleration_seconds is not None
            ):
                guarded = True
                seconds = pc.toleration_seconds
                if seconds is not None and seconds > 0 and pod.scheduled_at is not None:
                    end = (pod.scheduled_at + timedelta(seconds=seconds)).timestamp()
                    if now_ts < end:
                        due = min(due, end)
        return guarded, due

    def recover(self) -> None:
        """The PodDisruptionBudgets changed: which of them cover each unit's pods."""
        pdbs = self.cluster.state.pdbs.values()
        self.covering = (
            {
                unit.ref: [
                    [b.key for b in pdbs if b.covers(p) and p.name not in b.disrupted_pods]
                    for p in unit.pods
                ]
                for unit in self.ordered
            }
            if pdbs
            else {}
        )

    def refresh(self, refs: Iterable[str]) -> None:
        """Rebuild the units ``refs`` from their pods (a unit without pods is gone), with
        the rows of every node they were or are on."""
        touched: set[str] = set()
        changed: list[int] = []
        for ref in refs:
            old = self.units.pop(ref, None)
            if old is not None:
                changed.append(self._drop(old, touched))
            if ref not in self._pods_of:
                continue
            unit = self.units[ref] = self._unit(ref)
            insort(self.ordered, unit, key=Unit.importance)
            self._place(unit)
            changed.append(self.slot_of[ref])
            for node, demand in self.nodes_of[ref]:
                touched.add(node)
                insort(self.on_node.setdefault(node, []), (unit, demand), key=_entry_importance)
        if not (touched or changed):
            return
        self.derived.clear()
        rows = [r for name in touched if (r := self.cluster.row.get(name)) is not None]
        if rows and self.node_columns:
            # The column rows are rewritten when next read (``columns_for``), once for
            # every change since: the same cells as rewriting them at each change.
            nodes, on_node = self.cluster.nodes, self.on_node
            stale = self._stale_rows
            stale.rows.update(rows)
            stale.width = max(stale.width, *(len(on_node.get(nodes[i].name, ())) for i in rows))
        for priority, mask in self.eligible_masks.items():
            if len(mask) < len(self.slots):
                mask = self.eligible_masks[priority] = np.concatenate(
                    [mask, np.zeros(len(self.slots) - len(mask), dtype=np.bool_)]
                )
            for slot in changed:
                mask[slot] = self._eligible_slot(slot, priority)

    def columns_for(self, resources: tuple[str, ...]) -> NodeColumns:
        """The column arrays of a resource set (kept current): cut from the columns of
        every resource (``warm``) when they hold them, else built on first use."""
        if self._stale_rows.rows:
            self._rewrite_rows()
        cols = self.node_columns.get(resources)
        if cols is None:
            owner = self.base or self
            whole = owner.node_columns.get(owner.all_resources)
            if whole is None or not set(resources) <= set(owner.all_resources):
                # A resource no column set holds yet (or none built): the columns of every
                # resource known, once, and this set is cut from them.
                owner.node_columns.pop(owner.all_resources, None)
                owner.all_resources = tuple(sorted({*owner.all_resources, *resources}))
                whole = owner.node_columns[owner.all_resources] = NodeColumns(
                    owner, owner.all_resources
                )
            cols = (
                whole if resources == owner.all_resources else NodeColumns.sliced(whole, resources)
            )
            self.node_columns[resources] = cols
        return cols

    def _rewrite_rows(self) -> None:
        """Rewrite the column rows the changes since the last read touched. A column set
        is first widened to the widest any of those rows was at a change (as rewriting
        them change by change would have): the cells are the same as that (an empty
        cell's priority, pods and start aside: no search reads them unmasked)."""
        stale = self._stale_rows
        rows, width = sorted(stale.rows), stale.width
        stale.rows.clear()
        stale.width = 0
        for cols in self.node_columns.values():
            if width > cols.index.shape[1]:
                cols._widen(width)
            cols.set_rows(rows)

    def warm(self) -> None:
        """Build the columns of every resource the nodes and pods name, once: the first
        decision of each resource set then cuts its columns from them (a service warms
        its index at start; a one-off planner does not need to)."""
        found: set[str] = set()
        for view in self.cluster.nodes:
            found.update(view.alloc)
        for pod in self.cluster.state.pods.values():
            found.update(pod.requests)
        found.add(PODS)
        self.columns_for(tuple(sorted(found)))

    def eligible_mask(self, priority: int) -> Any:
        """``eligible`` as a mask over the slots (kept current; callers must copy it
        before changing it). Only units with a label or toleration to look at are looked
        at one by one; the rest is their priority."""
        mask = self.eligible_masks.get(priority)
        if mask is None:
            n = len(self.slots)
            below = self.slot_data.priority[:n] < priority
            guarded = self.slot_data.guarded[:n]
            mask = below & ~guarded
            for slot in np.flatnonzero(below & guarded):
                mask[slot] = self._eligible_slot(int(slot), priority)
            self.eligible_masks[priority] = mask
        return mask

    def _eligible_slot(self, slot: int, priority: int) -> bool:
        unit = self.slots[slot]
        return (
            unit is not None
            and unit.priority < priority
            and (not self.slot_data.guarded[slot] or self.refusal(unit, priority) is None)
        )

    def _drop(self, unit: Unit, touched: set[str]) -> int:
        i = bisect_left(self.ordered, unit.importance(), key=Unit.importance)
        assert self.ordered[i] is unit, unit
        del self.ordered[i]
        for node, _ in self.nodes_of.pop(unit.ref, []):
            touched.add(node)
            row = self.on_node[node]
            row[:] = [e for e in row if e[0] is not unit]
            if not row:
                del self.on_node[node]
        for p in unit.pods:
            if self.of_pod.get(p.key) is unit:
                del self.of_pod[p.key]
        for refs in self._eligible.values():
            refs.discard(unit.ref)
        self.covering.pop(unit.ref, None)
        self.timed.pop(unit.ref, None)
        slot = self.slot_of.pop(unit.ref)
        self.slots[slot] = None
        self.slot_data.set(slot, None)
        self._free_slots.append(slot)
        return slot

    def set_now(self, now: datetime) -> None:
        """Decide at ``now``: the units whose start or toleration depends on it again
        (those whose window is still open at ``now`` are as they were). Backwards, every
        guarded unit again: a window that had closed may be open then."""
        if now == self.now:
            return
        back = now < self.now
        self.now = now
        if back:
            slot_of, guarded = self.slot_of, self.slot_data.guarded
            again = [u.ref for u in self.ordered if guarded[slot_of[u.ref]]]
            self.refresh(dict.fromkeys([*again, *self.timed]))
            return
        now_ts = now.timestamp()
        due = [ref for ref, at in self.timed.items() if at <= now_ts]
        if due:
            self.refresh(due)

    def fork(self, cluster: NodeCluster) -> UnitTable:
        """The same table over a fork of its cluster."""
        fork = UnitTable.__new__(UnitTable)
        fork.__dict__.update(self.__dict__)
        fork.cluster = cluster
        fork.base = self
        return fork

    # -- candidates -----------------------------------------------------------------------------

    def eligible(self, preemptor_priority: int) -> set[str]:
        """Refs of the units that priority may take (cached per priority and kept
        current; callers must not change it)."""
        refs = self._eligible.get(preemptor_priority)
        if refs is None:
            mask = self.eligible_mask(preemptor_priority)
            slots = self.slots
            refs = self._eligible[preemptor_priority] = {
                unit.ref for s in np.flatnonzero(mask) if (unit := slots[s]) is not None
            }
        return refs

    def refusal(self, unit: Unit, preemptor_priority: int) -> str | None:
        """Why ``unit`` may not be preempted by that priority, or None."""
        if unit.priority >= preemptor_priority:
            return f"priority {unit.priority} is not below {preemptor_priority}"
        for pod in unit.pods:
            if pod.labels.get(PREEMPTIBLE_LABEL) == NON_PREEMPTIBLE:
                return f"{pod.ref} is labelled {PREEMPTIBLE_LABEL}=false"
            pc = self.cluster.priority_class_of(pod)
            if tolerates(pc, preemptor_priority, pod, self.now):
                return f"{pod.ref} tolerates preemption (PriorityClass {pc.name if pc else ''})"
            tol = workload_tolerance(self.cluster.state, pod, self.now)
            if toleration.tolerates(tol, preemptor_priority, self.now.timestamp()):
                assert tol is not None
                return f"{pod.ref}: its Workload {pod.kueue_workload} is {toleration.describe(tol)}"
        return None

    def candidates(self, preemptor_priority: int, exclude: Iterable[str] = ()) -> list[Unit]:
        """Units the preemptor may take, most important first; ``exclude`` names units
        (by ref: ``PodGroup/ns/name``, ``Pod/ns/name``) that are not candidates: the
        preemptor's own gang, victims promised to others."""
        skip = set(exclude)
        eligible = self.eligible(preemptor_priority)
        if 8 * len(eligible) < len(self.ordered):
            # Few of them (the usual case in a busy cluster): sorted as ``ordered`` is
            # (importance, whose last key, the ref, sets every unit apart).
            units = self.units
            found = [u for ref in eligible if ref not in skip and (u := units.get(ref)) is not None]
            return sorted(found, key=Unit.importance)
        return [u for u in self.ordered if u.ref in eligible and u.ref not in skip]

    def pdb_violations(self, units: Sequence[Unit]) -> set[str]:
        """kube-scheduler's filterPodsWithPDBViolation over units in the given order: each
        pod spends one disruption of every budget covering it (unless already disrupted);
        a unit whose pods overdraw a budget violates it."""
        if not self.covering:
            return set()
        allowed = {b.key: b.disruptions_allowed for b in self.cluster.state.pdbs.values()}
        violating: set[str] = set()
        for unit in units:
            for keys in self.covering.get(unit.ref, ()):
                for key in keys:
                    allowed[key] -= 1
                    if allowed[key] < 0:
                        violating.add(unit.ref)
        return violating


def _by_key(pod: Pod) -> str:
    return pod.key


def _entry_importance(
    entry: tuple[Unit, dict[str, int]],
) -> tuple[int, int, int, datetime, str]:
    return entry[0].importance()


__all__ = ["Unit", "UnitTable", "importance_of", "tolerates", "workload_tolerance"]
