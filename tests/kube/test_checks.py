"""gangpreempt's admission check written by the kubernetes sink, through
kubernetes-asyncio against an API server over HTTP: the entry replaced with the uid and
resourceVersion as preconditions, a 409 read again, nothing written when the decision
no longer applies, and gangpreempt's AdmissionChecks marked Active."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gangpreempt import events
from gangpreempt.errors import Transient
from gangpreempt.model.checks import CONTROLLER_NAME
from services.actuator.kube_checks import WORKLOAD_LABEL, set_check
from services.actuator.kubernetes import KubeSink
from services.kube.access import ACTUATOR_ANY
from tests.kube.apiserver import ApiServer
from tests.kube.objects import kueue_workload
from tests.kube.sinking import Replica, uid_of
from tests.kube.sinking import events as recorded

pytestmark = pytest.mark.kube

GROUP = "kueue.x-k8s.io"
# every call the actuator makes in one configuration or another (the scenarios try each)
GRANTED = {(r.group, r.plural, v) for r, verbs in ACTUATOR_ANY.items() for v in verbs}


@pytest.fixture(autouse=True)
async def calls_are_granted(apiserver: ApiServer) -> AsyncIterator[None]:
    yield
    used = {(g, res, verb) for verb, g, res in apiserver.calls}
    assert used <= GRANTED, used - GRANTED


def reserved(name: str, check: str | None = "Pending") -> dict[str, Any]:
    """A Workload Kueue reserved quota for, its admission checks as Kueue set them."""
    wl = kueue_workload(name)
    conditions = wl["status"]["conditions"]
    conditions[1] = {**conditions[1], "status": "False", "reason": "NoChecks"}
    if check is not None:
        wl["status"]["admissionChecks"] = [
            {
                "name": "gangpreempt",
                "state": check,
                "message": "",
                "lastTransitionTime": "2026-11-01T00:00:00Z",
            },
            {
                "name": "other",
                "state": "Ready",
                "message": "kept",
                "lastTransitionTime": "2026-11-01T00:00:00Z",
            },
        ]
    return wl


def decided(uid: str, state: str = "Ready", **kw: Any) -> events.CheckDecided:
    return events.CheckDecided(
        id=f"check-{state}",
        occurred_at=datetime.now(UTC),
        workload="Workload/team-a/big",
        uid=uid,
        resource_version="1",
        check="gangpreempt",
        state=state,
        message=kw.pop("message", f"placement {state}"),
        **kw,
    )


def checks_of(apiserver: ApiServer, name: str = "big") -> dict[str, dict[str, Any]]:
    wl = apiserver.get(GROUP, "workloads", "team-a", name)
    assert wl is not None
    return {c["name"]: c for c in wl["status"].get("admissionChecks") or []}


async def test_ready_is_written_with_a_label_for_each_pod_set(
    apiserver: ApiServer, sink: tuple[KubeSink, Replica]
) -> None:
    s, _ = sink
    apiserver.put(reserved("big"))
    uid = uid_of(apiserver, GROUP, "workloads", "team-a", "big")
    rv = apiserver.get(GROUP, "workloads", "team-a", "big")["metadata"]["resourceVersion"]  # type: ignore[index]
    assert await s.set_check(decided(uid)) == "written"
    checks = checks_of(apiserver)
    assert checks["gangpreempt"]["state"] == "Ready"
    assert checks["gangpreempt"]["message"] == "placement Ready"
    assert checks["gangpreempt"]["podSetUpdates"] == [
        {"name": "main", "labels": {WORKLOAD_LABEL: "big"}}
    ]
    assert checks["gangpreempt"]["lastTransitionTime"] != "2026-11-01T00:00:00Z"
    assert checks["other"] == {  # another controller's check is left as it was
        "name": "other",
        "state": "Ready",
        "message": "kept",
        "lastTransitionTime": "2026-11-01T00:00:00Z",
    }
    (patch,) = [r for r in apiserver.requests if r[0] == "PATCH"]
    assert patch[1].endswith("/workloads/big/status")
    assert patch[2]["metadata"] == {"uid": uid, "resourceVersion": rv}
    assert [e["reason"] for e in recorded(apiserver)] == ["PlacementConfirmed"]
    # Written once: a redelivered decision finds the check Ready and writes nothing.
    assert await s.set_check(decided(uid)) == "the check is Ready already"
    assert len([r for r in apiserver.requests if r[0] == "PATCH"]) == 1


async def test_retry_asks_kueue_to_wait_and_the_reservation_goes_at_once(
    apiserver: ApiServer, sink: tuple[KubeSink, Replica]
) -> None:
    """A Retry is written with its requeue time; once Kueue has set when to requeue the
    Workload (``requeueState.requeueAt``), the actuator evicts it as Kueue would then
    (Kueue v0.17 would keep the reservation until that time): the room is free at
    once, and Kueue reserves the workload again only after the time."""
    s, _ = sink
    apiserver.put(reserved("big"))
    uid = uid_of(apiserver, GROUP, "workloads", "team-a", "big")
    retry = decided(uid, "Retry", requeue_after_s=40, message="quota held for plan p")

    def attempt() -> Any:
        return set_check(s.api, s.kueue_version, s.recorder, retry)

    with pytest.raises(Transient, match="requeue time"):
        await attempt()  # written; Kueue has not set the requeue time yet
    mine = checks_of(apiserver)["gangpreempt"]
    assert (mine["state"], mine["requeueAfterSeconds"]) == ("Retry", 40)
    assert "podSetUpdates" not in mine
    with pytest.raises(Transient, match="requeue time"):
        await attempt()  # nothing written: still waiting for Kueue
    assert len([r for r in apiserver.requests if r[0] == "PATCH"]) == 1

    wl = apiserver.get(GROUP, "workloads", "team-a", "big")
    assert wl is not None
    # another controller's check said Ready meanwhile: Kueue's eviction resets it too
    wl["status"]["admissionChecks"].append(
        {
            "name": "prov",
            "state": "Ready",
            "message": "",
            "lastTransitionTime": "2026-11-01T00:00:00Z",
        }
    )
    later = datetime.now(UTC) + timedelta(seconds=40)
    wl["status"]["requeueState"] = {"requeueAt": later.strftime("%Y-%m-%dT%H:%M:%SZ")}
    assert await attempt() == "evicted"
    wl = apiserver.get(GROUP, "workloads", "team-a", "big")
    assert wl is not None
    evicted = [c for c in wl["status"]["conditions"] if c["type"] == "Evicted"]
    assert [(c["status"], c["reason"]) for c in evicted] == [("True", "AdmissionCheck")]
    mine = checks_of(apiserver)["gangpreempt"]
    assert mine["state"] == "Pending"  # reset, as Kueue resets it when it evicts
    assert mine["retryCount"] == 1
    assert checks_of(apiserver)["prov"]["state"] == "Pending"
    assert "quota held for plan p" in mine["message"]
    # Kueue's own fields are left to Kueue: the requeue time, the reservation
    assert wl["status"]["requeueState"]["requeueAt"] == later.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert wl["status"]["admission"]
    # once evicted, nothing more is written
    assert "evicted" in await attempt()
    assert len([r for r in apiserver.requests if r[0] == "PATCH"]) == 2


async def test_a_retry_whose_requeue_time_has_passed_is_left_to_kueue(
    apiserver: ApiServer, sink: tuple[KubeSink, Replica]
) -> None:
    s, _ = sink
    apiserver.put(reserved("big"))
    uid = uid_of(apiserver, GROUP, "workloads", "team-a", "big")
    retry = decided(uid, "Retry", requeue_after_s=40, message="no node")
    with pytest.raises(Transient):
        await set_check(s.api, s.kueue_version, s.recorder, retry)
    wl = apiserver.get(GROUP, "workloads", "team-a", "big")
    assert wl is not None
    wl["status"]["requeueState"] = {"requeueAt": "2020-01-01T00:00:00Z"}
    assert await set_check(s.api, s.kueue_version, s.recorder, retry) == "unchanged"
    assert len([r for r in apiserver.requests if r[0] == "PATCH"]) == 1


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ("released", "no quota is reserved"),
        ("unreserved", "no quota is reserved"),
        ("evicted", "it is evicted"),
        ("finished", "it is finished"),
        ("replaced", "stale"),
        ("deleted", "gone"),
    ],
)
async def test_a_decision_that_no_longer_applies_writes_nothing(
    apiserver: ApiServer, sink: tuple[KubeSink, Replica], change: str, says: str
) -> None:
    s, _ = sink
    apiserver.put(reserved("big"))
    uid = uid_of(apiserver, GROUP, "workloads", "team-a", "big")
    if change == "released":  # Kueue released the reservation meanwhile
        wl = apiserver.get(GROUP, "workloads", "team-a", "big")
        assert wl is not None
        del wl["status"]["admission"]
    elif change in ("unreserved", "evicted", "finished"):
        # Kueue evicted it (reset its checks, its reservation not released yet), or
        # says it no longer holds a reservation, or it finished: a Retry written now
        # would outlive the reservation, and Kueue never reserves it again.
        wl = apiserver.get(GROUP, "workloads", "team-a", "big")
        assert wl is not None
        kind, status = {
            "unreserved": ("QuotaReserved", "False"),
            "evicted": ("Evicted", "True"),
            "finished": ("Finished", "True"),
        }[change]
        conditions = [c for c in wl["status"]["conditions"] if c["type"] != kind]
        wl["status"]["conditions"] = [*conditions, {"type": kind, "status": status}]
    elif change == "replaced":
        apiserver.delete_now(GROUP, "workloads", "team-a", "big")
        apiserver.put(reserved("big"))
    else:
        apiserver.delete_now(GROUP, "workloads", "team-a", "big")
    assert says in await s.set_check(decided(uid))
    assert not [r for r in apiserver.requests if r[0] == "PATCH"]


async def test_a_write_that_raced_another_is_read_again(
    apiserver: ApiServer, sink: tuple[KubeSink, Replica]
) -> None:
    s, _ = sink
    apiserver.put(reserved("big"))
    uid = uid_of(apiserver, GROUP, "workloads", "team-a", "big")
    apiserver.fail("PATCH", "/workloads/big/status", 409, count=1)
    assert await s.set_check(decided(uid)) == "written"
    assert checks_of(apiserver)["gangpreempt"]["state"] == "Ready"
    assert len([r for r in apiserver.requests if r[0] == "PATCH"]) == 2


async def test_gangpreempts_admission_checks_are_marked_active(
    apiserver: ApiServer, sink: tuple[KubeSink, Replica]
) -> None:
    s, replica = sink
    for name, controller in (
        ("gangpreempt", CONTROLLER_NAME),
        ("prov", "kueue.x-k8s.io/provisioning-request"),
    ):
        apiserver.put(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "AdmissionCheck",
                "metadata": {"name": name},
                "spec": {"controllerName": controller},
            }
        )
    replica.refresh()
    assert await s.activate() == ["gangpreempt"]
    ours = apiserver.get(GROUP, "admissionchecks", "", "gangpreempt")
    assert ours is not None
    (active,) = ours["status"]["conditions"]
    assert (active["type"], active["status"]) == ("Active", "True")
    other = apiserver.get(GROUP, "admissionchecks", "", "prov")
    assert other is not None
    assert not other.get("status", {}).get("conditions")
    replica.refresh()
    assert await s.activate() == []  # active already: nothing more is written


async def test_a_stopping_actuator_does_not_retry_a_check_it_can_decide_again(
    apiserver: ApiServer, sink: tuple[KubeSink, Replica]
) -> None:
    """Found in a fresh-clone run: the API server went away, SIGTERM came, and the
    actuator kept retrying the check's write for a minute, past any grace period. Once
    the service stops, a write the next holder decides again fails at once."""
    s, _ = sink
    apiserver.put(reserved("big"))
    uid = uid_of(apiserver, GROUP, "workloads", "team-a", "big")
    apiserver.fail("PATCH", "/workloads/big/status", 503, count=100)
    s.stop = asyncio.Event()
    s.stop.set()
    outcome = await s.set_check(decided(uid))
    assert "503" in outcome  # not written, and said why
    assert len([r for r in apiserver.requests if r[0] == "PATCH"]) == 1  # not retried
