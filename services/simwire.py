"""Request/reply messages between the actuator's ``sim`` sink and ingest's sim cluster
(the demo's stand-in for the API server): live reads and evictions with preconditions."""

from __future__ import annotations

from typing import TypeVar

import msgspec

from gangpreempt.planning.barrier import LiveObject


class ReadRequest(msgspec.Struct, frozen=True):
    refs: list[str]


class ReadReply(msgspec.Struct, frozen=True):
    objects: list[LiveObject]


class EvictRequest(msgspec.Struct, frozen=True):
    ref: str
    uid: str
    plan_id: str
    preemptor: str
    reason: str
    fencing_token: int
    pods: tuple[str, ...] = ()  # node-level victims: the pods to delete
    mode: str = ""  # "kueue", "delete", "eviction" or "soft-eviction" (see actuator.sinks)
    pod_uids: tuple[str, ...] = ()  # the uid of each of ``pods`` the plan was made for
    why: str = ""  # the rule that made it a victim (the Events' messages say it)


class EvictReply(msgspec.Struct, frozen=True):
    ok: bool
    applied: bool = False  # False when this plan had already evicted it (idempotent repeat)
    detail: str = ""
    fenced: bool = False  # refused: the token is not the current lease's


class StatsReply(msgspec.Struct, frozen=True):
    evictions: dict[str, int]  # victim ref -> evictions applied
    fencing_token: int
    soft_evicted: list[str] = msgspec.field(default_factory=list)  # pods labelled, in order


T = TypeVar("T", bound=msgspec.Struct)

encode = msgspec.msgpack.encode


def decode(data: bytes, kind: type[T]) -> T:
    return msgspec.msgpack.decode(data, type=kind)


__all__ = [
    "EvictReply",
    "EvictRequest",
    "ReadReply",
    "ReadRequest",
    "StatsReply",
    "decode",
    "encode",
]
