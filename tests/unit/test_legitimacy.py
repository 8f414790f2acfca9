"""Victims no rule could have chosen are refused before confirmation, whatever a
proposal says (a compromised victims service, a forged event): protected namespaces,
system-critical priorities, non-preemptible pods, node-level victims off the plan's
nodes, Kueue victims outside the preemptor's cohort tree, victims of a priority no rule
lets the preemptor take; each refusal names its rule."""

from __future__ import annotations

import msgspec
import pytest

from gangpreempt import events
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import PREEMPTIBLE_LABEL, ElasticQuota, Node, Pod, PodGroup
from gangpreempt.model.queues import Cohort, KueueConfiguration, PriorityClass
from gangpreempt.model.workloads import Workload
from gangpreempt.planning.barrier import LiveObject, live_pods
from gangpreempt.planning.legitimacy import (
    SYSTEM_CRITICAL,
    Refusal,
    cohort_root,
    illegitimate,
    live_refusal,
    named_rules,
    outside_cohort,
    protected_namespaces,
)
from gangpreempt.planning.nodeconfirm import room_gap
from tests.builders import admitted, cluster_queue, pending, quota, state
from tests.validating import dropped_before_reading, proposal

pytestmark = pytest.mark.unit
GPU = "nvidia.com/gpu"


PREEMPTOR = "PodGroup/team/big"


def cluster() -> ClusterState:
    """Two 8-GPU nodes and a pending gang of one 8-GPU pod at priority 9 (PREEMPTOR)."""
    st = ClusterState()
    for name in ("n1", "n2"):
        st.nodes[name] = Node(name, {GPU: 8, "pods": 110})
    st.pods["team/big-0"] = Pod("team", "big-0", {GPU: 8}, priority=9, group="team/big")
    st.pod_groups["team/big"] = PodGroup("team", "big", 1)
    return st


def plan(
    *victims: events.PlannedVictim,
    placement: dict[str, str] | None = None,
    preemptor: str = PREEMPTOR,
    cluster_queue: str = "",
) -> events.PlanProposed:
    where = PLACEMENT if placement is None else placement
    return proposal(preemptor, victims, where, cluster_queue)


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
    assert illegitimate(st, plan(victim(low))) is None


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
    reason = illegitimate(st, plan(victim(coredns)))
    assert reason is not None
    assert "protected namespace kube-system" in reason
    # with no protected namespace, its priority; with a lower one, its node
    reason = illegitimate(st, plan(victim(coredns)), protected=())
    assert reason is not None
    assert "system-critical" in reason
    plain = put(st, Pod("team", "elsewhere", {GPU: 8}, priority=1, node_name="n2"))
    reason = illegitimate(st, plan(victim(plain)), protected=())
    assert reason is not None
    assert "no pod on the plan's nodes (n1)" in reason


def test_a_system_critical_class_counts_without_a_resolved_priority() -> None:
    st = cluster()
    st.priority_classes["critical-infra"] = PriorityClass("critical-infra", SYSTEM_CRITICAL + 5)
    for name, klass in (("a", "system-node-critical"), ("b", "critical-infra")):
        pod = put(st, Pod("team", name, {GPU: 8}, priority_class_name=klass, node_name="n1"))
        reason = illegitimate(st, plan(victim(pod)))
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
    reason = illegitimate(st, plan(victim(pod)))
    assert reason is not None
    assert PREEMPTIBLE_LABEL in reason


def test_a_gang_unit_needs_one_pod_on_the_plans_nodes() -> None:
    st = cluster()
    here = put(st, Pod("team", "g-0", {GPU: 8}, priority=1, node_name="n1", group="team/g"))
    there = put(st, Pod("team", "g-1", {GPU: 8}, priority=1, node_name="n2", group="team/g"))
    st.pod_groups["team/g"] = PodGroup("team", "g", 2)
    unit = planned("PodGroup/team/g", here, there)
    assert illegitimate(st, plan(unit)) is None
    away = planned("PodGroup/team/g", there)
    refused = illegitimate(st, plan(away))
    assert isinstance(refused, Refusal)
    assert refused.rule == "off-placement"


def test_a_kueue_victim_frees_quota_wherever_its_pods_run() -> None:
    """A Kueue plan's Workload victim is taken for quota: its pods may run anywhere; the
    same Workload as a node-level victim must have a pod on the plan's nodes."""
    mine = cluster_queue("mine", {"default": {GPU: quota(8)}}, within="LowerPriority")
    st = state([mine], [admitted("w", "mine", {GPU: ("default", 8)}, priority=1)])
    base = cluster()
    st.nodes, st.pods, st.pod_groups = base.nodes, base.pods, base.pod_groups
    st.workloads["default/big"] = pending("big", "mine", {GPU: 8}, priority=9)
    there = put(st, Pod("default", "w-0", {GPU: 8}, node_name="n2", kueue_workload="default/w"))
    quota_victim = planned("Workload/default/w", there)
    kueue_plan = plan(quota_victim, preemptor="Workload/default/big", cluster_queue="mine")
    assert illegitimate(st, kueue_plan, node_level=False) is None
    refused = illegitimate(st, plan(quota_victim))  # the gang's, at node level
    assert refused is not None
    assert refused.rule == "off-placement"


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


async def test_the_actuator_drops_a_confirmed_plan_with_an_illegitimate_victim() -> None:
    """Checked twice: a confirmed record (a compromised quota, a forged write) whose victim
    no rule could have chosen is dropped on the actuator's own replica, before any read
    or write to the cluster."""
    st = cluster()
    coredns = put(st, Pod("kube-system", "coredns", {"cpu": 100}, priority=1, node_name="n1"))
    proposal = plan(victim(coredns))
    reason = await dropped_before_reading(st, proposal, ("kube-system",))
    assert reason is not None
    assert reason.startswith("illegitimate: victim Pod/kube-system/coredns")


# -- the priority rules -------------------------------------------------------------------


def test_a_node_level_victim_needs_a_lower_priority_than_the_state_gives_it() -> None:
    """The proposal's own ``priority`` field is not believed: the state's decides."""
    st = cluster()
    low = put(st, Pod("team", "low", {GPU: 8}, priority=8, node_name="n1"))
    assert illegitimate(st, plan(victim(low))) is None
    equal = put(st, Pod("team", "equal", {GPU: 8}, priority=9, node_name="n1"))
    lying = msgspec.structs.replace(victim(equal), priority=0, rule="lower-priority")
    refused = illegitimate(st, plan(lying))
    assert isinstance(refused, Refusal)
    assert refused.rule == "priority"
    assert "priority 9" in refused


def test_a_gangs_preemption_priority_protects_its_low_priority_pods() -> None:
    """KEP-5710: a gang is preempted at its preemption class's value, not its pods'."""
    st = cluster()
    st.priority_classes["keep"] = PriorityClass("keep", 20)
    pod = put(st, Pod("team", "g-0", {GPU: 8}, priority=1, node_name="n1", group="team/g"))
    st.pod_groups["team/g"] = PodGroup("team", "g", 1, preemption_priority_class_name="keep")
    refused = illegitimate(st, plan(planned("PodGroup/team/g", pod)))
    assert refused is not None
    assert refused.rule == "priority"
    st.pod_groups["team/g"] = PodGroup("team", "g", 1)
    assert illegitimate(st, plan(planned("PodGroup/team/g", pod))) is None


def test_the_named_rule_must_hold() -> None:
    st = cluster()
    low = put(st, Pod("team", "low", {GPU: 8}, priority=1, node_name="n1"))
    named = msgspec.structs.replace(victim(low), rule="capacity-within-min")
    refused = illegitimate(st, plan(named))
    assert refused is not None
    assert refused.rule == "named-rule"
    assert "what holds: lower-priority" in refused


def kueue_cluster(
    within: str = "LowerPriority", reclaim: str = "Never", fair: bool = False
) -> ClusterState:
    """ClusterQueues mine and peer in cohort co; the preemptor default/big (priority 5,
    created at minute 30) waits in mine."""
    mine = cluster_queue("mine", {"default": {GPU: quota(8)}}, "co", within=within, reclaim=reclaim)
    peer = cluster_queue("peer", {"default": {GPU: quota(0, borrowing=8)}}, "co")
    st = state([mine, peer], [pending("big", "mine", {GPU: 8}, priority=5)])
    if fair:
        st.kueue_configurations["config"] = KueueConfiguration(fair_sharing=True)
    return st


def kueue_plan(st: ClusterState, wl: Workload, reason: str = "InClusterQueue") -> Refusal | None:
    st.workloads[wl.key] = wl
    v = msgspec.structs.replace(planned(f"Workload/{wl.key}"), reason=reason)
    return illegitimate(
        st, plan(v, placement={}, preemptor="Workload/default/big", cluster_queue="mine")
    )


@pytest.mark.parametrize(
    ("within", "priority", "minute", "allowed"),
    [
        ("LowerPriority", 4, 0, "lower-priority"),
        ("LowerPriority", 5, 40, None),
        ("LowerOrNewerEqualPriority", 5, 40, "newer-equal-priority"),
        ("LowerOrNewerEqualPriority", 5, 20, None),  # older: Kueue keeps it
        ("LowerOrNewerEqualPriority", 6, 40, None),
        ("Never", 1, 0, None),
    ],
)
def test_kueues_within_cluster_queue_policy(
    within: str, priority: int, minute: int, allowed: str | None
) -> None:
    st = kueue_cluster(within=within)
    wl = admitted("w", "mine", {GPU: ("default", 8)}, priority, at=minute)
    refused = kueue_plan(st, wl)
    if allowed is None:
        assert refused is not None
        assert refused.rule == "priority"
    else:
        assert refused is None
        rules = named_rules(st, "Workload/default/big", [planned(f"Workload/{wl.key}")])
        assert rules == {f"Workload/{wl.key}": allowed}


@pytest.mark.parametrize(
    ("reclaim", "priority", "fair", "reason", "allowed"),
    [
        ("Any", 50, False, "InCohortReclamation", "reclaim-within-cohort"),
        ("Any", 1, False, "InCohortReclamation", "lower-priority"),
        ("LowerPriority", 50, False, "InCohortReclamation", None),
        ("LowerPriority", 1, False, "InCohortReclaimWhileBorrowing", "lower-priority"),
        ("Never", 1, False, "InCohortReclamation", None),
        ("Any", 50, True, "InCohortFairSharing", "fair-sharing"),
        ("LowerPriority", 50, True, "InCohortFairSharing", None),  # Kueue's own filter
    ],
)
def test_kueues_reclaim_within_cohort_policy(
    reclaim: str, priority: int, fair: bool, reason: str, allowed: str | None
) -> None:
    st = kueue_cluster(reclaim=reclaim, fair=fair)
    wl = admitted("w", "peer", {GPU: ("default", 8)}, priority)
    refused = kueue_plan(st, wl, reason)
    if allowed is None:
        assert refused is not None
        assert refused.rule == "priority"
        return
    assert refused is None
    v = msgspec.structs.replace(planned(f"Workload/{wl.key}"), reason=reason)
    assert named_rules(st, "Workload/default/big", [v]) == {v.object: allowed}


def test_a_kueue_plan_naming_another_cluster_queue_is_refused() -> None:
    """A proposal that puts the preemptor in the victim's queue, where the policy is
    wider, is refused: the preemptor's queue is read from the state."""
    st = kueue_cluster(within="LowerPriority")
    wl = admitted("w", "peer", {GPU: ("default", 8)}, 1)
    st.workloads[wl.key] = wl
    forged = plan(
        planned(f"Workload/{wl.key}"),
        placement={},
        preemptor="Workload/default/big",
        cluster_queue="peer",
    )
    refused = illegitimate(st, forged)
    assert refused is not None
    assert refused.rule == "wrong-cluster-queue"


def capacity_cluster(team_min: int, other_used: int) -> ClusterState:
    """CapacityScheduling: namespaces team (min ``team_min`` GPUs) and other (min 4, using
    ``other_used`` on n2); a pending lone pod of team asks for 4 GPUs at priority 1."""
    st = ClusterState()
    for name in ("n1", "n2"):
        st.nodes[name] = Node(name, {GPU: 8, "pods": 110})
    st.elastic_quotas["team/q"] = ElasticQuota("team", "q", {GPU: team_min}, {GPU: 16})
    st.elastic_quotas["other/q"] = ElasticQuota("other", "q", {GPU: 4}, {GPU: 16})
    put(st, Pod("team", "pre", {GPU: 4}, priority=1))
    put(st, Pod("other", "high", {GPU: other_used}, priority=100, node_name="n2"))
    return st


def test_capacity_scheduling_reclaims_within_min_whatever_the_priority() -> None:
    st = capacity_cluster(team_min=8, other_used=8)
    high = st.pods["other/high"]
    assert illegitimate(st, plan(victim(high), preemptor="Pod/team/pre", placement={})) is None
    rules = named_rules(st, "Pod/team/pre", [victim(high)])
    assert rules == {"Pod/other/high": "capacity-within-min"}
    # over its own min, the preemptor takes only lower priorities of its namespace
    st = capacity_cluster(team_min=2, other_used=8)
    refused = illegitimate(st, plan(victim(high), preemptor="Pod/team/pre", placement={}))
    assert refused is not None
    assert refused.rule == "priority"
    # the other namespace within its own min keeps its pods
    st = capacity_cluster(team_min=8, other_used=4)
    high = st.pods["other/high"]
    refused = illegitimate(st, plan(victim(high), preemptor="Pod/team/pre", placement={}))
    assert refused is not None


def test_the_placement_must_fit_with_exactly_the_victims_gone() -> None:
    st = cluster()
    put(st, Pod("team", "a", {GPU: 4}, priority=1, node_name="n1"))
    b = put(st, Pod("team", "b", {GPU: 4}, priority=1, node_name="n1"))
    gap = room_gap(st, PLACEMENT, victim(b).pods)
    assert gap is not None
    assert f"{GPU} 8 > 4" in gap
    assert room_gap(st, PLACEMENT, ["Pod/team/a", "Pod/team/b"]) is None


def test_the_actuator_believes_the_source_not_the_published_state() -> None:
    """A lying ingest published the victim on the plan's node and below the preemptor:
    the live read (the API server) says where it runs and its priority, and the actuator
    refuses the plan on that."""
    st = cluster()
    st.pods["team/big-0"] = Pod("team", "big-0", {GPU: 8}, priority=9)  # a lone pod now
    low = put(st, Pod("team", "low", {GPU: 8}, priority=1, node_name="n1"))
    p = plan(victim(low), preemptor="Pod/team/big-0", placement={"Pod/team/big-0": "n1"})
    assert illegitimate(st, p) is None  # the published state allows it

    def live(node: str, priority: int) -> dict[str, LiveObject]:
        truth = Pod("team", "low", {GPU: 8}, priority=priority, node_name=node)
        return {
            "Pod/team/big-0": live_pods("Pod/team/big-0", [st.pods["team/big-0"]]),
            low.ref: live_pods(low.ref, [truth]),
        }

    assert live_refusal(p, live("n1", 1), node_level=True) is None
    moved = live_refusal(p, live("n2", 1), node_level=True)
    assert moved is not None
    assert moved.rule == "off-placement"
    assert "runs on n2" in moved
    higher = live_refusal(p, live("n1", 50), node_level=True)
    assert higher is not None
    assert higher.rule == "priority"
    assert "priority 50, not below Pod/team/big-0's 9" in higher
    # a victim named for another rule keeps it: its priority is not what allowed it
    reclaimed = plan(
        msgspec.structs.replace(victim(low), rule="capacity-within-min"),
        preemptor="Pod/team/big-0",
        placement={"Pod/team/big-0": "n1"},
    )
    assert live_refusal(reclaimed, live("n1", 50), node_level=True) is None


def test_a_victim_or_a_preemptor_the_state_does_not_hold_is_refused() -> None:
    """Nothing the checker cannot see is evicted, nor for a preemptor it cannot see."""
    st = cluster()
    ghost = Pod("team", "ghost", {GPU: 8}, priority=1, node_name="n1")  # never put
    refused = illegitimate(st, plan(victim(ghost)))
    assert isinstance(refused, Refusal)
    assert refused.rule == "unknown-victim"
    low = put(st, Pod("team", "low", {GPU: 8}, priority=1, node_name="n1"))
    refused = illegitimate(st, plan(victim(low), preemptor="PodGroup/team/nobody"))
    assert refused is not None
    assert refused.rule == "unknown-victim"
    assert "preemptor PodGroup/team/nobody" in refused
