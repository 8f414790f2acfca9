"""Nodes, pods, pod groups (gangs), PodDisruptionBudgets and ElasticQuotas: the node-level
half of the cluster, as kube-scheduler, the scheduler-plugins and Koordinator see it."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import msgspec

from gangpreempt.model.bounds import Count, Priority, Quantity
from gangpreempt.model.scheduling import NodeSelectorRequirement, SchedulingConstraints, Taint

PODS = "pods"  # the pod-count resource every node has in its allocatable

# A gang's preemption unit (KEP-5710): one pod at a time, or the whole group at once.
UNIT_POD = "Pod"
UNIT_GROUP = "PodGroup"

NEVER = "Never"
PREEMPT_LOWER = "PreemptLowerPriority"

# Koordinator job-level labels.
PREEMPTIBLE_LABEL = "quota.scheduling.koordinator.sh/preemptible"
CAN_PREEMPT_LABEL = "quota.scheduling.koordinator.sh/can-preempt"
QUOTA_NAME_LABEL = "quota.scheduling.koordinator.sh/name"
# Koordinator's ElasticQuota tree (labels and an annotation on the ElasticQuota).
QUOTA_PARENT_LABEL = "quota.scheduling.koordinator.sh/parent"
QUOTA_IS_PARENT_LABEL = "quota.scheduling.koordinator.sh/is-parent"
QUOTA_ALLOW_LENT_LABEL = "quota.scheduling.koordinator.sh/allow-lent-resource"
QUOTA_SHARED_WEIGHT_ANNOTATION = "quota.scheduling.koordinator.sh/shared-weight"
SOFT_EVICTION_LABEL = "scheduling.koordinator.sh/soft-eviction"
# Kueue: the annotation its integrations set on the pods of an admitted Workload.
KUEUE_WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"


class LabelSelector(msgspec.Struct, frozen=True):
    match_labels: dict[str, str] = msgspec.field(default_factory=dict)
    # In, NotIn, Exists, DoesNotExist (the decoder allows no other operator)
    match_expressions: tuple[NodeSelectorRequirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.match_labels and not self.match_expressions

    def matches(self, labels: Mapping[str, str]) -> bool:
        """An empty selector matches everything (the caller decides what empty means)."""
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            r.matches(labels) for r in self.match_expressions
        )


METADATA_NAME_LABEL = "kubernetes.io/metadata.name"  # every Namespace carries it


class Namespace(msgspec.Struct, frozen=True):
    """A namespace and its labels (what a ClusterQueue's namespaceSelector selects)."""

    name: str
    labels: dict[str, str] = msgspec.field(default_factory=dict)


class Node(msgspec.Struct, frozen=True):
    name: str
    allocatable: dict[str, Quantity]
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False

    @property
    def ref(self) -> str:
        return f"Node/{self.name}"


class Pod(msgspec.Struct, frozen=True):
    namespace: str
    name: str
    requests: dict[str, Quantity]
    uid: str = ""
    resource_version: str = ""
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    node_name: str = ""
    nominated_node: str = ""
    priority: Priority | None = None
    priority_class_name: str = ""
    preemption_policy: str | None = None
    scheduling: SchedulingConstraints = SchedulingConstraints()
    start_time: datetime | None = None
    scheduled_at: datetime | None = None
    terminating: bool = False
    finished: bool = False  # phase Succeeded or Failed: holds no resources
    group: str = ""  # namespace/name of the PodGroup (gang) it belongs to, if any
    kueue_workload: str = ""  # namespace/name of the Kueue Workload that runs it, if any
    gates: tuple[str, ...] = ()  # spec.schedulingGates: kube-scheduler waits while any is
    # The nodes gangpreempt planned for its pod set (``model.checks``), when it has them.
    planned_nodes: tuple[str, ...] = ()
    created: datetime | None = None  # metadata.creationTimestamp (read for gated pods)
    # The reason of a True DisruptionTarget condition (PreemptionByScheduler: kube-scheduler
    # preempted it; EvictionByEvictionAPI, ...), else empty.
    disruption: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ref(self) -> str:
        return f"Pod/{self.namespace}/{self.name}"

    @property
    def running(self) -> bool:
        """Bound to a node and holding its resources (terminating pods still hold them)."""
        return bool(self.node_name) and not self.finished

    @property
    def pending(self) -> bool:
        return not self.node_name and not self.finished and not self.terminating


class PodGroup(msgspec.Struct, frozen=True):
    """A gang: pods that are scheduled together (``min_count`` at least) and, in
    ``PodGroup`` preemption mode, preempted together."""

    namespace: str
    name: str
    min_count: Count
    preemption_mode: str = UNIT_GROUP
    priority_class_name: str = ""
    preemption_priority_class_name: str = ""
    topology_key: str = ""
    source: str = "PodGroup"  # how it was declared, for messages
    workload: str = ""  # the scheduling.k8s.io Workload it belongs to, if any
    # spec.preemptionPolicy of a scheduling.k8s.io PodGroup (1.37, PodGroupPreemptionPolicy):
    # when set it decides for the group, whatever its pods say; None: the pods decide.
    preemption_policy: str | None = None
    # spec.priority of a scheduling.k8s.io PodGroup (1.37: admission resolves it from the
    # class, as for a pod): when set it is the group's priority, whatever its pods say.
    priority: int | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ref(self) -> str:
        return f"PodGroup/{self.namespace}/{self.name}"


class PodDisruptionBudget(msgspec.Struct, frozen=True):
    namespace: str
    name: str
    selector: LabelSelector
    disruptions_allowed: Count = 0
    disrupted_pods: frozenset[str] = frozenset()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def covers(self, pod: Pod) -> bool:
        """kube-scheduler's rule: same namespace, a non-empty selector that matches."""
        return (
            pod.namespace == self.namespace
            and bool(pod.labels)  # kube-scheduler: a pod without labels matches no budget
            and not self.selector.empty
            and self.selector.matches(pod.labels)
        )


class ElasticQuota(msgspec.Struct, frozen=True):
    """scheduling.sigs.k8s.io ElasticQuota: ``min`` guaranteed (non-preemptible usage),
    ``max`` the ceiling of everything. Koordinator's tree: ``parent`` (a quota's name;
    empty: the root), ``is_parent``, ``shared_weight`` (empty: ``max``) and
    ``allow_lent`` (whether unused ``min`` may be lent to others)."""

    namespace: str
    name: str
    min: dict[str, Quantity]
    max: dict[str, Quantity]
    parent: str = ""
    is_parent: bool = False
    shared_weight: dict[str, Quantity] = msgspec.field(default_factory=dict)
    allow_lent: bool = True

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ref(self) -> str:
        return f"ElasticQuota/{self.namespace}/{self.name}"


__all__ = [
    "CAN_PREEMPT_LABEL",
    "KUEUE_WORKLOAD_ANNOTATION",
    "METADATA_NAME_LABEL",
    "NEVER",
    "PODS",
    "PREEMPTIBLE_LABEL",
    "PREEMPT_LOWER",
    "QUOTA_ALLOW_LENT_LABEL",
    "QUOTA_IS_PARENT_LABEL",
    "QUOTA_NAME_LABEL",
    "QUOTA_PARENT_LABEL",
    "QUOTA_SHARED_WEIGHT_ANNOTATION",
    "SOFT_EVICTION_LABEL",
    "UNIT_GROUP",
    "UNIT_POD",
    "ElasticQuota",
    "LabelSelector",
    "Namespace",
    "Node",
    "Pod",
    "PodDisruptionBudget",
    "PodGroup",
]
