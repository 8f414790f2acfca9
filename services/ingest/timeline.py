"""A scenario's timeline (``timeline.yaml`` beside its manifests): changes the sim cluster
makes at given times, or when a given event is seen on the bus.

.. code-block:: yaml

    - at: 1.5                       # seconds after ingest starts
      apply: gang-2.yaml            # a manifests file of the scenario folder
    - when: {event: PlanProposed, preemptor: Workload/team-b/gang-2}
      finish: Workload/team-a/low-2 # the workload completes on its own
    - at: 4
      delete: Workload/team-a/low-3
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import yaml

from gangpreempt.errors import ManifestError


class Trigger(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    event: str
    preemptor: str | None = None


class Step(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    at: float | None = None
    when: Trigger | None = None
    apply: str | None = None
    delete: str | None = None
    finish: str | None = None


TIMELINE = "timeline.yaml"


def load_timeline(folder: str) -> list[Step]:
    path = Path(folder) / TIMELINE
    if not Path(folder).is_dir() or not path.exists():
        return []
    try:
        data = yaml.safe_load(path.read_text()) or []
        steps = msgspec.convert(data, list[Step])
    except (yaml.YAMLError, msgspec.ValidationError) as exc:
        raise ManifestError(str(path), f"invalid timeline: {exc}") from exc
    for i, step in enumerate(steps):
        if (step.at is None) == (step.when is None):
            raise ManifestError(
                str(path), "each step needs exactly one of at / when", document=1, field=f"[{i}]"
            )
        if sum(x is not None for x in (step.apply, step.delete, step.finish)) != 1:
            raise ManifestError(
                str(path),
                "each step needs exactly one of apply / delete / finish",
                document=1,
                field=f"[{i}]",
            )
    return steps


def matches(step: Step, event_type: str, preemptor: str | None) -> bool:
    if step.when is None or step.when.event != event_type:
        return False
    return step.when.preemptor is None or step.when.preemptor == preemptor


__all__ = ["TIMELINE", "Step", "Trigger", "load_timeline", "matches"]
