"""Trace replay benchmark: the Philly trace's heavy month (2017-10-01 .. 2017-11-01, about
47,000 jobs) on 640 GPUs (80 nodes of 8), every policy of ``gangpreempt simulate``, each
in its own process (two at a time on two cores, as the command runs them).

Per policy: the replay's wall-clock time, its peak memory (the process's maximum RSS),
decisions per second, and the measures the policies are compared on (evictions,
unnecessary, partial-gang, thrash, lost GPU-hours, utilization, waits); for gangpreempt,
its victims against the exact optimum on a sample of its decisions.

Prints a table and writes ``bench/results/replay.json``. Nothing here is asserted; the
budget the project holds itself to is under 10 minutes per policy on 2 cores.

    python bench/replay.py [--trace PATH] [--window START:END] [--nodes 80]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import msgspec

from gangpreempt.cli.simulate import DEFAULT_POLICIES, run_all
from gangpreempt.simulation.inputs import known_origin, parse_duration, replay_input
from gangpreempt.simulation.trace import origin_of, read_trace

HERE = Path(__file__).parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--trace", default=str(HERE.parent.parent / "shared" / "traces" / "philly_2017_jobs.csv")
    )
    ap.add_argument("--window", default="2017-10-01:2017-11-01")
    ap.add_argument("--nodes", type=int, default=80)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--policy", action="append", help="default: every policy of simulate")
    ap.add_argument("--optimum-sample", type=int, default=200)
    ap.add_argument(
        "--no-victim-cost",
        action="store_true",
        help="skip the extra run of gangpreempt with --victim-cost lost-gpu-hours",
    )
    ap.add_argument("--out", default=str(HERE / "results" / "replay.json"))
    args = ap.parse_args()
    if not os.path.exists(args.trace):
        sys.exit(f"{args.trace}: no such trace (give --trace)")
    read_started = time.perf_counter()
    trace = read_trace(args.trace)
    replay = replay_input(
        trace,
        args.window,
        origin_of(known_origin(args.trace)),
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        quotas=None,
        priority="two-class",
        seed=1,
        checkpoint_interval_s=parse_duration("--checkpoint-interval", "30m"),
        termination_delay_s=parse_duration("--termination-delay", "30s"),
        cycle_s=parse_duration("--cycle", "10s"),
    )
    prepared_s = time.perf_counter() - read_started
    policies = args.policy or list(DEFAULT_POLICIES)
    started = time.perf_counter()
    results = run_all(policies, replay, show_progress=True, optimum_sample=args.optimum_sample)
    wall = time.perf_counter() - started
    labels = list(policies)
    if not args.no_victim_cost and "gangpreempt" in policies:
        costed = msgspec.structs.replace(
            replay, settings=msgspec.structs.replace(replay.settings, victim_cost="lost-gpu-hours")
        )
        results += run_all(["gangpreempt"], costed, True, optimum_sample=args.optimum_sample)
        labels.append("gangpreempt --victim-cost lost-gpu-hours")
    print(
        f"{len(replay.jobs)} jobs, {args.nodes} nodes x {args.gpus_per_node} GPUs, window "
        f"{args.window}; trace read and prepared in {prepared_s:.1f} s; all policies "
        f"{wall:.0f} s wall-clock on {os.cpu_count()} cores"
    )
    header = (
        f"{'policy':>18} {'time s':>8} {'peak MB':>8} {'dec/s':>8} {'evict':>6} "
        f"{'unnec':>6} {'partial':>7} {'thrash':>6} {'lost GPU-h':>10} {'util':>6}"
    )
    print(header)
    rows = []
    for label, (report, _series, optimality) in zip(labels, results, strict=True):
        o = report.outcomes
        name = "gangpreempt+cost" if "victim-cost" in label else label
        print(
            f"{name:>18} {report.seconds:>8.1f} {report.peak_memory_mb:>8.0f} "
            f"{report.decisions_per_s:>8.0f} {o.evictions:>6} {o.unnecessary_evictions:>6} "
            f"{o.partial_gang_evictions:>7} {o.thrash:>6} {o.lost_gpu_hours:>10.1f} "
            f"{report.utilization_mean * 100:>5.1f}%"
        )
        row = {"label": label, **msgspec.to_builtins(report)}
        if optimality is not None:
            row["optimum"] = msgspec.to_builtins(optimality)
            for f in optimality.objectives:
                print(
                    f"{'':>18} optimum ({f.objective}): optimal in {f.optimal} of {f.measured} "
                    f"sampled; ours/optimum p50 {f.ratio_p50:g} p95 {f.ratio_p95:g} "
                    f"max {f.ratio_max:g}"
                )
        rows.append(row)
    out = {
        "trace": os.path.basename(args.trace),
        "window": args.window,
        "jobs": len(replay.jobs),
        "nodes": args.nodes,
        "gpus_per_node": args.gpus_per_node,
        "wall_s": round(wall, 1),
        "prepare_s": round(prepared_s, 1),
        "machine": {"cores": os.cpu_count(), "python": platform.python_version()},
        "policies": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
