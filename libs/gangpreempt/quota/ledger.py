"""A snapshot kept in step with a changing cluster, change by change, so that services
never rebuild it for a decision. Computations that change it (an admission pass, a
confirmation, a pinned set of victims) run in ``snapshot.scratch()`` and are undone.

The ledger also holds quota for plans in flight, incrementally: from its confirmation
until it ends, a plan's victims are out of the ledger (leaving: not candidates, their
quota promised) and its preemptor's usage is in it, until the preemptor is admitted."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.workloads import Workload
from gangpreempt.planning.inflight import PlanInFlight, usage_of
from gangpreempt.quota.snapshot import Snapshot
from gangpreempt.quota.tree import Quantities

# Changes to these kinds reshape the tree or priorities: the snapshot is rebuilt.
STRUCTURAL = frozenset(
    {
        "ClusterQueue",
        "Cohort",
        "ResourceFlavor",
        "Topology",
        "WorkloadPriorityClass",
        "PriorityClass",
        "KueueConfiguration",
    }
)


class _Hold(msgspec.Struct):
    plan: PlanInFlight
    usage: Quantities  # the preemptor's usage held in the ledger (empty once admitted)


class Ledger:
    def __init__(self, state: ClusterState, now: datetime, victim_cost: str = "") -> None:
        """``victim_cost``: the snapshot's (``Snapshot.victim_cost``), kept across rebuilds."""
        self.state = state
        self.victim_cost = victim_cost
        self.snapshot = self._build(now)
        self.stale = False
        self.holds: dict[str, _Hold] = {}
        self.held_victims: dict[str, str] = {}  # victim key -> plan id
        self.held_preemptors: dict[str, str] = {}  # preemptor key -> plan id

    def _build(self, now: datetime) -> Snapshot:
        snapshot = Snapshot.build(self.state, now)
        snapshot.victim_cost = self.victim_cost
        return snapshot

    # -- state changes ------------------------------------------------------------------
    def changed(self, kind: str, old: Any, new: Any) -> None:
        """Apply one change the state has already taken (``old``/``new`` may be None)."""
        if self.stale:
            return
        if kind in STRUCTURAL:
            self.stale = True
        elif kind == "Workload":
            self._workload(old, new)

    def _workload(self, old: Workload | None, new: Workload | None) -> None:
        snap = self.snapshot
        current = new if new is not None else old
        if current is None:
            return
        key = current.key
        if key in snap.admitted:
            snap.release(snap.admitted[key])
        if key in self.held_victims:
            return  # leaving: stays out of the ledger while its plan is in flight
        plan_id = self.held_preemptors.get(key)
        if plan_id is not None and new is not None and new.holds_quota:
            self._drop_held_usage(plan_id)  # admitted now: its own usage takes over
        self._admit(new)

    def _admit(self, wl: Workload | None) -> None:
        if wl is not None:
            self.snapshot.admit_workload(wl)

    # -- plans in flight -----------------------------------------------------------------
    def hold(self, plan: PlanInFlight) -> None:
        """From confirmation on: the victims leave, the preemptor's usage is held."""
        if plan.plan_id in self.holds:
            return
        snap = self.snapshot
        for victim in plan.victims:
            self.held_victims[victim] = plan.plan_id
            if victim in snap.admitted:
                snap.release(snap.admitted[victim])
        usage: Quantities = {}
        wl = self.state.workloads.get(plan.preemptor)
        cq = snap.cqs.get(plan.cluster_queue)
        if wl is not None and wl.is_pending and cq is not None:
            usage = usage_of(self.state, snap, plan)
            snap.put_back(cq.node, usage)
        self.holds[plan.plan_id] = _Hold(plan, usage)
        self.held_preemptors[plan.preemptor] = plan.plan_id

    def unhold(self, plan_id: str) -> None:
        """The plan ended: victims still holding quota count again; held usage goes."""
        held = self.holds.pop(plan_id, None)
        if held is None:
            return
        self._drop_held_usage(plan_id, held)
        for victim in held.plan.victims:
            if self.held_victims.get(victim) == plan_id:
                del self.held_victims[victim]
                self._admit(self.state.workloads.get(victim))
        if self.held_preemptors.get(held.plan.preemptor) == plan_id:
            del self.held_preemptors[held.plan.preemptor]

    def _drop_held_usage(self, plan_id: str, held: _Hold | None = None) -> None:
        held = held or self.holds.get(plan_id)
        if held is None or not held.usage:
            return
        cq = self.snapshot.cqs.get(held.plan.cluster_queue)
        if cq is not None:
            self.snapshot.withdraw(cq.node, held.usage)
        held.usage = {}

    # -- reading ------------------------------------------------------------------------
    def current(self, now: datetime) -> Snapshot:
        if self.stale:
            self.snapshot = self._build(now)
            self.stale = False
            plans = [h.plan for h in self.holds.values()]
            self.holds.clear()
            self.held_victims.clear()
            self.held_preemptors.clear()
            for plan in plans:
                self.hold(plan)
        self.snapshot.now = now
        return self.snapshot


__all__ = ["STRUCTURAL", "Ledger"]
