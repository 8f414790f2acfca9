"""The hand-off against the real control plane: kube-apiserver (with gangpreempt's
MutatingAdmissionPolicy from deploy/k8s), kube-scheduler and Kueue's controller manager,
and gangpreempt's four services as processes on a real nats-server. The test plays only
what this control plane lacks: the Job controller (a pod per parallelism of an
unsuspended Job, deleted when Kueue suspends it) and the kubelet (a bound pod runs).

A ClusterQueue lists gangpreempt's AdmissionCheck; Kueue's own stanza says Never. Two
Jobs fill its 16 GPUs; a third, of higher priority, arrives. gangpreempt evicts the
lowest, Kueue stops it and reserves the quota for the newcomer, gangpreempt's check
says Ready with the node the victim left, the newcomer's pod is gated at creation by
the API server, narrowed there and ungated, and kube-scheduler binds it there."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from gangpreempt import events
from gangpreempt.model.checks import GATE, PLANNED_NODES_ANNOTATION, WORKLOAD_LABEL
from tests.e2e.harness import Services, decisions
from tests.peers.cluster import (
    GPU,
    KUEUE_API,
    Cluster,
    deployed,
    eventually,
    start_services,
)
from tests.peers.conftest import SERVICE_USERS
from tests.peers.control_plane import KUEUE, SCHEDULER, ControlPlane

pytestmark = [pytest.mark.peers, pytest.mark.timeout(300)]


async def test_the_newcomer_lands_where_its_victim_ran(
    control_plane: ControlPlane, cluster: Cluster, services: Services
) -> None:
    start_services(services, deployed(control_plane))
    await cluster.job("low", "low")
    await cluster.job("mid", "mid")

    low = await eventually(lambda: cluster.running("low"), 120, "low running", cluster)
    mid = await eventually(lambda: cluster.running("mid"), 120, "mid running", cluster)
    for pod in (low, mid):
        # Gated at creation by the API server, narrowed to its planned node, then bound.
        planned = pod["metadata"]["annotations"][PLANNED_NODES_ANNOTATION]
        assert pod["spec"]["nodeName"] == planned
        assert pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] == planned
        assert pod["metadata"]["labels"][WORKLOAD_LABEL]
        assert GATE not in [g["name"] for g in pod["spec"].get("schedulingGates") or []]
    assert {low["spec"]["nodeName"], mid["spec"]["nodeName"]} == set(cluster.nodes)

    await cluster.job("train", "high")
    train = await eventually(lambda: cluster.running("train"), 180, "train running", cluster)
    assert train["spec"]["nodeName"] == low["spec"]["nodeName"]
    assert await cluster.pod_of("low") is None
    assert (await cluster.running("mid")) is not None  # untouched

    # gangpreempt evicted low's Workload; neither Kueue nor kube-scheduler preempted.
    events = control_plane.audit_events()

    def by(user: str, verb: str, resource: str, sub: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in events
            if e["user"]["username"] == user
            and e["verb"] == verb
            and (e.get("objectRef") or {}).get("resource") == resource
            and (e.get("objectRef") or {}).get("subresource") == sub
            and (e.get("objectRef") or {}).get("namespace") == cluster.ns
        ]

    assert not by(SCHEDULER, "delete", "pods")
    assert not by(SCHEDULER, "create", "pods", "eviction")
    kueue_patches = by(KUEUE, "patch", "workloads", "status") + by(
        KUEUE, "update", "workloads", "status"
    )
    assert kueue_patches  # Kueue did its part: reservations, admissions
    # ingest and the actuator ran under deploy/k8s's identities, RBAC and admission
    # policy: never refused here (cluster-wide or in this test's namespace; the policy
    # test's deliberate refusals are in namespaces of its own)
    for service, user in SERVICE_USERS.items():
        theirs = control_plane.audit_events(user)
        assert theirs, f"{service} made no call as {user}"
        refused = [
            (e["verb"], e.get("requestURI"))
            for e in theirs
            if (e.get("responseStatus") or {}).get("code") in (403, 422)
            and (e.get("objectRef") or {}).get("namespace") in (cluster.ns, None)
        ]
        assert refused == [], f"{service} was refused: {refused}"
    written = {
        ((e.get("objectRef") or {}).get("resource"), (e.get("objectRef") or {}).get("subresource"))
        for e in control_plane.audit_events(SERVICE_USERS["actuator"])
        if e["verb"] == "patch"
    }
    assert ("workloads", "status") in written  # the check, as the actuator's own identity


async def test_a_job_no_node_can_run_is_never_admitted_and_nothing_is_evicted(
    control_plane: ControlPlane, cluster: Cluster, services: Services, nc: Any, topology: Any
) -> None:
    """The quota is full and the newcomer asks for a node the cluster does not have:
    gangpreempt decides it (Pending, saying why), requests no preemption, and neither
    running Job is touched; Kueue, whose stanza says Never, does not admit it."""
    start_services(services, deployed(control_plane))
    await cluster.job("low", "low")
    await cluster.job("mid", "mid")

    await eventually(lambda: cluster.running("low"), 120, "low running", cluster)
    await eventually(lambda: cluster.running("mid"), 120, "mid running", cluster)
    await cluster.job("train", "high", node_selector={"gpu": "h100"})
    prefix = f"Workload/{cluster.ns}/job-train-"

    async def decided() -> list[Any]:
        return [
            e
            for e in await decisions(nc, topology)
            if isinstance(e, events.Pending) and e.workload.startswith(prefix)
        ]

    (pending, *_) = await eventually(decided, 60, "gangpreempt's decision on train", cluster)
    assert "node" in pending.message, pending.message
    seen = await decisions(nc, topology)
    assert not [
        e
        for e in seen
        if isinstance(e, events.PreemptionRequested) and e.workload.startswith(prefix)
    ]
    assert not [e for e in seen if isinstance(e, events.VictimActuated)]
    assert await cluster.running("low") is not None
    assert await cluster.running("mid") is not None
    workloads = await cluster.call("GET", f"{KUEUE_API}/namespaces/{cluster.ns}/workloads")
    for wl in workloads.get("items") or []:
        conditions = {
            c["type"]: c["status"] for c in (wl.get("status") or {}).get("conditions") or []
        }
        assert conditions.get("Evicted") != "True", wl["metadata"]["name"]
        if wl["metadata"]["name"].startswith("job-train-"):
            assert conditions.get("Admitted") != "True"


# -- a pod gang outside Kueue -----------------------------------------------------------------

POD_GROUP_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "podgroups.scheduling.x-k8s.io"},
    "spec": {
        "group": "scheduling.x-k8s.io",
        "names": {"kind": "PodGroup", "plural": "podgroups", "singular": "podgroup"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
                "subresources": {"status": {}},
            }
        ],
    },
}


async def gang_namespace(cluster: Cluster) -> None:
    """scheduler-plugins' PodGroup kind (its CRD, as far as the API server needs it), the
    namespace handed to gangpreempt, and two PriorityClasses."""
    crd = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/podgroups.scheduling.x-k8s.io"
    await cluster.apply(POD_GROUP_CRD, crd)

    async def served() -> bool:
        return await cluster.get("/apis/scheduling.x-k8s.io/v1alpha1") is not None

    await eventually(served, 30, "the PodGroup kind served")
    await cluster.call(
        "PATCH",
        f"/api/v1/namespaces/{cluster.ns}",
        {"metadata": {"labels": {"gangpreempt.io/authority": "enabled"}}},
        content_type="application/merge-patch+json",
    )
    for name, value in (("low", 10), ("high", 1000)):
        await cluster.apply(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": f"{name}-{cluster.suffix}"},
                "value": value,
            },
            f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}-{cluster.suffix}",
        )


async def gang_pod(cluster: Cluster, name: str, priority: str, group: str = "") -> None:
    labels = {"scheduling.x-k8s.io/pod-group": group} if group else {}
    await cluster.call(
        "POST",
        f"/api/v1/namespaces/{cluster.ns}/pods",
        {
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "priorityClassName": f"{priority}-{cluster.suffix}",
                "nodeSelector": {"handoff": cluster.suffix},
                "containers": [
                    {
                        "name": "c",
                        "image": "busybox",
                        "resources": {"requests": {"cpu": "1", GPU: "8"}, "limits": {GPU: "8"}},
                    }
                ],
            },
        },
    )


async def test_a_pod_gang_is_ungated_onto_the_nodes_its_plan_freed(
    control_plane: ControlPlane, cluster: Cluster, services: Services
) -> None:
    """A PodGroup of two 8-GPU pods in a namespace handed to gangpreempt, both nodes
    taken by lower pods: the API server gates the gang's pods at creation, gangpreempt
    deletes the two lower pods, narrows the gang's pods onto the nodes they left and
    lifts the gate, kube-scheduler binds them there; it never preempts for them and
    never binds them elsewhere."""
    await gang_namespace(cluster)
    start_services(services, deployed(control_plane))
    for i in range(2):
        await gang_pod(cluster, f"filler-{i}", "low")

    fillers = [
        await eventually(
            functools.partial(cluster.running_pod, f"filler-{i}"),
            120,
            f"filler-{i} running",
            cluster,
        )
        for i in range(2)
    ]
    held = {p["spec"]["nodeName"] for p in fillers}
    assert held == set(cluster.nodes)
    for pod in fillers:  # gated at creation, placed by gangpreempt
        assert pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] == pod["spec"]["nodeName"]

    await cluster.apply(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": cluster.ns},
            "spec": {"minMember": 2},
        },
        f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{cluster.ns}/podgroups/train",
    )
    for i in range(2):
        await gang_pod(cluster, f"train-{i}", "high", group="train")
    created = [
        await cluster.get(f"/api/v1/namespaces/{cluster.ns}/pods/train-{i}") for i in range(2)
    ]
    for pod in created:  # the API server gated them: kube-scheduler leaves them alone
        assert pod is not None
        assert GATE in [g["name"] for g in pod["spec"].get("schedulingGates") or []]

    gang = [
        await eventually(
            functools.partial(cluster.running_pod, f"train-{i}"), 180, f"train-{i} running", cluster
        )
        for i in range(2)
    ]
    assert {p["spec"]["nodeName"] for p in gang} == held
    for pod in gang:
        assert pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] == pod["spec"]["nodeName"]
        assert GATE not in [g["name"] for g in pod["spec"].get("schedulingGates") or []]
    for i in range(2):
        assert await cluster.get(f"/api/v1/namespaces/{cluster.ns}/pods/filler-{i}") is None

    events = control_plane.audit_events(SCHEDULER)
    mine = [e for e in events if (e.get("objectRef") or {}).get("namespace") == cluster.ns]
    assert not [e for e in mine if e["verb"] == "delete"]
    assert not [e for e in mine if (e.get("objectRef") or {}).get("subresource") == "eviction"]
    bindings = [
        e
        for e in mine
        if (e.get("objectRef") or {}).get("subresource") == "binding"
        and (e.get("objectRef") or {}).get("name", "").startswith("train-")
    ]
    assert len(bindings) == 2  # each gang pod bound once, where it runs
