"""Kueue's dominant resource share (fair sharing, KEP-1714 as Kueue computes it today).

A node (ClusterQueue or Cohort) borrows a flavor-resource when its usage is above its
subtree quota; what it borrows of a resource is the sum, over the flavors of that
resource, of those overshoots (a flavor under quota does not offset another). Its share
of a resource is ``borrowed * 1000 / lendable``, where ``lendable`` is what its parent
could ever reach of that resource, summed over every flavor of the tree
(``potential_available`` of the parent). The dominant share is the largest (ties: the
resource name first in order), divided by the node's ``fairSharing.weight``: a node that
borrows with weight 0 has an infinite share. A node without a parent (a ClusterQueue
outside any cohort, the root cohort) has no share. Shares are exact floats; Kueue rounds
them up only for its status.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from gangpreempt.quota.tree import FR, Node, potential_available

SCALE = 1000.0


class DRS:
    """A node's dominant resource share, and which flavor-resources it borrows."""

    __slots__ = ("_key", "borrowed_frs", "borrowing", "dominant", "ratio", "weight")

    def __init__(
        self,
        ratio: float = 0.0,
        weight: float = 1.0,
        borrowing: bool = False,
        dominant: str | None = None,
        borrowed_frs: frozenset[FR] = frozenset(),
    ) -> None:
        self.ratio = ratio  # unweighted, per thousand
        self.weight = weight
        self.borrowing = borrowing
        self.dominant = dominant
        self.borrowed_frs = borrowed_frs
        self._key: tuple[int, float] | None = None

    @property
    def zero_weight_borrows(self) -> bool:
        return self.weight == 0 and self.borrowing

    def precise(self) -> float:
        """The weighted share: infinite for a zero-weight borrower."""
        if self.zero_weight_borrows:
            return math.inf
        if self.ratio == 0:
            return 0.0
        share = self.ratio / self.weight
        if math.isnan(share):
            return math.inf
        if share == 0:
            return math.ulp(0.0)  # a borrower's share never underflows to none
        return share

    def rounded(self) -> int:
        """As Kueue's ``status.fairSharing.weightedShare`` shows it."""
        if self.zero_weight_borrows:
            return 2**63 - 1
        return max(1 if self.ratio else 0, math.ceil(self.precise()))

    @property
    def key(self) -> tuple[int, float]:
        """Orders shares as ``compare`` does: zero-weight borrowers above everything, by
        their unweighted ratio."""
        if self._key is None:
            if self.zero_weight_borrows:
                self._key = (2, self.ratio)
            elif self.ratio < 0:
                self._key = (0, self.ratio)  # NEGATIVE: below every share
            else:
                self._key = (1, self.precise())
        return self._key

    @property
    def is_zero(self) -> bool:
        return self.ratio == 0

    def borrowing_on(self, frs: Iterable[FR]) -> bool:
        return any(fr in self.borrowed_frs for fr in frs)

    def __repr__(self) -> str:
        return f"<DRS {self.precise():.3f} ({self.dominant}, weight {self.weight})>"


NEGATIVE = DRS(ratio=-1.0)  # below every share


def compare(a: DRS, b: DRS) -> int:
    """-1, 0, 1 as ``a`` is below, equal to, above ``b`` (two zero-weight borrowers by
    their unweighted ratio)."""
    x, y = a.key, b.key
    return (x > y) - (x < y)


def lendable(parent: Node) -> dict[str, int]:
    """Per resource: what ``parent`` could ever reach, over every flavor of the tree (it
    depends on quotas only: kept on the node until its tree is accumulated again)."""
    return dict(_lendable(parent))


def _lendable(parent: Node) -> dict[str, int]:
    """``lendable``, kept (callers must not change it)."""
    found = parent._lendable
    if found is None:
        root = parent.root()
        found = {}
        for fr in root.subtree_quota:
            found[fr[1]] = found.get(fr[1], 0) + potential_available(parent, fr)
        parent._lendable = found
    return found


def dominant_resource_share(
    node: Node,
    cache: dict[int, dict[str, int]] | None = None,
    minus: Mapping[FR, int] | None = None,
) -> DRS:
    """The node's share now (its usage as the snapshot holds it, less ``minus``: for a
    ClusterQueue, a workload of its own taken away). ``cache`` is no longer read: the
    lendable amounts, which depend on quotas only, are kept on the parent node. Shares
    are immutable and may be shared between callers."""
    parent = node.parent
    if parent is None:
        return DRS(weight=node.weight)
    usage = node.usage
    overs: list[int] = []
    for fr, quota in node.subtree_quota.items():
        over = usage.get(fr, 0) - quota
        if minus:
            over -= minus.get(fr, 0)
        overs.append(over if over > 0 else 0)
    # The share is a function of these overshoots alone (quotas, weights and lendable
    # amounts are fixed once the tree is accumulated): kept by their values, in a memo
    # the node shares with every node of its kind (``_memo_of``).
    key = tuple(overs)
    memo = node._shares
    found = memo.get(key)
    if found is None:
        if id(memo) not in _KINDS:
            memo = _memo_of(node, parent)
            found = memo.get(key)
        if found is None:
            if len(memo) >= _MEMO_LIMIT:
                memo.clear()
            found = memo[key] = _share(node, parent, overs)
            _KEPT[0] += 1
            if _KEPT[0] >= _KEPT_LIMIT:
                _forget_kinds()
    return found


_MEMO_LIMIT = 4096  # shares kept per kind of node
_KINDS_LIMIT = 1024  # kinds kept
_KEPT_LIMIT = 1 << 16  # shares made since the kinds were last forgotten (a bound on memory)
_KEPT = [0]

# What makes a share out of overshoots (``_share``): the order of the node's subtree
# quota (the overshoots follow it), its weight, and what its parent could lend. Nodes
# alike in these (every ClusterQueue of one quota in a cohort) share one memo: kind ->
# memo, and the id of each memo kept here -> its kind.
_Kind = tuple[tuple[FR, ...], str, tuple[tuple[str, int], ...]]
_MEMOS: dict[_Kind, dict[tuple[int, ...], DRS]] = {}
_KINDS: dict[int, _Kind] = {}


def _memo_of(node: Node, parent: Node) -> dict[tuple[int, ...], DRS]:
    """The memo of ``node``'s kind, which the node keeps from then on (until its tree is
    accumulated again: the node's memo is then a fresh one of its own, and the kind is
    found again)."""
    # The weight by its repr: alike to the last bit (0.0 and -0.0, 1 and 1.0 are not).
    kind = (tuple(node.subtree_quota), repr(node.weight), tuple(sorted(_lendable(parent).items())))
    memo = _MEMOS.get(kind)
    if memo is None:
        if len(_MEMOS) >= _KINDS_LIMIT:
            _forget_kinds()
        memo = _MEMOS[kind] = {}
        _KINDS[id(memo)] = kind
    node._shares = memo
    return memo


def _forget_kinds() -> None:
    """Keep no memo here: a node keeps the one it has (still right for it) until its
    next miss, then finds its kind again."""
    _MEMOS.clear()
    _KINDS.clear()
    _KEPT[0] = 0


def _share(node: Node, parent: Node, overs: list[int]) -> DRS:
    """The share made by ``overs`` (what ``node`` uses over its subtree quota, per
    flavor-resource of ``node.subtree_quota`` in its order)."""
    borrowed: dict[str, int] = {}
    frs: set[FR] = set()
    for fr, over in zip(node.subtree_quota, overs, strict=True):
        if over > 0:
            borrowed[fr[1]] = borrowed.get(fr[1], 0) + over
            frs.add(fr)
    if not borrowed:
        return DRS(weight=node.weight)
    lend = _lendable(parent)
    ratio, dominant = 0.0, None
    for resource in sorted(borrowed):
        total = lend.get(resource, 0)
        if total <= 0:
            continue  # nothing lendable: no share of it
        r = borrowed[resource] * SCALE / total
        if r > ratio:
            ratio, dominant = r, resource
    return DRS(ratio, node.weight, True, dominant, frozenset(frs))


__all__ = ["DRS", "NEGATIVE", "compare", "dominant_resource_share", "lendable"]
