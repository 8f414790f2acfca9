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
from gangpreempt.preemption.units import Unit, UnitTable

I64 = npt.NDArray[np.int64]
SHIFT = 2**31


class NodeColumns:
    """The units on each node (rows: nodes in name order; columns: units there, most
    important first) and what they take of ``resources``; built once per snapshot and
    resource set."""

    def __init__(self, table: UnitTable, resources: tuple[str, ...]) -> None:
        cluster = table.cluster
        self.units = table.ordered
        position = {u.ref: i for i, u in enumerate(self.units)}
        rows = [table.on_node.get(v.name, []) for v in cluster.nodes]
        width = max((len(r) for r in rows), default=0)
        n = len(rows)
        self.index = np.full((n, width), -1, dtype=np.int64)
        self.taken = np.zeros((n, width, len(resources)), dtype=np.int64)
        for i, row in enumerate(rows):
            for j, (unit, taken) in enumerate(row):
                self.index[i, j] = position[unit.ref]
                for k, res in enumerate(resources):
                    self.taken[i, j, k] = taken.get(res, 0)
        present = self.index >= 0
        safe = np.where(present, self.index, 0)
        self.unit_priority = np.array([u.priority for u in self.units], dtype=np.int64)
        self.priority = self.unit_priority[safe]
        self.pods = np.array([len(u.pods) for u in self.units], dtype=np.int64)[safe]
        self.start = np.array([u.start.timestamp() for u in self.units], dtype=np.float64)[safe]
        self.present = present
        self.position = position


def columns(table: UnitTable, resources: tuple[str, ...]) -> NodeColumns:
    cols = table.columns.get(resources)
    if not isinstance(cols, NodeColumns):
        cols = table.columns[resources] = NodeColumns(table, resources)
    return cols


def free_rows(cluster: NodeCluster, resources: tuple[str, ...]) -> I64:
    """Free room of every node (rows in name order); the cluster drops it when a node's
    use changes."""
    rows = cluster.free_rows.get(resources)
    if rows is None:
        rows = np.array(
            [[v.avail.get(res, 0) for res in resources] for v in cluster.nodes], dtype=np.int64
        ).reshape(len(cluster.nodes), len(resources))
        cluster.free_rows[resources] = rows
    result: I64 = rows
    return result


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
    eligible = table.eligible(priority)
    skip = [cols.position[r] for r in exclude if r in cols.position]
    key = ("takeable", str(priority), *resources)
    cached = table.columns.get(key)
    if cached is not None and not skip:
        result: Takeable = cached
        return result
    usable = np.array([u.ref in eligible for u in cols.units], dtype=np.bool_)
    if skip:
        usable[skip] = False
        return Takeable(cols, usable)
    takeable = table.columns[key] = Takeable(cols, usable)
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
    cols = columns(table, resources)
    if cols.index.shape[1] == 0:
        return None, 0
    takeable = _takeable(table, cols, resources, priority, exclude)
    mask = takeable.mask
    freed_all = free_rows(cluster, resources) + takeable.freed
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
    chosen = [cols.units[int(i)] for i in cols.index[rows[best]][victim[best]]]
    return (int(rows[best]), chosen), evaluated


__all__ = ["NodeColumns", "Takeable", "allowed_rows", "columns", "dry_run", "free_rows"]
