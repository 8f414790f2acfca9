"""The kubernetes source's decode: what one batch of watch events costs ingest.

Raw API objects (as list + watch keep them) for clusters of 10,000 and 50,000 pods on
nodes of 20 pods each. Measures, per size: the first full decode (every object
published); a batch where one pod changed (one watch event), decoded whole with no cache
on the event loop (the first version) and incrementally in a thread
(``KubeSource.decode`` as built: only changed objects decoded, then the joins and the
diff); and how long the event loop is held meanwhile, as the longest gap of a 5 ms
ticker.

And the publish of a whole state (the first publish, and every periodic republish) to
a real nats-server with ``sync_interval: always``: objects per second with the acks
awaited a window at a time (as built) and one by one (the first version). And the CPU
that tracing costs per published STATE object: a span each (the first version) against
the batch's span context only (as built).

Prints a table and writes ``bench/results/ingest.json``. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or imported

import services.ingest.service as ingest_service
from bench.stats import environment, write_result
from gangpreempt.bus import NatsServer, Topology, connected, provision
from gangpreempt.config import Settings
from gangpreempt.manifests.objects import ObjectCache
from gangpreempt.telemetry import inject, publish_batch_span, publish_span, setup_tracing
from services.ingest.kubernetes import KubeSource
from services.ingest.service import Ingest
from services.kube.access import NODES, PODS
from services.runtime import ServiceContext

PODS_PER_NODE = 20


def raw_node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1"},
        "status": {"allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"}},
    }


def raw_pod(i: int, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"p{i}",
            "namespace": f"team-{i % 10}",
            "uid": f"uid-p{i}",
            "resourceVersion": str(i),
            "labels": {"app": f"a{i % 100}"},
        },
        "spec": {
            "nodeName": node,
            "priorityClassName": "",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}],
        },
        "status": {"phase": "Running", "startTime": "2026-11-01T00:00:00Z"},
    }


def source_with(pods: int) -> KubeSource:
    source = KubeSource(Settings())
    nodes = max(1, pods // PODS_PER_NODE)
    source.store.replace(NODES, {("", f"n{i}"): raw_node(f"n{i}") for i in range(nodes)})
    source.store.replace(
        PODS, {(f"team-{i % 10}", f"p{i}"): raw_pod(i, f"n{i % nodes}") for i in range(pods)}
    )
    return source


async def loop_hold(run: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    """(seconds ``run`` took, the longest the event loop went without running a 5 ms
    ticker meanwhile)."""
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.02)
    started = time.perf_counter()
    await run()
    took = time.perf_counter() - started
    done.set()
    await tick
    return took, max(gaps) if gaps else 0.0


def change_one_pod(source: KubeSource, round_: int) -> None:
    """What one watch event does: one pod replaced by a new version."""
    pod = dict(source.store.objects[PODS][("team-1", "p1")])
    pod["metadata"] = {**pod["metadata"], "resourceVersion": f"r{round_}"}
    pod["metadata"]["labels"] = {"app": f"changed-{round_}"}
    source.store.put(PODS, pod)


async def measure(pods: int, rounds: int) -> dict[str, Any]:
    source = source_with(pods)
    started = time.perf_counter()
    upserts, _ = await source.decode(everything=True)
    first = time.perf_counter() - started
    full, incremental, on_loop, in_thread, decoded = [], [], [], [], []
    for r in range(rounds):
        change_one_pod(source, r)

        async def whole_on_the_loop() -> None:  # the first version: no cache, on the loop
            ObjectCache("bench").load(source.store.all_objects())

        took, hold = await loop_hold(whole_on_the_loop)
        full.append(took)
        on_loop.append(hold)

        async def incremental_in_a_thread() -> None:  # as built
            await source.decode(everything=False)

        took, hold = await loop_hold(incremental_in_a_thread)
        incremental.append(took)
        in_thread.append(hold)
        decoded.append(source.cache.decoded)
    return {
        "pods": pods,
        "nodes": max(1, pods // PODS_PER_NODE),
        "objects_published_first": len(upserts),
        "first_decode_s": round(first, 3),
        "batch_whole_decode_p50_s": round(statistics.median(full), 3),
        "batch_incremental_p50_s": round(statistics.median(incremental), 3),
        "objects_decoded_per_batch": max(decoded),
        "loop_held_whole_on_loop_p50_s": round(statistics.median(on_loop), 3),
        "loop_held_incremental_in_thread_p50_s": round(statistics.median(in_thread), 3),
        "loop_held_incremental_in_thread_max_s": round(max(in_thread), 3),
    }


async def measure_publish(pods: int, work: str) -> dict[str, Any]:
    """Objects/s publishing a whole state, windowed and one ack at a time."""
    server = NatsServer(work, sync_always=True).start()
    out: dict[str, Any] = {"pods": pods}
    try:
        for name, window in (("windowed", ingest_service.ACK_WINDOW), ("one_by_one", 0)):
            topology = Topology(f"b{window}")
            settings = Settings(source="kubernetes", prefix=topology.prefix)
            async with connected(server.url, "bench") as nc:
                await provision(nc.jetstream(), topology)
                ingest = Ingest(ServiceContext("ingest", settings, nc, asyncio.Event()))
                upserts, _ = await source_with(pods).decode(everything=True)
                saved = ingest_service.ACK_WINDOW
                ingest_service.ACK_WINDOW = window
                try:
                    started = time.perf_counter()
                    await ingest.publish(upserts, [])
                    took = time.perf_counter() - started
                finally:
                    ingest_service.ACK_WINDOW = saved
            out[f"{name}_objects_per_s"] = round(len(upserts) / took)
            out[f"{name}_s"] = round(took, 2)
    finally:
        server.stop()
    return out


def tracing_cost(n: int) -> dict[str, float]:
    """CPU per STATE object spent on tracing, with a tracer provider installed as the
    services have: a span of its own per object (the first version) against only the
    batch's context injected into its headers (as built)."""
    setup_tracing("bench")
    t = time.process_time()
    for i in range(n):
        with publish_span("gp.state.pod.ns.x", "gp.state.pod.{namespace}.{name}", f"id{i}", 500):
            inject({})
    per_span = (time.process_time() - t) / n
    with publish_batch_span("gp.state", n):
        t = time.process_time()
        for _ in range(n):
            inject({})
        per_inject = (time.process_time() - t) / n
    return {"span_per_object_us": per_span * 1e6, "context_only_us": per_inject * 1e6}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, nargs="+", default=[10_000, 50_000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--publish", type=int, default=10_000, help="pods (0: skip)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "ingest.json"))
    args = parser.parse_args(argv)
    sizes = [asyncio.run(measure(n, args.rounds)) for n in args.pods]
    print(
        f"{'pods':>7} {'first':>7} {'batch: whole':>13} {'incremental':>12} "
        f"{'loop held: whole':>17} {'incremental':>12}"
    )
    for s in sizes:
        print(
            f"{s['pods']:>7} {s['first_decode_s']:>6.2f}s {s['batch_whole_decode_p50_s']:>12.2f}s "
            f"{s['batch_incremental_p50_s']:>11.3f}s {s['loop_held_whole_on_loop_p50_s']:>16.2f}s "
            f"{s['loop_held_incremental_in_thread_p50_s']:>11.3f}s"
        )
    result: dict[str, Any] = {"environment": environment(), "sizes": sizes}
    cost = tracing_cost(max(1000, max(args.pods)))
    print(
        f"tracing per STATE object: {cost['span_per_object_us']:.1f} us with a span each "
        f"(first version), {cost['context_only_us']:.1f} us with the batch's context only"
    )
    result["tracing"] = cost
    if args.publish:
        with tempfile.TemporaryDirectory(prefix="gp-bench-") as work:
            pub = asyncio.run(measure_publish(args.publish, work))
        print(
            f"publish {pub['pods']} pods: {pub['windowed_objects_per_s']} objects/s windowed, "
            f"{pub['one_by_one_objects_per_s']} one by one"
        )
        result["publish"] = pub
    write_result(args.out, result)
    return result


if __name__ == "__main__":
    main()
