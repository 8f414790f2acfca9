"""Two quota instances: one decides (it holds quota's lease), the other stands by warm.
The active one is killed, or stopped past its lease and resumed; the standby takes the
lease over, takes over the records and decides; a gang that arrives meanwhile is planned,
confirmed and admitted under the new token only, and the resumed instance stands by."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest
from nats.aio.client import Client

from gangpreempt import events
from gangpreempt.bus import Topology
from gangpreempt.bus.leasing import parse_lease
from gangpreempt.bus.reading import read_subject
from gangpreempt.bus.records import decode_record
from gangpreempt.bus.status import QuotaStatus, ask_quota
from tests.e2e.harness import Services, of, wait_for
from tests.e2e.scenarios import PENDING, full_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
GANG = "Workload/ml/gang"


async def quota_holder(nc: Client, topology: Topology, timeout: float = 30.0) -> tuple[int, int]:
    """(pid, token) of the quota instance holding the lease, once one does."""
    kv = await nc.jetstream().key_value(topology.leases_bucket)
    deadline = time.monotonic() + timeout
    while True:
        try:
            parsed = parse_lease((await kv.get("quota")).value)
        except Exception:
            parsed = None
        if parsed is not None:
            return int(parsed[0].split("-")[-2]), parsed[1]
        assert time.monotonic() < deadline, "no quota instance took the lease"
        await asyncio.sleep(0.05)


async def answering_quota(nc: Client, topology: Topology, timeout: float = 30.0) -> QuotaStatus:
    """quota's status, once its lease holder has taken over and answers."""
    deadline = time.monotonic() + timeout
    while (status := await ask_quota(nc, topology)) is None:
        assert time.monotonic() < deadline, "no quota instance answers its status"
        await asyncio.sleep(0.1)
    return status


@pytest.mark.parametrize("fault", ["kill", "pause"])
async def test_the_standby_takes_over_and_alone_decides(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path, fault: str
) -> None:
    full_cluster(scenario_dir, gang_at=None)
    services.start("ingest", "victims", "actuator")
    services.start_as("quota-1", "quota")
    services.start_as("quota-2", "quota")
    pid, token = await quota_holder(nc, topology)
    # The holder answers once it has adopted the records, and decides under its token.
    status = await answering_quota(nc, topology)
    assert status.token == token
    active = next(p for p in services.procs.values() if p.pid == pid)
    standby = next(n for n, p in services.procs.items() if p.pid != pid and "quota" in n)
    active.send_signal(signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
    faulted = time.monotonic()
    try:
        # the gang arrives while no quota decides
        (scenario_dir / "gang.yaml").write_text(
            PENDING.format(name="gang", minute=0, priority=1000, cpus=4)
        )
        evs = await wait_for(
            nc,
            topology,
            lambda e: bool(of(e, events.Admitted, workload=GANG)),
            timeout=60,
            what="the gang admitted by the standby",
        )
        took = time.monotonic() - faulted
        _, new_token = await quota_holder(nc, topology)
        assert new_token > token
        # (a busy machine may let a request expire and be made again: all are the new
        # holder's)
        requests = of(evs, events.PreemptionRequested, workload=GANG)
        assert requests
        assert {r.quota_token for r in requests} == {new_token}
        assert all(a.quota_token == new_token for a in of(evs, events.Admitted, workload=GANG))
        (actuated,) = of(evs, events.PlanActuated, preemptor=GANG)
        history = await read_subject(
            nc.jetstream(),
            f"KV_{topology.plans_bucket}",
            f"$KV.{topology.plans_bucket}.{actuated.plan_id}",
        )
        states = [decode_record(m.data) for m in history if m.data]
        assert [s.state for s in states][:2] == ["requested", "confirmed"]
        assert {s.quota_token for s in states if s.writer.startswith("quota/")} == {new_token}
        assert '"event": "leading"' in services.log(standby)
        print(f"{fault}: the gang admitted {took:.2f}s after the fault")
    finally:
        if fault == "pause":
            active.send_signal(signal.SIGCONT)
    if fault == "pause":
        # The resumed instance finds its lease gone and stands by: it decides nothing.
        name = next(n for n, p in services.procs.items() if p.pid == pid)
        deadline = time.monotonic() + 20
        while '"lease lost; standing by"' not in services.log(name):
            assert time.monotonic() < deadline, "the resumed instance did not stand by"
            await asyncio.sleep(0.1)
        status = await answering_quota(nc, topology)
        assert status.token == new_token
        assert active.poll() is None  # it stands by; it did not exit
