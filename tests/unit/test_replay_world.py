"""The cluster a replay runs on, read by the same reader as ``plan``: its jobs get the
decisions ``plan`` gives (admitted on quota and nodes, and a borrower reclaimed)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gangpreempt.manifests import load
from gangpreempt.planning import plan
from gangpreempt.simulation.trace import Job
from gangpreempt.simulation.world import cluster_objects, job_objects

pytestmark = pytest.mark.unit
NOW = datetime(2025, 1, 1, 12, tzinfo=UTC)


def state_of(objects: list[dict]):  # type: ignore[no-untyped-def,type-arg]
    loaded = load([], objects, "replay")
    assert not loaded.warnings
    assert not loaded.rejected
    return loaded.state


def test_pending_jobs_are_admitted_on_quota_and_nodes() -> None:
    objects = cluster_objects({"a": 8, "b": 8}, nodes=2, gpus_per_node=8)
    objects += job_objects(Job("a1", 0, 60, "a", 100, (8,)), NOW)
    objects += job_objects(Job("b1", 1, 60, "b", 100, (4, 4)), NOW)
    decisions = {d.preemptor: d for d in plan(state_of(objects), NOW).decisions}
    a1, b1 = decisions["Workload/trace/a1"], decisions["Workload/trace/b1"]
    assert (a1.outcome, b1.outcome) == ("Admit", "Admit")
    assert set(a1.placement.values()).isdisjoint(b1.placement.values())
    assert len(b1.placement) == 2


def test_a_borrower_is_reclaimed_for_a_queue_within_its_quota() -> None:
    """b runs two jobs of 8 GPUs (one borrowing a's idle quota); a's job of 8 reclaims
    the borrower and takes its node."""
    objects = cluster_objects({"a": 8, "b": 8}, nodes=2, gpus_per_node=8)
    started = NOW - timedelta(hours=1)
    objects += job_objects(Job("b1", 0, 9999, "b", 100, (8,)), started, {0: "node-0000"}, started)
    later = started + timedelta(minutes=5)
    objects += job_objects(Job("b2", 5, 9999, "b", 100, (8,)), later, {0: "node-0001"}, later)
    objects += job_objects(Job("a1", 9, 60, "a", 100, (8,)), NOW)
    (d,) = plan(state_of(objects), NOW, "Workload/trace/a1").decisions
    assert d.outcome == "Preempt"
    assert [(v.object, v.reason) for v in d.victims] == [
        ("Workload/trace/b2", "InCohortReclamation")
    ]
    assert d.placement == {"Pod/trace/a1-0": "node-0001"}
