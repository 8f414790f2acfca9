"""A cycle's decision on a Workload that awaits gangpreempt's admission check, as the
check's next state (``docs/kubernetes.md``, the hand-off): ``Ready`` when the workload
fits where nothing is held for another plan and its whole gang is placed, ``Retry``
(Kueue releases the reservation and tries again later) when it does not fit and no
preemption is to be made for it. A decision to preempt leaves the check ``Pending``:
the plan goes through the saga, and a later cycle finds the workload fitting."""

from __future__ import annotations

from datetime import datetime

from gangpreempt import events
from gangpreempt.model.checks import READY, RETRY
from gangpreempt.model.workloads import Workload
from gangpreempt.planning.decisions import ADMIT, Decision, plural

BACKOFF_MAX_S = 300


def backoff_s(base: float, retries: int) -> int:
    """Seconds Kueue is asked to wait before trying again: ``base`` doubled per retry
    Kueue already counted, at most ``BACKOFF_MAX_S``."""
    return int(min(BACKOFF_MAX_S, base * 2 ** min(retries, 16)))


def ready_message(d: Decision) -> str:
    if not d.placement:
        return "quota confirmed by gangpreempt; no nodes to place on were read"
    nodes = sorted(set(d.placement.values()))
    shown = ", ".join(nodes[:5]) + (", ..." if len(nodes) > 5 else "")
    return (
        f"placement confirmed by gangpreempt: {plural(len(d.placement), 'pod')} on "
        f"{plural(len(nodes), 'node')} ({shown})"
    )


def check_decided(d: Decision, wl: Workload, now: datetime, base: float) -> events.CheckDecided:
    """The check's state for the cycle's decision ``d`` on ``wl`` (which awaits it)."""
    ready = d.outcome == ADMIT
    mine = wl.check(wl.placement_check)
    retries = mine.retry_count if mine is not None else 0
    state = READY if ready else RETRY
    message = ready_message(d) if ready else f"gangpreempt: {d.message}"
    return events.CheckDecided(
        id=events.stable_id("check", wl.key, wl.uid, wl.resource_version, state, message),
        occurred_at=now,
        workload=wl.ref,
        uid=wl.uid,
        resource_version=wl.resource_version,
        check=wl.placement_check,
        state=state,
        message=message,
        requeue_after_s=0 if ready else backoff_s(base, retries),
        placement=dict(d.placement) if ready else {},
    )


__all__ = ["BACKOFF_MAX_S", "backoff_s", "check_decided", "ready_message"]
