"""Kueue's topology-aware scheduling objects and fields, read as Kueue's API spells them
(``model.topology``): the ``Topology`` kind, a pod set's ``topologyRequest`` (the
Workload's field, else its pod template's annotations) and an admitted pod set's
``topologyAssignment`` (v1beta2's ``slices`` encoding, or v1beta1's ``domains``)."""

from __future__ import annotations

from gangpreempt.manifests.fields import Fields, describe
from gangpreempt.model.topology import (
    HOSTNAME_LABEL,
    PREFERRED_ANNOTATION,
    REQUIRED_ANNOTATION,
    SLICE_REQUIRED_ANNOTATION,
    SLICE_SIZE_ANNOTATION,
    UNCONSTRAINED_ANNOTATION,
    Topology,
    TopologyAssignment,
    TopologyDomain,
    TopologyRequest,
)

MAX_LEVELS = 16


def topology(name: str, spec: Fields) -> Topology:
    """``spec.levels[].nodeLabel``: 1 to 16 distinct keys, the hostname only last."""
    levels: list[str] = []
    for level in spec.maps("levels", required=True):
        key = level.text("nodeLabel", required=True)
        if key in levels:
            level.fail("nodeLabel", f"duplicate level {key!r}")
        levels.append(key)
    if not 1 <= len(levels) <= MAX_LEVELS:
        spec.fail("levels", f"expected 1 to {MAX_LEVELS} levels, got {len(levels)}")
    if HOSTNAME_LABEL in levels[:-1]:
        spec.fail("levels", f"{HOSTNAME_LABEL} may only be the last level")
    return Topology(name=name, levels=tuple(levels))


def topology_request(pod_set: Fields, annotations: dict[str, str]) -> TopologyRequest | None:
    """The pod set's ``topologyRequest``, else its pod template's annotations (None when
    neither asks for a topology). Kueue's precedence when several are given: required,
    then preferred, then unconstrained."""
    field = pod_set.map("topologyRequest")
    if field is not None:
        required = field.opt_text("required") or ""
        preferred = field.opt_text("preferred") or ""
        unconstrained = field.flag("unconstrained", False)
        slice_level = field.opt_text("podSetSliceRequiredTopology") or ""
        size = field.integer("podSetSliceSize", minimum=1) or 0
        where = field
        size_key = "podSetSliceSize"
    else:
        required = annotations.get(REQUIRED_ANNOTATION, "")
        preferred = annotations.get(PREFERRED_ANNOTATION, "")
        unconstrained = annotations.get(UNCONSTRAINED_ANNOTATION, "").lower() == "true"
        slice_level = annotations.get(SLICE_REQUIRED_ANNOTATION, "")
        text = annotations.get(SLICE_SIZE_ANNOTATION, "")
        where = pod_set
        size_key = f"template.metadata.annotations.{SLICE_SIZE_ANNOTATION}"
        size = 0
        if text:
            if not text.strip().isdigit() or int(text) < 1:
                pod_set.fail(size_key, f"expected an integer >= 1, got {describe(text)}")
            size = int(text)
    if bool(slice_level) != bool(size):
        where.fail(size_key, "a slice size and a slice topology go together")
    if not (required or preferred or unconstrained or slice_level):
        return None
    if required:
        preferred, unconstrained = "", False
    elif preferred:
        unconstrained = False
    return TopologyRequest(
        required=required,
        preferred=preferred,
        unconstrained=unconstrained,
        slice_level=slice_level,
        slice_size=size,
    )


def topology_assignment(psa: Fields, count: int) -> TopologyAssignment | None:
    """``topologyAssignment``: ``levels`` and either ``slices`` (v1beta2) or ``domains``
    (v1beta1). Its pods must add up to the pod set's ``count``."""
    ta = psa.map("topologyAssignment")
    if ta is None:
        return None
    levels = ta.texts("levels", required=True)
    if not levels:
        ta.fail("levels", "expected at least one level")
    domains: list[TopologyDomain] = []
    if ta.has("slices"):
        for s in ta.maps("slices"):
            domains += _slice(s, len(levels))
    else:
        for d in ta.maps("domains", required=True):
            values = d.texts("values", required=True)
            if len(values) != len(levels):
                d.fail("values", f"expected {len(levels)} values (one per level)")
            n = d.integer("count", minimum=1) or 0
            if n < 1:
                d.fail("count", "required field is missing")
            domains.append(TopologyDomain(values, n))
    assignment = TopologyAssignment(tuple(levels), tuple(domains))
    if assignment.pods != count:
        ta.fail(
            "slices" if ta.has("slices") else "domains",
            f"assigns {assignment.pods} pods, the pod set's count is {count}",
        )
    return assignment


def _slice(s: Fields, n_levels: int) -> list[TopologyDomain]:
    n = s.integer("domainCount", minimum=1)
    if n is None:
        s.fail("domainCount", "required field is missing")
    per_level = list(s.maps("valuesPerLevel", required=True))
    if len(per_level) != n_levels:
        s.fail("valuesPerLevel", f"expected {n_levels} entries (one per level)")
    columns = [_values(v, n) for v in per_level]
    counts = s.map("podCounts", required=True)
    assert counts is not None
    every = counts.integer("universal", minimum=1)
    if every is not None:
        pods = [every] * n
    else:
        pods = []
        for i, item, path in counts.items("individual", required=True):
            if isinstance(item, bool) or not isinstance(item, int) or item < 1:
                raise counts.where.error(
                    path, f"expected an integer >= 1, got {describe(item)}", item, i
                )
            pods.append(item)
        if len(pods) != n:
            counts.fail("individual", f"expected {n} counts (domainCount)")
    return [TopologyDomain(tuple(column[i] for column in columns), pods[i]) for i in range(n)]


def _values(v: Fields, n: int) -> list[str]:
    """One level's values for ``n`` domains: ``universal``, or ``individual`` prefix +
    root + suffix."""
    every = v.opt_text("universal")
    if every is not None:
        return [every] * n
    one = v.map("individual", required=True)
    assert one is not None
    prefix = one.opt_text("prefix") or ""
    suffix = one.opt_text("suffix") or ""
    roots = one.texts("roots", required=True)
    if len(roots) != n:
        one.fail("roots", f"expected {n} roots (domainCount)")
    return [f"{prefix}{root}{suffix}" for root in roots]


__all__ = ["topology", "topology_assignment", "topology_request"]
