"""Whether the victims of a proposed plan may be taken at all, derived from the cluster
state alone, independently of the search that chose them: a compromised victims
service, or a forged proposal, must not get a victim confirmed that no peer rule could
have chosen. quota checks it before it confirms (``services/quota``), beside the checks
that the victims are still there and the preemptor then fits; the actuator checks it
again on its own replica before its first write.

The rules here are the ones every peer shares, so that no legitimate plan is refused:

- never a victim in a protected namespace (``GANGPREEMPT_PROTECTED_NAMESPACES``,
  ``kube-system`` and gangpreempt's own by default);
- never a victim of system-critical priority (>= 2,000,000,000: the priority of
  ``system-cluster-critical`` and ``system-node-critical``);
- never a pod labelled ``quota.scheduling.koordinator.sh/preemptible=false``;
- on the nodes (a pod, a pod group, a Workload's pods taken at node level): a victim with
  no pod on the plan's nodes frees nothing there (kube-scheduler takes victims on the
  node it nominates; a gang's unit has at least one pod there);
- a Kueue victim taken for quota (``inflight.rejection``): in the preemptor's
  ClusterQueue or its cohort tree (Kueue never preempts outside it).

Not yet re-derived here (the search's own rules still decide them): the victim's
priority against the preemptor's and the policy that allows otherwise."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from gangpreempt import events
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import PREEMPTIBLE_LABEL, Pod

SYSTEM_CRITICAL = 2_000_000_000
SYSTEM_CLASSES = ("system-cluster-critical", "system-node-critical")  # built into the API
PROTECTED_NAMESPACES = ("kube-system", "gangpreempt")
WORKLOAD = "Workload/"


def _critical(state: ClusterState, pod: Pod) -> bool:
    """Of system-critical priority: its own, or its PriorityClass's."""
    if pod.priority is not None:
        return pod.priority >= SYSTEM_CRITICAL
    if pod.priority_class_name in SYSTEM_CLASSES:
        return True
    pc = state.priority_classes.get(pod.priority_class_name)
    return pc is not None and pc.value >= SYSTEM_CRITICAL


def _namespace(ref: str) -> str:
    """The namespace of ``Kind/namespace/name`` (empty for a cluster-scoped ref)."""
    parts = ref.split("/")
    return parts[1] if len(parts) == 3 else ""


def _pods(state: ClusterState, v: events.PlannedVictim) -> list[Pod]:
    refs = v.pods or ((v.object,) if v.object.startswith("Pod/") else ())
    return [pod for ref in refs if (pod := state.pods.get(ref.removeprefix("Pod/"))) is not None]


def cohort_root(state: ClusterState, cq: str) -> str:
    """The root of ``cq``'s cohort tree (the ClusterQueue itself without a cohort); a
    loop in the parents ends the walk where it closes."""
    queue = state.cluster_queues.get(cq)
    node = queue.cohort if queue is not None else None
    if node is None:
        return f"ClusterQueue/{cq}"
    seen = {node}
    while (parent := getattr(state.cohorts.get(node), "parent", None)) and parent not in seen:
        seen.add(parent)
        node = parent
    return f"Cohort/{node}"


def outside_cohort(
    state: ClusterState, cluster_queue: str, victims: Sequence[events.PlannedVictim]
) -> str | None:
    """A Kueue victim outside the preemptor's ClusterQueue and cohort tree, or None."""
    root = cohort_root(state, cluster_queue)
    for v in victims:
        if not v.object.startswith(WORKLOAD):
            continue
        wl = state.workloads.get(v.object.removeprefix(WORKLOAD))
        theirs = state.cluster_queue_of(wl) if wl is not None else None
        if theirs is not None and theirs != cluster_queue and cohort_root(state, theirs) != root:
            return (
                f"victim {v.object} is in ClusterQueue {theirs}, outside "
                f"{cluster_queue}'s cohort tree"
            )
    return None


def illegitimate(
    state: ClusterState,
    victims: Sequence[events.PlannedVictim],
    placement: Mapping[str, str],
    protected: Collection[str] = PROTECTED_NAMESPACES,
    node_level: bool = True,
) -> str | None:
    """Why one of ``victims`` may not be taken whatever the rule, or None. ``placement``:
    the plan's pods and their nodes (empty for a plan at quota level only).
    ``node_level``: every victim was taken on the nodes; else (a Kueue plan) only its
    pods and pod groups were, its Workloads for quota, wherever their pods run."""
    nodes = set(placement.values())
    for v in victims:
        ns = _namespace(v.object)
        if ns in protected:
            return f"victim {v.object} is in protected namespace {ns}"
        pods = _pods(state, v)
        workload = v.object.startswith(WORKLOAD)
        if workload:
            wl = state.workloads.get(v.object.removeprefix(WORKLOAD))
            if wl is not None and state.priority_of(wl) >= SYSTEM_CRITICAL:
                return f"victim {v.object} has system-critical priority {state.priority_of(wl)}"
        for pod in pods:
            if pod.namespace in protected:
                return f"victim pod {pod.ref} is in protected namespace {pod.namespace}"
            if _critical(state, pod):
                return f"victim pod {pod.ref} has system-critical priority"
            if not workload and pod.labels.get(PREEMPTIBLE_LABEL) == "false":
                return f"victim pod {pod.ref} is labelled {PREEMPTIBLE_LABEL}=false"
        on_nodes = node_level or not workload
        if nodes and pods and on_nodes and not {pod.node_name for pod in pods} & nodes:
            where = ", ".join(sorted(nodes)[:3])
            return f"victim {v.object} has no pod on the plan's nodes ({where})"
    return None


def protected_namespaces(text: str) -> tuple[str, ...]:
    """The setting's comma-separated namespaces."""
    return tuple(ns.strip() for ns in text.split(",") if ns.strip())


__all__ = [
    "PROTECTED_NAMESPACES",
    "SYSTEM_CRITICAL",
    "cohort_root",
    "illegitimate",
    "outside_cohort",
    "protected_namespaces",
]
