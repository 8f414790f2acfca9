"""Shadow mode, the four services as processes on a real nats-server against an API
server over HTTP (``GANGPREEMPT_MODE=shadow``). The test plays Kueue and kube-scheduler
preempting on their own; gangpreempt compares each of their preemptions with what it
would have done, and makes no write to the API server."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from gangpreempt import events
from gangpreempt.bus import Topology
from gangpreempt.planning import shadow
from tests.e2e.harness import Services, of, state_has, wait_for
from tests.e2e.test_handoff import GROUP, NODE, QUEUES, load, reserve, workload
from tests.e2e.test_handoff import apiserver as apiserver  # the fixture
from tests.e2e.test_kube_saga import kube_env
from tests.kube.apiserver import ApiServer

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.timeout(120)]

READS = ("get", "list", "watch")


def kueue_mark(wl: dict[str, Any], preemptor_uid: str) -> dict[str, Any]:
    """What Kueue v0.17's scheduler writes on a victim (``workload.Evict`` with the
    Preempted condition), the quota still reserved until its job stops."""
    message = (
        f"Preempted to accommodate a workload (UID: {preemptor_uid}, JobUID: UNKNOWN) due "
        "to prioritization in the ClusterQueue; preemptor path: /kueues; preemptee path: "
        "/kueues"
    )
    new = copy.deepcopy(wl)
    new["status"]["conditions"] += [
        {"type": "Evicted", "status": "True", "reason": "Preempted", "message": message},
        {"type": "Preempted", "status": "True", "reason": "InClusterQueue", "message": message},
    ]
    return new


def pod(name: str, priority: int, node: str = "", group: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "default", "name": name}
    if group:
        meta["labels"] = {"scheduling.x-k8s.io/pod-group": group}
    spec: dict[str, Any] = {
        "priority": priority,
        "containers": [
            {"name": "c", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "8"}}}
        ],
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {}}


def writes(server: ApiServer) -> list[tuple[str, str, str]]:
    return [c for c in server.calls if c[0] not in READS]


async def compared(nc: Client, topology: Topology, **match: Any) -> events.ShadowCompared:
    evs = await wait_for(
        nc, topology, lambda e: bool(of(e, events.ShadowCompared, **match)), what="a comparison"
    )
    (found,) = of(evs, events.ShadowCompared, **match)
    assert isinstance(found, events.ShadowCompared)
    return found


async def test_kueue_and_scheduler_preemptions_are_compared_and_nothing_is_written(
    nc: Client,
    topology: Topology,
    services: Services,
    apiserver: ApiServer,
    tmp_path: Path,
) -> None:
    load(apiserver, QUEUES)
    for i in range(3):
        load(apiserver, NODE.format(name=f"node-{i}"))
    # Kueue's queue "kueues" (8 GPUs, Kueue preempts) is full with ``low`` and ``mid``
    # is admitted elsewhere; a gang of two pods fills node-1 and node-2.
    low = workload("low", 10, queue="k")
    reserve(low, "kueues")
    apiserver.put(low)
    apiserver.put(pod("g-0", 5, "node-1", group="g"))
    apiserver.put(pod("g-1", 5, "node-2", group="g"))
    apiserver.put(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"namespace": "default", "name": "g"},
            "spec": {"minMember": 2},
        }
    )
    services.start(
        extra=kube_env(
            apiserver, tmp_path, GANGPREEMPT_MODE="shadow", GANGPREEMPT_SHADOW_SETTLE="0.5"
        )
    )
    services.wait_started()
    await state_has(nc, topology, "Pod", "default/g-1")

    # Kueue: a higher workload arrives and Kueue preempts ``low`` for it.
    apiserver.put(workload("p", 1000, queue="k"))
    await state_has(nc, topology, "Workload", "default/p")
    p = apiserver.get(GROUP, "workloads", "default", "p")
    current = apiserver.get(GROUP, "workloads", "default", "low")
    assert p is not None
    assert current is not None
    apiserver.put(kueue_mark(current, p["metadata"]["uid"]))
    c = await compared(nc, topology, peer=shadow.KUEUE)
    assert (c.preemptor, c.verdict) == ("Workload/default/p", shadow.SAME), c.message
    assert c.peer_victims == c.victims == ("Workload/default/low",)

    # kube-scheduler: a lone pod nominated to node-1 takes one pod of the gang.
    lone = pod("lone", 1000)
    lone["status"]["nominatedNodeName"] = "node-1"
    apiserver.put(lone)
    await state_has(nc, topology, "Pod", "default/lone")
    victim = apiserver.get("", "pods", "default", "g-0")
    assert victim is not None
    marked = copy.deepcopy(victim)
    marked["status"]["conditions"] = [
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": "default-scheduler: preempting to accommodate a higher priority pod",
        }
    ]
    # kube-scheduler marks it, then deletes it: the kubelet stops it within its grace
    # period, and it is gone after
    marked["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    apiserver.put(marked)
    s = await compared(nc, topology, peer=shadow.SCHEDULER)
    apiserver.delete_now("", "pods", "default", "g-0")
    assert (s.preemptor, s.verdict) == ("Pod/default/lone", shadow.PARTIAL_GANG), s.message
    assert s.partial_gangs == ("PodGroup/default/g",)
    # what gangpreempt would have done, on the state before: the free node-0
    assert s.victims == ()
    assert "split PodGroup/default/g" in s.message

    # what an operator reads: the recorded comparisons, over NATS
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "gangpreempt.cli",
            "explain",
            "--shadow",
            "--nats-url",
            services.nats_url,
            "--prefix",
            topology.prefix,
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    verdicts = {c["peer"]: c["verdict"] for c in json.loads(shown.stdout)["comparisons"]}
    assert verdicts == {shadow.KUEUE: shadow.SAME, shadow.SCHEDULER: shadow.PARTIAL_GANG}

    # shadow mode wrote nothing: every call the services made was a read
    assert apiserver.calls, "the services read the cluster"
    assert writes(apiserver) == []
