"""A Kueue preemptor's search leaves alone the victims promised to other plans; only
those in its own cohort tree can be candidates, so only those are taken out of the
candidate indexes (a burst's requests name every victim in flight): the decision is the
one with every promised victim taken out."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangpreempt.model import ClusterState, Cohort, LocalQueue
from gangpreempt.planning import plan_on
from gangpreempt.quota import Snapshot
from tests.builders import NOW, admitted, cluster_queue, quota
from tests.unit.test_properties import CPU, clusters

pytestmark = pytest.mark.unit


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.data())
def test_promised_victims_outside_the_cohort_tree_change_nothing(
    case: tuple[ClusterState, str], data: st.DataObject
) -> None:
    state, key = case
    # A second tree beside the drawn one: its workloads are never this preemptor's.
    state.cohorts["other"] = Cohort("other", None)
    cq = cluster_queue("x", {"default": {"cpu": quota(4 * CPU)}}, "other")
    state.cluster_queues["x"] = cq
    state.local_queues["default/x"] = LocalQueue("default", "x", "x")
    for i in range(data.draw(st.integers(0, 3))):
        wl = admitted(f"o{i}", "x", {"cpu": ("default", CPU)}, data.draw(st.integers(0, 3)), at=i)
        state.workloads[wl.key] = wl
    held = sorted(k for k, wl in state.workloads.items() if wl.holds_quota)
    excluded = data.draw(st.lists(st.sampled_from(held), unique=True)) if held else []

    got = plan_on(Snapshot.build(state, NOW), f"Workload/{key}", excluded=excluded)
    every = Snapshot.build(state, NOW)
    for k in excluded:  # what the search did before: every promised victim pinned
        every.pin(k)
    assert got == plan_on(every, f"Workload/{key}")
