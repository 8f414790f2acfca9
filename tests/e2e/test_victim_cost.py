"""The victim-cost setting through the services: with ``lost-gpu-hours`` the plan takes
the candidate that loses least work (its last checkpoint the most recent), where Kueue's
order takes the most recently admitted; and on the nodes, the pods that lose least where
kube-scheduler's order takes the fewest."""

from __future__ import annotations

from pathlib import Path

import pytest
from nats.aio.client import Client

from gangpreempt import events
from gangpreempt.bus import Topology
from tests.e2e.harness import SAGA, Services, admitted, assert_saga, of, saga_of, wait_for
from tests.e2e.scenarios import ADMITTED, CLUSTER, NODE, NODES, gang_arrives

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]
GANG = "Workload/ml/gang"
POD = "Pod/ml/p"


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


LONE_POD = """
---
apiVersion: v1
kind: Pod
metadata: {{namespace: ml, name: {name}, uid: {name}-uid}}
spec:
  {node}priorityClassName: {pc}
  containers: [{{name: c, resources: {{requests: {{cpu: "1", nvidia.com/gpu: "{gpus}"}}}}}}]
{status}"""


def lone_pod(name: str, gpus: int, node: str = "", started: str = "") -> str:
    status = f"status: {{phase: Running, startTime: '{started}'}}\n" if started else ""
    where = f"nodeName: {node}\n  " if node else ""
    pc = "low" if node else "high"
    return LONE_POD.format(name=name, node=where, pc=pc, gpus=gpus, status=status)


async def test_on_the_nodes_the_setting_takes_the_pods_that_lose_least(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    """A lone 8-GPU pod: kube-scheduler's order takes gpu-0's one pod (the fewest
    victims); the setting takes gpu-1's eight 1-GPU pods, started half a year later,
    which lose less together."""
    text = NODES + NODE.format(name="gpu-0") + NODE.format(name="gpu-1")
    text += lone_pod("long", 8, "gpu-0", "2025-01-01T00:00:00Z")
    for i in range(8):
        text += lone_pod(f"short-{i}", 1, "gpu-1", "2025-07-01T00:00:00Z")
    (scenario_dir / "cluster.yaml").write_text(text)
    (scenario_dir / "p.yaml").write_text(lone_pod("p", 8))
    (scenario_dir / "timeline.yaml").write_text("- at: 0.5\n  apply: p.yaml\n")
    services.start(extra={"GANGPREEMPT_VICTIM_COST": "lost-gpu-hours"})
    evs = await wait_for(
        nc,
        topology,
        lambda e: any(a.placement for a in of(e, events.Admitted, workload=POD)),
        what="the pod bound to a node",
    )
    eight = ["VictimActuated"] * 8
    assert_saga(saga_of(evs, POD), [*SAGA[:3], *eight, *SAGA[4:]])
    (proposal,) = of(evs, events.PlanProposed, preemptor=POD)
    assert sorted(v.object for v in proposal.victims) == [f"Pod/ml/short-{i}" for i in range(8)]
    assert proposal.placement == {POD: "gpu-1"}
