"""The source and the sink when the API server or the network misbehaves, and when the
cluster changed under a plan: regressions of what a review found."""

from __future__ import annotations

import asyncio

import pytest

from gangpreempt.config import Settings
from gangpreempt.errors import Transient
from services.actuator.kubernetes import KubeSink
from services.ingest.kubernetes import KubeSource
from services.kube.access import ACTUATOR_ANY
from services.kube.client import KubeApi
from tests.kube.apiserver import ApiServer
from tests.kube.objects import job, node, pdb, pod, pod_group
from tests.kube.sinking import Replica, job_with_pods, request, uid_of, victim_pods
from tests.waiting import until

pytestmark = pytest.mark.kube


async def test_source_publishes_after_a_list_cut_mid_body(apiserver: ApiServer, tmp_path) -> None:
    apiserver.put(node("n1"))
    apiserver.put(pod("p", "n1"))
    apiserver.cuts.append(["GET", "/api/v1/pods?limit", 1])  # the first pod list only
    source = KubeSource(Settings(kubeconfig=apiserver.kubeconfig(str(tmp_path / "k"))))
    stop = asyncio.Event()
    published: list[list[str]] = []

    async def publish(upserts, deletes) -> None:
        published.append([type(o).__name__ for o in upserts])

    task = asyncio.create_task(source.run(stop, publish))
    try:
        await asyncio.wait_for(source.published.wait(), 10)  # retried after a backoff
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
    assert "Pod" in published[0]


async def test_watch_carries_objects_bigger_than_a_stream_buffer(
    apiserver: ApiServer, tmp_path
) -> None:
    apiserver.put(node("n1"))
    source = KubeSource(Settings(kubeconfig=apiserver.kubeconfig(str(tmp_path / "k"))))
    stop = asyncio.Event()
    seen: set[str] = set()

    async def publish(upserts, deletes) -> None:
        seen.update(getattr(o, "name", "") for o in upserts)

    task = asyncio.create_task(source.run(stop, publish))
    try:
        await asyncio.wait_for(source.published.wait(), 10)
        lists = source.store.relists
        big = pod("big", "n1")
        big["metadata"]["annotations"] = {
            "notes": "x" * 1_400_000
        }  # a 1.4 MB watch line (objects go up to 1.5 MB)
        apiserver.put(big)
        for _ in range(100):
            if "big" in seen:
                break
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
    assert "big" in seen
    assert source.store.relists == lists  # came by the watch, not by a relist after an error


async def test_an_eviction_whose_answer_is_cut_is_retried(apiserver: ApiServer, sink) -> None:
    s, replica = sink
    apiserver.put(node("n1"))
    apiserver.put(pod("p", "n1"))
    replica.refresh()
    apiserver.cuts.append(["GET", "/namespaces/team-a/pods/p", 1])
    reply = await s.evict(request("Pod/team-a/p", uid_of(apiserver, "", "pods", "team-a", "p")))
    assert reply.ok
    assert reply.applied


async def test_a_live_read_whose_answer_is_cut_is_transient(apiserver: ApiServer, sink) -> None:
    s, replica = sink
    apiserver.put(node("n1"))
    apiserver.put(pod("p", "n1"))
    replica.refresh()
    apiserver.cuts.append(["GET", "/namespaces/team-a/pods/p", 1])
    with pytest.raises(Transient):  # the actuator drops the plan on it
        await s.read(["Pod/team-a/p"])


async def test_unwritable_events_do_not_fail_the_eviction(apiserver: ApiServer, sink) -> None:
    s, replica = sink
    apiserver.pod_termination = 30.0
    apiserver.put(node("n1"))
    apiserver.put(pod("p", "n1"))
    replica.refresh()
    apiserver.dropped.append(("POST", "/events"))
    reply = await s.evict(request("Pod/team-a/p", uid_of(apiserver, "", "pods", "team-a", "p")))
    assert reply.ok
    assert reply.applied
    assert apiserver.get("", "pods", "team-a", "p")["metadata"]["deletionTimestamp"]


async def test_a_job_replaced_under_its_name_is_not_suspended(apiserver: ApiServer, sink) -> None:
    s, replica = sink
    apiserver.put(node("n1"))
    old = job_with_pods(apiserver, 2, **{"scheduling.x-k8s.io/pod-group": "trainer"})
    apiserver.put(pod_group("trainer", 2))
    replica.refresh()
    pods, uids = victim_pods(apiserver, "trainer-0", "trainer-1")

    def replace_job() -> None:  # deleted with --cascade=orphan, then created again
        apiserver.delete_now("batch", "jobs", "team-a", "trainer")
        apiserver.put(job("trainer"))

    apiserver.before.append(("GET", "/jobs/trainer", replace_job))
    reply = await s.evict(request("PodGroup/team-a/trainer", pods=pods, pod_uids=uids))
    new = apiserver.get("batch", "jobs", "team-a", "trainer")
    assert new["metadata"]["uid"] != old
    assert new["spec"]["suspend"] is False
    assert not reply.ok
    assert "replaced" in reply.detail


async def test_orphaned_job_pods_are_evicted_one_by_one(apiserver: ApiServer, sink) -> None:
    s, replica = sink
    apiserver.put(node("n1"))
    job_with_pods(apiserver, 2)
    replica.refresh()
    apiserver.delete_now("batch", "jobs", "team-a", "trainer")  # --cascade=orphan
    pods, uids = victim_pods(apiserver, "trainer-0", "trainer-1")
    reply = await s.evict(request("PodGroup/team-a/trainer", pods=pods, pod_uids=uids))
    assert reply.ok
    deleted = sorted(p.rsplit("/", 1)[1] for m, p, _ in apiserver.requests if m == "DELETE")
    assert deleted == ["trainer-0", "trainer-1"]


async def test_eviction_mode_never_suspends_a_job_past_its_pdb(apiserver: ApiServer, sink) -> None:
    s, replica = sink
    apiserver.put(node("n1"))
    job_with_pods(apiserver, 2, app="train")
    apiserver.put(pdb("protect-training", 0, app="train"))
    replica.refresh()
    pods, uids = victim_pods(apiserver, "trainer-0", "trainer-1")
    task = asyncio.create_task(
        s.evict(request("PodGroup/team-a/trainer", mode="eviction", pods=pods, pod_uids=uids))
    )
    # It asks (and is refused, 429) again and again; the Job is never suspended meanwhile.
    await until(lambda: apiserver.calls.count(("create", "", "pods/eviction")) >= 2)
    assert apiserver.get("batch", "jobs", "team-a", "trainer")["spec"]["suspend"] is False
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_gang_with_a_replaced_pod_is_not_half_evicted(apiserver: ApiServer, sink) -> None:
    s, replica = sink
    apiserver.put(node("n1"))
    for i in range(2):
        apiserver.put(pod(f"g-{i}", "n1", **{"scheduling.x-k8s.io/pod-group": "g"}))
    apiserver.put(pod_group("g", 2))
    replica.refresh()
    pods, uids = victim_pods(apiserver, "g-0", "g-1")
    apiserver.delete_now("", "pods", "team-a", "g-1")  # g-1 re-created since the plan
    apiserver.put(pod("g-1", "n1", **{"scheduling.x-k8s.io/pod-group": "g"}))
    reply = await s.evict(request("PodGroup/team-a/g", pods=pods, pod_uids=uids))
    assert not reply.ok
    assert reply.detail.startswith("stale")
    assert [r for r in apiserver.requests if r[0] in ("DELETE", "PATCH")] == []


async def test_a_fenced_actuator_writes_nothing_more(apiserver: ApiServer, tmp_path) -> None:
    """Once the actuator's lease is lost (another actuator may be acting), the sink
    refuses new victims and stops between the pods of a gang (one write at a time here:
    with more in flight, those already past their check still land)."""
    apiserver.put(node("n1"))
    for i in range(3):
        apiserver.put(pod(f"g-{i}", "n1", **{"scheduling.x-k8s.io/pod-group": "g"}))
    apiserver.put(pod_group("g", 3))
    apiserver.put(pod("lone", "n1"))
    replica = Replica(apiserver)
    replica.refresh()
    lost = asyncio.Event()
    config = apiserver.kubeconfig(str(tmp_path / "kubeconfig"))
    async with KubeApi.connect(Settings(kubeconfig=config), "actuator", ACTUATOR_ANY) as api:
        s = await KubeSink.create(api, replica, "delete", fenced=lost.is_set, concurrency=1)  # type: ignore[arg-type]
        pods, uids = victim_pods(apiserver, "g-0", "g-1", "g-2")
        apiserver.before.append(("DELETE", "/pods/g-0", lost.set))  # lost during the gang
        reply = await s.evict(request("PodGroup/team-a/g", pods=pods, pod_uids=uids))
        assert not reply.ok
        assert reply.detail.startswith("fenced")
        deleted = [p.rsplit("/", 1)[1] for m, p, _ in apiserver.requests if m == "DELETE"]
        assert deleted == ["g-0"]
        lone_uid = uid_of(apiserver, "", "pods", "team-a", "lone")
        apiserver.requests.clear()
        again = await s.evict(request("Pod/team-a/lone", lone_uid))
        assert not again.ok
        assert apiserver.requests == []  # not even a read
