"""A cluster-wide disruption budget (issue 27): at most N victims, or N lost GPU-hours,
evicted per sliding window, for the whole cluster or per cohort tree.

No peer has one: a PodDisruptionBudget bounds one application's pods, Kueue and
kube-scheduler bound nothing across the cluster. Here the operator sets
``GANGPREEMPT_DISRUPTION_BUDGET`` (``"10 victims/1h"``, ``"50 gpu-hours/30m"``), its
scope (``cluster``, or ``cohort``: each cohort tree's ClusterQueues share one budget, a
ClusterQueue without a cohort has its own, node-level preemptors share one), and a
priority above which a preemptor is never held back.

- *What a plan costs.* ``victims``: the objects it evicts (a Kueue Workload, a pod or a
  pod group each count one). ``gpu-hours``: the work they lose, the same cost as
  ``--victim-cost lost-gpu-hours`` (a Kueue Workload's GPUs since its last checkpoint,
  else since its admission; a pod's GPUs since it started), at the time it is decided.
- *What is spent.* Every plan confirmed within the window, at the cost it was confirmed
  with, unless it was dropped (nothing was touched). The cost and the time travel in
  the plan record, so a new quota instance knows what was spent.
- *The rule.* A plan is held back when what its scope spent in the window plus its own
  cost would exceed the budget, unless its preemptor's priority is above the bar. A
  plan that costs more than the whole budget is never allowed below the bar (the budget
  is a bound, not a rate). It is checked twice: before quota asks for victims (a held
  preemptor gets a ``Pending`` message saying why and when the budget frees up, and
  asks again when it does) and when quota confirms a plan (so two plans decided at
  once cannot both take the last of it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from gangpreempt.errors import InvalidInput
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.lostwork import gpus_of
from gangpreempt.quota.snapshot import Snapshot

VICTIMS = "victims"
GPU_HOURS = "gpu-hours"
UNITS = (VICTIMS, GPU_HOURS)
CLUSTER = "cluster"
COHORT = "cohort"
SCOPES = (CLUSTER, COHORT)
NODE_SCOPE = "nodes"  # the scope key of node-level preemptors under ``cohort``

_SPEC = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-z-]+)\s*/\s*(\S+)\s*$")
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)(h|m|s)")
_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0}


@dataclass(frozen=True)
class Budget:
    limit: float
    unit: str  # victims | gpu-hours
    window_s: float
    scope: str = CLUSTER  # cluster | cohort
    bypass_priority: int | None = None  # a preemptor above it is never held back

    def describe(self) -> str:
        return f"{self.limit:g} {self.unit} per {duration_text(self.window_s)}"


def parse_duration(text: str, what: str) -> float:
    """``1h``, ``30m``, ``90s``, ``1h30m`` or a number of seconds."""
    raw = text.strip()
    try:
        seconds = float(raw)
    except ValueError:
        parts = _DURATION.findall(raw)
        if not parts or "".join(n + u for n, u in parts) != raw:
            raise InvalidInput(
                f"{what}: {text!r} is not a duration (like 1h, 30m, 90s or 1h30m)"
            ) from None
        seconds = sum(float(n) * _SECONDS[u] for n, u in parts)
    if seconds <= 0:
        raise InvalidInput(f"{what}: the window must be longer than 0 s, got {text!r}")
    return seconds


def duration_text(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


def parse_budget(
    text: str, scope: str = CLUSTER, bypass: str = "", what: str = "disruption budget"
) -> Budget | None:
    """The budget ``text`` says (``"<N> victims/<window>"`` or ``"<N> gpu-hours/<window>"``),
    None for an empty one; ``InvalidInput`` naming ``what`` when it does not parse."""
    if not text.strip():
        return None
    m = _SPEC.match(text)
    if m is None:
        raise InvalidInput(
            f"{what}: {text!r} is not '<N> victims/<window>' or '<N> gpu-hours/<window>'"
        )
    number, unit, window = m.groups()
    if unit not in UNITS:
        raise InvalidInput(f"{what}: unit {unit!r} is not one of {', '.join(UNITS)}")
    if scope not in SCOPES:
        raise InvalidInput(f"{what} scope: {scope!r} is not one of {', '.join(SCOPES)}")
    bar: int | None = None
    if bypass.strip():
        try:
            bar = int(bypass.strip())
        except ValueError:
            raise InvalidInput(f"{what} bypass: {bypass!r} is not a whole priority") from None
    return Budget(float(number), unit, parse_duration(window, what), scope, bar)


def scope_key(budget: Budget, snapshot: Snapshot, cluster_queue: str) -> str:
    """The budget a plan draws on: the cluster's, or its cohort tree's (the root's name;
    a ClusterQueue without a cohort its own; node-level preemptors, without a
    ClusterQueue, share ``nodes``)."""
    if budget.scope == CLUSTER:
        return CLUSTER
    queue = snapshot.cqs.get(cluster_queue.removeprefix("ClusterQueue/"))
    if queue is None:
        return NODE_SCOPE
    root = queue.node.root()
    return f"{'Cohort' if root.is_cohort else 'ClusterQueue'}/{root.name}"


def pod_gpu_hours(state: ClusterState, pod_ref: str, now_ts: float) -> float:
    pod = state.pods.get(pod_ref.removeprefix("Pod/"))
    if pod is None or pod.start_time is None:
        return 0.0
    gpus = gpus_of(pod.requests)
    return max(0.0, now_ts - pod.start_time.timestamp()) * gpus / 3600


def plan_cost(
    budget: Budget,
    snapshot: Snapshot,
    victims: Iterable[tuple[str, Iterable[str]]],
    now: datetime,
) -> float:
    """What evicting ``victims`` (each an object ref and its pods' refs) costs in the
    budget's unit, now."""
    victims = list(victims)
    if budget.unit == VICTIMS:
        return float(len(victims))
    now_ts = now.timestamp()
    total = 0.0
    for ref, pods in victims:
        kind, _, key = ref.partition("/")
        admitted = snapshot.admitted.get(key) if kind == "Workload" else None
        if admitted is not None:
            total += admitted.lost_work(now_ts) / 3600
        elif kind == "Pod":
            total += pod_gpu_hours(snapshot.state, ref, now_ts)
        else:
            total += sum(pod_gpu_hours(snapshot.state, p, now_ts) for p in pods)
    return total


@dataclass(frozen=True)
class Charge:
    plan_id: str
    scope: str
    cost: float
    at: float  # when it was confirmed (seconds since the epoch)


@dataclass
class Spending:
    """What each scope spent: the charges of the plans confirmed (and not dropped)."""

    budget: Budget
    charges: dict[str, Charge] = field(default_factory=dict)

    def charge(self, c: Charge) -> None:
        self.charges[c.plan_id] = c

    def release(self, plan_id: str) -> None:
        self.charges.pop(plan_id, None)

    def spent(self, scope: str, now_ts: float, but: str = "") -> float:
        since = now_ts - self.budget.window_s
        return sum(
            c.cost
            for c in self.charges.values()
            if c.scope == scope and c.at > since and c.plan_id != but
        )

    def forget(self, now_ts: float) -> None:
        """Drop the charges past the window (nothing they say matters any more)."""
        since = now_ts - self.budget.window_s
        for plan_id in [p for p, c in self.charges.items() if c.at <= since]:
            del self.charges[plan_id]

    def held(
        self, scope: str, cost: float, priority: int, now_ts: float, but: str = ""
    ) -> str | None:
        """Why a plan of ``cost`` for a preemptor of ``priority`` must wait, or None."""
        b = self.budget
        if b.bypass_priority is not None and priority > b.bypass_priority:
            return None
        spent = self.spent(scope, now_ts, but)
        if spent + cost <= b.limit + 1e-9:
            return None
        where = "the cluster" if scope == CLUSTER else scope
        if cost > b.limit + 1e-9:
            return (
                f"disruption budget: the plan costs {cost:.4g} {b.unit}, more than the "
                f"whole budget of {b.describe()} for {where}"
                + (f" (only priority above {b.bypass_priority} may)" if b.bypass_priority else "")
            )
        release = self.next_release(scope, now_ts, but)
        when = f"; it frees up in {release - now_ts:.0f} s" if release is not None else ""
        return (
            f"disruption budget: {spent:.4g} of {b.describe()} spent in {where}, the plan "
            f"needs {cost:.4g}{when}"
        )

    def next_release(self, scope: str | None, now_ts: float, but: str = "") -> float | None:
        """When the oldest charge still in the window (of ``scope``, or any) leaves it."""
        since = now_ts - self.budget.window_s
        ends = [
            c.at + self.budget.window_s
            for c in self.charges.values()
            if c.at > since and c.plan_id != but and (scope is None or c.scope == scope)
        ]
        return min(ends) if ends else None


def spent_by_scope(spending: Spending, now_ts: float) -> Mapping[str, float]:
    """Every scope's spend in the window now (for metrics and ``up``)."""
    since = now_ts - spending.budget.window_s
    out: dict[str, float] = {}
    for c in spending.charges.values():
        if c.at > since:
            out[c.scope] = out.get(c.scope, 0.0) + c.cost
    return out


__all__ = [
    "CLUSTER",
    "COHORT",
    "GPU_HOURS",
    "NODE_SCOPE",
    "VICTIMS",
    "Budget",
    "Charge",
    "Spending",
    "duration_text",
    "parse_budget",
    "parse_duration",
    "plan_cost",
    "scope_key",
    "spent_by_scope",
]
