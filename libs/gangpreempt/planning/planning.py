"""The offline plan: manifests in, decisions out (what ``gangpreempt plan`` prints)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from gangpreempt.errors import InvalidInput
from gangpreempt.model.cluster import ClusterState
from gangpreempt.planning.cycle import admission_pass
from gangpreempt.planning.deciding import decision, evaluate, not_considered, unavailable
from gangpreempt.planning.decisions import Plan
from gangpreempt.planning.nodeplan import NodePlanner, is_node_level, node_decisions, with_nodes
from gangpreempt.quota.pending import PendingWorkload
from gangpreempt.quota.snapshot import Snapshot

SUPPORTED_KINDS = ("Workload", "PodGroup", "Pod")


def rfc3339(dt: datetime) -> str:
    text = dt.isoformat()
    return text.replace("+00:00", "Z")


def parse_object_ref(text: str) -> tuple[str, str, str]:
    """``KIND/NAMESPACE/NAME`` -> its three parts."""
    parts = text.split("/")
    if len(parts) != 3 or not all(parts):
        raise InvalidInput(f"--workload: expected KIND/NAMESPACE/NAME, got {text!r}")
    kind, namespace, name = parts
    if kind not in SUPPORTED_KINDS:
        raise InvalidInput(
            f"--workload: kind {kind!r} is not supported; "
            f"expected one of {', '.join(SUPPORTED_KINDS)}"
        )
    return kind, namespace, name


def plan(
    state: ClusterState,
    now: datetime,
    workload: str | None = None,
    excluded: Iterable[str] = (),
    priority_search: bool = True,
) -> Plan:
    """Decisions for one pending workload (``KIND/NAMESPACE/NAME``, evaluated alone as the
    head of its queue) or, without one, for every pending workload in one admission pass.

    ``excluded`` names workloads (``namespace/name``) already promised to other
    preemptors: they keep their quota but are not candidates."""
    return plan_on(Snapshot.build(state, now), workload, excluded, priority_search)


def plan_on(
    snapshot: Snapshot,
    workload: str | None = None,
    excluded: Iterable[str] = (),
    priority_search: bool = True,
) -> Plan:
    """``plan`` on an existing snapshot (of ``snapshot.state`` at ``snapshot.now``), which
    is left exactly as it was: what the services call on their live ledgers."""
    with snapshot.scratch():
        return _plan(snapshot, workload, excluded, priority_search)


def promised_refs(excluded: Iterable[str]) -> list[str]:
    """Victims promised elsewhere, as unit refs: a Kueue Workload's ``namespace/name``
    becomes ``Workload/namespace/name``; node-level refs (``Pod/...``) stay."""
    return [key if key.count("/") == 2 else f"Workload/{key}" for key in excluded]


def _plan(
    snapshot: Snapshot, workload: str | None, excluded: Iterable[str], priority_search: bool
) -> Plan:
    state, now = snapshot.state, snapshot.now
    excluded = list(excluded)
    for key in excluded:
        snapshot.pin(key)
    if workload is None:
        decisions = admission_pass(snapshot)
        if state.pods:
            planner = NodePlanner(state, now, priority_search)
            planner.promised.update(promised_refs(excluded))
            decisions = with_nodes(planner, decisions) + node_decisions(planner)
        return Plan(now=rfc3339(now), decisions=decisions)
    _kind, namespace, name = parse_object_ref(workload)
    if is_node_level(state, workload):
        planner = NodePlanner(state, now, priority_search)
        return Plan(now=rfc3339(now), decisions=[planner.decide(planner.resolve(workload))])
    wl = state.workloads.get(f"{namespace}/{name}")
    if wl is None:
        raise InvalidInput(f"--workload: Workload {namespace}/{name} not found in the manifests")
    if not wl.is_pending:
        where = f" in ClusterQueue {wl.admission.cluster_queue}" if wl.admission else ""
        state_text = "holds quota" + where if wl.holds_quota else "is finished or inactive"
        raise InvalidInput(
            f"--workload: Workload {namespace}/{name} is not pending (it {state_text})"
        )
    pending = PendingWorkload.of(state, wl, now)
    reason = unavailable(snapshot, pending)
    if reason is not None:
        return Plan(now=rfc3339(now), decisions=[not_considered(pending, reason)])
    d = decision(evaluate(snapshot, pending))
    if state.pods:
        planner = NodePlanner(state, now, priority_search)
        planner.promised.update(promised_refs(excluded))
        d = planner.compose(d)
    return Plan(now=rfc3339(now), decisions=[d])


def state_warnings(state: ClusterState) -> list[str]:
    """What in ``state`` will be ignored (e.g. usage admitted to an undefined queue)."""
    return [
        f"{wl.ref} is admitted to ClusterQueue {wl.admission.cluster_queue}, which is not "
        "defined: its usage is ignored"
        for wl in sorted(state.workloads.values(), key=lambda w: w.key)
        if wl.holds_quota
        and wl.admission
        and wl.admission.cluster_queue not in state.cluster_queues
    ]


__all__ = ["parse_object_ref", "plan", "plan_on", "rfc3339", "state_warnings"]
