"""quota's side of the disruption budget (``gangpreempt.planning.budget``): what each
scope spent, learned from the plan records (every instance, the standby too, so a new
lease holder knows it), and the two checks: before a preemption is requested, and when
its plan is confirmed."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import structlog

from gangpreempt import events
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.podindex import PodIndex
from gangpreempt.model.priorities import pod_priority
from gangpreempt.planning.budget import Budget, Charge, Spending, plan_cost, scope_key
from gangpreempt.planning.decisions import Decision
from gangpreempt.planning.records import ACTUATED, ACTUATING, CLOSED, CONFIRMED, PlanRecord
from gangpreempt.quota.snapshot import Snapshot
from gangpreempt.telemetry import metrics

log = structlog.get_logger("gangpreempt.quota")


def spends(rec: PlanRecord) -> bool:
    """The record's plan counts against the budget: confirmed with a cost, and not
    dropped or ended before anything was evicted."""
    if rec.confirmed_at is None or not rec.disruption_scope:
        return False
    if rec.state in (CONFIRMED, ACTUATING, ACTUATED):
        return True
    return rec.state == CLOSED and bool(rec.actuated)


def preemptor_priority(state: ClusterState, ref: str, index: PodIndex) -> int:
    """The priority a preemptor is held back or let through by (a gang's pods looked up
    in the replica's index, not among every pod)."""
    kind, _, key = ref.partition("/")
    if kind == "Workload":
        wl = state.workloads.get(key)
        return state.priority_of(wl) if wl is not None else 0
    if kind == "Pod":
        pod = state.pods.get(key)
        return pod_priority(state, pod, 0) if pod is not None else 0
    return max((pod_priority(state, p, 0) for p in index.members(key)), default=0)


class Budgeting:
    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.spending = Spending(budget)

    def learn(self, rec: PlanRecord | None) -> None:
        """A record as the bucket has it: its charge follows what it says."""
        if rec is None:
            return  # deleted past its retention, which outlasts the window
        if spends(rec):
            assert rec.confirmed_at is not None
            self.spending.charge(
                Charge(
                    rec.plan_id, rec.disruption_scope, rec.disruption, rec.confirmed_at.timestamp()
                )
            )
        else:
            self.spending.release(rec.plan_id)

    def cost(
        self, snapshot: Snapshot, cluster_queue: str, victims: Iterable[tuple[str, Iterable[str]]]
    ) -> tuple[str, float]:
        return (
            scope_key(self.budget, snapshot, cluster_queue),
            plan_cost(self.budget, snapshot, victims, snapshot.now),
        )

    def held(self, snapshot: Snapshot, d: Decision, priority: int) -> str | None:
        """Why the preemption ``d`` decided must wait for the budget, or None."""
        scope, cost = self.cost(snapshot, d.queue, ((v.object, v.pods) for v in d.victims))
        reason = self.spending.held(scope, cost, priority, snapshot.now.timestamp())
        self.report(scope, snapshot.now)
        if reason is not None:
            metrics.DISRUPTION_HELD.labels("request").inc()
        return reason

    def confirm(
        self,
        snapshot: Snapshot,
        state: ClusterState,
        index: PodIndex,
        rec: PlanRecord,
        p: events.PlanProposed,
        now: datetime,
    ) -> tuple[str | None, dict[str, object]]:
        """Why the plan must be rejected for the budget, or its charge (taken now, so
        the next proposal sees it) and the record fields that carry it."""
        scope, cost = self.cost(snapshot, p.cluster_queue, ((v.object, v.pods) for v in p.victims))
        priority = preemptor_priority(state, p.preemptor, index)
        reason = self.spending.held(scope, cost, priority, now.timestamp(), but=p.plan_id)
        if reason is not None:
            metrics.DISRUPTION_HELD.labels("confirm").inc()
            return reason, {}
        self.spending.charge(Charge(p.plan_id, scope, cost, now.timestamp()))
        self.report(scope, now)
        return None, {"disruption": cost, "disruption_scope": scope, "confirmed_at": now}

    def release(self, plan_id: str) -> None:
        """A confirmation that was not written: its charge goes (the record, if it says
        otherwise, brings it back)."""
        self.spending.release(plan_id)

    def next_release(self, now: datetime) -> float | None:
        """Seconds since the epoch when the next charge leaves the window."""
        now_ts = now.timestamp()
        self.spending.forget(now_ts)
        return self.spending.next_release(None, now_ts)

    def report(self, scope: str, now: datetime) -> None:
        metrics.DISRUPTION_SPENT.labels(scope).set(self.spending.spent(scope, now.timestamp()))


__all__ = ["Budgeting", "preemptor_priority", "spends"]
