"""The chunks ingest has put on STATE, and their deletion once no reader needs them.

ingest publishes a large batch of changes (a starting state, a relist, a burst of the
sim's) in ``StateChunk`` messages (``gangpreempt.bus.statechunks``). A chunk stays on
STATE while it holds the newest stored version of some object; the ``ChunkLedger`` here
is told of every stored STATE message in stream order, and each chunk it finds empty
is deleted from the stream. At start, before ingest publishes anything, the chunks a
previous run left are learnt by reading STATE once (only when there are any).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time

import nats.js.errors
import structlog
from nats.aio.client import Client

from gangpreempt.bus.statechunks import ChunkLedger
from gangpreempt.bus.topology import Topology
from gangpreempt.replica import StateReplica

log = structlog.get_logger("gangpreempt.ingest")


def chunk_epoch() -> str:
    """A name for this run's chunks, unlike any other run's."""
    return f"{int(time.time() * 1000)}-{secrets.token_hex(3)}"


class ChunkReaper:
    """Deletes the chunks its ledger finds empty, one after another in the background
    (one that cannot be deleted now is found again at the next start)."""

    def __init__(self, nc: Client, topology: Topology) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.topology = topology
        self.ledger = ChunkLedger(self._empty)
        self.deleted = 0
        self._queue: asyncio.Queue[int] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    def _empty(self, seq: int) -> None:
        self._queue.put_nowait(seq)
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        stream = self.topology.state_stream
        while True:
            seq = await self._queue.get()
            try:
                await self.js.delete_msg(stream, seq)
                self.deleted += 1
            except nats.js.errors.NotFoundError:
                pass  # gone already
            except Exception as exc:  # NATS away: found again at the next start
                log.warning("state chunk not deleted", seq=seq, error=repr(exc))
            finally:
                self._queue.task_done()

    async def settled(self) -> None:
        """Until every chunk found empty so far has been dealt with."""
        await self._queue.join()

    async def learn(self) -> int:
        """The chunks STATE holds from earlier runs, read into the ledger (the stream
        read once, only when it has any); returns how many still hold something."""
        info = await self.js.stream_info(
            self.topology.state_stream, subjects_filter=self.topology.state_chunk_wildcard
        )
        if not info.state.subjects:
            return 0
        replica = StateReplica(self.nc, self.topology, "ingest", ledger=self.ledger)
        await replica.start()
        try:
            await replica.caught_up(timeout=120)
        finally:
            await replica.stop()
        log.info("state chunks learnt", holding=self.ledger.chunks, empty=self._queue.qsize())
        return self.ledger.chunks

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


__all__ = ["ChunkReaper", "chunk_epoch"]
