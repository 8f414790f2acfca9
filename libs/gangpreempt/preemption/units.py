"""Preemption units (KEP-5710): a whole gang in ``PodGroup`` mode, else a single pod; which
of them a preemptor may take (priority, non-preemptible label, preemption toleration),
their importance order, and the PodDisruptionBudgets they would violate."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from gangpreempt.model.pods import PREEMPTIBLE_LABEL, UNIT_GROUP, Pod
from gangpreempt.model.queues import PriorityClass
from gangpreempt.placement.cluster import NodeCluster, add_into

NON_PREEMPTIBLE = "false"


class Unit:
    """What is evicted together: its pods bound to nodes. ``evicting`` when all of them
    are already terminating (choosing it again costs nothing new, as in kube-scheduler,
    which keeps terminating pods among the potential victims)."""

    __slots__ = ("evicting", "is_group", "pods", "priority", "ref", "start")

    def __init__(
        self, ref: str, pods: list[Pod], priority: int, is_group: bool, now: datetime
    ) -> None:
        self.ref = ref
        self.pods = pods
        self.priority = priority
        self.is_group = is_group
        starts = [p.start_time or now for p in pods]
        self.start = min(starts) if starts else now
        self.evicting = all(p.terminating for p in pods)

    def importance(self) -> tuple[int, int, datetime, str]:
        """Sort key, most important first: higher priority, gangs before single pods
        (KEP-5710), then the longest running (kube-scheduler's MoreImportantPod)."""
        return (-self.priority, 0 if self.is_group else 1, self.start, self.ref)

    def __repr__(self) -> str:
        return f"Unit({self.ref}, priority={self.priority}, pods={len(self.pods)})"


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


class UnitTable:
    """Every running unit of a snapshot, built once; ``candidates`` filters per preemptor."""

    def __init__(self, cluster: NodeCluster, now: datetime) -> None:
        self.cluster = cluster
        self.now = now
        groups = cluster.state.pod_groups
        by_ref: dict[str, list[Pod]] = {}
        is_group: dict[str, bool] = {}
        bound = [p for view in cluster.nodes for p in view.pods]
        for pod in bound + cluster.unbound:  # a unit goes whole, wherever its pods run
            group = groups.get(pod.group) if pod.group else None
            whole = group is not None and group.preemption_mode == UNIT_GROUP
            ref = group.ref if whole and group is not None else pod.ref
            if pod.kueue_workload in cluster.state.workloads:
                ref, whole = f"Workload/{pod.kueue_workload}", True  # Kueue evicts it whole
            by_ref.setdefault(ref, []).append(pod)
            is_group[ref] = whole
        self.units: dict[str, Unit] = {}
        self.of_pod: dict[str, Unit] = {}
        for ref, pods in by_ref.items():
            prio = cluster.preemption_priority(pods[0])
            unit = Unit(ref, pods, prio, is_group[ref], now)
            self.units[ref] = unit
            for p in pods:
                self.of_pod[p.key] = unit
        self.ordered = sorted(self.units.values(), key=Unit.importance)
        # node -> (unit, what the unit's pods there take), most important unit first
        self.on_node: dict[str, list[tuple[Unit, dict[str, int]]]] = {}
        # unit -> (node, what its pods take there)
        self.nodes_of: dict[str, list[tuple[str, dict[str, int]]]] = {}
        for unit in self.ordered:
            here: dict[str, dict[str, int]] = {}
            for p in unit.pods:
                add_into(here.setdefault(p.node_name, {}), cluster.demand(p))
            self.nodes_of[unit.ref] = list(here.items())
            for node, demand in here.items():
                self.on_node.setdefault(node, []).append((unit, demand))
        self._eligible: dict[int, frozenset[str]] = {}
        self.columns: dict[tuple[str, ...], Any] = {}  # preemption.dryrun's, per resource set
        # unit -> PDB keys covering each of its pods (kube-scheduler's matching rule)
        self.covering: dict[str, list[list[str]]] = {}
        pdbs = list(cluster.state.pdbs.values())
        if pdbs:
            for unit in self.ordered:
                self.covering[unit.ref] = [
                    [b.key for b in pdbs if b.covers(p) and p.name not in b.disrupted_pods]
                    for p in unit.pods
                ]

    def eligible(self, preemptor_priority: int) -> frozenset[str]:
        """Refs of the units that priority may take (cached per priority)."""
        refs = self._eligible.get(preemptor_priority)
        if refs is None:
            refs = self._eligible[preemptor_priority] = frozenset(
                u.ref
                for u in self.ordered
                if u.priority < preemptor_priority and self.refusal(u, preemptor_priority) is None
            )
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
        return None

    def candidates(self, preemptor_priority: int, exclude: Iterable[str] = ()) -> list[Unit]:
        """Units the preemptor may take, most important first; ``exclude`` names units
        (by ref: ``PodGroup/ns/name``, ``Pod/ns/name``) that are not candidates: the
        preemptor's own gang, victims promised to others."""
        skip = set(exclude)
        eligible = self.eligible(preemptor_priority)
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


__all__ = ["Unit", "UnitTable", "tolerates"]
