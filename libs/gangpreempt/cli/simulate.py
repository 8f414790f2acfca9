"""``gangpreempt simulate``: replay a GPU-cluster trace under each preemption policy (one
process per policy, as many at once as there are cores), then print the table or the
JSON and draw the plots."""

from __future__ import annotations

import multiprocessing
import os
import queue
import resource
import sys
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

import click
import msgspec

from gangpreempt.cli.main import victim_cost_option
from gangpreempt.errors import EXIT_INVALID, InvalidInput
from gangpreempt.planning.budget import SCOPES, Budget, parse_budget
from gangpreempt.preemption.candidates import core_victim_cost
from gangpreempt.simulation.inputs import (
    ReplayInput,
    known_origin,
    parse_duration,
    replay_input,
)
from gangpreempt.simulation.optimum import Optimality, measure
from gangpreempt.simulation.replay import BUDGETED, POLICIES, Replay
from gangpreempt.simulation.report import PolicyReport, Series, policy_report
from gangpreempt.simulation.trace import PRIORITY_MODES, at, origin_of, read_trace

DEFAULT_POLICIES = POLICIES
DEFAULT_PLOTS = "gangpreempt-plots"


class SimulationResult(msgspec.Struct, frozen=True):
    trace: str
    window: dict[str, Any]
    cluster: dict[str, Any]
    synthesized: dict[str, Any]
    policies: list[PolicyReport]
    # gangpreempt's victims against the exact optimum, on a sample of its decisions
    optimum: Optimality | None = None


Outcome = tuple[PolicyReport, Series, Optimality | None]


def _quiet_stdout() -> None:
    """A worker writes nothing on standard output (the solver's banner would land in
    the JSON): what it would print goes to standard error."""
    os.dup2(2, 1)


def run_policy(
    policy: str, replay: ReplayInput, progress: Any = None, optimum_sample: int = 0
) -> Outcome:
    """One policy's replay, in its own process (its peak memory is the process's); for
    gangpreempt, its victims measured against the optimum on ``optimum_sample`` of its
    decisions."""

    def tell(virtual_s: float) -> None:
        if progress is not None:
            progress.put((policy, virtual_s))

    sim = Replay(policy, replay.jobs, replay.settings)
    log = sim.run(tell)
    s = replay.settings
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    optimality = None
    if sim.problems is not None and optimum_sample > 0:
        optimality = measure(sim.problems, optimum_sample)
    report, drawn = policy_report(
        policy,
        log,
        sim.stats,
        cycle_s=s.cycle_s,
        checkpoint_interval_s=s.checkpoint_interval_s,
        capacity_gpus=s.nodes * s.gpus_per_node,
        window_s=replay.window[1] - replay.window[0],
        peak_memory_mb=peak_kb / 1024.0,
        nominal=s.quotas if sim.kueue else None,
    )
    return report, drawn, optimality


def run_all(
    policies: list[str], replay: ReplayInput, show_progress: bool, optimum_sample: int = 0
) -> list[Outcome]:
    """Every policy, each in a fresh process, with a progress bar on stderr."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    context = multiprocessing.get_context("spawn")
    workers = max(1, min(len(policies), os.cpu_count() or 1))
    window = replay.window[1] - replay.window[0]
    with context.Manager() as manager:
        updates = manager.Queue()
        with (
            ProcessPoolExecutor(
                workers, mp_context=context, max_tasks_per_child=1, initializer=_quiet_stdout
            ) as pool,
            Progress(
                TextColumn("{task.description:>18}"),
                BarColumn(),
                TextColumn("{task.fields[where]}"),
                TimeElapsedColumn(),
                console=_stderr_console(),
                disable=not show_progress,
            ) as bar,
        ):
            tasks = {
                p: bar.add_task(p, total=window, where="waiting", start=False) for p in policies
            }
            futures: dict[str, Future[Outcome]] = {
                p: pool.submit(run_policy, p, replay, updates, optimum_sample) for p in policies
            }
            while not all(f.done() for f in futures.values()):
                try:
                    policy, virtual_s = updates.get(timeout=0.2)
                except queue.Empty:
                    continue
                bar.start_task(tasks[policy])
                day = virtual_s / 86400.0
                bar.update(tasks[policy], completed=min(virtual_s, window), where=f"day {day:.1f}")
            results = []
            for p in policies:
                results.append(futures[p].result())
                bar.update(tasks[p], completed=window, where="done")
    return results


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


def print_table(result: SimulationResult) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 160)
    w, c, syn = result.window, result.cluster, result.synthesized
    console.print(
        f"[bold]{result.trace}[/bold]  window {w['start']} .. {w['end']} ({w['jobs']} jobs), "
        f"{c['nodes']} nodes x {c['gpus_per_node']} GPUs"
        f"{' (sized from the load)' if c['sized_from_trace'] else ''}, offered load "
        f"{c['offered_gpus']} GPUs; priority {syn['priority']} (seed {syn['seed']}), "
        f"queues {syn['queues']}{' (fair sharing)' if c.get('fair_sharing') else ''}, "
        f"checkpoint every {syn['checkpoint_interval_s']:.0f} s, "
        f"termination {syn['termination_delay_s']:.0f} s, cycle {syn['cycle_s']:.0f} s, "
        f"victim cost {syn['victim_cost']}"
        + (f", minimum runtime {syn['min_runtime_s']:.0f} s" if syn.get("min_runtime_s") else "")
        + _budget_text(syn.get("disruption_budget"))
    )
    table = Table(show_lines=False)
    table.add_column("measure")
    for r in result.policies:
        table.add_column(r.policy, justify="right")

    def row(name: str, values: list[str]) -> None:
        table.add_row(name, *values)

    rs = result.policies
    row("evictions", [str(r.outcomes.evictions) for r in rs])
    row("victim pods / GPUs", [f"{r.outcomes.victim_pods} / {r.outcomes.victim_gpus}" for r in rs])
    row("unnecessary evictions", [str(r.outcomes.unnecessary_evictions) for r in rs])
    row("partial-gang evictions", [str(r.outcomes.partial_gang_evictions) for r in rs])
    row("thrash", [str(r.outcomes.thrash) for r in rs])
    row("lost GPU-hours", [f"{r.outcomes.lost_gpu_hours:.1f}" for r in rs])
    if syn.get("disruption_budget"):
        row(
            "held by the budget",
            [str(r.outcomes.budget_held) if r.policy in BUDGETED else "-" for r in rs],
        )
    priorities = sorted({p for r in rs for p in r.outcomes.wait_s}, key=int, reverse=True)
    for p in priorities:
        for q in ("p50", "p95", "p99"):
            row(
                f"wait {q}, priority {p}",
                [
                    _human(getattr(r.outcomes.wait_s[p], q)) if p in r.outcomes.wait_s else "-"
                    for r in rs
                ],
            )
    row("completion p50", [_human(r.outcomes.completion_s.p50) for r in rs])
    row(
        "jobs started / finished",
        [f"{r.outcomes.jobs_started} / {r.outcomes.jobs_finished}" for r in rs],
    )
    row("GPU utilization (window)", [f"{r.utilization_mean * 100:.1f}%" for r in rs])
    row("decisions / s", [f"{r.decisions_per_s:,.0f}" for r in rs])
    row("run time", [f"{r.seconds:.1f} s" for r in rs])
    row("peak memory", [f"{r.peak_memory_mb:.0f} MB" for r in rs])
    console.print(table)
    for r in rs:
        if r.outcomes.thrash_by_queues:
            pairs = ", ".join(
                f"{t.queues[0]} / {t.queues[1]} {t.thrash}" for t in r.outcomes.thrash_by_queues[:5]
            )
            console.print(f"thrash by ClusterQueue pair, {r.policy}: {pairs}")
    opt = result.optimum
    if opt is not None:
        console.print(
            f"gangpreempt's victims against the exact optimum (HiGHS), on {opt.sampled} of its "
            f"{opt.decisions} preemption decisions ({opt.outside} left out: its victims do not "
            "make room in the solver's model):"
        )
        for f in opt.objectives:
            console.print(
                f"  {f.objective}: optimal in {f.optimal} of {f.measured}; ours / optimum "
                f"p50 {f.ratio_p50:g}, p95 {f.ratio_p95:g}, max {f.ratio_max:g}"
                + (
                    f"; {f.zero_optimum} where the optimum costs 0 and ours does not"
                    if f.zero_optimum
                    else ""
                )
            )


def _budget_text(budget: Any) -> str:
    """The header's words for the disruption budget of ``synthesized`` (none: nothing)."""
    if not budget:
        return ""
    b = Budget(
        budget["limit"], budget["unit"], budget["window_s"], budget["scope"], budget["bypass"]
    )
    bar = (
        f", priority above {b.bypass_priority} never held" if b.bypass_priority is not None else ""
    )
    return f", disruption budget {b.describe()} ({b.scope}{bar})"


def _budget_json(budget: Budget | None) -> dict[str, Any] | None:
    if budget is None:
        return None
    return {
        "limit": budget.limit,
        "unit": budget.unit,
        "window_s": budget.window_s,
        "scope": budget.scope,
        "bypass": budget.bypass_priority,
        "policies": list(BUDGETED),
    }


def _human(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


@click.command(
    "simulate",
    epilog="\b\nExamples:\n"
    "  gangpreempt simulate --trace ../shared/traces/philly_2017_jobs.csv "
    "--window 2017-10-01:2017-10-08\n"
    "  gangpreempt simulate --trace jobs.csv --window 0:86400 --nodes 16 --policy gangpreempt "
    "--policy pod-immediate -o json",
)
@click.option("--trace", "trace_path", required=True, metavar="CSV", help="The trace (CSV).")
@click.option(
    "--window",
    metavar="START:END",
    help="Jobs submitted in [START, END): dates (2017-10-01) when the origin is known, or "
    "seconds from it (default: the whole trace).",
)
@click.option("--origin", metavar="DATE", help="The date of the trace's second 0.")
@click.option(
    "--nodes", type=int, help="Nodes (default: the window's mean GPU demand plus a quarter)."
)
@click.option("--gpus-per-node", type=int, default=8, show_default=True)
@click.option(
    "--queues",
    default="auto",
    show_default=True,
    metavar="auto|FILE",
    help="auto: a ClusterQueue per trace queue in one cohort, nominal quota by its share of "
    "GPU time; or the operator's Kueue configuration (ResourceFlavors, Cohorts, "
    "ClusterQueues, LocalQueues, the manager Configuration), a trace queue going to the "
    "ClusterQueue of the LocalQueue named as it, else to the ClusterQueue of its name.",
)
@click.option(
    "--priority", type=click.Choice(PRIORITY_MODES), default="two-class", show_default=True
)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--checkpoint-interval", default="30m", show_default=True)
@click.option("--termination-delay", default="30s", show_default=True)
@click.option("--cycle", default="10s", show_default=True, help="The admission cycle's period.")
@click.option(
    "--min-runtime",
    default="0",
    show_default=True,
    help="Every ClusterQueue gives its workloads this minimum runtime against every "
    "preemptor (the preemption-toleration annotations; 0: none). The Kueue policies read "
    "it; pod-immediate does not.",
)
@click.option(
    "--disruption-budget",
    default="",
    metavar="TEXT",
    help="A cluster-wide disruption budget on gangpreempt's plans (the gangpreempt and "
    "optimal-victims policies): at most N victims, or N lost GPU-hours, evicted per sliding "
    "window ('20 victims/1h', '50 gpu-hours/30m'); a preemption that would exceed it waits. "
    "Default: none.",
)
@click.option(
    "--disruption-budget-scope",
    type=click.Choice(SCOPES),
    default="cluster",
    show_default=True,
    help="One budget for the cluster, or one per cohort tree.",
)
@click.option(
    "--disruption-budget-bypass",
    type=int,
    default=None,
    metavar="PRIORITY",
    help="A preemptor of priority strictly above it is never held back by the budget.",
)
@click.option(
    "--policy",
    "policies",
    multiple=True,
    type=click.Choice(POLICIES),
    help="A policy to replay (repeat it; default: every one).",
)
@click.option(
    "-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@victim_cost_option
@click.option(
    "--plots",
    "plots_dir",
    metavar="DIR",
    default=DEFAULT_PLOTS,
    show_default=True,
    help="Write the PNG plots into DIR.",
)
@click.option("--no-plots", is_flag=True, help="Write no plots.")
@click.option(
    "--optimum-sample",
    type=click.IntRange(0),
    default=200,
    show_default=True,
    help="gangpreempt's preemption decisions measured against the exact optimum (0: none).",
)
def simulate_command(
    trace_path: str,
    window: str | None,
    origin: str | None,
    nodes: int | None,
    gpus_per_node: int,
    queues: str,
    priority: str,
    seed: int,
    checkpoint_interval: str,
    termination_delay: str,
    cycle: str,
    min_runtime: str,
    disruption_budget: str,
    disruption_budget_scope: str,
    disruption_budget_bypass: int | None,
    policies: tuple[str, ...],
    output: str,
    victim_cost: str,
    plots_dir: str,
    no_plots: bool,
    optimum_sample: int,
) -> None:
    """Replay a GPU-cluster job trace under each preemption policy, in virtual time, and
    compare what each costs: evictions (unnecessary, partial-gang, thrash), lost
    GPU-hours, waits, utilization."""
    try:
        budget = parse_budget(
            disruption_budget,
            disruption_budget_scope,
            "" if disruption_budget_bypass is None else str(disruption_budget_bypass),
            what="--disruption-budget",
        )
        trace = read_trace(trace_path)
        start = origin_of(origin or known_origin(trace_path))
        replay = replay_input(
            trace,
            window,
            start,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            quotas=None,
            priority=priority,
            seed=seed,
            checkpoint_interval_s=parse_duration("--checkpoint-interval", checkpoint_interval),
            termination_delay_s=parse_duration("--termination-delay", termination_delay),
            cycle_s=parse_duration("--cycle", cycle),
            victim_cost=core_victim_cost(victim_cost),
            min_runtime_s=parse_duration("--min-runtime", min_runtime),
            disruption_budget=budget,
            queues_path=None if queues == "auto" else queues,
        )
    except InvalidInput as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)
    config = replay.settings.queue_config
    if config is not None and config.left_out:
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(config.left_out.items()))
        click.echo(
            f"warning: --queues {queues}: left out {kinds}: the replay makes its own", err=True
        )
    chosen = list(dict.fromkeys(policies)) or list(DEFAULT_POLICIES)
    results = run_all(chosen, replay, show_progress=True, optimum_sample=optimum_sample)
    s = replay.settings
    result = SimulationResult(
        trace=trace_path,
        window={
            "start": at(start, replay.window[0]),
            "end": at(start, replay.window[1]),
            "start_s": replay.window[0],
            "end_s": replay.window[1],
            "jobs": len(replay.jobs),
        },
        cluster={
            "nodes": s.nodes,
            "gpus_per_node": s.gpus_per_node,
            "gpus": s.nodes * s.gpus_per_node,
            "sized_from_trace": replay.nodes_from_trace,
            "offered_gpus": replay.offered_gpus,
            "quotas": s.quotas,
            # trace queue -> ClusterQueue (each its own without --queues FILE)
            "queue_map": (
                dict(s.queue_config.queue_map) if s.queue_config else {q: q for q in s.quotas}
            ),
            "fair_sharing": bool(s.queue_config and s.queue_config.fair_sharing),
        },
        synthesized={
            "priority": priority,
            "seed": seed,
            "queues": queues,
            "pods": "ceil(gpus / gpus-per-node) pods of at most gpus-per-node GPUs",
            "checkpoint_interval_s": s.checkpoint_interval_s,
            "termination_delay_s": s.termination_delay_s,
            "cycle_s": s.cycle_s,
            "victim_cost": victim_cost,
            "min_runtime_s": s.min_runtime_s,
            "disruption_budget": _budget_json(s.disruption_budget),
        },
        policies=[r for r, _, _ in results],
        optimum=next((o for _, _, o in results if o is not None), None),
    )
    if plots_dir and not no_plots:
        from gangpreempt.cli.plots import write_plots  # matplotlib: only when asked

        written = write_plots(plots_dir, {r.policy: d for r, d, _ in results})
        for path in written:
            click.echo(f"wrote {path}", err=True)
    if output == "json":
        click.echo(msgspec.json.format(msgspec.json.encode(result), indent=2).decode())
    else:
        print_table(result)


__all__ = ["SimulationResult", "run_policy", "simulate_command"]
