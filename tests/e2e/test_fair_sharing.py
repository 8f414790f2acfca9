"""Kueue's fair sharing through the services: the manager Configuration travels on STATE
like any object, and the victims it picks are those Kueue's fair preemption picks."""

from __future__ import annotations

from pathlib import Path

import pytest
from nats.aio.client import Client

from gangpreempt import events
from gangpreempt.bus import Topology
from tests.e2e.harness import Services, assert_saga, of, saga_of, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]
PREEMPTOR = "Workload/team-a/train"

QUEUES = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: all}
---
"""
QUEUE = """apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: {name}}}
spec:
  cohortName: all
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: ["cpu"]
    flavors: [{{name: default, resources: [{{name: cpu, nominalQuota: {nominal}}}]}}]
  preemption: {{withinClusterQueue: LowerPriority, reclaimWithinCohort: Any}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{namespace: {name}, name: jobs}}
spec: {{clusterQueue: {name}}}
---
"""
WORKLOAD = """apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {{namespace: {ns}, name: {name}, uid: {name}-uid, creationTimestamp: "2026-01-01T00:0{minute}:00Z"}}
spec:
  queueName: jobs
  priority: 100
  podSets: [{{name: main, count: {cpus}, template: {{spec: {{containers: [{{name: c, resources: {{requests: {{cpu: "1"}}}}}}]}}}}}}]
{status}---
"""
STATUS = """status:
  admission:
    clusterQueue: {ns}
    podSetAssignments: [{{name: main, count: {cpus}, flavors: {{cpu: default}}, resourceUsage: {{cpu: "{cpus}"}}}}]
  conditions:
  - {{type: QuotaReserved, status: "True", reason: QuotaReserved, lastTransitionTime: "2026-01-01T00:0{minute}:01Z"}}
"""
CONFIG = """apiVersion: config.kueue.x-k8s.io/v1beta1
kind: Configuration
fairSharing:
  enable: true
  preemptionStrategies: [LessThanOrEqualToFinalShare, LessThanInitialShare]
"""


def fair_cluster(folder: Path) -> None:
    """team-a (3 CPUs) and team-b (5 CPUs) share 8; team-b runs two workloads of 4
    (borrowing 3: share 375 per thousand); team-a's train asks 4 (it would borrow 1: 125).
    Classical preemption may not reclaim at equal priority while borrowing; fair sharing
    takes team-b's most recently admitted workload in its second pass."""
    text = QUEUES + QUEUE.format(name="team-a", nominal=3) + QUEUE.format(name="team-b", nominal=5)
    for i, name in enumerate(("b-1", "b-2")):
        status = STATUS.format(ns="team-b", cpus=4, minute=i)
        text += WORKLOAD.format(ns="team-b", name=name, cpus=4, minute=i, status=status)
    text += WORKLOAD.format(ns="team-a", name="train", cpus=4, minute=5, status="")
    (folder / "cluster.yaml").write_text(text)
    (folder / "kueue-config.yaml").write_text(CONFIG)


async def test_fair_sharing_reclaims_from_the_queue_with_the_highest_share(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    fair_cluster(scenario_dir)
    services.start()
    evs = await wait_for(
        nc,
        topology,
        lambda e: bool(of(e, events.Admitted, workload=PREEMPTOR)),
        what="team-a's workload admitted",
    )
    assert_saga(saga_of(evs, PREEMPTOR))
    (proposal,) = of(evs, events.PlanProposed, preemptor=PREEMPTOR)
    assert [(v.object, v.reason) for v in proposal.victims] == [
        ("Workload/team-b/b-2", "InCohortFairSharing")
    ]
