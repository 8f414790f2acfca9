"""Idempotent creation of the streams and buckets (safe to run from every service), each
with limits that keep it from taking the room of another, or of JetStream itself:

- every stream and bucket has ``max_bytes``, so JetStream reserves its room: the sum
  (``reserved_bytes``) fits in the deployments' ``max_file_store``
  (``serverconfig``), and a stream that fills up (a loop of dead letters) takes nothing
  from the plan records and the leases. DECISIONS and DLQ drop their oldest messages
  when full (``discard: old``); STATE, the plans and the leases refuse new ones instead
  (dropping the oldest object of the cluster state, or a live record, would be silent
  harm; a refused write is seen and retried);
- the streams the services follow with ordered consumers (STATE, the plans, the leases)
  take at most ``max_consumers`` consumers, and none with an inactive threshold longer
  than ``follower_inactive`` seconds (an abandoned one goes within that);
- neither bucket allows roll-ups (``Nats-Rollup``, ``sub`` or ``all``): with them, any
  writer of one key could purge the whole bucket in one message. Without them no
  service can remove a revision: quota retires an old plan record by pushing its
  revisions out with delete markers that expire (``records.RecordStore.purge``);
- a stream's replicas are never lowered unless asked (``force``): ``provision`` with
  the default of 1 against a 3-node cluster would otherwise drop two copies silently.
"""

from __future__ import annotations

import contextlib
import dataclasses

import msgspec
from nats.js import JetStreamContext
from nats.js.api import (
    DiscardPolicy,
    KeyValueConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamConsumerLimits,
)
from nats.js.errors import BadRequestError, NotFoundError
from nats.js.kv import KeyValue

from gangpreempt.bus.consumers import SPECS, consumer_config
from gangpreempt.bus.topology import Topology
from gangpreempt.config import Settings
from gangpreempt.errors import InvalidInput

DUPLICATE_WINDOW_S = 120.0
PLAN_HISTORY = 16  # revisions kept per plan record
MiB = 1 << 20


class StreamLimits(msgspec.Struct, frozen=True, kw_only=True):
    """How much each stream may hold and how many consumers may follow it."""

    state_bytes: int = 1024 * MiB  # about half a million objects of 2 KiB
    decisions_bytes: int = 512 * MiB  # discard old (and 7 days at most)
    dlq_bytes: int = 32 * MiB  # discard old (and 30 days at most)
    plans_bytes: int = 256 * MiB  # thousands of plans of every revision
    leases_bytes: int = 1 * MiB  # two keys
    # Consumers at once on STATE: one ordered consumer per service instance (victims
    # scale out), the admin's reads, and abandoned ones until they expire.
    state_consumers: int = 128
    bucket_consumers: int = 64  # on each bucket's stream (abandoned ones included)
    follower_inactive: float = 60.0  # seconds: the longest inactive threshold allowed


LIMITS = StreamLimits()


def reserved_bytes(limits: StreamLimits = LIMITS) -> int:
    """What one provisioning reserves on each server that holds a copy of every stream."""
    return (
        limits.state_bytes
        + limits.decisions_bytes
        + limits.dlq_bytes
        + limits.plans_bytes
        + limits.leases_bytes
    )


def _followed(limits: StreamLimits) -> StreamConsumerLimits:
    return StreamConsumerLimits(inactive_threshold=limits.follower_inactive)


def stream_configs(
    topology: Topology, replicas: int = 1, limits: StreamLimits = LIMITS
) -> list[StreamConfig]:
    """STATE, DECISIONS and DLQ as ``provision`` creates them."""
    return [
        StreamConfig(
            name=topology.state_stream,
            subjects=[topology.state_wildcard],
            storage=StorageType.FILE,
            retention=RetentionPolicy.LIMITS,
            duplicate_window=DUPLICATE_WINDOW_S,
            num_replicas=replicas,
            max_msgs_per_subject=1,
            max_bytes=limits.state_bytes,
            discard=DiscardPolicy.NEW,
            max_consumers=limits.state_consumers,
            consumer_limits=_followed(limits),
        ),
        StreamConfig(
            name=topology.decisions_stream,
            subjects=topology.decision_subjects,
            storage=StorageType.FILE,
            retention=RetentionPolicy.LIMITS,
            duplicate_window=DUPLICATE_WINDOW_S,
            num_replicas=replicas,
            max_bytes=limits.decisions_bytes,
            discard=DiscardPolicy.OLD,
            max_age=7 * 24 * 3600.0,
        ),
        StreamConfig(
            name=topology.dlq_stream,
            subjects=[f"{topology.prefix}.dlq.>"],
            storage=StorageType.FILE,
            retention=RetentionPolicy.LIMITS,
            duplicate_window=DUPLICATE_WINDOW_S,
            num_replicas=replicas,
            max_bytes=limits.dlq_bytes,
            discard=DiscardPolicy.OLD,
            max_age=30 * 24 * 3600.0,
        ),
    ]


async def _stream_info(js: JetStreamContext, name: str) -> StreamConfig | None:
    try:
        return (await js.stream_info(name)).config
    except NotFoundError:
        return None


def _check_replicas(current: StreamConfig | None, replicas: int, force: bool) -> None:
    had = (current.num_replicas or 1) if current is not None else 0
    if current is not None and replicas < had and not force:
        raise InvalidInput(
            f"stream {current.name} has {had} replicas; provisioning with {replicas} would "
            f"lower them: set --stream-replicas (GANGPREEMPT_STREAM_REPLICAS) to {had}, or "
            "run `gangpreempt provision --force` to lower them on purpose"
        )


async def _ensure_stream(js: JetStreamContext, config: StreamConfig) -> None:
    try:
        await js.add_stream(config)
    except BadRequestError:
        # Exists with another config (e.g. an older version): bring it up to date.
        await js.update_stream(config)


async def provision(
    js: JetStreamContext,
    topology: Topology,
    *,
    lease_ttl: float = 10.0,
    replicas: int = 1,
    force: bool = False,
    limits: StreamLimits = LIMITS,
) -> None:
    """Create (or update) the STATE, DECISIONS and DLQ streams and the plans and leases
    buckets, each with ``replicas`` copies (3 on a 3-node JetStream cluster), and the
    services' durable consumers. ``InvalidInput``, before anything is changed, when a
    stream has more replicas than ``replicas`` and ``force`` is not set."""
    streams = stream_configs(topology, replicas, limits)
    names = [c.name or "" for c in streams]
    names += [f"KV_{topology.plans_bucket}", f"KV_{topology.leases_bucket}"]
    for name in names:
        _check_replicas(await _stream_info(js, name), replicas, force)
    for config in streams:
        await _ensure_stream(js, config)
    await plans_bucket(js, topology, replicas, force=force, limits=limits)
    await leases_bucket(js, topology, lease_ttl, replicas, force=force, limits=limits)
    for service in SPECS:  # created (or brought up to date) here; services only bind
        await js.add_consumer(topology.decisions_stream, consumer_config(topology, service))


async def provision_with(js: JetStreamContext, settings: Settings, *, force: bool = False) -> None:
    """``provision`` with the settings' prefix, lease length and stream replicas."""
    await provision(
        js,
        Topology(settings.prefix),
        lease_ttl=settings.lease_ttl,
        replicas=settings.stream_replicas,
        force=force,
    )


async def _bucket(
    js: JetStreamContext,
    config: KeyValueConfig,
    max_bytes: int,
    limits: StreamLimits,
    force: bool,
) -> KeyValue:
    """Create the bucket if it is missing, then bring its stream to ``config`` and the
    hardening above (no roll-ups, bytes and consumers bounded)."""
    stream = f"KV_{config.bucket}"
    current = await _stream_info(js, stream)
    _check_replicas(current, config.replicas, force)
    if current is None:
        with contextlib.suppress(BadRequestError):  # created meanwhile by another
            await js.create_key_value(config)
        current = await _stream_info(js, stream)
        if current is None:
            raise InvalidInput(f"bucket {config.bucket} could not be created")
    wanted = dataclasses.replace(
        current,
        num_replicas=config.replicas,
        max_msgs_per_subject=config.history,
        max_age=config.ttl or 0.0,
        max_bytes=max_bytes,
        discard=DiscardPolicy.NEW,
        allow_rollup_hdrs=False,
        allow_msg_ttl=True,
        max_consumers=limits.bucket_consumers,
        consumer_limits=_followed(limits),
    )
    fields = (
        "num_replicas",
        "max_msgs_per_subject",
        "max_age",
        "max_bytes",
        "discard",
        "allow_rollup_hdrs",
        "allow_msg_ttl",
        "max_consumers",
    )
    stale = any(getattr(current, f) != getattr(wanted, f) for f in fields) or (
        (current.consumer_limits or StreamConsumerLimits()).inactive_threshold
        != limits.follower_inactive
    )
    if stale:
        await js.update_stream(wanted)
    return await js.key_value(config.bucket)


async def plans_bucket(
    js: JetStreamContext,
    topology: Topology,
    replicas: int = 1,
    *,
    force: bool = False,
    limits: StreamLimits = LIMITS,
) -> KeyValue:
    """One key per plan: its record (``gangpreempt.planning.records``), with the last
    revisions kept for people and the chaos checker to read the plan's history."""
    config = KeyValueConfig(bucket=topology.plans_bucket, history=PLAN_HISTORY, replicas=replicas)
    return await _bucket(js, config, limits.plans_bytes, limits, force)


async def leases_bucket(
    js: JetStreamContext,
    topology: Topology,
    ttl: float,
    replicas: int = 1,
    *,
    force: bool = False,
    limits: StreamLimits = LIMITS,
) -> KeyValue:
    """Leases expire ``ttl`` after their last renewal: the bucket's TTL must be the lease
    length its holders count with (a holder counts its lease valid for ``ttl`` less a
    margin after a renewal; a shorter TTL would let a successor in while it still acts)."""
    config = KeyValueConfig(bucket=topology.leases_bucket, history=1, ttl=ttl, replicas=replicas)
    return await _bucket(js, config, limits.leases_bytes, limits, force)


__all__ = [
    "DUPLICATE_WINDOW_S",
    "LIMITS",
    "PLAN_HISTORY",
    "StreamLimits",
    "leases_bucket",
    "plans_bucket",
    "provision",
    "provision_with",
    "reserved_bytes",
    "stream_configs",
]
