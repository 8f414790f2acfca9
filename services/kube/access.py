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
TOPOLOGIES = Resource(KUEUE_GROUP, "topologies", "Topology", False)
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
    TOPOLOGIES,
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

Access = dict[Resource, frozenset[str]]

POD_EVICTION_MODES = ("eviction", "delete", "soft-eviction")
DEFAULT_POD_EVICTION = "eviction"

# The actuator, whatever it is configured to do: read the live objects it is about to
# touch, record Events, evict Kueue Workloads the Kueue way and answer its admission
# checks, with gangpreempt's AdmissionChecks marked Active (Kueue keeps a queue
# inactive until every check it lists is).
ACTUATOR_BASE: Access = {
    PODS: frozenset({"get", "list"}),
    EVENTS: frozenset({"create"}),
    KUEUE_WORKLOADS: frozenset({"get"}),
    KUEUE_WORKLOAD_STATUS: frozenset({"patch"}),
    ADMISSION_CHECKS: frozenset({"get"}),
    ADMISSION_CHECK_STATUS: frozenset({"patch"}),
}
# What each GANGPREEMPT_POD_EVICTION adds. eviction (the default): the Eviction API,
# PodDisruptionBudgets honoured, nothing else written on a pod. delete: kube-scheduler's
# way (the DisruptionTarget condition, then a delete), a Job whose pods are all victims
# suspended. soft-eviction: a label on the pod (a patch, which the admission policy of
# deploy/k8s limits to that label).
POD_EVICTION_ACCESS: dict[str, Access] = {
    "eviction": {POD_EVICTIONS: frozenset({"create"})},
    "delete": {
        PODS: frozenset({"delete"}),
        POD_STATUS: frozenset({"patch"}),
        JOBS: frozenset({"get", "patch"}),
    },
    "soft-eviction": {PODS: frozenset({"patch"})},
}
# GANGPREEMPT_MODE=act: the pods gangpreempt places are narrowed to their node and their
# gate lifted (a patch, which the admission policy limits to exactly that). Shadow mode
# writes nothing.
PLACEMENT_ACCESS: Access = {PODS: frozenset({"patch"})}


def _merge(*tables: Access) -> Access:
    merged: Access = {}
    for table in tables:
        for resource, verbs in table.items():
            merged[resource] = merged.get(resource, frozenset()) | verbs
    return merged


def actuator_access(pod_eviction: str = DEFAULT_POD_EVICTION, act: bool = True) -> Access:
    """The actuator's calls for its pod eviction mode, and whether it acts (places)."""
    if pod_eviction not in POD_EVICTION_ACCESS:
        raise ValueError(
            f"pod eviction {pod_eviction!r}: expected one of {', '.join(POD_EVICTION_MODES)}"
        )
    return _merge(ACTUATOR_BASE, POD_EVICTION_ACCESS[pod_eviction], PLACEMENT_ACCESS if act else {})


# Every call the actuator makes in one configuration or another.
ACTUATOR_ANY: Access = _merge(*(actuator_access(mode) for mode in POD_EVICTION_MODES))

# Per service, with the actuator as the defaults configure it (``actuator_access`` for
# another configuration).
ACCESS: dict[str, Access] = {
    "ingest": {r: frozenset({"list", "watch"}) for r in WATCHED},
    "actuator": actuator_access(),
    "quota": {},
    "victims": {},
}


def access_of(service: str, pod_eviction: str = DEFAULT_POD_EVICTION, act: bool = True) -> Access:
    """``service``'s calls as configured (the pod eviction mode and the mode matter to
    the actuator only)."""
    if service == "actuator":
        return actuator_access(pod_eviction, act)
    return ACCESS.get(service, {})


def rbac_rules(
    service: str, pod_eviction: str = DEFAULT_POD_EVICTION, act: bool = True
) -> dict[tuple[str, str], frozenset[str]]:
    """(apiGroup, resource) -> verbs, as an RBAC role for ``service`` must grant them."""
    rules: dict[tuple[str, str], frozenset[str]] = {}
    for resource, verbs in access_of(service, pod_eviction, act).items():
        rules[resource.rbac] = rules.get(resource.rbac, frozenset()) | verbs
    return rules


__all__ = [
    "ACCESS",
    "ACTUATOR_ANY",
    "ACTUATOR_BASE",
    "DEFAULT_POD_EVICTION",
    "PLACEMENT_ACCESS",
    "POD_EVICTION_ACCESS",
    "POD_EVICTION_MODES",
    "WATCHED",
    "Access",
    "Resource",
    "access_of",
    "actuator_access",
    "rbac_rules",
]
