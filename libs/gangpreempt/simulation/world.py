"""The cluster a replay runs on, as the Kubernetes objects gangpreempt reads (so the
replay's state comes through the same reader as ``plan``'s and the services'):

- one ResourceFlavor ``gpu``; one ClusterQueue per trace queue, its nominal quota in GPUs
  (``trace.auto_quotas``), all in the cohort ``trace`` so that idle quota is borrowed
  and reclaimed (``reclaimWithinCohort: Any``, ``withinClusterQueue: LowerPriority``,
  ``borrowWithinCohort: LowerPriority``: borrowing above quota is preemptible);
- one LocalQueue per ClusterQueue, in the namespace ``trace``;
- ``nodes`` Nodes of ``gpus_per_node`` GPUs;
- each job a Kueue Workload (``queueName`` its queue, ``priority`` its priority, one
  pod set per pod size) and its pods, which carry ``kueue.x-k8s.io/workload`` so that
  the Workload must fit its quota and the nodes together."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from gangpreempt.manifests.core import MINIMUM_PREEMPTABLE, TOLERATION_SECONDS
from gangpreempt.model.pods import KUEUE_WORKLOAD_ANNOTATION
from gangpreempt.model.workloads import CHECKPOINT_INTERVAL_ANNOTATION
from gangpreempt.simulation.trace import Job

GPU = "nvidia.com/gpu"
NAMESPACE = "trace"
FLAVOR = "gpu"
COHORT = "trace"
KUEUE = "kueue.x-k8s.io/v1beta2"


def cluster_objects(
    quotas: Mapping[str, int],
    nodes: int,
    gpus_per_node: int,
    preemption: bool = True,
    min_runtime_s: float = 0.0,
) -> list[dict[str, Any]]:
    """The cluster before any job: flavor, ClusterQueues, LocalQueues, Nodes.
    ``preemption`` off: every ClusterQueue's preemption policies are ``Never``.
    ``min_runtime_s``: every ClusterQueue gives its workloads that minimum runtime
    against every preemptor (the preemption-toleration annotations, ``quota.toleration``;
    0: none)."""
    policy = (
        {
            "reclaimWithinCohort": "Any",
            "withinClusterQueue": "LowerPriority",
            "borrowWithinCohort": {"policy": "LowerPriority"},
        }
        if preemption
        else {"reclaimWithinCohort": "Never", "withinClusterQueue": "Never"}
    )
    out: list[dict[str, Any]] = [
        {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
    ]
    for queue, nominal in sorted(quotas.items()):
        out.append(
            {
                "apiVersion": KUEUE,
                "kind": "ClusterQueue",
                "metadata": {"name": queue, **_minimum_runtime(min_runtime_s)},
                "spec": {
                    "cohortName": COHORT,
                    "namespaceSelector": {},
                    "preemption": policy,
                    "resourceGroups": [
                        {
                            "coveredResources": [GPU],
                            "flavors": [
                                {
                                    "name": FLAVOR,
                                    "resources": [{"name": GPU, "nominalQuota": str(nominal)}],
                                }
                            ],
                        }
                    ],
                },
            }
        )
        out.append(
            {
                "apiVersion": KUEUE,
                "kind": "LocalQueue",
                "metadata": {"namespace": NAMESPACE, "name": queue},
                "spec": {"clusterQueue": queue},
            }
        )
    for i in range(nodes):
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": f"node-{i:04d}"},
                "status": {"allocatable": {GPU: str(gpus_per_node), "pods": "110"}},
            }
        )
    return out


def _minimum_runtime(seconds: float) -> dict[str, Any]:
    """A ClusterQueue's annotations for a minimum runtime of ``seconds`` that no priority
    overrides (none for 0)."""
    if seconds <= 0:
        return {}
    return {
        "annotations": {
            MINIMUM_PREEMPTABLE: str(2**31 - 1),
            TOLERATION_SECONDS: str(math.ceil(seconds)),
        }
    }


def pod_name(job: Job, index: int) -> str:
    return f"{job.job_id}-{index}"


def job_objects(
    job: Job,
    arrived: datetime,
    placement: Mapping[int, str] | None = None,
    started: datetime | None = None,
    checkpoint_interval_s: int | None = None,
) -> list[dict[str, Any]]:
    """A job: its Workload (one pod set per pod size) and its pods; pending, or, with
    ``placement`` (pod index -> node) and ``started``, admitted and running there. Its
    checkpoint interval, when given, is said on the Workload (for ``--victim-cost``)."""
    sizes: dict[int, int] = {}
    for gpus in job.pods:
        sizes[gpus] = sizes.get(gpus, 0) + 1
    stamp = arrived.isoformat().replace("+00:00", "Z")
    pod_sets = [
        {
            "name": f"gpus-{gpus}",
            "count": count,
            "template": {"spec": {"containers": [_container(gpus)]}},
        }
        for gpus, count in sorted(sizes.items(), reverse=True)
    ]
    workload = {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {
            "namespace": NAMESPACE,
            "name": job.job_id,
            "uid": job.job_id,
            "creationTimestamp": stamp,
            **(
                {"annotations": {CHECKPOINT_INTERVAL_ANNOTATION: str(checkpoint_interval_s)}}
                if checkpoint_interval_s
                else {}
            ),
        },
        "spec": {"queueName": job.queue, "priority": job.priority, "podSets": pod_sets},
    }
    running = placement is not None and started is not None
    if running:
        assert started is not None
        since = started.isoformat().replace("+00:00", "Z")
        workload["status"] = {
            "admission": {
                "clusterQueue": job.queue,
                "podSetAssignments": [
                    {
                        "name": f"gpus-{gpus}",
                        "count": count,
                        "flavors": {GPU: FLAVOR},
                        "resourceUsage": {GPU: str(gpus * count)},
                    }
                    for gpus, count in sorted(sizes.items(), reverse=True)
                ],
            },
            "conditions": [
                {"type": t, "status": "True", "reason": t, "lastTransitionTime": since}
                for t in ("QuotaReserved", "Admitted")
            ],
        }
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "namespace": NAMESPACE,
                "name": pod_name(job, i),
                "uid": pod_name(job, i),
                "annotations": {KUEUE_WORKLOAD_ANNOTATION: job.job_id},
            },
            "spec": {
                "priority": job.priority,
                "containers": [_container(gpus)],
                **({"nodeName": placement[i]} if running and placement else {}),
            },
            "status": (
                {"phase": "Running", "startTime": since} if running else {"phase": "Pending"}
            ),
        }
        for i, gpus in enumerate(job.pods)
    ]
    return [workload, *pods]


def _container(gpus: int) -> dict[str, Any]:
    return {"name": "main", "resources": {"requests": {GPU: str(gpus)}}}


__all__ = ["COHORT", "FLAVOR", "GPU", "NAMESPACE", "cluster_objects", "job_objects", "pod_name"]
