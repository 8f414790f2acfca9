"""The test's cluster on the real control plane: its namespace, nodes and Kueue queues,
the Job controller and kubelet the control plane lacks (a pod per parallelism of an
unsuspended Job, deleted when Kueue suspends it; a bound pod runs), and the four
services started against it under deploy/k8s's identities."""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.error
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import yaml

from tests import waiting
from tests.e2e.harness import Services
from tests.peers.control_plane import ADMIN, ControlPlane

ROOT = Path(__file__).resolve().parents[2]
KUEUE_API = "/apis/kueue.x-k8s.io/v1beta2"
GPU = "nvidia.com/gpu"
# The identities deploy/k8s gives the services that call the API server (its
# ServiceAccounts, as the API server names them), bound to deploy/k8s's own RBAC.
SERVICE_USERS = {
    service: f"system:serviceaccount:gangpreempt:gangpreempt-{service}"
    for service in ("ingest", "actuator")
}


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
        self.flavor = f"flavor-{suffix}"
        self.created: dict[str, int] = {}  # job -> pods made for it so far
        # Jobs whose pods outlive their suspension until the test lets them go (victims
        # slow to terminate): their pods keep running and the Job stays active.
        self.lingering: set[str] = set()
        # Jobs that, when Kueue suspends them, finish instead (their pods were done with
        # their work within the grace period): their Workloads are not requeued.
        self.finishing: set[str] = set()
        self.done: set[str] = set()  # Jobs the test finished
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
        await self.apply(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": self.flavor},
                "spec": {"nodeLabels": {"handoff": self.suffix}},
            },
            f"{KUEUE_API}/resourceflavors/{self.flavor}",
        )
        await self.queue("lq", f"cq-{self.suffix}", gpus=16)

    async def queue(self, local: str, cq: str, gpus: int) -> None:
        """A ClusterQueue of ``gpus`` nominal GPUs in the cluster's cohort (it borrows
        what the others leave unused), and a LocalQueue ``local`` of the namespace in
        it. Managed: it lists gangpreempt's check, Kueue's stanza says Never and the
        policy gangpreempt applies is the annotation's; else Kueue preempts on its own
        (LowerPriority), as before gangpreempt."""
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
                    "cohortName": f"co-{self.suffix}",
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.ns}},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", GPU],
                            "flavors": [
                                {
                                    "name": self.flavor,
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": str(gpus * 4)},
                                        {"name": GPU, "nominalQuota": str(gpus)},
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
                "metadata": {"name": local, "namespace": self.ns},
                "spec": {"clusterQueue": cq},
            },
            f"{KUEUE_API}/namespaces/{self.ns}/localqueues/{local}",
        )

    async def teardown(self) -> None:
        for node in self.nodes:
            await self.call("DELETE", f"/api/v1/nodes/{node}")

    async def job(
        self,
        name: str,
        priority: str,
        node_selector: dict[str, str] | None = None,
        pods: int = 1,
        queue: str = "lq",
    ) -> None:
        """A batch/v1 Job of ``pods`` 8-GPU pods in the local queue ``queue`` (Kueue
        suspends it)."""
        await self.call(
            "POST",
            f"/apis/batch/v1/namespaces/{self.ns}/jobs",
            {
                "metadata": {
                    "name": name,
                    "labels": {
                        "kueue.x-k8s.io/queue-name": queue,
                        "kueue.x-k8s.io/priority-class": f"{priority}-{self.suffix}",
                    },
                },
                "spec": {
                    "parallelism": pods,
                    "completions": pods,
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
            if name in self.done or any(
                c.get("type") == "Complete" and c.get("status") == "True"
                for c in status.get("conditions") or []
            ):
                # Its pods ran to completion: gone (also one this loop made while the
                # test finished the Job, which would otherwise be placed and run).
                for pod in mine:
                    await self.delete_pod(pod)
                continue
            if job["spec"].get("suspend"):
                if name in self.finishing:
                    await self.finish(name)
                elif name not in self.lingering:
                    await self.stop(job, mine)
                continue
            for _ in range(job["spec"]["parallelism"] - len(mine)):
                await self.start_pod(job)
            if len(mine) < job["spec"]["parallelism"] and name not in self.done:
                active = {"active": job["spec"]["parallelism"], "startTime": now()}
                await self.call(
                    "PATCH",
                    f"/apis/batch/v1/namespaces/{self.ns}/jobs/{name}/status",
                    {"status": {**active, "conditions": None}},
                    content_type="application/merge-patch+json",
                )
        for pod in pods:  # the kubelet: a bound pod runs, a deleted one stops
            status = pod.get("status") or {}
            if pod["metadata"].get("deletionTimestamp"):
                await self.delete_pod(pod)
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

    async def delete_pod(self, pod: dict[str, Any]) -> None:
        """Gone at once (grace 0): as a kubelet that has stopped it. A pod gone already
        (the kubelet loop, or an eviction, took it since it was listed) is what was
        wanted."""
        try:
            await self.call(
                "DELETE",
                f"/api/v1/namespaces/{self.ns}/pods/{pod['metadata']['name']}",
                {"gracePeriodSeconds": 0},
            )
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise

    async def start_pod(self, job: dict[str, Any]) -> None:
        """As the Job controller: one more pod of ``job``, from its template."""
        name = job["metadata"]["name"]
        if name in self.done:
            return
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

    async def stop(self, job: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        """As the Job controller when Kueue suspends ``job``: its pods go, and the Job
        says it is suspended (no active pod, no start time), which lets Kueue restore
        its template."""
        for pod in pods:
            await self.delete_pod(pod)
        status = job.get("status") or {}
        if status.get("active") or status.get("startTime"):
            await self.call(
                "PATCH",
                f"/apis/batch/v1/namespaces/{self.ns}/jobs/{job['metadata']['name']}/status",
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

    async def finish(self, name: str) -> None:
        """Job ``name`` has run to completion: its pods are gone and it says so (its
        Workload finishes and frees its quota)."""
        self.done.add(name)  # before any await: the Job controller makes no pod for it now
        job = await self.call("GET", f"/apis/batch/v1/namespaces/{self.ns}/jobs/{name}")
        for pod in await self.pods():
            if pod["metadata"].get("labels", {}).get("job-name") == name:
                await self.delete_pod(pod)
        count = job["spec"]["completions"]
        started = (job.get("status") or {}).get("startTime") or now()

        def done(kind: str, reason: str) -> dict[str, str]:
            return {
                "type": kind,
                "status": "True",
                "reason": reason,
                "message": "Reached expected number of succeeded pods",
                "lastProbeTime": now(),
                "lastTransitionTime": now(),
            }

        await self.call(
            "PATCH",
            f"/apis/batch/v1/namespaces/{self.ns}/jobs/{name}/status",
            {
                "status": {
                    "active": 0,
                    "ready": 0,
                    "succeeded": count,
                    "startTime": started,
                    "completionTime": now(),
                    "conditions": [
                        done("SuccessCriteriaMet", "CompletionsReached"),
                        done("Complete", "CompletionsReached"),
                    ],
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
                (c["name"], c["state"], c.get("message", ""), c.get("retryCount"))
                for c in status.get("admissionChecks") or []
            ]
            lines.append(
                f"Workload {wl['metadata']['name']}: {conditions} checks={checks} "
                f"requeueState={status.get('requeueState')}"
            )
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
            # The period of the Job controller and kubelet this loop plays (as theirs
            # resync), not a wait on anything: the tests wait on conditions with deadlines.
            await asyncio.sleep(0.2)

    task = asyncio.create_task(loop())
    try:
        yield c
    finally:
        task.cancel()
        await c.teardown()
