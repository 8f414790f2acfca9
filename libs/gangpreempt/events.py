"""The event catalogue: every message the services exchange, one tagged union.

Events are frozen msgspec Structs tagged by ``type``, encoded as msgpack on the bus and as
JSON for people. Every event has a deterministic ``id`` (used as ``Nats-Msg-Id``, so a
retried publish is dropped by the stream), ``occurred_at`` and ``schema_version``. Events
carry ids, quantities and references, never whole pod specs: a state event carries the
normalized model object (requests as integers), not the manifest.

Schema evolution: new fields get defaults; existing fields are never reordered or
retyped; ``schema_version`` is bumped when the meaning of a field changes.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import msgspec

from gangpreempt.model.bounds import Quantity
from gangpreempt.model.topology import TopologyAssignment

SCHEMA_VERSION = 1


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    id: str
    occurred_at: datetime
    schema_version: int = SCHEMA_VERSION


# -- state (ingest) -------------------------------------------------------------------


class ObjectUpserted(Event, frozen=True, kw_only=True, tag=True):
    """The current version of one object; ``body`` is its model Struct as msgpack."""

    kind: str
    key: str  # name, or namespace/name
    uid: str = ""
    resource_version: str = ""
    body: bytes


class ObjectDeleted(Event, frozen=True, kw_only=True, tag=True):
    kind: str
    key: str
    uid: str = ""


class StateComplete(Event, frozen=True, kw_only=True, tag=True):
    """ingest has published its whole starting state (every object it read at start is
    on STATE before this): nothing is decided until a replica has seen one. Published
    once per ingest start, on its own STATE subject."""

    source: str  # manifests | sim | kubernetes
    objects: int  # objects in the starting state


class StateChunk(Event, frozen=True, kw_only=True, tag=True):
    """Many objects' changes in one STATE message (a starting state, a full republish, a
    burst of the sim's): applied in order, as if each had come on its own subject at this
    point of the stream. Each chunk has a subject of its own
    (``<p>.state.chunk.<epoch>.<n>``); ingest deletes it once every object in it has a
    newer version on STATE."""

    epoch: str  # the publishing run (a token: letters, digits, dashes)
    n: int  # the chunk's number in its run
    changes: tuple[ObjectUpserted | ObjectDeleted, ...]


# -- quota ------------------------------------------------------------------------------


class PodSetAdmission(msgspec.Struct, frozen=True):
    name: str
    flavors: dict[str, str]
    # Decoded within int64 and non-negative (``model.bounds``), as the Workload's
    # admission the sim records from it: one past that is dead-lettered by the consumer,
    # not written into a Workload every replica would refuse.
    resource_usage: dict[str, Quantity]
    count: int
    # Kueue's topology-aware scheduling: the domains its pods were admitted to
    topology_assignment: TopologyAssignment | None = None


class Admitted(Event, frozen=True, kw_only=True, tag=True):
    """Quota is reserved for the workload in its ClusterQueue."""

    workload: str  # Workload/ns/name, or a node-level preemptor (Pod/, PodGroup/)
    uid: str
    cluster_queue: str
    pod_sets: tuple[PodSetAdmission, ...]
    # Node-level: each pending pod of the preemptor -> the node it is to be bound to.
    placement: dict[str, str] = msgspec.field(default_factory=dict)
    quota_token: int = 0  # quota's lease token when it decided (the sim applies no other)


class Pending(Event, frozen=True, kw_only=True, tag=True):
    workload: str
    uid: str
    cluster_queue: str
    mode: str
    message: str


class CheckDecided(Event, frozen=True, kw_only=True, tag=True):
    """gangpreempt's admission check on a Workload Kueue reserved quota for: ``Ready``
    (its whole placement is confirmed: Kueue admits it) or ``Retry`` (Kueue releases the
    reservation and tries again ``requeue_after_s`` later). The actuator writes it on
    the Workload's ``status.admissionChecks`` (``docs/kubernetes.md``)."""

    workload: str  # Workload/ns/name
    uid: str
    resource_version: str  # of the Workload it was decided on
    check: str  # the AdmissionCheck's name
    state: str  # Ready | Retry
    message: str
    requeue_after_s: int = 0  # with Retry
    # Ready: each pod set's pods -> the node each is to land on (the pods are gated until
    # they are narrowed there), and the label ``podSetUpdates`` put on them.
    placement: dict[str, str] = msgspec.field(default_factory=dict)
    # Ready: each pod set's planned nodes, one per pod (podSetUpdates put them on the
    # pods, whose gate is removed once each is narrowed to one of them).
    pod_set_nodes: dict[str, tuple[str, ...]] = msgspec.field(default_factory=dict)
    quota_token: int = 0  # quota's lease token when it decided (no other is written)


class ShadowCompared(Event, frozen=True, kw_only=True, tag=True):
    """Shadow mode: a preemption a peer made (Kueue, kube-scheduler), beside what
    gangpreempt would have done for the same preemptor on the cluster as it was just
    before (``planning.shadow``). Nothing is written to the cluster."""

    peer: str  # kueue | kube-scheduler
    preemptor: str  # its ref, or "" when the marks do not say
    verdict: str  # same | fewer | different | partial-gang | unplaceable | not-needed | unknown
    peer_victims: tuple[str, ...]
    victims: tuple[str, ...]  # gangpreempt's, in the peer's units
    partial_gangs: tuple[str, ...] = ()
    message: str = ""


class PreemptionRequested(Event, frozen=True, kw_only=True, tag=True):
    """The workload could start if some running workloads were preempted."""

    request_id: str
    workload: str
    uid: str
    resource_version: str
    cluster_queue: str
    priority: int
    flavors: dict[str, dict[str, str]]
    # Victims already promised to other preemptors: not candidates for this one.
    claimed: tuple[str, ...] = ()
    state_seq: int = 0  # the STATE stream sequence the quota ledger was at
    quota_token: int = 0  # quota's lease token when it asked
    # When quota applied the preemptor's latest arrival (a STATE change making it pending)
    # before this request: arrival -> seen -> requested, per hop. None: not seen arriving
    # (it was pending before quota started, or it came back after a plan failed).
    seen_at: datetime | None = None


class RequestExpired(Event, frozen=True, kw_only=True, tag=True):
    """quota gave up a preemption request (no answer in time, or its preemptor was
    admitted or went away first); a later attempt gets a new request."""

    request_id: str
    workload: str
    reason: str


class PlanConfirmed(Event, frozen=True, kw_only=True, tag=True):
    plan_id: str
    preemptor: str


class PlanRejected(Event, frozen=True, kw_only=True, tag=True):
    plan_id: str
    preemptor: str
    reason: str


# -- victims ----------------------------------------------------------------------------


class PlannedVictim(msgspec.Struct, frozen=True):
    object: str
    uid: str
    resource_version: str
    reason: str
    cluster_queue: str
    priority: int
    evicting: bool = False
    pods: tuple[str, ...] = ()  # node-level: every pod that will be deleted (Pod/ns/name)
    pod_uids: tuple[str, ...] = ()  # their uids, in the same order ("" when unknown)
    why: str = ""  # the rule that made it a victim, in a few words (Events say it)
    # The legitimacy rule that allows it (planning/legitimacy.py: lower-priority,
    # newer-equal-priority, reclaim-within-cohort, fair-sharing, policy-any,
    # capacity-within-min); quota and the actuator refuse it when that rule does not hold.
    rule: str = ""


class PlanProposed(Event, frozen=True, kw_only=True, tag=True):
    """A victim set that lets the whole workload (every pod set) start."""

    plan_id: str
    request_id: str
    preemptor: str
    preemptor_uid: str
    cluster_queue: str
    pod_sets: tuple[str, ...]
    flavors: dict[str, dict[str, str]]
    victims: tuple[PlannedVictim, ...]
    placement: dict[str, str] = msgspec.field(default_factory=dict)
    state_seq: int = 0
    # Kueue's topology-aware scheduling: where each such pod set is to go (quota holds
    # that room from confirmation until the preemptor is admitted)
    topology: dict[str, TopologyAssignment] = msgspec.field(default_factory=dict)


class PreemptionInfeasible(Event, frozen=True, kw_only=True, tag=True):
    request_id: str
    preemptor: str
    message: str
    state_seq: int = 0


# -- actuator ---------------------------------------------------------------------------


class VictimActuated(Event, frozen=True, kw_only=True, tag=True):
    plan_id: str
    preemptor: str
    victim: str
    victim_uid: str
    reason: str
    sink: str
    fencing_token: int


class PlanActuated(Event, frozen=True, kw_only=True, tag=True):
    plan_id: str
    preemptor: str
    victims: tuple[str, ...]
    fencing_token: int


class PlanDropped(Event, frozen=True, kw_only=True, tag=True):
    """The plan was not actuated; nothing was touched."""

    plan_id: str
    preemptor: str
    reason: str


# -- many decisions in one message ------------------------------------------------------


class BatchItem(msgspec.Struct, frozen=True):
    """One event of a ``DecisionBatch``: its msgpack bytes exactly as it would travel
    alone, and its own trace context (so each plan's trace stays its own)."""

    event: msgspec.Raw
    trace: dict[str, str] = {}


class DecisionBatch(Event, frozen=True, kw_only=True, tag=True):
    """Decision events of one type that one publisher made while its previous message
    was being stored (group commit), in one DECISIONS message on their type's subject.
    Readers take ``unpack``: the events in the order they were made, each with its own
    id; a reader drops an id it has handled (a retry may compose a batch differently,
    which the stream's deduplication does not catch)."""

    kind: str  # the type of every event in it
    items: tuple[BatchItem, ...]


AnyEvent = (
    ObjectUpserted
    | ObjectDeleted
    | StateComplete
    | StateChunk
    | Admitted
    | Pending
    | CheckDecided
    | ShadowCompared
    | PreemptionRequested
    | RequestExpired
    | PlanConfirmed
    | PlanRejected
    | PlanProposed
    | PreemptionInfeasible
    | VictimActuated
    | PlanActuated
    | PlanDropped
    | DecisionBatch
)

_encoder = msgspec.msgpack.Encoder()
_decoder: msgspec.msgpack.Decoder[AnyEvent] = msgspec.msgpack.Decoder(AnyEvent)


def encode(event: Event) -> bytes:
    return _encoder.encode(event)


def decode(data: bytes) -> AnyEvent:
    """Decode a bus message; raises ``msgspec.DecodeError`` (with the field path) when the
    bytes are not a valid event."""
    return _decoder.decode(data)


def batch(events: list[tuple[bytes, dict[str, str]]], kind: str) -> DecisionBatch:
    """A ``DecisionBatch`` of encoded events of type ``kind`` (each with its trace
    context); its id follows from theirs, so the same batch sent again is a duplicate."""
    return DecisionBatch(
        id=stable_id("batch", *(_item_id(body) for body, _ in events)),
        occurred_at=datetime.now(UTC),
        kind=kind,
        items=tuple(BatchItem(msgspec.Raw(body), trace) for body, trace in events),
    )


class _IdOnly(msgspec.Struct):
    id: str


_id_decoder = msgspec.msgpack.Decoder(_IdOnly)


def _item_id(body: bytes) -> str:
    return _id_decoder.decode(body).id


def unpack(event: AnyEvent) -> list[AnyEvent]:
    """The events a message holds: those of a ``DecisionBatch`` in order, else the event
    itself. Raises ``msgspec.DecodeError`` (with the item's place) when an item is not a
    valid event."""
    if not isinstance(event, DecisionBatch):
        return [event]
    out: list[AnyEvent] = []
    for n, item in enumerate(event.items):
        try:
            out.append(_decoder.decode(item.event))
        except msgspec.DecodeError as exc:
            raise msgspec.DecodeError(f"{exc} - at `$.items[{n}].event`") from None
    return out


def decode_all(data: bytes) -> list[AnyEvent]:
    """Every event a bus message holds (``unpack`` of ``decode``)."""
    return unpack(decode(data))


def event_type(event: Event) -> str:
    return type(event).__name__


def stable_id(*parts: object) -> str:
    """A short deterministic id from its parts (same inputs, same id)."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()
    return digest[:24]


__all__ = [
    "SCHEMA_VERSION",
    "Admitted",
    "AnyEvent",
    "BatchItem",
    "CheckDecided",
    "DecisionBatch",
    "Event",
    "ObjectDeleted",
    "ObjectUpserted",
    "Pending",
    "PlanActuated",
    "PlanConfirmed",
    "PlanDropped",
    "PlanProposed",
    "PlanRejected",
    "PlannedVictim",
    "PodSetAdmission",
    "PreemptionInfeasible",
    "PreemptionRequested",
    "RequestExpired",
    "ShadowCompared",
    "StateChunk",
    "StateComplete",
    "VictimActuated",
    "batch",
    "decode",
    "decode_all",
    "encode",
    "event_type",
    "stable_id",
    "unpack",
]
