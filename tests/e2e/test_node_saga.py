"""The saga for gangs on nodes, end to end: the four services as OS processes over a
real nats-server, the sim cluster binding and deleting pods."""

from __future__ import annotations

from pathlib import Path

import pytest
from nats.aio.client import Client

from gangpreempt import events
from gangpreempt.bus import Topology
from tests.e2e.harness import (
    Services,
    assert_saga,
    of,
    quiet,
    read_stream,
    saga_of,
    sim_stats,
    wait_for,
)
from tests.e2e.scenarios import gpu_cluster, kueue_gpu_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]
TRAIN = "PodGroup/ml/train"


def bound(evs: list[events.Event]) -> bool:
    return any(e.placement for e in of(evs, events.Admitted, workload=TRAIN))


async def test_gang_preempts_a_whole_gang_then_is_bound(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    gpu_cluster(scenario_dir)
    services.start(extra={"GANGPREEMPT_POD_EVICTION": "soft-eviction"})
    evs = await wait_for(nc, topology, bound, what="the training gang bound to nodes")
    assert_saga(saga_of(evs, TRAIN))
    (proposal,) = of(evs, events.PlanProposed, preemptor=TRAIN)
    assert [(v.object, v.pods) for v in proposal.victims] == [
        ("PodGroup/ml/scavenger", ("Pod/ml/scavenger-0", "Pod/ml/scavenger-1"))
    ]
    assert proposal.placement == {"Pod/ml/train-0": "gpu-0", "Pod/ml/train-1": "gpu-1"}
    (actuated,) = of(evs, events.VictimActuated)
    assert actuated.victim == "PodGroup/ml/scavenger"
    stats = await sim_stats(nc, topology)
    assert stats.evictions == {"PodGroup/ml/scavenger": 1}
    (admitted,) = [e for e in of(evs, events.Admitted, workload=TRAIN) if e.placement]
    assert admitted.placement == proposal.placement
    # The victims' room was held until they were gone: the gang was bound after that.
    assert admitted.occurred_at > actuated.occurred_at
    # Soft eviction: each victim pod was labelled, then deleted by the (sim) operator.
    assert sorted(stats.soft_evicted) == ["Pod/ml/scavenger-0", "Pod/ml/scavenger-1"]
    state = [events.decode(m.data) for m in await read_stream(nc, topology.state_stream, ">")]
    deleted = {e.key for e in state if isinstance(e, events.ObjectDeleted) and e.kind == "Pod"}
    assert deleted == {"ml/scavenger-0", "ml/scavenger-1"}


async def test_gang_that_cannot_be_placed_preempts_nothing(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    gpu_cluster(scenario_dir, nodes=2, gang=3)  # three 8-GPU pods, two nodes
    services.start()
    evs = await wait_for(
        nc,
        topology,
        lambda e: bool(of(e, events.Pending, workload=TRAIN)),
        what="the training gang pending",
    )
    evs = await quiet(nc, topology, 1.0)  # and then nothing else happens
    assert not of(evs, events.PreemptionRequested)
    assert not of(evs, events.VictimActuated)
    (pending, *_) = of(evs, events.Pending, workload=TRAIN)
    assert "cannot be placed" in pending.message
    assert (await sim_stats(nc, topology)).evictions == {}


async def test_victim_pod_gone_before_actuation_drops_the_plan(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    # One victim pod is deleted just as the plan is proposed: the plan is stale.
    gpu_cluster(
        scenario_dir,
        extra_timeline=(
            "- when: {event: PlanProposed, preemptor: PodGroup/ml/train}\n"
            "  delete: Pod/ml/scavenger-1\n"
        ),
    )
    services.start()
    evs = await wait_for(
        nc,
        topology,
        lambda e: bool(of(e, events.PlanDropped) or of(e, events.PlanRejected)),
        what="the plan dropped or rejected",
    )
    stopped = of(evs, events.PlanDropped) + of(evs, events.PlanRejected)
    assert "scavenger-1" in stopped[0].reason
    assert (await sim_stats(nc, topology)).evictions.get("PodGroup/ml/scavenger", 0) <= 1
    first = min(e.occurred_at for e in stopped)
    assert not [v for v in of(evs, events.VictimActuated) if v.occurred_at < first]


RECREATED = """
apiVersion: v1
kind: Pod
metadata: {namespace: ml, name: scavenger-0, labels: {scheduling.x-k8s.io/pod-group: scavenger}}
spec:
  priorityClassName: low
  containers: [{name: c, resources: {requests: {cpu: "8", nvidia.com/gpu: "8"}}}]
"""


async def test_a_victim_recreated_under_its_name_does_not_hold_the_gang(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    """A controller re-creates a victim pod (same name, new uid, pending) as soon as the
    plan is actuated: the old pod is gone all the same, the gang is bound."""
    gpu_cluster(
        scenario_dir,
        extra_timeline=(
            "- when: {event: PlanActuated, preemptor: PodGroup/ml/train}\n  apply: recreated.yaml\n"
        ),
    )
    (scenario_dir / "recreated.yaml").write_text(RECREATED)
    services.start()
    evs = await wait_for(nc, topology, bound, what="the training gang bound to nodes")
    assert len(of(evs, events.PlanActuated)) == 1


async def test_a_kueue_workload_with_known_pods_gets_quota_and_nodes(
    nc: Client, topology: Topology, services: Services, scenario_dir: Path
) -> None:
    kueue_gpu_cluster(scenario_dir)
    services.start()
    train = "Workload/default/train"
    evs = await wait_for(
        nc,
        topology,
        lambda e: any(a.placement for a in of(e, events.Admitted, workload=train)),
        what="the Kueue workload admitted with its pods placed",
    )
    (proposal,) = of(evs, events.PlanProposed, preemptor=train)
    assert {(v.object, v.reason) for v in proposal.victims} == {
        ("Workload/default/low", "InClusterQueue"),
        ("Pod/default/scratch", "PreemptionByScheduler"),
    }
    stats = await sim_stats(nc, topology)
    assert stats.evictions == {"Workload/default/low": 1, "Pod/default/scratch": 1}
