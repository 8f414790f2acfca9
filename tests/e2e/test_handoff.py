"""The hand-off through gangpreempt's admission check, the four services as processes
on a real nats-server against an API server over HTTP (``GANGPREEMPT_AUTHORITY=
admission-check``). The test plays Kueue's part of the protocol: it stops an evicted
workload and releases its quota, reserves quota for the head it picks, and evicts a
workload whose check says Retry; gangpreempt plans, evicts, and decides the check."""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from nats.aio.client import Client

from gangpreempt import events
from gangpreempt.bus import Topology
from gangpreempt.bus.status import quota_caught_up
from gangpreempt.model.checks import GATE, PLANNED_NODES_ANNOTATION, WORKLOAD_LABEL
from gangpreempt.planning.authority import AUTHORITY_LABEL, ENABLED
from tests.e2e.harness import Services, decisions, of, state_has, wait_for
from tests.e2e.scenarios import gpu_cluster
from tests.e2e.test_kube_saga import KUEUE_V1BETA2, kube_env
from tests.kube.apiserver import CORE, PLUGINS, ApiServer
from tests.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.timeout(120)]

GROUP = "kueue.x-k8s.io"
TRAIN = "Workload/default/train"

QUEUES = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: gangpreempt}
spec: {controllerName: gangpreempt.io/placement}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: gpus
  annotations: {gangpreempt.io/preemption: '{"withinClusterQueue": "LowerPriority"}'}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: default
      resources: [{name: cpu, nominalQuota: 100}, {name: nvidia.com/gpu, nominalQuota: 16}]
  preemption: {withinClusterQueue: Never, reclaimWithinCohort: Never}
  admissionChecksStrategy: {admissionChecks: [{name: gangpreempt}]}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: default, name: q}
spec: {clusterQueue: gpus}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: kueues}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: default
      resources: [{name: cpu, nominalQuota: 100}, {name: nvidia.com/gpu, nominalQuota: 8}]
  preemption: {withinClusterQueue: LowerPriority}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: default, name: k}
spec: {clusterQueue: kueues}
"""

NODE = """
apiVersion: v1
kind: Node
metadata: {{name: {name}}}
status: {{allocatable: {{cpu: "96", nvidia.com/gpu: "8", pods: "110"}}}}
"""

POD = """
apiVersion: v1
kind: Pod
metadata: {{namespace: default, name: {name}-0, annotations: {{kueue.x-k8s.io/workload: {name}}}}}
spec:
  nodeName: {node}
  priority: {priority}
  containers: [{{name: c, resources: {{requests: {{cpu: "1", nvidia.com/gpu: "8"}}}}}}]
"""


def workload(name: str, priority: int, queue: str = "q", running: bool = False) -> dict[str, Any]:
    wl: dict[str, Any] = {
        "apiVersion": f"{GROUP}/v1beta2",
        "kind": "Workload",
        "metadata": {
            "namespace": "default",
            "name": name,
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {
            "queueName": queue,
            "priority": priority,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "c",
                                    "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "8"}},
                                }
                            ]
                        }
                    },
                }
            ],
        },
        "status": {},
    }
    if running:
        reserve(wl, "gpus")
        wl["status"]["conditions"].append(
            {"type": "Admitted", "status": "True", "reason": "Admitted"}
        )
        wl["status"]["admissionChecks"][0]["state"] = "Ready"
    return wl


def reserve(wl: dict[str, Any], queue: str) -> None:
    """Kueue's scheduler reserves quota: the admission, QuotaReserved, the queue's
    checks Pending."""
    wl["status"]["admission"] = {
        "clusterQueue": queue,
        "podSetAssignments": [
            {
                "name": "main",
                "count": 1,
                "flavors": {"cpu": "default", "nvidia.com/gpu": "default"},
                "resourceUsage": {"cpu": "1", "nvidia.com/gpu": "8"},
            }
        ],
    }
    wl["status"]["conditions"] = [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
        {"type": "Admitted", "status": "False", "reason": "UnsatisfiedChecks"},
    ]
    wl["status"]["admissionChecks"] = [
        {
            "name": "gangpreempt",
            "state": "Pending",
            "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ]


class Kueue:
    """Kueue's controllers, as far as this protocol needs them."""

    def __init__(self, server: ApiServer) -> None:
        self.server = server
        self.retried: list[str] = []
        self.due: dict[str, float] = {}  # workload -> when Kueue evicts its Retry

    def get(self, name: str) -> dict[str, Any] | None:
        return self.server.get(GROUP, "workloads", "default", name)

    def release(self, wl: dict[str, Any], reason: str) -> None:
        new = copy.deepcopy(wl)
        new["status"].pop("admission", None)
        new["status"]["conditions"] = [
            c
            for c in new["status"].get("conditions") or []
            if c["type"] not in ("QuotaReserved", "Admitted")
        ]
        new["status"]["conditions"].append(
            {"type": "QuotaReserved", "status": "False", "reason": reason}
        )
        for check in new["status"].get("admissionChecks") or []:
            check["state"] = "Pending"
        self.server.put(new)

    def step(self) -> None:
        for (_, name), wl in list(self.server.objects[(GROUP, "workloads")].items()):
            status = wl.get("status") or {}
            if not status.get("admission"):
                continue
            conditions = {c["type"]: c for c in status.get("conditions") or []}
            if conditions.get("Evicted", {}).get("status") == "True":
                if self.server.get("", "pods", "default", f"{name}-0") is not None:
                    self.server.delete_now("", "pods", "default", f"{name}-0")
                self.release(wl, "Preempted")
            elif any(c.get("state") == "Retry" for c in status.get("admissionChecks") or []):
                self.retry(wl, name)

    def retry(self, wl: dict[str, Any], name: str) -> None:
        """As Kueue v0.17 does for a Retry check: with ``requeueAfterSeconds``, it sets
        ``requeueState.requeueAt`` and keeps the reservation until then; then (or at
        once, without a time) it evicts it and releases the reservation."""
        status = wl["status"]
        after = max(c.get("requeueAfterSeconds") or 0 for c in status["admissionChecks"])
        if name not in self.retried:
            self.retried.append(name)
        if after and not (status.get("requeueState") or {}).get("requeueAt"):
            new = copy.deepcopy(wl)
            at = time.time() + after
            new["status"]["requeueState"] = {
                "requeueAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
            }
            self.server.put(new)
            self.due[name] = at
        elif time.time() >= self.due.get(name, 0.0):
            self.release(wl, "AdmissionCheck")

    def reserve(self, name: str) -> None:
        wl = self.get(name)
        assert wl is not None
        new = copy.deepcopy(wl)
        reserve(new, "gpus")
        self.server.put(new)

    def check(self, name: str) -> dict[str, Any]:
        wl = self.get(name)
        assert wl is not None
        checks = (wl.get("status") or {}).get("admissionChecks") or [{}]
        return dict(checks[0])


@pytest.fixture
async def apiserver() -> AsyncIterator[ApiServer]:
    server = ApiServer(kinds=CORE + KUEUE_V1BETA2 + PLUGINS)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def kueue(apiserver: ApiServer) -> AsyncIterator[Kueue]:
    k = Kueue(apiserver)

    async def loop() -> None:
        while True:
            k.step()
            await asyncio.sleep(0.05)

    task = asyncio.create_task(loop())
    try:
        yield k
    finally:
        task.cancel()


def load(server: ApiServer, text: str) -> None:
    for doc in yaml.safe_load_all(text):
        if doc:
            server.put(doc)


def cluster(server: ApiServer) -> None:
    """16 GPUs of quota on two 8-GPU nodes, all taken: ``low`` (priority 10) on node-0,
    ``mid`` (priority 500) on node-1."""
    load(server, QUEUES)
    for i, (name, priority) in enumerate((("low", 10), ("mid", 500))):
        load(server, NODE.format(name=f"node-{i}"))
        server.put(workload(name, priority, running=True))
        load(server, POD.format(name=name, node=f"node-{i}", priority=priority))


async def until_check(kueue: Kueue, name: str, state: str, what: str) -> dict[str, Any]:
    await until(lambda: kueue.check(name).get("state") == state, 30, what)
    return kueue.check(name)


def started_pod(name: str, update: dict[str, Any], gate: bool = True) -> dict[str, Any]:
    """A pod as Kueue's job creates it once admitted: the pod set's podSetUpdates on it
    and, from the admission policy, gangpreempt's gate (beside another controller's)."""
    gates = [{"name": "gangpreempt.io/placement"}, {"name": "example.com/other"}] if gate else []
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "namespace": "default",
            "name": name,
            "labels": {**update.get("labels", {}), "kueue.x-k8s.io/podset": update["name"]},
            "annotations": dict(update.get("annotations", {})),
        },
        "spec": {
            "nodeSelector": {"disk": "ssd"},
            "schedulingGates": gates,
            "priority": 1000,
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "8"}}}
            ],
        },
    }


def gates_of(server: ApiServer, name: str, namespace: str = "default") -> list[str]:
    pod = server.get("", "pods", namespace, name)
    assert pod is not None
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


async def managed_cluster(
    nc: Client, topology: Topology, services: Services, apiserver: ApiServer, tmp_path: Path
) -> None:
    """The cluster, and the services deciding for the managed queue only, once ingest
    has published it."""
    cluster(apiserver)
    services.start(extra=kube_env(apiserver, tmp_path, GANGPREEMPT_AUTHORITY="admission-check"))
    services.wait_started()
    await state_has(nc, topology, "Pod", "default/mid-0")


async def train_actuated(nc: Client, topology: Topology) -> list[events.Event]:
    return await wait_for(
        nc, topology, lambda e: bool(of(e, events.PlanActuated, preemptor=TRAIN)), what="actuation"
    )


async def released(kueue: Kueue, name: str) -> None:
    await until(
        lambda: not (kueue.get(name) or {}).get("status", {}).get("admission"),
        30,
        f"{name}'s quota released",
    )


def requested_for(evs: list[events.Event], workload: str) -> bool:
    return bool(of(evs, events.PreemptionRequested, workload=workload))


async def test_the_preemptor_is_admitted_through_the_check_where_its_victims_were(
    nc: Client,
    topology: Topology,
    services: Services,
    apiserver: ApiServer,
    kueue: Kueue,
    tmp_path: Path,
) -> None:
    await managed_cluster(nc, topology, services, apiserver, tmp_path)
    # gangpreempt marks its AdmissionCheck Active (Kueue keeps the queue inactive before).
    await until(
        lambda: any(
            c.get("type") == "Active" and c.get("status") == "True"
            for c in (apiserver.get(GROUP, "admissionchecks", "", "gangpreempt") or {})
            .get("status", {})
            .get("conditions", [])
        ),
        30,
        "the AdmissionCheck marked Active",
    )
    apiserver.put(workload("train", 1000))  # pending; Kueue cannot reserve: 16 of 16 taken
    evs = await train_actuated(nc, topology)
    (proposal,) = of(evs, events.PlanProposed, preemptor=TRAIN)
    assert [v.object for v in proposal.victims] == ["Workload/default/low"]
    assert proposal.placement == {"Pod/default/train-0": "node-0"}  # where low ran
    await released(kueue, "low")
    kueue.reserve("train")
    check = await until_check(kueue, "train", "Ready", "train's check Ready")
    assert "node-0" in check["message"]
    assert check["podSetUpdates"] == [
        {
            "name": "main",
            "labels": {WORKLOAD_LABEL: "train"},
            "annotations": {PLANNED_NODES_ANNOTATION: "node-0"},
        }
    ]
    (ready,) = of(await decisions(nc, topology), events.CheckDecided, workload=TRAIN)
    assert ready.state == "Ready"
    assert ready.placement == {"Pod/default/train-0": "node-0"}
    assert kueue.get("mid")["status"]["admission"]  # type: ignore[index]
    # Kueue admits and starts the job: its pod carries the pod set's updates, and the
    # gate (the admission policy's part); gangpreempt narrows it to node-0 and ungates it.
    apiserver.put(started_pod("train-x7k2p", check["podSetUpdates"][0]))
    await until(lambda: GATE not in gates_of(apiserver, "train-x7k2p"), 30, "ungated")
    spec = apiserver.get("", "pods", "default", "train-x7k2p")["spec"]  # type: ignore[index]
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": "node-0", "disk": "ssd"}
    assert spec["schedulingGates"] == [{"name": "example.com/other"}]  # another's stays


async def test_a_competitor_that_takes_the_held_room_is_retried(
    nc: Client,
    topology: Topology,
    services: Services,
    apiserver: ApiServer,
    kueue: Kueue,
    tmp_path: Path,
) -> None:
    await managed_cluster(nc, topology, services, apiserver, tmp_path)
    apiserver.put(workload("train", 1000))
    await train_actuated(nc, topology)
    apiserver.put(workload("rival", 100))  # arrives after the plan, Kueue picks it first
    await released(kueue, "low")
    kueue.reserve("rival")
    await until(lambda: "rival" in kueue.retried, 30, "rival's check Retry")
    (retry, *_) = of(
        await decisions(nc, topology), events.CheckDecided, workload="Workload/default/rival"
    )
    assert retry.state == "Retry"
    assert retry.requeue_after_s > 0  # Kueue waits that long before it reserves it again
    assert retry.message.startswith("gangpreempt: ")
    # and the reservation goes at once, not after that time: the actuator evicts it as
    # soon as Kueue has set its requeue time (the double would release it only then,
    # without an Evicted condition)
    await until(
        lambda: not (kueue.get("rival") or {}).get("status", {}).get("admission"),
        30,
        "rival's reservation released",
    )
    rival = kueue.get("rival") or {}
    evicted = [c for c in rival["status"]["conditions"] if c["type"] == "Evicted"]
    assert [(c["status"], c["reason"]) for c in evicted] == [("True", "AdmissionCheck")]
    kueue.reserve("train")
    await until_check(kueue, "train", "Ready", "train's check Ready")


async def test_a_workload_of_an_unmanaged_queue_is_left_to_kueue(
    nc: Client,
    topology: Topology,
    services: Services,
    apiserver: ApiServer,
    kueue: Kueue,
    tmp_path: Path,
) -> None:
    """``kueues`` lists no check of gangpreempt's: its pending workload, which only a
    preemption of ``old`` could admit, gets no request (Kueue preempts for it, by its
    own stanza); the managed one beside it does."""
    cluster(apiserver)
    load(apiserver, NODE.format(name="node-2"))
    old = workload("old", 10, queue="k", running=True)
    old["status"]["admission"]["clusterQueue"] = "kueues"
    old["status"].pop("admissionChecks")
    apiserver.put(old)
    load(apiserver, POD.format(name="old", node="node-2", priority=10))
    services.start(extra=kube_env(apiserver, tmp_path, GANGPREEMPT_AUTHORITY="admission-check"))
    services.wait_started()
    await state_has(nc, topology, "Pod", "default/mid-0")
    apiserver.put(workload("theirs", 1000, queue="k"))
    apiserver.put(workload("train", 1000))
    await wait_for(nc, topology, lambda e: requested_for(e, TRAIN), what="train's request")
    await state_has(nc, topology, "Workload", "default/theirs")
    deadline = asyncio.get_running_loop().time() + 30
    while not await quota_caught_up(nc, topology):  # it has decided on all it was sent
        assert asyncio.get_running_loop().time() < deadline, "quota did not catch up"
        await asyncio.sleep(0.05)
    evs = await decisions(nc, topology)
    assert not requested_for(evs, "Workload/default/theirs")
    assert not [e for e in evs if getattr(e, "workload", "") == "Workload/default/theirs"]


async def test_a_gated_pod_nothing_places_is_released_unchanged(
    nc: Client,
    topology: Topology,
    services: Services,
    apiserver: ApiServer,
    kueue: Kueue,
    tmp_path: Path,
) -> None:
    """Fail-open: a pod gated by gangpreempt whose placement never comes is ungated as it
    was, past ``GANGPREEMPT_GATE_TIMEOUT``, with an Event saying why."""
    cluster(apiserver)
    env = kube_env(
        apiserver, tmp_path, GANGPREEMPT_AUTHORITY="admission-check", GANGPREEMPT_GATE_TIMEOUT="2"
    )
    services.start(extra=env)
    services.wait_started()
    apiserver.put(started_pod("stray", {"name": "main", "labels": {WORKLOAD_LABEL: "nobody"}}))
    await state_has(nc, topology, "Pod", "default/stray")
    await until(lambda: gates_of(apiserver, "stray") == ["example.com/other"], 30, "released")
    pod = apiserver.get("", "pods", "default", "stray")
    assert pod is not None
    assert pod["spec"]["nodeSelector"] == {"disk": "ssd"}  # unchanged

    def reasons() -> list[str]:
        return [
            e["reason"]
            for e in apiserver.objects[("", "events")].values()
            if e["involvedObject"]["name"] == "stray"
        ]

    # The Event is recorded after the write that lifted the gate.
    await until(reasons, 30, "the Event on the released pod")
    assert reasons() == ["PlacementReleased"]


async def test_a_gated_gang_lands_where_its_plan_freed_room(
    nc: Client,
    topology: Topology,
    services: Services,
    scenario_dir: Path,
    apiserver: ApiServer,
    tmp_path: Path,
) -> None:
    """A PodGroup gang in a namespace under gangpreempt's authority, gated at creation:
    its victims are evicted, then each pod is narrowed to the node its plan freed and
    ungated (kube-scheduler's part, binding it there, is the real scheduler's test)."""
    apiserver.pod_termination = 0.3
    gpu_cluster(scenario_dir)
    apiserver.put(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "ml", "labels": {AUTHORITY_LABEL: ENABLED}},
        }
    )
    for doc in yaml.safe_load_all((scenario_dir / "cluster.yaml").read_text()):
        if doc:
            apiserver.put(doc)
    services.start(extra=kube_env(apiserver, tmp_path, GANGPREEMPT_AUTHORITY="admission-check"))
    services.wait_started()
    await state_has(nc, topology, "Pod", "ml/scavenger-1")
    for doc in yaml.safe_load_all((scenario_dir / "train.yaml").read_text()):
        if doc and doc["kind"] == "Pod":
            doc["spec"]["schedulingGates"] = [{"name": GATE}]
        if doc:
            apiserver.put(doc)
    train = "PodGroup/ml/train"
    evs = await wait_for(
        nc,
        topology,
        lambda e: any(a.placement for a in of(e, events.Admitted, workload=train)),
        what="the gang admitted with its placement",
    )
    (proposal,) = of(evs, events.PlanProposed, preemptor=train)
    placement = {ref.rsplit("/", 1)[1]: node for ref, node in proposal.placement.items()}
    for pod, node in placement.items():
        await until(lambda pod=pod: not gates_of(apiserver, pod, "ml"), 30, f"{pod} ungated")
        spec = apiserver.get("", "pods", "ml", pod)["spec"]  # type: ignore[index]
        assert spec["nodeSelector"] == {"kubernetes.io/hostname": node}
    assert sorted(placement) == ["train-0", "train-1"]
