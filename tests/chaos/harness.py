"""One chaos run: a nats-server of its own (restartable on its port and store), the four
services as processes under a supervisor that restarts any that dies (as Kubernetes
would), the chaos scenario, faults injected at random moments drawn from a seed, then
the evidence gathered and checked (``checker``).

Fault classes:

- ``nats``: nats-server SIGKILLed and restarted on the same store after 1-15 s;
- ``kill``: 1-4 services SIGKILLed at random moments (the actuator possibly at a point
  inside an actuation: after its record write, after an eviction), restarted;
- ``pause``: the lease holder SIGSTOPped past its lease while a standby runs, resumed;
- ``actuators``: two actuators throughout, the holder SIGKILLed once;
- ``messages``: duplicated events (new message ids, past the stream's deduplication),
  junk bytes and events on the wrong subject on every subject, invalid state objects,
  batches holding copies of stored events beside an item that is no event and one on
  the wrong subject;
- ``quota``: two quota instances; the active one (the lease holder) SIGKILLed, or
  SIGSTOPped past its lease and resumed, once or twice while gangs arrive;
- ``victims``: two victims replicas sharing the consumer; 1-3 times a replica kills
  itself after a search, before its answer is sent;
- ``relist``: the cluster is an API server (``kubeworld``: the in-repo one, with Kueue,
  kube-scheduler and the kubelet played around it), ingest lists and watches it and
  relists every 2 s, the actuator writes to it; ingest kills itself 1-3 times halfway
  through publishing a whole state (its first list, or a relist), and is restarted;
- ``takeover``: the actuator kills itself 1-4 times, each incarnation at a point drawn
  from the seed (after its Nth eviction, after its Nth claim, between the events of its
  Nth plan and its ``actuated`` write, right after it took a half-done plan over), with
  a termination delay shorter than the lease: the next holder finds the victims gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import msgspec
from nats.aio.client import Client

from gangpreempt import events
from gangpreempt.bus import NatsServer, Topology, connected, provision
from gangpreempt.bus.leasing import parse_lease
from gangpreempt.bus.publishing import HEADER_BATCH
from gangpreempt.bus.records import decode_record
from gangpreempt.bus.topology import EVENT_SUBJECTS
from gangpreempt.model import kinds
from gangpreempt.model.workloads import PodSet, Workload
from gangpreempt.planning.records import ACTUATING, CONFIRMED
from gangpreempt.replica import StateReplica
from services.ingest.journal import evictions
from tests.chaos import scenario
from tests.chaos.checker import Evidence, Revision, violations
from tests.chaos.kubeworld import KubeWorld
from tests.e2e.harness import decisions, read_stream

FAULTS = (
    "nats",
    "kill",
    "pause",
    "actuators",
    "messages",
    "takeover",
    "quota",
    "victims",
    "relist",
)
SERVICES = ("ingest", "quota", "victims", "actuator")
STATE_CHUNKS = (256, 8, 3)  # GANGPREEMPT_STATE_CHUNK, drawn per run
SETTINGS = {
    "GANGPREEMPT_TERMINATION_DELAY": "1",
    "GANGPREEMPT_PLAN_TIMEOUT": "4",
    "GANGPREEMPT_LEASE_TTL": "2",
    "GANGPREEMPT_CYCLE_DELAY": "0.02",
    "GANGPREEMPT_POLL_INTERVAL": "0.5",
    "GANGPREEMPT_LOG_LEVEL": "info",
}
LEASE_TTL = 2.0
BOUND_S = 30.0  # every gang runs within this long after the faults stop (these settings)
MID_ACTUATION = ("before-actuation", "after-claim", "after-eviction")


@dataclass
class Failover:
    at: float  # wall clock: the active quota was killed or stopped
    token: int  # the lease token it held
    next_decision_s: float | None = None  # until a decision under a newer token


@dataclass
class RunResult:
    fault: str
    seed: int
    injected: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    settle_s: float | None = None
    elapsed_s: float = 0.0
    plans_actuated: int = 0
    evictions: int = 0
    restarts: int = 0
    failovers: list[Failover] = field(default_factory=list)
    state_chunk: int = 0  # GANGPREEMPT_STATE_CHUNK of the run

    @property
    def ok(self) -> bool:
        return not self.violations


class Process:
    """One service process, restarted by the supervisor whenever it dies."""

    def __init__(self, name: str, service: str, env: dict[str, str], logs: Path) -> None:
        self.name = name
        self.service = service
        self.env = env
        self.log = logs / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.extra: dict[str, str] = {}
        self.paused = False
        self.starts = 0
        self.planned: list[str] = []  # fault points for its next starts, one per start
        self.armed = ""  # the fault point this incarnation carries

    def start(self, extra: dict[str, str] | None = None) -> None:
        env = dict(self.env)
        env.update(extra or {})
        self.armed = ""
        if self.planned:
            self.armed = self.planned.pop(0)
            env["GANGPREEMPT_FAULT"] = self.armed
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gangpreempt.cli", "serve", self.service],
                env=env,
                stdout=out,
                stderr=out,
            )
        self.starts += 1

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def stopped(self) -> bool:
        """Stopped by a signal (it paused itself at a fault point)."""
        if not self.alive:
            return False
        assert self.proc is not None
        try:
            stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        except OSError:
            return False
        return stat.rpartition(")")[2].split()[0] == "T"

    def signal(self, sig: int) -> None:
        if self.alive:
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    def stop(self) -> None:
        self.terminate()
        self.wait()

    def terminate(self) -> None:
        if self.proc is None:
            return
        if self.paused:
            self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)

    def wait(self) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class ChaosRun:
    def __init__(self, fault: str, seed: int, workdir: Path) -> None:
        if fault not in FAULTS:
            raise ValueError(f"unknown fault class {fault!r}: one of {', '.join(FAULTS)}")
        self.fault = fault
        self.seed = seed
        self.rng = random.Random(seed)
        # STATE in chunks or not, from the seed (its own draw: the faults' stay as they
        # were): the faults strike chunked starts, relists and bursts too
        self.state_chunk = random.Random(f"chunk-{seed}").choice(STATE_CHUNKS)
        self.dir = workdir
        self.topology = Topology("chaos")
        self.server = NatsServer(str(workdir / "nats"))
        self.logs = workdir / "logs"
        self.journal = workdir / "sim-journal.jsonl"
        self.result = RunResult(fault, seed, state_chunk=self.state_chunk)
        self.procs: dict[str, Process] = {}
        self.supervising = True
        self.gangs: list[scenario.Gang] = []
        self.t0 = time.monotonic()
        self.world: KubeWorld | None = None
        self.converge_failures: list[str] = []

    # -- setting up --------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(SETTINGS)
        env.update(
            GANGPREEMPT_NATS_URL=self.server.url,
            GANGPREEMPT_PREFIX=self.topology.prefix,
            GANGPREEMPT_SCENARIO=str(self.dir / "scenario"),
            GANGPREEMPT_SIM_JOURNAL=str(self.journal),
            GANGPREEMPT_STATE_CHUNK=str(self.state_chunk),
        )
        return env

    def note(self, what: str, t0: float) -> None:
        self.result.injected.append(f"{time.monotonic() - t0:5.1f}s {what}")

    async def supervise(self) -> None:
        """Restart any service that died (as its Deployment would), after a short wait."""
        while self.supervising:
            for p in self.procs.values():
                if not p.alive and not p.paused:
                    if p.armed:
                        self.note(f"{p.name} SIGKILLed itself at {p.armed}", self.t0)
                        p.armed = ""
                    await asyncio.sleep(self.rng.uniform(0.2, 1.0))
                    if self.supervising and not p.alive:
                        p.start()
                        self.result.restarts += 1
            await asyncio.sleep(0.1)

    # -- faults ------------------------------------------------------------------------------
    def kill_points(self) -> list[str]:
        """1-4 points where successive incarnations of the actuator kill themselves: after
        its Nth eviction, between its last eviction and the ``actuated`` write of its Nth
        plan, after its Nth claim, and (once a plan was left half-done) right after it
        took an actuating plan over."""
        rng = self.rng
        points: list[str] = []
        for i in range(rng.randint(1, 4)):
            choices = [
                f"after-eviction#{rng.randint(1, 6)}",
                f"before-actuated#{rng.randint(1, 3)}",
                f"after-claim#{rng.randint(1, 4)}",
            ]
            if i > 0 and not points[-1].startswith("after-claim"):
                choices.append("after-take-over#1")
            points.append(rng.choice(choices))
        return points

    async def holder(
        self, nc: Client, key: str = "actuator", timeout: float = 10.0
    ) -> tuple[Process, int] | None:
        """The process that holds lease ``key`` now, and its token (waiting for one to
        hold it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                kv = await nc.jetstream().key_value(self.topology.leases_bucket)
                parsed = parse_lease((await kv.get(key)).value)
                if parsed is not None:
                    pid = int(parsed[0].split("-")[-2])
                    for p in self.procs.values():
                        if p.proc is not None and p.proc.pid == pid and p.alive and not p.paused:
                            return p, parsed[1]
            await asyncio.sleep(0.05)
        return None

    async def inject(self, nc: Client, t0: float) -> None:
        rng = self.rng
        if self.fault == "nats":
            for _ in range(rng.randint(1, 2)):
                await asyncio.sleep(rng.uniform(0.5, 4.0))
                down = rng.uniform(1.0, 15.0)
                self.note(f"nats-server SIGKILL, back after {down:.1f}s", t0)
                assert self.server.proc is not None
                self.server.proc.kill()
                self.server.proc.wait()
                self.server.proc = None
                await asyncio.sleep(down)
                self.server.start()
                self.note("nats-server restarted", t0)
        elif self.fault == "kill":
            for _ in range(rng.randint(1, 4)):
                await asyncio.sleep(rng.uniform(0.3, 3.0))
                victim = self.procs[rng.choice(SERVICES)]
                self.note(f"SIGKILL {victim.name}", t0)
                victim.signal(signal.SIGKILL)
        elif self.fault == "pause":
            paused_itself = []
            for p in [p for p in self.procs.values() if p.extra]:  # inside an actuation
                deadline = time.monotonic() + 8
                while not p.stopped and time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
                if p.stopped:
                    paused_itself.append(p)
                    pause = LEASE_TTL + rng.uniform(1.0, 5.0)
                    self.note(f"{p.name} stopped itself mid-actuation; SIGCONT in {pause:.1f}s", t0)
                    p.paused = True
                    await asyncio.sleep(pause)
                    p.signal(signal.SIGCONT)
                    p.paused = False
                    self.note(f"SIGCONT {p.name}", t0)
            for _ in range(0 if paused_itself else rng.randint(1, 2)):
                await asyncio.sleep(rng.uniform(0.5, 3.0))
                found = await self.holder(nc)
                if found is None:
                    continue
                await self.stopped_for(found[0], "lease holder", t0)
        elif self.fault in ("takeover", "victims", "relist"):
            await self.self_kills(t0)
        elif self.fault == "quota":
            await self.quota_failovers(nc, t0)
        elif self.fault == "actuators":
            await asyncio.sleep(rng.uniform(0.5, 4.0))
            found = await self.holder(nc)
            if found is not None:
                self.note(f"SIGKILL {found[0].name} (lease holder)", t0)
                found[0].signal(signal.SIGKILL)
        elif self.fault == "messages":
            until = time.monotonic() + rng.uniform(3.0, 6.0)
            while time.monotonic() < until:
                await self.bad_message(nc)
                await asyncio.sleep(rng.uniform(0.05, 0.3))
            self.note("duplicated, junk, misplaced and invalid messages sent", t0)

    async def quota_failovers(self, nc: Client, t0: float) -> None:
        """The active quota (the lease holder) SIGKILLed, or SIGSTOPped past its lease
        and resumed, once or twice, while gangs still arrive and wait."""
        rng = self.rng
        for _ in range(rng.randint(1, 2)):
            await asyncio.sleep(rng.uniform(0.3, 2.5))
            found = await self.holder(nc, "quota")
            if found is None:
                continue
            holder, token = found
            self.result.failovers.append(Failover(time.time(), token))
            if rng.random() < 0.5:
                self.note(f"SIGKILL {holder.name} (quota lease holder, token {token})", t0)
                holder.signal(signal.SIGKILL)
                continue
            await self.stopped_for(holder, f"quota lease holder, token {token}", t0)

    async def stopped_for(self, p: Process, who: str, t0: float) -> None:
        """``p`` SIGSTOPped for its lease plus 1-5 s, then resumed."""
        pause = LEASE_TTL + self.rng.uniform(1.0, 5.0)
        self.note(f"SIGSTOP {p.name} ({who}) for {pause:.1f}s", t0)
        p.paused = True
        p.signal(signal.SIGSTOP)
        await asyncio.sleep(pause)
        p.signal(signal.SIGCONT)
        p.paused = False
        self.note(f"SIGCONT {p.name}", t0)

    async def self_kills(self, t0: float, deadline_s: float = 25.0) -> None:
        """Until every planned kill has happened (each incarnation of a process kills
        itself at its point); a point not reached in time is replaced by a SIGKILL."""
        deadline = t0 + deadline_s
        while time.monotonic() < deadline:
            if all(not p.planned and not p.armed for p in self.procs.values()):
                return
            await asyncio.sleep(0.05)
        for p in self.procs.values():
            if p.armed or p.planned:
                self.note(f"{p.name}: {p.armed or p.planned[0]} not reached; SIGKILL", t0)
                p.planned.clear()
                p.armed = ""
                p.signal(signal.SIGKILL)

    async def bad_message(self, nc: Client) -> None:
        js = nc.jetstream()
        topo = self.topology
        rng = self.rng
        kind = rng.choice(("duplicate", "duplicate", "junk", "misplaced", "invalid", "batch"))
        subjects = [topo.event_subject(t) for t in sorted(EVENT_SUBJECTS, key=lambda t: t.__name__)]
        subjects.append(topo.state_subject("Workload", f"chaos/junk-{rng.randint(0, 9)}"))
        try:
            if kind == "duplicate":
                evs = await decisions(nc, topo)
                if evs:
                    ev = rng.choice(evs)
                    await js.publish(
                        topo.subject_of(ev),
                        events.encode(ev),
                        headers={"Nats-Msg-Id": f"dup-{rng.random()}"},
                    )
            elif kind == "batch":
                # copies of stored events of one type, beside an item that is no event
                # and one on the wrong subject, in one batch past the deduplication
                evs = await decisions(nc, topo)
                if evs:
                    etype = type(rng.choice(evs))
                    copies = [events.encode(e) for e in evs if type(e) is etype][-3:]
                    wrong = events.encode(rng.choice(evs))
                    junk = msgspec.msgpack.encode({"type": etype.__name__, "id": 7})
                    items = [*copies, junk, wrong]
                    rng.shuffle(items)
                    batch = events.DecisionBatch(
                        id=f"chaos-batch-{rng.random()}",
                        occurred_at=datetime.now(UTC),
                        kind=etype.__name__,
                        items=tuple(events.BatchItem(msgspec.Raw(b)) for b in items),
                    )
                    await js.publish(
                        topo.event_subject(etype),
                        events.encode(batch),
                        headers={"Nats-Msg-Id": batch.id, HEADER_BATCH: str(len(items))},
                    )
            elif kind == "junk":
                await js.publish(rng.choice(subjects), rng.randbytes(rng.randint(1, 64)))
            elif kind == "misplaced":
                ev = events.Pending(
                    id=f"misplaced-{rng.random()}",
                    occurred_at=datetime.now(UTC),
                    workload="Workload/chaos/g0-a",
                    uid="",
                    cluster_queue="q0",
                    mode="NoFit",
                    message="misplaced",
                )
                await js.publish(rng.choice(subjects), events.encode(ev))
            else:
                wl = Workload(
                    namespace="chaos",
                    name=f"invalid-{rng.randint(0, 99)}",
                    queue_name="q0",
                    priority=5000,
                    pod_sets=(PodSet("main", -rng.randint(1, 9), {"cpu": -1000}),),
                )
                bad: events.Event = events.ObjectUpserted(
                    id=f"invalid-{rng.random()}",
                    occurred_at=datetime.now(UTC),
                    kind="Workload",
                    key=wl.key,
                    body=kinds.encode_object(wl),
                )
                number = int(wl.name.rsplit("-", 1)[1])
                if number % 2:  # half of them in a chunk of their own
                    bad = events.StateChunk(
                        id=f"chunk-{bad.id}",
                        occurred_at=bad.occurred_at,
                        epoch="chaos",
                        n=number,
                        changes=(bad,),  # type: ignore[arg-type]
                    )
                await js.publish(topo.subject_of(bad), events.encode(bad))
        except Exception:
            pass  # a fault of its own (the stream refused it): nothing to check

    # -- watching ----------------------------------------------------------------------------
    def running(self, replica: StateReplica) -> bool:
        state = replica.state
        for gang in self.gangs:
            if gang.pods:
                pods = [state.pods.get(p) for p in gang.pods]
                if not all(p is not None and p.running and not p.terminating for p in pods):
                    return False
            else:
                wl = state.workloads.get(gang.ref.split("/", 1)[1])
                if wl is None or not wl.holds_quota:
                    return False
        return True

    def differences(self, replica: StateReplica) -> list[str]:
        """Pods and Workloads whose version on STATE is not the API server's (or that
        only one of them has)."""
        assert self.world is not None
        server = {
            (kind, f"{ns}/{name}"): str(obj["metadata"].get("resourceVersion", ""))
            for kind, plural, group in (
                ("Pod", "pods", ""),
                ("Workload", "workloads", "kueue.x-k8s.io"),
            )
            for (ns, name), obj in self.world.server.objects[(group, plural)].items()
        }
        state = {("Pod", k): p.resource_version for k, p in replica.state.pods.items()}
        state |= {("Workload", k): w.resource_version for k, w in replica.state.workloads.items()}
        return sorted(
            f"{kind}/{key}: {state.get((kind, key), 'absent')} on STATE, "
            f"{server.get((kind, key), 'absent')} on the API server"
            for kind, key in server.keys() | state.keys()
            if state.get((kind, key)) != server.get((kind, key))
        )

    async def converged(self, replica: StateReplica, deadline: float) -> None:
        """STATE ends as the API server is (ingest, restarted mid-relist, caught up)."""
        while self.differences(replica) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        left = self.differences(replica)
        if left:
            self.converge_failures = [
                f"STATE did not converge to the API server within the bound: {d}" for d in left[:5]
            ]

    async def quiet(self, nc: Client, timeout: float = 20.0) -> None:
        """Until no record is confirmed or actuating: nothing in hand that could still
        act while the evidence is read."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            busy = [
                r
                for r in (await self.records(nc)).values()
                if r and r[-1].record.state in (CONFIRMED, ACTUATING)
            ]
            if not busy:
                return
            await asyncio.sleep(0.2)

    async def records(self, nc: Client) -> dict[str, list[Revision]]:
        out: dict[str, list[Revision]] = {}
        stream = f"KV_{self.topology.plans_bucket}"
        for msg in await read_stream(nc, stream, f"$KV.{self.topology.plans_bucket}.>"):
            if not msg.data:
                continue
            rec = decode_record(msg.data)
            out.setdefault(rec.plan_id, []).append(
                Revision(msg.metadata.timestamp.timestamp(), rec, msg.metadata.sequence.stream)
            )
        return out

    def acquisitions(self, service: str = "actuator") -> list[tuple[float, int]]:
        """(wall clock, token) of every lease acquisition ``service``'s processes logged."""
        out = []
        for p in self.procs.values():
            if p.service != service or not p.log.exists():
                continue
            for line in p.log.read_text(errors="replace").splitlines():
                if '"lease acquired"' not in line:
                    continue
                with contextlib.suppress(ValueError, KeyError):
                    entry = json.loads(line)
                    at = datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00"))
                    out.append((at.timestamp(), int(entry["fencing_token"])))
        return out

    # -- the run -----------------------------------------------------------------------------
    async def run(self) -> RunResult:
        started = time.monotonic()
        (self.dir / "scenario").mkdir(parents=True)
        self.logs.mkdir()
        self.gangs = scenario.write(self.dir / "scenario")
        self.server.start()
        async with connected(self.server.url, "chaos") as nc:
            await provision(nc.jetstream(), self.topology, lease_ttl=LEASE_TTL)
            env = self.env()
            if self.fault == "relist":
                # The cluster is an API server: ingest lists and watches it, the actuator
                # writes to it, and the world plays Kueue, kube-scheduler and the kubelet.
                self.world = KubeWorld(
                    self.dir / "scenario", float(SETTINGS["GANGPREEMPT_TERMINATION_DELAY"])
                )
                kubeconfig = str(self.dir / "kubeconfig")
                await self.world.start(nc, self.topology, kubeconfig)
                env.update(
                    GANGPREEMPT_SOURCE="kubernetes",
                    GANGPREEMPT_SINK="kubernetes",
                    GANGPREEMPT_KUBECONFIG=kubeconfig,
                    GANGPREEMPT_RELIST_INTERVAL="2",
                )
            for service in SERVICES:
                self.procs[service] = Process(service, service, env, self.logs)
            if self.fault in ("pause", "actuators"):
                self.procs["actuator-2"] = Process("actuator-2", "actuator", env, self.logs)
            if self.fault == "quota":
                self.procs["quota-2"] = Process("quota-2", "quota", env, self.logs)
            if self.fault == "victims":
                self.procs["victims-2"] = Process("victims-2", "victims", env, self.logs)
                for _ in range(self.rng.randint(1, 3)):  # killed mid-search, either replica
                    replica = self.procs[self.rng.choice(("victims", "victims-2"))]
                    replica.planned.append(f"before-answer#{self.rng.randint(1, 5)}")
                for p in (self.procs["victims"], self.procs["victims-2"]):
                    if p.planned:
                        self.result.injected.append(
                            f"  0.0s {p.name} to kill itself at {', '.join(p.planned)}"
                        )
            if self.fault == "relist":  # killed halfway through its Nth whole publish
                ingest = self.procs["ingest"]
                ingest.planned = [
                    f"relist#{self.rng.randint(1, 3)}" for _ in range(self.rng.randint(1, 3))
                ]
                self.result.injected.append(
                    f"  0.0s ingest to kill itself at {', '.join(ingest.planned)}"
                )
            if self.fault == "takeover":
                self.procs["actuator"].planned = self.kill_points()
                self.result.injected.append(
                    f"  0.0s actuator to kill itself at {', '.join(self.procs['actuator'].planned)}"
                )
            for p in self.procs.values():
                if (
                    p.name == "actuator"
                    and self.fault in ("kill", "pause")
                    and self.rng.random() < 0.5
                ):
                    point = self.rng.choice(MID_ACTUATION)
                    how = "die" if self.fault == "kill" else "pause itself"
                    p.extra = {
                        "GANGPREEMPT_FAULT": point if self.fault == "kill" else f"pause:{point}"
                    }
                    self.result.injected.append(f"  0.0s {p.name} to {how} at {point}")
                p.start(p.extra)
            replica = StateReplica(nc, self.topology, "chaos")
            await replica.start()
            t0 = self.t0 = time.monotonic()
            supervisor = asyncio.ensure_future(self.supervise())
            try:
                await self.inject(nc, t0)
                faults_end = time.monotonic()
                deadline = faults_end + BOUND_S + 30
                while not self.running(replica) and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
                if self.running(replica):
                    self.result.settle_s = max(0.0, time.monotonic() - faults_end)
                if self.world is not None:
                    await self.converged(replica, faults_end + BOUND_S)
                await self.quiet(nc)
            finally:
                self.supervising = False
                await supervisor
            revisions = await self.records(nc)
            evidence = Evidence(
                decisions=await decisions(nc, self.topology),
                revisions=revisions,
                evictions=(
                    self.world.evictions(revisions)
                    if self.world is not None
                    else evictions(str(self.journal))
                ),
                acquisitions=self.acquisitions(),
                quota_acquisitions=self.acquisitions("quota"),
                settle_s=self.result.settle_s,
                bound_s=BOUND_S,
                duplicated=self.fault == "messages",
            )
            await replica.stop()
        self.stop_all()
        if self.world is not None:
            await self.world.stop()
        self.server.stop()
        self.result.violations = violations(evidence) + self.converge_failures
        for f in self.result.failovers:
            later = [
                e.occurred_at.timestamp() - f.at
                for e in evidence.decisions
                if isinstance(e, events.Admitted | events.PreemptionRequested)
                and e.quota_token > f.token
                and e.occurred_at.timestamp() > f.at
            ]
            f.next_decision_s = min(later) if later else None
        self.result.plans_actuated = len(
            {e.plan_id for e in evidence.decisions if isinstance(e, events.PlanActuated)}
        )
        self.result.evictions = len(evidence.evictions)
        self.result.elapsed_s = time.monotonic() - started
        return self.result

    def stop_all(self) -> None:
        """SIGTERM to every service at once, then wait for each (they drain together)."""
        for p in self.procs.values():
            p.terminate()
        for p in self.procs.values():
            p.wait()

    def cleanup(self) -> None:
        self.stop_all()
        self.server.stop()


async def chaos_run(fault: str, seed: int, workdir: Path) -> RunResult:
    run = ChaosRun(fault, seed, workdir)
    try:
        return await run.run()
    finally:
        run.cleanup()


def describe(r: RunResult) -> str:
    settle = f"{r.settle_s:.1f}s" if r.settle_s is not None else "never"
    head = (
        f"{r.fault:<9} seed {r.seed:<6} {'ok  ' if r.ok else 'FAIL'} settled {settle:>6} after faults, "
        f"{r.plans_actuated} plans actuated, {r.evictions} evictions, {r.restarts} restarts, "
        f"{r.elapsed_s:.0f}s, state chunk {r.state_chunk}"
    )
    failovers = [
        f"    quota failover from token {f.token}: next decision "
        + (f"{f.next_decision_s:.2f}s after the fault" if f.next_decision_s is not None else "none")
        for f in r.failovers
    ]
    lines = [
        head,
        *(f"    {i}" for i in r.injected),
        *failovers,
        *(f"    VIOLATION {v}" for v in r.violations),
    ]
    return "\n".join(lines)


def log_tails(workdir: Path, keep: int = 12) -> str:
    """What each service last said at warning level or above, and its last line: enough to
    tell, from a CI log alone, where a failed run got stuck."""
    out = []
    for log_file in sorted((workdir / "logs").glob("*.log")):
        lines = log_file.read_text(errors="replace").splitlines()
        loud = [ln for ln in lines if '"level": "warning"' in ln or '"level": "error"' in ln]
        out.append(f"--- {log_file.name}: {len(lines)} lines; last warnings and errors:")
        out.extend(ln[:400] for ln in loud[-keep:])
        if lines:
            out.append(f"  last line: {lines[-1][:400]}")
    return "\n".join(out)


__all__ = ["BOUND_S", "FAULTS", "ChaosRun", "RunResult", "chaos_run", "describe", "log_tails"]
