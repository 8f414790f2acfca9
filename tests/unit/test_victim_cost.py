"""``--victim-cost lost-gpu-hours``: Kueue's candidates of one priority are tried least
lost work first (GPUs x time since the last checkpoint), where Kueue's own order takes the
most recently admitted; without checkpoint annotations the order is Kueue's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gangpreempt.manifests import load
from gangpreempt.model.workloads import LAST_CHECKPOINT_ANNOTATION
from gangpreempt.planning import plan
from gangpreempt.simulation.trace import Job
from gangpreempt.simulation.world import cluster_objects, job_objects

pytestmark = pytest.mark.unit
NOW = datetime(2025, 1, 1, 12, tzinfo=UTC)
GPU = "nvidia.com/gpu"


def running(
    name: str, minutes_ago: int, interval: int | None, checkpoint: int | None = None
) -> list[dict[str, Any]]:
    since = NOW - timedelta(minutes=minutes_ago)
    objects = job_objects(
        Job(name, 0, 9999, "q", 100, (4,)), since, {0: "node-0000"}, since, interval
    )
    if checkpoint is not None:
        stamp = (NOW - timedelta(minutes=checkpoint)).isoformat().replace("+00:00", "Z")
        objects[0]["metadata"].setdefault("annotations", {})[LAST_CHECKPOINT_ANNOTATION] = stamp
    return objects


def victims(
    objects: list[dict[str, Any]], cost: str, quota_gpus: int = 8, nodes: int = 1
) -> list[str]:
    objects = cluster_objects({"q": quota_gpus}, nodes=nodes, gpus_per_node=8) + objects
    objects += job_objects(Job("high", 9, 60, "q", 1000, (4,)), NOW)
    state = load([], objects, "replay").state
    (d,) = plan(state, NOW, "Workload/trace/high", victim_cost=cost).decisions
    assert d.outcome == "Preempt"
    return [v.object.rsplit("/", 1)[1] for v in d.victims]


def test_least_lost_work_first_where_kueue_takes_the_newest() -> None:
    # a: admitted 40 min ago, checkpoints every 30: loses 10 min; b: 20 min ago, loses 20
    objects = running("a", 40, 1800) + running("b", 20, 1800)
    assert victims(objects, "") == ["b"]  # Kueue: the most recently admitted
    assert victims(objects, "lost-gpu-hours") == ["a"]


def test_a_last_checkpoint_annotation_counts() -> None:
    objects = running("a", 40, 1800) + running("b", 20, 1800, checkpoint=1)
    assert victims(objects, "lost-gpu-hours") == ["b"]  # checkpointed a minute ago


def test_without_checkpoints_the_whole_run_is_lost() -> None:
    objects = running("a", 40, None) + running("b", 20, None)
    assert victims(objects, "lost-gpu-hours") == ["b"] == victims(objects, "")


def test_fair_sharing_takes_the_candidate_that_loses_least_in_a_queue() -> None:
    """Kueue's fair sharing takes the most recently admitted of one priority; the cost
    takes the older one, checkpointed a minute ago. Fair sharing still picks the queue."""
    import msgspec

    from gangpreempt.model.queues import KueueConfiguration
    from tests.builders import NOW as T
    from tests.builders import admitted, cluster_queue, pending, quota, state

    cq = cluster_queue("q", {"default": {GPU: quota(8)}}, within="LowerPriority")
    old = admitted("old", "q", {GPU: ("default", 4)}, 0, at=0)
    old = msgspec.structs.replace(old, last_checkpoint=T - timedelta(minutes=1))
    new = admitted("new", "q", {GPU: ("default", 4)}, 0, at=50)
    st = state([cq], [old, new, pending("high", "q", {GPU: 4}, 100)])
    st.kueue_configurations["kueue"] = KueueConfiguration(fair_sharing=True)
    taken = {}
    for cost in ("", "lost-gpu-hours"):
        (d,) = plan(st, T, "Workload/default/high", victim_cost=cost).decisions
        assert d.outcome == "Preempt"
        taken[cost] = [v.object for v in d.victims]
    assert taken[""] == ["Workload/default/new"]
    assert taken["lost-gpu-hours"] == ["Workload/default/old"]
