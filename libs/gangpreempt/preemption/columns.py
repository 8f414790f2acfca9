"""The units on every node as numpy columns, kept current by the ``UnitTable``.

Rows are the nodes in name order; the columns of a row are the units with pods on that
node, most important first, by slot (``UnitTable.slot_of``: a stable number per unit),
with what they take there of one resource set. Per slot: the unit's priority, pods and
start. A change to a unit rewrites the rows of its nodes only, and with them those rows
of what each preemptor priority may take there (``Takeable``, kept per priority)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from gangpreempt.preemption.units import Unit, UnitTable

I64 = npt.NDArray[np.int64]
NO_PRIORITY = np.iinfo(np.int64).max  # an empty slot: above every ceiling


class SlotData:
    """Per slot: priority, pod count and start (seconds) of its unit, and whether it is
    guarded (see ``UnitTable._guarded``)."""

    def __init__(self) -> None:
        self.priority: I64 = np.zeros(0, dtype=np.int64)
        self.pods: I64 = np.zeros(0, dtype=np.int64)
        self.start: npt.NDArray[np.float64] = np.zeros(0, dtype=np.float64)
        # anything but the priority may refuse it (a label, a toleration policy)
        self.guarded: npt.NDArray[np.bool_] = np.zeros(0, dtype=np.bool_)

    def fill(self, units: Sequence[Unit], guarded: Sequence[bool]) -> None:
        """Slots 0..n-1 hold ``units`` (the first build)."""
        n = len(units)
        size = max(16, 2 * n)
        self.priority = np.full(size, NO_PRIORITY, dtype=np.int64)
        self.pods = np.zeros(size, dtype=np.int64)
        self.start = np.zeros(size, dtype=np.float64)
        self.guarded = np.zeros(size, dtype=np.bool_)
        self.priority[:n] = [u.priority for u in units]
        self.pods[:n] = [len(u.pods) for u in units]
        self.start[:n] = [u.start.timestamp() for u in units]
        self.guarded[:n] = guarded

    def set(self, slot: int, unit: Unit | None, guarded: bool = False) -> None:
        if slot >= len(self.priority):
            size = max(16, 2 * slot + 2)
            self.priority = _grown(self.priority, size, NO_PRIORITY)
            self.pods = _grown(self.pods, size, 0)
            self.start = _grown(self.start, size, 0.0)
            self.guarded = _grown(self.guarded, size, False)
        self.guarded[slot] = guarded
        if unit is None:
            self.priority[slot], self.pods[slot], self.start[slot] = NO_PRIORITY, 0, 0.0
        else:
            self.priority[slot] = unit.priority
            self.pods[slot] = len(unit.pods)
            self.start[slot] = unit.start.timestamp()


class Takeable:
    """For one preemptor priority (and units excluded), which columns it may take and
    what taking all of them frees on each node. A row depends on that row's cells and
    on the eligibility of the slots they hold only: ``update_rows`` makes rows current
    (``NodeColumns`` does it for the rows it rewrites, for the ones it keeps)."""

    __slots__ = ("_any", "freed", "mask")

    def __init__(self, cols: NodeColumns, usable: npt.NDArray[np.bool_]) -> None:
        self.mask: npt.NDArray[np.bool_] = _masked(cols.index, usable)
        self.freed: I64 = _freed(self.mask, cols.taken)
        self._any: npt.NDArray[np.bool_] | None = None

    @property
    def any(self) -> npt.NDArray[np.bool_]:
        """Per row, whether it holds a masked cell (computed on first use)."""
        if self._any is None:
            found = np.zeros(self.mask.shape[0], dtype=np.bool_)
            for col in range(self.mask.shape[1]):
                found |= self.mask[:, col]
            self._any = found
        return self._any

    def update_rows(self, cols: NodeColumns, usable: npt.NDArray[np.bool_], rows: I64) -> None:
        """Compute ``rows`` again from the columns' cells and ``usable`` (over the slots):
        what building it from nothing would hold there."""
        mask = _masked(cols.index[rows], usable)
        self.mask[rows] = mask
        self.freed[rows] = _freed(mask, cols.taken[rows])
        if self._any is not None:
            self._any[rows] = mask.any(axis=1)


def _masked(index: I64, usable: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    """Per cell, whether its slot is ``usable``: ``usable`` with one False appended, which
    an empty cell (index -1) reads."""
    n = len(usable)
    padded = np.zeros(n + 1, dtype=np.bool_)
    padded[:n] = usable
    mask: npt.NDArray[np.bool_] = padded[index]
    return mask


def _freed(mask: npt.NDArray[np.bool_], taken: I64) -> I64:
    """Per row, the taken room of its masked cells summed: one integer matrix product per
    row (rows x 1 x width @ rows x width x resources), exact as the sum is."""
    weights = mask.astype(np.int64)
    freed: I64 = np.matmul(weights[:, None, :], taken)[:, 0, :]
    return freed


def _grown(a: Any, size: int, fill: Any) -> Any:
    out = np.full(size, fill, dtype=a.dtype)
    out[: len(a)] = a
    return out


class NodeColumns:
    """The columns of one resource set (see the module)."""

    def __init__(self, table: UnitTable, resources: tuple[str, ...]) -> None:
        self.table = table
        self.resources = resources
        self.units: list[Unit | None] = table.slots  # slot -> unit (shared, kept current)
        self.position: dict[str, int] = table.slot_of  # unit ref -> slot (shared)
        # per preemptor priority, what it may take (nothing excluded), kept current
        self.takeables: dict[int, Takeable] = {}
        self.used: set[int] = set()  # the priorities whose one was read since the rewrite
        cluster = table.cluster
        rows = [table.on_node.get(v.name, []) for v in cluster.nodes]
        width = max((len(r) for r in rows), default=0)
        n = len(rows)
        self.index: I64 = np.full((n, width), -1, dtype=np.int64)
        self.taken: I64 = np.zeros((n, width, len(resources)), dtype=np.int64)
        slot_of = table.slot_of
        cells = [(i, j, e) for i, row in enumerate(rows) for j, e in enumerate(row)]
        if cells:
            at_row = np.array([i for i, _, _ in cells], dtype=np.int64)
            at_col = np.array([j for _, j, _ in cells], dtype=np.int64)
            self.index[at_row, at_col] = [slot_of[e[0].ref] for _, _, e in cells]
            self.taken[at_row, at_col] = np.array(
                [[e[1].get(res, 0) for res in resources] for _, _, e in cells], dtype=np.int64
            ).reshape(len(cells), len(resources))
        self._derive(slice(None))

    @classmethod
    def sliced(cls, base: NodeColumns, resources: tuple[str, ...]) -> NodeColumns:
        """The columns of ``resources`` (all of them in ``base``'s set) cut from
        ``base``'s arrays instead of built from the table."""
        cols = cls.__new__(cls)
        cols.table = base.table
        cols.resources = resources
        cols.units = base.units
        cols.position = base.position
        cols.takeables = {}
        cols.used = set()
        at = [base.resources.index(r) for r in resources]
        cols.index = base.index.copy()
        cols.taken = np.ascontiguousarray(base.taken[:, :, at])
        cols.present = base.present.copy()
        cols.priority = base.priority.copy()
        cols.pods = base.pods.copy()
        cols.start = base.start.copy()
        return cols

    @property
    def unit_priority(self) -> I64:
        """Priority per slot (empty slots: above every ceiling)."""
        return self.table.slot_data.priority[: len(self.units)]

    def _derive(self, rows: Any) -> None:
        """The per-cell arrays of ``rows`` from the slots they hold."""
        data = self.table.slot_data
        index = self.index[rows]
        present = index >= 0
        safe = np.where(present, index, 0)
        if isinstance(rows, slice):
            self.present = present
            self.priority = data.priority[safe] if len(data.priority) else np.zeros_like(safe)
            self.pods = data.pods[safe] if len(data.pods) else np.zeros_like(safe)
            self.start = (
                data.start[safe] if len(data.start) else np.zeros(safe.shape, dtype=np.float64)
            )
            return
        self.present[rows] = present
        self.priority[rows] = data.priority[safe]
        self.pods[rows] = data.pods[safe]
        self.start[rows] = data.start[safe]

    def takeable(self, priority: int) -> Takeable:
        """What ``priority`` may take (nothing excluded): built on first use, then kept
        current row by row as rows are rewritten, as long as it is read between two
        rewrites (one that was not is dropped then: the work a rewrite does stays with
        the priorities in use, no more than building them again would be)."""
        self.used.add(priority)
        found = self.takeables.get(priority)
        if found is None:
            found = self.takeables[priority] = Takeable(self, self.table.eligible_mask(priority))
        return found

    def set_rows(self, rows: Iterable[int]) -> None:
        """Rewrite the given rows from the table (widening the arrays when a node now
        holds more units than any did), and those rows of the kept ``Takeable``s."""
        table, nodes = self.table, self.table.cluster.nodes
        rows = sorted(rows)
        if not rows:
            return
        on_node, slot_of, resources = table.on_node, table.slot_of, self.resources
        entries = [on_node.get(nodes[i].name, ()) for i in rows]
        width = max(len(e) for e in entries)
        if width > self.index.shape[1]:
            self._widen(width)
        at = np.array(rows, dtype=np.int64)
        self.index[at] = -1
        self.taken[at] = 0
        # Every cell of the rows at once (the same values as cell by cell).
        at_row: list[int] = []
        at_col: list[int] = []
        slots: list[int] = []
        taken: list[int] = []  # cell after cell, each its resources in order
        zeros = (0,) * len(resources)
        for i, row in zip(rows, entries, strict=True):
            for j, (unit, there) in enumerate(row):
                at_row.append(i)
                at_col.append(j)
                slots.append(slot_of[unit.ref])
                taken.extend(map(there.get, resources, zeros))
        if slots:
            self.index[at_row, at_col] = slots
            self.taken[at_row, at_col] = np.array(taken, dtype=np.int64).reshape(
                len(slots), len(resources)
            )
        self._derive(at)
        for priority in [p for p in self.takeables if p not in self.used]:
            del self.takeables[priority]
        for priority, takeable in self.takeables.items():
            takeable.update_rows(self, table.eligible_mask(priority), at)
        self.used.clear()

    def _widen(self, width: int) -> None:
        n, old = self.index.shape
        index = np.full((n, width), -1, dtype=np.int64)
        index[:, :old] = self.index
        taken = np.zeros((n, width, len(self.resources)), dtype=np.int64)
        taken[:, :old] = self.taken
        self.index, self.taken = index, taken
        self.takeables.clear()  # their arrays are as wide as the columns were
        self.used.clear()
        self._derive(slice(None))


__all__ = ["NO_PRIORITY", "NodeColumns", "SlotData", "Takeable"]
