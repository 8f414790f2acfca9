"""Every Kubernetes API call the services make, per service: the one table the client
checks each call against and the RBAC roles in ``deploy/k8s`` are tested against.

ingest lists and watches (cluster-wide) the kinds gangpreempt reads; the actuator reads
the live objects it is about to touch and writes only what the kubernetes sink sends;
quota and victims never talk to the API server.
"""

from __future__ import annotations

from typing import NamedTuple


class Resource(NamedTuple):
    group: str  # "" for the core group
    plural: str  # with "/subresource" for a subresource
    kind: str
    namespaced: bool = True
    # Listed and watched in this namespace only (else cluster-wide), with this field
    # selector (else every object).
    namespace: str = ""
    field_selector: str = ""

    @property
    def rbac(self) -> tuple[str, str]:
        return self.group, self.plural


# What ingest reads, in publish order (the kinds others depend on first). The versions
# served are found by discovery; a group or kind not installed is skipped.
NODES = Resource("", "nodes", "Node", namespaced=False)
NAMESPACES = Resource("", "namespaces", "Namespace", namespaced=False)
# Kueue's manager Configuration (fair sharing), as Kueue's manifests install it.
KUEUE_MANAGER_CONFIG = Resource(
    "",
    "configmaps",
    "ConfigMap",
    namespace="kueue-system",
    field_selector="metadata.name=kueue-manager-config",
)
PODS = Resource("", "pods", "Pod")
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "priorityclasses", "PriorityClass", False)
PDBS = Resource("policy", "poddisruptionbudgets", "PodDisruptionBudget")
KUEUE_GROUP = "kueue.x-k8s.io"
ADMISSION_CHECKS = Resource(KUEUE_GROUP, "admissionchecks", "AdmissionCheck", False)
RESOURCE_FLAVORS = Resource(KUEUE_GROUP, "resourceflavors", "ResourceFlavor", False)
COHORTS = Resource(KUEUE_GROUP, "cohorts", "Cohort", False)
CLUSTER_QUEUES = Resource(KUEUE_GROUP, "clusterqueues", "ClusterQueue", False)
LOCAL_QUEUES = Resource(KUEUE_GROUP, "localqueues", "LocalQueue")
WORKLOAD_PRIORITY_CLASSES = Resource(
    KUEUE_GROUP, "workloadpriorityclasses", "WorkloadPriorityClass", False
)
KUEUE_WORKLOADS = Resource(KUEUE_GROUP, "workloads", "Workload")
GANG_WORKLOADS = Resource("scheduling.k8s.io", "workloads", "Workload")
GANG_POD_GROUPS = Resource("scheduling.k8s.io", "podgroups", "PodGroup")
PLUGINS_GROUPS = ("scheduling.x-k8s.io", "scheduling.sigs.k8s.io")
PLUGIN_POD_GROUPS = tuple(Resource(g, "podgroups", "PodGroup") for g in PLUGINS_GROUPS)
ELASTIC_QUOTAS = tuple(Resource(g, "elasticquotas", "ElasticQuota") for g in PLUGINS_GROUPS)

WATCHED: tuple[Resource, ...] = (
    KUEUE_MANAGER_CONFIG,
    NAMESPACES,
    PRIORITY_CLASSES,
    ADMISSION_CHECKS,
    RESOURCE_FLAVORS,
    COHORTS,
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    WORKLOAD_PRIORITY_CLASSES,
    NODES,
    *ELASTIC_QUOTAS,
    PDBS,
    *PLUGIN_POD_GROUPS,
    GANG_WORKLOADS,
    GANG_POD_GROUPS,
    PODS,
    KUEUE_WORKLOADS,
)

# What the actuator's kubernetes sink calls.
POD_EVICTIONS = Resource("", "pods/eviction", "Eviction")
POD_STATUS = Resource("", "pods/status", "Pod")
EVENTS = Resource("", "events", "Event")
JOBS = Resource("batch", "jobs", "Job")
KUEUE_WORKLOAD_STATUS = Resource(KUEUE_GROUP, "workloads/status", "Workload")
ADMISSION_CHECK_STATUS = Resource(KUEUE_GROUP, "admissionchecks/status", "AdmissionCheck", False)

ACCESS: dict[str, dict[Resource, frozenset[str]]] = {
    "ingest": {r: frozenset({"list", "watch"}) for r in WATCHED},
    "actuator": {
        PODS: frozenset({"get", "list", "delete", "patch"}),
        POD_EVICTIONS: frozenset({"create"}),
        POD_STATUS: frozenset({"patch"}),
        EVENTS: frozenset({"create"}),
        JOBS: frozenset({"get", "patch"}),
        KUEUE_WORKLOADS: frozenset({"get"}),
        KUEUE_WORKLOAD_STATUS: frozenset({"patch"}),
        # gangpreempt's AdmissionChecks marked Active (Kueue keeps a queue inactive until
        # every check it lists is).
        ADMISSION_CHECKS: frozenset({"get"}),
        ADMISSION_CHECK_STATUS: frozenset({"patch"}),
    },
    "quota": {},
    "victims": {},
}


def allowed(service: str, resource: Resource, verb: str) -> bool:
    return verb in ACCESS.get(service, {}).get(resource, frozenset())


def rbac_rules(service: str) -> dict[tuple[str, str], frozenset[str]]:
    """(apiGroup, resource) -> verbs, as an RBAC role for ``service`` must grant them."""
    rules: dict[tuple[str, str], frozenset[str]] = {}
    for resource, verbs in ACCESS[service].items():
        rules[resource.rbac] = rules.get(resource.rbac, frozenset()) | verbs
    return rules


__all__ = ["ACCESS", "WATCHED", "Resource", "allowed", "rbac_rules"]
