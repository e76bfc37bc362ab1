"""The durable runner: drives a harness agent through time slices, checkpointing as it goes.

One slice (decision D3): load the checkpoint, claim the run (fencing off any older slice), open
the chunk log, and continue the agent from its last boundary. Chunks go to the log through a
group-commit writer; at every boundary the chunks are made durable and the agent's state is
checkpointed. The slice ends at a boundary once its time budget is spent, or when the turn
pauses or ends. A slice that finds more chunks in the log than its checkpoint covers knows the
previous attempt died mid-step: it appends ``reset-step`` and redoes the step from the checkpoint.

A run's last chunk is always ``finish`` (decision D2): terminal chunks are recorded in the
terminal checkpoint first and appended after it, so a crash between the two is repaired by the
next attempt and nothing is ever appended after ``finish``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any, Literal

from ..agent.protocol import Boundary, HarnessWorkflowAgent
from ..errors import FatalError, FencedError, ModelError, OutputError
from ..ids import new_id, new_run_id
from ..ledger import ApprovalLedger, approval_key
from ..messages import ModelMessage
from ..ports import Checkpoint, CheckpointStore, ChunkLog
from ..protocol import harness_parts as hp
from ..protocol.translate import StreamTranslator
from ..protocol.ui_chunks import ErrorChunk, FinishChunk, FinishStepChunk, UIMessageChunk, encode_ui_chunk
from ..storage.writer import ChunkWriter
from .state import FinalResult, RunState, StreamContext

logger = logging.getLogger(__name__)

Signer = Callable[[str, str, str, Any], str | None]


class Runner:
    """Runs one agent's turns durably against a checkpoint store and a chunk log."""

    def __init__(
        self,
        agent: HarnessWorkflowAgent,
        store: CheckpointStore,
        log: ChunkLog,
        *,
        flush_interval: float = 0.1,
        on_commit: Callable[[str, int], None] | None = None,
        signer: Signer | None = None,
    ) -> None:
        self.agent = agent
        self.store = store
        self.log = log
        self.flush_interval = flush_interval
        self.on_commit = on_commit
        self.signer = signer if signer is not None else getattr(agent, "sign_approval", None)
        self.ledger = ApprovalLedger(store)

    # --- entry points ---------------------------------------------------------------------------

    def create_run(
        self,
        messages: list[ModelMessage],
        *,
        run_id: str | None = None,
        chat_id: str | None = None,
        session_id: str | None = None,
        principal: str | None = None,
        origin: Literal["chat", "event"] = "chat",
        message_id: str | None = None,
        call_options: dict[str, Any] | None = None,
    ) -> RunState:
        """Create and checkpoint the state of a new turn (status ``not_started``).

        ``call_options`` must already be validated (``agent.parse_call_options``)."""
        state = RunState(
            run_id=run_id or new_run_id(),
            session_id=self.agent.create_session(session_id or chat_id),
            chat_id=chat_id,
            origin=origin,
            principal=principal,
            message_id=message_id or new_id("msg"),
            input_messages=messages,
            call_options=call_options,
        )
        self.store.create(_checkpoint(state))
        return state

    def abandon(self, run_id: str) -> RunState:
        """Cancel a run paused for approval (its log already ends with ``finish``; only the state
        changes). Conditional: FencedError if the run changed meanwhile."""
        cp = self.store.load(run_id)
        state = RunState.model_validate_json(cp.state)
        if state.status != "awaiting_tool_approval" or state.continued_by is not None:
            raise FencedError(f"run {run_id} is not a paused run ({state.status})")
        state.status = "cancelled"
        self.store.save(_checkpoint(state, cp), cp.version)
        return state

    def mark_continued(self, run_id: str, continued_by: str) -> RunState:
        """Record that run ``continued_by`` answers this paused run (conditional: FencedError if it
        changed or was answered meanwhile)."""
        cp = self.store.load(run_id)
        state = RunState.model_validate_json(cp.state)
        if state.continued_by is not None:
            raise FencedError(f"run {run_id} was already continued by {state.continued_by}")
        state.continued_by = continued_by
        self.store.save(_checkpoint(state, cp), cp.version)
        return state

    def load(self, run_id: str) -> RunState:
        """The run's state as last checkpointed."""
        return RunState.model_validate_json(self.store.load(run_id).state)

    async def run_slice(self, run_id: str, *, budget_seconds: float | None = None) -> RunState:
        """Run one time slice; ``budget_seconds=None`` runs until the turn pauses or ends."""
        started = time.monotonic()
        cp = await asyncio.to_thread(self.store.load, run_id)
        state = RunState.model_validate_json(cp.state)
        if state.terminal:
            await self._complete_tail(cp, state)
            return state
        cp = await asyncio.to_thread(self.store.claim, run_id, cp.version)
        count = await asyncio.to_thread(self.log.open, run_id, cp.epoch)
        translator = self._translator(state)
        writer = ChunkWriter(
            self.log,
            run_id,
            epoch=cp.epoch,
            start=count,
            flush_interval=self.flush_interval,
            on_commit=self.on_commit,
        )
        replay = await self._reset_if_interrupted(state, count, translator, writer)
        state.slices += 1
        session = self.agent.create_session(state.session_id)
        if state.turn is None:
            events = self.agent.stream(session, state.input_messages, call_options=state.call_options)
        else:
            events = self.agent.continue_stream(session, state.turn, replay_step=replay)
        _write(writer, translator.start(state.message_id))
        final: list[UIMessageChunk] = []
        finish_part: hp.FinishPart | None = None
        longest_step, step_began = 0.0, time.monotonic()
        try:
            async for event in events:
                if not isinstance(event, Boundary):
                    chunks = translator.translate(event)
                    if isinstance(event, hp.FinishPart):
                        final.extend(chunks)
                        finish_part = event
                    else:
                        _write(writer, chunks)
                    if isinstance(event, hp.ErrorPart):
                        raise ModelError(chunks[0].error_text if chunks else "model error")  # type: ignore[union-attr]
                    continue
                if event.kind in ("end", "approval"):
                    state.turn = event.turn
                    state.status = "finished" if event.kind == "end" else "awaiting_tool_approval"
                    state.final_result = _final_result(finish_part, event.output)
                    return await self._commit_terminal(cp, state, translator, writer, final)
                await writer.flush()
                state.turn, state.input_messages = event.turn, []
                state.status = "ready_for_next_step"
                state.stream = StreamContext(translator=translator.state, chunk_count=writer.committed)
                cp = await asyncio.to_thread(self.store.save, _checkpoint(state, cp), cp.version)
                if event.kind == "step":
                    now = time.monotonic()
                    longest_step, step_began = max(longest_step, now - step_began), now
                    if budget_seconds is not None and now - started + longest_step >= budget_seconds:
                        return state
            raise FatalError("the agent's stream ended without an end or approval boundary")
        except (ModelError, OutputError) as exc:
            state.status, state.error = "failed", str(exc)
            closing: list[UIMessageChunk] = [ErrorChunk(error_text=str(exc))]
            if translator.state.step_open:
                closing.append(FinishStepChunk())
            closing.append(FinishChunk(finish_reason="error"))
            logger.warning("run %s failed: %s", run_id, exc)
            return await self._commit_terminal(cp, state, translator, writer, closing)
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    async def run(self, run_id: str) -> RunState:
        """Run the turn with no time slicing until it pauses or ends."""
        return await self.run_slice(run_id, budget_seconds=None)

    async def finalize(
        self,
        run_id: str,
        *,
        status: Literal["failed", "cancelled"] = "failed",
        error: str | None = None,
    ) -> RunState:
        """End a run that cannot go on (the state machine's failure path, or a cancel).

        Claims the run, which fences off any slice still running, and appends ``error`` (for a
        failure) and ``finish``. A run that already ended is only repaired, never changed.
        """
        for _ in range(10):
            cp = await asyncio.to_thread(self.store.load, run_id)
            state = RunState.model_validate_json(cp.state)
            if state.terminal:
                await self._complete_tail(cp, state)
                return state
            try:
                cp = await asyncio.to_thread(self.store.claim, run_id, cp.version)
                count = await asyncio.to_thread(self.log.open, run_id, cp.epoch)
            except FencedError:
                continue  # a slice checkpointed meanwhile: look again
            translator = self._translator(state)
            await self._note_tail(state, count, translator)
            closing: list[UIMessageChunk] = list(translator.start(state.message_id))
            if status == "failed":
                closing.append(ErrorChunk(error_text=error or "The run failed."))
            closing.append(FinishChunk(finish_reason="error" if status == "failed" else "other"))
            state.status, state.error = status, error
            writer = ChunkWriter(self.log, run_id, epoch=cp.epoch, start=count, flush_interval=0)
            try:
                state = await self._commit_terminal(cp, state, translator, writer, closing)
            except FencedError:
                continue
            if status == "cancelled":
                await self._notify_cancelled(state)
            return state
        raise FencedError(f"run {run_id}: could not finalize, the run keeps changing")

    def result(self, state: RunState) -> dict[str, Any]:
        """The run's result (JSON): the agent's account of its turn, with the structured output."""
        result = self.agent.run_result(state.turn)
        if state.final_result is not None and state.final_result.output is not None:
            result["output"] = state.final_result.output
        return result

    # --- internals -------------------------------------------------------------------------------

    async def _notify_cancelled(self, state: RunState) -> None:
        """Tell the agent its run was cancelled (its ``on_abort``); a failing callback is only logged:
        the cancel itself is already recorded."""
        try:
            await self.agent.on_cancelled(state.turn)
        except Exception:
            logger.exception("run %s: the agent's cancel callback failed", state.run_id)

    def _translator(self, state: RunState) -> StreamTranslator:
        return StreamTranslator(
            state.stream.translator.model_copy(deep=True),
            tool_names=self.agent.tool_names,
            signer=self.signer,
            send_reasoning=bool(getattr(self.agent, "send_reasoning", True)),
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

    async def _reset_if_interrupted(
        self, state: RunState, count: int, translator: StreamTranslator, writer: ChunkWriter
    ) -> bool:
        if not await self._note_tail(state, count, translator):
            return False
        logger.info("run %s: previous attempt died mid-step; resetting the step", state.run_id)
        _write(writer, translator.reset_step())
        return True

    async def _commit_terminal(
        self,
        cp: Checkpoint,
        state: RunState,
        translator: StreamTranslator,
        writer: ChunkWriter,
        final: list[UIMessageChunk],
    ) -> RunState:
        await writer.flush()
        if state.status == "awaiting_tool_approval":
            await asyncio.to_thread(self._issue_approvals, state)
        encoded = [encode_ui_chunk(c) for c in final]
        state.input_messages = []
        state.stream = StreamContext(
            translator=translator.state, chunk_count=writer.committed + len(encoded), final_chunks=encoded
        )
        await asyncio.to_thread(self.store.save, _checkpoint(state, cp), cp.version)
        for chunk in encoded:
            writer.write(chunk)
        await writer.close()
        return state

    def _issue_approvals(self, state: RunState) -> None:
        """Record the paused turn's approval requests in the ledger (before the client sees them)."""
        pending_of = getattr(self.agent, "pending_approvals", None)
        if pending_of is None or state.turn is None:
            return
        for request in pending_of(state.turn):
            key = approval_key(
                state.principal,
                state.message_id,
                request["approvalId"],
                request["toolCallId"],
                request["toolName"],
                request["input"],
            )
            self.ledger.issue(key, state.run_id)

    async def _complete_tail(self, cp: Checkpoint, state: RunState) -> None:
        """Append terminal chunks that a crash kept out of the log (after the terminal checkpoint)."""
        expected, final = state.stream.chunk_count, state.stream.final_chunks
        count = await asyncio.to_thread(self.log.count, state.run_id)
        if count >= expected:
            return
        base = expected - len(final)
        if count < base:
            raise FatalError(f"run {state.run_id}: the log has {count} chunks, expected at least {base}")
        cp = await asyncio.to_thread(self.store.claim, state.run_id, cp.version)
        count = await asyncio.to_thread(self.log.open, state.run_id, cp.epoch)
        if count < expected:
            await asyncio.to_thread(self.log.append, state.run_id, count, final[count - base :], cp.epoch)
            if self.on_commit:
                self.on_commit(state.run_id, expected)


def _write(writer: ChunkWriter, chunks: list[UIMessageChunk]) -> None:
    for chunk in chunks:
        writer.write(encode_ui_chunk(chunk))


def _checkpoint(state: RunState, previous: Checkpoint | None = None) -> Checkpoint:
    return Checkpoint(
        run_id=state.run_id,
        state=state.model_dump_json(by_alias=True),
        status=state.status,
        version=previous.version if previous else 0,
        epoch=previous.epoch if previous else 0,
        principal=state.principal,
        chat_id=state.chat_id,
    )


def _final_result(finish: hp.FinishPart | None, output: Any) -> FinalResult:
    if finish is None:
        return FinalResult(finish_reason="stop", output=output)
    usage = finish.total_usage
    return FinalResult(
        finish_reason=finish.finish_reason.unified,
        raw_finish_reason=finish.finish_reason.raw,
        input_tokens=int(usage.input_tokens.total or 0),
        output_tokens=int(usage.output_tokens.total or 0),
        output=output,
    )
