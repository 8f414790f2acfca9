"""The offline plan: manifests in, decisions out (what ``gangpreempt plan`` prints)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import msgspec

from gangpreempt.errors import InvalidInput
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.workloads import PRIORITY_BOOST_ANNOTATION
from gangpreempt.planning.cycle import admission_pass
from gangpreempt.planning.deciding import decision, evaluate, not_considered, unavailable
from gangpreempt.planning.decisions import Decision, Plan
from gangpreempt.planning.nodeplan import NodePlanner, is_node_level, node_decisions
from gangpreempt.planning.nodeside import PlannerSide
from gangpreempt.planning.quotacycle import borrowing_queues, cycle_decisions
from gangpreempt.quota.pending import PendingWorkload
from gangpreempt.quota.snapshot import Snapshot
from gangpreempt.quota.tree import Node

# What --workload names: a Kueue Workload, a node-level gang or pod, or an object
# Kueue's integrations make a Workload for (that Workload is evaluated).
SUPPORTED_KINDS = ("Workload", "PodGroup", "Pod", "Job", "JobSet", "PyTorchJob")
SUBMITTED_KINDS = ("Job", "JobSet", "PyTorchJob")
NO_NODES = (
    "no Nodes in the input: give the cluster's Nodes (kubectl get nodes -o yaml) to "
    "decide it on nodes"
)


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
    rescheduling: bool = False,
    victim_cost: str = "",
) -> Plan:
    """Decisions for one pending workload (``KIND/NAMESPACE/NAME``, evaluated alone as the
    head of its queue) or, without one, for every pending workload in one admission pass.

    ``excluded`` names workloads (``namespace/name``) already promised to other
    preemptors: they keep their quota but are not candidates. ``rescheduling``: a gang's
    victims are reprieved as kube-scheduler 1.36 does (scheduled again at each reprieve).
    ``victim_cost`` ``lost-gpu-hours``: among the victims the rules allow, the set that
    loses least work, at quota level and on the nodes (``preemption.cheapest``)."""
    snapshot = Snapshot.build(state, now)
    snapshot.victim_cost = victim_cost
    snapshot.suggest_moves = True
    return plan_on(snapshot, workload, excluded, priority_search, rescheduling)


def plan_on(
    snapshot: Snapshot,
    workload: str | None = None,
    excluded: Iterable[str] = (),
    priority_search: bool = True,
    rescheduling: bool = False,
) -> Plan:
    """``plan`` on an existing snapshot (of ``snapshot.state`` at ``snapshot.now``), which
    is left exactly as it was: what the services call on their live ledgers."""
    with snapshot.scratch():
        return _plan(snapshot, workload, excluded, priority_search, rescheduling)


def promised_refs(excluded: Iterable[str]) -> list[str]:
    """Victims promised elsewhere, as unit refs: a Kueue Workload's ``namespace/name``
    becomes ``Workload/namespace/name``; node-level refs (``Pod/...``) stay."""
    return [key if key.count("/") == 2 else f"Workload/{key}" for key in excluded]


def _plan(
    snapshot: Snapshot,
    workload: str | None,
    excluded: Iterable[str],
    priority_search: bool,
    rescheduling: bool,
) -> Plan:
    state, now = snapshot.state, snapshot.now

    def planner_for() -> NodePlanner:
        planner = NodePlanner(state, now, priority_search)
        planner.rescheduling = rescheduling
        planner.victim_cost = snapshot.victim_cost
        planner.promised.update(promised_refs(excluded))
        return planner

    excluded = list(excluded)
    workload = _submitted_workload(state, workload) if workload is not None else None
    kind, _, key = (workload or "").partition("/")
    wl = state.workloads.get(key) if kind == "Workload" else None
    own_tree = _tree_of(snapshot, state.cluster_queue_of(wl)) if wl is not None else None
    # Only a workload in the preemptor's cohort tree can be a candidate: pinning the
    # others (a burst's requests name every victim in flight) would change nothing. The
    # tree's ClusterQueues are named once, so a request naming many victims in flight
    # costs a lookup per victim.
    own_cqs = (
        None
        if own_tree is None
        else {n.name for n in own_tree.subtree_cluster_queues()}
        if own_tree.is_cohort
        else {own_tree.name}
    )
    admitted = snapshot.admitted
    for key in excluded:
        if own_cqs is None:
            snapshot.pin(key)
            continue
        aw = admitted.get(key)
        if aw is not None and aw.cq in own_cqs:
            snapshot.pin(key)
    if workload is None:
        if state.pods and state.nodes:
            planner = planner_for()
            decisions = cycle_decisions(snapshot, frozenset(), planner)
            decisions += node_decisions(planner)
        else:
            decisions = admission_pass(snapshot)
            if state.pods:
                decisions += _no_nodes(node_decisions(planner_for()))
        return Plan(now=rfc3339(now), decisions=_owned(state, decisions))
    _kind, namespace, name = parse_object_ref(workload)
    if is_node_level(state, workload):
        planner = planner_for()
        decided = [planner.decide(planner.resolve(workload))]
        return Plan(now=rfc3339(now), decisions=decided if state.nodes else _no_nodes(decided))
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
        return Plan(now=rfc3339(now), decisions=_owned(state, [not_considered(pending, reason)]))
    composer = planner_for() if state.pods and state.nodes else None
    if composer is not None:
        composer.borrowing_queues = borrowing_queues(snapshot)
        if composer.cost() is not None:
            snapshot.node_side = PlannerSide(composer)
    try:
        d = decision(evaluate(snapshot, pending))
    finally:
        snapshot.node_side = None
    if composer is not None:
        d = composer.compose(d)
    return Plan(now=rfc3339(now), decisions=_owned(state, [d]))


def _tree_of(snapshot: Snapshot, cq: str | None) -> Node | None:
    """The root of ``cq``'s cohort tree (the ClusterQueue's own node without a cohort);
    None when the ClusterQueue is unknown."""
    queue = snapshot.cqs.get(cq) if cq is not None else None
    return queue.node.root() if queue is not None else None


def _submitted_workload(state: ClusterState, ref: str) -> str:
    """``--workload`` naming what a user submitted (a Job, JobSet, PyTorchJob, or a Pod
    Kueue manages) means the Workload Kueue makes for it; other refs stay."""
    kind, namespace, name = parse_object_ref(ref)
    if kind == "Pod":
        pod = state.pods.get(f"{namespace}/{name}")
        if pod is not None and pod.kueue_workload in state.workloads:
            return f"Workload/{pod.kueue_workload}"
        return ref
    if kind not in SUBMITTED_KINDS:
        return ref
    owned = sorted(
        (wl for wl in state.workloads.values() if wl.owner == ref),
        key=lambda wl: (not wl.is_pending, wl.key),
    )
    if not owned:
        raise InvalidInput(
            f"--workload: {kind} {namespace}/{name} not found in the manifests (or it has no "
            "kueue.x-k8s.io/queue-name label, or it was left out: see the errors above)"
        )
    return owned[0].ref


def _owned(state: ClusterState, decisions: list[Decision]) -> list[Decision]:
    """Each decision about a Workload derived from a submitted object names that object."""
    out = []
    for d in decisions:
        wl = (
            state.workloads.get(d.preemptor.removeprefix("Workload/"))
            if d.preemptor.startswith("Workload/")
            else None
        )
        out.append(msgspec.structs.replace(d, owner=wl.owner) if wl and wl.owner else d)
    return out


def _no_nodes(decisions: list[Decision]) -> list[Decision]:
    """Node-level decisions on an input without Nodes say so (Kueue's Workloads were
    decided on quota alone, as Kueue does without topology-aware scheduling)."""
    return [msgspec.structs.replace(d, message=NO_NODES) for d in decisions]


def state_warnings(state: ClusterState) -> list[str]:
    """What in ``state`` will be ignored (e.g. usage admitted to an undefined queue, a
    priority boost that does not parse while Kueue's PriorityBoost gate is on)."""
    workloads = sorted(state.workloads.values(), key=lambda w: w.key)
    boosting = state.kueue_configuration().priority_boost
    return [
        f"{wl.ref} is admitted to ClusterQueue {wl.admission.cluster_queue}, which is not "
        "defined: its usage is ignored"
        for wl in workloads
        if wl.holds_quota
        and wl.admission
        and wl.admission.cluster_queue not in state.cluster_queues
    ] + [
        f"{wl.ref}: metadata.annotations.{PRIORITY_BOOST_ANNOTATION} "
        f"{wl.priority_boost_invalid!r} is not a 32-bit integer: Kueue's webhook rejects "
        "it while the PriorityBoost gate is on; its base priority is used"
        for wl in workloads
        if boosting and wl.priority_boost_invalid is not None
    ]


__all__ = ["parse_object_ref", "plan", "plan_on", "rfc3339", "state_warnings"]
