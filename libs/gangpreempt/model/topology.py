"""Kueue's topology-aware scheduling (TAS), as its API spells it (``kueue.x-k8s.io/v1beta2``):

- a ``Topology``: its levels, node label keys from the coarsest (a block) to the finest
  (``kubernetes.io/hostname``, which may only be the last);
- a pod set's ``topologyRequest`` (from its pod template's annotations or the Workload's
  own field): all its pods in one domain of a level (``required``), in as few domains as
  may be from that level up (``preferred``), anywhere (``unconstrained``, or implied in
  a ClusterQueue whose flavors all name a topology), and optionally in slices of
  ``slice_size`` pods, each slice within one domain of ``slice_level``;
- an admitted pod set's ``topologyAssignment``: its levels and, per domain (always a
  leaf), the values of those levels and how many pods go there."""

from __future__ import annotations

import msgspec

HOSTNAME_LABEL = "kubernetes.io/hostname"

# Pod template annotations Kueue reads into a pod set's topologyRequest.
REQUIRED_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED_ANNOTATION = "kueue.x-k8s.io/podset-unconstrained-topology"
SLICE_REQUIRED_ANNOTATION = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE_ANNOTATION = "kueue.x-k8s.io/podset-slice-size"


class Topology(msgspec.Struct, frozen=True):
    name: str
    levels: tuple[str, ...]  # node label keys, coarsest first

    @property
    def hostname_leaves(self) -> bool:
        """The finest level is the node itself: every leaf is one node."""
        return bool(self.levels) and self.levels[-1] == HOSTNAME_LABEL


class TopologyRequest(msgspec.Struct, frozen=True):
    """At most one of ``required``, ``preferred``, ``unconstrained`` (Kueue's order of
    precedence when more are given); ``implied``: none given, in a ClusterQueue whose
    flavors are all topology flavors (treated as unconstrained)."""

    required: str = ""
    preferred: str = ""
    unconstrained: bool = False
    implied: bool = False
    slice_level: str = ""  # podSetSliceRequiredTopology
    slice_size: int = 0  # podSetSliceSize (with slice_level)

    @property
    def level(self) -> str:
        return self.required or self.preferred


class TopologyDomain(msgspec.Struct, frozen=True):
    values: tuple[str, ...]  # one per level of the assignment
    count: int


class TopologyAssignment(msgspec.Struct, frozen=True):
    levels: tuple[str, ...]
    domains: tuple[TopologyDomain, ...]

    @property
    def pods(self) -> int:
        return sum(d.count for d in self.domains)


__all__ = [
    "HOSTNAME_LABEL",
    "PREFERRED_ANNOTATION",
    "REQUIRED_ANNOTATION",
    "SLICE_REQUIRED_ANNOTATION",
    "SLICE_SIZE_ANNOTATION",
    "UNCONSTRAINED_ANNOTATION",
    "Topology",
    "TopologyAssignment",
    "TopologyDomain",
    "TopologyRequest",
]
