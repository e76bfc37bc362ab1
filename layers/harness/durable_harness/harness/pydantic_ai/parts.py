"""Pydantic AI's events as harness stream parts.

A model response streams as Pydantic AI's ``PartStartEvent`` / ``PartDeltaEvent`` /
``PartEndEvent`` per response part (:class:`ResponseParts`): a ``TextPart`` becomes
``text-start`` / ``text-delta`` / ``text-end``, a ``ThinkingPart`` the ``reasoning-*`` parts, and a
``ToolCallPart`` ``tool-input-start`` / ``tool-input-delta`` (the arguments' JSON text as the model
writes it) / ``tool-input-end`` and then ``tool-call``. Output tools (structured output) are not
shown. A tool's ``FunctionToolResultEvent`` becomes ``tool-result`` (:func:`result_part`).

The agent's tools run inside the harness, so every call is ``providerExecuted``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic_ai import messages as pm
from pydantic_core import to_jsonable_python

from ...protocol import harness_parts as hp
from ..interface import HarnessEvent

IsOutputTool = Callable[[str], bool]
"""Whether a tool name is one of the agent's output tools (structured output: not shown)."""


@dataclass
class _Open:
    """A response part being streamed."""

    kind: Literal["text", "reasoning", "tool", "none"]
    id: str
    started: bool = False
    args_as_text: bool = True  # the arguments arrive as JSON text (not as a dict): stream them


class ResponseParts:
    """Maps one streamed model response's events to harness parts.

    Text and reasoning parts open at their first non-empty text (an empty one is not shown); part
    ids are ``s<step>-<index>``, unique within the turn.
    """

    def __init__(self, step: int, is_output_tool: IsOutputTool) -> None:
        self.step = step
        self.is_output_tool = is_output_tool
        self.open: dict[int, _Open] = {}

    def on(self, event: Any) -> list[HarnessEvent]:
        """The parts for one event of the model's stream."""
        if isinstance(event, pm.PartStartEvent):
            return [*self._end(event.index, None), *self._start(event.index, event.part)]
        if isinstance(event, pm.PartDeltaEvent):
            return self._delta(event.index, event.delta)
        if isinstance(event, pm.PartEndEvent):
            return self._end(event.index, event.part)
        return []

    def close(self, response: pm.ModelResponse) -> list[HarnessEvent]:
        """End the parts still open when the stream ended (``response`` is the whole response)."""
        events: list[HarnessEvent] = []
        for index in list(self.open):
            events += self._end(index, response.parts[index] if index < len(response.parts) else None)
        return events

    def _start(self, index: int, part: Any) -> list[HarnessEvent]:
        pid = f"s{self.step}-{index}"
        if isinstance(part, pm.TextPart | pm.ThinkingPart):
            self.open[index] = _Open("text" if isinstance(part, pm.TextPart) else "reasoning", pid)
            return self._text(index, part.content)
        if isinstance(part, pm.ToolCallPart) and not self.is_output_tool(part.tool_name):
            state = self.open[index] = _Open("tool", part.tool_call_id, started=True)
            events: list[HarnessEvent] = [
                hp.ToolInputStartPart(id=part.tool_call_id, tool_name=part.tool_name, provider_executed=True)
            ]
            if isinstance(part.args, str) and part.args:
                events.append(hp.ToolInputDeltaPart(id=part.tool_call_id, delta=part.args))
            state.args_as_text = not isinstance(part.args, dict)
            return events
        self.open[index] = _Open("none", pid)
        return []

    def _delta(self, index: int, delta: Any) -> list[HarnessEvent]:
        state = self.open.get(index)
        if state is None:
            return []
        if isinstance(delta, pm.TextPartDelta | pm.ThinkingPartDelta):
            return self._text(index, delta.content_delta)
        if isinstance(delta, pm.ToolCallPartDelta) and state.kind == "tool":
            if isinstance(delta.args_delta, str) and delta.args_delta and state.args_as_text:
                return [hp.ToolInputDeltaPart(id=state.id, delta=delta.args_delta)]
            if isinstance(delta.args_delta, dict):
                state.args_as_text = False  # a dict cannot be streamed as text: the tool-call has it all
        return []

    def _text(self, index: int, text: str | None) -> list[HarnessEvent]:
        state = self.open[index]
        if not text or state.kind not in ("text", "reasoning"):
            return []
        events: list[HarnessEvent] = []
        if not state.started:
            state.started = True
            events.append(hp.TextStartPart(id=state.id) if state.kind == "text" else hp.ReasoningStartPart(id=state.id))
        if state.kind == "text":
            events.append(hp.TextDeltaPart(id=state.id, delta=text))
        else:
            events.append(hp.ReasoningDeltaPart(id=state.id, delta=text))
        return events

    def _end(self, index: int, part: Any) -> list[HarnessEvent]:
        state = self.open.pop(index, None)
        if state is None or not state.started:
            return []
        if state.kind == "text":
            return [hp.TextEndPart(id=state.id)]
        if state.kind == "reasoning":
            return [hp.ReasoningEndPart(id=state.id)]
        events: list[HarnessEvent] = [hp.ToolInputEndPart(id=state.id)]
        if isinstance(part, pm.ToolCallPart):
            events.append(call_part(part))
        return events


def call_part(part: pm.ToolCallPart) -> hp.ToolCallPart:
    """A tool call, whole."""
    return hp.ToolCallPart(
        tool_call_id=part.tool_call_id, tool_name=part.tool_name, input=part.args_as_json_str(), provider_executed=True
    )


def response_events(response: pm.ModelResponse, step: int, is_output_tool: IsOutputTool) -> list[HarnessEvent]:
    """A whole model response as harness parts: for a model that cannot stream, and to show a step
    again after ``reset-step``."""
    events: list[HarnessEvent] = []
    for i, part in enumerate(response.parts):
        pid = f"s{step}-{i}"
        if isinstance(part, pm.TextPart) and part.content:
            events += [hp.TextStartPart(id=pid), hp.TextDeltaPart(id=pid, delta=part.content), hp.TextEndPart(id=pid)]
        elif isinstance(part, pm.ThinkingPart) and part.content:
            events += [
                hp.ReasoningStartPart(id=pid),
                hp.ReasoningDeltaPart(id=pid, delta=part.content),
                hp.ReasoningEndPart(id=pid),
            ]
        elif isinstance(part, pm.ToolCallPart) and not is_output_tool(part.tool_name):
            events.append(call_part(part))
    return events


def result_part(part: pm.ToolReturnPart) -> hp.ToolResultPart:
    """A tool's result; a failure or a retry request is an error whose text the model was sent."""
    if part.outcome in ("failed", "retried", "denied"):
        text = part.model_response_str(wrap_if_error=False)
        return hp.ToolResultPart(tool_call_id=part.tool_call_id, tool_name=part.tool_name, result=text, is_error=True)
    return hp.ToolResultPart(tool_call_id=part.tool_call_id, tool_name=part.tool_name, result=jsonable(part.content))


def usage_of(usage: Any) -> hp.Usage:
    """Harness usage from Pydantic AI's (a request's or a run's)."""
    return tokens(int(usage.input_tokens or 0), int(usage.output_tokens or 0))


def tokens(input_tokens: int, output_tokens: int) -> hp.Usage:
    """Harness usage from token counts."""
    return hp.Usage(input_tokens=hp.InputTokens(total=input_tokens), output_tokens=hp.OutputTokens(total=output_tokens))


def jsonable(value: Any) -> Any:
    """A JSON value for ``value`` (models, dataclasses and dates as Pydantic dumps them; else its text)."""
    try:
        return json.loads(json.dumps(to_jsonable_python(value)))
    except (TypeError, ValueError):
        return str(value)
