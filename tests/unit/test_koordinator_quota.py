"""Koordinator's ElasticQuota preemption on generated clusters with a quota tree: victims
only from the preemptor's own quota, never non-preemptible or at or above its priority,
and with them gone the job is within its quota's runtime, its ancestors' runtimes and,
when non-preemptible, its min."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import (
    PREEMPTIBLE_LABEL,
    QUOTA_NAME_LABEL,
    ElasticQuota,
    Node,
    Pod,
    PodGroup,
)
from gangpreempt.planning.decisions import ADMIT, PREEMPT
from gangpreempt.planning.nodeplan import NodePlanner
from gangpreempt.quota.elastictree import QuotaTree
from tests.builders import NOW

pytestmark = pytest.mark.unit
GPU = "nvidia.com/gpu"
PRIORITY = 45


@st.composite
def clusters(draw: st.DrawFn) -> tuple[ClusterState, str, str]:
    """A parent quota over two children and one quota at the root, running pods in the
    leaves at priorities 0-60 (some non-preemptible), a pending job (a pod or a gang) in
    one leaf."""
    state = ClusterState()
    n_nodes = draw(st.integers(2, 4))
    free: dict[str, int] = {}
    for i in range(n_nodes):
        state.nodes[f"n{i}"] = Node(f"n{i}", {GPU: 8, "pods": 110})
        free[f"n{i}"] = 8
    top = draw(st.integers(8, 8 * n_nodes + 8))
    state.elastic_quotas["k/parent"] = ElasticQuota(
        "k", "parent", {GPU: draw(st.integers(0, top))}, {GPU: top}, is_parent=True
    )
    leaves = {"a": "parent", "b": "parent", "c": ""}
    for leaf, parent in leaves.items():
        hi = draw(st.integers(4, top if parent else 8 * n_nodes))
        state.elastic_quotas[f"k/{leaf}"] = ElasticQuota(
            "k", leaf, {GPU: draw(st.integers(0, hi))}, {GPU: hi}, parent=parent
        )
    for u in range(draw(st.integers(3, 12))):
        gpus = draw(st.sampled_from([1, 2, 4]))
        node = next((n for n in sorted(free) if free[n] >= gpus), None)
        if node is None:
            break
        free[node] -= gpus
        labels = {QUOTA_NAME_LABEL: draw(st.sampled_from(sorted(leaves)))}
        if draw(st.integers(0, 4)) == 0:
            labels[PREEMPTIBLE_LABEL] = "false"
        state.pods[f"k/r{u}"] = Pod(
            "k",
            f"r{u}",
            {GPU: gpus},
            labels=labels,
            node_name=node,
            priority=draw(st.sampled_from([0, 10, 30, 40, 60])),
            start_time=NOW - timedelta(minutes=u + 1),
        )
    home = draw(st.sampled_from(sorted(leaves)))
    labels = {QUOTA_NAME_LABEL: home}
    if draw(st.booleans()):
        labels[PREEMPTIBLE_LABEL] = "false"
    gpus = draw(st.sampled_from([1, 2, 4]))
    size = draw(st.integers(1, 2))
    group = "k/job" if size > 1 else ""
    if group:
        state.pod_groups[group] = PodGroup("k", "job", size)
    for k in range(size):
        state.pods[f"k/job-{k}"] = Pod(
            "k", f"job-{k}", {GPU: gpus}, labels=labels, priority=PRIORITY, group=group
        )
    return state, "PodGroup/k/job" if group else "Pod/k/job-0", home


def quota_holds(state: ClusterState, gone: set[str], home: str) -> bool:
    """Runtimes recomputed from the state (pending pods count in the request), then the
    job's quota and its parent checked with the victims gone and the job placed."""
    requests: dict[str, dict[str, int]] = {}
    used: dict[str, int] = {}
    np_used = 0
    job = sum(p.requests[GPU] for p in state.pods.values() if p.pending)
    np_job = any(
        p.labels.get(PREEMPTIBLE_LABEL) == "false" for p in state.pods.values() if p.pending
    )
    for pod in state.pods.values():
        name = pod.labels[QUOTA_NAME_LABEL]
        requests.setdefault(name, {GPU: 0})[GPU] += pod.requests[GPU]
        if pod.running and pod.ref not in gone:
            used[name] = used.get(name, 0) + pod.requests[GPU]
            if name == home and pod.labels.get(PREEMPTIBLE_LABEL) == "false":
                np_used += pod.requests[GPU]
    total = {GPU: 8 * len(state.nodes)}
    tree = QuotaTree(state.elastic_quotas.values(), requests, total)
    if used.get(home, 0) + job > tree.limit(home)[GPU]:
        return False
    if np_job and np_used + job > state.elastic_quotas[f"k/{home}"].min[GPU]:
        return False
    if home != "c":
        family = used.get("a", 0) + used.get("b", 0)
        if family + job > tree.limit("parent")[GPU]:
            return False
    return True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_koordinator_quota_tree_preemption(case: tuple[ClusterState, str, str]) -> None:
    state, ref, home = case
    planner = NodePlanner(state, NOW)
    d = planner.decide(planner.resolve(ref))
    event(d.outcome)
    gone = {p for v in d.victims for p in v.pods}
    for v in d.victims:
        assert v.priority < PRIORITY, v
        for pod_ref in v.pods:
            pod = state.pods[pod_ref.removeprefix("Pod/")]
            assert pod.labels[QUOTA_NAME_LABEL] == home, f"{pod_ref} is outside {home}"
            assert pod.labels.get(PREEMPTIBLE_LABEL) != "false"
    if d.outcome in (ADMIT, PREEMPT):
        assert quota_holds(state, gone, home), d.message
    else:
        assert not d.victims
    if d.outcome == PREEMPT:
        assert d.victims
