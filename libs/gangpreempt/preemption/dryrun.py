"""kube-scheduler's DefaultPreemption dry run for a lone pod, on every node at once.

The same answer as ``single.select_on_node`` node by node (the tests compare the two on
generated clusters), computed with numpy: the units on each node, most important first,
become columns; the node's room with every candidate gone is one sum; the reprieve walks
the columns, each step for all nodes together. It is used when no PodDisruptionBudget
exists and no pod is nominated with the preemptor's priority or above, the cases whose
reprieve order or room depends on more than the node itself; the node-by-node code
handles those.
"""

from __future__ import annotations

from collections.abc import Collection

import msgspec
import numpy as np
import numpy.typing as npt

from gangpreempt.model.pods import Pod
from gangpreempt.model.scheduling import SchedulingConstraints
from gangpreempt.placement.cluster import NodeCluster
from gangpreempt.preemption.columns import NodeColumns
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


class Takeable:
    """For one preemptor priority (and units excluded), which columns it may take and
    what taking all of them frees on each node."""

    __slots__ = ("any", "freed", "mask")

    def __init__(self, cols: NodeColumns, usable: npt.NDArray[np.bool_]) -> None:
        self.mask = cols.present & usable[np.where(cols.present, cols.index, 0)]
        self.any = self.mask.any(axis=1)
        self.freed = (cols.taken * self.mask[:, :, None]).sum(axis=1)


def _takeable(
    table: UnitTable,
    cols: NodeColumns,
    resources: tuple[str, ...],
    priority: int,
    exclude: Collection[str],
) -> Takeable:
    """Cached per (resources, priority) when nothing is excluded, the usual case."""
    skip = [cols.position[r] for r in exclude if r in cols.position]
    key = ("takeable", priority, *resources)
    cached = table.derived.get(key)
    if cached is not None and not skip:
        result: Takeable = cached
        return result
    usable = table.eligible_mask(priority)
    if skip:
        usable = usable.copy()
        usable[skip] = False
        return Takeable(cols, usable)
    takeable = table.derived[key] = Takeable(cols, usable)
    return takeable


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
    many nodes were looked at."""
    demand = cluster.demand(pod)
    resources = tuple(sorted(r for r, v in demand.items() if v > 0))
    need = np.array([demand[r] for r in resources], dtype=np.int64)
    cols = table.columns_for(resources)
    if cols.index.shape[1] == 0:
        return None, 0
    takeable = _takeable(table, cols, resources, priority, exclude)
    mask = takeable.mask
    freed_all = cluster.free_rows_of(resources) + takeable.freed
    potential = allowed_rows(cluster, pod.scheduling) & takeable.any
    rows = np.flatnonzero(potential & (freed_all >= need).all(axis=1))[:limit]
    if len(rows) == 0:
        return None, int(potential.sum())
    # Node by node, the walk stops at the limit-th candidate, or goes through them all.
    walked = potential[: int(rows[-1]) + 1] if len(rows) == limit else potential
    evaluated = int(walked.sum())
    room = freed_all[rows]
    live = mask[rows]
    taken = cols.taken[rows]
    victim = np.zeros_like(live)
    for col in range(live.shape[1]):  # most important first: reprieve while it fits
        here = live[:, col]
        if not here.any():
            continue
        trial = room - taken[:, col, :]
        back = here & (trial >= need).all(axis=1)
        room = np.where(back[:, None], trial, room)
        victim[:, col] = here & ~back
    prio = cols.priority[rows]
    pods = cols.pods[rows]
    highest = np.where(victim, prio, np.iinfo(np.int64).min).max(axis=1)
    total = ((prio + SHIFT) * pods * victim).sum(axis=1)
    n_pods = (pods * victim).sum(axis=1)
    top = victim & (prio == highest[:, None])
    earliest = np.where(top, cols.start[rows], np.inf).min(axis=1)
    # pickOneNodeForPreemption: lowest highest priority, smallest sum, fewest pods, latest
    # earliest start of the highest-priority victims, then name order (np.lexsort: last
    # key first).
    best = int(np.lexsort((rows, -earliest, n_pods, total, highest))[0])
    chosen = [_unit(cols, int(i)) for i in cols.index[rows[best]][victim[best]]]
    return (int(rows[best]), chosen), evaluated


def _unit(cols: NodeColumns, slot: int) -> Unit:
    unit = cols.units[slot]
    assert unit is not None, slot
    return unit


__all__ = ["NodeColumns", "Takeable", "allowed_rows", "dry_run"]
