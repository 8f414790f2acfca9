"""Pods by node and by gang, kept in step with a cluster state change by change: what the
checks of a plan look up (``planning/nodeconfirm.py``, ``planning/legitimacy.py``) in a
handful of nodes and gangs, instead of scanning every pod of the cluster for each plan.
A service's STATE replica keeps one (``replica.StateReplica.pods``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import Pod

POD_KIND = "Pod"


class PodIndex:
    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.by_node: dict[str, set[str]] = {}
        self.by_group: dict[str, set[str]] = {}
        for pod in state.pods.values():
            self._add(pod)

    def changed(self, kind: str, old: Any, new: Any) -> None:
        """A change the state has taken in (``kind``, the object before and after)."""
        if kind != POD_KIND:
            return
        if old is not None:
            self._remove(old)
        if new is not None:
            self._add(new)

    def _add(self, pod: Pod) -> None:
        if pod.node_name:
            self.by_node.setdefault(pod.node_name, set()).add(pod.key)
        if pod.group:
            self.by_group.setdefault(pod.group, set()).add(pod.key)

    def _remove(self, pod: Pod) -> None:
        for table, at in ((self.by_node, pod.node_name), (self.by_group, pod.group)):
            keys = table.get(at) if at else None
            if keys is not None:
                keys.discard(pod.key)
                if not keys:
                    del table[at]

    def _pods(self, keys: set[str]) -> Iterator[Pod]:
        pods = self.state.pods
        return (pod for key in sorted(keys) if (pod := pods.get(key)) is not None)

    def on_node(self, node: str) -> Iterator[Pod]:
        """The pods bound to ``node`` (terminating and finished ones too), by key."""
        return self._pods(self.by_node.get(node, set()))

    def members(self, group: str) -> Iterator[Pod]:
        """The pods of gang ``group`` (``namespace/name``), by key."""
        return self._pods(self.by_group.get(group, set()))


__all__ = ["PodIndex"]
