"""Prometheus metrics of a service, served at ``/metrics`` on its health port.

Names and labels follow Kueue's and kube-scheduler's where the meaning is the same, so
their dashboards and alerts carry over; the rest are gangpreempt's own, under the
``gangpreempt_`` prefix. Every label takes a bounded set of values (services, consumers,
event types, reasons, ClusterQueues, kinds): never a workload, a pod or a plan.

Most counters follow the events: ``published`` is told of each event a service sends
(plans by outcome, victims, preemption attempts, admissions), ``consumed`` of each one
it handles (consumer lag and redeliveries, and the start of each hop of a decision, so
that ``published`` can time the hop that ends there: requested -> proposed ->
confirmed -> actuated -> admitted)."""

from __future__ import annotations

import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from opentelemetry.trace import Span
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gangpreempt import events
from gangpreempt.telemetry.tracing import tracer

# Latency buckets (seconds): a hop is milliseconds when all is well, up to the
# termination grace of the victims (tens of seconds) for actuated -> admitted.
HOP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
CALL_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
SIZE_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000)
VICTIM_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)  # kube-scheduler's (2^i)

# -- Kueue's names ------------------------------------------------------------------------

KUEUE_PREEMPTED = Counter(
    "kueue_preempted_workloads_total",
    "Workloads preempted (actuated), by the preemptor's ClusterQueue and the reason "
    "(InClusterQueue, InCohortReclamation, InCohortFairSharing, InCohortReclaimWhileBorrowing).",
    ["preempting_cluster_queue", "reason"],
)
KUEUE_ADMISSION_ATTEMPTS = Counter(
    "kueue_admission_attempts_total",
    "Admission attempts of pending workloads in the quota cycle: success (admitted) or "
    "inadmissible (pending or preempting).",
    ["result"],
)
KUEUE_ADMITTED = Counter(
    "kueue_admitted_workloads_total",
    "Workloads admitted, by ClusterQueue.",
    ["cluster_queue"],
)
KUEUE_ATTEMPT_DURATION = Histogram(
    "kueue_admission_attempt_duration_seconds",
    "Duration of one admission cycle over every pending workload.",
    buckets=CALL_BUCKETS,
)

# -- kube-scheduler's names ---------------------------------------------------------------

SCHEDULER_PREEMPTION_ATTEMPTS = Counter(
    "scheduler_preemption_attempts_total",
    "Preemption attempts (a preemption requested for a pod, a gang or a workload).",
)
SCHEDULER_PREEMPTION_VICTIMS = Histogram(
    "scheduler_preemption_victims",
    "Victims (pods) of each actuated preemption.",
    buckets=VICTIM_BUCKETS,
)
SCHEDULER_PODGROUP_PREEMPTION_ATTEMPTS = Counter(
    "scheduler_podgroup_preemption_attempts_total",
    "Preemption attempts for a pod group (gang).",
)

# -- gangpreempt's own ------------------------------------------------------------------

PLANS = Counter(
    "gangpreempt_plans_total",
    "Plans by outcome: proposed, confirmed, rejected, dropped, actuated.",
    ["outcome"],
)
PLANS_DROPPED = Counter(
    "gangpreempt_plans_dropped_total",
    "Plans dropped without touching anything, by reason (stale, not_placed, "
    "pod_sets_missing, live_read_failed, no_proposal, other).",
    ["reason"],
)
PLANS_ILLEGITIMATE = Counter(
    "gangpreempt_plans_illegitimate_total",
    "Plans refused because a victim may not be taken for the preemptor, by the service "
    "that refused it (quota before confirming, actuator before its first write) and the "
    "rule (planning/legitimacy.py: protected-namespace, system-critical, non-preemptible, "
    "unknown-victim, off-placement, outside-cohort, wrong-cluster-queue, priority, "
    "named-rule).",
    ["service", "rule"],
)
VICTIMS = Counter(
    "gangpreempt_victims_total",
    "Victims actuated, by reason and kind (Workload, Pod, PodGroup).",
    ["reason", "kind"],
)
HOP_SECONDS = Histogram(
    "gangpreempt_decision_hop_seconds",
    "Time between the events of one decision, per hop: seen_to_requested (quota applied "
    "the preemptor's arrival -> its request), requested_to_proposed, proposed_to_confirmed, "
    "confirmed_to_actuated, actuated_to_admitted.",
    ["hop"],
    buckets=HOP_BUCKETS,
)
CORE_SECONDS = Histogram(
    "gangpreempt_core_call_seconds",
    "Time of the pure core's calls, per call (admission_pass, node_decisions, victim_search).",
    ["call"],
    buckets=CALL_BUCKETS,
)
GC_PAUSE_SECONDS = Histogram(
    "gangpreempt_gc_pause_seconds",
    "Duration of the garbage collector's collections, per generation (2: a full one).",
    ["generation"],
    buckets=CALL_BUCKETS,
)
CYCLE_SECONDS = Histogram(
    "gangpreempt_quota_cycle_seconds",
    "Duration of quota's admission cycle (deciding and publishing).",
    buckets=CALL_BUCKETS,
)
CYCLE_SIZE = Histogram(
    "gangpreempt_quota_cycle_decisions",
    "Decisions made in one quota cycle (pending workloads, pods and gangs).",
    buckets=SIZE_BUCKETS,
)
EVENTS_PUBLISHED = Counter(
    "gangpreempt_events_published_total",
    "Events published, by type.",
    ["type"],
)
DISRUPTION_HELD = Counter(
    "gangpreempt_disruption_budget_held_total",
    "Preemptions held back by the disruption budget, when requested or confirmed.",
    ["stage"],
)
DISRUPTION_SPENT = Gauge(
    "gangpreempt_disruption_budget_spent",
    "What a budget scope (the cluster, or a cohort tree) spent in the window, in the "
    "budget's unit (victims or lost GPU-hours), as of its last check.",
    ["scope"],
)
DECISION_BATCH_SIZE = Histogram(
    "gangpreempt_decision_batch_events",
    "Decision events sent together in one DecisionBatch message (group commit), by type.",
    ["type"],
    buckets=SIZE_BUCKETS,
)
EVENTS_CONSUMED = Counter(
    "gangpreempt_events_consumed_total",
    "Events handled by a consumer, by consumer and type.",
    ["consumer", "type"],
)
CONSUMER_LAG = Gauge(
    "gangpreempt_consumer_lag",
    "Messages stored for the consumer and not yet delivered, as of its last delivery.",
    ["consumer"],
)
REDELIVERIES = Counter(
    "gangpreempt_redeliveries_total",
    "Messages delivered again to a consumer (not acknowledged in time, or nak'd).",
    ["consumer"],
)
DEAD_LETTERS = Counter(
    "gangpreempt_dead_letters_total",
    "Messages sent to the dead-letter subject, by service and reason (decode, "
    "wrong_subject, invalid, handler_failed, state; oversized: an event larger than the "
    "server takes, never stored).",
    ["service", "reason"],
)
LEASE_HOLDER = Gauge(
    "gangpreempt_lease_holder",
    "1 while this instance holds the service's lease, else 0.",
    ["service"],
)
FENCING_TOKEN = Gauge(
    "gangpreempt_fencing_token",
    "The fencing token (lease revision) this instance last held.",
    ["service"],
)
RELISTS = Counter(
    "gangpreempt_ingest_relists_total",
    "Full lists of a source (the first one and each periodic or forced relist).",
    ["source"],
)
DECODE_SECONDS = Histogram(
    "gangpreempt_ingest_decode_seconds",
    "Time to turn one batch of source objects into the model.",
    ["source"],
    buckets=CALL_BUCKETS,
)

# -- shadow mode -------------------------------------------------------------------------

SHADOW_PREEMPTIONS = Counter(
    "gangpreempt_shadow_preemptions_total",
    "Shadow mode: preemptions a peer made (kueue, kube-scheduler), by what gangpreempt "
    "would have done for the same preemptor (same, fewer, different, partial-gang, "
    "unplaceable, not-needed, unknown).",
    ["peer", "verdict"],
)
SHADOW_VICTIMS = Counter(
    "gangpreempt_shadow_victims_total",
    "Shadow mode: victims of the peers' preemptions (side peer) and the victims "
    "gangpreempt would have taken for the same preemptors (side gangpreempt), in the "
    "peer's units (Workloads for Kueue, pods for kube-scheduler).",
    ["peer", "side"],
)
SHADOW_PARTIAL_GANGS = Counter(
    "gangpreempt_shadow_partial_gangs_total",
    "Shadow mode: gangs a peer's preemption split (some pods taken, others left running).",
    ["peer"],
)

# -- the hops of a decision -------------------------------------------------------------

_REMEMBERED = 40_000  # hop starts kept (oldest forgotten first)


class _Starts:
    """When each decision's last event was seen, by correlation key, bounded."""

    def __init__(self) -> None:
        self.seen: OrderedDict[tuple[str, str], datetime] = OrderedDict()

    def put(self, kind: str, key: str, at: datetime) -> None:
        self.seen[(kind, key)] = at
        self.seen.move_to_end((kind, key))
        if len(self.seen) > _REMEMBERED:
            self.seen.popitem(last=False)

    def take(self, kind: str, key: str) -> datetime | None:
        return self.seen.pop((kind, key), None)


_starts = _Starts()


def hop(name: str, start: datetime | None, end: datetime) -> None:
    """Observe one hop of a decision (nothing when its start is unknown)."""
    if start is not None:
        HOP_SECONDS.labels(name).observe(max(0.0, (end - start).total_seconds()))


def hop_started(kind: str, key: str, at: datetime) -> None:
    """A hop starts outside the events (quota sees a plan record actuated): ``published``
    ends it (the preemptor's ``Admitted``)."""
    _starts.put(kind, key, at)


def hop_forgotten(kind: str, key: str) -> None:
    """The hop that started will not end (its preemptor is gone): forget its start."""
    _starts.take(kind, key)


def _note_start(event: events.Event) -> None:
    """A consumed event that starts a hop its consumer ends: the request (victims
    answers it) and the proposal (quota confirms it). The other hops start from the
    plan record (``hop`` in the actuator, ``hop_started`` in quota)."""
    if isinstance(event, events.PreemptionRequested):
        _starts.put("requested", event.request_id, event.occurred_at)
    elif isinstance(event, events.PlanProposed):
        _starts.put("proposed", event.plan_id, event.occurred_at)


def consumed(
    event: events.Event, consumer: str, num_delivered: int = 1, num_pending: int | None = None
) -> None:
    """A consumer handles ``event`` (its ``num_delivered``-th delivery, ``num_pending``
    messages left behind it)."""
    EVENTS_CONSUMED.labels(consumer, events.event_type(event)).inc()
    if num_delivered > 1:
        REDELIVERIES.labels(consumer).inc()
    if num_pending is not None:
        CONSUMER_LAG.labels(consumer).set(num_pending)
    _note_start(event)


def skipped(consumer: str, num_pending: int | None) -> None:
    """A consumer acknowledged an event unread (one its handler ignores): only its lag."""
    if num_pending is not None:
        CONSUMER_LAG.labels(consumer).set(num_pending)


def idle(consumer: str) -> None:
    """The consumer found nothing to fetch: it has no lag."""
    CONSUMER_LAG.labels(consumer).set(0)


_state_children: dict[str, Any] = {}


def state_sent(etype: str) -> None:
    """A STATE message was sent (counted when sent, not when stored: a full republish is
    tens of thousands of them, and a callback on each ack costs more than the count)."""
    child = _state_children.get(etype)
    if child is None:
        child = _state_children[etype] = EVENTS_PUBLISHED.labels(etype)
    child.inc()


def decision_batch(etype: str, count: int) -> None:
    """``count`` decision events of type ``etype`` were sent as one message."""
    DECISION_BATCH_SIZE.labels(etype).observe(count)


def published(event: events.Event) -> None:
    """An event was stored on its stream: count it, and time the hop it ends."""
    EVENTS_PUBLISHED.labels(events.event_type(event)).inc()
    at = event.occurred_at
    if isinstance(event, events.PreemptionRequested):
        SCHEDULER_PREEMPTION_ATTEMPTS.inc()
        if event.workload.startswith("PodGroup/"):
            SCHEDULER_PODGROUP_PREEMPTION_ATTEMPTS.inc()
    elif isinstance(event, events.PlanProposed):
        PLANS.labels("proposed").inc()
        hop("requested_to_proposed", _starts.take("requested", event.request_id), at)
    elif isinstance(event, events.PlanConfirmed):
        PLANS.labels("confirmed").inc()
        hop("proposed_to_confirmed", _starts.take("proposed", event.plan_id), at)
    elif isinstance(event, events.PlanRejected):
        PLANS.labels("rejected").inc()
    elif isinstance(event, events.PlanDropped):
        PLANS.labels("dropped").inc()
        PLANS_DROPPED.labels(reason_class(event.reason)).inc()
    elif isinstance(event, events.PlanActuated):
        PLANS.labels("actuated").inc()
    elif isinstance(event, events.VictimActuated):
        kind = event.victim.split("/", 1)[0] or "Unknown"
        VICTIMS.labels(event.reason, kind).inc()
    elif isinstance(event, events.ShadowCompared):
        SHADOW_PREEMPTIONS.labels(event.peer, event.verdict).inc()
        SHADOW_VICTIMS.labels(event.peer, "peer").inc(len(event.peer_victims))
        SHADOW_VICTIMS.labels(event.peer, "gangpreempt").inc(len(event.victims))
        if event.partial_gangs:
            SHADOW_PARTIAL_GANGS.labels(event.peer).inc(len(event.partial_gangs))
    elif isinstance(event, events.Admitted):
        KUEUE_ADMITTED.labels(event.cluster_queue or "none").inc()
        hop("actuated_to_admitted", _starts.take("actuated", event.workload), at)


def plan_actuated(cluster_queue: str, reasons: list[str], pods: int) -> None:
    """An actuated plan: Kueue's preempted-workloads count per victim, kube-scheduler's
    victims histogram (pods)."""
    for reason in reasons:
        KUEUE_PREEMPTED.labels(cluster_queue or "none", reason).inc()
    SCHEDULER_PREEMPTION_VICTIMS.observe(pods)


# Why the actuator drops a plan (``services.actuator.driving``): the label of each.
DROP_REASONS = (
    ("stale", "stale"),
    ("the gang is not placed", "not_placed"),
    ("plan does not cover pod sets", "pod_sets_missing"),
    ("live read failed", "live_read_failed"),
    ("the record carries no proposal", "no_proposal"),
)


def reason_class(reason: str) -> str:
    """The bounded label of a drop's free-text reason (``other`` when not known)."""
    for prefix, label in DROP_REASONS:
        if reason.startswith(prefix):
            return label
    return "other"


@contextmanager
def core_call(call: str, **attributes: Any) -> Iterator[Span]:
    """A call of the pure core: timed, and a child span of the current one (the caller
    sets the numbers that matter on it as attributes)."""
    start = time.perf_counter()
    with tracer().start_as_current_span(call, attributes=attributes) as span:
        try:
            yield span
        finally:
            CORE_SECONDS.labels(call).observe(time.perf_counter() - start)


class _StateObjects(Collector):
    """``gangpreempt_state_objects{kind}``: the objects of a service's state, counted at
    each scrape from the sources registered (``state_objects``)."""

    def __init__(self) -> None:
        self.sources: list[tuple[weakref.ref[Any], Callable[[Any], dict[str, int]]]] = []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "gangpreempt_state_objects",
            "Objects in the service's copy of the state.",
            labels=["kind"],
        )
        counts: dict[str, int] = {}
        alive = []
        for ref, count in self.sources:
            owner = ref()
            if owner is None:
                continue  # a copy that is gone (tests make many in one process)
            alive.append((ref, count))
            for kind, n in count(owner).items():
                counts[kind] = counts.get(kind, 0) + n
        self.sources = alive
        for kind, n in sorted(counts.items()):
            family.add_metric([kind], n)
        yield family


_state = _StateObjects()
REGISTRY.register(_state)


def state_objects(owner: Any, count: Callable[[Any], dict[str, int]]) -> None:
    """At each scrape, count the objects ``count(owner)`` returns (kind -> count), for
    as long as ``owner`` lives."""
    _state.sources.append((weakref.ref(owner), count))


def exposition() -> tuple[bytes, str]:
    """The body and content type of ``/metrics``."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


__all__ = [
    "consumed",
    "core_call",
    "decision_batch",
    "exposition",
    "hop",
    "hop_forgotten",
    "hop_started",
    "idle",
    "plan_actuated",
    "published",
    "reason_class",
    "state_objects",
    "state_sent",
]
