"""Names on the bus: streams, subjects, consumers and buckets, all under one prefix so
that tests (and tenants) can share a server without seeing each other.

Subjects are grouped by the service that publishes them, so a service's publish
permission is one wildcard::

    <p>.state.<kind>.<namespace|_>.<name>   ingest      STATE stream, one message per subject
    <p>.state.complete._._                  ingest      STATE: the starting state is all there
    <p>.state.chunk.<epoch>.<n>             ingest      STATE: many objects' changes at once
    <p>.quota.<event>                       quota       DECISIONS stream
    <p>.victims.<event>                     victims     DECISIONS stream
    <p>.actuator.<event>                    actuator    DECISIONS stream
    <p>.dlq.<service>                       any         DLQ stream
    <p>.sim.read / <p>.sim.evict            actuator -> ingest's sim cluster (request/reply)

Kubernetes names may hold dots; a name token encodes every byte outside ``[A-Za-z0-9-]``
as ``_`` and two hex digits, so tokens never collide and ``max_msgs_per_subject`` holds.
"""

from __future__ import annotations

import re

from gangpreempt import events
from gangpreempt.config import SERVICES
from gangpreempt.errors import InvalidInput

_SAFE = re.compile(r"[A-Za-z0-9-]")
_PREFIX = re.compile(r"^[a-z][a-z0-9-]{0,31}$")

# event type -> (publishing service, subject token)
EVENT_SUBJECTS: dict[type[events.Event], tuple[str, str]] = {
    events.Admitted: ("quota", "admitted"),
    events.Pending: ("quota", "pending"),
    events.CheckDecided: ("quota", "check-decided"),
    events.ShadowCompared: ("quota", "shadow-compared"),
    events.PreemptionRequested: ("quota", "preemption-requested"),
    events.RequestExpired: ("quota", "request-expired"),
    events.PlanConfirmed: ("quota", "plan-confirmed"),
    events.PlanRejected: ("quota", "plan-rejected"),
    events.PlanProposed: ("victims", "plan-proposed"),
    events.PreemptionInfeasible: ("victims", "preemption-infeasible"),
    events.VictimActuated: ("actuator", "victim-actuated"),
    events.PlanActuated: ("actuator", "plan-actuated"),
    events.PlanDropped: ("actuator", "plan-dropped"),
}
# a DecisionBatch goes on the subject of the events it holds (by their type's name)
BY_NAME: dict[str, type[events.Event]] = {t.__name__: t for t in EVENT_SUBJECTS}


def encode_token(text: str) -> str:
    if not text:
        return "_"
    return "".join(c if _SAFE.match(c) else "".join(f"_{b:02x}" for b in c.encode()) for c in text)


class Topology:
    def __init__(self, prefix: str = "gp") -> None:
        if not _PREFIX.match(prefix):
            raise ValueError(f"prefix must match {_PREFIX.pattern}, got {prefix!r}")
        self.prefix = prefix
        upper = prefix.upper().replace("-", "_")
        self.state_stream = f"{upper}_STATE"
        self.decisions_stream = f"{upper}_DECISIONS"
        self.dlq_stream = f"{upper}_DLQ"
        self.plans_bucket = f"{upper}_plans"
        self.leases_bucket = f"{upper}_leases"

    # -- subjects ----------------------------------------------------------------------
    def state_subject(self, kind: str, key: str) -> str:
        namespace, _, name = key.rpartition("/")
        return f"{self.prefix}.state.{kind.lower()}.{encode_token(namespace)}.{encode_token(name)}"

    @property
    def state_wildcard(self) -> str:
        return f"{self.prefix}.state.>"

    @property
    def state_complete_subject(self) -> str:
        """Where ingest marks its starting state complete (``StateComplete``)."""
        return f"{self.prefix}.state.complete._._"

    def state_chunk_subject(self, epoch: str, n: int) -> str:
        """Where one ``StateChunk`` goes (a subject of its own, never superseded)."""
        return f"{self.prefix}.state.chunk.{encode_token(epoch)}.{n}"

    @property
    def state_chunk_wildcard(self) -> str:
        return f"{self.prefix}.state.chunk.>"

    def subject_of(self, event: events.Event) -> str:
        if isinstance(event, events.ObjectUpserted | events.ObjectDeleted):
            return self.state_subject(event.kind, event.key)
        if isinstance(event, events.StateComplete):
            return self.state_complete_subject
        if isinstance(event, events.StateChunk):
            return self.state_chunk_subject(event.epoch, event.n)
        if isinstance(event, events.DecisionBatch):
            kind = BY_NAME.get(event.kind)
            if kind is None:
                raise InvalidInput(f"DecisionBatch {event.id}: kind {event.kind!r} is no decision")
            return self.event_subject(kind)
        return self.event_subject(type(event))

    def event_subject(self, event_type: type[events.Event]) -> str:
        service, token = EVENT_SUBJECTS[event_type]
        return f"{self.prefix}.{service}.{token}"

    def service_wildcard(self, service: str) -> str:
        return f"{self.prefix}.{service}.>"

    @property
    def decision_subjects(self) -> list[str]:
        return [self.service_wildcard(s) for s in SERVICES if s != "ingest"]

    def dlq_subject(self, service: str) -> str:
        return f"{self.prefix}.dlq.{service}"

    @property
    def sim_read(self) -> str:
        return f"{self.prefix}.sim.read"

    @property
    def sim_evict(self) -> str:
        return f"{self.prefix}.sim.evict"

    @property
    def sim_stats(self) -> str:
        return f"{self.prefix}.sim.stats"

    def stream_for(self, subject: str) -> str:
        token = subject.split(".", 2)[1]
        if token == "state":
            return self.state_stream
        if token == "dlq":
            return self.dlq_stream
        return self.decisions_stream

    def durable(self, service: str) -> str:
        return f"{self.prefix}-{service}"


__all__ = ["EVENT_SUBJECTS", "SERVICES", "Topology", "encode_token"]
