"""Smoke test of the real control plane: the scheduler binds a pod to a Node the test
created, Kueue admits a Workload, and the audit log shows who did what."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from kubernetes_asyncio import client, config

from tests import waiting
from tests.peers.control_plane import ADMIN, KUEUE, SCHEDULER, ControlPlane

pytestmark = [pytest.mark.peers, pytest.mark.timeout(300)]

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"


async def eventually(
    check: Callable[[], Awaitable[Any]], timeout: float = 60.0, what: str = ""
) -> Any:
    return await waiting.eventually(check, timeout, what)


@pytest.fixture
async def api(control_plane: ControlPlane) -> AsyncIterator[client.ApiClient]:
    cfg = client.Configuration()
    await config.load_kube_config(
        config_file=str(control_plane.kubeconfig), client_configuration=cfg
    )
    async with client.ApiClient(cfg) as api_client:
        yield api_client


def condition(obj: dict[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in obj.get("status", {}).get("conditions") or []
    )


async def test_scheduler_binds_and_kueue_admits(
    control_plane: ControlPlane, api: client.ApiClient
) -> None:
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    suffix = uuid.uuid4().hex[:8]
    ns, node = f"smoke-{suffix}", f"node-{suffix}"
    await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))

    # The test plays the kubelet: a Node object, its status (8 cpu allocatable, Ready).
    await core.create_node(
        client.V1Node(metadata=client.V1ObjectMeta(name=node, labels={"smoke": suffix}))
    )
    capacity = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    await core.patch_node_status(
        node,
        {
            "status": {
                "capacity": capacity,
                "allocatable": capacity,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            }
        },
    )
    container = client.V1Container(
        name="c", image="busybox", resources=client.V1ResourceRequirements(requests={"cpu": "1"})
    )
    await core.create_namespaced_pod(
        ns,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="p"),
            spec=client.V1PodSpec(node_selector={"smoke": suffix}, containers=[container]),
        ),
    )

    async def bound() -> str | None:
        pod = await core.read_namespaced_pod("p", ns)
        return pod.spec.node_name

    assert await eventually(bound, what="the pod bound") == node

    # Kueue: a flavor, a cluster queue with 8 cpu, a local queue, a workload asking 2 cpu.
    async def create(plural: str, body: dict[str, Any], namespace: str | None = None) -> None:
        body = {"apiVersion": f"{KUEUE_GROUP}/{KUEUE_VERSION}", **body}
        if namespace:
            await custom.create_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, namespace, plural, body
            )
        else:
            await custom.create_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, body)

    flavor, cq = f"flavor-{suffix}", f"cq-{suffix}"
    await create("resourceflavors", {"kind": "ResourceFlavor", "metadata": {"name": flavor}})
    await create(
        "clusterqueues",
        {
            "kind": "ClusterQueue",
            "metadata": {"name": cq},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {"name": flavor, "resources": [{"name": "cpu", "nominalQuota": "8"}]}
                        ],
                    }
                ],
            },
        },
    )
    await create(
        "localqueues",
        {"kind": "LocalQueue", "metadata": {"name": "lq"}, "spec": {"clusterQueue": cq}},
        ns,
    )
    await create(
        "workloads",
        {
            "kind": "Workload",
            "metadata": {"name": "w"},
            "spec": {
                "queueName": "lq",
                "podSets": [
                    {
                        "name": "main",
                        "count": 2,
                        "template": {
                            "spec": {
                                "restartPolicy": "Never",
                                "containers": [
                                    {
                                        "name": "c",
                                        "image": "busybox",
                                        "resources": {"requests": {"cpu": "1"}},
                                    }
                                ],
                            }
                        },
                    }
                ],
            },
        },
        ns,
    )

    async def admitted() -> dict[str, Any] | None:
        wl = await custom.get_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, ns, "workloads", "w"
        )
        ok = condition(wl, "QuotaReserved") and condition(wl, "Admitted")
        return wl if ok else None

    wl = await eventually(admitted, what="the workload admitted")
    admission = wl["status"]["admission"]
    assert admission["clusterQueue"] == cq
    assert admission["podSetAssignments"][0]["flavors"] == {"cpu": flavor}
    assert admission["podSetAssignments"][0]["resourceUsage"]["cpu"] == "2"

    # The audit log names who did what.
    def did(
        user: str, verb: str, resource: str, subresource: str | None = None
    ) -> Callable[[dict[str, Any]], bool]:
        def match(event: dict[str, Any]) -> bool:
            ref = event.get("objectRef") or {}
            return (
                event["user"]["username"] == user
                and event["verb"] == verb
                and ref.get("resource") == resource
                and ref.get("subresource") == subresource
                and ref.get("namespace") in (None, ns)
            )

        return match

    created = await control_plane.audit_event(did(ADMIN, "create", "workloads"))
    assert created["objectRef"]["apiGroup"] == KUEUE_GROUP
    assert created["responseStatus"]["code"] == 201
    await control_plane.audit_event(did(SCHEDULER, "create", "pods", "binding"))
    await control_plane.audit_event(
        lambda e: (
            e["user"]["username"] == KUEUE
            and (e.get("objectRef") or {}).get("resource") == "workloads"
            and (e.get("objectRef") or {}).get("subresource") == "status"
            and e["verb"] in ("patch", "update", "apply")
        )
    )
