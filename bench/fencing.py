"""Fencing window of the kubernetes sink: how long after the actuator's last lease check
(its clock-based validity, then a read of the lease from NATS) a write reaches the API
server. A holder paused inside that window is the one case no check catches.

The actuator's kubernetes sink evicts N victim pods (delete mode: a DisruptionTarget
patch then a delete per pod, and an Event) against the in-repo API server over HTTP,
with a real nats-server holding the lease. For each write the window runs from the end
of the check that preceded it to the API server receiving the request, one clock. The
cost of the check itself (the NATS read) is measured beside it.

Prints a table and writes ``bench/results/fencing.json``. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or imported

from bench.stats import environment, stats_ms, write_result
from gangpreempt.bus import Lease, NatsServer, Topology, connected, leases_bucket
from gangpreempt.bus.leasing import current_token
from gangpreempt.config import Settings
from gangpreempt.errors import Fenced
from services import simwire
from services.actuator.kubernetes import KubeSink
from services.kube.client import KubeApi
from tests.kube.apiserver import ApiServer
from tests.kube.objects import node, pod
from tests.kube.sinking import Replica


async def run(pods: int) -> dict[str, Any]:
    checked: list[float] = []  # when each check ended
    checks: list[float] = []  # how long each check took
    windows: list[float] = []
    server = ApiServer()
    handle = server._handle

    async def timed(request: Any) -> Any:
        if request.method != "GET" and checked:
            windows.append(time.monotonic() - checked[-1])
        return await handle(request)

    server._handle = timed  # type: ignore[method-assign]
    await server.start()
    with tempfile.TemporaryDirectory(prefix="gangpreempt-fencing-") as tmp:
        nats = NatsServer(tmp).start()
        try:
            async with connected(nats.url, "bench") as nc:
                topology = Topology("fencing")
                kv = await leases_bucket(nc.jetstream(), topology, ttl=10.0)
                lease = Lease(kv, "actuator", "bench", ttl=10.0)
                token = await lease.acquire(asyncio.Event())
                keeper = asyncio.ensure_future(lease.keep(asyncio.Event()))

                async def fence() -> None:
                    started = time.monotonic()
                    lease.check()
                    if await current_token(kv, "actuator") != token:
                        raise Fenced("not ours")
                    now = time.monotonic()
                    checks.append(now - started)
                    checked.append(now)

                server.put(node("n1", cpu="1000"))
                for i in range(pods):
                    server.put(pod(f"victim-{i}", node_name="n1"))
                replica = Replica(server)
                replica.refresh()
                config = server.kubeconfig(str(Path(tmp) / "kubeconfig"))
                settings = Settings(kubeconfig=config, pod_eviction="delete")
                async with KubeApi.connect(settings, "actuator") as api:
                    api.before_write = fence
                    # one write at a time: the window of each write, as before concurrency
                    sink = await KubeSink.create(api, replica, "delete", concurrency=1)  # type: ignore[arg-type]
                    started = time.monotonic()
                    for i in range(pods):
                        uid = server.get("", "pods", "team-a", f"victim-{i}")["metadata"]["uid"]  # type: ignore[index]
                        reply = await sink.evict(
                            simwire.EvictRequest(
                                ref=f"Pod/team-a/victim-{i}",
                                uid=uid,
                                plan_id="bench",
                                preemptor="Pod/team-a/big",
                                reason="PreemptionByScheduler",
                                fencing_token=token or 0,
                                pods=(f"Pod/team-a/victim-{i}",),
                                mode="delete",
                                pod_uids=(uid,),
                            )
                        )
                        assert reply.ok, reply.detail
                    elapsed = time.monotonic() - started
                keeper.cancel()
        finally:
            nats.stop()
            await server.stop()
    return {
        "pods": pods,
        "writes": len(windows),
        "window": stats_ms(windows),
        "check": stats_ms(checks),
        "evictions_per_s": pods / elapsed,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=200)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "fencing.json"))
    args = ap.parse_args()
    result = asyncio.run(run(args.pods))
    print(
        f"fencing window of the kubernetes sink: {result['pods']} pods, {result['writes']} writes"
    )
    print(f"{'measure':<44} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for name, key in (
        ("lease check (clock + NATS read)", "check"),
        ("check end -> write received", "window"),
    ):
        s = result[key]
        print(f"{name:<44} {s['n']:>5} {s['p50_ms']:>8.2f} {s['p99_ms']:>8.2f} {s['max_ms']:>8.2f}")
    print(f"evictions: {result['evictions_per_s']:.0f}/s")
    write_result(args.out, {"environment": environment(), **result})


if __name__ == "__main__":
    main()
