"""The Kubernetes API over kubernetes-asyncio: configuration (kubeconfig or in-cluster),
JSON requests, watch streams and discovery. Every call names the resource and verb it
uses and is checked against ``access`` first, so the RBAC roles can be derived from it.

Objects stay plain JSON mappings here; the manifest decoders turn them into the model.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import quote

import aiohttp
from kubernetes_asyncio import client, config

from gangpreempt.config import Settings
from gangpreempt.errors import InvalidInput, Transient
from services.kube.access import Access, Resource, access_of
from services.kube.errors import ApiError

JSON = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"


async def _configuration(settings: Settings) -> client.Configuration:
    cfg = client.Configuration()
    if settings.kubeconfig:
        try:
            await config.load_kube_config(
                config_file=settings.kubeconfig,
                context=settings.kube_context,
                client_configuration=cfg,
            )
        except (OSError, config.ConfigException) as exc:
            raise InvalidInput(f"GANGPREEMPT_KUBECONFIG {settings.kubeconfig}: {exc}") from exc
        return cfg
    try:
        config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    except config.ConfigException as exc:
        raise InvalidInput(
            "kubernetes: not in a cluster and no kubeconfig given "
            f"(set GANGPREEMPT_KUBECONFIG): {exc}"
        ) from exc
    return cfg


def path_of(
    resource: Resource,
    version: str,
    namespace: str | None = None,
    name: str | None = None,
) -> str:
    """The URL path of a collection, or of one object (and its subresource)."""
    base = f"/api/{version}" if not resource.group else f"/apis/{resource.group}/{version}"
    plural, _, sub = resource.plural.partition("/")
    if namespace is not None and resource.namespaced:
        base += f"/namespaces/{quote(namespace, safe='')}"
    base += f"/{plural}"
    if name is not None:
        base += f"/{quote(name, safe='')}"
        if sub:
            base += f"/{sub}"
    return base


class KubeApi:
    """One service's connection to the API server."""

    def __init__(self, api: client.ApiClient, service: str, access: Access | None = None) -> None:
        self.api = api
        self.service = service
        # The calls it may make (services.kube.access, as configured).
        self.access = access_of(service) if access is None else access
        # Awaited before every write (the actuator checks its lease there: ``Fenced``).
        self.before_write: Callable[[], Awaitable[None]] | None = None

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(
        cls, settings: Settings, service: str, access: Access | None = None
    ) -> AsyncIterator[KubeApi]:
        """A connection allowed ``access`` (default: ``service``'s calls as ``settings``
        configure them)."""
        cfg = await _configuration(settings)
        if access is None:
            access = access_of(service, settings.pod_eviction, settings.mode == "act")
        async with client.ApiClient(configuration=cfg) as api:
            yield cls(api, service, access)

    def _check(self, resource: Resource, verb: str) -> None:
        if verb not in self.access.get(resource, frozenset()):
            raise PermissionError(
                f"{self.service} may not {verb} {resource.group or 'core'}/{resource.plural}: "
                "not in services.kube.access"
            )

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | aiohttp.ClientTimeout = 30.0,
    ) -> Any:
        """The raw aiohttp response of one request (the caller reads or streams it)."""
        try:
            return await self.api.call_api(
                path,
                method,
                query_params=list((query or {}).items()),
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout,
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise Transient(f"{method} {path}: {exc!r}") from exc

    async def _exchange(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> JSON:
        """One request and its whole answer, decoded; a non-2xx status is an ApiError,
        a connection or body failure (reset, cut short, timed out, not JSON) Transient."""
        response = await self._send(method, path, query=query, body=body, content_type=content_type)
        try:
            async with response:
                data = await response.read()
                status, retry_after = response.status, response.headers.get("Retry-After")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise Transient(f"{method} {path}: reading the answer: {exc!r}") from exc
        if not 200 <= status < 300:
            raise _error(status, data, retry_after)
        try:
            decoded = json.loads(data) if data else {}
        except ValueError as exc:
            raise Transient(f"{method} {path}: the answer is not JSON") from exc
        return decoded if isinstance(decoded, dict) else {}

    async def request(
        self,
        method: str,
        resource: Resource,
        verb: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> JSON:
        self._check(resource, verb)
        if method != "GET" and self.before_write is not None:
            await self.before_write()
        return await self._exchange(method, path, query=query, body=body, content_type=content_type)

    async def raw_get(self, path: str) -> JSON:
        """A discovery document (``/api``, ``/apis``, ``/apis/<group>/<version>``): every
        authenticated client may read these."""
        return await self._exchange("GET", path)

    async def watch(
        self, resource: Resource, version: str, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[JSON]:
        """The events of one watch (cluster-wide, or in the resource's namespace), from
        ``resource_version``, with bookmarks, until the server ends it."""
        self._check(resource, "watch")
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        if resource.field_selector:
            query["fieldSelector"] = resource.field_selector
        path = path_of(resource, version, resource.namespace or None)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=timeout_seconds + 30)
        response = await self._send("GET", path, query=query, timeout=timeout)
        async with response:
            if not 200 <= response.status < 300:
                try:
                    data = await response.read()
                except (aiohttp.ClientError, TimeoutError) as exc:
                    raise Transient(f"watch {path}: {exc!r}") from exc
                raise _error(response.status, data, None)
            buffer = b""
            while True:
                try:
                    chunk = await response.content.readany()
                except (aiohttp.ClientError, TimeoutError) as exc:
                    raise Transient(f"watch {path}: {exc!r}") from exc
                if not chunk:
                    return  # the server ended the watch (an unfinished line is dropped)
                # One event per line, of any length (an object may be 1.5 MB).
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    try:
                        event = json.loads(line)
                    except ValueError as exc:
                        raise Transient(f"watch {path}: an event is not JSON") from exc
                    if isinstance(event, dict):
                        yield event


def _error(status: int, data: bytes, retry_after: str | None) -> ApiError:
    reason, message = "", data[:200].decode("utf-8", "replace")
    try:
        body = json.loads(data)
        if isinstance(body, dict):
            reason = str(body.get("reason", ""))
            message = str(body.get("message", message))
    except ValueError:
        pass
    delay: float | None = None
    if retry_after:
        with contextlib.suppress(ValueError):
            delay = float(retry_after)
    return ApiError(status, reason, message, delay)


__all__ = ["JSON", "MERGE_PATCH", "ApiError", "KubeApi", "path_of"]
