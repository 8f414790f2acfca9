"""Reading what a stream holds now, whole: for people, ``up``, the tests and the chaos
checker.

A read must not end early on a busy machine. A push consumer (an ordered consumer, or
the client's ``kv.history``, which is one) cannot tell "nothing more is stored" from
"the rest is still on its way": a read that stops when no message came within a short
wait, or when the consumer reports nothing pending before the client has taken in what
the server already sent, returns part of the stream or nothing at all. Here an
ephemeral **pull** consumer is created first; the server delivers nothing until asked,
so the count it reports pending then is exactly what the stream holds on the subject,
and the read fetches until it has that many, or fails, naming how far it got, at its
deadline.
"""

from __future__ import annotations

import contextlib
import time

import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from gangpreempt.errors import Transient

BATCH = 512


async def read_subject(
    js: JetStreamContext, stream: str, subject: str, timeout: float = 30.0
) -> list[Msg]:
    """Every message ``stream`` holds on ``subject`` (wildcards allowed) when the call
    starts, in stream order; ``Transient`` if they are not all read within ``timeout``."""
    config = ConsumerConfig(
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.NONE,
        inactive_threshold=max(5.0, timeout),
        mem_storage=True,
    )
    psub = await js.pull_subscribe(subject, stream=stream, config=config)
    name = ""
    try:
        info = await psub.consumer_info()
        name, pending = info.name, info.num_pending or 0
        out: list[Msg] = []
        deadline = time.monotonic() + timeout
        while len(out) < pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Transient(
                    f"read {len(out)} of the {pending} messages {stream} holds on {subject} "
                    f"within {timeout} s"
                )
            try:
                out += await psub.fetch(min(BATCH, pending - len(out)), timeout=min(left, 5.0))
            except nats.errors.TimeoutError:
                continue
        return out
    finally:
        await psub.unsubscribe()
        # the ephemeral consumer goes now, not at its inactivity threshold
        if name:
            with contextlib.suppress(Exception):  # gone already, or NATS away: it expires
                await js.delete_consumer(stream, name)


async def key_history(
    js: JetStreamContext, bucket: str, key: str, timeout: float = 30.0
) -> list[Msg]:
    """Every revision of ``key`` in KV ``bucket`` that the bucket keeps, oldest first
    (delete and purge markers included: their ``KV-Operation`` header says which)."""
    return await read_subject(js, f"KV_{bucket}", f"$KV.{bucket}.{key}", timeout)


__all__ = ["key_history", "read_subject"]
