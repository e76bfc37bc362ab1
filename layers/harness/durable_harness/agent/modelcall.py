"""One model call of a step: streaming, retries with ``reset-step``, timeouts, and accumulation.

The parts of the call are passed on as they arrive (the runner translates them to UI chunks) and
collected into the step's assistant message. A retryable failure is retried like the AI SDK does
(two retries, 2 s then 4 s, honouring the provider's retry-after hint); if the failed attempt had
already streamed something, ``reset-step`` tells the client to drop it first.

The run's total time limit is a wall-clock deadline: it bounds a call that is already streaming
and the retries (a backoff that would end past it is not waited out), and it is not retried.
A provider's own ``tool-approval-request`` for a call it executes is recorded in the step, so the
turn pauses for the user's answer, which goes back to the provider with the next call.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ModelError, RunTimeoutError
from ..messages import (
    AssistantContent,
    ErrorJsonOutput,
    JsonOutput,
    ReasoningPart,
    TextPart,
    ToolApprovalRequestContent,
    ToolCallContent,
    ToolResultContent,
)
from ..models.base import LanguageModel, ModelRequest
from ..protocol import harness_parts as hp
from ..protocol.ui_chunks import ResetStepChunk, ToolInputErrorChunk, UIMessageChunk
from .control import Timeouts, retry_delay
from .state import StepCall

Validator = Callable[[hp.ToolCallPart], Awaitable[StepCall]]


@dataclass
class StepResult:
    """What one model call produced."""

    content: list[AssistantContent] = field(default_factory=list)
    calls: list[StepCall] = field(default_factory=list)
    finish_reason: str = "stop"
    raw_finish_reason: str | None = None
    usage: tuple[int, int] = (0, 0)
    provider_approvals: list[str] = field(default_factory=list)
    """Provider-executed calls (tool call ids) whose approval the model asked for."""

    @property
    def text(self) -> str:
        """The step's text, all text parts joined."""
        return "".join(p.text for p in self.content if isinstance(p, TextPart))


async def stream_model_step(
    model: LanguageModel,
    request: ModelRequest,
    result: StepResult,
    *,
    validate: Validator,
    max_retries: int = 2,
    timeouts: Timeouts | None = None,
    retry_initial_delay: float = 2.0,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    deadline: float | None = None,
) -> AsyncIterator[hp.HarnessStreamPart | UIMessageChunk]:
    """Run the call, yielding its parts; ``result`` holds the step once iteration ends.

    ``deadline`` (``time.time()`` seconds) is the run's total time limit: past it the call is
    cut and :class:`RunTimeoutError` raised, never retried.
    """
    timeouts = timeouts or Timeouts()
    attempt = 0
    while True:
        fresh = StepResult()
        streamed = False
        try:
            async for item in _one_attempt(model, request, fresh, validate, timeouts, deadline):
                streamed = True
                yield item
        except RunTimeoutError:
            raise
        except ModelError as exc:
            if not exc.retryable or attempt >= max_retries:
                raise
            delay = retry_delay(attempt, exc.retry_after, initial=retry_initial_delay)
            if deadline is not None and time.time() + delay >= deadline:
                raise RunTimeoutError(
                    f"The run reached its total time limit before the model call could be retried ({exc})."
                ) from exc
            attempt += 1
            if streamed:
                yield ResetStepChunk()
            await sleep(delay)
            continue
        result.content, result.calls = fresh.content, fresh.calls
        result.finish_reason, result.raw_finish_reason, result.usage = (
            fresh.finish_reason,
            fresh.raw_finish_reason,
            fresh.usage,
        )
        result.provider_approvals = fresh.provider_approvals
        return


async def _one_attempt(
    model: LanguageModel,
    request: ModelRequest,
    result: StepResult,
    validate: Validator,
    timeouts: Timeouts,
    deadline: float | None,
) -> AsyncIterator[hp.HarnessStreamPart | UIMessageChunk]:
    blocks: dict[str, TextPart | ReasoningPart] = {}
    stream = model.stream(request)
    began = time.monotonic()
    first = True
    try:
        while True:
            part = await _next(stream, timeouts, began, first, deadline)
            if part is None:
                return
            first = False
            if isinstance(part, hp.TextStartPart | hp.ReasoningStartPart):
                block: TextPart | ReasoningPart = (
                    TextPart(text="") if isinstance(part, hp.TextStartPart) else ReasoningPart(text="")
                )
                blocks[part.id] = block
                result.content.append(block)
            elif isinstance(part, hp.TextDeltaPart | hp.ReasoningDeltaPart):
                if part.id in blocks:
                    blocks[part.id].text += part.delta
            elif isinstance(part, hp.ReasoningEndPart) and part.harness_metadata and part.id in blocks:
                blocks[part.id].provider_options = part.harness_metadata
            elif isinstance(part, hp.ToolCallPart):
                for item in await _tool_call(part, result, validate):
                    yield item
                continue
            elif isinstance(part, hp.ToolResultPart):
                result.content.append(_provider_result(part))
            elif isinstance(part, hp.ToolApprovalRequestPart) and _provider_executed(result, part.tool_call_id):
                request_part = ToolApprovalRequestContent(approval_id=part.approval_id, tool_call_id=part.tool_call_id)
                result.content.append(request_part)
                result.provider_approvals.append(part.tool_call_id)
            elif isinstance(part, hp.FinishPart):
                result.finish_reason = part.finish_reason.unified
                result.raw_finish_reason = part.finish_reason.raw
                usage = part.total_usage
                result.usage = (int(usage.input_tokens.total or 0), int(usage.output_tokens.total or 0))
                continue  # the agent emits its own finish-step / finish
            elif isinstance(part, hp.ErrorPart):
                raise ModelError(_error_text(part.error))
            yield part
    finally:
        await stream.aclose()  # type: ignore[attr-defined]


async def _next(
    stream: AsyncIterator[Any], timeouts: Timeouts, began: float, first: bool, deadline: float | None
) -> Any:
    limits = [t for t in (timeouts.first_chunk if first else timeouts.chunk,) if t]
    if timeouts.step:
        limits.append(max(0.0, timeouts.step - (time.monotonic() - began)))
    left = None if deadline is None else deadline - time.time()
    if left is not None and left <= 0:
        raise RunTimeoutError("The run reached its total time limit while the model was answering.")
    try:
        if limits or left is not None:
            return await asyncio.wait_for(anext(stream), min([*limits, *([left] if left is not None else [])]))
        return await anext(stream)
    except StopAsyncIteration:
        return None
    except TimeoutError:
        if left is not None and (not limits or left <= min(limits)):
            raise RunTimeoutError("The run reached its total time limit while the model was answering.") from None
        what = "its first chunk" if first else "the next chunk"
        raise ModelError(f"The model call timed out waiting for {what}.", retryable=True) from None


def _provider_executed(result: StepResult, tool_call_id: str) -> bool:
    return any(
        isinstance(c, ToolCallContent) and c.tool_call_id == tool_call_id and c.provider_executed
        for c in result.content
    )


async def _tool_call(
    part: hp.ToolCallPart, result: StepResult, validate: Validator
) -> list[hp.HarnessStreamPart | UIMessageChunk]:
    if part.provider_executed:
        result.content.append(_call_content(part.tool_call_id, part.tool_name, _loads(part.input), True))
        # A provider-executed call of a tool the agent does not define is a dynamic tool (§5.2).
        return [part if part.dynamic is not None else part.model_copy(update={"dynamic": True})]
    call = await validate(part)
    result.calls.append(call)
    result.content.append(_call_content(call.tool_call_id, call.tool_name, call.input, None))
    if call.invalid_error is not None:
        return [
            ToolInputErrorChunk(
                tool_call_id=call.tool_call_id,
                tool_name=call.tool_name,
                input=call.input,
                dynamic=True,
                error_text=call.invalid_error,
            )
        ]
    raw = json.dumps(call.input, ensure_ascii=False, separators=(",", ":"))
    return [hp.ToolCallPart(tool_call_id=call.tool_call_id, tool_name=call.tool_name, input=raw)]


def _call_content(call_id: str, name: str, tool_input: Any, provider_executed: bool | None) -> ToolCallContent:
    return ToolCallContent(tool_call_id=call_id, tool_name=name, input=tool_input, provider_executed=provider_executed)


def _provider_result(part: hp.ToolResultPart) -> ToolResultContent:
    output = ErrorJsonOutput(value=part.result) if part.is_error else JsonOutput(value=part.result)
    return ToolResultContent(tool_call_id=part.tool_call_id, tool_name=part.tool_name, output=output)


def _loads(text: str) -> Any:
    try:
        return json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        return text


def _error_text(error: Any) -> str:
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return error if isinstance(error, str) else json.dumps(error)
