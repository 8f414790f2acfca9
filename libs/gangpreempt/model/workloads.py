"""Kueue Workloads: pod sets with per-pod requests, the admission Kueue recorded, and
the conditions that say whether the workload holds quota or is being evicted."""

from __future__ import annotations

from datetime import datetime

import msgspec

from gangpreempt.model.bounds import Count, Priority, Quantity
from gangpreempt.model.checks import READY, CheckState
from gangpreempt.model.scheduling import SchedulingConstraints
from gangpreempt.model.topology import TopologyAssignment, TopologyRequest

QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
FINISHED = "Finished"
PREEMPTED = "Preempted"
LAST_CHECKPOINT_ANNOTATION = "gangpreempt.io/last-checkpoint"
CHECKPOINT_INTERVAL_ANNOTATION = "gangpreempt.io/checkpoint-interval-seconds"
PRIORITY_BOOST_ANNOTATION = "kueue.x-k8s.io/priority-boost"

WORKLOAD_PRIORITY_CLASS = "WorkloadPriorityClass"
PRIORITY_CLASS = "PriorityClass"


class PodSet(msgspec.Struct, frozen=True):
    name: str
    count: Count
    requests: dict[str, Quantity]  # per pod, integer amounts
    min_count: Count | None = None
    scheduling: SchedulingConstraints = SchedulingConstraints()
    # Kueue's topology-aware scheduling: where its pods must be (None: no topology asked)
    topology: TopologyRequest | None = None

    def total(self, count: int | None = None) -> dict[str, int]:
        n = self.count if count is None else count
        return {res: q * n for res, q in self.requests.items()}


class PodSetAssignment(msgspec.Struct, frozen=True):
    name: str
    flavors: dict[str, str]
    resource_usage: dict[str, Quantity]  # total for the pod set
    count: Count
    # Kueue's topology-aware scheduling: the domains its pods were admitted to
    topology_assignment: TopologyAssignment | None = None


class Admission(msgspec.Struct, frozen=True):
    cluster_queue: str
    pod_set_assignments: tuple[PodSetAssignment, ...]


class Condition(msgspec.Struct, frozen=True):
    type: str
    status: str
    reason: str = ""
    last_transition_time: datetime | None = None
    message: str = ""  # read for Kueue's Preempted / Evicted (who preempted: shadow mode)


class PriorityClassRef(msgspec.Struct, frozen=True):
    kind: str  # WORKLOAD_PRIORITY_CLASS or PRIORITY_CLASS
    name: str


class Workload(msgspec.Struct, frozen=True):
    namespace: str
    name: str
    pod_sets: tuple[PodSet, ...]
    uid: str = ""
    resource_version: str = ""
    queue_name: str = ""
    priority: Priority | None = None
    priority_class: PriorityClassRef | None = None
    creation_timestamp: datetime | None = None
    admission: Admission | None = None
    conditions: tuple[Condition, ...] = ()
    active: bool = True
    reclaimable_pods: dict[str, Count] = msgspec.field(default_factory=dict)
    # The object Kueue made it for (``Job/ns/name``, ``Pod/ns/name``, ...): its
    # controlling owner reference, or the submitted object it was derived from.
    owner: str = ""
    # What it would lose if evicted now, when its job says (annotations
    # ``gangpreempt.io/last-checkpoint``, ``gangpreempt.io/checkpoint-interval-seconds``):
    # read only under ``--victim-cost lost-gpu-hours``.
    last_checkpoint: datetime | None = None
    checkpoint_interval_s: int | None = None
    # Kueue's ``kueue.x-k8s.io/priority-boost`` annotation (a signed 32-bit integer added
    # to its priority while Kueue's PriorityBoost feature gate is on); 0 when absent or
    # when it does not parse, as Kueue reads it then. ``priority_boost_invalid``: the
    # annotation's text when it is there but does not parse, empty text included
    # (Kueue's webhook rejects such a Workload while the gate is on).
    priority_boost: int = 0
    priority_boost_invalid: str | None = None
    # status.admissionChecks, as Kueue keeps them while quota is reserved.
    checks: tuple[CheckState, ...] = ()
    # The name of gangpreempt's AdmissionCheck when the workload's ClusterQueue lists
    # one (joined when the objects are read): the workload is gangpreempt's to place.
    placement_check: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ref(self) -> str:
        return f"Workload/{self.namespace}/{self.name}"

    def active_count(self, ps: PodSet) -> int:
        """Pods of the pod set still needed: count minus pods already reclaimable."""
        return max(0, ps.count - self.reclaimable_pods.get(ps.name, 0))

    def condition(self, type_: str) -> Condition | None:
        for cond in self.conditions:
            if cond.type == type_:
                return cond
        return None

    def condition_true(self, type_: str) -> bool:
        cond = self.condition(type_)
        return cond is not None and cond.status == "True"

    def check(self, name: str) -> CheckState | None:
        for state in self.checks:
            if state.name == name:
                return state
        return None

    @property
    def awaits_placement(self) -> bool:
        """Kueue reserved quota for it, and gangpreempt's admission check is not Ready
        yet: it is still gangpreempt's to decide, as if it were pending (Kueue admits
        it only once the check says its whole placement is confirmed)."""
        if not self.placement_check or self.admission is None:
            return False
        mine = self.check(self.placement_check)
        if mine is not None and mine.state == READY:
            return False
        # Evicted with its reservation not released yet: a workload that ran is leaving
        # (its usage counts until it is gone); one never admitted is a reservation being
        # undone (a check's Retry, gangpreempt's or another's): it holds nothing real,
        # and stays gangpreempt's to decide, as pending.
        return not self.is_evicting or not self.condition_true(ADMITTED)

    @property
    def holds_quota(self) -> bool:
        """Admitted or quota-reserved: its usage counts against its ClusterQueue.

        An admission without any QuotaReserved / Admitted condition (a hand-written
        manifest) is taken at its word. A reservation that awaits gangpreempt's
        admission check does not count: gangpreempt decides it as a pending workload.
        """
        if self.admission is None or self.condition_true(FINISHED):
            return False
        if self.awaits_placement:
            return False
        reserved = self.condition(QUOTA_RESERVED)
        if reserved is not None:
            return reserved.status == "True"
        admitted = self.condition(ADMITTED)
        return admitted is None or admitted.status == "True"

    @property
    def is_pending(self) -> bool:
        return not self.holds_quota and not self.condition_true(FINISHED) and self.active

    @property
    def preempted_ts(self) -> float:
        """When its ``Preempted`` condition last changed (preempted, or admitted again
        after a preemption), as a POSIX timestamp; -inf when it has none."""
        mark = self.condition(PREEMPTED)
        at = mark.last_transition_time if mark is not None else None
        return at.timestamp() if at is not None else float("-inf")

    @property
    def is_evicting(self) -> bool:
        return self.condition_true(EVICTED)

    @property
    def quota_reserved_at(self) -> datetime | None:
        cond = self.condition(QUOTA_RESERVED)
        if cond is not None and cond.status == "True":
            return cond.last_transition_time
        if cond is None:
            admitted = self.condition(ADMITTED)
            if admitted is not None and admitted.status == "True":
                return admitted.last_transition_time
        return None

    def queue_order_time(self) -> datetime | None:
        """Kueue's queue-order timestamp: the eviction time when it was evicted for a
        PodsReady timeout or by an admission check, else the creation time."""
        evicted = self.condition(EVICTED)
        if (
            evicted is not None
            and evicted.status == "True"
            and evicted.reason in ("PodsReadyTimeout", "AdmissionCheck")
            and evicted.last_transition_time is not None
        ):
            return evicted.last_transition_time
        return self.creation_timestamp


__all__ = [
    "ADMITTED",
    "CHECKPOINT_INTERVAL_ANNOTATION",
    "EVICTED",
    "FINISHED",
    "LAST_CHECKPOINT_ANNOTATION",
    "PREEMPTED",
    "PRIORITY_BOOST_ANNOTATION",
    "PRIORITY_CLASS",
    "QUOTA_RESERVED",
    "WORKLOAD_PRIORITY_CLASS",
    "Admission",
    "Condition",
    "PodSet",
    "PodSetAssignment",
    "PriorityClassRef",
    "Workload",
]
