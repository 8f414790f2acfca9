"""The kubernetes sink against an API server over HTTP, through kubernetes-asyncio: one
actuation per victim kind, preconditions, retries on 409 / 429 / 5xx, idempotence,
Events naming the plan, and live reads."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator

import pytest

from gangpreempt.config import Settings
from gangpreempt.model.pods import SOFT_EVICTION_LABEL
from services.actuator.kubernetes import KubeSink
from services.kube.access import ACTUATOR_ANY
from services.kube.client import KubeApi
from tests.kube import test_checks as checks
from tests.kube.apiserver import ApiServer
from tests.kube.objects import kueue_workload, node, pdb, pod, pod_group, priority_class
from tests.kube.sinking import (
    Replica,
    events,
    job_with_pods,
    request,
    uid_of,
    victim_pods,
    writes,
)
from tests.waiting import until

pytestmark = pytest.mark.kube


# every call the actuator makes in one configuration or another (the scenarios try each)
GRANTED = {(r.group, r.plural, v) for r, verbs in ACTUATOR_ANY.items() for v in verbs}


@pytest.fixture(autouse=True)
async def calls_are_granted(apiserver: ApiServer) -> AsyncIterator[None]:
    """After each test: every call the sink made is one the actuator's role grants."""
    yield
    used = {(g, res, verb) for verb, g, res in apiserver.calls}
    assert used <= GRANTED, used - GRANTED


async def test_kueue_workload_is_evicted_the_way_kueue_does(apiserver: ApiServer, sink) -> None:
    s, replica = sink
    apiserver.put(kueue_workload("victim"))
    apiserver.put(kueue_workload("big", admitted=False))
    replica.refresh()
    uid = uid_of(apiserver, "kueue.x-k8s.io", "workloads", "team-a", "victim")
    rv = apiserver.get("kueue.x-k8s.io", "workloads", "team-a", "victim")["metadata"][
        "resourceVersion"
    ]
    req = request("Workload/team-a/victim", uid, "kueue", preemptor="Workload/team-a/big")
    reply = await s.evict(req)
    assert reply.ok
    assert reply.applied
    wl = apiserver.get("kueue.x-k8s.io", "workloads", "team-a", "victim")
    conditions = {c["type"]: c for c in wl["status"]["conditions"]}
    assert conditions["Evicted"]["status"] == "True"
    assert conditions["Evicted"]["reason"] == "Preempted"
    assert conditions["Preempted"]["reason"] == "InClusterQueue"
    assert "plan-7" in conditions["Evicted"]["message"]
    assert {"QuotaReserved", "Admitted"} <= set(conditions)  # the others are kept
    (patch,) = [r for r in apiserver.requests if r[0] == "PATCH"]
    assert patch[1].endswith("/workloads/victim/status")
    assert patch[2]["metadata"] == {"uid": uid, "resourceVersion": rv}
    victim_events = [e for e in events(apiserver) if e["involvedObject"]["name"] == "victim"]
    preemptor_events = [e for e in events(apiserver) if e["involvedObject"]["name"] == "big"]
    assert [e["reason"] for e in victim_events] == ["Preempted"]
    assert "plan-7" in victim_events[0]["message"]
    assert [e["reason"] for e in preemptor_events] == ["PreemptionActuated"]
    assert "plan-7" in preemptor_events[0]["message"]
    # Idempotent: a repeat (an actuator restarted after the write) writes nothing more.
    again = await s.evict(req)
    assert again.ok
    assert not again.applied
    assert len([r for r in apiserver.requests if r[0] == "PATCH"]) == 1
    assert len(events(apiserver)) == 2


async def test_conflict_on_a_stale_resource_version_rereads_and_keeps_the_other_write(
    apiserver: ApiServer, sink
) -> None:
    s, replica = sink
    apiserver.put(kueue_workload("victim"))
    replica.refresh()
    uid = uid_of(apiserver, "kueue.x-k8s.io", "workloads", "team-a", "victim")

    def concurrent_writer() -> None:  # Kueue updates the status between our read and write
        wl = apiserver.get("kueue.x-k8s.io", "workloads", "team-a", "victim")
        wl = copy.deepcopy(wl)
        wl["status"]["conditions"].append(
            {
                "type": "PodsReady",
                "status": "True",
                "reason": "PodsReady",
                "message": "",
                "lastTransitionTime": "2026-11-01T00:00:00Z",
            }
        )
        apiserver.put(wl)

    apiserver.before.append(("PATCH", "/workloads/victim/status", concurrent_writer))
    reply = await s.evict(request("Workload/team-a/victim", uid, "kueue"))
    assert reply.ok
    patches = [r for r in apiserver.requests if r[0] == "PATCH"]
    assert len(patches) == 2  # 409 on the stale version, then again after a re-read
    assert (
        patches[0][2]["metadata"]["resourceVersion"] != patches[1][2]["metadata"]["resourceVersion"]
    )
    wl = apiserver.get("kueue.x-k8s.io", "workloads", "team-a", "victim")
    assert {"Evicted", "Preempted", "PodsReady"} <= {c["type"] for c in wl["status"]["conditions"]}


async def test_a_replaced_object_is_never_touched(apiserver: ApiServer, sink) -> None:
    s, replica = sink
    apiserver.put(kueue_workload("victim"))
    apiserver.put(node("n1"))
    apiserver.put(pod("p", "n1"))
    replica.refresh()
    wl_uid = uid_of(apiserver, "kueue.x-k8s.io", "workloads", "team-a", "victim")
    pod_uid = uid_of(apiserver, "", "pods", "team-a", "p")
    # Both deleted and created again under the same names: new uids.
    apiserver.delete_now("kueue.x-k8s.io", "workloads", "team-a", "victim")
    apiserver.put(kueue_workload("victim"))
    apiserver.delete_now("", "pods", "team-a", "p")
    apiserver.put(pod("p", "n1"))
    r1 = await s.evict(request("Workload/team-a/victim", wl_uid, "kueue"))
    r2 = await s.evict(request("Pod/team-a/p", pod_uid))
    assert not r1.ok
    assert "replaced" in r1.detail
    assert not r2.ok
    assert "replaced" in r2.detail
    assert writes(apiserver) == []
    assert events(apiserver) == []


async def test_eviction_refused_by_a_pdb_with_429_is_retried_until_allowed(
    apiserver: ApiServer, sink
) -> None:
    s, replica = sink
    apiserver.put(node("n1"))
    apiserver.put(pod("guarded", "n1", app="db"))
    apiserver.put(pdb("db", 0, app="db"))
    replica.refresh()
    uid = uid_of(apiserver, "", "pods", "team-a", "guarded")
    task = asyncio.create_task(s.evict(request("Pod/team-a/guarded", uid, "eviction")))
    for _ in range(100):
        if sum(1 for r in apiserver.calls if r == ("create", "", "pods/eviction")) >= 2:
            break
        await asyncio.sleep(0.05)
    assert not task.done()  # refused (429) twice, still trying
    budget = copy.deepcopy(apiserver.get("policy", "poddisruptionbudgets", "team-a", "db"))
    budget["status"]["disruptionsAllowed"] = 1  # another pod became healthy
    apiserver.put(budget)
    reply = await asyncio.wait_for(task, 10)
    assert reply.ok
    assert reply.applied
    evicted = apiserver.get("", "pods", "team-a", "guarded")
    assert evicted is None or evicted["metadata"].get("deletionTimestamp")
    assert (
        apiserver.get("policy", "poddisruptionbudgets", "team-a", "db")["status"][
            "disruptionsAllowed"
        ]
        == 0
    )
    posts = [b for m, p, b in apiserver.requests if m == "POST" and p.endswith("/eviction")]
    assert posts[-1]["deleteOptions"]["preconditions"]["uid"] == uid


async def test_delete_uses_the_pods_grace_period_and_preconditions(
    apiserver: ApiServer, sink
) -> None:
    s, replica = sink
    apiserver.pod_termination = 60.0  # the kubelet takes its time
    apiserver.put(node("n1"))
    apiserver.put(pod("slow", "n1", grace=45))
    replica.refresh()
    live = apiserver.get("", "pods", "team-a", "slow")
    uid, rv = live["metadata"]["uid"], live["metadata"]["resourceVersion"]
    reply = await s.evict(request("Pod/team-a/slow", uid))
    assert reply.ok
    # First the DisruptionTarget condition, as kube-scheduler sets it, then the delete,
    # each with the uid and the resourceVersion it was checked against.
    (mark,) = [r for r in apiserver.requests if r[0] == "PATCH"]
    (delete,) = [r for r in apiserver.requests if r[0] == "DELETE"]
    assert mark[1].endswith("/pods/slow/status")
    assert mark[2]["metadata"] == {"uid": uid, "resourceVersion": rv}
    assert delete[2]["gracePeriodSeconds"] == 45
    marked_rv = str(int(rv) + 1)
    assert delete[2]["preconditions"] == {"uid": uid, "resourceVersion": marked_rv}
    gone = apiserver.get("", "pods", "team-a", "slow")
    assert gone["metadata"]["deletionTimestamp"]
    (target,) = [c for c in gone["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert target["reason"] == "PreemptionByScheduler"
    assert target["status"] == "True"
    # Terminating already: a repeat sends nothing.
    again = await s.evict(request("Pod/team-a/slow", uid))
    assert not again.applied
    assert len([r for r in apiserver.requests if r[0] == "DELETE"]) == 1
    (victim_event,) = [e for e in events(apiserver) if e["involvedObject"]["name"] == "slow"]
    assert victim_event["involvedObject"]["uid"] == uid
    assert "plan-7" in victim_event["message"]


async def test_5xx_and_connection_trouble_are_retried(apiserver: ApiServer, sink) -> None:
    s, replica = sink
    apiserver.put(node("n1"))
    apiserver.put(pod("p", "n1"))
    replica.refresh()
    uid = uid_of(apiserver, "", "pods", "team-a", "p")
    apiserver.fail("DELETE", "/pods/p", 503, count=2)
    apiserver.fail("GET", "/pods/p", 500, count=1)
    reply = await s.evict(request("Pod/team-a/p", uid))
    assert reply.ok
    assert apiserver.get("", "pods", "team-a", "p") is None or apiserver.get(
        "", "pods", "team-a", "p"
    )["metadata"].get("deletionTimestamp")
    assert len([r for r in apiserver.requests if r[0] == "DELETE"]) == 3


async def test_a_forbidden_write_fails_without_retrying(apiserver: ApiServer, sink) -> None:
    s, replica = sink
    apiserver.put(node("n1"))
    apiserver.put(pod("p", "n1"))
    replica.refresh()
    apiserver.fail("DELETE", "/pods/p", 403, count=5)
    reply = await s.evict(request("Pod/team-a/p", uid_of(apiserver, "", "pods", "team-a", "p")))
    assert not reply.ok
    assert "403" in reply.detail
    assert len([r for r in apiserver.requests if r[0] == "DELETE"]) == 1


async def test_soft_eviction_labels_the_pod(apiserver: ApiServer, sink) -> None:
    s, replica = sink
    apiserver.put(node("n1"))
    apiserver.put(pod("p", "n1"))
    replica.refresh()
    uid = uid_of(apiserver, "", "pods", "team-a", "p")
    reply = await s.evict(request("Pod/team-a/p", uid, "soft-eviction"))
    assert reply.ok
    live = apiserver.get("", "pods", "team-a", "p")
    assert live["metadata"]["labels"][SOFT_EVICTION_LABEL] == "plan-plan-7"
    assert "deletionTimestamp" not in live["metadata"]  # the operator deletes it
    assert not (await s.evict(request("Pod/team-a/p", uid, "soft-eviction"))).applied


async def test_a_job_whose_pods_are_all_victims_is_suspended(apiserver: ApiServer, sink) -> None:
    s, replica = sink
    apiserver.put(node("n1"))
    juid = job_with_pods(apiserver, 2, **{"scheduling.x-k8s.io/pod-group": "trainer"})
    apiserver.put(pod_group("trainer", 2))
    replica.refresh()
    pods, uids = victim_pods(apiserver, "trainer-0", "trainer-1")
    reply = await s.evict(request("PodGroup/team-a/trainer", "", pods=pods, pod_uids=uids))
    assert reply.ok
    assert apiserver.get("batch", "jobs", "team-a", "trainer")["spec"]["suspend"] is True
    assert [r for r in apiserver.requests if r[0] == "DELETE"] == []  # the Job controller does it
    (patch,) = [r for r in apiserver.requests if r[0] == "PATCH"]
    assert patch[2]["metadata"]["uid"] == juid


async def test_a_job_with_other_running_pods_loses_only_the_victims(
    apiserver: ApiServer, sink
) -> None:
    s, replica = sink
    apiserver.put(node("n1"))
    job_with_pods(apiserver, 3)
    replica.refresh()
    uid = uid_of(apiserver, "", "pods", "team-a", "trainer-0")
    reply = await s.evict(request("Pod/team-a/trainer-0", uid))
    assert reply.ok
    assert apiserver.get("batch", "jobs", "team-a", "trainer")["spec"]["suspend"] is False
    assert [p for m, p, _ in apiserver.requests if m == "DELETE"] == [
        "/api/v1/namespaces/team-a/pods/trainer-0"
    ]


async def test_live_reads(apiserver: ApiServer, sink) -> None:
    s, replica = sink
    apiserver.put(priority_class("high", 1000))
    apiserver.put(node("n1"))
    apiserver.put(pod("lone", "n1"))
    for i in range(2):
        apiserver.put(pod(f"g-{i}", **{"scheduling.x-k8s.io/pod-group": "g"}))
    apiserver.put(pod_group("g", 2))
    apiserver.put(kueue_workload("wl"))
    replica.refresh()
    apiserver.delete_now("", "pods", "team-a", "g-1")
    live = await s.read(
        ["Pod/team-a/lone", "PodGroup/team-a/g", "Workload/team-a/wl", "Pod/team-a/gone"]
    )
    lone = live["Pod/team-a/lone"]
    assert lone.exists
    assert lone.holds_quota
    assert lone.uid == uid_of(apiserver, "", "pods", "team-a", "lone")
    assert live["PodGroup/team-a/g"].exists
    assert live["PodGroup/team-a/g"].pending
    assert live["Workload/team-a/wl"].holds_quota
    assert (
        live["Workload/team-a/wl"].resource_version
        == apiserver.get("kueue.x-k8s.io", "workloads", "team-a", "wl")["metadata"][
            "resourceVersion"
        ]
    )
    assert not live["Pod/team-a/gone"].exists


async def test_the_access_table_is_what_the_sink_calls(tmp_path) -> None:
    """The actuator's grants are exactly the calls the scenarios above make, so the RBAC
    role derived from the table grants nothing unused."""
    scenarios = [
        test_kueue_workload_is_evicted_the_way_kueue_does,
        test_eviction_refused_by_a_pdb_with_429_is_retried_until_allowed,
        test_delete_uses_the_pods_grace_period_and_preconditions,
        test_soft_eviction_labels_the_pod,
        test_a_job_whose_pods_are_all_victims_is_suspended,
        test_live_reads,
        checks.test_gangpreempts_admission_checks_are_marked_active,
        checks.test_ready_is_written_with_a_label_for_each_pod_set,
    ]
    used: set[tuple[str, str, str]] = set()
    for i, scenario in enumerate(scenarios):
        server = ApiServer()
        await server.start()
        try:
            config = server.kubeconfig(str(tmp_path / f"kubeconfig-{i}"))
            replica = Replica(server)
            async with KubeApi.connect(
                Settings(kubeconfig=config), "actuator", ACTUATOR_ANY
            ) as api:
                s = await KubeSink.create(api, replica, "delete")  # type: ignore[arg-type]
                await scenario(server, (s, replica))
        finally:
            await server.stop()
        used |= {(g, res, verb) for verb, g, res in server.calls}
    assert used == GRANTED, GRANTED ^ used


async def test_a_big_gang_is_read_with_one_list(apiserver: ApiServer, sink) -> None:
    s, replica = sink
    for i in range(12):
        apiserver.put(pod(f"w-{i}", **{"scheduling.x-k8s.io/pod-group": "wide"}))
    apiserver.put(pod_group("wide", 12))
    apiserver.put(pod("other", ns="elsewhere"))
    replica.refresh()
    apiserver.delete_now("", "pods", "team-a", "w-3")
    apiserver.requests.clear()
    live = await s.read(["PodGroup/team-a/wide", "Pod/elsewhere/other"])
    assert live["PodGroup/team-a/wide"].pending
    assert live["Pod/elsewhere/other"].exists
    gets = [p for m, p, _ in apiserver.requests if m == "GET"]
    assert gets == ["/api/v1/namespaces/elsewhere/pods/other", "/api/v1/namespaces/team-a/pods"]


async def test_a_gangs_pods_are_evicted_concurrently_within_the_bound(
    apiserver: ApiServer, tmp_path
) -> None:
    """A gang of 10 pods with at most 4 writes in flight: the API server holds every
    eviction until the test releases them, and sees 4 waiting at once, never more; then
    all 10 are evicted, each once."""
    for i in range(10):
        apiserver.put(pod(f"g-{i}", "n1", **{"scheduling.x-k8s.io/pod-group": "g"}))
    apiserver.put(node("n1"))
    apiserver.put(pod_group("g", 10))
    replica = Replica(apiserver)
    replica.refresh()
    pods, uids = victim_pods(apiserver, *(f"g-{i}" for i in range(10)))
    apiserver.holds.append(("POST", "/eviction"))
    config = apiserver.kubeconfig(str(tmp_path / "kubeconfig"))
    async with KubeApi.connect(Settings(kubeconfig=config), "actuator", ACTUATOR_ANY) as api:
        s = await KubeSink.create(api, replica, "eviction", concurrency=4)  # type: ignore[arg-type]
        task = asyncio.create_task(
            s.evict(request("PodGroup/team-a/g", mode="eviction", pods=pods, pod_uids=uids))
        )
        await until(lambda: apiserver.held == 4, 30, "4 evictions in flight")
        with pytest.raises(AssertionError, match="timed out"):  # no fifth while they wait
            await until(lambda: apiserver.held > 4, 0.5, "a fifth eviction")
        apiserver.release.set()
        reply = await asyncio.wait_for(task, 30)
    assert reply.ok
    assert apiserver.most_held == 4
    posts = sorted(p for m, p, _ in apiserver.requests if m == "POST" and p.endswith("/eviction"))
    assert posts == sorted(f"/api/v1/namespaces/team-a/pods/g-{i}/eviction" for i in range(10))
