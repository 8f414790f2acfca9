"""A replay's preemption decisions as victim-selection problems (``optimum.Problem``), each
seen as the decision saw it: the cycle's starting state, with the plans in flight held
and the decisions before it in the pass applied (their pods placed, their victims
promised, their usage counted), as the pass and ``with_nodes`` order them.

Candidates are the running Kueue Workloads the decision's rules allow: not evicting, not
promised to another plan, not preempted within the re-preemption guard; in the
preemptor's ClusterQueue, lower priority; in another ClusterQueue, one borrowing at the
cycle's start, at any priority while the preemptor stays within its nominal quota
(``reclaimWithinCohort: Any``), else lower priority (``borrowWithinCohort``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import Pod
from gangpreempt.planning.decisions import ADMIT, PREEMPT, Decision
from gangpreempt.preemption.candidates import recently_preempted
from gangpreempt.simulation.optimum import Candidate, Problem
from gangpreempt.simulation.world import GPU


class PassView:
    """Room and quota as the decisions of one pass see them, one after the other."""

    def __init__(
        self,
        state: ClusterState,
        gpus_per_node: int,
        held: Iterable[tuple[Mapping[str, str], Iterable[str]]],
        *,
        now_s: float,
        running_since: Mapping[str, float],
        checkpoint_interval_s: float,
        nominal: Mapping[str, int],
        usage: Mapping[str, int],
    ) -> None:
        self.state = state
        self.now_s = now_s
        self.running_since = running_since
        self.checkpoint_s = checkpoint_interval_s
        self.nominal = dict(nominal)
        self.usage = dict(usage)  # GPUs per ClusterQueue, plans in flight held
        self.borrowing = frozenset(q for q, u in self.usage.items() if u > self.nominal.get(q, 0))
        self.total = sum(self.nominal.values())
        self.pods_by_workload: dict[str, list[Pod]] = {}
        for pod in state.pods.values():
            if pod.kueue_workload:
                self.pods_by_workload.setdefault(pod.kueue_workload, []).append(pod)
        self.used = {name: 0 for name in state.nodes}
        self.capacity = {name: gpus_per_node for name in state.nodes}
        for pod in state.pods.values():
            if pod.running and pod.node_name in self.used:
                self.used[pod.node_name] += pod.requests.get(GPU, 0)
        self.promised: set[str] = set()
        for placement, victims in held:
            self._take(placement, victims)

    def _gpus_of(self, pod_ref: str) -> int:
        pod = self.state.pods.get(pod_ref.removeprefix("Pod/"))
        return pod.requests.get(GPU, 0) if pod is not None else 0

    def _take(self, placement: Mapping[str, str], victims: Iterable[str]) -> None:
        """A plan's room, as ``NodePlanner.hold`` takes it: its victims' room goes to its
        own pods only; what they leave over stays taken until they are gone."""
        freed: dict[str, int] = {}
        for ref in victims:
            if ref in self.promised:
                continue
            self.promised.add(ref)
            for pod in self._pods_of(ref):
                if pod.running and pod.node_name in self.used:
                    freed[pod.node_name] = freed.get(pod.node_name, 0) + pod.requests.get(GPU, 0)
        placed: dict[str, int] = {}
        for ref, node in placement.items():
            mine = self.state.pods.get(ref.removeprefix("Pod/"))
            if mine is not None and mine.pending and node in self.used:
                placed[node] = placed.get(node, 0) + mine.requests.get(GPU, 0)
        for node, gpus in placed.items():
            self.used[node] += gpus - min(gpus, freed.get(node, 0))

    def _pods_of(self, ref: str) -> list[Pod]:
        return self.pods_by_workload.get(ref.removeprefix("Workload/"), [])

    def apply(self, d: Decision) -> None:
        """The decision's effect on what the next ones see."""
        if d.outcome not in (ADMIT, PREEMPT):
            return
        queue = d.queue.removeprefix("ClusterQueue/")
        need = sum(self._gpus_of(ref) for ref in d.placement)
        freed: dict[str, int] = {}
        for v in d.victims:
            if v.object in self.promised:
                continue
            wl = self.state.workloads.get(v.object.removeprefix("Workload/"))
            if wl is not None and wl.admission is not None:
                cq = wl.admission.cluster_queue
                freed[cq] = freed.get(cq, 0) + sum(
                    p.requests.get(GPU, 0) for p in self._pods_of(v.object)
                )
        for cq, gpus in freed.items():
            self.usage[cq] = self.usage.get(cq, 0) - gpus
        self.usage[queue] = self.usage.get(queue, 0) + need
        self._take(d.placement, [v.object for v in d.victims])

    def problem(self, d: Decision, available: int | None = None) -> Problem:
        """The Preempt decision ``d`` as a victim-selection problem; ``available``: the
        GPUs its ClusterQueue could still take when the pass decided it (capacity held
        back for heads before it included), else what this view counts."""
        state = self.state
        preemptor = state.workloads[d.preemptor.removeprefix("Workload/")]
        priority = state.priority_of(preemptor)
        queue = d.queue.removeprefix("ClusterQueue/")
        pods = tuple(self._gpus_of(ref) for ref in sorted(d.placement))
        need = sum(pods)
        within_nominal = self.usage.get(queue, 0) + need <= self.nominal.get(queue, 0)
        candidates = []
        for wl in state.workloads.values():
            if not wl.holds_quota or wl.is_evicting or wl.admission is None:
                continue
            if wl.ref in self.promised or wl.ref == d.preemptor:
                continue
            if recently_preempted(wl.preempted_ts, self.now_s):
                continue
            cq = wl.admission.cluster_queue
            p = state.priority_of(wl)
            if cq == queue:
                if p >= priority:
                    continue
            elif cq not in self.borrowing or not (within_nominal or p < priority):
                continue
            gpus_on: dict[str, int] = {}
            for pod in self._pods_of(wl.ref):
                if pod.running:
                    gpus_on[pod.node_name] = gpus_on.get(pod.node_name, 0) + pod.requests.get(
                        GPU, 0
                    )
            job = wl.name
            ran = self.now_s - self.running_since.get(job, self.now_s)
            lost = (ran % self.checkpoint_s if self.checkpoint_s > 0 else ran) * sum(
                gpus_on.values()
            )
            candidates.append(Candidate(wl.ref, p, gpus_on, round(lost / 3600.0, 6)))
        free = {n: self.capacity[n] - u for n, u in self.used.items() if self.capacity[n] - u > 0}
        cohort_used = sum(self.usage.values())
        return Problem(
            pods=pods,
            free=dict(sorted(free.items())),
            quota_need=max(
                0, need - available if available is not None else cohort_used + need - self.total
            ),
            candidates=tuple(sorted(candidates, key=lambda c: c.ref)),
        )


__all__ = ["PassView"]
