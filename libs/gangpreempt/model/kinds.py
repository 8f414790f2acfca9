"""The kinds of objects that travel on the STATE stream, and how each maps into a
``ClusterState`` table (pure: encoding is msgpack of the model Struct)."""

from __future__ import annotations

from typing import Any

import msgspec

from gangpreempt.model.checks import AdmissionCheck
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import (
    ElasticQuota,
    Namespace,
    Node,
    Pod,
    PodDisruptionBudget,
    PodGroup,
)
from gangpreempt.model.queues import (
    ClusterQueue,
    Cohort,
    KueueConfiguration,
    LocalQueue,
    PriorityClass,
    ResourceFlavor,
    WorkloadPriorityClass,
)
from gangpreempt.model.topology import Topology
from gangpreempt.model.workloads import Workload

# kind -> (model type, ClusterState table)
KINDS: dict[str, tuple[type[Any], str]] = {
    "KueueConfiguration": (KueueConfiguration, "kueue_configurations"),
    "Namespace": (Namespace, "namespaces"),
    "AdmissionCheck": (AdmissionCheck, "admission_checks"),
    "ResourceFlavor": (ResourceFlavor, "flavors"),
    "Topology": (Topology, "topologies"),
    "ClusterQueue": (ClusterQueue, "cluster_queues"),
    "Cohort": (Cohort, "cohorts"),
    "LocalQueue": (LocalQueue, "local_queues"),
    "WorkloadPriorityClass": (WorkloadPriorityClass, "workload_priority_classes"),
    "PriorityClass": (PriorityClass, "priority_classes"),
    "Node": (Node, "nodes"),
    "PodGroup": (PodGroup, "pod_groups"),
    "PodDisruptionBudget": (PodDisruptionBudget, "pdbs"),
    "ElasticQuota": (ElasticQuota, "elastic_quotas"),
    "Pod": (Pod, "pods"),
    # Last: a pending Workload's pods (and the nodes) are known when it arrives.
    "Workload": (Workload, "workloads"),
}
_KIND_OF = {model: kind for kind, (model, _table) in KINDS.items()}
_encoder = msgspec.msgpack.Encoder()
_decoders = {kind: msgspec.msgpack.Decoder(model) for kind, (model, _t) in KINDS.items()}


def key_of(obj: Any) -> str:
    """``namespace/name`` for namespaced objects, ``name`` otherwise."""
    namespace = getattr(obj, "namespace", None)
    return f"{namespace}/{obj.name}" if namespace is not None else str(obj.name)


def kind_of(obj: Any) -> str:
    return _KIND_OF[type(obj)]


def encode_object(obj: Any) -> bytes:
    return _encoder.encode(obj)


def decode_object(kind: str, body: bytes) -> Any:
    decoder = _decoders.get(kind)
    if decoder is None:
        raise msgspec.ValidationError(f"unknown kind {kind!r}")
    return decoder.decode(body)


def put(state: ClusterState, obj: Any) -> None:
    getattr(state, KINDS[kind_of(obj)][1])[key_of(obj)] = obj


def get(state: ClusterState, kind: str, key: str) -> Any:
    return getattr(state, KINDS[kind][1]).get(key)


def remove(state: ClusterState, kind: str, key: str) -> Any:
    return getattr(state, KINDS[kind][1]).pop(key, None)


def counts(state: ClusterState) -> dict[str, int]:
    """How many objects of each kind the state holds."""
    return {kind: len(getattr(state, table)) for kind, (_model, table) in KINDS.items()}


def objects(state: ClusterState) -> list[Any]:
    """Every object of the state, in a stable order (kind, then key)."""
    out: list[Any] = []
    for _kind, (_model, table) in KINDS.items():
        items = getattr(state, table)
        out.extend(items[k] for k in sorted(items))
    return out


__all__ = [
    "KINDS",
    "decode_object",
    "encode_object",
    "get",
    "key_of",
    "kind_of",
    "objects",
    "put",
    "remove",
]
