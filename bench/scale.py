"""Scale benchmark: the saga as processes on a dense GPU cluster.

For each size (500 / 2,000 / 5,000 nodes by default, 10 running pods per node: the
cluster of ``bench/victims.py``), the four services run as processes on one nats-server
(``sync_interval: always``), ingest reading the cluster from a manifests folder (one
JSON List, as ``kubectl get -o json`` writes it), the actuator with the ``log`` sink
(evictions are recorded; nothing terminates; each gang leaves once its saga ended, so
the next one arrives on the same cluster). Measured:

- the initial state: from the services' start until ingest's ``StateComplete`` is on
  STATE, and until quota has decided on all of STATE (it answers status requests);
- gangs of 8 pods x 8 GPUs, then of 64 pods x 8 GPUs (``--gang-pods``), arriving one at
  a time (the benchmark publishes the PodGroup and its pods on STATE, as ingest would),
  each after the previous one's saga ended: arrival -> ``PreemptionRequested`` ->
  ``PlanProposed`` -> ``PlanConfirmed`` -> ``PlanActuated``, and the first hop split in
  two at the moment quota applied the arrival (the request's ``seen_at``): arrival ->
  seen -> requested; without churn and then under 50 pod changes per second (running
  CPU pods finishing and starting again);
- CPU seconds and peak RSS of each service.

The services run with the project's default settings (the cycle delay among them), as a
user runs them.

Prints a table and writes ``bench/results/scale.json``. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import random
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or imported

from bench.density import dense_scenario
from bench.processes import cpu_seconds, service_env, start_services, stop_services
from bench.stats import environment, stats_ms, write_result
from bench.victims import NODE_GPUS, requests
from gangpreempt import events
from gangpreempt.bus import NatsServer, Publisher, Topology, connected, follow, provision
from gangpreempt.bus.status import quota_caught_up
from gangpreempt.model import kinds
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import Pod, PodGroup

HOPS = (
    "arrival -> requested",
    "requested -> proposed",
    "proposed -> confirmed",
    "confirmed -> actuated",
)
STEPS = ("PreemptionRequested", "PlanProposed", "PlanConfirmed", "PlanActuated")
GANG_PODS = (8, 64)
SPLIT = ("arrival -> seen", "seen -> requested")  # the first hop, at quota's seen_at
PRIORITY = 1000


class Saga:
    """What the decisions stream says about each preemptor, with timestamps."""

    def __init__(self) -> None:
        self.at: dict[tuple[str, str], datetime] = {}
        self.seen_at: dict[str, datetime | None] = {}  # preemptor -> its request's seen_at
        self.ended: dict[str, asyncio.Event] = {}

    async def follow(self, nc: Client, topology: Topology) -> Any:
        """Take in every decision published from now on; returns the subscription."""

        async def on_msg(msg: Msg) -> None:
            with contextlib.suppress(Exception):
                for ev in events.decode_all(msg.data):
                    self.on(ev)

        return await follow(
            nc, f"{topology.prefix}.>", topology.decisions_stream, on_msg, DeliverPolicy.NEW
        )

    def on(self, ev: events.Event) -> None:
        who = getattr(ev, "preemptor", "") or getattr(ev, "workload", "")
        kind = events.event_type(ev)
        self.at.setdefault((who, kind), ev.occurred_at)
        if isinstance(ev, events.PreemptionRequested):
            self.seen_at.setdefault(who, ev.seen_at)
        if kind in ("PlanActuated", "PlanDropped", "PreemptionInfeasible", "Admitted"):
            self.ended.setdefault(who, asyncio.Event()).set()

    async def wait(self, who: str, timeout: float) -> bool:
        event = self.ended.setdefault(who, asyncio.Event())
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return False
        return True


def upsert(obj: Any, version: str) -> events.ObjectUpserted:
    kind, key = kinds.kind_of(obj), kinds.key_of(obj)
    return events.ObjectUpserted(
        id=f"{kind}/{key}@{version}",
        occurred_at=datetime.now(UTC),
        kind=kind,
        key=key,
        uid=getattr(obj, "uid", ""),
        resource_version=version,
        body=kinds.encode_object(obj),
    )


def gang(name: str, size: int) -> list[Any]:
    group = PodGroup("pre", name, size)
    pods = [
        Pod(
            "pre",
            f"{name}-{i}",
            requests(NODE_GPUS),
            uid=f"uid-{name}-{i}",
            priority=PRIORITY,
            group=f"pre/{name}",
        )
        for i in range(size)
    ]
    return [group, *pods]


async def churn(pub: Publisher, state: ClusterState, rate: float, stop: asyncio.Event) -> int:
    """Running CPU pods finish (deleted) and start again (a new uid), ``rate`` changes
    per second in all; returns how many were made."""
    rnd = random.Random(11)
    keys = sorted(
        k for k, p in state.pods.items() if p.running and not p.requests.get("nvidia.com/gpu")
    )
    gone: list[str] = []
    made = 0
    start = time.monotonic()
    while not stop.is_set():
        if gone and (len(gone) > 20 or rnd.random() < 0.5):
            key = gone.pop(0)
            pod = state.pods[key]
            made += 1
            fresh = Pod(
                **{
                    **{f: getattr(pod, f) for f in pod.__struct_fields__},
                    "uid": f"{pod.uid}-{made}",
                }
            )
            await pub.publish(upsert(fresh, f"c{made}"))
        else:
            key = rnd.choice(keys)
            if key in gone:
                continue
            gone.append(key)
            made += 1
            await pub.publish(
                events.ObjectDeleted(
                    id=f"Pod/{key}@c{made}-deleted",
                    occurred_at=datetime.now(UTC),
                    kind="Pod",
                    key=key,
                )
            )
        delay = start + made / rate - time.monotonic()
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
    return made


def proc_stats(pid: int) -> dict[str, float]:
    """CPU seconds and peak RSS (MiB) of a live process."""
    peak = 0.0
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    return {"cpu_s": cpu_seconds(pid), "peak_rss_mib": peak}


async def until(check: Any, timeout: float, what: str) -> float:
    deadline = time.monotonic() + timeout
    while True:
        if await check():
            return time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout:.0f} s")
        await asyncio.sleep(0.05)


async def gangs(
    nc: Client,
    topology: Topology,
    pub: Publisher,
    saga: Saga,
    label: str,
    n: int,
    size: int,
    timeout: float,
) -> dict[str, Any]:
    hops: dict[str, list[float]] = {h: [] for h in (*HOPS, *SPLIT)}
    total: list[float] = []
    outcomes: dict[str, int] = {}
    for k in range(n):
        name = f"{label}-{k}"
        ref = f"PodGroup/pre/{name}"
        objs = gang(name, size)
        for obj in objs:
            await pub.publish(upsert(obj, "1"))
        arrived = datetime.now(UTC)
        ended = await saga.wait(ref, timeout)
        if ended and (ref, "PlanActuated") in saga.at:
            # The actuator follows the plan record, not quota's event: PlanConfirmed may be
            # stored after PlanActuated. Until every step is seen (5 s at most).
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and not all((ref, k) in saga.at for k in STEPS):
                await asyncio.sleep(0.01)
        got = {kind: saga.at.get((ref, kind)) for kind in STEPS}
        outcome = "PlanActuated" if got["PlanActuated"] else ("timeout" if not ended else "other")
        if ended and not got["PlanActuated"]:
            outcome = next(
                (
                    k
                    for k in ("Admitted", "PlanDropped", "PreemptionInfeasible")
                    if (ref, k) in saga.at
                ),
                "other",
            )
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if all(got.values()):
            times = [arrived, *got.values()]
            for hop, (a, b) in zip(HOPS, itertools.pairwise(times), strict=True):
                hops[hop].append(max(0.0, (b - a).total_seconds()))  # type: ignore[operator]
            total.append((got["PlanActuated"] - arrived).total_seconds())  # type: ignore[operator]
            seen = saga.seen_at.get(ref)
            if seen is not None:
                requested = got["PreemptionRequested"]
                hops[SPLIT[0]].append(max(0.0, (seen - arrived).total_seconds()))
                hops[SPLIT[1]].append(max(0.0, (requested - seen).total_seconds()))  # type: ignore[operator]
        # The gang is done and leaves (its victims, never evicted by the log sink, stay
        # running): the next gang arrives on the same cluster.
        for obj in objs:
            kind, key = kinds.kind_of(obj), kinds.key_of(obj)
            await pub.publish(
                events.ObjectDeleted(
                    id=f"{kind}/{key}@gone", occurred_at=datetime.now(UTC), kind=kind, key=key
                )
            )
        with contextlib.suppress(TimeoutError):
            await until(lambda: quota_caught_up(nc, topology), 30, "quota idle after a gang")
    return {
        "gangs": n,
        "outcomes": outcomes,
        "arrival_to_actuated": stats_ms(total),
        "hops": {h: stats_ms(v) for h, v in hops.items()},
    }


async def measure(
    url: str,
    topology: Topology,
    state: ClusterState,
    procs: dict[str, subprocess.Popen[bytes]],
    started: float,
    n: int,
    rate: float,
    timeout: float,
    sizes: tuple[int, ...],
) -> dict[str, Any]:
    async with connected(url, "bench-scale") as nc:
        js = nc.jetstream()
        await provision(js, topology)
        saga = Saga()
        sub = await saga.follow(nc, topology)

        async def complete() -> bool:
            with contextlib.suppress(Exception):
                await js.get_last_msg(topology.state_stream, topology.state_complete_subject)
                return True
            return False

        t_complete = await until(complete, 600, "StateComplete")
        t_idle = await until(lambda: quota_caught_up(nc, topology), 600, "quota caught up")
        initial = {"state_complete_s": t_complete - started, "quota_caught_up_s": t_idle - started}
        cpu_start = {s: proc_stats(p.pid) for s, p in procs.items()}
        pub = Publisher(nc, topology, "bench")
        by_gang: dict[str, dict[str, Any]] = {}
        for size in sizes:
            quiet = await gangs(nc, topology, pub, saga, f"quiet{size}", n, size, timeout)
            stop = asyncio.Event()
            churner = asyncio.ensure_future(churn(pub, state, rate, stop))
            t0 = time.monotonic()
            churned = await gangs(nc, topology, pub, saga, f"churn{size}", n, size, timeout)
            stop.set()
            changes = await churner
            churned["changes_per_s"] = changes / (time.monotonic() - t0)
            by_gang[str(size)] = {"no_churn": quiet, "churn": churned}
        end = {s: proc_stats(p.pid) for s, p in procs.items()}
        await sub.unsubscribe()
    per_service = {
        s: {
            "cpu_s_start": cpu_start[s]["cpu_s"],
            "cpu_s_gangs": end[s]["cpu_s"] - cpu_start[s]["cpu_s"],
            "peak_rss_mib": end[s]["peak_rss_mib"],
        }
        for s in procs
    }
    first = by_gang[str(sizes[0])]  # the first gang size's phases also at the top (as before)
    return {"initial": initial, **first, "by_gang": by_gang, "services": per_service}


def run_size(
    nodes: int,
    pods_per_node: int,
    n: int,
    rate: float,
    timeout: float,
    gang_sizes: tuple[int, ...] = GANG_PODS,
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="gp-scale-"))
    scenario = work / "scenario"
    state, items = dense_scenario(work, nodes, pods_per_node)
    server = NatsServer(str(work / "nats")).start()
    topology = Topology("scale")
    env = service_env(server.url, topology.prefix, scenario, sim="false", sink="log")
    started = time.monotonic()
    procs = start_services(env, work)
    try:
        result = asyncio.run(
            measure(server.url, topology, state, procs, started, n, rate, timeout, gang_sizes)
        )
    finally:
        stop_services(procs)
        server.stop()
    running = sum(1 for p in state.pods.values() if p.running)
    return {
        "nodes": nodes,
        "running_pods": running,
        "objects": len(items),
        "logs": str(work),
        **result,
    }


def report(result: dict[str, Any]) -> None:
    print(
        "scale benchmark: the saga as processes, gangs of "
        + " and ".join(result["gangs"])
        + " arriving one at a time"
    )
    for size in result["sizes"]:
        init = size["initial"]
        print(
            f"\n{size['nodes']} nodes, {size['running_pods']} running pods "
            f"({size['objects']} objects): starting state complete at "
            f"{init['state_complete_s']:.1f} s, quota caught up at {init['quota_caught_up_s']:.1f} s"
        )
        for gang_pods, phases in size["by_gang"].items():
            for phase, p in phases.items():
                report_phase(f"gang {gang_pods}, {phase}", p)
        print(
            "  "
            + ", ".join(
                f"{s}: {v['peak_rss_mib']:.0f} MiB peak, {v['cpu_s_start']:.1f} s CPU to start, "
                f"{v['cpu_s_gangs']:.1f} s for the gangs"
                for s, v in size["services"].items()
            )
        )


def report_phase(label: str, p: dict[str, Any]) -> None:
    a = p["arrival_to_actuated"]
    extra = f", {p['changes_per_s']:.0f} pod changes/s" if "changes_per_s" in p else ""
    print(
        f"  {label:<18} arrival -> actuated p50 {a['p50_ms']:.0f} ms, p99 {a['p99_ms']:.0f} ms, "
        f"max {a['max_ms']:.0f} ms over {a['n']} ({p['outcomes']}){extra}"
    )
    print(
        "    "
        + ", ".join(
            f"{h} p50 {s['p50_ms']:.0f} / p99 {s['p99_ms']:.0f} ms"
            for h, s in p["hops"].items()
            if s["n"]
        )
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="500,2000,5000", help="cluster sizes, e.g. 500,5000")
    ap.add_argument("--pods-per-node", type=int, default=10)
    ap.add_argument("--gangs", type=int, default=20, help="gangs per phase and size")
    ap.add_argument("--churn", type=float, default=50.0, help="pod changes per second")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per gang at most")
    ap.add_argument(
        "--gang-pods", default=",".join(map(str, GANG_PODS)), help="gang sizes (pods of 8 GPUs)"
    )
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "scale.json"))
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.nodes.split(",") if x]
    gang_sizes = tuple(int(x) for x in args.gang_pods.split(",") if x)
    result = {
        "pods_per_node": args.pods_per_node,
        "gang": f"{gang_sizes[0]} pods x {NODE_GPUS} GPUs",
        "gangs": [f"{g} pods x {NODE_GPUS} GPUs" for g in gang_sizes],
        "churn_rate": args.churn,
        "sizes": [
            run_size(n, args.pods_per_node, args.gangs, args.churn, args.timeout, gang_sizes)
            for n in sizes
        ],
        **environment(),
    }
    report(result)
    write_result(args.out, result)
    return result


if __name__ == "__main__":
    main()
