"""Which gated pods go to which node (``planning.gating``): a Kueue pod set's planned
nodes, less those its other pods hold, in pod name order; an admission's placement, for
the pods still gated; and the gated pods past the bound."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gangpreempt.model.checks import GATE
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import Node, Pod
from gangpreempt.model.scheduling import SchedulingConstraints
from gangpreempt.planning.gating import HOSTNAME, hostname, overdue, placed, planned_assignments

pytestmark = pytest.mark.unit
NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
PLANNED = ("n1", "n1", "n2")


def pod(
    name: str,
    *,
    gated: bool = True,
    node: str = "",
    selector: str = "",
    ps: str = "main",
    wl: str = "ns/train",
    planned: tuple[str, ...] = PLANNED,
    age_s: float = 0,
) -> Pod:
    return Pod(
        namespace="ns",
        name=name,
        requests={"cpu": 1000},
        node_name=node,
        labels={"kueue.x-k8s.io/podset": ps},
        kueue_workload=wl,
        gates=(GATE,) if gated else (),
        planned_nodes=planned,
        scheduling=SchedulingConstraints(node_selector={HOSTNAME: selector} if selector else {}),
        created=NOW - timedelta(seconds=age_s),
    )


def state(*pods: Pod) -> ClusterState:
    s = ClusterState()
    for name in ("n1", "n2"):
        s.nodes[name] = Node(
            name=name, allocatable={"cpu": 8000}, labels={HOSTNAME: f"host-{name}"}
        )
    for p in pods:
        s.pods[p.key] = p
    return s


def test_each_gated_pod_gets_one_of_its_pod_sets_planned_nodes_in_name_order() -> None:
    s = state(pod("b"), pod("a"), pod("c"))
    assert planned_assignments(s) == {"ns/a": "n1", "ns/b": "n1", "ns/c": "n2"}


def test_nodes_other_pods_of_the_set_hold_are_not_given_again() -> None:
    """One pod is bound on n1, one narrowed to n2 (by hostname) and not bound yet: the
    one gated pod left gets the other n1; a pod of another pod set counts for nothing."""
    s = state(
        pod("a", gated=False, node="n1"),
        pod("b", gated=False, selector="host-n2"),
        pod("c"),
        pod("x", gated=False, node="n1", ps="other"),
    )
    assert planned_assignments(s) == {"ns/c": "n1"}


def test_more_gated_pods_than_planned_nodes_leave_the_rest_gated() -> None:
    s = state(pod("a"), pod("b"), pod("c"), pod("d"))
    assert sorted(planned_assignments(s)) == ["ns/a", "ns/b", "ns/c"]


def test_pods_without_planned_nodes_or_without_the_gate_are_not_assigned() -> None:
    s = state(pod("a", planned=()), pod("b", gated=False))
    assert planned_assignments(s) == {}


def test_an_admissions_placement_lifts_only_gated_pending_pods() -> None:
    s = state(pod("a"), pod("b", gated=False), pod("c", node="n2"))
    placement = {"Pod/ns/a": "n1", "Pod/ns/b": "n1", "Pod/ns/c": "n2", "Pod/ns/gone": "n2"}
    assert placed(s, placement) == {"ns/a": "n1"}
    assert hostname(s, "n1") == "host-n1"
    assert hostname(s, "unknown") == "unknown"


def test_gated_pods_past_the_bound_are_overdue() -> None:
    s = state(pod("old", age_s=700), pod("young", age_s=10), pod("bound", age_s=700, node="n1"))
    assert overdue(s, NOW, 600) == ["ns/old"]
