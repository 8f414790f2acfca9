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

import asyncio
import contextlib
import functools
import time
import urllib.error
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangpreempt import events
from gangpreempt.model.checks import GATE, PLANNED_NODES_ANNOTATION, WORKLOAD_LABEL
from tests import waiting
from tests.e2e.harness import Services, decisions
from tests.peers.conftest import SERVICE_USERS
from tests.peers.control_plane import ADMIN, KUEUE, SCHEDULER, ControlPlane

pytestmark = [pytest.mark.peers, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
KUEUE_API = "/apis/kueue.x-k8s.io/v1beta2"
GPU = "nvidia.com/gpu"


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Cluster:
    """What the test does to the API server, and its Job controller and kubelet."""

    def __init__(self, plane: ControlPlane, suffix: str, managed: bool = True) -> None:
        self.plane = plane
        # managed: the ClusterQueue lists gangpreempt's check and Kueue's stanza says
        # Never; else Kueue preempts on its own (LowerPriority), as before gangpreempt
        self.managed = managed
        self.ns = f"handoff-{suffix}"
        self.suffix = suffix
        self.nodes = [f"gpu-{suffix}-{i}" for i in range(2)]
        self.created: dict[str, int] = {}  # job -> pods made for it so far
        self.errors: list[str] = []  # what the Job controller and kubelet were refused

    async def call(self, method: str, path: str, body: Any = None, **kw: Any) -> dict[str, Any]:
        try:
            return await asyncio.to_thread(self.plane.request, method, path, body, **kw)
        except urllib.error.HTTPError as exc:
            exc.msg = f"{method} {path}: {exc.read().decode(errors='replace')[:1500]}"
            raise

    async def get(self, path: str) -> dict[str, Any] | None:
        try:
            return await self.call("GET", path)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise

    async def apply(self, obj: dict[str, Any], path: str) -> None:
        await self.call(
            "PATCH",
            f"{path}?fieldManager=gangpreempt-tests&force=true",
            obj,
            content_type="application/apply-patch+yaml",
        )

    # -- the cluster -------------------------------------------------------------------------
    async def setup(self) -> None:
        await self.call("POST", "/api/v1/namespaces", {"metadata": {"name": self.ns}})
        for node in self.nodes:
            labels = {"kubernetes.io/hostname": node, "handoff": self.suffix}
            await self.call("POST", "/api/v1/nodes", {"metadata": {"name": node, "labels": labels}})
            capacity = {"cpu": "32", "memory": "64Gi", "pods": "110", GPU: "8"}
            await self.call(
                "PATCH",
                f"/api/v1/nodes/{node}/status",
                {
                    "status": {
                        "capacity": capacity,
                        "allocatable": capacity,
                        "conditions": [
                            {"type": "Ready", "status": "True", "reason": "KubeletReady"}
                        ],
                    }
                },
                content_type="application/merge-patch+json",
            )
        # gangpreempt's AdmissionCheck and admission policy, as the kustomize base has them.
        for doc in yaml.safe_load_all((ROOT / "deploy/k8s/authority.yaml").read_text()):
            kind, name = doc["kind"], doc["metadata"]["name"]
            base = (
                f"{KUEUE_API}/admissionchecks"
                if kind == "AdmissionCheck"
                else "/apis/admissionregistration.k8s.io/v1/"
                + (
                    "mutatingadmissionpolicies"
                    if kind == "MutatingAdmissionPolicy"
                    else "mutatingadmissionpolicybindings"
                )
            )
            await self.apply(doc, f"{base}/{name}")
        for name, value in (("low", 10), ("mid", 500), ("high", 1000)):
            await self.apply(
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "WorkloadPriorityClass",
                    "metadata": {"name": f"{name}-{self.suffix}"},
                    "value": value,
                },
                f"{KUEUE_API}/workloadpriorityclasses/{name}-{self.suffix}",
            )
        flavor, cq = f"flavor-{self.suffix}", f"cq-{self.suffix}"
        await self.apply(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": flavor},
                "spec": {"nodeLabels": {"handoff": self.suffix}},
            },
            f"{KUEUE_API}/resourceflavors/{flavor}",
        )
        spec: dict[str, Any] = (
            {
                "preemption": {"withinClusterQueue": "Never", "reclaimWithinCohort": "Never"},
                "admissionChecksStrategy": {"admissionChecks": [{"name": "gangpreempt"}]},
            }
            if self.managed
            else {"preemption": {"withinClusterQueue": "LowerPriority"}}
        )
        notes = {"gangpreempt.io/preemption": '{"withinClusterQueue": "LowerPriority"}'}
        await self.apply(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": cq, "annotations": notes if self.managed else {}},
                "spec": {
                    **spec,
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.ns}},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", GPU],
                            "flavors": [
                                {
                                    "name": flavor,
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": "64"},
                                        {"name": GPU, "nominalQuota": "16"},
                                    ],
                                }
                            ],
                        }
                    ],
                },
            },
            f"{KUEUE_API}/clusterqueues/{cq}",
        )
        await self.apply(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": "lq", "namespace": self.ns},
                "spec": {"clusterQueue": cq},
            },
            f"{KUEUE_API}/namespaces/{self.ns}/localqueues/lq",
        )

    async def teardown(self) -> None:
        for node in self.nodes:
            await self.call("DELETE", f"/api/v1/nodes/{node}")

    async def job(
        self, name: str, priority: str, node_selector: dict[str, str] | None = None
    ) -> None:
        """A batch/v1 Job of one 8-GPU pod in the local queue (Kueue suspends it)."""
        await self.call(
            "POST",
            f"/apis/batch/v1/namespaces/{self.ns}/jobs",
            {
                "metadata": {
                    "name": name,
                    "labels": {
                        "kueue.x-k8s.io/queue-name": "lq",
                        "kueue.x-k8s.io/priority-class": f"{priority}-{self.suffix}",
                    },
                },
                "spec": {
                    "parallelism": 1,
                    "completions": 1,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            **({"nodeSelector": node_selector} if node_selector else {}),
                            "containers": [
                                {
                                    "name": "c",
                                    "image": "busybox",
                                    "resources": {
                                        "requests": {"cpu": "1", GPU: "8"},
                                        "limits": {GPU: "8"},
                                    },
                                }
                            ],
                        }
                    },
                },
            },
        )

    # -- the Job controller and the kubelet ---------------------------------------------------
    async def pods(self) -> list[dict[str, Any]]:
        listing = await self.call("GET", f"/api/v1/namespaces/{self.ns}/pods")
        return list(listing.get("items") or [])

    async def step(self) -> None:
        jobs = await self.call("GET", f"/apis/batch/v1/namespaces/{self.ns}/jobs")
        pods = await self.pods()
        for job in jobs.get("items") or []:
            name = job["metadata"]["name"]
            mine = [p for p in pods if p["metadata"].get("labels", {}).get("job-name") == name]
            status = job.get("status") or {}
            if job["spec"].get("suspend"):
                # As the Job controller: its pods go, and the Job says it is suspended
                # (no active pod, no start time), which lets Kueue restore its template.
                for pod in mine:
                    await self.call(
                        "DELETE",
                        f"/api/v1/namespaces/{self.ns}/pods/{pod['metadata']['name']}",
                        {"gracePeriodSeconds": 0},
                    )
                if status.get("active") or status.get("startTime"):
                    await self.call(
                        "PATCH",
                        f"/apis/batch/v1/namespaces/{self.ns}/jobs/{name}/status",
                        {
                            "status": {
                                "active": 0,
                                "startTime": None,
                                "conditions": [
                                    {
                                        "type": "Suspended",
                                        "status": "True",
                                        "reason": "JobSuspended",
                                        "message": "Job suspended",
                                        "lastProbeTime": now(),
                                        "lastTransitionTime": now(),
                                    }
                                ],
                            }
                        },
                        content_type="application/merge-patch+json",
                    )
                continue
            if not mine:
                template = job["spec"]["template"]
                meta = template.get("metadata") or {}
                self.created[name] = self.created.get(name, 0) + 1
                await self.call(
                    "POST",
                    f"/api/v1/namespaces/{self.ns}/pods",
                    {
                        "metadata": {
                            "name": f"{name}-{self.created[name]}",
                            "labels": {**meta.get("labels", {}), "job-name": name},
                            "annotations": meta.get("annotations", {}),
                            "ownerReferences": [
                                {
                                    "apiVersion": "batch/v1",
                                    "kind": "Job",
                                    "name": name,
                                    "uid": job["metadata"]["uid"],
                                    "controller": True,
                                }
                            ],
                        },
                        "spec": template["spec"],
                    },
                )
                await self.call(
                    "PATCH",
                    f"/apis/batch/v1/namespaces/{self.ns}/jobs/{name}/status",
                    {"status": {"active": 1, "startTime": now(), "conditions": None}},
                    content_type="application/merge-patch+json",
                )
        for pod in pods:  # the kubelet: a bound pod runs, a deleted one stops
            status = pod.get("status") or {}
            if pod["metadata"].get("deletionTimestamp"):
                await self.call(
                    "DELETE",
                    f"/api/v1/namespaces/{self.ns}/pods/{pod['metadata']['name']}",
                    {"gracePeriodSeconds": 0},
                )
            elif pod["spec"].get("nodeName") and status.get("phase") != "Running":
                await self.call(
                    "PATCH",
                    f"/api/v1/namespaces/{self.ns}/pods/{pod['metadata']['name']}/status",
                    {
                        "status": {
                            "phase": "Running",
                            "startTime": now(),
                            "conditions": [{"type": "Ready", "status": "True"}],
                        }
                    },
                    content_type="application/merge-patch+json",
                )

    async def describe(self) -> str:
        """What the cluster holds now, for a failure's message."""
        lines = []
        workloads = await self.call("GET", f"{KUEUE_API}/namespaces/{self.ns}/workloads")
        for wl in workloads.get("items") or []:
            status = wl.get("status") or {}
            conditions = {
                c["type"]: f"{c['status']} {c.get('reason', '')}: {c.get('message', '')[:160]}"
                for c in status.get("conditions") or []
            }
            checks = [
                (c["name"], c["state"], c.get("message", ""))
                for c in status.get("admissionChecks") or []
            ]
            lines.append(f"Workload {wl['metadata']['name']}: {conditions} checks={checks}")
        jobs = await self.call("GET", f"/apis/batch/v1/namespaces/{self.ns}/jobs")
        for job in jobs.get("items") or []:
            lines.append(f"Job {job['metadata']['name']}: suspend={job['spec'].get('suspend')}")
        for pod in await self.pods():
            spec = pod["spec"]
            lines.append(
                f"Pod {pod['metadata']['name']}: node={spec.get('nodeName')} "
                f"gates={spec.get('schedulingGates')} selector={spec.get('nodeSelector')} "
                f"phase={(pod.get('status') or {}).get('phase')}"
            )
        lines += [f"refused: {e}" for e in self.errors[-3:]]
        cq = await self.get(f"{KUEUE_API}/clusterqueues/cq-{self.suffix}")
        lines.append(f"ClusterQueue: {(cq or {}).get('status', {}).get('conditions')}")
        return "\n".join(lines)

    async def running(self, job: str) -> dict[str, Any] | None:
        """The pod of ``job`` once it runs."""
        return _if_running(await self.pod_of(job))

    async def running_pod(self, name: str) -> dict[str, Any] | None:
        """Pod ``name`` once it runs."""
        return _if_running(await self.get(f"/api/v1/namespaces/{self.ns}/pods/{name}"))

    async def pod_of(self, job: str) -> dict[str, Any] | None:
        for pod in await self.pods():
            if pod["metadata"].get("labels", {}).get("job-name") == job:
                return pod
        return None


def _if_running(pod: dict[str, Any] | None) -> dict[str, Any] | None:
    ok = pod is not None and (pod.get("status") or {}).get("phase") == "Running"
    return pod if ok else None


async def eventually(
    check: Callable[[], Any], timeout: float, what: str, cluster: Cluster | None = None
) -> Any:
    """``tests.waiting.eventually``, the cluster described when it times out."""
    return await waiting.eventually(
        check, timeout, what, cluster.describe if cluster is not None else None
    )


def start_services(
    services: Services, kubeconfig: Callable[[str], Path], mode: str = "act", **env: str
) -> None:
    """The four services against the control plane, deciding for the managed queues and
    the labelled namespaces only (the kustomize base's authority); ``kubeconfig`` gives
    each service's own."""
    for name in ("ingest", "quota", "victims", "actuator"):
        extra = {
            "GANGPREEMPT_SOURCE": "kubernetes",
            "GANGPREEMPT_SINK": "kubernetes",
            "GANGPREEMPT_KUBECONFIG": str(kubeconfig(name)),
            "GANGPREEMPT_AUTHORITY": "admission-check",
            "GANGPREEMPT_MODE": mode,
            "GANGPREEMPT_RELIST_INTERVAL": "60",
            **env,
        }
        services.start_as(name, name, extra)
    services.wait_started()


def deployed(plane: ControlPlane) -> Callable[[str], Path]:
    """Each service under the identity and RBAC deploy/k8s gives it (quota and victims
    make no call to the API server: the admin's, unused)."""
    return lambda service: plane.kubeconfig_for(SERVICE_USERS.get(service, ADMIN))


@pytest.fixture
async def cluster(control_plane: ControlPlane) -> AsyncIterator[Cluster]:
    async with running_cluster(control_plane, managed=True) as c:
        yield c


@contextlib.asynccontextmanager
async def running_cluster(control_plane: ControlPlane, managed: bool) -> AsyncIterator[Cluster]:
    """A cluster of its own (namespace, nodes, queues) with the test's Job controller
    and kubelet running beside it."""
    c = Cluster(control_plane, uuid.uuid4().hex[:6], managed)
    await c.setup()

    async def loop() -> None:
        while True:
            try:
                await c.step()
            except urllib.error.HTTPError as exc:  # a conflict with a controller: next round
                if exc.code not in (404, 409):
                    c.errors.append(f"{exc.code} {exc.msg}")
            await asyncio.sleep(0.2)

    task = asyncio.create_task(loop())
    try:
        yield c
    finally:
        task.cancel()
        await c.teardown()


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
    # ingest and the actuator ran under deploy/k8s's identities and RBAC: never refused
    for service, user in SERVICE_USERS.items():
        theirs = control_plane.audit_events(user)
        assert theirs, f"{service} made no call as {user}"
        refused = [
            (e["verb"], e.get("requestURI"))
            for e in theirs
            if (e.get("responseStatus") or {}).get("code") == 403
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
