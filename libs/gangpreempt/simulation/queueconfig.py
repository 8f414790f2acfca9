"""An operator's Kueue configuration for a replay (``simulate --queues FILE``), read as
``plan`` reads it: ResourceFlavors, Cohorts (their quotas and parents), ClusterQueues
(preemption stanzas, borrowing and lending limits, flavor fungibility,
``fairSharing.weight``), LocalQueues, priority classes, and Kueue's manager
``Configuration`` (fair sharing and its strategies), as a document of its own or in the
``kueue-manager-config`` ConfigMap.

Trace queues map to ClusterQueues: a LocalQueue of the file named as the trace queue (in
any namespace) sends its jobs to that LocalQueue's ClusterQueue; otherwise the
ClusterQueue named as the trace queue takes them. The replay's jobs live in the
namespace ``trace``, one LocalQueue there per trace queue, so each mapped ClusterQueue
must select that namespace. Jobs ask for ``nvidia.com/gpu``, which each mapped
ClusterQueue must cover (in any of its flavors; the flavor is the one Kueue assigns).

What the replay makes itself is left out of the file: Nodes (``--nodes`` and the node
shape), Namespaces, Workloads and Pods (the trace's jobs). The replay's nodes are one
pool: a flavor's ``nodeLabels`` do not split them."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import msgspec

from gangpreempt.errors import InvalidInput
from gangpreempt.manifests import load
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import METADATA_NAME_LABEL
from gangpreempt.model.queues import (
    ClusterQueue,
    Cohort,
    KueueConfiguration,
    LocalQueue,
    Preemption,
    PriorityClass,
    ResourceFlavor,
    WorkloadPriorityClass,
)
from gangpreempt.simulation.world import GPU, NAMESPACE

# Every priority: a minimum runtime no preemptor overrides (``world._minimum_runtime``).
_NO_OVERRIDE = 2**31 - 1


class QueueConfig(msgspec.Struct, frozen=True):
    """The Kueue objects of an operator's file, and how the trace's queues map to them."""

    path: str
    flavors: dict[str, ResourceFlavor]
    cohorts: dict[str, Cohort]
    cluster_queues: dict[str, ClusterQueue]
    kueue_configurations: dict[str, KueueConfiguration]
    workload_priority_classes: dict[str, WorkloadPriorityClass]
    priority_classes: dict[str, PriorityClass]
    queue_map: dict[str, str]  # trace queue -> ClusterQueue
    left_out: dict[str, int]  # kinds the replay makes itself -> how many the file had

    @property
    def fair_sharing(self) -> bool:
        return any(c.fair_sharing for c in self.kueue_configurations.values())


def read_queue_config(path: str, trace_queues: Iterable[str]) -> QueueConfig:
    """The file's Kueue configuration for the trace's queues; ``InvalidInput`` naming the
    file, the object and the field when it cannot serve them."""
    loaded = load([path])
    if loaded.rejected:
        raise InvalidInput(f"--queues {path}: {loaded.rejected[0]}")
    state = loaded.state
    queue_map = _map_queues(path, state, sorted(set(trace_queues)))
    for cq_name in sorted(set(queue_map.values())):
        _check_serves(path, state, state.cluster_queues[cq_name])
    left_out = {
        kind: n
        for kind, n in (
            ("Node", len(state.nodes)),
            ("Namespace", len(state.namespaces)),
            ("Workload", len(state.workloads)),
            ("Pod", len(state.pods)),
        )
        if n
    }
    return QueueConfig(
        path=path,
        flavors=dict(state.flavors),
        cohorts=dict(state.cohorts),
        cluster_queues=dict(state.cluster_queues),
        kueue_configurations=dict(state.kueue_configurations),
        workload_priority_classes=dict(state.workload_priority_classes),
        priority_classes=dict(state.priority_classes),
        queue_map=queue_map,
        left_out=left_out,
    )


def _map_queues(path: str, state: ClusterState, queues: Sequence[str]) -> dict[str, str]:
    by_name: dict[str, set[str]] = {}
    for lq in state.local_queues.values():
        by_name.setdefault(lq.name, set()).add(lq.cluster_queue)
    out: dict[str, str] = {}
    for queue in queues:
        targets = by_name.get(queue)
        if targets is not None and len(targets) > 1:
            raise InvalidInput(
                f"--queues {path}: LocalQueues named {queue!r} (the trace's queue) point to "
                f"different ClusterQueues ({', '.join(sorted(targets))}): keep one"
            )
        target = next(iter(targets)) if targets else queue
        if target not in state.cluster_queues:
            how = (
                f"LocalQueue {queue!r} points to ClusterQueue {target!r}, which the file "
                "does not have"
                if targets
                else f"no LocalQueue or ClusterQueue named {queue!r} (the trace's queue)"
            )
            raise InvalidInput(
                f"--queues {path}: {how}: map each trace queue by a LocalQueue of its name "
                "(spec.clusterQueue), or name a ClusterQueue after it"
            )
        out[queue] = target
    return out


def _check_serves(path: str, state: ClusterState, cq: ClusterQueue) -> None:
    where = f"--queues {path}: ClusterQueue {cq.name}"
    if not any(GPU in g.covered_resources for g in cq.resource_groups):
        raise InvalidInput(
            f"{where}: spec.resourceGroups: covers no {GPU}, which the trace's jobs ask for"
        )
    if cq.admission_checks:
        raise InvalidInput(
            f"{where}: spec.admissionChecks ({', '.join(cq.admission_checks)}): the replay "
            "runs no admission-check controller, so its workloads would never be admitted"
        )
    labels = {METADATA_NAME_LABEL: NAMESPACE}
    if cq.namespace_selector is None or not cq.namespace_selector.matches(labels):
        raise InvalidInput(
            f"{where}: spec.namespaceSelector selects no namespace named {NAMESPACE!r}, where "
            "the replay's jobs run: set it to {} or match the label "
            f"{METADATA_NAME_LABEL}: {NAMESPACE}"
        )


def nominal_gpus(config: QueueConfig) -> dict[str, int]:
    """Each mapped ClusterQueue's nominal GPUs, summed over its flavors."""
    return {
        name: int(
            sum(
                fq.resources[GPU].nominal
                for group in cq.resource_groups
                for fq in group.flavors
                if GPU in fq.resources
            )
        )
        for name, cq in sorted(config.cluster_queues.items())
        if name in set(config.queue_map.values())
    }


def install(
    state: ClusterState,
    config: QueueConfig,
    *,
    preemption: bool = True,
    min_runtime_s: float = 0.0,
) -> None:
    """Put the configuration into a replay's ``state`` (its nodes and namespace already
    there), with one LocalQueue ``trace/<queue>`` per trace queue. ``preemption`` off:
    every ClusterQueue's preemption is ``Never`` (the ``no-preemption`` policy);
    ``min_runtime_s``: every ClusterQueue gives its workloads that minimum runtime against
    every preemptor, as ``--min-runtime`` does with the default queues."""
    state.flavors.update(config.flavors)
    state.cohorts.update(config.cohorts)
    state.kueue_configurations.update(config.kueue_configurations)
    state.workload_priority_classes.update(config.workload_priority_classes)
    state.priority_classes.update(config.priority_classes)
    for name, cq in config.cluster_queues.items():
        if not preemption:
            cq = msgspec.structs.replace(cq, preemption=Preemption(), annotated_preemption=None)
        if min_runtime_s > 0:
            cq = msgspec.structs.replace(
                cq,
                minimum_preemptable_priority=_NO_OVERRIDE,
                toleration_seconds=math.ceil(min_runtime_s),
            )
        state.cluster_queues[name] = cq
    for queue, cq_name in config.queue_map.items():
        lq = LocalQueue(namespace=NAMESPACE, name=queue, cluster_queue=cq_name)
        state.local_queues[lq.key] = lq


__all__ = ["QueueConfig", "install", "nominal_gpus", "read_queue_config"]
