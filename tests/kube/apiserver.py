"""A small Kubernetes API server over HTTP, for tests: just the verbs gangpreempt calls.

Served: discovery (``/api``, ``/apis``, group versions); list (pages with ``limit`` /
``continue``, ``labelSelector`` equality), watch (chunked JSON lines from a
resourceVersion, bookmarks, ``timeoutSeconds``, a 410 ERROR event for a compacted
version), get, create, merge patch (main resource or ``/status``; ``metadata.uid`` and
``metadata.resourceVersion`` in the patch are preconditions: 409 on mismatch), delete
(``preconditions``; a pod with a grace period is marked terminating first), the pod
``eviction`` subresource (429 while a PodDisruptionBudget allows no disruption).

Every request needs the bearer token and is recorded as (verb, group, resource), so a
test can compare what the code called with what its RBAC role grants. ``fail`` makes
the next matching requests answer with an error status, ``cuts`` cut an answer in the
middle of its body, ``dropped`` drops the connection without an answer.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

TOKEN = "test-token"


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    status: bool = False  # has a status subresource


CORE = [
    Kind("", "v1", "namespaces", "Namespace", False),
    Kind("", "v1", "configmaps", "ConfigMap"),
    Kind("", "v1", "nodes", "Node", False, True),
    Kind("", "v1", "pods", "Pod", True, True),
    Kind("", "v1", "events", "Event"),
    Kind("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False),
    Kind("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, True),
    Kind("batch", "v1", "jobs", "Job", True, True),
]
KUEUE = [
    Kind("kueue.x-k8s.io", "v1beta1", "admissionchecks", "AdmissionCheck", False, True),
    Kind("kueue.x-k8s.io", "v1beta1", "resourceflavors", "ResourceFlavor", False),
    Kind("kueue.x-k8s.io", "v1beta1", "clusterqueues", "ClusterQueue", False, True),
    Kind("kueue.x-k8s.io", "v1beta1", "localqueues", "LocalQueue", True, True),
    Kind("kueue.x-k8s.io", "v1beta1", "workloadpriorityclasses", "WorkloadPriorityClass", False),
    Kind("kueue.x-k8s.io", "v1beta1", "workloads", "Workload", True, True),
]
PLUGINS = [
    Kind("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", True, True),
    Kind("scheduling.x-k8s.io", "v1alpha1", "elasticquotas", "ElasticQuota", True, True),
]


@dataclass
class Failure:
    method: str
    contains: str
    status: int
    count: int
    retry_after: str | None = None


@dataclass
class Watcher:
    group: str
    plural: str
    queue: asyncio.Queue[dict[str, Any] | None] = field(default_factory=asyncio.Queue)


# Merge patch is what the code sends; a strategic merge patch is the same for the fields
# it touches. JSON patch and apply are not served here.
PATCH_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _invalid_event(namespace: str | None, event: dict[str, Any]) -> str:
    """Why the API server would refuse this Event (as its validation does), or ""."""
    name = str((event.get("metadata") or {}).get("name", ""))
    if len(name) > 253 or not DNS_SUBDOMAIN.fullmatch(name):
        return f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain"
    involved = event.get("involvedObject") or {}
    if involved.get("namespace") and involved["namespace"] != namespace:
        return "involvedObject.namespace: Invalid value: does not match event.namespace"
    return ""


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(code: int, reason: str, message: str, **extra: Any) -> web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure" if code >= 400 else "Success",
        "code": code,
        "reason": reason,
        "message": message,
        **extra,
    }
    return web.json_response(body, status=code)


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge(result.get(k), v)
    return result


def _matches(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        k, _, v = term.partition("=")
        if labels.get(k.strip()) != v.strip().lstrip("="):
            return False
    return True


class ApiServer:
    def __init__(self, kinds: list[Kind] | None = None, bookmark_interval: float = 0.2) -> None:
        self.kinds = {(k.group, k.plural): k for k in (kinds or CORE + KUEUE + PLUGINS)}
        self.objects: dict[tuple[str, str], dict[tuple[str, str], dict[str, Any]]] = {
            key: {} for key in self.kinds
        }
        self.rv = 100
        self.history: list[tuple[int, str, str, str, dict[str, Any]]] = []
        self.compacted = 0  # versions at or below this are gone (410)
        self.watchers: list[Watcher] = []
        self.calls: list[tuple[str, str, str]] = []  # (verb, group, resource[/sub])
        self.requests: list[tuple[str, str, Any]] = []  # (method, path, body)
        self.failures: list[Failure] = []
        # (method, url part, count): answers cut in the middle of their body.
        self.cuts: list[list[Any]] = []
        self.dropped: list[tuple[str, str]] = []  # (method, url part): connection dropped
        # (method, path part, action): the action runs once, before a matching request.
        self.before: list[tuple[str, str, Any]] = []
        # (method, url part): such requests wait for ``release`` (counted while they do)
        self.holds: list[tuple[str, str]] = []
        # (method, url part, seconds): such requests are answered that much later
        self.slow: list[tuple[str, str, float]] = []
        self.release = asyncio.Event()
        self.held = 0  # requests waiting now
        self.most_held = 0  # the most that waited at once
        self.expired_watches = 0  # watches answered with a 410 ERROR event
        self.bookmarks_sent: set[str] = set()
        self.watch_versions: list[str] = []  # the resourceVersion each watch started from
        self.bookmark_interval = bookmark_interval
        self.pod_termination = 0.0  # seconds a deleted pod with a grace period lingers
        self.runner: web.AppRunner | None = None
        self.url = ""

    # -- test hooks -------------------------------------------------------------------------
    def fail(
        self,
        method: str,
        contains: str,
        status: int,
        count: int = 1,
        retry_after: str | None = None,
    ) -> None:
        self.failures.append(Failure(method, contains, status, count, retry_after))

    def compact(self) -> None:
        """Forget the history so far: a watch from an older version gets 410."""
        self.compacted = self.rv
        self.history = []

    def close_watches(self) -> None:
        for w in self.watchers:
            w.queue.put_nowait(None)

    def get(self, group: str, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects[(group, plural)].get((namespace, name))

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace ``obj`` (apiVersion and kind name its resource)."""
        api_version = obj["apiVersion"]
        group = api_version.rpartition("/")[0]
        kind = next(k for k in self.kinds.values() if k.group == group and k.kind == obj["kind"])
        meta = obj.setdefault("metadata", {})
        if kind.namespaced:
            meta.setdefault("namespace", "default")
        key = (meta.get("namespace", ""), meta["name"])
        existing = self.objects[(group, kind.plural)].get(key)
        meta.setdefault("uid", existing["metadata"]["uid"] if existing else str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _now())
        self._store(kind, key, obj, "MODIFIED" if existing else "ADDED")
        return obj

    def delete_now(self, group: str, plural: str, namespace: str, name: str) -> None:
        kind = self.kinds[(group, plural)]
        obj = self.objects[(group, plural)].pop((namespace, name))
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self._emit(kind, "DELETED", obj)

    # -- storage ----------------------------------------------------------------------------
    def _store(self, kind: Kind, key: tuple[str, str], obj: dict[str, Any], event: str) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        obj["apiVersion"] = f"{kind.group}/{kind.version}" if kind.group else kind.version
        obj["kind"] = kind.kind
        self.objects[(kind.group, kind.plural)][key] = obj
        self._emit(kind, event, obj)

    def _emit(self, kind: Kind, event: str, obj: dict[str, Any]) -> None:
        snapshot = copy.deepcopy(obj)
        self.history.append((self.rv, kind.group, kind.plural, event, snapshot))
        for w in self.watchers:
            if (w.group, w.plural) == (kind.group, kind.plural):
                w.queue.put_nowait({"type": event, "object": snapshot})

    # -- serving ----------------------------------------------------------------------------
    async def start(self) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self.runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        self.close_watches()
        if self.runner is not None:
            await self.runner.cleanup()

    def kubeconfig(self, path: str) -> str:
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "test", "cluster": {"server": self.url}}],
            "users": [{"name": "test", "user": {"token": TOKEN}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
            "current-context": "test",
        }
        with open(path, "w") as f:
            json.dump(doc, f)
        return path

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return _status(401, "Unauthorized", "Unauthorized")
        path = request.path
        body: Any = None
        if request.can_read_body:
            raw = await request.read()
            body = json.loads(raw) if raw else None
        self.requests.append((request.method, path, body))
        if path == "/api":
            return web.json_response({"kind": "APIVersions", "versions": ["v1"]})
        if path == "/apis":
            return web.json_response(self._groups())
        parts = [p for p in path.split("/") if p]
        if parts[0] == "api" and len(parts) == 2:
            return web.json_response(self._resource_list("", parts[1]))
        if parts[0] == "apis" and len(parts) == 3:
            if not any(k.group == parts[1] and k.version == parts[2] for k in self.kinds.values()):
                return _status(404, "NotFound", f"{path} not found")
            return web.json_response(self._resource_list(parts[1], parts[2]))
        group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else ""
        kind = self.kinds.get((group, plural))
        if kind is None:
            return _status(404, "NotFound", f"the server could not find {path}")
        verb = self._verb(request, name)
        resource = f"{plural}/{sub}" if sub else plural
        self.calls.append((verb, group, resource))
        for hook in list(self.before):
            if hook[0] == request.method and hook[1] in str(request.url):
                self.before.remove(hook)
                hook[2]()
        for method, part, seconds in self.slow:
            if method == request.method and part in str(request.url):
                await asyncio.sleep(seconds)
        if any(m == request.method and part in str(request.url) for m, part in self.holds):
            self.held += 1
            self.most_held = max(self.most_held, self.held)
            try:
                await self.release.wait()
            finally:
                self.held -= 1
        for cut in self.cuts:
            if cut[2] > 0 and cut[0] == request.method and cut[1] in str(request.url):
                cut[2] -= 1
                return await self._cut(request)
        for method, part in self.dropped:
            if method == request.method and part in str(request.url):
                assert request.transport is not None
                request.transport.close()
                raise ConnectionResetError("dropped by the test")
        for f in self.failures:
            if f.count > 0 and f.method == request.method and f.contains in str(request.url):
                f.count -= 1
                headers = {"Retry-After": f.retry_after} if f.retry_after else {}
                resp = _status(f.status, "Injected", f"injected {f.status}")
                resp.headers.update(headers)
                return resp
        if verb == "watch":
            return await self._watch(request, kind, namespace)
        if verb == "list":
            return self._list(request, kind, namespace)
        key = (namespace or "", name or (body or {}).get("metadata", {}).get("name", ""))
        if verb == "create" and sub == "eviction":
            return self._evict(kind, key, body or {})
        if verb == "create":
            if kind.plural == "events":
                invalid = _invalid_event(namespace, body or {})
                if invalid:
                    return _status(422, "Invalid", invalid)
            return self._create(kind, namespace, body or {})
        obj = self.objects[(group, plural)].get(key)
        if obj is None:
            return _status(404, "NotFound", f'{plural} "{key[1]}" not found')
        if verb == "get":
            return web.json_response(obj)
        if verb == "patch":
            if request.content_type not in PATCH_TYPES:
                return _status(
                    415, "UnsupportedMediaType", f"{request.content_type} is not a patch"
                )
            return self._patch(kind, key, obj, body or {}, sub)
        if verb == "delete":
            return self._delete(kind, key, obj, body or {})
        return _status(405, "MethodNotAllowed", f"{request.method} {path}")

    @staticmethod
    async def _cut(request: web.Request) -> web.StreamResponse:
        """200 and a promised body of 100 kB, then the connection closes after 27 bytes."""
        response = web.StreamResponse(status=200)
        response.content_type = "application/json"
        response.content_length = 100_000
        await response.prepare(request)
        await response.write(b'{"kind": "List", "items": [')
        assert request.transport is not None
        request.transport.close()
        return response

    @staticmethod
    def _verb(request: web.Request, name: str | None) -> str:
        method = request.method
        if method == "GET":
            if name is not None:
                return "get"
            return "watch" if request.query.get("watch") in ("1", "true") else "list"
        return {"POST": "create", "PATCH": "patch", "DELETE": "delete", "PUT": "update"}[method]

    def _groups(self) -> dict[str, Any]:
        groups: dict[str, list[str]] = {}
        for k in self.kinds.values():
            if k.group and k.version not in groups.setdefault(k.group, []):
                groups[k.group].append(k.version)
        return {
            "kind": "APIGroupList",
            "groups": [
                {
                    "name": g,
                    "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                    "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]},
                }
                for g, vs in groups.items()
            ],
        }

    def _resource_list(self, group: str, version: str) -> dict[str, Any]:
        resources = []
        for k in self.kinds.values():
            if k.group == group and k.version == version:
                resources.append({"name": k.plural, "kind": k.kind, "namespaced": k.namespaced})
                if k.status:
                    resources.append({"name": f"{k.plural}/status", "kind": k.kind})
                if k.plural == "pods":
                    resources.append({"name": "pods/eviction", "kind": "Eviction"})
        gv = f"{group}/{version}" if group else version
        return {"kind": "APIResourceList", "groupVersion": gv, "resources": resources}

    def _selected(
        self, kind: Kind, namespace: str | None, selector: str, fields: str = ""
    ) -> list[dict[str, Any]]:
        name = fields.removeprefix("metadata.name=") if fields else None
        items = [
            o
            for (ns, n), o in sorted(self.objects[(kind.group, kind.plural)].items())
            if (namespace is None or ns == namespace) and (name is None or n == name)
        ]
        return [o for o in items if _matches(o["metadata"].get("labels") or {}, selector)]

    def _list(self, request: web.Request, kind: Kind, namespace: str | None) -> web.Response:
        items = self._selected(
            kind,
            namespace,
            request.query.get("labelSelector", ""),
            request.query.get("fieldSelector", ""),
        )
        limit = int(request.query.get("limit", "0") or 0)
        start, at = 0, self.rv
        token = request.query.get("continue")
        if token:
            at_text, _, start_text = token.partition(":")
            at, start = int(at_text), int(start_text)
            if at <= self.compacted:
                return _status(410, "Expired", "The provided continue parameter is too old")
        page = items[start : start + limit] if limit else items[start:]
        meta: dict[str, Any] = {"resourceVersion": str(at)}
        if limit and start + limit < len(items):
            meta["continue"] = f"{at}:{start + limit}"
        stripped = []
        for o in page:
            item = dict(o)
            item.pop("apiVersion", None)  # typed lists carry no kind per item
            item.pop("kind", None)
            stripped.append(item)
        return web.json_response(
            {"kind": f"{kind.kind}List", "apiVersion": "v1", "metadata": meta, "items": stripped}
        )

    async def _watch(
        self, request: web.Request, kind: Kind, namespace: str | None
    ) -> web.StreamResponse:
        since = int(request.query.get("resourceVersion") or 0)
        timeout = float(request.query.get("timeoutSeconds") or 60)
        bookmarks = request.query.get("allowWatchBookmarks") in ("true", "1")
        self.watch_versions.append(request.query.get("resourceVersion") or "")
        response = web.StreamResponse()
        response.content_type = "application/json"
        await response.prepare(request)

        async def send(event: dict[str, Any]) -> None:
            await response.write(json.dumps(event).encode() + b"\n")

        if since and since < self.compacted:
            self.expired_watches += 1
            await send(
                {
                    "type": "ERROR",
                    "object": {
                        "kind": "Status",
                        "code": 410,
                        "reason": "Expired",
                        "message": f"too old resource version: {since} ({self.compacted})",
                    },
                }
            )
            return response
        watcher = Watcher(kind.group, kind.plural)
        self.watchers.append(watcher)
        fields = request.query.get("fieldSelector", "")
        only = fields.removeprefix("metadata.name=") if fields else None

        def wanted(obj: dict[str, Any]) -> bool:
            meta = obj.get("metadata") or {}
            return (namespace is None or meta.get("namespace") == namespace) and (
                only is None or meta.get("name") == only
            )

        try:
            for rv, group, plural, event, obj in list(self.history):
                if rv > since and (group, plural) == (kind.group, kind.plural) and wanted(obj):
                    await send({"type": event, "object": obj})
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while (left := deadline - loop.time()) > 0:
                try:
                    item = await asyncio.wait_for(
                        watcher.queue.get(), min(left, self.bookmark_interval)
                    )
                except TimeoutError:
                    if bookmarks:
                        self.bookmarks_sent.add(str(self.rv))
                        await send(
                            {
                                "type": "BOOKMARK",
                                "object": {
                                    "kind": kind.kind,
                                    "apiVersion": kind.version,
                                    "metadata": {"resourceVersion": str(self.rv)},
                                },
                            }
                        )
                    continue
                if item is None:
                    break
                if wanted(item["object"]):
                    await send(item)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.watchers.remove(watcher)
        return response

    def _create(self, kind: Kind, namespace: str | None, body: dict[str, Any]) -> web.Response:
        meta = body.setdefault("metadata", {})
        if kind.namespaced:
            meta["namespace"] = namespace or meta.get("namespace", "default")
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if key in self.objects[(kind.group, kind.plural)]:
            return _status(409, "AlreadyExists", f'{kind.plural} "{key[1]}" already exists')
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        self._store(kind, key, body, "ADDED")
        return web.json_response(body, status=201)

    @staticmethod
    def _precondition(obj: dict[str, Any], uid: Any, rv: Any) -> web.Response | None:
        meta = obj["metadata"]
        if uid and uid != meta["uid"]:
            return _status(
                409,
                "Conflict",
                f"Precondition failed: UID in precondition: {uid}, "
                f"UID in object meta: {meta['uid']}",
            )
        if rv and rv != meta["resourceVersion"]:
            return _status(
                409,
                "Conflict",
                "the object has been modified; please apply your changes to the latest "
                "version and try again",
            )
        return None

    def _patch(
        self,
        kind: Kind,
        key: tuple[str, str],
        obj: dict[str, Any],
        patch: dict[str, Any],
        sub: str,
    ) -> web.Response:
        meta_patch = patch.get("metadata") or {}
        refused = self._precondition(obj, meta_patch.get("uid"), meta_patch.get("resourceVersion"))
        if refused is not None:
            return refused
        if sub == "status":
            new = dict(obj)
            new["status"] = merge(obj.get("status"), patch.get("status") or {})
        else:
            patch = {k: v for k, v in patch.items() if not (k == "status" and kind.status)}
            new = merge(obj, patch)
            new["metadata"]["uid"] = obj["metadata"]["uid"]
        self._store(kind, key, new, "MODIFIED")
        return web.json_response(new)

    def _delete(
        self, kind: Kind, key: tuple[str, str], obj: dict[str, Any], options: dict[str, Any]
    ) -> web.Response:
        pre = options.get("preconditions") or {}
        refused = self._precondition(obj, pre.get("uid"), pre.get("resourceVersion"))
        if refused is not None:
            return refused
        grace = options.get("gracePeriodSeconds")
        if kind.plural == "pods" and (grace is None or grace > 0):
            if obj["metadata"].get("deletionTimestamp"):
                return web.json_response(obj)
            new = copy.deepcopy(obj)
            new["metadata"]["deletionTimestamp"] = _now()
            new["metadata"]["deletionGracePeriodSeconds"] = grace if grace is not None else 30
            self._store(kind, key, new, "MODIFIED")
            asyncio.get_running_loop().call_later(
                self.pod_termination, self._finish_termination, kind, key, new["metadata"]["uid"]
            )
            return web.json_response(new)
        self.delete_now(kind.group, kind.plural, *key)
        return web.json_response(obj)

    def _finish_termination(self, kind: Kind, key: tuple[str, str], uid: str) -> None:
        obj = self.objects[(kind.group, kind.plural)].get(key)
        if obj is not None and obj["metadata"]["uid"] == uid:
            self.delete_now(kind.group, kind.plural, *key)

    def _evict(self, kind: Kind, key: tuple[str, str], eviction: dict[str, Any]) -> web.Response:
        pod = self.objects[(kind.group, kind.plural)].get(key)
        if pod is None:
            return _status(404, "NotFound", f'pods "{key[1]}" not found')
        labels = pod["metadata"].get("labels") or {}
        pdbs = self.objects[("policy", "poddisruptionbudgets")]
        covering = []
        for (ns, _), pdb in pdbs.items():
            selector = ((pdb.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
            if ns == key[0] and selector and all(labels.get(k) == v for k, v in selector.items()):
                covering.append(pdb)
        for pdb in covering:
            if int((pdb.get("status") or {}).get("disruptionsAllowed", 0)) <= 0:
                name = pdb["metadata"]["name"]
                return _status(
                    429,
                    "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    details={
                        "causes": [
                            {
                                "reason": "DisruptionBudget",
                                "message": f"The disruption budget {name} needs more healthy pods",
                            }
                        ]
                    },
                )
        options = eviction.get("deleteOptions") or {}
        pre = options.get("preconditions") or {}
        refused = self._precondition(pod, pre.get("uid"), pre.get("resourceVersion"))
        if refused is not None:
            return refused
        pdb_kind = self.kinds[("policy", "poddisruptionbudgets")]
        for pdb in covering:
            new = copy.deepcopy(pdb)
            status = new.setdefault("status", {})
            status["disruptionsAllowed"] = int(status.get("disruptionsAllowed", 0)) - 1
            self._store(pdb_kind, (key[0], pdb["metadata"]["name"]), new, "MODIFIED")
        self._delete(kind, key, pod, options)
        return _status(201, "", "", status="Success")


__all__ = ["CORE", "KUEUE", "PLUGINS", "TOKEN", "ApiServer", "Kind", "merge"]
