"""Decoders for the node-level objects: Node, Pod, PodDisruptionBudget (policy/v1), the
scheduler-plugins PodGroup and ElasticQuota."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from gangpreempt.manifests.fields import Fields
from gangpreempt.manifests.labels import metadata_labels
from gangpreempt.manifests.podspec import constraints, pod_requests, requirements, taints
from gangpreempt.model.checks import PLANNED_NODES_ANNOTATION, WORKLOAD_LABEL
from gangpreempt.model.pods import (
    KUEUE_WORKLOAD_ANNOTATION,
    QUOTA_ALLOW_LENT_LABEL,
    QUOTA_IS_PARENT_LABEL,
    QUOTA_PARENT_LABEL,
    QUOTA_SHARED_WEIGHT_ANNOTATION,
    UNIT_GROUP,
    ElasticQuota,
    LabelSelector,
    Node,
    Pod,
    PodDisruptionBudget,
    PodGroup,
)

# Labels that put a pod in a scheduler-plugins / Koordinator gang, newest first.
POD_GROUP_LABELS = ("scheduling.x-k8s.io/pod-group", "pod-group.scheduling.sigs.k8s.io")
TOPOLOGY_ANNOTATION = "gangpreempt.io/topology-key"
LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


Warn = Callable[[str], None]


def node(name: str, meta: Fields, spec: Fields, status: Fields, warn: Warn | None = None) -> Node:
    """A node; its labels as ``manifests.labels`` keeps them (``warn`` hears of any left
    out)."""
    return Node(
        name=name,
        allocatable=status.amounts("allocatable"),
        labels=metadata_labels(meta, warn),
        taints=taints(spec, "taints"),
        unschedulable=spec.flag("unschedulable", False),
    )


def _disruption(status: Fields) -> str:
    """The reason of a True ``DisruptionTarget`` condition (who is taking the pod)."""
    for cond in status.maps("conditions"):
        if cond.raw("type") == "DisruptionTarget" and cond.raw("status") == "True":
            return cond.text("reason", default="") or "Unknown"
    return ""


def _scheduled_at(status: Fields) -> datetime | None:
    """When the PodScheduled condition turned True (toleration seconds count from it)."""
    for cond in status.maps("conditions"):
        if cond.raw("type") == "PodScheduled" and cond.raw("status") in (None, "True"):
            return cond.time("lastTransitionTime")
    return None


def pod(
    namespace: str,
    name: str,
    meta: Fields,
    spec: Fields,
    status: Fields,
    warn: Warn | None = None,
) -> Pod:
    """A pod; ``group`` is filled from the scheduler-plugins labels here and from
    ``spec.workloadRef`` / ``spec.schedulingGroup`` by the caller (it needs the Workload).
    Its labels as ``manifests.labels`` keeps them (``warn`` hears of any left out)."""
    labels = metadata_labels(meta, warn)
    annotations = meta.text_map("annotations")
    phase = status.text("phase", default="")
    gates = tuple(g.text("name", required=True) for g in spec.maps("schedulingGates"))
    return pod_of(
        namespace,
        name,
        labels,
        annotations,
        phase,
        requests=pod_requests(spec),
        uid=meta.text("uid", default=""),
        resource_version=str(meta.raw("resourceVersion") or ""),
        node_name=spec.text("nodeName", default=""),
        nominated_node=status.text("nominatedNodeName", default=""),
        priority=spec.integer("priority"),
        priority_class_name=spec.text("priorityClassName", default=""),
        preemption_policy=spec.opt_text("preemptionPolicy"),
        scheduling=constraints(spec),
        start_time=status.time("startTime"),
        scheduled_at=_scheduled_at(status),
        terminating=meta.time("deletionTimestamp") is not None,
        disruption=_disruption(status),
        gates=gates,
        created=meta.time("creationTimestamp") if gates else None,
    )


def pod_of(
    namespace: str,
    name: str,
    labels: dict[str, str],
    annotations: dict[str, str],
    phase: str,
    **fields: Any,
) -> Pod:
    """A pod from the fields read of it (by ``pod`` or ``fastpod``): its gang from the
    scheduler-plugins labels, its Kueue Workload from the annotation, finished from the
    phase."""
    group = ""
    for label in POD_GROUP_LABELS:
        if labels.get(label):
            group = f"{namespace}/{labels[label]}"
            break
    kueue = annotations.get(KUEUE_WORKLOAD_ANNOTATION) or labels.get(WORKLOAD_LABEL)
    planned = annotations.get(PLANNED_NODES_ANNOTATION, "")
    return Pod(
        namespace=namespace,
        name=name,
        labels=labels,
        finished=phase in ("Succeeded", "Failed"),
        group=group,
        kueue_workload=f"{namespace}/{kueue}" if kueue else "",
        planned_nodes=tuple(n for n in planned.split(",") if n),
        **fields,
    )


def label_selector(f: Fields | None) -> LabelSelector:
    if f is None:
        return LabelSelector()
    return LabelSelector(
        match_labels=f.text_map("matchLabels"),
        match_expressions=requirements(f, LABEL_OPERATORS),
    )


def pod_disruption_budget(
    namespace: str, name: str, spec: Fields, status: Fields
) -> PodDisruptionBudget:
    disrupted = status.map("disruptedPods")
    return PodDisruptionBudget(
        namespace=namespace,
        name=name,
        selector=label_selector(spec.map("selector")),
        disruptions_allowed=status.integer("disruptionsAllowed", minimum=0) or 0,
        disrupted_pods=frozenset(str(k) for k in disrupted.data) if disrupted else frozenset(),
    )


def plugins_pod_group(namespace: str, name: str, meta: Fields, spec: Fields) -> PodGroup:
    """scheduler-plugins PodGroup: a gang of ``minMember`` pods, preempted as a whole
    (what its users run it for: no partial gang eviction)."""
    min_member = spec.integer("minMember", minimum=1, what="an integer >= 1")
    annotations = meta.text_map("annotations")
    return PodGroup(
        namespace=namespace,
        name=name,
        min_count=min_member if min_member is not None else 1,
        preemption_mode=UNIT_GROUP,
        topology_key=annotations.get(TOPOLOGY_ANNOTATION, ""),
        source="scheduler-plugins PodGroup",
    )


def elastic_quota(namespace: str, name: str, meta: Fields, spec: Fields) -> ElasticQuota:
    quota_min = spec.amounts("min")
    quota_max = spec.amounts("max")
    for res, amount in quota_min.items():
        if res in quota_max and amount > quota_max[res]:
            spec.fail("min", f"min of {res} ({amount}) is above its max ({quota_max[res]})")
    labels = meta.text_map("labels")
    annotations = meta.map_or_empty("annotations")
    weight: dict[str, int] = {}
    raw = annotations.raw(QUOTA_SHARED_WEIGHT_ANNOTATION)
    if raw is not None:
        try:
            parsed = json.loads(raw) if isinstance(raw, str) else None
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            annotations.fail(
                QUOTA_SHARED_WEIGHT_ANNOTATION,
                f'expected a JSON resource list such as \'{{"cpu": "10"}}\', got {raw!r}',
            )
        located = {QUOTA_SHARED_WEIGHT_ANNOTATION: parsed}
        weight = Fields(annotations.where, located, annotations.path).amounts(
            QUOTA_SHARED_WEIGHT_ANNOTATION
        )
    parent = labels.get(QUOTA_PARENT_LABEL, "")
    if parent == name:
        meta.fail("labels", f"{QUOTA_PARENT_LABEL} names the quota itself")
    return ElasticQuota(
        namespace=namespace,
        name=name,
        min=quota_min,
        max=quota_max,
        parent=parent,
        is_parent=labels.get(QUOTA_IS_PARENT_LABEL) == "true",
        shared_weight=weight,
        allow_lent=labels.get(QUOTA_ALLOW_LENT_LABEL) != "false",
    )


__all__ = [
    "POD_GROUP_LABELS",
    "TOPOLOGY_ANNOTATION",
    "elastic_quota",
    "label_selector",
    "node",
    "plugins_pod_group",
    "pod",
    "pod_disruption_budget",
    "pod_of",
]


# -- scheduling.k8s.io Workload / PodGroup (KEP-4671, KEP-5832, KEP-5710) ---------------

DISRUPTION_ALIASES = {"Single": "Pod", "All": "PodGroup", "single": "Pod", "all": "PodGroup"}


def _disruption_mode(f: Fields, default: str) -> str:
    """``disruptionMode`` as a string (1.36: Pod / PodGroup) or a union (1.37: ``{single:
    {}}`` / ``{all: {}}``); ``preemptionMode`` (KEP-5710's first spelling) is read too."""
    raw = f.raw("disruptionMode")
    if isinstance(raw, dict):
        sub = f.map_or_empty("disruptionMode")
        if sub.has("all"):
            return "PodGroup"
        if sub.has("single"):
            return "Pod"
        sub.fail("all", "expected one of single, all")
    if raw is not None:
        return f.enum("disruptionMode", ("Pod", "PodGroup"), default, DISRUPTION_ALIASES)
    return f.enum("preemptionMode", ("Pod", "PodGroup"), default, DISRUPTION_ALIASES)


def _min_count(f: Fields) -> int:
    """``schedulingPolicy`` (1.36+) or ``policy`` (1.35): ``gang.minCount``, else 1."""
    policy = f.map("schedulingPolicy") or f.map("policy")
    if policy is None:
        return 1
    gang = policy.map("gang")
    if gang is None:
        return 1
    count = gang.integer("minCount", minimum=1, what="an integer >= 1")
    return count if count is not None else 1


def _topology_key(f: Fields) -> str:
    sc = f.map("schedulingConstraints")
    if sc is None:
        return ""
    for t in sc.maps("topology"):
        return t.text("key", default="")
    return ""


def group_template(
    namespace: str, name: str, f: Fields, workload: Fields, wl_name: str
) -> PodGroup:
    """A pod group as declared inside a Workload (``podGroups`` or ``podGroupTemplates``)
    or by a scheduling.k8s.io PodGroup; ``workload`` is the Workload's spec (its
    priority classes apply when the group names none)."""
    return PodGroup(
        namespace=namespace,
        name=name,
        min_count=_min_count(f),
        preemption_mode=_disruption_mode(f, "Pod"),
        priority_class_name=f.text("priorityClassName", default="")
        or workload.text("priorityClassName", default=""),
        preemption_priority_class_name=f.text("preemptionPriorityClassName", default="")
        or workload.text("preemptionPriorityClassName", default=""),
        topology_key=_topology_key(f),
        source="PodGroup",
        workload=f"{namespace}/{wl_name}" if wl_name else "",
        preemption_policy=(
            f.enum("preemptionPolicy", ("PreemptLowerPriority", "Never"), "")
            or workload.opt_text("preemptionPolicy")
            or None
        ),
        priority=_group_priority(f),
    )


def _group_priority(f: Fields) -> int | None:
    """A PodGroup's ``spec.priority`` (an int32, as a pod's), if set."""
    value = f.integer("priority", minimum=-(2**31), what="an int32")
    if value is not None and value >= 2**31:
        f.fail("priority", f"expected an int32, got {value}")
    return value


def workload_groups(namespace: str, spec: Fields) -> list[tuple[str, Fields]]:
    """The named pod groups a scheduling.k8s.io Workload declares (either spelling)."""
    key = "podGroupTemplates" if spec.has("podGroupTemplates") else "podGroups"
    return [(g.text("name", required=True), g) for g in spec.maps(key, required=True)]
