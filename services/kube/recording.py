"""Kubernetes Events naming the plan, on each victim and on the preemptor."""

from __future__ import annotations

import os

import structlog

from gangpreempt.errors import Fenced, Transient
from services.kube.access import EVENTS
from services.kube.client import JSON, ApiError, KubeApi, path_of
from services.kube.writing import event_name, now_rfc3339, retrying

log = structlog.get_logger("gangpreempt.actuator")

COMPONENT = "gangpreempt"


class Recorder:
    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self.instance = f"{os.uname().nodename}-{os.getpid()}"

    async def record(self, involved: JSON, reason: str, message: str, plan_id: str) -> None:
        """One Event per (object, plan, reason): its name is derived from them, so a
        repeat is refused (409 AlreadyExists) and an actuation redone after a crash does
        not record twice. A failure is logged, never raised: the eviction stands."""
        namespace = involved.get("namespace") or "default"
        now = now_rfc3339()
        name = event_name(involved["name"], involved["kind"], involved["name"], plan_id, reason)
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:1024],
            "type": "Normal",
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        path = path_of(EVENTS, "v1", namespace)
        try:
            await retrying(
                f"Event {reason}",
                lambda: self.api.request("POST", EVENTS, "create", path, body=body),
                retry_for=5.0,
            )
        except ApiError as exc:
            if exc.status != 409:
                log.warning("event not recorded", reason=reason, object=name, error=str(exc))
        except (Transient, Fenced) as exc:
            log.warning("event not recorded", reason=reason, object=name, error=str(exc))


def involved_object(api_version: str, kind: str, namespace: str, name: str, uid: str) -> JSON:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "namespace": namespace,
        "uid": uid,
    }


__all__ = ["COMPONENT", "Recorder", "involved_object"]
