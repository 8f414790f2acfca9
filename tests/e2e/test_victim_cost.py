"""The victim-cost setting through the services (issue 27): with ``lost-gpu-hours`` the
plan takes the candidate that loses least work (its last checkpoint the most recent),
where Kueue's order takes the most recently admitted."""

from __future__ import annotations

from pathlib import Path

import pytest
from nats.aio.client import Client

from gangpreempt import events
from gangpreempt.bus import Topology
from tests.e2e.harness import Services, admitted, assert_saga, of, saga_of
from tests.e2e.scenarios import ADMITTED, CLUSTER, gang_arrives

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]
GANG = "Workload/ml/gang"


def checkpointed(text: str, at: str) -> str:
    """The admitted workload of ``text`` with its last checkpoint at ``at``."""
    return text.replace(
        'creationTimestamp: "2026-01-01T00:00:00Z"}',
        f'creationTimestamp: "2026-01-01T00:00:00Z", '
        f'annotations: {{gangpreempt.io/last-checkpoint: "{at}"}}}}',
    )


async def test_the_setting_chooses_the_victim_that_loses_least(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    # Kueue's order would take low-2, the most recently admitted (test_saga's happy path)
    # low-1 admitted first but checkpointed since; low-2 admitted last, never checkpointed
    text = CLUSTER
    text += checkpointed(
        ADMITTED.format(name="low-1", minute=0, priority=100, cpus=4), "2026-06-01T00:00:00Z"
    )
    text += ADMITTED.format(name="low-2", minute=10, priority=100, cpus=4)
    gang_arrives(scenario_dir, text)
    services.start(extra={"GANGPREEMPT_VICTIM_COST": "lost-gpu-hours"})
    evs = await admitted(nc, topology, GANG)
    assert_saga(saga_of(evs, GANG))
    (proposal,) = of(evs, events.PlanProposed, preemptor=GANG)
    assert [v.object for v in proposal.victims] == ["Workload/ml/low-1"]
