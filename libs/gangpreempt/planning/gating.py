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

from gangpreempt.model.checks import GATE, PLACEHOLDER_LABEL, POD_SET_LABEL
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import Pod

HOSTNAME = "kubernetes.io/hostname"


def gated(pod: Pod) -> bool:
    return GATE in pod.gates and pod.pending


def hostname(state: ClusterState, node: str) -> str:
    """The value of ``kubernetes.io/hostname`` that selects ``node``."""
    n = state.nodes.get(node)
    return n.labels.get(HOSTNAME, node) if n is not None else node


def _taken(pod: Pod, by_hostname: dict[str, str]) -> str | None:
    """The node a pod of the pod set holds or is narrowed to, if any."""
    if pod.node_name:
        return pod.node_name
    chosen = pod.scheduling.node_selector.get(HOSTNAME)
    return by_hostname.get(chosen, chosen) if chosen else None


def planned_assignments(state: ClusterState) -> dict[str, str]:
    """Gated pods of Kueue Workloads (``ns/name``) -> the node each is to be narrowed to.
    (Looked at every sweep: a cluster without such pods costs one pass and nothing more.)"""
    waiting: dict[tuple[str, str], list[Pod]] = {}
    for pod in state.pods.values():
        if pod.kueue_workload and pod.planned_nodes and gated(pod):
            key = (pod.kueue_workload, pod.labels.get(POD_SET_LABEL, ""))
            waiting.setdefault(key, []).append(pod)
    if not waiting:
        return {}
    by_hostname = {n.labels.get(HOSTNAME, n.name): n.name for n in state.nodes.values()}
    free = {key: Counter(pods[0].planned_nodes) for key, pods in waiting.items()}
    for pod in state.pods.values():
        key = (pod.kueue_workload, pod.labels.get(POD_SET_LABEL, ""))
        if key not in free or pod.finished or pod.terminating or gated(pod):
            continue
        if pod.labels.get(PLACEHOLDER_LABEL):
            continue  # holds a node for the gated pods, which are the ones to go there
        if (node := _taken(pod, by_hostname)) is not None:
            free[key][node] -= 1
    out: dict[str, str] = {}
    for key, pods in waiting.items():
        nodes = sorted(n for n, count in free[key].items() for _ in range(max(0, count)))
        for pod, node in zip(sorted(pods, key=lambda p: p.name), nodes, strict=False):
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
