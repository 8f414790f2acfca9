"""The cheapest allowed victim set under ``--victim-cost lost-gpu-hours``
(``preemption.cheapest``): among the candidates Kueue's rules allow, the set that loses
the least work, where Kueue's greedy order would evict more."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangpreempt.model import Workload
from gangpreempt.planning import plan
from tests.builders import NOW, admitted, cluster_queue, pending, quota, state
from tests.unit.test_victim_cost import running, victims

pytestmark = pytest.mark.unit
GPU = "nvidia.com/gpu"


def test_one_dearer_victim_is_cheaper_than_two_that_the_greedy_order_takes() -> None:
    # 8 GPUs, full; high needs 4. Least lost work first, a greedy pass takes c1 (3 GPUs,
    # 30 GPU-min lost) then c2 (3 GPUs, 33): 63 GPU-min; c3 alone (4 GPUs, 40) makes room.
    from gangpreempt.simulation.trace import Job
    from gangpreempt.simulation.world import job_objects
    from tests.unit.test_victim_cost import NOW as T

    def job(name: str, gpus: int, minutes: int, node: str) -> list:
        from datetime import timedelta

        since = T - timedelta(minutes=minutes)
        return job_objects(Job(name, 0, 9999, "q", 100, (gpus,)), since, {0: node}, since, None)

    objects = job("c1", 3, 10, "node-0000") + job("c2", 3, 11, "node-0001")
    objects += job("c3", 4, 10, "node-0001") + job("c4", 2, 5, "node-0000")
    # c4 (2 GPUs, 10) alone frees too little anywhere; c3 is the cheapest that suffices
    assert victims(objects, "lost-gpu-hours", quota_gpus=12, nodes=2) == ["c3"]
    assert victims(objects, "", quota_gpus=12, nodes=2) != ["c3"]  # Kueue's order differs


def test_without_a_cheaper_set_the_greedy_one_stays() -> None:
    objects = running("a", 40, 1800) + running("b", 20, 1800)
    assert victims(objects, "lost-gpu-hours") == ["a"]


def lost(wl: Workload) -> float:
    """GPU-minutes lost at NOW by a workload of ``admitted(..., at=minutes)``."""
    ran = 60 - int(wl.name.split("-")[1])
    return ran * wl.pod_sets[0].requests[GPU]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 4), st.integers(0, 59)), min_size=1, max_size=6),
    st.integers(1, 8),
)
def test_the_set_is_the_cheapest_that_makes_room_and_spares_nothing_it_could(
    runs: list[tuple[int, int]], need: int
) -> None:
    """One ClusterQueue, full: every admitted workload is a candidate; the set chosen
    frees at least what the preemptor needs, no victim could be spared, and no set of
    candidates that frees as much loses less work (checked against every subset)."""
    total = sum(g for g, _ in runs)
    need = min(need, total)
    wls = [
        admitted(f"w{i}-{at:02d}", "q", {GPU: ("default", g)}, 0, at=at)
        for i, (g, at) in enumerate(runs)
    ]
    cq = cluster_queue("q", {"default": {GPU: quota(total)}}, within="LowerPriority")
    st_ = state([cq], wls)
    st_.workloads["default/high"] = pending("high", "q", {GPU: need}, 1000)
    (d,) = plan(st_, NOW, "Workload/default/high", victim_cost="lost-gpu-hours").decisions
    assert d.outcome == "Preempt"
    by_ref = {f"Workload/default/{w.name}": w for w in wls}
    chosen = [by_ref[v.object] for v in d.victims]
    gpus = [w.pod_sets[0].requests[GPU] for w in chosen]
    assert sum(gpus) >= need
    assert all(sum(gpus) - g < need for g in gpus)  # minimal
    cheapest = min(
        sum(lost(w) for w in subset)
        for r in range(1, len(wls) + 1)
        for subset in itertools.combinations(wls, r)
        if sum(w.pod_sets[0].requests[GPU] for w in subset) >= need
    )
    assert sum(lost(w) for w in chosen) == cheapest
