"""The actuator's last check before touching anything: the live objects must still be
the ones the plan was made for."""

from __future__ import annotations

import msgspec

from gangpreempt.model.workloads import Workload


class LiveObject(msgspec.Struct, frozen=True):
    """What the source of truth says of one object right now."""

    ref: str
    exists: bool
    uid: str = ""
    resource_version: str = ""
    holds_quota: bool = False
    pending: bool = False
    evicting: bool = False


def live_workload(ref: str, wl: Workload | None) -> LiveObject:
    """What a source of truth holding ``wl`` (or not) says of ``ref``."""
    if wl is None:
        return LiveObject(ref=ref, exists=False)
    return LiveObject(
        ref=ref,
        exists=True,
        uid=wl.uid,
        resource_version=wl.resource_version,
        holds_quota=wl.holds_quota,
        pending=wl.is_pending,
        evicting=wl.is_evicting,
    )


class PlannedObject(msgspec.Struct, frozen=True):
    ref: str
    uid: str
    resource_version: str


def stale_reason(
    preemptor: PlannedObject, victims: list[PlannedObject], live: dict[str, LiveObject]
) -> str | None:
    """Why the plan is stale (the first reason found), or None if it may be actuated:
    every victim is the same incarnation (uid and resourceVersion) and still holds
    quota; the preemptor is the same and still pending."""
    p = live.get(preemptor.ref)
    if p is None or not p.exists:
        return f"preemptor {preemptor.ref} no longer exists"
    if preemptor.uid and p.uid != preemptor.uid:
        return f"preemptor {preemptor.ref} was replaced"
    if not p.pending:
        return f"preemptor {preemptor.ref} is no longer pending"
    for v in victims:
        lv = live.get(v.ref)
        if lv is None or not lv.exists:
            return f"victim {v.ref} no longer exists"
        if v.uid and lv.uid != v.uid:
            return f"victim {v.ref} was replaced"
        if v.resource_version and lv.resource_version != v.resource_version:
            return (
                f"victim {v.ref} changed since the plan (resourceVersion "
                f"{v.resource_version} -> {lv.resource_version})"
            )
        if not lv.holds_quota:
            return f"victim {v.ref} no longer holds quota"
    return None


__all__ = ["LiveObject", "PlannedObject", "live_workload", "stale_reason"]
