"""Decoders for Kueue's objects in both API shapes (``v1beta1`` and ``v1beta2``)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from gangpreempt.manifests import topology
from gangpreempt.manifests.core import toleration
from gangpreempt.manifests.fields import Fields, describe, join
from gangpreempt.manifests.kueueconfig import fair_weight
from gangpreempt.manifests.nodes import label_selector
from gangpreempt.manifests.podspec import constraints, pod_requests, taints, tolerations
from gangpreempt.model.checks import (
    ACTIVE,
    CHECK_STATES,
    PENDING,
    PLANNED_NODES_ANNOTATION,
    PREEMPTION_ANNOTATION,
    AdmissionCheck,
    CheckState,
)
from gangpreempt.model.quantity import MAX_USAGE
from gangpreempt.model.queues import (
    ANY,
    BEST_EFFORT_FIFO,
    BORROWING_OVER_PREEMPTION,
    LOWER_OR_NEWER_EQUAL_PRIORITY,
    LOWER_PRIORITY,
    MAY_STOP_SEARCH,
    NEVER,
    PREEMPTION_OVER_BORROWING,
    STRICT_FIFO,
    TRY_NEXT_FLAVOR,
    ClusterQueue,
    Cohort,
    FlavorFungibility,
    FlavorQuotas,
    LocalQueue,
    Preemption,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    WorkloadPriorityClass,
)
from gangpreempt.model.workloads import (
    CHECKPOINT_INTERVAL_ANNOTATION,
    LAST_CHECKPOINT_ANNOTATION,
    PRIORITY_BOOST_ANNOTATION,
    PRIORITY_CLASS,
    WORKLOAD_PRIORITY_CLASS,
    Admission,
    Condition,
    PodSet,
    PodSetAssignment,
    PriorityClassRef,
    Workload,
)

STOP_POLICIES = ("None", "Hold", "HoldAndDrain")
_PRIORITY_SOURCES = {
    "kueue.x-k8s.io/workloadpriorityclass": WORKLOAD_PRIORITY_CLASS,
    "scheduling.k8s.io/priorityclass": PRIORITY_CLASS,
}
_PRIORITY_REF_KINDS = {
    ("kueue.x-k8s.io", "WorkloadPriorityClass"): WORKLOAD_PRIORITY_CLASS,
    ("scheduling.k8s.io", "PriorityClass"): PRIORITY_CLASS,
}


def resource_flavor(name: str, spec: Fields) -> ResourceFlavor:
    return ResourceFlavor(
        name=name,
        node_labels=spec.text_map("nodeLabels"),
        node_taints=taints(spec, "nodeTaints"),
        tolerations=tolerations(spec),
        topology_name=spec.opt_text("topologyName") or "",
    )


def resource_groups(spec: Fields) -> tuple[ResourceGroup, ...]:
    groups = []
    for g in spec.maps("resourceGroups"):
        covered = g.texts("coveredResources", required=True)
        flavors = []
        for f in g.maps("flavors", required=True):
            resources: dict[str, ResourceQuota] = {}
            for r in f.maps("resources", required=True):
                res = r.text("name", required=True)
                if res not in covered:
                    r.fail("name", f"resource {res} is not in the group's coveredResources")
                nominal = r.amount("nominalQuota", res)
                resources[res] = ResourceQuota(
                    nominal=nominal or 0,
                    borrowing_limit=r.amount("borrowingLimit", res),
                    lending_limit=r.amount("lendingLimit", res),
                )
            flavors.append(FlavorQuotas(name=f.text("name", required=True), resources=resources))
        groups.append(ResourceGroup(covered_resources=covered, flavors=tuple(flavors)))
    return tuple(groups)


def _preemption(spec: Fields) -> Preemption:
    p = spec.map("preemption")
    return Preemption() if p is None else _stanza(p)


def _stanza(p: Fields) -> Preemption:
    """Kueue's ``preemption`` stanza."""
    reclaim = p.enum("reclaimWithinCohort", (NEVER, LOWER_PRIORITY, ANY), default="")
    if not reclaim:
        # KEP-83's first API spelled this withinCohort with Reclaim* values.
        reclaim = p.enum(
            "withinCohort",
            (NEVER,),
            default=NEVER,
            aliases={"ReclaimFromLowerPriority": LOWER_PRIORITY, "ReclaimFromAny": ANY},
        )
    borrow = p.map("borrowWithinCohort")
    return Preemption(
        within_cluster_queue=p.enum(
            "withinClusterQueue",
            (NEVER, LOWER_PRIORITY, LOWER_OR_NEWER_EQUAL_PRIORITY),
            default=NEVER,
            aliases={"LowerPriorityOnly": LOWER_PRIORITY},
        ),
        reclaim_within_cohort=reclaim,
        borrow_within_cohort=(
            borrow.enum("policy", (NEVER, LOWER_PRIORITY), default=NEVER) if borrow else NEVER
        ),
        max_priority_threshold=borrow.integer("maxPriorityThreshold") if borrow else None,
    )


def _fungibility(spec: Fields) -> FlavorFungibility:
    f = spec.map("flavorFungibility")
    if f is None:
        return FlavorFungibility()
    choices = (MAY_STOP_SEARCH, TRY_NEXT_FLAVOR)
    return FlavorFungibility(
        when_can_borrow=f.enum(
            "whenCanBorrow", choices, MAY_STOP_SEARCH, aliases={"Borrow": MAY_STOP_SEARCH}
        ),
        when_can_preempt=f.enum(
            "whenCanPreempt", choices, TRY_NEXT_FLAVOR, aliases={"Preempt": MAY_STOP_SEARCH}
        ),
        preference=f.enum(
            "preference", (BORROWING_OVER_PREEMPTION, PREEMPTION_OVER_BORROWING), default=""
        )
        or None,
    )


def _annotated_preemption(meta: Fields | None) -> Preemption | None:
    """The policy of the ``gangpreempt.io/preemption`` annotation: Kueue's preemption
    stanza in JSON (``{"withinClusterQueue": "LowerPriority", ...}``)."""
    notes = meta.map("annotations") if meta is not None else None
    text = notes.raw(PREEMPTION_ANNOTATION) if notes is not None else None
    if text is None:
        return None
    assert notes is not None
    if not isinstance(text, str):
        notes.fail(PREEMPTION_ANNOTATION, "expected Kueue's preemption stanza as JSON text")
    try:
        stanza = json.loads(text)
    except ValueError as exc:
        notes.fail(PREEMPTION_ANNOTATION, f"not JSON: {exc}")
    if not isinstance(stanza, dict):
        notes.fail(PREEMPTION_ANNOTATION, "expected a JSON object (Kueue's preemption stanza)")
    return _stanza(Fields(notes.where, stanza, join(notes.path, PREEMPTION_ANNOTATION)))


def _check_names(spec: Fields) -> tuple[str, ...]:
    """The AdmissionChecks a ClusterQueue lists: ``admissionChecksStrategy`` (both
    versions) or v1beta1's plain ``admissionChecks``."""
    names: list[str] = []
    strategy = spec.map("admissionChecksStrategy")
    if strategy is not None:
        names += [rule.text("name", required=True) for rule in strategy.maps("admissionChecks")]
    for i, item, _path in spec.items("admissionChecks"):
        if not isinstance(item, str) or not item:
            spec.fail("admissionChecks", f"item {i}: expected an AdmissionCheck name")
        names.append(item)
    return tuple(dict.fromkeys(names))


def admission_check(name: str, spec: Fields, status: Fields) -> AdmissionCheck:
    active = any(
        c.text("type", default="") == ACTIVE and c.text("status", default="") == "True"
        for c in status.maps("conditions")
    )
    return AdmissionCheck(
        name=name, controller_name=spec.text("controllerName", required=True), active=active
    )


def _planned(check: Fields) -> dict[str, tuple[str, ...]]:
    """Each pod set's planned nodes, from the check's podSetUpdates (gangpreempt's)."""
    out: dict[str, tuple[str, ...]] = {}
    for update in check.maps("podSetUpdates"):
        text = update.text_map("annotations").get(PLANNED_NODES_ANNOTATION, "")
        if text:
            out[update.text("name", required=True)] = tuple(n for n in text.split(",") if n)
    return out


def _check_states(status: Fields) -> tuple[CheckState, ...]:
    return tuple(
        CheckState(
            name=c.text("name", required=True),
            state=c.enum("state", CHECK_STATES, default=PENDING),
            retry_count=c.integer("retryCount", minimum=0) or 0,
            planned=_planned(c),
        )
        for c in status.maps("admissionChecks")
    )


def cluster_queue(
    name: str,
    spec: Fields,
    meta: Fields | None = None,
    tolerating: tuple[int | None, int | None] = (None, None),
) -> ClusterQueue:
    """``tolerating``: the preemption-toleration annotations of the object
    (``core.toleration``), the default minimum runtime of its workloads."""
    cohort = spec.opt_text("cohortName") or spec.opt_text("cohort")
    minimum, seconds = tolerating
    return ClusterQueue(
        name=name,
        cohort=cohort,
        resource_groups=resource_groups(spec),
        queueing_strategy=spec.enum(
            "queueingStrategy", (BEST_EFFORT_FIFO, STRICT_FIFO), BEST_EFFORT_FIFO
        ),
        preemption=_preemption(spec),
        flavor_fungibility=_fungibility(spec),
        stop_policy=spec.enum("stopPolicy", STOP_POLICIES, "None"),
        fair_weight=fair_weight(spec),
        namespace_selector=(
            label_selector(spec.map("namespaceSelector"))
            if spec.raw("namespaceSelector") is not None
            else None
        ),
        admission_checks=_check_names(spec),
        annotated_preemption=_annotated_preemption(meta),
        minimum_preemptable_priority=minimum,
        toleration_seconds=seconds,
    )


def cohort(name: str, spec: Fields) -> Cohort:
    return Cohort(
        name=name,
        parent=spec.opt_text("parentName") or spec.opt_text("parent"),
        resource_groups=resource_groups(spec),
        fair_weight=fair_weight(spec),
    )


def local_queue(namespace: str, name: str, spec: Fields) -> LocalQueue:
    return LocalQueue(
        namespace=namespace,
        name=name,
        cluster_queue=spec.text("clusterQueue", required=True),
        stop_policy=spec.enum("stopPolicy", STOP_POLICIES, "None"),
    )


def workload_priority_class(
    name: str, obj: Fields, warn: Callable[[str], None] | None = None
) -> WorkloadPriorityClass:
    value = obj.integer("value")
    if value is None:
        obj.fail("value", "required field is missing")
    minimum, seconds = toleration(obj, warn or (lambda _message: None))
    return WorkloadPriorityClass(
        name=name, value=value, minimum_preemptable_priority=minimum, toleration_seconds=seconds
    )


def _priority_class_ref(spec: Fields) -> PriorityClassRef | None:
    ref = spec.map("priorityClassRef")
    if ref is not None:
        group = ref.text("group", default="kueue.x-k8s.io")
        kind = ref.text("kind", default="WorkloadPriorityClass")
        resolved = _PRIORITY_REF_KINDS.get((group, kind))
        if resolved is None:
            ref.fail("kind", f"unsupported priority class reference {group}/{kind}")
        return PriorityClassRef(kind=resolved, name=ref.text("name", required=True))
    name = spec.opt_text("priorityClassName")
    if name is None:
        return None
    source = spec.opt_text("priorityClassSource")
    if source is None:
        return PriorityClassRef(kind=WORKLOAD_PRIORITY_CLASS, name=name)
    source_kind = _PRIORITY_SOURCES.get(source)
    if source_kind is None:
        spec.fail(
            "priorityClassSource", f"expected one of {', '.join(_PRIORITY_SOURCES)}, got {source!r}"
        )
    return PriorityClassRef(kind=source_kind, name=name)


def _pod_sets(spec: Fields) -> tuple[PodSet, ...]:
    pod_sets = []
    seen: set[str] = set()
    for ps in spec.maps("podSets", required=True):
        name = ps.text("name", default="main")
        if name in seen:
            ps.fail("name", f"duplicate pod set name {name!r}")
        seen.add(name)
        count = ps.integer("count", minimum=0, what="a positive integer or zero")
        count = 1 if count is None else count
        min_count = ps.integer("minCount", minimum=1, what="a positive integer")
        if min_count is not None and min_count > count:
            ps.fail("minCount", f"must not exceed count ({count}), got {min_count}")
        template = ps.map("template", required=True)
        assert template is not None
        pod_spec = template.map("spec", required=True)
        assert pod_spec is not None
        annotations = template.map_or_empty("metadata").text_map("annotations")
        pod_sets.append(
            PodSet(
                name=name,
                count=count,
                min_count=min_count,
                requests=pod_requests(pod_spec),
                scheduling=constraints(pod_spec),
                topology=topology.topology_request(ps, annotations),
            )
        )
    if not pod_sets:
        spec.fail("podSets", "expected at least one pod set")
    return tuple(pod_sets)


def _admission(status: Fields, pod_sets: tuple[PodSet, ...]) -> Admission | None:
    adm = status.map("admission")
    if adm is None:
        return None
    counts = {ps.name: ps.count for ps in pod_sets}
    assignments = []
    for psa in adm.maps("podSetAssignments"):
        name = psa.text("name", default="main")
        if name not in counts:
            psa.fail("name", f"no pod set named {name!r} in spec.podSets")
        count = psa.integer("count", minimum=0, what="a positive integer or zero")
        count = counts[name] if count is None else count
        assignments.append(
            PodSetAssignment(
                name=name,
                flavors=psa.text_map("flavors"),
                # a sum over the pod set's pods: bounded by what the model encodes
                resource_usage=psa.amounts("resourceUsage", limit=MAX_USAGE),
                count=count,
                topology_assignment=topology.topology_assignment(psa, count),
            )
        )
    return Admission(
        cluster_queue=adm.text("clusterQueue", required=True),
        pod_set_assignments=tuple(assignments),
    )


def _preemption_message(c: Fields) -> str:
    """The message of a condition that says who preempted the workload (Kueue's
    ``Preempted``, and ``Evicted`` for preemption): the only messages kept."""
    kind = c.raw("type")
    if kind == "Preempted" or (kind == "Evicted" and c.raw("reason") == "Preempted"):
        return c.text("message", default="")
    return ""


def _conditions(status: Fields) -> tuple[Condition, ...]:
    return tuple(
        Condition(
            type=c.text("type", required=True),
            status=c.enum("status", ("True", "False", "Unknown"), default="Unknown"),
            reason=c.text("reason", default=""),
            last_transition_time=c.time("lastTransitionTime"),
            message=_preemption_message(c),
        )
        for c in status.maps("conditions")
    )


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
_DECIMAL = re.compile(r"[+-]?[0-9]+")


def parse_priority_boost(text: str) -> int | None:
    """The annotation as Kueue parses it (Go's ``strconv.ParseInt(text, 10, 32)``): an
    optional sign and decimal digits, within 32 bits; None when it does not parse."""
    if not _DECIMAL.fullmatch(text):
        return None
    value = int(text)
    return value if INT32_MIN <= value <= INT32_MAX else None


def _priority_boost(notes: Fields) -> tuple[int, str | None]:
    """(boost, the annotation's text when it does not parse)."""
    raw = notes.raw(PRIORITY_BOOST_ANNOTATION)
    if raw is None:
        return 0, None
    if not isinstance(raw, str):
        notes.fail(
            PRIORITY_BOOST_ANNOTATION,
            f"expected a string (annotation values are strings, quote it), got {describe(raw)}",
        )
    boost = parse_priority_boost(raw)
    return (0, raw) if boost is None else (boost, None)


def workload(meta: Fields, namespace: str, name: str, spec: Fields, status: Fields) -> Workload:
    pod_sets = _pod_sets(spec)
    notes = meta.map_or_empty("annotations")
    boost, boost_invalid = _priority_boost(notes)
    return Workload(
        namespace=namespace,
        name=name,
        uid=meta.text("uid", default=""),
        resource_version=str(meta.raw("resourceVersion") or ""),
        queue_name=spec.text("queueName", default=""),
        priority=spec.integer("priority"),
        priority_class=_priority_class_ref(spec),
        creation_timestamp=meta.time("creationTimestamp"),
        pod_sets=pod_sets,
        admission=_admission(status, pod_sets),
        conditions=_conditions(status),
        active=spec.flag("active", True),
        reclaimable_pods=_reclaimable(status),
        owner=_owner(meta, namespace),
        last_checkpoint=notes.time(LAST_CHECKPOINT_ANNOTATION),
        checkpoint_interval_s=notes.integer(CHECKPOINT_INTERVAL_ANNOTATION, minimum=1),
        priority_boost=boost,
        priority_boost_invalid=boost_invalid,
        checks=_check_states(status),
    )


def _owner(meta: Fields, namespace: str) -> str:
    """``Kind/namespace/name`` of the controlling owner reference (else the first)."""
    refs = list(meta.maps("ownerReferences"))
    chosen = next((r for r in refs if r.raw("controller") is True), refs[0] if refs else None)
    if chosen is None:
        return ""
    kind, name = chosen.opt_text("kind"), chosen.opt_text("name")
    return f"{kind}/{namespace}/{name}" if kind and name else ""


def _reclaimable(status: Fields) -> dict[str, int]:
    out: dict[str, int] = {}
    for rp in status.maps("reclaimablePods"):
        count = rp.integer("count", minimum=0, what="a positive integer or zero")
        out[rp.text("name", default="main")] = count or 0
    return out


__all__ = [
    "cluster_queue",
    "cohort",
    "local_queue",
    "resource_flavor",
    "workload",
    "workload_priority_class",
]
