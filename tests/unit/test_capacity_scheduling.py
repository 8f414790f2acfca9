"""scheduler-plugins CapacityScheduling's namespace rules, as properties over random
clusters: a namespace within its min never loses pods to a borrowing one, a quota is
reclaimed only from above its min, and a pod without a quota touches only pods without."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import ElasticQuota, Node, Pod, PodGroup
from gangpreempt.planning.decisions import PREEMPT
from gangpreempt.planning.nodeplan import NodePlanner
from gangpreempt.preemption.capacity import CapacityQuotas
from gangpreempt.preemption.jobquota import koordinator_quotas
from tests.builders import NOW

pytestmark = pytest.mark.unit
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
NAMESPACES = ("ns1", "ns2", "ns3", "free")  # "free" has no ElasticQuota


@st.composite
def clusters(draw: st.DrawFn, gangs: bool = False) -> tuple[ClusterState, str]:
    state = ClusterState()
    for i in range(draw(st.integers(min_value=1, max_value=3))):
        name = f"node-{i}"
        state.nodes[name] = Node(name, {"cpu": 4000, "memory": 2**34, "pods": 110})
    for ns in NAMESPACES[:3]:
        lo = draw(st.integers(min_value=0, max_value=6)) * 1000
        hi = lo + draw(st.integers(min_value=0, max_value=6)) * 1000
        state.elastic_quotas[f"{ns}/q"] = ElasticQuota(
            ns, "q", {"cpu": lo, "memory": 2**40}, {"cpu": hi, "memory": 2**41}
        )
    nodes = sorted(state.nodes)
    for j in range(draw(st.integers(min_value=2, max_value=12))):
        ns = draw(st.sampled_from(NAMESPACES))
        pod = Pod(
            namespace=ns,
            name=f"run-{j}",
            requests={"cpu": draw(st.sampled_from([500, 1000, 2000]))},
            node_name=draw(st.sampled_from(nodes)),
            priority=draw(st.integers(min_value=0, max_value=3)),
            start_time=NOW - timedelta(minutes=j + 1),
        )
        state.pods[pod.key] = pod
    ns = draw(st.sampled_from(NAMESPACES))
    size = draw(st.sampled_from([2, 3] if gangs else [1, 1, 2, 3]))  # a pod, or a gang
    cpu = draw(st.sampled_from([500, 1000, 2000, 4000] if size == 1 else [500, 1000, 2000]))
    priority = draw(st.integers(min_value=0, max_value=4))
    for k in range(size):
        pod = Pod(
            namespace=ns,
            name="in" if size == 1 else f"in-{k}",
            requests={"cpu": cpu},
            priority=priority,
            group="" if size == 1 else f"{ns}/in",
        )
        state.pods[pod.key] = pod
    if size == 1:
        return state, f"Pod/{ns}/in"
    state.pod_groups[f"{ns}/in"] = PodGroup(ns, "in", size)
    return state, f"PodGroup/{ns}/in"


@SETTINGS
@given(case=st.one_of(clusters(), clusters(gangs=True)))
def test_capacity_scheduling_namespace_rules(case: tuple[ClusterState, str]) -> None:
    """Lone pods as the plugin decides them, gangs by the same rules read per gang
    (``GangCapacity``): a protected namespace never loses pods to a borrowing one."""
    state, ref = case
    assert not koordinator_quotas(state)
    planner = NodePlanner(state, NOW)
    d = planner.decide(planner.resolve(ref))
    event(f"{ref.split('/')[0]} {d.outcome}")
    if d.outcome != PREEMPT:
        return
    gang = [p for p in state.pods.values() if p.pending]
    pre = gang[0]
    demand = {"cpu": sum(p.requests["cpu"] for p in gang)}
    quotas = CapacityQuotas(state)
    mine = quotas.quota(pre.namespace)
    borrowing = mine is not None and quotas.over_min_with(pre.namespace, demand, quotas.used)
    for v in d.victims:
        victim = state.pods[v.object.split("/", 1)[1]]
        if mine is None:
            # Without a quota: only lower-priority pods without one.
            assert quotas.quota(victim.namespace) is None, v.object
            assert (victim.priority or 0) < (pre.priority or 0), v.object
        elif borrowing:
            # Over its min: only lower-priority pods of its own namespace.
            assert victim.namespace == pre.namespace, v.object
            assert (victim.priority or 0) < (pre.priority or 0), v.object
        else:
            # Within its min: only pods of other quotas that are over their min.
            assert victim.namespace != pre.namespace, v.object
            assert quotas.quota(victim.namespace) is not None, v.object
            assert quotas.over_min(victim.namespace, quotas.used), v.object
    # The preemptor fits its quota and the shared mins once the victims are gone.
    if mine is not None:
        used = {k: dict(u) for k, u in quotas.used.items()}
        for v in d.victims:
            victim = state.pods[v.object.split("/", 1)[1]]
            if victim.namespace in used:
                used[victim.namespace]["cpu"] -= victim.requests["cpu"]
        assert not quotas.over_max_with(pre.namespace, demand, used)
        assert not quotas.aggregated_over_min_with(demand, used)
        if len(gang) > 1:
            # A gang reclaims from another namespace only down to its min.
            for ns, eq in quotas.by_ns.items():
                before, after = quotas.used[ns].get("cpu", 0), used[ns].get("cpu", 0)
                if ns != pre.namespace and before > eq.min["cpu"]:
                    assert after >= eq.min["cpu"], (ns, before, after)
