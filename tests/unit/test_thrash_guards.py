"""The rules that keep a preemption from being undone at once (found by the trace
replay): a preemptor whose victims have left is admitted before any other head; a
workload preempted less than an hour ago is no candidate; and a Workload of another
ClusterQueue within its nominal quota is no victim for room on the nodes; and what a
victim leaves over stays taken until it has terminated."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gangpreempt.manifests import load
from gangpreempt.planning import plan
from gangpreempt.planning.quotacycle import cycle_decisions
from gangpreempt.quota.snapshot import Snapshot
from gangpreempt.simulation.trace import Job
from gangpreempt.simulation.world import cluster_objects, job_objects

pytestmark = pytest.mark.unit
NOW = datetime(2025, 1, 1, 12, tzinfo=UTC)
EARLIER = NOW - timedelta(hours=3)


def state_of(objects: list[dict[str, Any]]):  # type: ignore[no-untyped-def]
    loaded = load([], objects, "replay")
    assert not loaded.rejected
    return loaded.state


def running(
    job: Job, nodes: dict[int, str], preempted: datetime | None = None
) -> list[dict[str, Any]]:
    objects = job_objects(job, EARLIER, nodes, EARLIER)
    if preempted is not None:
        stamp = preempted.isoformat().replace("+00:00", "Z")
        objects[0]["status"]["conditions"].append(
            {
                "type": "Preempted",
                "status": "False",
                "reason": "QuotaReserved",
                "lastTransitionTime": stamp,
            }
        )
    return objects


@pytest.mark.parametrize(
    ("minutes_ago", "outcome"),
    [(10, "Pending"), (59, "Pending"), (61, "Preempt"), (None, "Preempt")],
)
def test_a_workload_preempted_within_the_hour_is_no_candidate(
    minutes_ago: int | None, outcome: str
) -> None:
    when = None if minutes_ago is None else NOW - timedelta(minutes=minutes_ago)
    objects = cluster_objects({"q": 8}, nodes=1, gpus_per_node=8)
    objects += running(Job("low", 0, 9999, "q", 100, (8,)), {0: "node-0000"}, when)
    objects += job_objects(Job("high", 1, 60, "q", 1000, (8,)), NOW)
    (d,) = plan(state_of(objects), NOW, "Workload/trace/high").decisions
    assert d.outcome == outcome
    assert [v.object for v in d.victims] == (["Workload/trace/low"] if outcome == "Preempt" else [])


@pytest.mark.parametrize(("b_nominal", "outcome"), [(4, "Pending"), (0, "Preempt")])
def test_room_on_the_nodes_is_not_taken_from_a_queue_within_its_quota(
    b_nominal: int, outcome: str
) -> None:
    """a's 8-GPU pod fits a's quota, but each node has 4 GPUs free: room means evicting
    b's job. While b is within its nominal quota it would reclaim that at once: no."""
    objects = cluster_objects({"a": 16 - b_nominal, "b": b_nominal}, nodes=2, gpus_per_node=8)
    objects += running(Job("b1", 0, 9999, "b", 100, (4,)), {0: "node-0000"})
    objects += running(Job("a1", 1, 9999, "a", 1000, (4,)), {0: "node-0001"})
    objects += job_objects(Job("p", 2, 60, "a", 1000, (8,)), NOW)
    decisions = {d.preemptor: d for d in plan(state_of(objects), NOW).decisions}
    d = decisions["Workload/trace/p"]
    assert d.outcome == outcome
    if outcome == "Preempt":
        assert [v.object for v in d.victims] == ["Workload/trace/b1"]
        assert d.placement == {"Pod/trace/p-0": "node-0000"}


@pytest.mark.parametrize("first", [frozenset(), frozenset({"trace/old"})])
def test_a_preemptor_whose_victims_left_comes_before_every_head(first: frozenset[str]) -> None:
    """Two pending workloads want the same 8 GPUs: the higher-priority one is the head;
    the one whose preemption just completed is admitted first when named in ``first``."""
    objects = cluster_objects({"q": 8}, nodes=1, gpus_per_node=8)
    objects += job_objects(Job("old", 0, 60, "q", 100, (8,)), EARLIER)
    objects += job_objects(Job("new", 1, 60, "q", 1000, (8,)), NOW)
    state = state_of(objects)
    decisions = {
        d.preemptor: d.outcome
        for d in cycle_decisions(Snapshot.build(state, NOW), frozenset(), None, first)
    }
    admitted = "Workload/trace/old" if first else "Workload/trace/new"
    assert decisions[admitted] == "Admit"
    assert [p for p, o in decisions.items() if o == "Admit"] == [admitted]


def test_nothing_is_placed_where_a_victim_still_runs() -> None:
    """One 8-GPU node held by a low-priority 8-GPU job of queue q; a 4-GPU job of q (quota
    to spare) preempts it for room, and a 4-GPU job of queue r comes next in the pass. The
    victim's other 4 GPUs are not free until it has terminated: the second job waits,
    instead of being bound onto a node that is still full."""
    objects = cluster_objects({"q": 12, "r": 4}, nodes=1, gpus_per_node=8)
    objects += running(Job("low", 0, 9999, "q", 100, (8,)), {0: "node-0000"})
    objects += job_objects(Job("h1", 1, 60, "q", 1000, (4,)), NOW)
    objects += job_objects(Job("h2", 2, 60, "r", 1000, (4,)), NOW + timedelta(seconds=1))
    decisions = {d.preemptor: d for d in plan(state_of(objects), NOW).decisions}
    first, second = decisions["Workload/trace/h1"], decisions["Workload/trace/h2"]
    assert (first.outcome, [v.object for v in first.victims]) == ("Preempt", ["Workload/trace/low"])
    assert first.placement == {"Pod/trace/h1-0": "node-0000"}
    assert second.outcome == "Pending"
    assert second.placement == {}


def test_a_workload_still_being_evicted_stays_a_candidate() -> None:
    """Preempted a minute ago and still terminating: taking it evicts nothing again."""
    objects = cluster_objects({"q": 8}, nodes=1, gpus_per_node=8)
    objects += running(Job("low", 0, 9999, "q", 100, (8,)), {0: "node-0000"})
    stamp = (NOW - timedelta(minutes=1)).isoformat().replace("+00:00", "Z")
    objects[-2]["status"]["conditions"] += [
        {"type": "Evicted", "status": "True", "reason": "Preempted", "lastTransitionTime": stamp},
        {
            "type": "Preempted",
            "status": "True",
            "reason": "InClusterQueue",
            "lastTransitionTime": stamp,
        },
    ]
    objects += job_objects(Job("high", 1, 60, "q", 1000, (8,)), NOW)
    (d,) = plan(state_of(objects), NOW, "Workload/trace/high").decisions
    assert d.outcome == "Preempt"
    assert [v.object for v in d.victims] == ["Workload/trace/low"]
