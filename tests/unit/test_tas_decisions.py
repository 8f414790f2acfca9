"""Kueue's topology-aware scheduling in gangpreempt's decisions (``plan``'s core): a pod
set that requires a rack is admitted with its topology assignment, preempts within one
rack where quota alone would take victims across racks, preempts for room the quota
already has but the topology lacks (fragmentation), is NoFit when no rack could ever
hold it, and two admissions of one pass never get the same node."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from gangpreempt.manifests import load
from gangpreempt.planning.decisions import ADMIT, PENDING, PREEMPT, Decision
from gangpreempt.planning.explaining import explain, explanation_lines
from gangpreempt.planning.planning import plan

pytestmark = pytest.mark.unit
NOW = datetime(2026, 11, 28, tzinfo=UTC)
RACK, HOST = "example.com/rack", "kubernetes.io/hostname"

CLUSTER = f"""apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata: {{name: gpu-topology}}
spec:
  levels: [{{nodeLabel: {RACK}}}, {{nodeLabel: {HOST}}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: tas-gpu}}
spec: {{nodeLabels: {{pool: gpu}}, topologyName: gpu-topology}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: team}}
spec:
  namespaceSelector: {{}}
  preemption: {{withinClusterQueue: LowerPriority}}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: tas-gpu
      resources: [{{name: nvidia.com/gpu, nominalQuota: QUOTA}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: q, namespace: ml}}
spec: {{clusterQueue: team}}
"""


def node(name: str, rack: str) -> str:
    return (
        f"apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n"
        f"  labels: {{pool: gpu, {RACK}: {rack}, {HOST}: {name}}}\n"
        'status:\n  allocatable: {nvidia.com/gpu: "8", pods: "110"}\n'
    )


def pod_set(count: int, annotation: str) -> str:
    notes = f"{{kueue.x-k8s.io/podset-required-topology: {annotation}}}" if annotation else "{}"
    return (
        f"  podSets:\n  - name: main\n    count: {count}\n    template:\n"
        f"      metadata:\n        annotations: {notes}\n"
        "      spec:\n        containers: [{name: c, resources: {requests: {nvidia.com/gpu: '8'}}}]\n"
    )


def running(name: str, priority: int, host: str, hour: int, annotation: str = HOST) -> str:
    at = f"2026-11-01T{hour:02d}:00:00Z"
    assignment = (
        "      topologyAssignment:\n"
        f"        levels: [{HOST}]\n"
        f"        slices: [{{domainCount: 1, valuesPerLevel: [{{universal: {host}}}], "
        "podCounts: {universal: 1}}]\n"
        if annotation
        else ""
    )
    return (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\n"
        f"metadata: {{name: {name}, namespace: ml}}\n"
        f"spec:\n  queueName: q\n  priority: {priority}\n{pod_set(1, annotation)}"
        "status:\n  conditions:\n"
        f"  - {{type: QuotaReserved, status: 'True', reason: QuotaReserved, lastTransitionTime: '{at}'}}\n"
        f"  - {{type: Admitted, status: 'True', reason: Admitted, lastTransitionTime: '{at}'}}\n"
        "  admission:\n    clusterQueue: team\n    podSetAssignments:\n"
        "    - name: main\n      count: 1\n      flavors: {nvidia.com/gpu: tas-gpu}\n"
        "      resourceUsage: {nvidia.com/gpu: '8'}\n" + assignment
    )


def pending(name: str, count: int, priority: int = 10, annotation: str = RACK) -> str:
    return (
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\n"
        f"metadata: {{name: {name}, namespace: ml}}\n"
        f"spec:\n  queueName: q\n  priority: {priority}\n{pod_set(count, annotation)}"
    )


RACKS = [node("a1", "r1"), node("a2", "r1"), node("b1", "r2"), node("b2", "r2")]


def decide(
    tmp_path: Path, *docs: str, quota: int = 32, topology: bool = True
) -> dict[str, Decision]:
    cluster = CLUSTER.replace("QUOTA", str(quota))
    if not topology:
        cluster = cluster.replace(", topologyName: gpu-topology", "")
    path = tmp_path / "cluster.yaml"
    path.write_text("---\n".join([cluster, *RACKS, *docs]))
    state = load([str(path)]).state
    return {d.preemptor.removeprefix("Workload/ml/"): d for d in plan(state, NOW).decisions}


def hosts(d: Decision) -> dict[str, int]:
    return {dom.values[-1]: dom.count for ta in d.topology.values() for dom in ta.domains}


FULL = (
    running("low-a1", 1, "a1", 1),
    running("low-a2", 1, "a2", 2),
    running("low-b1", 1, "b1", 3),
    running("mid-b2", 2, "b2", 4),
)


def test_a_required_rack_preempts_within_one_rack(tmp_path: Path) -> None:
    d = decide(tmp_path, *FULL, pending("train", 2))["train"]
    assert d.outcome == PREEMPT
    assert sorted(v.object for v in d.victims) == ["Workload/ml/low-a1", "Workload/ml/low-a2"]
    assert hosts(d) == {"a1": 1, "a2": 1}
    assert "topology: main: kubernetes.io/hostname a1 1, a2 1" in d.message


def test_without_topology_aware_scheduling_quota_takes_kueues_order_across_racks(
    tmp_path: Path,
) -> None:
    plain = [running(n, p, h, t, annotation="") for n, p, h, t in (
        ("low-a1", 1, "a1", 1), ("low-a2", 1, "a2", 2), ("low-b1", 1, "b1", 3), ("mid-b2", 2, "b2", 4)
    )]  # fmt: skip
    d = decide(tmp_path, *plain, pending("train", 2, annotation=""), topology=False)["train"]
    assert d.outcome == PREEMPT
    # the most recently admitted of the lowest priority first: b1 (03:00), then a2
    assert sorted(v.object for v in d.victims) == ["Workload/ml/low-a2", "Workload/ml/low-b1"]
    assert d.topology == {}


def test_a_free_rack_admits_with_its_assignment(tmp_path: Path) -> None:
    d = decide(tmp_path, running("low-a1", 1, "a1", 1), pending("train", 2))["train"]
    assert (d.outcome, d.mode) == (ADMIT, "Fit")
    assert hosts(d) == {"b1": 1, "b2": 1}  # r1 has one free node, r2 two


def test_quota_room_the_topology_lacks_is_made_by_preemption(tmp_path: Path) -> None:
    """Quota fits (32 of 48 used) but each rack has one free node: fragmentation."""
    docs = (running("low-a1", 1, "a1", 1), running("low-b1", 1, "b1", 2))
    d = decide(tmp_path, *docs, pending("train", 2), quota=48)["train"]
    assert (d.outcome, d.mode) == (PREEMPT, "Preempt")
    assert [v.object for v in d.victims] == ["Workload/ml/low-b1"]  # the most recent
    assert hosts(d) == {"b1": 1, "b2": 1}


def test_a_pod_set_no_rack_can_ever_hold_is_nofit(tmp_path: Path) -> None:
    d = decide(tmp_path, *FULL, pending("huge", 3))["huge"]
    assert (d.outcome, d.mode, d.victims) == (PENDING, "NoFit", [])
    assert 'topology "gpu-topology" allows to fit only 2 out of 3 pod(s)' in d.message


def test_two_admissions_of_one_pass_never_share_a_node(tmp_path: Path) -> None:
    got = decide(tmp_path, pending("first", 2, priority=20), pending("second", 2, priority=10))
    assert got["first"].outcome == ADMIT
    assert got["second"].outcome == ADMIT
    assert not set(hosts(got["first"])) & set(hosts(got["second"]))
    third = decide(
        tmp_path,
        pending("first", 2, priority=20),
        pending("second", 2, priority=10),
        pending("third", 1, priority=5),
    )
    assert third["third"].outcome == PENDING  # 32 of 32 GPUs taken by the pass


def test_in_a_queue_of_topology_flavors_a_plain_pod_set_is_implied_tas(tmp_path: Path) -> None:
    """No annotation: unconstrained at the hostname level, least free node first."""
    d = decide(tmp_path, running("low-a1", 1, "a1", 1), pending("plain", 3, annotation=""))
    assert d["plain"].outcome == ADMIT
    assert sum(hosts(d["plain"]).values()) == 3
    assert "a1" not in hosts(d["plain"])


def test_asking_for_a_topology_in_a_flavor_without_one_is_nofit_and_said(tmp_path: Path) -> None:
    got = decide(tmp_path, pending("train", 2), topology=False)["train"]
    assert (got.outcome, got.mode) == (PENDING, "NoFit")
    assert 'Flavor "tas-gpu" does not support TopologyAwareScheduling' in got.message


def test_explain_says_why_each_rack_was_or_was_not_chosen(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    lone = node("c1", "r3")  # a rack of one node can never hold two pods
    docs = [CLUSTER.replace("QUOTA", "32"), *RACKS, lone, *FULL, pending("train", 2)]
    path.write_text("---\n".join(docs))
    e = explain(load([str(path)]).state, NOW, "Workload/ml/train")
    by_rack = {line.split(f"{RACK}=")[1].split(" ")[0]: line for line in e.topology}
    assert set(by_rack) == {"r1", "r2", "r3"}
    assert "chosen: room for 2 pods (it needs 2) once the victims are gone" in by_rack["r1"]
    assert "Kueue's victim order made room elsewhere first" in by_rack["r2"]
    assert "it can never hold them all" in by_rack["r3"]
    assert any(line.startswith("  topology: pod set main") for line in explanation_lines(e))


def test_pending_for_want_of_a_domain_it_is_told_which_move_would_free_one(
    tmp_path: Path,
) -> None:
    """Each rack holds one protected workload (priority above the preemptor's) and has
    one free node; moving the one of r1 to r2's free node would free r1 (beyond Kueue)."""
    docs = (running("keep-a1", 50, "a1", 1), running("keep-b1", 50, "b1", 2))
    d = decide(tmp_path, *docs, pending("train", 2))["train"]
    assert d.outcome == PENDING
    assert d.victims == []
    assert (
        "moving Workload/ml/keep-a1 from example.com/rack=r1 to r2 would free "
        "example.com/rack=r1 for it (a suggestion: gangpreempt never moves a running "
        "workload)"
    ) in d.message
    room = decide(tmp_path, running("keep-a1", 50, "a1", 1), pending("train", 2))["train"]
    assert room.outcome == ADMIT
    assert "moving" not in room.message


def test_the_room_of_a_plan_in_flight_is_held_against_every_other_workload(
    tmp_path: Path,
) -> None:
    """``train``'s plan (in flight) is to take rack r1; ``other``, of higher priority
    and first in the pass, gets r2 while the hold stands, r1 (the first by path) without
    it; ``train`` itself is not blocked by its own hold."""
    from gangpreempt.model.topology import TopologyAssignment, TopologyDomain
    from gangpreempt.planning.planning import plan_on
    from gangpreempt.quota.snapshot import Snapshot

    path = tmp_path / "cluster.yaml"
    docs = [CLUSTER.replace("QUOTA", "32"), *RACKS, pending("train", 2), pending("other", 2, 30)]
    path.write_text("---\n".join(docs))
    state = load([str(path)]).state

    def hosts_of(holding: bool) -> dict[str, dict[str, int]]:
        snapshot = Snapshot.build(state, NOW)
        if holding:
            room = TopologyAssignment(
                (HOST,), (TopologyDomain(("a1",), 1), TopologyDomain(("a2",), 1))
            )
            flavors = {"main": {"nvidia.com/gpu": "tas-gpu"}}
            snapshot.topology_holds = [
                (state.workloads["ml/train"], flavors, {"main": room}, frozenset())
            ]
        got = plan_on(snapshot).decisions
        return {d.preemptor.removeprefix("Workload/ml/"): hosts(d) for d in got}

    assert hosts_of(holding=False)["other"] == {"a1": 1, "a2": 1}
    held = hosts_of(holding=True)
    assert held["other"] == {"b1": 1, "b2": 1}
    assert held["train"] == {"a1": 1, "a2": 1}
