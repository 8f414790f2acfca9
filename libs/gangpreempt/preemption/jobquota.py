"""Job-level quota (Koordinator on ElasticQuota): a quota's non-preemptible usage stays
within ``min``, everything within ``max``; a job is admitted, and preempted, whole."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import PREEMPTIBLE_LABEL, QUOTA_NAME_LABEL, ElasticQuota, Pod
from gangpreempt.placement.cluster import add_into


def quota_of(state: ClusterState, pod: Pod) -> ElasticQuota | None:
    """Koordinator's label ``quota.scheduling.koordinator.sh/name`` first (a quota of that
    name, in the pod's namespace if there is one there), else the namespace's quota (the
    scheduler-plugins rule: one ElasticQuota per namespace)."""
    name = pod.labels.get(QUOTA_NAME_LABEL)
    if name:
        same_ns = state.elastic_quotas.get(f"{pod.namespace}/{name}")
        if same_ns is not None:
            return same_ns
        for eq in sorted(state.elastic_quotas.values(), key=lambda q: q.key):
            if eq.name == name:
                return eq
        return None
    for eq in sorted(state.elastic_quotas.values(), key=lambda q: q.key):
        if eq.namespace == pod.namespace:
            return eq
    return None


def non_preemptible(pod: Pod) -> bool:
    return pod.labels.get(PREEMPTIBLE_LABEL) == "false"


class JobQuota:
    """The preemptor's ElasticQuota with its members' usage, answering "does the job fit
    if these pods are gone?" for the feasibility check of the victim search."""

    def __init__(
        self,
        quota: ElasticQuota,
        members: Iterable[Pod],
        job_demand: Mapping[str, int],
        job_non_preemptible: bool,
    ) -> None:
        self.quota = quota
        self.job = dict(job_demand)
        self.job_np = job_non_preemptible
        self.np_used: dict[str, int] = {}
        self.p_used: dict[str, int] = {}
        self.usage: dict[str, tuple[bool, dict[str, int]]] = {}
        for pod in members:
            np = non_preemptible(pod)
            add_into(self.np_used if np else self.p_used, pod.requests)
            self.usage[pod.key] = (np, pod.requests)
        self.resources = sorted(set(quota.max) | set(quota.min))

    def fits(self, removed: Iterable[str] = ()) -> bool:
        """With the pods named in ``removed`` (pod keys) gone, does the job fit?"""
        np_used = dict(self.np_used)
        p_used = dict(self.p_used)
        for key in removed:
            entry = self.usage.get(key)
            if entry is not None:
                add_into(np_used if entry[0] else p_used, entry[1], -1)
        return self.violation(np_used, p_used) is None

    def violation(self, np_used: Mapping[str, int], p_used: Mapping[str, int]) -> str | None:
        q = self.quota
        for res in self.resources:
            req = self.job.get(res, 0)
            if req == 0:
                continue
            lo = q.min.get(res, 0)
            hi = q.max.get(res)
            np, p = np_used.get(res, 0), p_used.get(res, 0)
            if self.job_np:
                if np + req > lo:
                    return f"non-preemptible {res} would be {np + req}, above min {lo}"
                if hi is not None and np + p + req > hi:
                    return f"{res} would be {np + p + req}, above max {hi}"
            elif hi is not None and min(lo, np) + p + req > hi:
                return f"{res} would be {min(lo, np) + p + req}, above max {hi}"
        return None

    def why_not(self) -> str | None:
        """Why the job does not fit as things are, or None."""
        return self.violation(self.np_used, self.p_used)


__all__ = ["JobQuota", "non_preemptible", "quota_of"]
