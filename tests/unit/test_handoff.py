"""The hand-off to Kueue through gangpreempt's admission check, in the pure core: which
ClusterQueues are managed and with which policy, when a reserved Workload is still
gangpreempt's to decide, and what the check says for a cycle's decision."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from gangpreempt.errors import ManifestError
from gangpreempt.manifests import load
from gangpreempt.model.checks import (
    CONTROLLER_NAME,
    GATE,
    PLACEHOLDER_LABEL,
    PLANNED_NODES_ANNOTATION,
    PREEMPTION_ANNOTATION,
    WORKLOAD_LABEL,
)
from gangpreempt.model.cluster import ClusterState
from gangpreempt.planning import plan
from gangpreempt.planning.authority import (
    ADMISSION_CHECK,
    ALL,
    AUTHORITY_LABEL,
    decides_namespace,
    decides_workload,
)
from gangpreempt.planning.checking import BACKOFF_MAX_S, backoff_s, check_decided
from gangpreempt.planning.gating import planned_assignments
from services.quota.freed import FreedRoom

pytestmark = pytest.mark.unit
NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
V1B2 = "kueue.x-k8s.io/v1beta2"


def admission_check(name: str = "gangpreempt", controller: str = CONTROLLER_NAME) -> dict[str, Any]:
    return {
        "apiVersion": V1B2,
        "kind": "AdmissionCheck",
        "metadata": {"name": name},
        "spec": {"controllerName": controller},
    }


def cluster_queue(
    checks: tuple[str, ...] = ("gangpreempt",),
    stanza: dict[str, Any] | None = None,
    policy: dict[str, Any] | str | None = None,
    nominal: str = "8",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "cq"}
    if policy is not None:
        text = policy if isinstance(policy, str) else json.dumps(policy)
        meta["annotations"] = {PREEMPTION_ANNOTATION: text}
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu"],
                "flavors": [
                    {"name": "default", "resources": [{"name": "cpu", "nominalQuota": nominal}]}
                ],
            }
        ],
    }
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    if stanza is not None:
        spec["preemption"] = stanza
    return {"apiVersion": V1B2, "kind": "ClusterQueue", "metadata": meta, "spec": spec}


def queues(**cq: Any) -> list[dict[str, Any]]:
    return [
        admission_check(),
        {"apiVersion": V1B2, "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        cluster_queue(**cq),
        {
            "apiVersion": V1B2,
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": "ns"},
            "spec": {"clusterQueue": "cq"},
        },
    ]


def workload(
    name: str,
    cpus: int,
    priority: int,
    *,
    reserved: bool = False,
    admitted: bool = False,
    check: str | None = None,
    retries: int = 0,
    evicted: bool = False,
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if reserved or admitted:
        status["admission"] = {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {
                    "name": "main",
                    "flavors": {"cpu": "default"},
                    "resourceUsage": {"cpu": str(cpus)},
                    "count": 1,
                }
            ],
        }
        status["conditions"] = [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
            {"type": "Admitted", "status": "True" if admitted else "False", "reason": "x"},
        ]
        if evicted:
            status["conditions"].append(
                {"type": "Evicted", "status": "True", "reason": "Preempted"}
            )
    if check is not None:
        status["admissionChecks"] = [
            {"name": "gangpreempt", "state": check, "message": "", "retryCount": retries}
        ]
    return {
        "apiVersion": V1B2,
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": "7",
            "creationTimestamp": "2026-01-01T11:00:00Z",
        },
        "spec": {
            "queueName": "lq",
            "priority": priority,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "c", "resources": {"requests": {"cpu": str(cpus)}}}
                            ]
                        }
                    },
                }
            ],
        },
        "status": status,
    }


def read(objects: list[dict[str, Any]]) -> tuple[ClusterState, list[str]]:
    loaded = load([], objects, "test")
    assert not loaded.rejected, loaded.rejected
    return loaded.state, loaded.warnings


# -- reading ---------------------------------------------------------------------------------


def test_the_checks_a_queue_lists_are_read_in_both_api_shapes() -> None:
    v1b1 = cluster_queue(checks=())
    v1b1["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    v1b1["spec"]["admissionChecks"] = ["gangpreempt", "other"]
    state, _ = read(
        [admission_check(), admission_check("other", "kueue.x-k8s.io/provisioning-request"), v1b1]
    )
    cq = state.cluster_queues["cq"]
    assert cq.admission_checks == ("gangpreempt", "other")
    assert cq.managed_by == "gangpreempt"
    assert state.admission_checks["gangpreempt"].ours
    assert not state.admission_checks["other"].ours


def test_a_queue_whose_checks_are_anothers_is_not_managed() -> None:
    objects = queues()
    objects[0] = admission_check(controller="kueue.x-k8s.io/provisioning-request")
    state, _ = read([*objects, workload("w", 4, 10, reserved=True, check="Pending")])
    assert state.cluster_queues["cq"].managed_by == ""
    wl = state.workloads["ns/w"]
    assert wl.placement_check == ""
    assert wl.holds_quota
    assert not wl.awaits_placement


def test_the_annotation_is_the_policy_of_a_managed_queue() -> None:
    policy = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}
    state, warnings = read(queues(policy=policy))
    cq = state.cluster_queues["cq"]
    assert (cq.preemption.within_cluster_queue, cq.preemption.reclaim_within_cohort) == (
        "LowerPriority",
        "Any",
    )
    assert cq.conflict == ""
    assert warnings == []


def test_a_managed_queue_whose_stanza_lets_kueue_preempt_is_a_conflict() -> None:
    state, warnings = read(
        queues(
            stanza={"withinClusterQueue": "LowerPriority"},
            policy={"withinClusterQueue": "LowerPriority"},
        )
    )
    cq = state.cluster_queues["cq"]
    assert cq.conflict
    assert "spec.preemption" in cq.conflict
    assert cq.preemption.within_cluster_queue == "Never"  # gangpreempt stays out instead
    assert any(w.startswith("ClusterQueue cq:") for w in warnings)


def test_the_annotation_on_an_unmanaged_queue_is_ignored_with_a_warning() -> None:
    objects = queues(
        checks=(),
        stanza={"withinClusterQueue": "LowerPriority"},
        policy={"withinClusterQueue": "Never"},
    )
    state, warnings = read(objects)
    assert state.cluster_queues["cq"].preemption.within_cluster_queue == "LowerPriority"
    assert any(PREEMPTION_ANNOTATION in w and "ignored" in w for w in warnings)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{not json", "not JSON"),
        ("[1]", "JSON object"),
        ('{"withinClusterQueue": "Sometimes"}', "Sometimes"),
    ],
)
def test_a_bad_annotation_names_the_object_and_the_field(text: str, says: str) -> None:
    """An object read from a cluster is left out, named with its field (the others are
    read); the same in a file is an error at its line (``plan``)."""
    loaded = load([], queues(policy=text), "cluster")
    assert "cq" not in loaded.state.cluster_queues
    (message,) = loaded.rejected
    assert "ClusterQueue cq" in message
    assert PREEMPTION_ANNOTATION in message
    assert says in message


# -- whose decision a reserved workload is ---------------------------------------------------


@pytest.mark.parametrize(
    ("check", "evicted", "admitted", "awaits"),
    [
        (None, False, False, True),  # reserved, Kueue has not added the check yet
        ("Pending", False, False, True),
        ("Retry", False, False, True),
        ("Ready", False, False, False),
        # evicted, its reservation not released yet: one that ran is leaving and holds
        # its quota until it is gone; one never admitted is a reservation being undone
        # (a check's Retry): it holds nothing real and stays gangpreempt's to decide
        ("Pending", True, True, False),
        ("Pending", True, False, True),
    ],
)
def test_a_reservation_counts_only_once_the_check_is_ready(
    check: str | None, evicted: bool, admitted: bool, awaits: bool
) -> None:
    wl_obj = workload("w", 4, 10, reserved=True, admitted=admitted, check=check, evicted=evicted)
    state, _ = read([*queues(), wl_obj])
    wl = state.workloads["ns/w"]
    assert wl.placement_check == "gangpreempt"
    assert wl.awaits_placement is awaits
    assert wl.holds_quota is not awaits
    assert wl.is_pending is awaits


def test_authority_decides_only_the_managed() -> None:
    objects = [*queues(), workload("w", 4, 10)]
    objects += [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "on", "labels": {AUTHORITY_LABEL: "enabled"}},
        },
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "off"}},
    ]
    state, _ = read(objects)
    managed = state.workloads["ns/w"]
    unmanaged = type(managed)(namespace="ns", name="u", pod_sets=())
    assert decides_workload(managed, ADMISSION_CHECK)
    assert decides_workload(unmanaged, ALL)
    assert not decides_workload(unmanaged, ADMISSION_CHECK)
    assert decides_namespace(state, "on", ADMISSION_CHECK)
    assert not decides_namespace(state, "off", ADMISSION_CHECK)
    assert decides_namespace(state, "off", ALL)


# -- the check's next state ------------------------------------------------------------------


def decision_for(objects: list[dict[str, Any]], name: str) -> tuple[Any, Any, ClusterState]:
    state, _ = read(objects)
    decisions = {d.preemptor: d for d in plan(state, NOW).decisions}
    return decisions[f"Workload/ns/{name}"], state.workloads[f"ns/{name}"], state


def test_a_reserved_workload_that_fits_gets_ready() -> None:
    objects = [*queues(), workload("low", 4, 1, admitted=True, check="Ready")]
    objects.append(workload("w", 4, 10, reserved=True, check="Pending"))
    d, wl, state = decision_for(objects, "w")
    assert d.outcome == "Admit"
    ev = check_decided(state, d, wl, NOW, 10.0)
    assert (ev.state, ev.check, ev.workload, ev.uid) == (
        "Ready",
        "gangpreempt",
        "Workload/ns/w",
        "uid-w",
    )
    assert ev.requeue_after_s == 0
    assert "gangpreempt" in ev.message


def test_a_reservation_in_room_that_is_not_there_gets_retry_or_a_preemption() -> None:
    """Kueue reserved 8 for w while 4 are still taken (in gangpreempt's view): without a
    policy it cannot preempt (Retry, Kueue releases the reservation); with one, it
    preempts the lower-priority workload and the check stays Pending."""
    base = [
        workload("low", 4, 1, admitted=True, check="Ready"),
        workload("w", 8, 10, reserved=True, check="Pending", retries=2),
    ]
    d, wl, state = decision_for([*queues(), *base], "w")
    assert d.outcome == "Pending"
    ev = check_decided(state, d, wl, NOW, 10.0)
    assert ev.state == "Retry"
    assert ev.requeue_after_s == 40  # 10 s doubled for each of Kueue's two retries
    held = check_decided(state, d, wl, NOW, 10.0, held=["Workload/ns/big", wl.ref])
    # room held for another: the base time, never doubled (the reservation is released
    # at once either way: the actuator evicts once Kueue has set the requeue time)
    assert held.requeue_after_s == 10
    assert ev.message.startswith("gangpreempt: ")
    assert "held" not in ev.message
    # The message names whom room is held for (never the workload itself).
    assert held.message.startswith(ev.message)
    assert "room is held for Workload/ns/big " in held.message
    assert wl.ref not in held.message
    d, _, _ = decision_for([*queues(policy={"withinClusterQueue": "LowerPriority"}), *base], "w")
    assert d.outcome == "Preempt"
    assert [v.object for v in d.victims] == ["Workload/ns/low"]


def test_the_backoff_doubles_up_to_its_cap() -> None:
    assert [backoff_s(10.0, n) for n in range(4)] == [10, 20, 40, 80]
    assert backoff_s(10.0, 10) == BACKOFF_MAX_S
    assert backoff_s(10.0, 10_000) == BACKOFF_MAX_S


def test_a_bad_annotation_in_a_file_is_an_error_at_its_line(tmp_path: Any) -> None:
    path = tmp_path / "queues.yaml"
    path.write_text(
        "apiVersion: kueue.x-k8s.io/v1beta2\n"
        "kind: ClusterQueue\n"
        "metadata:\n"
        "  name: cq\n"
        "  annotations:\n"
        "    gangpreempt.io/preemption: '{\"reclaimWithinCohort\": 3}'\n"
        "spec: {resourceGroups: []}\n"
    )
    with pytest.raises(ManifestError) as info:
        load([str(path)])
    message = str(info.value)
    assert "queues.yaml" in message
    assert "ClusterQueue cq" in message
    assert f"{PREEMPTION_ANNOTATION}.reclaimWithinCohort" in message


def test_a_ready_workload_holds_its_planned_nodes_until_its_pods_are_bound() -> None:
    """Found against the real Kueue: ``low``'s check said Ready on node-0, Kueue admitted
    it, and before its pod existed ``w`` was decided, saw node-0 free and was sent there
    too; low's pod never ran. A Ready workload's planned nodes are held (a placeholder
    pod on each) until its pods are bound there; its gated pods still go there."""
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node-0", "labels": {"kubernetes.io/hostname": "node-0"}},
        "status": {"allocatable": {"cpu": "8", "pods": "110"}},
    }
    other = json.loads(json.dumps(node).replace("node-0", "node-1"))
    low = workload("low", 8, 1, admitted=True, check="Ready")
    low["status"]["admissionChecks"][0]["podSetUpdates"] = [
        {"name": "main", "annotations": {PLANNED_NODES_ANNOTATION: "node-0"}}
    ]
    objects = [*queues(nominal="16"), node, other, low]
    objects.append(workload("w", 8, 10, reserved=True, check="Pending"))
    d, _, state = decision_for(objects, "w")
    (held,) = [p for p in state.pods.values() if p.labels.get(PLACEHOLDER_LABEL)]
    assert (held.node_name, held.kueue_workload) == ("node-0", "ns/low")
    assert d.outcome == "Admit"
    assert set(d.placement.values()) == {"node-1"}  # not low's node
    # low's pod arrives gated: it is narrowed to node-0 all the same
    gated_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "low-pod",
            "namespace": "ns",
            "labels": {WORKLOAD_LABEL: "low", "kueue.x-k8s.io/podset": "main"},
            "annotations": {PLANNED_NODES_ANNOTATION: "node-0"},
        },
        "spec": {
            "schedulingGates": [{"name": GATE}],
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "8"}}}],
        },
    }
    state, _ = read([*queues(nominal="16"), node, other, low, gated_pod])
    assert planned_assignments(state) == {"ns/low-pod": "node-0"}
    # once bound there, the placeholder goes
    gated_pod["spec"] = {"nodeName": "node-0", "containers": gated_pod["spec"]["containers"]}
    gated_pod["status"] = {"phase": "Running"}
    state, _ = read([*queues(nominal="16"), node, other, low, gated_pod])
    assert not [p for p in state.pods.values() if p.labels.get(PLACEHOLDER_LABEL)]


# -- the room a preemptor's victims freed ------------------------------------------------------


def test_the_freed_room_is_kept_until_kueue_admits_the_preemptor_or_the_bound() -> None:
    clock = [0.0]
    room = FreedRoom(timeout=60.0, clock=lambda: clock[0])
    pending = read([*queues(), workload("w", 4, 10), workload("v", 4, 10)])[0]
    room.keep("ns/w", {"Pod/ns/w-0": "n1"})
    room.keep("ns/v", {"Pod/ns/v-0": "n2"})
    assert room.settle(pending) == {"ns/w", "ns/v"}
    assert room.refs(pending) == ["Workload/ns/v", "Workload/ns/w"]
    assert room.rooms() == {"ns/w": {"Pod/ns/w-0": "n1"}, "ns/v": {"Pod/ns/v-0": "n2"}}
    # Kueue reserved w and the check is not Ready yet: still pending, still its room
    reserved = read([*queues(), workload("w", 4, 10, reserved=True, check="Pending")])[0]
    assert room.settle(reserved) == {"ns/w"}  # v is gone: forgotten, its nodes too
    assert room.rooms() == {"ns/w": {"Pod/ns/w-0": "n1"}}
    admitted = read([*queues(), workload("w", 4, 10, admitted=True, check="Ready")])[0]
    assert room.settle(admitted) == frozenset()
    assert room.rooms() == {}
    room.keep("ns/w")
    clock[0] = 60.5  # Kueue never reserved it within the bound: others may take it
    assert room.settle(pending) == frozenset()
