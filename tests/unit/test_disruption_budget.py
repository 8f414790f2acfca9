"""The disruption budget's rule (``planning.budget``): parsing, what a plan costs, what
a scope spent in its sliding window, and when a plan must wait."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangpreempt.config import load_settings
from gangpreempt.errors import InvalidInput
from gangpreempt.model.pods import Pod
from gangpreempt.planning.budget import (
    CLUSTER,
    COHORT,
    NODE_SCOPE,
    Budget,
    Charge,
    Spending,
    parse_budget,
    parse_duration,
    plan_cost,
    scope_key,
)
from gangpreempt.planning.records import new_record
from gangpreempt.quota.snapshot import Snapshot
from services.quota.budgeting import spends
from tests.builders import NOW, T0, admitted, cluster_queue, quota, state

pytestmark = pytest.mark.unit


def test_a_budget_parses_with_its_unit_window_scope_and_bar() -> None:
    assert parse_budget("10 victims/1h") == Budget(10, "victims", 3600.0)
    assert parse_budget("2.5 gpu-hours / 1h30m", COHORT, "900") == Budget(
        2.5, "gpu-hours", 5400.0, COHORT, 900
    )
    assert parse_budget("  ") is None
    assert parse_duration("90", "x") == 90.0
    for bad, words in (
        ("10 pods/1h", "unit 'pods'"),
        ("ten victims/1h", "is not '<N> victims"),
        ("1 victims/1d", "not a duration"),
        ("1 victims/0s", "longer than 0"),
    ):
        with pytest.raises(InvalidInput, match=words):
            parse_budget(bad)
    with pytest.raises(InvalidInput, match="bypass"):
        parse_budget("1 victims/1h", bypass="high")
    with pytest.raises(InvalidInput, match="scope"):
        parse_budget("1 victims/1h", scope="zone")


def test_settings_refuse_a_budget_that_does_not_parse_naming_the_variable() -> None:
    with pytest.raises(InvalidInput, match="GANGPREEMPT_DISRUPTION_BUDGET: unit"):
        load_settings(environ={"GANGPREEMPT_DISRUPTION_BUDGET": "3 nodes/1h"})
    with pytest.raises(InvalidInput, match="GANGPREEMPT_DISRUPTION_BUDGET_SCOPE"):
        load_settings(environ={"GANGPREEMPT_DISRUPTION_BUDGET_SCOPE": "zone"})
    settings_ = load_settings(
        environ={
            "GANGPREEMPT_DISRUPTION_BUDGET": "3 victims/10m",
            "GANGPREEMPT_DISRUPTION_BUDGET_SCOPE": "cohort",
        }
    )
    assert settings_.budget() == Budget(3, "victims", 600.0, COHORT)
    assert load_settings(environ={}).budget() is None


def snapshot() -> Snapshot:
    """Two cohort trees (a: qa1, qa2; b: qb) and a lone ClusterQueue; a workload of 4 GPUs
    admitted an hour before NOW (no checkpoint), a pod of 2 GPUs started half an hour
    before it."""
    cqs = [
        cluster_queue("qa1", {"default": {"gpu": quota(8)}}, cohort="a"),
        cluster_queue("qa2", {"default": {"gpu": quota(8)}}, cohort="a"),
        cluster_queue("qb", {"default": {"gpu": quota(8)}}, cohort="b"),
        cluster_queue("lone", {"default": {"gpu": quota(8)}}),
    ]
    wl = admitted("train", "qa1", {"nvidia.com/gpu": ("default", 4)}, at=0)
    st_ = state(cqs, [wl])
    st_.pods["default/p"] = Pod(
        "default", "p", {"nvidia.com/gpu": 2}, start_time=NOW - timedelta(minutes=30)
    )
    return Snapshot.build(st_, NOW)


def test_a_plan_draws_on_its_cohort_trees_budget_or_the_clusters() -> None:
    snap = snapshot()
    cohort = Budget(1, "victims", 60, COHORT)
    assert scope_key(cohort, snap, "qa1") == scope_key(cohort, snap, "qa2") == "Cohort/a"
    assert scope_key(cohort, snap, "ClusterQueue/qb") == "Cohort/b"
    assert scope_key(cohort, snap, "lone") == "ClusterQueue/lone"
    assert scope_key(cohort, snap, "") == NODE_SCOPE  # node-level: no ClusterQueue
    assert scope_key(Budget(1, "victims", 60), snap, "qa1") == CLUSTER


def test_a_plan_costs_its_victims_or_the_gpu_hours_they_lose() -> None:
    snap = snapshot()
    victims = [("Workload/default/train", ()), ("Pod/default/p", ())]
    assert plan_cost(Budget(9, "victims", 60), snap, victims, NOW) == 2.0
    lost = plan_cost(Budget(9, "gpu-hours", 60), snap, victims, NOW)
    # 4 GPUs for the hour since its admission, 2 GPUs for the pod's half hour
    assert lost == pytest.approx(4 * 1.0 + 2 * 0.5)
    group = [("PodGroup/default/g", ("Pod/default/p",))]
    assert plan_cost(Budget(9, "gpu-hours", 60), snap, group, NOW) == pytest.approx(1.0)


def test_a_plan_waits_while_its_scope_spent_the_budget_and_goes_when_the_window_moves() -> None:
    spending = Spending(Budget(2, "victims", 600))
    now = NOW.timestamp()
    assert spending.held("s", 2, 100, now) is None
    spending.charge(Charge("p1", "s", 1, now - 500))
    spending.charge(Charge("p2", "other", 1, now - 100))
    assert spending.held("s", 1, 100, now) is None  # 1 + 1 <= 2
    why = spending.held("s", 2, 100, now)
    assert why is not None
    assert "1 of 2 victims per 10m spent in s" in why
    assert "frees up in 100 s" in why
    assert spending.held("s", 2, 100, now + 100.5) is None  # p1 left the window
    assert spending.next_release("s", now) == pytest.approx(now + 100)
    assert spending.next_release(None, now) == pytest.approx(now + 100)
    # the plan itself is not counted against itself (confirming it again)
    spending.charge(Charge("p3", "s", 1, now))
    assert spending.held("s", 1, 100, now, but="p3") is None
    # more than the whole budget: never, below the bar
    assert "more than the whole budget" in (spending.held("x", 3, 100, now) or "")
    bar = Spending(Budget(2, "victims", 600, bypass_priority=500))
    bar.charge(Charge("p1", "s", 2, now))
    assert bar.held("s", 1, 501, now) is None
    assert bar.held("s", 1, 500, now) is not None
    spending.forget(now + 1000)
    assert spending.charges == {}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0, 50), st.sampled_from(["a", "b"]), st.floats(0.1, 3), st.integers(0, 9)
        ),
        max_size=40,
    ),
    st.floats(1, 5),
    st.floats(5, 30),
)
def test_no_window_ever_holds_more_than_the_budget(
    plans: list[tuple[float, str, float, int]], limit: float, window: float
) -> None:
    """Plans arriving in time order, each charged when the rule lets it through: every
    window of every scope holds at most the budget (no bypass)."""
    spending = Spending(Budget(limit, "gpu-hours", window))
    now = 0.0
    charged: list[Charge] = []
    for n, (gap, scope, cost, _prio) in enumerate(plans):
        now += gap
        if spending.held(scope, cost, 0, now) is None:
            c = Charge(f"p{n}", scope, cost, now)
            spending.charge(c)
            charged.append(c)
    for c in charged:  # the window ending at each charge
        inside = [d.cost for d in charged if d.scope == c.scope and c.at - window < d.at <= c.at]
        assert sum(inside) <= limit + 1e-6


def test_a_record_spends_from_confirmation_until_dropped() -> None:
    from msgspec.structs import replace

    rec = new_record("p", "r", "Workload/default/x", "default/x", T0)
    assert not spends(rec)
    charged = replace(rec, confirmed_at=T0, disruption=1.0, disruption_scope=CLUSTER)
    for state_, spent in (
        ("confirmed", True),
        ("actuating", True),
        ("actuated", True),
        ("dropped", False),
        ("rejected", False),
    ):
        assert spends(replace(charged, state=state_)) is spent
    assert spends(replace(charged, state="closed", actuated=("Workload/default/v",)))
    assert not spends(replace(charged, state="closed"))
