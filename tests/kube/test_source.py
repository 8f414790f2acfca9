"""The kubernetes source against an API server over HTTP, through kubernetes-asyncio:
discovery, paged lists, watch streams with bookmarks, 410 -> relist, the periodic
republish, and a rejected object that does not stop the others."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from structlog.testing import capture_logs

from gangpreempt.config import Settings
from gangpreempt.model import kinds
from services.ingest.kubernetes import KubeSource
from services.kube.access import ACCESS, GANG_WORKLOADS, KUEUE_WORKLOADS, NODES, PODS
from tests.kube.apiserver import CORE, KUEUE, PLUGINS, ApiServer, Kind
from tests.kube.objects import node, pod, priority_class
from tests.waiting import until

pytestmark = pytest.mark.kube


class Published:
    """What the source hands to ingest's publisher, batch by batch."""

    def __init__(self) -> None:
        self.batches: list[tuple[list[str], list[str]]] = []
        self.live: dict[str, Any] = {}
        self.arrived = asyncio.Event()

    async def __call__(self, upserts: list[Any], deletes: list[tuple[str, str]]) -> None:
        ups = [f"{kinds.kind_of(o)}/{kinds.key_of(o)}" for o in upserts]
        dels = [f"{k}/{key}" for k, key in deletes]
        for o, ref in zip(upserts, ups, strict=True):
            self.live[ref] = o
        for ref in dels:
            self.live.pop(ref, None)
        self.batches.append((ups, dels))
        self.arrived.set()

    async def until(self, predicate: Any, timeout: float = 10.0) -> None:
        async def wait() -> None:
            while not predicate():
                self.arrived.clear()
                await self.arrived.wait()

        await asyncio.wait_for(wait(), timeout)


async def running(
    server: ApiServer, tmp_path: Any, **settings: Any
) -> tuple[KubeSource, Published, asyncio.Event, asyncio.Task[None]]:
    config = server.kubeconfig(str(tmp_path / "kubeconfig"))
    source = KubeSource(Settings(kubeconfig=config, **settings))
    published = Published()
    stop = asyncio.Event()
    task = asyncio.create_task(source.run(stop, published))
    return source, published, stop, task


async def stopped(stop: asyncio.Event, task: asyncio.Task[None]) -> None:
    stop.set()
    await asyncio.wait_for(task, 5)


async def test_lists_then_follows_watch_events(apiserver: ApiServer, tmp_path) -> None:
    for i in range(7):
        apiserver.put(node(f"node-{i}"))
    apiserver.put(pod("running", "node-0"))
    _source, published, stop, task = await running(apiserver, tmp_path)
    try:
        await published.until(lambda: bool(published.batches))
        first_upserts, _ = published.batches[0]
        assert sorted(r for r in first_upserts if r.startswith("Node/")) == [
            f"Node/node-{i}" for i in range(7)
        ]
        assert "Pod/team-a/running" in first_upserts
        assert published.live["Pod/team-a/running"].node_name == "node-0"

        apiserver.put(pod("waiting"))
        await published.until(lambda: "Pod/team-a/waiting" in published.live)
        assert published.batches[-1] == (["Pod/team-a/waiting"], [])  # only what changed

        apiserver.delete_now("", "pods", "team-a", "running")
        await published.until(lambda: "Pod/team-a/running" not in published.live)
        # A node whose model does not change (an unread annotation) publishes nothing.
        batches = len(published.batches)
        n0 = apiserver.get("", "nodes", "", "node-0")
        assert n0 is not None
        n0["metadata"]["annotations"] = {"unrelated": "x"}
        apiserver.put(n0)
        apiserver.put(pod("later"))
        await published.until(lambda: "Pod/team-a/later" in published.live)
        assert all("Node/node-0" not in ups for ups, _ in published.batches[batches:])
    finally:
        await stopped(stop, task)


async def test_lists_in_pages(apiserver: ApiServer, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("services.kube.watching.PAGE", 3)
    for i in range(10):
        apiserver.put(pod(f"p-{i}", ns="batch"))
    _source, published, stop, task = await running(apiserver, tmp_path)
    try:
        await published.until(lambda: bool(published.batches))
        assert sum(1 for r in published.live if r.startswith("Pod/batch/")) == 10
        pod_lists = [r for r in apiserver.requests if r[0] == "GET" and r[1] == "/api/v1/pods"]
        assert len(pod_lists) >= 4  # 10 pods in pages of 3
    finally:
        await stopped(stop, task)


async def test_watch_resumes_from_bookmarks_and_relists_on_410(
    apiserver: ApiServer, tmp_path
) -> None:
    apiserver.put(node("node-0"))
    source, published, stop, task = await running(apiserver, tmp_path)
    try:
        await published.until(lambda: "Node/node-0" in published.live)
        await until(lambda: apiserver.bookmarks_sent, what="a bookmark")
        kinds_served = len(source.served)

        def all_watching() -> bool:  # every reflector listed and is watching again
            return len(apiserver.watchers) >= kinds_served

        await until(all_watching, what="every kind watched")
        lists_before = source.store.relists
        # The server forgets its history and drops the watches: the reflectors come back
        # with a version that is gone, get 410, and list again.
        apiserver.compact()
        apiserver.put(node("node-1"))
        apiserver.compact()
        apiserver.close_watches()
        await published.until(lambda: "Node/node-1" in published.live)
        assert apiserver.expired_watches >= 1
        assert source.store.relists > lists_before
        await until(all_watching, what="every kind relisted and watched again")
        # A watch ended by the server (not expired) resumes without a relist, from the
        # last version it saw (a bookmark's or an event's).
        lists = source.store.relists
        watches = len(apiserver.watch_versions)
        apiserver.close_watches()
        await until(
            lambda: len(apiserver.watch_versions) >= watches + kinds_served,
            what="the watches back",
        )
        apiserver.put(node("node-2"))
        await published.until(lambda: "Node/node-2" in published.live)
        assert source.store.relists == lists
        assert set(apiserver.watch_versions) & apiserver.bookmarks_sent  # resumed at a bookmark
    finally:
        await stopped(stop, task)


async def test_periodic_relist_republishes_everything(apiserver: ApiServer, tmp_path) -> None:
    apiserver.put(node("node-0"))
    apiserver.put(pod("a", "node-0"))
    _source, published, stop, task = await running(apiserver, tmp_path, relist_interval=0.5)
    try:
        await published.until(lambda: len(published.batches) >= 3, timeout=10)
        # Nothing changed, yet each period republishes the whole state.
        for ups, dels in published.batches[:3]:
            assert {"Node/node-0", "Pod/team-a/a"} <= set(ups)
            assert dels == []
    finally:
        await stopped(stop, task)


async def test_rejected_object_is_left_out_the_rest_published(
    apiserver: ApiServer, tmp_path, capsys
) -> None:
    apiserver.put(node("node-0"))
    apiserver.put(pod("good", "node-0"))
    apiserver.put(pod("bad", "node-0", cpu="lots"))
    source, published, stop, task = await running(apiserver, tmp_path)
    try:
        await published.until(lambda: bool(published.batches))
        assert "Pod/team-a/good" in published.live
        assert "Pod/team-a/bad" not in published.live
        assert any("Pod team-a/bad" in e and "cpu" in e for e in source.rejected)
    finally:
        await stopped(stop, task)


async def test_discovery_watches_only_what_is_served(tmp_path) -> None:
    gang = [
        Kind("scheduling.k8s.io", "v1alpha1", "workloads", "Workload"),
        Kind("scheduling.k8s.io", "v1alpha2", "workloads", "Workload"),
        Kind("scheduling.k8s.io", "v1alpha2", "podgroups", "PodGroup"),
    ]
    server = ApiServer(kinds=CORE + gang)  # no Kueue, no scheduler-plugins
    await server.start()
    try:
        source, published, stop, task = await running(server, tmp_path)
        try:
            await published.until(lambda: bool(published.batches))
            assert source.served[GANG_WORKLOADS] == "v1alpha2"
            assert KUEUE_WORKLOADS not in source.served
            assert source.served[NODES] == "v1"
            assert source.served[PODS] == "v1"
        finally:
            await stopped(stop, task)
        # Every call ingest made is one its role grants.
        granted = {(r.group, r.plural, v) for r, verbs in ACCESS["ingest"].items() for v in verbs}
        assert server.calls
        assert {(g, res, verb) for verb, g, res in server.calls} <= granted
    finally:
        await server.stop()


async def test_the_access_table_is_what_ingest_calls(tmp_path) -> None:
    """On a server with every kind installed, ingest lists and watches each, and calls
    nothing else: its RBAC role, derived from the table, grants nothing unused."""
    extra = [
        Kind("kueue.x-k8s.io", "v1beta1", "cohorts", "Cohort", False),
        Kind("kueue.x-k8s.io", "v1beta1", "topologies", "Topology", False),
        Kind("scheduling.sigs.k8s.io", "v1alpha1", "podgroups", "PodGroup"),
        Kind("scheduling.sigs.k8s.io", "v1alpha1", "elasticquotas", "ElasticQuota"),
        Kind("scheduling.k8s.io", "v1alpha1", "workloads", "Workload"),
        Kind("scheduling.k8s.io", "v1alpha1", "podgroups", "PodGroup"),
    ]
    server = ApiServer(kinds=CORE + KUEUE + PLUGINS + extra)
    await server.start()
    try:
        _source, published, stop, task = await running(server, tmp_path)
        granted = {(r.group, r.plural, v) for r, verbs in ACCESS["ingest"].items() for v in verbs}

        def calls() -> set[tuple[str, str, str]]:
            return {(g, res, verb) for verb, g, res in server.calls}

        try:
            await published.until(lambda: bool(published.batches))
            await until(lambda: calls() >= granted, what="every granted call made")
        finally:
            await stopped(stop, task)
    finally:
        await server.stop()
    assert calls() == granted


async def test_unreadable_objects_stay_in_the_logs_until_fixed(
    apiserver: ApiServer, tmp_path
) -> None:
    """An object left out, and one read with a warning (a PriorityClass whose toleration
    policy is not an integer: no toleration, as the plugin reads it), are logged at
    once and again at every full relist; once fixed, no more."""
    apiserver.put(node("node-0"))
    apiserver.put(pod("bad", "node-0", cpu="lots"))
    odd = priority_class("low", 10)
    odd["metadata"]["annotations"] = {
        "preemption-toleration.scheduling.x-k8s.io/toleration-seconds": "an hour"
    }
    apiserver.put(odd)
    with capture_logs() as logs:
        _source, published, stop, task = await running(apiserver, tmp_path, relist_interval=0.3)
        try:
            await published.until(lambda: len(published.batches) >= 3, timeout=15)
            assert "PriorityClass/low" in published.live  # kept, without a toleration

            def said(event: str) -> int:
                return sum(1 for e in logs if e.get("event") == event)

            assert said("object rejected; left out of the state") >= 2
            assert said("object read with a warning") >= 2
            apiserver.put(pod("bad", "node-0", cpu="1"))
            await published.until(lambda: "Pod/team-a/bad" in published.live, timeout=15)
            fixed_at = said("object rejected; left out of the state")
            seen = len(published.batches)
            await published.until(lambda: len(published.batches) >= seen + 2, timeout=15)
            assert said("object rejected; left out of the state") == fixed_at
        finally:
            await stopped(stop, task)


async def test_kueue_manager_config_map_is_read_for_fair_sharing(
    apiserver: ApiServer, tmp_path
) -> None:
    """The kueue-manager-config ConfigMap of kueue-system is listed and watched (with a
    field selector: no other ConfigMap is read), and its Configuration travels on STATE."""
    apiserver.put(node("node-0"))
    config = "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nfairSharing: {}\n"
    apiserver.put(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
            "data": {"controller_manager_config.yaml": config},
        }
    )
    apiserver.put(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "other", "namespace": "kueue-system"},
            "data": {"secret-ish": "not for us"},
        }
    )
    _source, published, stop, task = await running(apiserver, tmp_path)
    try:
        await published.until(lambda: "KueueConfiguration/kueue" in published.live)
        assert published.live["KueueConfiguration/kueue"].fair_sharing is True
        lists = [r for m, r, _b in apiserver.requests if m == "GET" and "configmaps" in r]
        assert lists
        assert all("/namespaces/kueue-system/configmaps" in r for r in lists)
        # Turned off in place: the watch carries the change.
        off = "apiVersion: config.kueue.x-k8s.io/v1beta1\nkind: Configuration\n"
        cm = apiserver.get("", "configmaps", "kueue-system", "kueue-manager-config")
        assert cm is not None
        cm["data"]["controller_manager_config.yaml"] = off
        apiserver.put(cm)
        await published.until(lambda: not published.live["KueueConfiguration/kueue"].fair_sharing)
    finally:
        await stopped(stop, task)


async def test_a_forbidden_resource_does_not_hold_back_the_rest(
    apiserver: ApiServer, tmp_path
) -> None:
    """Without the Role for Kueue's ConfigMap (403 on its list), the rest of the cluster is
    published anyway."""
    apiserver.put(node("node-0"))
    apiserver.fail("GET", "/configmaps", 403, count=1000)
    _source, published, stop, task = await running(apiserver, tmp_path)
    try:
        await published.until(lambda: "Node/node-0" in published.live)
    finally:
        await stopped(stop, task)
