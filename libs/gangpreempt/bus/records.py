"""Plan records in the ``plans`` KV bucket: one key per plan (its id), the value a
msgpack ``PlanRecord``, every write a compare-and-set on the revision read.

``RecordStore`` reads and writes one record; ``RecordBook`` keeps a service's copy of
every record, followed from the bucket's stream (it survives server restarts like the
STATE replica), and tells listeners of each change.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TypeVar

import msgspec
import nats.errors
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from gangpreempt.bus.following import Follower
from gangpreempt.bus.provisioning import PLAN_HISTORY
from gangpreempt.bus.topology import Topology
from gangpreempt.errors import Conflict, InvalidInput, Transient
from gangpreempt.planning.records import PlanRecord

log = structlog.get_logger("gangpreempt.records")
T = TypeVar("T")

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(PlanRecord)
KV_OPERATION = "KV-Operation"
EXPIRES = "Nats-TTL"  # a message the server removes on its own after that long
RETIRE_TTL_S = 60.0  # how long the markers that retire a record stay

Versioned = tuple[PlanRecord, int]  # a record and the revision it was read at


def encode_record(rec: PlanRecord) -> bytes:
    return _encoder.encode(rec)


def decode_record(data: bytes) -> PlanRecord:
    try:
        return _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise InvalidInput(f"plan record: {exc}") from exc


class RecordStore:
    def __init__(self, kv: KeyValue, timeout: float = 5.0) -> None:
        self.kv = kv
        self.timeout = timeout

    async def _call(self, what: str, call: Awaitable[T]) -> T:
        """One KV call: a lost race is ``Conflict``; NATS away or slow is ``Transient``."""
        try:
            return await asyncio.wait_for(call, self.timeout)
        except KeyWrongLastSequenceError as exc:
            raise Conflict(f"{what}: another writer moved it first") from exc
        except KeyNotFoundError:
            raise
        except (TimeoutError, nats.errors.Error, OSError) as exc:
            raise Transient(f"{what}: {exc!r}") from exc

    async def get(self, plan_id: str) -> Versioned | None:
        try:
            entry = await self._call(f"plan record {plan_id}", self.kv.get(plan_id))
        except KeyNotFoundError:  # KeyDeletedError is a subclass
            return None
        if not entry.value:
            return None
        return decode_record(entry.value), int(entry.revision or 0)

    async def create(self, rec: PlanRecord) -> int:
        """Write a new record; ``Conflict`` if the plan already has one."""
        what = f"plan record {rec.plan_id} (create)"
        try:
            return int(await self._call(what, self.kv.create(rec.plan_id, encode_record(rec))))
        except KeyNotFoundError as exc:  # the client's look-up after a lost race
            raise Conflict(f"{what}: another writer moved it first") from exc

    async def put(self, rec: PlanRecord, revision: int) -> int:
        """Write ``rec`` over the revision it was read at; ``Conflict`` if it moved on."""
        what = f"plan record {rec.plan_id} (revision {revision})"
        return int(
            await self._call(what, self.kv.update(rec.plan_id, encode_record(rec), last=revision))
        )

    async def delete(self, plan_id: str, revision: int) -> None:
        """Delete the record (its followers learn it from the delete marker)."""
        what = f"plan record {plan_id} (delete at {revision})"
        await self._call(what, self.kv.delete(plan_id, last=revision))

    async def purge(self, plan_id: str, ttl: float = RETIRE_TTL_S) -> None:
        """Remove every message of a deleted record's key, its delete marker too (the
        bucket does not grow with every plan ever made), within ``ttl`` seconds.

        The bucket allows neither the purge API to the services nor roll-ups (either
        would let one writer wipe every record at once: ``provisioning``). So the key
        gets as many delete markers as the bucket keeps revisions per key, each expiring
        after ``ttl`` (``Nats-TTL``): they push the older revisions out, then go
        themselves. Followers learn nothing new from them (the key was deleted before)
        and keep no tombstone for them (``RecordBook``)."""
        js, stream = self.kv._js, self.kv._stream  # nats-py exposes no public handle
        subject = f"$KV.{stream.removeprefix('KV_')}.{plan_id}"
        headers = {KV_OPERATION: "DEL"}
        markers = [
            js.publish(subject, headers=dict(headers), msg_ttl=max(1.0, ttl))
            for _ in range(PLAN_HISTORY)
        ]
        await self._call(f"plan record {plan_id} (purge)", asyncio.gather(*markers))

    async def move(
        self, plan_id: str, mover: Callable[[PlanRecord], PlanRecord | None], attempts: int = 5
    ) -> Versioned | None:
        """Read, apply ``mover`` (which may raise ``IllegalMove``, or return None to write
        nothing), and write with compare-and-set; on a lost race, read again. Returns the
        record as written (or as read, when nothing was written), None when absent."""
        for _ in range(attempts):
            current = await self.get(plan_id)
            if current is None:
                return None
            rec, revision = current
            moved = mover(rec)
            if moved is None:
                return current
            try:
                return moved, await self.put(moved, revision)
            except Conflict:
                continue
        raise Transient(f"plan {plan_id}: too many writers at once")


class RecordBook:
    """Every plan record, as the bucket has it, kept current by a ``Follower``."""

    def __init__(self, nc: Client, topology: Topology, keep_tombstones: float = 7200.0) -> None:
        self.topology = topology
        self.prefix = f"$KV.{topology.plans_bucket}."
        self.records: dict[str, Versioned] = {}
        # deleted plan -> when (monotonic) it was learned, oldest first; forgotten after
        # ``keep_tombstones`` seconds (quota purges the delete markers before that)
        self.tombstones: OrderedDict[str, float] = OrderedDict()
        self.keep_tombstones = keep_tombstones
        self._listeners: list[Callable[[PlanRecord | None, PlanRecord | None], None]] = []
        self.follower = Follower(
            nc,
            f"KV_{topology.plans_bucket}",
            f"{self.prefix}>",
            self._on_msg,
            DeliverPolicy.LAST_PER_SUBJECT,
        )

    def on_change(self, listener: Callable[[PlanRecord | None, PlanRecord | None], None]) -> None:
        """``listener(old, new)`` after each change (None for absent)."""
        self._listeners.append(listener)

    async def start(self, timeout: float = 30.0) -> None:
        """Follow the bucket and wait until every record it holds now is known."""
        await self.follower.start()
        await self.caught_up(timeout)

    async def caught_up(self, timeout: float = 30.0) -> None:
        """Wait until every record the bucket holds now is known."""
        target = await self.follower.last_seq()
        deadline = time.monotonic() + timeout
        while self.follower.applied < target:
            if time.monotonic() > deadline:
                raise Transient(f"plan records: at {self.follower.applied}, not yet {target}")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        await self.follower.stop()

    def get(self, plan_id: str) -> PlanRecord | None:
        found = self.records.get(plan_id)
        return found[0] if found is not None else None

    def learn(
        self, rec: PlanRecord | None, revision: int, plan_id: str = "", *, tombstone: bool = True
    ) -> None:
        """Take a record at ``revision`` (None: deleted) unless a newer one is known: a
        service applies its own writes at once, and the follower's copy later. A deletion
        whose marker expires on its own (``tombstone`` False) leaves nothing to purge."""
        key = rec.plan_id if rec is not None else plan_id
        known = self.records.get(key)
        if known is not None and known[1] >= revision:
            return
        old = known[0] if known is not None else None
        if rec is not None:
            self.records[key] = (rec, revision)
        else:
            self.records.pop(key, None)
        if rec is None and tombstone:
            now = time.monotonic()
            self.tombstones[key] = now
            self.tombstones.move_to_end(key)
            while self.tombstones and now - next(iter(self.tombstones.values())) > (
                self.keep_tombstones
            ):
                self.tombstones.popitem(last=False)
        for listener in self._listeners:
            listener(old, rec)

    async def _on_msg(self, msg: Msg) -> None:
        key = msg.subject[len(self.prefix) :]
        seq = msg.metadata.sequence.stream
        known = self.records.get(key)
        if known is not None and known[1] >= seq:
            return  # its own write, learned when it was written: nothing to decode
        operation = (msg.headers or {}).get(KV_OPERATION)
        if operation in ("DEL", "PURGE") or not msg.data:
            self.learn(None, seq, key, tombstone=EXPIRES not in (msg.headers or {}))
            return
        try:
            rec = decode_record(msg.data)
        except InvalidInput as exc:
            log.error("unreadable plan record ignored", plan_id=key, error=str(exc))
            return
        self.learn(rec, seq)


def utcnow() -> datetime:
    return datetime.now(UTC)


__all__ = ["RecordBook", "RecordStore", "Versioned", "decode_record", "encode_record", "utcnow"]
