"""``--victim-cost lost-gpu-hours`` on the nodes: a lone pod, a gang and a Kueue Workload's
pods take, among the units the rules allow, those that lose least work; the quota's
victims and the nodes' are chosen together; and the room a preemptor's victims have just
left stays its own for the pass (``NodePlanner.reserve``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gangpreempt.manifests import load
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import Node, Pod, PodGroup
from gangpreempt.planning import plan
from gangpreempt.planning.decisions import ADMIT, Decision
from gangpreempt.planning.nodeplan import NodePlanner
from gangpreempt.preemption.lostwork import unit_cost
from gangpreempt.simulation.trace import Job
from gangpreempt.simulation.world import cluster_objects, job_objects
from tests.builders import NOW

pytestmark = pytest.mark.unit
GPU = "nvidia.com/gpu"
COST = "lost-gpu-hours"


# -- pods outside Kueue: kube-scheduler's rules, the cost deciding among them ------------


def nodes(count: int) -> ClusterState:
    state = ClusterState()
    for i in range(count):
        state.nodes[f"n{i}"] = Node(f"n{i}", {GPU: 8, "pods": 110})
    return state


def running(state: ClusterState, name: str, gpus: int, node: str, minutes: int) -> None:
    pod = Pod(
        "default",
        name,
        {GPU: gpus},
        priority=0,
        node_name=node,
        start_time=NOW - timedelta(minutes=minutes),
    )
    state.pods[pod.key] = pod


def one_long_run_or_eight_short_ones(state: ClusterState, on: str, short_on: str) -> None:
    """``on``: one 8-GPU pod an hour in (8 GPU-hours lost); ``short_on``: eight 1-GPU
    pods ten minutes in (1.3 GPU-hours lost together)."""
    running(state, f"long-{on}", 8, on, 60)
    for i in range(8):
        running(state, f"short-{short_on}-{i}", 1, short_on, 10)


def victim_names(state: ClusterState, ref: str, cost: str) -> list[str]:
    (d,) = plan(state, NOW, ref, victim_cost=cost).decisions
    assert d.outcome == "Preempt", d.message
    return sorted(v.object.rsplit("/", 1)[1] for v in d.victims)


def test_a_lone_pod_takes_the_node_whose_victims_lose_least() -> None:
    state = nodes(2)
    one_long_run_or_eight_short_ones(state, "n0", "n1")
    pod = Pod("default", "p", {GPU: 8}, priority=100)
    state.pods[pod.key] = pod
    # kube-scheduler: the node with the fewest victims (the lowest sum of priorities)
    assert victim_names(state, "Pod/default/p", "") == ["long-n0"]
    assert victim_names(state, "Pod/default/p", COST) == [f"short-n1-{i}" for i in range(8)]


def test_a_gang_takes_the_nodes_whose_victims_lose_least() -> None:
    state = nodes(4)
    one_long_run_or_eight_short_ones(state, "n0", "n2")
    one_long_run_or_eight_short_ones(state, "n1", "n3")
    state.pod_groups["default/g"] = PodGroup("default", "g", 2)
    for i in range(2):
        pod = Pod("default", f"g-{i}", {GPU: 8}, priority=100, group="default/g")
        state.pods[pod.key] = pod
    assert victim_names(state, "PodGroup/default/g", "") == ["long-n0", "long-n1"]
    cheap = victim_names(state, "PodGroup/default/g", COST)
    assert cheap == sorted(f"short-{n}-{i}" for n in ("n2", "n3") for i in range(8))


def test_the_dearest_units_are_reprieved_first() -> None:
    """Either pod alone makes room for a 2-GPU pod. kube-scheduler reprieves the more
    important (the longer-running) one and evicts the other; the cost reprieves the one
    that would lose more."""
    state = nodes(1)
    running(state, "long-small", 2, "n0", 60)  # 2 GPU-hours
    running(state, "short-big", 6, "n0", 30)  # 3 GPU-hours
    cost = unit_cost(state, NOW)
    units = {u.ref: cost(u) for u in NodePlanner(state, NOW).table.units.values()}
    assert units["Pod/default/short-big"] > units["Pod/default/long-small"]
    pod = Pod("default", "p", {GPU: 2}, priority=100)
    state.pods[pod.key] = pod
    assert victim_names(state, "Pod/default/p", "") == ["short-big"]
    assert victim_names(state, "Pod/default/p", COST) == ["long-small"]


# -- Kueue Workloads: the quota's victims and the nodes' together --------------------------


def job(name: str, gpus: int, minutes: int, node: str, priority: int = 100) -> list[Any]:
    since = NOW - timedelta(minutes=minutes)
    return job_objects(Job(name, 0, 9999, "q", priority, (gpus,)), since, {0: node}, since, None)


def kueue_victims(objects: list[Any], quota_gpus: int, node_count: int, cost: str) -> list[str]:
    objects = cluster_objects({"q": quota_gpus}, nodes=node_count, gpus_per_node=8) + objects
    objects += job_objects(Job("high", 9, 60, "q", 1000, (8,)), NOW)
    state = load([], objects, "replay").state
    (d,) = plan(state, NOW, "Workload/trace/high", victim_cost=cost).decisions
    assert d.outcome == "Preempt", d.message
    return sorted(v.object.rsplit("/", 1)[1] for v in d.victims)


def test_a_workload_that_fits_its_quota_takes_the_cheapest_room_on_the_nodes() -> None:
    objects = job("long", 8, 60, "node-0000")
    objects += [o for i in range(8) for o in job(f"short{i}", 1, 10, "node-0001")]
    assert kueue_victims(objects, 64, 2, "") == ["long"]
    assert kueue_victims(objects, 64, 2, COST) == [f"short{i}" for i in range(8)]


def test_the_quota_victims_are_chosen_with_the_room_they_leave_on_the_nodes() -> None:
    """The quota (16 GPUs, full) needs 8 freed; the node needs 8 free on one node. The
    cheapest quota set, x1 and y1, leaves 4 free on each node and then needs y2 too
    (x1 was for nothing); y1 and y2 together free the quota and a node."""
    objects = job("x1", 4, 5, "node-0000") + job("x2", 4, 100, "node-0000")
    objects += job("y1", 4, 5, "node-0001") + job("y2", 4, 20, "node-0001")
    assert kueue_victims(objects, 16, 2, COST) == ["y1", "y2"]


# -- the room a plan freed stays its own for the pass -------------------------------------


def test_a_reserved_room_goes_to_its_preemptor_only() -> None:
    objects = cluster_objects({"q": 64}, nodes=1, gpus_per_node=8)
    objects += job_objects(Job("a", 0, 60, "q", 100, (8,)), NOW)
    objects += job_objects(Job("b", 0, 60, "q", 1000, (8,)), NOW)
    state = load([], objects, "replay").state
    planner = NodePlanner(state, NOW)
    planner.reserve("Workload/trace/a", {"Pod/trace/a-0": "node-0000"})

    def admit(name: str) -> Decision:
        return Decision(
            f"Workload/trace/{name}", "ClusterQueue/q", "Fit", ADMIT, {}, 0, [], {}, "fits"
        )

    # b, of higher priority, composed first, finds no room: it is a's
    assert planner.compose(admit("b")).outcome == "Pending"
    placed = planner.compose(admit("a"))
    assert placed.outcome == ADMIT
    assert placed.placement == {"Pod/trace/a-0": "node-0000"}


def lost_minutes(objects: list[Any], names: list[str]) -> float:
    """GPU-minutes the named running jobs lose at NOW (no checkpoints: the whole run)."""
    state = load([], objects, "replay").state
    cost = unit_cost(state, NOW)
    planner = NodePlanner(state, NOW)
    return sum(cost(planner.table.units[f"Workload/trace/{n}"]) for n in names) / 60


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.sampled_from([1, 2, 4]), st.integers(1, 90)),
        min_size=2,
        max_size=7,
    )
)
def test_together_never_dearer_than_kueues_victims_and_the_nodes_extras(
    runs: list[tuple[int, int, int]],
) -> None:
    """Three nodes, one ClusterQueue full to its quota; a job of 8 GPUs (one pod) needs
    8 freed and a node with 8 free. Under the cost the victims, quota's and the nodes'
    together, never lose more than Kueue's set with the nodes' extra victims; both make
    room on the quota and on one node."""
    objects: list[Any] = []
    used = [0, 0, 0]
    names = []
    for i, (node, gpus, minutes) in enumerate(runs):
        if used[node] + gpus > 8:
            continue
        used[node] += gpus
        names.append(f"r{i}")
        objects += job(f"r{i}", gpus, minutes, f"node-000{node}")
    total = sum(used)
    assume(total >= 8)
    cluster = cluster_objects({"q": total}, nodes=3, gpus_per_node=8) + objects
    cluster += job_objects(Job("high", 9, 60, "q", 1000, (8,)), NOW)
    state = load([], cluster, "replay").state
    chosen = {}
    for cost in ("", COST):
        (d,) = plan(state, NOW, "Workload/trace/high", victim_cost=cost).decisions
        assert d.outcome == "Preempt", d.message
        victims = [v.object.rsplit("/", 1)[1] for v in d.victims]
        freed = sum(gpus for i, (_n, gpus, _m) in enumerate(runs) if f"r{i}" in victims)
        assert freed >= 8
        (node,) = set(d.placement.values())
        on_node = [f"r{i}" for i, (n, _g, _m) in enumerate(runs) if f"node-000{n}" == node]
        left = 8 - sum(runs[int(n[1:])][1] for n in on_node if n in names and n not in victims)
        assert left >= 8
        chosen[cost] = lost_minutes(cluster, victims)
    assert chosen[COST] <= chosen[""] + 1e-6
