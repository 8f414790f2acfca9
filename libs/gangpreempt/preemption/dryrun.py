"""kube-scheduler's DefaultPreemption dry run for a lone pod, on every node at once.

The same answer as ``single.select_on_node`` node by node (the tests compare the two on
generated clusters), computed with numpy: the units on each node, most important first,
become columns; the node's room with every candidate gone is one sum; the reprieve walks
the columns, each step for all nodes together. It is used when no PodDisruptionBudget
exists and no pod is nominated with the preemptor's priority or above, the cases whose
reprieve order or room depends on more than the node itself; the node-by-node code
handles those.

A node's outcome (its victims and scores) depends only on its own row: the columns,
which units the preemptor may take, and the node's free room. What a priority may take
is kept with the columns (``columns.Takeable``: a change rewrites it on the rows of its
nodes, as it does the columns). With nothing excluded, the outcomes are kept between
decisions of the same shape (``Verdicts``, in the table's caches that every change to
the units clears) and a node is computed again only when its room is not the one its
outcome was computed with; the decision then looks at the first candidate nodes' kept
scores.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from gangpreempt.model.pods import Pod
from gangpreempt.model.scheduling import SchedulingConstraints
from gangpreempt.placement.cluster import NodeCluster
from gangpreempt.preemption.columns import NodeColumns, Takeable
from gangpreempt.preemption.units import Unit, UnitTable

I64 = npt.NDArray[np.int64]
SHIFT = 2**31


def allowed_rows(cluster: NodeCluster, scheduling: SchedulingConstraints) -> npt.NDArray[np.bool_]:
    """Which nodes (rows) pods with these selectors, affinity, tolerations admit."""
    key = msgspec.json.encode(scheduling)
    rows = cluster.allowed_rows.get(key)
    if rows is None:
        names = cluster.allowed_names(scheduling)
        rows = cluster.allowed_rows[key] = np.array(
            [v.name in names for v in cluster.nodes], dtype=np.bool_
        )
    result: npt.NDArray[np.bool_] = rows
    return result


def _takeable(
    table: UnitTable,
    cols: NodeColumns,
    priority: int,
    exclude: Collection[str],
) -> tuple[Takeable, bool]:
    """The columns' kept one when nothing is excluded, the usual case (kept current row
    by row with the columns); and whether it is the kept one."""
    skip = [cols.position[r] for r in exclude if r in cols.position]
    if not skip:
        return cols.takeable(priority), True
    usable = table.eligible_mask(priority).copy()
    usable[skip] = False
    return Takeable(cols, usable), False


class Verdicts:
    """Per row (node), the reprieve's outcome for one preemptor shape (resources, need,
    priority, nothing excluded): its victims and the scores pickOneNodeForPreemption
    compares, kept between decisions. It lives in ``table.derived``, which every change
    to the units clears, and belongs to one ``Takeable`` (the columns and the takeable
    mask it was computed on); a row is reused only while the node's free room is the
    one it was computed with (a decision on a fork that holds room elsewhere, or a node
    whose allocatable changed, computes the rows it changed again)."""

    __slots__ = (
        "cols",
        "computed",
        "earliest",
        "free",
        "highest",
        "n_pods",
        "takeable",
        "total",
        "valid",
        "victim",
    )

    def __init__(self, cols: NodeColumns, takeable: Takeable) -> None:
        n, width = takeable.mask.shape
        n_resources = len(cols.resources)
        self.cols = cols
        self.takeable = takeable
        self.valid = np.zeros(n, dtype=np.bool_)
        self.computed = False  # whether any row is valid
        self.free: I64 = np.zeros((n, n_resources), dtype=np.int64)  # room computed on
        self.victim = np.zeros((n, width), dtype=np.bool_)
        self.highest: I64 = np.zeros(n, dtype=np.int64)
        self.total: I64 = np.zeros(n, dtype=np.int64)
        self.n_pods: I64 = np.zeros(n, dtype=np.int64)
        self.earliest = np.zeros(n, dtype=np.float64)

    def update(self, rows: I64, free: I64, freed_all: I64, need: I64) -> None:
        """Make ``rows`` current: those not computed yet, or computed on other room
        (``free``: the nodes' room now; ``freed_all``: with every takeable unit gone)."""
        cols = self.cols
        if self.computed:
            ok = self.valid[rows]
            then, now = self.free[rows], free[rows]
            for k in range(free.shape[1]):
                ok &= then[:, k] == now[:, k]
            todo = rows[~ok]
            if len(todo) == 0:
                return
            now = now[~ok]
        else:  # nothing computed yet (the first decision after a change): every row
            todo, now = rows, free[rows]
        victim = _reprieve(freed_all[todo], self.takeable.mask[todo], cols.taken[todo], need)
        scores = _scores(todo, victim, cols)
        self.victim[todo] = victim
        self.highest[todo], self.total[todo], self.n_pods[todo], self.earliest[todo] = scores
        self.free[todo] = now
        self.valid[todo] = True
        self.computed = True

    def pick(self, rows: I64) -> int:
        """``_pick`` on the kept scores (``rows`` current)."""
        return _narrow(
            self.highest[rows],
            lambda at: (
                self.total[rows[at]],
                self.n_pods[rows[at]],
                self.earliest[rows[at]],
            ),
        )


def _verdicts(
    table: UnitTable,
    cols: NodeColumns,
    takeable: Takeable,
    priority: int,
    need: tuple[int, ...],
) -> Verdicts:
    """The kept outcomes of this shape (made when there are none for this ``Takeable``
    and these columns)."""
    key = ("verdicts", priority, cols.resources, need)
    found = table.derived.get(key)
    if found is None or found.takeable is not takeable or found.cols is not cols:
        found = table.derived[key] = Verdicts(cols, takeable)
    verdicts: Verdicts = found
    return verdicts


def dry_run(
    cluster: NodeCluster,
    table: UnitTable,
    pod: Pod,
    priority: int,
    exclude: Collection[str],
    limit: int,
) -> tuple[tuple[int, list[Unit]] | None, int]:
    """The best node among the first ``limit`` candidate nodes in name order: (its
    position, its victims most important first), or None when no node helps; and how
    many nodes were looked at. With nothing excluded, the nodes' outcomes are kept for
    the next decision of the same shape (``Verdicts``)."""
    demand = cluster.demand(pod)
    resources = tuple(sorted(r for r, v in demand.items() if v > 0))
    need = np.array([demand[r] for r in resources], dtype=np.int64)
    cols = table.columns_for(resources)
    if cols.index.shape[1] == 0:
        return None, 0
    takeable, shared = _takeable(table, cols, priority, exclude)
    free = cluster.free_rows_of(resources)
    freed_all = free + takeable.freed
    potential = allowed_rows(cluster, pod.scheduling) & takeable.any
    helps = potential.copy()
    for k in range(len(resources)):  # column by column: cheaper than .all(axis=1)
        helps &= freed_all[:, k] >= need[k]
    rows = np.flatnonzero(helps)[:limit]
    if len(rows) == 0:
        return None, int(potential.sum())
    # Node by node, the walk stops at the limit-th candidate, or goes through them all.
    walked = potential[: int(rows[-1]) + 1] if len(rows) == limit else potential
    evaluated = int(walked.sum())
    if shared:
        verdicts = _verdicts(table, cols, takeable, priority, tuple(need.tolist()))
        verdicts.update(rows, free, freed_all, need)
        best = verdicts.pick(rows)
        victims = verdicts.victim[rows[best]]
    else:
        victim = _reprieve(freed_all[rows], takeable.mask[rows], cols.taken[rows], need)
        best = _pick(rows, victim, cols)
        victims = victim[best]
    chosen = [_unit(cols, int(i)) for i in cols.index[rows[best]][victims]]
    return (int(rows[best]), chosen), evaluated


def _reprieve(room: I64, live: npt.NDArray[np.bool_], taken: I64, need: I64) -> Any:
    """selectVictimsOnNode's reprieve for every row at once: ``room`` (rows x resources)
    with every ``live`` cell (rows x columns) gone, ``taken`` (rows x columns x
    resources) what each cell holds; the columns most important first, each put back
    while the pod (``need``) still fits. The victims, as a mask like ``live`` (a view of
    a columns x rows array: ``_scores`` reads it along the columns)."""
    # Column-major copies: each step reads one contiguous block per array, and the test
    # "still fits once put back" is room - need >= what it takes, on every resource.
    slack = np.ascontiguousarray(room.T) - need[:, None]  # resources x rows
    cells = np.ascontiguousarray(taken.transpose(1, 2, 0))  # columns x resources x rows
    alive = np.ascontiguousarray(live.T)  # columns x rows
    back = np.zeros_like(alive)
    for col in np.flatnonzero(alive.any(axis=1)).tolist():
        holds = cells[col]
        fits = (slack >= holds).all(axis=0)
        fits &= alive[col]
        slack -= holds * fits
        back[col] = fits
    back ^= alive  # the live cells not put back (``back`` only holds live ones)
    return back.T


def _scores(rows: I64, victim: Any, cols: NodeColumns) -> tuple[I64, I64, I64, Any]:
    """pickOneNodeForPreemption's criteria per row (lower is better but for the last):
    highest victim priority, sum of (priority + 2^31) over victim pods, victim pods, and
    the earliest start of the highest-priority victims (later is better). Computed along
    the columns (``victim`` transposed, contiguous when ``_reprieve`` made it): a few
    whole-array steps instead of a short reduction per row."""
    chosen = victim.T  # columns x rows
    prio = cols.priority.T[:, rows]
    pods = cols.pods.T[:, rows]
    highest = np.where(chosen, prio, np.iinfo(np.int64).min).max(axis=0)
    victim_pods = pods * chosen
    n_pods = victim_pods.sum(axis=0)
    # the sum of (priority + 2^31) x pods, with the 2^31 x pods term taken out
    total = (prio * victim_pods).sum(axis=0) + SHIFT * n_pods
    top = chosen & (prio == highest)
    earliest = np.where(top, cols.start.T[:, rows], np.inf).min(axis=0)
    return highest, total, n_pods, earliest


def _narrow(highest: I64, rest: Callable[[I64], tuple[I64, I64, Any]]) -> int:
    """The position of the best row by the criteria (``_scores``), the first in order
    among equals: the rows tied on the highest priority are narrowed by the others
    (``rest`` gives them for positions ``at``) in turn."""
    at = np.flatnonzero(highest == highest.min())
    if len(at) == 1:
        return int(at[0])
    total, n_pods, earliest = rest(at)
    keep = total == total.min()
    keep &= n_pods == n_pods[keep].min()
    keep &= earliest == earliest[keep].max()
    return int(at[np.argmax(keep)])


def _pick(rows: I64, victim: Any, cols: NodeColumns) -> int:
    """pickOneNodeForPreemption over the rows' victims: lowest highest priority,
    smallest sum of (priority + 2^31) over victim pods, fewest victim pods, latest
    earliest start of the highest-priority victims, then name order (``rows``
    ascending): the position (in ``rows``) of the best."""
    prio = cols.priority[rows]
    highest = np.where(victim, prio, np.iinfo(np.int64).min).max(axis=1)

    def rest(at: I64) -> tuple[I64, I64, Any]:
        victims, pods = victim[at], cols.pods[rows[at]]
        total = ((prio[at] + SHIFT) * pods * victims).sum(axis=1)
        n_pods = (pods * victims).sum(axis=1)
        top = victims & (prio[at] == highest[at][:, None])
        earliest = np.where(top, cols.start[rows[at]], np.inf).min(axis=1)
        return total, n_pods, earliest

    return _narrow(highest, rest)


def _unit(cols: NodeColumns, slot: int) -> Unit:
    unit = cols.units[slot]
    assert unit is not None, slot
    return unit


__all__ = ["NodeColumns", "Takeable", "Verdicts", "allowed_rows", "dry_run"]
