"""Kueue's topology-aware scheduling through the services: a gang that requires one rack
arrives on a full cluster of two racks; its plan takes the two workloads of one rack (not
Kueue's quota-only order, which would take one from each), and the admission carries the
topology assignment, which the simulated cluster records."""

from __future__ import annotations

from pathlib import Path

import pytest
from nats.aio.client import Client

from gangpreempt import events
from gangpreempt.bus import Topology
from tests.e2e.harness import SAGA, Services, admitted, assert_saga, of, saga_of
from tests.unit.test_tas_decisions import CLUSTER, FULL, RACKS, pending

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]
TRAIN = "Workload/ml/train"


async def test_a_required_rack_is_freed_whole_and_the_admission_carries_it(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    cluster = "---\n".join([CLUSTER.replace("QUOTA", "32"), *RACKS, *FULL])
    (scenario_dir / "cluster.yaml").write_text(cluster)
    (scenario_dir / "train.yaml").write_text(pending("train", 2))
    (scenario_dir / "timeline.yaml").write_text("- at: 0.5\n  apply: train.yaml\n")
    services.start()
    evs = await admitted(nc, topology, TRAIN)
    two_victims = [*SAGA[:3], "VictimActuated", *SAGA[3:]]
    assert_saga(saga_of(evs, TRAIN), two_victims)
    (proposal,) = of(evs, events.PlanProposed, preemptor=TRAIN)
    assert sorted(v.object for v in proposal.victims) == [
        "Workload/ml/low-a1",
        "Workload/ml/low-a2",
    ]
    (admission,) = of(evs, events.Admitted, workload=TRAIN)
    (pod_set,) = admission.pod_sets
    assert pod_set.topology_assignment is not None
    hosts = {d.values[-1]: d.count for d in pod_set.topology_assignment.domains}
    assert hosts == {"a1": 1, "a2": 1}
