"""Flood benchmark: 1,000 ``PreemptionRequested`` at once for the victims service.

On the dense cluster of ``bench/scale.py`` (5,000 nodes, 10 running pods per node), with
one nats-server (``sync_interval: always``), ingest reading the cluster from a manifests
folder and two victims replicas sharing their durable consumer, as deployed (processes;
no quota, no actuator: the benchmark plays quota). The benchmark puts the preemptors on
STATE (half gangs of 8 pods x 8 GPUs, half lone pods of 1 GPU, at priority 1000), waits
until both replicas hold them, then publishes 1,000 requests as fast as it can, and
while they are answered publishes a STATE change every ``--probe-every`` seconds (a new
pending pod) and times how long each replica takes to have it: its ``/metrics``
(``gangpreempt_state_objects{kind="Pod"}``, counted at the scrape, on the service's
event loop) shows the pod. Reported:

- the time until every request is answered (``PlanProposed`` or
  ``PreemptionInfeasible`` on the decisions stream), and the answers per second;
- redeliveries: the consumer's deliveries beyond the first of each message
  (``delivered.consumer_seq`` minus the messages delivered), its ``num_redelivered``
  sampled through the flood, and each replica's ``gangpreempt_redeliveries_total``;
- the STATE follower's lag, idle (before the flood) and during it, per replica;
- the split of the requests between the replicas, their CPU seconds;
- whether the NATS connections stayed up (``nats disconnected`` or ``nats error`` in a
  replica's log) and whether a follower's watchdog had to subscribe again.

Prints the figures and writes ``bench/results/flood.json``. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or imported

from bench.density import dense_scenario
from bench.processes import service_env
from bench.scale import gang, proc_stats, upsert
from bench.stats import environment, stats_ms, write_result
from bench.victims import requests
from gangpreempt import events
from gangpreempt.bus import NatsServer, Publisher, Topology, connected, follow, provision
from gangpreempt.model.pods import Pod

PRIORITY = 1000
REPLICAS = ("victims-a", "victims-b")
LOG_TROUBLE = {
    "disconnected": "nats disconnected",
    "nats_errors": "nats error",
    "follower_resubscribed": "follower stalled",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(
    name: str, service: str, env: dict[str, str], logs: Path, **extra: str
) -> subprocess.Popen[bytes]:
    with open(logs / f"{name}.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "gangpreempt.cli", "serve", service],
            env={**env, **extra},
            stdout=log,
            stderr=log,
        )


async def scrape(port: int) -> dict[str, float]:
    """A replica's ``/metrics`` (sample name with labels -> value)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n")
        await writer.drain()
        body = (await reader.read()).decode().partition("\r\n\r\n")[2]
    finally:
        writer.close()
    samples: dict[str, float] = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                samples[name] = float(value)
    return samples


async def pods_seen(port: int) -> int:
    with contextlib.suppress(OSError, asyncio.IncompleteReadError):
        return int((await scrape(port)).get('gangpreempt_state_objects{kind="Pod"}', -1))
    return -1


async def wait_until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout:.0f} s")
        await asyncio.sleep(0.1)


def preemptors(n: int) -> tuple[list[Any], list[str]]:
    """``n`` pending preemptors (gangs of 8 x 8 GPUs and lone pods of 1 GPU, in turn):
    their objects and refs."""
    objs: list[Any] = []
    refs: list[str] = []
    for i in range(n):
        if i % 2 == 0:
            objs += gang(f"fg-{i}", 8)
            refs.append(f"PodGroup/pre/fg-{i}")
        else:
            objs.append(Pod("pre", f"fp-{i}", requests(1), uid=f"uid-fp-{i}", priority=PRIORITY))
            refs.append(f"Pod/pre/fp-{i}")
    return objs, refs


class Answers:
    """The victims' answers on the decisions stream, by request id."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}
        self.outcome: dict[str, str] = {}
        self.copies = 0  # answers seen for a request already answered
        self.answers: set[str] = set()  # the answers' event ids

    async def follow(self, nc: Client, topology: Topology) -> Any:
        async def on_msg(msg: Msg) -> None:
            with contextlib.suppress(Exception):
                for ev in events.decode_all(msg.data):
                    if not isinstance(ev, events.PlanProposed | events.PreemptionInfeasible):
                        continue
                    if ev.id in self.answers:
                        continue  # the same answer again (a retry in another batch)
                    self.answers.add(ev.id)
                    if ev.request_id in self.at:
                        self.copies += 1
                    else:
                        self.at[ev.request_id] = time.monotonic()
                        self.outcome[ev.request_id] = events.event_type(ev)

        return await follow(
            nc, topology.service_wildcard("victims"), topology.decisions_stream, on_msg
        )


class Probes:
    """STATE changes published one at a time, and how long each replica took to have
    each (its ``/metrics`` shows one more pod)."""

    def __init__(self, pub: Publisher, ports: dict[str, int], base: int) -> None:
        self.pub = pub
        self.ports = ports
        self.expected = base
        self.lags: dict[str, list[float]] = {r: [] for r in ports}
        self.lost = 0
        self.made = 0

    async def one(self, timeout: float = 60.0) -> None:
        self.made += 1
        probe = Pod("probe", f"p-{self.made}", {"cpu": 100}, uid=f"uid-probe-{self.made}")
        await self.pub.publish(upsert(probe, "1"))
        sent = time.monotonic()
        self.expected += 1

        async def seen(replica: str, port: int) -> None:
            while time.monotonic() - sent < timeout:
                if await pods_seen(port) >= self.expected:
                    self.lags[replica].append(time.monotonic() - sent)
                    return
                await asyncio.sleep(0.01)
            self.lost += 1

        await asyncio.gather(*(seen(r, p) for r, p in self.ports.items()))

    async def every(self, period: float, stop: asyncio.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            await self.one()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, period - (time.monotonic() - started)))


async def consumer_numbers(nc: Client, topology: Topology) -> dict[str, int]:
    info = await nc.jetstream().consumer_info(
        topology.decisions_stream, topology.durable("victims")
    )
    return {
        "deliveries": int(info.delivered.consumer_seq),
        "num_redelivered": int(info.num_redelivered),
        "num_ack_pending": int(info.num_ack_pending),
        "num_pending": int(info.num_pending),
    }


async def measure(
    url: str,
    topology: Topology,
    base_pods: int,
    procs: dict[str, subprocess.Popen[bytes]],
    ports: dict[str, int],
    logs: Path,
    n_requests: int,
    probe_every: float,
    timeout: float,
) -> dict[str, Any]:
    async with connected(url, "bench-flood") as nc:
        js = nc.jetstream()
        await provision(js, topology)

        async def complete() -> bool:
            with contextlib.suppress(Exception):
                await js.get_last_msg(topology.state_stream, topology.state_complete_subject)
                return True
            return False

        t0 = time.monotonic()
        await wait_until(complete, 600, "StateComplete")
        pub = Publisher(nc, topology, "bench")
        objs, refs = preemptors(n_requests)
        acks = [await pub.send(upsert(obj, "1")) for obj in objs]
        await asyncio.gather(*acks)
        want = base_pods + sum(1 for o in objs if isinstance(o, Pod))

        async def replicas_hold_all() -> bool:
            seen = await asyncio.gather(*(pods_seen(p) for p in ports.values()))
            return all(s >= want for s in seen)

        await wait_until(replicas_hold_all, 600, "both replicas hold the preemptors")
        ready_s = time.monotonic() - t0
        probes = Probes(pub, ports, want)
        for _ in range(10):  # the follower's lag when nothing else happens
            await probes.one()
        idle = {r: stats_ms(v) for r, v in probes.lags.items()}
        probes.lags = {r: [] for r in ports}

        answers = Answers()
        sub = await answers.follow(nc, topology)
        state_seq = int((await js.stream_info(topology.state_stream)).state.last_seq)
        cpu_before = {r: proc_stats(procs[r].pid)["cpu_s"] for r in REPLICAS}
        stop = asyncio.Event()
        prober = asyncio.ensure_future(probes.every(probe_every, stop))
        redelivered_seen: list[int] = []

        async def sample_consumer() -> None:
            while not stop.is_set():
                with contextlib.suppress(Exception):
                    redelivered_seen.append(
                        (await consumer_numbers(nc, topology))["num_redelivered"]
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.5)

        sampler = asyncio.ensure_future(sample_consumer())
        started = time.monotonic()
        now = datetime.now(UTC)
        sends = [
            await pub.send(
                events.PreemptionRequested(
                    id=f"flood-req-{i}",
                    occurred_at=now,
                    request_id=f"flood-{i}",
                    workload=ref,
                    uid="",
                    resource_version="1",
                    cluster_queue="",
                    priority=PRIORITY,
                    flavors={},
                    state_seq=state_seq,
                )
            )
            for i, ref in enumerate(refs)
        ]
        await asyncio.gather(*sends)
        queued_s = time.monotonic() - started
        deadline = started + timeout
        while len(answers.at) < n_requests and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        answered_s = time.monotonic() - started
        stop.set()
        await prober
        await sampler
        cpu = {r: proc_stats(procs[r].pid)["cpu_s"] - cpu_before[r] for r in REPLICAS}
        # what was still delivered late (a redelivery comes after AckWait: 30 s) is not
        # waited for; the consumer's numbers are read now
        consumer = await consumer_numbers(nc, topology)
        metrics = {r: await scrape(p) for r, p in ports.items()}
        trouble = log_trouble(logs)  # now: a replica stopping logs its disconnection
        await sub.unsubscribe()
    durable = topology.durable("victims")
    handled = {
        r: int(
            m.get(
                f'gangpreempt_events_consumed_total{{consumer="{durable}",type="PreemptionRequested"}}',
                0,
            )
        )
        for r, m in metrics.items()
    }
    redeliveries = {
        r: int(m.get(f'gangpreempt_redeliveries_total{{consumer="{durable}"}}', 0))
        for r, m in metrics.items()
    }
    times = sorted(t - started for t in answers.at.values())
    outcomes: dict[str, int] = {}
    for kind in answers.outcome.values():
        outcomes[kind] = outcomes.get(kind, 0) + 1
    return {
        "requests": n_requests,
        "ready_s": ready_s,
        "queued_s": queued_s,
        "answered": len(answers.at),
        "answered_all_s": answered_s if len(answers.at) >= n_requests else None,
        "first_answer_s": times[0] if times else None,
        "answers_per_s": len(times) / times[-1] if times else 0.0,
        "outcomes": outcomes,
        "answer_copies_seen": answers.copies,
        "consumer": consumer,
        "deliveries_beyond_first": max(0, consumer["deliveries"] - n_requests),
        "num_redelivered_max": max(redelivered_seen, default=0),
        "replica_redeliveries": redeliveries,
        "replica_handled": handled,
        "replica_cpu_s": cpu,
        "follower_lag_idle": idle,
        "follower_lag_flood": {r: stats_ms(v) for r, v in probes.lags.items()},
        "probes": probes.made,
        "probes_lost": probes.lost,
        "log_trouble": trouble,
    }


def log_trouble(logs: Path) -> dict[str, dict[str, int]]:
    """What each replica's log says of its NATS connection and its followers so far."""
    found: dict[str, dict[str, int]] = {}
    for name in REPLICAS:
        text = (logs / f"{name}.log").read_text(errors="replace")
        found[name] = {k: len(re.findall(re.escape(s), text)) for k, s in LOG_TROUBLE.items()}
    return found


def run(
    nodes: int, pods_per_node: int, n_requests: int, probe_every: float, timeout: float
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="gp-flood-"))
    scenario = work / "scenario"
    state, _items = dense_scenario(work, nodes, pods_per_node)
    server = NatsServer(str(work / "nats")).start()
    topology = Topology("flood")
    env = service_env(server.url, topology.prefix, scenario, sim="false", sink="log")
    ports = {r: free_port() for r in REPLICAS}
    procs = {"ingest": start("ingest", "ingest", env, work)}
    for r in REPLICAS:
        procs[r] = start(r, "victims", env, work, GANGPREEMPT_HEALTH_PORT=str(ports[r]))
    try:
        result = asyncio.run(
            measure(
                server.url,
                topology,
                len(state.pods),
                procs,
                ports,
                work,
                n_requests,
                probe_every,
                timeout,
            )
        )
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        server.stop()
    return {
        "nodes": nodes,
        "running_pods": sum(1 for p in state.pods.values() if p.running),
        "logs": str(work),
        **result,
    }


def report(r: dict[str, Any]) -> None:
    print(
        f"flood benchmark: {r['requests']} PreemptionRequested for 2 victims replicas, "
        f"{r['nodes']} nodes, {r['running_pods']} running pods"
    )
    done = r["answered_all_s"]
    print(
        f"  queued in {r['queued_s']:.2f} s; answered {r['answered']}/{r['requests']} "
        + (f"in {done:.1f} s" if done is not None else "(not all: timed out)")
        + f" ({r['answers_per_s']:.0f}/s, first after {r['first_answer_s'] or 0:.2f} s); "
        f"{r['outcomes']}"
    )
    c = r["consumer"]
    print(
        f"  redeliveries: {r['deliveries_beyond_first']} deliveries beyond the first "
        f"(consumer seq {c['deliveries']}), num_redelivered max {r['num_redelivered_max']}, "
        f"replicas' metric {r['replica_redeliveries']}; answer copies seen "
        f"{r['answer_copies_seen']}"
    )
    print(f"  handled per replica {r['replica_handled']}, CPU s {r['replica_cpu_s']}")
    for phase in ("follower_lag_idle", "follower_lag_flood"):
        print(
            f"  {phase.removeprefix('follower_lag_')} STATE lag: "
            + "; ".join(
                f"{rep} p50 {s['p50_ms']:.0f} ms, p99 {s['p99_ms']:.0f} ms, "
                f"max {s['max_ms']:.0f} ms over {s['n']}"
                for rep, s in r[phase].items()
            )
        )
    print(f"  probes {r['probes']} (lost {r['probes_lost']}); logs: {r['log_trouble']}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods-per-node", type=int, default=10)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--probe-every", type=float, default=0.25, help="seconds between probes")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds for the answers")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "flood.json"))
    args = ap.parse_args(argv)
    result = {
        **run(args.nodes, args.pods_per_node, args.requests, args.probe_every, args.timeout),
        **environment(),
    }
    report(result)
    write_result(args.out, result)
    return result


if __name__ == "__main__":
    main()
