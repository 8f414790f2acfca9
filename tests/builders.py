"""Compact constructors for model objects in tests (quantities are integer amounts:
milli-CPU for cpu, units for everything else)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from gangpreempt import events
from gangpreempt.model import (
    Admission,
    ClusterQueue,
    ClusterState,
    Cohort,
    Condition,
    FlavorFungibility,
    FlavorQuotas,
    LocalQueue,
    PodSet,
    PodSetAssignment,
    Preemption,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Workload,
    kinds,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = T0 + timedelta(hours=1)


def state_upsert(obj: Any, at: datetime = T0) -> events.ObjectUpserted:
    """The STATE event publishing model object ``obj`` (its first version)."""
    kind, key = kinds.kind_of(obj), kinds.key_of(obj)
    return events.ObjectUpserted(
        id=f"{kind}/{key}@1", occurred_at=at, kind=kind, key=key, body=kinds.encode_object(obj)
    )


def quota(nominal: int, borrowing: int | None = None, lending: int | None = None) -> ResourceQuota:
    return ResourceQuota(nominal=nominal, borrowing_limit=borrowing, lending_limit=lending)


def group(flavors: dict[str, dict[str, ResourceQuota]]) -> ResourceGroup:
    covered: list[str] = []
    for resources in flavors.values():
        for r in resources:
            if r not in covered:
                covered.append(r)
    return ResourceGroup(
        covered_resources=tuple(covered),
        flavors=tuple(FlavorQuotas(name=f, resources=res) for f, res in flavors.items()),
    )


def cluster_queue(
    name: str,
    flavors: dict[str, dict[str, ResourceQuota]],
    cohort: str | None = None,
    *,
    within: str = "Never",
    reclaim: str = "Never",
    borrow: str = "Never",
    threshold: int | None = None,
    when_can_borrow: str = "MayStopSearch",
    when_can_preempt: str = "TryNextFlavor",
    preference: str | None = None,
    strategy: str = "BestEffortFIFO",
) -> ClusterQueue:
    return ClusterQueue(
        name=name,
        cohort=cohort,
        resource_groups=(group(flavors),),
        queueing_strategy=strategy,
        preemption=Preemption(
            within_cluster_queue=within,
            reclaim_within_cohort=reclaim,
            borrow_within_cohort=borrow,
            max_priority_threshold=threshold,
        ),
        flavor_fungibility=FlavorFungibility(when_can_borrow, when_can_preempt, preference),
    )


def admitted(
    name: str,
    cq: str,
    usage: dict[str, tuple[str, int]],
    priority: int = 0,
    *,
    at: int = 0,
    evicted: bool = False,
    namespace: str = "default",
) -> Workload:
    """An admitted workload; ``usage`` maps resource -> (flavor, amount); ``at`` is the
    admission time in minutes after T0."""
    requests = {r: v for r, (_f, v) in usage.items()}
    when = T0 + timedelta(minutes=at)
    conditions = [Condition("QuotaReserved", "True", "QuotaReserved", when)]
    if evicted:
        conditions.append(Condition("Evicted", "True", "Preempted", when))
    return Workload(
        namespace=namespace,
        name=name,
        uid=f"uid-{name}",
        queue_name=cq,
        priority=priority,
        creation_timestamp=when,
        pod_sets=(PodSet(name="main", count=1, requests=requests),),
        admission=Admission(
            cluster_queue=cq,
            pod_set_assignments=(
                PodSetAssignment(
                    name="main",
                    flavors={r: f for r, (f, _v) in usage.items()},
                    resource_usage=requests,
                    count=1,
                ),
            ),
        ),
        conditions=tuple(conditions),
    )


def pending(
    name: str,
    queue: str,
    requests: dict[str, int],
    priority: int = 0,
    *,
    count: int = 1,
    at: int = 30,
    namespace: str = "default",
) -> Workload:
    return Workload(
        namespace=namespace,
        name=name,
        uid=f"uid-{name}",
        queue_name=queue,
        priority=priority,
        creation_timestamp=T0 + timedelta(minutes=at),
        pod_sets=(PodSet(name="main", count=count, requests=requests),),
    )


def state(
    cluster_queues: list[ClusterQueue],
    workloads: list[Workload] = (),  # type: ignore[assignment]
    *,
    cohorts: list[Cohort] = (),  # type: ignore[assignment]
    flavors: list[str] = ("default",),  # type: ignore[assignment]
) -> ClusterState:
    """A state where every ClusterQueue has a LocalQueue of the same name in default."""
    st = ClusterState()
    for f in flavors:
        st.flavors[f] = ResourceFlavor(name=f)
    for c in cohorts:
        st.cohorts[c.name] = c
    for cq in cluster_queues:
        st.cluster_queues[cq.name] = cq
        st.local_queues[f"default/{cq.name}"] = LocalQueue("default", cq.name, cq.name)
    for wl in workloads:
        st.workloads[wl.key] = wl
    return st


__all__ = ["NOW", "T0", "admitted", "cluster_queue", "group", "pending", "quota", "state"]
