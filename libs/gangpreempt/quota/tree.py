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
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from gangpreempt.model.queues import ResourceGroup, ResourceQuota

FR = tuple[str, str]  # (flavor, resource)
Quantities = dict[FR, int]


class Node:
    """A ClusterQueue or a Cohort in the tree."""

    __slots__ = (
        "_height",
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
        q = self.quotas.get(fr)
        if q is None or q.lending_limit is None:
            return 0
        return max(0, self.subtree_quota.get(fr, 0) - q.lending_limit)

    def local_available(self, fr: FR) -> int:
        return max(0, self.local_quota(fr) - self.usage.get(fr, 0))

    def borrowing_with(self, fr: FR, val: int) -> bool:
        return self.subtree_quota.get(fr, 0) < self.usage.get(fr, 0) + val

    def borrowing(self, fr: FR) -> bool:
        return self.borrowing_with(fr, 0)

    def within_nominal(self, frs: frozenset[FR] | set[FR]) -> bool:
        usage, quota = self.usage, self.subtree_quota
        return all(quota.get(fr, 0) >= usage.get(fr, 0) for fr in frs)


def available(node: Node, fr: FR) -> int:
    """Capacity left for ``node`` now, within its borrowing limit; may be negative when
    the tree is over-admitted."""
    if node.parent is None:
        return node.subtree_quota.get(fr, 0) - node.usage.get(fr, 0)
    parent_available = available(node.parent, fr)
    q = node.quotas.get(fr)
    if q is not None and q.borrowing_limit is not None:
        lq = node.local_quota(fr)
        stored_in_parent = node.subtree_quota.get(fr, 0) - lq
        used_in_parent = max(0, node.usage.get(fr, 0) - lq)
        with_max = stored_in_parent - used_in_parent + q.borrowing_limit
        parent_available = min(with_max, parent_available)
    return node.local_available(fr) + parent_available


def cq_available(node: Node, fr: FR) -> int:
    """What a ClusterQueue can admit right now (0 when the tree is in debt)."""
    return max(0, available(node, fr))


def potential_available(node: Node, fr: FR) -> int:
    """The largest request the node could ever hold, with no usage anywhere."""
    if node.parent is None:
        return node.subtree_quota.get(fr, 0)
    avail = node.local_quota(fr) + potential_available(node.parent, fr)
    q = node.quotas.get(fr)
    if q is not None and q.borrowing_limit is not None:
        avail = min(node.subtree_quota.get(fr, 0) + q.borrowing_limit, avail)
    return avail


def add_usage(node: Node, fr: FR, val: int) -> None:
    """Add usage, spilling what exceeds the local quota into the parent."""
    local_available = node.local_available(fr)
    node.usage[fr] = node.usage.get(fr, 0) + val
    if node.parent is not None and val > local_available:
        add_usage(node.parent, fr, val - local_available)


def remove_usage(node: Node, fr: FR, val: int) -> None:
    """Remove usage, taking back first what the node had spilled into its parent."""
    stored_in_parent = node.usage.get(fr, 0) - node.local_quota(fr)
    node.usage[fr] = node.usage.get(fr, 0) - val
    if stored_in_parent <= 0 or node.parent is None:
        return
    remove_usage(node.parent, fr, min(val, stored_in_parent))


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
    if not cq.borrowing_with(fr, val) or cq.parent is None:
        return 0, cq.parent is not None
    remaining = val - cq.local_available(fr)
    for node in cq.path_to_root():
        if not node.borrowing_with(fr, remaining):
            return node.height(), node.parent is not None
        remaining -= node.local_available(fr)
    return cq.root().height(), False


def quotas_of(groups: tuple[ResourceGroup, ...]) -> dict[FR, ResourceQuota]:
    return {
        (flavor.name, res): quota
        for group in groups
        for flavor in group.flavors
        for res, quota in flavor.resources.items()
    }


def accumulate(cohort: Node) -> None:
    """Recompute subtree quotas and spilled usage from the leaves up to ``cohort``."""
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
    "accumulate",
    "add_usage",
    "available",
    "cq_available",
    "lowest_fitting_subtree",
    "potential_available",
    "quantities_fit_in_quota",
    "quotas_of",
    "remove_usage",
]
