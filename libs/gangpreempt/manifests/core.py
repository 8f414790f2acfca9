"""Decoders for core Kubernetes objects (``scheduling.k8s.io/v1`` PriorityClass)."""

from __future__ import annotations

from collections.abc import Callable

from gangpreempt.errors import ManifestError
from gangpreempt.manifests.fields import Fields
from gangpreempt.model.queues import PriorityClass

TOLERATION_PREFIX = "preemption-toleration.scheduling.x-k8s.io/"
MINIMUM_PREEMPTABLE = TOLERATION_PREFIX + "minimum-preemptable-priority"
TOLERATION_SECONDS = TOLERATION_PREFIX + "toleration-seconds"


def toleration(obj: Fields, warn: Callable[[str], None]) -> tuple[int | None, int | None]:
    """The Preemption Toleration policy of a PriorityClass (or a WorkloadPriorityClass, or
    a ClusterQueue's default, read the same): (minimum preemptable priority, toleration
    seconds). A value that is not an integer makes the policy unreadable,
    which the plugin takes as no toleration at all: so is it here, with a warning naming
    the object and the annotation (one typo on a live cluster stops nothing else)."""
    annotations = obj.map_or_empty("metadata").map_or_empty("annotations")
    try:
        return annotations.integer(MINIMUM_PREEMPTABLE), annotations.integer(
            TOLERATION_SECONDS, bits=64
        )
    except ManifestError as exc:
        warn(f"{exc}: the toleration policy cannot be read; no toleration, as the plugin does")
        return None, None


def priority_class(
    name: str, obj: Fields, warn: Callable[[str], None] | None = None
) -> PriorityClass:
    value = obj.integer("value")
    if value is None:
        obj.fail("value", "required field is missing")
    minimum, seconds = toleration(obj, warn or (lambda _message: None))
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


__all__ = ["MINIMUM_PREEMPTABLE", "TOLERATION_SECONDS", "priority_class", "toleration"]
