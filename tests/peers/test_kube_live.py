"""The kubernetes source and sink against the real kube-apiserver (v1.37), under the
identities and RBAC deploy/k8s gives ingest and the actuator: what the in-repo API
server (tests/kube) stands in for, checked against the real one. The in-repo server
stays for what a real one cannot be made to do on demand (a write raced between a read
and a patch, a body cut mid-stream, 5xx).

Here: the Eviction API refusing a victim while its PodDisruptionBudget allows no
disruption (429), the sink retrying until the budget allows it; a victim replaced
under its name never touched (the uid precondition); the source listing, then
following a watch: an object created, changed and deleted arrives as the server says;
and a watch resumed from the server's bookmarks. A 410 stays on the in-repo server: the
real one's watch cache serves any version since it started (a watch from version 1,
after etcd was compacted, got the current objects and 200), so it cannot be had on
demand."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import time
import urllib.error
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from gangpreempt.config import Settings
from gangpreempt.manifests.objects import load_objects
from gangpreempt.model.cluster import ClusterState
from services.actuator.kubernetes import KubeSink
from services.ingest.kubernetes import KubeSource
from services.kube import watching
from services.kube.access import KUEUE_MANAGER_CONFIG
from services.kube.client import KubeApi
from tests.kube.sinking import request
from tests.kube.test_source import Published
from tests.peers.cluster import SERVICE_USERS
from tests.peers.control_plane import ControlPlane
from tests.waiting import eventually

pytestmark = [pytest.mark.peers, pytest.mark.timeout(300)]

ACTUATOR = SERVICE_USERS["actuator"]
INGEST = SERVICE_USERS["ingest"]


class Live:
    """A namespace and a node of the test's own on the real API server, and the state
    the actuator's replica would hold for them."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        suffix = uuid.uuid4().hex[:6]
        self.ns = f"kube-{suffix}"
        self.node = f"node-{suffix}"
        self.state = ClusterState()

    async def call(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        return await asyncio.to_thread(self.plane.request, method, path, body, **kw)

    async def pod(self, name: str, **labels: str) -> dict[str, Any]:
        """A pod bound to the node and running (no kubelet: its status is set here)."""
        await self.call(
            "POST",
            f"/api/v1/namespaces/{self.ns}/pods",
            {
                "metadata": {"name": name, "labels": labels},
                "spec": {
                    "nodeName": self.node,
                    "containers": [
                        {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
                    ],
                },
            },
        )
        return dict(
            await self.call(
                "PATCH",
                f"/api/v1/namespaces/{self.ns}/pods/{name}/status",
                {
                    "status": {
                        "phase": "Running",
                        "conditions": [{"type": "Ready", "status": "True"}],
                    }
                },
                content_type="application/merge-patch+json",
            )
        )

    async def get_pod(self, name: str) -> dict[str, Any] | None:
        try:
            return dict(await self.call("GET", f"/api/v1/namespaces/{self.ns}/pods/{name}"))
        except Exception as exc:  # urllib's HTTPError
            if getattr(exc, "code", None) == 404:
                return None
            raise

    async def refresh(self) -> None:
        """The replica as ingest would publish it: the node and the namespace's pods."""
        node = await self.call("GET", f"/api/v1/nodes/{self.node}")
        pods = await self.call("GET", f"/api/v1/namespaces/{self.ns}/pods")
        objects = [
            {**node, "apiVersion": "v1", "kind": "Node"},
            *({**p, "apiVersion": "v1", "kind": "Pod"} for p in pods.get("items") or []),
        ]
        self.state = load_objects("live", copy.deepcopy(objects)).state

    async def caught_up(self) -> None:
        return None


@pytest.fixture
async def live(control_plane: ControlPlane) -> AsyncIterator[Live]:
    lv = Live(control_plane)
    await lv.call("POST", "/api/v1/namespaces", {"metadata": {"name": lv.ns}})
    await lv.call("POST", "/api/v1/nodes", {"metadata": {"name": lv.node}})
    try:
        yield lv
    finally:
        await lv.call("DELETE", f"/api/v1/nodes/{lv.node}")
        await lv.call("DELETE", f"/api/v1/namespaces/{lv.ns}")


@pytest.fixture
async def sink(control_plane: ControlPlane, live: Live) -> AsyncIterator[KubeSink]:
    """The actuator's kubernetes sink, as deploy/k8s's actuator identity."""
    config = str(control_plane.kubeconfig_for(ACTUATOR))
    async with KubeApi.connect(Settings(kubeconfig=config), "actuator") as api:
        yield await KubeSink.create(api, live, "eviction")  # type: ignore[arg-type]


def calls(plane: ControlPlane, user: str, ns: str, sub: str | None) -> list[int]:
    """The response codes of ``user``'s pod calls in ``ns`` with subresource ``sub``."""
    return [
        int((e.get("responseStatus") or {}).get("code", 0))
        for e in plane.audit_events(user)
        if (e.get("objectRef") or {}).get("namespace") == ns
        and (e.get("objectRef") or {}).get("resource") == "pods"
        and (e.get("objectRef") or {}).get("subresource") == sub
        and e.get("verb") == "create"
    ]


async def test_an_eviction_its_pdb_refuses_is_retried_until_the_budget_allows_it(
    control_plane: ControlPlane, live: Live, sink: KubeSink
) -> None:
    guarded = await live.pod("guarded", app="db")
    uid = guarded["metadata"]["uid"]
    budget = await live.call(
        "POST",
        f"/apis/policy/v1/namespaces/{live.ns}/poddisruptionbudgets",
        {
            "metadata": {"name": "db"},
            "spec": {"selector": {"matchLabels": {"app": "db"}}, "maxUnavailable": 0},
        },
    )

    async def allow(disruptions: int) -> None:
        """As the disruption controller (not running here) would say it."""
        await live.call(
            "PATCH",
            f"/apis/policy/v1/namespaces/{live.ns}/poddisruptionbudgets/db/status",
            {
                "status": {
                    "observedGeneration": budget["metadata"]["generation"],
                    "disruptionsAllowed": disruptions,
                    "currentHealthy": 1,
                    "desiredHealthy": 1 - disruptions,
                    "expectedPods": 1,
                }
            },
            content_type="application/merge-patch+json",
        )

    await allow(0)
    await live.refresh()
    task = asyncio.create_task(sink.evict(request(f"Pod/{live.ns}/guarded", uid, "eviction")))

    async def refused_twice() -> bool:
        return calls(control_plane, ACTUATOR, live.ns, "eviction").count(429) >= 2

    await eventually(refused_twice, 60, "two evictions refused by the budget")
    assert not task.done()  # still trying
    assert await live.get_pod("guarded") is not None
    await allow(1)  # another pod became healthy
    reply = await asyncio.wait_for(task, 60)
    assert reply.ok, reply.detail
    assert reply.applied
    evicted = await live.get_pod("guarded")
    assert evicted is None or evicted["metadata"].get("deletionTimestamp")
    codes = calls(control_plane, ACTUATOR, live.ns, "eviction")
    assert codes[-1] == 201
    assert set(codes[:-1]) == {429}


async def test_a_victim_replaced_under_its_name_is_never_touched(
    control_plane: ControlPlane, live: Live, sink: KubeSink
) -> None:
    old = await live.pod("p")
    await live.refresh()
    await live.call("DELETE", f"/api/v1/namespaces/{live.ns}/pods/p", {"gracePeriodSeconds": 0})

    async def gone() -> bool:
        return await live.get_pod("p") is None

    await eventually(gone, 30, "the old pod gone")
    new = await live.pod("p")
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    reply = await sink.evict(request(f"Pod/{live.ns}/p", old["metadata"]["uid"], "eviction"))
    assert not reply.ok
    assert "replaced" in reply.detail
    still = await live.get_pod("p")
    assert still is not None
    assert not still["metadata"].get("deletionTimestamp")
    assert calls(control_plane, ACTUATOR, live.ns, "eviction") == []


async def test_the_source_lists_then_follows_the_watch(
    control_plane: ControlPlane, live: Live, tmp_path: Path
) -> None:
    await live.pod("before")
    config = str(control_plane.kubeconfig_for(INGEST))
    source = KubeSource(Settings(kubeconfig=config, relist_interval=600.0))
    published = Published()
    stop = asyncio.Event()
    task = asyncio.create_task(source.run(stop, published))
    try:
        await published.until(lambda: f"Pod/{live.ns}/before" in published.live, 60)
        assert f"Node/{live.node}" in published.live
        await live.pod("after", team="a")  # created while watched
        await published.until(lambda: f"Pod/{live.ns}/after" in published.live, 60)
        await live.call(
            "PATCH",
            f"/api/v1/namespaces/{live.ns}/pods/after",
            {"metadata": {"labels": {"team": "b"}}},
            content_type="application/merge-patch+json",
        )
        await published.until(
            lambda: published.live[f"Pod/{live.ns}/after"].labels.get("team") == "b", 60
        )
        await live.call(
            "DELETE", f"/api/v1/namespaces/{live.ns}/pods/before", {"gracePeriodSeconds": 0}
        )
        await published.until(lambda: f"Pod/{live.ns}/before" not in published.live, 60)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    # ingest only read, under its own identity, and was never refused
    mine = control_plane.audit_events(INGEST)
    assert {e["verb"] for e in mine} <= {"get", "list", "watch"}
    assert {"list", "watch"} <= {e["verb"] for e in mine}
    assert not [e for e in mine if (e.get("responseStatus") or {}).get("code") == 403]


def watch_versions(plane: ControlPlane, user: str, resource: str, ns: str) -> list[int]:
    """The resourceVersion each of ``user``'s watches of ``resource`` in ``ns`` started
    from, in order."""
    out: list[tuple[str, int]] = []
    for e in plane.audit_events(user):
        ref = e.get("objectRef") or {}
        if e.get("verb") != "watch" or ref.get("resource") != resource:
            continue
        if ref.get("namespace") != ns:
            continue
        query = parse_qs(urlsplit(e.get("requestURI", "")).query)
        out.append((e["requestReceivedTimestamp"], int(query["resourceVersion"][0])))
    return [rv for _, rv in sorted(out)]


async def test_the_watch_resumes_from_the_servers_bookmarks(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kueue's manager ConfigMap is watched by name (a field selector): other ConfigMaps
    written in its namespace move the server's resourceVersion without an event for the
    watch. Each watch request is short here (4 s); the real server sends a bookmark
    before it ends one, carrying that version, and the reflector re-watches from it, not
    from the version it listed (which the server would in time answer with 410)."""
    monkeypatch.setattr(watching, "WATCH_SECONDS", 4)
    resource = KUEUE_MANAGER_CONFIG
    ns = resource.namespace
    with contextlib.suppress(urllib.error.HTTPError):  # there already
        await asyncio.to_thread(
            control_plane.request, "POST", "/api/v1/namespaces", {"metadata": {"name": ns}}
        )
    config = str(control_plane.kubeconfig_for(INGEST))
    store = watching.ObjectStore()
    stop = asyncio.Event()
    earlier = len(watch_versions(control_plane, INGEST, "configmaps", ns))  # other tests'

    def mine() -> list[int]:
        return watch_versions(control_plane, INGEST, "configmaps", ns)[earlier:]

    async with KubeApi.connect(Settings(kubeconfig=config), "ingest") as api:
        reflector = watching.Reflector(api, resource, "v1", store, 600.0)
        listed = int(await reflector.list())
        follow = asyncio.create_task(reflector.watch(str(listed), time.monotonic() + 60, stop))
        suffix = uuid.uuid4().hex[:6]
        written = itertools.count()

        async def resumed_past_the_list() -> bool:
            """Another ConfigMap (filtered out of the watch) moves the version; then:
            has a watch started past the listed version?"""
            i = next(written)
            await asyncio.to_thread(
                control_plane.request,
                "POST",
                f"/api/v1/namespaces/{ns}/configmaps",
                {"metadata": {"name": f"noise-{suffix}-{i}"}, "data": {"i": str(i)}},
            )
            return any(rv > listed for rv in mine())

        try:
            await eventually(resumed_past_the_list, 60, "a watch resumed from a bookmark")
        finally:
            stop.set()
            await asyncio.wait_for(follow, 30)
    versions = mine()
    assert versions[0] == listed
    assert any(rv > listed for rv in versions), (listed, versions)
    assert not [key for key, _, _ in store.all_objects() if key[2].startswith("noise-")]
