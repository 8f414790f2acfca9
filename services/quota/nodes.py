"""quota's node-level side: pending pods and gangs (PodGroups, scheduling.k8s.io
Workloads) decided on nodes, with the same saga as Kueue workloads.

A node-level preemptor is keyed by its ref (``PodGroup/ns/name``) in the quota service's
flights. From its confirmation until its pods are bound, its placement keeps its room
on the nodes, its victims are promised to it, and no new preemption is requested for it
(KEP-5710 "no new preemption while one is in flight", Koordinator's in-flight cache).
Once its victims are gone it is admitted first in the next pass, at the room it held,
and keeps holding that room until kube-scheduler (the sim) has bound its pods: no other
gang can take the nodes it freed in between.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from datetime import datetime

import msgspec

from gangpreempt import events
from gangpreempt.errors import InvalidInput
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.podindex import PodIndex
from gangpreempt.model.pods import Pod, PodGroup
from gangpreempt.planning.decisions import Decision
from gangpreempt.planning.legitimacy import illegitimate
from gangpreempt.planning.nodeconfirm import (
    NodeVictim,
    node_rejection,
    room_gap,
    victim_rejection,
)
from gangpreempt.planning.nodeindex import NodeIndex
from gangpreempt.planning.nodeplan import NodePlanner, Preemptor
from services.quota.flights import ACTUATED, ADMITTING, Flights


class NodePlanHeld(msgspec.Struct, frozen=True):
    plan_id: str
    preemptor: str
    placement: dict[str, str]
    victims: tuple[str, ...]  # unit refs
    pods: dict[str, tuple[tuple[str, str], ...]]  # victim -> its pods: (ref, uid or "")


def pod_left(state: ClusterState, ref: str, uid: str) -> bool:
    """A victim pod has left: gone, replaced by another pod of that name, or unbound."""
    pod = state.pods.get(ref.removeprefix("Pod/"))
    return pod is None or (bool(uid) and pod.uid != uid) or not pod.running


class NodeBook:
    """Confirmed node-level plans (and Kueue plans with a placement), by preemptor."""

    def __init__(self) -> None:
        self.plans: dict[str, NodePlanHeld] = {}

    def claimed(self, but: str = "") -> dict[str, str]:
        """Victim unit ref -> the plan it is promised to (leaving out plan ``but``)."""
        return {v: p.plan_id for p in self.plans.values() if p.plan_id != but for v in p.victims}

    def check(
        self,
        state: ClusterState,
        p: events.PlanProposed,
        protected: Collection[str],
        index: PodIndex | None = None,
        now: datetime | None = None,
    ) -> str | None:
        """Why the proposed node-level plan must be rejected, or None (``index``: the
        state's pods by node and gang; ``now``: for the victims' minimum runtimes)."""
        victims = [NodeVictim(v.object, v.uid, v.pods, v.pod_uids) for v in p.victims]
        claimed = self.claimed(p.plan_id)
        return (
            node_rejection(state, p.plan_id, p.preemptor, victims, p.placement, claimed, index)
            or illegitimate(state, p, protected, node_level=True, index=index, now=now)
            or room_gap(state, p.placement, (ref for v in victims for ref in v.pods), index)
        )

    def check_kueue(
        self,
        state: ClusterState,
        p: events.PlanProposed,
        protected: Collection[str],
        index: PodIndex | None = None,
        now: datetime | None = None,
    ) -> str | None:
        """A Kueue plan: its victims legitimate (minimum runtimes at ``now``); when its
        workload's pods are known, its node victims (and the pods of its Workload
        victims) still there and the placed pods fitting their nodes with them gone."""
        victims = [NodeVictim(v.object, "", v.pods, v.pod_uids) for v in p.victims if v.pods]
        if p.placement:
            stale = victim_rejection(state, p.plan_id, victims, self.claimed(p.plan_id))
            if stale is not None:
                return stale
        return illegitimate(state, p, protected, node_level=False, index=index, now=now) or (
            room_gap(state, p.placement, (ref for v in victims for ref in v.pods), index)
            if p.placement
            else None
        )

    def hold(self, key: str, p: events.PlanProposed) -> None:
        pods: dict[str, tuple[tuple[str, str], ...]] = {}
        for v in p.victims:
            uids = list(v.pod_uids) + [""] * (len(v.pods) - len(v.pod_uids))
            pods[v.object] = tuple(zip(v.pods, uids, strict=True))
        self.plans[key] = NodePlanHeld(
            p.plan_id, p.preemptor, dict(p.placement), tuple(v.object for v in p.victims), pods
        )

    def actuated(self, key: str, done: Iterable[str]) -> None:
        """The plan was actuated: only the victims evicted (``done``) will leave; the
        flight waits for their pods alone."""
        held = self.plans.get(key)
        if held is None:
            return
        pods = {v: held.pods.get(v, ()) for v in done}
        self.plans[key] = msgspec.structs.replace(held, pods=pods)

    def placed(self, key: str, placement: dict[str, str]) -> None:
        """Admitted at ``placement``: that is the room held until the pods are bound."""
        held = self.plans.get(key)
        if held is not None:
            self.plans[key] = msgspec.structs.replace(held, placement=dict(placement), pods={})

    def victims_gone(self, state: ClusterState, key: str) -> bool:
        """Every victim pod of the plan held for ``key`` has left (True without one)."""
        held = self.plans.get(key)
        return held is None or all(
            pod_left(state, ref, uid) for pods in held.pods.values() for ref, uid in pods
        )

    def end(self, preemptor: str) -> None:
        self.plans.pop(preemptor, None)

    def settle(self, state: ClusterState, flights: Flights) -> list[str]:
        """End node-level flights whose preemptor is bound or gone; return those whose
        victims have all left and that may now be admitted at the room they held."""
        ready = []
        for ref, flight in list(flights.by_preemptor.items()):
            if not is_node_ref(ref):
                continue  # a Kueue workload (namespace/name)
            held = self.plans.get(ref)
            if not _still_pending(state, ref, held):
                flights.end(ref, "the preemptor's pods are bound, or it is gone")
                continue
            if flight.status in (ACTUATED, ADMITTING) and self.victims_gone(state, ref):
                ready.append(ref)
        return ready

    def planner(self, index: NodeIndex, now: datetime, but: Iterable[str] = ()) -> NodePlanner:
        """A planner with the room of every plan held, except the preemptors ``but``."""
        skip = set(but)
        planner = index.planner(now)
        for key, held in self.plans.items():
            if key not in skip:
                planner.hold(held.placement, held.victims)
        return planner


def is_node_ref(key: str) -> bool:
    """Flights are keyed ``namespace/name`` for Kueue workloads and by the whole ref
    (``Kind/namespace/name``) for node-level preemptors."""
    return key.count("/") == 2


def _still_pending(state: ClusterState, ref: str, held: NodePlanHeld | None) -> bool:
    kind, _, key = ref.partition("/")
    if kind == "Pod":
        pod = state.pods.get(key)
        return pod is not None and pod.pending
    if kind == "PodGroup" and key not in state.pod_groups:
        return False  # the gang itself is gone
    if held is not None:
        return any(
            (pod := state.pods.get(r.removeprefix("Pod/"))) is not None and pod.pending
            for r in held.placement
        )
    groups = [key] if kind == "PodGroup" else list(state.gang_workload(key))
    return any(p.pending for p in state.pods.values() if p.group in groups)


def group_gone(group: PodGroup, published: dict[str, tuple[str, ...]], flights: Flights) -> None:
    """A PodGroup left the state: what was published for it (and its Workload) is
    forgotten, so a group recreated under the same name gets its own decisions."""
    for ref in (group.ref, *([f"Workload/{group.workload}"] if group.workload else [])):
        published.pop(ref, None)
        flights.forget(ref)


def pod_gone(
    state: ClusterState, pod: Pod, published: dict[str, tuple[str, ...]], flights: Flights
) -> None:
    """A pod left the state: what was published for the preemptors it stood for (itself,
    its gang, its gang's Workload) is forgotten, so a new incarnation under the same name
    gets its own decisions; a pending pod's plan in flight is for something gone."""
    refs = [pod.ref]
    if pod.group:
        # Its gang's ref, even when the PodGroup left the state first (ingest deletes
        # kinds in order: groups before pods).
        refs.append(f"PodGroup/{pod.group}")
    group = state.pod_groups.get(pod.group) if pod.group else None
    if group is not None and group.workload:
        refs.append(f"Workload/{group.workload}")
    for ref in refs:
        published.pop(ref, None)
        flights.forget(ref)
        if pod.pending:
            flights.end(ref, f"its pod {pod.ref} is gone")


def admit_ready(
    planner: NodePlanner,
    book: NodeBook,
    flights: Flights,
    ready: list[str],
    now: datetime,
) -> list[events.Event]:
    """The preemptors whose victims are gone, admitted first, each at the room it held
    (``planner`` holds every other plan's room, not theirs)."""
    outbox: list[events.Event] = []
    for ref in ready:
        try:
            pre = planner.resolve(ref)
        except InvalidInput as exc:
            flights.fail(ref, str(exc))
            continue
        d = planner.decide(pre)
        if d.outcome != "Admit":
            flights.fail(ref, f"no longer fits where its victims left: {d.message}")
            continue
        planner.commit(pre, d)
        book.placed(ref, d.placement)
        flights.admitting(ref)
        # Sent again each pass until the pods are bound (a send lost to a NATS outage
        # is not the end of it): the id is the plan's, so the stream drops the copies.
        outbox.append(admitted_event(d, now, flights.by_preemptor[ref].plan_id))
    return outbox


def node_events(
    planner: NodePlanner,
    flights: Flights,
    seq: int,
    now: datetime,
    request: Callable[[Preemptor, Decision], events.Event],
    fresh: Callable[[str, tuple[str, ...]], bool],
    decides: Callable[[Preemptor], bool] = lambda _pre: True,
    held: Callable[[Preemptor, Decision], str | None] = lambda _pre, _d: None,
) -> list[events.Event]:
    """One node-level pass: every pending pod and gang without a plan in flight that is
    gangpreempt's to decide (``decides``; kube-scheduler places the others), in queue
    order, each seeing the room the ones before it took."""
    outbox: list[events.Event] = []
    for pre in planner.pending():
        if pre.ref in flights.by_preemptor or not decides(pre):
            continue
        d = planner.decide(pre)
        if d.outcome == "Preempt" and not flights.may_request(pre.ref, seq):
            continue  # failed lately: waits for its backoff, holds nothing meanwhile
        why = held(pre, d) if d.outcome == "Preempt" else None
        if why is not None:  # the disruption budget: it waits, holding nothing
            pods = tuple(sorted(f"{p.key}:{p.uid}:{p.resource_version}" for p in pre.pods))
            if fresh(pre.ref, ("Budget", *pods)):
                outbox.append(
                    events.Pending(
                        id=events.stable_id("pending", pre.ref, *pods, "disruption budget", why),
                        occurred_at=now,
                        workload=pre.ref,
                        uid="",
                        cluster_queue=d.queue,
                        mode=d.mode,
                        message=why,
                    )
                )
            continue
        planner.commit(pre, d)
        # The same decision is published once per incarnation of the preemptor's pods.
        pods = tuple(sorted(f"{p.key}:{p.uid}:{p.resource_version}" for p in pre.pods))
        if d.outcome == "Admit":
            signature = ("Admit", *pods, *sorted(f"{k}={v}" for k, v in d.placement.items()))
            if fresh(pre.ref, signature):
                outbox.append(admitted_event(d, now, str(seq)))
        elif d.outcome == "Preempt":
            event = request(pre, d)
            fresh(pre.ref, ("Preempt", event.id))
            outbox.append(event)
        elif fresh(pre.ref, ("Pending", *pods, d.message)):
            outbox.append(
                events.Pending(
                    id=events.stable_id("pending", pre.ref, seq, d.message),
                    occurred_at=now,
                    workload=pre.ref,
                    uid="",
                    cluster_queue=d.queue,
                    mode=d.mode,
                    message=d.message,
                )
            )
    return outbox


def admitted_event(d: Decision, now: datetime, unique: str) -> events.Admitted:
    return events.Admitted(
        # ``unique`` (the STATE sequence, or the plan id) makes the id unique per decision:
        # the same placement decided again for a new incarnation must not be dropped as a
        # duplicate by the stream.
        id=events.stable_id("admitted", d.preemptor, unique, *sorted(d.placement.items())),
        occurred_at=now,
        workload=d.preemptor,
        uid="",
        cluster_queue=d.queue,
        pod_sets=(),
        placement=dict(d.placement),
    )


__all__ = [
    "NodeBook",
    "NodePlanHeld",
    "admit_ready",
    "admitted_event",
    "is_node_ref",
    "node_events",
    "pod_gone",
]
