"""Which STATE changes are a preemptor's arrival, the changes that start quota's
admission cycle at once (``services/quota/arrivals.py``)."""

from __future__ import annotations

import msgspec

from gangpreempt.model.pods import Node, Pod, PodGroup
from services.quota.arrivals import arrival_of
from tests.builders import admitted, pending

WAITING = pending("w", "q", {"cpu": 1}, namespace="ml")
RUNNING = admitted("w", "q", {"cpu": ("default", 1)}, namespace="ml")
LONE = Pod("ml", "p", {"cpu": 1})
MEMBER = Pod("ml", "m-0", {"cpu": 1}, group="ml/g")


def test_a_new_or_requeued_pending_workload_arrives() -> None:
    assert arrival_of("Workload", None, WAITING) == "Workload/ml/w"
    assert arrival_of("Workload", RUNNING, WAITING) == "Workload/ml/w"  # evicted, requeued


def test_a_workload_that_stays_pending_or_is_admitted_does_not() -> None:
    assert arrival_of("Workload", WAITING, WAITING) is None
    assert arrival_of("Workload", WAITING, RUNNING) is None
    assert arrival_of("Workload", None, RUNNING) is None
    assert arrival_of("Workload", WAITING, None) is None


def test_a_pending_pod_arrives_as_itself_or_as_its_gang() -> None:
    assert arrival_of("Pod", None, LONE) == "Pod/ml/p"
    assert arrival_of("Pod", None, MEMBER) == "PodGroup/ml/g"
    bound = msgspec.structs.replace(LONE, node_name="n1")
    assert arrival_of("Pod", bound, msgspec.structs.replace(bound, node_name="")) == "Pod/ml/p"


def test_running_finishing_and_unchanged_pods_do_not_arrive() -> None:
    bound = msgspec.structs.replace(LONE, node_name="n1")
    assert arrival_of("Pod", None, bound) is None
    assert arrival_of("Pod", LONE, bound) is None
    assert arrival_of("Pod", LONE, LONE) is None
    assert arrival_of("Pod", bound, None) is None
    assert arrival_of("Pod", None, msgspec.structs.replace(LONE, terminating=True)) is None


def test_a_new_pod_group_arrives_and_other_kinds_do_not() -> None:
    group = PodGroup("ml", "g", 2)
    assert arrival_of("PodGroup", None, group) == "PodGroup/ml/g"
    assert arrival_of("PodGroup", group, group) is None
    assert arrival_of("Node", None, Node("n1", {"cpu": 8})) is None
