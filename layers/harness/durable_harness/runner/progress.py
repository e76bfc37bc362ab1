"""A slice's checkpoint writes: the chunks so far made durable together with the run's state.

Every write is conditional on the version the slice holds and moves it on, so writes go out one at
a time, in order. A harness checkpoint marked ``deferrable`` (it protects only work that can be
redone, such as a model call) is held back: if the harness's next checkpoint comes within
``grace`` seconds it supersedes the held one, which is never written; otherwise a timer writes it.
A tool step whose tools are quick thus costs one write (its end), while a slow tool still runs
with the model call behind it durable. A held checkpoint is not written, but the slice still checks
that it holds the run (one small read of its version) before the harness goes on, so that a
fenced-off or cancelled slice runs no further tool. ``grace=None`` waits for the next checkpoint
however long it takes; ``grace=0`` writes every checkpoint at once.
"""

from __future__ import annotations

import asyncio
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from ..chunks.writer import ChunkWriter
from ..errors import FencedError
from ..ports import CheckpointStore, StoredRun
from ..protocol.translate import StreamTranslator
from .encoding import StateEncoder
from .state import RunState, StreamContext

__all__ = ["SliceProgress"]


@dataclass(eq=False)
class SliceProgress:
    """The checkpoint writes of one slice of ``state``, from the claimed record ``cp`` on."""

    store: CheckpointStore
    cp: StoredRun
    state: RunState
    translator: StreamTranslator
    writer: ChunkWriter
    """Its chunks are made durable with each checkpoint of ``state``."""
    _: KW_ONLY
    grace: float | None
    """As in the module docstring."""
    # A checkpoint costs what changed since the last one.
    _encoder: StateEncoder = field(default_factory=StateEncoder, init=False)
    _held: asyncio.Task[None] | None = field(default=None, init=False)
    _writing: bool = field(default=False, init=False)  # the held checkpoint's timer fired: its write may be under way

    async def save(self, turn: Any) -> None:
        """Make the chunks so far durable together with the harness's state ``turn``, now."""
        await self.settle()
        await self._write(self._snapshot(turn))

    async def defer(self, turn: Any) -> None:
        """As :meth:`save`, unless a later write supersedes it within the grace period.

        Either way the slice must still hold the run before the harness goes on (to a tool, say):
        if nothing is written now, a read of the run's version checks it (``FencedError`` if a
        newer slice or a cancel has claimed the run), as the write would have.
        """
        await self.settle()
        if self.grace == 0:
            await self._write(self._snapshot(turn))
            return
        # As a write would: the chunks so far are durable (the log's fence checked) before the
        # harness goes on, and nothing is in flight while the store is asked (one worker trip).
        run_id = self.cp.run_id
        current = await self.writer.flush_then(lambda: self.store.version(run_id))
        if current != self.cp.version:
            raise FencedError(f"run {self.cp.run_id!r}: expected version {self.cp.version}, found {current}")
        if self.grace is None:
            self._prepare(turn)  # only a later write will carry it
        else:
            record = self._snapshot(turn)  # the state as it is now, whatever happens meanwhile
            self._writing = False
            self._held = asyncio.get_running_loop().create_task(self._write_later(record), name="held-checkpoint")

    async def commit(self) -> None:
        """Write ``state`` as it stands (the runner set it up: a terminal state)."""
        await self.settle()
        await self._write(self._encoder.checkpoint(self.state, self.cp))

    async def settle(self) -> None:
        """Drop the held checkpoint, or, if its write has begun, wait for it (raising its error)."""
        error = await self._drop_held()
        if error is not None:
            raise error

    async def close(self) -> None:
        """End the slice's writes: a held checkpoint is dropped (a write under way is waited for)."""
        await self._drop_held()  # its error retrieved and dropped: the slice has ended (or failed) anyway

    async def _drop_held(self) -> BaseException | None:
        """Cancel the held checkpoint unless its write has begun, wait for it; its error, if any."""
        task, self._held = self._held, None
        if task is None:
            return None
        if not self._writing:
            task.cancel()
        await asyncio.wait([task])
        return None if task.cancelled() else task.exception()

    def _prepare(self, turn: Any) -> None:
        state = self.state
        state.turn, state.input_messages, state.continuation = turn, [], None
        state.status = "ready_for_next_step"
        # Every chunk written so far belongs to this state: the write flushes them first.
        state.stream = StreamContext(translator=self.translator.state, chunk_count=self.writer.end)

    def _snapshot(self, turn: Any) -> StoredRun:
        self._prepare(turn)
        return self._encoder.checkpoint(self.state, self.cp)

    async def _write_later(self, record: StoredRun) -> None:
        assert self.grace is not None
        await asyncio.sleep(self.grace)
        self._writing = True
        await self._write(record)

    async def _write(self, record: StoredRun) -> None:
        # The chunks first, then the record that covers them, in one worker trip (no pacing wait).
        expected = self.cp.version
        self.cp = await self.writer.flush_then(lambda: self.store.save(record, expected))
