"""A minimum runtime through the services (issue 27): a workload whose
WorkloadPriorityClass tolerates the preemptor is spared, and the plan takes the one the
search would otherwise have kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from nats.aio.client import Client

from gangpreempt import events
from gangpreempt.bus import Topology
from tests.e2e.harness import Services, admitted, assert_saga, of, saga_of, sim_stats
from tests.e2e.scenarios import ADMITTED, CLUSTER, PENDING, gang_arrives

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]
GANG = "Workload/ml/gang"

TRAINING = """
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata:
  name: training
  annotations:
    preemption-toleration.scheduling.x-k8s.io/minimum-preemptable-priority: "2000"
    preemption-toleration.scheduling.x-k8s.io/toleration-seconds: "-1"
value: 100
"""


def with_training_class(text: str) -> str:
    """The admitted workload of ``text`` in the class ``training`` (its priority stays)."""
    return text.replace(
        "  queueName: jobs\n",
        "  queueName: jobs\n  priorityClassName: training\n"
        "  priorityClassSource: kueue.x-k8s.io/workloadpriorityclass\n",
    )


async def test_a_workload_inside_its_minimum_runtime_is_spared(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    # low-2, the most recently admitted, is Kueue's first candidate; it tolerates the gang
    text = CLUSTER + TRAINING
    text += ADMITTED.format(name="low-1", minute=0, priority=100, cpus=4)
    text += with_training_class(ADMITTED.format(name="low-2", minute=10, priority=100, cpus=4))
    gang_arrives(scenario_dir, text)
    services.start()
    evs = await admitted(nc, topology, GANG)
    assert_saga(saga_of(evs, GANG))
    (proposal,) = of(evs, events.PlanProposed, preemptor=GANG)
    assert [v.object for v in proposal.victims] == ["Workload/ml/low-1"]
    stats = await sim_stats(nc, topology)
    assert stats.evictions == {"Workload/ml/low-1": 1}


async def test_a_preemption_held_back_by_a_minimum_runtime_goes_when_it_ends(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    """The ClusterQueue gives its workloads 4 s; low (admitted at start) is spared from
    the gang until it has run them, and no state change announces that: quota looks
    again when the window ends."""
    queue = CLUSTER.replace(
        "metadata: {name: research}",
        "metadata:\n  name: research\n  annotations:\n"
        '    preemption-toleration.scheduling.x-k8s.io/minimum-preemptable-priority: "5000"\n'
        '    preemption-toleration.scheduling.x-k8s.io/toleration-seconds: "4"',
    )
    text = queue + ADMITTED.format(name="high", minute=0, priority=2000, cpus=4)
    text += "---\n" + PENDING.format(name="low", minute=0, priority=100, cpus=4)
    gang_arrives(scenario_dir, text, at=1.0, minute=1)
    services.start()
    evs = await admitted(nc, topology, GANG)
    (low_in,) = of(evs, events.Admitted, workload="Workload/ml/low")
    (requested,) = of(evs, events.PreemptionRequested, workload=GANG)
    (proposal,) = of(evs, events.PlanProposed, preemptor=GANG)
    assert [v.object for v in proposal.victims] == ["Workload/ml/low"]
    assert (requested.occurred_at - low_in.occurred_at).total_seconds() >= 4.0
