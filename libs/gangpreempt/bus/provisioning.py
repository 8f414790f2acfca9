"""Idempotent creation of the streams and buckets (safe to run from every service)."""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import BadRequestError
from nats.js.kv import KeyValue

from gangpreempt.bus.consumers import SPECS, consumer_config
from gangpreempt.bus.topology import Topology
from gangpreempt.config import Settings

DUPLICATE_WINDOW_S = 120.0
PLAN_HISTORY = 16  # revisions kept per plan record


async def _ensure_stream(js: JetStreamContext, config: StreamConfig) -> None:
    try:
        await js.add_stream(config)
    except BadRequestError:
        # Exists with another config (e.g. an older version): bring it up to date.
        await js.update_stream(config)


async def provision(
    js: JetStreamContext, topology: Topology, *, lease_ttl: float = 10.0, replicas: int = 1
) -> None:
    """Create (or update) the STATE, DECISIONS and DLQ streams and the plans and leases
    buckets, each with ``replicas`` copies (3 on a 3-node JetStream cluster)."""
    await _ensure_stream(
        js,
        StreamConfig(
            name=topology.state_stream,
            subjects=[topology.state_wildcard],
            max_msgs_per_subject=1,
            storage=StorageType.FILE,
            retention=RetentionPolicy.LIMITS,
            duplicate_window=DUPLICATE_WINDOW_S,
            num_replicas=replicas,
        ),
    )
    await _ensure_stream(
        js,
        StreamConfig(
            name=topology.decisions_stream,
            subjects=topology.decision_subjects,
            storage=StorageType.FILE,
            retention=RetentionPolicy.LIMITS,
            duplicate_window=DUPLICATE_WINDOW_S,
            num_replicas=replicas,
            max_age=7 * 24 * 3600.0,
        ),
    )
    await _ensure_stream(
        js,
        StreamConfig(
            name=topology.dlq_stream,
            subjects=[f"{topology.prefix}.dlq.>"],
            storage=StorageType.FILE,
            duplicate_window=DUPLICATE_WINDOW_S,
            num_replicas=replicas,
            max_age=30 * 24 * 3600.0,
        ),
    )
    await plans_bucket(js, topology, replicas)
    await leases_bucket(js, topology, lease_ttl, replicas)
    for service in SPECS:  # created (or brought up to date) here; services only bind
        await js.add_consumer(topology.decisions_stream, consumer_config(topology, service))


async def provision_with(js: JetStreamContext, settings: Settings) -> None:
    """``provision`` with the settings' prefix, lease length and stream replicas."""
    await provision(
        js,
        Topology(settings.prefix),
        lease_ttl=settings.lease_ttl,
        replicas=settings.stream_replicas,
    )


async def plans_bucket(js: JetStreamContext, topology: Topology, replicas: int = 1) -> KeyValue:
    """One key per plan: its record (``gangpreempt.planning.records``), with the last
    revisions kept for people and the chaos checker to read the plan's history."""
    config = KeyValueConfig(bucket=topology.plans_bucket, history=PLAN_HISTORY, replicas=replicas)
    try:
        return await js.create_key_value(config)
    except BadRequestError:  # exists with an older configuration: bring it up to date
        info = await js.stream_info(f"KV_{topology.plans_bucket}")
        info.config.max_msgs_per_subject = PLAN_HISTORY
        await js.update_stream(info.config)
        return await js.key_value(topology.plans_bucket)


async def leases_bucket(
    js: JetStreamContext, topology: Topology, ttl: float, replicas: int = 1
) -> KeyValue:
    """Leases expire ``ttl`` after their last renewal: the bucket's TTL must be the lease
    length its holders count with (a holder counts its lease valid for ``ttl`` less a
    margin after a renewal; a shorter TTL would let a successor in while it still acts)."""
    try:
        return await js.create_key_value(
            KeyValueConfig(bucket=topology.leases_bucket, history=1, ttl=ttl, replicas=replicas)
        )
    except BadRequestError:  # exists with another configuration: bring its TTL up to date
        info = await js.stream_info(f"KV_{topology.leases_bucket}")
        if info.config.max_age != ttl:
            info.config.max_age = ttl
            await js.update_stream(info.config)
        return await js.key_value(topology.leases_bucket)


__all__ = ["DUPLICATE_WINDOW_S", "leases_bucket", "plans_bucket", "provision", "provision_with"]
