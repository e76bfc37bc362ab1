"""How a run ends (decision D2): the terminal checkpoint and the chunks after it, a finalizer
that ends a run which cannot go on, and the repair of a tail that a crash kept out of the log.

:class:`RunEndings` is the part of :class:`~durable_harness.runner.runner.Runner` that does it
(the runner inherits it); a write fenced off by another writer is tried again after
:func:`fenced_backoff`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Callable
from typing import Literal

from ..approvals import ApprovalSecret
from ..chunks.writer import ChunkWriter
from ..errors import FatalError, FencedError, LogConflictError
from ..harness import interface as hi
from ..ledger import ApprovalLedger, approval_key
from ..ports import CheckpointStore, ChunkLog, StoredRun
from ..protocol.translate import StreamTranslator
from ..protocol.ui_chunks import ErrorChunk, FinishChunk, UIMessageChunk, encode_ui_chunk
from .progress import SliceProgress
from .state import RunState, StreamContext, foreign, state_of

__all__ = ["FINALIZE_ATTEMPTS", "RunEndings", "fenced_backoff"]

logger = logging.getLogger("durable_harness.runner.runner")  # the runner's own logger

FINALIZE_ATTEMPTS = 12
"""How many times a finalizer (or a tail repair) looks again after being fenced off."""
BACKOFF_MAX = 1.0
"""Seconds: the longest (mean) wait between two tries of a writer that was fenced off."""


def fenced_backoff(attempt: int) -> float:
    """Seconds to wait before try ``attempt`` (1 on) of a write that another writer fenced off.

    Claiming again at once would fence that writer off in turn, and so on; waiting a little
    (jittered, growing, capped at :data:`BACKOFF_MAX`) lets it commit, and the next look finds
    what it wrote.
    """
    return random.uniform(0.5, 1.5) * min(BACKOFF_MAX, 0.02 * 2.0**attempt)


class RunEndings:
    """Ending runs: what :class:`~durable_harness.runner.runner.Runner` does at a turn's end, for
    a finalizer, and when it finds a terminal run whose last chunks are missing."""

    agent: hi.Harness
    agent_id: str | None
    options: hi.HarnessOptions
    store: CheckpointStore
    log: ChunkLog
    on_commit: Callable[[str, int], None] | None
    approval_secret: ApprovalSecret
    ledger: ApprovalLedger

    async def finalize(
        self,
        run_id: str,
        *,
        status: Literal["failed", "cancelled"] = "failed",
        error: str | None = None,
    ) -> RunState:
        """End a run that cannot go on (the state machine's failure path, or a cancel).

        Claims the run, which fences off any slice still running, and appends ``error`` (for a
        failure) and ``finish``. A run that already ended is only repaired, never changed. A
        cancelled run's harness is told through ``on_cancel``.
        """
        return (await self.finalize_once(run_id, status=status, error=error))[0]

    async def finalize_once(
        self,
        run_id: str,
        *,
        status: Literal["failed", "cancelled"] = "failed",
        error: str | None = None,
    ) -> tuple[RunState, bool]:
        """:meth:`finalize`, and whether this call ended the run (False: it had ended already, by
        itself or by another finalizer), so that an end is announced once."""
        for attempt in range(FINALIZE_ATTEMPTS):
            if attempt:  # fenced: a slice checkpointed, or another finalizer (a concurrent cancel) claimed it
                await asyncio.sleep(fenced_backoff(attempt))
            cp = await asyncio.to_thread(self.store.load, run_id)
            state = state_of(cp)
            if state.terminal:
                await self._complete_tail(cp, state)
                return state, False
            try:
                cp = await asyncio.to_thread(self.store.claim, run_id, cp.version)
                count = await asyncio.to_thread(self.log.open, run_id, cp.epoch)
            except FencedError:
                continue  # the run changed meanwhile: look again
            translator = self._translator(state)
            await self._note_tail(state, count, translator)
            closing: list[UIMessageChunk] = list(translator.start(state.message_id))
            if status == "failed":
                closing.append(ErrorChunk(error_text=error or "The run failed."))
            closing.append(FinishChunk(finish_reason="error" if status == "failed" else "other"))
            state.status, state.error = status, error
            writer = ChunkWriter(self.log, run_id, epoch=cp.epoch, start=count, flush_interval=0)
            progress = SliceProgress(self.store, cp, state, translator, writer, grace=0)
            try:
                state = await self._commit_terminal(progress, closing)
            except FencedError:
                if progress.cp.version == cp.version:
                    continue  # fenced before its terminal checkpoint: look again
                # Its terminal checkpoint is in (this call ended the run); a concurrent finalizer that
                # found the log short claimed the run to append the tail. It is complete, or soon is.
                await self._complete_tail(progress.cp, state)
            if status == "cancelled":
                await self.notify_cancel(state)
            return state, True
        raise FencedError(f"run {run_id}: could not finalize, the run keeps changing")

    async def notify_cancel(self, state: RunState) -> None:
        """Tell the harness a run ended cancelled (best effort: the run is over whatever it does).
        Not another agent's run: its state is another harness's, whose cleanup this one cannot do."""
        if foreign(state.agent, self.agent_id):
            return
        notice = hi.CancelNotice(run_id=state.run_id, session_id=state.session_id, state=state.turn)
        try:
            await self.agent.on_cancel(notice)
        except Exception:  # a harness's cleanup must not turn a done cancel into an error
            logger.exception("run %s: the harness's on_cancel failed", state.run_id)

    # --- internals (the runner's too) ---------------------------------------------------------

    def _translator(self, state: RunState) -> StreamTranslator:
        return StreamTranslator(
            state.stream.translator.model_copy(deep=True),
            tool_names=self.options.tool_names,
            signer=self.approval_secret.sign,
            send_reasoning=self.options.send_reasoning,
        )

    async def _note_tail(self, state: RunState, count: int, translator: StreamTranslator) -> bool:
        """Take in what an interrupted attempt wrote after the checkpoint; True if it wrote anything."""
        covered = state.stream.chunk_count
        if count < covered:
            raise FatalError(f"run {state.run_id}: the log has {count} chunks, the checkpoint covers {covered}")
        if count == covered:
            return False
        tail = await asyncio.to_thread(self.log.read, state.run_id, covered)
        types = {json.loads(chunk)["type"] for chunk in tail}
        # The client keeps `start` and the step's `step-start` part through a reset-step, so they
        # must not be sent again.
        translator.state.started = translator.state.started or "start" in types
        translator.state.step_open = translator.state.step_open or "start-step" in types
        return True

    async def _commit_terminal(self, progress: SliceProgress, final: list[UIMessageChunk]) -> RunState:
        state, writer = progress.state, progress.writer
        await progress.settle()  # a held checkpoint is superseded by the terminal one
        await writer.flush()
        if state.status == "awaiting_tool_approval":
            await asyncio.to_thread(self._issue_approvals, state)
        encoded = [encode_ui_chunk(c) for c in final]
        state.input_messages = []
        state.stream = StreamContext(
            translator=progress.translator.state, chunk_count=writer.committed + len(encoded), final_chunks=encoded
        )
        await progress.commit()
        for chunk in encoded:
            writer.write(chunk)
        await writer.close()
        return state

    def _issue_approvals(self, state: RunState) -> None:
        """Record the paused turn's approval requests in the ledger (before the client sees them),
        and this run as the latest pause of its message (where a continuation finds it)."""
        for request in state.pending_approvals:
            key = approval_key(
                state.principal,
                state.message_id,
                request.approval_id,
                request.tool_call_id,
                request.tool_name,
                request.input,
            )
            self.ledger.issue(key, state.run_id)
        self.ledger.pause(state.principal, state.message_id, state.run_id)

    async def _complete_tail(self, cp: StoredRun, state: RunState) -> None:
        """Append terminal chunks that a crash kept out of the log (after the terminal checkpoint)."""
        run_id, (expected, final) = state.run_id, (state.stream.chunk_count, state.stream.final_chunks)
        base, version = expected - len(final), cp.version
        for attempt in range(FINALIZE_ATTEMPTS):
            if attempt:  # another writer completes it (the finalizer that ended the run, or a concurrent one)
                await asyncio.sleep(fenced_backoff(attempt))
                version = await asyncio.to_thread(self.store.version, run_id)
            count = await asyncio.to_thread(self.log.count, run_id)
            if count >= expected:
                return
            if count < base:
                raise FatalError(f"run {run_id}: the log has {count} chunks, expected at least {base}")
            try:
                claimed = await asyncio.to_thread(self.store.claim, run_id, version)
                count = await asyncio.to_thread(self.log.open, run_id, claimed.epoch)
                if count >= expected:
                    return
                await asyncio.to_thread(self.log.append, run_id, count, final[count - base :], claimed.epoch)
            except (FencedError, LogConflictError):
                continue  # look again: the other writer may have completed it
            if self.on_commit:
                self.on_commit(run_id, expected)
            return
        raise FencedError(f"run {run_id}: could not complete its log, the run keeps changing")
