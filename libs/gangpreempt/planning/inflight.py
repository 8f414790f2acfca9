"""Plans in flight, as the quota ledger accounts for them, and the confirmation check.

A confirmed plan's victims are leaving: their quota is held for the preemptor from the
moment of confirmation until the preemptor is admitted, so no one else takes it while
the victims terminate (Koordinator's in-flight cache; KEP-5710's "no new preemption while
one is in flight")."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from gangpreempt.model.cluster import ClusterState
from gangpreempt.quota.assignment import pod_set_requests
from gangpreempt.quota.snapshot import Snapshot
from gangpreempt.quota.tree import Quantities, cq_available


class PlanInFlight(msgspec.Struct, frozen=True):
    plan_id: str
    preemptor: str  # namespace/name
    cluster_queue: str
    flavors: dict[str, dict[str, str]]  # pod set -> resource -> flavor
    victims: tuple[str, ...]  # namespace/name


def usage_of(state: ClusterState, snapshot: Snapshot, plan: PlanInFlight) -> Quantities:
    """The preemptor's usage once admitted with the plan's flavors."""
    wl = state.workloads.get(plan.preemptor)
    cq = snapshot.cqs.get(plan.cluster_queue)
    usage: Quantities = {}
    if wl is None or cq is None:
        return usage
    for ps in wl.pod_sets:
        requests = pod_set_requests(ps, cq, wl.active_count(ps))
        for res, flavor in plan.flavors.get(ps.name, {}).items():
            fr = (flavor, res)
            usage[fr] = usage.get(fr, 0) + requests.get(res, 0)
    return usage


def rejection(
    snapshot: Snapshot,
    plan: PlanInFlight,
    preemptor_uid: str,
    victim_uids: Mapping[str, str],
    claimed: Mapping[str, str],
) -> str | None:
    """Why ``plan`` must not be confirmed, or None. ``snapshot`` is the live ledger with the
    plans already in flight held in it; ``claimed`` maps their victims to their plans. The
    snapshot is left as it was."""
    with snapshot.scratch():
        state = snapshot.state
        wl = state.workloads.get(plan.preemptor)
        if wl is None:
            return f"preemptor {plan.preemptor} no longer exists"
        if preemptor_uid and wl.uid and wl.uid != preemptor_uid:
            return f"preemptor {plan.preemptor} was replaced (uid {wl.uid})"
        if not wl.is_pending:
            return f"preemptor {plan.preemptor} is no longer pending"
        for victim in plan.victims:
            v = state.workloads.get(victim)
            if v is None:
                return f"victim {victim} no longer exists"
            uid = victim_uids.get(victim, "")
            if uid and v.uid and v.uid != uid:
                return f"victim {victim} was replaced (uid {v.uid})"
            if not v.holds_quota:
                return f"victim {victim} no longer holds quota"
            if claimed.get(victim, plan.plan_id) != plan.plan_id:
                return f"victim {victim} is already claimed by plan {claimed[victim]}"
        if plan.cluster_queue not in snapshot.cqs:
            return f"ClusterQueue {plan.cluster_queue} not found"
        for victim in plan.victims:
            aw = snapshot.admitted.get(victim)
            if aw is not None:
                snapshot.release(aw)
        node = snapshot.cqs[plan.cluster_queue].node
        for fr, amount in usage_of(state, snapshot, plan).items():
            if amount > cq_available(node, fr):
                return (
                    f"{plan.preemptor} would not fit in ClusterQueue {plan.cluster_queue} even "
                    f"after its victims leave ({fr[1]} in flavor {fr[0]})"
                )
        return None


__all__ = ["PlanInFlight", "rejection", "usage_of"]
