"""Running a consumer in a test: quota's kind of consumer on the actuator's events, until
a condition the handler sets."""

from __future__ import annotations

import asyncio
from typing import Any

from nats.aio.client import Client

from gangpreempt.bus import Consumer, Topology


async def consume_actuator_events(
    nc: Client,
    topology: Topology,
    durable: str,
    handler: Any,
    until: asyncio.Event,
    timeout: float = 15.0,
    **options: Any,
) -> Consumer:
    """Run the consumer ``durable`` on every actuator subject until ``until`` is set (or
    ``timeout`` passes: then ``TimeoutError``); returns it, stopped."""
    consumer = Consumer(
        nc,
        topology,
        "quota",
        durable=durable,
        stream=topology.decisions_stream,
        subjects=[topology.service_wildcard("actuator")],
        handler=handler,
        **options,
    )
    stop = asyncio.Event()
    task = asyncio.ensure_future(consumer.run(stop))
    try:
        await asyncio.wait_for(until.wait(), timeout)
    finally:
        stop.set()
        await task
    return consumer
