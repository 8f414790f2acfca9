"""Quota-level decision benchmark in Kueue's large-scale shape.

10 cohorts x 100 ClusterQueues (nominal 20 CPU, borrowing limit 100 CPU), 50,000 admitted
workloads in 3 priority classes packed so that every cohort is full and some queues
borrow, and 1,000 pending workloads. Measures:

- one decision: ``evaluate`` of one pending workload as the head of its queue (flavor
  assignment + victim search), for every pending workload; reported for all of them and
  for those that end in a preemption;
- one full admission pass over the 1,000 pending workloads (on a fresh snapshot each run);
- building the snapshot, and peak memory (traced separately: tracing slows Python, so
  no timing runs under it).

Prints a table and writes ``bench/results/quota.json``. Figures are medians and p99s of
the same run; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import random
import resource
import sys
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or imported

from bench.stats import environment, stats_ms, write_result
from gangpreempt.model import (
    Admission,
    ClusterQueue,
    ClusterState,
    Condition,
    FlavorQuotas,
    LocalQueue,
    PodSet,
    PodSetAssignment,
    Preemption,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Workload,
)
from gangpreempt.model.queues import KUEUE_CONFIGURATION, KueueConfiguration
from gangpreempt.planning import admission_pass, decision, evaluate
from gangpreempt.quota import PendingWorkload, Snapshot

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PRIORITIES = (("low", 100), ("mid", 500), ("high", 1000))


def build_state(
    cohorts: int, queues: int, admitted: int, pending: int, seed: int, fair: bool = False
) -> ClusterState:
    rnd = random.Random(seed)
    st = ClusterState()
    if fair:
        # Kueue's fair sharing on (both strategies); a queue in ten weighs 2.
        st.kueue_configurations[KUEUE_CONFIGURATION] = KueueConfiguration(fair_sharing=True)
    st.flavors["default"] = ResourceFlavor(name="default")
    names: list[str] = []
    for c in range(cohorts):
        for q in range(queues):
            name = f"cq-{c}-{q}"
            names.append(name)
            st.cluster_queues[name] = ClusterQueue(
                name=name,
                cohort=f"cohort-{c}",
                resource_groups=(
                    ResourceGroup(
                        covered_resources=("cpu",),
                        flavors=(
                            FlavorQuotas(
                                name="default",
                                resources={
                                    "cpu": ResourceQuota(nominal=20_000, borrowing_limit=100_000)
                                },
                            ),
                        ),
                    ),
                ),
                preemption=Preemption(
                    within_cluster_queue="LowerPriority",
                    reclaim_within_cohort="Any",
                    borrow_within_cohort="LowerPriority",
                    max_priority_threshold=500,
                ),
                fair_weight=2.0 if fair and q % 10 == 0 else 1.0,
            )
            st.local_queues[f"ns-{c}/{name}"] = LocalQueue(f"ns-{c}", name, name)
    # Fill each cohort to its capacity (100 x 20 CPU), unevenly: a third of the queues
    # take twice their share, so they borrow from the rest.
    per_cohort = admitted // cohorts
    capacity = queues * 20_000
    unit = capacity // per_cohort  # workload sizes average one unit: the cohort ends full
    sizes = (unit // 2, unit, unit + unit // 2)
    for c in range(cohorts):
        weights = [2.0 if rnd.random() < 1 / 3 else 0.5 for _ in range(queues)]
        used = 0
        for i in range(per_cohort):
            q = rnd.choices(range(queues), weights)[0]
            size = sizes[i % len(sizes)]
            if used + size > capacity:
                break
            _cls, prio = PRIORITIES[rnd.randrange(3)]
            name = f"a-{c}-{i}"
            cq = f"cq-{c}-{q}"
            when = T0 + timedelta(seconds=i)
            st.workloads[f"ns-{c}/{name}"] = Workload(
                namespace=f"ns-{c}",
                name=name,
                uid=f"u-{c}-{i}",
                queue_name=cq,
                priority=prio,
                creation_timestamp=when,
                pod_sets=(PodSet(name="main", count=1, requests={"cpu": size}),),
                admission=Admission(
                    cluster_queue=cq,
                    pod_set_assignments=(
                        PodSetAssignment(
                            name="main",
                            flavors={"cpu": "default"},
                            resource_usage={"cpu": size},
                            count=1,
                        ),
                    ),
                ),
                conditions=(Condition("QuotaReserved", "True", "QuotaReserved", when),),
            )
            used += size
    for j in range(pending):
        cq = names[rnd.randrange(len(names))]
        c = cq.split("-")[1]
        _cls, prio = PRIORITIES[rnd.randrange(3)]
        name = f"p-{j}"
        st.workloads[f"ns-{c}/{name}"] = Workload(
            namespace=f"ns-{c}",
            name=name,
            uid=f"p-{j}",
            queue_name=cq,
            priority=prio,
            creation_timestamp=T0 + timedelta(days=1, seconds=j),
            pod_sets=(PodSet(name="main", count=rnd.choice((1, 2, 4, 8)), requests={"cpu": 1000}),),
        )
    return st


def run(
    cohorts: int,
    queues: int,
    admitted: int,
    pending: int,
    passes: int,
    seed: int,
    fair: bool = False,
) -> dict[str, object]:
    st = build_state(cohorts, queues, admitted, pending, seed, fair)
    now = T0 + timedelta(days=2)

    t = time.perf_counter()
    snap = Snapshot.build(st, now)
    build_s = time.perf_counter() - t

    all_times: list[float] = []
    preempt_times: list[float] = []
    outcomes: dict[str, int] = {}
    pendings = [PendingWorkload.of(st, w, now) for w in st.workloads.values() if w.is_pending]
    for p in pendings:
        t = time.perf_counter()
        ev = evaluate(snap, p)
        elapsed = time.perf_counter() - t
        d = decision(ev)
        all_times.append(elapsed)
        outcomes[d.outcome] = outcomes.get(d.outcome, 0) + 1
        if d.outcome == "Preempt":
            preempt_times.append(elapsed)

    pass_times: list[float] = []
    pass_outcomes: dict[str, int] = {}
    for _ in range(passes):
        fresh = Snapshot.build(st, now)
        t = time.perf_counter()
        decisions = admission_pass(fresh)
        pass_times.append(time.perf_counter() - t)
        pass_outcomes = {}
        for d in decisions:
            pass_outcomes[d.outcome] = pass_outcomes.get(d.outcome, 0) + 1

    # Memory in its own phase: tracing slows Python down several times, so no timing
    # above runs under it. Peak = the snapshot plus one full admission pass on it.
    del snap, fresh
    tracemalloc.start()
    traced = Snapshot.build(st, now)
    admission_pass(traced)
    _current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    return {
        "shape": {
            "cohorts": cohorts,
            "cluster_queues": cohorts * queues,
            "admitted": sum(1 for w in st.workloads.values() if w.holds_quota),
            "pending": len(pendings),
            "nominal_cpu": 20,
            "borrowing_limit_cpu": 100,
            "priority_classes": [p for _n, p in PRIORITIES],
            "fair_sharing": fair,
        },
        "snapshot_build_s": build_s,
        "decision_all": stats_ms(all_times),
        "decision_preempt": stats_ms(preempt_times),
        "decision_outcomes": outcomes,
        "admission_pass": stats_ms(pass_times),
        "admission_pass_outcomes": pass_outcomes,
        "peak_traced_mib": peak / 2**20,
        "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        **environment(),
    }


def main(argv: list[str] | None = None) -> dict[str, object]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cohorts", type=int, default=10)
    ap.add_argument("--queues", type=int, default=100, help="ClusterQueues per cohort")
    ap.add_argument("--admitted", type=int, default=50_000)
    ap.add_argument("--pending", type=int, default=1_000)
    ap.add_argument("--passes", type=int, default=5, help="admission passes to time")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--fair-sharing",
        action="store_true",
        help="Kueue's fair sharing on (writes quota-fair-sharing.json unless --out)",
    )
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    name = "quota-fair-sharing.json" if args.fair_sharing else "quota.json"
    out = args.out or str(Path(__file__).parent / "results" / name)
    result = run(
        args.cohorts,
        args.queues,
        args.admitted,
        args.pending,
        args.passes,
        args.seed,
        args.fair_sharing,
    )

    shape = result["shape"]
    assert isinstance(shape, dict)
    print(
        f"quota benchmark: {shape['cohorts']} cohorts x "
        f"{shape['cluster_queues'] // shape['cohorts']} "
        f"ClusterQueues, {shape['admitted']} admitted, {shape['pending']} pending"
        + (", fair sharing" if shape["fair_sharing"] else "")
    )
    print(f"{'measure':<34}{'n':>6}{'p50 ms':>12}{'p99 ms':>10}{'max ms':>10}")
    for label, key in (
        ("one decision (every pending)", "decision_all"),
        ("one decision (ending in Preempt)", "decision_preempt"),
        ("one admission pass", "admission_pass"),
    ):
        s = result[key]
        assert isinstance(s, dict)
        print(f"{label:<34}{s['n']:>6}{s['p50_ms']:>12.3f}{s['p99_ms']:>10.3f}{s['max_ms']:>10.3f}")
    print(f"snapshot build: {result['snapshot_build_s']:.2f} s")
    print(
        f"decision outcomes: {result['decision_outcomes']}; "
        f"pass outcomes: {result['admission_pass_outcomes']}"
    )
    print(
        f"peak traced memory: {result['peak_traced_mib']:.0f} MiB; "
        f"max RSS: {result['max_rss_mib']:.0f} MiB"
    )
    write_result(out, result)
    return result


if __name__ == "__main__":
    main()
