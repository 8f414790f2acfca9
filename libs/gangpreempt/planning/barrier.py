"""The actuator's last check before touching anything: the live objects must still be
the ones the plan was made for."""

from __future__ import annotations

import msgspec

from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import Pod
from gangpreempt.model.workloads import Workload


class LiveObject(msgspec.Struct, frozen=True):
    """What the source of truth says of one object right now."""

    ref: str
    exists: bool
    uid: str = ""
    resource_version: str = ""
    holds_quota: bool = False
    pending: bool = False
    evicting: bool = False
    # What the legitimacy checks read again at the source (planning/legitimacy.py,
    # ``live_refusal``): the nodes its bound pods are on, and its own priority when it
    # is one that decides alone (a Kueue Workload's spec.priority; a pod of no gang and
    # no Kueue Workload), else None.
    nodes: tuple[str, ...] = ()
    priority: int | None = None


def live_pods(ref: str, pods: list[Pod], uid: str = "", resource_version: str = "") -> LiveObject:
    """What the source of truth says of a node-level object made of ``pods`` (a pod, a
    PodGroup, a scheduling.k8s.io Workload): it holds its room while any pod is bound,
    is pending while any pod waits, and is evicting once every bound pod terminates."""
    if not pods:
        return LiveObject(ref=ref, exists=False)
    bound = [p for p in pods if p.running]
    alone = len(pods) == 1 and not pods[0].group and not pods[0].kueue_workload
    return LiveObject(
        ref=ref,
        exists=True,
        uid=uid,
        resource_version=resource_version,
        holds_quota=bool(bound),
        pending=any(p.pending for p in pods),
        evicting=bool(bound) and all(p.terminating for p in bound),
        nodes=tuple(sorted({p.node_name for p in bound})),
        priority=pods[0].priority if alone else None,
    )


def live_object(ref: str, state: ClusterState) -> LiveObject:
    """``ref`` as ``state`` (the source of truth's view) has it: a Kueue Workload, a
    scheduling.k8s.io Workload, a PodGroup or a Pod."""
    kind, _, key = ref.partition("/")
    if kind == "Workload" and key in state.workloads:
        return live_workload(ref, state.workloads[key])
    if kind == "Pod":
        pod = state.pods.get(key)
        if pod is None:
            return LiveObject(ref=ref, exists=False)
        return live_pods(ref, [pod], pod.uid, pod.resource_version)
    if kind == "PodGroup":
        return live_pods(ref, [p for p in state.pods.values() if p.group == key])
    if kind == "Workload":
        groups = set(state.gang_workload(key))
        return live_pods(ref, [p for p in state.pods.values() if p.group in groups])
    return LiveObject(ref=ref, exists=False)


def live_workload(ref: str, wl: Workload | None) -> LiveObject:
    """What a source of truth holding ``wl`` (or not) says of ``ref``."""
    if wl is None:
        return LiveObject(ref=ref, exists=False)
    return LiveObject(
        ref=ref,
        exists=True,
        uid=wl.uid,
        resource_version=wl.resource_version,
        holds_quota=wl.holds_quota,
        pending=wl.is_pending,
        evicting=wl.is_evicting,
        priority=wl.priority,
    )


class PlannedObject(msgspec.Struct, frozen=True):
    ref: str
    uid: str
    resource_version: str
    pods: tuple[str, ...] = ()  # node-level victims: each pod must still be on its node
    pod_uids: tuple[str, ...] = ()  # ...and the same pod (uid), when known


def stale_reason(
    preemptor: PlannedObject, victims: list[PlannedObject], live: dict[str, LiveObject]
) -> str | None:
    """Why the plan is stale (the first reason found), or None if it may be actuated:
    every victim is the same incarnation (uid and resourceVersion) and still holds
    quota; the preemptor is the same and still pending."""
    p = live.get(preemptor.ref)
    if p is None or not p.exists:
        return f"preemptor {preemptor.ref} no longer exists"
    if preemptor.uid and p.uid != preemptor.uid:
        return f"preemptor {preemptor.ref} was replaced"
    if not p.pending:
        return f"preemptor {preemptor.ref} is no longer pending"
    for v in victims:
        lv = live.get(v.ref)
        if lv is None or not lv.exists:
            return f"victim {v.ref} no longer exists"
        if v.uid and lv.uid != v.uid:
            return f"victim {v.ref} was replaced"
        if v.resource_version and lv.resource_version != v.resource_version:
            return (
                f"victim {v.ref} changed since the plan (resourceVersion "
                f"{v.resource_version} -> {lv.resource_version})"
            )
        if not lv.holds_quota:
            return f"victim {v.ref} no longer holds quota"
        uids = dict(zip(v.pods, v.pod_uids, strict=False))
        for pod in v.pods:
            lp = live.get(pod)
            if lp is None or not lp.exists:
                return f"victim pod {pod} no longer exists"
            if uids.get(pod) and lp.uid != uids[pod]:
                return f"victim pod {pod} was replaced"
            if not lp.holds_quota:
                return f"victim pod {pod} is no longer on a node"
    return None


__all__ = [
    "LiveObject",
    "PlannedObject",
    "live_object",
    "live_pods",
    "live_workload",
    "stale_reason",
]
