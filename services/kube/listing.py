"""The cluster read once: discovery, then one paged list of every resource the
kubernetes source watches (no watch). What ``gangpreempt plan --kubeconfig`` decides on."""

from __future__ import annotations

from typing import Any

from gangpreempt.config import Settings
from gangpreempt.errors import InvalidInput, Transient
from services.kube.access import WATCHED
from services.kube.client import ApiError, KubeApi
from services.kube.discovery import discover
from services.kube.watching import ObjectStore, Reflector


async def list_cluster(settings: Settings) -> list[dict[str, Any]]:
    """Every object of the watched kinds the API server serves, with its apiVersion
    and kind. A refused or failed request is ``InvalidInput`` naming the resource (one
    read: there is nothing to retry for)."""
    try:
        return await _list(settings)
    except Transient as exc:
        raise InvalidInput(f"kubernetes: cannot read the cluster: {exc}") from exc


async def _list(settings: Settings) -> list[dict[str, Any]]:
    store = ObjectStore()
    async with KubeApi.connect(settings, "ingest") as api:
        try:
            served = await discover(api, WATCHED)
        except ApiError as exc:
            raise InvalidInput(f"kubernetes: discovery failed: {exc}") from exc
        for resource, version in served.items():
            try:
                await Reflector(api, resource, version, store, 0.0).list()
            except ApiError as exc:
                group = resource.group or "core"
                raise InvalidInput(
                    f"kubernetes: listing {group}/{version} {resource.plural} failed: {exc}"
                ) from exc
    return [obj for _key, _version, obj in store.all_objects()]


__all__ = ["list_cluster"]
