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
  (``Parking.refuted``); if one might not have been Pending there, some of those come
  back and the pass is run again (``quotacycle.cycle_decisions``). Only the last
  run, in which no stand-in is in doubt, makes the proof: which ones come back before
  it is free, and chosen to spare evaluations and runs (``Parking.refuted`` takes
  those in doubt as admitted when judging the later ones, so that room for one does
  not bring back a whole queue; ``Parking.stand_ins`` brings back before the pass
  those a rough play of it finds in doubt).
- **Stand-ins behind every other workload of their queue are not read.** A stand-in's
  only effect on the pass is the place it takes in its queue; of the stand-ins behind
  every other pending workload of a ClusterQueue, only the first is read, and the
  others' decisions follow from its (``Parking.leave_out``, ``Parking.fill``).

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
# A pending workload's place in its ClusterQueue: (-priority, queue-order time, uid, key).
Place = tuple[int, float | None, str, str]
# The same with the queue-order time known: the order of the pass's queues.
Order = tuple[int, float, str, str]
# What a parked workload's certificate depends on: (ClusterQueue, priority, requests).
Signature = tuple[str, int, frozenset[tuple[FR, int]]]
# Changes that may change what any parked workload gets: every workload comes back.
RESET_KINDS = STRUCTURAL | frozenset({"LocalQueue", "Namespace", "AdmissionCheck"})


def _first(m: tuple[Order, Workload]) -> Order:
    return m[0]


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
        # pending workload key -> its ClusterQueue and its place in it (``_place``): its
        # object, its LocalQueue and the priority classes changing forget it
        self._places: dict[str, tuple[str | None, Place]] = {}
        # parked workload key -> its ClusterQueue, priority and requests (``stand_ins``);
        # none of them changes while it is parked (its object, its LocalQueue, the
        # priority classes and the queues' specs changing unpark it)
        self._sigs: dict[str, Signature] = {}
        # pending workload key -> its ``_requests`` in its ClusterQueue (``_foreseen``),
        # forgotten as ``_places`` is
        self._reqs: dict[str, dict[FR, int] | None] = {}
        self.stood_in = 0  # evaluations parking saved (stand-ins decided in passes)

    # -- state changes -------------------------------------------------------------------
    def changed(self, kind: str, old: object, new: object) -> None:
        """One change the state has already taken (``old``/``new`` may be None)."""
        if kind in RESET_KINDS:
            self.parked.clear()
            self._frs.clear()
            self._places.clear()
            self._sigs.clear()
            self._reqs.clear()
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
            self._places.pop(key, None)
            self._sigs.pop(key, None)
            self._reqs.pop(key, None)

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
        # (queue, priority, requests) -> its certificate on this snapshot: ``certificate``
        # reads nothing else of the workload, so stand-ins alike share one
        memo: dict[Signature, Certificate | None] = {}
        sigs = self._sigs
        for key in list(self.parked):
            wl = self.pending.get(key)
            if wl is None or key in skip:
                self.unpark((key,))
                continue
            sig = sigs.get(key)
            if sig is not None and sig in memo:
                cert = memo[sig]
            else:
                cq_name = state.cluster_queue_of(wl)
                cq = snapshot.cqs.get(cq_name) if cq_name is not None else None
                priority = state.priority_of(wl)
                cert = (
                    certificate(snapshot, wl, cq, priority, lowest, self._frs.get(key))
                    if cq is not None
                    else None
                )
                if cert is not None:
                    sig = sigs[key] = (cert.cq.name, priority, frozenset(cert.requests.items()))
                if sig is not None:
                    memo[sig] = cert
            if cert is None:
                self.unpark((key,))
                continue
            self._frs[key] = cert.requests
            out[key] = cert
        for key in self._foreseen(snapshot, out):
            del out[key]
            self.unpark((key,))
        return out

    def _foreseen(self, snapshot: Snapshot, stand_ins: Mapping[str, Certificate]) -> list[str]:
        """The stand-ins likely to be in doubt at their turn (``refuted``), to evaluate
        from the start rather than in a pass run again: a guess, which only decides how
        much is evaluated (any parked workload may be evaluated; whether one may stay
        parked is ``refuted``'s question). The pass is played roughly, each pending
        workload at the cycle of its place in its queue: one whose request fits takes
        it (as an Admit would), and so does a stand-in whose certificate fails there.
        Usage only grows in this play, so a certificate that holds at the start holds
        throughout (``Certificate.holds``): only those that fail at the start are played."""
        certs = {id(cert): cert for cert in stand_ins.values()}
        held = {i: cert.holds() for i, cert in certs.items()}
        if all(held.values()):
            return []
        doubtful = {key for key, cert in stand_ins.items() if not held[id(cert)]}
        now_ts = snapshot.now.timestamp()
        places = self._places
        members: dict[str | None, list[tuple[Order, str]]] = {}
        for key, wl in self.pending.items():
            found = places.get(key)
            if found is None:
                found = places[key] = self._place(wl)
            name, (p, t, uid, k) = found
            members.setdefault(name, []).append(((p, now_ts if t is None else t, uid, k), key))
        last = 0
        for ranked in members.values():
            ranked.sort()
            for i, (_, key) in enumerate(ranked):
                if key in doubtful and i > last:
                    last = i
        turns = [
            (i, place, key, name)
            for name, ranked in members.items()
            for i, (place, key) in enumerate(ranked[: last + 1])
        ]
        turns.sort()
        out: list[str] = []
        taken: list[tuple[ClusterQueueState, dict[FR, int]]] = []
        try:
            i = 0
            while i < len(turns):
                j = i
                while j < len(turns) and turns[j][0] == turns[i][0]:
                    j += 1
                takes: list[tuple[ClusterQueueState, dict[FR, int]]] = []
                for _, _, key, cq_name in turns[i:j]:
                    if key in stand_ins:
                        if key not in doubtful:
                            continue
                        cert = stand_ins[key]
                        ok = held.get(id(cert))
                        if not ok:
                            # held: it holds from here on (usage only grows), or it
                            # failed before the last takes: judged again
                            ok = held[id(cert)] = cert.holds()
                        if not ok:
                            out.append(key)
                            takes.append((cert.cq, cert.requests))
                        continue
                    cq = snapshot.cqs.get(cq_name) if cq_name is not None else None
                    if cq is None:
                        continue
                    frs = self._requests_of(key, cq)
                    if frs and all(v <= cq_available(cq.node, fr) for fr, v in frs.items()):
                        takes.append((cq, frs))
                for step in takes:
                    Snapshot.put_back(step[0].node, step[1])
                    taken.append(step)
                i = j
                if not any(not ok for ok in held.values()):
                    break  # every certificate holds: nothing more can fail
        finally:
            for done, frs in reversed(taken):
                Snapshot.withdraw(done.node, frs)
        return out

    def _requests_of(self, key: str, cq: ClusterQueueState) -> dict[FR, int] | None:
        """``_requests`` of the pending workload ``key`` in ``cq``, its ClusterQueue
        (remembered until its object, its LocalQueue or the queues change)."""
        reqs = self._reqs
        if key in reqs:
            return reqs[key]
        wl = self.pending.get(key)
        if wl is None:
            return None
        frs = reqs[key] = _requests(wl, cq) if wl.pod_sets else None
        return frs

    def view(
        self,
        stand_ins: Mapping[str, Certificate],
        left_out: Mapping[str, list[Workload]] | None = None,
    ) -> ClusterState:
        """The state a pass reads: its pending workloads only, parked ones as stand-ins
        (the same Workload asking for nothing), less the stand-ins ``left_out`` (the
        values of ``leave_out``)."""
        gone = {wl.key for run in left_out.values() for wl in run} if left_out else ()
        workloads = {
            k: msgspec.structs.replace(wl, pod_sets=()) if k in stand_ins else wl
            for k, wl in self.pending.items()
            if k not in gone
        }
        return msgspec.structs.replace(self.state, workloads=workloads)

    def _place(self, wl: Workload) -> tuple[str | None, Place]:
        """A pending workload's ClusterQueue and its place in it: the pass's queue order
        (``PendingWorkload.queue_order``: higher priority, older, uid), ties by key (the
        pass sorts its workloads by key first); the queue-order time None when it is
        the pass's now."""
        t = wl.queue_order_time()
        key = wl.key
        place = (-self.state.priority_of(wl), t.timestamp() if t else None, wl.uid or key, key)
        return self.state.cluster_queue_of(wl), place

    def leave_out(
        self, snapshot: Snapshot, stand_ins: Mapping[str, Certificate]
    ) -> dict[str, list[Workload]]:
        """The stand-ins a pass need not read: of a ClusterQueue's stand-ins behind every
        other pending workload of it (in queue order), all but the first (the key here),
        when they are all of one LocalQueue and have no admission.

        Why the pass without them decides the same for every other workload: a stand-in
        is decided NoFit at no cost, holds nothing back and, its queue being
        BestEffortFIFO, blocks nothing; its only effect is the place it takes in its
        queue, and nothing is behind these. What the pass would have decided for them
        follows from its decision for the first (``fill``): they share its LocalQueue
        (what makes a workload unavailable is its LocalQueue's), and once the first is a
        head nothing is left that could block the queue before them (the i-th after it
        is a head i cycles later); if the first is not reached, neither are they, with
        the same message (a queue is blocked once, for every member left)."""
        if len(stand_ins) < 2:
            return {}
        now_ts = snapshot.now.timestamp()
        last: dict[str | None, Order] = {}
        runs: dict[str, list[tuple[Order, Workload]]] = {}
        places = self._places
        for key, wl in self.pending.items():
            found = places.get(key)
            if found is None:
                found = places[key] = self._place(wl)
            cq, (p, t, uid, k) = found
            place = (p, now_ts if t is None else t, uid, k)
            if key in stand_ins:
                if cq is not None:
                    runs.setdefault(cq, []).append((place, wl))
            elif cq not in last or place > last[cq]:
                last[cq] = place
        out: dict[str, list[Workload]] = {}
        for cq, members in runs.items():
            bound = last.get(cq)
            run = sorted((m for m in members if bound is None or m[0] > bound), key=_first)
            if len(run) < 2:
                continue
            head = run[0][1]
            if all(
                wl.admission is None
                and wl.namespace == head.namespace
                and wl.queue_name == head.queue_name
                for _, wl in run
            ):
                out[head.key] = [wl for _, wl in run[1:]]
        return out

    def fill(
        self,
        decisions: list[Decision],
        stand_ins: Mapping[str, Certificate],
        left_out: Mapping[str, list[Workload]],
        first: frozenset[str] = frozenset(),
    ) -> list[Decision]:
        """The pass's decisions with those of the stand-ins it did not read
        (``leave_out``), as the pass would have decided them: the stand-in decision when
        the first of theirs was a head (each one cycle after the one before, at the end
        of its cycle's decisions; after the last head when the pass had no such cycle),
        else the first's (not reached), right after it."""
        if not left_out:
            return decisions
        rank: dict[str, int] = {}
        cycles: list[int | None] = []
        after: dict[int, list[Decision]] = {}
        later: list[tuple[int, int, Decision]] = []  # (cycle, order, decision)
        for i, d in enumerate(decisions):
            key = d.preemptor.removeprefix("Workload/")
            stood = is_stand_in(d, stand_ins)
            if not (d.flavors or stood):
                cycles.append(None)
            elif key in first:
                cycles.append(0)
            else:
                rank[d.queue] = rank.get(d.queue, 0) + 1
                cycles.append(rank[d.queue])
            run = left_out.get(key)
            if run is None:
                continue
            copies = [
                msgspec.structs.replace(d, preemptor=wl.ref, flavors={}, victims=[], placement={})
                for wl in run
            ]
            at = cycles[-1]
            if stood and at is not None:
                later += [(at + 1 + j, len(later) + j, c) for j, c in enumerate(copies)]
            else:
                after[i] = copies
        later.sort(key=lambda x: (x[0], x[1]))
        last_head = max((i for i, c in enumerate(cycles) if c is not None), default=-1)
        out: list[Decision] = []
        j = 0
        for i, d in enumerate(decisions):
            c = cycles[i]
            if c is not None:
                while j < len(later) and later[j][0] < c:
                    out.append(later[j][2])
                    j += 1
            out.append(d)
            out += after.get(i, ())
            if i == last_head:
                out += (x[2] for x in later[j:])
                j = len(later)
        out += (x[2] for x in later[j:])
        return out

    @staticmethod
    def _hold_now(decisions: list[Decision], stand_ins: Mapping[str, Certificate]) -> bool:
        """Does the certificate of every stand-in the pass decided hold on the usage as
        it now stands? Then, in a pass that preempted nothing, each held at its turn:
        the pass only took usage, and more usage never makes a certificate fail
        (``Certificate.holds``: less is available, more is borrowed)."""
        held: set[int] = set()
        for d in decisions:
            if d.mode != "NoFit" or d.message != STAND_IN_MESSAGE:
                continue
            cert = stand_ins.get(d.preemptor.removeprefix("Workload/"))
            if cert is None or id(cert) in held:
                continue
            if not cert.holds():
                return False
            held.add(id(cert))
        return True

    def refuted(
        self,
        snapshot: Snapshot,
        decisions: list[Decision],
        stand_ins: Mapping[str, Certificate],
        first: frozenset[str] = frozenset(),
        earliest: bool = True,
    ) -> set[str]:
        """Stand-ins that might not have been Pending at their turn in this pass (empty
        exactly when none might not have been; which ones: ``earliest``, below): each is
        judged on ``snapshot``
        (the state the pass started from) plus what the pass admitted before its cycle
        (a queue gives one head per cycle, so a head's cycle is its rank among its
        queue's heads; preemptors first come before the first cycle), less what its
        preemptions gave back (their victims' usage). An admission whose usage is not
        known exactly (partial admission) is left out, which only makes the test
        stricter; a preemption only removes candidates, which ``certificate`` already
        found none of below the workload's priority. With ``earliest``, those of the
        earliest cycle in which some are in doubt (once they are evaluated, what they
        take may leave the later ones unfit); else those in doubt when the earlier ones
        in doubt are taken as admitted (their requests taken at their cycle): a guess,
        which only chooses among those in doubt (the first in doubt is judged without
        it). A pass that preempted nothing only took usage: when every certificate holds
        on the usage as it stands, none is in doubt (``_hold_now``)."""
        if not any(d.victims for d in decisions) and self._hold_now(decisions, stand_ins):
            return set()
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
                cq = snapshot.cqs.get(d.queue.removeprefix("ClusterQueue/"))
                usage = self._requests_of(key, cq) if cq is not None else None
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
        # id of a certificate -> does it hold on the usage as it now stands (stand-ins
        # alike share one: ``stand_ins``)
        held: dict[int, bool] = {}
        try:
            for cycle in sorted(checks.keys() | moved.keys()):
                doubt = []
                for k in checks.get(cycle, ()):
                    cert = stand_ins[k]
                    ok = held.get(id(cert))
                    if ok is None:
                        ok = held[id(cert)] = cert.holds()
                    if not ok:
                        doubt.append(k)
                out.update(doubt)
                if out and earliest:
                    break
                steps = moved.get(cycle, [])
                # a guess, not a proof (which set comes back is free as long as it is
                # not empty): those in doubt take their requests, as an Admit would
                steps = steps + [(stand_ins[k].cq, stand_ins[k].requests, 1) for k in doubt]
                if steps:
                    held.clear()
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
