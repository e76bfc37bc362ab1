"""The built-in tool-loop agent: call the model, run the tools it asks for, repeat until it stops.

Every step is split at boundaries the durable runner checkpoints: after the model call (so a crash
while tools run never repeats the model call), after each tool result (so a finished tool never
runs again), and at the end of the step.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Collection, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..errors import AgentConfigError, ModelError, ToolError
from ..ids import new_id
from ..messages import (
    AssistantContent,
    AssistantMessage,
    ErrorTextOutput,
    JsonOutput,
    ModelMessage,
    ReasoningPart,
    TextOutput,
    TextPart,
    ToolCallPart,
    ToolMessage,
    ToolResultOutput,
    ToolResultPart,
)
from ..models.base import LanguageModel, ModelRequest
from ..protocol import harness_parts as hp
from ..protocol.ui_chunks import ToolOutputErrorChunk
from .protocol import AgentEvent, Boundary
from .tools import Tool

DEFAULT_MAX_STEPS = 20
"""Steps a turn may take before it is stopped, so a looping model cannot burn money forever."""


class StepCall(BaseModel):
    """A tool call of the current step, in the model's order."""

    tool_call_id: str
    tool_name: str
    input: Any = None
    invalid_error: str | None = None
    provider_executed: bool = False


class StepOutcome(BaseModel):
    """The result of one tool call of the current step."""

    tool_call_id: str
    tool_name: str
    output: Any = None
    error: str | None = None


class LoopTurnState(BaseModel):
    """The serializable state of a turn of :class:`ToolLoopAgent` (checkpointed at boundaries)."""

    messages: list[ModelMessage]
    step: int = 0
    phase: Literal["model", "tools"] = "model"
    step_calls: list[StepCall] = Field(default_factory=list)
    step_outcomes: list[StepOutcome] = Field(default_factory=list)
    step_finish_reason: str = "stop"
    step_usage: tuple[int, int] = (0, 0)
    total_usage: tuple[int, int] = (0, 0)


class ToolLoopAgent:
    """An agent with instructions, a model and server-executed tools."""

    def __init__(
        self,
        *,
        model: LanguageModel,
        instructions: str | None = None,
        tools: Sequence[Tool] = (),
        max_steps: int | None = DEFAULT_MAX_STEPS,
    ) -> None:
        self.model = model
        self.instructions = instructions
        self.tools = {t.name: t for t in tools}
        if len(self.tools) != len(tools):
            raise AgentConfigError("two tools have the same name")
        self.max_steps = max_steps

    @property
    def tool_names(self) -> Collection[str]:
        """Names of the host tools."""
        return self.tools.keys()

    def has_output(self) -> bool:
        """The tool-loop agent has no structured output (yet)."""
        return False

    def create_session(self, session_id: str | None = None) -> str:
        """Sessions are stateless here: the conversation travels in the turn's messages."""
        return session_id or new_id("sess")

    def stream(self, session_id: str, messages: list[ModelMessage]) -> AsyncIterator[AgentEvent]:
        """Start a turn."""
        return self._run(LoopTurnState(messages=list(messages)), replay=False)

    def continue_stream(
        self, session_id: str, continue_from: dict[str, Any], *, replay_step: bool = False
    ) -> AsyncIterator[AgentEvent]:
        """Continue a turn from its last boundary."""
        return self._run(LoopTurnState.model_validate(continue_from), replay=replay_step)

    # --- the loop ---------------------------------------------------------------------------------

    async def _run(self, state: LoopTurnState, *, replay: bool) -> AsyncIterator[AgentEvent]:
        if state.phase == "tools":
            if replay:
                for item in self._replay_step(state):
                    yield item
            async for item in self._finish_tools(state):
                yield item
        while not self._should_stop(state):
            async for item in self._call_model(state):
                yield item
            if state.phase == "model":
                break
            async for item in self._finish_tools(state):
                yield item
        yield hp.FinishPart(
            finish_reason=hp.FinishReason(unified=state.step_finish_reason),  # type: ignore[arg-type]
            total_usage=_usage(state.total_usage),
        )
        yield Boundary("end", _dump(state))

    def _should_stop(self, state: LoopTurnState) -> bool:
        if state.step == 0:
            return False
        last = state.messages[-1] if state.messages else None
        if not isinstance(last, ToolMessage):
            return True
        return self.max_steps is not None and state.step >= self.max_steps

    async def _call_model(self, state: LoopTurnState) -> AsyncIterator[AgentEvent]:
        request = ModelRequest(
            instructions=self.instructions,
            messages=state.messages,
            tools=[t.definition() for t in self.tools.values()],
        )
        content: list[AssistantContent] = []
        texts: dict[str, TextPart | ReasoningPart] = {}
        calls: list[StepCall] = []
        reason, used = "stop", (0, 0)
        async for part in self.model.stream(request):
            if isinstance(part, hp.TextStartPart | hp.ReasoningStartPart):
                block: TextPart | ReasoningPart = (
                    TextPart(text="") if isinstance(part, hp.TextStartPart) else ReasoningPart(text="")
                )
                texts[part.id] = block
                content.append(block)
            elif isinstance(part, hp.TextDeltaPart | hp.ReasoningDeltaPart):
                if part.id in texts:
                    texts[part.id].text += part.delta
            elif isinstance(part, hp.ReasoningEndPart) and part.harness_metadata and part.id in texts:
                texts[part.id].provider_options = part.harness_metadata
            elif isinstance(part, hp.ToolCallPart):
                call = self._parse_call(part)
                calls.append(call)
                content.append(
                    ToolCallPart(
                        tool_call_id=call.tool_call_id,
                        tool_name=call.tool_name,
                        input=call.input,
                        provider_executed=True if call.provider_executed else None,
                    )
                )
            elif isinstance(part, hp.FinishPart):
                reason = part.finish_reason.unified
                used = (_int(part.total_usage.input_tokens.total), _int(part.total_usage.output_tokens.total))
                continue  # the agent emits its own finish-step / finish
            elif isinstance(part, hp.ErrorPart):
                raise ModelError(_error_text(part.error))
            yield part
        state.messages.append(AssistantMessage(content=[c for c in content if not _empty(c)]))
        state.step_finish_reason = reason
        state.step_usage = used
        state.total_usage = (state.total_usage[0] + used[0], state.total_usage[1] + used[1])
        state.step_calls = [c for c in calls if not c.provider_executed]
        state.step_outcomes = []
        if state.step_calls:
            state.phase = "tools"
            yield Boundary("model", _dump(state))
        else:
            state.step += 1
            yield _finish_step(state)
            yield Boundary("step", _dump(state))

    def _parse_call(self, part: hp.ToolCallPart) -> StepCall:
        call = StepCall(
            tool_call_id=part.tool_call_id,
            tool_name=part.tool_name,
            provider_executed=bool(part.provider_executed),
        )
        try:
            call.input = json.loads(part.input) if part.input.strip() else {}
        except json.JSONDecodeError as exc:
            call.input = part.input
            call.invalid_error = f"Invalid JSON input for tool {part.tool_name}: {exc.msg}"
            return call
        if not call.provider_executed and part.tool_name not in self.tools:
            available = ", ".join(sorted(self.tools)) or "none"
            call.invalid_error = (
                f"Model tried to call unavailable tool '{part.tool_name}'. Available tools: {available}."
            )
        return call

    async def _finish_tools(self, state: LoopTurnState) -> AsyncIterator[AgentEvent]:
        done = {o.tool_call_id for o in state.step_outcomes}
        for call in state.step_calls:
            if call.tool_call_id in done:
                continue
            outcome = await self._execute(call)
            state.step_outcomes.append(outcome)
            if outcome.error is None:
                yield hp.ToolResultPart(tool_call_id=call.tool_call_id, tool_name=call.tool_name, result=outcome.output)
            elif call.invalid_error is None:
                yield ToolOutputErrorChunk(tool_call_id=call.tool_call_id, error_text=outcome.error)
            yield Boundary("tool-result", _dump(state))
        by_id = {o.tool_call_id: o for o in state.step_outcomes}
        state.messages.append(ToolMessage(content=[_result_part(by_id[c.tool_call_id]) for c in state.step_calls]))
        state.phase = "model"
        state.step += 1
        state.step_calls, state.step_outcomes = [], []
        yield _finish_step(state)
        yield Boundary("step", _dump(state))

    async def _execute(self, call: StepCall) -> StepOutcome:
        outcome = StepOutcome(tool_call_id=call.tool_call_id, tool_name=call.tool_name)
        if call.invalid_error is not None:
            outcome.error = call.invalid_error
            return outcome
        tool = self.tools[call.tool_name]
        try:
            outcome.output = await tool.run(tool.validate(call.input))
        except ToolError as exc:
            outcome.error = str(exc)
        except Exception as exc:  # a tool's failure is a result the model can react to
            outcome.error = f"Error: {exc}" if str(exc) else f"Error: {type(exc).__name__}"
        return outcome

    def _replay_step(self, state: LoopTurnState) -> list[AgentEvent]:
        """What the client had seen of the current step before ``reset-step`` removed it."""
        events: list[AgentEvent] = []
        assistant = state.messages[-1]
        assert isinstance(assistant, AssistantMessage)
        for i, item in enumerate(assistant.content):
            pid = f"replay-{i}"
            if isinstance(item, TextPart):
                events += [hp.TextStartPart(id=pid), hp.TextDeltaPart(id=pid, delta=item.text)]
                events.append(hp.TextEndPart(id=pid))
            elif isinstance(item, ReasoningPart):
                events += [hp.ReasoningStartPart(id=pid), hp.ReasoningDeltaPart(id=pid, delta=item.text)]
                events.append(hp.ReasoningEndPart(id=pid, harness_metadata=item.provider_options))
            elif isinstance(item, ToolCallPart):
                raw = item.input if isinstance(item.input, str) else json.dumps(item.input)
                events.append(
                    hp.ToolCallPart(
                        tool_call_id=item.tool_call_id,
                        tool_name=item.tool_name,
                        input=raw,
                        provider_executed=item.provider_executed,
                    )
                )
        by_id = {o.tool_call_id: o for o in state.step_outcomes}
        for call in state.step_calls:
            outcome = by_id.get(call.tool_call_id)
            if outcome is None or call.invalid_error is not None:
                continue
            if outcome.error is None:
                events.append(
                    hp.ToolResultPart(tool_call_id=call.tool_call_id, tool_name=call.tool_name, result=outcome.output)
                )
            else:
                events.append(ToolOutputErrorChunk(tool_call_id=call.tool_call_id, error_text=outcome.error))
        return events


def _result_part(outcome: StepOutcome) -> ToolResultPart:
    output: ToolResultOutput
    if outcome.error is not None:
        output = ErrorTextOutput(value=outcome.error)
    elif isinstance(outcome.output, str):
        output = TextOutput(value=outcome.output)
    else:
        output = JsonOutput(value=outcome.output)
    return ToolResultPart(tool_call_id=outcome.tool_call_id, tool_name=outcome.tool_name, output=output)


def _finish_step(state: LoopTurnState) -> hp.FinishStepPart:
    return hp.FinishStepPart(
        finish_reason=hp.FinishReason(unified=state.step_finish_reason),  # type: ignore[arg-type]
        usage=_usage(state.step_usage),
    )


def _usage(pair: tuple[int, int]) -> hp.Usage:
    return hp.Usage(input_tokens=hp.InputTokens(total=pair[0]), output_tokens=hp.OutputTokens(total=pair[1]))


def _dump(state: LoopTurnState) -> dict[str, Any]:
    return state.model_dump(mode="json", by_alias=True)


def _int(value: float | None) -> int:
    return int(value or 0)


def _empty(part: AssistantContent) -> bool:
    return isinstance(part, TextPart | ReasoningPart) and not part.text and not part.provider_options


def _error_text(error: Any) -> str:
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return error if isinstance(error, str) else json.dumps(error)
