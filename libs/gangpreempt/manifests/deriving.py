"""The Workloads Kueue would create for what users submit (``manifests.integrations``),
made once every object is read: whether Kueue's own Workload for an object is in the
input already decides whether one is derived."""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from gangpreempt.manifests.integrations import Submitted
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import Pod
from gangpreempt.model.workloads import (
    PRIORITY_CLASS,
    WORKLOAD_PRIORITY_CLASS,
    PodSet,
    PriorityClassRef,
    Workload,
)

# The most pods made for one submitted object's node check (they are real objects in
# memory): a larger one is left out when the input has Nodes.
MAX_SYNTHESIZED_PODS = 20_000


@dataclass(frozen=True)
class KueuePod:
    """A plain Pod with a queue name, as read (its Workload is derived later)."""

    key: str
    queue: str
    group: str  # kueue.x-k8s.io/pod-group-name, or ""
    total: str | None  # kueue.x-k8s.io/pod-group-total-count as written
    priority_label: str  # kueue.x-k8s.io/priority-class, or ""
    location: str


@dataclass
class Derived:
    """What deriving found: the Workloads added, what was said, what was left out."""

    warnings: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    # Workload key -> the submitted object's ref (Job/ns/name, Pod/ns/name, ...).
    owners: dict[str, str] = field(default_factory=dict)
    # Whether the input is whole, so a class it does not hold is missing (``plan``); a
    # file the sim applies later is read alone, its classes are in the live state.
    check_classes: bool = True


def _missing_class(
    state: ClusterState, ref: PriorityClassRef | None, check: bool = True
) -> str | None:
    if ref is None or not check:
        return None
    if ref.kind == WORKLOAD_PRIORITY_CLASS and ref.name not in state.workload_priority_classes:
        return f"WorkloadPriorityClass {ref.name!r} not found"
    if ref.kind == PRIORITY_CLASS and ref.name not in state.priority_classes:
        return f"PriorityClass {ref.name!r} not found"
    return None


def _owned(state: ClusterState) -> set[str]:
    """Objects Kueue's Workloads in the input already stand for (by owner ref)."""
    return {wl.owner for wl in state.workloads.values() if wl.owner}


def _add(
    state: ClusterState, out: Derived, key: str, wl: Workload, owner: str, location: str
) -> bool:
    if key in state.workloads:
        out.warnings.append(
            f"{location}: {owner}: its Workload {key} would take the name of a Workload "
            "already in the input; left out"
        )
        return False
    state.workloads[key] = wl
    out.owners[key] = owner
    return True


def synthesize_pods(state: ClusterState, stem_name: str, wl: Workload) -> None:
    """Pending pods for a Workload whose pods do not exist yet, so the nodes can be
    checked (only when the input has Nodes): ``<stem>-<i>``, or ``<stem>-<podset>-<i>``
    with several pod sets."""
    priority = state.priority_of(wl)
    for ps in wl.pod_sets:
        stem = stem_name if len(wl.pod_sets) == 1 else f"{stem_name}-{ps.name}"
        for i in range(ps.count):
            name = f"{stem}-{i}"
            if f"{wl.namespace}/{name}" in state.pods:
                continue
            pod = Pod(
                namespace=wl.namespace,
                name=name,
                requests=dict(ps.requests),
                priority=priority,
                scheduling=ps.scheduling,
                kueue_workload=wl.key,
            )
            state.pods[pod.key] = pod


def derive_submitted(state: ClusterState, submitted: list[Submitted], out: Derived) -> None:
    owners = _owned(state)
    for s in submitted:
        if s.ref in owners:
            continue  # Kueue's Workload for it is in the input
        if not s.pending:
            out.warnings.append(
                f"{s.location}: {s.ref} has started but its Kueue Workload is not in the "
                "input: its quota usage is not counted"
            )
            continue
        missing = _missing_class(state, s.priority_class, out.check_classes)
        if missing is not None:
            out.rejected.append(
                f"{s.location}: {s.priority_field}: {missing}; {s.ref} is left out "
                "(Kueue creates no Workload for it)"
            )
            continue
        pods = sum(ps.count for ps in s.pod_sets)
        if state.nodes and pods > MAX_SYNTHESIZED_PODS:
            out.rejected.append(
                f"{s.location}: {s.ref} has {pods} pods, more than gangpreempt places on "
                f"nodes for one object ({MAX_SYNTHESIZED_PODS}); left out"
            )
            continue
        key = f"{s.namespace}/{s.workload_name}"
        wl = Workload(
            namespace=s.namespace,
            name=s.workload_name,
            pod_sets=s.pod_sets,
            queue_name=s.queue,
            priority_class=s.priority_class,
            creation_timestamp=s.created,
            owner=s.ref,
        )
        if _add(state, out, key, wl, s.ref, s.location) and state.nodes:
            synthesize_pods(state, s.name, wl)


def _pod_priority(
    state: ClusterState, label: str, pod: Pod, check: bool
) -> tuple[PriorityClassRef | None, int | None, str | None]:
    """(class ref, explicit priority, what is missing) of a Kueue pod's Workload."""
    if label:
        ref = PriorityClassRef(WORKLOAD_PRIORITY_CLASS, label)
        return ref, None, _missing_class(state, ref, check)
    if pod.priority is not None:
        return None, pod.priority, None
    if pod.priority_class_name:
        ref = PriorityClassRef(PRIORITY_CLASS, pod.priority_class_name)
        return ref, None, _missing_class(state, ref, check)
    return None, None, None


def _shape_sets(pods: list[Pod]) -> tuple[PodSet, ...]:
    """A pod group's pod sets: pods of the same requests and constraints together (Kueue
    groups them by a hash of the pod's role), ``main`` when there is one shape."""
    shapes: dict[bytes, list[Pod]] = {}
    for pod in pods:
        shape = msgspec.json.encode((sorted(pod.requests.items()), pod.scheduling))
        shapes.setdefault(shape, []).append(pod)
    out = []
    for i, members in enumerate(shapes.values()):
        name = "main" if len(shapes) == 1 else f"role-{i}"
        first = members[0]
        out.append(
            PodSet(
                name=name,
                count=len(members),
                requests=dict(first.requests),
                scheduling=first.scheduling,
            )
        )
    return tuple(out)


def derive_pods(state: ClusterState, kueue_pods: list[KueuePod], out: Derived) -> None:
    """Workloads of plain Pods (``pod-<name>``) and pod groups (named as the group)."""
    owners = _owned(state)
    groups: dict[str, list[KueuePod]] = {}
    for kp in kueue_pods:
        pod = state.pods.get(kp.key)
        if pod is None or pod.kueue_workload:
            continue  # Kueue's Workload is named on the pod already
        if kp.group:
            groups.setdefault(f"{pod.namespace}/{kp.group}", []).append(kp)
            continue
        if f"Pod/{kp.key}" in owners or not pod.pending:
            continue
        ref, value, missing = _pod_priority(state, kp.priority_label, pod, out.check_classes)
        if missing is not None:
            out.rejected.append(f"{kp.location}: {missing}; Pod {kp.key} is left out")
            del state.pods[kp.key]
            continue
        wl = Workload(
            namespace=pod.namespace,
            name=f"pod-{pod.name}",
            pod_sets=(PodSet("main", 1, dict(pod.requests), scheduling=pod.scheduling),),
            queue_name=kp.queue,
            priority=value,
            priority_class=ref,
            owner=f"Pod/{kp.key}",
        )
        if _add(state, out, wl.key, wl, f"Pod/{kp.key}", kp.location):
            state.pods[kp.key] = msgspec.structs.replace(pod, kueue_workload=wl.key)
    for key, members in sorted(groups.items()):
        _derive_group(state, key, members, out)


def _derive_group(state: ClusterState, key: str, members: list[KueuePod], out: Derived) -> None:
    first = members[0]
    pods = [state.pods[m.key] for m in members]
    for pod in pods:  # Kueue gates them until its Workload is admitted
        state.pods[pod.key] = msgspec.structs.replace(pod, kueue_workload=key)
    if key in state.workloads:
        return  # Kueue's Workload of the group is in the input
    total_text = next((m.total for m in members if m.total is not None), None)
    try:
        total = int(total_text) if total_text is not None else None
    except ValueError:
        total = None
    if total is None or total < 1:
        out.warnings.append(
            f"{first.location}: pod group {key}: annotation kueue.x-k8s.io/pod-group-"
            f"total-count is {'missing' if total_text is None else repr(total_text)}, "
            "expected a positive integer: Kueue does not admit the group; left out"
        )
        return
    if any(not p.pending for p in pods):
        return  # it runs: its usage is Kueue's Workload's, which is not in the input
    if len(pods) < total:
        out.warnings.append(
            f"{first.location}: pod group {key} has {len(pods)} of its {total} pods: Kueue "
            "waits for the rest before it creates the Workload; left out"
        )
        return
    ref, value, missing = _pod_priority(state, first.priority_label, pods[0], out.check_classes)
    if missing is not None:
        out.rejected.append(f"{first.location}: {missing}; pod group {key} is left out")
        return
    namespace, name = key.split("/", 1)
    wl = Workload(
        namespace=namespace,
        name=name,
        pod_sets=_shape_sets(sorted(pods, key=lambda p: p.key)),
        queue_name=first.queue,
        priority=value,
        priority_class=ref,
    )
    _add(state, out, key, wl, f"pod group {key}", first.location)


__all__ = ["Derived", "KueuePod", "derive_pods", "derive_submitted"]
