"""Invariants of the node-level decision, on generated clusters (hypothesis): never part
of a PodGroup unit, never a victim at or above the preemptor's priority or tolerating it,
with the victims gone every required pod of the gang is placed, every victim is needed
given the placement, and the binary search over priorities equals a brute-force search."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import (
    UNIT_GROUP,
    UNIT_POD,
    LabelSelector,
    Node,
    Pod,
    PodDisruptionBudget,
    PodGroup,
)
from gangpreempt.model.queues import PriorityClass
from gangpreempt.placement.cluster import pod_demand
from gangpreempt.planning.decisions import PREEMPT, Decision
from gangpreempt.planning.nodeplan import NodePlanner
from gangpreempt.preemption.single import search_single
from gangpreempt.preemption.units import tolerates
from tests.builders import NOW

pytestmark = pytest.mark.unit
GPU = "nvidia.com/gpu"
SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PREEMPTOR_PRIORITY = 45


@st.composite
def clusters(draw: st.DrawFn, gang: bool, pdb: bool = True) -> tuple[ClusterState, str]:
    """2-5 nodes of 8 GPUs, running lone pods and gangs (either preemption mode) at
    priorities 0-60 (some tolerating, some non-preemptible, some under a PDB), and one
    pending preemptor at priority 45: a lone pod, or a gang of identical pods."""
    state = ClusterState()
    state.priority_classes["tolerant"] = PriorityClass(
        "tolerant", 20, minimum_preemptable_priority=100, toleration_seconds=-1
    )
    n_nodes = draw(st.integers(2, 5))
    free = {}
    for i in range(n_nodes):
        name = f"n{i}"
        state.nodes[name] = Node(name, {GPU: 8, "pods": 110})
        free[name] = 8
    n_units = draw(st.integers(1, 7))
    for u in range(n_units):
        size = draw(st.integers(1, 3))
        prio = draw(st.sampled_from([0, 10, 20, 30, 40, 50, 60]))
        mode = draw(st.sampled_from([UNIT_GROUP, UNIT_POD]))
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        labels = {"app": draw(st.sampled_from(["a", "b"]))}
        if draw(st.integers(0, 9)) == 0:
            labels["quota.scheduling.koordinator.sh/preemptible"] = "false"
        pcn = "tolerant" if draw(st.integers(0, 9)) == 0 else ""
        group = f"default/g{u}" if size > 1 else ""
        placed = 0
        for k in range(size):
            node = next((n for n in sorted(free) if free[n] >= gpus), None)
            if node is None:
                break
            free[node] -= gpus
            name = f"u{u}-{k}"
            state.pods[f"default/{name}"] = Pod(
                namespace="default",
                name=name,
                requests={GPU: gpus},
                labels=labels,
                node_name=node,
                priority=prio if not pcn else 20,
                priority_class_name=pcn,
                start_time=NOW - timedelta(minutes=draw(st.integers(1, 50))),
                scheduled_at=NOW - timedelta(minutes=60),
                group=group,
            )
            placed += 1
        if group and placed:
            state.pod_groups[group] = PodGroup("default", f"g{u}", placed, preemption_mode=mode)
    if pdb and draw(st.booleans()):
        state.pdbs["default/pdb"] = PodDisruptionBudget(
            "default", "pdb", LabelSelector({"app": "a"}), draw(st.integers(0, 1))
        )
    gpus = draw(st.sampled_from([1, 2, 4, 8]))
    if not gang:
        state.pods["default/p"] = Pod("default", "p", {GPU: gpus}, priority=PREEMPTOR_PRIORITY)
        return state, "Pod/default/p"
    size = draw(st.integers(1, 3))
    state.pod_groups["default/pre"] = PodGroup("default", "pre", size)
    for k in range(size):
        state.pods[f"default/pre-{k}"] = Pod(
            "default", f"pre-{k}", {GPU: gpus}, priority=PREEMPTOR_PRIORITY, group="default/pre"
        )
    return state, "PodGroup/default/pre"


def decide(state: ClusterState, ref: str) -> tuple[NodePlanner, Decision]:
    planner = NodePlanner(state, NOW)
    return planner, planner.decide(planner.resolve(ref))


def check_common(state: ClusterState, planner: NodePlanner, d: Decision) -> None:
    victim_pods = {p for v in d.victims for p in v.pods}
    # never part of a PodGroup unit
    for key, group in state.pod_groups.items():
        if group.preemption_mode != UNIT_GROUP:
            continue
        members = {p.ref for p in state.pods.values() if p.group == key and p.running}
        taken = members & victim_pods
        assert not taken or taken == members, f"partial gang {key}: {sorted(taken)}"
    # never at or above the preemptor's priority, never tolerating, never non-preemptible
    for v in d.victims:
        assert v.priority < PREEMPTOR_PRIORITY, v
        for ref in v.pods:
            pod = state.pods[ref.removeprefix("Pod/")]
            assert pod.labels.get("quota.scheduling.koordinator.sh/preemptible") != "false"
            pc = state.priority_classes.get(pod.priority_class_name)
            assert not tolerates(pc, PREEMPTOR_PRIORITY, pod, NOW)
    if d.outcome != PREEMPT:
        assert not d.victims
        return
    # with the victims gone, the placement is valid
    used = {name: 0 for name in state.nodes}
    for pod in state.pods.values():
        if pod.running and pod.ref not in victim_pods:
            used[pod.node_name] += pod.requests.get(GPU, 0)
    for ref, node in d.placement.items():
        used[node] += state.pods[ref.removeprefix("Pod/")].requests[GPU]
    assert all(used[n] <= 8 for n in used), (used, d)
    # every required preemptor pod is placed
    pre = [p for p in state.pods.values() if p.pending]
    need = min(
        len(pre),
        max((g.min_count for k, g in state.pod_groups.items() if k == "default/pre"), default=1),
    )
    assert len(d.placement) >= need
    # every victim unit is needed: putting it back overflows a node of the placement
    for v in d.victims:
        back = dict(used)
        for ref in v.pods:
            pod = state.pods[ref.removeprefix("Pod/")]
            back[pod.node_name] += pod_demand(pod).get(GPU, 0)
        assert any(back[n] > 8 for n in back), f"{v.object} is not needed: {d.message}"


@SETTINGS
@given(clusters(gang=False))
def test_single_pod_invariants(case: tuple[ClusterState, str]) -> None:
    state, ref = case
    planner, d = decide(state, ref)
    check_common(state, planner, d)


@SETTINGS
@given(clusters(gang=True))
def test_gang_invariants(case: tuple[ClusterState, str]) -> None:
    state, ref = case
    planner, d = decide(state, ref)
    check_common(state, planner, d)


def exact_fit(free: dict[str, int], gpus: int, count: int) -> bool:
    """Identical pods: they fit when the nodes' room, in whole pods, adds up."""
    return sum(f // gpus for f in free.values() if f >= 0) >= count


@SETTINGS
@given(clusters(gang=True, pdb=False))
def test_priority_search_equals_brute_force(case: tuple[ClusterState, str]) -> None:
    """The highest victim priority the gang search ends with is the lowest any feasible
    victim set can have (brute force over every subset of candidate units). Without PDBs:
    PDB reprieval comes first by design (KEP-5710) and may keep a lower-priority unit."""
    state, ref = case
    planner, d = decide(state, ref)
    pre = [p for p in state.pods.values() if p.pending]
    gpus, count = pre[0].requests[GPU], len(pre)
    table = planner.table
    cands = table.candidates(PREEMPTOR_PRIORITY)
    base = {n: 8 - v.used.get(GPU, 0) for n, v in planner.cluster.by_name.items()}
    best: int | None = None
    if exact_fit(base, gpus, count):
        assert d.outcome == "Admit"
        return
    for r in range(1, len(cands) + 1):
        for subset in itertools.combinations(cands, r):
            free = dict(base)
            for unit in subset:
                for p in unit.pods:
                    free[p.node_name] += p.requests.get(GPU, 0)
            if exact_fit(free, gpus, count):
                top = max(u.priority for u in subset)
                best = top if best is None else min(best, top)
    if best is None:
        assert d.outcome == "Pending"
        assert not d.victims
        return
    assert d.outcome == PREEMPT
    assert max(v.priority for v in d.victims) == best, d.message


@SETTINGS
@given(clusters(gang=True, pdb=False))
def test_rescheduling_reprieve_equals_brute_force(case: tuple[ClusterState, str]) -> None:
    """kube-scheduler's reprieve with the gang scheduled again at each step (1.36), no
    binary search (``--no-priority-search``): the victims are the feasible set whose kept
    units are first in importance order (lexicographically), found by brute force over
    every subset of candidate units."""
    state, ref = case
    planner = NodePlanner(state, NOW, priority_search=False)
    planner.rescheduling = True
    d = planner.decide(planner.resolve(ref))
    pre = [p for p in state.pods.values() if p.pending]
    gpus, count = pre[0].requests[GPU], len(pre)
    cands = planner.table.candidates(PREEMPTOR_PRIORITY)  # most important first
    base = {n: 8 - v.used.get(GPU, 0) for n, v in planner.cluster.by_name.items()}
    if exact_fit(base, gpus, count):
        assert d.outcome == "Admit"
        return
    cleared = dict(base)
    for unit in cands:
        for p in unit.pods:
            cleared[p.node_name] += p.requests.get(GPU, 0)
    best: set[str] | None = None
    if exact_fit(cleared, gpus, count):
        # Kept (True) comes first in the product: the first feasible mask is the best.
        for mask in itertools.product((True, False), repeat=len(cands)):
            free = dict(base)
            for unit, kept in zip(cands, mask, strict=True):
                if not kept:
                    for p in unit.pods:
                        free[p.node_name] += p.requests.get(GPU, 0)
            if exact_fit(free, gpus, count):
                best = {u.ref for u, k in zip(cands, mask, strict=True) if not k}
                break
    if best is None:
        assert d.outcome == "Pending"
        assert not d.victims
        return
    assert d.outcome == PREEMPT
    assert {v.object for v in d.victims} == best, d.message


@SETTINGS
@given(clusters(gang=True, pdb=False))
def test_fixed_placement_reprieve_equals_brute_force(case: tuple[ClusterState, str]) -> None:
    """kube-scheduler 1.37's reprieve (the default) with ``--no-priority-search``: given
    the placement it chose, the victims are the set whose kept units are first in
    importance order among those that leave room for every placed pod on its node
    (brute force over every subset of candidate units)."""
    state, ref = case
    for columns in (True, False):  # the column path and the general one
        planner = NodePlanner(state, NOW, priority_search=False)
        planner.use_columns = columns
        check_fixed_placement(state, planner, planner.decide(planner.resolve(ref)))


def check_fixed_placement(state: ClusterState, planner: NodePlanner, d: Decision) -> None:
    if d.outcome != PREEMPT:
        return
    cands = planner.table.candidates(PREEMPTOR_PRIORITY)  # most important first
    base = {n: 8 - v.used.get(GPU, 0) for n, v in planner.cluster.by_name.items()}
    for pod_ref, node in d.placement.items():
        base[node] -= state.pods[pod_ref.removeprefix("Pod/")].requests[GPU]
    best: set[str] | None = None
    for mask in itertools.product((True, False), repeat=len(cands)):  # kept first
        free = dict(base)
        for unit, kept in zip(cands, mask, strict=True):
            if not kept:
                for p in unit.pods:
                    free[p.node_name] += p.requests.get(GPU, 0)
        if all(v >= 0 for v in free.values()):
            best = {u.ref for u, k in zip(cands, mask, strict=True) if not k}
            break
    assert best is not None
    assert {v.object for v in d.victims} == best, d.message


@SETTINGS
@given(clusters(gang=False, pdb=False), st.sampled_from([0, 10, 45, 70]))
def test_the_vectorized_dry_run_equals_the_node_by_node_walk(
    case: tuple[ClusterState, str], priority: int
) -> None:
    """``preemption.dryrun`` gives the node and the victims kube-scheduler's per-node
    walk gives, on every generated cluster without PDBs."""
    state, ref = case
    planner = NodePlanner(state, NOW)
    pod = state.pods[ref.removeprefix("Pod/")]
    args = (planner.cluster, planner.table, pod, priority, set())
    fast, fast_seen = search_single(*args, vectorized=True)
    slow, slow_seen = search_single(*args, vectorized=False)
    if slow is None:
        assert fast is None
    else:
        assert fast is not None
        assert (fast.node, [u.ref for u in fast.victims]) == (
            slow.node,
            [u.ref for u in slow.victims],
        )
    assert fast_seen == slow_seen
