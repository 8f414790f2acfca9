"""Pod specs: effective requests as Kubernetes computes them, and scheduling constraints."""

from __future__ import annotations

from gangpreempt.manifests.fields import Fields
from gangpreempt.model.quantity import add_into, beyond
from gangpreempt.model.scheduling import (
    NodeSelectorRequirement,
    NodeSelectorTerm,
    SchedulingConstraints,
    Taint,
    Toleration,
)

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def _max(into: dict[str, int], more: dict[str, int]) -> None:
    for res, v in more.items():
        if v > into.get(res, 0):
            into[res] = v


def container_requests(c: Fields) -> dict[str, int]:
    """A container's requests, limits standing in for missing requests (as Kubernetes
    defaults them)."""
    res = c.map_or_empty("resources")
    requests = res.amounts("requests")
    for name, amount in res.amounts("limits").items():
        requests.setdefault(name, amount)
    return requests


def pod_requests(spec: Fields) -> dict[str, int]:
    """Per-pod effective requests: max(largest init container plus the sidecars started
    before it, sum of containers plus sidecars) plus overhead."""
    containers: dict[str, int] = {}
    for c in spec.maps("containers"):
        add_into(containers, container_requests(c))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for c in spec.maps("initContainers"):
        req = container_requests(c)
        if c.raw("restartPolicy") == "Always":
            add_into(sidecars, req)
            _max(init_peak, sidecars)
        else:
            step = dict(sidecars)
            add_into(step, req)
            _max(init_peak, step)
    total = dict(containers)
    add_into(total, sidecars)
    _max(total, init_peak)
    pod_level = spec.map_or_empty("resources").amounts("requests")
    for name in ("cpu", "memory"):
        if name in pod_level:
            total[name] = pod_level[name]
    add_into(total, spec.amounts("overhead"))
    for res, v in total.items():
        # Each amount is bounded; their sum is the pod's request, and bounded too.
        problem = beyond(res, v)
        if problem is not None:
            spec.fail(
                "containers", f"the pod's {res} request, summed over its containers, is {problem}"
            )
    return {res: v for res, v in total.items()}


def taints(f: Fields, key: str) -> tuple[Taint, ...]:
    out = []
    for t in f.maps(key):
        out.append(
            Taint(
                key=t.text("key", required=True),
                value=t.text("value", default=""),
                effect=t.enum("effect", TAINT_EFFECTS, default="NoSchedule"),
            )
        )
    return tuple(out)


def tolerations(f: Fields, key: str = "tolerations") -> tuple[Toleration, ...]:
    out = []
    for t in f.maps(key):
        out.append(
            Toleration(
                key=t.text("key", default=""),
                operator=t.enum("operator", ("Equal", "Exists"), default="Equal"),
                value=t.text("value", default=""),
                effect=t.text("effect", default=""),
                toleration_seconds=t.integer("tolerationSeconds", bits=64),
            )
        )
    return tuple(out)


def _terms(affinity: Fields | None) -> tuple[NodeSelectorTerm, ...] | None:
    if affinity is None:
        return None
    node_affinity = affinity.map("nodeAffinity")
    if node_affinity is None:
        return None
    required = node_affinity.map("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return None
    return tuple(
        NodeSelectorTerm(requirements(term, SELECTOR_OPERATORS))
        for term in required.maps("nodeSelectorTerms")
    )


def requirements(f: Fields, operators: tuple[str, ...]) -> tuple[NodeSelectorRequirement, ...]:
    """``matchExpressions`` of a node selector term or a label selector."""
    return tuple(
        NodeSelectorRequirement(
            key=e.text("key", required=True),
            operator=e.enum("operator", operators, default="In"),
            values=e.texts("values"),
        )
        for e in f.maps("matchExpressions")
    )


def constraints(spec: Fields) -> SchedulingConstraints:
    return SchedulingConstraints(
        node_selector=spec.text_map("nodeSelector"),
        tolerations=tolerations(spec),
        affinity_terms=_terms(spec.map("affinity")),
    )


__all__ = [
    "constraints",
    "container_requests",
    "pod_requests",
    "requirements",
    "taints",
    "tolerations",
]
