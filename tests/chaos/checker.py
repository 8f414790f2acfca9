"""The invariants a chaos run must keep, checked on what the run left behind: the
decisions stream, every revision of every plan record, the sim's eviction journal and
the lease acquisitions the actuators logged.

1. no victim is evicted twice (the same object and uid, by any plans);
2. no eviction without a durable confirmation (a ``confirmed`` revision of its plan,
   and an ``actuating`` one under its token, stored before the eviction);
3. no eviction for a plan that was durably dropped;
4. no eviction under a stale token (a newer token acquired before it, or one that is not
   the lease's when the sim checked);
5. no ``PlanDropped`` for a plan that has a ``VictimActuated``;
6. no gang with two actuated plans (a plan duplicated after a restart);
7. every gang running within the bound after the faults stop;
8. no quota move of a record under an older quota token than the record already
   carries (a stale lease holder's write is refused), and confirmations, in the order
   the bucket stored them, under quota tokens that never go down (two quota instances
   never both confirm);
9. no preemptor with two plans in flight at once (confirmed, and neither dropped nor
   closed before the other was confirmed);
10. every request answered once by the victims replicas (unless the run duplicated
    events on purpose).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field

from gangpreempt import events
from gangpreempt.planning.records import (
    ACTUATING,
    CLOSED,
    CONFIRMED,
    DROPPED,
    REJECTED,
    PlanRecord,
)
from services.ingest.journal import EvictionEntry


@dataclass
class Revision:
    at: float  # wall clock, seconds (the stream's timestamp)
    record: PlanRecord
    seq: int = 0  # the bucket stream's sequence: the order every revision was stored in


@dataclass
class Evidence:
    decisions: list[events.Event] = field(default_factory=list)  # stream order
    revisions: dict[str, list[Revision]] = field(default_factory=dict)  # plan -> in order
    evictions: list[EvictionEntry] = field(default_factory=list)
    acquisitions: list[tuple[float, int]] = field(default_factory=list)  # (at, token)
    quota_acquisitions: list[tuple[float, int]] = field(default_factory=list)
    settle_s: float | None = None  # faults end -> every gang running (None: never)
    duplicated: bool = False  # the run published copies of events on purpose
    bound_s: float = 0.0


def violations(ev: Evidence) -> list[str]:
    out: list[str] = []
    seen: dict[tuple[str, str], EvictionEntry] = {}
    for e in ev.evictions:
        key = (e.ref, e.uid)
        first = seen.get(key)
        if first is not None:
            out.append(
                f"victim {e.ref} (uid {e.uid}) evicted twice: plans {first.plan_id}, {e.plan_id}"
            )
        seen.setdefault(key, e)
        history = ev.revisions.get(e.plan_id, [])
        confirmed = [r for r in history if r.record.state == CONFIRMED and r.at <= e.at]
        actuating = [
            r
            for r in history
            if r.record.state == ACTUATING
            and r.record.fencing_token == e.fencing_token
            and r.at <= e.at
        ]
        if not confirmed or not actuating:
            out.append(
                f"eviction of {e.ref} for plan {e.plan_id} without a durable confirmation "
                f"(confirmed: {bool(confirmed)}, actuating under token {e.fencing_token}: "
                f"{bool(actuating)})"
            )
        if any(r.record.state == DROPPED for r in history):
            out.append(f"eviction of {e.ref} for plan {e.plan_id}, which was dropped")
        newer = [t for at, t in ev.acquisitions if t > e.fencing_token and at < e.at]
        if newer or e.lease_token != e.fencing_token:
            out.append(
                f"eviction of {e.ref} under stale token {e.fencing_token} "
                f"(lease {e.lease_token}, newer tokens {sorted(newer)})"
            )
    actuated_victims = {d.plan_id for d in ev.decisions if isinstance(d, events.VictimActuated)}
    for d in ev.decisions:
        if isinstance(d, events.PlanDropped) and d.plan_id in actuated_victims:
            out.append(f"PlanDropped for plan {d.plan_id}, which has a VictimActuated")
    actuated: dict[str, set[str]] = defaultdict(set)
    for d in ev.decisions:
        if isinstance(d, events.PlanActuated):
            actuated[d.preemptor].add(d.plan_id)
    for preemptor, plans in sorted(actuated.items()):
        if len(plans) > 1:
            out.append(f"{preemptor} has {len(plans)} actuated plans: {sorted(plans)}")
    if not ev.duplicated:
        out += answered_more_than_once(ev.decisions)
    out += quota_fencing(ev.revisions)
    out += plans_in_flight_at_once(ev.revisions)
    if ev.settle_s is None:
        out.append("not every gang was running at the end")
    elif ev.settle_s > ev.bound_s:
        out.append(f"settled {ev.settle_s:.1f}s after the faults stopped (bound {ev.bound_s}s)")
    return out


def answered_more_than_once(decisions: list[events.Event]) -> list[str]:
    answers: dict[str, list[str]] = defaultdict(list)
    for d in decisions:
        if isinstance(d, events.PlanProposed | events.PreemptionInfeasible):
            answers[d.request_id].append(events.event_type(d))
    return [
        f"request {request_id} answered {len(kinds)} times: {', '.join(kinds)}"
        for request_id, kinds in sorted(answers.items())
        if len(kinds) > 1
    ]


def quota_fencing(revisions: dict[str, list[Revision]]) -> list[str]:
    out = []
    confirms = []
    for plan_id, history in revisions.items():
        highest = 0
        for r in history:
            by_quota = r.record.writer.startswith("quota/")
            if by_quota and r.record.quota_token < highest:
                out.append(
                    f"plan {plan_id} moved to {r.record.state} under quota token "
                    f"{r.record.quota_token} after quota token {highest}"
                )
            highest = max(highest, r.record.quota_token)
        first = next((r for r in history if r.record.state == CONFIRMED), None)
        if first is not None:
            confirms.append((first.seq, first.record.quota_token, plan_id))
    confirms.sort()
    for (_, before, earlier), (_, token, plan_id) in itertools.pairwise(confirms):
        if token < before:
            out.append(
                f"plan {plan_id} confirmed under quota token {token} after plan {earlier} "
                f"was confirmed under {before}: two quota instances confirmed"
            )
    return out


def plans_in_flight_at_once(revisions: dict[str, list[Revision]]) -> list[str]:
    """Each confirmed plan is in flight from its confirmation to its drop or close (or the
    end of the run); two plans of one preemptor must not overlap."""
    spans: dict[str, list[tuple[int, float, str]]] = defaultdict(list)
    for plan_id, history in revisions.items():
        start = next((r.seq for r in history if r.record.state == CONFIRMED), None)
        if start is None:
            continue
        end = next(
            (r.seq for r in history if r.record.state in (DROPPED, CLOSED, REJECTED)),
            float("inf"),
        )
        spans[history[0].record.preemptor].append((start, end, plan_id))
    out = []
    for preemptor, plans in sorted(spans.items()):
        plans.sort()
        for (_, end, first), (start, _, second) in itertools.pairwise(plans):
            if start < end:
                out.append(f"{preemptor} had plans {first} and {second} in flight at once")
    return out


__all__ = [
    "Evidence",
    "Revision",
    "answered_more_than_once",
    "plans_in_flight_at_once",
    "quota_fencing",
    "violations",
]
