"""A Kueue Workload evicted the way Kueue's scheduler evicts one it preempts: the
``Evicted`` condition (reason ``Preempted``) and the ``Preempted`` condition (reason
``InClusterQueue``, ``InCohortReclamation``, ...) on its status, its admission checks
reset to Pending. Kueue's job reconciler then stops the job and releases the quota.
(Kueue's own eviction counters in ``status.requeueState`` are left to Kueue.)"""

from __future__ import annotations

from gangpreempt.model.checks import GANGPREEMPT_MARK
from gangpreempt.model.cluster import ClusterState
from services import simwire
from services.kube.access import KUEUE_WORKLOAD_STATUS, KUEUE_WORKLOADS
from services.kube.client import JSON, MERGE_PATCH, ApiError, KubeApi, path_of
from services.kube.recording import Recorder, involved_object
from services.kube.writing import check_uid, now_rfc3339, preconditions

# Kueue's words for its preemption reasons (in the conditions' message).
KUEUE_REASONS = {
    "InClusterQueue": "prioritization in the ClusterQueue",
    "InCohortReclamation": "reclamation within the cohort",
    "InCohortFairSharing": "Fair Sharing within the cohort",
    "InCohortReclaimWhileBorrowing": "reclamation within the cohort while borrowing",
}


def condition(kind: str, reason: str, message: str, generation: object) -> JSON:
    """A True condition of a Kueue object, as its controllers write one."""
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now_rfc3339(),
        "observedGeneration": generation or 0,
    }


def condition_true(status: JSON, kind: str) -> bool:
    """Whether a Kueue object's status has condition ``kind`` True."""
    return any(
        isinstance(c, dict) and c.get("type") == kind and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def reset_checks(checks: object) -> list[JSON] | None:
    """The admission checks' states reset to Pending, as Kueue does on eviction (None
    when there are none to reset)."""
    if not isinstance(checks, list):
        return None
    out: list[JSON] = []
    changed = False
    for check in checks:
        if not isinstance(check, dict):
            continue
        state = check.get("state")
        if state != "Pending":
            check = {
                **check,
                "state": "Pending",
                "lastTransitionTime": now_rfc3339(),
                "message": f"Reset to Pending after eviction. Previously: {state}",
            }
            changed = True
        out.append(check)
    return out if changed else None


async def get_workload(api: KubeApi, version: str | None, key: str) -> JSON | None:
    """The Kueue Workload ``ns/name``, or None when it does not exist."""
    if version is None:
        return None
    namespace, _, name = key.partition("/")
    try:
        return await api.request(
            "GET", KUEUE_WORKLOADS, "get", path_of(KUEUE_WORKLOADS, version, namespace, name)
        )
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


async def evict_workload(
    api: KubeApi,
    version: str | None,
    state: ClusterState,
    recorder: Recorder,
    request: simwire.EvictRequest,
) -> bool:
    """One attempt (re-read, check, patch): True if it wrote, False if there was nothing
    to do (gone, or evicted already)."""
    key = request.ref.partition("/")[2]
    obj = await get_workload(api, version, key)
    if obj is None or version is None:
        return False  # gone: it holds nothing any more
    check_uid(request.ref, obj, request.uid)
    status = obj.get("status") or {}
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    if condition_true(status, "Evicted"):
        return False  # evicted already (by us before a restart, or by Kueue)
    preemptor = state.workloads.get(request.preemptor.partition("/")[2])
    because = KUEUE_REASONS.get(request.reason, request.reason)
    rule = f" ({request.why})" if request.why else ""
    message = (
        f"Preempted to accommodate a workload (UID: {preemptor.uid if preemptor else ''}) "
        f"due to {because}{rule}; {GANGPREEMPT_MARK}{request.plan_id}"
    )
    meta = obj.get("metadata") or {}
    kept = [c for c in conditions if c.get("type") not in ("Evicted", "Preempted")]
    kept.append(condition("Evicted", "Preempted", message, meta.get("generation")))
    kept.append(condition("Preempted", request.reason, message, meta.get("generation")))
    namespace, _, name = key.partition("/")
    patch: JSON = {"conditions": kept}
    checks = reset_checks(status.get("admissionChecks"))
    if checks is not None:
        patch["admissionChecks"] = checks
    await api.request(
        "PATCH",
        KUEUE_WORKLOAD_STATUS,
        "patch",
        path_of(KUEUE_WORKLOAD_STATUS, version, namespace, name),
        body={"metadata": preconditions(obj), "status": patch},
        content_type=MERGE_PATCH,
    )
    involved = involved_object(
        str(obj.get("apiVersion", "")), "Workload", namespace, name, str(meta.get("uid", ""))
    )
    await recorder.record(involved, "Preempted", message, request.plan_id)
    return True


__all__ = [
    "KUEUE_REASONS",
    "condition",
    "condition_true",
    "evict_workload",
    "get_workload",
    "reset_checks",
]
