"""The forged-plan property (hypothesis): on random clusters, a plan whose victims come
from anywhere (any namespace, any priority, pods listed under any unit, any named rule,
any ClusterQueue claimed) is let through by quota's confirmation checks and the
actuator's validation only when every victim is in the legitimate set, which this file
states on its own, without the code under test:

- node level: each victim has a pod on the placement's nodes, and every pod it would
  evict is outside the protected namespaces, below system-critical priority, not
  labelled non-preemptible, preempted at a priority below the preemptor's (a gang's
  pods at their gang's: the lowest of its pods' here); the placed pods fit their nodes
  with exactly those pods gone;
- Kueue: each victim Workload is outside the protected namespaces, below
  system-critical priority, and in the preemptor's ClusterQueue with its
  ``withinClusterQueue`` policy satisfied, or in another ClusterQueue of its cohort with
  its ``reclaimWithinCohort`` policy satisfied."""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangpreempt import events
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.podindex import PodIndex
from gangpreempt.model.pods import PREEMPTIBLE_LABEL, Node, Pod, PodGroup
from gangpreempt.planning.legitimacy import ALLOWING_RULES, SYSTEM_CRITICAL
from services.quota.nodes import NodeBook
from tests.builders import T0, admitted, cluster_queue, pending, quota, state
from tests.validating import dropped_before_reading, proposal

pytestmark = pytest.mark.unit  # pure: no server (the attack suite keeps it beside the others)
GPU = "nvidia.com/gpu"
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PROTECTED = ("kube-system", "gangpreempt")
# drawn from with repeats, so that a good share of the plans is legitimate too
NAMESPACES = ("team", "team", "team", "other", "other", "kube-system", "gangpreempt")
PRIORITIES = (0, 10, 30, 44, 45, 46, 60, SYSTEM_CRITICAL)
PREEMPTOR_PRIORITY = 45
RULES = ("", "", "", "", *ALLOWING_RULES)


async def actuator_accepts(state: ClusterState, p: events.PlanProposed) -> bool:
    """The actuator's validation lets the confirmed plan through to its live read."""
    return await dropped_before_reading(state, p, PROTECTED) is None


# -- node level -------------------------------------------------------------------------


@st.composite
def node_worlds(draw: st.DrawFn) -> tuple[ClusterState, events.PlanProposed]:
    """2-4 nodes of 8 GPUs running lone pods and gangs of any namespace and priority,
    a pending gang team/pre (priority 45) of 1-2 pods, and a forged plan."""
    state = ClusterState()
    free: dict[str, int] = {}
    for i in range(draw(st.integers(2, 4))):
        state.nodes[f"n{i}"] = Node(f"n{i}", {GPU: 8, "pods": 110})
        free[f"n{i}"] = 8
    running: list[Pod] = []
    for u in range(draw(st.integers(1, 6))):
        ns = draw(st.sampled_from(NAMESPACES))
        size = draw(st.integers(1, 2))
        group = f"{ns}/g{u}" if size > 1 else ""
        if group:
            state.pod_groups[group] = PodGroup(ns, f"g{u}", size)
        for k in range(size):
            gpus = draw(st.sampled_from([2, 4, 8]))
            node = draw(st.sampled_from(sorted(state.nodes)))
            if free[node] < gpus:
                continue
            free[node] -= gpus
            labels = {PREEMPTIBLE_LABEL: "false"} if draw(st.integers(0, 7)) == 0 else {}
            pod = Pod(
                ns,
                f"u{u}-{k}",
                {GPU: gpus},
                labels=labels,
                node_name=node,
                priority=draw(st.sampled_from(PRIORITIES)),
                group=group,
            )
            state.pods[pod.key] = pod
            running.append(pod)
    n_pre = draw(st.integers(1, 2))
    gpus = draw(st.sampled_from([4, 8]))
    state.pod_groups["team/pre"] = PodGroup("team", "pre", n_pre)
    pre_pods = []
    for k in range(n_pre):
        pod = Pod("team", f"pre-{k}", {GPU: gpus}, priority=PREEMPTOR_PRIORITY, group="team/pre")
        state.pods[pod.key] = pod
        pre_pods.append(pod)
    placement = {p.ref: draw(st.sampled_from(sorted(state.nodes))) for p in pre_pods}
    victims: list[events.PlannedVictim] = []
    if running:
        for _ in range(draw(st.integers(1, 3))):
            listed = draw(
                st.lists(
                    st.sampled_from(running), min_size=1, max_size=3, unique_by=lambda p: p.key
                )
            )
            first = listed[0]
            ref = f"PodGroup/{first.group}" if first.group and draw(st.booleans()) else first.ref
            victims.append(
                events.PlannedVictim(
                    object=ref,
                    uid="",
                    resource_version="",
                    reason="PreemptionByScheduler",
                    cluster_queue="",
                    priority=draw(st.sampled_from((0, PREEMPTOR_PRIORITY - 1))),  # a lie
                    pods=tuple(p.ref for p in listed),
                    rule=draw(st.sampled_from(RULES)),
                )
            )
    return state, proposal("PodGroup/team/pre", victims, placement)


def _preempted_at(state: ClusterState, pod: Pod) -> int:
    """The priority a pod is preempted at, stated simply for this generator: its gang's
    (the lowest of its pods', no class anywhere), else its own."""
    if pod.group:
        return min(p.priority or 0 for p in state.pods.values() if p.group == pod.group)
    return pod.priority or 0


def legitimate_on_nodes(state: ClusterState, p: events.PlanProposed) -> bool:
    nodes = set(p.placement.values())
    gone: set[str] = set()
    for v in p.victims:
        pods = [state.pods[ref.removeprefix("Pod/")] for ref in v.pods]
        if not any(pod.node_name in nodes for pod in pods):
            return False
        for pod in pods:
            if pod.namespace in PROTECTED or (pod.priority or 0) >= SYSTEM_CRITICAL:
                return False
            if pod.labels.get(PREEMPTIBLE_LABEL) == "false":
                return False
            if _preempted_at(state, pod) >= PREEMPTOR_PRIORITY:
                return False
            gone.add(pod.key)
    for node in nodes:
        used = sum(
            pod.requests[GPU]
            for pod in state.pods.values()
            if pod.node_name == node and pod.key not in gone
        )
        placed = sum(
            state.pods[ref.removeprefix("Pod/")].requests[GPU]
            for ref, where in p.placement.items()
            if where == node
        )
        if used + placed > 8:
            return False
    return True


@SETTINGS
@given(node_worlds())
async def test_a_forged_node_plan_evicts_nothing_outside_the_legitimate_set(
    world: tuple[ClusterState, events.PlanProposed],
) -> None:
    state, p = world
    scanned = NodeBook().check(state, p, PROTECTED)
    assert NodeBook().check(state, p, PROTECTED, PodIndex(state)) == scanned  # same answer
    confirmed = scanned is None
    actuated = await actuator_accepts(state, p)
    legitimate = legitimate_on_nodes(state, p)
    if confirmed or actuated:
        assert legitimate, (confirmed, actuated, p.victims, p.placement)


# -- Kueue ------------------------------------------------------------------------------

WITHIN = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
RECLAIM = ("Never", "LowerPriority", "LowerOrNewerEqualPriority", "Any")


def _satisfies(policy: str, victim: int, victim_minute: int) -> bool:
    """Kueue's preemption policy for the preemptor (priority 45, queued at minute 30)."""
    if policy == "Any":
        return True
    if policy == "LowerPriority":
        return victim < PREEMPTOR_PRIORITY
    if policy == "LowerOrNewerEqualPriority":
        newer = victim == PREEMPTOR_PRIORITY and victim_minute > 30
        return victim < PREEMPTOR_PRIORITY or newer
    return False


@st.composite
def kueue_worlds(draw: st.DrawFn) -> tuple[ClusterState, events.PlanProposed]:
    """ClusterQueues a and b in cohort co1, c in co2, with random policies; admitted
    Workloads of any namespace, queue and priority; the preemptor team/pre pending in a;
    a forged plan naming any of them and any ClusterQueue."""
    within = draw(st.sampled_from(WITHIN))
    reclaim = draw(st.sampled_from(RECLAIM))
    queues = [
        cluster_queue("a", {"default": {GPU: quota(8)}}, "co1", within=within, reclaim=reclaim),
        cluster_queue("b", {"default": {GPU: quota(8)}}, "co1"),
        cluster_queue("c", {"default": {GPU: quota(8)}}, "co2"),
    ]
    workloads = []
    for i in range(draw(st.integers(1, 6))):
        workloads.append(
            admitted(
                f"w{i}",
                draw(st.sampled_from("abc")),
                {GPU: ("default", 2)},
                draw(st.sampled_from(PRIORITIES)),
                at=draw(st.sampled_from([0, 30, 40])),
                namespace=draw(st.sampled_from(NAMESPACES)),
            )
        )
    pre = pending("pre", "a", {GPU: 8}, PREEMPTOR_PRIORITY, at=30, namespace="team")
    world = state(queues, [*workloads, pre])
    for ns in set(NAMESPACES):  # every namespace reaches the three queues
        for q in "abc":
            world.local_queues[f"{ns}/{q}"] = world.local_queues[f"default/{q}"]
    chosen = draw(
        st.lists(st.sampled_from(workloads), min_size=1, max_size=3, unique_by=lambda w: w.key)
    )
    victims = [
        events.PlannedVictim(
            object=f"Workload/{wl.key}",
            uid=wl.uid,
            resource_version="",
            reason=draw(st.sampled_from(["InClusterQueue", "InCohortReclamation"])),
            cluster_queue=draw(st.sampled_from("abc")),
            priority=0,  # a lie
            rule=draw(st.sampled_from(RULES)),
        )
        for wl in chosen
    ]
    claimed = draw(st.sampled_from(["a", "a", "a", "a", "b", "c"]))
    return world, proposal("Workload/team/pre", victims, {}, claimed, ("main",))


def legitimate_in_kueue(state: ClusterState, p: events.PlanProposed) -> bool:
    a = state.cluster_queues["a"].preemption
    for v in p.victims:
        wl = state.workloads[v.object.removeprefix("Workload/")]
        assert wl.admission is not None
        where, prio = wl.admission.cluster_queue, wl.priority or 0
        minute = int((wl.creation_timestamp - T0) / timedelta(minutes=1))
        if wl.namespace in PROTECTED or prio >= SYSTEM_CRITICAL:
            return False
        if where == "a":
            allowed = _satisfies(a.within_cluster_queue, prio, minute)
        elif where == "b":
            allowed = _satisfies(a.reclaim_within_cohort, prio, minute)
        else:
            allowed = False  # another cohort tree
        if not allowed:
            return False
    return True


@SETTINGS
@given(kueue_worlds())
async def test_a_forged_kueue_plan_evicts_nothing_outside_the_legitimate_set(
    world: tuple[ClusterState, events.PlanProposed],
) -> None:
    state, p = world
    scanned = NodeBook().check_kueue(state, p, PROTECTED)
    assert NodeBook().check_kueue(state, p, PROTECTED, PodIndex(state)) == scanned
    confirmed = scanned is None
    actuated = await actuator_accepts(state, p)
    if confirmed or actuated:
        assert legitimate_in_kueue(state, p), (confirmed, actuated, p)


@SETTINGS
@given(kueue_worlds())
async def test_a_legitimate_kueue_plan_is_let_through(
    world: tuple[ClusterState, events.PlanProposed],
) -> None:
    """The converse, so that refusing everything cannot pass: a plan of legitimate
    victims that names its own ClusterQueue and no rule (or the right one) goes through."""
    state, p = world
    if p.cluster_queue != "a" or not legitimate_in_kueue(state, p):
        return
    unnamed = unnamed_rules(p)
    assert NodeBook().check_kueue(state, unnamed, PROTECTED) is None
    assert await actuator_accepts(state, unnamed)


@SETTINGS
@given(node_worlds())
async def test_a_legitimate_node_plan_is_let_through(
    world: tuple[ClusterState, events.PlanProposed],
) -> None:
    state, p = world
    if not p.victims or not legitimate_on_nodes(state, p):
        return
    unnamed = unnamed_rules(p)
    assert NodeBook().check(state, unnamed, PROTECTED) is None
    assert await actuator_accepts(state, unnamed)


def unnamed_rules(p: events.PlanProposed) -> events.PlanProposed:
    """The plan with no rule named for its victims (the checkers derive it)."""
    victims = [msgspec.structs.replace(v, rule="") for v in p.victims]
    return msgspec.structs.replace(p, victims=tuple(victims))
