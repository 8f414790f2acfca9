"""The whole input of a decision: every object read from manifests or the cluster."""

from __future__ import annotations

import msgspec

from gangpreempt.model.checks import AdmissionCheck
from gangpreempt.model.pods import (
    METADATA_NAME_LABEL,
    ElasticQuota,
    Namespace,
    Node,
    Pod,
    PodDisruptionBudget,
    PodGroup,
)
from gangpreempt.model.queues import (
    ClusterQueue,
    Cohort,
    KueueConfiguration,
    LocalQueue,
    PriorityClass,
    ResourceFlavor,
    WorkloadPriorityClass,
)
from gangpreempt.model.topology import Topology
from gangpreempt.model.workloads import PRIORITY_CLASS, WORKLOAD_PRIORITY_CLASS, Workload


class ClusterState(msgspec.Struct):
    """Objects by name (cluster-scoped) or ``namespace/name`` (namespaced)."""

    flavors: dict[str, ResourceFlavor] = msgspec.field(default_factory=dict)
    cluster_queues: dict[str, ClusterQueue] = msgspec.field(default_factory=dict)
    cohorts: dict[str, Cohort] = msgspec.field(default_factory=dict)
    local_queues: dict[str, LocalQueue] = msgspec.field(default_factory=dict)
    workloads: dict[str, Workload] = msgspec.field(default_factory=dict)
    workload_priority_classes: dict[str, WorkloadPriorityClass] = msgspec.field(
        default_factory=dict
    )
    priority_classes: dict[str, PriorityClass] = msgspec.field(default_factory=dict)
    # Node level: nodes by name; pods, pod groups, PDBs and ElasticQuotas by namespace/name.
    nodes: dict[str, Node] = msgspec.field(default_factory=dict)
    pods: dict[str, Pod] = msgspec.field(default_factory=dict)
    pod_groups: dict[str, PodGroup] = msgspec.field(default_factory=dict)
    pdbs: dict[str, PodDisruptionBudget] = msgspec.field(default_factory=dict)
    elastic_quotas: dict[str, ElasticQuota] = msgspec.field(default_factory=dict)
    namespaces: dict[str, Namespace] = msgspec.field(default_factory=dict)
    # Kueue's manager Configuration (one, under ``KUEUE_CONFIGURATION``), when given.
    kueue_configurations: dict[str, KueueConfiguration] = msgspec.field(default_factory=dict)
    # Kueue's AdmissionChecks by name (gangpreempt's own among them: ``model.checks``).
    admission_checks: dict[str, AdmissionCheck] = msgspec.field(default_factory=dict)
    # Kueue's Topologies by name (topology-aware scheduling: ``model.topology``).
    topologies: dict[str, Topology] = msgspec.field(default_factory=dict)

    def gang_workload(self, key: str) -> tuple[str, ...]:
        """The pod groups of a scheduling.k8s.io Workload (``namespace/name``), by key."""
        return tuple(sorted(k for k, pg in self.pod_groups.items() if pg.workload == key))

    def namespace_labels(self, name: str) -> dict[str, str]:
        """A namespace's labels; one not in the state has the label every namespace gets."""
        ns = self.namespaces.get(name)
        if ns is None:
            return {METADATA_NAME_LABEL: name}
        return {METADATA_NAME_LABEL: name, **ns.labels}

    def kueue_configuration(self) -> KueueConfiguration:
        return next(iter(self.kueue_configurations.values()), KueueConfiguration())

    def global_default_priority(self) -> int:
        for pc in self.priority_classes.values():
            if pc.global_default:
                return pc.value
        return 0

    def priority_of(self, wl: Workload) -> int:
        """Kueue's (effective) priority: the base priority (``base_priority_of``) plus the
        workload's priority boost while Kueue's PriorityBoost feature gate is on."""
        if wl.priority_boost and self.kueue_configuration().priority_boost:
            return self.base_priority_of(wl) + wl.priority_boost
        return self.base_priority_of(wl)

    def base_priority_of(self, wl: Workload) -> int:
        """Kueue's base priority: ``spec.priority`` when set, else the referenced class's
        value, else the global-default PriorityClass, else 0."""
        if wl.priority is not None:
            return wl.priority
        ref = wl.priority_class
        if ref is not None:
            if ref.kind == WORKLOAD_PRIORITY_CLASS and ref.name in self.workload_priority_classes:
                return self.workload_priority_classes[ref.name].value
            if ref.kind == PRIORITY_CLASS and ref.name in self.priority_classes:
                return self.priority_classes[ref.name].value
        return self.global_default_priority()

    def cluster_queue_of(self, wl: Workload) -> str | None:
        """The ClusterQueue a workload belongs to: its admission's, else its LocalQueue's."""
        if wl.admission is not None:
            return wl.admission.cluster_queue
        lq = self.local_queues.get(f"{wl.namespace}/{wl.queue_name}")
        return lq.cluster_queue if lq is not None else None


__all__ = ["ClusterState"]
