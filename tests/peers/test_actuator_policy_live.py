"""deploy/k8s's admission policy on the actuator's pod writes (``actuator-policy.yaml``),
against the real kube-apiserver (v1.37), as the actuator's ServiceAccount granted every
feature's RBAC (delete, soft eviction, placement), so that what is refused here is
refused by the policy, not by RBAC: nothing written in a protected namespace; a patch
only adds the soft-eviction label, or lifts gangpreempt's gate with a hostname
nodeSelector entry; no image, label, annotation, toleration, deadline or other gate
changed; a status write keeps the phase. What gangpreempt itself writes goes through."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from services.kube.rbac import feature_documents
from tests.peers.cluster import SERVICE_USERS
from tests.peers.conftest import apply_documents
from tests.peers.control_plane import ControlPlane
from tests.peers.test_kube_live import Live
from tests.waiting import eventually

pytestmark = [pytest.mark.peers, pytest.mark.timeout(300)]

ACTUATOR = SERVICE_USERS["actuator"]
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
POLICY = "gangpreempt-actuator-pods"
GATE = "gangpreempt.io/placement"
SOFT = "scheduling.koordinator.sh/soft-eviction"


@pytest.fixture
async def live(control_plane: ControlPlane) -> AsyncIterator[Live]:
    for feature in ("delete", "soft-eviction", "placement"):
        apply_documents(control_plane, feature_documents(feature))
    lv = Live(control_plane)
    await lv.call("POST", "/api/v1/namespaces", {"metadata": {"name": lv.ns}})
    await lv.call("POST", "/api/v1/nodes", {"metadata": {"name": lv.node}})
    try:
        await enforced(lv)
        yield lv
    finally:
        await lv.call("DELETE", f"/api/v1/nodes/{lv.node}")
        await lv.call("DELETE", f"/api/v1/namespaces/{lv.ns}")


async def enforced(live: Live) -> None:
    """Wait until the API server enforces the policy (it loads a new policy a moment
    after it is created): a dry-run label change as the actuator is refused."""
    await live.pod("probe", app="probe")
    body = {"metadata": {"labels": {"app": "changed"}}}
    path = pod_path(live.ns, "probe") + "?dryRun=All"

    async def refusing() -> bool:
        return refused(await as_actuator(live, "PATCH", path, body))

    await eventually(refusing, 60, "the admission policy enforced")


async def as_actuator(
    live: Live, method: str, path: str, body: Any = None, content_type: str = MERGE
) -> tuple[int, str]:
    """(HTTP status, message) of one call made as the actuator."""
    try:
        await asyncio.to_thread(live.plane.request, method, path, body, content_type, user=ACTUATOR)
    except urllib.error.HTTPError as exc:
        text = exc.read().decode(errors="replace")
        try:
            return exc.code, str(json.loads(text).get("message", text))
        except ValueError:
            return exc.code, text
    return 200, ""


def refused(answer: tuple[int, str], why: str = "") -> bool:
    status, message = answer
    return status in (403, 422) and POLICY in message and why in message


def pod_path(ns: str, name: str, sub: str = "") -> str:
    return f"/api/v1/namespaces/{ns}/pods/{name}" + (f"/{sub}" if sub else "")


async def test_a_patch_may_only_add_the_soft_eviction_label(live: Live) -> None:
    await live.pod("p", app="train")
    path = pod_path(live.ns, "p")
    image = {"spec": {"containers": [{"name": "c", "image": "evil:latest"}]}}
    assert refused(await as_actuator(live, "PATCH", path, image, STRATEGIC))  # merged by name
    for body in (
        {"metadata": {"labels": {"app": "other"}}},
        {"metadata": {"labels": {"extra": "x"}}},
        {"metadata": {"annotations": {"note": "x"}}},
        {"spec": {"activeDeadlineSeconds": 1}},
    ):
        assert refused(await as_actuator(live, "PATCH", path, body)), body
    toleration = [{"op": "add", "path": "/spec/tolerations/-", "value": {"operator": "Exists"}}]
    assert refused(await as_actuator(live, "PATCH", path, toleration, JSON_PATCH))
    pod = await live.get_pod("p")
    assert pod is not None
    assert pod["spec"]["containers"][0]["image"] == "busybox"
    assert pod["metadata"]["labels"] == {"app": "train"}
    assert await as_actuator(live, "PATCH", path, {"metadata": {"labels": {SOFT: "plan-1"}}}) == (
        200,
        "",
    )
    pod = await live.get_pod("p")
    assert pod is not None
    assert pod["metadata"]["labels"] == {"app": "train", SOFT: "plan-1"}


async def gated(live: Live, name: str) -> None:
    """A pending pod carrying gangpreempt's gate and another controller's."""
    await live.call(
        "POST",
        f"/api/v1/namespaces/{live.ns}/pods",
        {
            "metadata": {"name": name},
            "spec": {
                "schedulingGates": [{"name": GATE}, {"name": "example.com/other"}],
                "nodeSelector": {"pool": "gpu"},
                "containers": [{"name": "c", "image": "busybox"}],
            },
        },
    )


async def test_a_patch_may_lift_gangpreempts_gate_onto_one_node_and_nothing_more(
    live: Live,
) -> None:
    await gated(live, "g")
    path = pod_path(live.ns, "g")
    keep_other = [{"name": "example.com/other"}]
    for body in (
        {"spec": {"schedulingGates": []}},  # the other controller's gate too
        {"spec": {"schedulingGates": keep_other, "nodeSelector": {"zone": "a"}}},
    ):  # (a nodeSelector entry removed or changed: the API server refuses it itself)
        assert refused(await as_actuator(live, "PATCH", path, body)), body
    lift = {
        "spec": {
            "schedulingGates": keep_other,
            "nodeSelector": {"kubernetes.io/hostname": live.node},
        }
    }
    answer = await as_actuator(live, "PATCH", path, lift)
    assert answer == (200, ""), answer
    pod = await live.get_pod("g")
    assert pod is not None
    assert pod["spec"]["schedulingGates"] == keep_other
    assert pod["spec"]["nodeSelector"] == {"pool": "gpu", "kubernetes.io/hostname": live.node}


async def test_a_status_write_keeps_the_phase(live: Live) -> None:
    await live.pod("s")
    path = pod_path(live.ns, "s", "status")
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    assert refused(await as_actuator(live, "PATCH", path, {"status": {"phase": "Failed"}}))
    answer = await as_actuator(live, "PATCH", path, {"status": {"conditions": [condition]}})
    assert answer == (200, "")


async def test_nothing_is_written_in_a_protected_namespace(live: Live) -> None:
    name = f"critical-{uuid.uuid4().hex[:6]}"
    await live.call(
        "POST",
        "/api/v1/namespaces/kube-system/pods",
        {
            "metadata": {"name": name},
            "spec": {"nodeName": live.node, "containers": [{"name": "c", "image": "busybox"}]},
        },
    )
    try:
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": "kube-system"},
        }
        why = "protected namespace kube-system"
        path = pod_path("kube-system", name)
        answers = [
            await as_actuator(live, "POST", f"{path}/eviction", eviction, "application/json"),
            await as_actuator(live, "DELETE", path),
            await as_actuator(live, "PATCH", path, {"metadata": {"labels": {SOFT: "plan-1"}}}),
        ]
        assert all(refused(a, why) for a in answers), answers
        assert await live.call("GET", path)  # still there
        # the same eviction of an ordinary pod goes through
        await live.pod("ordinary")
        ordinary = {**eviction, "metadata": {"name": "ordinary", "namespace": live.ns}}
        answer = await as_actuator(
            live, "POST", f"{pod_path(live.ns, 'ordinary')}/eviction", ordinary, "application/json"
        )
        assert answer == (200, "")
    finally:
        await live.call("DELETE", f"{pod_path('kube-system', name)}?gracePeriodSeconds=0")
