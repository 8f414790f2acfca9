"""Placing the pods of a gang on nodes: greedy, largest pods first, each on the first node
of its preference order where it passes the static filters and fits.

Pods with the same demand and constraints share a cursor into their node order: free
capacity only shrinks while one placement runs, so a node that could not take a pod of
that shape will not take the next one either. One placement costs O(nodes + pods)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import msgspec

from gangpreempt.model.pods import Pod
from gangpreempt.placement.cluster import NodeCluster
from gangpreempt.placement.fit import fits, take

Free = dict[str, dict[str, int]]  # node name -> resource -> free amount


class Shape:
    """Pods with one demand and one set of constraints, and the nodes they may use."""

    __slots__ = ("allowed", "demand", "pods")

    def __init__(self, demand: dict[str, int], allowed: list[str]) -> None:
        self.demand = demand
        self.allowed = allowed
        self.pods: list[Pod] = []


def shapes_of(pods: Iterable[Pod], cluster: NodeCluster) -> list[Shape]:
    """Group pods by (demand, constraints), largest demand first; ``allowed`` lists the
    nodes (in the given order) whose selectors, affinity, taints and cordon admit them."""
    by_key: dict[bytes, Shape] = {}
    for pod in pods:
        demand = cluster.demand(pod)
        key = msgspec.json.encode((sorted(demand.items()), pod.scheduling))
        shape = by_key.get(key)
        if shape is None:
            allowed = [n.name for n in cluster.allowed(pod.scheduling)]
            shape = by_key[key] = Shape(demand, allowed)
        shape.pods.append(pod)
    return sorted(by_key.values(), key=lambda s: sorted(-v for v in s.demand.values()))


def resources_of(shapes: Iterable[Shape]) -> set[str]:
    out: set[str] = set()
    for s in shapes:
        out.update(s.demand)
    return out


def place(
    shapes: Sequence[Shape],
    free: Free,
    order: Mapping[int, Sequence[str]] | None = None,
    limit: Mapping[int, int] | None = None,
) -> dict[str, str] | None:
    """Pod ref -> node for every pod of ``shapes`` (``limit[i]``: only that many of shape
    i), taking from ``free``; None when some pod does not fit. ``order[i]`` overrides
    shape i's node order. ``free``'s node entries may be shared with another mapping:
    each is replaced by a copy before it is first taken from (copy on write)."""
    placement: dict[str, str] = {}
    owned: set[str] = set()
    for i, shape in enumerate(shapes):
        nodes = order[i] if order is not None and i in order else shape.allowed
        want = len(shape.pods) if limit is None else limit.get(i, len(shape.pods))
        cursor = 0
        demand = shape.demand
        for pod in shape.pods[:want]:
            while cursor < len(nodes):
                node_free = free.get(nodes[cursor])
                if node_free is not None and fits(demand, node_free):
                    break
                cursor += 1
            if cursor == len(nodes):
                return None
            name = nodes[cursor]
            if name not in owned:
                free[name] = dict(free[name])
                owned.add(name)
            take(free[name], demand)
            placement[pod.ref] = name
    return placement


def copy_free(free: Free) -> Free:
    return {name: dict(v) for name, v in free.items()}


__all__ = ["Free", "Shape", "copy_free", "place", "resources_of", "shapes_of"]
