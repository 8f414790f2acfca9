"""Checks of a node-level plan after it was computed: quota's confirmation against the
live state and the plans in flight, and the actuator's gang barrier (a node for every
pod the gang needs)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import msgspec

from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.podindex import PodIndex
from gangpreempt.model.pods import PODS, Pod
from gangpreempt.model.quantity import add_into
from gangpreempt.placement.cluster import UNLIMITED, pod_demand
from gangpreempt.placement.fit import fits, unresolvable


class NodeVictim(msgspec.Struct, frozen=True):
    ref: str  # Pod/ns/name or PodGroup/ns/name
    uid: str  # the pod's uid for a single-pod unit, else ""
    pods: tuple[str, ...]
    pod_uids: tuple[str, ...] = ()  # the pods' uids when known, same order


def _pod(state: ClusterState, ref: str) -> Pod | None:
    return state.pods.get(ref.removeprefix("Pod/"))


def preemptor_groups(state: ClusterState, ref: str) -> list[str]:
    """The pod group keys a node-level preemptor stands for (none for a lone pod)."""
    kind, _, key = ref.partition("/")
    if kind == "PodGroup":
        return [key] if key in state.pod_groups else []
    if kind == "Workload":
        return list(state.gang_workload(key))
    pod = state.pods.get(key)
    return [pod.group] if pod is not None and pod.group in state.pod_groups else []


def placement_gap(
    state: ClusterState,
    preemptor: str,
    placement: Mapping[str, str],
    index: PodIndex | None = None,
) -> str | None:
    """The gang barrier: why ``placement`` does not give every group of the preemptor
    its minCount (pods already running count), or None. ``index``: the state's pods by
    gang (else every pod is looked at)."""
    groups = preemptor_groups(state, preemptor)
    if not groups:
        if not preemptor.startswith("Pod/"):
            return f"{preemptor} no longer exists"
        pod = _pod(state, preemptor)
        if pod is not None and preemptor not in placement:
            return f"no node for {preemptor}"
        return None
    for key in groups:
        group = state.pod_groups[key]
        members = (
            list(index.members(key))
            if index is not None
            else [p for p in state.pods.values() if p.group == key]
        )
        running = sum(1 for p in members if p.running and not p.terminating)
        placed = sum(1 for p in members if p.pending and p.ref in placement)
        if running + placed < group.min_count:
            return (
                f"{group.ref} would have {running + placed} of its minCount "
                f"{group.min_count} pods on nodes"
            )
    return None


def node_rejection(
    state: ClusterState,
    plan_id: str,
    preemptor: str,
    victims: Sequence[NodeVictim],
    placement: Mapping[str, str],
    claimed: Mapping[str, str],
    index: PodIndex | None = None,
) -> str | None:
    """Why a node-level plan must not be confirmed, or None: the preemptor's placed pods
    are still pending, every placement node exists, every victim pod is the same one and
    still on its node, and no victim is promised to another plan (``room_gap`` then
    tells whether the placed pods fit with exactly these victims gone)."""
    if not placement:
        return f"plan places no pod of {preemptor}"
    for ref, node in placement.items():
        pod = _pod(state, ref)
        if pod is None:
            return f"preemptor pod {ref} no longer exists"
        if not pod.pending:
            return f"preemptor pod {ref} is no longer pending"
        if node not in state.nodes:
            return f"node {node} no longer exists"
    gap = placement_gap(state, preemptor, placement, index)
    if gap is not None:
        return gap
    return victim_rejection(state, plan_id, victims, claimed)


def room_gap(
    state: ClusterState,
    placement: Mapping[str, str],
    victim_pods: Iterable[str],
    index: PodIndex | None = None,
) -> str | None:
    """Why the placement's pending pods do not fit their nodes with exactly the pods
    ``victim_pods`` (``Pod/ns/name``) gone, or None: each node admits each pod placed on
    it (selectors, affinity, taints, cordon) and holds them all in the room its other
    running pods (terminating ones too) leave. A pod of the placement that is no longer
    pending is not placed again (it holds its node as any running pod)."""
    gone = {ref.removeprefix("Pod/") for ref in victim_pods}
    need: dict[str, dict[str, int]] = {}
    for ref, name in placement.items():
        pod = _pod(state, ref)
        if pod is None or not pod.pending:
            continue
        node = state.nodes.get(name)
        if node is None:
            return f"node {name} no longer exists"
        why = unresolvable(pod.scheduling, node)
        if why is not None:
            return f"preemptor pod {ref} cannot run on node {name}: {why}"
        add_into(need.setdefault(name, {}), pod_demand(pod))
    if not need:
        return None
    used: dict[str, dict[str, int]] = {name: {} for name in need}
    there = (
        (pod for name in need for pod in index.on_node(name))
        if index is not None
        else (pod for pod in state.pods.values() if pod.node_name in used)
    )
    for pod in there:
        if pod.running and pod.key not in gone:
            add_into(used[pod.node_name], pod_demand(pod))
    for name, demand in sorted(need.items()):
        alloc = state.nodes[name].allocatable
        free = {res: alloc.get(res, 0) - used[name].get(res, 0) for res in demand}
        if PODS not in alloc:
            free[PODS] = UNLIMITED - used[name].get(PODS, 0)
        if not fits(demand, free):
            short = ", ".join(
                f"{res} {amount} > {free.get(res, 0)}"
                for res, amount in sorted(demand.items())
                if amount > free.get(res, 0)
            )
            return (
                f"the placed pods do not fit node {name} with exactly the plan's victims "
                f"gone ({short})"
            )
    return None


def victim_rejection(
    state: ClusterState,
    plan_id: str,
    victims: Sequence[NodeVictim],
    claimed: Mapping[str, str],
) -> str | None:
    """Why node-level victims cannot be taken any more, or None: each is promised to no
    other plan and each of its pods is the same one and still on its node."""
    for v in victims:
        owner = claimed.get(v.ref, plan_id)
        if owner != plan_id:
            return f"victim {v.ref} is already claimed by plan {owner}"
        uids = dict(zip(v.pods, v.pod_uids, strict=False))
        for ref in v.pods:
            pod = _pod(state, ref)
            if pod is None:
                return f"victim pod {ref} no longer exists"
            uid = uids.get(ref) or (v.uid if ref == v.ref else "")
            if uid and pod.uid and pod.uid != uid:
                return f"victim pod {ref} was replaced (uid {pod.uid})"
            if not pod.running:
                return f"victim pod {ref} is no longer on a node"
    return None


__all__ = [
    "NodeVictim",
    "node_rejection",
    "placement_gap",
    "preemptor_groups",
    "room_gap",
    "victim_rejection",
]
