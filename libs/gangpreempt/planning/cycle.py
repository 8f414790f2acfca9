"""One admission pass over every pending workload, in Kueue's order.

A pass is a series of Kueue scheduling cycles on one snapshot, until no queue has a new
head. Each cycle takes the head of every ClusterQueue (higher priority first, then older),
evaluates all heads against the snapshot, and processes them ordered by borrowing level,
priority and age:

- **Admit**: the workload's usage is added to the snapshot.
- **Preempt**: its victims leave the snapshot and its usage is added (the state once the
  victims are gone); no other preemptor may take them. A later head whose victims overlap
  is recomputed without them. After a preemption in a cohort tree, no later head may
  borrow in that tree during the pass (KEP-83).
- **Pending**: NoFit, or Preempt without victims (its capacity is held back for the rest
  of that cycle unless its queue reclaims from Any), or no longer fitting after an
  earlier head.

Under Kueue's fair sharing the heads are processed in the order of Kueue's tournament
(``planning.tournament``) and KEP-83's no-borrowing rule does not apply.

A queue whose head is preempting, or was skipped, waits behind it. A StrictFIFO queue
also waits behind a head that does not fit; a BestEffortFIFO queue moves on to its next
workload in the next cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from gangpreempt.model.queues import STRICT_FIFO
from gangpreempt.model.workloads import Workload
from gangpreempt.planning.deciding import (
    Evaluation,
    can_always_reclaim,
    decision,
    evaluate,
    not_considered,
    unavailable,
)
from gangpreempt.planning.decisions import PENDING, Decision
from gangpreempt.planning.topology import Topology
from gangpreempt.planning.tournament import fair_order
from gangpreempt.quota.assignment import Assignment
from gangpreempt.quota.modes import Mode
from gangpreempt.quota.pending import PendingWorkload
from gangpreempt.quota.snapshot import ClusterQueueState, Snapshot
from gangpreempt.quota.tree import Quantities, cq_available

# ``deciding.decision``'s message for a NoFit evaluation that assigned nothing.
EMPTY_MESSAGE = "does not fit"


def _reserve(ev: Evaluation) -> Quantities:
    """Capacity a preemptor without victims holds back, so that lower-priority
    workloads elsewhere in the cohort cannot take it first."""
    node = ev.cq.node
    out: Quantities = {}
    for fr, want in ev.assignment.usage.items():
        quota = node.quotas.get(fr)
        nominal = quota.nominal if quota else 0
        used = node.usage.get(fr, 0)
        if ev.borrowing:
            if quota is None or quota.borrowing_limit is None:
                out[fr] = want
            else:
                out[fr] = min(want, nominal + quota.borrowing_limit - used)
        else:
            out[fr] = max(0, min(want, nominal - used))
    return {fr: v for fr, v in out.items() if v > 0}


class _Queue:
    __slots__ = ("blocked", "cq", "members", "next")

    def __init__(self, cq: ClusterQueueState, members: list[PendingWorkload]) -> None:
        self.cq = cq
        self.members = members
        self.next = 0
        self.blocked: str | None = None

    def head(self) -> PendingWorkload | None:
        if self.blocked is not None or self.next >= len(self.members):
            return None
        return self.members[self.next]


class AdmissionPass:
    def __init__(
        self,
        snapshot: Snapshot,
        waiting: frozenset[str] = frozenset(),
        first: frozenset[str] = frozenset(),
        observe: Callable[[Evaluation, Snapshot], None] | None = None,
    ) -> None:
        self.snapshot = snapshot
        snapshot.forget_topology()  # the nodes and pods may have changed since
        # Called with each preemption as it is decided, on the snapshot it was decided on
        # (what ``gangpreempt simulate`` measures against the optimum); reads only.
        self.observe = observe
        # Pending workloads whose preemption is in flight: at the head of their queue they
        # keep it waiting behind them, and get no new decision.
        self.waiting = waiting
        # Preemptors whose victims have just left: processed before every other head, so
        # the room they preempted for is theirs (Kueue's PrioritizePreemptorWorkloads).
        self.first = first
        self.decisions: list[Decision] = []
        self.preempting_trees: set[str] = set()
        self.queues: dict[str, _Queue] = {}
        # Capacity held back this cycle by heads that need preemption but found no
        # victims; Kueue takes a fresh snapshot every cycle, so it is given back.
        self.held: list[tuple[ClusterQueueState, Quantities]] = []

    def run(self) -> list[Decision]:
        snap = self.snapshot
        state = snap.state
        now = snap.now
        by_queue: dict[str, list[PendingWorkload]] = {}
        # Per LocalQueue (namespace -> name -> ...), for workloads without an admission
        # and for those with one apart: why a workload there cannot be considered, and
        # (without an admission) its ClusterQueue; ``unavailable`` and
        # ``ClusterState.cluster_queue_of`` read nothing else of the workload, and
        # nothing they read changes during the pass. (Nested, not keyed by tuples: no
        # allocation per workload.)
        queue_of: dict[str, dict[str, str | None]] = {}
        reasons_free: dict[str, dict[str, str | None]] = {}
        reasons_admitted: dict[str, dict[str, str | None]] = {}
        for wl in _pending_by_key(snap):
            ns, name = wl.namespace, wl.queue_name
            if wl.admission is None:
                in_ns = _inner(queue_of, ns)
                if name in in_ns:
                    cq_name = in_ns[name]
                else:
                    cq_name = in_ns[name] = state.cluster_queue_of(wl)
                pending = PendingWorkload(wl, cq_name, state.priority_of(wl), now)
                in_ns = _inner(reasons_free, ns)
            else:
                pending = PendingWorkload.of(state, wl, now)
                in_ns = _inner(reasons_admitted, ns)
            if name in in_ns:
                reason = in_ns[name]
            else:
                reason = in_ns[name] = unavailable(snap, pending)
            if reason is not None:
                self.decisions.append(not_considered(pending, reason))
                continue
            assert pending.cq is not None
            by_queue.setdefault(pending.cq, []).append(pending)
        firsts: list[PendingWorkload] = []
        for name in sorted(by_queue):
            members = sorted(by_queue[name], key=PendingWorkload.queue_order)
            firsts += [p for p in members if p.key in self.first]
            members = [p for p in members if p.key not in self.first]
            self.queues[name] = _Queue(snap.cqs[name], members)
        # Preemptors whose victims have left come before every queue's head: the quota
        # and room they preempted for are theirs, whatever arrived in their queue since.
        for ev in sorted((self._evaluate(p) for p in firsts), key=Evaluation.order):
            self._process(ev, head=False)
        self._give_back_held()

        while True:
            heads = []
            for q in self.queues.values():
                head = q.head()
                if head is not None and head.key in self.waiting:
                    q.next += 1
                    q.blocked = f"waiting behind {head.ref}, which is preempting"
                    continue
                heads.append(head)
            entries = [self._evaluate(h) for h in heads if h is not None]
            if not entries:
                break
            ordered = (
                fair_order(snap, entries)
                if snap.fair_sharing
                else iter(sorted(entries, key=Evaluation.order))
            )
            for ev in ordered:
                self._process(ev)
            self._give_back_held()

        for q in self.queues.values():
            for pending in q.members[q.next :]:
                if pending.key not in self.waiting:
                    self.decisions.append(not_considered(pending, q.blocked or "not reached"))
        return self.decisions

    def _evaluate(self, pending: PendingWorkload) -> Evaluation:
        """``evaluate``; a workload without pod sets (a parked workload's stand-in) needs
        no flavor assigner: its assignment is empty, NoFit, without victims, and no
        partial admission can change that."""
        if pending.workload.pod_sets:
            return evaluate(self.snapshot, pending)
        assert pending.cq is not None
        return Evaluation(pending, self.snapshot.cqs[pending.cq], Assignment(), [])

    def _give_back_held(self) -> None:
        """The capacity held back this cycle goes back (a fresh snapshot each cycle)."""
        for cq, usage in self.held:
            self.snapshot.give_usage(cq.node, usage)
        self.held.clear()

    # -- one entry -----------------------------------------------------------------
    def _process(self, ev: Evaluation, head: bool = True) -> None:
        """One entry: its queue's head (``head``), or a preemptor whose victims left."""
        queue = self.queues[ev.cq.name]
        if head:
            queue.next += 1
        if not ev.assignment.pod_sets:
            # nothing assigned (a stand-in): NoFit, as below, without the rest
            self.decisions.append(_empty_decision(ev))
            if queue.cq.spec.queueing_strategy == STRICT_FIFO:
                self._block(queue, ev)
            return
        tree = ev.cq.node.root().name if ev.cq.node.parent is not None else None
        mode = ev.mode

        if mode is Mode.NoFit:
            self._pending(queue, ev, None, strict_only=True)
            return
        if mode is Mode.Preempt and not ev.targets:
            if not can_always_reclaim(ev.cq):
                held = _reserve(ev)
                self.snapshot.take_usage(ev.cq.node, held)
                self.held.append((ev.cq, held))
                if ev.topology is not None and ev.topology.reserve():
                    # Kueue reserves the room it would take with every TAS workload gone
                    held_room = ev.topology
                    self.snapshot.take_topology(
                        ev.pending.workload, held_room.flavors, held_room.assigned
                    )
            self._pending(queue, ev, None, strict_only=True)
            return
        if ev.borrowing and tree in self.preempting_trees and not self.snapshot.fair_sharing:
            msg = (
                f"skipped: a workload in cohort {tree} needs preemption in this pass, "
                "so no other workload may borrow there"
            )
            self._pending(queue, ev, msg, strict_only=False)
            return
        if any(t.aw.key not in self.snapshot.admitted for t in ev.targets):
            # Another preemptor already claimed some of these victims: recompute.
            taken = f"skipped: its victims were taken by another preemptor in cohort {tree}"
            again = self._again(queue, ev, tree, taken)
            if again is None:
                return
            ev = again
        if not self._fits(ev):
            msg = "skipped: no longer fits after processing another workload"
            self._pending(queue, ev, msg, strict_only=False)
            return
        topo: Topology | None = ev.topology
        if topo is not None and topo.asks and not topo.settle({t.aw.key for t in ev.targets}):
            # What the pass took since left its topology no room: Kueue computes the whole
            # assignment again in the cycle (TASRecomputeAssignmentWithinSchedulingCycle)
            gone = "skipped: no longer fits after processing another workload"
            again = self._again(queue, ev, tree, gone)
            if again is None:
                return
            ev, topo = again, again.topology
            if not self._fits(ev) or (topo is not None and topo.asks and not topo.assigned):
                why = f" ({topo.reason})" if topo is not None and topo.reason else ""
                self._pending(queue, ev, gone + why, strict_only=False)
                return

        if ev.targets and self.observe is not None:
            self.observe(ev, self.snapshot)
        for t in ev.targets:
            self.snapshot.release(t.aw)
        self.snapshot.take_usage(ev.cq.node, ev.assignment.usage)
        if topo is not None and topo.assigned:
            self.snapshot.take_topology(ev.pending.workload, topo.flavors, topo.assigned)
        self.decisions.append(decision(ev))
        if ev.targets:
            if tree is not None:
                self.preempting_trees.add(tree)
            queue.blocked = f"waiting behind {ev.pending.ref}, which is preempting"

    def _again(
        self, queue: _Queue, ev: Evaluation, tree: str | None, blocked: str
    ) -> Evaluation | None:
        """``ev`` evaluated again on the snapshot as the pass has left it, as Kueue
        recomputes an assignment within its cycle; None (its Pending recorded) when it can
        neither be admitted nor preempt now, or would borrow in a cohort tree where this
        pass preempts (``blocked`` says so)."""
        ev = evaluate(self.snapshot, ev.pending)
        if ev.mode is not Mode.Fit and not (ev.mode is Mode.Preempt and ev.targets):
            self._pending(queue, ev, None, strict_only=ev.mode is Mode.NoFit)
            return None
        if ev.borrowing and tree in self.preempting_trees and not self.snapshot.fair_sharing:
            self._pending(queue, ev, blocked, strict_only=False)
            return None
        return ev

    def _fits(self, ev: Evaluation) -> bool:
        snap = self.snapshot
        for t in ev.targets:
            snap.remove(t.aw)
        ok = all(cq_available(ev.cq.node, fr) >= v for fr, v in ev.assignment.usage.items())
        for t in ev.targets:
            snap.restore(t.aw)
        return ok

    def _pending(
        self, queue: _Queue, ev: Evaluation, message: str | None, *, strict_only: bool
    ) -> None:
        self.decisions.append(decision(ev, override=message) if message else decision(ev))
        if not strict_only or queue.cq.spec.queueing_strategy == STRICT_FIFO:
            self._block(queue, ev)

    @staticmethod
    def _block(queue: _Queue, ev: Evaluation) -> None:
        queue.blocked = (
            f"waiting behind {ev.pending.ref} at the head of ClusterQueue {queue.cq.name}"
        )


def admission_pass(
    snapshot: Snapshot,
    waiting: frozenset[str] = frozenset(),
    first: frozenset[str] = frozenset(),
    observe: Callable[[Evaluation, Snapshot], None] | None = None,
) -> list[Decision]:
    """Decisions for every pending workload of the snapshot's state, except those in
    ``waiting`` (preemptions in flight), which hold their place at the head of their queue;
    heads in ``first`` (preemptors whose victims have left) are processed before others."""
    return AdmissionPass(snapshot, waiting, first, observe).run()


def _inner(nested: dict[str, dict[str, str | None]], key: str) -> dict[str, str | None]:
    """``nested[key]``, made empty first if absent (no dict allocated when present)."""
    inner = nested.get(key)
    if inner is None:
        inner = nested[key] = {}
    return inner


def _empty_decision(ev: Evaluation) -> Decision:
    """``decision(ev)`` of an evaluation without pod sets (NoFit, nothing assigned)."""
    return Decision(
        preemptor=ev.pending.ref,
        queue=f"ClusterQueue/{ev.cq.name}",
        mode=Mode.NoFit.name,
        outcome=PENDING,
        flavors={},
        borrowing=0,
        victims=[],
        placement={},
        message=EMPTY_MESSAGE,
    )


def _pending_by_key(snapshot: Snapshot) -> list[Workload]:
    """The pending workloads of the snapshot's state, by key (only they are sorted)."""
    found = snapshot.pending_workloads()
    found.sort(key=_key)
    return found


def _key(wl: Workload) -> str:
    return wl.key


def iter_pending(snapshot: Snapshot) -> Iterator[PendingWorkload]:
    for wl in _pending_by_key(snapshot):
        yield PendingWorkload.of(snapshot.state, wl, snapshot.now)


__all__ = ["AdmissionPass", "admission_pass", "iter_pending"]
