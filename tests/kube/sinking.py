"""What the sink tests share: the actuator's replica as the sink sees it, requests,
and reading back what the API server was sent."""

from __future__ import annotations

import copy
from typing import Any

from gangpreempt.manifests.objects import load_objects
from gangpreempt.model.cluster import ClusterState
from services import simwire
from tests.kube.apiserver import ApiServer
from tests.kube.objects import job, pod


class Replica:
    """The actuator's STATE replica as the sink uses it: the state ingest published."""

    def __init__(self, server: ApiServer) -> None:
        self.server = server
        self.state = ClusterState()

    def refresh(self) -> None:
        objects = [o for table in self.server.objects.values() for o in table.values()]
        self.state = load_objects("test", copy.deepcopy(objects)).state

    async def caught_up(self) -> None:
        return None


def uid_of(server: ApiServer, group: str, plural: str, ns: str, name: str) -> str:
    obj = server.get(group, plural, ns, name)
    assert obj is not None
    return str(obj["metadata"]["uid"])


def victim_pods(server: ApiServer, *names: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(pod refs, their uids now) of the team-a pods ``names``, as a plan carries them."""
    refs = tuple(f"Pod/team-a/{n}" for n in names)
    return refs, tuple(uid_of(server, "", "pods", "team-a", n) for n in names)


def request(
    ref: str,
    uid: str = "",
    mode: str = "delete",
    pods: tuple[str, ...] = (),
    pod_uids: tuple[str, ...] = (),
    preemptor: str = "Pod/team-a/big",
) -> simwire.EvictRequest:
    return simwire.EvictRequest(
        ref=ref,
        uid=uid,
        plan_id="plan-7",
        preemptor=preemptor,
        reason="InClusterQueue" if mode == "kueue" else "PreemptionByScheduler",
        fencing_token=1,
        pods=pods,
        mode=mode,
        pod_uids=pod_uids,
    )


def events(server: ApiServer) -> list[dict[str, Any]]:
    return list(server.objects[("", "events")].values())


def writes(server: ApiServer) -> list[tuple[str, str, Any]]:
    return [
        r
        for r in server.requests
        if r[0] in ("PATCH", "DELETE") or (r[0] == "POST" and "/events" not in r[1])
    ]


def owned(job_obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": job_obj["metadata"]["name"],
        "uid": job_obj["metadata"]["uid"],
        "controller": True,
    }


def job_with_pods(server: ApiServer, count: int, **labels: str) -> str:
    """Job ``trainer`` running ``count`` pods on n1; returns the Job's uid."""
    trainer = server.put(job("trainer"))
    juid = str(trainer["metadata"]["uid"])
    for i in range(count):
        labels["batch.kubernetes.io/controller-uid"] = juid
        server.put(pod(f"trainer-{i}", "n1", owner=owned(trainer), **labels))
    return juid
