"""``PydanticAIHarness``: a Pydantic AI ``Agent`` run durably (``pip install 'durable-harness[pydantic-ai]'``).

One model request plus its tool calls is a step; the agent's message history is the checkpoint
(JSON, through ``ModelMessagesTypeAdapter``), taken at the end of every step, so a later slice (or
a retry after a crash, which redoes the step) continues from it. Tools declared with
``requires_approval=True`` are Pydantic AI's deferred tools: their calls become signed approval
requests and the turn pauses; the verified answers come back as ``DeferredToolResults`` (a
missing or invalid answer is a denial). Structured output (``output_type``) becomes the run's
result.

The agent's own tools run inside the harness (they are ``providerExecuted`` for the client). A
tool that ran in a step redone after a crash runs again (at least once, like the built-in loop's
callbacks): checkpoints are per step here.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from pydantic import BaseModel
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai import messages as pm
from pydantic_ai.agent import AgentRun, CallToolsNode, ModelRequestNode
from pydantic_graph import End

from ..approvals import ApprovalSecret
from ..ids import new_id
from ..messages import AssistantMessage, ModelMessage, TextPart, UserMessage
from ..protocol import harness_parts as hp
from .interface import (
    CancelNotice,
    Checkpoint,
    ContinueTurn,
    GeneratorTurn,
    HarnessEvent,
    HarnessOptions,
    StartTurn,
    TurnRequest,
)

OUTPUT_TOOL_PREFIX = "final_result"
"""Pydantic AI's output tools (structured output): not shown as tool calls."""
INVALID_APPROVAL = "The approval of this call was missing or not valid; the tool was not run."


class PydanticAIHarness:
    """A Pydantic AI ``Agent`` as a durable harness (``AGENT=module:attr`` names it like any agent)."""

    def __init__(
        self,
        agent: Agent[Any, Any],
        *,
        send_reasoning: bool = True,
        approval_secret: ApprovalSecret | None = None,
    ) -> None:
        self.agent = agent
        self._options = HarnessOptions(
            tool_names=None,  # the agent's tools run inside it: every call is provider-executed
            send_reasoning=send_reasoning,
            approval_secret=approval_secret,
            has_output=agent.output_type is not str,
        )

    @property
    def options(self) -> HarnessOptions:
        """Reasoning and approval settings; structured output when the agent has an output type."""
        return self._options

    def create_session(self, session_id: str | None = None) -> str:
        """Sessions are stateless: the message history travels in the checkpoint."""
        return session_id or new_id("sess")

    def open(self, request: TurnRequest) -> GeneratorTurn:
        """Run the agent for one slice."""
        return GeneratorTurn(self._turn(request))

    async def on_cancel(self, notice: CancelNotice) -> None:
        """Nothing to release."""

    def parse_call_options(self, raw: Mapping[str, Any]) -> dict[str, Any] | None:
        """None: a Pydantic AI agent takes its settings in the agent file, so call options are ignored."""
        return None

    def run_result(self, state: Any) -> dict[str, Any]:
        """The turn's last text and its messages in Pydantic AI's JSON form."""
        messages = state.get("messages", []) if isinstance(state, dict) else []
        text = ""
        for message in pm.ModelMessagesTypeAdapter.validate_python(messages):
            if isinstance(message, pm.ModelResponse):
                text = "".join(p.content for p in message.parts if isinstance(p, pm.TextPart)) or text
        return {"text": text, "pydanticAiMessages": messages}

    async def _turn(self, request: TurnRequest) -> AsyncGenerator[HarnessEvent, None]:
        results: DeferredToolResults | None = None
        hidden: set[str] = set()  # calls whose outcome the client already has (denials)
        if isinstance(request, StartTurn):
            history, prompt, step = _history_of(request.messages[:-1]), _text_of(request.messages[-1:]), 0
            total = (0, 0)
        else:
            assert isinstance(request, ContinueTurn)
            state = request.state if isinstance(request.state, dict) else {}
            history = pm.ModelMessagesTypeAdapter.validate_python(state.get("messages", []))
            prompt, step = None, int(state.get("step", 0))
            total = _pair(state.get("usage"))
            if request.continuation is not None:
                results, hidden = _deferred_results(request)
        output_type = [self.agent.output_type, DeferredToolRequests]
        run: AgentRun[Any, Any]
        async with self.agent.iter(
            prompt, message_history=history, output_type=output_type, deferred_tool_results=results
        ) as run:
            step_open = False
            resuming = results is not None  # the paused step's response comes again: shown already
            # A step's usage is its model response's (``run.usage`` adds up the whole agent run,
            # which restarts every slice); the turn's total is kept in the checkpoint.
            step_usage = (0, 0)
            node: Any
            async for node in run:
                if isinstance(node, CallToolsNode):
                    step_open = True
                    step_usage = (0, 0) if resuming else _pair(node.model_response.usage)
                    if not resuming:
                        for event in _response_events(node.model_response, step):
                            yield event
                    resuming = False
                elif isinstance(node, ModelRequestNode) and step_open:
                    for event in _result_events(node.request, hidden):
                        yield event
                    total = _add(total, step_usage)
                    yield _finish_step("tool-calls", step_usage)
                    step, step_open = step + 1, False
                    yield Checkpoint(_state([*run.all_messages(), node.request], step, total))
                elif isinstance(node, End):
                    output = node.data.output
                    if isinstance(output, DeferredToolRequests):
                        for call in output.approvals:
                            yield hp.ToolApprovalRequestPart(
                                approval_id=f"approval-{call.tool_call_id}", tool_call_id=call.tool_call_id
                            )
                    reason = "tool-calls" if isinstance(output, DeferredToolRequests) else "stop"
                    if step_open:
                        total = _add(total, step_usage)
                        yield _finish_step(reason, step_usage)
                    messages = run.all_messages()
                    if isinstance(output, DeferredToolRequests):
                        yield Checkpoint(_state(messages, step + 1, total))  # the paused turn goes on from here
                        yield hp.FinishPart(finish_reason=hp.FinishReason(unified="tool-calls"),
                                            total_usage=_usage(total))  # fmt: skip
                    else:
                        yield hp.FinishPart(finish_reason=hp.FinishReason(unified="stop"),
                                            total_usage=_usage(total))  # fmt: skip
                        structured = _json_output(output) if self._options.has_output else None
                        yield Checkpoint(_state(messages, step + 1, total), structured)


def _deferred_results(request: ContinueTurn) -> tuple[DeferredToolResults, set[str]]:
    """Verified answers as Pydantic AI's deferred results; a request without one is denied."""
    assert request.continuation is not None
    decided = {a.tool_call_id: a for a in request.continuation.approvals}
    approvals: dict[str, bool | ToolApproved | ToolDenied] = {}
    hidden: set[str] = set()
    for pending in request.continuation.pending:
        decision = decided.get(pending.tool_call_id)
        if decision is not None and decision.approved:
            approvals[pending.tool_call_id] = True
        elif decision is not None:
            approvals[pending.tool_call_id] = ToolDenied(decision.reason or "The user denied this tool call.")
            hidden.add(pending.tool_call_id)  # the runner showed the denial
        else:
            approvals[pending.tool_call_id] = ToolDenied(INVALID_APPROVAL)
            hidden.add(pending.tool_call_id)
    return DeferredToolResults(approvals=approvals), hidden


def _response_events(response: pm.ModelResponse, step: int) -> list[HarnessEvent]:
    """A model response as harness parts: its text, reasoning and tool calls."""
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
        elif isinstance(part, pm.ToolCallPart) and not part.tool_name.startswith(OUTPUT_TOOL_PREFIX):
            args = part.args if isinstance(part.args, str) else json.dumps(part.args or {})
            events.append(
                hp.ToolCallPart(
                    tool_call_id=part.tool_call_id, tool_name=part.tool_name, input=args, provider_executed=True
                )
            )
    return events


def _result_events(request: pm.ModelRequest, hidden: set[str]) -> list[HarnessEvent]:
    """The tool results a request carries back to the model."""
    events: list[HarnessEvent] = []
    for part in request.parts:
        if isinstance(part, pm.ToolReturnPart) and not part.tool_name.startswith(OUTPUT_TOOL_PREFIX):
            if part.tool_call_id not in hidden:
                content = part.model_response_object() if not isinstance(part.content, str) else part.content
                events.append(hp.ToolResultPart(tool_call_id=part.tool_call_id, tool_name=part.tool_name,
                                                result=_jsonable(content)))  # fmt: skip
        elif isinstance(part, pm.RetryPromptPart) and part.tool_name and part.tool_call_id not in hidden:
            events.append(hp.ToolResultPart(tool_call_id=part.tool_call_id, tool_name=part.tool_name,
                                            result=part.model_response(), is_error=True))  # fmt: skip
    return events


def _finish_step(reason: str, usage: tuple[int, int]) -> hp.FinishStepPart:
    return hp.FinishStepPart(finish_reason=hp.FinishReason(unified=reason), usage=_usage(usage))  # type: ignore[arg-type]


def _usage(usage: tuple[int, int]) -> hp.Usage:
    return hp.Usage(input_tokens=hp.InputTokens(total=usage[0]), output_tokens=hp.OutputTokens(total=usage[1]))


def _pair(usage: Any) -> tuple[int, int]:
    """(input, output) tokens of a Pydantic AI usage object, or of a checkpointed ``[input, output]``."""
    if isinstance(usage, list | tuple) and len(usage) == 2:
        return int(usage[0] or 0), int(usage[1] or 0)
    if usage is None:
        return 0, 0
    return int(getattr(usage, "input_tokens", 0) or 0), int(getattr(usage, "output_tokens", 0) or 0)


def _add(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    return a[0] + b[0], a[1] + b[1]


def _state(messages: list[pm.ModelMessage], step: int, usage: tuple[int, int]) -> dict[str, Any]:
    return {
        "messages": pm.ModelMessagesTypeAdapter.dump_python(messages, mode="json"),
        "step": step,
        "usage": list(usage),
    }


def _json_output(output: Any) -> Any:
    if isinstance(output, BaseModel):
        return output.model_dump(mode="json")
    return _jsonable(output)


def _jsonable(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return str(value)


def _text_of(messages: list[ModelMessage]) -> str:
    """The text of a message (the new user input)."""
    texts: list[str] = []
    for message in messages:
        if isinstance(message, UserMessage | AssistantMessage):
            texts += [p.text for p in message.content if isinstance(p, TextPart)]
    return "\n".join(texts)


def _history_of(messages: list[ModelMessage]) -> list[pm.ModelMessage]:
    """Earlier turns of the conversation, as text (tool calls of earlier turns are left out)."""
    history: list[pm.ModelMessage] = []
    for message in messages:
        text = _text_of([message])
        if isinstance(message, UserMessage) and text:
            history.append(pm.ModelRequest(parts=[pm.UserPromptPart(content=text)]))
        elif isinstance(message, AssistantMessage) and text:
            history.append(pm.ModelResponse(parts=[pm.TextPart(content=text)]))
    return history
