"""Victims no rule could have chosen are refused before confirmation, whatever a
proposal says (a compromised victims service, a forged event): protected namespaces,
system-critical priorities, non-preemptible pods, node-level victims off the plan's
nodes, Kueue victims outside the preemptor's cohort tree."""

from __future__ import annotations

import pytest

from gangpreempt import events
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import PREEMPTIBLE_LABEL, Node, Pod
from gangpreempt.model.queues import PriorityClass
from gangpreempt.planning.inflight import PlanInFlight, rejection
from gangpreempt.planning.legitimacy import SYSTEM_CRITICAL, illegitimate, protected_namespaces
from gangpreempt.quota import Snapshot
from tests.builders import NOW, admitted, cluster_queue, pending, quota, state

pytestmark = pytest.mark.unit
GPU = "nvidia.com/gpu"


def cluster() -> ClusterState:
    st = ClusterState()
    for name in ("n1", "n2"):
        st.nodes[name] = Node(name, {GPU: 8, "pods": 110})
    return st


def put(st: ClusterState, pod: Pod) -> Pod:
    st.pods[pod.key] = pod
    return pod


def victim(pod: Pod) -> events.PlannedVictim:
    return events.PlannedVictim(
        object=pod.ref,
        uid="",
        resource_version="",
        reason="PreemptionByScheduler",
        cluster_queue="",
        priority=0,
        pods=(pod.ref,),
    )


PLACEMENT = {"Pod/team/big-0": "n1"}


def test_a_lower_pod_on_the_plans_node_may_be_taken() -> None:
    st = cluster()
    low = put(st, Pod("team", "low", {GPU: 8}, priority=1, node_name="n1"))
    assert illegitimate(st, [victim(low)], PLACEMENT) is None


def test_coredns_on_another_node_is_refused_for_every_reason_it_has() -> None:
    """The forged plan the security review confirmed: kube-system/coredns (priority
    2e9, on another node) as the only victim."""
    st = cluster()
    coredns = put(
        st,
        Pod(
            "kube-system",
            "coredns",
            {"cpu": 100},
            priority=SYSTEM_CRITICAL,
            priority_class_name="system-cluster-critical",
            node_name="n2",
        ),
    )
    reason = illegitimate(st, [victim(coredns)], PLACEMENT)
    assert reason is not None
    assert "protected namespace kube-system" in reason
    # with no protected namespace, its priority; with a lower one, its node
    reason = illegitimate(st, [victim(coredns)], PLACEMENT, protected=())
    assert reason is not None
    assert "system-critical" in reason
    plain = put(st, Pod("team", "elsewhere", {GPU: 8}, priority=1, node_name="n2"))
    reason = illegitimate(st, [victim(plain)], PLACEMENT, protected=())
    assert reason is not None
    assert "no pod on the plan's nodes (n1)" in reason


def test_a_system_critical_class_counts_without_a_resolved_priority() -> None:
    st = cluster()
    st.priority_classes["critical-infra"] = PriorityClass("critical-infra", SYSTEM_CRITICAL + 5)
    for name, klass in (("a", "system-node-critical"), ("b", "critical-infra")):
        pod = put(st, Pod("team", name, {GPU: 8}, priority_class_name=klass, node_name="n1"))
        reason = illegitimate(st, [victim(pod)], PLACEMENT)
        assert reason is not None
        assert "system-critical" in reason


def test_a_non_preemptible_pod_is_refused() -> None:
    st = cluster()
    pod = put(
        st,
        Pod(
            "team",
            "kept",
            {GPU: 8},
            priority=1,
            node_name="n1",
            labels={PREEMPTIBLE_LABEL: "false"},
        ),
    )
    reason = illegitimate(st, [victim(pod)], PLACEMENT)
    assert reason is not None
    assert PREEMPTIBLE_LABEL in reason


def test_a_gang_unit_needs_one_pod_on_the_plans_nodes_and_a_kueue_victim_none() -> None:
    st = cluster()
    here = put(st, Pod("team", "g-0", {GPU: 8}, priority=1, node_name="n1"))
    there = put(st, Pod("team", "g-1", {GPU: 8}, priority=1, node_name="n2"))
    unit = events.PlannedVictim(
        object="PodGroup/team/g",
        uid="",
        resource_version="",
        reason="PreemptionByScheduler",
        cluster_queue="",
        priority=1,
        pods=(here.ref, there.ref),
    )
    assert illegitimate(st, [unit], PLACEMENT) is None
    away = events.PlannedVictim(
        object="PodGroup/team/g",
        uid="",
        resource_version="",
        reason="PreemptionByScheduler",
        cluster_queue="",
        priority=1,
        pods=(there.ref,),
    )
    assert illegitimate(st, [away], PLACEMENT) is not None
    # A Kueue plan's Workload victim frees quota, wherever its pods run.
    quota_victim = events.PlannedVictim(
        object="Workload/team/w",
        uid="",
        resource_version="",
        reason="InClusterQueue",
        cluster_queue="q",
        priority=1,
        pods=(there.ref,),
    )
    assert illegitimate(st, [quota_victim], PLACEMENT, node_level=False) is None
    assert illegitimate(st, [quota_victim], PLACEMENT) is not None


def test_the_setting_lists_namespaces() -> None:
    assert protected_namespaces(" kube-system, ,gangpreempt,ops ") == (
        "kube-system",
        "gangpreempt",
        "ops",
    )


def test_a_kueue_victim_outside_the_preemptors_cohort_tree_is_refused() -> None:
    mine = cluster_queue("mine", {"default": {"cpu": quota(4000)}}, "co", within="LowerPriority")
    peer = cluster_queue("peer", {"default": {"cpu": quota(4000)}}, "co")
    other = cluster_queue("other", {"default": {"cpu": quota(4000)}}, "elsewhere")
    near = admitted("near", "peer", {"cpu": ("default", 1000)}, priority=1)
    far = admitted("far", "other", {"cpu": ("default", 1000)}, priority=1)
    st = state([mine, peer, other], [near, far])
    gang = pending("g", "mine", {"cpu": 1000}, priority=9)
    st.workloads[gang.key] = gang
    snapshot = Snapshot.build(st, NOW)

    def plan(*victims: str) -> PlanInFlight:
        return PlanInFlight("p", gang.key, "mine", {"main": {"cpu": "default"}}, victims)

    reason = rejection(snapshot, plan(far.key), "", {}, {})
    assert reason is not None
    assert "outside mine's cohort tree" in reason
    assert rejection(snapshot, plan(near.key), "", {}, {}) is None
