"""``gangpreempt up``: nats-server, the four services as separate processes, and a live
view of the decisions until Ctrl-C (or, with ``--until-settled``, until nothing moves)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import msgspec
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy
from rich.console import Console

from gangpreempt import events
from gangpreempt.bus import SERVICES, NatsServer, Topology, connected_with, follow, provision_with
from gangpreempt.bus.permissions import ADMIN, server_authorization
from gangpreempt.bus.records import decode_record
from gangpreempt.bus.status import quota_caught_up, timeline_played
from gangpreempt.config import Settings, env_name
from gangpreempt.errors import EXIT_INVALID
from gangpreempt.planning.records import ACTUATED, ACTUATING, DROPPED, PlanRecord
from gangpreempt.telemetry import setup_logging
from gangpreempt.waiting import sleep_or_stop

CRASH_LOOP_S = 5.0
CRASH_LOOP_RUNS = 3
STYLE = {
    "Admitted": "green",
    "PreemptionRequested": "yellow",
    "PlanProposed": "cyan",
    "PlanConfirmed": "cyan",
    "PlanRejected": "red",
    "RequestExpired": "red",
    "PreemptionInfeasible": "red",
    "VictimActuated": "magenta",
    "PlanActuated": "magenta",
    "PlanDropped": "red",
    "Pending": "dim",
}


async def _not_yet() -> bool:
    return False


@dataclass
class Tally:
    """What the live view saw, for --until-settled and the summary."""

    started: float = field(default_factory=time.monotonic)
    last_event: float = field(default_factory=time.monotonic)
    counts: dict[str, int] = field(default_factory=dict)
    requested_at: dict[str, float] = field(default_factory=dict)  # request_id -> time
    plan_request: dict[str, str] = field(default_factory=dict)  # plan_id -> request_id
    open_requests: set[str] = field(default_factory=set)
    steps: dict[str, list[float]] = field(default_factory=dict)
    proposed_at: dict[str, float] = field(default_factory=dict)
    confirmed_at: dict[str, float] = field(default_factory=dict)
    actuated_at: dict[str, float] = field(default_factory=dict)  # preemptor -> time
    waiting_admission: set[str] = field(default_factory=set)
    # plan id -> (preemptor, the states its durable record went through)
    records: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    # whether quota has decided on all STATE holds (set by the live view once connected)
    quota_idle: Callable[[], Awaitable[bool]] = field(default=_not_yet)
    # whether ingest has played every timed step of the scenario's timeline
    timeline_played: Callable[[], Awaitable[bool]] = field(default=_not_yet)

    seen_seq: int = 0  # the decisions stream's sequence the view has taken in

    def record(self, rec: PlanRecord) -> None:
        state = rec.state
        if state in (ACTUATING, ACTUATED, DROPPED) and rec.fencing_token:
            state = f"{state} (token {rec.fencing_token})"
        _, states = self.records.setdefault(rec.plan_id, (rec.preemptor, []))
        if not states or states[-1] != state:
            states.append(state)

    def step(self, name: str, seconds: float) -> None:
        self.steps.setdefault(name, []).append(seconds)

    def see(self, ev: events.Event) -> None:
        now = time.monotonic()
        self.last_event = now
        name = events.event_type(ev)
        self.counts[name] = self.counts.get(name, 0) + 1
        if isinstance(ev, events.PreemptionRequested):
            self.requested_at[ev.request_id] = now
            self.open_requests.add(ev.request_id)
        elif isinstance(ev, events.PlanProposed):
            self.plan_request[ev.plan_id] = ev.request_id
            self.proposed_at[ev.plan_id] = now
            if ev.request_id in self.requested_at:
                self.step("requested -> proposed", now - self.requested_at[ev.request_id])
        elif isinstance(ev, events.PreemptionInfeasible | events.RequestExpired):
            self.open_requests.discard(ev.request_id)
        elif isinstance(ev, events.PlanRejected):
            self.open_requests.discard(self.plan_request.get(ev.plan_id, ""))
        elif isinstance(ev, events.PlanConfirmed):
            self.confirmed_at[ev.plan_id] = now
            if ev.plan_id in self.proposed_at:
                self.step("proposed -> confirmed", now - self.proposed_at[ev.plan_id])
        elif isinstance(ev, events.PlanActuated | events.PlanDropped):
            self.open_requests.discard(self.plan_request.get(ev.plan_id, ""))
            if isinstance(ev, events.PlanActuated):
                if ev.plan_id in self.confirmed_at:
                    self.step("confirmed -> actuated", now - self.confirmed_at[ev.plan_id])
                self.actuated_at[ev.preemptor] = now
                self.waiting_admission.add(ev.preemptor)
        elif isinstance(ev, events.Admitted) and ev.workload in self.waiting_admission:
            self.waiting_admission.discard(ev.workload)
            self.step("actuated -> admitted", now - self.actuated_at[ev.workload])

    def settled(self, quiet: float) -> bool:
        idle = time.monotonic() - self.last_event
        return (
            bool(self.counts)
            and idle >= quiet
            and not self.open_requests
            and not self.waiting_admission
        )


def describe(ev: events.Event) -> tuple[str, str]:
    """(subject of the line, details) for the live view."""
    if isinstance(ev, events.Admitted):
        if ev.placement:
            nodes = ", ".join(
                f"{pod.rsplit('/', 1)[-1]} -> {node}" for pod, node in ev.placement.items()
            )
            return ev.workload, f"bound: {nodes}"
        return ev.workload, f"in ClusterQueue {ev.cluster_queue}"
    if isinstance(ev, events.Pending):
        return ev.workload, ev.message
    if isinstance(ev, events.CheckDecided):
        after = f" (again in {ev.requeue_after_s}s)" if ev.requeue_after_s else ""
        return ev.workload, f"check {ev.check}: {ev.state}{after}: {ev.message}"
    if isinstance(ev, events.PreemptionRequested):
        where = f"in ClusterQueue {ev.cluster_queue}" if ev.flavors else "on nodes"
        if ev.cluster_queue.startswith("ElasticQuota/"):
            where = f"on nodes, in {ev.cluster_queue}"
        return ev.workload, f"request {ev.request_id} {where}"
    if isinstance(ev, events.PlanProposed):
        victims = ", ".join(
            f"{v.object} ({v.reason}{f', {len(v.pods)} pods' if len(v.pods) > 1 else ''})"
            for v in ev.victims
        )
        placed = f"; places {len(ev.placement)} pods" if ev.placement else ""
        return ev.preemptor, f"plan {ev.plan_id}: {victims}{placed}"
    if isinstance(ev, events.PreemptionInfeasible):
        return ev.preemptor, ev.message
    if isinstance(ev, events.RequestExpired):
        return ev.workload, f"request {ev.request_id} given up: {ev.reason}"
    if isinstance(ev, events.PlanConfirmed):
        return ev.preemptor, f"plan {ev.plan_id}"
    if isinstance(ev, events.PlanRejected | events.PlanDropped):
        return ev.preemptor, f"plan {ev.plan_id}: {ev.reason}"
    if isinstance(ev, events.VictimActuated):
        return ev.victim, f"for {ev.preemptor} (plan {ev.plan_id}, token {ev.fencing_token})"
    if isinstance(ev, events.PlanActuated):
        return ev.preemptor, f"plan {ev.plan_id}: {len(ev.victims)} victim(s)"
    return "", ""


def summary(console: Console, tally: Tally) -> None:
    c = tally.counts
    console.rule("summary")
    console.print(
        f"plans proposed {c.get('PlanProposed', 0)}, confirmed {c.get('PlanConfirmed', 0)}, "
        f"actuated {c.get('PlanActuated', 0)}, dropped {c.get('PlanDropped', 0)}, "
        f"rejected {c.get('PlanRejected', 0)}, infeasible {c.get('PreemptionInfeasible', 0)}"
    )
    console.print(
        f"victims actuated {c.get('VictimActuated', 0)}; "
        f"workloads admitted {c.get('Admitted', 0)}; "
        f"elapsed {time.monotonic() - tally.started:.1f}s"
    )
    for name, values in tally.steps.items():
        console.print(
            f"  {name:<24} median {statistics.median(values) * 1e3:8.1f} ms   "
            f"max {max(values) * 1e3:8.1f} ms   (n={len(values)})"
        )
    if tally.records:
        console.print("plan records (each moved forward by compare-and-set):")
        for plan_id, (preemptor, states) in tally.records.items():
            console.print(f"  {plan_id[:8]} {preemptor}: {' > '.join(states)}", highlight=False)


async def _live_view(
    settings: Settings,
    console: Console,
    tally: Tally,
    stop: asyncio.Event,
    provisioned: asyncio.Event,
) -> None:
    topology = Topology(settings.prefix)
    async with connected_with(settings, "gangpreempt-up") as nc:
        await provision_with(nc.jetstream(), settings)

        async def caught_up() -> bool:
            """quota has decided on everything STATE holds, and the view has seen every
            decision it published doing so (a request it has not seen is not open yet)."""
            if not await quota_caught_up(nc, topology):
                return False
            info = await nc.jetstream().stream_info(topology.decisions_stream)
            return tally.seen_seq >= info.state.last_seq

        tally.quota_idle = caught_up
        tally.timeline_played = lambda: timeline_played(nc, topology)
        provisioned.set()

        async def on_msg(msg: Msg) -> None:
            tally.seen_seq = max(tally.seen_seq, msg.metadata.sequence.stream)
            try:
                evs = events.decode_all(msg.data)
            except Exception:
                console.print(f"[red]undecodable message on {msg.subject}[/red]")
                return
            for ev in evs:
                tally.see(ev)
                name = events.event_type(ev)
                who, details = describe(ev)
                style = STYLE.get(name, "white")
                clock = time.strftime("%H:%M:%S")
                console.print(
                    f"{clock} [{style}]{name:<21}[/{style}] {who}  [dim]{details}[/dim]",
                    highlight=False,
                )

        async def on_record(msg: Msg) -> None:
            if msg.data:
                with contextlib.suppress(Exception):
                    tally.record(decode_record(msg.data))

        sub = await follow(nc, f"{topology.prefix}.>", topology.decisions_stream, on_msg)
        records = await follow(
            nc,
            f"$KV.{topology.plans_bucket}.>",
            f"KV_{topology.plans_bucket}",
            on_record,
            DeliverPolicy.ALL,
        )
        await stop.wait()
        await sub.unsubscribe()
        await records.unsubscribe()


async def run_up(
    settings: Settings, external_nats: bool, store: str | None, until_settled: bool, timeout: float
) -> int:
    setup_logging("up", "error")  # the live view is the output; connection chatter is not
    console = Console(stderr=False)
    own_server: NatsServer | None = None
    passwords: dict[str, str] = {}
    tmp: tempfile.TemporaryDirectory[str] | None = None
    if external_nats:
        url = settings.nats_url
    else:
        if store is None:
            tmp = tempfile.TemporaryDirectory(prefix="gangpreempt-")
            store = tmp.name
        passwords = {user: secrets.token_urlsafe(18) for user in (ADMIN, *SERVICES)}
        auth = server_authorization(Topology(settings.prefix), passwords)
        own_server = NatsServer(store, extra_config=auth).start()
        url = own_server.url
        console.print(
            f"nats-server on {url} (JetStream store {store}, sync_interval always; "
            f"a user per service, configuration in {own_server.config_path})"
        )
    logs = os.path.join(store or tempfile.gettempdir(), "logs")
    os.makedirs(logs, exist_ok=True)
    env = dict(os.environ)
    for f in msgspec.structs.fields(Settings):
        value = getattr(settings, f.name)
        if value is not None:
            env[env_name(f.name)] = str(value)
    env[env_name("nats_url")] = url
    if settings.scenario:
        env[env_name("scenario")] = os.path.abspath(settings.scenario)
    if not settings.sim_journal and store is not None:
        # The sim survives an ingest restart within this run; each run starts anew.
        journal = os.path.join(store, "sim-journal.jsonl")
        with contextlib.suppress(FileNotFoundError):
            os.remove(journal)
        env[env_name("sim_journal")] = journal
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    view_settings = msgspec.structs.replace(settings, nats_url=url)
    if passwords:  # our own server: the view provisions as admin, services as themselves
        view_settings = msgspec.structs.replace(
            view_settings, nats_user=ADMIN, nats_password=passwords[ADMIN]
        )
        env[env_name("provision")] = "false"
    tally = Tally()
    provisioned = asyncio.Event()
    view = asyncio.ensure_future(_live_view(view_settings, console, tally, stop, provisioned))
    # Streams, consumers and buckets exist, and the view follows, before any service starts.
    waiter = asyncio.ensure_future(provisioned.wait())
    await asyncio.wait({waiter, view}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
    if view.done():
        waiter.cancel()
        await view  # raises what stopped it
    await asyncio.sleep(0.1)
    procs: dict[str, asyncio.subprocess.Process] = {}
    started: dict[str, float] = {}
    quick_exits: dict[str, int] = {}  # exits in a row within CRASH_LOOP_S of a start
    failed = False

    async def start(service: str) -> None:
        log_file = open(os.path.join(logs, f"{service}.log"), "ab")  # noqa: SIM115
        service_env = dict(env)
        if passwords:
            service_env[env_name("nats_user")] = service
            service_env[env_name("nats_password")] = passwords[service]
        procs[service] = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "gangpreempt.cli",
            "serve",
            service,
            env=service_env,
            stdout=log_file,
            stderr=log_file,
        )
        log_file.close()
        started[service] = time.monotonic()

    try:
        for service in SERVICES:
            await start(service)
        console.print(f"services started: {', '.join(SERVICES)} (logs in {logs}); Ctrl-C stops")
        deadline = time.monotonic() + timeout
        quiet = max(2.0, settings.termination_delay + 1.5)
        while not stop.is_set():
            await sleep_or_stop(stop, 0.25)
            # A service that dies is started again, as its Deployment would be; one that
            # keeps dying at start (a bad setting) stops everything.
            for service, p in list(procs.items()):
                if p.returncode is None or stop.is_set():
                    continue
                if p.returncode == EXIT_INVALID:
                    # Invalid input (a manifest that cannot be read at start): starting it
                    # again cannot mend it.
                    console.print(
                        f"[red]service {service} stopped on invalid input: "
                        f"{last_error(os.path.join(logs, f'{service}.log'))}[/red]"
                    )
                    failed = True
                    stop.set()
                    break
                quick = time.monotonic() - started[service] < CRASH_LOOP_S
                quick_exits[service] = quick_exits.get(service, 0) + 1 if quick else 0
                if quick_exits[service] >= CRASH_LOOP_RUNS:
                    console.print(f"[red]service {service} keeps exiting (see {logs})[/red]")
                    failed = True
                    stop.set()
                    break
                console.print(
                    f"[red]service {service} exited ({p.returncode}); starting it again[/red]"
                )
                await start(service)
            if failed:
                break
            if until_settled and (
                (
                    tally.settled(quiet)
                    and await tally.timeline_played()
                    and await tally.quota_idle()
                )
                or time.monotonic() > deadline
            ):
                if time.monotonic() > deadline:
                    console.print(f"[red]not settled after {timeout:.0f}s[/red]")
                break
    finally:
        for p in procs.values():
            if p.returncode is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                await asyncio.wait_for(p.wait(), timeout=10)
            except TimeoutError:
                p.kill()
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(view, timeout=5)
        if own_server is not None:
            own_server.stop()
        if tmp is not None:
            tmp.cleanup()
    summary(console, tally)
    unclean = [s for s, p in procs.items() if p.returncode not in (0, -signal.SIGTERM)]
    return 1 if failed or unclean else 0


def last_error(log_path: str) -> str:
    """The ``error: ...`` line a service wrote last before it exited on invalid input."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f if line.startswith("error: ")]
    except OSError:
        return f"(no log at {log_path})"
    return lines[-1].removeprefix("error: ") if lines else f"(see {log_path})"


__all__ = ["run_up"]
