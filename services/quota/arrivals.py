"""When quota's admission cycle starts after a STATE change (issue 26, point 1).

A pending preemptor's arrival (a Workload, a pod alone or of a gang, becoming pending)
starts a cycle as soon as the arrival's own burst has landed: the cycle waits only for a
short quiet gap (no change for ``QUIET_S``), never for a fixed period, so arrival ->
``PreemptionRequested`` is the time to decide, not the time to wait. What arrives while a
cycle runs is coalesced into the next one. Every other change (a running pod finishing,
a node's labels, usage moving) still gathers for ``cycle_delay`` first, and again while
changes keep coming (a manifest applied, a relist), as before: those make a waiting
preemptor admissible, and a cycle on half of a burst would decide on half of it.

The time quota applied each preemptor's latest arrival is kept until its request goes
out (``PreemptionRequested.seen_at``): STATE publish -> quota sees it -> request, per hop.
"""

from __future__ import annotations

from typing import Any

from gangpreempt.model.pods import Pod, PodGroup
from gangpreempt.model.workloads import Workload

# No change for this long and the arrival's burst (a gang's pods, published together)
# has landed: the cycle starts.
QUIET_S = 0.002
# An arrival's gathering never takes longer than this many cycle delays in all.
ARRIVAL_WAITS = 4
# At most this many arrivals' times are kept (a preemptor that never gets a request is
# forgotten when it leaves; this bounds what a flood of pending pods can leave behind).
MAX_SEEN = 100_000


def arrival_of(kind: str, old: Any, new: Any) -> str | None:
    """The preemptor (as a request names it) that ``new`` makes newly pending, else None:
    a Workload that turns pending (created, or requeued after an eviction), a pod that
    turns pending (its gang's ``PodGroup/...`` when it has one), a new PodGroup."""
    if new is None:
        return None
    if kind == "Workload" and isinstance(new, Workload):
        if new.is_pending and (not isinstance(old, Workload) or not old.is_pending):
            return new.ref
        return None
    if kind == "Pod" and isinstance(new, Pod):
        if new.pending and (not isinstance(old, Pod) or not old.pending):
            return f"PodGroup/{new.group}" if new.group else new.ref
        return None
    if kind == "PodGroup" and isinstance(new, PodGroup) and old is None:
        return new.ref
    return None


__all__ = ["ARRIVAL_WAITS", "MAX_SEEN", "QUIET_S", "arrival_of"]
