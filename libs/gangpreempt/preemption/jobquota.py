"""Job-level quota (Koordinator on ElasticQuota): a quota's non-preemptible usage stays
within ``min``, everything within ``max``; a job is admitted, and preempted, whole."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import PREEMPTIBLE_LABEL, QUOTA_NAME_LABEL, ElasticQuota, Pod
from gangpreempt.model.quantity import format_amount
from gangpreempt.placement.cluster import add_into
from gangpreempt.quota.elastictree import QuotaTree

KOORDINATOR_PREFIX = "quota.scheduling.koordinator.sh/"


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


class QuotaView:
    """Each running pod's ElasticQuota and its members, which peer's model the quotas
    follow, and, for Koordinator, the quota tree's runtimes (``quota.elastictree``) when
    the nodes are known (the root shares their allocatable less what pods in no quota
    hold). Kept current pod by pod (``pod_changed``); the tree is recomputed on first
    use after a change. A changed ElasticQuota or Node needs a new view."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._members: dict[str, dict[str, Pod]] = {}  # ElasticQuota key -> running pods
        self._requests: dict[str, dict[str, int]] = {}  # quota name -> its pods' requests
        self._used: dict[str, dict[str, int]] = {}  # quota name -> its running pods'
        self._outside: dict[str, int] = {}  # what running pods in no quota hold
        self._labelled = 0  # pods with a Koordinator quota label
        self._tree: QuotaTree | None = None
        self._tree_stale = True
        self.tree_shaped = any(
            eq.parent or eq.is_parent or eq.shared_weight or not eq.allow_lent
            for eq in state.elastic_quotas.values()
        )
        if state.elastic_quotas:
            for pod in state.pods.values():
                self._count(pod, 1)

    @property
    def koordinator(self) -> bool:
        """Koordinator's model (a quota tree, or pods that speak its quota labels), not
        CapacityScheduling's (one quota per namespace)."""
        return self.tree_shaped or self._labelled > 0

    def members(self, quota: ElasticQuota) -> list[Pod]:
        return list(self._members.get(quota.key, {}).values())

    def pod_changed(self, old: Pod | None, new: Pod | None) -> None:
        if not self.state.elastic_quotas:
            return
        if old is not None:
            self._count(old, -1)
        if new is not None:
            self._count(new, 1)
        self._tree_stale = True

    def _count(self, pod: Pod, sign: int) -> None:
        if any(key.startswith(KOORDINATOR_PREFIX) for key in pod.labels):
            self._labelled += sign
        if pod.finished:
            return
        eq = quota_of(self.state, pod)
        if eq is None:
            if pod.running:
                add_into(self._outside, pod.requests, sign)
            return
        add_into(self._requests.setdefault(eq.name, {}), pod.requests, sign)
        if pod.running:
            add_into(self._used.setdefault(eq.name, {}), pod.requests, sign)
            members = self._members.setdefault(eq.key, {})
            if sign > 0:
                members[pod.key] = pod
            else:
                members.pop(pod.key, None)

    @property
    def tree(self) -> QuotaTree | None:
        """Koordinator's tree with every quota's runtime, or None (not Koordinator's
        model, or no nodes to share)."""
        if self._tree_stale:
            self._tree = None
            if self.koordinator and self.state.nodes:
                total: dict[str, int] = {}
                for node in self.state.nodes.values():
                    add_into(total, node.allocatable)
                add_into(total, self._outside, -1)
                quotas = self.state.elastic_quotas.values()
                self._tree = QuotaTree(quotas, self._requests, total)
            self._tree_stale = False
        return self._tree

    def job_quota(
        self, quota: ElasticQuota, job_demand: Mapping[str, int], job_np: bool
    ) -> JobQuota:
        """The check for a job in ``quota``: its own limit (the runtime, else ``max``) and,
        in a tree, each ancestor's runtime."""
        levels: list[Level] = []
        limit = dict(quota.max)
        tree = self.tree
        if tree is not None:
            limit = {**limit, **tree.limit(quota.name)}
            for name in tree.ancestors(quota.name):
                used: dict[str, int] = {}
                for member in tree.subtree(name):
                    add_into(used, self._used.get(member, {}))
                levels.append(Level(name, used, tree.limit(name)))
        return JobQuota(
            quota,
            self.members(quota),
            job_demand,
            job_np,
            limit=limit,
            levels=levels,
        )


class Level:
    """An ancestor quota in the tree: what it and the quotas under it use, its runtime."""

    __slots__ = ("limit", "name", "used")

    def __init__(self, name: str, used: dict[str, int], limit: dict[str, int]) -> None:
        self.name = name
        self.used = used
        self.limit = limit


class JobQuota:
    """The preemptor's ElasticQuota with its members' usage, answering "does the job fit
    if these pods are gone?" for the feasibility check of the victim search: a
    non-preemptible job's non-preemptible usage within ``min``; all usage within the
    quota's limit (Koordinator's runtime in a tree, else ``max``) and each ancestor's."""

    def __init__(
        self,
        quota: ElasticQuota,
        members: Iterable[Pod],
        job_demand: Mapping[str, int],
        job_non_preemptible: bool,
        limit: Mapping[str, int] | None = None,
        levels: Iterable[Level] = (),
    ) -> None:
        self.quota = quota
        self.job = dict(job_demand)
        self.job_np = job_non_preemptible
        self.limit = dict(quota.max if limit is None else limit)
        self.levels = list(levels)
        self.np_used: dict[str, int] = {}
        self.p_used: dict[str, int] = {}
        self.usage: dict[str, tuple[bool, dict[str, int]]] = {}
        for pod in members:
            np = non_preemptible(pod)
            add_into(self.np_used if np else self.p_used, pod.requests)
            self.usage[pod.key] = (np, pod.requests)
        self.resources = sorted(set(self.limit) | set(quota.min))

    def fits(self, removed: Iterable[str] = ()) -> bool:
        """With the pods named in ``removed`` (pod keys) gone, does the job fit?"""
        np_used = dict(self.np_used)
        p_used = dict(self.p_used)
        removed = list(removed)
        for key in removed:
            entry = self.usage.get(key)
            if entry is not None:
                add_into(np_used if entry[0] else p_used, entry[1], -1)
        if self.violation(np_used, p_used) is not None:
            return False
        return self._level_violation(removed) is None

    def violation(self, np_used: Mapping[str, int], p_used: Mapping[str, int]) -> str | None:
        q = self.quota
        for res in self.resources:
            req = self.job.get(res, 0)
            if req == 0:
                continue
            lo = q.min.get(res, 0)
            hi = self.limit.get(res)
            np, p = np_used.get(res, 0), p_used.get(res, 0)
            if self.job_np and np + req > lo:
                return (
                    f"non-preemptible {res} would be {_fmt(res, np + req)}, above min "
                    f"{_fmt(res, lo)}"
                )
            if hi is not None and np + p + req > hi:
                top = q.max.get(res)
                bound = (
                    f"max {_fmt(res, hi)}"
                    if hi == top
                    else f"its runtime quota {_fmt(res, hi)} (max {_fmt(res, top)})"
                )
                return f"{res} would be {_fmt(res, np + p + req)}, above {bound}"
        return None

    def _level_violation(self, removed: Iterable[str]) -> str | None:
        if not self.levels:
            return None
        gone: dict[str, int] = {}  # the quota's own pods removed: in every ancestor
        for key in removed:
            entry = self.usage.get(key)
            if entry is not None:
                add_into(gone, entry[1])
        for level in self.levels:
            used = dict(level.used)
            add_into(used, gone, -1)
            for res, req in self.job.items():
                hi = level.limit.get(res)
                if req and hi is not None and used.get(res, 0) + req > hi:
                    return (
                        f"{res} of parent quota {level.name} would be "
                        f"{_fmt(res, used.get(res, 0) + req)}, above its runtime {_fmt(res, hi)}"
                    )
        return None

    def why_not(self) -> str | None:
        """Why the job does not fit as things are, or None."""
        return self.violation(self.np_used, self.p_used) or self._level_violation(())


def _fmt(res: str, amount: int | None) -> str:
    return "none" if amount is None else format_amount(res, amount)


def koordinator_quotas(state: ClusterState) -> bool:
    """Do the ElasticQuotas follow Koordinator's model (see ``QuotaView.koordinator``)?"""
    return QuotaView(state).koordinator


__all__ = [
    "KOORDINATOR_PREFIX",
    "JobQuota",
    "Level",
    "QuotaView",
    "koordinator_quotas",
    "non_preemptible",
    "quota_of",
]
