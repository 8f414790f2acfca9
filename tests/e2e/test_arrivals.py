"""A preemptor's arrival starts quota's admission cycle at once: the cycle delay gathers
only the other changes (issue 26, point 1)."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest
from nats.aio.client import Client

from gangpreempt import events
from gangpreempt.bus import Topology
from gangpreempt.bus.status import quota_caught_up
from tests.e2e.harness import Services, of, read_stream, state_has, wait_for
from tests.e2e.scenarios import PENDING, full_cluster
from tests.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
GANG = "Workload/ml/gang"
DELAY_S = 3.0  # far longer than a decision takes (tens of ms), even on a busy machine


async def test_an_arrival_is_decided_without_waiting_for_the_cycle_delay(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    full_cluster(scenario_dir, gang_at=None)
    services.start(extra={"GANGPREEMPT_CYCLE_DELAY": str(DELAY_S)})

    async def idle() -> bool:
        with contextlib.suppress(Exception):
            return await quota_caught_up(nc, topology)
        return False

    # The starting state is not an arrival: quota decides on it after the cycle delay.
    await eventually(idle, timeout=60, what="quota decided on the starting state")
    manifest = PENDING.format(name="gang", minute=0, priority=1000, cpus=4)
    part = scenario_dir / "gang.yaml.part"  # ingest reads *.yaml: never half a file
    part.write_text(manifest)
    os.replace(part, scenario_dir / "gang.yaml")
    written = time.monotonic()
    await state_has(nc, topology, "Workload", "ml/gang", timeout=30)
    evs = await wait_for(
        nc,
        topology,
        lambda e: bool(of(e, events.PreemptionRequested, workload=GANG)),
        timeout=60,
        what="the gang's preemption request",
    )
    (request,) = of(evs, events.PreemptionRequested, workload=GANG)
    stored = await read_stream(
        nc, topology.state_stream, topology.state_subject("Workload", "ml/gang")
    )
    (arrival,) = [
        e for m in stored if isinstance(e := events.decode(m.data), events.ObjectUpserted)
    ]
    # Requested before one cycle delay had passed since the arrival was stored ...
    assert (request.occurred_at - arrival.occurred_at).total_seconds() < DELAY_S, (
        arrival.occurred_at,
        request.occurred_at,
        time.monotonic() - written,
    )
    # ... and the request says when quota saw the arrival: between the two.
    assert request.seen_at is not None
    assert arrival.occurred_at <= request.seen_at <= request.occurred_at
