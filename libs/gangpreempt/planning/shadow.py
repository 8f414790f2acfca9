"""Shadow mode: what the peers preempted, beside what gangpreempt would have done.

In shadow mode (``GANGPREEMPT_MODE=shadow``) gangpreempt writes nothing; Kueue and
kube-scheduler preempt as they always do, and each preemption they make is compared with
gangpreempt's decision for the same preemptor on the cluster as it was just before.

A peer's preemption is read from the marks it leaves on its victims:

- Kueue: a Workload's ``Preempted`` condition (and ``Evicted`` with reason
  ``Preempted``), whose message names the preemptor's UID ("Preempted to accommodate a
  workload (UID: ..., JobUID: ...) due to ...", Kueue v0.17
  ``preemption.preemptionMessage``);
- kube-scheduler: a pod's ``DisruptionTarget`` condition with reason
  ``PreemptionByScheduler``, set just before it deletes the pod. The condition does not
  name the preemptor; kube-scheduler nominates it to the victim's node
  (``status.nominatedNodeName``), so the preemptor is the pending pod of highest
  priority nominated there.

The comparison (``compare``) runs ``planning.plan`` for the preemptor, the same function
``gangpreempt plan`` runs, on the state before the peer's preemption (``before``: the
victims and their pods as they were when first seen marked, marks removed, and the
preemptor as it was while pending), and says how the two differ (``VERDICTS``).

Pure: the quota service keeps the episodes (a preemptor's victims arrive one STATE change
at a time) and publishes ``events.ShadowCompared``; ``gangpreempt explain --shadow``
compares what a snapshot shows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime

import msgspec

from gangpreempt.errors import InvalidInput
from gangpreempt.manifests.deriving import synthesize_pods
from gangpreempt.model.checks import GANGPREEMPT_MARK
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import Pod
from gangpreempt.model.workloads import Condition, Workload
from gangpreempt.planning.authority import AUTHORITY_LABEL, ENABLED
from gangpreempt.planning.decisions import ADMIT, PREEMPT, Decision, plural
from gangpreempt.planning.planning import plan

KUEUE = "kueue"
SCHEDULER = "kube-scheduler"
PEERS = (KUEUE, SCHEDULER)

SAME = "same"  # gangpreempt would have preempted exactly these victims
FEWER = "fewer"  # fewer victims would have done
DIFFERENT = "different"  # other victims (as many or more)
PARTIAL_GANG = "partial-gang"  # the peer took part of a gang: gangpreempt never does
UNPLACEABLE = "unplaceable"  # gangpreempt would preempt nothing: the preemptor cannot be placed
NOT_NEEDED = "not-needed"  # gangpreempt would place the preemptor without preempting
UNKNOWN = "unknown"  # the preemptor is not known, or no decision could be made for it
VERDICTS = (SAME, FEWER, DIFFERENT, PARTIAL_GANG, UNPLACEABLE, NOT_NEEDED, UNKNOWN)

SCHEDULER_REASON = "PreemptionByScheduler"
_KUEUE_UID = re.compile(r"\(UID: ([^,)\s]+)")
_PEER_NAMES = {KUEUE: "Kueue", SCHEDULER: "kube-scheduler"}


class PeerVictim(msgspec.Struct, frozen=True):
    """One victim a peer took, as its marks say."""

    peer: str  # KUEUE | SCHEDULER
    victim: str  # Workload/ns/name | Pod/ns/name
    preemptor_uid: str = ""  # Kueue's message
    node: str = ""  # the victim pod's node (kube-scheduler's nomination goes there)
    reason: str = ""  # Kueue's Preempted reason (InClusterQueue, ...) or the pod's


class Comparison(msgspec.Struct, frozen=True):
    peer: str
    preemptor: str  # the preemptor's ref, or "" when not found
    verdict: str
    peer_victims: tuple[str, ...]
    victims: tuple[str, ...]  # gangpreempt's, in the same units (Workloads or pods)
    partial_gangs: tuple[str, ...] = ()  # PodGroup refs the peer split
    message: str = ""


# -- reading the peers' marks ---------------------------------------------------------------


def _is_mark(c: Condition) -> bool:
    """One of the conditions Kueue sets on a workload it preempts."""
    return c.type == "Preempted" or (c.type == "Evicted" and c.reason == "Preempted")


def kueue_victim(wl: Workload) -> PeerVictim | None:
    """The Kueue preemption ``wl`` is marked with, if any: the preemptor's UID from the
    first mark whose message names one, the reason from ``Preempted`` when it is set."""
    marks = [c for c in wl.conditions if c.status == "True" and _is_mark(c)]
    if not marks or any(GANGPREEMPT_MARK in c.message for c in marks):
        return None  # none, or gangpreempt's own (its actuator names its plan)
    reason = next((c.reason for c in marks if c.type == "Preempted"), marks[0].reason)
    found = next((m for c in marks if (m := _KUEUE_UID.search(c.message)) is not None), None)
    uid = found.group(1) if found is not None and found.group(1) != "UNKNOWN" else ""
    return PeerVictim(KUEUE, wl.ref, preemptor_uid=uid, reason=reason)


def scheduler_victim(pod: Pod) -> PeerVictim | None:
    """The kube-scheduler preemption ``pod`` is marked with, if any."""
    if pod.disruption != SCHEDULER_REASON:
        return None
    return PeerVictim(SCHEDULER, pod.ref, node=pod.node_name, reason=pod.disruption)


def newly_marked(kind: str, old: object, new: object) -> PeerVictim | None:
    """A STATE change that marks a victim of a peer (it was not marked before)."""
    if kind == "Workload" and isinstance(new, Workload):
        was = kueue_victim(old) if isinstance(old, Workload) else None
        now = kueue_victim(new)
    elif kind == "Pod" and isinstance(new, Pod):
        was = scheduler_victim(old) if isinstance(old, Pod) else None
        now = scheduler_victim(new)
    else:
        return None
    return now if now is not None and was is None else None


def marked(state: ClusterState) -> list[PeerVictim]:
    """Every peer victim a snapshot shows (``explain --shadow`` on manifests)."""
    found = [v for wl in state.workloads.values() if (v := kueue_victim(wl)) is not None]
    found += [v for pod in state.pods.values() if (v := scheduler_victim(pod)) is not None]
    return sorted(found, key=lambda v: v.victim)


# -- who preempted --------------------------------------------------------------------------


def scheduler_victim_of(
    remembered: Mapping[str, Workload | Pod], victims: Iterable[str]
) -> PeerVictim | None:
    """The first of ``victims`` remembered as a pod kube-scheduler preempted."""
    for ref in victims:
        obj = remembered.get(ref)
        if isinstance(obj, Pod) and (v := scheduler_victim(obj)) is not None:
            return v
    return None


def preemptor_of(state: ClusterState, v: PeerVictim) -> str:
    """The ref of the preemptor ``v`` was taken for, or "" when the state does not say."""
    if v.peer == KUEUE:
        if not v.preemptor_uid:
            return ""
        return next((wl.ref for wl in state.workloads.values() if wl.uid == v.preemptor_uid), "")
    if not v.node:
        return ""
    nominated = [p for p in state.pods.values() if p.pending and p.nominated_node == v.node]
    if not nominated:
        return ""
    pod = max(nominated, key=lambda p: (p.priority or 0, p.key))
    return unit_ref(pod)


def unit_ref(pod: Pod) -> str:
    """What gangpreempt plans for a pending pod: its gang, its Kueue Workload, or it."""
    if pod.group:
        return f"PodGroup/{pod.group}"
    if pod.kueue_workload:
        return f"Workload/{pod.kueue_workload}"
    return pod.ref


def related(state: ClusterState, v: PeerVictim) -> dict[str, Workload | Pod]:
    """The objects to remember of a victim when it is first seen marked, so that the
    state before its preemption can be built later: it, and a Kueue victim's pods (the
    Job controller deletes them soon after)."""
    kind, _, key = v.victim.partition("/")
    out: dict[str, Workload | Pod] = {}
    if kind == "Workload":
        wl = state.workloads.get(key)
        if wl is not None:
            out[v.victim] = wl
        for pod in state.pods.values():
            if pod.kueue_workload == key:
                out[pod.ref] = pod
    elif (victim := state.pods.get(key)) is not None:
        out[v.victim] = victim
    return out


def as_pending(wl: Workload) -> Workload:
    """A Kueue Workload as it was before Kueue reserved quota for it (a preemptor seen
    only once admitted: its victims' marks came first)."""
    if wl.is_pending:
        return wl
    kept = tuple(c for c in wl.conditions if c.type not in ("QuotaReserved", "Admitted"))
    return msgspec.structs.replace(wl, admission=None, conditions=kept)


def preemptor_objects(state: ClusterState, ref: str) -> dict[str, Workload | Pod]:
    """The preemptor's objects as they were while it was pending: a Kueue Workload (its
    pods are made again from its pod sets by ``before``), or a pod gang's pending pods."""
    kind, _, key = ref.partition("/")
    out: dict[str, Workload | Pod] = {}
    if kind == "Workload" and (wl := state.workloads.get(key)) is not None:
        out[ref] = as_pending(wl)
        return out
    for pod in state.pods.values():
        if pod.pending and unit_ref(pod) == ref:
            out[pod.ref] = pod
    return out


# -- the state before -----------------------------------------------------------------------


def unmarked(obj: Workload | Pod) -> Workload | Pod:
    """``obj`` without the peer's preemption marks: as it was just before."""
    if isinstance(obj, Workload):
        kept = tuple(c for c in obj.conditions if not _is_mark(c))
        return msgspec.structs.replace(obj, conditions=kept)
    return msgspec.structs.replace(obj, disruption="", terminating=False)


def before(
    state: ClusterState, remembered: Mapping[str, Workload | Pod], preemptor: str = ""
) -> ClusterState:
    """``state`` with the remembered objects (victims, their pods, the preemptor) put back
    as they were before the peer's preemption. A pending Kueue preemptor whose pods do not
    exist yet (Kueue creates them once it admits) gets them from its pod sets, as a
    Workload gangpreempt manages does, so that its decision covers the nodes too: what it
    would have done had it managed the queue. ``state`` itself is not changed."""
    workloads = dict(state.workloads)
    pods = dict(state.pods)
    for ref, obj in remembered.items():
        key = ref.partition("/")[2]
        if isinstance(obj, Workload):
            workloads[key] = unmarked(obj)  # type: ignore[assignment]
        else:
            pods[key] = unmarked(obj)  # type: ignore[assignment]
    was = msgspec.structs.replace(state, workloads=workloads, pods=pods)
    kind, _, key = preemptor.partition("/")
    wl = workloads.get(key) if kind == "Workload" else None
    if wl is not None and wl.is_pending and was.nodes:
        # Before the preemption Kueue had not admitted it: none of its pods ran (those
        # placed since are taken off the nodes), and a Job's pods did not exist yet: its
        # pod sets say what they will be.
        for pod_key in [k for k, p in pods.items() if p.kueue_workload == key and not p.pending]:
            del pods[pod_key]
        if not any(p.kueue_workload == key for p in pods.values()):
            synthesize_pods(was, wl.name, wl)
    return was


# -- the comparison -------------------------------------------------------------------------


def _units(d: Decision, pods: bool) -> tuple[str, ...]:
    """A decision's victims in the peer's units: pods for kube-scheduler, else objects."""
    out: set[str] = set()
    for v in d.victims:
        if pods and v.pods:
            out.update(v.pods)
        else:
            out.add(v.object)
    return tuple(sorted(out))


def partial_gangs(state: ClusterState, victims: Iterable[str]) -> tuple[str, ...]:
    """The gangs of which the peer took some running pods and left others running."""
    taken = set(victims)
    groups: dict[str, list[Pod]] = {}
    for pod in state.pods.values():
        if pod.group and pod.running:
            groups.setdefault(pod.group, []).append(pod)
    split = {
        group
        for group, members in groups.items()
        if any(p.ref in taken for p in members) and any(p.ref not in taken for p in members)
    }
    return tuple(sorted(f"PodGroup/{g}" for g in split))


def compare(
    state: ClusterState, now: datetime, peer: str, preemptor: str, peer_victims: Iterable[str]
) -> Comparison:
    """What gangpreempt would have done for ``preemptor`` on ``state`` (the state before
    the peer's preemption), beside the victims ``peer`` took."""
    taken = tuple(sorted(set(peer_victims)))
    name = _PEER_NAMES.get(peer, peer)
    took = f"{name} preempted {plural(len(taken), 'victim')} ({', '.join(taken)})"
    split = partial_gangs(state, taken)
    if not preemptor:
        return Comparison(
            peer, "", UNKNOWN, taken, (), split, f"{took}; the preemptor is not known"
        )
    try:
        decided = plan(state, now, workload=preemptor).decisions
    except InvalidInput as exc:
        return Comparison(peer, preemptor, UNKNOWN, taken, (), split, f"{took}; {exc}")
    if not decided:
        return Comparison(
            peer, preemptor, UNKNOWN, taken, (), split, f"{took}; no decision for {preemptor}"
        )
    d = decided[0]
    ours = _units(d, pods=peer == SCHEDULER) if d.outcome == PREEMPT else ()
    took = f"{took} for {preemptor}"
    if d.outcome == ADMIT:
        verdict, said = NOT_NEEDED, "gangpreempt would have placed it without preempting"
    elif d.outcome != PREEMPT:
        verdict = UNPLACEABLE
        said = f"gangpreempt would have preempted nothing: {d.message}"
    elif set(ours) == set(taken):
        verdict, said = SAME, "gangpreempt would have preempted the same"
    elif len(ours) < len(taken):
        verdict = FEWER
        said = f"gangpreempt would have preempted {plural(len(ours), 'victim')}: {', '.join(ours)}"
    else:
        verdict = DIFFERENT
        said = f"gangpreempt would have preempted {', '.join(ours)} instead"
    if split:  # what the peer broke comes first; what gangpreempt would have done follows
        verdict = PARTIAL_GANG
        said = f"it split {', '.join(split)}, which gangpreempt never does; {said}"
    return Comparison(peer, preemptor, verdict, taken, ours, split, f"{took}; {said}")


def handed_over(state: ClusterState) -> list[str]:
    """What was handed to gangpreempt although it writes nothing in shadow mode: a
    ClusterQueue that lists its check (Kueue admits none of its workloads until the check
    says Ready), a namespace labelled for it (its pods are gated and stay so)."""
    out = [
        f"ClusterQueue {name} lists gangpreempt's AdmissionCheck {cq.managed_by}: in shadow "
        "mode nothing sets it Ready, so Kueue admits none of its workloads"
        for name, cq in sorted(state.cluster_queues.items())
        if cq.managed_by
    ]
    out += [
        f"Namespace {name} is labelled {AUTHORITY_LABEL}={ENABLED}: in shadow mode nothing "
        "lifts the scheduling gate its pods get"
        for name, ns in sorted(state.namespaces.items())
        if ns.labels.get(AUTHORITY_LABEL) == ENABLED
    ]
    return out


def snapshot_comparisons(state: ClusterState, now: datetime) -> list[Comparison]:
    """Every peer preemption a snapshot shows (its victims still marked), one comparison
    per preemptor, each on the snapshot with the marks removed and the preemptor as it
    is (``gangpreempt explain --shadow -f``). What the peer changed besides its marks (a
    Kueue victim's pods already deleted, a victim already requeued) is not undone: the
    services, which see each change as it comes, remember what was there."""
    by_preemptor: dict[tuple[str, str], list[PeerVictim]] = {}
    for v in marked(state):
        by_preemptor.setdefault((v.peer, preemptor_of(state, v)), []).append(v)
    out = []
    for (peer, preemptor), victims in sorted(by_preemptor.items()):
        remembered: dict[str, Workload | Pod] = {}
        for v in victims:
            remembered.update(related(state, v))
        if preemptor:
            remembered.update(preemptor_objects(state, preemptor))
        was = before(state, remembered, preemptor)
        out.append(compare(was, now, peer, preemptor, [v.victim for v in victims]))
    return out


def comparison_lines(c: Comparison) -> list[str]:
    """A comparison for people."""
    lines = [
        f"{_PEER_NAMES.get(c.peer, c.peer)} -> {c.preemptor or '(preemptor unknown)'}: {c.verdict}"
    ]
    lines.append(f"  {c.message}")
    return lines


__all__ = [
    "DIFFERENT",
    "FEWER",
    "KUEUE",
    "NOT_NEEDED",
    "PARTIAL_GANG",
    "PEERS",
    "SAME",
    "SCHEDULER",
    "UNKNOWN",
    "UNPLACEABLE",
    "VERDICTS",
    "Comparison",
    "PeerVictim",
    "as_pending",
    "before",
    "compare",
    "comparison_lines",
    "handed_over",
    "kueue_victim",
    "marked",
    "newly_marked",
    "preemptor_objects",
    "preemptor_of",
    "related",
    "scheduler_victim",
    "scheduler_victim_of",
    "snapshot_comparisons",
    "unit_ref",
]
