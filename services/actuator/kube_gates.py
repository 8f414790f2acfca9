"""gangpreempt's scheduling gate lifted from a pod (``planning.gating``): narrowed to its
planned node (a ``kubernetes.io/hostname`` nodeSelector entry, the one change the API
allows on a gated pod besides removing gates) and ungated in one merge patch carrying
the uid and resourceVersion just read; or released unchanged when nothing placed it in
time. The other gates a pod carries are kept."""

from __future__ import annotations

from gangpreempt.model.checks import GATE
from gangpreempt.planning.gating import HOSTNAME
from services.actuator.kube_pods import PodEvictor
from services.kube.access import PODS
from services.kube.client import JSON, MERGE_PATCH, KubeApi, path_of
from services.kube.recording import Recorder, involved_object
from services.kube.writing import preconditions

UNGATED = "ungated"


def _gates(obj: JSON) -> list[JSON]:
    return [g for g in (obj.get("spec") or {}).get("schedulingGates") or [] if isinstance(g, dict)]


async def lift_gate(
    api: KubeApi,
    pods: PodEvictor,
    recorder: Recorder,
    key: str,
    host: str | None,
    why: str,
) -> str:
    """One attempt: narrow the pod ``key`` to the node whose hostname label is ``host``
    (None: release it unchanged) and remove gangpreempt's gate. ``ungated``, or why
    nothing was written."""
    obj = await pods.get_pod(key)
    if obj is None:
        return "the pod is gone"
    gates = _gates(obj)
    if not any(g.get("name") == GATE for g in gates):
        return "not gated by gangpreempt"
    spec: JSON = {"schedulingGates": [g for g in gates if g.get("name") != GATE]}
    if host is not None:
        selector = (obj.get("spec") or {}).get("nodeSelector") or {}
        if selector.get(HOSTNAME, host) != host:
            return f"its nodeSelector asks for {selector[HOSTNAME]}, not {host}: left gated"
        spec["nodeSelector"] = {HOSTNAME: host}  # a merge patch adds it to the others
    namespace, _, name = key.partition("/")
    await api.request(
        "PATCH",
        PODS,
        "patch",
        path_of(PODS, "v1", namespace, name),
        body={"metadata": preconditions(obj), "spec": spec},
        content_type=MERGE_PATCH,
    )
    meta = obj.get("metadata") or {}
    involved = involved_object("v1", "Pod", namespace, name, str(meta.get("uid", "")))
    reason = "PlacementReleased" if host is None else "PlacementNarrowed"
    await recorder.record(involved, reason, why, f"{reason}-{host or ''}")
    return UNGATED


__all__ = ["UNGATED", "lift_gate"]
