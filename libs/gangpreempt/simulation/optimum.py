"""The exact minimum-cost victim set of one preemption decision, to measure the core's
choice against.

A decision is captured as a ``Problem`` on a relaxation of what the core must respect:

- the preemptor's pods (GPUs each) must all be placed on nodes, each node's free GPUs
  plus those of the victims on it;
- the victims must free at least ``quota_need`` GPUs of the cohort's usage;
- victims come from ``candidates``: the running workloads the decision could take (not
  evicting, not promised to another plan, allowed by the ClusterQueues' policies at the
  decision's time).

It leaves out Kueue's finer rules (a borrowing queue stops being a source once it is
back within its nominal quota; the order in which candidates are tried), so its optimum
can only be lower than the true one: a ratio ours / optimum measured on it is an upper
bound. Two objectives:

- ``kube-scheduler``: kube-scheduler's order for victims, lexicographic: the highest
  victim priority, then the sum of priorities, then the count;
- ``lost-gpu-hours``: the work the victims lose since their last checkpoint.

Solved exactly as a mixed-integer program by HiGHS (``highspy``): binary ``y_v`` per
candidate, integer ``z_{s,n}`` pods of size ``s`` on node ``n``."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import msgspec

from gangpreempt.simulation.outcomes import percentiles

KUBE_SCHEDULER = "kube-scheduler"
LOST_GPU_HOURS = "lost-gpu-hours"
OBJECTIVES = (KUBE_SCHEDULER, LOST_GPU_HOURS)


class Candidate(msgspec.Struct, frozen=True):
    ref: str
    priority: int
    gpus_on: dict[str, int]  # node -> the candidate's GPUs there
    lost_gpu_hours: float

    @property
    def gpus(self) -> int:
        return sum(self.gpus_on.values())


class Problem(msgspec.Struct, frozen=True):
    pods: tuple[int, ...]  # the preemptor's pods, GPUs each
    free: dict[str, int]  # node -> GPUs free for the preemptor
    quota_need: int  # GPUs the victims must free in the cohort
    candidates: tuple[Candidate, ...]


class Solution(msgspec.Struct, frozen=True):
    victims: tuple[str, ...]  # refs, sorted
    placement: dict[int, str]  # pod index -> node


def cost(problem: Problem, victims: Sequence[str], objective: str) -> tuple[float, ...]:
    """The cost of a victim set under ``objective`` (compared as tuples)."""
    chosen = [c for c in problem.candidates if c.ref in set(victims)]
    if objective == LOST_GPU_HOURS:
        return (round(sum(c.lost_gpu_hours for c in chosen), 9),)
    if objective != KUBE_SCHEDULER:
        raise ValueError(f"unknown objective {objective!r}")
    top = max((c.priority for c in chosen), default=-(2**31))
    return (float(top), float(sum(c.priority for c in chosen)), float(len(chosen)))


def feasible(problem: Problem, victims: Sequence[str]) -> bool:
    """Do these victims (all candidates) make room on the quota and the nodes?"""
    refs = set(victims)
    if not refs <= {c.ref for c in problem.candidates}:
        return False
    solved = _solve(problem, _nothing, fixed=refs)
    return solved is not None


def solve(problem: Problem, objective: str) -> Solution | None:
    """The minimum-cost victim set (and a placement), or None when none makes room."""
    if objective == LOST_GPU_HOURS:
        return _solve(problem, _lost)
    if objective != KUBE_SCHEDULER:
        raise ValueError(f"unknown objective {objective!r}")
    # lexicographic: the lowest feasible top priority, then the sum, then the count
    levels = sorted({c.priority for c in problem.candidates})
    base = _solve(problem, _nothing, allowed=set())
    if base is not None:
        return base  # room without any victim
    for level in levels:
        allowed = {c.ref for c in problem.candidates if c.priority <= level}
        first = _solve(problem, _priority, allowed=allowed)
        if first is None:
            continue
        total = sum(c.priority for c in problem.candidates if c.ref in first.victims)
        best = _solve(problem, _one, allowed=allowed, priority_sum=total)
        return best or first
    return None


class ObjectiveFigures(msgspec.Struct, frozen=True):
    """Ours against the optimum, on the decisions measured, for one objective."""

    objective: str
    measured: int
    optimal: int  # ours costs the same as the optimum
    ratio_p50: float
    ratio_p95: float
    ratio_max: float
    zero_optimum: int  # the optimum costs nothing and ours does not: no finite ratio


class Optimality(msgspec.Struct, frozen=True):
    decisions: int  # preemption decisions of the replay
    sampled: int  # measured (evenly spread over the replay)
    outside: int  # sampled, but our victims do not make room in the model: not measured
    objectives: list[ObjectiveFigures]
    seconds: float


def ratio(ours: tuple[float, ...], best: tuple[float, ...]) -> float | None:
    """ours / optimum on the first criterion where they differ (1.0 when equal; None when
    the optimum's is 0 and ours is not)."""
    for a, b in zip(ours, best, strict=True):
        if a == b:
            continue
        if b <= 0:
            return None
        return a / b
    return 1.0


def measure(samples: Sequence[tuple[Problem, tuple[str, ...]]], limit: int) -> Optimality:
    """Ours against the optimum on up to ``limit`` decisions spread evenly over the
    replay, for each objective."""
    started = time.perf_counter()
    n = len(samples)
    picked = [samples[i * n // limit] for i in range(limit)] if n > limit else list(samples)
    outside = 0
    ratios: dict[str, list[float]] = {o: [] for o in OBJECTIVES}
    optimal = dict.fromkeys(OBJECTIVES, 0)
    zero = dict.fromkeys(OBJECTIVES, 0)
    for problem, ours in picked:
        if not feasible(problem, ours):
            outside += 1
            continue
        for objective in OBJECTIVES:
            best = solve(problem, objective)
            assert best is not None  # ours is feasible
            r = ratio(cost(problem, ours, objective), cost(problem, best.victims, objective))
            if r is None:
                zero[objective] += 1
                continue
            r = max(r, 1.0)  # the solver's tolerance may find ours a hair better
            ratios[objective].append(r)
            if r == 1.0:
                optimal[objective] += 1
    figures = []
    for objective in OBJECTIVES:
        values = sorted(ratios[objective])
        measured = len(values) + zero[objective]

        spread = percentiles(values)
        figures.append(
            ObjectiveFigures(
                objective,
                measured,
                optimal[objective],
                round(spread.p50, 4) if values else 1.0,
                round(spread.p95, 4) if values else 1.0,
                round(values[-1], 4) if values else 1.0,
                zero[objective],
            )
        )
    return Optimality(n, len(picked), outside, figures, round(time.perf_counter() - started, 2))


def _nothing(_c: Candidate) -> float:
    return 0.0


def _one(_c: Candidate) -> float:
    return 1.0


def _lost(c: Candidate) -> float:
    return c.lost_gpu_hours


def _priority(c: Candidate) -> float:
    return float(c.priority)


def _solve(
    problem: Problem,
    weight: Callable[[Candidate], float],
    allowed: set[str] | None = None,
    fixed: set[str] | None = None,
    priority_sum: int | None = None,
) -> Solution | None:
    import highspy
    import numpy as np

    h = highspy.Highs()  # type: ignore[no-untyped-call]
    h.setOptionValue("output_flag", False)
    inf = highspy.kHighsInf
    cands = list(problem.candidates)
    nodes = sorted(set(problem.free) | {n for c in cands for n in c.gpus_on})
    sizes: dict[int, int] = {}
    for g in problem.pods:
        sizes[g] = sizes.get(g, 0) + 1
    size_list = sorted(sizes)
    nv = len(cands)
    nz = len(size_list) * len(nodes)
    lower = np.zeros(nv + nz)
    upper = np.ones(nv + nz)
    for i, c in enumerate(cands):
        if (allowed is not None and c.ref not in allowed) or (
            fixed is not None and c.ref not in fixed
        ):
            upper[i] = 0.0
        if fixed is not None and c.ref in fixed:
            lower[i] = 1.0
    for k, s in enumerate(size_list):
        for j in range(len(nodes)):
            upper[nv + k * len(nodes) + j] = float(sizes[s])
    h.addVars(nv + nz, lower, upper)
    idx = np.arange(nv + nz, dtype=np.int32)
    h.changeColsIntegrality(nv + nz, idx, np.array([highspy.HighsVarType.kInteger] * (nv + nz)))
    costs = np.zeros(nv + nz)
    for i, c in enumerate(cands):
        costs[i] = weight(c)
    h.changeColsCost(nv + nz, idx, costs)
    # every pod placed
    for k, s in enumerate(size_list):
        cols = [nv + k * len(nodes) + j for j in range(len(nodes))]
        h.addRow(sizes[s], sizes[s], len(cols), np.array(cols, dtype=np.int32), np.ones(len(cols)))
    # each node: pods <= free + victims' GPUs there
    for j, node in enumerate(nodes):
        cols = [nv + k * len(nodes) + j for k in range(len(size_list))]
        vals = [float(s) for s in size_list]
        for i, c in enumerate(cands):
            if node in c.gpus_on:
                cols.append(i)
                vals.append(-float(c.gpus_on[node]))
        h.addRow(
            -inf,
            float(problem.free.get(node, 0)),
            len(cols),
            np.array(cols, dtype=np.int32),
            np.array(vals),
        )
    # the quota
    if problem.quota_need > 0 and nv:
        h.addRow(
            float(problem.quota_need),
            inf,
            nv,
            np.arange(nv, dtype=np.int32),
            np.array([float(c.gpus) for c in cands]),
        )
    elif problem.quota_need > 0:
        return None
    if priority_sum is not None and nv:
        h.addRow(
            -inf,
            float(priority_sum),
            nv,
            np.arange(nv, dtype=np.int32),
            np.array([float(c.priority) for c in cands]),
        )
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    values = h.getSolution().col_value
    victims = tuple(sorted(c.ref for i, c in enumerate(cands) if values[i] > 0.5))
    placement: dict[int, str] = {}
    pod_index: dict[int, list[int]] = {}
    for i, g in enumerate(problem.pods):
        pod_index.setdefault(g, []).append(i)
    for k, s in enumerate(size_list):
        free_pods = list(pod_index[s])
        for j, node in enumerate(nodes):
            for _ in range(round(values[nv + k * len(nodes) + j])):
                placement[free_pods.pop(0)] = node
    return Solution(victims, placement)


__all__ = [
    "KUBE_SCHEDULER",
    "LOST_GPU_HOURS",
    "OBJECTIVES",
    "Candidate",
    "ObjectiveFigures",
    "Optimality",
    "Problem",
    "Solution",
    "cost",
    "feasible",
    "measure",
    "ratio",
    "solve",
]
