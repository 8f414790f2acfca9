"""A minimum runtime for Kueue Workloads (``quota.toleration``): the preemption-toleration
annotations of a workload's priority class, else of its ClusterQueue, spare it from
preemptors below the minimum for that many seconds after its quota was reserved."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangpreempt.manifests import load
from gangpreempt.model import ClusterQueue, ClusterState, Workload
from gangpreempt.model.queues import KueueConfiguration, WorkloadPriorityClass
from gangpreempt.model.workloads import WORKLOAD_PRIORITY_CLASS, PriorityClassRef
from gangpreempt.planning import plan
from gangpreempt.planning.explaining import TOLERATED, explain
from tests.builders import NOW, T0, admitted, cluster_queue, pending, quota, state

pytestmark = pytest.mark.unit

ADMITTED_AT = 0  # minutes after T0; NOW is T0 + 60 minutes


def with_class(wl: Workload, name: str) -> Workload:
    return msgspec.structs.replace(
        wl, priority=None, priority_class=PriorityClassRef(WORKLOAD_PRIORITY_CLASS, name)
    )


def cluster(
    *,
    minimum: int | None = 1000,
    seconds: int | None = 7200,
    on_queue: bool = False,
    within: str = "LowerPriority",
) -> tuple[ClusterState, ClusterQueue]:
    """One ClusterQueue full with a victim of class ``training`` (value 100), admitted
    an hour before NOW; the toleration on the class, or (``on_queue``) on the queue."""
    cq = cluster_queue("q", {"default": {"cpu": quota(4000)}}, within=within)
    if on_queue:
        cq = msgspec.structs.replace(
            cq, minimum_preemptable_priority=minimum, toleration_seconds=seconds
        )
    victim = with_class(admitted("v", "q", {"cpu": ("default", 4000)}, at=ADMITTED_AT), "training")
    st_ = state([cq], [victim])
    st_.workload_priority_classes["training"] = WorkloadPriorityClass(
        "training",
        100,
        minimum_preemptable_priority=None if on_queue else minimum,
        toleration_seconds=None if on_queue else seconds,
    )
    return st_, cq


def outcome(st_: ClusterState, priority: int, at: timedelta = timedelta(0)) -> str:
    st_.workloads["default/in"] = pending("in", "q", {"cpu": 4000}, priority)
    return plan(st_, NOW + at, workload="Workload/default/in").decisions[0].outcome


@pytest.mark.parametrize("on_queue", [False, True])
def test_inside_its_window_it_is_spared_from_preemptors_below_the_minimum(on_queue: bool) -> None:
    st_, _ = cluster(on_queue=on_queue)
    assert outcome(st_, 500) == "Pending"  # 500 < 1000, one hour into two
    assert outcome(st_, 1000) == "Preempt"  # the minimum itself may preempt
    assert outcome(st_, 500, at=timedelta(hours=1, seconds=1)) == "Preempt"  # window over


def test_the_minimum_defaults_to_the_class_value_plus_one() -> None:
    st_, _ = cluster(minimum=None)
    assert outcome(st_, 100 + 1) == "Preempt"
    st_, _ = cluster(minimum=None, within="LowerOrNewerEqualPriority")
    assert outcome(st_, 100) == "Pending"  # an equal, newer: Kueue would; the class does not


def test_seconds_zero_or_absent_tolerate_nothing_and_negative_for_good() -> None:
    for seconds in (0, None):
        st_, _ = cluster(seconds=seconds)
        assert outcome(st_, 500) == "Preempt"
    st_, _ = cluster(seconds=-1)
    assert outcome(st_, 500, at=timedelta(days=365)) == "Pending"


def test_the_class_policy_comes_before_the_queue_default() -> None:
    st_, cq = cluster(minimum=200, seconds=7200)  # the class lets 500 through
    st_.cluster_queues["q"] = msgspec.structs.replace(
        cq, minimum_preemptable_priority=1000, toleration_seconds=7200
    )
    assert outcome(st_, 500) == "Preempt"


@pytest.mark.parametrize("fair_sharing", [False, True])
def test_reclaim_any_and_fair_sharing_do_not_override_it(fair_sharing: bool) -> None:
    """Another ClusterQueue's borrower inside its window is not reclaimed either (its
    priority 900 is above the preemptor's: only ``reclaimWithinCohort: Any`` or fair
    sharing could take it)."""
    own = cluster_queue("q", {"default": {"cpu": quota(4000)}}, "co", reclaim="Any")
    other = cluster_queue("b", {"default": {"cpu": quota(0, borrowing=4000)}}, "co")
    victim = with_class(admitted("v", "b", {"cpu": ("default", 4000)}, 900), "training")
    st_ = state([own, other], [victim])
    st_.workload_priority_classes["training"] = WorkloadPriorityClass(
        "training", 900, minimum_preemptable_priority=1000, toleration_seconds=7200
    )
    st_.kueue_configurations["kueue"] = KueueConfiguration(fair_sharing=fair_sharing)
    assert outcome(st_, 500) == "Pending"
    assert outcome(st_, 500, at=timedelta(hours=2)) == "Preempt"


def test_explain_says_it_is_inside_its_minimum_runtime() -> None:
    st_, _ = cluster()
    st_.workloads["default/in"] = pending("in", "q", {"cpu": 4000}, 500)
    found = explain(st_, NOW, "Workload/default/in")
    verdicts = {v.object: v for v in found.others}
    assert verdicts["Workload/default/v"].rule == TOLERATED
    assert "minimum runtime" in verdicts["Workload/default/v"].why
    assert "2026-01-01T02:00:00" in verdicts["Workload/default/v"].why  # admitted T0, 2 h


MANIFESTS = """apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata:
  name: training
  annotations:
    preemption-toleration.scheduling.x-k8s.io/minimum-preemptable-priority: "1000"
    preemption-toleration.scheduling.x-k8s.io/toleration-seconds: "3600"
value: 100
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: q
  annotations:
    preemption-toleration.scheduling.x-k8s.io/minimum-preemptable-priority: "700"
    preemption-toleration.scheduling.x-k8s.io/toleration-seconds: "-1"
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: "4"}]}]
"""


def test_the_annotations_are_read_on_classes_and_queues(tmp_path: Path) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(MANIFESTS)
    st_ = load([str(path)], references=False).state
    wpc = st_.workload_priority_classes["training"]
    assert (wpc.minimum_preemptable_priority, wpc.toleration_seconds) == (1000, 3600)
    cq = st_.cluster_queues["q"]
    assert (cq.minimum_preemptable_priority, cq.toleration_seconds) == (700, -1)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(
        st.tuples(
            st.integers(0, 5),  # priority / 100
            st.integers(-1, 3),  # toleration hours (-1: for good, 0: none)
            st.integers(0, 9),  # minimum / 100
            st.integers(0, 119),  # admitted, minutes after T0
        ),
        min_size=1,
        max_size=6,
    ),
    st.integers(0, 9),  # preemptor priority / 100
    st.integers(1, 4),  # cpus it asks
)
def test_never_a_victim_inside_its_minimum_runtime(
    victims: list[tuple[int, int, int, int]], priority: int, cpus: int
) -> None:
    cq = cluster_queue("q", {"default": {"cpu": quota(4000)}}, within="LowerPriority")
    wls: list[Workload] = []
    st_ = state([cq])
    for i, (p, hours, minimum, at) in enumerate(victims):
        name = f"c{i}"
        st_.workload_priority_classes[name] = WorkloadPriorityClass(
            name,
            p * 100,
            minimum_preemptable_priority=minimum * 100,
            toleration_seconds=hours * 3600,
        )
        wls.append(with_class(admitted(f"v{i}", "q", {"cpu": ("default", 700)}, at=at), name))
    for wl in wls:
        st_.workloads[wl.key] = wl
    st_.workloads["default/in"] = pending("in", "q", {"cpu": cpus * 1000}, priority * 100)
    now = T0 + timedelta(hours=2)
    d = plan(st_, now, workload="Workload/default/in").decisions[0]
    by_ref = {wl.ref: (victims[i], wl) for i, wl in enumerate(wls)}
    for v in d.victims:
        (_p, hours, minimum, at), _wl = by_ref[v.object]
        started = T0 + timedelta(minutes=at)
        inside = hours < 0 or (hours > 0 and now < started + timedelta(hours=hours))
        assert not (inside and priority * 100 < minimum * 100), (v.object, victims, priority)


def test_explain_says_which_order_took_the_candidates() -> None:
    st_, _ = cluster(seconds=0)
    st_.workloads["default/in"] = pending("in", "q", {"cpu": 4000}, 500)
    assert explain(st_, NOW, "Workload/default/in").victim_cost == "kueue-order"
    found = explain(st_, NOW, "Workload/default/in", victim_cost="lost-gpu-hours")
    assert found.victim_cost == "lost-gpu-hours"
    assert [v.object for v in found.victims] == ["Workload/default/v"]


def test_quota_refuses_a_proposal_that_takes_a_victim_inside_its_minimum_runtime() -> None:
    from gangpreempt import events
    from gangpreempt.planning.legitimacy import MINIMUM_RUNTIME, illegitimate
    from tests.validating import proposal

    st_, _ = cluster()
    st_.workloads["default/in"] = pending("in", "q", {"cpu": 4000}, 500)
    victim = events.PlannedVictim(
        object="Workload/default/v",
        uid="",
        resource_version="",
        reason="InClusterQueue",
        cluster_queue="q",
        priority=0,
    )
    forged = proposal("Workload/default/in", (victim,), {}, "q")
    refused = illegitimate(st_, forged, now=NOW)
    assert refused is not None
    assert refused.rule == MINIMUM_RUNTIME
    assert illegitimate(st_, forged, now=NOW + timedelta(hours=2)) is None  # window over
    st_.workloads["default/in"] = pending("in", "q", {"cpu": 4000}, 1000)
    assert illegitimate(st_, forged, now=NOW) is None  # the minimum may preempt


def nodes_with_a_kueue_pod(seconds: int = 7200) -> ClusterState:
    """Two 8-GPU nodes: n0 runs the pod of Kueue Workload ``w`` (priority 10, class
    ``training``: a minimum runtime against preemptors below 2000, admitted at T0), n1 a
    plain pod of priority 20. The search prefers the lower-priority victim."""
    from gangpreempt.model.pods import Node, Pod

    gpu = "nvidia.com/gpu"
    cq = cluster_queue("q", {"default": {gpu: quota(8)}})
    wl = with_class(admitted("w", "q", {gpu: ("default", 8)}, at=0), "training")
    st_ = state([cq], [wl])
    st_.workload_priority_classes["training"] = WorkloadPriorityClass(
        "training", 10, minimum_preemptable_priority=2000, toleration_seconds=seconds
    )
    for i in range(2):
        st_.nodes[f"n{i}"] = Node(f"n{i}", {gpu: 8, "pods": 110})
    started = T0 + timedelta(minutes=1)
    st_.pods["default/kw"] = Pod(
        "default",
        "kw",
        {gpu: 8},
        priority=10,
        node_name="n0",
        start_time=started,
        scheduled_at=started,
        kueue_workload="default/w",
    )
    st_.pods["default/plain"] = Pod(
        "default",
        "plain",
        {gpu: 8},
        priority=20,
        node_name="n1",
        start_time=started,
        scheduled_at=started,
    )
    st_.pods["default/pre"] = Pod("default", "pre", {gpu: 8}, priority=1000)
    return st_


@pytest.mark.parametrize(
    ("seconds", "victim"), [(7200, "Pod/default/plain"), (0, "Workload/default/w")]
)
def test_on_the_nodes_a_kueue_workloads_pods_are_spared_inside_its_minimum_runtime(
    seconds: int, victim: str
) -> None:
    st_ = nodes_with_a_kueue_pod(seconds)
    (d,) = plan(st_, NOW, workload="Pod/default/pre").decisions
    assert d.outcome == "Preempt"
    assert [v.object for v in d.victims] == [victim]
    if seconds:  # explain says why the cheaper one is spared
        found = explain(st_, NOW, "Pod/default/pre")
        verdicts = {v.object: v for v in found.others}
        # the Workload's pods are one unit on the nodes, named by the Workload
        spared = verdicts["Workload/default/w"]
        assert spared.rule == TOLERATED
        assert "its Workload default/w is inside its minimum runtime" in spared.why


def test_quota_refuses_a_node_plan_taking_a_kueue_workloads_pod_inside_its_window() -> None:
    from gangpreempt import events
    from gangpreempt.planning.legitimacy import MINIMUM_RUNTIME, illegitimate
    from tests.validating import proposal

    st_ = nodes_with_a_kueue_pod()
    victim = events.PlannedVictim(
        object="Pod/default/kw",
        uid="",
        resource_version="",
        reason="Preempted",
        cluster_queue="",
        priority=10,
        pods=("Pod/default/kw",),
    )
    forged = proposal("Pod/default/pre", (victim,), {"Pod/default/pre": "n0"}, "")
    refused = illegitimate(st_, forged, node_level=True, now=NOW)
    assert refused is not None
    assert refused.rule == MINIMUM_RUNTIME
    assert "its Workload default/w" in refused
    assert illegitimate(st_, forged, node_level=True, now=NOW + timedelta(hours=2)) is None
    whole = msgspec.structs.replace(victim, object="Workload/default/w")
    forged = proposal("Pod/default/pre", (whole,), {"Pod/default/pre": "n0"}, "")
    refused = illegitimate(st_, forged, node_level=True, now=NOW)
    assert refused is not None
    assert refused.rule == MINIMUM_RUNTIME
