"""Evaluating one pending workload as the head of its queue: flavor assignment, then the
victim search when the assignment needs preemption."""

from __future__ import annotations

from collections.abc import Callable

from gangpreempt.model.queues import ANY, NEVER
from gangpreempt.planning.decisions import ADMIT, PENDING, PREEMPT, Decision, Victim, plural
from gangpreempt.planning.topology import Topology, topology_requests
from gangpreempt.preemption.candidates import IN_CLUSTER_QUEUE, Request
from gangpreempt.preemption.classical import Target
from gangpreempt.preemption.oracle import Searches, oracle_for
from gangpreempt.quota.assignment import Assignment, FlavorAssigner
from gangpreempt.quota.modes import Mode
from gangpreempt.quota.pending import PendingWorkload
from gangpreempt.quota.snapshot import ClusterQueueState, Snapshot


class Evaluation:
    """A pending workload's flavor assignment and, if it needs preemption, its victims."""

    __slots__ = ("assignment", "cq", "pending", "targets", "topology")

    def __init__(
        self,
        pending: PendingWorkload,
        cq: ClusterQueueState,
        assignment: Assignment,
        targets: list[Target],
        topology: Topology | None = None,
    ) -> None:
        self.pending = pending
        self.cq = cq
        self.assignment = assignment
        self.targets = targets
        # Kueue's topology-aware scheduling, when a pod set asks for it
        self.topology = topology

    @property
    def mode(self) -> Mode:
        if self.topology is not None and self.topology.mode is not None:
            return self.topology.mode
        return self.assignment.mode

    @property
    def borrowing(self) -> int:
        return self.assignment.borrowing

    def order(self) -> tuple[int, int, float, str]:
        """Kueue's order of heads in a cycle: less borrowing, higher priority, older."""
        p = self.pending
        return (self.borrowing, -p.priority, p.queue_order_ts, p.uid)


def unavailable(snapshot: Snapshot, pending: PendingWorkload) -> str | None:
    """Why ``pending`` cannot be considered at all, or None."""
    state = snapshot.state
    wl = pending.workload
    if not wl.queue_name and wl.admission is None:
        return "spec.queueName is not set"
    lq = state.local_queues.get(f"{wl.namespace}/{wl.queue_name}")
    if lq is None:
        return f"LocalQueue {wl.namespace}/{wl.queue_name} not found"
    if lq.stop_policy in ("Hold", "HoldAndDrain"):
        return f"LocalQueue {lq.key} is stopped (stopPolicy {lq.stop_policy})"
    cq = snapshot.cqs.get(lq.cluster_queue)
    if cq is None:
        return f"ClusterQueue {lq.cluster_queue} not found"
    if cq.inactive_reason:
        return f"ClusterQueue {cq.name} is inactive: {cq.inactive_reason}"
    selector = cq.spec.namespace_selector
    if selector is None:
        return (
            f"namespace {wl.namespace} doesn't match ClusterQueue {cq.name}'s selector: it has "
            "no namespaceSelector, which selects no namespace (set namespaceSelector: {} to "
            "admit every namespace)"
        )
    if not selector.matches(state.namespace_labels(wl.namespace)):
        known = (
            ""
            if wl.namespace in state.namespaces
            else f" (Namespace {wl.namespace} is not in the input: only its "
            "kubernetes.io/metadata.name label is known)"
        )
        return (
            f"namespace {wl.namespace} doesn't match ClusterQueue {cq.name}'s "
            f"namespaceSelector{known}"
        )
    return None


def evaluate(snapshot: Snapshot, pending: PendingWorkload) -> Evaluation:
    """Assign flavors and, when the mode is Preempt, search victims. ``pending.cq`` must
    name an active ClusterQueue of the snapshot (see ``unavailable``)."""
    assert pending.cq is not None
    cq = snapshot.cqs[pending.cq]
    searches = Searches(snapshot)
    assigner = FlavorAssigner(snapshot, cq, pending, oracle_for(snapshot, searches))

    asks = topology_requests(snapshot, cq, pending)

    def attempt(counts: dict[str, int] | None) -> Evaluation:
        assignment = assigner.assign(counts)
        topology = None
        if asks and assignment.mode in (Mode.Fit, Mode.Preempt):
            topology = Topology(snapshot, pending, asks, assignment)
        ev = Evaluation(pending, cq, assignment, [], topology)
        if ev.mode is Mode.Preempt:
            frs = assignment.needing_preemption()
            check = None
            if topology is not None:
                frs |= topology.resources()
                check = topology.fits
            req = Request(pending, cq, frs, dict(assignment.usage), check)
            ev.targets = searches(req).targets
            if (
                topology is not None
                and ev.targets
                and not topology.settle({t.aw.key for t in ev.targets})
            ):
                ev.targets = []  # a search that does not ask the topology (fair sharing)
        return ev

    ev = attempt(None)
    if ev.mode is not Mode.Fit and not ev.targets:
        partial = _partial_admission(pending, attempt)
        if partial is not None:
            ev = partial
    return ev


def _partial_admission(
    pending: PendingWorkload, attempt: Callable[[dict[str, int] | None], Evaluation]
) -> Evaluation | None:
    """Kueue's partial admission (its pod-set reducer): when the full counts neither fit
    nor can preempt, pod sets with a ``minCount`` shrink together, each by its share of
    the total reduction (rounded down), and a binary search finds the smallest reduction
    that fits (quota and topology) or can preempt."""
    pod_sets = pending.pod_sets
    deltas = [
        ps.count - (ps.min_count if ps.min_count is not None else ps.count) for ps in pod_sets
    ]
    total = sum(deltas)
    if total <= 0:
        return None

    def counts(step: int) -> dict[str, int]:
        return {
            ps.name: ps.count - d * step // total for ps, d in zip(pod_sets, deltas, strict=True)
        }

    found: dict[int, Evaluation] = {}
    lo, hi = 0, total + 1
    while lo < hi:
        mid = (lo + hi) // 2
        ev = attempt(counts(mid))
        if ev.mode is Mode.Fit or ev.targets:
            found[mid] = ev
            hi = mid
        else:
            lo = mid + 1
    return found.get(lo)


def can_always_reclaim(cq: ClusterQueueState) -> bool:
    return cq.spec.preemption.reclaim_within_cohort == ANY


def _preempt_message(ev: Evaluation) -> str:
    own = [t for t in ev.targets if t.reason == IN_CLUSTER_QUEUE]
    cohort = [t for t in ev.targets if t.reason != IN_CLUSTER_QUEUE]
    parts = []
    if own:
        lower = all(t.aw.priority < ev.pending.priority for t in own)
        which = "lower priority" if lower else "lower or equal priority"
        parts.append(
            f"evicts {plural(len(own), 'workload')} of {which} in ClusterQueue {ev.cq.name}"
        )
    if cohort:
        root = ev.cq.node.root().name
        queues = sorted({t.aw.cq for t in cohort})
        parts.append(
            f"reclaims quota from {plural(len(cohort), 'workload')} in cohort {root} "
            f"(ClusterQueue {', '.join(queues)})"
        )
    evicting = sum(1 for t in ev.targets if t.aw.evicting)
    if evicting:
        parts.append(f"{evicting} already evicting")
    return "; ".join(parts)


def decision(ev: Evaluation, override: str | None = None) -> Decision:
    """The reported decision; ``override`` turns it Pending with that message."""
    mode = ev.mode
    victims: list[Victim] = []
    if override is not None:
        outcome, message = PENDING, override
    elif mode is Mode.Fit:
        outcome = ADMIT
        where = f"fits in ClusterQueue {ev.cq.name}"
        if ev.borrowing:
            where += f" by borrowing in cohort {ev.cq.node.root().name}"
        message = where
    elif mode is Mode.Preempt and ev.targets:
        outcome = PREEMPT
        message = _preempt_message(ev)
        victims = [
            Victim(
                object=t.aw.ref,
                reason=t.reason,
                queue=f"ClusterQueue/{t.aw.cq}",
                priority=t.aw.priority,
                evicting=t.aw.evicting,
            )
            for t in ev.targets
        ]
    elif mode is Mode.Preempt:
        outcome = PENDING
        detail = ev.assignment.message() or (ev.topology.reason if ev.topology else "")
        message = "needs preemption, but no workload is allowed to be preempted"
        if detail:
            message += f" ({detail})"
        message += f": {_what_would_preempt(ev)}"
    else:
        outcome = PENDING
        message = (
            (ev.topology.reason if ev.topology else "") or ev.assignment.message() or "does not fit"
        )
    topo = ev.topology
    if outcome == PENDING and topo is not None and topo.asks and topo.snapshot.suggest_moves:
        move = topo.suggestion()
        if move:
            message += f"; {move}"
    if outcome in (ADMIT, PREEMPT) and topo is not None and topo.assigned:
        message += f"; topology: {topo.describe()}"
    if outcome in (ADMIT, PREEMPT):
        full = {ps.name: ps.count for ps in ev.pending.pod_sets}
        partial = [
            f"{ps.name} {ps.count} of {full[ps.name]} pods"
            for ps in ev.assignment.pod_sets
            if ps.name in full and ps.count < full[ps.name]
        ]
        if partial:
            message += f" (partially admitted: {', '.join(partial)})"
    return Decision(
        preemptor=ev.pending.ref,
        queue=f"ClusterQueue/{ev.cq.name}",
        mode=mode.name,
        outcome=outcome,
        flavors=ev.assignment.flavors(),
        borrowing=ev.borrowing,
        victims=victims,
        placement={},
        message=message,
        topology=dict(topo.assigned) if topo is not None and outcome != PENDING else {},
    )


def _what_would_preempt(ev: Evaluation) -> str:
    """What would have to change for the workload to preempt (its queue's policy, or
    the priorities of the workloads that hold the quota)."""
    policy = ev.cq.spec.preemption
    in_cohort = ev.cq.spec.cohort is not None
    changes = []
    if policy.within_cluster_queue == NEVER:
        changes.append(
            "withinClusterQueue is Never (the default): set LowerPriority to let it "
            f"preempt in ClusterQueue {ev.cq.name}"
        )
    if in_cohort and policy.reclaim_within_cohort == NEVER:
        changes.append(
            "reclaimWithinCohort is Never (the default): set LowerPriority or Any to let "
            "it reclaim quota lent to the cohort"
        )
    if changes:
        return "; ".join(changes)
    where = "its ClusterQueue or the cohort" if in_cohort else f"ClusterQueue {ev.cq.name}"
    return (
        f"every workload holding the quota it needs in {where} has a priority the policy "
        f"protects (withinClusterQueue {policy.within_cluster_queue}, reclaimWithinCohort "
        f"{policy.reclaim_within_cohort}); it waits for quota to free up"
    )


def not_considered(pending: PendingWorkload, reason: str) -> Decision:
    return Decision(
        preemptor=pending.ref,
        queue=f"ClusterQueue/{pending.cq}" if pending.cq else "",
        mode="NoFit",
        outcome=PENDING,
        flavors={},
        borrowing=0,
        victims=[],
        placement={},
        message=reason,
    )


__all__ = [
    "Evaluation",
    "can_always_reclaim",
    "decision",
    "evaluate",
    "not_considered",
    "unavailable",
]
