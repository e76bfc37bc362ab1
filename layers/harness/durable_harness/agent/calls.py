"""Pieces of the tool-loop agent that need no agent instance: parsing and validating tool calls,
re-sending a step after ``reset-step``, and checking configuration that is checkpointed."""

from __future__ import annotations

import asyncio
import json
import operator
from collections.abc import Mapping
from itertools import repeat
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import AgentConfigError, ToolError
from ..harness.interface import HarnessEvent as AgentEvent
from ..messages import (
    AssistantMessage,
    ModelMessage,
    ReasoningPart,
    SystemMessage,
    TextPart,
    ToolApprovalRequestContent,
    ToolCallContent,
    ToolMessage,
    UserMessage,
)
from ..models.base import LanguageModel, ModelRequest
from ..protocol import harness_parts as hp
from ..protocol.ui_chunks import ToolInputErrorChunk
from ..sealed import leading, seal
from ..tools import Tool
from .control import RepairToolCall
from .execution import result_events
from .state import LoopTurnState, StepCall, StepOutcome


def parse_call(part: hp.ToolCallPart, tools: Mapping[str, Tool]) -> StepCall:
    """A model's tool call parsed and validated against the tools (``invalid_error`` says why not)."""
    call = StepCall(tool_call_id=part.tool_call_id, tool_name=part.tool_name)
    try:
        call.input = json.loads(part.input) if part.input.strip() else {}
    except json.JSONDecodeError as exc:
        call.input = part.input
        call.invalid_error = f"Invalid input for tool {part.tool_name}: JSON parsing failed: {exc.msg}"
        return call
    tool = tools.get(part.tool_name)
    if tool is None:
        available = ", ".join(sorted(tools)) or "none"
        call.invalid_error = f"Model tried to call unavailable tool '{part.tool_name}'. Available tools: {available}."
        return call
    try:
        tool.validate(call.input)
    except ToolError as exc:
        call.invalid_error = str(exc)
    return call


async def validate_call(part: hp.ToolCallPart, tools: Mapping[str, Tool], repair: RepairToolCall | None) -> StepCall:
    """A model's tool call validated, after ``repair_tool_call`` had its chance with an invalid one."""
    call = parse_call(part, tools)
    if call.invalid_error is not None and repair is not None:
        repaired = await maybe_await(repair(part.tool_call_id, part.tool_name, part.input, call.invalid_error, tools))
        if repaired is not None:
            name, text = repaired
            fixed = parse_call(hp.ToolCallPart(tool_call_id=part.tool_call_id, tool_name=name, input=text), tools)
            if fixed.invalid_error is None:
                return fixed
    return call


def replay_events(state: LoopTurnState) -> list[AgentEvent]:
    """What the client had seen of the current step before ``reset-step`` removed it."""
    events: list[AgentEvent] = []
    if not state.approval_step:
        assistant = state.messages[-1]
        assert isinstance(assistant, AssistantMessage)
        invalid = {c.tool_call_id: c for c in state.step_calls if c.invalid_error and not c.silent}
        events += content_events(assistant, invalid)
    by_id = {o.tool_call_id: o for o in state.step_outcomes}
    for call in state.step_calls[: state.reported]:
        if call.tool_call_id in by_id:
            events += result_events(call, by_id[call.tool_call_id])
    return events


def content_events(assistant: AssistantMessage, invalid: Mapping[str, StepCall]) -> list[AgentEvent]:
    """The events that show a step's assistant content again (after ``reset-step``)."""
    events: list[AgentEvent] = []
    for i, item in enumerate(assistant.content):
        pid = f"replay-{i}"
        if isinstance(item, TextPart):
            events += [hp.TextStartPart(id=pid), hp.TextDeltaPart(id=pid, delta=item.text), hp.TextEndPart(id=pid)]
        elif isinstance(item, ReasoningPart):
            events += [hp.ReasoningStartPart(id=pid), hp.ReasoningDeltaPart(id=pid, delta=item.text)]
            events.append(hp.ReasoningEndPart(id=pid, harness_metadata=item.provider_options))
        elif isinstance(item, ToolCallContent) and item.tool_call_id in invalid:
            call = invalid[item.tool_call_id]
            events.append(
                ToolInputErrorChunk(
                    tool_call_id=call.tool_call_id, tool_name=call.tool_name, input=call.input, dynamic=True,
                    error_text=call.invalid_error or "",
                )
            )  # fmt: skip
        elif isinstance(item, ToolCallContent):
            raw = json.dumps(item.input, ensure_ascii=False, separators=(",", ":"))
            events.append(
                hp.ToolCallPart(
                    tool_call_id=item.tool_call_id, tool_name=item.tool_name, input=raw,
                    provider_executed=item.provider_executed,
                    dynamic=True if item.provider_executed else None,  # as first streamed (modelcall)
                )
            )  # fmt: skip
        elif isinstance(item, ToolApprovalRequestContent):
            events.append(hp.ToolApprovalRequestPart(approval_id=item.approval_id, tool_call_id=item.tool_call_id))
    return events


def ordered_outcomes(state: LoopTurnState) -> list[StepOutcome]:
    """The step's outcomes in the model's order of calls."""
    by_id = {o.tool_call_id: o for o in state.step_outcomes}
    return [by_id[c.tool_call_id] for c in state.step_calls if c.tool_call_id in by_id]


def resolve_model_spec(model: LanguageModel | str) -> LanguageModel:
    """A model object for a model or a spec string."""
    if isinstance(model, str):
        from ..models.registry import resolve_model

        try:
            return resolve_model(model)
        except (ValueError, ImportError) as exc:  # a bad spec (a MODEL_ID), a provider not installed
            raise AgentConfigError(str(exc)) from exc
    return model


def validate_tools_context(tools: Mapping[str, Tool], context: Mapping[str, Any]) -> dict[str, Any]:
    """``tools_context`` checked against the tools and their context models, JSON-ready."""
    unknown = set(context) - tools.keys()
    if unknown:
        raise AgentConfigError(f"tools_context names unknown tools: {sorted(unknown)}")
    validated: dict[str, Any] = {}
    for name, value in context.items():
        model = tools[name].context_model
        if model is not None:
            try:
                value = model.model_validate(value).model_dump(mode="json")
            except ValidationError as exc:
                raise AgentConfigError(f"tools_context[{name!r}] is invalid: {exc}") from exc
        validated[name] = json_ready(value, f"tools_context[{name!r}]")
    return validated


def json_ready(value: Any, what: str) -> Any:
    """``value`` as plain JSON (it is checkpointed), or a clear configuration error."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise AgentConfigError(f"{what} must be JSON-serializable (it is checkpointed): {exc}") from exc


def usage_of(pair: tuple[int, int]) -> hp.Usage:
    """A usage record of (input, output) token totals."""
    return hp.Usage(input_tokens=hp.InputTokens(total=pair[0]), output_tokens=hp.OutputTokens(total=pair[1]))


RECENT_MESSAGES = 2
"""The last messages :func:`dump_state` always serializes again: the turn still adds to them (the
step's assistant message, the tool message of an approval step); older ones are never changed."""


def dump_state(state: LoopTurnState) -> dict[str, Any]:
    """The turn state as the JSON-ready dict a boundary carries.

    Incremental: the JSON of a message older than the last :data:`RECENT_MESSAGES` (and of a step
    summary but the last) is reused from the previous dump while it is the same object at the same
    place, sealed (:func:`~durable_harness.sealed.seal`), so neither this dump nor the
    checkpoint made of it serializes the whole history again (equal to
    ``state.model_dump(mode="json", by_alias=True)``).
    """
    state._dumped = _reuse(state.messages, state._dumped, RECENT_MESSAGES)
    state._dumped_steps = _reuse(state.steps, state._dumped_steps, 1)
    rest = state.model_dump(mode="json", by_alias=True, exclude={"messages", "steps"})
    second = operator.itemgetter(1)
    dumped = {"messages": list(map(second, state._dumped)), **rest, "steps": list(map(second, state._dumped_steps))}
    return {name: dumped[name] for name in type(state).model_fields}  # the fields' order, as model_dump


def _reuse(items: list[Any], cached: list[tuple[Any, Any]], recent: int) -> list[tuple[Any, Any]]:
    """``(item, sealed JSON)`` for ``items``: ``cached``'s while the same object, but for the last ``recent``."""
    keep = min(leading(map(operator.is_, map(operator.itemgetter(0), cached), items)), max(0, len(items) - recent))
    return cached[:keep] + [(item, seal(item.model_dump(mode="json", by_alias=True))) for item in items[keep:]]


_MESSAGE_TYPES = (SystemMessage, UserMessage, AssistantMessage, ToolMessage)


def request_messages(messages: list[Any]) -> list[ModelMessage]:
    """``messages`` for a model request: as they are when each is a message model already (the
    turn's own were validated as they were made: validating a history again at every step made a
    step cost more the longer the run), else validated (``prepare_step`` may send its own)."""
    if all(map(isinstance, messages, repeat(_MESSAGE_TYPES))):
        return messages
    return ModelRequest(messages=messages).messages


def is_empty_part(part: Any) -> bool:
    """True for a text or reasoning part with nothing in it."""
    return getattr(part, "type", "") in ("text", "reasoning") and not part.text and not part.provider_options


async def maybe_await(value: Any) -> Any:
    """Await ``value`` if it is awaitable (callbacks and hooks may be sync or async)."""
    if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
        return await value
    return value
