"""Victims no rule could have chosen are refused before confirmation, whatever a
proposal says (a compromised victims service, a forged event): protected namespaces,
system-critical priorities, non-preemptible pods, node-level victims off the plan's
nodes, Kueue victims outside the preemptor's cohort tree."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from gangpreempt import events
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import PREEMPTIBLE_LABEL, Node, Pod, PodGroup
from gangpreempt.model.queues import Cohort, PriorityClass
from gangpreempt.planning.legitimacy import (
    SYSTEM_CRITICAL,
    cohort_root,
    illegitimate,
    outside_cohort,
    protected_namespaces,
)
from services.actuator.driving import Driver
from tests.builders import admitted, cluster_queue, quota, state

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


def planned(ref: str, *pods: Pod) -> events.PlannedVictim:
    """A victim as a proposal names it: ``ref`` and the pods taken with it."""
    return events.PlannedVictim(
        object=ref,
        uid="",
        resource_version="",
        reason="PreemptionByScheduler",
        cluster_queue="",
        priority=0,
        pods=tuple(p.ref for p in pods),
    )


def victim(pod: Pod) -> events.PlannedVictim:
    return planned(pod.ref, pod)


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
    unit = planned("PodGroup/team/g", here, there)
    assert illegitimate(st, [unit], PLACEMENT) is None
    away = planned("PodGroup/team/g", there)
    assert illegitimate(st, [away], PLACEMENT) is not None
    # A Kueue plan's Workload victim frees quota, wherever its pods run.
    quota_victim = planned("Workload/team/w", there)
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
    own = admitted("own", "mine", {"cpu": ("default", 1000)}, priority=1)
    st = state([mine, peer, other], [near, far, own])

    def kueue_victim(key: str) -> events.PlannedVictim:
        return planned(f"Workload/{key}")

    reason = outside_cohort(st, "mine", [kueue_victim(near.key), kueue_victim(far.key)])
    assert reason is not None
    assert "ClusterQueue other, outside mine's cohort tree" in reason
    assert outside_cohort(st, "mine", [kueue_victim(near.key), kueue_victim(own.key)]) is None
    # a parent cohort joins two trees into one
    st.cohorts["co"] = Cohort("co", parent="top")
    st.cohorts["elsewhere"] = Cohort("elsewhere", parent="top")
    assert cohort_root(st, "other") == cohort_root(st, "mine") == "Cohort/top"
    assert outside_cohort(st, "mine", [kueue_victim(far.key)]) is None


class _Replica:
    def __init__(self, state: ClusterState) -> None:
        self.state = state

    async def wait_seq(self, seq: int) -> None:
        return None


class _Sink:
    async def read(self, refs: object) -> object:
        raise AssertionError("an illegitimate plan needs no live read: it is dropped first")


async def test_the_actuator_drops_a_confirmed_plan_with_an_illegitimate_victim() -> None:
    """Checked twice: a confirmed record (a compromised quota, a forged write) whose victim
    no rule could have chosen is dropped on the actuator's own replica, before any read
    or write to the cluster."""
    st = cluster()
    put(st, Pod("team", "big-0", {GPU: 8}, priority=9, group="team/big"))
    st.pod_groups["team/big"] = PodGroup("team", "big", 1)
    coredns = put(st, Pod("kube-system", "coredns", {"cpu": 100}, priority=1, node_name="n1"))
    proposal = events.PlanProposed(
        id="proposed-p",
        occurred_at=datetime.now(UTC),
        plan_id="p",
        request_id="r",
        preemptor="PodGroup/team/big",
        preemptor_uid="",
        cluster_queue="",
        pod_sets=(),
        flavors={},
        victims=(victim(coredns),),
        placement=dict(PLACEMENT),
    )
    driver = Driver(
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        _Replica(st),  # type: ignore[arg-type]
        _Sink(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        lambda: datetime.now(UTC),
        "actuator/test",
        "delete",
        10.0,
        ("kube-system",),
    )
    record = SimpleNamespace(proposal=proposal, updated_at=datetime.now(UTC))
    reason = await driver.validate(record)  # type: ignore[arg-type]
    assert reason is not None
    assert reason.startswith("illegitimate: victim Pod/kube-system/coredns")
