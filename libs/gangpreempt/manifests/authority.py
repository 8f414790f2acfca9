"""Which workloads gangpreempt is the preemption authority for, joined once every object
is read (``model.checks`` says what a managed ClusterQueue is).

For a managed ClusterQueue, Kueue's own ``spec.preemption`` must say ``Never``
everywhere, so that Kueue's scheduler preempts nothing for its workloads, and the policy
gangpreempt applies is the one in the queue's ``gangpreempt.io/preemption`` annotation
(none: gangpreempt places, and preempts nothing, as Kueue's ``Never`` would). A managed
queue whose stanza would preempt too has two authorities: gangpreempt preempts nothing
for it and says why (``ClusterQueue.conflict``), rather than race Kueue."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import msgspec

from gangpreempt.manifests.deriving import synthesize_pods
from gangpreempt.model.checks import (
    PLACEHOLDER_LABEL,
    POD_SET_LABEL,
    PREEMPTION_ANNOTATION,
    READY,
)
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import Pod
from gangpreempt.model.queues import NEVER, ClusterQueue, Preemption
from gangpreempt.model.workloads import Workload


def kueue_stays_out(p: Preemption) -> bool:
    """Kueue's stanza lets Kueue's scheduler preempt nothing."""
    return (
        p.within_cluster_queue == NEVER
        and p.reclaim_within_cohort == NEVER
        and p.borrow_within_cohort == NEVER
    )


def _managed(cq: ClusterQueue, check: str, warnings: list[str]) -> ClusterQueue:
    policy = cq.annotated_preemption if cq.annotated_preemption is not None else Preemption()
    conflict = ""
    if not kueue_stays_out(cq.preemption):
        conflict = (
            f"spec.preemption lets Kueue preempt for the queue while its AdmissionCheck "
            f"{check!r} makes gangpreempt the authority: gangpreempt preempts nothing for "
            "it until the stanza says Never everywhere (keep the policy in the "
            f"{PREEMPTION_ANNOTATION} annotation)"
        )
        warnings.append(f"ClusterQueue {cq.name}: {conflict}")
        policy = Preemption()
    return msgspec.structs.replace(cq, managed_by=check, conflict=conflict, preemption=policy)


def join_checks(state: ClusterState, warnings: list[str]) -> None:
    """Mark the managed ClusterQueues (their policy becomes gangpreempt's) and the
    Workloads that are gangpreempt's to place (``Workload.placement_check``); a pending
    one whose pods do not exist yet gets pending pods from its pod sets (when there are
    nodes), as a submitted Job does in ``plan``."""
    ours = {name for name, ac in state.admission_checks.items() if ac.ours}
    queues = state.cluster_queues
    for name, cq in sorted(queues.items()):
        check = next((c for c in cq.admission_checks if c in ours), "")
        if check:
            queues[name] = _managed(cq, check, warnings)
        elif cq.annotated_preemption is not None:
            warnings.append(
                f"ClusterQueue {name}: metadata.annotations.{PREEMPTION_ANNOTATION} is ignored: "
                "the queue lists none of gangpreempt's AdmissionChecks, so Kueue's "
                "spec.preemption decides"
            )
    if not ours:
        return
    pods_of: dict[str, list[Pod]] = {}  # Kueue Workload -> its pods, one pass over them
    for pod in state.pods.values():
        if pod.kueue_workload:
            pods_of.setdefault(pod.kueue_workload, []).append(pod)
    for key, wl in list(state.workloads.items()):
        queue = state.cluster_queue_of(wl)
        managing = queues[queue].managed_by if queue in queues else ""
        if not managing:
            continue
        if wl.placement_check != managing:
            wl = state.workloads[key] = msgspec.structs.replace(wl, placement_check=managing)
        if state.nodes and wl.is_pending and key not in pods_of:
            # Kueue creates its pods only once it admits: the gang is placed on the nodes
            # as the pods its pod sets describe, before the check may say Ready.
            synthesize_pods(state, wl.name, wl)
        elif state.nodes and wl.holds_quota and not wl.is_evicting:
            hold_planned_nodes(state, wl, pods_of.get(key, ()))


def hold_planned_nodes(state: ClusterState, wl: Workload, pods: Iterable[Pod]) -> None:
    """A Workload whose check said Ready holds its planned nodes until its pods are
    bound there: Kueue creates the pods only once it admits, and they wait gated until
    the actuator narrows them, so for a while the nodes look free. Each planned node not
    yet taken by one of its bound pods gets a placeholder pod on it (found against the
    real Kueue: a second Workload was placed on a node the first one's check had named,
    and the first one's pod never ran). ``pods``: the workload's pods."""
    mine = wl.check(wl.placement_check)
    if mine is None or mine.state != READY or not mine.planned:
        return
    single = len(wl.pod_sets) == 1
    bound: dict[str, Counter[str]] = {}
    for pod in pods:
        if pod.running and not pod.terminating:
            pod_set = pod.labels.get(POD_SET_LABEL) or (wl.pod_sets[0].name if single else "")
            bound.setdefault(pod_set, Counter())[pod.node_name] += 1
    priority = state.priority_of(wl)
    for ps in wl.pod_sets:
        planned = mine.planned.get(ps.name, ())
        missing = Counter(planned) - bound.get(ps.name, Counter())
        for i, node in enumerate(sorted(missing.elements())):
            pod = Pod(
                namespace=wl.namespace,
                name=f"{wl.name}-{ps.name}-placeholder-{i}",
                requests=dict(ps.requests),
                labels={PLACEHOLDER_LABEL: "true", POD_SET_LABEL: ps.name},
                node_name=node,
                priority=priority,
                kueue_workload=wl.key,
            )
            state.pods[pod.key] = pod


__all__ = ["hold_planned_nodes", "join_checks", "kueue_stays_out"]
