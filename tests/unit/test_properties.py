"""Invariants of the quota-level decision, on generated clusters (hypothesis)."""

from __future__ import annotations

import random

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings, target
from hypothesis import strategies as st

from gangpreempt.model import ClusterState, Cohort
from gangpreempt.model.queues import ANY, LOWER_OR_NEWER_EQUAL_PRIORITY, LOWER_PRIORITY, NEVER
from gangpreempt.planning import admission_pass, evaluate, plan
from gangpreempt.planning.deciding import unavailable
from gangpreempt.preemption import Request
from gangpreempt.preemption.classical import fits, search
from gangpreempt.quota import Mode, PendingWorkload, Snapshot
from gangpreempt.quota.snapshot import admitted_usage
from gangpreempt.quota.tree import available
from tests.builders import NOW, admitted, cluster_queue, group, pending, quota, state

pytestmark = pytest.mark.unit
CPU = 1000  # one CPU in milli-units


@st.composite
def clusters(draw: st.DrawFn) -> tuple[ClusterState, str]:
    """A cohort tree (sometimes two levels, sometimes with cohort-owned quota) of 2-4
    ClusterQueues, legally admitted workloads, and one pending workload ``pending/in``."""
    nested = draw(st.booleans())
    cohorts = [
        Cohort("root", None, (group({"default": {"cpu": quota(draw(st.integers(0, 3)) * CPU)}}),))
    ]
    if nested:
        cohorts.append(Cohort("mid", "root"))
    cqs = []
    for i in range(draw(st.integers(2, 4))):
        borrow_limit = draw(st.one_of(st.none(), st.integers(0, 4)))
        lend_limit = draw(st.one_of(st.none(), st.integers(0, 4)))
        cqs.append(
            cluster_queue(
                f"q{i}",
                {
                    "default": {
                        "cpu": quota(
                            draw(st.integers(1, 6)) * CPU,
                            None if borrow_limit is None else borrow_limit * CPU,
                            None if lend_limit is None else lend_limit * CPU,
                        )
                    }
                },
                draw(st.sampled_from(["root", "mid"] if nested else ["root"])),
                within=draw(
                    st.sampled_from(
                        [LOWER_PRIORITY, LOWER_OR_NEWER_EQUAL_PRIORITY, NEVER, LOWER_PRIORITY]
                    )
                ),
                reclaim=draw(st.sampled_from([LOWER_PRIORITY, ANY, NEVER, ANY])),
                borrow=draw(st.sampled_from([NEVER, LOWER_PRIORITY])),
                threshold=draw(st.one_of(st.none(), st.integers(0, 3))),
            )
        )
    st_ = state(cqs, cohorts=cohorts)
    snap = Snapshot.build(st_, NOW)
    for j in range(draw(st.integers(0, 16))):
        cq = draw(st.sampled_from(cqs)).name
        size = draw(st.integers(1, 2)) * CPU
        node = snap.cqs[cq].node
        if available(node, ("default", "cpu")) < size:
            continue  # admit only what fits: the starting state is never overcommitted
        wl = admitted(
            f"w{j}",
            cq,
            {"cpu": ("default", size)},
            draw(st.integers(0, 3)),
            at=j,
            evicted=draw(st.booleans()),
        )
        st_.workloads[wl.key] = wl
        snap.take_usage(node, admitted_usage(wl))
    target = draw(st.sampled_from(cqs)).name
    incoming = pending(
        "in", target, {"cpu": draw(st.integers(1, 6)) * CPU}, draw(st.integers(1, 5)), at=20
    )
    st_.workloads[incoming.key] = incoming
    return st_, incoming.key


def _policy_allows(
    cq_spec, victim_cq: str, victim_priority: int, preemptor: PendingWorkload, victim_ts: float
) -> bool:
    same = victim_cq == cq_spec.name
    policy = (
        cq_spec.preemption.within_cluster_queue
        if same
        else cq_spec.preemption.reclaim_within_cohort
    )
    if policy == LOWER_PRIORITY:
        return victim_priority < preemptor.priority
    if policy == LOWER_OR_NEWER_EQUAL_PRIORITY:
        return victim_priority < preemptor.priority or (
            victim_priority == preemptor.priority and preemptor.queue_order_ts < victim_ts
        )
    return policy == ANY


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(clusters())
def test_victims_are_allowed_needed_and_sufficient(case: tuple[ClusterState, str]) -> None:
    st_, key = case
    snap = Snapshot.build(st_, NOW)
    p = PendingWorkload.of(st_, st_.workloads[key], NOW)
    ev = evaluate(snap, p)
    if ev.mode is not Mode.Preempt:
        assert not ev.targets
        return
    req = Request(p, ev.cq, ev.assignment.needing_preemption(), dict(ev.assignment.usage))
    borrowing_at_start = {
        name for name, cq in snap.cqs.items() if not cq.node.within_nominal(req.frs)
    }
    result = search(snap, req)
    victims = result.targets
    target(float(len(victims)), label="victims")
    keys = [t.aw.key for t in victims]
    assert len(keys) == len(set(keys)), "a workload is preempted twice"
    for t in victims:
        # Never a victim the ClusterQueue's policy does not allow (priority included).
        assert _policy_allows(ev.cq.spec, t.aw.cq, t.aw.priority, p, t.aw.queue_order_ts)
        if t.aw.cq != ev.cq.name:
            assert t.aw.cq in borrowing_at_start, "reclaimed from a queue that was not borrowing"
    if not victims:
        return
    # Whole workloads only: every victim leaves with all its usage, and then it fits.
    for t in victims:
        snap.remove(t.aw)
    assert fits(snap, req, result.allow_borrowing)
    # Minimal: putting any single victim back makes it not fit.
    for t in victims:
        snap.restore(t.aw)
        assert not fits(snap, req, result.allow_borrowing), f"{t.aw.ref} was not needed"
        snap.remove(t.aw)


@SETTINGS
@given(clusters(), st.randoms(use_true_random=False))
def test_decision_does_not_depend_on_document_order(
    case: tuple[ClusterState, str], rnd: random.Random
) -> None:
    st_, key = case
    shuffled = ClusterState()
    for field in msgspec.structs.fields(ClusterState):
        items = list(getattr(st_, field.name).items())
        rnd.shuffle(items)
        setattr(shuffled, field.name, dict(items))
    one = msgspec.json.encode(plan(st_, NOW, f"Workload/{key}"))
    two = msgspec.json.encode(plan(shuffled, NOW, f"Workload/{key}"))
    assert one == two
    assert msgspec.json.encode(plan(st_, NOW)) == msgspec.json.encode(plan(shuffled, NOW))


@SETTINGS
@given(
    clusters(),
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4), st.integers(0, 4)), max_size=4),
)
def test_admission_pass_never_overcommits(
    case: tuple[ClusterState, str], extra: list[tuple[int, int, int]]
) -> None:
    st_, _key = case
    names = sorted(st_.cluster_queues)
    for i, (q, size, prio) in enumerate(extra):
        wl = pending(f"p{i}", names[q % len(names)], {"cpu": size * CPU}, prio, at=21 + i)
        st_.workloads[wl.key] = wl
    decisions = admission_pass(Snapshot.build(st_, NOW))
    # Apply the decisions to the real state: victims leave, admitted and preempting
    # workloads take their usage once their victims are gone.
    final = Snapshot.build(st_, NOW)
    gone = {v.object for d in decisions for v in d.victims}
    for aw in list(final.admitted.values()):
        if aw.ref in gone:
            final.release(aw)
    for d in decisions:
        if d.outcome in ("Admit", "Preempt"):
            wl = st_.workloads[d.preemptor.removeprefix("Workload/")]
            p = PendingWorkload.of(st_, wl, NOW)
            assert unavailable(final, p) is None
            cq = final.cqs[d.queue.removeprefix("ClusterQueue/")]
            final.take_usage(
                cq.node, {(f, r): wl.pod_sets[0].requests[r] for r, f in d.flavors["main"].items()}
            )
    for cq in final.cqs.values():
        for fr in cq.node.quotas:
            assert available(cq.node, fr) >= 0, f"{cq.name} overcommitted in {fr}"
    # Each victim is claimed by exactly one preemptor.
    claimed = [v.object for d in decisions for v in d.victims]
    assert len(claimed) == len(set(claimed))
