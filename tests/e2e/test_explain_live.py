"""``gangpreempt explain --plan``: the running victims service explains one of its plans
(and a pending workload) over NATS request/reply."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from nats.aio.client import Client

from gangpreempt import events
from gangpreempt.bus import Topology
from gangpreempt.bus.explainwire import ExplainRequest, ask_explain
from tests.e2e.harness import Services, of, wait_for
from tests.e2e.scenarios import PENDING, full_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]
GANG = "Workload/ml/gang"


async def test_the_victims_service_explains_a_plan(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path, nats_url: str
) -> None:
    full_cluster(scenario_dir)
    # A workload too large for its ClusterQueue: it stays pending.
    (scenario_dir / "huge.yaml").write_text(
        PENDING.format(name="huge", minute=30, priority=10, cpus=16)
    )
    services.start()
    evs = await wait_for(
        nc, topology, lambda e: bool(of(e, events.Admitted, workload=GANG)), what="gang admitted"
    )
    (proposal,) = of(evs, events.PlanProposed, preemptor=GANG)

    reply = await ask_explain(nc, topology, ExplainRequest(plan_id=proposal.plan_id))
    assert reply.plan_state in ("actuated", "closed")
    assert reply.plan_victims == ["Workload/ml/low-2"]
    assert "not pending" in reply.error  # admitted since: nothing left to decide

    reply = await ask_explain(nc, topology, ExplainRequest(workload="Workload/ml/huge"))
    assert reply.error == ""
    assert reply.explanation is not None
    assert reply.explanation.outcome == "Pending"
    assert reply.explanation.waiting
    kept = {v.object: v.rule for v in reply.explanation.others}
    assert kept == {"Workload/ml/low-1": "no-use", "Workload/ml/gang": "no-use"}

    missing = await ask_explain(nc, topology, ExplainRequest(plan_id="no-such-plan"))
    assert "no plan record" in missing.error

    # The command does the same, as people and machines read it.
    base = [sys.executable, "-m", "gangpreempt.cli", "explain", "--plan", proposal.plan_id]
    base += ["--nats-url", nats_url, "--prefix", topology.prefix]
    out = subprocess.run([*base, "-o", "json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr  # the preemptor is no longer pending
    assert json.loads(out.stdout)["plan_victims"] == ["Workload/ml/low-2"]
    out = subprocess.run(base, capture_output=True, text=True, timeout=60)
    assert f"plan {proposal.plan_id}: " in out.stdout
    assert "its victims: Workload/ml/low-2" in out.stdout
