"""The disruption budget in the replay (``Settings.disruption_budget``): on small traces
built by hand, a preemption that would exceed it waits, holding nothing, until the
charge before it leaves the window; a preemptor above the bar is never held; a
gpu-hours budget weighs the victims' lost work; two plans of one pass cannot both take
the last of it; a plan the barrier drops gives its charge back. And ``simulate``'s
options: read, reported, refused when they do not parse."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner

from gangpreempt.cli.simulate import simulate_command
from gangpreempt.planning.barrier import stale_reason
from gangpreempt.planning.budget import COHORT, parse_budget
from gangpreempt.simulation import replay as replay_module
from gangpreempt.simulation.outcomes import EVICTED, HELD, STARTED, Outcomes, Record, outcomes
from gangpreempt.simulation.replay import Replay, Settings
from gangpreempt.simulation.trace import Job
from tests.unit.test_simulate_cli import TRACE

pytestmark = pytest.mark.unit
T0 = datetime(2025, 1, 1, tzinfo=UTC)
LONG = 10**6
HOUR = 3600.0


def two_low_two_high(second_at: int) -> list[Job]:
    """Two 8-GPU nodes full of two long low-priority jobs; a long high-priority 8-GPU
    job arrives at 100 and another at ``second_at``: each must evict one low job."""
    return [
        Job("L1", 0, LONG, "q", 100, (8,)),
        Job("L2", 0, LONG, "q", 100, (8,)),
        Job("H1", 100, LONG, "q", 1000, (8,)),
        Job("H2", second_at, LONG, "q", 1000, (8,)),
    ]


def run(
    jobs: list[Job],
    budget: str = "",
    scope: str = "cluster",
    bypass: str = "",
    policy: str = "gangpreempt",
    quotas: dict[str, int] | None = None,
) -> tuple[Replay, list[Record], Outcomes]:
    settings = Settings(
        2,
        8,
        quotas or {"q": 16},
        T0,
        cycle_s=10,
        disruption_budget=parse_budget(budget, scope, bypass),
    )
    sim = Replay(policy, jobs, settings)
    log = sim.run()
    return sim, log, outcomes(log, 10, settings.checkpoint_interval_s)


def evictions_by(log: list[Record]) -> dict[str, float]:
    """preemptor -> when its victims were evicted (each preemptor preempts once here)."""
    return {r.preemptor: r.at for r in log if r.kind == EVICTED}


def started(log: list[Record], job: str) -> float:
    return next(r.at for r in log if r.kind == STARTED and r.job == job)


def test_without_a_budget_both_preempt_at_once_with_one_victim_an_hour_the_second_waits() -> None:
    jobs = two_low_two_high(200)
    _, free_log, free = run(jobs)
    assert evictions_by(free_log) == {"H1": 100, "H2": 200}
    assert free.budget_held == 0
    assert not [r for r in free_log if r.kind == HELD]

    sim, log, held = run(jobs, "1 victims/1h")
    by = evictions_by(log)
    assert by["H1"] == 100  # the first fits the budget
    # the second waits until the first's charge (at 100) leaves the window, not longer
    # than one cycle after it
    assert 100 + HOUR <= by["H2"] <= 100 + HOUR + 10
    assert started(log, "H2") == by["H2"] + 30  # then as before: the termination delay
    assert held.budget_held == 1  # held many cycles, one preemption held back
    assert [(r.at, r.job) for r in log if r.kind == HELD] == [(200, "H2")]
    assert sim.stats.budget_held >= 1
    assert sim.stats.rejected == 0  # held before its request: no plan made, none refused
    assert held.evictions == free.evictions == 2
    # while it waited, H2 held nothing: L2 kept running until H2's own preemption
    assert held.wait_s["1000"].p99 > free.wait_s["1000"].p99


def test_a_second_victim_within_a_larger_budget_is_not_held() -> None:
    _, log, held = run(two_low_two_high(200), "2 victims/1h")
    assert evictions_by(log) == {"H1": 100, "H2": 200}
    assert held.budget_held == 0


def test_a_preemptor_above_the_bypass_priority_is_never_held() -> None:
    jobs = two_low_two_high(200)
    _, log, above = run(jobs, "1 victims/1h", bypass="999")
    assert evictions_by(log) == {"H1": 100, "H2": 200}
    assert above.budget_held == 0
    # strictly above: a preemptor at the bar is held
    _, log, at_bar = run(jobs, "1 victims/1h", bypass="1000")
    assert evictions_by(log)["H2"] >= 100 + HOUR
    assert at_bar.budget_held == 1


def test_a_gpu_hours_budget_weighs_the_lost_work_of_the_victims() -> None:
    """1 GPU-hour an hour; each victim is 8 GPUs checkpointed every 30 min from its start
    at 0. H1 at 100 costs 8 x 100 s = 0.22; H2 at 200 costs 0.44 more (0.67 in all: it
    goes, where a one-victim budget holds it), H2 at 500 costs 1.1 (held: it goes when
    H1's charge leaves the window, its victim checkpointed by then)."""
    _, log, early = run(two_low_two_high(200), "1 gpu-hours/1h")
    assert evictions_by(log) == {"H1": 100, "H2": 200}
    assert early.budget_held == 0
    _, log, late = run(two_low_two_high(500), "1 gpu-hours/1h")
    by = evictions_by(log)
    assert by["H1"] == 100
    assert 100 + HOUR <= by["H2"] <= 100 + HOUR + 10
    assert late.budget_held == 1
    # the victims' measured loss: within the budget in each window
    assert early.lost_gpu_hours <= 1.0 + 1e-6


def test_two_plans_of_one_pass_cannot_both_take_the_last_of_the_budget() -> None:
    """Two ClusterQueues (Kueue preempts for one head per queue a pass), each a low job
    and a high one arriving at once: both pass the check before the request (nothing is
    spent yet); the first confirmed takes the budget, the second is rejected at its
    confirmation, and goes when the charge leaves the window."""
    jobs = [
        Job("L1", 0, LONG, "a", 100, (8,)),
        Job("L2", 0, LONG, "b", 100, (8,)),
        Job("H1", 100, LONG, "a", 1000, (8,)),
        Job("H2", 100, LONG, "b", 1000, (8,)),
    ]
    quotas = {"a": 8, "b": 8}
    _, log, _ = run(jobs, quotas=quotas)
    assert sorted(evictions_by(log).values()) == [100, 100]  # one pass, two plans
    sim, log, held = run(jobs, "1 victims/1h", quotas=quotas)
    times = sorted(evictions_by(log).values())
    assert times[0] == 100
    assert 100 + HOUR <= times[1] <= 100 + HOUR + 10
    assert sim.stats.rejected == 1  # at confirmation, by the budget
    assert held.budget_held == 1


def test_a_plan_the_barrier_drops_gives_its_charge_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """H1's first plan is confirmed (charged) and then dropped by the actuator's barrier
    before it evicts anything: its charge goes, so H1 preempts at the next cycle (the
    arrival of a job that cannot start) instead of waiting an hour."""
    calls: list[int] = []

    def stale_once(*args: object) -> str | None:
        calls.append(1)
        return "stale" if len(calls) == 1 else stale_reason(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(replay_module, "stale_reason", stale_once)  # as the replay calls it
    jobs = [
        Job("L1", 0, LONG, "q", 100, (8,)),
        Job("L2", 0, LONG, "q", 100, (8,)),
        Job("H1", 100, LONG, "q", 1000, (8,)),
        Job("tick", 150, 60, "q", 100, (8,)),  # nothing but a cycle at 150
    ]
    sim, log, held = run(jobs, "1 victims/1h")
    assert sim.stats.rejected == 1
    assert evictions_by(log) == {"H1": 150}
    assert held.budget_held == 0
    assert sim.spending is not None
    assert len(sim.spending.charges) == 1


def test_under_cohort_scope_the_trace_cohort_shares_one_budget() -> None:
    _, log, held = run(two_low_two_high(200), "1 victims/1h", scope=COHORT)
    assert evictions_by(log)["H2"] >= 100 + HOUR
    assert held.budget_held == 1


def test_the_budget_binds_only_gangpreempts_plans() -> None:
    jobs = two_low_two_high(200)
    sim, log, held = run(jobs, "1 victims/1h", policy="gang-unconfirmed")
    assert sim.spending is None
    assert held.budget_held == 0
    assert sorted(evictions_by(log).values()) == [100, 200]
    sim, log, held = run(jobs, "1 victims/1h", policy="optimal-victims")
    assert evictions_by(log)["H2"] >= 100 + HOUR
    assert held.budget_held == 1


# -- the command ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--disruption-budget", "3 nodes/1h"], "--disruption-budget: unit 'nodes'"),
        (["--disruption-budget", "many victims/1h"], "--disruption-budget: 'many victims/1h'"),
        (["--disruption-budget", "1 victims/1d"], "--disruption-budget: '1d' is not a duration"),
        (
            ["--disruption-budget", "1 victims/1h", "--disruption-budget-scope", "zone"],
            "--disruption-budget-scope",
        ),
        (
            ["--disruption-budget", "1 victims/1h", "--disruption-budget-bypass", "high"],
            "--disruption-budget-bypass",
        ),
    ],
)
def test_a_bad_budget_is_refused_naming_the_option(args: list[str], says: str) -> None:
    out = CliRunner().invoke(simulate_command, ["--trace", TRACE, "--no-plots", *args])
    assert out.exit_code == 2
    assert says in out.output
    assert "Traceback" not in out.output


def test_the_command_reads_the_budget_and_reports_what_it_held() -> None:
    def run(*args: str) -> str:
        """The command in this process (no interpreter to start per run)."""
        out = CliRunner().invoke(
            simulate_command, ["--trace", TRACE, *args], env={"COLUMNS": "200"}
        )
        assert out.exit_code == 0, out.output
        return out.stdout

    def json_run(*extra: str) -> dict[str, object]:
        out = run(
            "--window", "0:7200", "--nodes", "3", "--policy", "gangpreempt",
            "--policy", "gang-unconfirmed", "--no-plots", "--optimum-sample", "0",
            "-o", "json", *extra,
        )  # fmt: skip
        doc = json.loads(out)
        assert isinstance(doc, dict)
        return doc

    plain = json_run()
    held = json_run("--disruption-budget", "1 victims/1h", "--disruption-budget-bypass", "5000")
    assert plain["synthesized"]["disruption_budget"] is None  # type: ignore[index]
    assert held["synthesized"]["disruption_budget"] == {  # type: ignore[index]
        "limit": 1.0,
        "unit": "victims",
        "window_s": 3600.0,
        "scope": "cluster",
        "bypass": 5000,
        "policies": ["gangpreempt", "optimal-victims"],
    }
    before = {p["policy"]: p["outcomes"] for p in plain["policies"]}  # type: ignore[attr-defined]
    after = {p["policy"]: p["outcomes"] for p in held["policies"]}  # type: ignore[attr-defined]
    assert before["gangpreempt"]["budget_held"] == 0
    assert before["gangpreempt"]["evictions"] > 1
    assert after["gangpreempt"]["budget_held"] > 0
    assert after["gangpreempt"]["evictions"] < before["gangpreempt"]["evictions"]
    assert after["gang-unconfirmed"] == before["gang-unconfirmed"]  # Kueue's: no budget

    table = run(
        "--window", "0:3600", "--nodes", "3", "--policy", "gangpreempt", "--no-plots",
        "--optimum-sample", "0", "--disruption-budget", "1 victims/1h",
    )  # fmt: skip
    assert "held by the budget" in table
    assert "disruption budget 1 victims per 1h (cluster)" in table
    bare = run(
        "--window", "0:3600", "--nodes", "3", "--policy", "gangpreempt", "--no-plots",
        "--optimum-sample", "0",
    )  # fmt: skip
    assert "held by the budget" not in bare
