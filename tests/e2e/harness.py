"""The four services as OS processes on a real nats-server, and helpers to read what
they published."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.client import Client

from gangpreempt import events
from gangpreempt.bus import Topology
from gangpreempt.bus.leasing import current_token
from gangpreempt.bus.reading import read_subject
from services import simwire

FAST = {
    "GANGPREEMPT_TERMINATION_DELAY": "0.5",
    "GANGPREEMPT_PLAN_TIMEOUT": "2",
    "GANGPREEMPT_LEASE_TTL": "2",
    "GANGPREEMPT_CYCLE_DELAY": "0.02",
    "GANGPREEMPT_POLL_INTERVAL": "0.2",
    "GANGPREEMPT_LOG_LEVEL": "info",
}


class Services:
    def __init__(self, nats_url: str, topology: Topology, scenario: str, logs: Path) -> None:
        self.nats_url = nats_url
        self.topology = topology
        self.scenario = scenario
        self.logs = logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env.update(FAST)
        env.update(
            GANGPREEMPT_NATS_URL=self.nats_url,
            GANGPREEMPT_PREFIX=self.topology.prefix,
            GANGPREEMPT_SCENARIO=self.scenario,
        )
        env.update(extra or {})
        return env

    def start(self, *names: str, extra: dict[str, str] | None = None) -> None:
        for name in names or ("ingest", "quota", "victims", "actuator"):
            self.start_as(name, name, extra)

    def start_as(self, name: str, service: str, extra: dict[str, str] | None = None) -> None:
        """Start ``service`` as the process called ``name`` (a second replica)."""
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "gangpreempt.cli", "serve", service],
            env=self.env(extra),
            stdout=log,
            stderr=log,
        )
        log.close()

    def wait_started(self, timeout: float = 30.0) -> None:
        """Until every started service has logged that it is up (connected, provisioned,
        its signal handlers installed): a loaded machine may take seconds to import."""
        deadline = time.monotonic() + timeout
        waiting = set(self.procs)
        while waiting and time.monotonic() < deadline:
            waiting = {n for n in waiting if '"event": "started"' not in self.log(n)}
            time.sleep(0.1)
        assert not waiting, f"not started after {timeout} s: {sorted(waiting)}"

    def alive(self) -> dict[str, bool]:
        return {name: p.poll() is None for name, p in self.procs.items()}

    def wait_exit(self, name: str, timeout: float = 20.0) -> int:
        return self.procs[name].wait(timeout=timeout)

    def stop(self) -> dict[str, int | None]:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        codes: dict[str, int | None] = {}
        for name, p in self.procs.items():
            try:
                codes[name] = p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()  # reaped: no process is left behind
                codes[name] = None
        return codes

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")


async def read_stream(nc: Client, stream: str, subject: str) -> list[Any]:
    """Every message currently in ``stream`` on ``subject``, whole (it fails rather than
    return part of them: ``gangpreempt.bus.reading``)."""
    return await read_subject(nc.jetstream(), stream, subject)


async def decisions(nc: Client, topology: Topology, *, distinct: bool = True) -> list[events.Event]:
    """Every decision event stored, in order, as a consumer sees them: the events of a
    batch unpacked, an id seen before dropped (a retry composed into another batch;
    ``distinct=False`` keeps every copy the stream holds)."""
    msgs = await read_stream(nc, topology.decisions_stream, f"{topology.prefix}.*.*")
    out: list[events.Event] = []
    seen: set[str] = set()
    for m in msgs:
        try:
            evs = events.decode_all(m.data)
        except Exception:
            continue  # the malformed-message tests put junk here on purpose
        for e in evs:
            if not distinct or e.id not in seen:
                seen.add(e.id)
                out.append(e)
    return out


async def wait_for(
    nc: Client,
    topology: Topology,
    check: Callable[[list[events.Event]], bool],
    timeout: float = 30.0,
    what: str = "",
) -> list[events.Event]:
    deadline = time.monotonic() + timeout
    while True:
        evs = await decisions(nc, topology)
        if check(evs):
            return evs
        if time.monotonic() > deadline:
            seen = [
                f"{events.event_type(e)} {getattr(e, 'preemptor', '') or getattr(e, 'workload', '')}"
                for e in evs
            ]
            raise AssertionError(f"timed out waiting for {what}; saw: {seen}")
        await asyncio.sleep(0.2)


async def admitted(nc: Client, topology: Topology, ref: str) -> list[events.Event]:
    """The decisions stream once ``ref`` has been admitted."""
    return await wait_for(
        nc, topology, lambda e: bool(of(e, events.Admitted, workload=ref)), what=f"{ref} admitted"
    )


def saga_of(evs: list[events.Event], ref: str) -> list[str]:
    """The event types of ``ref``'s saga (what names it as preemptor or workload), in
    order, without its Pending decisions."""
    return [
        events.event_type(e)
        for e in evs
        if getattr(e, "preemptor", getattr(e, "workload", "")) == ref
        and not isinstance(e, events.Pending)
    ]


SAGA = [
    "PreemptionRequested",
    "PlanProposed",
    "PlanConfirmed",
    "VictimActuated",
    "PlanActuated",
    "Admitted",
]


def assert_saga(kinds: list[str], expected: list[str] = SAGA) -> None:
    """``kinds`` is the saga ``expected``, in the order the stream can promise: each
    publisher's events in order, and quota's ``PlanConfirmed`` after the proposal and
    before the admission. The actuator follows the plan record, not the stream, so its
    first eviction may be announced before quota's ``PlanConfirmed`` lands (the record
    orders them: ``confirmed`` is stored before ``actuating``)."""
    assert sorted(kinds) == sorted(expected), kinds
    assert [k for k in kinds if k != "PlanConfirmed"] == [
        k for k in expected if k != "PlanConfirmed"
    ], kinds
    if "PlanConfirmed" in expected:
        at = kinds.index("PlanConfirmed")
        assert kinds.index("PlanProposed") < at < kinds.index("Admitted"), kinds


def of(evs: list[events.Event], kind: type[events.Event], **match: str) -> list[Any]:
    return [
        e for e in evs if isinstance(e, kind) and all(getattr(e, k) == v for k, v in match.items())
    ]


async def quiet(
    nc: Client, topology: Topology, seconds: float = 1.0, timeout: float = 30.0
) -> list[events.Event]:
    """Until the decisions stream has not grown for ``seconds``: nothing more happens."""
    js = nc.jetstream()
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while True:
        seq = (await js.stream_info(topology.decisions_stream)).state.last_seq
        if seq != last:
            last, since = seq, time.monotonic()
        elif time.monotonic() - since >= seconds:
            return await decisions(nc, topology)
        if time.monotonic() > deadline:
            raise AssertionError(f"the decisions stream kept growing for {timeout}s")
        await asyncio.sleep(0.05)


async def caught_up(nc: Client, topology: Topology, service: str, timeout: float = 30.0) -> None:
    """Until ``service``'s consumer has handled and acknowledged everything stored."""
    js = nc.jetstream()
    deadline = time.monotonic() + timeout
    while True:
        info = await js.consumer_info(topology.decisions_stream, topology.durable(service))
        if not info.num_pending and not info.num_ack_pending:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{service} did not catch up in {timeout}s")
        await asyncio.sleep(0.05)


async def running(nc: Client, topology: Topology, timeout: float = 30.0) -> None:
    """Until every service is at work: ingest, quota and victims fetching from their
    consumers, an actuator holding the lease."""
    js = nc.jetstream()
    leases = await js.key_value(topology.leases_bucket)
    deadline = time.monotonic() + timeout
    while True:
        waiting = [
            (await js.consumer_info(topology.decisions_stream, topology.durable(s))).num_waiting
            for s in ("ingest", "quota", "victims")
        ]
        if all(waiting) and await current_token(leases, "actuator") is not None:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"services not running after {timeout}s")
        await asyncio.sleep(0.05)


async def state_has(
    nc: Client, topology: Topology, kind: str, key: str, timeout: float = 30.0
) -> None:
    """Until the STATE stream holds ``kind`` ``key`` (ingest published it)."""
    js = nc.jetstream()
    subject = topology.state_subject(kind, key)
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await js.get_last_msg(topology.state_stream, subject)
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{kind} {key} not in STATE after {timeout}s")
        await asyncio.sleep(0.05)


async def sim_stats(nc: Client, topology: Topology, timeout: float = 30.0) -> simwire.StatsReply:
    """The sim cluster's counters, once ingest answers (it may still be starting)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            msg = await nc.request(topology.sim_stats, b"", timeout=5)
            return simwire.decode(msg.data, simwire.StatsReply)
        except nats.errors.NoRespondersError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


__all__ = [
    "FAST",
    "SAGA",
    "Services",
    "assert_saga",
    "caught_up",
    "decisions",
    "of",
    "quiet",
    "read_stream",
    "running",
    "sim_stats",
    "state_has",
    "wait_for",
]
