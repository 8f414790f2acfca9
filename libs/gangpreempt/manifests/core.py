"""Decoders for core Kubernetes objects (``scheduling.k8s.io/v1`` PriorityClass)."""

from __future__ import annotations

from gangpreempt.manifests.fields import Fields
from gangpreempt.model.queues import PriorityClass

TOLERATION_PREFIX = "preemption-toleration.scheduling.x-k8s.io/"


def priority_class(name: str, obj: Fields) -> PriorityClass:
    value = obj.integer("value")
    if value is None:
        obj.fail("value", "required field is missing")
    annotations = obj.map_or_empty("metadata").map_or_empty("annotations")
    minimum = annotations.integer(TOLERATION_PREFIX + "minimum-preemptable-priority")
    seconds = annotations.integer(TOLERATION_PREFIX + "toleration-seconds")
    return PriorityClass(
        name=name,
        value=value,
        global_default=obj.flag("globalDefault", False),
        preemption_policy=obj.enum(
            "preemptionPolicy", ("PreemptLowerPriority", "Never"), "PreemptLowerPriority"
        ),
        minimum_preemptable_priority=minimum,
        toleration_seconds=seconds,
    )


__all__ = ["priority_class"]
