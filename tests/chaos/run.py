"""``make chaos``: many chaos runs per fault class, each from a printed seed, every
invariant checked; figures printed and written to ``bench/results/chaos.json``.

    python -m tests.chaos.run [--fault nats|kill|pause|actuators|messages|takeover|quota ...]
                              [--runs 20] [--seed 1] [--out FILE]

A failed run is reported with its seed: ``--fault F --runs 1 --seed S`` replays its
fault plan (the moments and kinds of faults; the services' own timing still varies).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tests.chaos.harness import BOUND_S, FAULTS, RunResult, chaos_run, describe

ROOT = Path(__file__).resolve().parents[2]


def summary(results: list[RunResult]) -> dict[str, object]:
    out: dict[str, object] = {"bound_s": BOUND_S, "classes": {}}
    classes: dict[str, object] = {}
    for fault in FAULTS:
        rs = [r for r in results if r.fault == fault]
        if not rs:
            continue
        settles = [r.settle_s for r in rs if r.settle_s is not None]
        classes[fault] = {
            "runs": len(rs),
            "failed": sum(not r.ok for r in rs),
            "violations": sum(len(r.violations) for r in rs),
            "faults_injected": sum(
                len(
                    [
                        i
                        for i in r.injected
                        if "restarted" not in i
                        and "SIGCONT" not in i
                        and " to kill itself at " not in i  # a plan; its kills are noted
                    ]
                )
                for r in rs
            ),
            "restarts": sum(r.restarts for r in rs),
            "settle_p50_s": round(statistics.median(settles), 2) if settles else None,
            "settle_max_s": round(max(settles), 2) if settles else None,
            "failed_seeds": [r.seed for r in rs if not r.ok],
        }
        nexts = [f.next_decision_s for r in rs for f in r.failovers if f.next_decision_s]
        if nexts:
            entry = classes[fault]
            assert isinstance(entry, dict)
            entry["failovers"] = sum(len(r.failovers) for r in rs)
            entry["failover_next_decision_p50_s"] = round(statistics.median(nexts), 2)
            entry["failover_next_decision_max_s"] = round(max(nexts), 2)
    out["classes"] = classes
    return out


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fault", action="append", choices=FAULTS)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "chaos.json"))
    args = ap.parse_args()
    results: list[RunResult] = []
    started = time.monotonic()
    for fault in args.fault or FAULTS:
        for i in range(args.runs):
            seed = args.seed + i
            tmp = tempfile.mkdtemp(prefix=f"chaos-{fault}-{seed}-")
            result = await chaos_run(fault, seed, Path(tmp))
            results.append(result)
            print(describe(result), flush=True)
            if result.ok:
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                print(f"    kept for a look: {tmp} (logs/, sim-journal.jsonl, nats/)", flush=True)
    figures = summary(results)
    print(f"\n{len(results)} runs in {time.monotonic() - started:.0f}s; bound {BOUND_S}s")
    print(f"{'fault':<10} {'runs':>4} {'failed':>6} {'faults':>6} {'settle p50':>10} {'max':>6}")
    classes = figures["classes"]
    assert isinstance(classes, dict)
    for fault, c in classes.items():
        print(
            f"{fault:<10} {c['runs']:>4} {c['failed']:>6} {c['faults_injected']:>6} "
            f"{c['settle_p50_s']!s:>10} {c['settle_max_s']!s:>6}"
        )
    Path(args.out).write_text(json.dumps(figures, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 1 if any(not r.ok for r in results) else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
