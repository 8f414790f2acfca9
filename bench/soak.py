"""Soak: many gangs through the saga, the services' memory followed over time.

The four services run as processes on one nats-server (``sync_interval: always``),
ingest reading a GPU cluster (``bench/density.py``'s, 10 running pods per node) from a
manifests folder, the actuator with the ``log`` sink (nothing terminates). Gangs of
``--gang-pods`` pods x 8 GPUs arrive one after another on STATE, as ingest would publish
them; each is planned, confirmed and actuated, then leaves, and its plan is closed, its
record deleted ``--retention`` seconds later and its delete marker purged as long again
later, as in production (an hour by default). Every ``--every`` gangs the resident
memory (VmRSS) of each service is read.

Printed: RSS per service at each sample, and the growth over the second half of the run
in MiB per 1,000 gangs (flat after warm-up is what bounded memory looks like); written
to ``bench/results/soak.json``. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or imported

from bench.density import as_list, dense_state, objects
from bench.processes import service_env, start_services, stop_services
from bench.scale import Saga, until, upsert
from bench.stats import environment, write_result
from bench.victims import NODE_GPUS, requests
from gangpreempt import events
from gangpreempt.bus import NatsServer, Publisher, Topology, connected, provision
from gangpreempt.bus.status import quota_caught_up
from gangpreempt.model import kinds
from gangpreempt.model.pods import Pod, PodGroup

PRIORITY = 1000


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def gang(name: str, size: int) -> list[Any]:
    pods = [
        Pod(
            "soak",
            f"{name}-{i}",
            requests(NODE_GPUS),
            uid=f"uid-{name}-{i}",
            priority=PRIORITY,
            group=f"soak/{name}",
        )
        for i in range(size)
    ]
    return [PodGroup("soak", name, size), *pods]


def slope(samples: list[dict[str, Any]], service: str) -> float:
    """MiB per 1,000 gangs over the second half of the samples (least squares)."""
    half = samples[len(samples) // 2 :]
    if len(half) < 2:
        return float("nan")
    xs = [s["gangs"] / 1000 for s in half]
    ys = [s["rss_mib"][service] for s in half]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0


async def soak(
    url: str, topology: Topology, pids: dict[str, int], n: int, every: int, size: int
) -> dict[str, Any]:
    async with connected(url, "bench-soak") as nc:
        js = nc.jetstream()
        await provision(js, topology)
        saga = Saga()
        sub = await saga.follow(nc, topology)
        await until(lambda: quota_caught_up(nc, topology), 600, "quota caught up")
        pub = Publisher(nc, topology, "bench")
        samples: list[dict[str, Any]] = []
        outcomes: dict[str, int] = {}
        started = time.monotonic()

        def sample(done: int) -> None:
            samples.append(
                {
                    "gangs": done,
                    "seconds": round(time.monotonic() - started, 1),
                    "rss_mib": {s: round(rss_mib(pid), 1) for s, pid in pids.items()},
                }
            )
            row = "  ".join(f"{s} {v:7.1f}" for s, v in samples[-1]["rss_mib"].items())
            print(f"{done:>6} gangs {samples[-1]['seconds']:>7.1f} s  RSS MiB: {row}", flush=True)

        sample(0)
        for k in range(n):
            name = f"g{k}"
            ref = f"PodGroup/soak/{name}"
            objs = gang(name, size)
            for obj in objs:
                await pub.send(upsert(obj, "1"))
            ended = await saga.wait(ref, 60)
            outcome = next(
                (
                    kind
                    for kind in ("PlanActuated", "Admitted", "PlanDropped", "PreemptionInfeasible")
                    if (ref, kind) in saga.at
                ),
                "timeout" if not ended else "other",
            )
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            for obj in objs:
                kind, key = kinds.kind_of(obj), kinds.key_of(obj)
                await pub.send(
                    events.ObjectDeleted(
                        id=f"{kind}/{key}@gone", occurred_at=datetime.now(UTC), kind=kind, key=key
                    )
                )
            with contextlib.suppress(TimeoutError):
                await until(lambda: quota_caught_up(nc, topology), 30, "quota idle after a gang")
            # the bench's own memory of this gang goes too
            for kind in ("PreemptionRequested", "PlanProposed", "PlanConfirmed", "PlanActuated"):
                saga.at.pop((ref, kind), None)
            saga.ended.pop(ref, None)
            if (k + 1) % every == 0:
                sample(k + 1)
        await sub.unsubscribe()
    return {"samples": samples, "outcomes": outcomes}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gangs", type=int, default=10_000)
    ap.add_argument("--every", type=int, default=500, help="gangs between memory samples")
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--gang-pods", type=int, default=2)
    ap.add_argument("--retention", type=float, default=30.0, help="seconds an ended record stays")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "soak.json"))
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="gp-soak-"))
    scenario = work / "scenario"
    scenario.mkdir()
    state, _refs = dense_state(args.nodes, 10, gangs8=0, gangs64=0)
    with open(scenario / "cluster.json", "w", encoding="utf-8") as fh:
        json.dump(as_list(objects(state)), fh)
    server = NatsServer(str(work / "nats")).start()
    topology = Topology("soak")
    env = service_env(
        server.url,
        topology.prefix,
        scenario,
        sim="false",
        sink="log",
        record_retention=str(args.retention),
    )
    procs = start_services(env, work)
    try:
        pids = {s: p.pid for s, p in procs.items()}
        result = asyncio.run(
            soak(server.url, topology, pids, args.gangs, args.every, args.gang_pods)
        )
    finally:
        stop_services(procs)
        server.stop()
    samples = result["samples"]
    growth = {s: round(slope(samples, s), 2) for s in procs}
    print(
        f"\n{args.gangs} gangs of {args.gang_pods} x {NODE_GPUS} GPUs on {args.nodes} nodes "
        f"in {samples[-1]['seconds']:.0f} s; outcomes {result['outcomes']}"
    )
    print(
        "growth over the second half, MiB per 1,000 gangs: "
        + ", ".join(f"{s} {g:+.2f}" for s, g in growth.items())
    )
    out = {
        "gangs": args.gangs,
        "gang": f"{args.gang_pods} pods x {NODE_GPUS} GPUs",
        "nodes": args.nodes,
        "record_retention_s": args.retention,
        "growth_mib_per_1000_gangs_second_half": growth,
        "logs": str(work),
        **result,
        **environment(),
    }
    write_result(args.out, out)
    return out


if __name__ == "__main__":
    main()
