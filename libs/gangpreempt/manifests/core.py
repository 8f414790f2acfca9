"""Decoders for core Kubernetes objects (``scheduling.k8s.io/v1`` PriorityClass)."""

from __future__ import annotations

from gangpreempt.manifests.fields import Fields
from gangpreempt.model.queues import PriorityClass


def priority_class(name: str, obj: Fields) -> PriorityClass:
    value = obj.integer("value")
    if value is None:
        obj.fail("value", "required field is missing")
    return PriorityClass(
        name=name,
        value=value,
        global_default=obj.flag("globalDefault", False),
        preemption_policy=obj.enum(
            "preemptionPolicy", ("PreemptLowerPriority", "Never"), "PreemptLowerPriority"
        ),
    )


__all__ = ["priority_class"]
