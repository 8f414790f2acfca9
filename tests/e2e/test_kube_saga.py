"""The saga against a Kubernetes API server over HTTP: ingest lists and watches it
(``GANGPREEMPT_SOURCE=kubernetes``), the actuator writes to it
(``GANGPREEMPT_SINK=kubernetes``); the four services as OS processes on a real
nats-server. The test plays the parts of the kubelet and of Kueue's controllers."""

from __future__ import annotations

import asyncio
import copy
import os
import signal
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from nats.aio.client import Client

from gangpreempt import events
from gangpreempt.bus import Publisher, Topology
from gangpreempt.model import kinds
from gangpreempt.model.pods import Pod
from tests.e2e.harness import Services, decisions, of, read_stream, state_has, wait_for
from tests.e2e.scenarios import gpu_cluster, kueue_gpu_cluster
from tests.kube.apiserver import CORE, KUEUE, PLUGINS, ApiServer, Kind
from tests.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.timeout(90)]

KUEUE_V1BETA2 = [Kind(k.group, "v1beta2", k.plural, k.kind, k.namespaced, k.status) for k in KUEUE]


@pytest.fixture
async def apiserver() -> AsyncIterator[ApiServer]:
    server = ApiServer(kinds=CORE + KUEUE_V1BETA2 + PLUGINS)
    server.pod_termination = 0.3
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def load(server: ApiServer, *files: Path) -> None:
    for f in files:
        for doc in yaml.safe_load_all(f.read_text()):
            if doc:
                doc.get("metadata", {}).pop("uid", None)
                server.put(doc)


def kube_env(server: ApiServer, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "GANGPREEMPT_SOURCE": "kubernetes",
        "GANGPREEMPT_SINK": "kubernetes",
        "GANGPREEMPT_KUBECONFIG": server.kubeconfig(str(tmp_path / "kubeconfig")),
        "GANGPREEMPT_RELIST_INTERVAL": "30",
        **extra,
    }


def pods_of(server: ApiServer, prefix: str) -> list[str]:
    return sorted(n for (_, n) in server.objects[("", "pods")] if n.startswith(prefix))


async def test_a_gang_preempts_a_gang_through_the_api_server(
    nc: Client,
    topology: Topology,
    services: Services,
    scenario_dir: Path,
    apiserver: ApiServer,
    tmp_path: Path,
) -> None:
    gpu_cluster(scenario_dir)
    load(apiserver, scenario_dir / "cluster.yaml")
    services.start(extra=kube_env(apiserver, tmp_path, GANGPREEMPT_POD_EVICTION="delete"))
    services.wait_started()
    await state_has(nc, topology, "Pod", "ml/scavenger-1")  # ingest listed the cluster
    load(apiserver, scenario_dir / "train.yaml")  # the gang arrives
    train = "PodGroup/ml/train"
    evs = await wait_for(
        nc, topology, lambda e: bool(of(e, events.PlanActuated, preemptor=train)), what="actuation"
    )
    (proposal,) = of(evs, events.PlanProposed, preemptor=train)
    assert [v.object for v in proposal.victims] == ["PodGroup/ml/scavenger"]
    # The victim pods were deleted with preconditions, then went away (the "kubelet").
    deletes = [(p, b) for m, p, b in apiserver.requests if m == "DELETE"]
    assert sorted(p.rsplit("/", 1)[1] for p, _ in deletes) == ["scavenger-0", "scavenger-1"]
    assert all(b["preconditions"]["uid"] for _, b in deletes)
    await until(lambda: not pods_of(apiserver, "scavenger"), 30, "the victim pods gone")
    assert pods_of(apiserver, "train") == ["train-0", "train-1"]  # untouched
    # Events name the plan on each victim pod and on the preemptor.
    evts = list(apiserver.objects[("", "events")].values())
    plan = proposal.plan_id
    on_victims = sorted(e["involvedObject"]["name"] for e in evts if e["reason"] == "Preempted")
    assert on_victims == ["scavenger-0", "scavenger-1"]
    # ...and the rule that made them victims, in a few words (as explain says it).
    for e in evts:
        if e["reason"] == "Preempted":
            assert "below" in e["message"]
            assert "room on the nodes is needed" in e["message"]
    (on_preemptor,) = [e for e in evts if e["involvedObject"]["name"] == "train"]
    assert plan in on_preemptor["message"]
    # Once ingest saw the victims gone, quota admitted the gang with its placement.
    evs = await wait_for(
        nc,
        topology,
        lambda e: any(a.placement for a in of(e, events.Admitted, workload=train)),
        what="the gang admitted with its placement",
    )
    # Nothing else was touched: the only other writes are the victims' DisruptionTarget.
    patched = sorted(p for m, p, _ in apiserver.requests if m == "PATCH")
    assert patched == [
        "/api/v1/namespaces/ml/pods/scavenger-0/status",
        "/api/v1/namespaces/ml/pods/scavenger-1/status",
    ]


async def test_a_kueue_workload_is_evicted_through_its_conditions(
    nc: Client,
    topology: Topology,
    services: Services,
    scenario_dir: Path,
    apiserver: ApiServer,
    tmp_path: Path,
) -> None:
    kueue_gpu_cluster(scenario_dir)
    load(apiserver, scenario_dir / "cluster.yaml")
    services.start(extra=kube_env(apiserver, tmp_path))
    services.wait_started()
    await state_has(nc, topology, "Pod", "default/scratch")  # ingest listed the cluster

    def kueue_stops_evicted_workloads() -> None:
        """Kueue's part: an Evicted workload's job stops and its quota is released."""
        wl = apiserver.get("kueue.x-k8s.io", "workloads", "default", "low")
        if wl is None:
            return
        conditions = {c["type"]: c for c in (wl.get("status") or {}).get("conditions") or []}
        if conditions.get("Evicted", {}).get("status") == "True" and wl["status"].get("admission"):
            if apiserver.get("", "pods", "default", "low-0") is not None:
                apiserver.delete_now("", "pods", "default", "low-0")
            new = copy.deepcopy(wl)
            new["status"].pop("admission")
            for c in new["status"]["conditions"]:
                if c["type"] == "QuotaReserved":
                    c["status"] = "False"
            apiserver.put(new)

    load(apiserver, scenario_dir / "train.yaml")
    train = "Workload/default/train"

    async def kueue_loop() -> None:
        while True:
            kueue_stops_evicted_workloads()
            await asyncio.sleep(0.1)

    kueue = asyncio.create_task(kueue_loop())
    try:
        evs = await wait_for(
            nc, topology, lambda e: bool(of(e, events.Admitted, workload=train)), what="admitted"
        )
    finally:
        kueue.cancel()
    (proposal,) = of(evs, events.PlanProposed, preemptor=train)
    assert sorted(v.object for v in proposal.victims) == [
        "Pod/default/scratch",
        "Workload/default/low",
    ]
    status_patches = [
        b for m, p, b in apiserver.requests if m == "PATCH" and p.endswith("/low/status")
    ]
    (patch,) = status_patches
    conditions = {c["type"]: c for c in patch["status"]["conditions"]}
    assert conditions["Evicted"]["reason"] == "Preempted"
    assert conditions["Preempted"]["reason"] == "InClusterQueue"
    assert "same ClusterQueue" in conditions["Preempted"]["message"]
    assert patch["metadata"]["uid"]
    assert patch["metadata"]["resourceVersion"]
    # The pod outside Kueue went the pod way (the Eviction API, the default), the
    # workload's pod was left to Kueue; nothing was deleted or patched on a pod.
    evicted = [
        p.rsplit("/", 2)[1] for m, p, _ in apiserver.requests if m == "POST" and "/eviction" in p
    ]
    assert evicted == ["scratch"]
    assert not [p for m, p, _ in apiserver.requests if m == "DELETE"]
    assert not [p for m, p, _ in apiserver.requests if m == "PATCH" and "/pods/" in p]
    evs = await decisions(nc, topology)
    assert not of(evs, events.PlanDropped, preemptor=train)


async def test_up_runs_the_saga_against_a_cluster(
    scenario_dir: Path, apiserver: ApiServer, tmp_path: Path
) -> None:
    """`gangpreempt up --source kubernetes --sink kubernetes --kubeconfig FILE`: the
    embedded default against a cluster, as the README gives it."""
    gpu_cluster(scenario_dir)
    load(apiserver, scenario_dir / "cluster.yaml", scenario_dir / "train.yaml")
    config = apiserver.kubeconfig(str(tmp_path / "kubeconfig"))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gangpreempt.cli",
        "up",
        "--source",
        "kubernetes",
        "--sink",
        "kubernetes",
        "--kubeconfig",
        config,
        "--store",
        str(tmp_path / "store"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "GANGPREEMPT_CYCLE_DELAY": "0.02", "GANGPREEMPT_PLAN_TIMEOUT": "5"},
    )
    try:
        for _ in range(600):
            if not pods_of(apiserver, "scavenger"):
                break
            await asyncio.sleep(0.1)
        assert pods_of(apiserver, "scavenger") == []
        assert pods_of(apiserver, "train") == ["train-0", "train-1"]
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    text = " ".join(out.decode(errors="replace").split())
    assert proc.returncode == 0, text
    assert "VictimActuated PodGroup/ml/scavenger for PodGroup/ml/train" in text


async def test_the_republish_deletes_what_the_cluster_no_longer_has(
    nc: Client,
    topology: Topology,
    services: Services,
    scenario_dir: Path,
    apiserver: ApiServer,
    tmp_path: Path,
) -> None:
    """A deletion the STATE stream lost (or one made while ingest was down) heals: the
    stream still holds ``before`` from before ingest started and ``lost`` whose deletion
    never arrived; ingest deletes the first on its first publish, the second at its next
    full republish."""
    gpu_cluster(scenario_dir)
    load(apiserver, scenario_dir / "cluster.yaml")
    publisher = Publisher(nc, topology, "test")

    async def ghost(name: str) -> None:
        obj = Pod(namespace="ml", name=name, requests={"cpu": 1000}, node_name="gpu-0")
        await publisher.publish(
            events.ObjectUpserted(
                id=f"ghost-{name}",
                occurred_at=datetime.now(UTC),
                kind="Pod",
                key=obj.key,
                body=kinds.encode_object(obj),
            )
        )

    async def last_on(key: str) -> str:
        msgs = await read_stream(nc, topology.state_stream, topology.state_subject("Pod", key))
        return events.event_type(events.decode(msgs[-1].data)) if msgs else ""

    await ghost("before")
    services.start(extra=kube_env(apiserver, tmp_path, GANGPREEMPT_RELIST_INTERVAL="1.5"))
    services.wait_started()
    for _ in range(100):
        if await last_on("ml/before") == "ObjectDeleted":
            break
        await asyncio.sleep(0.1)
    assert await last_on("ml/before") == "ObjectDeleted"
    await ghost("lost")
    assert await last_on("ml/lost") == "ObjectUpserted"
    for _ in range(100):
        if await last_on("ml/lost") == "ObjectDeleted":
            break
        await asyncio.sleep(0.1)
    assert await last_on("ml/lost") == "ObjectDeleted"
    assert await last_on("ml/scavenger-0") == "ObjectUpserted"  # the cluster's pods stay
