"""The durable consumers of the decisions stream, one per service that reads it: what
each filters and how long a delivery may stay unacknowledged before it is redelivered.

An admin creates them when provisioning (``provisioning.provision``); a service only
binds to its own, so it cannot create another or widen its filter (``permissions``).
"""

from __future__ import annotations

import msgspec
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from gangpreempt import events
from gangpreempt.bus.topology import Topology


class ConsumerSpec(msgspec.Struct, frozen=True):
    events: tuple[type[events.Event], ...] = ()  # () with every_decision: all of them
    every_decision: bool = False
    ack_wait: float = 10.0  # seconds before an unacknowledged delivery comes back


SPECS: dict[str, ConsumerSpec] = {
    # ingest (the sim cluster) applies admissions and plays the timeline on any event
    "ingest": ConsumerSpec(every_decision=True),
    "quota": ConsumerSpec(events=(events.PlanProposed, events.PreemptionInfeasible)),
    # a victim search on a very large cluster takes a second or more
    "victims": ConsumerSpec(events=(events.PreemptionRequested,), ack_wait=30.0),
    # the active actuator writes quota's admission check decisions and lifts the gates
    # of the pods quota placed
    "actuator": ConsumerSpec(events=(events.CheckDecided, events.Admitted), ack_wait=70.0),
}


def consumer_subjects(topology: Topology, service: str) -> list[str]:
    spec = SPECS[service]
    if spec.every_decision:
        return topology.decision_subjects
    return [topology.event_subject(t) for t in spec.events]


def consumer_config(topology: Topology, service: str) -> ConsumerConfig:
    return ConsumerConfig(
        durable_name=topology.durable(service),
        filter_subjects=consumer_subjects(topology, service),
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=SPECS[service].ack_wait,
        max_ack_pending=10_000,
        deliver_policy=DeliverPolicy.ALL,
    )


__all__ = ["SPECS", "ConsumerSpec", "consumer_config", "consumer_subjects"]
