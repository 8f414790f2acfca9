"""Parking: Kueue's inadmissible workloads, not evaluated again while nothing that could
admit them, or let them preempt, has changed.

Kueue keeps a workload that could not be admitted out of its queue's heads (its queue
manager's ``inadmissibleWorkloads`` per ClusterQueue, ``pkg/cache/queue/cluster_queue.go``
``requeueIfNotPresent``) and moves it back on the events that may make it admissible
(``QueueInadmissibleWorkloads``: a workload of the cohort finished, deleted or evicted,
quota or cohort changes; ``pkg/controller/core/workload_controller.go``). Which heads it
parks (``pkg/scheduler/scheduler.go`` ``schedule`` and ``requeueAndUpdate``): in a
BestEffortFIFO ClusterQueue, a head never nominated: NoFit, or Preempt without a single
candidate. A head that preempts (``PendingPreemption``), was skipped after nomination
(``FailedAfterNomination``), or whose preemption failed is requeued at once; a StrictFIFO
queue requeues every head at once. Parking here takes the same heads.

What differs is when a parked workload comes back, because gangpreempt promises an exact
answer: the pass with parking gives the same decisions as the pass without it (the Admits
and Preempts in the same order; a parked workload's message is that of its last
evaluation, and its Pending decision may fall elsewhere among its Kueue cycle's, which
changes nothing).

- **A parked workload keeps its place.** It stays in the pass as a stand-in: the same
  Workload (key, queue, priority, queue order, uid) asking for nothing, which the pass
  decides Pending at no cost (NoFit, which neither blocks a BestEffortFIFO queue nor
  holds capacity back); its standing decision (that of its last evaluation) replaces the
  stand-in's. Every other head sees the same cycles, in the same order, as without
  parking. (Kueue's heads differ while a workload is parked; parking here never changes
  an outcome.)
- **It comes back exactly when it might not be Pending.** Before each pass every parked
  workload is checked (``certificate``) against the ledger as it stands: it stays parked
  only while no candidate can make room for it, and (checked at its turn, below) it
  cannot fit. It comes back (is evaluated again) as soon as room frees up enough
  for it (a workload finished, deleted, evicted or requeued; a plan's victims left, or its
  hold ended) or a workload it may preempt is admitted in its cohort, and on any change
  of its own object or of the queues and quotas (Kueue's requeue events, and the ones
  Kueue does not react to but that could make it preempt).
- **Checked at its turn, not only before the pass.** What a pass admits before a
  stand-in's Kueue cycle only takes quota; the victims it preempts give quota back.
  After the pass each stand-in is judged again on the state at its cycle
  (``Parking.refuted``); if one might not have been Pending there, the earliest such
  come back and the pass is run again (``quotacycle.cycle_decisions``).

Not parked (evaluated every pass, as before): StrictFIFO queues, fair sharing (the heads'
order depends on every entry), hierarchical cohorts deeper than one level, several
flavors for one resource, partial admission (``minCount``), and a Preempt without
victims that holds capacity back (``reclaimWithinCohort`` other than Any), unless it is
NoFit by its queue's configuration.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.queues import ANY, LOWER_PRIORITY, NEVER, STRICT_FIFO
from gangpreempt.model.workloads import Workload
from gangpreempt.planning.decisions import ADMIT, PENDING, PREEMPT, Decision
from gangpreempt.quota.assignment import pod_set_requests
from gangpreempt.quota.ledger import STRUCTURAL
from gangpreempt.quota.snapshot import ClusterQueueState, Snapshot
from gangpreempt.quota.tree import FR, cq_available

# What the pass says of a stand-in (a workload asking for nothing): ``deciding.decision``
# of a NoFit evaluation without pod sets.
STAND_IN_MESSAGE = "does not fit"
# Changes that may change what any parked workload gets: every workload comes back.
RESET_KINDS = STRUCTURAL | frozenset({"LocalQueue", "Namespace", "AdmissionCheck"})


def tree_of(cq: ClusterQueueState) -> str:
    """The cohort tree a ClusterQueue belongs to: its root cohort, or itself."""
    node = cq.node
    return node.root().name if node.parent is not None else f"ClusterQueue/{cq.name}"


def _requests(wl: Workload, cq: ClusterQueueState) -> dict[FR, int] | None:
    """The workload's total request per flavor-resource, when each resource it asks for
    has exactly one flavor in the ClusterQueue and no pod set may shrink; else None."""
    groups = cq.spec.resource_groups
    out: dict[FR, int] = {}
    for ps in wl.pod_sets:
        count = wl.active_count(ps)
        if count <= 0 or (ps.min_count is not None and ps.min_count < ps.count):
            return None
        for res, v in pod_set_requests(ps, cq, count).items():
            if not v:
                continue
            group = next((g for g in groups if res in g.covered_resources), None)
            if group is None or len(group.flavors) != 1:
                return None
            fr = (group.flavors[0].name, res)
            out[fr] = out.get(fr, 0) + v
    return out or None


class Certificate:
    """What makes a workload provably unfit, minus the usage it is judged on: its total
    request per flavor-resource, and how it would be unfit (NoFit by its queue's
    configuration; or a Preempt without victims, no candidate existing)."""

    __slots__ = ("cq", "no_fit", "preempt", "requests")

    def __init__(
        self, cq: ClusterQueueState, requests: dict[FR, int], no_fit: bool, preempt: bool
    ) -> None:
        self.cq = cq
        self.requests = requests
        self.no_fit = no_fit
        self.preempt = preempt

    def holds(self) -> bool:
        """Unfit on the snapshot's usage as it now stands (see ``still_unfit``)."""
        node = self.cq.node
        frs = self.requests
        short = [fr for fr, v in frs.items() if v > cq_available(node, fr)]
        if not short:
            return False
        if self.no_fit:
            for fr in short:
                if node.nominal(fr) < frs[fr] and (
                    node.parent is None or node.borrowing_with(fr, frs[fr])
                ):
                    return True
        return self.preempt and any(node.borrowing_with(fr, v) for fr, v in frs.items())


def certificate(
    snapshot: Snapshot,
    wl: Workload,
    cq: ClusterQueueState,
    priority: int,
    lowest: dict[tuple[str, frozenset[FR]], float] | None = None,
    requests: dict[FR, int] | None = None,
) -> Certificate | None:
    """The parts of ``still_unfit`` that admitting workloads cannot change, or None.
    ``lowest``: a cache of the lowest priorities per tree, valid for one snapshot state;
    ``requests``: the workload's ``_requests`` in ``cq``, when known."""
    if snapshot.fair_sharing or cq.inactive_reason:
        return None
    spec = cq.spec
    if spec.queueing_strategy == STRICT_FIFO:
        return None
    node = cq.node
    if node.parent is not None and node.parent.parent is not None:
        return None  # a deeper tree may give the queue a hierarchical advantage
    frs = requests if requests is not None else _requests(wl, cq)
    if frs is None:
        return None
    policy = spec.preemption
    no_fit = (
        policy.within_cluster_queue == NEVER
        and policy.borrow_within_cohort == NEVER
        and any(node.nominal(fr) < v for fr, v in frs.items())
    )
    preempt = (
        policy.reclaim_within_cohort == ANY  # else a Preempt without victims holds quota
        and policy.within_cluster_queue in (NEVER, LOWER_PRIORITY)
        and policy.borrow_within_cohort in (NEVER, LOWER_PRIORITY)
        and _lowest(snapshot, cq, frozenset(frs), lowest) >= priority
    )
    if not (no_fit or preempt):
        return None
    return Certificate(cq, frs, no_fit, preempt)


def _lowest(
    snapshot: Snapshot,
    cq: ClusterQueueState,
    frs: frozenset[FR],
    cache: dict[tuple[str, frozenset[FR]], float] | None = None,
) -> float:
    """The lowest priority of the workloads holding ``frs`` in the queue's tree."""
    key = (tree_of(cq), frs)
    if cache is not None and key in cache:
        return cache[key]
    low: float = float("inf")
    for other in snapshot.cluster_queues_in_tree(cq):
        p = other.min_priority(frs)
        if p is not None and p < low:
            low = p
    if cache is not None:
        cache[key] = low
    return low


def still_unfit(snapshot: Snapshot, wl: Workload, cq: ClusterQueueState, priority: int) -> bool:
    """True only if ``wl`` (pending in ``cq``, at ``priority``) can be neither admitted nor
    preempt for on ``snapshot``, and on any state an admission pass reaches from it by
    admitting workloads (usage only grows; no candidate appears) without preempting in its
    cohort tree; and its evaluation holds no capacity back (NoFit, or a Preempt without
    victims in a queue that reclaims from Any). False when this cannot be shown cheaply.

    Why: with one flavor per resource, it is admitted only if its whole request fits
    (``cq_available``), which more usage cannot help. It is NoFit whatever the candidates
    when a resource it lacks needs borrowing (which rules out reclaiming within its
    subtree) beyond its nominal quota and its queue may neither preempt within itself nor
    while borrowing. Otherwise, in a flat cohort, a resource that needs borrowing makes
    the pass without borrowing fail (its own usage can only grow: no own candidate is
    below its priority), and with borrowing every candidate (hierarchy: none, a flat tree
    gives no advantage to a queue that must borrow; priority and same-queue groups: below
    its priority, under LowerPriority or Never) would be an admitted workload of its tree
    below its priority: there is none, re-preemption guard or not."""
    cert = certificate(snapshot, wl, cq, priority)
    return cert is not None and cert.holds()


def parks(decision: Decision) -> bool:
    """Is this pass decision one Kueue parks (a head never nominated: NoFit, or Preempt
    without victims)? Not a head skipped after nomination, nor one never considered."""
    if decision.outcome != PENDING:
        return False
    if decision.mode == "Preempt":
        return not decision.message.startswith("skipped")
    # an evaluated NoFit names its pod sets' flavors; a workload not considered has none
    return decision.mode == "NoFit" and bool(decision.flavors)


class Parking:
    """The parked workloads of one ledger's state, and its pending workloads (so that a
    pass reads the backlog, not every workload): fed every change the state takes, as
    the ``Ledger`` is. Kept by the caller across cycles; read and updated by
    ``quotacycle.cycle_decisions``."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.pending: dict[str, Workload] = {
            k: wl for k, wl in state.workloads.items() if wl.is_pending
        }
        # parked workload key -> the decision of its last evaluation
        self.parked: dict[str, Decision] = {}
        # parked workload key -> its requests (its object does not change while parked)
        self._frs: dict[str, dict[FR, int]] = {}
        self.stood_in = 0  # evaluations parking saved (stand-ins decided in passes)

    # -- state changes -------------------------------------------------------------------
    def changed(self, kind: str, old: object, new: object) -> None:
        """One change the state has already taken (``old``/``new`` may be None)."""
        if kind in RESET_KINDS:
            self.parked.clear()
            self._frs.clear()
        elif kind == "Workload":
            current = new if new is not None else old
            if not isinstance(current, Workload):
                return
            key = current.key
            self.unpark((key,))  # its own object changed: evaluated again
            if isinstance(new, Workload) and new.is_pending:
                self.pending[key] = new
            else:
                self.pending.pop(key, None)

    def unpark(self, keys: Iterable[str]) -> None:
        """Evaluate these workloads again in the next pass."""
        for key in keys:
            self.parked.pop(key, None)
            self._frs.pop(key, None)

    # -- around a pass ---------------------------------------------------------------------
    def stand_ins(
        self, snapshot: Snapshot, skip: frozenset[str] = frozenset()
    ) -> dict[str, Certificate]:
        """The parked workloads that may stay parked in this pass (``certificate``; whether
        they are unfit at their turn is ``refuted``'s question), each with its stand-in;
        the others are unparked. ``skip``: keys decided otherwise this pass (plans in
        flight, preemptors first)."""
        out: dict[str, Certificate] = {}
        state = self.state
        lowest: dict[tuple[str, frozenset[FR]], float] = {}
        for key in list(self.parked):
            wl = self.pending.get(key)
            cq_name = state.cluster_queue_of(wl) if wl is not None else None
            cq = snapshot.cqs.get(cq_name) if cq_name is not None else None
            cert = (
                certificate(snapshot, wl, cq, state.priority_of(wl), lowest, self._frs.get(key))
                if wl is not None and cq is not None and key not in skip
                else None
            )
            if cert is None:
                self.unpark((key,))
                continue
            self._frs[key] = cert.requests
            out[key] = cert
        return out

    def view(self, stand_ins: Mapping[str, Certificate]) -> ClusterState:
        """The state a pass reads: its pending workloads only, parked ones as stand-ins
        (the same Workload asking for nothing)."""
        workloads = {
            k: msgspec.structs.replace(wl, pod_sets=()) if k in stand_ins else wl
            for k, wl in self.pending.items()
        }
        return msgspec.structs.replace(self.state, workloads=workloads)

    def refuted(
        self,
        snapshot: Snapshot,
        decisions: list[Decision],
        stand_ins: Mapping[str, Certificate],
        first: frozenset[str] = frozenset(),
        earliest: bool = True,
    ) -> set[str]:
        """The stand-ins of the earliest Kueue cycle of this pass in which some might not
        have been Pending at their turn (empty when none): each is judged on ``snapshot``
        (the state the pass started from) plus what the pass admitted before its cycle
        (a queue gives one head per cycle, so a head's cycle is its rank among its
        queue's heads; preemptors first come before the first cycle), less what its
        preemptions gave back (their victims' usage). An admission whose usage is not
        known exactly (partial admission) is left out, which only makes the test
        stricter; a preemption only removes candidates, which ``certificate`` already
        found none of below the workload's priority. With ``earliest``, only those of the
        earliest cycle (once they are evaluated, what they take may leave the later ones
        unfit); else all of them."""
        rank: dict[str, int] = {}
        # cycle -> usage the pass took (+1) or gave back (-1) in it, per queue
        moved: dict[int, list[tuple[ClusterQueueState, dict[FR, int], int]]] = {}
        checks: dict[int, list[str]] = {}
        for d in decisions:
            key = d.preemptor.removeprefix("Workload/")
            stood = is_stand_in(d, stand_ins)
            if not (d.flavors or stood):
                continue  # never a head
            if key in first:
                cycle = 0
            else:
                cycle = rank[d.queue] = rank.get(d.queue, 0) + 1
            if stood:
                checks.setdefault(cycle, []).append(key)
            elif d.outcome in (ADMIT, PREEMPT):
                # the usage it took (left out when not known exactly: a stricter test);
                # its victims' usage left the pass (exactly: their ledger usage)
                steps = moved.setdefault(cycle, [])
                wl = self.pending.get(key)
                cq = snapshot.cqs.get(d.queue.removeprefix("ClusterQueue/"))
                usage = _requests(wl, cq) if wl is not None and cq is not None else None
                if cq is not None and usage is not None:
                    steps.append((cq, usage, 1))
                for v in d.victims:
                    aw = snapshot.admitted.get(v.object.removeprefix("Workload/"))
                    if aw is not None:
                        steps.append((snapshot.cqs[aw.cq], dict(aw.usage), -1))
        out: set[str] = set()
        if not checks:
            return out
        done: list[tuple[ClusterQueueState, dict[FR, int], int]] = []
        try:
            for cycle in sorted(checks.keys() | moved.keys()):
                doubt = [k for k in checks.get(cycle, ()) if not stand_ins[k].holds()]
                out.update(doubt)
                if out and earliest:
                    break
                steps = moved.get(cycle, [])
                # a guess, not a proof (which set comes back is free as long as it is
                # not empty): those in doubt take their requests, as an Admit would
                steps = steps + [(stand_ins[k].cq, stand_ins[k].requests, 1) for k in doubt]
                for step in steps:
                    cq, usage, sign = step
                    if sign > 0:
                        Snapshot.put_back(cq.node, usage)
                    else:
                        Snapshot.withdraw(cq.node, usage)
                    done.append(step)
        finally:
            for cq, usage, sign in reversed(done):
                if sign > 0:
                    Snapshot.withdraw(cq.node, usage)
                else:
                    Snapshot.put_back(cq.node, usage)
        return out

    def settle(
        self,
        decisions: list[Decision],
        stand_ins: Mapping[str, Certificate],
        skip: frozenset[str] = frozenset(),
    ) -> list[Decision]:
        """After a pass: the stand-ins' decisions replaced by their standing ones, and the
        heads Kueue parks parked (whether they stay parked is asked again before each
        pass, on the ledger as it then is)."""
        out = []
        for d in decisions:
            key = d.preemptor.removeprefix("Workload/")
            if key in stand_ins:
                standing = self.parked.get(key)
                if standing is not None and is_stand_in(d, stand_ins):
                    self.stood_in += 1
                    d = standing
            elif key not in skip and key in self.pending and parks(d):
                self.parked[key] = d
            out.append(d)
        return out


def is_stand_in(d: Decision, stand_ins: Mapping[str, Certificate]) -> bool:
    """Is ``d`` the pass's decision on a stand-in (not a never-considered message)?"""
    return (
        d.mode == "NoFit"
        and d.message == STAND_IN_MESSAGE
        and d.preemptor.removeprefix("Workload/") in stand_ins
    )


__all__ = [
    "RESET_KINDS",
    "STAND_IN_MESSAGE",
    "Certificate",
    "Parking",
    "certificate",
    "is_stand_in",
    "parks",
    "still_unfit",
    "tree_of",
]
