"""The gang victim search of KEP-5710, per domain (the whole cluster, or each value of the
gang's topology key):

1. candidates: units below the gang's priority that may be taken (see ``units``);
2. a domain where the gang does not fit even with every candidate gone is skipped;
3. PDB reprieval: with the gang placed on the cleared domain, units that would violate
   a budget are kept when they still fit where they run;
4. binary search over the candidates' priorities for the lowest ceiling that still lets
   the gang fit (a policy, on by default);
5. place the gang once, preferring nodes that need no or only cheap victims;
6. reprieve in importance order every unit that still fits where it runs;
7. score the domains as kube-scheduler scores nodes.

With a victim cost (``GangSearch.cost``, ``--victim-cost lost-gpu-hours``) the same rule
says which units may be taken (below the gang's priority, at or under the priority
ceiling), and the cost decides among them: nodes are preferred by what their cheapest
sufficient victims lose (5), the dearest units are reprieved first (6), and domains are
compared by the victims' cost after their PDB violations (7).

Feasibility is one question, "does the gang fit if these units are gone?", answered by the
placement and by each quota check (``Check``) together."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol

import numpy as np

from gangpreempt.placement.cluster import NodeView
from gangpreempt.placement.fit import fits, take
from gangpreempt.placement.gang import Free, Shape, copy_free, place
from gangpreempt.preemption.columns import NodeColumns
from gangpreempt.preemption.dryrun import Takeable, allowed_rows
from gangpreempt.preemption.single import victim_score
from gangpreempt.preemption.units import Unit, UnitTable


class Check(Protocol):
    """A quota the gang must also fit in: ``fits`` with the named pods (keys) gone."""

    def fits(self, removed: Iterable[str] = ()) -> bool: ...


class Domain:
    __slots__ = ("name", "nodes")

    def __init__(self, name: str, nodes: list[NodeView]) -> None:
        self.name = name
        self.nodes = nodes


def domains(nodes: Sequence[NodeView], topology_key: str) -> list[Domain]:
    if not topology_key:
        return [Domain("cluster", list(nodes))]
    by_value: dict[str, list[NodeView]] = {}
    for view in nodes:
        value = view.node.labels.get(topology_key)
        if value is not None:
            by_value.setdefault(value, []).append(view)
    return [Domain(f"{topology_key}={v}", by_value[v]) for v in sorted(by_value)]


class GangOutcome:
    """The chosen domain's placement and victims (empty victims: fits as it is)."""

    __slots__ = ("domain", "placement", "victims", "violations")

    def __init__(
        self, domain: str, placement: dict[str, str], victims: list[Unit], violations: int
    ) -> None:
        self.domain = domain
        self.placement = placement
        self.victims = victims
        self.violations = violations

    def score(
        self, now: datetime, cost: Callable[[Unit], float] | None = None
    ) -> tuple[float, ...]:
        """Lower is better: kube-scheduler's node criteria; with ``cost``, the victims'
        cost right after their PDB violations."""
        score = victim_score(self.victims, self.violations, now)
        if cost is None:
            return score
        return (score[0], round(sum(cost(u) for u in self.victims), 6), *score[1:])


class GangSearch:
    """One gang's search over the domains of one snapshot."""

    def __init__(
        self,
        table: UnitTable,
        shapes: list[Shape],
        required: dict[int, int],
        candidates: list[Unit],
        checks: Sequence[Check] = (),
        quota_units: Iterable[str] = (),
        priority_search: bool = True,
        forced: Sequence[Unit] = (),
        nominated: dict[str, dict[str, int]] | None = None,
    ) -> None:
        self.table = table
        self.shapes = shapes
        self.required = required  # shape index -> pods that must be placed
        self._candidates: list[Unit] | None = candidates  # most important first
        self._filter: tuple[int, frozenset[str]] | None = None  # (priority, excluded refs)
        self.use_columns = True  # the column path where it applies (tests turn it off)
        self.checks = list(checks)
        self.quota_units = set(quota_units)  # units that count in a checked quota
        self.priority_search = priority_search
        # kube-scheduler 1.36: the gang is scheduled again at each reprieve (1.37, the
        # default: the placement is fixed once and victims are reprieved against it).
        self.rescheduling = False
        self.forced = list(forced)  # victims chosen already (a Kueue quota decision's)
        # A victim's cost (``lostwork.unit_cost``): chooses among the allowed units
        self.cost: Callable[[Unit], float] | None = None
        self.nominated = nominated or {}  # node -> room kept for pods nominated there
        self.resources: set[str] = set()
        for s in shapes:
            self.resources.update(s.demand)
        self.skipped: list[str] = []  # why domains were skipped, for the message
        self._bases: dict[str, Free] = {}
        self._base_rows: dict[tuple[str, ...], Any] = {}  # the whole cluster's base, as arrays
        self._allowed_rows: dict[tuple[str, ...], Any] = {}

    @property
    def candidates(self) -> list[Unit]:
        """Units the gang may take, most important first (listed on first use: the
        column path never needs the list)."""
        if self._candidates is None:
            assert self._filter is not None
            self._candidates = self.table.candidates(*self._filter)
        return self._candidates

    @candidates.setter
    def candidates(self, units: list[Unit]) -> None:
        self._candidates = units
        self._filter = None

    @property
    def listed(self) -> int | None:
        """How many candidates were listed (None: the column path never listed them)."""
        return None if self._candidates is None else len(self._candidates)

    def candidates_below(self, priority: int, exclude: Iterable[str]) -> None:
        """The candidates: units ``priority`` may take, except ``exclude``."""
        self._candidates = None
        self._filter = (priority, frozenset(exclude))

    # -- helpers --------------------------------------------------------------------------

    def _base(self, domain: Domain) -> Free:
        """Free room on the domain's nodes, with the forced victims gone (computed once
        per domain; never mutated: every user copies on write)."""
        base = self._bases.get(domain.name)
        if base is None:
            base = {v.name: v.free(self.resources) for v in domain.nodes}
            for name, taken in self.nominated.items():
                node_free = base.get(name)
                if node_free is not None:
                    for res in node_free:
                        node_free[res] -= taken.get(res, 0)
            if self.forced:
                base = self._freed(base, self.forced)
            self._bases[domain.name] = base
        return base

    def _freed(self, base: Free, units: Iterable[Unit]) -> Free:
        """``base`` with ``units`` gone: a new outer mapping whose node entries are shared
        with ``base`` except on the nodes the units free (``place`` copies on write)."""
        free = dict(base)
        copied: set[str] = set()
        nodes_of = self.table.nodes_of
        for unit in units:
            for name, taken in nodes_of[unit.ref]:
                node_free = free.get(name)
                if node_free is None:
                    continue
                if name not in copied:
                    node_free = free[name] = dict(node_free)
                    copied.add(name)
                for res in node_free:
                    v = taken.get(res)
                    if v:
                        node_free[res] += v
        return free

    def _quota_ok(self, removed: Iterable[Unit]) -> bool:
        if not self.checks:
            return True
        keys = [p.key for u in removed for p in u.pods]
        return all(c.fits(keys) for c in self.checks)

    def _restrict(self, domain: Domain) -> list[Shape]:
        if len(domain.nodes) == len(self.table.cluster.nodes):
            return self.shapes  # the whole cluster
        names = {v.name for v in domain.nodes}
        out = []
        for s in self.shapes:
            restricted = Shape(s.demand, [n for n in s.allowed if n in names])
            restricted.pods = s.pods
            out.append(restricted)
        return out

    def _place(
        self, shapes: list[Shape], free: Free, order: dict[int, list[str]] | None = None
    ) -> dict[str, str] | None:
        return place(shapes, free, order, self.required)

    def feasible(self, shapes: list[Shape], base: Free, units: Sequence[Unit]) -> bool:
        if not self._quota_ok(units):
            return False
        if len(shapes) == 1 and len(base) == len(self.table.cluster.nodes):
            # One pod shape over the whole cluster: greedy first-fit places the pods iff
            # the nodes' room, counted in whole pods, adds up; counted on the column arrays.
            return self._room_in_pods(shapes[0], base, units) >= self.required.get(0, 0)
        return self._place(shapes, self._freed(base, units)) is not None

    def _room_in_pods(self, shape: Shape, base: Free, units: Sequence[Unit]) -> int:
        resources = tuple(sorted(r for r, v in shape.demand.items() if v > 0))
        cols = self.table.columns_for(resources)
        rows = self._base_rows.get(resources)
        if rows is None:
            nodes = self.table.cluster.nodes
            rows = self._base_rows[resources] = np.array(
                [[base[v.name].get(r, 0) for r in resources] for v in nodes], dtype=np.int64
            ).reshape(len(nodes), len(resources))
            allowed = set(shape.allowed)
            self._allowed_rows[resources] = np.array(
                [v.name in allowed for v in nodes], dtype=np.bool_
            )
        usable = np.zeros(len(cols.units), dtype=np.bool_)
        usable[[cols.position[u.ref] for u in units if u.ref in cols.position]] = True
        free = rows + Takeable(cols, usable).freed
        need = np.array([shape.demand[r] for r in resources], dtype=np.int64)
        fits = np.clip(free // need, 0, None).min(axis=1)
        return int(fits[self._allowed_rows[resources]].sum())

    # -- the search -----------------------------------------------------------------------

    def fits_without_preemption(self, domain: Domain) -> dict[str, str] | None:
        if not self._quota_ok(()):
            return None
        if self._columnar(domain):
            return ColumnSearch(self).fits_as_is()
        shapes = self._restrict(domain)
        free = dict(self._base(domain))  # place() replaces entries of the outer mapping
        placement = self._place(shapes, free)
        if placement is not None:
            self._place_extra(shapes, free, placement)
        return placement

    def _columnar(self, domain: Domain) -> bool:
        """Whether the column path answers for this domain: one pod shape over the whole
        cluster (every demand positive), no quota check, no PodDisruptionBudget, no
        victims forced. It gives the same answer as the general path (a property test
        compares the two) in time that grows with the gang, not with the cluster."""
        return (
            self.use_columns
            and not self.rescheduling
            and len(self.shapes) == 1
            and self.required.get(0, len(self.shapes[0].pods)) == len(self.shapes[0].pods)
            and all(v > 0 for v in self.shapes[0].demand.values())
            and len(domain.nodes) == len(self.table.cluster.nodes)
            and not self.checks
            and not self.forced
            and not self.table.covering
            and self.cost is None
        )

    def run(self, domain: Domain) -> GangOutcome | None:
        if self._columnar(domain):
            found = ColumnSearch(self).run(domain.name)
            if found is None:
                self.skipped.append(f"{domain.name}: does not fit even with every candidate gone")
            return found
        shapes = self._restrict(domain)
        base = self._base(domain)
        if len(base) == len(self.table.cluster.nodes):
            cands = self.candidates
        else:
            cands = [
                u
                for u in self.candidates
                if u.ref in self.quota_units or any(p.node_name in base for p in u.pods)
            ]
        if not self.feasible(shapes, base, cands):
            self.skipped.append(f"{domain.name}: does not fit even with every candidate gone")
            return None
        required = dict(self.required)
        try:
            self._as_many_as_fit(shapes, base, cands)
            return self._run_on(domain, shapes, base, cands)
        finally:
            self.required = required

    def _as_many_as_fit(self, shapes: list[Shape], base: Free, cands: list[Unit]) -> None:
        """kube-scheduler places as many of the gang's pods as fit with every candidate
        gone (minCount is only what it needs to succeed), and each of them keeps its
        victims: the required count of each shape is raised to that."""
        for i, shape in enumerate(shapes):
            lo, hi = self.required.get(i, len(shape.pods)), len(shape.pods)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                self.required[i] = mid
                if self.feasible(shapes, base, cands):
                    lo = mid
                else:
                    hi = mid - 1
            self.required[i] = lo

    def _run_on(
        self, domain: Domain, shapes: list[Shape], base: Free, cands: list[Unit]
    ) -> GangOutcome | None:
        violating = self.table.pdb_violations(cands)
        kept = self._pdb_reprieval(shapes, base, cands, violating)
        if len(kept) < len(cands) and not self.feasible(shapes, base, kept):
            kept = cands  # reprieval was judged on one placement; greedy packs no other
        chosen = self._ceiling(shapes, base, kept)
        if self.rescheduling:
            chosen = self._reprieve_rescheduling(shapes, base, chosen)
        placement = self._cheap_placement(shapes, base, chosen, violating)
        if placement is None:  # cannot happen: ``chosen`` was found feasible in name order
            self.skipped.append(f"{domain.name}: no placement found")
            return None
        victims, free = self._reprieve(base, chosen, placement)
        self._place_extra(shapes, free, placement)
        victims = [*self.forced, *victims]
        violating = self.table.pdb_violations(victims)
        return GangOutcome(domain.name, placement, victims, len(violating))

    def _place_extra(self, shapes: list[Shape], free: Free, placement: dict[str, str]) -> None:
        """Pods beyond minCount go where there is room left, evicting nobody more."""
        for i, shape in enumerate(shapes):
            for pod in shape.pods[self.required.get(i, len(shape.pods)) :]:
                one = Shape(shape.demand, shape.allowed)
                one.pods = [pod]
                got = place([one], free)
                if got:
                    placement.update(got)

    def _pdb_reprieval(
        self, shapes: list[Shape], base: Free, cands: list[Unit], violating: set[str]
    ) -> list[Unit]:
        if not violating:
            return cands
        free = copy_free(self._freed(base, cands))
        placement = self._cheap_placement(shapes, base, cands, violating)
        if placement is None:
            return cands
        for shape in shapes:
            for pod in shape.pods:
                node = placement.get(pod.ref)
                if node is not None:
                    take(free[node], shape.demand)
        removed = {u.ref: u for u in cands}
        for unit in cands:
            if unit.ref in violating:
                self._fits_back(free, unit, removed)
        return list(removed.values())

    def _fits_back(self, free: Free, unit: Unit, removed: dict[str, Unit]) -> bool:
        """Put ``unit`` back where it runs if every node (and quota) still holds; updates
        ``free`` (its entries must be this search's own) and ``removed`` when it does."""
        back = [(name, taken) for name, taken in self.table.nodes_of[unit.ref] if name in free]
        for name, taken in back:
            node_free = free[name]
            for res in node_free:
                v = taken.get(res, 0)
                if v > 0 and node_free[res] - v < 0:
                    return False
        if unit.ref in self.quota_units:
            rest = [u for ref, u in removed.items() if ref != unit.ref]
            if not self._quota_ok(rest):
                return False
        for name, taken in back:
            node_free = free[name]
            for res in node_free:
                node_free[res] -= taken.get(res, 0)
        del removed[unit.ref]
        return True

    def _ceiling(self, shapes: list[Shape], base: Free, cands: list[Unit]) -> list[Unit]:
        """Candidates at or below the lowest priority ceiling that still fits."""
        if not self.priority_search:
            return cands
        levels = sorted({u.priority for u in cands})
        lo, hi = 0, len(levels) - 1  # levels[hi] is known to fit (all candidates)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.feasible(shapes, base, [u for u in cands if u.priority <= levels[mid]]):
                hi = mid
            else:
                lo = mid + 1
        ceiling = levels[hi] if levels else 0
        return [u for u in cands if u.priority <= ceiling]

    def _cheap_placement(
        self, shapes: list[Shape], base: Free, chosen: list[Unit], violating: set[str]
    ) -> dict[str, str] | None:
        """Place the gang with ``chosen`` gone, trying first the nodes where a pod fits
        as things are, then those whose cheapest sufficient victims are least important."""
        # node -> (unit, what it takes there) for the chosen units, most important first
        by_node: dict[str, list[tuple[Unit, dict[str, int]]]] = {}
        for unit in chosen:
            for name, taken in self.table.nodes_of[unit.ref]:
                by_node.setdefault(name, []).append((unit, taken))
        if self.cost is not None:
            cost = self.cost
            for entries in by_node.values():
                entries.sort(key=lambda e: -cost(e[0]))  # the cheapest last: taken first
        order: dict[int, list[str]] = {}
        for i, shape in enumerate(shapes):
            costs: list[tuple[tuple[float, ...], str]] = []
            for name in shape.allowed:
                units = by_node.get(name)
                free = base[name]
                if fits(shape.demand, free):
                    costs.append(((0, 0, 0, 0, 0), name))
                elif units:
                    node_cost = self._node_cost(shape, free, units, violating, self.cost)
                    if node_cost is not None:
                        costs.append((node_cost, name))
            costs.sort()
            order[i] = [name for _, name in costs]
        placement = self._place(shapes, self._freed(base, chosen), order)
        if placement is None:  # the preference order packed worse: take the plain order
            placement = self._place(shapes, self._freed(base, chosen))
        return placement

    @staticmethod
    def _node_cost(
        shape: Shape,
        free: dict[str, int],
        units: list[tuple[Unit, dict[str, int]]],
        violating: set[str],
        cost: Callable[[Unit], float] | None = None,
    ) -> tuple[float, ...] | None:
        """How bad a node where a pod of ``shape`` does not fit as things are is for it:
        for the least important units on it (the cheapest, with ``cost``) whose removal
        makes room, their PDB violations, (their cost,) highest priority, and how many
        pods they take down in all (a gang unit goes whole, on every node); None when
        even all of them do not."""
        if cost is not None:
            return GangSearch._node_cost_by(shape, free, units, violating, cost)
        room = dict(free)
        highest = units[-1][0].priority
        broken = 0
        pods = 0
        for count, (unit, taken) in enumerate(reversed(units), 1):  # least important first
            for res in room:
                room[res] += taken.get(res, 0)
            highest = max(highest, unit.priority)
            broken += unit.ref in violating
            pods += len(unit.pods)
            if fits(shape.demand, room):
                return (1, broken, highest, pods, count)
        return None

    @staticmethod
    def _node_cost_by(
        shape: Shape,
        free: dict[str, int],
        units: list[tuple[Unit, dict[str, int]]],
        violating: set[str],
        cost: Callable[[Unit], float],
    ) -> tuple[float, ...] | None:
        """``_node_cost`` with a victim cost: the cheapest units first until a pod fits,
        then the dearest of them given back while it still fits (as the reprieve will);
        what those left lose, after their PDB violations."""
        room = dict(free)
        taken_first: list[tuple[Unit, dict[str, int]]] = []
        for unit, taken in reversed(units):  # ``units`` dearest first: cheapest first here
            for res in room:
                room[res] += taken.get(res, 0)
            taken_first.append((unit, taken))
            if fits(shape.demand, room):
                break
        else:
            return None
        kept = []
        for unit, taken in reversed(taken_first):  # the dearest first
            back = {res: v - taken.get(res, 0) for res, v in room.items()}
            if fits(shape.demand, back):
                room = back
            else:
                kept.append(unit)
        spent = round(sum(cost(u) for u in kept), 6)
        broken = sum(u.ref in violating for u in kept)
        highest = max(u.priority for u in kept)
        return (1, broken, spent, highest, sum(len(u.pods) for u in kept), len(kept))

    def _reprieve_rescheduling(
        self, shapes: list[Shape], base: Free, chosen: list[Unit]
    ) -> list[Unit]:
        """kube-scheduler 1.36's reprieve: most important first, a unit is kept when the
        gang can still be scheduled, anywhere, with it back (the placement follows)."""
        removed = list(chosen)
        for unit in chosen:
            rest = [u for u in removed if u is not unit]
            if self.feasible(shapes, base, rest):
                removed = rest
        return removed

    def _reprieve(
        self, base: Free, chosen: list[Unit], placement: dict[str, str]
    ) -> tuple[list[Unit], Free]:
        free = copy_free(self._freed(base, chosen))
        for shape in self.shapes:
            for pod in shape.pods:
                node = placement.get(pod.ref)
                if node is not None:
                    for res, v in shape.demand.items():
                        free[node][res] -= v
        removed = {u.ref: u for u in chosen}
        cost = self.cost
        order = chosen if cost is None else sorted(chosen, key=lambda u: -cost(u))
        for unit in order:  # most important (with a cost: the dearest) first
            self._fits_back(free, unit, removed)
        return list(removed.values()), free


def best(
    outcomes: Iterable[GangOutcome],
    now: datetime,
    cost: Callable[[Unit], float] | None = None,
) -> GangOutcome | None:
    ranked = sorted(enumerate(outcomes), key=lambda t: (t[1].score(now, cost), t[0]))
    return ranked[0][1] if ranked else None


__all__ = ["Check", "Domain", "GangOutcome", "GangSearch", "best", "domains"]


class ColumnSearch:
    """``GangSearch``'s steps for one pod shape over the whole cluster, on the column
    arrays of ``dryrun`` (rows: nodes in name order; columns: the units on each node, most
    important first): every feasibility check is a masked sum, the placement preference
    is a suffix sum per node, and the reprieve walks only the units on the nodes the
    placement uses (a unit elsewhere always fits back where it runs: its nodes keep at
    least the room they had)."""

    def __init__(self, search: GangSearch) -> None:
        self.search = search
        table = search.table
        cluster = table.cluster
        shape = search.shapes[0]
        self.shape = shape
        self.resources = tuple(sorted(shape.demand))
        self.need = np.array([shape.demand[r] for r in self.resources], dtype=np.int64)
        self.cols: NodeColumns = table.columns_for(self.resources)
        base = cluster.free_rows_of(self.resources)
        if search.nominated:
            base = base.copy()
            for name, taken in search.nominated.items():
                row = cluster.row.get(name)
                if row is not None:
                    base[row] -= np.array([taken.get(r, 0) for r in self.resources])
        self.base = base
        self.allowed = allowed_rows(cluster, shape.pods[0].scheduling)
        self.minimum = search.required.get(0, 0)  # pods that must fit
        self.want = search.required.get(0, len(shape.pods))  # pods placed in the first pass

    # -- arithmetic ------------------------------------------------------------------------

    def capacity(self, free: Any) -> Any:
        """Pods of the shape each node (row) holds with ``free`` room; 0 where the shape
        may not go."""
        need = self.need
        if len(need) == 0:
            cap = np.clip(free // need, 0, None).min(axis=1)  # (raises as it always did)
            return np.where(self.allowed, cap, 0)
        # One resource at a time (cheaper than a reduction along the short axis); the
        # least of the clipped counts is the least count clipped.
        cap = free[:, 0] // need[0]
        for k in range(1, len(need)):
            np.minimum(cap, free[:, k] // need[k], out=cap)
        np.maximum(cap, 0, out=cap)
        return np.where(self.allowed, cap, 0)

    def freed(self, units: Any) -> Any:
        """Room each node gains with the units (a mask over ``cols.units``) gone."""
        return Takeable(self.cols, units).freed

    def fits_without(self, units: Any) -> bool:
        room = self.capacity(self.base + self.freed(units))
        return int(room.sum()) >= self.minimum

    def usable(self) -> Any:
        """The candidates as a mask over ``cols.units``."""
        search, cols = self.search, self.cols
        if search._filter is not None:
            priority, exclude = search._filter
            mask = search.table.eligible_mask(priority)[: len(cols.units)].copy()
            mask[[cols.position[r] for r in exclude if r in cols.position]] = False
            return mask
        mask = np.zeros(len(cols.units), dtype=np.bool_)
        mask[[cols.position[u.ref] for u in search.candidates]] = True
        return mask

    @staticmethod
    def greedy(cap: Any, rows: Any, count: int) -> list[tuple[int, int]] | None:
        """First fit along ``rows``: (row, pods placed there) for ``count`` pods, or None
        when they do not all fit."""
        if count <= 0:
            return []
        caps = cap[rows]
        total = np.cumsum(caps)
        if len(total) == 0 or int(total[-1]) < count:
            return None
        last = int(np.searchsorted(total, count))
        out = [(int(rows[i]), int(caps[i])) for i in range(last + 1) if caps[i] > 0]
        over = int(total[last]) - count
        if over:
            row, n = out[-1]
            out[-1] = (row, n - over)
        return out

    def assign(self, slots: list[tuple[int, int]], pods: Sequence[Any]) -> dict[str, str]:
        nodes = self.search.table.cluster.nodes
        placement: dict[str, str] = {}
        it = iter(pods)
        for row, n in slots:
            name = nodes[row].name
            for _ in range(n):
                placement[next(it).ref] = name
        return placement

    def place_extra(self, free: Any, placement: dict[str, str]) -> None:
        """Pods beyond minCount go where there is room left (name order), evicting
        nobody more."""
        extra = self.shape.pods[self.want :]
        if not extra:
            return
        cap = self.capacity(free)
        rows = np.flatnonzero(cap > 0)
        n = min(len(extra), int(cap.sum()))
        slots = self.greedy(cap, rows, n) or []
        placement.update(self.assign(slots, extra[:n]))

    # -- the steps ---------------------------------------------------------------------------

    def fits_as_is(self) -> dict[str, str] | None:
        cap = self.capacity(self.base)
        slots = self.greedy(cap, np.flatnonzero(self.allowed), self.want)
        if slots is None:
            return None
        placement = self.assign(slots, self.shape.pods[: self.want])
        self.place_extra(self.base - self._placed(slots), placement)
        return placement

    def _placed(self, slots: list[tuple[int, int]]) -> Any:
        taken = np.zeros_like(self.base)
        for row, n in slots:
            taken[row] += n * self.need
        return taken

    def run(self, domain: str) -> GangOutcome | None:
        search, cols = self.search, self.cols
        usable = self.usable()
        if not self.fits_without(usable):
            return None
        chosen = usable
        if search.priority_search:
            levels = np.unique(cols.unit_priority[usable])
            lo, hi = 0, len(levels) - 1
            while lo < hi:
                mid = (lo + hi) // 2
                if self.fits_without(usable & (cols.unit_priority <= levels[mid])):
                    hi = mid
                else:
                    lo = mid + 1
            if len(levels):
                chosen = usable & (cols.unit_priority <= levels[hi])
        taking = Takeable(cols, chosen)
        slots = self._cheap_slots(taking)
        if slots is None:  # cannot happen: ``chosen`` was found feasible in name order
            search.skipped.append(f"{domain}: no placement found")
            return None
        placement = self.assign(slots, self.shape.pods[: self.want])
        victims = self._reprieve(taking, slots)
        mask = np.zeros(len(cols.units), dtype=np.bool_)
        mask[[cols.position[u.ref] for u in victims]] = True
        self.place_extra(self.base + self.freed(mask) - self._placed(slots), placement)
        return GangOutcome(domain, placement, victims, 0)

    def _cheap_slots(self, taking: Takeable) -> list[tuple[int, int]] | None:
        """``GangSearch._cheap_placement``: nodes where a pod fits as things are first
        (name order), then those whose least important chosen units make room soonest:
        lowest highest priority, fewest pods taken down, fewest units."""
        cols, need, base = self.cols, self.need, self.base
        cm = taking.mask
        n, width = cm.shape
        fits_now: Any = np.ones(n, dtype=np.bool_)
        ok = cm.copy()  # a pod fits with the chosen units from this column on gone
        for k in range(len(need)):  # one resource at a time: 2-D arrays, short reductions
            fits_now &= base[:, k] >= need[k]
            if width:
                room = np.cumsum((cols.taken[:, :, k] * cm)[:, ::-1], axis=1)[:, ::-1]
                ok &= base[:, k, None] + room >= need[k]
        has = ok.any(axis=1)
        rows = np.flatnonzero(self.allowed & (fits_now | has))
        if width:
            # Per row, the last column from which on the chosen units make room, and what
            # is taken down from there: units, pods, their highest priority.
            at = width - 1 - np.argmax(ok[rows, ::-1], axis=1)
            gone = cm[rows] & (np.arange(width)[None, :] >= at[:, None])
            count = gone.sum(axis=1)
            pods = (cols.pods[rows] * gone).sum(axis=1)
            lowest = np.iinfo(np.int64).min
            prio = np.where(gone, cols.priority[rows], lowest).max(axis=1)
            now = fits_now[rows]
            keys = (
                rows,
                np.where(now, 0, count),
                np.where(now, 0, pods),
                np.where(now, 0, prio),
                np.where(now, 0, 1),
            )
            rows = rows[np.lexsort(keys)]
        cap = self.capacity(base + taking.freed)
        slots = self.greedy(cap, rows, self.want)
        if slots is None:  # the preference order packed worse: take the plain order
            slots = self.greedy(cap, np.flatnonzero(self.allowed), self.want)
        return slots

    def _reprieve(self, taking: Takeable, slots: list[tuple[int, int]]) -> list[Unit]:
        """Every chosen unit, most important first, is put back where it runs when every
        node it runs on still holds. Only nodes the placement uses (or short of room
        already) can refuse one; the walk visits the units there."""
        cols, base = self.cols, self.base
        placed = {row: n for row, n in slots}
        touched = set(placed) | {int(r) for r in np.flatnonzero((base < 0).any(axis=1))}
        if not touched:
            return []
        rows = np.array(sorted(touched), dtype=np.int64)
        room = base[rows] + taking.freed[rows]
        free: dict[int, list[int]] = {}
        for k, row in enumerate(rows.tolist()):
            have = room[k] - placed.get(row, 0) * self.need
            free[row] = have.tolist()
        cells: dict[int, list[tuple[int, list[int]]]] = {}
        sub = taking.mask[rows]
        for k, j in zip(*np.nonzero(sub), strict=True):
            row = int(rows[k])
            cells.setdefault(int(cols.index[row, j]), []).append((row, cols.taken[row, j].tolist()))
        victims: list[Unit] = []
        units = [u for slot in cells if (u := cols.units[slot]) is not None]
        for unit in sorted(units, key=Unit.importance):  # most important first
            here = cells[cols.position[unit.ref]]
            if all(
                all(v <= 0 or f - v >= 0 for f, v in zip(free[row], taken, strict=True))
                for row, taken in here
            ):
                for row, taken in here:
                    free[row] = [f - v for f, v in zip(free[row], taken, strict=True)]
            else:
                victims.append(unit)
        return victims
