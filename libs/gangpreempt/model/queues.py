"""Kueue's queueing objects: ResourceFlavor, ClusterQueue, Cohort, LocalQueue and the
priority classes. Spellings of both Kueue API versions are normalized by the manifest
reader to the v1beta2 vocabulary used here."""

from __future__ import annotations

import msgspec

from gangpreempt.model.bounds import Priority, Quantity
from gangpreempt.model.pods import LabelSelector
from gangpreempt.model.scheduling import Taint, Toleration

# Policy vocabularies (v1beta2 names; v1beta1's Borrow / Preempt map to MayStopSearch).
NEVER = "Never"
LOWER_PRIORITY = "LowerPriority"
LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"
ANY = "Any"
MAY_STOP_SEARCH = "MayStopSearch"
TRY_NEXT_FLAVOR = "TryNextFlavor"
BORROWING_OVER_PREEMPTION = "BorrowingOverPreemption"
PREEMPTION_OVER_BORROWING = "PreemptionOverBorrowing"
BEST_EFFORT_FIFO = "BestEffortFIFO"
STRICT_FIFO = "StrictFIFO"


class ResourceFlavor(msgspec.Struct, frozen=True):
    name: str
    node_labels: dict[str, str] = msgspec.field(default_factory=dict)
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    topology_name: str = ""  # spec.topologyName: a topology-aware scheduling flavor


class ResourceQuota(msgspec.Struct, frozen=True):
    """Quota of one resource in one flavor, as integer amounts (see ``model.quantity``)."""

    nominal: Quantity = 0
    borrowing_limit: Quantity | None = None
    lending_limit: Quantity | None = None


class FlavorQuotas(msgspec.Struct, frozen=True):
    name: str
    resources: dict[str, ResourceQuota]


class ResourceGroup(msgspec.Struct, frozen=True):
    covered_resources: tuple[str, ...]
    flavors: tuple[FlavorQuotas, ...]


class Preemption(msgspec.Struct, frozen=True):
    within_cluster_queue: str = NEVER
    reclaim_within_cohort: str = NEVER
    borrow_within_cohort: str = NEVER
    max_priority_threshold: Priority | None = None


class FlavorFungibility(msgspec.Struct, frozen=True):
    when_can_borrow: str = MAY_STOP_SEARCH
    when_can_preempt: str = TRY_NEXT_FLAVOR
    preference: str | None = None


class ClusterQueue(msgspec.Struct, frozen=True):
    name: str
    cohort: str | None = None
    resource_groups: tuple[ResourceGroup, ...] = ()
    queueing_strategy: str = BEST_EFFORT_FIFO
    preemption: Preemption = Preemption()
    flavor_fungibility: FlavorFungibility = FlavorFungibility()
    stop_policy: str = "None"
    # spec.fairSharing.weight (Kueue fair sharing): 0 is an infinite share when borrowing.
    fair_weight: float = 1.0
    # spec.namespaceSelector: None is Kueue's nil selector, which selects no namespace (a
    # manifest without one); the empty selector (the default here) selects every one.
    namespace_selector: LabelSelector | None = LabelSelector()
    # spec.admissionChecksStrategy (v1beta1 also spec.admissionChecks): check names.
    admission_checks: tuple[str, ...] = ()
    # The policy written in the ``gangpreempt.io/preemption`` annotation, if any.
    annotated_preemption: Preemption | None = None
    # A minimum runtime for the workloads admitted here whose priority class sets none:
    # the preemption-toleration annotations on the ClusterQueue (None when absent).
    minimum_preemptable_priority: Priority | None = None
    toleration_seconds: int | None = None
    # Joined when the objects are read: the name of gangpreempt's AdmissionCheck the
    # queue lists ("" when none: Kueue decides its workloads alone), and why gangpreempt
    # does not preempt for it when Kueue's own stanza would too.
    managed_by: str = ""
    conflict: str = ""


class Cohort(msgspec.Struct, frozen=True):
    name: str
    parent: str | None = None
    resource_groups: tuple[ResourceGroup, ...] = ()
    fair_weight: float = 1.0


LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"
FAIR_STRATEGIES = (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, LESS_THAN_INITIAL_SHARE)
KUEUE_CONFIGURATION = "kueue"  # the one key of ``ClusterState.kueue_configurations``


class KueueConfiguration(msgspec.Struct, frozen=True):
    """What gangpreempt reads of Kueue's manager ``Configuration``: whether fair sharing
    is on, and its preemption strategies (in order; the second is always the second
    pass); and whether its ``PriorityBoost`` feature gate is on (``featureGates``; off
    by default, alpha in Kueue 0.17): then a Workload's priority is its priority plus
    its ``kueue.x-k8s.io/priority-boost`` annotation, wherever Kueue reads a priority."""

    name: str = KUEUE_CONFIGURATION
    fair_sharing: bool = False
    preemption_strategies: tuple[str, ...] = FAIR_STRATEGIES
    priority_boost: bool = False


class LocalQueue(msgspec.Struct, frozen=True):
    namespace: str
    name: str
    cluster_queue: str
    stop_policy: str = "None"

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class WorkloadPriorityClass(msgspec.Struct, frozen=True):
    name: str
    value: Priority
    # Preemption toleration (the scheduler-plugins annotations, read on Kueue's class too):
    # None when the annotation is absent.
    minimum_preemptable_priority: Priority | None = None
    toleration_seconds: int | None = None


class PriorityClass(msgspec.Struct, frozen=True):
    name: str
    value: Priority
    global_default: bool = False
    preemption_policy: str = "PreemptLowerPriority"
    # Preemption toleration (scheduler-plugins): None when the annotation is absent.
    minimum_preemptable_priority: Priority | None = None
    toleration_seconds: int | None = None


__all__ = [
    "ANY",
    "BEST_EFFORT_FIFO",
    "BORROWING_OVER_PREEMPTION",
    "FAIR_STRATEGIES",
    "KUEUE_CONFIGURATION",
    "LESS_THAN_INITIAL_SHARE",
    "LESS_THAN_OR_EQUAL_TO_FINAL_SHARE",
    "LOWER_OR_NEWER_EQUAL_PRIORITY",
    "LOWER_PRIORITY",
    "MAY_STOP_SEARCH",
    "NEVER",
    "PREEMPTION_OVER_BORROWING",
    "STRICT_FIFO",
    "TRY_NEXT_FLAVOR",
    "ClusterQueue",
    "Cohort",
    "FlavorFungibility",
    "FlavorQuotas",
    "KueueConfiguration",
    "LocalQueue",
    "Preemption",
    "PriorityClass",
    "ResourceFlavor",
    "ResourceGroup",
    "ResourceQuota",
    "WorkloadPriorityClass",
]
