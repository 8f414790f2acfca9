"""The field names of the kinds ``plan`` reads, to say which fields of a manifest are
not fields at all (a typo: ``premption:``) and which known name is nearest.

A type is a mapping of field name to the field's type: another type's name, ``"*T"``
for a map of any keys to ``T``, or None when the field's value is not looked into
(scalars, free-form maps, status). A list's items have the type of the list.

The core Kubernetes types come from ``apifields.json``, generated from the kubernetes
client's models (``python -m tests.apifields`` writes it again; the client takes half
a second to import, ``plan`` reads the file in a millisecond). Kueue's,
JobSet's, Kubeflow's and scheduler-plugins' types are written here from their APIs
(both Kueue versions' spellings); parts not written out are not looked into."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

FieldTypes = dict[str, str | None]
DATA = Path(__file__).with_name("apifields.json")
# The roots generated from the kubernetes client (and what they reach).
CORE_ROOTS = (
    "V1Pod",
    "V1Node",
    "V1Job",
    "V1PodDisruptionBudget",
    "V1PriorityClass",
    "V1PodTemplateSpec",
    "V1JobTemplateSpec",
    "V1ObjectMeta",
)
# Fields of alpha APIs the client may not know yet: added to its types.
CORE_EXTRA: dict[str, FieldTypes] = {
    "V1PodSpec": {"workloadRef": None, "schedulingGroup": None},
}

_OBJECT: FieldTypes = {"apiVersion": None, "kind": None, "metadata": "V1ObjectMeta"}

# Kueue (v1beta1 and v1beta2 spellings), JobSet, Kubeflow, scheduler-plugins.
EXTRA_TYPES: dict[str, FieldTypes] = {
    "kueue.ClusterQueue": {**_OBJECT, "spec": "kueue.ClusterQueueSpec", "status": None},
    "kueue.ClusterQueueSpec": {
        "resourceGroups": "kueue.ResourceGroup",
        "cohort": None,
        "cohortName": None,
        "queueingStrategy": None,
        "namespaceSelector": None,
        "flavorFungibility": "kueue.FlavorFungibility",
        "preemption": "kueue.Preemption",
        "admissionChecks": None,
        "admissionChecksStrategy": None,
        "stopPolicy": None,
        "fairSharing": "kueue.FairSharing",
        "admissionScope": None,
    },
    "kueue.ResourceGroup": {"coveredResources": None, "flavors": "kueue.FlavorQuotas"},
    "kueue.FlavorQuotas": {"name": None, "resources": "kueue.ResourceQuota"},
    "kueue.ResourceQuota": {
        "name": None,
        "nominalQuota": None,
        "borrowingLimit": None,
        "lendingLimit": None,
    },
    "kueue.Preemption": {
        "withinClusterQueue": None,
        "reclaimWithinCohort": None,
        "withinCohort": None,
        "borrowWithinCohort": "kueue.BorrowWithinCohort",
    },
    "kueue.BorrowWithinCohort": {"policy": None, "maxPriorityThreshold": None},
    "kueue.FlavorFungibility": {"whenCanBorrow": None, "whenCanPreempt": None, "preference": None},
    "kueue.FairSharing": {"weight": None},
    "kueue.Cohort": {**_OBJECT, "spec": "kueue.CohortSpec", "status": None},
    "kueue.CohortSpec": {
        "parent": None,
        "parentName": None,
        "resourceGroups": "kueue.ResourceGroup",
        "fairSharing": "kueue.FairSharing",
    },
    "kueue.LocalQueue": {**_OBJECT, "spec": "kueue.LocalQueueSpec", "status": None},
    "kueue.LocalQueueSpec": {
        "clusterQueue": None,
        "stopPolicy": None,
        "fairSharing": "kueue.FairSharing",
    },
    "kueue.ResourceFlavor": {**_OBJECT, "spec": "kueue.ResourceFlavorSpec"},
    "kueue.ResourceFlavorSpec": {
        "nodeLabels": None,
        "nodeTaints": "V1Taint",
        "tolerations": "V1Toleration",
        "topologyName": None,
    },
    "kueue.WorkloadPriorityClass": {**_OBJECT, "value": None, "description": None},
    "kueue.Topology": {**_OBJECT, "spec": "kueue.TopologySpec"},
    "kueue.TopologySpec": {"levels": "kueue.TopologyLevel"},
    "kueue.TopologyLevel": {"nodeLabel": None},
    "kueue.Workload": {**_OBJECT, "spec": "kueue.WorkloadSpec", "status": None},
    "kueue.WorkloadSpec": {
        "podSets": "kueue.PodSet",
        "queueName": None,
        "priorityClassName": None,
        "priority": None,
        "priorityClassSource": None,
        "priorityClassRef": None,
        "active": None,
        "maximumExecutionTimeSeconds": None,
    },
    "kueue.PodSet": {
        "name": None,
        "count": None,
        "minCount": None,
        "template": "V1PodTemplateSpec",
        "topologyRequest": None,
    },
    "jobset.JobSet": {**_OBJECT, "spec": "jobset.JobSetSpec", "status": None},
    "jobset.JobSetSpec": {
        "replicatedJobs": "jobset.ReplicatedJob",
        "network": None,
        "successPolicy": None,
        "failurePolicy": None,
        "startupPolicy": None,
        "suspend": None,
        "coordinator": None,
        "managedBy": None,
        "ttlSecondsAfterFinished": None,
    },
    "jobset.ReplicatedJob": {
        "name": None,
        "groupName": None,
        "template": "V1JobTemplateSpec",
        "replicas": None,
        "dependsOn": None,
    },
    "kubeflow.PyTorchJob": {**_OBJECT, "spec": "kubeflow.PyTorchJobSpec", "status": None},
    "kubeflow.PyTorchJobSpec": {
        "runPolicy": None,
        "elasticPolicy": None,
        "nprocPerNode": None,
        "pytorchReplicaSpecs": "*kubeflow.ReplicaSpec",
    },
    "kubeflow.ReplicaSpec": {
        "replicas": None,
        "template": "V1PodTemplateSpec",
        "restartPolicy": None,
    },
    "plugins.PodGroup": {**_OBJECT, "spec": "plugins.PodGroupSpec", "status": None},
    "plugins.PodGroupSpec": {
        "minMember": None,
        "minResources": None,
        "scheduleTimeoutSeconds": None,
    },
    "plugins.ElasticQuota": {**_OBJECT, "spec": "plugins.ElasticQuotaSpec", "status": None},
    "plugins.ElasticQuotaSpec": {"min": None, "max": None},
}

# (apiVersion pattern, kind) -> the object's type. Kinds not here are not looked into
# (the scheduling.k8s.io gang APIs change with every release).
_KUEUE = r"kueue\.x-k8s\.io/v1(alpha1|beta1|beta2)"
_PLUGINS = r"scheduling\.(x-k8s|sigs\.k8s)\.io/v1alpha1"
ROOTS: tuple[tuple[str, str, str], ...] = (
    (r"v1", "Pod", "V1Pod"),
    (r"v1", "Node", "V1Node"),
    (r"batch/v1", "Job", "V1Job"),
    (r"policy/v1", "PodDisruptionBudget", "V1PodDisruptionBudget"),
    (r"scheduling\.k8s\.io/v1", "PriorityClass", "V1PriorityClass"),
    (_KUEUE, "ClusterQueue", "kueue.ClusterQueue"),
    (_KUEUE, "Cohort", "kueue.Cohort"),
    (_KUEUE, "LocalQueue", "kueue.LocalQueue"),
    (_KUEUE, "ResourceFlavor", "kueue.ResourceFlavor"),
    (_KUEUE, "Topology", "kueue.Topology"),
    (_KUEUE, "WorkloadPriorityClass", "kueue.WorkloadPriorityClass"),
    (_KUEUE, "Workload", "kueue.Workload"),
    (r"jobset\.x-k8s\.io/v1alpha2", "JobSet", "jobset.JobSet"),
    (r"kubeflow\.org/v1", "PyTorchJob", "kubeflow.PyTorchJob"),
    (_PLUGINS, "PodGroup", "plugins.PodGroup"),
    (_PLUGINS, "ElasticQuota", "plugins.ElasticQuota"),
)


@cache
def types() -> dict[str, FieldTypes]:
    core: dict[str, FieldTypes] = json.loads(DATA.read_text())
    for name, extra in CORE_EXTRA.items():
        core[name] = {**core.get(name, {}), **extra}
    return {**core, **EXTRA_TYPES}


@cache
def root_of(api_version: str, kind: str) -> str | None:
    for pattern, root_kind, root in ROOTS:
        if kind == root_kind and re.fullmatch(pattern, api_version):
            return root
    return None


class Unknown:
    """A field that is not one: where it is (its container and key, for the line), its
    path, the type it is not a field of, and the nearest known name."""

    __slots__ = ("container", "key", "near", "path", "type_name")

    def __init__(
        self, container: Any, key: Any, path: str, type_name: str, near: str | None
    ) -> None:
        self.container = container
        self.key = key
        self.path = path
        self.type_name = type_name
        self.near = near

    def message(self) -> str:
        owner = self.type_name.split(".")[-1].removeprefix("V1")
        text = f"{self.path}: {self.key!r} is not a field of {owner}"
        if self.near:
            text += f"; did you mean {self.near!r}?"
        return text


def unknown_fields(doc: Any, type_name: str) -> Iterator[Unknown]:
    """Every key of ``doc`` that its type does not have, depth first."""
    yield from _walk(doc, type_name, "", types())


def _walk(value: Any, type_name: str, path: str, known: dict[str, FieldTypes]) -> Iterator[Unknown]:
    if isinstance(value, list):
        for i, item in enumerate(value):
            yield from _walk(item, type_name, f"{path}[{i}]", known)
        return
    if not isinstance(value, dict):
        return
    if type_name.startswith("*"):
        for key, item in value.items():
            yield from _walk(item, type_name[1:], f"{path}.{key}" if path else str(key), known)
        return
    fields = known.get(type_name)
    if fields is None:
        return
    for key, item in value.items():
        sub = f"{path}.{key}" if path else str(key)
        if key not in fields:
            near = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.6)
            yield Unknown(value, key, path or "(top level)", type_name, near[0] if near else None)
            continue
        child = fields[key]
        if child is not None and item is not None:
            yield from _walk(item, child, sub, known)


__all__ = ["Unknown", "root_of", "types", "unknown_fields"]
