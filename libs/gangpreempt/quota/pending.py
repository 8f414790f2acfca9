"""A pending workload as the admission cycle and the preemption search see it."""

from __future__ import annotations

from datetime import datetime

from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.workloads import PodSet, Workload


class PendingWorkload:
    __slots__ = ("cq", "key", "now_ts", "priority", "queue_order_ts", "ref", "uid", "workload")

    def __init__(self, workload: Workload, cq: str | None, priority: int, now: datetime) -> None:
        self.workload = workload
        self.key = workload.key
        self.ref = workload.ref
        self.cq = cq
        self.priority = priority
        order_time = workload.queue_order_time()
        self.queue_order_ts = (order_time or now).timestamp()
        self.uid = workload.uid or workload.key
        self.now_ts = now.timestamp()  # when it is decided

    @classmethod
    def of(cls, state: ClusterState, workload: Workload, now: datetime) -> PendingWorkload:
        return cls(workload, state.cluster_queue_of(workload), state.priority_of(workload), now)

    @property
    def pod_sets(self) -> tuple[PodSet, ...]:
        return self.workload.pod_sets

    def queue_order(self) -> tuple[int, float, str]:
        """Order inside a ClusterQueue: higher priority, then older, then uid."""
        return (-self.priority, self.queue_order_ts, self.uid)

    def __repr__(self) -> str:
        return f"<PendingWorkload {self.ref} p={self.priority}>"


__all__ = ["PendingWorkload"]
