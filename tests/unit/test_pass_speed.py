"""The admission pass's shortcuts equal a recomputation from scratch: the per-LocalQueue
memo of ``unavailable`` and of the ClusterQueue a workload belongs to, and the stand-in
path (a pending workload without pod sets: a parked workload's stand-in) that skips the
flavor assigner and builds its NoFit decision directly."""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangpreempt.model import ClusterState, Cohort, LocalQueue, Workload
from gangpreempt.model.queues import ANY, LOWER_PRIORITY, NEVER, STRICT_FIFO
from gangpreempt.planning.cycle import (
    AdmissionPass,
    _empty_decision,
    admission_pass,
)
from gangpreempt.planning.deciding import Evaluation, decision, evaluate, unavailable
from gangpreempt.planning.decisions import Decision
from gangpreempt.quota.pending import PendingWorkload
from gangpreempt.quota.snapshot import Snapshot
from tests.builders import NOW, admitted, cluster_queue, pending, quota, state

pytestmark = pytest.mark.unit
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
CPU = "cpu"
STOPPED = "Hold"


@st.composite
def clusters(draw: st.DrawFn) -> ClusterState:
    """2-4 ClusterQueues (one cohort or none; some StrictFIFO, one at times without a
    namespace selector or with a missing flavor), LocalQueues in two namespaces (some
    stopped, some naming a missing ClusterQueue), a few admitted workloads and up to 14
    pending ones, some without pod sets (stand-ins), some naming no LocalQueue."""
    in_cohort = draw(st.booleans())
    cqs = []
    for i in range(draw(st.integers(2, 4))):
        cqs.append(
            cluster_queue(
                f"q{i}",
                {"f": {CPU: quota(draw(st.integers(0, 4)))}},
                "root" if in_cohort else None,
                within=draw(st.sampled_from([LOWER_PRIORITY, NEVER])),
                reclaim=draw(st.sampled_from([ANY, LOWER_PRIORITY, NEVER])),
                strategy=draw(st.sampled_from(["BestEffortFIFO", STRICT_FIFO])),
            )
        )
    if draw(st.integers(0, 3)) == 0:
        cqs[0] = msgspec.structs.replace(cqs[0], namespace_selector=None)
    cluster = state(cqs, cohorts=[Cohort("root", None)] if in_cohort else [], flavors=["f"])
    if draw(st.integers(0, 3)) == 0:
        del cluster.flavors["f"]  # every ClusterQueue inactive
    queue_names = [cq.name for cq in cqs] + ["gone"]
    for ns in ("default", "other"):
        for name in queue_names:
            if draw(st.integers(0, 4)) == 0:
                continue  # no such LocalQueue
            target = draw(st.sampled_from([*queue_names, "missing"]))
            stop = STOPPED if draw(st.integers(0, 5)) == 0 else "None"
            cluster.local_queues[f"{ns}/{name}"] = LocalQueue(ns, name, target, stop)
    for j in range(draw(st.integers(0, 6))):
        wl = admitted(f"a{j}", draw(st.sampled_from(cqs)).name, {CPU: ("f", 1)}, j % 3, at=j)
        cluster.workloads[wl.key] = wl
    for k in range(draw(st.integers(0, 14))):
        wl = pending(
            f"p{k}",
            draw(st.sampled_from([*queue_names, ""])),
            {CPU: draw(st.integers(1, 3))},
            draw(st.integers(0, 3)),
            at=draw(st.integers(40, 45)),
            namespace=draw(st.sampled_from(["default", "other"])),
        )
        if draw(st.booleans()):
            wl = msgspec.structs.replace(wl, pod_sets=())
        cluster.workloads[wl.key] = wl
    return cluster


def _pending(cluster: ClusterState) -> list[Workload]:
    return sorted((w for w in cluster.workloads.values() if w.is_pending), key=lambda w: w.key)


@SETTINGS
@given(clusters())
def test_the_local_queue_memo_gives_what_each_workload_gets_alone(cluster: ClusterState) -> None:
    """Each pending workload's reason not to be considered, and its ClusterQueue, are
    those ``unavailable`` and ``cluster_queue_of`` give it alone."""
    snap = Snapshot.build(cluster, NOW)
    decisions = admission_pass(snap)
    by_ref: dict[str, list[Decision]] = {}
    for d in decisions:
        by_ref.setdefault(d.preemptor, []).append(d)
    for wl in _pending(cluster):
        alone = PendingWorkload.of(cluster, wl, NOW)
        reason = unavailable(snap, alone)
        (d,) = by_ref[wl.ref]
        assert d.queue == (f"ClusterQueue/{alone.cq}" if alone.cq else "")
        if reason is not None:
            assert d.message == reason
            assert d.flavors == {}


@SETTINGS
@given(clusters())
def test_a_stand_in_is_evaluated_and_decided_as_evaluate_would(cluster: ClusterState) -> None:
    """The stand-in path's evaluation and decision equal ``evaluate``'s and
    ``decision``'s, at the pass's start and after it (usage taken by admissions)."""
    snap = Snapshot.build(cluster, NOW)
    considered = [
        p
        for p in (PendingWorkload.of(cluster, wl, NOW) for wl in _pending(cluster))
        if not p.pod_sets and unavailable(snap, p) is None
    ]
    with snap.scratch():
        for phase in range(2):
            fast_pass = AdmissionPass(snap)
            for p in considered:
                fast = fast_pass._evaluate(p)
                full = evaluate(snap, p)
                assert fast.cq is full.cq
                assert fast.mode is full.mode
                assert fast.borrowing == full.borrowing
                assert fast.targets == full.targets == []
                assert fast.assignment.flavors() == full.assignment.flavors()
                assert fast.assignment.usage == full.assignment.usage
                assert _empty_decision(fast) == decision(full)
            if phase == 0:
                admission_pass(snap)  # admits what fits: usage changes


@SETTINGS
@given(clusters(), st.integers(0, 30))
def test_the_pass_decides_as_without_the_shortcuts(cluster: ClusterState, shift: int) -> None:
    """The whole pass equals one that evaluates every head with ``evaluate`` (the
    stand-in path only skips work), at several times (queue order ties)."""

    class Plain(AdmissionPass):
        def _evaluate(self, p: PendingWorkload) -> Evaluation:
            return evaluate(self.snapshot, p)

    now = NOW + timedelta(minutes=shift)
    fast = admission_pass(Snapshot.build(cluster, now))
    plain = Plain(Snapshot.build(cluster, now)).run()
    assert fast == plain
