"""The result of a turn: its response messages, steps, final text, structured output and usage.

Computed from the turn's checkpointed state when asked (``GET /api/runs/{runId}/result``,
``Agent.generate()``, the "Run Finished" event), never stored beside it: the history is in the
checkpoint once (decision D5), and the steps are read from it. The k-th assistant message of the
turn is its k-th model step; the tool message after it holds that step's results.
"""

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any

from pydantic import Field

from ..harness.interface import Checkpoint, HarnessEvent
from ..messages import (
    AssistantMessage,
    ModelMessage,
    ToolApprovalRequestContent,
    ToolCallContent,
    ToolMessage,
    ToolResultContent,
    UserMessage,
)
from ..wire import JSONValue, WireModel
from .continuation import pending_approvals
from .control import TokenUsage
from .state import LoopTurnState, StepSummary

Signer = Callable[[str, str, str, Any], "str | None"]


class StepRecord(WireModel):
    """One model step of a turn: how it finished, what it cost, what it said and called."""

    step_number: int
    finish_reason: str
    usage: TokenUsage
    text: str = ""
    tool_calls: list[ToolCallContent] = Field(default_factory=list)
    tool_results: list[ToolResultContent] = Field(default_factory=list)
    """Host tools' results (from the tool message after the step) and provider-executed ones."""


class TurnResult(WireModel):
    """What a turn produced (``Agent.generate()`` returns it; the results endpoint sends its JSON)."""

    text: str
    """The last step's text."""
    output: JSONValue = None
    """The structured output (see ``Output``), when the agent has one and the turn's last step called
    no tools (a turn that paused or ended on a tool step has none)."""
    finish_reason: str
    total_usage: TokenUsage
    steps: list[StepRecord] = Field(default_factory=list)
    response_messages: list[ModelMessage] = Field(default_factory=list)
    """The messages this turn added to the conversation (approval requests signed)."""
    pending_approvals: list[dict[str, Any]] = Field(default_factory=list)
    """The approvals the turn waits for: ``approvalId``, ``toolCallId``, ``toolName``, ``input``."""


def finish_reason_of(state: LoopTurnState) -> tuple[str, str | None]:
    """The turn's finish reason and raw reason (a spent token budget ends it with ``length``)."""
    if state.stop_reason == "token_budget":
        return "length", "token-budget"
    return state.step_finish_reason, None


def response_messages(state: LoopTurnState) -> list[ModelMessage]:
    """The messages the turn added: from ``response_start`` on, led by the tool results it added to
    the last input message when it started by executing approved calls."""
    messages = state.messages
    start = state.response_start
    if start is None:  # a turn checkpointed before response_start existed
        start = next((i + 1 for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], UserMessage)), 0)
    head: list[ModelMessage] = []
    previous = messages[start - 1] if 0 < start <= len(messages) else None
    if state.input_tool_parts is not None and isinstance(previous, ToolMessage):
        added = previous.content[state.input_tool_parts :]
        if added:
            head.append(ToolMessage(content=list(added)))
    return head + list(messages[start:])


def _steps(state: LoopTurnState, response: Sequence[ModelMessage]) -> list[StepRecord]:
    positions = [i for i, m in enumerate(response) if isinstance(m, AssistantMessage)]
    # Each model step appended one assistant message; pair them from the end.
    positions = positions[len(positions) - len(state.steps) :] if state.steps else []
    records = []
    for summary, at in zip(state.steps, positions, strict=False):
        assistant = response[at]
        assert isinstance(assistant, AssistantMessage)
        results = [p for p in assistant.content if isinstance(p, ToolResultContent)]
        following = response[at + 1] if at + 1 < len(response) else None
        if isinstance(following, ToolMessage):
            results += [p for p in following.content if isinstance(p, ToolResultContent)]
        records.append(
            StepRecord(
                step_number=summary.number,
                finish_reason=summary.finish_reason,
                usage=TokenUsage(input_tokens=summary.input_tokens, output_tokens=summary.output_tokens),
                text=summary.text,
                tool_calls=[p for p in assistant.content if isinstance(p, ToolCallContent)],
                tool_results=results,
            )
        )
    return records


def turn_result(state: LoopTurnState, *, output: Any = None, signer: Signer | None = None) -> TurnResult:
    """The result of a turn from its state; pending approval requests are signed with ``signer``."""
    response = [m.model_copy(deep=True) for m in response_messages(state)]
    pending = pending_approvals(state.model_dump(mode="json", by_alias=True)) if state.paused else []
    if signer is not None and pending:
        by_id = {p["approvalId"]: p for p in pending}
        for message in response:
            if isinstance(message, AssistantMessage):
                for part in message.content:
                    if isinstance(part, ToolApprovalRequestContent) and part.approval_id in by_id:
                        call = by_id[part.approval_id]
                        part.signature = signer(part.approval_id, call["toolCallId"], call["toolName"], call["input"])
    reason, _ = finish_reason_of(state)
    return TurnResult(
        text=state.steps[-1].text if state.steps else "",
        output=output,
        finish_reason=reason,
        total_usage=TokenUsage(input_tokens=state.total_usage[0], output_tokens=state.total_usage[1]),
        steps=_steps(state, response),
        response_messages=response,
        pending_approvals=pending,
    )


def empty_result() -> TurnResult:
    """The result of a turn that never reached a checkpoint (it failed or was cancelled at once)."""
    return TurnResult(text="", finish_reason="other", total_usage=TokenUsage())


async def collect_result(
    events: AsyncGenerator[HarnessEvent, None],
    *,
    on_abort: Callable[[list[StepSummary]], Awaitable[None]],
    signer: Signer | None,
) -> TurnResult:
    """Run a turn's events to the end in memory (``generate()``) and return its result.

    A cancelled task is an abort here (nothing resumes the turn): ``on_abort`` gets the steps that
    finished before the cancellation propagates.
    """
    last: dict[str, Any] | None = None
    output: Any = None
    try:
        async for event in events:
            if isinstance(event, Checkpoint):
                last, output = event.state, event.output
    except asyncio.CancelledError:
        await on_abort(LoopTurnState.model_validate(last).steps if last else [])
        raise
    finally:
        await events.aclose()
    if last is None:
        return empty_result()
    return turn_result(LoopTurnState.model_validate(last), output=output, signer=signer)
