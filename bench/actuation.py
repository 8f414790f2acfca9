"""Actuation of a gang through the kubernetes sink: how long the actuator takes to evict
every pod of one victim (a PodGroup of N pods, the Eviction API) against the in-repo API
server over HTTP, the server answering each write after a fixed delay (an API server's
round trip), for several ``GANGPREEMPT_EVICTION_CONCURRENCY`` values, interleaved.

Prints a table and writes ``bench/results/actuation.json``. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or imported

from bench.stats import environment, write_result
from gangpreempt.config import Settings
from services import simwire
from services.actuator.kubernetes import KubeSink
from services.kube.access import ACTUATOR_ANY
from services.kube.client import KubeApi
from tests.kube.apiserver import ApiServer
from tests.kube.objects import node, pod, pod_group
from tests.kube.sinking import Replica

GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


async def one(pods: int, concurrency: int, delay: float, workdir: Path) -> float:
    """Seconds to evict a gang of ``pods`` pods with ``concurrency`` writes in flight."""
    server = ApiServer()
    server.pod_termination = 0.0
    await server.start()
    try:
        server.put(node("n1", gpus=8 * pods))
        for i in range(pods):
            server.put(pod(f"g-{i}", "n1", **{GROUP_LABEL: "g"}))
        server.put(pod_group("g", pods))
        replica = Replica(server)
        replica.refresh()
        refs = tuple(f"Pod/team-a/g-{i}" for i in range(pods))
        uids = tuple(
            server.get("", "pods", "team-a", f"g-{i}")["metadata"]["uid"] for i in range(pods)
        )

        server.slow.append(("POST", "/eviction", delay))  # an API server's round trip
        config = server.kubeconfig(str(workdir / f"kubeconfig-{concurrency}"))
        settings = Settings(kubeconfig=config)
        async with KubeApi.connect(settings, "actuator", ACTUATOR_ANY) as api:
            sink = await KubeSink.create(
                api,
                replica,
                "eviction",
                concurrency=concurrency,  # type: ignore[arg-type]
            )
            request = simwire.EvictRequest(
                ref="PodGroup/team-a/g",
                uid="",
                plan_id="bench",
                preemptor="PodGroup/team-a/big",
                reason="PreemptionByScheduler",
                fencing_token=1,
                pods=refs,
                mode="eviction",
                pod_uids=uids,
            )
            started = time.perf_counter()
            reply = await sink.evict(request)
            took = time.perf_counter() - started
        assert reply.ok, reply.detail
        return took
    finally:
        await server.stop()


async def run(pods: int, levels: list[int], delay: float, rounds: int) -> dict[str, Any]:
    out: dict[int, list[float]] = {c: [] for c in levels}
    with tempfile.TemporaryDirectory(prefix="gp-actuation-") as tmp:
        for _ in range(rounds):  # interleaved: the machine's noise falls on every level
            for c in levels:
                out[c].append(await one(pods, c, delay, Path(tmp)))
    return {
        str(c): {"median_ms": statistics.median(v) * 1e3, "runs_ms": [x * 1e3 for x in v]}
        for c, v in out.items()
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=64)
    ap.add_argument("--levels", default="1,4,16", help="concurrencies to compare")
    ap.add_argument("--delay", type=float, default=0.02, help="seconds per eviction answer")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "actuation.json"))
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    results = asyncio.run(run(args.pods, levels, args.delay, args.rounds))
    base = results[str(levels[0])]["median_ms"]
    print(
        f"actuation: one gang of {args.pods} pods, Eviction API, "
        f"{args.delay * 1e3:.0f} ms per answer, {args.rounds} interleaved rounds"
    )
    print(f"{'concurrency':>12} {'median ms':>10} {'speed-up':>9}")
    for c in levels:
        median = results[str(c)]["median_ms"]
        print(f"{c:>12} {median:>10.1f} {base / median:>8.1f}x")
    write_result(
        args.out,
        {
            "pods": args.pods,
            "delay_s": args.delay,
            "rounds": args.rounds,
            "by_concurrency": results,
            "environment": environment(),
        },
    )


if __name__ == "__main__":
    main()
