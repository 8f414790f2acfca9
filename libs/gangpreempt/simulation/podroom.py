"""The GPUs each node's running pods hold, by priority: enough to prove, without a
search, that a pending pod can neither be placed nor preempt its way onto any node, or
that a gang cannot be placed as the nodes are (the replay's parking of pods; kube-
scheduler's own is its unschedulable queue, requeued on cluster events).

The bounds are optimistic on purpose: a terminating or finished pod counts as gone,
nominated pods reserve nothing, and a pod without ``spec.priority`` counts as below
every preemptor, so a pod the bound rules out is one the node planner rules out too (it
places a pod only where its request fits beside what stays, and preempts only
lower-priority pods)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gangpreempt.model.pods import Pod

_BELOW_ALL = -(2**31) - 1  # below every pod priority (int32)


class PodRoom:
    """Per node: allocatable GPUs, and the GPUs of its bound, non-terminating pods per
    priority; kept by ``changed`` from every Pod change."""

    def __init__(self, allocatable: Mapping[str, int], resource: str) -> None:
        self.allocatable = dict(allocatable)
        self.resource = resource
        self.used: dict[str, dict[int, int]] = {n: {} for n in allocatable}
        # per node: allocatable less the GPUs of all its pods (kept by ``changed``)
        self._free: dict[str, int] = dict(self.allocatable)
        # ``most_free`` per priority, found once between changes
        self._most_free: dict[int, int] = {}

    def _holds(self, pod: Pod | None) -> tuple[str, int, int] | None:
        if pod is None or not pod.node_name or pod.terminating or pod.finished:
            return None
        gpus = int(pod.requests.get(self.resource, 0))
        priority = pod.priority if pod.priority is not None else _BELOW_ALL
        return (pod.node_name, priority, gpus) if gpus else None

    def changed(self, old: Pod | None, new: Pod | None) -> None:
        for pod, sign in ((old, -1), (new, 1)):
            held = self._holds(pod)
            if held is None:
                continue
            node, priority, gpus = held
            self._most_free.clear()
            if node in self._free:
                self._free[node] -= sign * gpus
            per = self.used.setdefault(node, {})
            per[priority] = per.get(priority, 0) + sign * gpus
            if not per[priority]:
                del per[priority]

    def most_free(self, priority: int | None = None) -> int:
        """The most GPUs a pod could get on one node: with every pod below ``priority``
        gone (all pods stay with None)."""
        if priority is None:
            return max(0, max(self._free.values(), default=0))
        found = self._most_free.get(priority)
        if found is None:
            found = self._most_free[priority] = self._most_free_now(priority)
        return found

    def _most_free_now(self, priority: int) -> int:
        best = 0
        for node, alloc in self.allocatable.items():
            per = self.used.get(node, {})
            kept = sum(v for p, v in per.items() if p >= priority)
            best = max(best, alloc - kept)
        return best

    def free_total(self) -> int:
        """GPUs not held by any running pod, over all nodes."""
        return sum(self._free.values())

    def cannot_place(self, gpus: Iterable[int]) -> bool:
        """True only if pods of these GPU requests cannot all be placed as the nodes are
        (nothing preempted): one is larger than any node's room, or together they are
        larger than the room left."""
        sizes = [g for g in gpus if g > 0]
        if not sizes:
            return False
        return max(sizes) > self.most_free() or sum(sizes) > self.free_total()


__all__ = ["PodRoom"]
