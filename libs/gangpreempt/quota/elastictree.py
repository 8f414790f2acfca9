"""Koordinator's ElasticQuota tree: how much each quota may use right now (its
*runtime* quota), from the cluster's total, each quota's ``min``, ``max``, shared weight
and request, as Koordinator's runtime quota calculator computes it.

Per resource, independently and in integers:

- a quota's *request* is its pods' requests (pending ones too; a parent: the sum of its
  children's requests, each capped by the child's ``max``); a quota that does not lend
  (``allow-lent-resource: "false"``) requests at least its ``min``;
- top down, a parent's runtime (the root's: the cluster's allocatable less what pods in
  no quota hold) is shared among its children: each first gets its request up to its
  ``min`` (a quota that does not lend: its ``min`` whatever it requests), then what is
  left goes to the children that want more, in proportion to their shared weight
  (default: ``max``), never past what they request (capped by ``max``), again and again
  until nothing is left or nobody wants more; each share is rounded down and the rest
  handed out one by one to the largest remainders (Hamilton's method), ties by name;
- at the root, when the children's ``min`` add up to more than the total, each ``min``
  is scaled down in proportion (Koordinator's ``EnableMinQuotaScale``, on by default).

A resource a quota's ``max`` does not list is not limited by that quota. Quotas are
named by name (Koordinator's names are cluster-wide); a ``parent`` that is not there
means the root."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gangpreempt.model.pods import ElasticQuota

Amounts = dict[str, int]


class QuotaTree:
    """The runtime of every quota in one tree, for one set of requests and one total."""

    def __init__(
        self,
        quotas: Iterable[ElasticQuota],
        requests: Mapping[str, Mapping[str, int]],
        total: Mapping[str, int],
    ) -> None:
        """``requests``: quota name -> its own pods' requests (running and pending);
        ``total``: what the root shares (per resource)."""
        self.quotas: dict[str, ElasticQuota] = {}
        for eq in sorted(quotas, key=lambda q: q.key):
            self.quotas.setdefault(eq.name, eq)
        self.children: dict[str, list[str]] = {}
        for name in sorted(self.quotas):
            self.children.setdefault(self.parent_of(name), []).append(name)
        self.request: dict[str, Amounts] = {}
        self.runtime: dict[str, Amounts] = {}
        resources = sorted({res for eq in self.quotas.values() for res in eq.max})
        for res in resources:
            self._request(res, "", requests)
            self._share(res, "", total.get(res, 0), root=True)

    def parent_of(self, name: str) -> str:
        """The parent quota's name; "" for the root (no parent, or one not there)."""
        parent = self.quotas[name].parent
        return parent if parent in self.quotas and parent != name else ""

    def ancestors(self, name: str) -> list[str]:
        """The quota's parents up to (not including) the root, nearest first."""
        out: list[str] = []
        parent = self.parent_of(name)
        while parent and parent not in out and parent != name:
            out.append(parent)
            parent = self.parent_of(parent)
        return out

    def subtree(self, name: str) -> list[str]:
        """The quota and every quota under it."""
        out, todo = [], [name]
        while todo:
            current = todo.pop()
            if current in out:
                continue
            out.append(current)
            todo.extend(self.children.get(current, []))
        return out

    def limit(self, name: str) -> Amounts:
        """What the quota may use now: its runtime on every resource its ``max`` lists."""
        return self.runtime.get(name, {})

    # -- the calculation ------------------------------------------------------------------

    def _request(self, res: str, name: str, own: Mapping[str, Mapping[str, int]]) -> int:
        """The request of ``name`` ("" the root) for ``res``, children first; stored."""
        total = own.get(name, {}).get(res, 0) if name else 0
        for child in self.children.get(name, []):
            if child == name:
                continue
            wanted = self._request(res, child, own)
            total += self._capped(res, child, wanted)
        if name:
            eq = self.quotas[name]
            if not eq.allow_lent:
                total = max(total, eq.min.get(res, 0))
            self.request.setdefault(name, {})[res] = total
        return total

    def _capped(self, res: str, name: str, wanted: int) -> int:
        top = self.quotas[name].max.get(res)
        return wanted if top is None else min(wanted, top)

    def _weight(self, res: str, name: str) -> int:
        eq = self.quotas[name]
        weight = eq.shared_weight.get(res, 0)
        return weight if weight > 0 else eq.max.get(res, 0)

    def _share(self, res: str, parent: str, total: int, root: bool = False) -> None:
        """Share ``total`` of ``res`` among ``parent``'s children, then theirs."""
        children = [c for c in self.children.get(parent, []) if c != parent]
        if not children:
            return
        mins = {c: self.quotas[c].min.get(res, 0) for c in children}
        if root and sum(mins.values()) > max(0, total):
            whole = sum(mins.values())
            mins = {c: max(0, total) * m // whole for c, m in mins.items()}
        runtime: dict[str, int] = {}
        wants: dict[str, int] = {}
        hungry: list[str] = []
        left = total
        for c in children:
            wanted = self._capped(res, c, self.request.get(c, {}).get(res, 0))
            wants[c] = wanted
            if wanted > mins[c]:
                runtime[c] = mins[c]
                hungry.append(c)
            elif self.quotas[c].allow_lent:
                runtime[c] = wanted
            else:
                runtime[c] = mins[c]
            left -= runtime[c]
        while left > 0 and hungry:
            weights = {c: self._weight(res, c) for c in hungry}
            if sum(weights.values()) <= 0:
                break
            deltas = hamilton(left, weights)
            left = 0
            still: list[str] = []
            for c in hungry:
                runtime[c] += deltas[c]
                if runtime[c] >= wants[c]:
                    left += runtime[c] - wants[c]
                    runtime[c] = wants[c]
                else:
                    still.append(c)
            hungry = still
        for c in children:
            if res in self.quotas[c].max:
                self.runtime.setdefault(c, {})[res] = runtime[c]
            self._share(res, c, runtime[c])


def hamilton(amount: int, weights: Mapping[str, int]) -> dict[str, int]:
    """Split ``amount`` in proportion to ``weights``: each share rounded down, the rest
    one by one to the largest remainders (ties by name)."""
    whole = sum(weights.values())
    shares = {k: w * amount // whole for k, w in weights.items()}
    rest = amount - sum(shares.values())
    by_remainder = sorted(weights, key=lambda k: (-(weights[k] * amount % whole), k))
    for k in by_remainder[:rest]:
        shares[k] += 1
    return shares


__all__ = ["QuotaTree", "hamilton"]
