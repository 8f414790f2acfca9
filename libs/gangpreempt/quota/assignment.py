"""Flavor assignment (Kueue's flavor assigner with KEP-582 fungibility).

For each pod set and each resource group it needs, the flavors of the ClusterQueue are
tried in order, skipping flavors whose taints or node labels the pod set rules out. Each
flavor gets a granular mode (fit, reclaim, preempt, no candidates, no fit) and a borrowing
level; ``flavorFungibility`` decides whether to stop at a flavor or try the next, and
``preference`` which of the tried flavors wins.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gangpreempt.model.quantity import format_amount
from gangpreempt.model.queues import NEVER, ResourceFlavor, ResourceGroup
from gangpreempt.model.workloads import PodSet
from gangpreempt.quota.modes import (
    BEST,
    WORST,
    Granular,
    Mode,
    Possibility,
    preferred,
    try_next_flavor,
)
from gangpreempt.quota.pending import PendingWorkload
from gangpreempt.quota.snapshot import ClusterQueueState, Snapshot
from gangpreempt.quota.tas import flavor_mismatch, tas_only
from gangpreempt.quota.tree import (
    FR,
    Quantities,
    cq_available,
    lowest_fitting_subtree,
    potential_available,
)

# (cluster queue, workload, flavor-resource, quantity) -> (possibility, borrowing after)
Oracle = Callable[[ClusterQueueState, PendingWorkload, FR, int], tuple[Possibility, int]]


class FlavorChoice:
    __slots__ = ("borrow", "flavor", "mode")

    def __init__(self, flavor: str, mode: Mode, borrow: int) -> None:
        self.flavor = flavor
        self.mode = mode
        self.borrow = borrow


class PodSetAssignment:
    __slots__ = ("count", "flavors", "name", "reasons", "requests", "tried")

    def __init__(self, name: str, count: int, requests: dict[str, int]) -> None:
        self.name = name
        self.count = count
        self.requests = requests  # totals for the pod set
        self.flavors: dict[str, FlavorChoice] = {}
        self.reasons: list[str] = []
        self.tried: dict[str, int] = {}  # resource -> index of the last flavor tried

    @property
    def mode(self) -> Mode:
        needed = [r for r, v in self.requests.items() if v]
        if any(r not in self.flavors for r in needed):
            return Mode.NoFit
        return min((c.mode for c in self.flavors.values()), default=Mode.Fit)


class Assignment:
    __slots__ = ("borrowing", "pod_sets", "usage")

    def __init__(self) -> None:
        self.pod_sets: list[PodSetAssignment] = []
        self.borrowing = 0
        self.usage: Quantities = {}

    @property
    def mode(self) -> Mode:
        if not self.pod_sets:
            return Mode.NoFit
        return min(ps.mode for ps in self.pod_sets)

    def flavors(self) -> dict[str, dict[str, str]]:
        return {
            ps.name: {r: c.flavor for r, c in sorted(ps.flavors.items())} for ps in self.pod_sets
        }

    def needing_preemption(self) -> frozenset[FR]:
        return frozenset(
            (c.flavor, r)
            for ps in self.pod_sets
            for r, c in ps.flavors.items()
            if c.mode is Mode.Preempt
        )

    def message(self) -> str:
        parts = []
        for ps in self.pod_sets:
            if ps.mode is Mode.Fit or not ps.reasons:
                continue
            parts.append(
                f"couldn't assign flavors to pod set {ps.name}: {', '.join(sorted(ps.reasons))}"
            )
        return "; ".join(parts)

    def _append(self, ps: PodSetAssignment) -> None:
        self.pod_sets.append(ps)
        for res, choice in ps.flavors.items():
            self.borrowing = max(self.borrowing, choice.borrow)
            fr = (choice.flavor, res)
            self.usage[fr] = self.usage.get(fr, 0) + ps.requests.get(res, 0)


def pod_set_requests(ps: PodSet, cq: ClusterQueueState, count: int | None = None) -> dict[str, int]:
    n = ps.count if count is None else count
    requests = ps.total(n)
    if cq.covers("pods"):
        requests["pods"] = n
    return requests


class FlavorAssigner:
    """Assigns flavors to one pending workload in one ClusterQueue of a snapshot."""

    def __init__(
        self,
        snapshot: Snapshot,
        cq: ClusterQueueState,
        workload: PendingWorkload,
        oracle: Oracle,
        start: Mapping[tuple[str, str], int] | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.cq = cq
        self.wl = workload
        self.oracle = oracle
        self.start = start or {}
        self._tas_only: bool | None = None  # every flavor of the queue names a Topology
        spec = cq.spec
        self.fungibility = spec.flavor_fungibility
        self.can_preempt_in_cq = spec.preemption.within_cluster_queue != NEVER
        # Kueue: borrowWithinCohort, or under fair sharing any reclaimWithinCohort.
        self.can_preempt_while_borrowing = spec.preemption.borrow_within_cohort != NEVER or (
            snapshot.fair_sharing and spec.preemption.reclaim_within_cohort != NEVER
        )

    def assign(self, counts: Mapping[str, int] | None = None) -> Assignment:
        assignment = Assignment()
        for ps in self.wl.pod_sets:
            count = self.wl.workload.active_count(ps)
            if counts:
                count = counts.get(ps.name, count)
            psa = PodSetAssignment(ps.name, count, pod_set_requests(ps, self.cq, count))
            failed = False
            done: set[str] = set()
            for res in sorted(psa.requests):
                if res in done:
                    continue
                group = self._group(res)
                if group is None:
                    if psa.requests[res] == 0:
                        continue
                    psa.reasons.append(f"resource {res} unavailable in ClusterQueue")
                    psa.flavors.clear()
                    failed = True
                    break
                done.update(group.covered_resources)
                chosen: dict[str, FlavorChoice] = {}
                if count == 0:
                    # A zero-count pod set is steered by one probe pod to a flavor that
                    # could ever hold it; without such a flavor it takes any.
                    probe = pod_set_requests(ps, self.cq, 1)
                    chosen = self._find_flavor(ps, psa, group, assignment.usage, probe)
                if not chosen:
                    chosen = self._find_flavor(ps, psa, group, assignment.usage)
                if not chosen:
                    # Kueue drops the pod set's other groups too: it has no flavors.
                    psa.flavors.clear()
                    failed = True
                    break
                psa.flavors.update(chosen)
            assignment._append(psa)
            if failed:
                return assignment
        return assignment

    def _group(self, resource: str) -> ResourceGroup | None:
        for g in self.cq.spec.resource_groups:
            if resource in g.covered_resources:
                return g
        return None

    def _flavor_rejects(
        self, ps: PodSet, flavor: ResourceFlavor | None, name: str, group: ResourceGroup
    ) -> str | None:
        if flavor is None:
            return f"flavor {name} not found"
        state = self.snapshot.state
        if state.topologies or flavor.topology_name:
            if self._tas_only is None:
                names = [f.name for g in self.cq.spec.resource_groups for f in g.flavors]
                self._tas_only = tas_only(state, names)
            mismatch = flavor_mismatch(state, self._tas_only, ps, flavor, group.covered_resources)
            if mismatch is not None:
                return mismatch
        taint = ps.scheduling.first_untolerated(flavor.node_taints, flavor.tolerations)
        if taint is not None:
            return f"untolerated taint {taint} in flavor {name}"
        if not ps.scheduling.matches_labels(flavor.node_labels, frozenset(flavor.node_labels)):
            return f"flavor {name} doesn't match node affinity"
        return None

    def _find_flavor(
        self,
        ps: PodSet,
        psa: PodSetAssignment,
        group: ResourceGroup,
        usage: Quantities,
        probe: dict[str, int] | None = None,
    ) -> dict[str, FlavorChoice]:
        requests = {r: v for r, v in psa.requests.items() if r in group.covered_resources}
        first_res = min(requests)
        best: dict[str, FlavorChoice] = {}
        best_mode = WORST
        reasons: list[str] = []
        attempted = -1
        start = self.start.get((ps.name, first_res), 0)
        flavors = group.flavors
        for idx in range(start, len(flavors)):
            attempted = idx
            name = flavors[idx].name
            rejected = self._flavor_rejects(ps, self.snapshot.flavors.get(name), name, group)
            if rejected is None and probe is not None:
                rejected = self._probe_rejects(name, group, probe, usage)
            if rejected is not None:
                reasons.append(rejected)
                continue
            choices: dict[str, FlavorChoice] = {}
            rep = BEST
            for res in sorted(requests):
                fr = (name, res)
                possibility, borrow, why = self._fits(fr, usage.get(fr, 0), requests[res])
                if why:
                    reasons.append(why)
                mode = Granular(possibility, borrow)
                if preferred(rep, mode, self.fungibility):
                    rep = mode
                if rep.possibility is Possibility.NO_FIT:
                    break
                choices[res] = FlavorChoice(name, possibility.mode, borrow)
            if not try_next_flavor(rep, self.fungibility):
                best, best_mode = choices, rep
                break
            if preferred(rep, best_mode, self.fungibility):
                best, best_mode = choices, rep
        tried = -1 if attempted == len(flavors) - 1 else attempted
        for res in requests:
            psa.tried[res] = tried
        if best_mode.possibility is not Possibility.FIT:
            psa.reasons.extend(reasons)
        return best

    def _probe_rejects(
        self, flavor: str, group: ResourceGroup, probe: dict[str, int], usage: Quantities
    ) -> str | None:
        for res in sorted(probe):
            if res not in group.covered_resources:
                continue
            fr = (flavor, res)
            cap = potential_available(self.cq.node, fr)
            if usage.get(fr, 0) + probe[res] > cap:
                return (
                    f"insufficient quota for {res} in flavor {flavor}, one pod "
                    f"({format_amount(res, probe[res])}) > maximum capacity "
                    f"({format_amount(res, cap)})"
                )
        return None

    def _fits(self, fr: FR, assumed: int, request: int) -> tuple[Possibility, int, str]:
        node = self.cq.node
        flavor, res = fr
        val = assumed + request
        max_capacity = potential_available(node, fr)
        if val > max_capacity:
            why = (
                f"insufficient quota for {res} in flavor {flavor}, request > maximum capacity "
                f"({format_amount(res, val)} > {format_amount(res, max_capacity)})"
            )
            return Possibility.NO_FIT, 0, why
        available = cq_available(node, fr)
        borrow, may_reclaim = lowest_fitting_subtree(node, fr, val)
        if val <= available:
            return Possibility.FIT, borrow, ""
        why = (
            f"insufficient unused quota for {res} in flavor {flavor}, "
            f"{format_amount(res, val - available)} more needed"
        )
        if (
            node.nominal(fr) >= val
            or may_reclaim
            or self.can_preempt_in_cq
            or self.can_preempt_while_borrowing
        ):
            possibility, borrow_after = self.oracle(self.cq, self.wl, fr, val)
            return possibility, borrow_after, why
        return Possibility.NO_FIT, borrow, why


__all__ = [
    "Assignment",
    "FlavorAssigner",
    "FlavorChoice",
    "Oracle",
    "PodSetAssignment",
    "pod_set_requests",
]
