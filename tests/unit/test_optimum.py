"""The exact victim-set solver against a brute force over every subset and every
placement, on small problems; and the ratio of ours to the optimum."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangpreempt.simulation.optimum import (
    KUBE_SCHEDULER,
    LOST_GPU_HOURS,
    OBJECTIVES,
    Candidate,
    Problem,
    cost,
    feasible,
    measure,
    ratio,
    solve,
)

pytestmark = pytest.mark.unit
NODES = ["n0", "n1", "n2"]


def fits(problem: Problem, victims: set[str]) -> bool:
    free = dict.fromkeys(NODES, 0)
    free.update(problem.free)
    freed = 0
    for c in problem.candidates:
        if c.ref in victims:
            freed += c.gpus
            for node, gpus in c.gpus_on.items():
                free[node] += gpus
    if freed < problem.quota_need:
        return False
    for choice in itertools.product(NODES, repeat=len(problem.pods)):
        used = dict.fromkeys(NODES, 0)
        for pod, node in zip(problem.pods, choice, strict=True):
            used[node] += pod
        if all(used[n] <= free[n] for n in NODES):
            return True
    return False


def brute(problem: Problem, objective: str) -> tuple[float, ...] | None:
    refs = [c.ref for c in problem.candidates]
    best = None
    for k in range(len(refs) + 1):
        for subset in itertools.combinations(refs, k):
            if fits(problem, set(subset)):
                c = cost(problem, subset, objective)
                best = c if best is None or c < best else best
    return best


CANDIDATE = st.tuples(
    st.sampled_from([0, 10, 100]),
    st.dictionaries(st.sampled_from(NODES), st.integers(1, 4), min_size=1, max_size=2),
    st.sampled_from([0.0, 0.5, 1.0, 2.5]),
)
PROBLEM = st.builds(
    lambda pods, free, need, cands: Problem(
        tuple(pods),
        free,
        need,
        tuple(Candidate(f"Workload/ns/c{i}", p, on, lost) for i, (p, on, lost) in enumerate(cands)),
    ),
    st.lists(st.integers(1, 4), min_size=1, max_size=3),
    st.dictionaries(st.sampled_from(NODES), st.integers(0, 4)),
    st.integers(0, 6),
    st.lists(CANDIDATE, max_size=6),
)


@settings(max_examples=150, deadline=None)
@given(PROBLEM, st.sampled_from(OBJECTIVES))
def test_the_solver_finds_the_brute_force_optimum(problem: Problem, objective: str) -> None:
    expected = brute(problem, objective)
    found = solve(problem, objective)
    if expected is None:
        assert found is None
        return
    assert found is not None
    assert fits(problem, set(found.victims))
    assert cost(problem, found.victims, objective) == expected
    # the placement it gives holds every pod, within each node's room
    assert sorted(found.placement) == list(range(len(problem.pods)))
    assert feasible(problem, found.victims)


def test_ratio_is_taken_on_the_first_criterion_that_differs() -> None:
    assert ratio((100.0, 200.0, 2.0), (100.0, 100.0, 1.0)) == 2.0
    assert ratio((100.0, 100.0, 1.0), (100.0, 100.0, 1.0)) == 1.0
    assert ratio((3.0,), (0.0,)) is None


def test_measure_counts_ours_against_the_optimum() -> None:
    """Two candidates on one node, either makes room: the kube-scheduler order prefers the
    lower priority, lost work the cheaper one."""
    cheap_high = Candidate("Workload/ns/a", 100, {"n0": 4}, 0.5)
    dear_low = Candidate("Workload/ns/b", 10, {"n0": 4}, 3.0)
    problem = Problem((4,), {}, 0, (cheap_high, dear_low))
    figures = measure([(problem, (dear_low.ref,)), (problem, (cheap_high.ref,))], 10)
    by = {f.objective: f for f in figures.objectives}
    assert figures.sampled == 2
    assert figures.outside == 0
    assert by[KUBE_SCHEDULER].optimal == 1
    assert by[KUBE_SCHEDULER].ratio_max == 10.0
    assert by[LOST_GPU_HOURS].optimal == 1
    assert by[LOST_GPU_HOURS].ratio_max == 6.0
    # a victim set that does not make room is left out, not measured
    short = Problem((8,), {}, 0, (cheap_high, dear_low))
    assert measure([(short, (cheap_high.ref,))], 10).outside == 1
