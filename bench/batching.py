"""Batching benchmark: what carrying many events in one message saves, on the bus alone.

One nats-server (``sync_interval: always``, as the services run it), one stream, one
durable pull consumer that acknowledges what it takes (as a service does). N events
(``PlanProposed``-sized) are published and consumed:

- *one per message*: each event its own message, published back to back with the acks
  awaited together, a window at a time, and acknowledged one by one;
- *batches of B*: the same events, B to a message (a msgpack list), each message
  acknowledged once.

Measured: wall time from the first publish to the last acknowledgement, and the CPU
seconds this process (publisher and consumer) and nats-server spent, per event. The
pipeline's services would add their own handling per event either way; what batching
removes is the bus's per-message cost (store, fsync, delivery, ack) and the client's.

Prints a table and writes ``bench/results/batching.json``. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import msgspec
from nats.js.api import AckPolicy, ConsumerConfig, StorageType, StreamConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or imported

from bench.processes import cpu_seconds
from bench.stats import environment, write_result
from gangpreempt import events
from gangpreempt.bus import NatsServer, connected

WINDOW = 256  # messages in flight before their acks are awaited


def sample_event(i: int) -> events.PlanProposed:
    victims = tuple(
        events.PlannedVictim(
            object=f"Workload/bench/v{i}-{j}",
            uid=f"uid-{i}-{j}",
            resource_version=str(j),
            reason="InClusterQueue",
            cluster_queue="q",
            priority=100,
            pods=(f"Pod/bench/v{i}-{j}-0",),
            pod_uids=(f"pod-uid-{i}-{j}",),
            rule="lower-priority",
        )
        for j in range(2)
    )
    return events.PlanProposed(
        id=f"proposed-{i}",
        occurred_at=datetime.now(UTC),
        plan_id=f"plan-{i}",
        request_id=f"req-{i}",
        preemptor=f"Workload/bench/g{i}",
        preemptor_uid=f"g{i}",
        cluster_queue="q",
        pod_sets=("main",),
        flavors={"main": {"nvidia.com/gpu": "default"}},
        victims=victims,
        state_seq=i,
    )


async def run_once(url: str, n: int, batch: int, name: str) -> tuple[float, int]:
    """Publish and consume ``n`` events, ``batch`` to a message; (seconds, messages)."""
    async with connected(url, "bench") as nc:
        js = nc.jetstream()
        await js.add_stream(
            StreamConfig(name=name, subjects=[f"{name}.>"], storage=StorageType.FILE)
        )
        await js.add_consumer(name, ConsumerConfig(durable_name="c", ack_policy=AckPolicy.EXPLICIT))
        psub = await js.pull_subscribe_bind("c", name)
        encoder = msgspec.msgpack.Encoder()
        bodies = [
            encoder.encode([sample_event(i) for i in range(s, min(n, s + batch))])
            if batch > 1
            else events.encode(sample_event(s))
            for s in range(0, n, batch)
        ]
        got = 0
        done = asyncio.Event()

        async def consume() -> None:
            nonlocal got
            decoder = msgspec.msgpack.Decoder(list[events.PlanProposed])
            while got < n:
                try:
                    msgs = await psub.fetch(256, timeout=1.0)
                except Exception:
                    continue
                for m in msgs:
                    got += len(decoder.decode(m.data)) if batch > 1 else 1
                    if batch == 1:
                        events.decode(m.data)
                    await m.ack()
            done.set()

        started = time.perf_counter()
        consumer = asyncio.ensure_future(consume())
        acks = []
        for i, body in enumerate(bodies):
            acks.append(await js.publish_async(f"{name}.e", body, headers={"Nats-Msg-Id": f"m{i}"}))
            if len(acks) >= WINDOW:
                await asyncio.gather(*acks)
                acks.clear()
        await asyncio.gather(*acks)
        await asyncio.wait_for(done.wait(), 120)
        await consumer
        return time.perf_counter() - started, len(bodies)


def main(argv: list[str] | None = None) -> dict[str, object]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=4000)
    ap.add_argument("--batches", default="1,4,16,64", help="events per message")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "batching.json"))
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="gp-batching-"))
    server = NatsServer(str(work / "nats"), sync_always=True).start()
    assert server.proc is not None
    rows = []
    try:
        for round_ in range(2):  # interleaved: each size twice
            for batch in (int(b) for b in args.batches.split(",")):
                server_cpu, mine = cpu_seconds(server.proc.pid), cpu_seconds(os.getpid())
                seconds, messages = asyncio.run(
                    run_once(server.url, args.events, batch, f"B{batch}R{round_}")
                )
                rows.append(
                    {
                        "events_per_message": batch,
                        "round": round_,
                        "messages": messages,
                        "seconds": seconds,
                        "events_per_s": args.events / seconds,
                        "client_cpu_us_per_event": (cpu_seconds(os.getpid()) - mine)
                        / args.events
                        * 1e6,
                        "server_cpu_us_per_event": (cpu_seconds(server.proc.pid) - server_cpu)
                        / args.events
                        * 1e6,
                    }
                )
    finally:
        server.stop()
    print(f"batching benchmark: {args.events} events, nats-server sync_interval always")
    print(f"{'events/msg':>10}{'round':>7}{'events/s':>11}{'client us/ev':>14}{'server us/ev':>14}")
    for r in rows:
        print(
            f"{r['events_per_message']:>10}{r['round']:>7}{r['events_per_s']:>11.0f}"
            f"{r['client_cpu_us_per_event']:>14.1f}{r['server_cpu_us_per_event']:>14.1f}"
        )
    result: dict[str, object] = {"events": args.events, "rows": rows, **environment()}
    write_result(args.out, result)
    return result


if __name__ == "__main__":
    main()
