"""quota in shadow mode (``GANGPREEMPT_MODE=shadow``): gangpreempt writes nothing; each
preemption Kueue or kube-scheduler makes is compared with what gangpreempt would have
done (``gangpreempt.planning.shadow``) and published as ``ShadowCompared``.

A peer marks its victims one STATE change at a time (Kueue patches each victim, in
parallel; kube-scheduler marks then deletes pod after pod), so the victims of one
preemptor are gathered in an *episode*: keyed by the preemptor Kueue names (its UID), or
the preemptor found by kube-scheduler's nomination (else the victim's node), and closed
``shadow_settle`` seconds after its last victim. What the comparison needs of the state
before is remembered as it is first seen: each victim and, for a Kueue victim, its pods
(the Job controller deletes them soon after), and the preemptor while it is pending.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog

from gangpreempt import events
from gangpreempt.model.cluster import ClusterState
from gangpreempt.model.pods import Pod
from gangpreempt.model.workloads import Workload
from gangpreempt.planning import shadow

log = structlog.get_logger("gangpreempt.quota")
MAX_EPISODES = 10_000  # open at once; the oldest is compared early past this


@dataclass
class Episode:
    peer: str
    preemptor: str  # its ref, "" while not known
    opened_at: datetime
    last: float  # monotonic: when its last victim was seen
    uid: str = ""  # Kueue: the preemptor's UID its message names
    node: str = ""  # kube-scheduler: the node of its victims
    victims: list[str] = field(default_factory=list)
    remembered: dict[str, Workload | Pod] = field(default_factory=dict)

    def resolved(self, ref: str, objects: dict[str, Workload | Pod]) -> None:
        self.preemptor = ref
        for key, obj in objects.items():
            self.remembered.setdefault(key, obj)


class Shadow:
    def __init__(
        self,
        state: Callable[[], ClusterState],
        publish: Callable[[events.Event], Awaitable[Any]],
        now: Callable[[], datetime],
        settle: float,
    ) -> None:
        self.state = state
        self.publish = publish
        self.now = now
        self.settle = settle
        self.episodes: dict[tuple[str, str], Episode] = {}
        self.compared = 0

    def observe(self, kind: str, old: Any, new: Any) -> None:
        """A STATE change (applied already): a peer's new victim joins its episode; the
        preemptor an episode waits for is found (its objects may come after the marks:
        ingest does not keep the order of changes across objects)."""
        if self.episodes and new is not None:
            self.resolve(new)
        victim = shadow.newly_marked(kind, old, new)
        if victim is None:
            return
        state = self.state()
        preemptor = shadow.preemptor_of(state, victim)
        if victim.peer == shadow.KUEUE:
            key = (victim.peer, victim.preemptor_uid or victim.victim)
        else:
            key = (victim.peer, preemptor or f"node/{victim.node}")
        episode = self.episodes.get(key)
        if episode is None:
            if len(self.episodes) >= MAX_EPISODES:
                oldest = min(self.episodes.values(), key=lambda e: e.last)
                oldest.last = float("-inf")
            episode = self.episodes[key] = Episode(
                victim.peer, "", self.now(), 0.0, victim.preemptor_uid, victim.node
            )
        episode.last = time.monotonic()
        if victim.victim not in episode.victims:
            episode.victims.append(victim.victim)
        for ref, obj in shadow.related(state, victim).items():
            episode.remembered.setdefault(ref, obj)
        if preemptor and not episode.preemptor:
            episode.resolved(preemptor, shadow.preemptor_objects(state, preemptor))

    def resolve(self, new: Any) -> None:
        """``new`` is the preemptor an open episode waits for."""
        for episode in self.episodes.values():
            if episode.preemptor:
                continue
            if isinstance(new, Workload) and episode.uid and new.uid == episode.uid:
                episode.resolved(new.ref, {new.ref: shadow.as_pending(new)})
            elif (
                isinstance(new, Pod)
                and episode.node
                and new.pending
                and new.nominated_node == episode.node
            ):
                ref = shadow.unit_ref(new)
                episode.resolved(ref, shadow.preemptor_objects(self.state(), ref))

    def due(self, clock: float | None = None) -> list[Episode]:
        """The episodes whose last victim is ``settle`` seconds old, taken out."""
        clock = time.monotonic() if clock is None else clock
        keys = [k for k, e in self.episodes.items() if clock - e.last >= self.settle]
        return [self.episodes.pop(k) for k in keys]

    def comparison(self, episode: Episode) -> shadow.Comparison:
        state = self.state()
        if not episode.preemptor:  # look once more: it may be known by now
            found = shadow.PeerVictim(
                episode.peer, "", preemptor_uid=episode.uid, node=episode.node
            )
            ref = shadow.preemptor_of(state, found)
            if ref:
                episode.resolved(ref, shadow.preemptor_objects(state, ref))
        preemptor = episode.preemptor
        was = shadow.before(state, episode.remembered, preemptor)
        return shadow.compare(was, self.now(), episode.peer, preemptor, episode.victims)

    async def close_due(self, publishing: bool) -> int:
        """Compare the settled episodes; publish each comparison while ``publishing``
        (the lease holder), else drop it (a standby follows, the holder reports)."""
        done = 0
        for episode in self.due():
            if not publishing:
                continue
            c = self.comparison(episode)
            event = events.ShadowCompared(
                id=events.stable_id("shadow", c.peer, c.preemptor, *c.peer_victims),
                occurred_at=self.now(),
                peer=c.peer,
                preemptor=c.preemptor,
                verdict=c.verdict,
                peer_victims=c.peer_victims,
                victims=c.victims,
                partial_gangs=c.partial_gangs,
                message=c.message,
            )
            await self.publish(event)
            log.info(
                "peer preemption compared",
                peer=c.peer,
                preemptor=c.preemptor,
                verdict=c.verdict,
                peer_victims=len(c.peer_victims),
                victims=len(c.victims),
            )
            done += 1
        self.compared += done
        return done


__all__ = ["Episode", "Shadow"]
