"""Shadow mode against the real control plane: Kueue v0.17 preempts on its own (its
ClusterQueue's stanza says LowerPriority, no gangpreempt check), kube-scheduler places,
and gangpreempt's four services, in ``GANGPREEMPT_MODE=shadow`` under an identity
allowed everything, compare and write nothing: the API server's audit log shows reads
only.

Two Jobs fill the queue's 16 GPUs; a third, of higher priority, asks for an 8-GPU node
the cluster does not have (``nodeSelector: {gpu: h100}``). Kueue counts quota only: it
preempts the lowest Job and admits the newcomer, whose pod then stays pending (Kueue
#3210, #5243). gangpreempt, which places the pods a pod set describes before it
preempts, reports that it would have preempted nothing."""

from __future__ import annotations

import pytest
from nats.aio.client import Client

from gangpreempt import events
from gangpreempt.bus import Topology
from gangpreempt.planning import shadow
from tests.e2e.harness import Services, decisions
from tests.peers.cluster import (
    KUEUE_API,
    eventually,
    running_cluster,
    start_services,
)
from tests.peers.conftest import SHADOW_USER
from tests.peers.control_plane import ControlPlane

pytestmark = [pytest.mark.peers, pytest.mark.timeout(300)]

READS = {"get", "list", "watch"}


async def test_shadow_mode_reports_a_kueue_preemption_it_would_not_make_and_only_reads(
    control_plane: ControlPlane, services: Services, nc: Client, topology: Topology
) -> None:
    async with running_cluster(control_plane, managed=False) as cluster:
        start_services(
            services,
            lambda _service: control_plane.kubeconfig_for(SHADOW_USER),
            mode="shadow",
            GANGPREEMPT_SHADOW_SETTLE="1",
        )
        await cluster.job("low", "low")
        await cluster.job("mid", "mid")

        await eventually(lambda: cluster.running("low"), 120, "low running", cluster)
        await eventually(lambda: cluster.running("mid"), 120, "mid running", cluster)

        await cluster.job("train", "high", node_selector={"gpu": "h100"})

        async def kueue_preempted() -> str:
            listing = await cluster.call("GET", f"{KUEUE_API}/namespaces/{cluster.ns}/workloads")
            for wl in listing.get("items") or []:
                for c in (wl.get("status") or {}).get("conditions") or []:
                    if c["type"] == "Preempted" and c["status"] == "True":
                        return str(wl["metadata"]["name"])
            return ""

        victim = await eventually(kueue_preempted, 120, "Kueue preempting", cluster)
        assert victim.startswith("job-low-")

        async def comparison() -> events.ShadowCompared | None:
            for e in await decisions(nc, topology):
                if (
                    isinstance(e, events.ShadowCompared)
                    and e.peer == shadow.KUEUE
                    and e.preemptor.startswith(f"Workload/{cluster.ns}/")
                ):
                    return e
            return None

        c = await eventually(comparison, 60, "gangpreempt's comparison", cluster)
        assert c.peer_victims == (f"Workload/{cluster.ns}/{victim}",)
        assert c.preemptor.startswith(f"Workload/{cluster.ns}/job-train-")
        assert c.verdict == shadow.UNPLACEABLE, c.message
        assert c.victims == ()
        # Kueue admitted it; no node can run its pod
        pod = await eventually(lambda: cluster.pod_of("train"), 60, "train's pod", cluster)
        assert not pod["spec"].get("nodeName")

    # Every request the services made was a read.
    theirs = control_plane.audit_events(SHADOW_USER)
    assert {e["verb"] for e in theirs} & {"list", "watch"}, "the services read the cluster"
    written = [(e["verb"], e.get("requestURI", "")) for e in theirs if e["verb"] not in READS]
    assert written == []
