"""The durable runner: drives any harness through time slices, checkpointing as it goes.

One slice (decision D3): load the checkpoint, claim the run (fencing off any older slice), open
the chunk log, and open the harness's turn (:mod:`durable_harness.harness.interface`: one
interface, the built-in loop included). Chunks go to the log through a group-commit writer; at
every harness checkpoint the chunks are made durable together with the harness's state. The slice
ends at a slice point (``finish-step`` + checkpoint) once its time budget is spent, or when the
turn pauses or ends. A slice that finds more chunks in the log than its checkpoint covers knows the
previous attempt died mid-step: it appends ``reset-step`` and redoes the step from the checkpoint.

A run's last chunk is always ``finish`` (decision D2): terminal chunks are recorded in the
terminal checkpoint first and appended after it, so a crash between the two is repaired by the
next attempt and nothing is ever appended after ``finish``: how a run ends (the terminal commit,
a finalizer, a tail repair) is :mod:`durable_harness.runner.ending`, which the runner inherits.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any, Literal

from ..approvals import ApprovalSecret
from ..chunks.writer import ChunkWriter
from ..errors import FatalError, FencedError, ModelError, OutputError, ProtocolError, StorageError
from ..harness import interface as hi
from ..ids import new_id, new_run_id
from ..ledger import ApprovalLedger
from ..messages import ModelMessage
from ..ports import CheckpointStore, ChunkLog, StoredRun
from ..protocol import harness_parts as hp
from ..protocol.translate import StreamTranslator
from ..protocol.ui_chunks import (
    ErrorChunk,
    FinishChunk,
    FinishStepChunk,
    ToolOutputDeniedChunk,
    UIMessageChunk,
    encode_ui_chunk,
)
from ..telemetry import Telemetry, telemetry_from_env
from ..waits import EventBook
from .continuation import ContinuationResolver, turn_request
from .ending import RunEndings
from .progress import SliceProgress
from .state import (
    ApprovalRecord,
    ContinuationRecord,
    FinalResult,
    RunState,
    StepMark,
    StreamContext,
    check_agent,
    checkpoint_of,
    foreign,
    pending_json,
    state_of,
    waits_json,
)
from .tail import previous_turn_state, replayed_tail, write_chunks
from .waiting import RunEventSource, due, park, resume_chunks

logger = logging.getLogger(__name__)


class Runner(RunEndings):
    """Runs one harness's turns durably against a checkpoint store and a chunk log.

    ``approval_secret`` signs approval requests and verifies answers; by default the harness's
    own (``HarnessOptions.approval_secret``), else ``TOOL_APPROVAL_SECRET`` / ``..._ARN``.
    ``telemetry`` sees every slice (:mod:`durable_harness.telemetry`); by default the one the
    environment asks for, chosen at the first slice.
    ``flush_interval`` and ``flush_burst`` pace the chunk log's group commit
    (:class:`~durable_harness.chunks.writer.ChunkWriter`).
    ``checkpoint_grace``: how long a ``deferrable`` harness checkpoint waits to be superseded by the
    next one before it is written anyway (``None``: until the next one; 0: written at once); see
    :mod:`durable_harness.runner.progress`.
    ``agent_id`` is the agent's identity (the ``AGENT`` spec, ``module:attribute``, it was loaded
    by): every run this runner creates records it, and the runner drives, continues and answers the
    approvals of its own agent's runs only (:class:`~durable_harness.errors.OtherAgentError`
    otherwise). None (a program embedding the library) records none and drives any run.
    ``public_url``: where the server is reached from outside, the base of the signed event URLs
    tools hand out (``ctx.event_url``); by default ``PUBLIC_URL``, else URLs are paths.
    ``open_with_start``: a slice that starts a run's stream appends its ``start`` chunk in the
    worker-thread trip that claims the run and opens its log, so that no append of the group
    commit's is in flight (a second thread wake-up) while the model request is sent. For a log
    whose append costs less than a thread hop (the local file log); deployed, where an append is a
    request, it would put one more round trip before the model request, so the default is off.
    """

    def __init__(
        self,
        agent: hi.Harness,
        store: CheckpointStore,
        log: ChunkLog,
        *,
        flush_interval: float = 0.1,
        flush_burst: int = 1,
        on_commit: Callable[[str, int], None] | None = None,
        approval_secret: ApprovalSecret | None = None,
        telemetry: Telemetry | None = None,
        checkpoint_grace: float | None = 1.0,
        agent_id: str | None = None,
        public_url: str | None = None,
        open_with_start: bool = False,
    ) -> None:
        self.agent = agent
        self.open_with_start = open_with_start
        self.agent_id = agent_id
        self.checkpoint_grace = checkpoint_grace
        self.options = agent.options
        self.store = store
        self.log = log
        self.flush_interval = flush_interval
        self.flush_burst = flush_burst
        self.on_commit = on_commit
        self.approval_secret = approval_secret or self.options.approval_secret or ApprovalSecret()
        self.ledger = ApprovalLedger(store)
        self.continuations = ContinuationResolver(store, self.ledger, self.approval_secret, agent_id=agent_id)
        self.telemetry = telemetry
        self.events = EventBook(store)
        self.public_url = public_url if public_url is not None else os.environ.get("PUBLIC_URL")

    @property
    def harness(self) -> hi.Harness:
        """The harness this runner drives (``agent`` is the same object)."""
        return self.agent

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
        continuation: ContinuationRecord | None = None,
    ) -> RunState:
        """Create and checkpoint the state of a new turn (status ``not_started``).

        ``call_options`` must already be validated (``harness.parse_call_options``).

        When the last message answers approvals, the run continues the paused run that asked
        (found through the approval ledger; its answers verified and marked answered by this run;
        see :mod:`durable_harness.runner.continuation`). ``continuation`` is given instead by the
        run API. Raises ``InvalidRequestError`` for answers to approvals never issued here, and
        ``OtherAgentError`` (409) for answers to another agent's run.
        """
        run_id = run_id or new_run_id()
        message_id = message_id or new_id("msg")
        if continuation is None:
            continuation = self.continuations.from_messages(
                messages, principal=principal, message_id=message_id, run_id=run_id
            )
        turn = None
        if continuation is not None:
            paused = self.load(continuation.paused_run_id)
            turn, session_id = paused.turn, session_id or paused.session_id
        previous = None
        if continuation is None and self.options.wants_session_state:
            previous = previous_turn_state(self.store, chat_id, principal, run_id, self.agent_id)
        state = RunState(
            session_state=previous,
            run_id=run_id,
            session_id=self.agent.create_session(session_id or chat_id),
            chat_id=chat_id,
            origin=origin,
            principal=principal,
            agent=self.agent_id,
            message_id=message_id,
            input_messages=messages,
            call_options=call_options,
            turn=turn,
            continuation=continuation,
        )
        self.store.create(checkpoint_of(state))
        return state

    def abandon(self, run_id: str) -> RunState:
        """Cancel a run paused for approval (its log already ends with ``finish``; only the state
        changes). Conditional: FencedError if the run changed meanwhile."""
        cp = self.store.load(run_id)
        state = state_of(cp)
        if state.status != "awaiting_tool_approval" or state.continued_by is not None:
            raise FencedError(f"run {run_id} is not a paused run ({state.status})")
        state.status = "cancelled"
        self.store.save(checkpoint_of(state, cp), cp.version)
        return state

    def load(self, run_id: str) -> RunState:
        """The run's state as last checkpointed."""
        return state_of(self.store.load(run_id))

    def due(self, state: RunState) -> bool:
        """True when a run ``awaiting_event`` may go on (an awaited event came, or a deadline passed)."""
        return due(self.events, state)

    async def run_slice(
        self, run_id: str, *, budget_seconds: float | None = None, public_url: str | None = None
    ) -> RunState:
        """Run one time slice; ``budget_seconds=None`` runs until the turn pauses or ends.

        ``public_url``: the base of this slice's event URLs when the runner has none of its own
        (the chat function's first slice: the origin of the request that started the run)."""
        started = time.monotonic()
        cp, state, count, translator, opened = await asyncio.to_thread(self._begin_slice, run_id)
        if count is None:
            if state.terminal:
                await self._complete_tail(cp, state)
            return state  # ended, or parked and not due: nothing to do
        writer = ChunkWriter(
            self.log,
            run_id,
            epoch=cp.epoch,
            start=count + opened,
            flush_interval=self.flush_interval,
            flush_burst=self.flush_burst,
            on_commit=self.on_commit,
        )
        tail = await replayed_tail(self.log, self.options, state, count)
        replay = tail is None and await self._reset_if_interrupted(state, count, translator, writer)
        progress = SliceProgress(self.store, cp, state, translator, writer, grace=self.checkpoint_grace)
        state.slices += 1
        self.telemetry = self.telemetry or telemetry_from_env(self.agent)
        observer = self.telemetry.start_slice(state)
        left = None if budget_seconds is None else max(0.0, budget_seconds - (time.monotonic() - started))
        events = RunEventSource(self.events, self.approval_secret, run_id, self.public_url or public_url)
        session = self.agent.create_session(state.session_id)
        turn = self.agent.open(turn_request(state, session, replay, events, left))
        state.session_state = None  # the turn has it; the first checkpoint no longer needs it
        state.slice_times.append((writer.end - opened, round(time.time(), 3)))
        if opened and self.on_commit is not None:  # `start` is in the log already (_begin_slice)
            self.on_commit(run_id, writer.end)
        write_chunks(writer, tail, translator.start(state.message_id))
        if state.waits:  # a parked run resumes: its data-wait parts say so
            write_chunks(writer, tail, resume_chunks(state))
        if state.continuation is not None:  # the user's denials, shown once the paused turn goes on
            for decision in state.continuation.approvals:
                if not decision.approved:
                    denied = ToolOutputDeniedChunk(tool_call_id=decision.tool_call_id)
                    write_chunks(writer, tail, translator.translate(denied))
        final: list[UIMessageChunk] = []
        finish_part: hp.FinishPart | None = None
        output: Any = None
        slice_point = False  # the last event was a finish-step: a checkpoint now may end the slice
        stopping = False  # stop was called on a turn that drains: the next slice point ends the slice
        longest_step, step_began = 0.0, time.monotonic()
        try:
            async for event in turn.events():
                observer.event(event)
                if isinstance(event, hi.Checkpoint):
                    if event.detach and finish_part is None:  # the harness goes on without this slice
                        await progress.save(event.state)
                        return state
                    if finish_part is not None:  # after `finish`: the turn's last state and output
                        state.turn, output = event.state, event.output
                        continue
                    if event.deferrable:  # held, and never a slice point: the harness goes on
                        await progress.defer(event.state)
                        slice_point = False
                        continue
                    await progress.save(event.state)
                    if slice_point and not state.pending_approvals:  # a pausing turn goes on to its finish
                        now = time.monotonic()
                        longest_step, step_began = max(longest_step, now - step_began), now
                        if stopping:  # the harness went on to this slice point after stop
                            return state
                        if budget_seconds is not None and now - started + longest_step >= budget_seconds:
                            last = await turn.stop()
                            if last is not None:
                                await progress.save(last.state)
                            if not getattr(turn, "drains_after_stop", False):
                                return state
                            stopping = True  # record what it writes up to its next slice point
                    slice_point = False
                    continue
                if isinstance(event, hi.Wait):
                    write_chunks(writer, tail, park(state, event))  # after the checkpoint the turn resumes from
                    state.stream = StreamContext(translator=translator.state, chunk_count=writer.end)
                    await progress.commit()
                    return state
                if finish_part is not None:
                    raise ProtocolError(f"The harness sent a {event.type!r} part after 'finish'.")
                chunks = translator.translate(event)
                if isinstance(event, hp.FinishPart):
                    final.extend(chunks)
                    finish_part = event
                    continue
                if isinstance(event, hp.ToolApprovalRequestPart):
                    self._note_approval(state, translator, event)
                _mark_times(state, writer, chunks)
                write_chunks(writer, tail, chunks)
                if isinstance(event, hp.FinishStepPart):
                    state.steps.append(_step_mark(event))
                if isinstance(event, hp.ErrorPart):
                    raise ModelError(chunks[0].error_text if chunks else "model error")  # type: ignore[union-attr]
                slice_point = isinstance(event, hp.FinishStepPart)
            if finish_part is None and stopping:  # it ended after stop: its last checkpoint stands
                return state
            if finish_part is None:
                raise FatalError("the harness's stream ended without a 'finish' part")
            state.status = "awaiting_tool_approval" if state.pending_approvals else "finished"
            state.continuation = None
            state.final_result = _final_result(finish_part, output)
            return await self._commit_terminal(progress, final)
        except (ModelError, OutputError, ProtocolError) as exc:
            state.status, state.error = "failed", str(exc)
            closing: list[UIMessageChunk] = [ErrorChunk(error_text=str(exc))]
            if translator.state.step_open:
                closing.append(FinishStepChunk())
            closing.append(FinishChunk(finish_reason="error"))
            logger.warning("run %s failed: %s", run_id, exc)
            return await self._commit_terminal(progress, closing)
        finally:
            await progress.close()
            await turn.close()
            observer.end(state, sys.exc_info()[1])

    async def run(self, run_id: str) -> RunState:
        """Run the turn with no time slicing until it pauses or ends."""
        return await self.run_slice(run_id, budget_seconds=None)

    def result(self, state: RunState) -> dict[str, Any]:
        """The run's result (JSON): the harness's account of its turn, with what the runner knows
        (``text``, ``steps`` and ``responseMessages`` from the run's log when the harness gives none;
        reads the log, so call it off the event loop)."""
        result: dict[str, Any] = {}
        final = state.final_result
        if final is not None:
            result["finishReason"] = final.finish_reason
            result["totalUsage"] = {"inputTokens": final.input_tokens, "outputTokens": final.output_tokens}
        if state.status == "awaiting_tool_approval":
            result["pendingApprovals"] = pending_json(state)
        if state.status == "awaiting_event":
            result["waitingFor"] = waits_json(state)
        if not foreign(state.agent, self.agent_id):  # another harness's turn state is not this one's to read
            result.update(self.agent.run_result(state.turn))
        from .result import RECORDED_KEYS, recorded_result  # the result API only: kept off the functions' load

        if missing := [key for key in RECORDED_KEYS if key not in result]:
            recorded = recorded_result(self.log.read(state.run_id, 0), state.steps)
            result.update({key: recorded[key] for key in missing})
        if final is not None and final.output is not None:
            result["output"] = final.output
        return result

    # --- internals -------------------------------------------------------------------------------

    def _begin_slice(self, run_id: str) -> tuple[StoredRun, RunState, int | None, StreamTranslator, int]:
        """Load the run and, unless it is terminal (count ``None``), claim it and open its log:
        one trip to a worker thread for the storage calls a slice starts with. Returns the
        checkpoint, the state, the log's count, the slice's translator and how many chunks past
        that count this trip appended (``open_with_start``: the run's ``start``, 0 or 1)."""
        cp = self.store.load(run_id)
        state = state_of(cp)
        translator = self._translator(state)
        check_agent(state, self.agent_id)  # another agent's run: not this harness's to drive
        if state.terminal or (state.status == "awaiting_event" and not due(self.events, state)):
            return cp, state, None, translator, 0
        cp = self.store.claim(run_id, cp.version)
        count = self.log.open(run_id, cp.epoch)
        # Only where the log ends at the checkpoint: after a dead attempt, reset-step or the
        # replayed tail comes first (run_slice).
        if not self.open_with_start or count != state.stream.chunk_count:
            return cp, state, count, translator, 0
        opening = [encode_ui_chunk(chunk) for chunk in translator.start(state.message_id)]
        if opening:  # appended as the writer would, at the count with the claim's epoch
            appended = self.log.append(run_id, count, opening, cp.epoch)
            if appended != count + len(opening):
                raise StorageError(f"run {run_id!r}: append of {len(opening)} chunks at {count} reported {appended}")
        return cp, state, count, translator, len(opening)

    @staticmethod
    def _note_approval(state: RunState, translator: StreamTranslator, part: hp.ToolApprovalRequestPart) -> None:
        """Record an approval request (the translator has checked that its tool call exists)."""
        if any(r.approval_id == part.approval_id for r in state.pending_approvals):
            return  # re-sent after reset-step
        info = translator.state.tool_calls[part.tool_call_id]
        record = ApprovalRecord(
            approval_id=part.approval_id, tool_call_id=part.tool_call_id, tool_name=info.tool_name,
            input=info.input, provider_executed=info.provider_executed,
        )  # fmt: skip
        state.pending_approvals.append(record)

    async def _reset_if_interrupted(
        self, state: RunState, count: int, translator: StreamTranslator, writer: ChunkWriter
    ) -> bool:
        if not await self._note_tail(state, count, translator):
            return False
        logger.info("run %s: previous attempt died mid-step; resetting the step", state.run_id)
        write_chunks(writer, None, translator.reset_step())
        return True


_TIMED = frozenset(
    {"start-step", "finish-step", "tool-input-available", "tool-output-available", "tool-output-error",
     "tool-approval-request"}
)  # fmt: skip


def _mark_times(state: RunState, writer: ChunkWriter, chunks: list[UIMessageChunk]) -> None:
    """Note when the chunks the inspector times are written (``RunState.chunk_times``)."""
    now = round(time.time(), 3)
    state.chunk_times.extend((writer.end + i, now) for i, chunk in enumerate(chunks) if chunk.type in _TIMED)


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


def _step_mark(part: hp.FinishStepPart) -> StepMark:
    usage = part.usage
    return StepMark(
        finish_reason=part.finish_reason.unified,
        input_tokens=int(usage.input_tokens.total or 0),
        output_tokens=int(usage.output_tokens.total or 0),
    )
