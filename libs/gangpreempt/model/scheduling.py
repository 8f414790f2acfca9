"""Pod scheduling constraints shared by flavors, pod sets and (later) nodes: taints,
tolerations, node selectors and required node affinity, with Kubernetes' matching rules."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec


class Taint(msgspec.Struct, frozen=True):
    key: str
    effect: str
    value: str = ""

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}"


class Toleration(msgspec.Struct, frozen=True):
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' ToleratesTaint: effect, key and value (or Exists) must match."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        # An empty key with operator Equal matches nothing (API validation forbids it).
        return bool(self.key) and self.value == taint.value


class NodeSelectorRequirement(msgspec.Struct, frozen=True):
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "In":
            return present and labels[self.key] in self.values
        if self.operator == "NotIn":
            return not present or labels[self.key] not in self.values
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if self.operator in ("Gt", "Lt"):
            if not present or len(self.values) != 1:
                return False
            try:
                have, want = int(labels[self.key]), int(self.values[0])
            except ValueError:
                return False
            return have > want if self.operator == "Gt" else have < want
        return False


class NodeSelectorTerm(msgspec.Struct, frozen=True):
    match_expressions: tuple[NodeSelectorRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        # Kubernetes: a term without requirements selects no node.
        return bool(self.match_expressions) and all(
            req.matches(labels) for req in self.match_expressions
        )


class SchedulingConstraints(msgspec.Struct, frozen=True):
    """What a pod template asks of the nodes it may run on."""

    node_selector: dict[str, str] = msgspec.field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    # Required node affinity: OR of terms, each an AND of requirements. None = no affinity.
    affinity_terms: tuple[NodeSelectorTerm, ...] | None = None

    def first_untolerated(
        self,
        taints: Iterable[Taint],
        extra: Iterable[Toleration] = (),
        effects: frozenset[str] = frozenset({"NoSchedule", "NoExecute"}),
    ) -> Taint | None:
        tolerations = (*self.tolerations, *extra)
        for taint in taints:
            if taint.effect not in effects:
                continue
            if not any(t.tolerates(taint) for t in tolerations):
                return taint
        return None

    def matches_labels(
        self, labels: Mapping[str, str], only_keys: frozenset[str] | None = None
    ) -> bool:
        """Does a node (or flavor) with ``labels`` satisfy the selector and required affinity?

        With ``only_keys``, constraints on other keys are ignored, as Kueue does when it
        matches a pod set against a ResourceFlavor's own node labels.
        """
        for key, value in self.node_selector.items():
            if only_keys is not None and key not in only_keys:
                continue
            if labels.get(key) != value:
                return False
        terms = self.affinity_terms
        if terms is None:
            return True
        if only_keys is not None:
            kept: list[NodeSelectorTerm] = []
            for term in terms:
                reqs = tuple(r for r in term.match_expressions if r.key in only_keys)
                if not reqs:
                    # An emptied term matches anything: the OR is then always true.
                    return True
                kept.append(NodeSelectorTerm(reqs))
            terms = tuple(kept)
        if not terms:
            return True
        return any(term.matches(labels) for term in terms)


__all__ = [
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "SchedulingConstraints",
    "Taint",
    "Toleration",
]
