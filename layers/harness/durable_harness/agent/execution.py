"""Running a step's tool calls: concurrency, in-order reporting, approvals, and their checkpoints.

Every completed call is checkpointed at once while other calls of the step still run (a
``tool-result`` boundary), so a crash never runs a finished tool again; the step's last results
ride on the step's own checkpoint. Results reach the client in the model's order whatever order
they finish in.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from dataclasses import KW_ONLY, dataclass, replace
from typing import Any

from ..errors import ToolError
from ..harness.answers import match_approvals
from ..messages import (
    ErrorTextOutput,
    JsonOutput,
    ModelMessage,
    TextOutput,
    ToolApprovalResponsePart,
    ToolMessage,
    ToolResultContent,
    ToolResultOutput,
)
from ..protocol import harness_parts as hp
from ..protocol.ui_chunks import ToolOutputErrorChunk, UIMessageChunk
from ..tools import Tool, ToolContext
from ..tools.durable import DurableCall
from ..waits import ParkTool, WaitSpec
from .state import LoopTurnState, StepCall, StepOutcome

Emit = hp.HarnessStreamPart | UIMessageChunk


def result_events(call: StepCall, outcome: StepOutcome) -> list[Emit]:
    """What the client is told about one finished call."""
    if outcome.error is None:
        return [hp.ToolResultPart(tool_call_id=call.tool_call_id, tool_name=call.tool_name, result=outcome.output)]
    if call.invalid_error is not None:
        return []  # reported at tool-call time (tool-input-error), or silently (bad signature)
    return [ToolOutputErrorChunk(tool_call_id=call.tool_call_id, error_text=outcome.error)]


def result_part(outcome: StepOutcome) -> ToolResultContent:
    """The tool result the model sees."""
    output: ToolResultOutput
    if outcome.error is not None:
        output = ErrorTextOutput(value=outcome.error)
    elif isinstance(outcome.output, str):
        output = TextOutput(value=outcome.output)
    else:
        output = JsonOutput(value=outcome.output)
    return ToolResultContent(tool_call_id=outcome.tool_call_id, tool_name=outcome.tool_name, output=output)


@dataclass(frozen=True)
class Parked:
    """Tool calls of the step wait (an event or a sleep): the run parks once the others are done.

    The results of the calls that finished were checkpointed (a :class:`Recorded` came first)."""

    waits: tuple[WaitSpec, ...]


@dataclass(frozen=True)
class Recorded:
    """Tool results were added to ``state.step_outcomes``: checkpoint them.

    ``others_running``: tools of the step are still running, so the results must be durable before
    any of those finishes (a crash must not run a finished tool again). Otherwise the step's end
    follows with no side effect in between, and its checkpoint may carry them.
    """

    others_running: bool


@dataclass(eq=False)
class ToolRunner:
    """Executes calls of one step for an agent's tool set."""

    tools: Mapping[str, Tool]
    _: KW_ONLY
    concurrency: int | None
    tools_context: Mapping[str, Any]
    on_start: Callable[[StepCall], Any] | None = None
    on_end: Callable[[StepCall, StepOutcome], Any] | None = None

    def context(self, call: StepCall, state: LoopTurnState, messages: list[ModelMessage] | None = None) -> ToolContext:
        """The context a call's tool receives: the turn's current ``runtime_context`` (which
        ``prepare_call`` / ``prepare_step`` may have replaced) and the tool's ``tools_context`` entry."""
        return ToolContext(
            tool_call_id=call.tool_call_id,
            tool_name=call.tool_name,
            messages=messages if messages is not None else state.messages,
            runtime_context=state.runtime_context,
            tool_context=self.tools_context.get(call.tool_name),
        )

    async def execute(self, call: StepCall, context: ToolContext) -> StepOutcome | ParkTool:
        """Run one call; any failure becomes an error outcome the model can read. A call that waits
        (``ctx.wait_for_event``, ``ctx.sleep``) gives its :class:`~durable_harness.waits.ParkTool`."""
        outcome = StepOutcome(tool_call_id=call.tool_call_id, tool_name=call.tool_name)
        if call.invalid_error is not None:
            outcome.error = call.invalid_error
            return outcome
        tool = self.tools[call.tool_name]
        if self.on_start:
            await _maybe_await(self.on_start(call))
        began = time.monotonic()
        try:
            outcome.output = await tool.run(tool.validate(call.input), context)
        except ParkTool as park:  # no outcome: the call runs again (from its start) when the run resumes
            return park
        except ToolError as exc:
            outcome.error = str(exc)
        except Exception as exc:  # a tool's failure is a result the model can react to
            outcome.error = f"Error: {exc}" if str(exc) else f"Error: {type(exc).__name__}"
        outcome.duration_ms = (time.monotonic() - began) * 1000
        if self.on_end:
            await _maybe_await(self.on_end(call, outcome))
        return outcome

    async def run_step(self, state: LoopTurnState, runnable: list[StepCall]) -> AsyncIterator[Emit | Recorded | Parked]:
        """Execute ``runnable`` calls not yet done; yields UI items, and :class:`Recorded` after each
        batch of results and whenever a tool's ``ctx.step`` records one (a checkpoint is due; the
        tool goes on once it is written). Ends with :class:`Parked` when calls wait.

        Results are reported in the model's order (``state.reported`` counts them).
        """
        done = {o.tool_call_id for o in state.step_outcomes}
        todo = [c for c in runnable if c.tool_call_id not in done]
        limit = asyncio.Semaphore(self.concurrency) if self.concurrency else None
        messages = list(state.messages)
        persisting: asyncio.Queue[asyncio.Future[None]] = asyncio.Queue()

        ended = False  # the step ended (or was cancelled): a later persist must not wait

        async def persist() -> None:
            if ended:  # a sync tool's thread outlives its cancelled call: end its wait
                raise asyncio.CancelledError
            written = asyncio.get_running_loop().create_future()
            persisting.put_nowait(written)
            await written

        async def guarded(call: StepCall) -> StepOutcome | ParkTool:
            tool = self.tools.get(call.tool_name)
            durable = DurableCall(
                call.tool_call_id, state.journals.setdefault(call.tool_call_id, {}), persist,
                events=state._events, retries=tool.retries if tool is not None else 0,
            )  # fmt: skip
            context = replace(self.context(call, state, messages), durable=durable)
            if limit is None:
                return await self.execute(call, context)
            async with limit:
                return await self.execute(call, context)

        tasks = {asyncio.ensure_future(guarded(call)): call for call in todo}
        parked: list[WaitSpec] = []
        request: asyncio.Future[asyncio.Future[None]] | None = None
        waiting: list[asyncio.Future[None]] = []
        try:
            while tasks:
                request = request or asyncio.ensure_future(persisting.get())
                pending: set[asyncio.Future[Any]] = {*tasks, request}
                finished, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if request in finished:  # a step's result: durable before its tool goes on
                    waiting = [request.result()]
                    while not persisting.empty():
                        waiting.append(persisting.get_nowait())
                    request = None
                    yield Recorded(others_running=True)
                    for written in waiting:
                        if not written.done():
                            written.set_result(None)
                results = [task for task in finished if task in tasks]
                for task in results:
                    tasks.pop(task)
                    result = task.result()
                    if isinstance(result, ParkTool):
                        parked.append(result.spec)
                    else:
                        state.step_outcomes.append(result)
                if results:
                    for item in self.report(state):
                        yield item
                    yield Recorded(others_running=bool(tasks) or bool(parked))
        finally:
            ended = True
            for task in tasks:
                task.cancel()
            if request is not None:
                request.cancel()
            while not persisting.empty():
                waiting.append(persisting.get_nowait())
            for written in waiting:  # a sync tool's thread may wait on one: let it go too
                written.cancel()
        for item in self.report(state):
            yield item
        if parked:
            yield Parked(tuple(parked))

    def report(self, state: LoopTurnState) -> list[Emit]:
        """Result events for the next calls, in order, whose outcomes are known; advances ``reported``."""
        by_id = {o.tool_call_id: o for o in state.step_outcomes}
        events: list[Emit] = []
        while state.reported < len(state.step_calls):
            call = state.step_calls[state.reported]
            if call.tool_call_id in state.pending_approvals or call.tool_call_id in state.client_calls:
                state.reported += 1
                continue
            outcome = by_id.get(call.tool_call_id)
            if outcome is None:
                break
            events += result_events(call, outcome)
            state.reported += 1
        return events


# --- approvals of an earlier turn -----------------------------------------------------------------


@dataclass
class ApprovalActions:
    """What the answers in the last tool message ask the agent to do before calling the model."""

    runnable: list[StepCall]
    """Approved host calls to execute (a bad signature makes one an error result instead)."""
    denied: list[str]
    """Every denied call, host or provider-executed (the runner shows ``tool-output-denied``)."""
    refused: list[str]
    """Approval ids of provider-executed calls approved without a verified answer: the provider is
    told they were denied instead (nothing it runs may be approved by a forgery)."""


def answered_approvals(
    messages: list[ModelMessage], verified: Collection[str], tools: Mapping[str, Tool]
) -> ApprovalActions:
    """The approved calls to execute and the denied ones, from the last tool message.

    Only approvals in ``verified`` (the approval ids whose answers the runner verified: signature
    and ledger) execute; any other approved call executes nothing: the model gets an error result
    and the client no chunk. A provider-executed call is not run here: its answer goes back to the
    provider with the next model call (like the AI SDK's ``streamText``).
    """
    actions = ApprovalActions([], [], [])
    for answer in (a for a in match_approvals(messages) if a.pending):
        call, request = answer.call, answer.request
        if not answer.response.approved:
            actions.denied.append(call.tool_call_id)
            continue
        signed = request.approval_id in verified
        if call.provider_executed:
            if not signed:
                actions.refused.append(request.approval_id)
            continue
        step_call = StepCall(tool_call_id=call.tool_call_id, tool_name=call.tool_name, input=call.input)
        if not signed:
            step_call.invalid_error = (
                f"The approval of tool call {call.tool_call_id} has a missing or invalid signature; "
                "the tool was not executed."
            )
            step_call.silent = True
        elif call.tool_name not in tools or tools[call.tool_name].client_side:
            step_call.invalid_error = f"Tool {call.tool_name} is not available on the server."
        actions.runnable.append(step_call)
    return actions


def refuse_provider_approvals(messages: list[ModelMessage], approval_ids: list[str]) -> None:
    """Turn forged approvals of provider-executed calls into denials in the last tool message."""
    last = messages[-1]
    if not approval_ids or not isinstance(last, ToolMessage):
        return
    for i, part in enumerate(last.content):
        if isinstance(part, ToolApprovalResponsePart) and part.approval_id in approval_ids:
            last.content[i] = part.model_copy(
                update={"approved": False, "reason": "The approval's signature is missing or invalid."}
            )


async def _maybe_await(value: Any) -> Any:
    if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
        return await value
    return value
