"""The cohort tree: nominal quota, borrowing and lending limits at every level, and usage
bubbling up, with the arithmetic of Kueue's hierarchical cohorts.

Every node (ClusterQueue or Cohort) keeps, per flavor-resource ``fr = (flavor, resource)``:

- ``quotas[fr]``: its own nominal quota, borrowing limit and lending limit;
- ``subtree_quota[fr]``: its nominal plus what its children lend it (a child lends
  ``subtree_quota - local_quota``);
- ``usage[fr]``: for a ClusterQueue its admitted usage; for a Cohort the part of its
  children's usage that spills past their local quota.

``local_quota = subtree_quota - lending_limit`` (when a lending limit is set) is private to
the node's subtree: it is never lent to the parent.

Hence the invariant every operation here keeps: a Cohort's ``usage[fr]`` is the sum over
its children of ``max(0, child.usage[fr] - child.local_quota(fr))``, so the usage of every
node is a function of the ClusterQueues' usage alone.

Quotas are fixed once ``accumulate`` has run over a tree: local quotas and the largest
possible requests (``potential_available``) are kept per node from then on, and
``accumulate`` drops them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from gangpreempt.model.queues import ResourceGroup, ResourceQuota

if TYPE_CHECKING:
    from gangpreempt.quota.fairshare import DRS

FR = tuple[str, str]  # (flavor, resource)
Quantities = dict[FR, int]


class Node:
    """A ClusterQueue or a Cohort in the tree."""

    __slots__ = (
        "_height",
        "_lendable",
        "_local",
        "_potential",
        "_shares",
        "child_cohorts",
        "child_cqs",
        "is_cohort",
        "name",
        "parent",
        "quotas",
        "subtree_quota",
        "usage",
        "weight",
    )

    def __init__(
        self,
        name: str,
        *,
        is_cohort: bool,
        quotas: dict[FR, ResourceQuota],
        weight: float = 1.0,
    ) -> None:
        self.name = name
        self.weight = weight  # fairSharing.weight
        self.is_cohort = is_cohort
        self.parent: Node | None = None
        self.quotas = quotas
        self.subtree_quota: Quantities = {fr: q.nominal for fr, q in quotas.items()}
        self.usage: Quantities = {}
        self.child_cqs: list[Node] = []
        self.child_cohorts: list[Node] = []
        self._height: int | None = None
        # fr -> local quota (only the positive ones), once asked (see ``_locals``)
        self._local: dict[FR, int] | None = None
        # fr -> ``potential_available``, once asked
        self._potential: dict[FR, int] = {}
        # resource -> what this node could ever reach over every flavor of its tree
        # (``quota.fairshare.lendable``), once asked
        self._lendable: dict[str, int] | None = None
        # overshoots over the subtree quota -> the dominant resource share they make
        # (``quota.fairshare``), as asked
        self._shares: dict[tuple[int, ...], DRS] = {}

    def _locals(self) -> dict[FR, int]:
        """Local quota per flavor-resource (absent: 0); kept until ``accumulate``."""
        loc = self._local
        if loc is None:
            loc = {}
            for fr, q in self.quotas.items():
                if q.lending_limit is not None:
                    v = self.subtree_quota.get(fr, 0) - q.lending_limit
                    if v > 0:
                        loc[fr] = v
            self._local = loc
        return loc

    def _forget(self) -> None:
        """Drop what is kept of the quotas (they are about to change)."""
        self._local = None
        self._potential = {}
        self._lendable = None
        self._shares = {}
        self._height = None

    def __repr__(self) -> str:
        kind = "Cohort" if self.is_cohort else "ClusterQueue"
        return f"<{kind} {self.name}>"

    # -- structure -----------------------------------------------------------------
    def path_to_root(self) -> Iterator[Node]:
        """Ancestors, parent first, root last."""
        node = self.parent
        while node is not None:
            yield node
            node = node.parent

    def root(self) -> Node:
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def height(self) -> int:
        """Distance to the furthest leaf; a cohort with only ClusterQueues has height 1."""
        if self._height is None:
            h = 1 if (self.child_cqs or self.child_cohorts) else 0
            for child in self.child_cohorts:
                h = max(h, child.height() + 1)
            self._height = h
        return self._height

    def subtree_cluster_queues(self) -> Iterator[Node]:
        yield from self.child_cqs
        for child in self.child_cohorts:
            yield from child.subtree_cluster_queues()

    # -- quantities ----------------------------------------------------------------
    def nominal(self, fr: FR) -> int:
        q = self.quotas.get(fr)
        return q.nominal if q is not None else 0

    def local_quota(self, fr: FR) -> int:
        loc = self._local
        if loc is None:
            loc = self._locals()
        return loc.get(fr, 0)

    def local_available(self, fr: FR) -> int:
        loc = self._local
        if loc is None:
            loc = self._locals()
        free = loc.get(fr, 0) - self.usage.get(fr, 0)
        return free if free > 0 else 0

    def borrowing_with(self, fr: FR, val: int) -> bool:
        return self.subtree_quota.get(fr, 0) < self.usage.get(fr, 0) + val

    def borrowing(self, fr: FR) -> bool:
        return self.borrowing_with(fr, 0)

    def within_nominal(self, frs: frozenset[FR] | set[FR]) -> bool:
        usage, quota = self.usage, self.subtree_quota
        for fr in frs:  # noqa: SIM110 - a loop: ``all`` of a generator is slower here
            if quota.get(fr, 0) < usage.get(fr, 0):
                return False
        return True


def available(node: Node, fr: FR) -> int:
    """Capacity left for ``node`` now, within its borrowing limit; may be negative when
    the tree is over-admitted."""
    parent = node.parent
    if parent is None:
        return node.subtree_quota.get(fr, 0) - node.usage.get(fr, 0)
    parent_available = available(parent, fr)
    loc = node._local
    if loc is None:
        loc = node._locals()
    lq = loc.get(fr, 0)
    used = node.usage.get(fr, 0)
    q = node.quotas.get(fr)
    if q is not None and q.borrowing_limit is not None:
        stored_in_parent = node.subtree_quota.get(fr, 0) - lq
        used_in_parent = used - lq if used > lq else 0
        with_max = stored_in_parent - used_in_parent + q.borrowing_limit
        if with_max < parent_available:
            parent_available = with_max
    return (lq - used if lq > used else 0) + parent_available


def cq_available(node: Node, fr: FR) -> int:
    """What a ClusterQueue can admit right now (0 when the tree is in debt)."""
    return max(0, available(node, fr))


def potential_available(node: Node, fr: FR) -> int:
    """The largest request the node could ever hold, with no usage anywhere (it depends
    on quotas only: kept per node)."""
    found = node._potential.get(fr)
    if found is not None:
        return found
    if node.parent is None:
        avail = node.subtree_quota.get(fr, 0)
    else:
        avail = node.local_quota(fr) + potential_available(node.parent, fr)
        q = node.quotas.get(fr)
        if q is not None and q.borrowing_limit is not None:
            avail = min(node.subtree_quota.get(fr, 0) + q.borrowing_limit, avail)
    node._potential[fr] = avail
    return avail


def add_usage(node: Node, fr: FR, val: int) -> None:
    """Add usage, spilling what exceeds the local quota into the parent."""
    while True:
        usage = node.usage
        used = usage.get(fr, 0)
        loc = node._local
        if loc is None:
            loc = node._locals()
        lq = loc.get(fr, 0)
        local_available = lq - used if lq > used else 0
        usage[fr] = used + val
        parent = node.parent
        if parent is None or val <= local_available:
            return
        val -= local_available
        node = parent


def remove_usage(node: Node, fr: FR, val: int) -> None:
    """Remove usage, taking back first what the node had spilled into its parent."""
    while True:
        usage = node.usage
        used = usage.get(fr, 0)
        loc = node._local
        if loc is None:
            loc = node._locals()
        stored_in_parent = used - loc.get(fr, 0)
        usage[fr] = used - val
        parent = node.parent
        if stored_in_parent <= 0 or parent is None:
            return
        if stored_in_parent < val:
            val = stored_in_parent
        node = parent


# (a node's usage dict, fr, its value before: None when it had none), in order of change
UsageJournal = list[tuple[Quantities, FR, int | None]]


def remove_usages(changes: Iterable[tuple[Node, Mapping[FR, int]]]) -> UsageJournal:
    """``remove_usage`` of every amount, in order; returns what ``restore_usages`` needs
    to put every usage back exactly as it was (absent keys included)."""
    journal: UsageJournal = []
    for node, amounts in changes:
        for fr, amount in amounts.items():
            _remove_logged(node, fr, amount, journal)
    return journal


def remove_amounts(fr: FR, changes: Iterable[tuple[Node, int]]) -> UsageJournal:
    """``remove_usages`` of one flavor-resource: (node, amount) pairs."""
    journal: UsageJournal = []
    for node, amount in changes:
        _remove_logged(node, fr, amount, journal)
    return journal


def _remove_logged(node: Node, fr: FR, val: int, journal: UsageJournal) -> None:
    """``remove_usage``, noting each value it overwrites in ``journal``."""
    if not val:
        return  # removing nothing changes nothing
    while True:
        usage = node.usage
        old = usage.get(fr)
        journal.append((usage, fr, old))
        used = 0 if old is None else old
        loc = node._local
        if loc is None:
            loc = node._locals()
        stored_in_parent = used - loc.get(fr, 0)
        usage[fr] = used - val
        parent = node.parent
        if stored_in_parent <= 0 or parent is None:
            return
        if stored_in_parent < val:
            val = stored_in_parent
        node = parent


def restore_usages(journal: UsageJournal) -> None:
    """Undo ``remove_usages`` (nothing else may have changed usage since)."""
    for usage, fr, old in reversed(journal):
        if old is None:
            del usage[fr]
        else:
            usage[fr] = old


def quantities_fit_in_quota(node: Node, requests: Mapping[FR, int]) -> tuple[bool, Quantities]:
    """Do ``requests`` fit in this node's subtree quota, and what exceeds its local quota
    (to be asked of the parent next)?"""
    fits = True
    remaining: Quantities = {}
    for fr, v in requests.items():
        if node.subtree_quota.get(fr, 0) < node.usage.get(fr, 0) + v:
            fits = False
        remaining[fr] = max(0, v - node.local_available(fr))
    return fits, remaining


def lowest_fitting_subtree(cq: Node, fr: FR, val: int) -> tuple[int, bool]:
    """Height of the smallest subtree containing ``cq`` whose quota holds ``val`` more of
    ``fr`` (0 = within the ClusterQueue's nominal quota), and whether that subtree is
    smaller than the whole tree (so the ClusterQueue may reclaim within it)."""
    parent = cq.parent
    if parent is None or cq.subtree_quota.get(fr, 0) >= cq.usage.get(fr, 0) + val:
        return 0, parent is not None
    remaining = val - cq.local_available(fr)
    node = parent
    while True:
        if node.subtree_quota.get(fr, 0) >= node.usage.get(fr, 0) + remaining:
            return node.height(), node.parent is not None
        if node.parent is None:
            return node.height(), False
        remaining -= node.local_available(fr)
        node = node.parent


def quotas_of(groups: tuple[ResourceGroup, ...]) -> dict[FR, ResourceQuota]:
    return {
        (flavor.name, res): quota
        for group in groups
        for flavor in group.flavors
        for res, quota in flavor.resources.items()
    }


def accumulate(cohort: Node) -> None:
    """Recompute subtree quotas and spilled usage from the leaves up to ``cohort``."""
    cohort._forget()
    for cq in cohort.child_cqs:
        cq._forget()
    cohort.subtree_quota = {fr: q.nominal for fr, q in cohort.quotas.items()}
    cohort.usage = {}
    for child in cohort.child_cohorts:
        accumulate(child)
    for child in (*cohort.child_cohorts, *cohort.child_cqs):
        for fr, child_quota in child.subtree_quota.items():
            cohort.subtree_quota[fr] = (
                cohort.subtree_quota.get(fr, 0) + child_quota - child.local_quota(fr)
            )
        for fr, child_usage in child.usage.items():
            spill = max(0, child_usage - child.local_quota(fr))
            if spill:
                cohort.usage[fr] = cohort.usage.get(fr, 0) + spill


__all__ = [
    "FR",
    "Node",
    "Quantities",
    "UsageJournal",
    "accumulate",
    "add_usage",
    "available",
    "cq_available",
    "lowest_fitting_subtree",
    "potential_available",
    "quantities_fit_in_quota",
    "quotas_of",
    "remove_amounts",
    "remove_usage",
    "remove_usages",
    "restore_usages",
]
