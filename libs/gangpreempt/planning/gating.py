"""Which of gangpreempt's gated pods go where (``docs/kubernetes.md``: pods land on the
planned nodes). A managed pod carries the scheduling gate ``model.checks.GATE`` from
creation, so kube-scheduler neither places it nor preempts for it; once its placement
is decided, it is narrowed to its planned node (a ``kubernetes.io/hostname``
nodeSelector, which the API allows adding to a gated pod) and the gate is removed in
the same write, so kube-scheduler binds it there.

- A Kueue Workload's pods carry their pod set's planned nodes (``planned_nodes``, put on
  them by the admission check's podSetUpdates): each pod set's nodes, less those its
  other pods already took (bound there, or narrowed there), go to its gated pods in name
  order.
- A pod gang's or lone pod's placement comes with quota's ``Admitted`` (``placed``).
- A gated pod that nothing places within the bound is released unchanged (fail-open),
  or kept and reported (fail-closed): ``overdue``.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from gangpreempt.model.checks import GATE
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import Pod
from gangpreempt.planning.checking import POD_SET_LABEL

HOSTNAME = "kubernetes.io/hostname"


def gated(pod: Pod) -> bool:
    return GATE in pod.gates and pod.pending


def hostname(state: ClusterState, node: str) -> str:
    """The value of ``kubernetes.io/hostname`` that selects ``node``."""
    n = state.nodes.get(node)
    return n.labels.get(HOSTNAME, node) if n is not None else node


def _taken(state: ClusterState, pod: Pod, by_hostname: dict[str, str]) -> str | None:
    """The node a pod of the pod set holds or is narrowed to, if any."""
    if pod.node_name:
        return pod.node_name
    chosen = pod.scheduling.node_selector.get(HOSTNAME)
    return by_hostname.get(chosen, chosen) if chosen else None


def planned_assignments(state: ClusterState) -> dict[str, str]:
    """Gated pods of Kueue Workloads (``ns/name``) -> the node each is to be narrowed to."""
    sets: dict[tuple[str, str], list[Pod]] = {}
    for pod in state.pods.values():
        if pod.kueue_workload and not pod.finished and not pod.terminating:
            sets.setdefault((pod.kueue_workload, pod.labels.get(POD_SET_LABEL, "")), []).append(pod)
    by_hostname = {n.labels.get(HOSTNAME, n.name): n.name for n in state.nodes.values()}
    out: dict[str, str] = {}
    for pods in sets.values():
        waiting = sorted((p for p in pods if gated(p) and p.planned_nodes), key=lambda p: p.name)
        if not waiting:
            continue
        free = Counter(waiting[0].planned_nodes)
        for pod in pods:
            if not gated(pod) and (node := _taken(state, pod, by_hostname)) is not None:
                free[node] -= 1
        nodes = sorted(node for node, count in free.items() for _ in range(max(0, count)))
        for pod, node in zip(waiting, nodes, strict=False):
            out[pod.key] = node
    return out


def placed(state: ClusterState, placement: dict[str, str]) -> dict[str, str]:
    """Of an admission's placement (``Pod/ns/name`` -> node), the gated pods -> node."""
    out: dict[str, str] = {}
    for ref, node in placement.items():
        pod = state.pods.get(ref.removeprefix("Pod/"))
        if pod is not None and gated(pod):
            out[pod.key] = node
    return out


def overdue(state: ClusterState, now: datetime, timeout: float) -> list[str]:
    """Gated pods (``ns/name``) created more than ``timeout`` seconds ago."""
    return sorted(
        p.key
        for p in state.pods.values()
        if gated(p) and p.created is not None and (now - p.created).total_seconds() > timeout
    )


__all__ = ["HOSTNAME", "gated", "hostname", "overdue", "placed", "planned_assignments"]
