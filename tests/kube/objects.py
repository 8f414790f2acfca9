"""API objects as the API server serves them, for the kubernetes tests."""

from __future__ import annotations

from typing import Any


def node(name: str, gpus: int = 8, cpu: str = "32") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "allocatable": {
                "cpu": cpu,
                "memory": "128Gi",
                "nvidia.com/gpu": str(gpus),
                "pods": "110",
            }
        },
    }


def pod(
    name: str,
    node_name: str | None = None,
    cpu: str = "1",
    ns: str = "team-a",
    priority_class: str | None = None,
    owner: dict[str, Any] | None = None,
    grace: int | None = None,
    **labels: str,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    status: dict[str, Any] = {"phase": "Pending"}
    if node_name:
        spec["nodeName"] = node_name
        status = {"phase": "Running", "startTime": "2026-11-01T00:00:00Z"}
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": dict(labels)}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
    }


def pod_group(name: str, min_member: int, ns: str = "team-a", priority: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": min_member}
    if priority:
        spec["priorityClassName"] = priority
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


def pdb(name: str, allowed: int, ns: str = "team-a", **match: str) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"selector": {"matchLabels": match}, "maxUnavailable": 0},
        "status": {"disruptionsAllowed": allowed},
    }


def job(name: str, ns: str = "team-a") -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"parallelism": 2, "suspend": False, "template": {"spec": {"containers": []}}},
    }


def kueue_workload(
    name: str, queue: str = "cq", admitted: bool = True, ns: str = "team-a"
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if admitted:
        status = {
            "admission": {
                "clusterQueue": queue,
                "podSetAssignments": [
                    {
                        "name": "main",
                        "flavors": {"cpu": "default"},
                        "resourceUsage": {"cpu": "1"},
                        "count": 1,
                    }
                ],
            },
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "True",
                    "reason": "QuotaReserved",
                    "message": f"Quota reserved in ClusterQueue {queue}",
                    "lastTransitionTime": "2026-11-01T00:00:00Z",
                },
                {
                    "type": "Admitted",
                    "status": "True",
                    "reason": "Admitted",
                    "message": "The workload is admitted",
                    "lastTransitionTime": "2026-11-01T00:00:00Z",
                },
            ],
        }
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "queueName": "lq",
            "priority": 0,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]
                        }
                    },
                }
            ],
        },
        "status": status,
    }
