"""The disruption budget through the services (issue 27): a preemption that would
spend more than the budget allows in its window waits, with a ``Pending`` saying why,
and goes when the window moves past the plan that spent it; a preemptor above the
bypass priority is never held."""

from __future__ import annotations

from pathlib import Path

import pytest
from nats.aio.client import Client

from gangpreempt import events
from gangpreempt.bus import Topology
from tests.e2e.harness import Services, admitted, of, sim_stats
from tests.e2e.scenarios import ADMITTED, CLUSTER, PENDING

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]
WINDOW_S = 4.0


def two_gangs_arrive(folder: Path) -> None:
    """8 CPUs full with low-1 and low-2 (4 CPUs each); two gangs of priority 1000 and 4
    CPUs arrive together, each needing one of them."""
    text = CLUSTER
    text += ADMITTED.format(name="low-1", minute=0, priority=100, cpus=4)
    text += ADMITTED.format(name="low-2", minute=10, priority=100, cpus=4)
    (folder / "cluster.yaml").write_text(text)
    gangs = PENDING.format(name="gang-a", minute=0, priority=1000, cpus=4)
    gangs += "---\n" + PENDING.format(name="gang-b", minute=1, priority=1000, cpus=4)
    (folder / "gangs.yaml").write_text(gangs)
    (folder / "timeline.yaml").write_text("- at: 0.5\n  apply: gangs.yaml\n")


def budget_pending(evs: list[events.Event]) -> list[events.Pending]:
    return [e for e in of(evs, events.Pending) if e.message.startswith("disruption budget")]


async def test_a_budget_holds_a_preemption_back_until_its_window_moves(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    two_gangs_arrive(scenario_dir)
    services.start(extra={"GANGPREEMPT_DISRUPTION_BUDGET": f"1 victims/{WINDOW_S:g}s"})
    await admitted(nc, topology, "Workload/ml/gang-a")
    evs = await admitted(nc, topology, "Workload/ml/gang-b")
    confirmed = sorted(of(evs, events.PlanConfirmed), key=lambda e: e.occurred_at)
    assert len(confirmed) == 2
    first, second = confirmed
    # The later one was held back: before its request (a Pending saying why), or, when
    # both were requested in one cycle, at its confirmation (rejected, asked again).
    stops = [e.workload for e in budget_pending(evs)] + [
        e.preemptor
        for e in of(evs, events.PlanRejected)
        if e.reason.startswith("disruption budget")
    ]
    assert stops
    assert set(stops) == {second.preemptor}
    for e in budget_pending(evs):
        assert "1 victims per 4s" in e.message
    (request,) = [
        r
        for r in of(evs, events.PreemptionRequested, workload=second.preemptor)
        if events.stable_id("plan", r.request_id) == second.plan_id
    ]
    # the plan that went was asked for only once the first plan's charge left the window
    # (its record's time is a little before its PlanConfirmed event's)
    assert (request.occurred_at - first.occurred_at).total_seconds() >= WINDOW_S - 0.25
    stats = await sim_stats(nc, topology)
    assert stats.evictions == {"Workload/ml/low-1": 1, "Workload/ml/low-2": 1}


async def test_a_preemptor_above_the_bypass_priority_is_never_held(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    two_gangs_arrive(scenario_dir)
    services.start(
        extra={
            "GANGPREEMPT_DISRUPTION_BUDGET": "1 victims/1h",
            "GANGPREEMPT_DISRUPTION_BUDGET_BYPASS": "500",
        }
    )
    await admitted(nc, topology, "Workload/ml/gang-a")
    evs = await admitted(nc, topology, "Workload/ml/gang-b")
    assert budget_pending(evs) == []
    assert len(of(evs, events.PlanConfirmed)) == 2
