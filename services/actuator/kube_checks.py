"""gangpreempt's admission check written on a Kueue Workload (``docs/kubernetes.md``, the
hand-off), and its AdmissionChecks marked ``Active``.

A decision is written only while it still applies: the same Workload (uid), quota still
reserved (``QuotaReserved`` true), neither evicted nor finished (as Kueue's own check
controllers, its provisioning one for example, leave such a Workload alone), the check
on it and not ``Ready`` already (a Ready check is Kueue's to reset, on eviction). An
evicted Workload keeps its reservation for a moment after Kueue reset its checks to
Pending; a Retry written then would outlive the reservation, and Kueue never reserves
a Workload whose check says Retry again: it would wait forever. The entry is replaced
in ``status.admissionChecks`` by a merge patch carrying the uid and the resourceVersion
just read, so a write that raced another is read again and redone
(``services.kube.writing``). ``Ready`` adds a ``podSetUpdates`` label
``gangpreempt.io/workload`` on each pod set, and the annotation
``gangpreempt.io/planned-nodes`` (the pod set's planned nodes): Kueue puts them on the
pods it creates, by which they are gated at creation and later narrowed to their
planned nodes (``planning.gating``)."""

from __future__ import annotations

import datetime
from typing import Any

from gangpreempt import events
from gangpreempt.errors import Transient
from gangpreempt.model.checks import (
    ACTIVE,
    PENDING,
    PLANNED_NODES_ANNOTATION,
    READY,
    RETRY,
    WORKLOAD_LABEL,
)
from services.actuator.kube_kueue import condition, condition_true, get_workload, reset_checks
from services.kube.access import ADMISSION_CHECK_STATUS, ADMISSION_CHECKS, KUEUE_WORKLOAD_STATUS
from services.kube.client import JSON, MERGE_PATCH, ApiError, KubeApi, path_of
from services.kube.recording import Recorder, involved_object
from services.kube.writing import check_uid, now_rfc3339, preconditions

MESSAGE_MAX = 32768  # Kueue's limit on a check's message

WRITTEN = "written"
UNCHANGED = "unchanged"
EVICTED = "evicted"  # a Retry's reservation released without waiting out its time


def _entry(ev: events.CheckDecided, old: JSON, pod_sets: list[str], name: str) -> JSON:
    entry: JSON = {**old, "state": ev.state, "message": ev.message[:MESSAGE_MAX]}
    if old.get("state") != ev.state or not old.get("lastTransitionTime"):
        entry["lastTransitionTime"] = now_rfc3339()
    entry.pop("requeueAfterSeconds", None)
    entry.pop("podSetUpdates", None)
    if ev.state == RETRY and ev.requeue_after_s:
        entry["requeueAfterSeconds"] = ev.requeue_after_s
    if ev.state == READY:
        updates: list[JSON] = []
        for ps in pod_sets:
            update: JSON = {"name": ps, "labels": {WORKLOAD_LABEL: name}}
            nodes = ev.pod_set_nodes.get(ps)
            if nodes:
                update["annotations"] = {PLANNED_NODES_ANNOTATION: ",".join(nodes)}
            updates.append(update)
        entry["podSetUpdates"] = updates
    return entry


def sent_back(
    ev: events.CheckDecided, status: JSON, checks: list[JSON], at: int, generation: object
) -> JSON:
    """The status patch that evicts a Workload whose check says ``Retry`` once Kueue has
    set when to requeue it: what Kueue does when that time has passed, done now.

    Kueue v0.17 keeps a ``Retry`` workload's reservation until its
    ``requeueAfterSeconds`` have passed, then evicts it and requeues it at once; without
    a time it evicts and requeues it at once. So a ``Retry`` either holds the room it was
    sent back from, or has Kueue reserve the workload again at once (seen in
    ``tests/peers``: two or more such workloads taking turns starved a gang). Kueue
    delays the requeue while ``requeueState.requeueAt`` (set by Kueue from the check,
    owned by Kueue) is ahead when the Workload goes back to pending; so, once it is set,
    the actuator evicts as Kueue would: ``Evicted`` (reason ``AdmissionCheck``) and the
    check reset to ``Pending``, its ``retryCount`` counted. Kueue's job reconciler then
    stops the job and releases the reservation; Kueue requeues it at ``requeueAt``."""
    old = checks[at]
    checks[:] = reset_checks(checks) or checks  # every check, as Kueue's eviction resets them
    checks[at] = {
        **checks[at],
        "state": PENDING,
        "message": f"Reset to Pending after eviction. Previously: Retry. {ev.message}"[
            :MESSAGE_MAX
        ],
        "lastTransitionTime": now_rfc3339(),
        "retryCount": int(old.get("retryCount") or 0) + 1,
    }
    conditions = [
        c
        for c in status.get("conditions") or []
        if isinstance(c, dict) and c.get("type") != "Evicted"
    ]
    message = f"At least one admission check is false: {ev.message}"[:MESSAGE_MAX]
    conditions.append(condition("Evicted", "AdmissionCheck", message, generation))
    return {"conditions": conditions, "admissionChecks": checks}


def requeue_at(status: JSON) -> datetime.datetime | None:
    """Kueue's ``requeueState.requeueAt``, when it is set."""
    state = status.get("requeueState")
    text = state.get("requeueAt") if isinstance(state, dict) else None
    if not isinstance(text, str):
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


async def set_check(
    api: KubeApi, version: str | None, recorder: Recorder, ev: events.CheckDecided
) -> str:
    """One attempt (re-read, check, patch): ``written``, ``unchanged``, or why the
    decision no longer applies (``Stale`` when the Workload was replaced)."""
    key = ev.workload.partition("/")[2]
    obj = await get_workload(api, version, key)
    if obj is None or version is None:
        return "the workload is gone"
    check_uid(ev.workload, obj, ev.uid)
    status: dict[str, Any] = obj.get("status") or {}
    if not status.get("admission") or not condition_true(status, "QuotaReserved"):
        return "no quota is reserved for it any more"
    for kind in ("Evicted", "Finished"):
        if condition_true(status, kind):
            return f"it is {kind.lower()}: Kueue resets its checks"
    checks = [c for c in status.get("admissionChecks") or [] if isinstance(c, dict)]
    at = next((i for i, c in enumerate(checks) if c.get("name") == ev.check), None)
    if at is None:  # Kueue adds the queue's checks right after it reserves
        raise Transient(f"{ev.workload}: admission check {ev.check!r} not on it yet")
    old = checks[at]
    if old.get("state") == READY:
        return "the check is Ready already"
    spec = obj.get("spec") or {}
    meta = obj.get("metadata") or {}
    pod_sets = [str(ps.get("name", "main")) for ps in spec.get("podSets") or []]
    namespace, _, name = key.partition("/")
    written = old.get("state") == ev.state and old.get("message") == ev.message[:MESSAGE_MAX]
    if written and (ev.state != RETRY or not ev.requeue_after_s):
        return UNCHANGED  # (a Retry without a time: Kueue evicts and requeues it at once)
    patch: JSON
    if written:  # a Retry with a time: evict once Kueue has set when to requeue it
        when = requeue_at(status)
        if when is None:
            raise Transient(f"{ev.workload}: sent back; Kueue has not set its requeue time")
        if when <= datetime.datetime.now(datetime.UTC):
            return UNCHANGED  # Kueue evicts it itself now
        patch = sent_back(ev, status, checks, at, meta.get("generation"))
    else:
        checks[at] = _entry(ev, old, pod_sets, name)
        patch = {"admissionChecks": checks}
    await api.request(
        "PATCH",
        KUEUE_WORKLOAD_STATUS,
        "patch",
        path_of(KUEUE_WORKLOAD_STATUS, version, namespace, name),
        body={"metadata": preconditions(obj), "status": patch},
        content_type=MERGE_PATCH,
    )
    if written:
        return EVICTED
    involved = involved_object(
        str(obj.get("apiVersion", "")), "Workload", namespace, name, str(meta.get("uid", ""))
    )
    reason = "PlacementConfirmed" if ev.state == READY else "PlacementRetry"
    await recorder.record(involved, reason, ev.message, ev.id)
    if ev.state == RETRY and ev.requeue_after_s:
        # evicted at the next attempt, once Kueue has set the requeue time
        raise Transient(f"{ev.workload}: sent back; waiting for Kueue's requeue time")
    return WRITTEN


async def mark_active(api: KubeApi, version: str | None, names: list[str]) -> list[str]:
    """Set the ``Active`` condition on gangpreempt's AdmissionChecks ``names`` that lack
    it; the names written."""
    written: list[str] = []
    if version is None:
        return written
    for name in names:
        try:
            obj = await api.request(
                "GET", ADMISSION_CHECKS, "get", path_of(ADMISSION_CHECKS, version, None, name)
            )
        except ApiError as exc:
            if exc.status == 404:
                continue
            raise
        conditions = [
            c for c in (obj.get("status") or {}).get("conditions") or [] if isinstance(c, dict)
        ]
        if any(c.get("type") == ACTIVE and c.get("status") == "True" for c in conditions):
            continue
        meta = obj.get("metadata") or {}
        kept = [c for c in conditions if c.get("type") != ACTIVE]
        message = "gangpreempt's actuator decides this check"
        kept.append(condition(ACTIVE, "Active", message, meta.get("generation")))
        await api.request(
            "PATCH",
            ADMISSION_CHECK_STATUS,
            "patch",
            path_of(ADMISSION_CHECK_STATUS, version, None, name),
            body={"metadata": preconditions(obj), "status": {"conditions": kept}},
            content_type=MERGE_PATCH,
        )
        written.append(name)
    return written


__all__ = [
    "EVICTED",
    "UNCHANGED",
    "WORKLOAD_LABEL",
    "WRITTEN",
    "mark_active",
    "requeue_at",
    "sent_back",
    "set_check",
]
