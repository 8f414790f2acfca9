"""Which of the kinds gangpreempt reads the API server serves, and at which version:
for each resource, the group's preferred version if the decoders read it, else the
newest other version they read. A group or kind that is not installed is left out."""

from __future__ import annotations

import re
from typing import Any

from gangpreempt.manifests.loading import reads
from services.kube.access import Resource
from services.kube.client import ApiError, KubeApi

Served = dict[Resource, str]  # resource -> version


def _version_rank(version: str) -> tuple[int, int, int]:
    """Kubernetes version priority: GA > beta > alpha, then the number."""
    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if m is None:
        return (-1, 0, 0)
    stage = {"alpha": 0, "beta": 1, None: 2}[m.group(2)]
    return (stage, int(m.group(1)), int(m.group(3) or 0))


async def _resources(api: KubeApi, path: str) -> set[str]:
    try:
        doc = await api.raw_get(path)
    except ApiError as exc:
        if exc.status == 404:
            return set()
        raise
    return {str(r.get("name", "")) for r in doc.get("resources", []) if isinstance(r, dict)}


async def discover(api: KubeApi, wanted: tuple[Resource, ...]) -> Served:
    groups: dict[str, list[str]] = {"": ["v1"]}
    apis = await api.raw_get("/apis")
    for g in apis.get("groups", []):
        if not isinstance(g, dict):
            continue
        versions = [str(v.get("version", "")) for v in g.get("versions", []) if isinstance(v, dict)]
        preferred: Any = (g.get("preferredVersion") or {}).get("version")
        ordered = sorted(versions, key=_version_rank, reverse=True)
        if preferred in ordered:
            ordered.remove(preferred)
            ordered.insert(0, str(preferred))
        groups[str(g.get("name", ""))] = ordered
    listed: dict[str, set[str]] = {}
    served: Served = {}
    for resource in wanted:
        for version in groups.get(resource.group, []):
            api_version = f"{resource.group}/{version}" if resource.group else version
            if not reads(api_version, resource.kind):
                continue
            if api_version not in listed:
                path = f"/apis/{api_version}" if resource.group else f"/api/{version}"
                listed[api_version] = await _resources(api, path)
            if resource.plural in listed[api_version]:
                served[resource] = version
                break
    return served


__all__ = ["Served", "discover"]
