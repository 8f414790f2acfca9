"""A cycle's decision on a Workload that awaits gangpreempt's admission check, as the
check's next state (``docs/kubernetes.md``, the hand-off): ``Ready`` when the workload
fits where nothing is held for another plan and its whole gang is placed, ``Retry``
(Kueue releases the reservation and tries again later) when it does not fit and no
preemption is to be made for it. A decision to preempt leaves the check ``Pending``:
the plan goes through the saga, and a later cycle finds the workload fitting."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from gangpreempt import events
from gangpreempt.model.checks import POD_SET_LABEL, READY, RETRY
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.workloads import Workload
from gangpreempt.planning.decisions import ADMIT, Decision, plural

BACKOFF_MAX_S = 300


def pod_set_of(state: ClusterState, wl: Workload, pod_ref: str) -> str | None:
    """The pod set of ``wl`` a placed pod belongs to: its ``kueue.x-k8s.io/podset``
    label, else the name it was given when it was made from the pod sets
    (``<name>-<i>``, ``<name>-<podset>-<i>``: ``manifests.deriving.synthesize_pods``)."""
    key = pod_ref.removeprefix("Pod/")
    pod = state.pods.get(key)
    if pod is not None and pod.labels.get(POD_SET_LABEL):
        return pod.labels[POD_SET_LABEL]
    name = key.partition("/")[2]
    if len(wl.pod_sets) == 1:
        return wl.pod_sets[0].name if name.startswith(f"{wl.name}-") else None
    for ps in sorted(wl.pod_sets, key=lambda p: -len(p.name)):
        if name.startswith(f"{wl.name}-{ps.name}-"):
            return ps.name
    return None


def pod_set_nodes(state: ClusterState, wl: Workload, d: Decision) -> dict[str, tuple[str, ...]]:
    """Each pod set's planned nodes, one per pod, in the placement's pod order."""
    out: dict[str, list[str]] = {}
    for ref, node in sorted(d.placement.items()):
        ps = pod_set_of(state, wl, ref)
        if ps is not None:
            out.setdefault(ps, []).append(node)
    return {ps: tuple(nodes) for ps, nodes in out.items()}


def backoff_s(base: float, retries: int) -> int:
    """Seconds Kueue is asked to wait before trying again: ``base`` doubled per retry
    Kueue already counted, at most ``BACKOFF_MAX_S``."""
    return int(min(BACKOFF_MAX_S, base * 2 ** min(retries, 16)))


def ready_message(d: Decision) -> str:
    if not d.placement:
        return "quota confirmed by gangpreempt; no nodes to place on were read"
    nodes = sorted(set(d.placement.values()))
    shown = ", ".join(nodes[:5]) + (", ..." if len(nodes) > 5 else "")
    return (
        f"placement confirmed by gangpreempt: {plural(len(d.placement), 'pod')} on "
        f"{plural(len(nodes), 'node')} ({shown})"
    )


def retry_message(d: Decision, held: Sequence[str]) -> str:
    """Why the reservation goes: the decision's reason, and whom room is held for."""
    if not held:
        return f"gangpreempt: {d.message}"
    shown = ", ".join(held[:3]) + (f" and {len(held) - 3} more" if len(held) > 3 else "")
    return (
        f"gangpreempt: {d.message}; room is held for {shown} (a plan in flight, or admitted "
        "first): the reservation is released now and Kueue tries again"
    )


def check_decided(
    state: ClusterState,
    d: Decision,
    wl: Workload,
    now: datetime,
    base: float,
    held: Sequence[str] = (),
) -> events.CheckDecided:
    """The check's state for the cycle's decision ``d`` on ``wl`` (which awaits it).

    ``held``: the workloads room is held for (their plans in flight, or admitted before
    ``wl`` in the same pass), named in a Retry's message. Kueue waits ``requeue_after_s``
    before it reserves a sent-back workload again (the actuator releases the reservation
    at once: ``services.actuator.kube_checks.sent_back``): ``base`` when room is held for
    another, which frees within a plan's life; ``base`` doubled per Kueue's
    ``retryCount`` for a workload that cannot be placed while nothing is held, so that
    Kueue does not reserve it again and again."""
    ready = d.outcome == ADMIT
    mine = wl.check(wl.placement_check)
    retries = mine.retry_count if mine is not None else 0
    verdict = READY if ready else RETRY
    message = ready_message(d) if ready else retry_message(d, [h for h in held if h != wl.ref])
    return events.CheckDecided(
        id=events.stable_id("check", wl.key, wl.uid, wl.resource_version, verdict, message),
        occurred_at=now,
        workload=wl.ref,
        uid=wl.uid,
        resource_version=wl.resource_version,
        check=wl.placement_check,
        state=verdict,
        message=message,
        requeue_after_s=0 if ready else int(base) if held else backoff_s(base, retries),
        placement=dict(d.placement) if ready else {},
        pod_set_nodes=pod_set_nodes(state, wl, d) if ready else {},
    )


__all__ = [
    "BACKOFF_MAX_S",
    "backoff_s",
    "check_decided",
    "pod_set_nodes",
    "pod_set_of",
    "ready_message",
    "retry_message",
]
