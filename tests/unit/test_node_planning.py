"""Node-level planning beyond single decisions: a pass over several preemptors, plans in
flight held, the toleration clock, job-level quota arithmetic, the gang barrier."""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path

import pytest

from gangpreempt.manifests import load
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import ElasticQuota, Node, Pod, PodGroup
from gangpreempt.model.queues import PriorityClass
from gangpreempt.planning import plan
from gangpreempt.planning.nodeconfirm import NodeVictim, node_rejection, placement_gap
from gangpreempt.planning.nodeplan import NodePlanner
from gangpreempt.preemption.jobquota import JobQuota
from gangpreempt.preemption.single import search_single
from gangpreempt.preemption.units import tolerates
from tests.builders import NOW

pytestmark = pytest.mark.unit
GPU = "nvidia.com/gpu"
SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios" / "nodes"


def cluster(nodes: int) -> ClusterState:
    state = ClusterState()
    for i in range(nodes):
        state.nodes[f"n{i}"] = Node(f"n{i}", {GPU: 8, "pods": 110})
    return state


def add(state: ClusterState, name: str, prio: int, node: str = "", group: str = "") -> Pod:
    pod = Pod("default", name, {GPU: 8}, priority=prio, node_name=node, group=group)
    state.pods[pod.key] = pod
    return pod


def gang(state: ClusterState, name: str, size: int, prio: int) -> None:
    state.pod_groups[f"default/{name}"] = PodGroup("default", name, size)
    for i in range(size):
        add(state, f"{name}-{i}", prio, group=f"default/{name}")


def test_a_pass_gives_each_victim_to_one_preemptor_only() -> None:
    state = cluster(3)
    for i in range(3):
        add(state, f"low-{i}", 0, node=f"n{i}")
    gang(state, "first", 2, 100)
    gang(state, "second", 2, 50)
    decisions = {d.preemptor: d for d in plan(state, NOW).decisions}
    first, second = decisions["PodGroup/default/first"], decisions["PodGroup/default/second"]
    assert first.outcome == "Preempt"
    assert len(first.victims) == 2
    # One node is left: the second gang cannot take the first one's victims.
    assert second.outcome == "Pending"
    assert not {v.object for v in first.victims} & {v.object for v in second.victims}


def test_a_pass_frees_the_victims_room_for_later_preemptors() -> None:
    """A (100) preempts one of ``a``, ``b`` on n0; B (50) then needs only the other gone:
    the first victim's room is A's, not counted twice (still used by the victim and
    taken by A)."""
    state = cluster(1)
    state.nodes["n0"] = Node("n0", {GPU: 16, "pods": 110})
    add(state, "a", 0, node="n0")
    add(state, "b", 0, node="n0")
    add(state, "A", 100)
    add(state, "B", 50)
    decisions = {d.preemptor: d for d in plan(state, NOW).decisions}
    first = [v.object for v in decisions["Pod/default/A"].victims]
    second = [v.object for v in decisions["Pod/default/B"].victims]
    assert len(first) == len(second) == 1
    assert {*first, *second} == {"Pod/default/a", "Pod/default/b"}
    assert decisions["Pod/default/B"].placement == {"Pod/default/B": "n0"}


def test_a_placed_pod_gives_up_its_nominated_room() -> None:
    state = cluster(0)
    for name in ("a-node", "z-node"):
        state.nodes[name] = Node(name, {GPU: 8, "pods": 110})
    p1 = add(state, "p1", 100)
    state.pods[p1.key] = Pod("default", "p1", {GPU: 8}, priority=100, nominated_node="z-node")
    add(state, "p2", 50)
    decisions = {d.preemptor: d for d in plan(state, NOW).decisions}
    assert decisions["Pod/default/p1"].outcome == "Admit"
    assert decisions["Pod/default/p2"].outcome == "Admit"
    assert {decisions[r].placement[r] for r in ("Pod/default/p1", "Pod/default/p2")} == {
        "a-node",
        "z-node",
    }


def test_a_pass_takes_equal_priorities_by_name() -> None:
    state = cluster(1)
    add(state, "a", 10)
    gang(state, "z", 1, 10)
    preemptors = [d.preemptor for d in plan(state, NOW).decisions]
    assert preemptors == ["Pod/default/a", "PodGroup/default/z"]


def test_a_held_plan_keeps_its_room_and_its_victims() -> None:
    state = cluster(2)
    add(state, "low-0", 0, node="n0")
    add(state, "low-1", 0, node="n1")
    gang(state, "g", 1, 100)
    add(state, "p", 100)
    planner = NodePlanner(state, NOW)
    # A plan in flight places g-0 on n0 and takes low-0.
    planner.hold({"Pod/default/g-0": "n0"}, ["Pod/default/low-0"])
    d = planner.decide(planner.resolve("Pod/default/p"))
    assert [v.object for v in d.victims] == ["Pod/default/low-1"]
    assert d.placement == {"Pod/default/p": "n1"}


def test_kueue_pods_are_decided_with_their_workload_only() -> None:
    state = load([str(SCENARIOS / "kueue-workload-quota-and-nodes" / "cluster.yaml")]).state
    preemptors = [d.preemptor for d in plan(state, NOW).decisions]
    assert preemptors.count("Workload/default/train") == 1
    assert not [p for p in preemptors if p.startswith("Pod/default/train")]
    # Before their Workload is known (it may arrive after them), they wait for it.
    del state.workloads["default/train"]
    preemptors = [d.preemptor for d in plan(state, NOW).decisions]
    assert not [p for p in preemptors if "train" in p]


@pytest.mark.parametrize(
    ("minimum", "seconds", "age", "preemptor", "tolerated"),
    [
        (None, None, 0, 50, False),  # no annotation: no toleration
        (100, None, 10, 50, False),  # seconds default to 0: expired at once
        (100, 60, 59, 50, True),  # within its guaranteed time
        (100, 60, 60, 50, False),  # at the limit: over
        (100, -1, 10**6, 50, True),  # negative: forever
        (100, -1, 10, 100, False),  # at the minimum preemptable priority: no toleration
        (None, 60, 10, 20, False),  # minimum defaults to value + 1 = 11: 20 is above it
        (None, 60, 10, 10, True),  # ...and 10 is below it (an equal-priority preemptor)
    ],
)
def test_toleration_clock(
    minimum: int | None, seconds: int | None, age: int, preemptor: int, tolerated: bool
) -> None:
    pc = PriorityClass("c", 10, minimum_preemptable_priority=minimum, toleration_seconds=seconds)
    pod = Pod("d", "v", {}, scheduled_at=NOW - timedelta(seconds=age))
    assert tolerates(pc, preemptor, pod, NOW) is tolerated


def test_toleration_without_a_scheduled_time_holds() -> None:
    pc = PriorityClass("c", 10, minimum_preemptable_priority=100, toleration_seconds=0)
    assert tolerates(pc, 50, Pod("d", "v", {}), NOW)


def test_job_quota_arithmetic() -> None:
    eq = ElasticQuota("ns", "q", {GPU: 8}, {GPU: 16})
    np_pod = Pod(
        "ns", "np", {GPU: 8}, labels={"quota.scheduling.koordinator.sh/preemptible": "false"}
    )
    p_pod = Pod("ns", "p", {GPU: 8})
    preemptible_job = JobQuota(eq, [np_pod, p_pod], {GPU: 8}, job_non_preemptible=False)
    assert not preemptible_job.fits()  # min(8, 8) + 8 + 8 > 16
    assert preemptible_job.fits(["ns/p"])
    assert preemptible_job.fits(["ns/np"])  # min(8, 0) + 8 + 8 = 16: within max
    np_job = JobQuota(eq, [np_pod], {GPU: 8}, job_non_preemptible=True)
    assert not np_job.fits()  # non-preemptible 8 + 8 > min 8
    assert np_job.fits(["ns/np"])


def test_gang_barrier_counts_running_members() -> None:
    state = cluster(2)
    state.pod_groups["default/g"] = PodGroup("default", "g", 3)
    add(state, "g-0", 100, node="n0", group="default/g")
    add(state, "g-1", 100, group="default/g")
    add(state, "g-2", 100, group="default/g")
    assert placement_gap(state, "PodGroup/default/g", {"Pod/default/g-1": "n1"}) is not None
    placement = {"Pod/default/g-1": "n1", "Pod/default/g-2": "n1"}
    assert placement_gap(state, "PodGroup/default/g", placement) is None
    victim = NodeVictim("Pod/default/gone", "", ("Pod/default/gone",))
    reason = node_rejection(state, "plan", "PodGroup/default/g", [victim], placement, {})
    assert reason is not None
    assert "gone" in reason


def test_the_vectorized_dry_run_stops_where_kube_scheduler_does() -> None:
    """Past 100 nodes the dry run keeps kube-scheduler's candidate limit; both ways of
    computing it stop at the same node and pick the same victims."""
    rnd = random.Random(5)
    state = cluster(0)
    for i in range(1200):
        name = f"n{i:04d}"
        state.nodes[name] = Node(name, {GPU: 8, "cpu": 8000, "pods": 110})
        for j in range(rnd.randint(1, 3)):
            pod = Pod(
                "default",
                f"v{i:04d}-{j}",
                {GPU: rnd.choice([2, 4]), "cpu": 1000},
                priority=rnd.choice([0, 10, 20, 30]),
                node_name=name,
                start_time=NOW - timedelta(minutes=rnd.randint(1, 500)),
            )
            state.pods[pod.key] = pod
    preemptor = Pod("default", "p", {GPU: 8, "cpu": 1000}, priority=100)
    state.pods[preemptor.key] = preemptor
    planner = NodePlanner(state, NOW)
    args = (planner.cluster, planner.table, preemptor, 100, set())
    fast, fast_seen = search_single(*args, vectorized=True)
    slow, slow_seen = search_single(*args, vectorized=False)
    assert fast is not None
    assert slow is not None
    assert (fast.node, [u.ref for u in fast.victims]) == (slow.node, [u.ref for u in slow.victims])
    assert fast_seen == slow_seen < 1200  # it stopped at the limit (120 candidates)
