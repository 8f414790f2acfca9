"""A service's live view: a STATE replica and, kept in step with it change by change, the
quota ledger and the node-level index the core computes on."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import datetime
from typing import Any

from gangpreempt.errors import InvalidInput
from gangpreempt.planning.nodeindex import NodeIndex
from gangpreempt.preemption.candidates import core_victim_cost
from gangpreempt.quota.ledger import Ledger
from gangpreempt.quota.snapshot import Snapshot
from gangpreempt.replica import StateReplica
from services.heap import freeze_heap, freeze_while_loading
from services.runtime import ServiceContext


def key_of(ref: str) -> str:
    """``Kind/namespace/name`` -> ``namespace/name``."""
    return ref.split("/", 1)[1]


class LiveState:
    def __init__(
        self,
        ctx: ServiceContext,
        service: str,
        on_change: Callable[[str, Any, Any], None] | None = None,
    ) -> None:
        self.ctx = ctx
        self.replica = StateReplica(ctx.nc, ctx.topology, service)
        self.ledger: Ledger | None = None
        self.nodes = NodeIndex(self.replica.state, core_victim_cost(ctx.settings.victim_cost))
        self._on_change = on_change
        self.replica.on_change(self._changed)
        freeze_while_loading(self.replica)  # after ``_changed``: the index is frozen too

    def _changed(self, kind: str, old: Any, new: Any) -> None:
        if self.ledger is not None:
            self.ledger.changed(kind, old, new)
        self.nodes.changed(kind, old, new)
        if kind == "StateComplete" and self.nodes.stale:
            # The starting state is all here (nodes arriving mark the index stale): build
            # it now, not at the first decision.
            with contextlib.suppress(InvalidInput):
                self.nodes.build(self.ctx.now())
        if self._on_change is not None:
            self._on_change(kind, old, new)

    async def start(self) -> None:
        """Rebuild from STATE, then build the ledger and the node index on the caught-up
        state (nothing awaits in between, so no change can slip in)."""
        await self.replica.start()
        await self.replica.caught_up(timeout=30)
        self.ledger = Ledger(
            self.replica.state, self.ctx.now(), core_victim_cost(self.ctx.settings.victim_cost)
        )
        # Not again if the starting state's completion built it (kept current since):
        # at 20,000 nodes a build holds the loop for seconds. Without success it is built
        # again at the first decision, which says why not.
        if self.nodes.stale:
            with contextlib.suppress(InvalidInput):
                self.nodes.build(self.ctx.now())
        freeze_heap()

    def snapshot(self, now: datetime) -> Snapshot:
        assert self.ledger is not None, "start() first"
        return self.ledger.current(now)


__all__ = ["LiveState", "key_of"]
