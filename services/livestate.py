"""A service's live view: a STATE replica and, kept in step with it change by change, the
quota ledger the core computes on."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from gangpreempt.quota.ledger import Ledger
from gangpreempt.quota.snapshot import Snapshot
from gangpreempt.replica import StateReplica
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
        self._on_change = on_change
        self.replica.on_change(self._changed)

    def _changed(self, kind: str, old: Any, new: Any) -> None:
        if self.ledger is not None:
            self.ledger.changed(kind, old, new)
        if self._on_change is not None:
            self._on_change(kind, old, new)

    async def start(self) -> None:
        """Rebuild from STATE, then build the ledger on the caught-up state (nothing awaits
        between the two, so no change can slip in between)."""
        await self.replica.start()
        await self.replica.caught_up(timeout=30)
        self.ledger = Ledger(self.replica.state, self.ctx.now())

    def snapshot(self, now: datetime) -> Snapshot:
        assert self.ledger is not None, "start() first"
        return self.ledger.current(now)


__all__ = ["LiveState", "key_of"]
